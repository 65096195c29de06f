//! The API server's settings: [`ApiServerConfig`] (every timing configurable), how requests are
//! authorized, and what `/version` reports. Plain data; re-exported from [`crate::server`].

use std::time::Duration;

/// What `/version` reports.
#[derive(Clone, Debug)]
pub struct VersionInfo {
    pub major: String,
    pub minor: String,
    pub git_version: String,
}

impl Default for VersionInfo {
    fn default() -> Self {
        // 1.33: the machine's kubectl dispatcher runs kubectl.1.NN for a server of minor NN and
        // its own embedded 1.32 for anything newer, so 1.33 is the newest kubectl it can pick.
        // Flotilla's recorded data (defaults, schemas, protobuf layouts) is kube-apiserver
        // 1.37's, a superset of what a 1.33 client uses; kubectl 1.33 sends protobuf bodies for
        // typed requests, which src/protobuf.rs decodes for every built-in kind.
        VersionInfo { major: "1".into(), minor: "33".into(), git_version: "v1.33.0-flotilla".into() }
    }
}

/// How requests are authorized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AuthorizationMode {
    /// RBAC from Roles, ClusterRoles and bindings; `system:masters` is a super-user group.
    #[default]
    Rbac,
    /// Every authenticated user may do everything.
    AlwaysAllowAuthenticated,
}

/// Settings of the API server. Every timing is configurable.
#[derive(Clone, Debug)]
pub struct ApiServerConfig {
    /// The address clients use to reach this server: the `serverAddress` in `/api`, and the
    /// endpoint of the `default/kubernetes` Service when that is reconciled
    /// ([`crate::server::ApiServer::start_kubernetes_service`]).
    pub advertise: std::net::SocketAddr,
    /// The largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Non-watch requests in flight before new ones get 429.
    pub max_in_flight: usize,
    /// Non-watch requests taking longer get 504.
    pub request_timeout: Duration,
    /// How often a watch with `allowWatchBookmarks` gets a bookmark.
    pub bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` ends after a random time between this and twice it.
    pub min_watch_timeout: Duration,
    /// How often the CRD worker retries a CRD whose objects are still being deleted.
    pub crd_retry: Duration,
    pub authorization: AuthorizationMode,
    pub version: VersionInfo,
    /// Create and reconcile kube-apiserver's bootstrap RBAC policy (and Karmada's view/edit
    /// roles) at start-up ([`crate::rbac_bootstrap`]); off, the permissions every
    /// authenticated user has are built in (simulated members).
    pub bootstrap_rbac: bool,
    /// The built-in admission chain's settings (karmada-webhook's flags).
    pub admission: flotilla_api::admission::Settings,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        ApiServerConfig {
            advertise: std::net::SocketAddr::from(([127, 0, 0, 1], 6443)),
            max_body_bytes: 3 * 1024 * 1024,
            max_in_flight: 400,
            request_timeout: Duration::from_secs(60),
            bookmark_interval: Duration::from_secs(60),
            min_watch_timeout: Duration::from_secs(1800),
            crd_retry: Duration::from_secs(1),
            authorization: AuthorizationMode::default(),
            version: VersionInfo::default(),
            bootstrap_rbac: true,
            admission: Default::default(),
        }
    }
}
