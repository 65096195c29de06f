//! The store conformance suite: one set of test functions every backend must pass. Each
//! backend's test file implements [`Harness`] and instantiates the suite with
//! `conformance_suite!`.

#![allow(dead_code)]

pub mod model;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_store::{Compare, Op, OpResult, RangeRequest, Revision, Store, StoreError, WatchEvent, WatchStream};
use rand::{RngExt, SeedableRng};

/// How a test reaches a backend.
#[async_trait::async_trait]
pub trait Harness: Send + Sync + 'static {
    /// Open the store (again: the same data after a restart where the backend keeps data).
    async fn open(&self) -> Arc<dyn Store>;
    /// Stored revisions have no holes (embedded, memory). etcd's are shared with other tenants.
    fn gapless(&self) -> bool;
    /// Data survives closing and reopening.
    fn durable(&self) -> bool;
    /// A store whose watch buffers are tiny, to show a slow watcher is ended with `Lagged`
    /// (our fan-out). `None` where the server buffers instead (etcd).
    async fn open_lag_prone(&self) -> Option<Arc<dyn Store>>;
    /// A unique key prefix for one test, so tests sharing a backend do not see each other.
    fn prefix(&self, test: &str) -> String {
        format!("/t/{test}/{}/", std::process::id())
    }
}

pub fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub const DEADLINE: Duration = Duration::from_secs(30);

/// Read the next event, failing the test after a generous deadline instead of hanging.
pub async fn next_event(w: &mut WatchStream) -> Option<Result<WatchEvent, StoreError>> {
    tokio::time::timeout(DEADLINE, w.next_event()).await.expect("watch produced nothing within the deadline")
}

