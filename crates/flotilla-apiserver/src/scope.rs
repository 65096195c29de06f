//! One resource request as the handlers see it ([`RequestScope`]: the shared state, the
//! resource served, the path, query and caller), how a path finds its resource, and the request
//! body read within the size limit.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, header};
use bytes::Bytes;

use crate::auth::Identity;
use crate::error::{ApiError, ApiResult, Subject};
use crate::request::{Query, ResourcePath};
use crate::resources::ResourceInfo;
use crate::state::ApiState;
use crate::storage;

/// Everything a handler needs about one request.
pub(crate) struct RequestScope {
    pub inner: Arc<ApiState>,
    pub info: Arc<ResourceInfo>,
    pub path: ResourcePath,
    pub query: Query,
    #[allow(dead_code)]
    pub identity: Identity,
    /// The request's User-Agent: the field manager of a write that names none.
    pub user_agent: Option<String>,
}

impl RequestScope {
    pub fn subject<'a>(&'a self, name: &'a str) -> Subject<'a> {
        Subject { group: &self.info.group, resource: &self.info.plural, name }
    }
    pub(crate) fn name(&self) -> &str {
        self.path.name.as_deref().unwrap_or("")
    }
    pub(crate) fn namespace(&self) -> Option<&str> {
        if self.info.namespaced { self.path.namespace.as_deref() } else { None }
    }
    pub(crate) fn key(&self, name: &str) -> Bytes {
        storage::object_key(&self.info, self.namespace(), name)
    }
}

/// Look up the resource a path names, or answer 404 as the real server does.
pub(crate) fn resolve(inner: &ApiState, p: &ResourcePath) -> ApiResult<Arc<ResourceInfo>> {
    inner.registry.catalog().lookup(&p.group, &p.version, &p.resource).ok_or_else(|| unrouted(inner, &p.group))
}

/// A 404 for a path under `group` that nothing serves: a Status in a built-in group (its
/// handlers answer), Go's plain-text 404 elsewhere (kube-apiserver hands such paths to
/// apiextensions, which falls through to its not-found handler).
pub(crate) fn unrouted(inner: &ApiState, group: &str) -> ApiError {
    if group.is_empty() || inner.registry.builtin_resources().iter().any(|r| r.group == group) { ApiError::no_route() } else { ApiError::page_not_found() }
}

/// Read a request body within the size limit. Past the limit the rest is read and dropped
/// (a bounded amount, for a bounded time) before the 413 goes out: an HTTP/2 client still
/// sending would otherwise meet a reset stream instead of the answer.
pub(crate) async fn read_body(inner: &ApiState, req: Request<Body>) -> ApiResult<(Option<String>, bytes::Bytes)> {
    use http_body_util::BodyExt;
    const DRAIN_BYTES: usize = 64 << 20;
    const DRAIN_TIME: Duration = Duration::from_secs(5);
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(String::from);
    let limit = inner.config.max_body_bytes;
    let mut body = req.into_body();
    let mut buf = bytes::BytesMut::new();
    let too_large = || ApiError::too_large(format!("the request body exceeds the limit of {limit} bytes"));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        if buf.len() + data.len() > limit {
            let mut drained = buf.len() + data.len();
            let drain = async {
                while drained < DRAIN_BYTES {
                    match body.frame().await {
                        Some(Ok(f)) => drained += f.data_ref().map_or(0, |d| d.len()),
                        _ => break,
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
            return Err(too_large());
        }
        buf.extend_from_slice(&data);
    }
    Ok((content_type, buf.freeze()))
}
