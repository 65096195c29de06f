//! The request filters in front of the handlers, as tower layers in kube-apiserver's handler
//! chain order (outermost first): [`metrics`] (every answer counted, with its verb and
//! resource), [`authentication`] (who is calling; a credential that authenticates no one is a
//! 401), [`request_info`] (the route, verb and query; connect subresources matched),
//! [`impersonation`] (`Impersonate-*` headers), [`authorization`] (anonymous callers reach
//! only the health and version endpoints; the authorizer decides the rest), [`max_in_flight`]
//! (a cap on requests in flight, 429 past it) and [`timeout`] (a deadline, 504 past it); the
//! last two spare long-running requests (watches and connect subresources).
//!
//! Each filter is an async function made a layer with `axum::middleware::from_fn_with_state`;
//! what one filter learns travels to the next in the request's extensions ([`Identity`],
//! [`RequestInfo`]).

mod authentication;
mod authorization;
mod impersonation;
mod overload;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use tower::{Service, ServiceBuilder};

use crate::auth::{Attributes, Identity};
use crate::connect::ConnectSubresource;
use crate::metrics::{LatencyLabels, RequestLabels};
use crate::request::{Query, Route, parse_path, verb_of};
use crate::state::ApiState;

/// What the request is for, as the handlers route it.
#[derive(Clone)]
pub(crate) struct RequestInfo {
    pub route: Route,
    pub verb: &'static str,
    /// The resource, for metrics (empty for non-resource requests).
    pub resource: String,
    pub query: Query,
    /// A connect subresource (`clusters/{name}/proxy/{path…}`) and the path after it.
    pub connect: Option<(Arc<ConnectSubresource>, String)>,
    /// The `Impersonate-*` headers, taken off the request.
    pub impersonation: Option<HeaderMap>,
}

impl RequestInfo {
    /// Watches and connect requests hold no in-flight slot and have no deadline.
    fn long_running(&self) -> bool {
        self.verb == "watch" || self.connect.is_some()
    }

    /// What the authorizer decides on. A list or watch selecting one object by name
    /// (`fieldSelector=metadata.name=X`) names it, as kube-apiserver's request info does, so a
    /// rule with `resourceNames` allows watching that one object.
    fn attributes(&self, method: &axum::http::Method) -> Attributes {
        let mut a = attributes(&self.route, self.verb, method);
        if matches!(self.verb, "list" | "watch")
            && a.name.is_empty()
            && let Some(name) = self.query.get("fieldSelector").and_then(selected_name)
        {
            a.name = name;
        }
        a
    }
}

/// The name a field selector pins (`metadata.name=X` or `metadata.name==X` among its terms).
fn selected_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let value = term.trim().strip_prefix("metadata.name")?;
        let value = value.strip_prefix("==").or_else(|| value.strip_prefix('='))?;
        (!value.is_empty() && !value.starts_with('=')).then(|| value.to_string())
    })
}

/// The verb and resource an answer is counted under.
#[derive(Clone)]
struct Labels {
    verb: &'static str,
    resource: String,
}

/// `endpoint` (the handlers) behind the filters.
pub(crate) fn chain<S>(inner: Arc<ApiState>, endpoint: S) -> axum::Router
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let service = ServiceBuilder::new()
        .layer(from_fn_with_state(inner.clone(), metrics))
        .layer(from_fn_with_state(inner.clone(), authentication::authenticate))
        .layer(from_fn_with_state(inner.clone(), request_info))
        .layer(from_fn_with_state(inner.clone(), impersonation::impersonate))
        .layer(from_fn_with_state(inner.clone(), authorization::authorize))
        .layer(from_fn_with_state(inner.clone(), overload::max_in_flight))
        .layer(from_fn_with_state(inner, overload::timeout))
        .service(endpoint);
    axum::Router::new().fallback_service(service)
}

/// Every answer counted and timed, under the verb and resource [`request_info`] found
/// (`unknown` when a request is answered before: a bad credential, a malformed path).
async fn metrics(State(inner): State<Arc<ApiState>>, req: Request<Body>, next: Next) -> Response {
    let started = Instant::now();
    let resp = next.run(req).await;
    let labels = resp.extensions().get::<Labels>().cloned().unwrap_or(Labels { verb: "unknown", resource: String::new() });
    let code = resp.status().as_u16().to_string();
    inner.metrics.requests.get_or_create(&RequestLabels { verb: labels.verb.into(), resource: labels.resource.clone(), code }).inc();
    inner.metrics.latency.get_or_create(&LatencyLabels { verb: labels.verb.into(), resource: labels.resource }).observe(started.elapsed().as_secs_f64());
    resp
}

/// Work out what the request is for ([`RequestInfo`]); the `Impersonate-*` headers are taken
/// off the request whatever happens, so nothing behind the server sees them.
async fn request_info(State(inner): State<Arc<ApiState>>, mut req: Request<Body>, next: Next) -> Response {
    let impersonation = crate::impersonation::take_headers(req.headers_mut());
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query()).for_method(req.method());
    let info = match crate::connect_request::match_path(&inner.registry.catalog(), &path) {
        Some((p, c, tail)) => RequestInfo {
            verb: verb_of(req.method(), &p, &query),
            resource: p.resource.clone(),
            route: Route::Resource(p),
            query,
            connect: Some((c, tail)),
            impersonation,
        },
        None => {
            let route = match parse_path(&path) {
                Ok(r) => r,
                Err(e) => return e.into_response(),
            };
            let (verb, resource) = match &route {
                Route::Resource(p) => (verb_of(req.method(), p, &query), p.resource.clone()),
                _ => ("get", String::new()),
            };
            RequestInfo { route, verb, resource, query, connect: None, impersonation }
        }
    };
    let labels = Labels { verb: info.verb, resource: info.resource.clone() };
    req.extensions_mut().insert(info);
    let mut resp = next.run(req).await;
    resp.extensions_mut().insert(labels);
    resp
}

/// The request's [`RequestInfo`] and [`Identity`], which the filters before set.
fn info_of(req: &Request<Body>) -> (&RequestInfo, &Identity) {
    let info = req.extensions().get::<RequestInfo>().expect("the request_info filter runs first");
    let identity = req.extensions().get::<Identity>().expect("the authentication filter runs first");
    (info, identity)
}

/// The authorizer's view of a request.
pub(crate) fn attributes(route: &Route, verb: &str, method: &axum::http::Method) -> Attributes {
    let none = String::new;
    match route {
        Route::Resource(p) => Attributes {
            verb: verb.to_string(),
            group: p.group.clone(),
            resource: p.resource.clone(),
            subresource: p.subresource.clone().unwrap_or_default(),
            namespace: p.namespace.clone().unwrap_or_default(),
            name: p.name.clone().unwrap_or_default(),
            path: None,
        },
        Route::NonResource(path) => Attributes {
            verb: method.as_str().to_lowercase(),
            group: none(),
            resource: none(),
            subresource: none(),
            namespace: none(),
            name: none(),
            path: Some(path.clone()),
        },
        _ => {
            Attributes { verb: "get".into(), group: none(), resource: none(), subresource: none(), namespace: none(), name: none(), path: Some("/apis".into()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_selector_on_the_name_names_the_object() {
        assert_eq!(selected_name("metadata.name=edge-1").as_deref(), Some("edge-1"));
        assert_eq!(selected_name("status.phase=Running,metadata.name==x").as_deref(), Some("x"));
        assert_eq!(selected_name("metadata.name!=x"), None);
        assert_eq!(selected_name("metadata.namespace=x"), None);
        assert_eq!(selected_name("metadata.name="), None);
    }
}
