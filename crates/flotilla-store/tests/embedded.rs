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

/// Two writes from two callers, the second sent well inside the commit window of the first,
/// commit together in one durable commit; with no window they commit apart.
#[tokio::test]
async fn writes_within_the_commit_window_share_one_commit() {
    use bytes::Bytes;
    use flotilla_store::Op;
    use flotilla_store::embedded::CommitStats;

    for (window, expected_commits) in [(Duration::from_secs(2), 1), (Duration::ZERO, 2)] {
        let harness = EmbeddedHarness { dir: scratch_dir() };
        let stats = Arc::new(CommitStats::default());
        let mut config = harness.config("window.redb");
        config.commit_window = window;
        config.commit_stats = Some(stats.clone());
        let store: Arc<dyn Store> = Arc::new(open_retrying(config).await);
        let put = |key: &'static str| {
            let store = store.clone();
            tokio::spawn(async move { store.txn(vec![], vec![Op::Put(Bytes::from_static(key.as_bytes()), Bytes::from_static(b"v"))]).await })
        };
        let first = put("/a");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = put("/b");
        let (a, b) = (first.await.unwrap().unwrap(), second.await.unwrap().unwrap());
        assert_eq!((a.revision + 1, b.revision), (b.revision, a.revision + 1), "each write has its own revision");
        assert_eq!(stats.writes(), 2);
        assert_eq!(stats.commits(), expected_commits, "commit window {window:?}");
    }
}
