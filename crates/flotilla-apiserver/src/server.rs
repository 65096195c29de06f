//! The API server as one axum `Router`: the request filters (`filters`: identity,
//! impersonation, authorization, overload protection) in front of routing to discovery,
//! resources and non-resource endpoints.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flotilla_store::Store;
use serde_json::{Value, json};

use crate::auth::{Identity, TokenFile};
use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::filters::RequestInfo;
use crate::negotiate::{self, DiscoveryFormat};
use crate::request::{Query, ResourcePath, Route, verb_of};
use crate::resources::Registry;
use crate::response::{json_response, ok_json};
use crate::scope::{RequestScope, read_body, resolve, unrouted};
use crate::state::ApiState;
use crate::strategy::Virtual;

pub use crate::config::{ApiServerConfig, AuthorizationMode, VersionInfo};

/// The Kubernetes-compatible API server. Clone it freely; all clones share state.
#[derive(Clone)]
pub struct ApiServer {
    pub(crate) inner: Arc<ApiState>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer").field("store", &self.inner.store.backend_name()).finish()
    }
}

impl ApiServer {
    pub fn new(store: Arc<dyn Store>, config: ApiServerConfig) -> ApiServer {
        ApiServer { inner: Arc::new(ApiState::new(store, config)) }
    }

    /// Replace the bearer tokens this server accepts.
    pub fn set_tokens(&self, tokens: TokenFile) {
        *self.inner.tokens.write() = tokens;
    }

