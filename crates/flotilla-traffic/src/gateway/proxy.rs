//! The gateway's request path: route, pick a backend, forward, retry, eject.
//!
//! - **Load balancing**: round robin over the route's endpoints (every healthy cluster's),
//!   skipping ejected ones; when every endpoint is ejected they are tried anyway (as Envoy's
//!   panic threshold does) rather than failing a request no one tried.
//! - **Retries**: a request goes to another endpoint when the last one could not be reached
//!   (any method: nothing was sent), or, for an idempotent method (GET, HEAD, OPTIONS, TRACE,
//!   PUT, DELETE), when its connection failed or it timed out before the response head.
//!   Bodies up to [`Settings::max_retry_body`] are buffered so that they can be sent again; a
//!   larger or unsized body streams through and is not retried.
//! - **Passive health**: an endpoint that failed [`Settings::eject_after`] times in a row is
//!   left out for [`Settings::eject_for`], then tried again (one more failure ejects it again).
//!
//! Responses are streamed back as they come; the gateway never retries after a response head
//! arrived (a 5xx from an application is its answer).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body as _, Incoming};
use hyper::header::{HOST, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;

use super::Shared;
use super::routes::{Endpoint, Pool};

pub type Body = BoxBody<Bytes, hyper::Error>;

/// How requests are forwarded.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Further endpoints a request may be tried on.
    pub retries: u32,
    /// Time allowed to connect to an endpoint.
    pub connect_timeout: Duration,
    /// Time allowed for an endpoint's response head.
    pub response_timeout: Duration,
    /// Consecutive failures that eject an endpoint.
    pub eject_after: u32,
    /// How long an ejected endpoint is left out.
    pub eject_for: Duration,
    /// Largest request body buffered so that the request can be retried.
    pub max_retry_body: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retries: 2,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(30),
            eject_after: 2,
            eject_for: Duration::from_secs(10),
            max_retry_body: 1 << 20,
        }
    }
}

/// Request counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests answered by an endpoint.
    pub forwarded: AtomicU64,
    /// Attempts that went to another endpoint after a failure.
    pub retries: AtomicU64,
    /// Endpoints ejected.
    pub ejections: AtomicU64,
    /// Requests no rule took (404).
    pub unrouted: AtomicU64,
    /// Requests the gateway failed (502, 503).
    pub failed: AtomicU64,
}

#[derive(Debug, Default)]
struct EndpointHealth {
    failures: u32,
    ejected_until: Option<Instant>,
}

/// Passive health: endpoints' consecutive failures and ejections.
#[derive(Debug, Default)]
struct Health {
    by_addr: Mutex<HashMap<SocketAddr, EndpointHealth>>,
}

impl Health {
    fn is_ejected(&self, addr: SocketAddr, now: Instant) -> bool {
        self.by_addr.lock().get(&addr).and_then(|h| h.ejected_until).is_some_and(|until| until > now)
    }

    /// Records a failure; true when it ejected the endpoint.
    fn failed(&self, addr: SocketAddr, settings: &Settings) -> bool {
        let mut map = self.by_addr.lock();
        let h = map.entry(addr).or_default();
        let now = Instant::now();
        if h.ejected_until.is_some_and(|until| until > now) {
            return false;
        }
        h.failures += 1;
        if h.failures >= settings.eject_after {
            // One more failure after the ejection ends ejects it again.
            h.failures = settings.eject_after.saturating_sub(1);
            h.ejected_until = Some(now + settings.eject_for);
            return true;
        }
        false
    }

    fn succeeded(&self, addr: SocketAddr) {
        let mut map = self.by_addr.lock();
        if map.get(&addr).is_some_and(|h| h.failures > 0 || h.ejected_until.is_some()) {
            map.remove(&addr);
        }
    }
}

/// The next endpoint of `pool` not yet tried: a healthy one in round-robin order, else (every
/// untried one ejected) the first untried.
fn pick(pool: &Pool, tried: &[SocketAddr], health: &Health) -> Option<Endpoint> {
    let n = pool.endpoints.len();
    if n == 0 {
        return None;
    }
    let start = pool.next.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut fallback = None;
    for i in 0..n {
        let e = &pool.endpoints[(start + i) % n];
        if tried.contains(&e.addr) {
            continue;
        }
        if !health.is_ejected(e.addr, now) {
            return Some(e.clone());
        }
        fallback.get_or_insert(e);
    }
    fallback.cloned()
}

