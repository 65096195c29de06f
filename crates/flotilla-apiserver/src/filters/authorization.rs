//! Authorization: anonymous callers reach only the health and version endpoints, and the
//! authorizer decides their GET of `kube-public/cluster-info` (token discovery, as
//! kube-apiserver's anonymous endpoint restriction is configured for kubeadm) — 401 elsewhere;
//! everyone else is asked of the authorizer (403 with RBAC's words when denied). A static
//! site's files (the dashboard's, `crate::site`) are served to anyone: they hold no data.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Decision;
use crate::error::{ApiError, Subject};
use crate::request::Route;
use crate::state::ApiState;

const ANONYMOUS_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

/// The one object anonymous callers may ask for: token discovery's ConfigMap.
const ANONYMOUS_OBJECT: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";

pub(super) async fn authorize(State(inner): State<Arc<ApiState>>, req: Request<Body>, next: Next) -> Response {
    let (info, identity) = super::info_of(&req);
    let discovery = req.method() == axum::http::Method::GET && req.uri().path() == ANONYMOUS_OBJECT;
    // A static site's files are public (crate::site): the data its pages show is asked for
    // with the user's own credentials.
    if matches!(&info.route, Route::NonResource(p) if inner.site_of(p).is_some()) {
        return next.run(req).await;
    }
    if identity.is_anonymous() && !discovery {
        let open =
            matches!(&info.route, Route::NonResource(p) if ANONYMOUS_PATHS.iter().any(|a| p.trim_end_matches('/') == *a || p.starts_with(&format!("{a}/"))));
        if !open {
            return ApiError::unauthorized().into_response();
        }
    } else {
        let attrs = info.attributes(req.method());
        if let Decision::Deny(_) = inner.authz.authorize(identity, &attrs) {
            let e = match &info.route {
                Route::Resource(p) => ApiError::forbidden(
                    &Subject { group: &p.group, resource: &p.resource, name: p.name.as_deref().unwrap_or("") },
                    crate::rbac::denial(identity, &attrs),
                ),
                _ => ApiError::new(403, "Forbidden", format!("forbidden: User \"{}\" cannot get path \"{}\"", identity.user, req.uri().path())),
            };
            return e.into_response();
        }
    }
    next.run(req).await
}
