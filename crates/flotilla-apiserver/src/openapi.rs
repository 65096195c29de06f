//! `/openapi/v2`: a minimal document until real schemas arrive (issue: API depth). Clients
//! find no model for a kind and skip client-side validation; `kubectl create/apply` work from
//! 1.20 to 1.33. `/openapi/v3` answers 404, so current kubectl falls back to this.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The protobuf `openapi_v2.Document` with only `swagger: "2.0"` (field 1).
const MINIMAL_PROTOBUF: &[u8] = &[0x0a, 0x03, b'2', b'.', b'0'];

pub fn v2(headers: &HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("protobuf") {
        let mut r = (StatusCode::OK, MINIMAL_PROTOBUF).into_response();
        // A dot before v1.0: echoing the request's `@v1.0` form breaks Go's mime parser.
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"));
        r
    } else {
        let body = serde_json::json!({
            "swagger": "2.0",
            "info": {"title": "Flotilla", "version": env!("CARGO_PKG_VERSION")},
            "paths": {},
            "definitions": {},
        });
        let mut r = (StatusCode::OK, body.to_string()).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    }
}
