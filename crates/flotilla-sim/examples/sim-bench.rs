//! Scale benchmark of simulated members (issue 6, "Must show" 3): many members in this one
//! process behind one HTTPS listener (`flotilla member --members N`'s fleet), and what each costs
//! in resident memory.
//!
//!   cargo build --release -p flotilla-sim --example sim-bench
//!   $CARGO_TARGET_DIR/release/examples/sim-bench                  (1,000 members, 6,000 pods)
//!   (smoke, for CI: $CARGO_TARGET_DIR/debug/examples/sim-bench --smoke)
//!
//! In this order:
//! 1. RSS with no member, then the fleet starts (in-memory stores, default members: 2 nodes
//!    each, workload simulation on); RSS is sampled as members come up, and once every member's
//!    simulator is idle. Slope per idle member: least squares over the samples, with R².
//! 2. `/readyz` of every member over HTTPS through the routed listener (`/clusters/<name>`),
//!    the serving certificate verified against the fleet CA; one request at a time, p50/p99.
//! 3. A service account per member with a Role on Deployments and pods in `default`, and a
//!    token (TokenRequest) — set up in-process; everything after goes over HTTPS with the
//!    member's token.
//! 4. One watch per member (Deployments in `default`, HTTP/1.1: one connection per watch), kept
//!    open to the end; RSS before and after gives the cost of a watch (both ends of it).
//! 5. A 1-replica Deployment in a 10 % sample of the members; time from create to
//!    `readyReplicas = 1` seen on the member's watch, then confirmed with a GET.
//! 6. Bare pods in batches, round-robin over all members, each batch to Ready (seen in LISTs);
//!    after each batch RSS ("fresh": the pods' write history — every version, in the store's
//!    log and its broadcast ring — still held), then the history dropped as time would drop it
//!    (the ring turned over, the store compacted to its current revision) and RSS again
//!    ("settled"). Per pod: the first batch fresh, and the settled slope over batches (least
//!    squares), beside the size of a pod as stored (the bytes of
//!    `/registry/core/pods/default/<name>` in the member's store).
//!
//! The goals (≤ 1 MiB per idle member; ≤ 1.5× the serialized size per pod) are printed beside
//! the figures and never fail the run. The run fails (exit 1) only on errors: a member that does
//! not answer `/readyz`, a watch that does not open or ends, a Deployment or pod never Ready.
//! Results go in docs/benchmarks/sim.md.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use flotilla_sim::bench::{Errors, Phase, loadavg, mib, pct, rss};
use flotilla_sim::config::pod_cidr_for;
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use flotilla_store::{Op, RangeRequest};
use futures::StreamExt;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

const SA: &str = "sim-bench";
const POD_LABEL: &str = "bench.flotilla.io/batch";

#[derive(Parser)]
#[command(about = "Simulated members at scale: memory per idle member and per pod, /readyz, watches, Deployments to Ready")]
struct Args {
    /// CI size: 20 members, 60 pods in 3 batches, no idle hold; seconds in a debug build.
    #[arg(long)]
    smoke: bool,
    /// Members in the fleet [default: 1000; smoke: 20].
    #[arg(long)]
    members: Option<usize>,
    /// Percentage of the members that run a 1-replica Deployment to Ready.
    #[arg(long, default_value_t = 10.0)]
    sample_percent: f64,
    /// Bare pods created, round-robin over the members [default: 6000; smoke: 60].
    #[arg(long)]
    pods: Option<usize>,
    /// Batches the pods are created in (one RSS sample each) [default: 6; smoke: 3].
    #[arg(long)]
    pod_batches: Option<usize>,
    /// Requests in flight while setting up and creating.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Hold the fleet idle this long after start-up, sampling RSS (heartbeats add history until
    /// the members compact it) [default: 120; smoke: 0].
    #[arg(long)]
    idle_hold_secs: Option<u64>,
    /// Give up on a Deployment or a batch of pods not Ready this long after it was created.
    #[arg(long, default_value = "300")]
    ready_timeout_secs: u64,
}

// ---------------------------------------------------------------------------------------------
// Live heap bytes

/// The system allocator, counting the bytes currently allocated: RSS keeps memory freed earlier
/// (malloc reuses it before growing), so after anything is freed an RSS slope understates what
/// new objects take; the live count does not. (A process-wide counter is inherent to a global
/// allocator; this binary is its only user.)
#[allow(unsafe_code)]
mod live_heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static LIVE: AtomicU64 = AtomicU64::new(0);

    pub struct Counting;

    // SAFETY: every call is forwarded to `System` with the same arguments; only a counter is
    // added.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) };
            LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                LIVE.fetch_add(new_size as u64, Ordering::Relaxed);
                LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            }
            p
        }
    }
}

