//! The btree backend: the whole store in one `BTreeMap` behind a lock, with no thread and no
//! pages — for simulated member clusters, where one process holds a thousand small stores.
//!
//! The current state is a map from key to its live version; history is a log of the changes
//! of each committed revision (the same [`WatchEvent`]s the [`hub`](crate::hub) publishes),
//! which serves watches that start in the past and reads at a past revision (the current
//! state with the newer changes undone). Values are `Bytes`, shared between the map, the log
//! and every reader: nothing is copied after a write.
//!
//! Writes commit under the lock and are published to the hub before it is released, so
//! revisions reach watchers in order. A write compacts history that is both more than
//! `min_revisions` revisions and more than `min_age` old (etcd-style retention, as the
//! embedded backend keeps); [`Store::compact`] compacts explicitly. Nothing is durable.

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::RwLock;

use crate::hub::{Batch, History, Hub, WatchConfig, WatchEvent, WatchStream};
use crate::{Compare, KeyValue, Op, OpResult, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, TxnResponse, prefix_end, validate_txn};

/// Settings of a btree store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BTreeConfig {
    pub watch: WatchConfig,
    /// History a write never compacts: at least this many revisions…
    pub min_revisions: usize,
    /// …and at least this much time.
    pub min_age: Duration,
}

impl Default for BTreeConfig {
    fn default() -> Self {
        BTreeConfig { watch: WatchConfig::default(), min_revisions: 10_000, min_age: Duration::from_secs(300) }
    }
}

/// The live version of a key.
#[derive(Clone)]
struct Entry {
    value: Bytes,
    create_revision: Revision,
    mod_revision: Revision,
}

impl Entry {
    fn kv(&self, key: &Bytes) -> KeyValue {
        KeyValue { key: key.clone(), value: self.value.clone(), create_revision: self.create_revision, mod_revision: self.mod_revision }
    }
}

struct State {
    revision: Revision,
    compacted: Revision,
    current: BTreeMap<Bytes, Entry>,
    /// The changes of every revision after `compacted`, oldest first.
    log: VecDeque<(Revision, Instant, Box<[WatchEvent]>)>,
}

impl State {
    fn check(&self, cmp: &Compare) -> Result<()> {
        let actual = self.current.get(cmp.key()).map_or(0, |e| e.mod_revision);
        let (holds, expected) = match cmp {
            Compare::ModRevision(_, want) => (actual == *want, *want),
            Compare::Exists(_) => (actual != 0, -1),
            Compare::Absent(_) => (actual == 0, 0),
        };
        if holds { Ok(()) } else { Err(StoreError::Conflict { key: crate::lossy(cmp.key()), expected, actual }) }
    }

    fn compact_to(&mut self, revision: Revision) {
        while self.log.front().is_some_and(|(r, _, _)| *r <= revision) {
            self.log.pop_front();
        }
        self.compacted = self.compacted.max(revision);
    }

    /// The state under `[start, end)` as of `at`: the current state with every later change
    /// undone.
    fn snapshot(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, at: Revision) -> BTreeMap<Bytes, Entry> {
        let mut map: BTreeMap<Bytes, Entry> = self.current.range::<[u8], _>((start, end)).map(|(k, e)| (k.clone(), e.clone())).collect();
        let inside = |k: &[u8]| RangeBounds::<&[u8]>::contains(&(start, end), &k);
        for (rev, _, events) in self.log.iter().rev() {
            if *rev <= at {
                break;
            }
            for ev in events.iter().rev() {
                let (key, prev) = match ev {
                    WatchEvent::Put { kv, prev } => (&kv.key, prev.as_ref()),
                    WatchEvent::Delete { key, prev, .. } => (key, Some(prev)),
                    WatchEvent::Progress(_) => continue,
                };
                if !inside(key) {
                    continue;
                }
                match prev {
                    Some(p) => {
                        map.insert(key.clone(), Entry { value: p.value.clone(), create_revision: p.create_revision, mod_revision: p.mod_revision });
                    }
                    None => {
                        map.remove(key);
                    }
                }
            }
        }
        map
    }
}

struct Shared {
    state: RwLock<State>,
    hub: Arc<Hub>,
    min_revisions: usize,
    min_age: Duration,
}

impl History for Shared {
    fn events(&self, prefix: &[u8], after: Revision, up_to: Revision, max: usize) -> Result<(Vec<WatchEvent>, Revision)> {
        let st = self.state.read();
        if after < st.compacted {
            return Err(StoreError::Compacted { requested: after, compacted: st.compacted });
        }
        let first = st.log.partition_point(|(r, _, _)| *r <= after);
        let mut events = Vec::new();
        let mut last = after;
        for (n, (rev, _, batch)) in st.log.range(first..).enumerate() {
            if *rev > up_to {
                break;
            }
            if n >= max {
                return Ok((events, last));
            }
            events.extend(batch.iter().filter(|e| e.key().is_some_and(|k| k.starts_with(prefix))).cloned());
            last = *rev;
        }
        Ok((events, up_to.max(last)))
    }
}

/// A store held entirely in memory in a `BTreeMap`. Cheap to create: no thread, no pages.
#[derive(Clone)]
pub struct BTreeStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BTreeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BTreeStore").field("revision", &self.shared.state.read().revision).finish()
    }
}

