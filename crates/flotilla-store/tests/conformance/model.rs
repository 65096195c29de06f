//! Property test: random sequences of operations, compactions and restarts, each checked against
//! a simple model of the contract (a list of committed revisions and what they changed).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flotilla_store::{Compare, KeyValue, Op, RangeRequest, Revision, Store, StoreError, WatchEvent};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{Harness, b, collect_until};

#[derive(Clone, Debug)]
enum Step {
    Create(u8, u8),
    Update { key: u8, value: u8, stale: bool },
    Delete { key: u8, mode: u8 },
    Txn { keys: Vec<(u8, Option<u8>)>, compare_holds: bool },
    Get(u8),
    Range { back: u8, limit: u8 },
    Watch { back: u8 },
    Compact { back: u8 },
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    let key = 0u8..6;
    let value = any::<u8>();
    prop_oneof![
        4 => (key.clone(), value).prop_map(|(k, v)| Step::Create(k, v)),
        4 => (key.clone(), value, prop::bool::weighted(0.2)).prop_map(|(key, value, stale)| Step::Update { key, value, stale }),
        2 => (key.clone(), 0u8..3).prop_map(|(key, mode)| Step::Delete { key, mode }),
        2 => (prop::collection::btree_map(key.clone(), prop::option::weighted(0.7, value), 1..4), prop::bool::weighted(0.7))
            .prop_map(|(m, compare_holds)| Step::Txn { keys: m.into_iter().collect(), compare_holds }),
        3 => key.clone().prop_map(Step::Get),
        2 => (0u8..8, 0u8..4).prop_map(|(back, limit)| Step::Range { back, limit }),
        2 => (0u8..8).prop_map(|back| Step::Watch { back }),
        1 => (0u8..6).prop_map(|back| Step::Compact { back }),
        1 => Just(Step::Restart),
    ]
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Version {
    value: Bytes,
    create: Revision,
    modrev: Revision,
}

/// What the store should hold: every committed revision of this case and what it changed.
struct Model {
    prefix: String,
    gapless: bool,
    head: Revision,
    compacted: Revision,
    /// (revision, [(key, new value or None for delete)])
    history: Vec<(Revision, Vec<(Bytes, Option<Bytes>)>)>,
}

impl Model {
    fn key(&self, k: u8) -> Bytes {
        // Two levels so prefixes nest: "k0", "k0/x".
        let name = match k {
            0 => "k0",
            1 => "k0/x",
            2 => "k1",
            3 => "k2",
            4 => "k2/y/z",
            _ => "k3",
        };
        b(&format!("{}{name}", self.prefix))
    }

    fn state_at(&self, at: Revision) -> BTreeMap<Bytes, Version> {
        let mut state: BTreeMap<Bytes, Version> = BTreeMap::new();
        for (rev, changes) in self.history.iter().take_while(|(r, _)| *r <= at) {
            for (k, v) in changes {
                match v {
                    Some(v) => {
                        let create = state.get(k).map(|e| e.create).unwrap_or(*rev);
                        state.insert(k.clone(), Version { value: v.clone(), create, modrev: *rev });
                    }
                    None => {
                        state.remove(k);
                    }
                }
            }
        }
        state
    }

    fn current(&self) -> BTreeMap<Bytes, Version> {
        self.state_at(Revision::MAX)
    }

    fn commit(&mut self, rev: Revision, changes: Vec<(Bytes, Option<Bytes>)>) -> Result<(), TestCaseError> {
        prop_assert!(rev > self.head, "revision {} not above head {}", rev, self.head);
        if self.gapless {
            prop_assert_eq!(rev, self.head + 1, "a hole in the revisions");
        }
        self.head = rev;
        self.history.push((rev, changes));
        Ok(())
    }

    /// A revision `back` steps into this case's history (0 = head).
    fn pick(&self, back: u8) -> Revision {
        let n = self.history.len();
        if back == 0 || n == 0 {
            return self.head;
        }
        let idx = n.saturating_sub(back as usize);
        // One before the picked commit, so watches from there replay it.
        self.history[idx].0 - 1
    }