#[global_allocator]
static ALLOCATOR: live_heap::Counting = live_heap::Counting;

/// Bytes allocated on the heap now.
fn live() -> u64 {
    live_heap::LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// Figures

/// Resident set of this process, and its anonymous part, in bytes (`/proc/self/status`).
fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

/// Least squares line through the points: (slope, intercept, R²).
fn fit(points: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = points.len() as f64;
    if points.len() < 2 {
        return (0.0, points.first().map(|p| p.1).unwrap_or(0.0), 0.0);
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 { sxy * sxy / (sxx * syy) } else { 0.0 };
    (slope, my - slope * mx, r2)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

// ---------------------------------------------------------------------------------------------
// HTTPS

/// A client that trusts only the fleet CA (HTTP/1.1: each watch gets a connection of its own,
/// as each member's client would).
fn https_client(ca_pem: &str) -> anyhow::Result<Https> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only().enable_http1().wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

fn request(method: Method, url: &str, token: Option<&str>, body: Option<&Value>) -> Request<Full<Bytes>> {
    let mut b = Request::builder().method(method).uri(url).header("accept", "application/json");
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            b = b.header("content-type", "application/json");
            Full::new(Bytes::from(serde_json::to_vec(v).expect("JSON")))
        }
        None => Full::new(Bytes::new()),
    };
    b.body(body).expect("a valid request")
}

async fn call(client: &Https, method: Method, url: &str, token: Option<&str>, body: Option<&Value>) -> Result<(StatusCode, Bytes), String> {
    let resp = client.request(request(method.clone(), url, token, body)).await.map_err(|e| format!("{method} {url}: {e}"))?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.map_err(|e| format!("{method} {url}: reading the body: {e}"))?.to_bytes();
    Ok((status, bytes))
}

/// `call`, wanting a 2xx with a JSON body.
async fn call_json(client: &Https, method: Method, url: &str, token: &str, body: Option<&Value>) -> Result<Value, String> {
    let (status, bytes) = call(client, method.clone(), url, Some(token), body).await?;
    if !status.is_success() {
        return Err(format!("{method} {url}: {status}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(300)])));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("{method} {url}: not JSON: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Objects

fn sample_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "sample", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sample"}},
            "template": {
                "metadata": {"labels": {"app": "sample"}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }
    })
}

fn bench_pod(name: &str, batch: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench-pod", POD_LABEL: batch.to_string()}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    })
}

fn pod_ready(p: &Value) -> bool {
    p.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// A service account in `default` that may watch Deployments and create pods there, and a token
/// of it.
async fn member_token(member: &flotilla_sim::Member) -> Result<String, String> {
    let admin = member.client();
    let pp = PostParams::default();
    let err = |what: &str| {
        let what = format!("member {}: {what}", member.name());
        move |e: kube::Error| format!("{what}: {e}")
    };
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": SA}})).expect("a ServiceAccount");
    Api::<ServiceAccount>::default_namespaced(admin.clone()).create(&pp, &sa).await.map_err(err("creating the service account"))?;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": SA},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "create"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create"]}
        ]
    }))
    .expect("a Role");
    Api::<Role>::default_namespaced(admin.clone()).create(&pp, &role).await.map_err(err("creating the role"))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": SA},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": "default"}]
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::default_namespaced(admin.clone()).create(&pp, &binding).await.map_err(err("creating the role binding"))?;
    let tr: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 86400}})).expect("a TokenRequest");
    let issued = Api::<ServiceAccount>::default_namespaced(admin).create_token_request(SA, &pp, &tr).await.map_err(err("requesting a token"))?;
    issued.status.and_then(|s| s.token).filter(|t| !t.is_empty()).ok_or_else(|| format!("member {}: an empty token", member.name()))
}

// ---------------------------------------------------------------------------------------------
// Watches

/// What the watches have seen.
#[derive(Default)]
struct Watches {
    /// Member index → when its `sample` Deployment was first seen with a ready replica.
    ready: Mutex<HashMap<usize, Instant>>,
    events: AtomicU64,
    ended: AtomicU64,
    stopping: std::sync::atomic::AtomicBool,
}

