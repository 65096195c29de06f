//! API server benchmark: `flotilla up` in its own process, driven over HTTPS/HTTP2 by 1 and 64
//! clients, beside the store's own durable write rate measured in the same run on the same
//! disk.
//!
//!   cargo build --release -p flotilla --bins --examples && target/release/examples/apiserver-bench
//!   (smoke, for CI:  target/debug/examples/apiserver-bench --smoke)
//!
//! Figures: create/get/list/watch throughput and p50/p99 (closed loop, 1 and 64 clients), an
//! open-loop load of 2 KiB ConfigMap creates at fixed rates (latency from the scheduled send
//! time), LIST of 10,000 ConfigMaps, and resident memory per stored object (the server
//! process's RSS slope). Results go in docs/benchmarks/apiserver.md.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_store::Store;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

type Https = hyper_rustls::HttpsConnector<HttpConnector>;
type HttpClient = Client<Https, Full<Bytes>>;

struct Server {
    child: std::process::Child,
    url: String,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn flotilla_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|p| p.parent()).unwrap();
    dir.join("flotilla")
}

fn start_server(max_in_flight: usize) -> Server {
    let dir = tempfile::Builder::new().prefix("apiserver-bench-").tempdir().unwrap();
    let bin = flotilla_binary();
    assert!(bin.exists(), "build the flotilla binary first: {} is missing", bin.display());
    let mut child = Command::new(&bin)
        .args(["up", "--listen", "127.0.0.1:0", "--max-requests-inflight", &max_in_flight.to_string(), "--data-dir"])
        .arg(dir.path().join("data"))
        .env("FLOTILLA_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let (mut url, mut kubeconfig) = (None, None);
    while url.is_none() || kubeconfig.is_none() {
        let line = lines.next().expect("flotilla exited").unwrap();
        if let Some(r) = line.strip_prefix("flotilla: serving the Kubernetes API on ") {
            url = r.split_whitespace().next().map(String::from);
        }
        if let Some(r) = line.strip_prefix("flotilla: admin kubeconfig: ") {
            kubeconfig = Some(PathBuf::from(r.trim()));
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Server { child, url: url.unwrap(), kubeconfig: kubeconfig.unwrap(), _dir: dir }
}

fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn b64(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// An HTTP/2-only HTTPS client authenticating with the kubeconfig's admin certificate.
fn client(kubeconfig: &PathBuf) -> HttpClient {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let field = |name: &str| text.lines().find_map(|l| l.trim().strip_prefix(&format!("{name}: "))).unwrap().to_string();
    let ca = b64(&field("certificate-authority-data"));
    let cert = b64(&field("client-certificate-data"));
    let key = b64(&field("client-key-data"));
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(c.unwrap()).unwrap();
    }
    let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(&cert).map(|c| c.unwrap()).collect();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(&key).unwrap();
    let tls = rustls::ClientConfig::builder().with_root_certificates(roots).with_client_auth_cert(certs, key).unwrap();
    // Go clients (kubectl, client-go) set TCP_NODELAY; so does this one.
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only().enable_http2().wrap_connector(http);
    Client::builder(TokioExecutor::new()).http2_only(true).build(https)
}

async fn request(c: &HttpClient, method: &str, url: &str, body: Option<&Value>) -> (u16, Bytes) {
    let mut req = http::Request::builder().method(method).uri(url).header("content-type", "application/json");
    req = req.header("accept", "application/json");
    let body = body.map(|b| Bytes::from(serde_json::to_vec(b).unwrap())).unwrap_or_default();
    let resp = c.request(req.body(Full::new(body)).unwrap()).await.expect("request failed");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"payload": "x".repeat(2048)}})
}

struct Run {
    ops_per_s: f64,
    p50: u64,
    p99: u64,
}

