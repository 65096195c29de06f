//! A `kube::Client` transport that calls the API server's router in-process: no socket, no TLS,
//! the caller's identity attached to each request. Controllers in the all-in-one binary use it;
//! the same controller code runs out-of-process over HTTPS.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use tower::Service;

use crate::auth::Identity;

/// A tower service that hands requests to the router as `identity`.
#[derive(Clone)]
pub struct InProcess {
    router: axum::Router,
    identity: Identity,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").field("identity", &self.identity.user).finish()
    }
}

impl InProcess {
    pub fn new(router: axum::Router, identity: Identity) -> Self {
        InProcess { router, identity }
    }
}

impl<B> Service<Request<B>> for InProcess
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(self.identity.clone());
        let req = Request::from_parts(parts, Body::new(body));
        let router = self.router.clone();
        Box::pin(async move { tower::ServiceExt::oneshot(router, req).await })
    }
}