/// Collect change events until a progress marker at or past `until` (a transaction's events
/// share a revision, so only a progress marker says the last one has arrived).
pub async fn collect_until(w: &mut WatchStream, until: Revision) -> Vec<WatchEvent> {
    let mut out = Vec::new();
    let mut last_seen = 0;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        assert!(tokio::time::Instant::now() < deadline, "watch did not reach revision {until} in time (events so far: {out:?})");
        w.request_progress();
        let ev = tokio::time::timeout(Duration::from_millis(50), w.next_event()).await;
        match ev {
            Err(_) => continue,
            Ok(None) => panic!("watch ended before reaching revision {until} (events so far: {out:?})"),
            Ok(Some(Err(e))) => panic!("watch failed before reaching revision {until}: {e}"),
            Ok(Some(Ok(WatchEvent::Progress(r)))) => {
                assert!(r >= last_seen, "progress went backwards: {r} after {last_seen}");
                if r >= until {
                    return out;
                }
            }
            Ok(Some(Ok(e))) => {
                assert!(e.revision() >= last_seen, "events out of order: {e:?} after revision {last_seen}");
                last_seen = e.revision();
                out.push(e);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tests

pub async fn crud_and_revisions(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("crud");
    let k = b(&format!("{p}a"));
    let r0 = s.current_revision().await.unwrap();
    let r1 = s.create(k.clone(), b("one")).await.unwrap();
    assert!(r1 > r0, "create must advance the revision");
    assert_eq!(s.current_revision().await.unwrap(), if h.gapless() { r1 } else { s.current_revision().await.unwrap() });
    let kv = s.get(&k).await.unwrap().expect("created key is readable");
    assert_eq!((kv.value.as_ref(), kv.create_revision, kv.mod_revision), (b"one".as_ref(), r1, r1));

    let err = s.create(k.clone(), b("again")).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err:?}");

    let r2 = s.update_if(k.clone(), b("two"), r1).await.unwrap();
    assert!(r2 > r1);
    if h.gapless() {
        assert_eq!(r2, r1 + 1, "no holes: the failed create consumed no revision");
    }
    let kv = s.get(&k).await.unwrap().unwrap();
    assert_eq!((kv.value.as_ref(), kv.create_revision, kv.mod_revision), (b"two".as_ref(), r1, r2));

    let err = s.update_if(k.clone(), b("stale"), r1).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { expected, actual, .. } if expected == r1 && actual == r2), "{err:?}");
    let err = s.update_if(b(&format!("{p}missing")), b("x"), 5).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    let err = s.delete_if(k.clone(), Some(r1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    let (r3, prev) = s.delete_if(k.clone(), Some(r2)).await.unwrap();
    assert!(r3 > r2);
    assert_eq!(prev.value.as_ref(), b"two");
    assert!(s.get(&k).await.unwrap().is_none());
    let err = s.delete_if(k.clone(), None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    // Re-create resets the create revision.
    let r4 = s.create(k.clone(), b("three")).await.unwrap();
    let kv = s.get(&k).await.unwrap().unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision), (r4, r4));
}

pub async fn txn_is_all_or_nothing(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("txn");
    let (a, bb, c) = (b(&format!("{p}a")), b(&format!("{p}b")), b(&format!("{p}c")));
    let ra = s.create(a.clone(), b("a1")).await.unwrap();
    // One compare fails: nothing is written.
    let before = s.current_revision().await.unwrap();
    let err = s
        .txn(vec![Compare::ModRevision(a.clone(), ra), Compare::Exists(bb.clone())], vec![Op::Put(a.clone(), b("a2")), Op::Put(c.clone(), b("c1"))])
        .await
        .unwrap_err();
    assert!(matches!(&err, StoreError::Conflict { key, .. } if key.as_bytes() == bb.as_ref()), "{err:?}");
    assert_eq!(s.get(&a).await.unwrap().unwrap().value.as_ref(), b"a1");
    assert!(s.get(&c).await.unwrap().is_none());
    if h.gapless() {
        assert_eq!(s.current_revision().await.unwrap(), before, "a failed txn consumes no revision");
    }
    // All compares hold: every op lands at one revision.
    let resp = s
        .txn(
            vec![Compare::ModRevision(a.clone(), ra), Compare::Absent(bb.clone())],
            vec![Op::Put(a.clone(), b("a2")), Op::Put(bb.clone(), b("b1")), Op::Delete(c.clone())],
        )
        .await
        .unwrap();
    assert!(matches!(&resp.results[0], OpResult::Put { prev: Some(p) } if p.value.as_ref() == b"a1"));
    assert!(matches!(&resp.results[1], OpResult::Put { prev: None }));
    assert!(matches!(&resp.results[2], OpResult::Delete { prev: None }));
    let ka = s.get(&a).await.unwrap().unwrap();
    let kb = s.get(&bb).await.unwrap().unwrap();
    assert_eq!(ka.mod_revision, resp.revision);
    assert_eq!(kb.mod_revision, resp.revision);
    assert_eq!(kb.create_revision, resp.revision);
}

pub async fn limits(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("limits");
    let max_ops: Vec<Op> = (0..flotilla_store::MAX_TXN_OPS).map(|i| Op::Put(b(&format!("{p}k{i:03}")), b("v"))).collect();
    s.txn(vec![], max_ops).await.expect("128 operations are allowed");
    let too_many: Vec<Op> = (0..=flotilla_store::MAX_TXN_OPS).map(|i| Op::Put(b(&format!("{p}x{i:03}")), b("v"))).collect();
    assert!(matches!(s.txn(vec![], too_many).await, Err(StoreError::TooManyOps { .. })));

    let big = Bytes::from(vec![7u8; flotilla_store::MAX_VALUE_BYTES]);
    s.create(b(&format!("{p}big")), big.clone()).await.expect("a 1.5 MiB value is allowed");
    assert_eq!(s.get(format!("{p}big").as_bytes()).await.unwrap().unwrap().value, big);
    let bigger = Bytes::from(vec![7u8; flotilla_store::MAX_VALUE_BYTES + 1]);
    let err = s.create(b(&format!("{p}bigger")), bigger).await.unwrap_err();
    assert!(matches!(err, StoreError::ValueTooLarge { .. }), "{err:?}");
    let err = s.txn(vec![], vec![Op::Put(b(&format!("{p}d")), b("1")), Op::Delete(b(&format!("{p}d")))]).await.unwrap_err();
    assert!(matches!(err, StoreError::DuplicateKeyInTxn { .. }), "{err:?}");
}

pub async fn range_pagination_and_snapshots(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("range");
    for i in 0..25 {
        s.create(b(&format!("{p}obj/{i:02}")), b(&format!("v{i}"))).await.unwrap();
    }
    s.create(b(&format!("{p}objz")), b("outside")).await.unwrap();
    let all = s.range(RangeRequest::prefix(b(&format!("{p}obj/")))).await.unwrap();
    assert_eq!(all.kvs.len(), 25);
    assert_eq!(all.count, 25);
    assert!(!all.more);
    assert!(all.kvs.windows(2).all(|w| w[0].key < w[1].key), "range is sorted by key");

    // Paginate at the first page's revision while writes continue.
    let page_rev = all.revision;
    let mut seen = Vec::new();
    let mut cont: Option<Bytes> = None;
    let mut pages = 0;
    loop {
        let mut req = RangeRequest::prefix(b(&format!("{p}obj/"))).limit(10).at_revision(page_rev);
        req.continue_after = cont.clone();
        let page = s.range(req).await.unwrap();
        pages += 1;
        // A concurrent write must not show up in the paginated snapshot.
        s.txn(vec![], vec![Op::Put(b(&format!("{p}obj/{pages:02}")), b("changed")), Op::Put(b(&format!("{p}obj/new{pages}")), b("n"))]).await.unwrap();
        seen.extend(page.kvs.iter().map(|kv| (kv.key.clone(), kv.value.clone())));
        if !page.more {
            break;
        }
        assert_eq!(page.kvs.len(), 10);
        cont = page.kvs.last().map(|kv| kv.key.clone());
    }
    assert_eq!(pages, 3);
    let expect: Vec<(Bytes, Bytes)> = all.kvs.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect();
    assert_eq!(seen, expect, "pages read at one revision form that revision's snapshot");

    let counted = s.range(RangeRequest { count_only: true, ..RangeRequest::prefix(b(&format!("{p}obj/"))) }).await.unwrap();
    assert!(counted.kvs.is_empty());
    assert_eq!(counted.count, 28);

    let head = s.current_revision().await.unwrap();
    let err = s.range(RangeRequest::prefix(b(&p)).at_revision(head + 1000)).await.unwrap_err();
    assert!(matches!(err, StoreError::FutureRevision { .. }), "{err:?}");
}

pub async fn watch_replays_and_follows(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("watch");
    let k = b(&format!("{p}a"));
    let start = s.current_revision().await.unwrap();
    let r1 = s.create(k.clone(), b("1")).await.unwrap();
    let r2 = s.update_if(k.clone(), b("2"), r1).await.unwrap();
    s.create(b(&format!("/other{p}")), b("not watched")).await.unwrap();
    // Start in the past: replay, then follow live writes.
    let mut w = s.watch(p.as_bytes(), start).await.unwrap();
    let (r3, _) = s.delete_if(k.clone(), Some(r2)).await.unwrap();
    let r4 = s.create(k.clone(), b("4")).await.unwrap();
    let evs = collect_until(&mut w, r4).await;
    assert_eq!(evs.len(), 4, "{evs:?}");
    assert!(matches!(&evs[0], WatchEvent::Put { kv, prev: None } if kv.mod_revision == r1 && kv.value.as_ref() == b"1"));
    assert!(matches!(&evs[1], WatchEvent::Put { kv, prev: Some(pv) } if kv.mod_revision == r2 && pv.value.as_ref() == b"1" && kv.create_revision == r1));
    assert!(matches!(&evs[2], WatchEvent::Delete { revision, prev, .. } if *revision == r3 && prev.value.as_ref() == b"2"));
    assert!(matches!(&evs[3], WatchEvent::Put { kv, prev: None } if kv.create_revision == r4));

    // Starting at the head sees only what comes next.
    let mut w2 = s.watch(p.as_bytes(), r4).await.unwrap();
    let r5 = s.update_if(k.clone(), b("5"), r4).await.unwrap();
    let evs = collect_until(&mut w2, r5).await;
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].revision(), r5);
}

