//! Wiring of Karmada's cluster proxy: `flotilla-member`'s forwarding installed into the API
//! server as the connect subresource `clusters/proxy` (the API server never reaches a member
//! itself; ADR 0006).

use std::sync::Arc;

use axum::http::Method;
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, Connecter};
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, Identity};
use flotilla_member::proxy::{Caller, ClusterProxy, ProxyConfig, ProxyError, ProxyRequest};
use futures::future::BoxFuture;

/// The identity the proxy reads Clusters' credential Secrets with.
const PROXY_USER: &str = "system:flotilla:cluster-proxy";

struct ProxyConnecter(Arc<ClusterProxy>);

fn status_of(e: ProxyError) -> ConnectError {
    match e {
        ProxyError::NotACluster(_) | ProxyError::PullMode { .. } | ProxyError::BadRequest { .. } => ConnectError::Unsupported(e.to_string()),
        ProxyError::Access { .. } | ProxyError::Unreachable { .. } | ProxyError::Timeout { .. } => ConnectError::Unavailable(e.to_string()),
    }
}

impl Connecter for ProxyConnecter {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let proxy = self.0.clone();
        Box::pin(async move {
            let cluster: Cluster = serde_json::from_value(r.object).map_err(|e| status_of(ProxyError::NotACluster(e.to_string())))?;
            let caller = Caller { user: r.user.user, groups: r.user.groups };
            let req = ProxyRequest { method: r.method, path: r.path, query: r.query, headers: r.headers, body: r.body, caller: Some(caller) };
            let answer = proxy.forward(&cluster, req).await.map_err(status_of)?;
            Ok(ConnectResponse { status: answer.status, headers: answer.headers, body: answer.body })
        })
    }
}

/// Serve `cluster.karmada.io/v1alpha1` `clusters/{name}/proxy/{path...}` on `api`.
pub fn install(api: &ApiServer, config: ProxyConfig) {
    let identity = Identity::user(PROXY_USER, &["system:masters"]);
    let control_plane = kube::Client::new(InProcess::new(api.detached_router(), identity), "default");
    let proxy = Arc::new(ClusterProxy::new(control_plane, config));
    api.install_connect(ConnectSubresource {
        group: "cluster.karmada.io".into(),
        resource: "clusters".into(),
        subresource: "proxy".into(),
        kind: "ClusterProxyOptions".into(),
        methods: vec![Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::HEAD, Method::OPTIONS],
        handler: Arc::new(ProxyConnecter(proxy)),
    });
}
