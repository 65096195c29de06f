//! Connect subresources: `/{resource}/{name}/{subresource}/{path...}` requests the API server
//! authorizes and then hands to a handler installed from outside (kube-apiserver's
//! `rest.Connecter`; Karmada's `clusters/{name}/proxy`).
//!
//! The API server keeps its invariant — it never reaches a member cluster itself: it checks
//! the caller's permission on `resource/subresource`, reads the named object from its store
//! (404 when absent), and passes the object with the request to the [`Connecter`] the binary
//! installed. What the handler returns is streamed back unchanged; a [`ConnectError`] becomes
//! a `Status`. Connect requests are long-running, as in kube-apiserver: no request deadline
//! and no in-flight slot, so a proxied watch can last.
//!
//! Upgrades (exec, attach, port-forward, a pull agent's tunnel) pass through too: an HTTP/1.1
//! request with `Connection: Upgrade` reaches the handler with its [`ConnectUpgrade`] (the
//! protocol asked for and hyper's handle on the connection); a handler that answers `101`
//! takes the connection over once the answer is sent. Upgrades need HTTP/1.1 (HTTP/2 has no
//! `Upgrade`), as on kube-apiserver.
//!
//! This module is the seam: the types the binary implements and installs, below the resource
//! table that holds them. `connect_request.rs` matches paths and serves the requests.

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::auth::Identity;
use crate::error::ApiError;

/// One request for a connect subresource, as the handler sees it.
#[derive(Debug)]
pub struct ConnectRequest {
    pub method: Method,
    /// The object named in the URL, as stored (e.g. the `Cluster`).
    pub object: Value,
    /// What follows the subresource in the URL, still percent-encoded; starts with `/`.
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// The caller's headers, without credentials and hop-by-hop headers.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Who asked (already authorized for the subresource).
    pub user: Identity,
    /// The connection upgrade asked for, if any.
    pub upgrade: Option<ConnectUpgrade>,
}

/// An upgrade request's protocol and its connection, which becomes the handler's once it has
/// answered `101 Switching Protocols` (await `on_upgrade`).
pub struct ConnectUpgrade {
    /// The `Upgrade` header as sent (`websocket`, `SPDY/3.1`, …).
    pub protocol: String,
    pub on_upgrade: hyper::upgrade::OnUpgrade,
}

impl std::fmt::Debug for ConnectUpgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectUpgrade").field("protocol", &self.protocol).finish_non_exhaustive()
    }
}

/// A body streamed back to the caller.
pub type ConnectBody = BoxStream<'static, Result<Bytes, Box<dyn std::error::Error + Send + Sync>>>;

/// The handler's answer: passed to the caller as is (hop-by-hop headers dropped; a `101` keeps
/// its `Upgrade` header and gets `Connection: Upgrade`).
pub struct ConnectResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: ConnectBody,
}

impl std::fmt::Debug for ConnectResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectResponse").field("status", &self.status).finish_non_exhaustive()
    }
}

/// Why a handler could not serve a request; each becomes a `Status` in [`ConnectError::status`].
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The object cannot serve this subresource at all (400 BadRequest).
    #[error("{0}")]
    Unsupported(String),
    /// The request cannot be served as asked (400 BadRequest): a bad option, a part of the
    /// object that is not there or not ready (a pod's container that has not started).
    #[error("{0}")]
    BadRequest(String),
    /// The target cannot be reached now, or did not answer in time (503 ServiceUnavailable).
    #[error("{0}")]
    Unavailable(String),
    /// The caller may not do this to this object, whatever RBAC says (403 Forbidden).
    #[error("{0}")]
    Forbidden(String),
    /// The object is taken by someone else (409 Conflict).
    #[error("{0}")]
    Conflict(String),
}

impl ConnectError {
    pub(crate) fn status(&self) -> ApiError {
        match self {
            ConnectError::Unsupported(m) | ConnectError::BadRequest(m) => ApiError::bad_request(m.clone()),
            // No Retry-After: client-go would silently retry a dead member ten times.
            ConnectError::Unavailable(m) => ApiError::new(503, "ServiceUnavailable", m.clone()),
            ConnectError::Forbidden(m) => ApiError::new(403, "Forbidden", m.clone()),
            ConnectError::Conflict(m) => ApiError::new(409, "Conflict", m.clone()),
        }
    }
}

/// Serves a connect subresource. Installed by the binary; the API server holds it.
pub trait Connecter: Send + Sync + 'static {
    fn connect(&self, request: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>>;
}

/// What the name in a connect URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectTarget {
    /// An object of the resource, read from the store (404 when absent) and passed to the
    /// handler as [`ConnectRequest::object`].
    Stored,
    /// Nothing stored: the resource exists for its connect subresources only (karmada-search's
    /// `search` and `proxying`), cluster-scoped, served at `version` as `kind` with no verb of
    /// its own. The handler gets `{"metadata": {"name": <name>}}` as the object.
    Named { version: String, kind: String },
}

/// The subresource that matches any: [`ConnectSubresource::subresource`] set to this passes
/// every `/{resource}/{name}/{anything}/...` to the handler, with `/{anything}/...` as the path
/// (karmada-search's `search/cache/api/v1/pods`).
pub const ANY_SUBRESOURCE: &str = "*";

/// A connect subresource and its handler, e.g. `cluster.karmada.io` `clusters/proxy`.
#[derive(Clone)]
pub struct ConnectSubresource {
    pub group: String,
    /// The resource's plural.
    pub resource: String,
    /// The subresource, or [`ANY_SUBRESOURCE`].
    pub subresource: String,
    /// A stored object, or a name only.
    pub target: ConnectTarget,
    /// The options kind discovery names (`ClusterProxyOptions`).
    pub kind: String,
    /// The HTTP methods accepted; discovery lists their verbs.
    pub methods: Vec<Method>,
    pub handler: Arc<dyn Connecter>,
}

impl std::fmt::Debug for ConnectSubresource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnectSubresource({}/{}/{})", self.group, self.resource, self.subresource)
    }
}

impl ConnectSubresource {
    /// The verbs discovery lists, as kube-apiserver derives them from the connect methods
    /// (HEAD and OPTIONS have none), sorted.
    pub fn verbs(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self
            .methods
            .iter()
            .filter_map(|m| match m.as_str() {
                "GET" => Some("get"),
                "POST" => Some("create"),
                "PUT" => Some("update"),
                "PATCH" => Some("patch"),
                "DELETE" => Some("delete"),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}