pub async fn watch_progress(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("progress");
    let mut w = s.watch(p.as_bytes(), s.current_revision().await.unwrap()).await.unwrap();
    // A write elsewhere advances the store; progress on our prefix must reach it.
    let r = s.create(b(&format!("/elsewhere{p}x")), b("x")).await.unwrap();
    w.request_progress();
    loop {
        match next_event(&mut w).await {
            Some(Ok(WatchEvent::Progress(pr))) if pr >= r => break,
            Some(Ok(WatchEvent::Progress(_))) => w.request_progress(),
            other => panic!("expected only progress markers, got {other:?}"),
        }
    }
}

pub async fn compaction(h: &dyn Harness) {
    let s = h.open().await;
    let p = h.prefix("compact");
    let k = b(&format!("{p}a"));
    let r1 = s.create(k.clone(), b("1")).await.unwrap();
    let r2 = s.update_if(k.clone(), b("2"), r1).await.unwrap();
    let r3 = s.update_if(k.clone(), b("3"), r2).await.unwrap();
    s.compact(r3).await.unwrap();
    assert!(s.compacted_revision().await.unwrap() >= r3);
    // Reads below the compaction point fail; at it they work.
    let err = s.range(RangeRequest::prefix(b(&p)).at_revision(r2)).await.unwrap_err();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    let at = s.range(RangeRequest::prefix(b(&p)).at_revision(r3)).await.unwrap();
    assert_eq!(at.kvs[0].value.as_ref(), b"3");
    // A watch can resume from the compaction point (whose state is readable), not before it.
    let err = s.watch(p.as_bytes(), r3 - 1).await.unwrap_err();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    let mut w = s.watch(p.as_bytes(), r3).await.expect("a watch from the compaction point works");
    let r4 = s.update_if(k.clone(), b("4"), r3).await.unwrap();
    let evs = collect_until(&mut w, r4).await;
    assert_eq!(evs.len(), 1);
    assert!(matches!(&evs[0], WatchEvent::Put { kv, prev: Some(pv) } if kv.mod_revision == r4 && pv.value.as_ref() == b"3"));
    // Compacting again at or below is harmless; into the future is refused.
    s.compact(r2).await.unwrap();
    let head = s.current_revision().await.unwrap();
    assert!(matches!(s.compact(head + 100).await, Err(StoreError::FutureRevision { .. })));
}

