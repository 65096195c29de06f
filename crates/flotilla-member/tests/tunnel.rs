//! The tunnel's two ends over an in-memory byte stream, the member an in-process API server:
//! requests reach the member as the control plane's caller; the agent refuses any other address,
//! plain CONNECT and a request that impersonates nobody; one tunnel per cluster — a second agent
//! is refused while the first answers, a silent one is replaced, a closed one frees its cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_member::tunnel::agent::{self, AgentTunnelConfig};
use flotilla_member::tunnel::{TunnelBody, TunnelConfig, TunnelError, Tunnels};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_util::sync::CancellationToken;

async fn member() -> (ApiServer, kube::Client) {
    let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    // The agent's own member identity: may impersonate (an admin here).
    let client = kube::Client::new(InProcess::new(api.router(), Identity::user("the-agent", &["system:masters"])), "default");
    (api, client)
}

fn config() -> TunnelConfig {
    TunnelConfig { keep_alive_interval: Duration::from_secs(10), keep_alive_timeout: Duration::from_secs(20), probe_timeout: Duration::from_millis(300) }
}

/// Copies both ways between two streams; `frozen` makes it stop copying while keeping both
/// ends open (a network that drops everything).
fn relay(a: DuplexStream, b: DuplexStream, frozen: Arc<AtomicBool>) {
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    for (mut r, mut w) in [(ar, bw), (br, aw)] {
        let frozen = frozen.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if frozen.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                if w.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// An agent serving `cluster` on one end of a relayed stream, the control plane's claim opened
/// on the other; returns the agent's stop and the relay's freeze switch once the tunnel is open.
async fn connect(tunnels: &Arc<Tunnels>, cluster: &str, member: &kube::Client) -> (CancellationToken, Arc<AtomicBool>) {
    let (cp_io, relay_a) = tokio::io::duplex(64 * 1024);
    let (relay_b, agent_io) = tokio::io::duplex(64 * 1024);
    let frozen = Arc::new(AtomicBool::new(false));
    relay(relay_a, relay_b, frozen.clone());
    let stop = CancellationToken::new();
    let (c, m, s) = (cluster.to_string(), member.clone(), stop.clone());
    tokio::spawn(async move { agent::serve(agent_io, &c, &m, &AgentTunnelConfig::default(), &s).await });
    let claim = tunnels.claim(cluster).await.expect("the cluster is free");
    tokio::spawn(claim.open(cp_io, "test-agent".into()));
    wait_until(|| tunnels.open_clusters().contains(&cluster.to_string())).await;
    (stop, frozen)
}

async fn wait_until(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met within 5s");
}

async fn body_json(r: http::Response<hyper::body::Incoming>) -> (StatusCode, Value) {
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())))
}

#[tokio::test]
async fn requests_reach_the_member_as_the_caller() {
    let (_api, member) = member().await;
    let tunnels = Tunnels::new(config());
    let err = tunnels.send("edge", Request::get("/api").body(TunnelBody::default()).unwrap()).await.unwrap_err();
    assert!(matches!(err, TunnelError::NotConnected { .. }), "{err}");
    let (_stop, _) = connect(&tunnels, "edge", &member).await;

    let list = Request::get("/api/v1/namespaces?limit=1").header("impersonate-user", "alice").header("impersonate-group", "system:masters");
    let (code, body) = body_json(tunnels.send("edge", list.body(TunnelBody::default()).unwrap()).await.unwrap()).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "NamespaceList");

    let review = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let post = Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .header("impersonate-user", "bob")
        .header("authorization", "Bearer never-forwarded")
        .body(TunnelBody::new(Bytes::from(review.to_string())))
        .unwrap();
    let (code, body) = body_json(tunnels.send("edge", post).await.unwrap()).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"]["userInfo"]["username"], "bob", "the member sees the caller, not the agent: {body}");

    // The member's own refusal comes back as it is.
    let denied = Request::get("/api/v1/secrets").header("impersonate-user", "carol").body(TunnelBody::default()).unwrap();
    let (code, body) = body_json(tunnels.send("edge", denied).await.unwrap()).await;
    assert_eq!((code, body["reason"].as_str()), (StatusCode::FORBIDDEN, Some("Forbidden")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("User \"carol\""), "{body}");
}

