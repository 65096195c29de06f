//! Forwarding one request to a member as Flotilla (Karmada's cluster proxy). A Push member is
//! reached directly: the target is the Cluster's `apiEndpoint`, trust its `caBundle`, the
//! credential the stored member token — never the caller's. A Pull member is reached through
//! its agent's tunnel ([`crate::tunnel`]), always as the caller (impersonated by the agent's
//! member identity). The answer streams back unchanged (a watch lasts as long as both ends
//! keep it open); an upgrade (exec, attach, port-forward) is carried out with the member and
//! the two connections spliced once both have switched protocols.
//!
//! When the Cluster has an `impersonatorSecretRef` (clusters Karmada's tools registered), the
//! request authenticates with that token and impersonates the caller (`Impersonate-User`, and
//! `Impersonate-Group` for each group but `system:authenticated`/`system:unauthenticated`), as
//! Karmada does: the member's RBAC then applies to the caller. `flotilla join` creates one (an
//! identity that may only impersonate); a Cluster registered without one is reached as
//! Flotilla's identity and only the control plane's `clusters/proxy` check applies (ADR 0006).

use std::time::Duration;

use bytes::Bytes;
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::BodyExt;

use std::sync::Arc;

use crate::MemberError;
use crate::access::{Clients, MemberAccess};
use crate::tunnel::{Tunnels, chain, splice};

/// How long to wait for a member.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// To open a connection.
    pub connect_timeout: Duration,
    /// From sending the request to the response headers (a watch's events may then take as
    /// long as they take).
    pub response_timeout: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig { connect_timeout: Duration::from_secs(10), response_timeout: Duration::from_secs(30) }
    }
}

/// One request for a member.
#[derive(Debug)]
pub struct ProxyRequest {
    pub method: Method,
    /// The member path, percent-encoded, starting with `/`.
    pub path: String,
    pub query: Option<String>,
    /// Headers to pass on (the caller's credentials already removed).
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Who asked, for impersonation.
    pub caller: Option<Caller>,
    /// The caller's connection upgrade, if it asked for one.
    pub upgrade: Option<Upgrade>,
}

/// An upgrade asked for: the protocol, and the caller's connection once the answer is sent.
pub struct Upgrade {
    pub protocol: String,
    pub on_upgrade: hyper::upgrade::OnUpgrade,
}

impl std::fmt::Debug for Upgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgrade").field("protocol", &self.protocol).finish_non_exhaustive()
    }
}

/// The user a request is made for.
#[derive(Clone, Debug)]
pub struct Caller {
    pub user: String,
    pub groups: Vec<String>,
}

/// Groups every caller has; Karmada does not pass them on.
const IMPLICIT_GROUPS: &[&str] = &["system:authenticated", "system:unauthenticated"];

/// The impersonation headers for `caller`.
pub fn impersonation_headers(caller: &Caller) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::new();
    let value = |s: &str| http::HeaderValue::from_str(s).map_err(|_| format!("{s:?} cannot be sent in a header"));
    h.insert("impersonate-user", value(&caller.user)?);
    for g in caller.groups.iter().filter(|g| !IMPLICIT_GROUPS.contains(&g.as_str())) {
        h.append("impersonate-group", value(g)?);
    }
    Ok(h)
}

/// The member's answer.
pub struct ProxyResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: BoxStream<'static, Result<Bytes, Box<dyn std::error::Error + Send + Sync>>>,
}

impl std::fmt::Debug for ProxyResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyResponse").field("status", &self.status).finish_non_exhaustive()
    }
}

/// Why a request could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the object is not a Cluster: {0}")]
    NotACluster(String),
    #[error("{0}")]
    Tunnel(crate::tunnel::TunnelError),
    #[error("cluster {cluster}: a request through an agent's tunnel must name its caller")]
    NoCaller { cluster: String },
    #[error("cluster {cluster} cannot be reached through the proxy: {source}")]
    Access { cluster: String, source: MemberError },
    #[error("error trying to reach cluster {cluster} at {endpoint}: {cause}")]
    Unreachable { cluster: String, endpoint: String, cause: String },
    #[error("cluster {cluster} at {endpoint} did not answer within {after:?}")]
    Timeout { cluster: String, endpoint: String, after: Duration },
    #[error("invalid request for cluster {cluster}: {reason}")]
    BadRequest { cluster: String, reason: String },
}

/// The proxy: reads the member credential through a control-plane client and forwards.
pub struct ClusterProxy {
    control_plane: kube::Client,
    clients: Clients,
    config: ProxyConfig,
    tunnels: Arc<Tunnels>,
}

impl std::fmt::Debug for ClusterProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterProxy").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The request for the member: `req`'s path, query and headers, impersonating `caller` if given.
fn member_request(req: &ProxyRequest, caller: Option<&Caller>) -> Result<http::request::Builder, String> {
    let uri = match &req.query {
        Some(q) if !q.is_empty() => format!("{}?{q}", req.path),
        _ => req.path.clone(),
    };
    let mut builder = http::Request::builder().uri(&uri);
    for (k, v) in &req.headers {
        builder = builder.header(k, v);
    }
    if let Some(caller) = caller {
        for (k, v) in &impersonation_headers(caller)? {
            builder = builder.header(k, v);
        }
    }
    Ok(builder)
}

/// A member's answer streamed back as it comes.
fn streamed<B>(answer: http::Response<B>) -> ProxyResponse
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (parts, body) = answer.into_parts();
    let body = body.into_data_stream().map(|r| r.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)).boxed();
    ProxyResponse { status: parts.status, headers: parts.headers, body }
}

