//! The agent's side of the tunnel: dial the control plane, upgrade, and serve HTTP/2 on the
//! upgraded connection, forwarding each stream to the one member API server the agent reaches
//! (its own member client; there is no address in a tunneled request to choose another).
//!
//! What may pass (ADR 0030): requests for the member's API server only (any other authority,
//! and plain `CONNECT`, are refused with 403); each must impersonate a control-plane user
//! (`Impersonate-User`, which the control plane always sets), so nothing runs in the member as
//! the agent's own identity; credentials a request carries are dropped; at most
//! `max_streams` requests at once.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONNECTION, COOKIE, HOST, UPGRADE};
use http::{HeaderMap, HeaderName, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;

use super::{AGENT_AUTHORITY, HEALTH_PATH, MEMBER_AUTHORITY, METHOD_HEADER, PROTOCOL, chain, empty, splice, tunnel_path};

/// The agent's tunnel settings.
#[derive(Clone, Debug)]
pub struct AgentTunnelConfig {
    /// HTTP/2 PING every this long (the agent notices a dead control plane too).
    pub keep_alive_interval: Duration,
    /// The tunnel is closed when a PING is not answered within this long.
    pub keep_alive_timeout: Duration,
    /// Requests carried at once.
    pub max_streams: u32,
    /// The first wait before dialling again; doubled after each failure.
    pub min_backoff: Duration,
    /// The longest wait between two dials.
    pub max_backoff: Duration,
    /// How long dialling (TLS, upgrade) may take.
    pub dial_timeout: Duration,
}

impl Default for AgentTunnelConfig {
    fn default() -> Self {
        AgentTunnelConfig {
            keep_alive_interval: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(20),
            max_streams: 256,
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            dial_timeout: Duration::from_secs(30),
        }
    }
}

/// Why dialling the control plane failed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("cannot reach the control plane: {0}")]
    Unreachable(String),
    #[error("the control plane refused the tunnel ({code}): {message}")]
    Refused { code: u16, message: String },
    #[error("the control plane did not answer within {0:?}")]
    Timeout(Duration),
}

type AgentBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Keep `cluster`'s tunnel open until `stop`: dial, serve until it closes, dial again with
/// backoff. `control_plane` must have no read timeout (the tunnel is idle between requests);
/// `member` is the agent's client for its member (no read timeout either: watches and exec
/// streams last).
pub async fn run(control_plane: kube::Client, cluster: String, member: kube::Client, config: AgentTunnelConfig, stop: CancellationToken) {
    let mut wait = config.min_backoff;
    let mut failing = false;
    loop {
        let started = Instant::now();
        let dialled = tokio::select! {
            r = tokio::time::timeout(config.dial_timeout, dial(&control_plane, &cluster)) => r.unwrap_or(Err(DialError::Timeout(config.dial_timeout))),
            () = stop.cancelled() => return,
        };
        match dialled {
            Ok(io) => {
                tracing::info!(%cluster, "tunnel to the control plane open");
                failing = false;
                let ended = serve(TokioIo::new(io), &cluster, &member, &config, &stop).await;
                if stop.is_cancelled() {
                    return;
                }
                match ended {
                    Ok(()) => tracing::warn!(%cluster, "the control plane closed the tunnel; dialling again"),
                    Err(e) => tracing::warn!(%cluster, error = %e, "the tunnel broke; dialling again"),
                }
                if started.elapsed() > config.max_backoff {
                    wait = config.min_backoff;
                }
            }
            Err(e) => {
                if failing {
                    tracing::debug!(%cluster, error = %e, ?wait, "dialling the tunnel failed again");
                } else {
                    tracing::warn!(%cluster, error = %e, "cannot open the tunnel; retrying with backoff");
                }
                failing = true;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
        wait = (wait * 2).min(config.max_backoff);
    }
}

/// Ask the control plane to upgrade a connection to `cluster`'s tunnel.
pub async fn dial(control_plane: &kube::Client, cluster: &str) -> Result<hyper::upgrade::Upgraded, DialError> {
    let req = Request::get(tunnel_path(cluster))
        .header(CONNECTION, "Upgrade")
        .header(UPGRADE, PROTOCOL)
        .body(kube::client::Body::empty())
        .map_err(|e| DialError::Unreachable(e.to_string()))?;
    let mut resp = control_plane.send(req).await.map_err(|e| DialError::Unreachable(chain(&e)))?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return hyper::upgrade::on(&mut resp).await.map_err(|e| DialError::Unreachable(chain(&e)));
    }
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|s| s.get("message").and_then(|m| m.as_str()).map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    Err(DialError::Refused { code, message })
}

/// Serve the control plane's requests on an upgraded connection until it closes or `stop`.
pub async fn serve<I>(io: I, cluster: &str, member: &kube::Client, config: &AgentTunnelConfig, stop: &CancellationToken) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (cluster, member) = (cluster.to_string(), member.clone());
    let service = hyper::service::service_fn(move |req| handle(req, cluster.clone(), member.clone()));
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .enable_connect_protocol()
        .max_concurrent_streams(config.max_streams)
        .keep_alive_interval(Some(config.keep_alive_interval))
        .keep_alive_timeout(config.keep_alive_timeout)
        .adaptive_window(true)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    }
}

