//! `/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy/{kubernetes path}`: the API a stock
//! client sees through `flotilla kubeconfig global-view`, as karmada-search's proxy serves it.
//!
//! - Reads (get, list, watch) of a kind the cache holds are answered from the cache: every
//!   cluster's objects, annotated with their cluster, in a Table with a Cluster column for
//!   `kubectl get`. They never wait on a member.
//! - Writes to such an object (update, patch, delete) and its subresources (`log`, `status`) go
//!   to the cluster the cache holds it in, through that cluster's proxy
//!   (`clusters/{name}/proxy`, so the caller needs that right too); a name held in two clusters
//!   is refused with 409 rather than guessed.
//! - Everything else — discovery, `/version`, other kinds, creates — is the control plane's own
//!   API, answered by this server as the caller.
//!
//! Every request is made as the caller: a cache read is allowed only when the control plane's
//! RBAC lets the caller read that kind there (asked with a SubjectAccessReview), forwarded
//! requests are authorized by the API server as usual.

use std::sync::{Arc, Weak};

use axum::http::{HeaderMap, Method, Request};
use bytes::Bytes;
use flotilla_apiserver::Identity;
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, Connecter};
use flotilla_apiserver::resources::Registry;
use flotilla_controllers::search::cache::Cache;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Render, Target, parse_path, parse_query, read};

/// The proxy plugin served (karmada-search's `karmada`).
const PLUGIN: &str = "karmada";

pub(super) struct ProxyConnecter {
    /// The API server's router, as the caller (held weakly: the server holds this handler).
    router: axum::Router,
    registry: Weak<Registry>,
    cache: Arc<Cache>,
}

impl ProxyConnecter {
    pub(super) fn new(api: &flotilla_apiserver::ApiServer, cache: Arc<Cache>) -> ProxyConnecter {
        ProxyConnecter { router: api.detached_router(), registry: Arc::downgrade(&api.registry()), cache }
    }
}

impl Connecter for ProxyConnecter {
    fn connect(&self, request: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let router = self.router.clone();
        let registry = self.registry.clone();
        let cache = self.cache.clone();
        Box::pin(async move {
            let plugin = request.object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            if plugin != PLUGIN {
                return Err(ConnectError::BadRequest(format!("proxying/{plugin}: unknown proxy plugin (expected {PLUGIN})")));
            }
            let target = parse_path(&request.path).ok().filter(|t| cache.holds(&t.kind));
            let Some(target) = target else {
                // Not a cached kind: the control plane's own API.
                return forward(&router, &request, request.path.clone()).await;
            };
            match (&request.method, &target.name, &target.subresource) {
                (&Method::GET, _, None) => {
                    let query = parse_query(request.query.as_deref(), &target).map_err(ConnectError::BadRequest)?;
                    let verb = if query.watch {
                        "watch"
                    } else if target.name.is_some() {
                        "get"
                    } else {
                        "list"
                    };
                    authorize(&router, &request.user, verb, &target).await?;
                    let registry = registry.upgrade().ok_or_else(|| ConnectError::Unavailable("the server is shutting down".into()))?;
                    let render = Render::new(&request.headers, &registry, &target.kind, query.include_object.clone())?;
                    let single = target.name.is_some() && !query.watch;
                    read(&cache, &target, query, render, single)
                }
                (&Method::POST, None, None) => forward(&router, &request, request.path.clone()).await,
                (_, Some(name), _) => {
                    let namespace = target.namespace.clone().unwrap_or_default();
                    let owners = cache.owners(&target.kind, &namespace, name);
                    match owners.as_slice() {
                        [cluster] => {
                            let path = format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy{}", request.path);
                            forward(&router, &request, path).await
                        }
                        [] => Ok(super::status(
                            404,
                            "NotFound",
                            format!("{} \"{name}\" not found in any cluster's cache", target.kind.resource),
                            json!({"name": name, "group": target.kind.group, "kind": target.kind.resource}),
                        )),
                        several => Err(ConnectError::Conflict(format!(
                            "{} {namespace}/{name} is held by clusters {}: change it through one cluster's proxy (clusters/NAME/proxy)",
                            target.kind.resource,
                            several.join(", ")
                        ))),
                    }
                }
                _ => Err(ConnectError::BadRequest(format!(
                    "{} {}: writing a collection of member objects is not served through the global view; use a cluster's proxy",
                    request.method, request.path
                ))),
            }
        })
    }
}

/// Whether the caller may `verb` the target's kind on the control plane, by a
/// SubjectAccessReview the API server answers with its authorizer.
async fn authorize(router: &axum::Router, user: &Identity, verb: &str, target: &Target) -> Result<(), ConnectError> {
    let attributes = json!({
        "verb": verb,
        "group": target.kind.group,
        "version": target.kind.version,
        "resource": target.kind.resource,
        "namespace": target.namespace.clone().unwrap_or_default(),
        "name": target.name.clone().unwrap_or_default(),
    });
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user.user, "uid": user.uid, "groups": user.groups, "extra": user.extra, "resourceAttributes": attributes},
    });
    let request = Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .extension(Identity::user("system:apiserver", &["system:masters"]))
        .body(axum::body::Body::from(serde_json::to_vec(&review).unwrap_or_default()))
        .map_err(|e| ConnectError::BadRequest(e.to_string()))?;
    let response = tower::ServiceExt::oneshot(router.clone(), request).await.unwrap_or_else(|never| match never {});
    let ok = response.status().is_success();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap_or_default();
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !ok {
        return Err(ConnectError::Unavailable(format!("authorizing the read: {}", answer["message"].as_str().unwrap_or("no answer"))));
    }
    if answer["status"]["allowed"] == true {
        return Ok(());
    }
    let group = &target.kind.group;
    let scope = match &target.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    Err(ConnectError::Forbidden(format!(
        "{} is forbidden: User \"{}\" cannot {verb} resource \"{}\" in API group \"{group}\" {scope}",
        target.kind.resource, user.user, target.kind.resource
    )))
}

/// `request` made to this API server at `path` as its caller, the answer streamed back.
async fn forward(router: &axum::Router, request: &ConnectRequest, path: String) -> Result<ConnectResponse, ConnectError> {
    let uri = match &request.query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path,
    };
    let mut builder = Request::builder().method(request.method.clone()).uri(&uri).extension(request.user.clone());
    for (k, v) in &request.headers {
        builder = builder.header(k, v);
    }
    let inner = builder.body(axum::body::Body::from(request.body.clone())).map_err(|e| ConnectError::BadRequest(format!("{uri}: {e}")))?;
    let response = tower::ServiceExt::oneshot(router.clone(), inner).await.unwrap_or_else(|never| match never {});
    let (parts, body) = response.into_parts();
    let mut headers = HeaderMap::new();
    for (k, v) in &parts.headers {
        if k != axum::http::header::CONTENT_LENGTH && k != axum::http::header::TRANSFER_ENCODING {
            headers.append(k.clone(), v.clone());
        }
    }
    let body = body.into_data_stream().map(|r: Result<Bytes, axum::Error>| r.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>));
    Ok(ConnectResponse { status: parts.status, headers, body: body.boxed() })
}