    pub fn registry(&self) -> Arc<Registry> {
        self.inner.registry.clone()
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// Create the bootstrap namespaces and mark the server ready.
    pub async fn bootstrap(&self) -> ApiResult<()> {
        for ns in crate::BOOTSTRAP_NAMESPACES {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            match crate::objects::create_internal(&self.inner, "", "v1", "namespaces", None, body).await {
                Ok(_) => {}
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        if self.inner.config.bootstrap_rbac {
            crate::rbac_bootstrap::install(&self.inner).await?;
        }
        self.inner.rbac.set_policy_stored(self.inner.config.bootstrap_rbac);
        crate::crd::sync(&self.inner).await?;
        tokio::spawn(crate::crd::run(Arc::downgrade(&self.inner), self.inner.config.crd_retry));
        self.inner.rbac.reload(self.inner.store.as_ref()).await?;
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(crate::rbac::run(move || weak.upgrade().map(|s| (s.store.clone(), s.rbac.clone()))));
        self.inner.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Register CRDs (create, or update when their spec changed): how the binary installs the
    /// federation kinds at start-up, through the same machinery as users' CRDs.
    pub async fn install_crds(&self, crds: Vec<Value>) -> ApiResult<usize> {
        let mut changed = 0;
        for crd in crds {
            let name = crd.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
            match crate::objects::create_internal(&self.inner, "apiextensions.k8s.io", "v1", "customresourcedefinitions", None, crd.clone()).await {
                Ok(_) => changed += 1,
                Err(e) if e.reason == "AlreadyExists" => {
                    if crate::objects::update_spec_internal(&self.inner, "apiextensions.k8s.io", "v1", "customresourcedefinitions", &name, &crd).await? {
                        changed += 1;
                    }
                }
                Err(e) => {
                    let msg = format!("installing the CRD {name}: {}", e.message);
                    return Err(e.with_message(msg));
                }
            }
        }
        crate::crd::sync(&self.inner).await?;
        Ok(changed)
    }

    /// Keep the `default/kubernetes` Service (and, for a routable advertised address, its
    /// Endpoints and EndpointSlice) as kube-apiserver's bootstrap controller does, until
    /// [`crate::kubernetes_service::KubernetesService::stop`].
    pub fn start_kubernetes_service(&self, cfg: crate::kubernetes_service::KubernetesServiceConfig) -> crate::kubernetes_service::KubernetesService {
        crate::kubernetes_service::KubernetesService::start(self.detached_router(), cfg)
    }

    /// Serve a connect subresource with a handler from outside (the binary installs the cluster
    /// proxy this way; see [`crate::connect`]).
    pub fn install_connect(&self, c: crate::connect::ConnectSubresource) {
        self.inner.registry.install_connect(c);
    }

    /// Serve a static site (the dashboard's files) under its prefix, to anyone: see
    /// [`crate::site`]. Replaces a site installed before under the same prefix.
    pub fn install_site(&self, site: crate::site::StaticSite) {
        let mut sites = self.inner.sites.write();
        sites.retain(|s| s.prefix() != site.prefix());
        sites.push(Arc::new(site));
    }

    /// The router, holding the server only weakly: for clients that the server itself ends up
    /// holding (a connect handler's in-process client), so they do not keep it alive. Once the
    /// server is dropped it answers 503.
    pub fn detached_router(&self) -> axum::Router {
        let weak = Arc::downgrade(&self.inner);
        axum::Router::new().fallback(move |req: Request<Body>| {
            let inner = weak.upgrade();
            async move {
                match inner {
                    Some(inner) => handle(inner, req).await,
                    None => ApiError::unavailable("the server is shutting down").into_response(),
                }
            }
        })
    }

    /// The whole API as a router. Requests must carry an [`Identity`] extension or arrive over
    /// TLS (client certificate) or with a bearer token; otherwise they are anonymous.
    pub fn router(&self) -> axum::Router {
        crate::filters::chain(self.inner.clone(), endpoint_service(self.inner.clone()))
    }
}

/// The API behind its filters ([`crate::filters`]), the chain built for one request (the
/// detached router, which holds the server only weakly).
async fn handle(inner: Arc<ApiState>, req: Request<Body>) -> Response {
    let endpoint = endpoint_service(inner.clone());
    match tower::ServiceExt::oneshot(crate::filters::chain(inner, endpoint), req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// [`endpoint`] as a tower `Service`.
fn endpoint_service(
    inner: Arc<ApiState>,
) -> impl tower::Service<Request<Body>, Response = Response, Error = std::convert::Infallible, Future: Send + 'static> + Clone + Send + Sync + 'static {
    tower::service_fn(move |req| endpoint(inner.clone(), req))
}

/// The handlers: a connect subresource's, or routing to discovery, resources and
/// non-resource endpoints.
async fn endpoint(inner: Arc<ApiState>, mut req: Request<Body>) -> Result<Response, std::convert::Infallible> {
    let info = req.extensions_mut().remove::<RequestInfo>().expect("the request_info filter runs first");
    let identity = req.extensions().get::<Identity>().cloned().unwrap_or_else(Identity::anonymous);
    Ok(match (info.connect, info.route) {
        (Some((c, tail)), Route::Resource(p)) => crate::connect_request::serve(inner, identity, p, c, tail, req).await,
        (_, route) => route_request(inner, identity, route, info.query, req).await,
    })
}

async fn route_request(inner: Arc<ApiState>, identity: Identity, route: Route, query: Query, req: Request<Body>) -> Response {
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).map(String::from);
    let result = match route {
        Route::NonResource(path) => match inner.site_of(&path) {
            Some(site) => Ok(site.serve(req.method(), &path, req.headers())),
            None => non_resource(&inner, &path, &req.headers().clone()).await,
        },
        Route::CoreVersions => discovery_root(&inner, true, accept.as_deref()),
        Route::Groups => discovery_root(&inner, false, accept.as_deref()),
        Route::Group(g) => {
            let catalog = inner.registry.catalog();
            discovery::group(&catalog, &g).map(|d| ok_json(&d)).ok_or_else(ApiError::page_not_found)
        }
        Route::GroupVersion { group, version } => {
            let catalog = inner.registry.catalog();
            discovery::resource_list(&catalog, &group, &version).map(|d| ok_json(&d)).ok_or_else(|| unrouted(&inner, &group))
        }
        Route::Resource(p) => resource(inner.clone(), identity, p, query, req).await,
    };
    result.unwrap_or_else(|e| e.into_response())
}

fn discovery_root(inner: &ApiState, core: bool, accept: Option<&str>) -> ApiResult<Response> {
    let catalog = inner.registry.catalog();
    let (body, ct) = match negotiate::discovery_format(accept) {
        DiscoveryFormat::AggregatedV2 => {
            (discovery::aggregated(&catalog, core, "apidiscovery.k8s.io/v2"), "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
        }
        DiscoveryFormat::AggregatedV2Beta1 => {
            (discovery::aggregated(&catalog, core, "apidiscovery.k8s.io/v2beta1"), "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")
        }
        DiscoveryFormat::Legacy if core => (discovery::core_versions(&inner.config.advertise.to_string()), "application/json"),
        DiscoveryFormat::Legacy => (discovery::groups(&catalog), "application/json"),
    };
    let mut resp = json_response(StatusCode::OK, &body, ct, &[]);
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    Ok(resp)
}

async fn non_resource(inner: &ApiState, path: &str, headers: &HeaderMap) -> ApiResult<Response> {
    let p = path.trim_end_matches('/');
    let text = |code: StatusCode, s: String| {
        let mut r = (code, s).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r
    };
    match p {
        "/healthz" | "/livez" => Ok(text(StatusCode::OK, "ok".into())),
        "/readyz" => {
            if inner.ready.load(Ordering::Acquire) {
                Ok(text(StatusCode::OK, "ok".into()))
            } else {
                Ok(text(StatusCode::INTERNAL_SERVER_ERROR, "[-]bootstrap: not finished\nreadyz check failed".into()))
            }
        }
        "/version" => {
            let v = &inner.config.version;
            Ok(ok_json(&json!({
                "major": v.major,
                "minor": v.minor,
                "gitVersion": v.git_version,
                "gitCommit": option_env!("FLOTILLA_GIT_COMMIT").unwrap_or("0000000000000000000000000000000000000000"),
                "gitTreeState": "clean",
                "buildDate": "2026-11-30T00:00:00Z",
                "goVersion": "go1.22.0",
                "compiler": "gc",
                "platform": "linux/amd64",
                // Since 1.33 the version a server emulates and the oldest it is compatible with.
                "emulationMajor": v.major,
                "emulationMinor": v.minor,
                "minCompatibilityMajor": v.major,
                "minCompatibilityMinor": v.minor.parse::<u32>().map(|m| m.saturating_sub(1).to_string()).unwrap_or_else(|_| v.minor.clone()),
            })))
        }
        "/metrics" => {
            if let Ok(r) = inner.store.current_revision().await {
                inner.metrics.store_revision.set(r);
            }
            let mut resp = (StatusCode::OK, inner.metrics.render()).into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"));
            Ok(resp)
        }
        "/openapi/v2" => Ok(crate::openapi_v2::serve(&inner.openapi_v2, &inner.registry.catalog(), inner.store.as_ref(), &inner.config.version, headers).await),
        "/openid/v1/jwks" => Ok(json_response(StatusCode::OK, &inner.service_account_key().await?.jwks(), "application/jwk-set+json", &[])),
        "/.well-known/openid-configuration" => {
            let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
            Ok(ok_json(&crate::service_account_jwt::openid_configuration(&format!("https://{host}/openid/v1/jwks"))))
        }
        p if p == "/openapi/v3" || p.starts_with("/openapi/v3/") => {
            crate::openapi::v3(&inner.registry.catalog(), inner.store.as_ref(), p).await.ok_or_else(ApiError::page_not_found)
        }
        _ => Err(ApiError::page_not_found()),
    }
}

async fn resource(inner: Arc<ApiState>, identity: Identity, p: ResourcePath, query: Query, req: Request<Body>) -> ApiResult<Response> {
    // Reviews and TokenRequests are answered by handlers, not storage.
    if let Some(v) = crate::strategy::virtual_resource(&p, req.method()) {
        return virtual_resource(&inner, identity, &p, &query, v, req).await;
    }
    let info = resolve(&inner, &p)?;
    // A custom resource in the other scope: apiextensions hands it to its not-found handler.
    let wrong_scope = || if info.is_custom() { ApiError::page_not_found() } else { ApiError::no_route() };
    if info.namespaced && p.namespace.is_none() && p.name.is_some() {
        return Err(wrong_scope());
    }
    if !info.namespaced && p.namespace.is_some() {
        return Err(wrong_scope());
    }
    let verb = verb_of(req.method(), &p, &query);
    let sub = p.subresource.as_deref();
    match sub {
        None => {}
        Some("status") if info.status => {}
        Some("approval") if info.approval => {}
        Some("scale") if info.scale.is_some() => {}
        Some("finalize") if info.finalize && verb == "update" => {}
        Some(_) => return Err(ApiError::no_route()),
    }
    let base_verb = if verb == "watch" { "watch" } else { verb };
    if sub.is_none() && !info.has_verb(base_verb) {
        return Err(ApiError::method_not_allowed());
    }
    if matches!(verb, "create" | "update" | "patch") {
        check_field_manager(&query)?;
    }
    // kube-apiserver warns on every request to a deprecated resource.
    let deprecation = crate::strategy::for_resource(&info).deprecation();
    // A request without a User-Agent is manager `unknown`, as on kube-apiserver.
    let user_agent = req.headers().get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown");
    let user_agent = Some(user_agent.to_string());
    let ctx = RequestScope { inner: inner.clone(), info, path: p, query, identity, user_agent };
    let headers = req.headers().clone();
    let mut resp = serve_verb(&inner, &ctx, verb, headers, req).await;
    if let (Some(w), Ok(r)) = (deprecation, resp.as_mut()) {
        r.headers_mut().append(header::WARNING, HeaderValue::from_static(w));
    }
    resp
}

/// A resource no store holds ([`crate::strategy::Virtual`]).
async fn virtual_resource(inner: &ApiState, identity: Identity, p: &ResourcePath, query: &Query, v: Virtual, req: Request<Body>) -> ApiResult<Response> {
    let user_agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown").to_string();
    let body = read_json_body(inner, req, v.kind()).await?;
    let out = match v {
        Virtual::SelfSubjectAccessReview => {
            crate::auth::validate_access_review(&body)?;
            let mut out = crate::auth::self_subject_access_review(inner.authz.as_ref(), &identity, &body);
            // The request's spec is owned by its writer, as on any create.
            let managed = crate::objects::created_managed_fields(query, Some(&user_agent), &p.group, &p.version, v.kind(), &body);
            if let (Some(m), Some(meta)) = (managed, out.get_mut("metadata").and_then(Value::as_object_mut)) {
                meta.insert("managedFields".into(), m);
            }
            out
        }
        Virtual::SubjectAccessReview => {
            let mut out = crate::auth::subject_access_review(inner.authz.as_ref(), &body)?;
            let managed = crate::objects::created_managed_fields(query, Some(&user_agent), &p.group, &p.version, v.kind(), &body);
            if let (Some(m), Some(meta)) = (managed, out.get_mut("metadata").and_then(Value::as_object_mut)) {
                meta.insert("managedFields".into(), m);
            }
            out
        }
        Virtual::SelfSubjectRulesReview => crate::auth::self_subject_rules_review(inner.authz.as_ref(), &identity, &body)?,
        Virtual::SelfSubjectReview => crate::auth::self_subject_review(&identity, &p.version),
        Virtual::TokenRequest => {
            return crate::strategy::token_request(inner, p.namespace.as_deref().unwrap_or(""), p.name.as_deref().unwrap_or(""), &body).await;
        }
    };
    Ok(json_response(StatusCode::CREATED, &out, "application/json", &[]))
}

/// `fieldManager` is at most 128 bytes (CreateOptions, UpdateOptions and PatchOptions alike).
fn check_field_manager(query: &Query) -> ApiResult<()> {
    match query.get("fieldManager") {
        Some(m) if m.len() > 128 => Err(ApiError::invalid(
            "meta.k8s.io",
            query.options_kind(),
            "",
            vec![crate::error::Cause::new("FieldValueTooLong", "fieldManager", "Too long: may not be more than 128 bytes")],
        )),
        _ => Ok(()),
    }
}

/// The handler of a verb on a resource.
async fn serve_verb(inner: &ApiState, ctx: &RequestScope, verb: &str, headers: axum::http::HeaderMap, req: Request<Body>) -> ApiResult<Response> {
    match verb {
        "get" => crate::objects::get(ctx, &headers).await,
        "list" => crate::listwatch::list(ctx, &headers).await,
        "watch" => crate::listwatch::watch(ctx, &headers).await,
        "create" => {
            let body = read_body(inner, req).await?;
            crate::objects::create(ctx, &headers, body).await
        }
        "update" => {
            let body = read_body(inner, req).await?;
            crate::objects::update(ctx, &headers, body).await
        }
        "patch" => {
            let body = read_body(inner, req).await?;
            crate::objects::patch(ctx, &headers, body).await
        }
        "delete" => {
            let body = read_body(inner, req).await?;
            crate::objects::delete(ctx, &headers, body).await
        }
        "deletecollection" => {
            let body = read_body(inner, req).await?;
            crate::objects::delete_collection(ctx, &headers, body).await
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// Read a body the handler decodes as `kind` (reviews, TokenRequests).
async fn read_json_body(inner: &ApiState, req: Request<Body>, kind: &str) -> ApiResult<Value> {
    let (ct, bytes) = read_body(inner, req).await?;
    crate::objects::parse_object_body(ct.as_deref(), &bytes, Some(kind))
}
