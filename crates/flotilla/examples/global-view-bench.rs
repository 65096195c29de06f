//! The global view's benchmark (issue 25): memory per cached object against its stored size,
//! list latency, watch delay, and the cache against fan-out.
//!
//!   cargo build --release -p flotilla --bin flotilla --example global-view-bench
//!   $CARGO_TARGET_DIR/release/examples/global-view-bench                        (100 × 100)
//!   $CARGO_TARGET_DIR/release/examples/global-view-bench --members 1000 --pods 10
//!   (smoke, for CI: target/debug/examples/global-view-bench --smoke)
//!
//! Processes: the members (`flotilla member`, simulated members) pinned to `--member-cpus` with
//! this driver, the control plane (`flotilla up`) pinned to `--cp-cpus`, so the control plane's
//! resident set is its own. The members are joined in Push mode with `flotilla join`.
//!
//! 1. `--pods` pods are created straight in each member (namespace `gv-bench`); their stored
//!    size is the JSON each member serves for them.
//! 2. The control plane's resident set is read, a ResourceRegistry selecting those pods in
//!    every cluster is created, and once it says `Cached` and the cache lists every pod, the
//!    resident set is read again: (after − before) / pods is the memory per cached pod.
//! 3. List-all latency: the whole list through `search/cache` (JSON) and through
//!    `proxying/karmada/proxy` as kubectl asks for it (a Table), `--list-runs` times each.
//! 4. Fan-out against the cache, same query: `flotilla get pods -n gv-bench --clusters all -o
//!    json` with `--source members` (every member through the cluster proxy) and `--source
//!    cache`, as processes, wall time.
//! 5. Watch delay: a watch on the global view from the list's resourceVersion and a watch on
//!    each member; `--watch-writes` label patches spread over the members at `--watch-rate`/s;
//!    for each, the time from sending the patch to its event on the member's own watch (the
//!    ceiling) and on the global watch.
//!
//! The run fails (exit 1) only on errors — a pod missing from the cache, an event never seen, a
//! process that does not come up — never on its figures. Results go in
//! docs/benchmarks/global-view.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use flotilla_sim::bench::{Errors, loadavg, pct};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

#[path = "support/processes.rs"]
#[allow(dead_code)]
mod processes;

use processes::{Member, Proc, client_from, interrupt, ms, proc_usage, wait_ready};

const NS: &str = "gv-bench";
const SEARCH: &str = "/apis/search.karmada.io/v1alpha1/search/cache";
const PROXY: &str = "/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy";
const CLUSTER: &str = "resource.karmada.io/cached-from-cluster";
const SEQ: &str = "bench-seq";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

#[derive(Parser)]
#[command(about = "The global view: memory per cached pod, list latency, watch delay, cache vs fan-out")]
struct Args {
    /// CI size: 3 members × 5 pods; seconds in a debug build.
    #[arg(long)]
    smoke: bool,
    /// Simulated members [default: 100; smoke: 3].
    #[arg(long)]
    members: Option<usize>,
    /// Pods per member [default: 100; smoke: 5].
    #[arg(long)]
    pods: Option<usize>,
    /// Label patches for the watch delay [default: 1000; smoke: 10].
    #[arg(long)]
    watch_writes: Option<usize>,
    /// Patches per second for the watch delay.
    #[arg(long, default_value_t = 50.0)]
    watch_rate: f64,
    /// Times each list is taken [default: 10; smoke: 2].
    #[arg(long)]
    list_runs: Option<usize>,
    #[command(flatten)]
    pinning: processes::Pinning,
    /// The `flotilla` binary [default: beside this example, `../flotilla`].
    #[arg(long)]
    flotilla_bin: Option<PathBuf>,
    /// Give up on a step that has not finished this long after it should.
    #[arg(long, default_value = "300s", value_parser = flotilla::federation_args::parse_duration)]
    settle_timeout: Duration,
    /// Keep the data directories (logs) after the run.
    #[arg(long)]
    keep: bool,
}

struct Sizes {
    members: usize,
    pods: usize,
    watch_writes: usize,
    list_runs: usize,
}

