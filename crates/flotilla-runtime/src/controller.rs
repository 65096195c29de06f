//! The controller engine: keys in a [`WorkQueue`], workers that reconcile them, triggers that
//! turn changes of watched kinds into keys, and an error policy.
//!
//! ```ignore
//! Controller::new(NAME, &informers, shutdown.clone())
//!     .watches(|ns: &Namespace, _deleted| Some(ns.name_any()))
//!     .watches(|_: &Cluster, _| all_namespaces(&store))
//!     .events(Events::new(client.clone(), NAME), |ns: &String| Some(namespace_ref(ns)))
//!     .run(move |ns| reconcile(ns, ctx.clone()))
//!     .await;
//! ```
//!
//! Every reconcile runs in a span `reconcile{controller, object}` and is counted in
//! controller-runtime's metrics ([`crate::metrics`]). What a reconcile returns decides what
//! happens to its key:
//! - `Ok(Next::Done)`: forgotten until a trigger adds it again;
//! - `Ok(Next::After(d))`: looked at again after `d` (not a failure: the backoff resets);
//! - a retryable `Err`: retried after the key's backoff (base doubling to max);
//! - a terminal `Err` ([`ReconcileError::is_terminal`]: the object's own content is at fault
//!   and retrying cannot help): not retried until the object changes, and recorded as a
//!   Warning Event on the object, when the controller says which object a key is.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::events::Events;
use crate::informer::{Informers, Kind};
use crate::metrics::{ControllerMetrics, ReconcileResult};
use crate::queue::WorkQueue;

/// What a reconcile asks of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Done until something changes.
    Done,
    /// Look again after this long (not a failure: the backoff is reset).
    After(Duration),
}

/// A reconcile's error: retryable unless it says otherwise.
pub trait ReconcileError: Display + Send + 'static {
    /// Whether retrying cannot help: the object's own content is at fault (an invalid spec, a
    /// reference that can never resolve). Such a key waits for the object to change.
    fn is_terminal(&self) -> bool {
        false
    }

    /// The reason of the Warning Event a terminal error records (CamelCase).
    fn reason(&self) -> &str {
        "ReconcileFailed"
    }
}

impl ReconcileError for String {}
impl ReconcileError for kube::Error {}

/// A key of a controller's queue.
pub trait Key: Clone + Eq + Hash + Send + Sync + Debug + 'static {}

impl<K> Key for K where K: Clone + Eq + Hash + Send + Sync + Debug + 'static {}

/// The backoff of a failed key, Karmada's rate limiter's (5 ms doubling to 1000 s).
pub const DEFAULT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1000));

type Regarding<K> = Arc<dyn Fn(&K) -> Option<ObjectReference> + Send + Sync>;

/// One controller: its name, queue, triggers and workers.
pub struct Controller<K: Key> {
    name: &'static str,
    queue: Arc<WorkQueue<K>>,
    workers: usize,
    informers: Informers,
    shutdown: CancellationToken,
    events: Option<(Events, Regarding<K>)>,
}

impl<K: Key> Controller<K> {
    /// A controller named `name` (its metrics' `controller` label and its spans' field), one
    /// worker, the default backoff, stopping when `shutdown` is cancelled.
    pub fn new(name: &'static str, informers: &Informers, shutdown: CancellationToken) -> Controller<K> {
        let queue = WorkQueue::new(DEFAULT_BACKOFF.0, DEFAULT_BACKOFF.1);
        queue.export_metrics(name);
        Controller { name, queue, workers: 1, informers: informers.clone(), shutdown, events: None }
    }

    /// How many keys are reconciled at once (different keys; one key is never reconciled by
    /// two workers).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// The retry backoff of a failed key: `base`, doubling up to `max`.
    pub fn backoff(self, base: Duration, max: Duration) -> Self {
        self.queue.set_backoff(base, max);
        self
    }

