//! Overload protection: a cap on requests in flight (`max_in_flight`, 429 with a
//! `Retry-After` past it) and a deadline (`request_timeout`, 504 past it), both sparing
//! long-running requests (watches, connect subresources), as kube-apiserver's
//! `WithMaxInFlightLimit` and `WithTimeoutForNonLongRunningRequests`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::ApiState;

pub(super) async fn max_in_flight(State(inner): State<Arc<ApiState>>, req: Request<Body>, next: Next) -> Response {
    if super::info_of(&req).0.long_running() {
        return next.run(req).await;
    }
    let Ok(_permit) = inner.in_flight.try_acquire() else {
        inner.metrics.rejected_overload.inc();
        return ApiError::too_many_requests(1).into_response();
    };
    next.run(req).await
}

pub(super) async fn timeout(State(inner): State<Arc<ApiState>>, req: Request<Body>, next: Next) -> Response {
    if super::info_of(&req).0.long_running() {
        return next.run(req).await;
    }
    let limit = inner.config.request_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::timeout(format!("Timeout: request did not complete within the allotted timeout of {}s", limit.as_secs())).into_response(),
    }
}