/// The member switched protocols: the caller is answered `101` with the member's headers and
/// the two connections spliced once the caller's is handed over.
fn switched<B>(answer: &mut http::Response<B>, upgrade: Upgrade, what: String) -> ProxyResponse {
    let upstream = hyper::upgrade::on(&mut *answer);
    let mut headers = answer.headers().clone();
    if let Ok(protocol) = http::HeaderValue::from_str(&upgrade.protocol) {
        headers.entry(http::header::UPGRADE).or_insert(protocol);
    }
    tokio::spawn(splice(upgrade.on_upgrade, upstream, what));
    ProxyResponse { status: StatusCode::SWITCHING_PROTOCOLS, headers, body: futures::stream::empty().boxed() }
}

impl ClusterProxy {
    /// A proxy reaching Pull members through `tunnels`.
    pub fn new(control_plane: kube::Client, config: ProxyConfig, tunnels: Arc<Tunnels>) -> ClusterProxy {
        ClusterProxy { control_plane, clients: Clients::default(), config, tunnels }
    }

    /// Forward `req` to the member `cluster` describes.
    pub async fn forward(&self, cluster: &Cluster, req: ProxyRequest) -> Result<ProxyResponse, ProxyError> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        if cluster.spec.sync_mode == ClusterSyncMode::Pull {
            return self.through_tunnel(&name, req).await;
        }
        let access = MemberAccess::from_cluster(&self.control_plane, cluster).await.map_err(|source| ProxyError::Access { cluster: name.clone(), source })?;
        let (access, impersonate) = match access.impersonator(&self.control_plane, cluster).await {
            Ok(Some(imp)) => (imp, req.caller.as_ref()),
            Ok(None) => (access, None),
            Err(source) => return Err(ProxyError::Access { cluster: name, source }),
        };
        let connect_timeout = self.config.connect_timeout;
        let client = self
            .clients
            .get_or_build(&access, |a| a.streaming_client(connect_timeout))
            .map_err(|source| ProxyError::Access { cluster: name.clone(), source })?;
        let mut builder =
            member_request(&req, impersonate).map_err(|reason| ProxyError::BadRequest { cluster: name.clone(), reason })?.method(req.method.clone());
        if let Some(u) = &req.upgrade {
            builder = builder.header(http::header::CONNECTION, "Upgrade").header(http::header::UPGRADE, &u.protocol);
        }
        let request =
            builder.body(kube::client::Body::from(req.body.clone())).map_err(|e| ProxyError::BadRequest { cluster: name.clone(), reason: e.to_string() })?;
        let endpoint = access.endpoint.clone();
        let mut answer = match tokio::time::timeout(self.config.response_timeout, client.send(request)).await {
            Err(_) => return Err(ProxyError::Timeout { cluster: name, endpoint, after: self.config.response_timeout }),
            Ok(Err(e)) => {
                self.clients.forget(&name);
                let cause = chain(&e);
                tracing::debug!(cluster = %name, %endpoint, path = %req.path, %cause, "proxied request failed");
                return Err(ProxyError::Unreachable { cluster: name, endpoint, cause });
            }
            Ok(Ok(r)) => r,
        };
        tracing::debug!(cluster = %name, path = %req.path, status = answer.status().as_u16(), "proxied request answered");
        match req.upgrade {
            Some(u) if answer.status() == StatusCode::SWITCHING_PROTOCOLS => Ok(switched(&mut answer, u, format!("{name}{}", req.path))),
            _ => Ok(streamed(answer)),
        }
    }

    /// Forward `req` to a Pull member through its agent's tunnel, as the caller.
    async fn through_tunnel(&self, name: &str, req: ProxyRequest) -> Result<ProxyResponse, ProxyError> {
        let caller = req.caller.as_ref().ok_or_else(|| ProxyError::NoCaller { cluster: name.to_string() })?;
        let builder = member_request(&req, Some(caller)).map_err(|reason| ProxyError::BadRequest { cluster: name.to_string(), reason })?;
        let builder = match &req.upgrade {
            Some(u) => {
                let protocol = hyper::ext::Protocol::from(u.protocol.as_str());
                builder.method(Method::CONNECT).header(crate::tunnel::METHOD_HEADER, req.method.as_str()).extension(protocol)
            }
            None => builder.method(req.method.clone()),
        };
        let request = builder
            .body(crate::tunnel::TunnelBody::new(req.body.clone()))
            .map_err(|e| ProxyError::BadRequest { cluster: name.to_string(), reason: e.to_string() })?;
        let mut answer = match tokio::time::timeout(self.config.response_timeout, self.tunnels.send(name, request)).await {
            Err(_) => {
                return Err(ProxyError::Timeout { cluster: name.to_string(), endpoint: "its agent's tunnel".into(), after: self.config.response_timeout });
            }
            Ok(Err(e)) => return Err(ProxyError::Tunnel(e)),
            Ok(Ok(r)) => r,
        };
        tracing::debug!(cluster = %name, path = %req.path, status = answer.status().as_u16(), "request through the tunnel answered");
        match req.upgrade {
            // The agent's member switched protocols (200 to the extended CONNECT): so does the caller.
            Some(u) if answer.status() == StatusCode::OK => Ok(switched(&mut answer, u, format!("{name}{}", req.path))),
            _ => Ok(streamed(answer)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_is_impersonated_without_the_implicit_groups() {
        let caller = Caller { user: "dave".into(), groups: vec!["devs".into(), "system:authenticated".into(), "ops".into()] };
        let h = impersonation_headers(&caller).unwrap();
        assert_eq!(h["impersonate-user"], "dave");
        let groups: Vec<&str> = h.get_all("impersonate-group").iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(groups, ["devs", "ops"]);
        assert!(impersonation_headers(&Caller { user: "bad\nname".into(), groups: vec![] }).is_err());
    }
}
