//! One simulated member cluster: Flotilla's API server (RBAC enforced, service account
//! tokens, CRDs, discovery with hidden kinds, the containers' logs and exec) on a store of its
//! own, the workload simulator following that store, and the fault knobs in front of the API.
//!
//! Storage: without a data directory the member lives in a [`BTreeStore`] (no thread, no
//! pages: cheap enough for a thousand members in one process); with one, in the embedded
//! (redb) store in that directory, so it survives restarts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_store::Store;
use flotilla_store::btree::{BTreeConfig, BTreeStore};
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use flotilla_store::hub::WatchConfig;
use http::Request;
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt;

use crate::api::Writer;
use crate::config::MemberConfig;
use crate::faults::Faults;
use crate::nodes::CapacityChange;
use crate::simulator::{Command, Simulator};

/// Why a member could not start or a request to it failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("member {member}: opening its store in {path}: {source}")]
    OpenStore { member: String, path: String, source: flotilla_store::StoreError },
    #[error("member {member}: starting its API server: {message}")]
    Bootstrap { member: String, message: String },
    #[error("member {member}: {message}")]
    Request { member: String, message: String },
    #[error("member {member} has stopped")]
    Stopped { member: String },
}

/// Aborts a task when dropped.
struct TaskGuard(tokio::task::JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Inner {
    name: String,
    api: ApiServer,
    router: axum::Router,
    store: Arc<dyn Store>,
    btree: Option<BTreeStore>,
    faults: Faults,
    commands: mpsc::Sender<Command>,
    _simulator: TaskGuard,
    _compactor: Option<TaskGuard>,
}

/// A running simulated member. Clones share it; the last one dropped stops it.
#[derive(Clone)]
pub struct Member {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("name", &self.inner.name).finish()
    }
}

/// The watch settings of a member's store: a short broadcast ring (a watcher that falls
/// behind re-lists, as against etcd) keeps an idle member small.
fn watch_config() -> WatchConfig {
    WatchConfig { ring_batches: 128, per_watcher_buffer: 1024, progress_interval: Some(Duration::from_secs(5)) }
}

impl Member {
    /// Start a member: its store (in `data_dir` when given), API server and simulator.
    pub async fn start(config: MemberConfig, data_dir: Option<&Path>, api_config: ApiServerConfig) -> Result<Member, MemberError> {
        config.validate()?;
        let name = config.name.clone();
        let (store, btree): (Arc<dyn Store>, Option<BTreeStore>) = match data_dir {
            Some(dir) => {
                let path = dir.join("store.redb");
                let mut c = EmbeddedConfig::new(&path);
                c.watch = watch_config();
                let s =
                    EmbeddedStore::open(c).await.map_err(|source| MemberError::OpenStore { member: name.clone(), path: path.display().to_string(), source })?;
                (Arc::new(s), None)
            }
            None => {
                let s = BTreeStore::new(BTreeConfig { watch: watch_config(), ..BTreeConfig::default() });
                (Arc::new(s.clone()), Some(s))
            }
        };
        let api = ApiServer::new(store.clone(), api_config);
        api.bootstrap().await.map_err(|e| MemberError::Bootstrap { member: name.clone(), message: e.message })?;
        crate::node_kind::ensure(&api.registry());
        for (group, plural) in &config.hidden {
            api.registry().set_hidden(group, plural, true);
        }
        let router = api.router();
        let writer = Writer::new(router.clone(), api.registry(), store.clone());
        crate::containers::install(&api, writer.clone());
        let (tx, rx) = mpsc::channel(16);
        let faults = Faults::new(config.faults.clone());
        let compaction = config.timings.compaction_interval;
        let sim = Simulator::new(writer, store.clone(), config, rx);
        let simulator = TaskGuard(tokio::spawn(sim.run()));
        let compactor = (btree.is_some() && !compaction.is_zero()).then(|| TaskGuard(tokio::spawn(compact_every(store.clone(), compaction))));
        Ok(Member { inner: Arc::new(Inner { name, api, router, store, btree, faults, commands: tx, _simulator: simulator, _compactor: compactor }) })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn api_server(&self) -> &ApiServer {
        &self.inner.api
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// Keys held and revisions of history kept, for the in-memory store.
    pub fn store_sizes(&self) -> Option<(usize, usize)> {
        self.inner.btree.as_ref().map(BTreeStore::sizes)
    }

    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// Handle one request from outside: faults first, then the API server.
    pub async fn handle(&self, req: Request<Body>) -> Response {
        if let Some(resp) = self.inner.faults.before_request().await {
            return resp;
        }
        crate::node_kind::ensure(&self.inner.api.registry());
        match self.inner.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// The member's API as a router, with its faults in front.
    pub fn router(&self) -> axum::Router {
        let member = self.clone();
        axum::Router::new().fallback(move |req: Request<Body>| {
            let member = member.clone();
            async move { member.handle(req).await.into_response() }
        })
    }

    /// An in-process client as `identity`, through the faults (as an outside client).
    pub fn client_as(&self, identity: Identity) -> kube::Client {
        kube::Client::new(flotilla_apiserver::inproc::InProcess::new(self.router(), identity), "default")
    }

    /// An in-process admin client (`system:masters`).
    pub fn client(&self) -> kube::Client {
        self.client_as(Identity::user("flotilla-admin", &["system:masters"]))
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, MemberError> {
        let (tx, rx) = oneshot::channel();
        let stopped = || MemberError::Stopped { member: self.inner.name.clone() };
        self.inner.commands.send(make(tx)).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }

    /// Fail nodes (all when `None`): their kubelets stop; after the grace period they are
    /// NotReady and tainted unreachable, and their pods are evicted after their toleration.
    pub async fn fail_nodes(&self, nodes: Option<Vec<String>>) -> Result<Vec<String>, MemberError> {
        let r = self.ask(|tx| Command::FailNodes(nodes, tx)).await?;
        r.map_err(|message| MemberError::Request { member: self.inner.name.clone(), message })
    }

    /// Bring failed nodes back (all when `None`).
    pub async fn recover_nodes(&self, nodes: Option<Vec<String>>) -> Result<Vec<String>, MemberError> {
        let r = self.ask(|tx| Command::RecoverNodes(nodes, tx)).await?;
        r.map_err(|message| MemberError::Request { member: self.inner.name.clone(), message })
    }

    /// Change the node count or per-node resources.
    pub async fn set_capacity(&self, change: CapacityChange) -> Result<(), MemberError> {
        let r = self.ask(|tx| Command::SetCapacity(change, tx)).await?;
        r.map_err(|message| MemberError::Request { member: self.inner.name.clone(), message })
    }

    /// Hide a kind from discovery (it then answers 404), or serve it again.
    pub fn set_hidden(&self, group: &str, plural: &str, hidden: bool) {
        self.inner.api.registry().set_hidden(group, plural, hidden);
        crate::node_kind::ensure(&self.inner.api.registry());
    }

    /// Wait until the simulator has caught up and has nothing queued right now.
    pub async fn idle(&self) -> Result<(), MemberError> {
        self.ask(Command::Idle).await
    }
}

/// Compact the store's history every `interval`, keeping one interval of it (as
/// kube-apiserver compacts etcd every five minutes).
async fn compact_every(store: Arc<dyn Store>, interval: Duration) {
    let mut previous = None;
    loop {
        tokio::time::sleep(interval).await;
        let Ok(now) = store.current_revision().await else { continue };
        if let Some(p) = previous
            && let Err(e) = store.compact(p).await
        {
            tracing::debug!(error = %e, "compacting a member's store failed");
        }
        previous = Some(now);
    }
}
