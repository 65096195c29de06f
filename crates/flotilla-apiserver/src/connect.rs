//! Connect subresources: `/{resource}/{name}/{subresource}/{path...}` requests the API server
//! authorizes and then hands to a handler installed from outside (kube-apiserver's
//! `rest.Connecter`; Karmada's `clusters/{name}/proxy`).
//!
//! The API server keeps its invariant — it never reaches a member cluster itself: it checks
//! the caller's permission on `resource/subresource`, reads the named object from its store
//! (404 when absent), and passes the object with the request to the [`Connecter`] the binary
//! installed. What the handler returns is streamed back unchanged; a [`ConnectError`] becomes
//! a `Status` here. Connect requests are long-running, as in kube-apiserver: no request
//! deadline and no in-flight slot, so a proxied watch can last.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;

use crate::auth::Identity;
use crate::error::{ApiError, ApiResult};
use crate::request::{Query, ResourcePath};
use crate::resources::Catalog;
use crate::server::Inner;

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
}

/// A body streamed back to the caller.
pub type ConnectBody = BoxStream<'static, Result<Bytes, Box<dyn std::error::Error + Send + Sync>>>;

/// The handler's answer: passed to the caller as is (hop-by-hop headers dropped).
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
    /// The target cannot be reached now, or did not answer in time (503 ServiceUnavailable).
    #[error("{0}")]
    Unavailable(String),
}

impl ConnectError {
    fn status(&self) -> ApiError {
        match self {
            ConnectError::Unsupported(m) => ApiError::bad_request(m.clone()),
            // No Retry-After: client-go would silently retry a dead member ten times.
            ConnectError::Unavailable(m) => ApiError::new(503, "ServiceUnavailable", m.clone()),
        }
    }
}

/// Serves a connect subresource. Installed by the binary; the API server holds it.
pub trait Connecter: Send + Sync + 'static {
    fn connect(&self, request: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>>;
}

/// A connect subresource and its handler, e.g. `cluster.karmada.io` `clusters/proxy`.
#[derive(Clone)]
pub struct ConnectSubresource {
    pub group: String,
    /// The resource's plural.
    pub resource: String,
    pub subresource: String,
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

/// A request path that names an installed connect subresource: the resource path (with the
/// subresource) and the raw rest of the path after it.
pub(crate) fn match_path(catalog: &Catalog, raw_path: &str) -> Option<(ResourcePath, Arc<ConnectSubresource>, String)> {
    if !catalog.has_connects() {
        return None;
    }
    let segments: Vec<&str> = raw_path.split('/').collect();
    // "" / "apis" / g / v / ...   or   "" / "api" / v / ...
    let (group, version, at) = match segments.as_slice() {
        ["", "apis", g, v, ..] => (g.to_string(), v.to_string(), 4),
        ["", "api", v, ..] => (String::new(), v.to_string(), 3),
        _ => return None,
    };
    let rest = &segments[at..];
    // `namespaces/{ns}/{resource}/{name}/{sub}/…` names a namespaced resource; anything else
    // (including `namespaces/{name}/{sub}/…` itself) a cluster-scoped one.
    let mut readings: Vec<(Option<&str>, &[&str])> = Vec::new();
    if rest.len() >= 5 && rest[0] == "namespaces" {
        readings.push((Some(rest[1]), &rest[2..]));
    }
    readings.push((None, rest));
    readings.into_iter().find_map(|(ns, rest)| reading(catalog, &group, &version, ns, rest))
}

fn reading(catalog: &Catalog, group: &str, version: &str, namespace: Option<&str>, rest: &[&str]) -> Option<(ResourcePath, Arc<ConnectSubresource>, String)> {
    let [resource, name, sub, ..] = rest else { return None };
    if name.is_empty() || sub.is_empty() || namespace.is_some_and(str::is_empty) {
        return None;
    }
    let c = catalog.connect(group, resource, sub)?;
    let info = catalog.lookup(group, version, resource)?;
    if info.namespaced != namespace.is_some() {
        return None;
    }
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8().ok().map(|s| s.into_owned());
    let name = decode(name)?;
    let namespace = match namespace {
        Some(ns) => Some(decode(ns)?),
        None => None,
    };
    for n in std::iter::once(&name).chain(namespace.as_ref()) {
        if n == "." || n == ".." || n.contains('/') {
            return None;
        }
    }
    let tail = rest[3..].join("/");
    let p = ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        namespace,
        resource: resource.to_string(),
        name: Some(name),
        subresource: Some(sub.to_string()),
    };
    Some((p, c, format!("/{tail}")))
}

/// Headers never passed to a connect handler: the caller's credentials (the handler
/// authenticates with its own), impersonation, and hop-by-hop headers.
fn forwardable(name: &HeaderName) -> bool {
    let n = name.as_str();
    !(n == "authorization"
        || n == "cookie"
        || n.starts_with("impersonate-")
        || n == "host"
        || n == "content-length"
        || n == "connection"
        || n == "keep-alive"
        || n == "proxy-authorization"
        || n == "proxy-connection"
        || n == "te"
        || n == "trailer"
        || n == "transfer-encoding"
        || n == "upgrade"
        || n == "accept-encoding")
}