/// `clients` tasks each doing `op` in a closed loop for `dur`.
async fn closed_loop<F, Fut>(clients: usize, dur: Duration, op: F) -> Run
where
    F: Fn(usize, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let op = op.clone();
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            while start.elapsed() < dur {
                let t = Instant::now();
                op(c, i).await;
                lat.push(t.elapsed().as_micros() as u64);
                i += 1;
            }
            lat
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.unwrap());
    }
    all.sort_unstable();
    Run { ops_per_s: all.len() as f64 / start.elapsed().as_secs_f64(), p50: pct(&all, 0.5), p99: pct(&all, 0.99) }
}

/// `reps` sequential LISTs, each checked to hold `n` items when given: sorted latencies in µs.
async fn list_latencies(c: &HttpClient, url: &str, n: Option<usize>, reps: usize) -> Vec<u64> {
    let mut lat = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let (code, body) = request(c, "GET", url, None).await;
        assert_eq!(code, 200);
        lat.push(t.elapsed().as_micros() as u64);
        let v: Value = serde_json::from_slice(&body).unwrap();
        let items = v["items"].as_array().unwrap().len();
        assert!(n.is_none_or(|n| n == items), "LIST {url}: {items} items, expected {n:?}");
    }
    lat.sort_unstable();
    lat
}