#[tokio::test]
async fn the_agent_forwards_only_to_its_member_and_only_for_a_caller() {
    let (_api, member) = member().await;
    let (cp_io, agent_io) = tokio::io::duplex(64 * 1024);
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move { agent::serve(agent_io, "edge", &member, &AgentTunnelConfig::default(), &s).await });
    // A raw HTTP/2 client: what a control plane could send, not only what Flotilla's does.
    let (mut send, conn) = hyper::client::conn::http2::handshake::<_, _, TunnelBody>(TokioExecutor::new(), TokioIo::new(cp_io)).await.unwrap();
    tokio::spawn(conn);
    let mut ask = async |req: Request<TunnelBody>| {
        send.ready().await.unwrap();
        body_json(send.send_request(req).await.unwrap()).await
    };

    let (code, body) = ask(Request::get("http://10.0.0.1:6443/api").header("impersonate-user", "alice").body(TunnelBody::default()).unwrap()).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("reaches only the member's API server, not \"10.0.0.1:6443\""), "{body}");

    let (code, body) = ask(Request::connect("127.0.0.1:22").header("impersonate-user", "alice").body(TunnelBody::default()).unwrap()).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("opens no connection to another address"), "{body}");

    let (code, body) = ask(Request::get("http://member.tunnel.flotilla.io/api").body(TunnelBody::default()).unwrap()).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert!(body["message"].as_str().unwrap().contains("must act as a control-plane user"), "{body}");

    let (code, body) = ask(Request::get("http://agent.tunnel.flotilla.io/healthz").body(TunnelBody::default()).unwrap()).await;
    assert_eq!((code, body), (StatusCode::OK, Value::String("ok".into())));

    let (code, body) = ask(Request::get("http://member.tunnel.flotilla.io/api").header("impersonate-user", "alice").body(TunnelBody::default()).unwrap()).await;
    assert_eq!((code, body["kind"].as_str()), (StatusCode::OK, Some("APIVersions")), "{body}");
    stop.cancel();
}

#[tokio::test]
async fn one_tunnel_per_cluster() {
    let (_api, member) = member().await;
    let tunnels = Tunnels::new(config());
    let (stop, _) = connect(&tunnels, "edge", &member).await;

    // A second agent while the first answers: refused, the first keeps the cluster.
    let err = tunnels.claim("edge").await.map(|_| ()).unwrap_err();
    assert!(matches!(err, TunnelError::Claimed { .. }), "{err}");
    assert!(err.to_string().contains("a second agent claiming the same cluster is refused"), "{err}");
    assert_eq!(tunnels.open_clusters(), ["edge"]);

    // The first agent goes away cleanly: the cluster is free again.
    stop.cancel();
    wait_until(|| tunnels.open_clusters().is_empty()).await;
    let (_stop, frozen) = connect(&tunnels, "edge", &member).await;

    // Its connection goes silent (a cut the control plane has not seen): the next claim's probe
    // is not answered and the newcomer takes the cluster.
    frozen.store(true, Ordering::SeqCst);
    let claim = tunnels.claim("edge").await.expect("a silent tunnel is replaced");
    drop(claim);
    assert!(tunnels.open_clusters().is_empty(), "a claim dropped before it opened frees the cluster");
    let (_stop, _) = connect(&tunnels, "edge", &member).await;
    let ok = Request::get("/version").header("impersonate-user", "alice").body(TunnelBody::default()).unwrap();
    assert_eq!(tunnels.send("edge", ok).await.unwrap().status(), StatusCode::OK);
}
