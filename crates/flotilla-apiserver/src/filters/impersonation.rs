//! Impersonation: an authenticated caller's `Impersonate-*` headers (taken off the request by
//! `request_info`) become the identity the request runs as, if the caller may impersonate it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::ApiState;

pub(super) async fn impersonate(State(inner): State<Arc<ApiState>>, mut req: Request<Body>, next: Next) -> Response {
    let (info, identity) = super::info_of(&req);
    if let Some(asked) = &info.impersonation
        && !identity.is_anonymous()
    {
        let attrs = info.attributes(req.method());
        match crate::impersonation::impersonate(inner.authz.as_ref(), &inner.impersonation_modes, identity, asked, &attrs) {
            Ok(id) => {
                req.extensions_mut().insert(id);
            }
            Err(e) => return e.into_response(),
        }
    }
    next.run(req).await
}