impl Args {
    fn sizes(&self) -> Sizes {
        let s = self.smoke;
        Sizes {
            members: self.members.unwrap_or(if s { 3 } else { 100 }),
            pods: self.pods.unwrap_or(if s { 5 } else { 100 }),
            watch_writes: self.watch_writes.unwrap_or(if s { 10 } else { 1000 }),
            list_runs: self.list_runs.unwrap_or(if s { 2 } else { 10 }).max(1),
        }
    }

    fn flotilla_bin(&self) -> PathBuf {
        self.flotilla_bin.clone().unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.parent().and_then(Path::parent).map(|d| d.join("flotilla")).unwrap_or_else(|| PathBuf::from("flotilla"))
        })
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A pod as a workload would make it: two containers, requests, env, ports, labels.
fn pod(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i:05}"), "namespace": NS,
                     "labels": {"app": "web", "shard": (i % 10).to_string(), "tier": "front", SEQ: "0"},
                     "annotations": {"example.com/owner": "team-a"}},
        "spec": {
            "containers": [
                {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "name": "http"}],
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                 "env": [{"name": "MODE", "value": "bench"}, {"name": "SHARD", "value": (i % 10).to_string()}]},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"],
                 "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}}}
            ]
        }
    })
}

/// GET `path` on `client` with `accept`: the body's size and how long it took.
async fn timed_get(client: &kube::Client, path: &str, accept: &str) -> anyhow::Result<(usize, Duration)> {
    let start = Instant::now();
    let req = http::Request::get(path).header(http::header::ACCEPT, accept).body(Vec::new())?;
    let text = client.request_text(req).await.with_context(|| format!("GET {path}"))?;
    Ok((text.len(), start.elapsed()))
}

async fn get_json(client: &kube::Client, path: &str) -> anyhow::Result<Value> {
    let req = http::Request::get(path).header(http::header::ACCEPT, "application/json").body(Vec::new())?;
    let text = client.request_text(req).await.with_context(|| format!("GET {path}"))?;
    serde_json::from_str(&text).with_context(|| format!("the answer to {path}"))
}

/// Create the namespace and the pods in every member, 64 creates in flight.
async fn create_pods(members: &[Member], pods: usize, errors: &Errors) -> anyhow::Result<Duration> {
    let start = Instant::now();
    for m in members {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(m.client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => bail!("create namespace {NS} in {}: {e}", m.name),
        }
    }
    let work: Vec<(kube::Client, usize)> = members.iter().flat_map(|m| (0..pods).map(move |i| (m.client.clone(), i))).collect();
    let failed = futures::stream::iter(work)
        .map(|(client, i)| async move {
            let api: Api<Pod> = Api::namespaced(client, NS);
            match serde_json::from_value::<Pod>(pod(i)) {
                Ok(p) => api.create(&PostParams::default(), &p).await.err().map(|e| format!("create pod {i}: {e}")),
                Err(e) => Some(e.to_string()),
            }
        })
        .buffer_unordered(64)
        .filter_map(|r| async move { r })
        .collect::<Vec<String>>()
        .await;
    for e in failed {
        errors.add(e);
    }
    Ok(start.elapsed())
}

/// The pods' stored size: the JSON each member serves for them, summed.
async fn stored_bytes(members: &[Member]) -> anyhow::Result<(usize, usize)> {
    let mut bytes = 0;
    let mut count = 0;
    for m in members {
        let list = get_json(&m.client, &format!("/api/v1/namespaces/{NS}/pods")).await?;
        for item in list["items"].as_array().into_iter().flatten() {
            bytes += serde_json::to_vec(item)?.len();
            count += 1;
        }
    }
    Ok((bytes, count))
}

