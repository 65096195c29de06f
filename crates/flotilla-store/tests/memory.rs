//! The conformance suite on the memory backend.

mod conformance;

use std::sync::Arc;

use flotilla_store::Store;
use flotilla_store::hub::WatchConfig;
use flotilla_store::memory::memory_store;

struct MemoryHarness {
    store: std::sync::Mutex<Option<Arc<dyn Store>>>,
}

impl MemoryHarness {
    fn boxed() -> Box<dyn conformance::Harness> {
        Box::new(MemoryHarness { store: std::sync::Mutex::new(None) })
    }
}

#[async_trait::async_trait]
impl conformance::Harness for MemoryHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let mut slot = self.store.lock().unwrap();
        slot.get_or_insert_with(|| Arc::new(memory_store(WatchConfig::default()).unwrap())).clone()
    }
    fn gapless(&self) -> bool {
        true
    }
    fn durable(&self) -> bool {
        false
    }
    async fn open_lag_prone(&self) -> Option<Arc<dyn Store>> {
        let w = WatchConfig { ring_batches: 16, per_watcher_buffer: 8, progress_interval: None };
        Some(Arc::new(memory_store(w).unwrap()))
    }
}

conformance_suite!(MemoryHarness::boxed());
