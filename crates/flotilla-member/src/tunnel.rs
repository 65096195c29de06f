//! The reverse tunnel: how the control plane reaches a pull member it has no route or credential
//! for (ADR 0030).
//!
//! A pull agent opens one outbound, mutually authenticated TLS connection to the control plane's
//! API server, on its own port: `GET /apis/cluster.karmada.io/v1alpha1/clusters/<name>/tunnel`
//! with `Upgrade: flotilla-tunnel/v1`, authenticated by the agent's client certificate and
//! authorized as any request is. Once the server answers `101`, the roles turn around: the
//! control plane speaks HTTP/2 as the client ([`Tunnels`]) and the agent serves ([`agent`]), so
//! the control plane's requests are streams the agent forwards to its one member API server.
//!
//! What a tunnel carries:
//! - requests for the member's API server, with the authority [`MEMBER_AUTHORITY`]; there is
//!   no other address to name, and the agent refuses any other authority and plain `CONNECT`;
//! - upgrades (exec, attach, port-forward) as HTTP/2 extended `CONNECT` streams (RFC 8441) whose
//!   `:protocol` is the caller's `Upgrade` protocol and whose original method travels in
//!   [`METHOD_HEADER`]; the agent upgrades its own connection to the member and splices the two;
//! - the control plane's liveness probe, `GET` [`HEALTH_PATH`] at [`AGENT_AUTHORITY`], which
//!   the agent answers itself.
//!
//! One tunnel per cluster: a second agent claiming a cluster whose tunnel still answers the probe
//! is refused ([`TunnelError::Claimed`]); one whose tunnel no longer answers replaces it (an agent
//! back after a cut whose old connection the control plane has not yet seen die).

pub mod agent;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

/// The `Upgrade` protocol an agent asks for.
pub const PROTOCOL: &str = "flotilla-tunnel/v1";
/// The subresource of `clusters` an agent opens its tunnel on.
pub const SUBRESOURCE: &str = "tunnel";
/// The authority of tunneled requests for the member's API server.
pub const MEMBER_AUTHORITY: &str = "member.tunnel.flotilla.io";
/// The authority of requests the agent answers itself.
pub const AGENT_AUTHORITY: &str = "agent.tunnel.flotilla.io";
/// The agent's own health path (at [`AGENT_AUTHORITY`]).
pub const HEALTH_PATH: &str = "/healthz";
/// The caller's method of an upgrade carried as an extended `CONNECT`.
pub const METHOD_HEADER: &str = "x-flotilla-method";

/// The path an agent opens its tunnel at.
pub fn tunnel_path(cluster: &str) -> String {
    format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/{SUBRESOURCE}")
}

/// The control plane's side of the tunnels: timings.
#[derive(Clone, Debug)]
pub struct TunnelConfig {
    /// HTTP/2 PING every this long on an open tunnel.
    pub keep_alive_interval: Duration,
    /// A tunnel whose PING is not answered within this long is closed.
    pub keep_alive_timeout: Duration,
    /// How long a tunnel gets to answer the liveness probe when another agent claims its
    /// cluster (and once when it opens).
    pub probe_timeout: Duration,
}

impl Default for TunnelConfig {
    fn default() -> Self {
        TunnelConfig { keep_alive_interval: Duration::from_secs(10), keep_alive_timeout: Duration::from_secs(20), probe_timeout: Duration::from_secs(5) }
    }
}

/// Why a tunnel could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("cluster {cluster} already has a connected agent (tunnel open since {since}, from {peer}); a second agent claiming the same cluster is refused")]
    Claimed { cluster: String, since: String, peer: String },
    #[error("another agent of cluster {cluster} is opening its tunnel now")]
    Opening { cluster: String },
    #[error(
        "cluster {cluster} is in Pull mode and its agent has no tunnel open (the agent is not running, cannot reach the control plane, or runs with --tunnel=false)"
    )]
    NotConnected { cluster: String },
    #[error("the tunnel of cluster {cluster} failed: {cause}")]
    Failed { cluster: String, cause: String },
    #[error("the tunnel of cluster {cluster} did not answer within {after:?}")]
    Timeout { cluster: String, after: Duration },
}

/// The request body the control plane sends down a tunnel.
pub type TunnelBody = Full<Bytes>;

struct Open {
    id: u64,
    send: SendRequest<TunnelBody>,
    since: String,
    peer: String,
}

enum Slot {
    /// Claimed by a connection being upgraded; no requests yet.
    Opening(u64),
    Open(Open),
}