/// Wait until the registry says Cached and the cache lists `want` pods.
async fn wait_cached(cp: &kube::Client, want: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        let reg = get_json(cp, "/apis/search.karmada.io/v1alpha1/resourceregistries/bench").await?;
        let cached = reg["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Cached" && c["status"] == "True");
        if cached {
            let list = get_json(cp, &format!("{SEARCH}/api/v1/namespaces/{NS}/pods")).await?;
            let n = list["items"].as_array().map_or(0, Vec::len);
            if n == want {
                return Ok(());
            }
            last = format!("Cached, {n} of {want} pods listed");
        } else {
            last = reg["status"].to_string();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the cache did not hold the {want} pods within {timeout:?}; last: {last}")
}

/// `flotilla get pods` with `source`, wall time of the process and the objects it printed.
async fn flotilla_get(bin: &Path, admin: &Path, source: &str) -> anyhow::Result<(Duration, usize)> {
    let start = Instant::now();
    let out = tokio::process::Command::new(bin)
        .args(["get", "pods", "-n", NS, "--clusters", "all", "-o", "json", "--source", source, "--kubeconfig"])
        .arg(admin)
        .output()
        .await
        .context("run flotilla get")?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!("flotilla get --source {source}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("flotilla get's JSON")?;
    Ok((took, v["items"].as_array().map_or(0, Vec::len)))
}

/// When each patch was sent and seen, by (cluster, pod, seq).
#[derive(Default)]
struct Delays {
    sent: Mutex<HashMap<(String, String, u64), Instant>>,
    direct: Mutex<HashMap<(String, String, u64), Instant>>,
    global: Mutex<HashMap<(String, String, u64), Instant>>,
}

fn seq_of(o: &Value) -> Option<u64> {
    o["metadata"]["labels"][SEQ].as_str()?.parse().ok()
}

async fn follow_member(m_name: String, client: kube::Client, delays: Arc<Delays>, ready: Arc<std::sync::atomic::AtomicUsize>) {
    let api: Api<Pod> = Api::namespaced(client, NS);
    let Ok(stream) = api.watch(&WatchParams::default().timeout(290), "0").await else { return };
    ready.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        // An event that does not decode is skipped, not the end of the watch.
        let Ok(ev) = ev else { continue };
        if let WatchEvent::Modified(p) = ev {
            let v = serde_json::to_value(&p).unwrap_or_default();
            if let (Some(seq), Some(name)) = (seq_of(&v), p.metadata.name.clone()) {
                delays.direct.lock().entry((m_name.clone(), name, seq)).or_insert_with(Instant::now);
            }
        }
    }
}

async fn follow_global(cp: kube::Client, resource_version: String, delays: Arc<Delays>, errors: Arc<Errors>, ready: Arc<std::sync::atomic::AtomicUsize>) {
    let path = format!("{SEARCH}/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={resource_version}&timeoutSeconds=3600");
    let Ok(req) = http::Request::get(&path).body(Vec::new()) else { return };
    let stream = match cp.request_events::<DynamicObject>(req).await {
        Ok(s) => s,
        Err(e) => {
            errors.add(format!("the global watch: {e}"));
            return;
        }
    };
    ready.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(WatchEvent::Modified(o)) => {
                let v = serde_json::to_value(&o).unwrap_or_default();
                let cluster = v["metadata"]["annotations"][CLUSTER].as_str().unwrap_or_default().to_string();
                if let (Some(seq), Some(name)) = (seq_of(&v), o.metadata.name.clone()) {
                    delays.global.lock().entry((cluster, name, seq)).or_insert_with(Instant::now);
                }
            }
            Ok(WatchEvent::Error(e)) => {
                errors.add(format!("the global watch: {}", e.message));
                return;
            }
            Ok(_) => {}
            Err(e) => {
                errors.add(format!("the global watch: {e}"));
                return;
            }
        }
    }
}

struct Report {
    members: usize,
    pods: usize,
    stored_per_pod: f64,
    /// The cache's own count of the bytes it holds, per pod.
    held_per_pod: f64,
    rss_before: u64,
    rss_after: u64,
    peak: u64,
    cache_fill: Duration,
    list_json: (Duration, Duration, usize),
    list_table: (Duration, Duration, usize),
    fan_out: Duration,
    cached_get: Duration,
    direct: (Duration, Duration),
    global: (Duration, Duration),
    watched: usize,
}

