//! The workload simulator's loop: one task per member that follows the member's store with a
//! single watch, keeps the [`Cache`], and runs the controllers (`workloads::*`, `nodes`) on
//! the work each change calls for.
//!
//! Read-your-writes without expectations: a batch of work runs only once the cache has caught
//! up with the store's revision as of the end of the previous batch (`barrier`), so no
//! controller acts twice on a state its own last writes already changed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_store::{RangeRequest, Revision, Store, StoreError, WatchEvent, WatchStream};
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::api::{WriteError, Writer};
use crate::cache::{Cache, ObjKey, Work};
use crate::config::MemberConfig;
use crate::nodes::{CapacityChange, NodeRuntime};

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("reading the member's store failed: {0}")]
    Store(#[from] StoreError),
    #[error("decoding {what}: {source}")]
    Decode { what: String, source: serde_json::Error },
}

pub type Reconciled = Result<Option<Duration>, SimError>;

/// Requests from the member's handle (the admin endpoint and tests).
#[derive(Debug)]
pub enum Command {
    /// Fail these nodes (their kubelets stop); `None` names all.
    FailNodes(Option<Vec<String>>, oneshot::Sender<Result<Vec<String>, String>>),
    RecoverNodes(Option<Vec<String>>, oneshot::Sender<Result<Vec<String>, String>>),
    SetCapacity(CapacityChange, oneshot::Sender<Result<(), String>>),
    /// Reply once the simulator has nothing left to do right now (tests, progress output).
    Idle(oneshot::Sender<()>),
}

/// State the controllers keep between reconciles.
#[derive(Default)]
pub struct SimState {
    /// Per node: failure and heartbeat.
    pub nodes: BTreeMap<String, NodeRuntime>,
    /// Bound pods waiting out the start delay: when the kubelet first saw them.
    pub starting: HashMap<ObjKey, Instant>,
    /// The next pod IP offset to try.
    pub next_ip: u32,
}

/// What a reconcile can see and use.
pub struct Ctx<'a> {
    pub cache: &'a Cache,
    pub api: &'a Writer,
    pub store: &'a dyn Store,
    pub config: &'a MemberConfig,
    pub state: &'a mut SimState,
    pub now: Instant,
}

impl Ctx<'_> {
    /// A whole object from the store, typed, with its resourceVersion.
    pub async fn read<T: serde::de::DeserializeOwned>(&self, res: &crate::kinds::Res, ns: &str, name: &str) -> Result<Option<T>, SimError> {
        let Some(kv) = self.store.get(res.key(ns, name).as_bytes()).await? else { return Ok(None) };
        let mut v: serde_json::Value = serde_json::from_slice(&kv.value).map_err(|source| SimError::Decode { what: res.key(ns, name), source })?;
        v["metadata"]["resourceVersion"] = serde_json::Value::String(kv.mod_revision.to_string());
        serde_json::from_value(v).map(Some).map_err(|source| SimError::Decode { what: res.key(ns, name), source })
    }
}

pub struct Simulator {
    pub cache: Cache,
    pub api: Writer,
    pub store: Arc<dyn Store>,
    pub config: MemberConfig,
    pub state: SimState,
    queue: BTreeSet<Work>,
    /// Work due later: at most one pending time per work (the earliest), ordered by a heap
    /// whose stale entries are skipped.
    timers: BinaryHeap<Reverse<(Instant, Work)>>,
    due: HashMap<Work, Instant>,
    commands: mpsc::Receiver<Command>,
    idle_waiters: Vec<oneshot::Sender<()>>,
    barrier: Revision,
}

/// Everything under the API server's key space.
const REGISTRY: &[u8] = b"/registry/";

impl Simulator {
    pub fn new(api: Writer, store: Arc<dyn Store>, config: MemberConfig, commands: mpsc::Receiver<Command>) -> Simulator {
        Simulator {
            cache: Cache::default(),
            api,
            store,
            config,
            state: SimState::default(),
            queue: BTreeSet::new(),
            timers: BinaryHeap::new(),
            due: HashMap::new(),
            commands,
            idle_waiters: Vec::new(),
            barrier: 0,
        }
    }

    /// Read the whole state into a fresh cache; returns the revision it was read at.
    async fn relist(&mut self) -> Result<Revision, StoreError> {
        let resp = self.store.range(RangeRequest::prefix(Bytes::from_static(REGISTRY))).await?;
        self.cache = Cache::default();
        let mut work = Vec::new();
        for kv in resp.kvs {
            self.cache.apply(&WatchEvent::Put { kv, prev: None }, &mut |w| work.push(w));
        }
        self.cache.revision = resp.revision;
        let workloads = self.config.simulate_workloads;
        self.queue.extend(work.into_iter().filter(|w| workloads || !w.is_workload()));
        Ok(resp.revision)
    }