/// Open a watch on Deployments in `default` of member `idx` and follow it; `opened` says when the
/// response headers came (or why not).
async fn follow_watch(
    client: Https,
    url: String,
    token: String,
    idx: usize,
    watches: Arc<Watches>,
    opened: tokio::sync::oneshot::Sender<Result<(), String>>,
    errors: Arc<Errors>,
) {
    let resp = match client.request(request(Method::GET, &url, Some(&token), None)).await {
        Ok(r) if r.status() == StatusCode::OK => r,
        Ok(r) => {
            let _ = opened.send(Err(format!("watch {url}: {}", r.status())));
            return;
        }
        Err(e) => {
            let _ = opened.send(Err(format!("watch {url}: {e}")));
            return;
        }
    };
    let _ = opened.send(Ok(()));
    let mut body = resp.into_body();
    let mut line: Vec<u8> = Vec::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else { continue };
                line.extend_from_slice(&data);
                while let Some(nl) = line.iter().position(|&b| b == b'\n') {
                    let event: Vec<u8> = line.drain(..=nl).collect();
                    let Ok(ev) = serde_json::from_slice::<Value>(&event) else {
                        errors.add(format!("watch {url}: an event that is not JSON"));
                        continue;
                    };
                    watches.events.fetch_add(1, Ordering::Relaxed);
                    let obj = &ev["object"];
                    if ev["type"] == "ERROR" {
                        errors.add(format!("watch {url}: an ERROR event: {obj}"));
                    } else if obj.pointer("/metadata/name") == Some(&json!("sample"))
                        && obj.pointer("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0) >= 1
                    {
                        watches.ready.lock().entry(idx).or_insert_with(Instant::now);
                    }
                }
            }
            Some(Err(e)) => {
                if !watches.stopping.load(Ordering::Relaxed) {
                    errors.add(format!("watch {url}: {e}"));
                }
                break;
            }
            None => break,
        }
    }
    watches.ended.fetch_add(1, Ordering::Relaxed);
    if !watches.stopping.load(Ordering::Relaxed) {
        errors.add(format!("watch {url} ended"));
    }
}

// ---------------------------------------------------------------------------------------------

struct Sizes {
    members: usize,
    pods: usize,
    batches: usize,
}

impl Args {
    fn sizes(&self) -> Sizes {
        let s = self.smoke;
        Sizes {
            members: self.members.unwrap_or(if s { 20 } else { 1000 }),
            pods: self.pods.unwrap_or(if s { 60 } else { 6000 }),
            batches: self.pod_batches.unwrap_or(if s { 3 } else { 6 }).max(1),
        }
    }
}

fn member_name(i: usize) -> String {
    format!("member{}", i + 1)
}

/// Wait until every member's simulator has nothing queued.
async fn all_idle(fleet: &Fleet, concurrency: usize) {
    futures::stream::iter(fleet.members()).for_each_concurrent(concurrency, |e| async move { e.member.idle().await.ok().unwrap_or(()) }).await;
}

/// Batches the member's store keeps in its broadcast ring (`member::watch_config`).
const RING_BATCHES: usize = 128;

