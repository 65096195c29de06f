//! The gateway's throughput and latency beside a direct connection to its one backend in the
//! same run. The backend is a minimal hyper HTTP/1.1 server answering 64 bytes; the gateway
//! (its routing table built by its own code from a MultiClusterIngress and an imported
//! EndpointSlice) listens in cleartext; the same clients, each on one keep-alive connection
//! with one request in flight, load the backend directly and through the gateway for the same
//! time. The figures are requests per second and latency percentiles, and their ratio.
//!
//!   cargo run --release -p flotilla-traffic --example gateway-bench -- [--clients 32]
//!       [--seconds 5] [--smoke]
//!
//! `--smoke` is a short run that fails only on errors (a failed or wrong answer), never on
//! speed. Backend, gateway and clients share this process and the machine's cores.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use common::{Run, print_ratio, print_table, run_clients};
use flotilla_api::federation::mcs::SERVICE_NAME;
use flotilla_traffic::gateway::routes::{Ingress, Inputs, Settings, build};
use flotilla_traffic::gateway::{Gateway, Listener, Shared};
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressSpec;
use serde_json::json;

mod common;

const BODY: &[u8; 64] = b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";

struct Args {
    clients: usize,
    seconds: f64,
    smoke: bool,
}

fn args() -> Args {
    let mut a = Args { clients: 32, seconds: 5.0, smoke: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--clients" => a.clients = value().parse().expect("--clients N"),
            "--seconds" => a.seconds = value().parse().expect("--seconds S"),
            "--smoke" => a.smoke = true,
            other => panic!("unknown flag {other} (see the file's header)"),
        }
    }
    if a.smoke {
        (a.clients, a.seconds) = (2, 0.5);
    }
    a
}

/// The backend: 64 bytes for every request, HTTP/1.1 keep-alive.
async fn backend() -> SocketAddr {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = tcp.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req: Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(BODY))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

/// The gateway's table: `bench.local/` to Service `web`, whose one endpoint is `backend`.
fn routes(backend: SocketAddr) -> flotilla_traffic::gateway::Routes {
    let spec: IngressSpec = serde_json::from_value(json!({"rules": [{"host": "bench.local", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}))
    .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abcde", "namespace": "bench", "labels": {SERVICE_NAME: "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": backend.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": [backend.ip().to_string()], "conditions": {"ready": true}}],
    }))
    .unwrap();
    let ingresses = [Ingress { kind: "MultiClusterIngress", namespace: "bench", name: "web", spec: &spec }];
    build(
        &Inputs { ingresses: &ingresses, services: &[], imports: &[], slices: &[("member1".to_string(), Arc::new(slice))], ready: &|_| true },
        &Settings::default(),
        None,
    )
}

/// `clients` connections to `addr`, each sending GETs one at a time for `seconds`.
async fn load(addr: SocketAddr, clients: usize, seconds: f64) -> Run {
    run_clients(clients, seconds, move |_, stop| async move {
        let (mut requests, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        while !stop.load(Ordering::Relaxed) {
            let req = Request::get("/").header("host", "bench.local").body(Empty::new()).unwrap();
            let t = Instant::now();
            let ok = match sender.send_request(req).await {
                Ok(resp) => resp.status() == 200 && resp.into_body().collect().await.is_ok_and(|b| b.to_bytes().as_ref() == BODY),
                Err(_) => false,
            };
            latencies.push(t.elapsed());
            requests += 1;
            if !ok {
                errors += 1;
                break;
            }
        }
        (requests, errors, latencies)
    })
    .await
}

#[tokio::main]
async fn main() {
    let a = args();
    let backend_addr = backend().await;
    let shared = Shared::default();
    shared.set_routes(routes(backend_addr));
    let listener = Listener::bind_plain("127.0.0.1:0".parse().unwrap()).await.expect("bind the gateway");
    let gateway_addr = listener.addr;
    let gateway = Arc::new(Gateway::new(shared.clone(), Default::default()));
    let stop = flotilla_runtime::CancellationToken::new();
    let serving = tokio::spawn(listener.serve(gateway, stop.clone()));

    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("# gateway-bench: {} clients (one keep-alive HTTP/1.1 connection each), {:.1} s per run, {} cores", a.clients, a.seconds, cores);
    let _ = load(backend_addr, a.clients, a.seconds.min(0.5)).await;
    let _ = load(gateway_addr, a.clients, a.seconds.min(0.5)).await;
    let mut results = Vec::new();
    for round in 0..2 {
        for (label, addr) in [("gateway", gateway_addr), ("direct", backend_addr)] {
            results.push((label, round, load(addr, a.clients, a.seconds).await));
        }
    }
    let (mut errors, best) = print_table("path", "requests/s", &results);
    // A run that answered nothing is an error too.
    errors += results.iter().filter(|(_, _, r)| r.count == 0).count() as u64;
    print_ratio(&best, "gateway", "direct", "gateway / direct", "requests/s");
    let c = shared.counters.as_ref();
    println!(
        "gateway counters: forwarded {}, retries {}, failed {}",
        c.forwarded.load(Ordering::Relaxed),
        c.retries.load(Ordering::Relaxed),
        c.failed.load(Ordering::Relaxed)
    );
    stop.cancel();
    let _ = serving.await;
    if errors > 0 {
        eprintln!("gateway-bench: {errors} failed or wrong answers (or a run with none)");
        std::process::exit(1);
    }
    println!("no errors");
}
