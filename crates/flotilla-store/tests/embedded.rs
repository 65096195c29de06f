//! The conformance suite on the embedded (redb) backend.

mod conformance;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use flotilla_store::hub::WatchConfig;
use flotilla_store::{Store, StoreError};

struct EmbeddedHarness {
    dir: tempfile::TempDir,
}

/// Store files live on tmpfs when there is one: the suite checks the contract, not the disk
/// (durability has its own tests on a real file and on a simulated disk).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::Builder::new().prefix("flotilla-store-").tempdir_in(&shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

impl EmbeddedHarness {
    fn boxed() -> Box<dyn conformance::Harness> {
        Box::new(EmbeddedHarness { dir: scratch_dir() })
    }

    fn config(&self, name: &str) -> EmbeddedConfig {
        let mut c = EmbeddedConfig::new(self.dir.path().join(name));
        c.retention.interval = None;
        c.cache_bytes = 16 << 20;
        c
    }
}

async fn open_retrying(config: EmbeddedConfig) -> EmbeddedStore {
    // A closed store's watchers may still hold the file for a moment.
    for _ in 0..100 {
        match EmbeddedStore::open(config.clone()).await {
            Ok(s) => return s,
            Err(StoreError::BadDataFile { kind: flotilla_store::BadDataKind::Locked, .. }) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("open failed: {e}"),
        }
    }
    panic!("store stayed locked");
}

#[async_trait::async_trait]
impl conformance::Harness for EmbeddedHarness {
    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(open_retrying(self.config("store.redb")).await)
    }
    fn gapless(&self) -> bool {
        true
    }
    fn durable(&self) -> bool {
        true
    }
    async fn open_lag_prone(&self) -> Option<Arc<dyn Store>> {
        let mut c = self.config("lag.redb");
        c.watch = WatchConfig { ring_batches: 16, per_watcher_buffer: 8, progress_interval: None };
        Some(Arc::new(open_retrying(c).await))
    }
}

conformance_suite!(EmbeddedHarness::boxed());