/// A `Status` answer of the agent's own.
fn status(code: StatusCode, reason: &str, message: String) -> Response<AgentBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut r = Response::new(http_body_util::Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = code;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

/// Headers that never cross the agent: credentials and hop-by-hop headers.
fn passes(name: &HeaderName) -> bool {
    !(name == AUTHORIZATION
        || name == COOKIE
        || name == HOST
        || name == CONNECTION
        || name == UPGRADE
        || name.as_str() == METHOD_HEADER
        || matches!(name.as_str(), "keep-alive" | "proxy-authorization" | "proxy-connection" | "te" | "trailer" | "transfer-encoding" | "content-length"))
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (k, v) in from {
        if passes(k) {
            to.append(k.clone(), v.clone());
        }
    }
}

/// Why a tunneled request is refused before it reaches the member, if it is.
pub fn refusal<B>(req: &Request<B>, cluster: &str) -> Option<Response<AgentBody>> {
    let authority = req.uri().authority().map(|a| a.as_str()).unwrap_or("");
    let extended = req.extensions().get::<hyper::ext::Protocol>().is_some();
    if req.method() == Method::CONNECT && !extended {
        return Some(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "the tunnel of cluster {cluster} opens no connection to another address ({authority}); it carries requests for the member's API server only"
            ),
        ));
    }
    if authority != MEMBER_AUTHORITY {
        return Some(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("the tunnel of cluster {cluster} reaches only the member's API server, not {authority:?}"),
        ));
    }
    if !req.headers().contains_key("impersonate-user") {
        return Some(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "a request through the tunnel of cluster {cluster} must act as a control-plane user (Impersonate-User); nothing runs as the agent's own identity"
            ),
        ));
    }
    None
}

async fn handle(mut req: Request<Incoming>, cluster: String, member: kube::Client) -> Result<Response<AgentBody>, Infallible> {
    let authority = req.uri().authority().map(|a| a.as_str().to_string()).unwrap_or_default();
    if authority == AGENT_AUTHORITY && req.method() == Method::GET && req.uri().path() == HEALTH_PATH {
        return Ok(Response::new(http_body_util::Full::new(Bytes::from_static(b"ok")).map_err(|never| match never {}).boxed_unsync()));
    }
    if let Some(refused) = refusal(&req, &cluster) {
        tracing::warn!(%cluster, method = %req.method(), %authority, "refused a tunneled request");
        return Ok(refused);
    }
    let path = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let unreachable = |e: &dyn std::error::Error| {
        status(StatusCode::BAD_GATEWAY, "ServiceUnavailable", format!("the agent of cluster {cluster} could not reach its member's API server: {}", chain(e)))
    };
    if let Some(protocol) = req.extensions().get::<hyper::ext::Protocol>().map(|p| p.as_str().to_string()) {
        // An upgrade: the caller's connection is this stream once answered 200.
        let caller = hyper::upgrade::on(&mut req);
        let method = req.headers().get(METHOD_HEADER).and_then(|v| Method::from_bytes(v.as_bytes()).ok()).unwrap_or(Method::GET);
        let mut out = Request::builder().method(method).uri(&path);
        copy_headers(req.headers(), out.headers_mut().expect("a fresh builder"));
        let out = out.header(CONNECTION, "Upgrade").header(UPGRADE, &protocol).body(kube::client::Body::empty());
        let out = match out {
            Ok(r) => r,
            Err(e) => return Ok(status(StatusCode::BAD_REQUEST, "BadRequest", e.to_string())),
        };
        let mut answer = match member.send(out).await {
            Ok(a) => a,
            Err(e) => return Ok(unreachable(&e)),
        };
        if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Ok(relay(answer));
        }
        let upstream = hyper::upgrade::on(&mut answer);
        tokio::spawn(splice(caller, upstream, format!("{cluster}{path}")));
        let mut ok = Response::new(empty());
        copy_headers(answer.headers(), ok.headers_mut());
        return Ok(ok);
    }
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(status(StatusCode::BAD_REQUEST, "BadRequest", format!("reading the request body: {e}"))),
    };
    let mut out = Request::builder().method(parts.method).uri(&path);
    copy_headers(&parts.headers, out.headers_mut().expect("a fresh builder"));
    let out = match out.body(kube::client::Body::from(body)) {
        Ok(r) => r,
        Err(e) => return Ok(status(StatusCode::BAD_REQUEST, "BadRequest", e.to_string())),
    };
    match member.send(out).await {
        Ok(answer) => Ok(relay(answer)),
        Err(e) => Ok(unreachable(&e)),
    }
}

/// The member's answer, streamed back without hop-by-hop headers.
fn relay(answer: Response<kube::client::Body>) -> Response<AgentBody> {
    let (parts, body) = answer.into_parts();
    let mut r = Response::new(body.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>).boxed_unsync());
    *r.status_mut() = parts.status;
    copy_headers(&parts.headers, r.headers_mut());
    r
}