/// The open tunnels of a control plane, by cluster name.
pub struct Tunnels {
    config: TunnelConfig,
    slots: parking_lot::Mutex<HashMap<String, Slot>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels").field("open", &self.open_clusters()).finish_non_exhaustive()
    }
}

/// A cluster's tunnel slot, held while an agent's connection is upgraded; released if dropped
/// before [`Claim::open`].
pub struct Claim {
    tunnels: Arc<Tunnels>,
    cluster: String,
    id: u64,
    opened: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.opened {
            self.tunnels.release(&self.cluster, self.id);
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Tunnels {
    pub fn new(config: TunnelConfig) -> Arc<Tunnels> {
        Arc::new(Tunnels { config, slots: parking_lot::Mutex::new(HashMap::new()), next: AtomicU64::new(1) })
    }

    /// The clusters with an open tunnel, sorted.
    pub fn open_clusters(&self) -> Vec<String> {
        let mut v: Vec<String> = self.slots.lock().iter().filter(|(_, s)| matches!(s, Slot::Open(_))).map(|(k, _)| k.clone()).collect();
        v.sort();
        v
    }

    fn release(&self, cluster: &str, id: u64) {
        let mut slots = self.slots.lock();
        let ours = match slots.get(cluster) {
            Some(Slot::Opening(i)) => *i == id,
            Some(Slot::Open(o)) => o.id == id,
            None => false,
        };
        if ours {
            slots.remove(cluster);
        }
    }

    /// Claim `cluster`'s tunnel for a new agent connection: refused while a tunnel that still
    /// answers the probe is open (or another is being opened); a tunnel that does not answer is
    /// dropped for the newcomer.
    pub async fn claim(self: &Arc<Self>, cluster: &str) -> Result<Claim, TunnelError> {
        let (old, send, since, peer) = {
            let mut slots = self.slots.lock();
            match slots.get(cluster) {
                Some(Slot::Opening(_)) => return Err(TunnelError::Opening { cluster: cluster.to_string() }),
                Some(Slot::Open(o)) => (o.id, o.send.clone(), o.since.clone(), o.peer.clone()),
                None => {
                    let id = self.next.fetch_add(1, Ordering::Relaxed);
                    slots.insert(cluster.to_string(), Slot::Opening(id));
                    return Ok(Claim { tunnels: self.clone(), cluster: cluster.to_string(), id, opened: false });
                }
            }
        };
        if probe(send, cluster, self.config.probe_timeout).await.is_ok() {
            return Err(TunnelError::Claimed { cluster: cluster.to_string(), since, peer });
        }
        tracing::info!(%cluster, %peer, "the open tunnel does not answer; a reconnecting agent replaces it");
        let mut slots = self.slots.lock();
        match slots.get(cluster) {
            Some(Slot::Open(o)) if o.id == old => {}
            None => {}
            _ => return Err(TunnelError::Opening { cluster: cluster.to_string() }),
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        slots.insert(cluster.to_string(), Slot::Opening(id));
        Ok(Claim { tunnels: self.clone(), cluster: cluster.to_string(), id, opened: false })
    }

    /// The sender of `cluster`'s open tunnel.
    fn sender(&self, cluster: &str) -> Result<SendRequest<TunnelBody>, TunnelError> {
        match self.slots.lock().get(cluster) {
            Some(Slot::Open(o)) => Ok(o.send.clone()),
            _ => Err(TunnelError::NotConnected { cluster: cluster.to_string() }),
        }
    }

    /// Send one request down `cluster`'s tunnel (its URI a path; the authority is set here).
    pub async fn send(&self, cluster: &str, mut req: Request<TunnelBody>) -> Result<Response<Incoming>, TunnelError> {
        let mut send = self.sender(cluster)?;
        *req.uri_mut() = member_uri(req.uri()).map_err(|cause| TunnelError::Failed { cluster: cluster.to_string(), cause })?;
        send.ready().await.map_err(|e| TunnelError::Failed { cluster: cluster.to_string(), cause: e.to_string() })?;
        send.send_request(req).await.map_err(|e| TunnelError::Failed { cluster: cluster.to_string(), cause: chain(&e) })
    }
}

impl Claim {
    /// Once the agent's connection is handed over (`on_upgrade`, after the `101` is sent), open
    /// the tunnel on it; runs until the tunnel closes.
    pub async fn open_on(self, on_upgrade: hyper::upgrade::OnUpgrade, peer: String) -> Result<(), TunnelError> {
        match on_upgrade.await {
            Ok(io) => self.open(TokioIo::new(io), peer).await,
            Err(e) => Err(TunnelError::Failed { cluster: self.cluster.clone(), cause: format!("the agent's connection was not upgraded: {}", chain(&e)) }),
        }
    }

    /// Speak HTTP/2 as the client over the agent's upgraded connection (`TokioIo` of hyper's
    /// `Upgraded`, or any byte stream in tests) and make it the
    /// cluster's tunnel once it answers the probe; runs until the tunnel closes.
    pub async fn open<I>(mut self, io: I, peer: String) -> Result<(), TunnelError>
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let cluster = self.cluster.clone();
        let failed = |cause: String| TunnelError::Failed { cluster: cluster.clone(), cause };
        let config = &self.tunnels.config;
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(config.keep_alive_interval)
            .keep_alive_timeout(config.keep_alive_timeout)
            .keep_alive_while_idle(true)
            .adaptive_window(true)
            .handshake::<_, TunnelBody>(TokioIo::new(io))
            .await
            .map_err(|e| failed(chain(&e)))?;
        let driver = tokio::spawn(conn);
        if let Err(e) = probe(send.clone(), &cluster, config.probe_timeout).await {
            driver.abort();
            return Err(e);
        }
        {
            let mut slots = self.tunnels.slots.lock();
            match slots.get(&cluster) {
                Some(Slot::Opening(id)) if *id == self.id => {}
                _ => {
                    driver.abort();
                    return Err(TunnelError::Opening { cluster: cluster.clone() });
                }
            }
            slots.insert(cluster.clone(), Slot::Open(Open { id: self.id, send, since: now(), peer: peer.clone() }));
        }
        self.opened = true;
        tracing::info!(%cluster, %peer, "agent tunnel open");
        let ended = driver.await;
        self.tunnels.release(&cluster, self.id);
        match ended {
            Ok(Ok(())) => {
                tracing::info!(%cluster, %peer, "agent tunnel closed");
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::info!(%cluster, %peer, error = %chain(&e), "agent tunnel broke");
                Err(failed(chain(&e)))
            }
            Err(e) => Err(failed(e.to_string())),
        }
    }
}

/// Ask the agent at the other end of `send` for its health.
async fn probe(mut send: SendRequest<TunnelBody>, cluster: &str, within: Duration) -> Result<(), TunnelError> {
    let req = Request::get(format!("http://{AGENT_AUTHORITY}{HEALTH_PATH}")).body(TunnelBody::default()).expect("a static request");
    let asked = async {
        send.ready().await?;
        send.send_request(req).await
    };
    match tokio::time::timeout(within, asked).await {
        Err(_) => Err(TunnelError::Timeout { cluster: cluster.to_string(), after: within }),
        Ok(Err(e)) => Err(TunnelError::Failed { cluster: cluster.to_string(), cause: chain(&e) }),
        Ok(Ok(r)) if r.status() == StatusCode::OK => Ok(()),
        Ok(Ok(r)) => Err(TunnelError::Failed { cluster: cluster.to_string(), cause: format!("the agent answered its probe with {}", r.status()) }),
    }
}

/// `uri`'s path and query at [`MEMBER_AUTHORITY`].
fn member_uri(uri: &http::Uri) -> Result<http::Uri, String> {
    let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    format!("http://{MEMBER_AUTHORITY}{pq}").parse().map_err(|e| format!("invalid path {pq:?}: {e}"))
}

/// An error and its causes on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// Copy bytes both ways between two upgraded connections until both ends close.
pub(crate) async fn splice<A, B>(a: A, b: B, what: String)
where
    A: std::future::Future<Output = hyper::Result<hyper::upgrade::Upgraded>>,
    B: std::future::Future<Output = hyper::Result<hyper::upgrade::Upgraded>>,
{
    let (a, b) = tokio::join!(a, b);
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            tracing::debug!(%what, error = %e, "an upgraded connection was not handed over");
            return;
        }
    };
    let (mut a, mut b) = (TokioIo::new(a), TokioIo::new(b));
    match tokio::io::copy_bidirectional(&mut a, &mut b).await {
        Ok((up, down)) => tracing::debug!(%what, up, down, "upgraded stream closed"),
        Err(e) => tracing::debug!(%what, error = %e, "upgraded stream ended"),
    }
}

/// An empty body of any error type.
pub(crate) fn empty<E>() -> http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}
