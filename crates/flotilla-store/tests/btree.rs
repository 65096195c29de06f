//! The conformance suite on the btree backend (the light in-memory store of simulated members).

mod conformance;

use std::sync::Arc;

use flotilla_store::Store;
use flotilla_store::btree::{BTreeConfig, BTreeStore};
use flotilla_store::hub::WatchConfig;

struct BTreeHarness {
    store: std::sync::Mutex<Option<Arc<dyn Store>>>,
}

impl BTreeHarness {
    fn boxed() -> Box<dyn conformance::Harness> {
        Box::new(BTreeHarness { store: std::sync::Mutex::new(None) })
    }
}

#[async_trait::async_trait]
impl conformance::Harness for BTreeHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let mut slot = self.store.lock().unwrap();
        slot.get_or_insert_with(|| Arc::new(BTreeStore::new(BTreeConfig::default()))).clone()
    }
    fn gapless(&self) -> bool {
        true
    }
    fn durable(&self) -> bool {
        false
    }
    async fn open_lag_prone(&self) -> Option<Arc<dyn Store>> {
        let watch = WatchConfig { ring_batches: 16, per_watcher_buffer: 8, progress_interval: None };
        Some(Arc::new(BTreeStore::new(BTreeConfig { watch, ..BTreeConfig::default() })))
    }
}

conformance_suite!(BTreeHarness::boxed());

/// History beyond `min_revisions` revisions and `min_age` is compacted by writes, and a read at a past
/// revision inside the kept history sees that revision's state.
#[tokio::test]
async fn history_is_bounded_and_past_reads_undo_later_changes() {
    let s = BTreeStore::new(BTreeConfig { min_revisions: 5, min_age: std::time::Duration::ZERO, ..BTreeConfig::default() });
    let k = bytes::Bytes::from_static(b"/k");
    let mut rev = s.create(k.clone(), bytes::Bytes::from_static(b"0")).await.unwrap();
    let first = rev;
    for i in 1..10u8 {
        rev = s.update_if(k.clone(), bytes::Bytes::from(vec![b'0' + i]), rev).await.unwrap();
    }
    assert_eq!(s.sizes(), (1, 5));
    assert_eq!(s.compacted_revision().await.unwrap(), rev - 5);
    assert!(s.range(flotilla_store::RangeRequest::prefix("/").at_revision(first)).await.is_err());
    let past = s.range(flotilla_store::RangeRequest::prefix("/").at_revision(rev - 2)).await.unwrap();
    assert_eq!(past.kvs[0].value.as_ref(), b"7");
}