    /// A trigger: every change of a `T` (applied, or deleted when the flag is set) adds the keys
    /// `map` gives. `T` is read from the shared informer: one watch per kind per process.
    pub fn watches<T: Kind, I>(self, map: impl Fn(&T, bool) -> I + Send + Sync + 'static) -> Self
    where
        I: IntoIterator<Item = K>,
    {
        let queue = self.queue.clone();
        self.informers.subscribe::<T>(move |o, deleted| {
            for key in map(o, deleted) {
                queue.add(key);
            }
        });
        self
    }

    /// A trigger that sees the object as cached before each change too (None when new): for
    /// kinds of which only some changes matter (a generation that moved, a label changed).
    pub fn watches_changes<T: Kind, I>(self, map: impl Fn(Option<&T>, &T, bool) -> I + Send + Sync + 'static) -> Self
    where
        I: IntoIterator<Item = K>,
    {
        let queue = self.queue.clone();
        self.informers.subscribe_changes::<T>(move |old, o, deleted| {
            for key in map(old, o, deleted) {
                queue.add(key);
            }
        });
        self
    }

    /// Hand out keys highest `priority(key)` first ([`WorkQueue::set_priority`]).
    pub fn priority(self, priority: impl Fn(&K) -> i32 + Send + Sync + 'static) -> Self {
        self.queue.set_priority(priority);
        self
    }

    /// Record terminal errors as Warning Events on the object `regarding` names for a key.
    pub fn events(mut self, events: Events, regarding: impl Fn(&K) -> Option<ObjectReference> + Send + Sync + 'static) -> Self {
        self.events = Some((events, Arc::new(regarding)));
        self
    }

    /// The queue, for keys that come from elsewhere than a watched kind (a timer, a member).
    pub fn queue(&self) -> Arc<WorkQueue<K>> {
        self.queue.clone()
    }

    /// The shared informers the triggers read.
    pub fn informers(&self) -> &Informers {
        &self.informers
    }

    /// Reconcile keys until shutdown; reconciles in flight finish first.
    pub async fn run<F, Fut, E>(self, reconcile: F)
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Next, E>> + Send + 'static,
        E: ReconcileError,
    {
        let Controller { name, queue, workers, shutdown, events, .. } = self;
        let stop = queue.clone();
        let watcher = tokio::spawn(async move {
            shutdown.cancelled().await;
            stop.shutdown();
        });
        let policy = Policy { terminal: Arc::new(|e: &E| e.is_terminal().then(|| e.reason().to_string())), events };
        work(queue, workers, name, reconcile, policy).await;
        watcher.abort();
    }
}

impl<T: Kind> Controller<ObjectRef<T>> {
    /// A controller of kind `T`, keyed by object: every change of a `T` enqueues it (the
    /// shape of kube-runtime's `Controller::new(api)`).
    pub fn for_kind(name: &'static str, informers: &Informers, shutdown: CancellationToken) -> Controller<ObjectRef<T>> {
        Controller::new(name, informers, shutdown).watches(|o: &T, _deleted| Some(ObjectRef::from_obj(o)))
    }

    /// Reconcile the cached object of each key until shutdown. A key whose object is no longer
    /// cached is done: what a deletion must do is guarded by a finalizer, and so seen while the
    /// object still exists.
    pub async fn run_objects<F, Fut, E>(self, reconcile: F)
    where
        F: Fn(Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Next, E>> + Send + 'static,
        E: ReconcileError,
    {
        let store = self.informers.store::<T>();
        let reconcile = Arc::new(reconcile);
        self.run(move |key: ObjectRef<T>| {
            let (store, reconcile) = (store.clone(), reconcile.clone());
            async move {
                match store.get(&key) {
                    Some(obj) => reconcile(obj).await,
                    None => Ok(Next::Done),
                }
            }
        })
        .await;
    }
}

struct Policy<K, E> {
    /// The Event reason of an error that is terminal; None for a retryable one.
    terminal: Arc<dyn Fn(&E) -> Option<String> + Send + Sync>,
    events: Option<(Events, Regarding<K>)>,
}

impl<K, E> Clone for Policy<K, E> {
    fn clone(&self) -> Self {
        Policy { terminal: self.terminal.clone(), events: self.events.clone() }
    }
}

/// Run `workers` workers over `queue` until it shuts down, every error retryable: the engine
/// for controllers that build their own queue and triggers (their key is not one kind's
/// object, or they are not yet on [`Controller`]). Spans and metrics as [`Controller::run`].
pub async fn run_workers<K, F, Fut, E>(queue: Arc<WorkQueue<K>>, workers: usize, name: &'static str, reconcile: F)
where
    K: Key,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    queue.export_metrics(name);
    work(queue, workers, name, reconcile, Policy { terminal: Arc::new(|_: &E| None), events: None }).await;
}

async fn work<K, F, Fut, E>(queue: Arc<WorkQueue<K>>, workers: usize, name: &'static str, reconcile: F, policy: Policy<K, E>)
where
    K: Key,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let workers = workers.max(1);
    let metrics = crate::metrics::metrics().controller(name, workers);
    let reconcile = Arc::new(reconcile);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (queue, reconcile, policy, metrics) = (queue.clone(), reconcile.clone(), policy.clone(), metrics.clone());
        set.spawn(async move {
            while let Some(key) = queue.get().await {
                one(&queue, name, &*reconcile, &policy, &metrics, key).await;
            }
        });
    }
    while set.join_next().await.is_some() {}
}

async fn one<K, F, Fut, E>(queue: &Arc<WorkQueue<K>>, name: &'static str, reconcile: &F, policy: &Policy<K, E>, metrics: &ControllerMetrics, key: K)
where
    K: Key,
    F: Fn(K) -> Fut,
    Fut: Future<Output = Result<Next, E>>,
    E: Display,
{
    let span = tracing::info_span!("reconcile", controller = name, object = ?key);
    metrics.active().inc();
    let started = Instant::now();
    let result = reconcile(key.clone()).instrument(span.clone()).await;
    let seconds = started.elapsed().as_secs_f64();
    metrics.active().dec();
    match result {
        Ok(next) => {
            queue.forget(&key);
            match next {
                Next::Done => metrics.observe(ReconcileResult::Success, false, seconds),
                Next::After(d) => {
                    metrics.observe(ReconcileResult::RequeueAfter, false, seconds);
                    queue.add_after(key.clone(), d);
                }
            }
        }
        Err(e) if let Some(reason) = (policy.terminal)(&e) => {
            metrics.observe(ReconcileResult::Error, true, seconds);
            queue.forget(&key);
            let message = e.to_string();
            span.in_scope(|| tracing::warn!(controller = name, error = %message, "reconcile failed for good; not retrying until the object changes"));
            if let Some((events, regarding)) = &policy.events
                && let Some(reference) = regarding(&key)
            {
                events.publish_ref(&reference, true, &reason, "Reconcile", message).await;
            }
        }
        Err(e) => {
            metrics.observe(ReconcileResult::Error, false, seconds);
            span.in_scope(|| tracing::warn!(controller = name, error = %e, "reconcile failed; retrying with backoff"));
            queue.add_rate_limited(key.clone());
        }
    }
    queue.done(&key);
}
