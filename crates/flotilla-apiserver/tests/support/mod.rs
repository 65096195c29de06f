//! Helpers shared by the router-level tests.

#![allow(dead_code)]

use axum::body::Body;
use flotilla_apiserver::{ApiServer, Identity};
use http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

/// One request through the router as `who` (anonymous when `None`): status, headers, and the
/// body as JSON (or as a JSON string when it is not JSON).
pub async fn call(
    api: &ApiServer,
    method: &str,
    uri: &str,
    who: Option<Identity>,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req.body(body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty)).unwrap();
    if let Some(id) = who {
        req.extensions_mut().insert(id);
    }
    let resp = api.router().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, v)
}
