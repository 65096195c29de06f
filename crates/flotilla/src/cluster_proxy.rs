//! Wiring of Karmada's cluster proxy and of the pull agents' tunnels: `flotilla-member`'s
//! forwarding installed into the API server as the connect subresource `clusters/proxy`, and its
//! tunnel registry as `clusters/tunnel`, which only a Pull cluster's own agent may open (the API
//! server never reaches a member itself; ADRs 0006, 0030).

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use flotilla_api::certificates::agent_user;
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, Connecter};
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, Identity};
use flotilla_member::proxy::{Caller, ClusterProxy, ProxyConfig, ProxyError, ProxyRequest, Upgrade};
use flotilla_member::tunnel::{self, TunnelConfig, TunnelError, Tunnels};
use futures::StreamExt;
use futures::future::BoxFuture;

/// The identity the proxy reads Clusters' credential Secrets with.
const PROXY_USER: &str = "system:flotilla:cluster-proxy";

struct ProxyConnecter(Arc<ClusterProxy>);

fn tunnel_status(e: TunnelError) -> ConnectError {
    match e {
        TunnelError::Claimed { .. } | TunnelError::Opening { .. } => ConnectError::Conflict(e.to_string()),
        TunnelError::NotConnected { .. } | TunnelError::Failed { .. } | TunnelError::Timeout { .. } => ConnectError::Unavailable(e.to_string()),
    }
}

fn status_of(e: ProxyError) -> ConnectError {
    match e {
        ProxyError::NotACluster(_) | ProxyError::NoCaller { .. } | ProxyError::BadRequest { .. } => ConnectError::Unsupported(e.to_string()),
        ProxyError::Access { .. } | ProxyError::Unreachable { .. } | ProxyError::Timeout { .. } => ConnectError::Unavailable(e.to_string()),
        ProxyError::Tunnel(e) => tunnel_status(e),
    }
}

fn cluster_of(object: serde_json::Value) -> Result<Cluster, ConnectError> {
    serde_json::from_value(object).map_err(|e| status_of(ProxyError::NotACluster(e.to_string())))
}

impl Connecter for ProxyConnecter {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let proxy = self.0.clone();
        Box::pin(async move {
            let cluster = cluster_of(r.object)?;
            let caller = Caller { user: r.user.user, groups: r.user.groups };
            let upgrade = r.upgrade.map(|u| Upgrade { protocol: u.protocol, on_upgrade: u.on_upgrade });
            let req = ProxyRequest { method: r.method, path: r.path, query: r.query, headers: r.headers, body: r.body, caller: Some(caller), upgrade };
            let answer = proxy.forward(&cluster, req).await.map_err(status_of)?;
            Ok(ConnectResponse { status: answer.status, headers: answer.headers, body: answer.body })
        })
    }
}

/// `clusters/{name}/tunnel`: a Pull cluster's agent upgrades its connection to the tunnel.
struct TunnelConnecter(Arc<Tunnels>);

impl Connecter for TunnelConnecter {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let tunnels = self.0.clone();
        Box::pin(async move {
            let cluster = cluster_of(r.object)?;
            let name = cluster.metadata.name.clone().unwrap_or_default();
            if cluster.spec.sync_mode != ClusterSyncMode::Pull {
                return Err(ConnectError::Unsupported(format!("cluster {name} is in Push mode: only a Pull cluster's agent opens a tunnel")));
            }
            let agent = agent_user(&name);
            if r.user.user != agent {
                return Err(ConnectError::Forbidden(format!("only the agent of cluster {name} ({agent}) may open its tunnel, not {}", r.user.user)));
            }
            let upgrade = match r.upgrade {
                Some(u) if u.protocol.eq_ignore_ascii_case(tunnel::PROTOCOL) => u,
                _ => return Err(ConnectError::Unsupported(format!("a tunnel is opened with Connection: Upgrade and Upgrade: {}", tunnel::PROTOCOL))),
            };
            let claim = tunnels.claim(&name).await.map_err(tunnel_status)?;
            tokio::spawn(async move {
                if let Err(e) = claim.open_on(upgrade.on_upgrade, agent).await {
                    tracing::info!(cluster = %name, error = %e, "agent tunnel ended");
                }
            });
            let mut headers = HeaderMap::new();
            headers.insert(axum::http::header::UPGRADE, HeaderValue::from_static(tunnel::PROTOCOL));
            Ok(ConnectResponse { status: StatusCode::SWITCHING_PROTOCOLS, headers, body: futures::stream::empty().boxed() })
        })
    }
}

/// Serve `cluster.karmada.io/v1alpha1` `clusters/{name}/proxy/{path...}` and
/// `clusters/{name}/tunnel` on `api`.
pub fn install(api: &ApiServer, config: ProxyConfig, tunnel: TunnelConfig) -> Arc<Tunnels> {
    let identity = Identity::user(PROXY_USER, &["system:masters"]);
    let control_plane = kube::Client::new(InProcess::new(api.detached_router(), identity), "default");
    let tunnels = Tunnels::new(tunnel);
    let proxy = Arc::new(ClusterProxy::new(control_plane, config, tunnels.clone()));
    api.install_connect(ConnectSubresource {
        group: "cluster.karmada.io".into(),
        target: flotilla_apiserver::connect::ConnectTarget::Stored,
        resource: "clusters".into(),
        subresource: "proxy".into(),
        kind: "ClusterProxyOptions".into(),
        methods: vec![Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::HEAD, Method::OPTIONS],
        handler: Arc::new(ProxyConnecter(proxy)),
    });
    api.install_connect(ConnectSubresource {
        group: "cluster.karmada.io".into(),
        target: flotilla_apiserver::connect::ConnectTarget::Stored,
        resource: "clusters".into(),
        subresource: tunnel::SUBRESOURCE.into(),
        kind: "ClusterTunnelOptions".into(),
        methods: vec![Method::GET],
        handler: Arc::new(TunnelConnecter(tunnels.clone())),
    });
    tunnels
}