    async fn open_watch(&mut self) -> WatchStream {
        loop {
            let from = match self.relist().await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(member = %self.config.name, error = %e, "simulator cannot read its store; retrying");
                    tokio::time::sleep(self.config.timings.retry).await;
                    continue;
                }
            };
            match self.store.watch(REGISTRY, from).await {
                Ok(w) => return w,
                Err(e) => {
                    tracing::warn!(member = %self.config.name, error = %e, "simulator cannot watch its store; retrying");
                    tokio::time::sleep(self.config.timings.retry).await;
                }
            }
        }
    }

    /// Run until the command channel closes (the member was dropped).
    pub async fn run(mut self) {
        let mut watch = self.open_watch().await;
        crate::nodes::register_all(&mut self).await;
        loop {
            let next_timer = self.timers.peek().map(|Reverse((at, _))| *at);
            let ready = self.cache.revision >= self.barrier;
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    Some(c) => self.command(c).await,
                    None => return,
                },
                ev = watch.next_event() => {
                    let mut ended = false;
                    let mut next = Some(ev);
                    while let Some(ev) = next.take() {
                        match ev {
                            Some(Ok(ev)) => self.apply(&ev),
                            Some(Err(e)) => {
                                tracing::info!(member = %self.config.name, error = %e, "simulator watch ended; relisting");
                                ended = true;
                                break;
                            }
                            None => {
                                ended = true;
                                break;
                            }
                        }
                        next = watch.next_event().now_or_never();
                    }
                    if ended {
                        watch = self.open_watch().await;
                    }
                }
                _ = sleep_until(next_timer) => {
                    let now = Instant::now();
                    while self.timers.peek().is_some_and(|Reverse((at, _))| *at <= now) {
                        if let Some(Reverse((at, w))) = self.timers.pop()
                            && self.due.get(&w) == Some(&at) {
                                self.due.remove(&w);
                                self.queue.insert(w);
                            }
                    }
                }
                // Nothing arrived: if the cache is behind, ask the watch where it stands.
                _ = tokio::time::sleep(Duration::from_millis(200)), if !ready => watch.request_progress(),
            }
            if self.cache.revision >= self.barrier && !self.queue.is_empty() {
                self.run_batch().await;
            }
            if self.queue.is_empty() && self.cache.revision >= self.barrier {
                for w in self.idle_waiters.drain(..) {
                    let _ = w.send(());
                }
            }
        }
    }

    fn apply(&mut self, ev: &WatchEvent) {
        let queue = &mut self.queue;
        let workloads = self.config.simulate_workloads;
        self.cache.apply(ev, &mut |w| {
            if workloads || !w.is_workload() {
                queue.insert(w);
            }
        });
    }

    async fn run_batch(&mut self) {
        let batch = std::mem::take(&mut self.queue);
        for work in batch {
            let mut ctx =
                Ctx { cache: &self.cache, api: &self.api, store: self.store.as_ref(), config: &self.config, state: &mut self.state, now: Instant::now() };
            let result = crate::workloads::reconcile(&work, &mut ctx).await;
            match result {
                Ok(None) => {}
                Ok(Some(after)) => self.schedule(after, work),
                Err(e) => {
                    if !matches!(&e, SimError::Write(w) if w.is_conflict() || w.is_not_found()) {
                        tracing::warn!(member = %self.config.name, work = ?work, error = %e, "simulator reconcile failed; retrying");
                    }
                    self.schedule(self.config.timings.retry, work);
                }
            }
        }
        self.barrier = self.api.revision().await;
    }

    /// Ask for work after a delay.
    pub fn schedule(&mut self, after: Duration, work: Work) {
        let at = Instant::now() + after;
        if self.due.get(&work).is_some_and(|d| *d <= at) {
            return;
        }
        self.due.insert(work.clone(), at);
        self.timers.push(Reverse((at, work)));
    }

    pub fn enqueue(&mut self, work: Work) {
        self.queue.insert(work);
    }

    async fn command(&mut self, c: Command) {
        match c {
            Command::FailNodes(names, reply) => {
                let r = crate::nodes::fail(self, names);
                let _ = reply.send(r);
            }
            Command::RecoverNodes(names, reply) => {
                let r = crate::nodes::recover(self, names);
                let _ = reply.send(r);
            }
            Command::SetCapacity(change, reply) => {
                let r = crate::nodes::set_capacity(self, change).await;
                let _ = reply.send(r);
            }
            Command::Idle(reply) => self.idle_waiters.push(reply),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