/// One watch stream: the latency of each of `events` ConfigMaps (their `data.sent`, in µs
/// since the epoch) from the write call to this watcher reading it.
async fn watch_latencies(c: HttpClient, url: String, events: usize) -> Vec<u64> {
    let req = http::Request::builder().uri(url).body(Full::new(Bytes::new())).unwrap();
    let mut body = c.request(req).await.unwrap().into_body();
    let mut buf = Vec::new();
    let mut lat = Vec::new();
    while lat.len() < events {
        let Some(Ok(frame)) = body.frame().await else { break };
        let Some(d) = frame.data_ref() else { continue };
        buf.extend_from_slice(d);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let v: Value = serde_json::from_slice(&line).unwrap();
            if let Some(sent) = v["object"]["data"]["sent"].as_str() {
                let sent: u128 = sent.parse().unwrap();
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
                lat.push(now.saturating_sub(sent) as u64);
            }
        }
    }
    lat
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!(
            "apiserver-bench [--smoke]: the full run (about 3 minutes: 5 s per closed-loop case, open loop at 250-2,000/s, 20,000 stored objects) or a smoke run of seconds. Build the flotilla binary beside it first (same profile)."
        );
        return;
    }
    let smoke = std::env::args().any(|a| a == "--smoke");
    let secs = |full: u64, smoke_ms: u64| if smoke { Duration::from_millis(smoke_ms) } else { Duration::from_secs(full) };
    println!("# apiserver benchmark ({} run, {} build)", if smoke { "smoke" } else { "full" }, if cfg!(debug_assertions) { "debug" } else { "release" });

    // The store's own durable write rate, same backend, same disk: the ceiling.
    let dir = tempfile::Builder::new().prefix("apiserver-bench-store-").tempdir().unwrap();
    let mut cfg = EmbeddedConfig::new(dir.path().join("store.redb"));
    cfg.retention.interval = None;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(cfg).await.unwrap());
    let value = Bytes::from(vec![b'x'; 2200]);
    let mut store_rates = Vec::new();
    for writers in [1usize, 64] {
        let s = store.clone();
        let v = value.clone();
        let run = closed_loop(writers, secs(5, 500), move |c, i| {
            let s = s.clone();
            let v = v.clone();
            async move {
                s.create(Bytes::from(format!("/ceiling/{writers}/{c}/{i}")), v).await.unwrap();
            }
        })
        .await;
        store_rates.push(run.ops_per_s);
    }
    drop(store);
    println!("\n## ceiling: the store's durable creates of 2 KiB values (no HTTP)");
    println!("1 writer: {:.0}/s; 64 writers: {:.0}/s", store_rates[0], store_rates[1]);

    let server = start_server(1000);
    let ns_url = format!("{}/api/v1/namespaces/default/configmaps", server.url);
    let shared = client(&server.kubeconfig);
    println!("\n## closed loop over HTTPS/HTTP2 (2 KiB ConfigMaps)");
    println!("{:<8} {:>7} {:>10} {:>10} {:>10}", "op", "clients", "ops/s", "p50", "p99");
    let mut create64 = 0.0;
    let mut mutating_p99_64 = 0;
    for clients in [1usize, 64] {
        let conns: Arc<Vec<HttpClient>> = Arc::new((0..clients).map(|_| client(&server.kubeconfig)).collect());
        let url = ns_url.clone();
        let cs = conns.clone();
        let run = closed_loop(clients, secs(5, 500), move |c, i| {
            let cs = cs.clone();
            let url = url.clone();
            async move {
                let (code, _) = request(&cs[c], "POST", &url, Some(&configmap(&format!("c{clients}-{c}-{i}")))).await;
                assert_eq!(code, 201);
            }
        })
        .await;
        if clients == 64 {
            create64 = run.ops_per_s;
            mutating_p99_64 = run.p99;
        }
        println!("{:<8} {:>7} {:>10.0} {:>10} {:>10}", "create", clients, run.ops_per_s, ms(run.p50), ms(run.p99));
        let url = ns_url.clone();
        let cs = conns.clone();
        let run = closed_loop(clients, secs(5, 500), move |c, _| {
            let cs = cs.clone();
            let url = format!("{url}/c{clients}-{c}-0");
            async move {
                let (code, _) = request(&cs[c], "GET", &url, None).await;
                assert_eq!(code, 200);
            }
        })
        .await;
        println!("{:<8} {:>7} {:>10.0} {:>10} {:>10}", "get", clients, run.ops_per_s, ms(run.p50), ms(run.p99));
        let url = ns_url.clone();
        let cs = conns.clone();
        let run = closed_loop(clients, secs(5, 500), move |c, _| {
            let cs = cs.clone();
            let url = format!("{url}?limit=10");
            async move {
                let (code, _) = request(&cs[c], "GET", &url, None).await;
                assert_eq!(code, 200);
            }
        })
        .await;
        println!("{:<8} {:>7} {:>10.0} {:>10} {:>10}", "list10", clients, run.ops_per_s, ms(run.p50), ms(run.p99));
    }
    println!(
        "64-client creates: {:.0}/s = {:.0}% of the store's 64-writer rate (goal >= 50%); mutating p99 {} (goal <= 20 ms)",
        create64,
        100.0 * create64 / store_rates[1],
        ms(mutating_p99_64)
    );

    // Watch delivery: 1 and 64 watchers (each on its own connection) of one namespace, one
    // writer; latency from the write call to each watcher reading the event.
    println!("\n## watch delivery (write call -> event read by each watcher)");
    let events = if smoke { 50 } else { 2000 };
    for watchers in [1usize, 64] {
        let ns = format!("watch{watchers}");
        request(&shared, "POST", &format!("{}/api/v1/namespaces", server.url), Some(&json!({"metadata": {"name": ns}}))).await;
        let watch_url = format!("{}/api/v1/namespaces/{ns}/configmaps?watch=true", server.url);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..watchers {
            tasks.spawn(watch_latencies(client(&server.kubeconfig), watch_url.clone(), events));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let url = format!("{}/api/v1/namespaces/{ns}/configmaps", server.url);
        let started = Instant::now();
        for i in 0..events {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("w{i}")}, "data": {"sent": now.to_string()}});
            request(&shared, "POST", &url, Some(&body)).await;
        }
        let mut lat = Vec::new();
        while let Some(r) = tasks.join_next().await {
            lat.extend(r.unwrap());
        }
        let took = started.elapsed().as_secs_f64();
        lat.sort_unstable();
        println!(
            "{watchers:>2} watcher(s): {} of {} events delivered in {took:.2}s ({:.0} deliveries/s), p50 {} p99 {}",
            lat.len(),
            events * watchers,
            lat.len() as f64 / took,
            ms(pct(&lat, 0.5)),
            ms(pct(&lat, 0.99))
        );
    }

    // Open loop: creates at fixed rates; latency from the scheduled send time.
    println!("\n## open loop: 2 KiB ConfigMap creates at a fixed rate");
    let rates: &[u64] = if smoke { &[100] } else { &[250, 500, 1000, 2000] };
    for &rate in rates {
        let conns: Arc<Vec<HttpClient>> = Arc::new((0..8).map(|_| client(&server.kubeconfig)).collect());
        let dur = secs(5, 500);
        let n = (dur.as_secs_f64() * rate as f64) as u64;
        let start = Instant::now() + Duration::from_millis(50);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..n {
            let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
            let cs = conns.clone();
            let url = ns_url.clone();
            tasks.spawn(async move {
                tokio::time::sleep_until(due.into()).await;
                let (code, _) = request(&cs[(i % 8) as usize], "POST", &url, Some(&configmap(&format!("open{rate}-{i}")))).await;
                (code, Instant::now().saturating_duration_since(due).as_micros() as u64)
            });
        }
        let mut lat = Vec::new();
        let mut errors = 0;
        while let Some(r) = tasks.join_next().await {
            let (code, l) = r.unwrap();
            if code != 201 {
                errors += 1;
            }
            lat.push(l);
        }
        lat.sort_unstable();
        let achieved = n as f64 / (start.elapsed().as_secs_f64());
        println!("{rate:>5}/s offered: achieved {achieved:.0}/s, p50 {} p99 {}, {errors} errors", ms(pct(&lat, 0.5)), ms(pct(&lat, 0.99)));
    }

    // LIST of 10,000 and the memory slope, on a fresh server.
    drop(server);
    let server = start_server(1000);
    let pid = server.child.id();
    let (first, second) = if smoke { (500usize, 1000usize) } else { (10_000, 20_000) };
    let conns: Arc<Vec<HttpClient>> = Arc::new((0..16).map(|_| client(&server.kubeconfig)).collect());
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url);
    let fill = |url: String, from: usize, to: usize| {
        let conns = conns.clone();
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for w in 0..16 {
                let conns = conns.clone();
                let url = url.clone();
                tasks.spawn(async move {
                    let mut i = from + w;
                    while i < to {
                        let (code, _) = request(&conns[w], "POST", &url, Some(&configmap(&format!("obj-{i:06}")))).await;
                        assert_eq!(code, 201);
                        i += 16;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        }
    };
    fill(url.clone(), 0, first).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss1 = rss_of(pid);
    // The second half in another namespace: the LIST below reads exactly `first` objects of a
    // store holding `second`.
    request(&conns[0], "POST", &format!("{}/api/v1/namespaces", server.url), Some(&json!({"metadata": {"name": "more"}}))).await;
    fill(format!("{}/api/v1/namespaces/more/configmaps", server.url), first, second).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss2 = rss_of(pid);
    println!("\n## footprint");
    println!(
        "server RSS {:.1} MiB at {first} objects, {:.1} MiB at {second}: {:.0} bytes per stored 2 KiB object (goal <= 3 KiB)",
        rss1 as f64 / 1048576.0,
        rss2 as f64 / 1048576.0,
        (rss2 as f64 - rss1 as f64) / (second - first) as f64
    );
    let reps = if smoke { 3 } else { 30 };
    let lat = list_latencies(&conns[0], &url, Some(first), reps).await;
    println!("LIST of {first} ConfigMaps (one namespace): p50 {} p99 {} (goal: LIST of 10,000 p99 <= 300 ms)", ms(pct(&lat, 0.5)), ms(pct(&lat, 0.99)));
    let lat = list_latencies(&conns[0], &format!("{}/api/v1/configmaps", server.url), None, reps).await;
    println!("LIST of all {second}+ ConfigMaps (every namespace): p50 {} p99 {}", ms(pct(&lat, 0.5)), ms(pct(&lat, 0.99)));
}
