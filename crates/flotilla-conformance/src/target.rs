//! Where cases run: Flotilla's router in-process (tower `oneshot`, no sockets) or a real
//! kube-apiserver over HTTPS (a `kube::Client` from a kubeconfig, with its etcd reachable for
//! the compaction step).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Body;
use bytes::Bytes;
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_kube_controllers::garbage_collector;
use flotilla_store::Store;
use http::{Request, Response};

/// Why a target could not be reached or set up.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("starting Flotilla's API server: {0}")]
    Bootstrap(String),
    #[error("loading kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("sending {method} {uri}: {message}")]
    Send { method: String, uri: String, message: String },
    #[error("compacting storage: {0}")]
    Compact(String),
}

/// A request extension: send the request as this bearer token alone, not with the target's
/// own (admin) credential.
#[derive(Clone, Debug)]
pub struct BearerToken(pub String);

/// A server cases can be sent to.
#[async_trait]
pub trait Target: Send + Sync {
    /// Send one request (path and query only; the target adds scheme, host and credentials:
    /// its own, or only the [`BearerToken`] the request carries).
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Body>, TargetError>;
    /// Compact the storage up to its current revision.
    async fn compact(&self) -> Result<(), TargetError>;
}

/// Flotilla's API server on a fresh memory store, called as the admin user, with Flotilla's
/// garbage collector running beside it (the recorder's member runs kube-controller-manager's).
#[derive(Clone)]
pub struct InProcess {
    router: axum::Router,
    store: Arc<dyn Store>,
    identity: Identity,
    _collector: Arc<AbortOnDrop>,
}

/// Stops the garbage collector when the last handle to the target goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").finish()
    }
}

impl InProcess {
    /// A bootstrapped server with the default configuration. The identity matches testenv's
    /// admin certificate (CN `admin`, O `system:masters`). The garbage collector calls the same
    /// router as the user kube-controller-manager's collector is (a `gc` case's dependents are
    /// deleted by it, as on the real server); it runs until the target is dropped.
    pub async fn start() -> Result<InProcess, TargetError> {
        let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).map_err(|e| TargetError::Bootstrap(e.to_string()))?);
        let api = ApiServer::new(store.clone(), ApiServerConfig::default());
        api.bootstrap().await.map_err(|e| TargetError::Bootstrap(format!("{e:?}")))?;
        let router = api.router();
        let gc_identity = Identity::user("system:kube-controller-manager", &["system:masters"]);
        let client = kube::Client::new(flotilla_apiserver::inproc::InProcess::new(router.clone(), gc_identity), "default");
        let rt = flotilla_runtime::Runtime::new(client.clone());
        let collector = tokio::spawn(garbage_collector::run(client, rt, garbage_collector::Config::default()));
        Ok(InProcess { router, store, identity: Identity::user("admin", &["system:masters"]), _collector: Arc::new(AbortOnDrop(collector)) })
    }
}

#[async_trait]
impl Target for InProcess {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Body>, TargetError> {
        let (mut parts, body) = req.into_parts();
        match parts.extensions.remove::<BearerToken>() {
            // The router authenticates it, as a request over TLS without a client certificate.
            Some(BearerToken(token)) => {
                let value = http::HeaderValue::try_from(format!("Bearer {token}")).map_err(|e| TargetError::Send {
                    method: parts.method.to_string(),
                    uri: parts.uri.to_string(),
                    message: e.to_string(),
                })?;
                parts.headers.insert(http::header::AUTHORIZATION, value);
            }
            None => {
                parts.extensions.insert(self.identity.clone());
            }
        }
        let req = Request::from_parts(parts, Body::from(body));
        let resp = tower::ServiceExt::oneshot(self.router.clone(), req).await;
        Ok(resp.unwrap_or_else(|never| match never {}))
    }

    async fn compact(&self) -> Result<(), TargetError> {
        let rev = self.store.current_revision().await.map_err(|e| TargetError::Compact(e.to_string()))?;
        self.store.compact(rev).await.map_err(|e| TargetError::Compact(e.to_string()))
    }
}

/// A real kube-apiserver.
#[derive(Clone)]
pub struct Remote {
    client: kube::Client,
    /// The kubeconfig's connection settings, for clients that call as a bearer token.
    config: kube::Config,
    /// A client per bearer token cases have called with.
    token_clients: Arc<std::sync::Mutex<std::collections::HashMap<String, kube::Client>>>,
    etcd: Option<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("etcd", &self.etcd).finish()
    }
}

impl Remote {
    /// Connect with a kubeconfig's current context. Client-side retries are off: a 429 or 504
    /// must be recorded as answered.
    pub async fn connect(kubeconfig: &Path, etcd: Option<String>) -> Result<Remote, TargetError> {
        let err = |message: String| TargetError::Kubeconfig { path: kubeconfig.display().to_string(), message };
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
        let mut config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.map_err(|e| err(e.to_string()))?;
        config.default_retry = false;
        config.read_timeout = None;
        let client = kube::Client::try_from(config.clone()).map_err(|e| err(e.to_string()))?;
        Ok(Remote { client, config, token_clients: Default::default(), etcd })
    }

    /// A client that presents only `token` (the server's CA kept, the client certificate not).
    fn client_for(&self, token: &str) -> Result<kube::Client, String> {
        let mut clients = self.token_clients.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = clients.get(token) {
            return Ok(c.clone());
        }
        let mut config = self.config.clone();
        config.auth_info = kube::config::AuthInfo { token: Some(token.to_string().into()), ..Default::default() };
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        clients.insert(token.to_string(), client.clone());
        Ok(client)
    }
}

#[async_trait]
impl Target for Remote {
    async fn send(&self, req: Request<Bytes>) -> Result<Response<Body>, TargetError> {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let (mut parts, body) = req.into_parts();
        let client = match parts.extensions.remove::<BearerToken>() {
            Some(BearerToken(token)) => self.client_for(&token).map_err(|message| TargetError::Send { method: method.clone(), uri: uri.clone(), message })?,
            None => self.client.clone(),
        };
        let req = Request::from_parts(parts, kube::client::Body::from(body.to_vec()));
        let resp = client.send(req).await.map_err(|e| TargetError::Send { method, uri, message: e.to_string() })?;
        Ok(resp.map(Body::new))
    }

    async fn compact(&self) -> Result<(), TargetError> {
        let url = self.etcd.clone().ok_or_else(|| TargetError::Compact("no etcd endpoint given (--etcd or --ready)".into()))?;
        // The whole keyspace (no prefix), compacted to etcd's head revision and physically.
        let store = flotilla_store::etcd::EtcdStore::connect(flotilla_store::etcd::EtcdConfig::new(vec![url]))
            .await
            .map_err(|e| TargetError::Compact(e.to_string()))?;
        let rev = store.current_revision().await.map_err(|e| TargetError::Compact(e.to_string()))?;
        store.compact(rev).await.map_err(|e| TargetError::Compact(e.to_string()))?;
        Ok(())
    }
}
