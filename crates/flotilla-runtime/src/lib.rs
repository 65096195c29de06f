//! Flotilla's controller runtime. It names no kind: every controller (the federation's, the
//! scheduler's, kube-controller-manager's that Flotilla runs itself, and later the pull agent's)
//! is built from these parts.
//!
//! - [`informer`]: one shared watch and cache per kind for the whole process, and the private
//!   watch for what is not the control plane's (a member's objects);
//! - [`queue`]: the work queue (a key waits once, is reconciled by one worker at a time, is
//!   retried with backoff);
//! - [`controller`]: the engine: triggers declared per watched kind, workers, the error policy
//!   (retryable or terminal), a span per reconcile and controller-runtime's metrics;
//! - [`metrics`]: those metrics, under controller-runtime's names;
//! - [`events`], [`conditions`], [`finalizers`]: what reconciles write besides their objects;
//! - [`set`]: the named set of controllers a process runs and the `--controllers` selection.
//!
//! Invariant: a controller reaches the control plane only through `kube::Client`.

pub mod conditions;
pub mod controller;
pub mod events;
pub mod finalizers;
pub mod index;
pub mod informer;
pub mod metrics;
pub mod queue;
pub mod set;

pub use conditions::{condition, condition_status, set_condition};
pub use controller::{Controller, Key, Next, ReconcileError, run_workers};
pub use events::Events;
pub use finalizers::{finalizer_patch, with_finalizer, without_finalizer};
pub use index::MultiIndex;
pub use informer::{Informers, Kind, WatchScope, watch_into_store};
pub use queue::WorkQueue;
pub use tokio_util::sync::CancellationToken;

/// What every controller of a process shares: the informers and the shutdown signal.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub informers: Informers,
    pub shutdown: CancellationToken,
}

impl Runtime {
    /// A runtime whose shared watches are made with `client`.
    pub fn new(client: kube::Client) -> Runtime {
        Runtime::scoped(client, WatchScope::default())
    }

    /// A runtime whose shared watches see only `scope`'s part (a pull agent's).
    pub fn scoped(client: kube::Client, scope: WatchScope) -> Runtime {
        let shutdown = CancellationToken::new();
        Runtime { informers: Informers::scoped(client, shutdown.clone(), scope), shutdown }
    }

    /// A controller of this runtime.
    pub fn controller<K: Key>(&self, name: &'static str) -> Controller<K> {
        Controller::new(name, &self.informers, self.shutdown.clone())
    }

    /// A controller of kind `T` of this runtime ([`Controller::for_kind`]).
    pub fn controller_for<T: Kind>(&self, name: &'static str) -> Controller<kube::runtime::reflector::ObjectRef<T>> {
        Controller::for_kind(name, &self.informers, self.shutdown.clone())
    }
}
