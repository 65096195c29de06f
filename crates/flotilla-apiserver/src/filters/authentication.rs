//! Authentication: an [`Identity`] the caller set (in-process clients), else the TLS client
//! certificate, else a bearer token (the token file, service account Secrets' tokens, then
//! bootstrap tokens and TokenRequest JWTs); with none, anonymous. A credential that authenticates no one is refused
//! everywhere, health included: only a request with no credential at all is anonymous.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Identity;
use crate::error::ApiError;
use crate::state::ApiState;

pub(super) async fn authenticate(State(inner): State<Arc<ApiState>>, mut req: Request<Body>, next: Next) -> Response {
    let mut identity = identify(&inner, &req);
    if identity.is_anonymous()
        && let Some(token) = bearer_token(&req).map(String::from)
    {
        identity = match identify_bootstrap_token(&inner, &token).await {
            Some(id) => id,
            None => identify_service_account(&inner, &token).await.unwrap_or(identity),
        };
        if identity.is_anonymous() {
            return ApiError::unauthorized().into_response();
        }
    }
    req.extensions_mut().insert(identity);
    next.run(req).await
}

/// Work out who is calling, from what needs no store read.
fn identify(inner: &ApiState, req: &Request<Body>) -> Identity {
    if let Some(id) = req.extensions().get::<Identity>() {
        return id.clone();
    }
    if let Some(tls) = req.extensions().get::<Arc<axum_server::tls::TlsInfo>>()
        && let Some(id) = tls.peer_certificates.first().and_then(|der| crate::auth::identity_from_cert(der))
    {
        return id;
    }
    if let Some(token) = bearer_token(req) {
        if let Some(id) = inner.tokens.read().lookup(token) {
            return id.clone();
        }
        if let Some(id) = inner.rbac.authenticate(token) {
            return id;
        }
    }
    Identity::anonymous()
}

fn bearer_token(req: &Request<Body>) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// The bootstrap token's user (`system:bootstrap:<id>`) and groups, as kube-apiserver's bootstrap
/// token authenticator finds them in `kube-system/bootstrap-token-<id>`: the token matches, its
/// usages include authentication, and it is neither expired nor being deleted.
async fn identify_bootstrap_token(inner: &ApiState, token: &str) -> Option<Identity> {
    use flotilla_api::bootstrap_token as bt;
    let presented = bt::Token::parse(token)?;
    let key = format!("/registry/core/secrets/{}/{}", bt::NAMESPACE, presented.secret_name());
    let kv = inner.store.get(&bytes::Bytes::from(key)).await.ok()??;
    let secret: serde_json::Value = serde_json::from_slice(&kv.value).ok()?;
    let stored = match bt::parse_secret(&secret) {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(token_id = %presented.id, error = %e, "bootstrap token Secret refused");
            return None;
        }
    };
    let (user, groups) = stored.authenticate(&presented, jiff::Timestamp::now())?;
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    Some(Identity::user(&user, &groups))
}

/// The service account a TokenRequest token (a JWT) stands for, if it is one and still valid.
async fn identify_service_account(inner: &ApiState, token: &str) -> Option<Identity> {
    if token.split('.').count() != 3 {
        return None;
    }
    let key = inner.service_account_verifying_key().await?;
    crate::service_account_jwt::authenticate(inner.store.as_ref(), &key, token, jiff::Timestamp::now().as_second()).await
}