    /// The events a watch from `after` should deliver, with previous values.
    fn events_after(&self, after: Revision) -> Vec<(Revision, Bytes, Option<Bytes>, Option<Bytes>)> {
        let mut state: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        let mut out = Vec::new();
        for (rev, changes) in &self.history {
            for (k, v) in changes {
                let prev = state.get(k).cloned();
                if *rev > after {
                    out.push((*rev, k.clone(), v.clone(), prev.clone()));
                }
                match v {
                    Some(v) => {
                        state.insert(k.clone(), v.clone());
                    }
                    None => {
                        state.remove(k);
                    }
                }
            }
        }
        out
    }
}

fn val(v: u8) -> Bytes {
    Bytes::from(vec![v; 1 + (v as usize % 7)])
}

fn same_version(kv: &KeyValue, v: &Version) -> bool {
    kv.value == v.value && kv.create_revision == v.create && kv.mod_revision == v.modrev
}

async fn run_case(slot: &mut Option<Arc<dyn Store>>, compacted: &mut Revision, h: &dyn Harness, case: u64, steps: &[Step]) -> Result<(), TestCaseError> {
    let prefix = format!("{}c{case}/", h.prefix("model"));
    let store = slot.clone().expect("store is open");
    let head = store.current_revision().await.unwrap();
    drop(store);
    let mut m = Model { prefix, gapless: h.gapless(), head, compacted: *compacted, history: Vec::new() };
    for (i, st) in steps.iter().enumerate() {
        let ctx = format!("step {i} {st:?}");
        if std::env::var_os("FLOTILLA_MODEL_TRACE").is_some() {
            eprintln!("{:?} case {case} {ctx}", std::time::Instant::now());
        }
        if let Step::Restart = st {
            if h.durable() {
                // Close the only handle, then open the same data again.
                drop(slot.take());
                let store = h.open().await;
                let now = m.current();
                let dump = store.range(RangeRequest::prefix(b(&m.prefix))).await.unwrap();
                prop_assert_eq!(dump.kvs.len(), now.len(), "{}: keys after restart", ctx);
                for kv in &dump.kvs {
                    let v = now.get(&kv.key).ok_or_else(|| TestCaseError::fail(format!("{ctx}: extra key")))?;
                    prop_assert!(same_version(kv, v), "{}: {:?} vs {:?} after restart", ctx, kv, v);
                }
                prop_assert!(store.current_revision().await.unwrap() >= m.head, "{}: revision went back on restart", ctx);
                *slot = Some(store);
            }
            continue;
        }
        let store = slot.clone().expect("store is open");
        let cur = m.current();
        match st.clone() {
            Step::Create(k, v) => {
                let key = m.key(k);
                let res = store.create(key.clone(), val(v)).await;
                if cur.contains_key(&key) {
                    prop_assert!(matches!(res, Err(StoreError::AlreadyExists { .. })), "{}: {:?}", ctx, res);
                } else {
                    let rev = res.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                    m.commit(rev, vec![(key, Some(val(v)))])?;
                }
            }
            Step::Update { key, value, stale } => {
                let key = m.key(key);
                let expected = match cur.get(&key) {
                    Some(v) if !stale => v.modrev,
                    Some(v) => v.modrev - 1,
                    None => m.head.max(1),
                };
                let res = store.update_if(key.clone(), val(value), expected).await;
                match cur.get(&key) {
                    None => prop_assert!(matches!(res, Err(StoreError::NotFound { .. })), "{}: {:?}", ctx, res),
                    Some(_) if stale => prop_assert!(matches!(res, Err(StoreError::Conflict { .. })), "{}: {:?}", ctx, res),
                    Some(_) => {
                        let rev = res.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                        m.commit(rev, vec![(key, Some(val(value)))])?;
                    }
                }
            }
            Step::Delete { key, mode } => {
                let key = m.key(key);
                let expected = match (mode, cur.get(&key)) {
                    (0, _) => None,
                    (1, Some(v)) => Some(v.modrev),
                    (_, Some(v)) => Some(v.modrev + 1000),
                    (_, None) => Some(m.head.max(1)),
                };
                let res = store.delete_if(key.clone(), expected).await;
                match cur.get(&key) {
                    None => prop_assert!(matches!(res, Err(StoreError::NotFound { .. })), "{}: {:?}", ctx, res),
                    Some(_) if mode == 2 => prop_assert!(matches!(res, Err(StoreError::Conflict { .. })), "{}: {:?}", ctx, res),
                    Some(v) => {
                        let (rev, prev) = res.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                        prop_assert!(same_version(&prev, v), "{}: prev {:?} vs model {:?}", ctx, prev, v);
                        m.commit(rev, vec![(key, None)])?;
                    }
                }
            }
            Step::Txn { keys, compare_holds } => {
                let first = m.key(keys[0].0);
                let modrev = cur.get(&first).map(|v| v.modrev).unwrap_or(0);
                let cmp = if compare_holds { modrev } else { modrev + 7 };
                let ops: Vec<Op> = keys
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => Op::Put(m.key(*k), val(*v)),
                        None => Op::Delete(m.key(*k)),
                    })
                    .collect();
                let res = store.txn(vec![Compare::ModRevision(first, cmp)], ops).await;
                if !compare_holds {
                    prop_assert!(matches!(res, Err(StoreError::Conflict { .. })), "{}: {:?}", ctx, res);
                } else {
                    let resp = res.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                    let changes: Vec<(Bytes, Option<Bytes>)> = keys
                        .iter()
                        .filter_map(|(k, v)| {
                            let key = m.key(*k);
                            match v {
                                Some(v) => Some((key, Some(val(*v)))),
                                None if cur.contains_key(&key) => Some((key, None)),
                                None => None,
                            }
                        })
                        .collect();
                    if changes.is_empty() {
                        prop_assert!(resp.revision >= m.head, "{}: an empty change moved the revision back", ctx);
                    } else {
                        m.commit(resp.revision, changes)?;
                    }
                }
            }
            Step::Get(k) => {
                let key = m.key(k);
                let got = store.get(&key).await.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                match (got, cur.get(&key)) {
                    (None, None) => {}
                    (Some(kv), Some(v)) => prop_assert!(same_version(&kv, v), "{}: {:?} vs {:?}", ctx, kv, v),
                    (g, v) => return Err(TestCaseError::fail(format!("{ctx}: store {g:?} vs model {v:?}"))),
                }
            }
            Step::Range { back, limit } => {
                let at = m.pick(back).max(1);
                let mut req = RangeRequest::prefix(b(&m.prefix)).limit(limit as usize);
                if back > 0 {
                    req = req.at_revision(at);
                }
                if back > 0 && at < m.compacted {
                    let res = store.range(req).await;
                    prop_assert!(matches!(res, Err(StoreError::Compacted { .. })), "{}: at {} below {}: {:?}", ctx, at, m.compacted, res);
                    continue;
                }
                let want = if back > 0 { m.state_at(at) } else { cur.clone() };
                let mut got = BTreeMap::new();
                let mut pages = 0;
                loop {
                    let page = store.range(req.clone()).await.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                    pages += 1;
                    prop_assert!(pages < 100, "{}: pagination does not end", ctx);
                    if limit > 0 {
                        prop_assert!(page.kvs.len() <= limit as usize);
                    }
                    for kv in &page.kvs {
                        got.insert(kv.key.clone(), kv.clone());
                    }
                    if !page.more {
                        break;
                    }
                    req = req.at_revision(page.revision).continue_after(page.kvs.last().unwrap().key.clone());
                }
                prop_assert_eq!(got.len(), want.len(), "{}: keys at {}", ctx, at);
                for (k, v) in &want {
                    let kv = got.get(k).ok_or_else(|| TestCaseError::fail(format!("{ctx}: missing {k:?}")))?;
                    prop_assert!(same_version(kv, v), "{}: {:?} vs {:?}", ctx, kv, v);
                }
            }
            Step::Watch { back } => {
                let after = m.pick(back);
                let res = store.watch(m.prefix.as_bytes(), after).await;
                if after < m.compacted {
                    prop_assert!(matches!(res, Err(StoreError::Compacted { .. })), "{}: {:?}", ctx, res.err());
                    continue;
                }
                let mut w = res.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                let evs = collect_until(&mut w, m.head).await;
                let want = m.events_after(after);
                prop_assert_eq!(evs.len(), want.len(), "{}: events {:?} vs {:?}", ctx, evs, want);
                for (e, (rev, key, value, prev)) in evs.iter().zip(want) {
                    match e {
                        WatchEvent::Put { kv, prev: p } => {
                            prop_assert!(kv.mod_revision == rev && kv.key == key && Some(kv.value.clone()) == value, "{}: {:?}", ctx, e);
                            prop_assert_eq!(p.as_ref().map(|p| p.value.clone()), prev, "{}: prev of put", ctx);
                        }
                        WatchEvent::Delete { key: k, revision, prev: p } => {
                            prop_assert!(*revision == rev && *k == key && value.is_none(), "{}: {:?}", ctx, e);
                            prop_assert_eq!(Some(p.value.clone()), prev, "{}: prev of delete", ctx);
                        }
                        WatchEvent::Progress(_) => unreachable!(),
                    }
                }
            }
            Step::Compact { back } => {
                let c = m.pick(back).max(1);
                store.compact(c).await.map_err(|e| TestCaseError::fail(format!("{ctx}: {e}")))?;
                m.compacted = m.compacted.max(c);
                *compacted = m.compacted;
            }
            Step::Restart => unreachable!("handled above"),
        }
    }
    Ok(())
}