/// The gateway's request handler, shared by its listeners.
pub struct Gateway {
    shared: Shared,
    settings: Settings,
    client: Client<HttpConnector, Body>,
    health: Health,
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(message + "\n")).map_err(|never| match never {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

const HOP_BY_HOP: [&str; 8] = ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "proxy-authorization"];

/// Removes the hop-by-hop headers, those `Connection` lists included.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

fn is_idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

/// What became of one attempt.
enum Attempt {
    Answered(Response<Body>),
    /// Not reached: nothing was sent.
    Unreached(String),
    /// Failed after the request may have been sent.
    Broken(String),
}

impl Gateway {
    pub fn new(shared: Shared, settings: Settings) -> Gateway {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(settings.connect_timeout));
        http.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(http);
        Gateway { shared, settings, client, health: Health::default() }
    }

    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Answers one request: `scheme` is the listener's (`http` or `https`), `remote` the client.
    pub async fn handle(&self, req: Request<Incoming>, remote: SocketAddr, scheme: &'static str) -> Result<Response<Body>, Infallible> {
        let counters = &self.shared.counters;
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| req.headers().get(HOST).and_then(|h| h.to_str().ok()).map(String::from))
            .unwrap_or_default();
        let path = req.uri().path().to_string();
        let routes = self.shared.routes();
        let Some(target) = routes.route(&host, &path) else {
            counters.unrouted.fetch_add(1, Ordering::Relaxed);
            return Ok(text(StatusCode::NOT_FOUND, format!("no ingress routes host {host:?} path {path:?}")));
        };
        if target.pool.endpoints.is_empty() {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            return Ok(text(StatusCode::SERVICE_UNAVAILABLE, format!("service {} has no ready endpoint in a healthy cluster", target.service)));
        }
        let (mut parts, body) = req.into_parts();
        let idempotent = is_idempotent(&parts.method);
        // A body small enough (and of known size) is kept, to be sent again on a retry.
        let (kept, mut streamed): (Option<Bytes>, Option<Incoming>) = if body.size_hint().upper().is_some_and(|n| n <= self.settings.max_retry_body) {
            match body.collect().await {
                Ok(b) => (Some(b.to_bytes()), None),
                Err(e) => return Ok(text(StatusCode::BAD_REQUEST, format!("reading the request body: {e}"))),
            }
        } else {
            (None, Some(body))
        };
        prepare_headers(&mut parts.headers, &host, remote, scheme);
        let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let mut tried = Vec::new();
        let mut last_error = String::new();
        while tried.len() <= self.settings.retries as usize {
            let Some(endpoint) = pick(&target.pool, &tried, &self.health) else { break };
            if !tried.is_empty() {
                counters.retries.fetch_add(1, Ordering::Relaxed);
            }
            tried.push(endpoint.addr);
            let body = match (&kept, streamed.take()) {
                (Some(b), _) => Full::new(b.clone()).map_err(|never| match never {}).boxed(),
                (None, Some(b)) => b.boxed(),
                (None, None) => break,
            };
            let mut out = Request::new(body);
            *out.method_mut() = parts.method.clone();
            *out.version_mut() = Version::HTTP_11;
            *out.headers_mut() = parts.headers.clone();
            *out.uri_mut() = match format!("http://{}{path_and_query}", endpoint.addr).parse() {
                Ok(u) => u,
                Err(e) => return Ok(text(StatusCode::BAD_REQUEST, format!("the request path: {e}"))),
            };
            let failure = match self.attempt(out).await {
                Attempt::Answered(resp) => {
                    self.health.succeeded(endpoint.addr);
                    counters.forwarded.fetch_add(1, Ordering::Relaxed);
                    return Ok(resp);
                }
                Attempt::Unreached(e) => {
                    last_error = e;
                    true
                }
                Attempt::Broken(e) => {
                    last_error = e;
                    idempotent
                }
            };
            if self.health.failed(endpoint.addr, &self.settings) {
                counters.ejections.fetch_add(1, Ordering::Relaxed);
                tracing::info!(endpoint = %endpoint.addr, cluster = %endpoint.cluster, service = %target.service, eject_for = ?self.settings.eject_for, "gateway: endpoint ejected");
            }
            tracing::debug!(endpoint = %endpoint.addr, cluster = %endpoint.cluster, error = %last_error, "gateway: attempt failed");
            if !failure || kept.is_none() {
                break;
            }
        }
        counters.failed.fetch_add(1, Ordering::Relaxed);
        Ok(text(StatusCode::BAD_GATEWAY, format!("service {}: no endpoint answered ({} tried): {last_error}", target.service, tried.len())))
    }

    async fn attempt(&self, req: Request<Body>) -> Attempt {
        match tokio::time::timeout(self.settings.response_timeout, self.client.request(req)).await {
            Ok(Ok(resp)) => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Attempt::Answered(Response::from_parts(parts, body.boxed()))
            }
            Ok(Err(e)) if e.is_connect() => Attempt::Unreached(error_chain(&e)),
            Ok(Err(e)) => Attempt::Broken(error_chain(&e)),
            Err(_) => Attempt::Broken(format!("no response head within {:?}", self.settings.response_timeout)),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

/// The forwarded request's headers: hop-by-hop ones removed, `Host` kept (HTTP/2's authority
/// becomes one), and the client named in `X-Forwarded-For`, `-Proto` and `-Host`.
fn prepare_headers(headers: &mut HeaderMap, host: &str, remote: SocketAddr, scheme: &'static str) {
    strip_hop_by_hop(headers);
    if !headers.contains_key(HOST)
        && let Ok(h) = HeaderValue::from_str(host)
    {
        headers.insert(HOST, h);
    }
    let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prior) => format!("{prior}, {}", remote.ip()),
        None => remote.ip().to_string(),
    };
    if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
        headers.insert("x-forwarded-for", v);
    }
    headers.insert("x-forwarded-proto", HeaderValue::from_static(scheme));
    if let Ok(h) = HeaderValue::from_str(host) {
        headers.insert("x-forwarded-host", h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(addrs: &[&str]) -> Pool {
        Pool { endpoints: addrs.iter().map(|a| Endpoint { cluster: "c".into(), addr: a.parse().unwrap() }).collect(), next: Default::default() }
    }

    #[test]
    fn round_robin_skips_tried_and_ejected_endpoints_and_tries_ejected_ones_last() {
        let p = pool(&["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
        let h = Health::default();
        let picks: Vec<SocketAddr> = (0..3).map(|_| pick(&p, &[], &h).unwrap().addr).collect();
        assert_eq!(picks.len(), 3);
        assert_eq!(picks.iter().collect::<std::collections::BTreeSet<_>>().len(), 3, "each in turn: {picks:?}");
        let s = Settings { eject_after: 2, ..Settings::default() };
        let bad: SocketAddr = "10.0.0.2:80".parse().unwrap();
        assert!(!h.failed(bad, &s), "one failure does not eject");
        assert!(h.failed(bad, &s), "the second in a row does");
        for _ in 0..6 {
            assert_ne!(pick(&p, &[], &h).unwrap().addr, bad);
        }
        let others: Vec<SocketAddr> = ["10.0.0.1:80", "10.0.0.3:80"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(pick(&p, &others, &h).unwrap().addr, bad, "an ejected endpoint is still tried when nothing else is left");
        let all: Vec<SocketAddr> = p.endpoints.iter().map(|e| e.addr).collect();
        assert!(pick(&p, &all, &h).is_none());
        h.succeeded(bad);
        assert!(!h.is_ejected(bad, Instant::now()));
    }

    #[test]
    fn an_ejection_ends_and_one_more_failure_renews_it() {
        let h = Health::default();
        let s = Settings { eject_after: 3, eject_for: Duration::from_millis(1), ..Settings::default() };
        let a: SocketAddr = "10.0.0.9:80".parse().unwrap();
        assert!(!h.failed(a, &s) && !h.failed(a, &s) && h.failed(a, &s));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!h.is_ejected(a, Instant::now()));
        assert!(h.failed(a, &s), "after its ejection one failure is enough");
    }

    #[test]
    fn hop_by_hop_headers_are_dropped_and_the_client_named() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("keep-alive, x-private"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        prepare_headers(&mut h, "web.example.com", "198.51.100.7:5555".parse().unwrap(), "https");
        assert!(h.get("connection").is_none() && h.get("x-private").is_none() && h.get("te").is_none());
        assert_eq!(h["host"], "web.example.com");
        assert_eq!(h["x-forwarded-for"], "192.0.2.1, 198.51.100.7");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["accept"], "*/*");
    }
}
