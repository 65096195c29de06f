//! The state one API server shares across requests: the store, the served-resource registry,
//! the configuration, the authorizer and RBAC index, tokens, metrics, caches, and the
//! semaphores of overload protection. Everything above this layer reaches the server through
//! an `Arc<ApiState>`; this module imports nothing that does.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use flotilla_store::Store;
use tokio::sync::Semaphore;

use crate::auth::{AllowAuthenticated, SharedAuthorizer, TokenFile};
use crate::config::{ApiServerConfig, AuthorizationMode};
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::resources::Registry;

pub(crate) struct ApiState {
    pub store: Arc<dyn Store>,
    pub registry: Arc<Registry>,
    pub config: ApiServerConfig,
    pub authz: SharedAuthorizer,
    pub rbac: Arc<crate::rbac::Rbac>,
    pub tokens: parking_lot::RwLock<TokenFile>,
    /// The impersonation mode that last worked for each caller.
    pub impersonation_modes: crate::impersonation::LastModes,
    pub metrics: Metrics,
    /// Held by `crd::sync`, so CRD syncs publish served resources in order.
    pub crd_sync: tokio::sync::Mutex<()>,
    /// The last rendered `/openapi/v2` document.
    pub openapi_v2: crate::openapi_v2::Cache,
    /// The key TokenRequest tokens are signed with, read from the store (or made) on first use.
    sa_key: tokio::sync::OnceCell<Arc<crate::service_account_jwt::SigningKey>>,
    pub(crate) in_flight: Semaphore,
    /// Permits for work whose cost the request controls (JSON and strategic merge patches): one
    /// per core, run on the blocking pool.
    heavy: Arc<Semaphore>,
    pub(crate) ready: AtomicBool,
    /// Static sites installed by the binary (the dashboard), served before authorization.
    pub(crate) sites: parking_lot::RwLock<Vec<Arc<crate::site::StaticSite>>>,
}

impl ApiState {
    pub(crate) fn new(store: Arc<dyn Store>, config: ApiServerConfig) -> ApiState {
        let in_flight = Semaphore::new(config.max_in_flight.max(1));
        let rbac = Arc::new(crate::rbac::Rbac::default());
        let authz: SharedAuthorizer = match config.authorization {
            AuthorizationMode::Rbac => rbac.clone(),
            AuthorizationMode::AlwaysAllowAuthenticated => Arc::new(AllowAuthenticated),
        };
        ApiState {
            store,
            registry: Arc::new(Registry::new()),
            config,
            authz,
            rbac,
            tokens: parking_lot::RwLock::new(TokenFile::default()),
            impersonation_modes: Default::default(),
            metrics: Metrics::new(),
            crd_sync: tokio::sync::Mutex::new(()),
            openapi_v2: Default::default(),
            sa_key: tokio::sync::OnceCell::new(),
            in_flight,
            heavy: Arc::new(Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()))),
            ready: AtomicBool::new(false),
            sites: parking_lot::RwLock::new(Vec::new()),
        }
    }

    /// The static site that owns `path`, if any.
    pub(crate) fn site_of(&self, path: &str) -> Option<Arc<crate::site::StaticSite>> {
        self.sites.read().iter().find(|s| s.owns(path)).cloned()
    }

    /// Runs `work` on the blocking pool once one of [`ApiState::heavy`]'s permits is free.
    pub(crate) async fn off_the_workers<T: Send + 'static>(&self, work: impl FnOnce() -> ApiResult<T> + Send + 'static) -> ApiResult<T> {
        let permit = self.heavy.clone().acquire_owned().await.map_err(|_| ApiError::unavailable("the server is shutting down"))?;
        let gauge = self.metrics.heavy_in_flight.clone();
        gauge.inc();
        let result = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await;
        gauge.dec();
        result.map_err(|e| ApiError::internal(format!("a worker failed: {e}")))?
    }

    /// The service account token signing key (ADR 0015).
    pub(crate) async fn service_account_key(&self) -> ApiResult<Arc<crate::service_account_jwt::SigningKey>> {
        self.sa_key
            .get_or_try_init(|| async { crate::service_account_jwt::SigningKey::load_or_create(self.store.as_ref()).await.map(Arc::new) })
            .await
            .cloned()
            .map_err(ApiError::internal)
    }

    /// The key to verify tokens with, if one was ever made: a bearer token alone never makes
    /// the server write one.
    pub(crate) async fn service_account_verifying_key(&self) -> Option<Arc<crate::service_account_jwt::SigningKey>> {
        if let Some(k) = self.sa_key.get() {
            return Some(k.clone());
        }
        let k = Arc::new(crate::service_account_jwt::SigningKey::load(self.store.as_ref()).await.ok()??);
        Some(self.sa_key.get_or_init(|| async { k }).await.clone())
    }
}