/// The number of cases in all: `FLOTILLA_STORE_PROPTEST_CASES`, by default 10,000.
pub fn total_cases() -> u32 {
    std::env::var("FLOTILLA_STORE_PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000)
}

/// Run the property test with all cases in one go.
pub fn run(h: &dyn Harness) {
    run_cases(h, total_cases())
}

/// Run one shard of `1/shards` of the cases (backends whose watches are slow to start, like
/// etcd's, run the cases in parallel shards).
pub fn run_shard(h: &dyn Harness, shards: u32) {
    run_cases(h, total_cases().div_ceil(shards))
}

fn run_cases(h: &dyn Harness, cases: u32) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let first = rt.block_on(h.open());
    // The suite is this store's only client, so the model tracks compaction from here on.
    let compacted = std::sync::Mutex::new(rt.block_on(first.compacted_revision()).unwrap());
    let store = std::sync::Mutex::new(Some(first));
    let mut config = Config::with_cases(cases);
    config.failure_persistence = None;
    config.max_shrink_iters = 2000;
    let mut runner = TestRunner::new(config);
    let counter = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&prop::collection::vec(step(), 1..24), |steps| {
        let case = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut slot = store.lock().unwrap_or_else(|e| e.into_inner());
        let mut compacted = compacted.lock().unwrap_or_else(|e| e.into_inner());
        rt.block_on(run_case(&mut slot, &mut compacted, h, case, &steps))
    });
    if let Err(e) = result {
        panic!("model property failed: {e}");
    }
    eprintln!("model property: {} cases passed", counter.load(std::sync::atomic::Ordering::Relaxed));
}