async fn run(args: &Args, sizes: &Sizes, errors: Arc<Errors>) -> anyhow::Result<Report> {
    let dir = tempfile::Builder::new().prefix("global-view-bench-").tempdir()?;
    let dir_path = dir.path().to_path_buf();
    if args.keep {
        println!("  data and logs: {} (kept)", dir_path.display());
        std::mem::forget(dir);
    }
    let bin = args.flotilla_bin();
    let (members_proc, members) = processes::start_members(&bin, &args.pinning.member_cpus, sizes.members, &dir_path, &[]).await?;
    println!("  {} members up (pid {})", members.len(), members_proc.pid());
    let data = dir_path.join("flotilla");
    let up: Vec<String> = ["up", "--data-dir", &data.to_string_lossy(), "--listen", "127.0.0.1:0"].iter().map(|s| s.to_string()).collect();
    let mut cp_proc = Proc::spawn("flotilla up", &args.pinning.cp_cpus, &bin, &up, &dir_path.join("flotilla.log"))?;
    cp_proc.wait_for(args.settle_timeout, |l| l.starts_with("flotilla: admin kubeconfig:")).await?;
    let admin = data.join("admin.kubeconfig");
    let cp = client_from(&admin).await?;
    let t = Instant::now();
    processes::join_flotilla(&bin, &args.pinning.member_cpus, &admin, &members, &dir_path).await?;
    wait_ready(&cp, members.len(), args.settle_timeout).await?;
    println!("  {} members joined and Ready in {:.1} s", members.len(), t.elapsed().as_secs_f64());

    let took = create_pods(&members, sizes.pods, &errors).await?;
    println!("  {} pods created in the members in {:.1} s", members.len() * sizes.pods, took.as_secs_f64());
    // Let the simulated kubelets write the pods' status before their size is taken.
    tokio::time::sleep(Duration::from_secs(if args.smoke { 2 } else { 10 })).await;
    let (stored, counted) = stored_bytes(&members).await?;
    let want = members.len() * sizes.pods;
    if counted != want {
        errors.add(format!("the members hold {counted} pods, {want} were created"));
    }
    let stored_per_pod = stored as f64 / counted.max(1) as f64;

    // Memory: the control plane before and after the cache fills.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, rss_before, _) = proc_usage(cp_proc.pid());
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let registry = json!({
        "apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": {"name": "bench"},
        "spec": {"targetCluster": {"clusterNames": names}, "resourceSelectors": [{"apiVersion": "v1", "kind": "Pod", "namespace": NS}]}
    });
    let ar = kube::api::ApiResource {
        group: "search.karmada.io".into(),
        version: "v1alpha1".into(),
        api_version: "search.karmada.io/v1alpha1".into(),
        kind: "ResourceRegistry".into(),
        plural: "resourceregistries".into(),
    };
    let t = Instant::now();
    Api::<DynamicObject>::all_with(cp.clone(), &ar)
        .create(&PostParams::default(), &serde_json::from_value(registry)?)
        .await
        .context("create the ResourceRegistry")?;
    wait_cached(&cp, want, args.settle_timeout).await?;
    let cache_fill = t.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, rss_after, peak) = proc_usage(cp_proc.pid());
    let metrics = {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        cp.request_text(req).await.unwrap_or_default()
    };
    let metric = |name: &str| {
        metrics.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse::<f64>().ok())).unwrap_or(0.0)
    };
    let (held_objects, held_bytes) = (metric("flotilla_search_cache_objects"), metric("flotilla_search_cache_bytes"));
    if held_objects as usize != want {
        errors.add(format!("the cache's metrics count {held_objects} objects, {want} expected"));
    }
    println!("  cache filled in {:.1} s; control plane {} → {}", cache_fill.as_secs_f64(), mib(rss_before), mib(rss_after));

    // List-all latency.
    let list = |name: &'static str, path: String, accept: &'static str| {
        let cp = cp.clone();
        async move {
            let mut times = Vec::new();
            let mut size = 0;
            for _ in 0..sizes.list_runs {
                let (n, d) = timed_get(&cp, &path, accept).await?;
                size = n;
                times.push(d);
            }
            times.sort();
            println!("  list all ({name}): p50 {} max {} ({} bytes)", ms(pct(&times, 0.5)), ms(*times.last().unwrap_or(&Duration::ZERO)), size);
            anyhow::Ok((pct(&times, 0.5), *times.last().unwrap_or(&Duration::ZERO), size))
        }
    };
    let list_json = list("search/cache, JSON", format!("{SEARCH}/api/v1/pods"), "application/json").await?;
    let list_table = list("proxying, Table", format!("{PROXY}/api/v1/pods"), TABLE).await?;

    // Fan-out against the cache, the same query through `flotilla get`.
    let mut fan = Vec::new();
    let mut cached = Vec::new();
    for _ in 0..sizes.list_runs.min(3) {
        let (d, n) = flotilla_get(&bin, &admin, "members").await?;
        if n != want {
            errors.add(format!("flotilla get --source members printed {n} pods, {want} expected"));
        }
        fan.push(d);
        let (d, n) = flotilla_get(&bin, &admin, "cache").await?;
        if n != want {
            errors.add(format!("flotilla get --source cache printed {n} pods, {want} expected"));
        }
        cached.push(d);
    }
    fan.sort();
    cached.sort();
    let (fan_out, cached_get) = (pct(&fan, 0.5), pct(&cached, 0.5));
    println!("  flotilla get: fan-out {} vs cache {} (p50 of {})", ms(fan_out), ms(cached_get), fan.len());

    // Watch delay: patches in the members, seen on each member's own watch and on the global one.
    let delays = Arc::new(Delays::default());
    let listed = get_json(&cp, &format!("{SEARCH}/api/v1/namespaces/{NS}/pods?limit=1")).await?;
    let rv = listed["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
    let mut followers = tokio::task::JoinSet::new();
    let ready = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for m in &members {
        followers.spawn(follow_member(m.name.clone(), m.client.clone(), delays.clone(), ready.clone()));
    }
    followers.spawn(follow_global(cp.clone(), rv, delays.clone(), errors.clone(), ready.clone()));
    // Every watch open before the first patch.
    let deadline = Instant::now() + args.settle_timeout;
    while ready.load(std::sync::atomic::Ordering::Relaxed) < members.len() + 1 {
        if Instant::now() > deadline {
            bail!("{} of {} watches open after {:?}", ready.load(std::sync::atomic::Ordering::Relaxed), members.len() + 1, args.settle_timeout);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let interval = Duration::from_secs_f64(1.0 / args.watch_rate.max(0.1));
    let start = tokio::time::Instant::now();
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..sizes.watch_writes {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let m = &members[i % members.len()];
        let name = format!("web-{:05}", (i / members.len()) % sizes.pods);
        let seq = i as u64 + 1;
        let (client, cluster, delays, errors) = (m.client.clone(), m.name.clone(), delays.clone(), errors.clone());
        writes.spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, NS);
            delays.sent.lock().insert((cluster.clone(), name.clone(), seq), Instant::now());
            let patch = json!({"metadata": {"labels": {SEQ: seq.to_string()}}});
            if let Err(e) = api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                errors.add(format!("patch {cluster}/{name}: {e}"));
            }
        });
    }
    while writes.join_next().await.is_some() {}
    let deadline = Instant::now() + args.settle_timeout;
    loop {
        // Both sides seen: the members' own watches (the ceiling) and the global one.
        let sent = delays.sent.lock().len();
        let seen = delays.global.lock().len().min(delays.direct.lock().len());
        if seen >= sent || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    followers.abort_all();
    let delay = |seen: &Mutex<HashMap<(String, String, u64), Instant>>, what: &str| {
        let sent = delays.sent.lock();
        let seen = seen.lock();
        let mut d: Vec<Duration> = sent.iter().filter_map(|(k, t)| seen.get(k).map(|s| s.saturating_duration_since(*t))).collect();
        if d.len() < sent.len() {
            errors.add(format!("{what}: {} of {} patches never seen", sent.len() - d.len(), sent.len()));
        }
        d.sort();
        (pct(&d, 0.5), pct(&d, 0.99))
    };
    let direct = delay(&delays.direct, "the members' own watches");
    let global = delay(&delays.global, "the global watch");
    println!("  watch delay: member's own watch p50 {} p99 {}; global view p50 {} p99 {}", ms(direct.0), ms(direct.1), ms(global.0), ms(global.1));

    cp_proc.stop().await;
    members_proc.stop().await;
    Ok(Report {
        members: members.len(),
        pods: want,
        stored_per_pod,
        held_per_pod: held_bytes / held_objects.max(1.0),
        rss_before,
        rss_after,
        peak,
        cache_fill,
        list_json,
        list_table,
        fan_out,
        cached_get,
        direct,
        global,
        watched: sizes.watch_writes,
    })
}