/// The revision of a fresh store, as on the other backends (the first write gets 2).
const INITIAL_REVISION: Revision = 1;

impl BTreeStore {
    pub fn new(config: BTreeConfig) -> BTreeStore {
        let state = State { revision: INITIAL_REVISION, compacted: 0, current: BTreeMap::new(), log: VecDeque::new() };
        BTreeStore {
            shared: Arc::new(Shared {
                state: RwLock::new(state),
                hub: Hub::new(config.watch, INITIAL_REVISION),
                min_revisions: config.min_revisions.max(1),
                min_age: config.min_age,
            }),
        }
    }

    pub fn watcher_count(&self) -> usize {
        self.shared.hub.watcher_count()
    }

    /// Keys held, and revisions of history kept (for measurements).
    pub fn sizes(&self) -> (usize, usize) {
        let st = self.shared.state.read();
        (st.current.len(), st.log.len())
    }

    fn apply(&self, compares: &[Compare], ops: Vec<Op>) -> Result<TxnResponse> {
        let mut st = self.shared.state.write();
        for cmp in compares {
            st.check(cmp)?;
        }
        let rev = st.revision + 1;
        let mut results = Vec::with_capacity(ops.len());
        let mut events = Vec::new();
        for op in ops {
            match op {
                Op::Put(key, value) => {
                    let prev = st.current.get(&key).map(|e| e.kv(&key));
                    let create_revision = prev.as_ref().map_or(rev, |p| p.create_revision);
                    let entry = Entry { value, create_revision, mod_revision: rev };
                    events.push(WatchEvent::Put { kv: entry.kv(&key), prev: prev.clone() });
                    st.current.insert(key, entry);
                    results.push(OpResult::Put { prev });
                }
                Op::Delete(key) => match st.current.remove(&key) {
                    None => results.push(OpResult::Delete { prev: None }),
                    Some(e) => {
                        let prev = e.kv(&key);
                        events.push(WatchEvent::Delete { key, revision: rev, prev: prev.clone() });
                        results.push(OpResult::Delete { prev: Some(prev) });
                    }
                },
            }
        }
        if events.is_empty() {
            return Ok(TxnResponse { revision: st.revision, results });
        }
        st.revision = rev;
        let now = Instant::now();
        st.log.push_back((rev, now, events.clone().into_boxed_slice()));
        let mut expired = st.compacted;
        for (r, at, _) in st.log.iter().take(st.log.len().saturating_sub(self.shared.min_revisions)) {
            if now.duration_since(*at) < self.shared.min_age {
                break;
            }
            expired = *r;
        }
        if expired > st.compacted {
            st.compact_to(expired);
        }
        // Published under the lock: batches reach the hub in revision order.
        self.shared.hub.publish(Batch { last_revision: rev, events });
        Ok(TxnResponse { revision: rev, results })
    }
}

#[async_trait]
impl Store for BTreeStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let st = self.shared.state.read();
        Ok(st.current.get_key_value(key).map(|(k, e)| e.kv(k)))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let st = self.shared.state.read();
        let at = req.at_revision.filter(|r| *r > 0).unwrap_or(st.revision);
        if at > st.revision {
            return Err(StoreError::FutureRevision { requested: at, current: st.revision });
        }
        if at < st.compacted {
            return Err(StoreError::Compacted { requested: at, compacted: st.compacted });
        }
        let start: Bound<&[u8]> = match &req.continue_after {
            Some(k) if k.as_ref() >= req.prefix.as_ref() => Bound::Excluded(k.as_ref()),
            _ => Bound::Included(req.prefix.as_ref()),
        };
        let end_key = prefix_end(&req.prefix);
        let end: Bound<&[u8]> = match &end_key {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        let limit = if req.limit == 0 { usize::MAX } else { req.limit };
        let mut out = RangeResponse { revision: at, ..Default::default() };
        let mut take = |k: &Bytes, e: &Entry| {
            out.count += 1;
            if out.kvs.len() >= limit {
                out.more = true;
            } else if !req.count_only {
                out.kvs.push(e.kv(k));
            }
        };
        if at == st.revision {
            for (k, e) in st.current.range::<[u8], _>((start, end)) {
                take(k, e);
            }
        } else {
            for (k, e) in &st.snapshot(start, end, at) {
                take(k, e);
            }
        }
        Ok(out)
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.state.read().revision)
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.shared.state.read().compacted)
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnResponse> {
        validate_txn(&compares, &ops)?;
        self.apply(&compares, ops)
    }

    async fn watch(&self, prefix: &[u8], after_revision: Revision) -> Result<WatchStream> {
        let (compacted, head) = {
            let st = self.shared.state.read();
            (st.compacted, st.revision)
        };
        if after_revision < compacted {
            return Err(StoreError::Compacted { requested: after_revision, compacted });
        }
        if after_revision > head {
            return Err(StoreError::FutureRevision { requested: after_revision, current: head });
        }
        let history: Arc<dyn History> = self.shared.clone();
        Ok(self.shared.hub.watch(history, Bytes::copy_from_slice(prefix), after_revision.max(0)))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut st = self.shared.state.write();
        if revision > st.revision {
            return Err(StoreError::FutureRevision { requested: revision, current: st.revision });
        }
        st.compact_to(revision);
        Ok(())
    }

    fn backend_name(&self) -> &'static str {
        "btree"
    }
}
