//! Writing responses: a JSON body with its content type and `Warning` headers.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// A JSON response with a status code and optional warnings.
pub(crate) fn json_response(code: StatusCode, body: &Value, content_type: &'static str, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = (code, bytes).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

pub(crate) fn ok_json(body: &Value) -> Response {
    json_response(StatusCode::OK, body, "application/json", &[])
}