pub async fn lagging_watcher_is_ended(h: &dyn Harness) {
    let Some(s) = h.open_lag_prone().await else { return };
    let p = h.prefix("lag");
    let mut w = s.watch(p.as_bytes(), s.current_revision().await.unwrap()).await.unwrap();
    // Never read while writing far more than the watcher's buffer and the broadcast ring hold:
    // the writer must not block, and the watcher must learn it lost its place.
    let writes = 20_000;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..8 {
        let s = s.clone();
        let p = p.clone();
        tasks.spawn(async move {
            for i in 0..writes / 8 {
                s.txn(vec![], vec![Op::Put(b(&format!("{p}{t}-{}", i % 50)), b("v"))]).await.unwrap();
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(300), async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("writers were blocked by a watcher that does not read");
    let mut got_lagged = false;
    while let Some(ev) = next_event(&mut w).await {
        if let Err(e) = ev {
            assert!(matches!(e, StoreError::Lagged), "{e:?}");
            got_lagged = true;
            break;
        }
    }
    assert!(got_lagged, "a watcher that fell behind must be told");
}

/// 64 writers × `per_writer` writes while watchers start at random past revisions: every watcher
/// sees exactly the committed sequence after its start.
pub async fn concurrent_writers_and_watchers(h: &dyn Harness, per_writer: usize, seed: u64) {
    let s = h.open().await;
    let p = h.prefix("load");
    let writers = 64;
    let base = s.current_revision().await.unwrap();
    let (ack_tx, mut ack_rx) = tokio::sync::mpsc::unbounded_channel::<(Revision, Bytes, Bytes)>();
    let mut tasks = tokio::task::JoinSet::new();
    for wid in 0..writers {
        let s = s.clone();
        let p = p.clone();
        let ack = ack_tx.clone();
        tasks.spawn(async move {
            for i in 0..per_writer {
                let key = b(&format!("{p}w{wid:02}/{}", i % 16));
                let value = b(&format!("{wid}:{i}"));
                let r = s.txn(vec![], vec![Op::Put(key.clone(), value.clone())]).await.unwrap();
                ack.send((r.revision, key, value)).unwrap();
            }
        });
    }
    drop(ack_tx);
    // Watchers start at random points while the writes go on, and read as they go.
    let (last_tx, last_rx) = tokio::sync::watch::channel::<Option<Revision>>(None);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut watchers = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
        let head = s.current_revision().await.unwrap();
        let start = rng.random_range(base..=head);
        let w = s.watch(p.as_bytes(), start).await.unwrap();
        watchers.push((start, tokio::spawn(collect_live(w, last_rx.clone()))));
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let mut committed = Vec::new();
    while let Some(a) = ack_rx.recv().await {
        committed.push(a);
    }
    committed.sort_by_key(|c| c.0);
    assert_eq!(committed.len(), writers * per_writer);
    assert!(committed.windows(2).all(|w| w[0].0 < w[1].0), "every write got its own revision");
    if h.gapless() {
        assert!(committed.windows(2).all(|w| w[1].0 == w[0].0 + 1), "no holes under concurrent writers");
    }
    let last = committed.last().unwrap().0;
    last_tx.send(Some(last)).unwrap();
    for (start, task) in watchers {
        let evs = tokio::time::timeout(Duration::from_secs(120), task).await.expect("watcher did not finish").unwrap();
        let want: Vec<(Revision, Bytes, Bytes)> = committed.iter().filter(|c| c.0 > start).cloned().collect();
        let got: Vec<(Revision, Bytes, Bytes)> = evs
            .into_iter()
            .map(|e| match e {
                WatchEvent::Put { kv, .. } => (kv.mod_revision, kv.key, kv.value),
                other => panic!("unexpected event {other:?}"),
            })
            .collect();
        assert_eq!(got.len(), want.len(), "watcher from {start}: count");
        assert!(got == want, "watcher from {start} saw a different sequence than was committed");
    }
}

/// Read a watch as events arrive until it has reached the revision `last` announces.
async fn collect_live(mut w: WatchStream, mut last: tokio::sync::watch::Receiver<Option<Revision>>) -> Vec<WatchEvent> {
    let mut out = Vec::new();
    let mut seen = 0;
    loop {
        if let Some(l) = *last.borrow()
            && seen >= l
        {
            return out;
        }
        tokio::select! {
            ev = w.next_event() => match ev {
                Some(Ok(WatchEvent::Progress(r))) => seen = seen.max(r),
                Some(Ok(e)) => {
                    assert!(e.revision() >= seen, "out of order");
                    seen = e.revision();
                    out.push(e);
                }
                Some(Err(e)) => panic!("watch failed: {e}"),
                None => panic!("watch ended"),
            },
            _ = last.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                if last.borrow().is_some() {
                    w.request_progress();
                }
            }
        }
    }
}

/// A store's whole state under a prefix, as a map (for restart checks).
pub async fn dump(s: &dyn Store, prefix: &str) -> BTreeMap<Bytes, Bytes> {
    s.range(RangeRequest::prefix(b(prefix))).await.unwrap().kvs.into_iter().map(|kv| (kv.key, kv.value)).collect()
}

pub async fn survives_restart(h: &dyn Harness) {
    if !h.durable() {
        return;
    }
    let p = h.prefix("restart");
    let (before, rev) = {
        let s = h.open().await;
        for i in 0..50 {
            s.create(b(&format!("{p}{i}")), b(&format!("v{i}"))).await.unwrap();
        }
        (dump(s.as_ref(), &p).await, s.current_revision().await.unwrap())
    };
    let s = h.open().await;
    assert_eq!(dump(s.as_ref(), &p).await, before);
    assert!(s.current_revision().await.unwrap() >= rev);
    let r = s.create(b(&format!("{p}after")), b("x")).await.unwrap();
    assert!(r > rev, "revisions keep increasing across restarts");
}

#[macro_export]
macro_rules! conformance_suite {
    ($harness:expr) => {
        $crate::conformance_suite!($harness, with_model);
        mod model_test {
            use super::*;
            #[test]
            fn model_property() {
                conformance::model::run(&*$harness)
            }
        }
    };
    ($harness:expr, with_model) => {
        mod conformance_tests {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn crud_and_revisions() {
                conformance::crud_and_revisions(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn txn_is_all_or_nothing() {
                conformance::txn_is_all_or_nothing(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn limits() {
                conformance::limits(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn range_pagination_and_snapshots() {
                conformance::range_pagination_and_snapshots(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn watch_replays_and_follows() {
                conformance::watch_replays_and_follows(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn watch_progress() {
                conformance::watch_progress(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn compaction() {
                conformance::compaction(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lagging_watcher_is_ended() {
                conformance::lagging_watcher_is_ended(&*$harness).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_writers_and_watchers() {
                let seed = conformance::seed("concurrent_writers_and_watchers");
                conformance::concurrent_writers_and_watchers(&*$harness, 1000, seed).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn survives_restart() {
                conformance::survives_restart(&*$harness).await
            }
        }
    };
}

/// A seed from `FLOTILLA_TEST_SEED` or the clock, printed so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("FLOTILLA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    eprintln!("{test}: seed {seed} (replay with FLOTILLA_TEST_SEED={seed})");
    seed
}