/// Drop the write history every member holds, as time does: push the store's broadcast ring
/// over with more than a ring's worth of tiny writes to a key outside `/registry/` (no watcher
/// of the member sees them; heartbeats turn a member's ring over within minutes), a few at a
/// time so that watchers keep up, then compact the store to its current revision (the
/// member's compactor does every five minutes).
async fn settle_history(fleet: &Fleet, concurrency: usize, errors: &Errors) {
    let key = Bytes::from_static(b"/sim-bench/turnover");
    futures::stream::iter(fleet.members())
        .for_each_concurrent(concurrency, |e| {
            let key = key.clone();
            async move {
                let store = e.member.store();
                for k in 0..=RING_BATCHES {
                    let op = if k < RING_BATCHES { Op::Put(key.clone(), Bytes::from_static(b"x")) } else { Op::Delete(key.clone()) };
                    if let Err(err) = store.txn(Vec::new(), vec![op]).await {
                        errors.add(format!("member {}: turning the ring over: {err}", e.member.name()));
                        break;
                    }
                    if k % 8 == 7 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for e in fleet.members() {
        let store = e.member.store();
        match store.current_revision().await {
            Ok(rev) => {
                if let Err(err) = store.compact(rev).await {
                    errors.add(format!("member {}: compacting: {err}", e.member.name()));
                }
            }
            Err(err) => errors.add(format!("member {}: current revision: {err}", e.member.name())),
        }
    }
}

#[allow(clippy::too_many_lines)]
async fn run(args: Args, errors: Arc<Errors>) -> anyhow::Result<()> {
    let sizes = args.sizes();
    let n = sizes.members;
    let conc = args.concurrency.max(1);
    let ready_timeout = Duration::from_secs(args.ready_timeout_secs);
    let dir = tempfile::tempdir()?;
    let begin = Phase::start();
    println!(
        "sim-bench: {n} members, {}% sample, {} pods in {} batches; {} cores, load average {}",
        args.sample_percent,
        sizes.pods,
        sizes.batches,
        std::thread::available_parallelism().map(|p| p.get()).unwrap_or(0),
        loadavg()
    );

    // 1. Start the fleet, sampling RSS as members come up.
    let (rss0, anon0) = rss();
    println!("\n## 1. start {n} members\nRSS with no member: {} (anonymous {})", mib(rss0 as f64), mib(anon0 as f64));
    let members: Vec<MemberConfig> = (0..n)
        .map(|i| {
            let mut m = MemberConfig::new(&member_name(i));
            m.pod_cidr = pod_cidr_for(i);
            m
        })
        .collect();
    let live0 = live();
    let samples: Arc<Mutex<Vec<(f64, f64)>>> = Arc::new(Mutex::new(vec![(0.0, rss0 as f64)]));
    let live_samples: Arc<Mutex<Vec<(f64, f64)>>> = Arc::new(Mutex::new(vec![(0.0, live0 as f64)]));
    let every = (n / 20).max(1);
    let phase = Phase::start();
    let (s, ls) = (samples.clone(), live_samples.clone());
    let fleet = Fleet::start(FleetConfig::new(members, dir.path().to_path_buf()), move |done, total| {
        if done % every == 0 || done == total {
            let (r, _) = rss();
            s.lock().push((done as f64, r as f64));
            ls.lock().push((done as f64, live() as f64));
            if done % (every * 4) == 0 || done == total {
                println!("  {done}/{total} members started, RSS {}", mib(r as f64));
            }
        }
    })
    .await?;
    let start_time = phase.elapsed();
    println!("started in {:.1} s {}", start_time.as_secs_f64(), phase.end());
    let phase = Phase::start();
    all_idle(&fleet, conc).await;
    let (rss_idle, anon_idle) = rss();
    println!("every simulator idle after {:.1} s more: RSS {} (anonymous {})", phase.elapsed().as_secs_f64(), mib(rss_idle as f64), mib(anon_idle as f64));
    let mut nodes = 0;
    for e in fleet.members() {
        let r = e.member.store().range(RangeRequest { count_only: true, ..RangeRequest::prefix(Bytes::from_static(b"/registry/core/nodes/")) }).await?;
        nodes += r.count;
    }
    let pts = samples.lock().clone();
    let (member_slope, member_intercept, member_r2) = fit(&pts);
    let mut with_idle = pts.clone();
    with_idle.push((n as f64, rss_idle as f64));
    let (idle_slope, _, idle_r2) = fit(&with_idle);
    let settled_avg = (rss_idle as f64 - rss0 as f64) / n as f64;
    let (live_member_slope, _, live_member_r2) = fit(&live_samples.lock());
    let live_idle = live();
    let live_settled_avg = (live_idle as f64 - live0 as f64) / n as f64;
    println!(
        "live heap: {} with no member, {} with {n} idle: per member slope {} (R² {live_member_r2:.4}), (settled − empty)/N {}",
        mib(live0 as f64),
        mib(live_idle as f64),
        kib(live_member_slope),
        kib(live_settled_avg)
    );
    println!(
        "nodes held: {nodes} ({:.1} per member)\nper idle member: slope {} (R² {member_r2:.4}, {} samples, intercept {}); with the settled point {} (R² {idle_r2:.4}); (settled − empty)/N {}",
        nodes as f64 / n as f64,
        kib(member_slope),
        pts.len(),
        mib(member_intercept),
        kib(idle_slope),
        kib(settled_avg)
    );
    if let Some(e) = fleet.members().next() {
        let (keys, revs) = e.member.store_sizes().unwrap_or((0, 0));
        println!("one member's store: {keys} keys, {revs} revisions of history");
    }

    // 1b. Idle: heartbeats (a Lease per node every 10 s, node status every 40 s) add history
    // until the member's compactor drops it (every 5 minutes, keeping one interval).
    let hold = Duration::from_secs(args.idle_hold_secs.unwrap_or(if args.smoke { 0 } else { 120 }));
    let mut growth = None;
    if !hold.is_zero() {
        println!("\n## 1b. idle for {} s (heartbeats only), RSS every 10 s", hold.as_secs());
        let phase = Phase::start();
        let mut over_time = vec![(0.0, rss().0 as f64)];
        let mut live_over_time = vec![(0.0, live() as f64)];
        while phase.elapsed() < hold {
            tokio::time::sleep(Duration::from_secs(10).min(hold)).await;
            let (r, _) = rss();
            let t = phase.elapsed().as_secs_f64();
            over_time.push((t, r as f64));
            live_over_time.push((t, live() as f64));
            if over_time.len() % 3 == 1 {
                println!("  {t:.0} s: RSS {}", mib(r as f64));
            }
        }
        let (rate, _, r2) = fit(&over_time);
        let (live_rate, _, live_r2) = fit(&live_over_time);
        println!("live heap grows {} per member per minute (R² {live_r2:.4})", kib(live_rate * 60.0 / n as f64));
        let (keys, revs) = fleet.members().next().and_then(|e| e.member.store_sizes()).unwrap_or((0, 0));
        println!(
            "RSS grows {} per member per minute (R² {r2:.4}); one member's store now {keys} keys, {revs} revisions of history {}",
            kib(rate * 60.0 / n as f64),
            phase.end()
        );
        growth = Some((rate * 60.0 / n as f64, r2, phase.elapsed()));
    }
    let (rss_held, _) = rss();

    // 2. /readyz over HTTPS, one at a time.
    let client = https_client(fleet.ca_pem())?;
    let base = format!("https://127.0.0.1:{}", fleet.local_addr.port());
    println!("\n## 2. /readyz of every member over HTTPS ({base}/clusters/<name>/readyz, CA-verified)");
    let phase = Phase::start();
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let url = format!("{base}/clusters/{}/readyz", member_name(i));
        let t = Instant::now();
        match call(&client, Method::GET, &url, None, None).await {
            Ok((StatusCode::OK, body)) if body.as_ref() == b"ok" => lat.push(t.elapsed()),
            Ok((status, body)) => errors.add(format!("{url}: {status}: {}", String::from_utf8_lossy(&body))),
            Err(e) => errors.add(e),
        }
        if (i + 1) % 250 == 0 {
            println!("  {}/{n} answered", i + 1);
        }
    }
    lat.sort();
    println!(
        "{} of {n} answered ok; latency p50 {} p99 {} max {} {}",
        lat.len(),
        ms(pct(&lat, 0.5)),
        ms(pct(&lat, 0.99)),
        ms(lat.last().copied().unwrap_or_default()),
        phase.end()
    );
    let readyz_ok = lat.len();

    // 3. Credentials.
    println!("\n## 3. a service account, Role and token per member (in-process)");
    let phase = Phase::start();
    let entries: Vec<_> = fleet.members().cloned().collect();
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut results = futures::stream::iter(entries.iter().enumerate()).map(|(i, e)| async move { (i, member_token(&e.member).await) }).buffer_unordered(conc);
    let index: HashMap<String, usize> = (0..n).map(|i| (member_name(i), i)).collect();
    while let Some((i, r)) = results.next().await {
        match r {
            Ok(t) => tokens[index[entries[i].member.name()]] = Some(t),
            Err(e) => errors.add(e),
        }
    }
    drop(results);
    println!("{} tokens {}", tokens.iter().flatten().count(), phase.end());

    // 4. One watch per member.
    let (rss_before_watch, _) = rss();
    let live_before_watch = live();
    println!("\n## 4. one watch per member (Deployments in default, over HTTPS with the member's token)");
    let phase = Phase::start();
    let watches = Arc::new(Watches::default());
    let mut opened = Vec::with_capacity(n);
    for (i, token) in tokens.iter().enumerate() {
        let Some(token) = token else { continue };
        let url = format!("{base}/clusters/{}/apis/apps/v1/namespaces/default/deployments?watch=true&timeoutSeconds=86400", member_name(i));
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(follow_watch(client.clone(), url, token.clone(), i, watches.clone(), tx, errors.clone()));
        opened.push(rx);
    }
    let mut open = 0;
    for (k, rx) in opened.into_iter().enumerate() {
        match tokio::time::timeout(Duration::from_secs(120), rx).await {
            Ok(Ok(Ok(()))) => open += 1,
            Ok(Ok(Err(e))) => errors.add(e),
            Ok(Err(_)) => errors.add("a watch task stopped before answering".into()),
            Err(_) => errors.add("a watch did not open within 120 s".into()),
        }
        if (k + 1) % 250 == 0 {
            println!("  {}/{n} watches open", k + 1);
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_watch, _) = rss();
    let per_watch = (rss_watch as f64 - rss_before_watch as f64) / open.max(1) as f64;
    let live_per_watch = (live() as f64 - live_before_watch as f64) / open.max(1) as f64;
    println!("live heap per watch: {}", kib(live_per_watch));
    println!(
        "{open} watches open; RSS {} → {}: {} per watch (client and server ends, TLS) {}",
        mib(rss_before_watch as f64),
        mib(rss_watch as f64),
        kib(per_watch),
        phase.end()
    );

    // 5. A 1-replica Deployment in a sample of the members.
    let step = (100.0 / args.sample_percent.clamp(0.1, 100.0)).round().max(1.0) as usize;
    let sample: Vec<usize> = (0..n).step_by(step).filter(|&i| tokens[i].is_some()).collect();
    println!("\n## 5. a 1-replica Deployment in {} members (every {step}th), to Ready as seen on each member's watch", sample.len());
    let phase = Phase::start();
    let created: Arc<Mutex<HashMap<usize, Instant>>> = Arc::default();
    futures::stream::iter(sample.iter().copied())
        .for_each_concurrent(conc, |i| {
            let (client, base, token, created, errors) = (client.clone(), base.clone(), tokens[i].clone().unwrap_or_default(), created.clone(), errors.clone());
            async move {
                let url = format!("{base}/clusters/{}/apis/apps/v1/namespaces/default/deployments", member_name(i));
                let t = Instant::now();
                match call_json(&client, Method::POST, &url, &token, Some(&sample_deployment())).await {
                    Ok(_) => {
                        created.lock().insert(i, t);
                    }
                    Err(e) => errors.add(e),
                }
            }
        })
        .await;
    let deadline = Instant::now() + ready_timeout;
    loop {
        let ready = watches.ready.lock().len();
        if ready >= created.lock().len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut dl = Vec::new();
    {
        let ready = watches.ready.lock();
        for (i, t) in created.lock().iter() {
            match ready.get(i) {
                Some(r) => dl.push(r.saturating_duration_since(*t)),
                None => errors.add(format!("member {}: Deployment sample not Ready on the watch within {}s", member_name(*i), ready_timeout.as_secs())),
            }
        }
    }
    dl.sort();
    // Confirm through a GET.
    let mut confirmed = 0;
    for &i in &sample {
        let url = format!("{base}/clusters/{}/apis/apps/v1/namespaces/default/deployments/sample", member_name(i));
        match call_json(&client, Method::GET, &url, tokens[i].as_deref().unwrap_or(""), None).await {
            Ok(d) if d.pointer("/status/readyReplicas").and_then(Value::as_i64) == Some(1) => confirmed += 1,
            Ok(d) => errors.add(format!("{url}: readyReplicas {}", d.pointer("/status/readyReplicas").cloned().unwrap_or(Value::Null))),
            Err(e) => errors.add(e),
        }
    }
    println!(
        "{} of {} Ready on the watch (GET confirms {confirmed}); create → Ready p50 {} p99 {} max {} {}",
        dl.len(),
        sample.len(),
        ms(pct(&dl, 0.5)),
        ms(pct(&dl, 0.99)),
        ms(dl.last().copied().unwrap_or_default()),
        phase.end()
    );

    // 6. Pods in batches; RSS after each, fresh and once its write history is dropped.
    println!("\n## 6. {} bare pods in {} batches, round-robin over the members, each batch to Ready", sizes.pods, sizes.batches);
    all_idle(&fleet, conc).await;
    settle_history(&fleet, conc, &errors).await;
    let (rss_p0, _) = rss();
    let mut fresh_points = vec![(0.0, rss_p0 as f64)];
    let mut settled_points = Vec::new();
    let mut live_fresh_points = vec![(0.0, live() as f64)];
    let mut live_settled_points = Vec::new();
    println!("before: RSS {} (write history dropped)", mib(rss_p0 as f64));
    let per_batch = sizes.pods.div_ceil(sizes.batches);
    let mut made = 0usize;
    let mut create_lat = Vec::new();
    let phase_all = Phase::start();
    for b in 0..sizes.batches {
        let phase = Phase::start();
        let count = per_batch.min(sizes.pods - made);
        let jobs: Vec<(usize, String)> = (made..made + count).map(|k| (k % n, format!("bench-pod-{k}"))).filter(|(i, _)| tokens[*i].is_some()).collect();
        let lats: Arc<Mutex<Vec<Duration>>> = Arc::default();
        futures::stream::iter(jobs.iter().cloned())
            .for_each_concurrent(conc, |(i, name)| {
                let (client, base, token, errors, lats) = (client.clone(), base.clone(), tokens[i].clone().unwrap_or_default(), errors.clone(), lats.clone());
                async move {
                    let url = format!("{base}/clusters/{}/api/v1/namespaces/default/pods", member_name(i));
                    let t = Instant::now();
                    match call_json(&client, Method::POST, &url, &token, Some(&bench_pod(&name, b))).await {
                        Ok(_) => lats.lock().push(t.elapsed()),
                        Err(e) => errors.add(e),
                    }
                }
            })
            .await;
        create_lat.extend(lats.lock().iter().copied());
        made += count;
        // Wait for the batch to be Ready, member by member.
        let mut want: HashMap<usize, usize> = HashMap::new();
        for (i, _) in &jobs {
            *want.entry(*i).or_default() += 1;
        }
        let deadline = Instant::now() + ready_timeout;
        let mut pending: Vec<(usize, usize)> = want.into_iter().collect();
        while !pending.is_empty() {
            let checks = futures::stream::iter(pending.iter().copied())
                .map(|(i, want)| {
                    let (client, base, token) = (client.clone(), base.clone(), tokens[i].clone().unwrap_or_default());
                    async move {
                        let url = format!("{base}/clusters/{}/api/v1/namespaces/default/pods?labelSelector={POD_LABEL}%3D{b}", member_name(i));
                        let ready = match call_json(&client, Method::GET, &url, &token, None).await {
                            Ok(list) => list["items"].as_array().map(|items| items.iter().filter(|p| pod_ready(p)).count()).unwrap_or(0),
                            Err(_) => 0,
                        };
                        (i, want, ready)
                    }
                })
                .buffer_unordered(conc)
                .collect::<Vec<_>>()
                .await;
            pending = checks.into_iter().filter(|(_, want, ready)| ready < want).map(|(i, want, _)| (i, want)).collect();
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                for (i, _) in &pending {
                    errors.add(format!("member {}: batch {b} of pods not Ready within {}s", member_name(*i), ready_timeout.as_secs()));
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        all_idle(&fleet, conc).await;
        let (r_fresh, _) = rss();
        fresh_points.push((made as f64, r_fresh as f64));
        live_fresh_points.push((made as f64, live() as f64));
        settle_history(&fleet, conc, &errors).await;
        let (r_settled, _) = rss();
        settled_points.push((made as f64, r_settled as f64));
        live_settled_points.push((made as f64, live() as f64));
        println!(
            "  batch {}: {made} pods Ready; RSS {} fresh, {} once the write history is dropped {}",
            b + 1,
            mib(r_fresh as f64),
            mib(r_settled as f64),
            phase.end()
        );
    }
    create_lat.sort();
    println!("pods: create latency p50 {} p99 {} (over HTTPS, {conc} in flight) {}", ms(pct(&create_lat, 0.5)), ms(pct(&create_lat, 0.99)), phase_all.end());

    // The size of a pod as stored and as served.
    let mut stored = Vec::new();
    for e in fleet.members().take(50) {
        let r = e.member.store().range(RangeRequest::prefix(Bytes::from_static(b"/registry/core/pods/default/bench-pod-"))).await?;
        stored.extend(r.kvs.iter().map(|kv| kv.value.len()));
    }
    let stored_avg = stored.iter().sum::<usize>() as f64 / stored.len().max(1) as f64;
    let served = match tokens[0].as_deref() {
        Some(t) => call(&client, Method::GET, &format!("{base}/clusters/{}/api/v1/namespaces/default/pods/bench-pod-0", member_name(0)), Some(t), None)
            .await
            .map(|(_, b)| b.len())
            .unwrap_or(0),
        None => 0,
    };
    // Fresh: each batch measured with its write history still held. Settled: each measured once
    // the history of all batches so far was dropped (freed memory is reused by the next batch,
    // so the slope is what a pod keeps).
    let (pod_slope_raw, _, r2_raw) = fit(&fresh_points);
    let (pod_slope, _, r2_c) = fit(&settled_points);
    let (live_pod_fresh, _, live_r2_f) = fit(&live_fresh_points);
    let (live_pod, _, live_r2_c) = fit(&live_settled_points);
    println!(
        "live heap per pod: fresh {:.0} B (R² {live_r2_f:.4}) = {:.2}× stored; settled {:.0} B (R² {live_r2_c:.4}) = {:.2}× stored",
        live_pod_fresh,
        live_pod_fresh / stored_avg.max(1.0),
        live_pod,
        live_pod / stored_avg.max(1.0)
    );
    println!(
        "a pod as stored: {:.0} bytes (mean of {} in the store; {} bytes as served by GET)\nper pod: slope of fresh points {} (R² {r2_raw:.4}) = {:.2}× stored; settled slope {} (R² {r2_c:.4}, {} batches) = {:.2}× stored",
        stored_avg,
        stored.len(),
        served,
        kib(pod_slope_raw),
        pod_slope_raw / stored_avg.max(1.0),
        kib(pod_slope),
        settled_points.len(),
        pod_slope / stored_avg.max(1.0)
    );

    // Summary.
    let (rss_end, anon_end) = rss();
    let events = watches.events.load(Ordering::Relaxed);
    println!("\n## summary");
    println!("| figure | measured | goal | ratio |");
    println!("|---|---|---|---|");
    println!("| members started (one process, one HTTPS listener) | {n} in {:.1} s | — | — |", start_time.as_secs_f64());
    println!("| RSS per idle member (slope, R² {member_r2:.4}) | {} | ≤ 1,024 KiB | {:.2}× |", kib(member_slope), member_slope / (1024.0 * 1024.0));
    println!("| RSS per idle member, settled: (RSS idle − RSS empty) / N | {} | ≤ 1,024 KiB | {:.2}× |", kib(settled_avg), settled_avg / (1024.0 * 1024.0));
    println!(
        "| live heap per idle member (slope, R² {live_member_r2:.4}) | {} | ≤ 1,024 KiB | {:.2}× |",
        kib(live_member_slope),
        live_member_slope / (1024.0 * 1024.0)
    );
    if let Some((per_min, r2, held)) = growth {
        let held_avg = (rss_held as f64 - rss0 as f64) / n as f64;
        println!(
            "| RSS per idle member after {:.0} s idle: (RSS − RSS empty) / N | {} | ≤ 1,024 KiB | {:.2}× |",
            held.as_secs_f64(),
            kib(held_avg),
            held_avg / (1024.0 * 1024.0)
        );
        println!("| idle growth (heartbeat history, until compaction) | {} per member per minute (R² {r2:.4}) | — | — |", kib(per_min));
        let peak = settled_avg + per_min * 10.0;
        println!(
            "| projected idle peak (settled + 10 min of history, the compactor's most) | {} | ≤ 1,024 KiB | {:.2}× |",
            kib(peak),
            peak / (1024.0 * 1024.0)
        );
    }
    println!("| /readyz over HTTPS, one at a time: p50 / p99 | {} / {} ({readyz_ok}/{n} ok) | — | — |", ms(pct(&lat, 0.5)), ms(pct(&lat, 0.99)));
    println!("| watches open / RSS per watch / live heap per watch | {open} / {} / {} | — | — |", kib(per_watch), kib(live_per_watch));
    println!(
        "| 1-replica Deployment create → Ready (watch): p50 / p99 | {} / {} ({}/{}) | — | — |",
        ms(pct(&dl, 0.5)),
        ms(pct(&dl, 0.99)),
        dl.len(),
        sample.len()
    );
    println!("| pod as stored | {stored_avg:.0} B | — | — |");
    println!(
        "| RSS per pod, settled: slope over batches, write history dropped (R² {r2_c:.4}) | {:.0} B | ≤ {:.0} B (1.5×) | {:.2}× stored |",
        pod_slope,
        1.5 * stored_avg,
        pod_slope / stored_avg.max(1.0)
    );
    println!(
        "| live heap per pod, settled (R² {live_r2_c:.4}) | {:.0} B | ≤ {:.0} B (1.5×) | {:.2}× stored |",
        live_pod,
        1.5 * stored_avg,
        live_pod / stored_avg.max(1.0)
    );
    println!("| live heap per pod, fresh (R² {live_r2_f:.4}) | {:.0} B | — | {:.2}× stored |", live_pod_fresh, live_pod_fresh / stored_avg.max(1.0));
    println!(
        "| RSS per pod, fresh: slope with each batch's write history held (R² {r2_raw:.4}) | {:.0} B | — | {:.2}× stored |",
        pod_slope_raw,
        pod_slope_raw / stored_avg.max(1.0)
    );
    println!("| RSS at the end / live heap | {} (anonymous {}) / {} | — | — |", mib(rss_end as f64), mib(anon_end as f64), mib(live() as f64));
    println!("watch events received: {events}; whole run {}", begin.end());

    watches.stopping.store(true, Ordering::Relaxed);
    fleet.shutdown().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let errors = Arc::new(Errors::default());
    let result = run(args, errors.clone()).await;
    if let Err(e) = &result {
        eprintln!("ERROR: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    let count = errors.count();
    if count > 0 {
        eprintln!("{count} errors");
        return std::process::ExitCode::FAILURE;
    }
    println!("no errors");
    std::process::ExitCode::SUCCESS
}