fn print_report(r: &Report) {
    let per_pod = (r.rss_after.saturating_sub(r.rss_before)) as f64 / r.pods.max(1) as f64;
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!("\n| {} members × {} pods ({} cached) | |", r.members, r.pods / r.members.max(1), r.pods);
    println!("|---|---|");
    println!("| stored size per pod (JSON the member serves) | {:.0} B |", r.stored_per_pod);
    println!("| control plane resident set before → after the cache (peak) | {} → {} ({}) |", mib(r.rss_before), mib(r.rss_after), mib(r.peak));
    println!(
        "| the cache's own count per pod (served JSON + labels + entry overhead) | {:.0} B = {:.2}× its stored size |",
        r.held_per_pod,
        r.held_per_pod / r.stored_per_pod.max(1.0)
    );
    println!(
        "| resident memory per cached pod (RSS after − before) | {:.0} B = {:.2}× its stored size (goal ≤ 1.5×; karmada-search ~70 KB) |",
        per_pod,
        per_pod / r.stored_per_pod.max(1.0)
    );
    println!("| cache filled (registry created → Cached, all listed) | {:.1} s |", r.cache_fill.as_secs_f64());
    println!("| list all, search/cache JSON: p50 / max | {} / {} ({} KiB) |", ms(r.list_json.0), ms(r.list_json.1), r.list_json.2 / 1024);
    println!("| list all, proxy Table (kubectl get): p50 / max | {} / {} ({} KiB) |", ms(r.list_table.0), ms(r.list_table.1), r.list_table.2 / 1024);
    println!("| `flotilla get -o json`, fan-out vs cache (p50) | {} vs {} = {:.1}× |", ms(r.fan_out), ms(r.cached_get), ratio(r.fan_out, r.cached_get));
    println!("| watch delay, member's own watch (ceiling): p50 / p99 | {} / {} ({} patches) |", ms(r.direct.0), ms(r.direct.1), r.watched);
    println!(
        "| watch delay, global view: p50 / p99 | {} / {} = {:.1}× / {:.1}× the ceiling |",
        ms(r.global.0),
        ms(r.global.1),
        ratio(r.global.0, r.direct.0),
        ratio(r.global.1, r.direct.1)
    );
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    flotilla_sim::bench::init();
    let cpus = match args.pinning.pin_driver() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let sizes = args.sizes();
    println!(
        "# global view ({} run, {} build, {} CPUs, load average {}); control plane on CPUs {:?}, members and driver on {:?}",
        if args.smoke { "smoke" } else { "full" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        cpus,
        loadavg(),
        args.pinning.cp_cpus,
        args.pinning.member_cpus,
    );
    println!("{} members × {} pods; {} watch patches at {}/s", sizes.members, sizes.pods, sizes.watch_writes, args.watch_rate);
    let errors = Arc::new(Errors::default());
    let outcome = tokio::select! {
        r = run(&args, &sizes, errors.clone()) => r,
        signal = interrupt() => Err(anyhow::anyhow!("interrupted ({signal})")),
    };
    match outcome {
        Ok(report) => print_report(&report),
        Err(e) => errors.add(format!("{e:#}")),
    }
    println!("load average at the end: {}", loadavg());
    match Arc::try_unwrap(errors) {
        Ok(errors) => errors.verdict(),
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
