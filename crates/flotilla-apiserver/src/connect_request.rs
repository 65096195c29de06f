//! Connect requests from path to handler: which installed [`ConnectSubresource`] a path names,
//! and serving an authorized request — the named object read from the store (404 when absent),
//! credentials and hop-by-hop headers dropped, the handler's answer streamed back.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::Identity;
use crate::connect::{ConnectRequest, ConnectSubresource, ConnectTarget, ConnectUpgrade};
use crate::error::{ApiError, ApiResult};
use crate::request::{Query, ResourcePath};
use crate::resources::Catalog;
use crate::state::ApiState;

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
    let c = catalog.connect(group, resource, sub).or_else(|| catalog.connect(group, resource, crate::connect::ANY_SUBRESOURCE))?;
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
    // A handler of any subresource gets the subresource too (`/api/v1/pods`).
    let tail = if c.subresource == crate::connect::ANY_SUBRESOURCE { rest[2..].join("/") } else { rest[3..].join("/") };
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
pub(crate) async fn serve(inner: Arc<ApiState>, identity: Identity, p: ResourcePath, c: Arc<ConnectSubresource>, tail: String, req: Request<Body>) -> Response {
    match serve_inner(inner, identity, p, c, tail, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve_inner(
    inner: Arc<ApiState>,
    identity: Identity,
    p: ResourcePath,
    c: Arc<ConnectSubresource>,
    tail: String,
    req: Request<Body>,
) -> ApiResult<Response> {
    if !c.methods.contains(req.method()) {
        return Err(ApiError::method_not_allowed());
    }
    let mut req = req;
    let upgrade = upgrade_of(&mut req).map_err(|m| ApiError::bad_request(format!("{}/{}: {m}", c.resource, c.subresource)))?;
    let info = crate::scope::resolve(&inner, &p)?;
    let raw_query = req.uri().query().map(String::from);
    let ctx = crate::scope::RequestScope {
        inner: inner.clone(),
        info,
        path: p,
        query: Query::parse(raw_query.as_deref()),
        identity: identity.clone(),
        user_agent: None,
    };
    let object = match &c.target {
        ConnectTarget::Stored => crate::objects::read_object(&ctx).await?,
        ConnectTarget::Named { .. } => serde_json::json!({"metadata": {"name": ctx.path.name}}),
    };
    let method = req.method().clone();
    let mut headers = HeaderMap::new();
    for (k, v) in req.headers() {
        if forwardable(k) {
            headers.append(k.clone(), v.clone());
        }
    }
    let (_, body) = crate::scope::read_body(&inner, req).await?;
    let protocol = upgrade.as_ref().map(|u| u.protocol.clone());
    let request = ConnectRequest { method, object, path: tail, query: raw_query, headers, body, user: identity, upgrade };
    let answer = c.handler.connect(request).await.map_err(|e| e.status())?;
    let switching = answer.status == StatusCode::SWITCHING_PROTOCOLS;
    if switching && protocol.is_none() {
        // hyper could not hand the connection over: a handler bug, not the caller's.
        return Err(ApiError::new(
            500,
            "InternalError",
            format!("{}/{}: the handler switched protocols on a request that asked for none", c.resource, c.subresource),
        ));
    }
    let mut resp = Response::new(Body::from_stream(answer.body));
    *resp.status_mut() = answer.status;
    for (k, v) in &answer.headers {
        if returnable(k) {
            resp.headers_mut().append(k.clone(), v.clone());
        }
    }
    if switching {
        let protocol = answer.headers.get(header::UPGRADE).cloned().or_else(|| protocol.and_then(|p| p.parse().ok()));
        if let Some(p) = protocol {
            resp.headers_mut().insert(header::UPGRADE, p);
        }
        resp.headers_mut().insert(header::CONNECTION, axum::http::HeaderValue::from_static("Upgrade"));
    }
    Ok(resp)
}

/// The upgrade `req` asks for (`Connection: Upgrade` with an `Upgrade` protocol), taken out of
/// the request; an error when it asks for one that cannot be carried out (HTTP/2, in-process).
fn upgrade_of(req: &mut Request<Body>) -> Result<Option<ConnectUpgrade>, String> {
    let asks = req
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    let Some(protocol) = req.headers().get(header::UPGRADE) else { return Ok(None) };
    if !asks {
        return Ok(None);
    }
    let protocol = protocol.to_str().map_err(|_| "the Upgrade header is not text".to_string())?.to_string();
    let on_upgrade = req
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or_else(|| format!("an upgrade to {protocol} needs an HTTP/1.1 connection (exec, attach, port-forward and tunnels cannot run over HTTP/2)"))?;
    Ok(Some(ConnectUpgrade { protocol, on_upgrade }))
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use futures::future::BoxFuture;

    use super::*;
    use crate::connect::{ConnectError, ConnectResponse, Connecter};
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
            target: crate::connect::ConnectTarget::Stored,
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

    #[test]
    fn a_handler_of_any_subresource_on_a_resource_with_no_storage() {
        let r = Registry::new();
        r.install_connect(ConnectSubresource {
            group: "search.karmada.io".into(),
            target: ConnectTarget::Named { version: "v1alpha1".into(), kind: "Search".into() },
            resource: "search".into(),
            subresource: crate::connect::ANY_SUBRESOURCE.into(),
            kind: "Search".into(),
            methods: vec![Method::GET],
            handler: Arc::new(Nothing),
        });
        let c = r.catalog();
        let info = c.lookup("search.karmada.io", "v1alpha1", "search").expect("served for its connects");
        assert!(info.verbs.is_empty() && !info.namespaced);
        assert!(c.connects_of(&info).is_empty(), "discovery lists no `search/*`");
        let (p, _, tail) = match_path(&c, "/apis/search.karmada.io/v1alpha1/search/cache/apis/apps/v1/namespaces/shop/deployments").unwrap();
        assert_eq!((p.name.as_deref(), p.subresource.as_deref()), (Some("cache"), Some("apis")));
        assert_eq!(tail, "/apis/apps/v1/namespaces/shop/deployments");
        assert_eq!(match_path(&c, "/apis/search.karmada.io/v1alpha1/search/cache/api/v1/pods").unwrap().2, "/api/v1/pods");
        assert!(match_path(&c, "/apis/search.karmada.io/v1alpha1/search/cache").is_none(), "no subresource: not a connect");
    }
}