/// Response headers not passed back (hop-by-hop; the body is re-framed).
fn returnable(name: &HeaderName) -> bool {
    let n = name.as_str();
    !(n == "connection" || n == "keep-alive" || n == "transfer-encoding" || n == "trailer" || n == "upgrade" || n == "content-length")
}

/// Serve an authorized connect request.
pub(crate) async fn serve(inner: Arc<Inner>, identity: Identity, p: ResourcePath, c: Arc<ConnectSubresource>, tail: String, req: Request<Body>) -> Response {
    match serve_inner(inner, identity, p, c, tail, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve_inner(
    inner: Arc<Inner>,
    identity: Identity,
    p: ResourcePath,
    c: Arc<ConnectSubresource>,
    tail: String,
    req: Request<Body>,
) -> ApiResult<Response> {
    if !c.methods.contains(req.method()) {
        return Err(ApiError::method_not_allowed());
    }
    if req.headers().contains_key(header::UPGRADE) {
        return Err(ApiError::bad_request(format!("{}/{}: upgrade requests (exec, attach, port-forward) are not supported yet", c.resource, c.subresource)));
    }
    let info = crate::server::resolve(&inner, &p)?;
    let raw_query = req.uri().query().map(String::from);
    let ctx =
        crate::objects::Ctx { inner: inner.clone(), info, path: p, query: Query::parse(raw_query.as_deref()), identity: identity.clone(), user_agent: None };
    let object = crate::objects::read_object(&ctx).await?;
    let method = req.method().clone();
    let mut headers = HeaderMap::new();
    for (k, v) in req.headers() {
        if forwardable(k) {
            headers.append(k.clone(), v.clone());
        }
    }
    let (_, body) = crate::server::read_body(&inner, req).await?;
    let request = ConnectRequest { method, object, path: tail, query: raw_query, headers, body, user: identity };
    let answer = c.handler.connect(request).await.map_err(|e| e.status())?;
    let mut resp = Response::new(Body::from_stream(answer.body));
    *resp.status_mut() = answer.status;
    for (k, v) in &answer.headers {
        if returnable(k) {
            resp.headers_mut().append(k.clone(), v.clone());
        }
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    struct Nothing;
    impl Connecter for Nothing {
        fn connect(&self, _: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
            Box::pin(async { Err(ConnectError::Unavailable("nothing".into())) })
        }
    }

    fn registry_with(resource: &str, kind: &str) -> Registry {
        let r = Registry::new();
        r.install_connect(ConnectSubresource {
            group: "".into(),
            resource: resource.into(),
            subresource: "proxy".into(),
            kind: kind.into(),
            methods: vec![Method::GET, Method::POST, Method::HEAD],
            handler: Arc::new(Nothing),
        });
        r
    }

    #[test]
    fn connect_paths_match_installed_subresources_only() {
        let c = registry_with("namespaces", "NamespaceProxyOptions").catalog();
        let (p, sub, tail) = match_path(&c, "/api/v1/namespaces/n1/proxy/api/v1/namespaces").unwrap();
        assert_eq!((p.namespace.as_deref(), p.name.as_deref(), p.subresource.as_deref()), (None, Some("n1"), Some("proxy")));
        assert_eq!(sub.kind, "NamespaceProxyOptions");
        assert_eq!(tail, "/api/v1/namespaces");
        assert_eq!(match_path(&c, "/api/v1/namespaces/n1/proxy").unwrap().2, "/");
        assert_eq!(match_path(&c, "/api/v1/namespaces/n1/proxy/").unwrap().2, "/");
        assert_eq!(match_path(&c, "/api/v1/namespaces/n1/proxy/a%2Fb/").unwrap().2, "/a%2Fb/", "the tail stays encoded");
        assert!(match_path(&c, "/api/v1/namespaces/n1/status").is_none());
        assert!(match_path(&c, "/api/v1/namespaces").is_none());
        assert!(match_path(&c, "/api/v1/namespaces/d/pods/p/proxy/x").is_none(), "not installed");
        assert!(match_path(&c, "/api/v1/namespaces/../proxy/x").is_none());
        assert!(match_path(&c, "/api/v2/namespaces/n1/proxy/x").is_none(), "a version not served");
        assert_eq!(sub.verbs(), vec!["create", "get"]);

        let c = registry_with("services", "ServiceProxyOptions").catalog();
        let (p, _, tail) = match_path(&c, "/api/v1/namespaces/d/services/web/proxy/healthz").unwrap();
        assert_eq!((p.namespace.as_deref(), p.name.as_deref()), (Some("d"), Some("web")));
        assert_eq!(tail, "/healthz");
        assert!(match_path(&c, "/api/v1/services/web/proxy/healthz").is_none(), "services are namespaced");
    }
}
