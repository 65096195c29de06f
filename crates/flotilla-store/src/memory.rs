//! The memory backend: the embedded engine on redb's in-memory storage. Same code path, same
//! contract, nothing on disk — for unit tests and simulated member clusters.

use crate::Result;
use crate::embedded::{EmbeddedConfig, EmbeddedStore};
use crate::hub::WatchConfig;

/// A fresh, empty in-memory store.
pub fn memory_store(watch: WatchConfig) -> Result<EmbeddedStore> {
    let mut config = EmbeddedConfig::new("<memory>");
    config.watch = watch;
    // Pages live in the backend's own buffer; a large page cache would only duplicate them.
    config.cache_bytes = 1 << 20;
    // redb moves the backend in on the first open; a memory store has no storage errors to
    // recover from, so a second open (a reopen) gets a fresh, empty backend it never uses.
    EmbeddedStore::open_with_backend(redb::backends::InMemoryBackend::new, config, "memory")
}
