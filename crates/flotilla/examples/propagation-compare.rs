//! Side-by-side propagation benchmark (issue 24): the same simulated members, the same templates
//! and policies, driven through the Kubernetes API only, against Flotilla and against Karmada,
//! one after the other in one run.
//!
//!   cargo build --release -p flotilla --bin flotilla --example propagation-compare
//!   $CARGO_TARGET_DIR/release/examples/propagation-compare                    (100 members)
//!   (smoke, for CI: target/debug/examples/propagation-compare --smoke)
//!
//! Processes, each control plane in turn:
//! - the members: `flotilla member` (simulated members, workload simulation on) in a process of
//!   their own, pinned with `taskset` to `--member-cpus` (default CPU 1);
//! - the control plane, pinned to `--cp-cpus` (default CPU 0): `flotilla up` on a fresh data
//!   directory, or Karmada as `testenv karmada up` runs it (host etcd and kube-apiserver,
//!   kube-controller-manager, karmada-aggregated-apiserver, -webhook, -controller-manager,
//!   -scheduler; every process's pid in its `pids` file);
//! - this driver, pinned beside the members (it only creates templates and watches).
//!
//! The members are joined in Push mode the way `karmadactl join` leaves them (a Secret
//! `karmada-cluster/<member>` with the member's token and CA, a Cluster with `apiEndpoint` and
//! `secretRef`) — the same objects on both control planes. Then, per control plane:
//! 1. the ceiling: the driver creates Deployments straight in the members (64 in flight), the
//!    rate the members take — measured in the same run, as the goals' denominator;
//! 2. Divided over 2 members (static weights 1:1), open loop at `--rate` templates/s: latency from
//!    the scheduled create to the copy in the last target member (no coordinated omission);
//! 3. the same, as fast as 32 creators go: sustained templates/s and member applies/s;
//! 4. Duplicated to every member at `--duplicated-rate`/s: latency to the last member;
//! 5. the cold start of `--cold-start` templates, each with a ConfigMap it
//!    depends on, created while the propagation controllers are off, and a SIGKILL restart of the
//!    control plane holding them (`propagation/cold_start.rs`).
//!
//! Arrival is observed in each member's own API (a watch per member), never on the control plane.
//! The control plane's CPU seconds and resident set are read from `/proc` for each of its
//! processes. The run fails (exit 1) only on errors — a create refused, a template missing or with
//! the wrong replicas in a member, a control plane that does not come up — never on its figures.
//! Results go in docs/benchmarks/propagation.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use flotilla_sim::bench::{Arrivals, Errors, loadavg, pct};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

#[path = "propagation/common.rs"]
mod common;

#[path = "propagation/cold_start.rs"]
mod cold_start;

#[path = "support/processes.rs"]
mod processes;

use processes::{Member, Proc, client_from, interrupt, ms, proc_usage, signal, wait_ready};

use common::{DUP_LABEL, NS, PAIR_LABEL, RunSpec, Stages, deployment, duplicated_policy};

/// Namespace of the ceiling's direct writes in the members.
const CEILING_NS: &str = "bench-ceiling";

#[derive(Parser)]
#[command(about = "Propagation through Flotilla and Karmada side by side, with the same simulated members")]
struct Args {
    /// CI size: 3 members, a few dozen templates; seconds per control plane in a debug build.
    #[arg(long)]
    smoke: bool,
    /// The control planes to run, in this order.
    #[arg(long, value_delimiter = ',', default_value = "flotilla,karmada", value_parser = ["flotilla", "karmada"])]
    control_planes: Vec<String>,
    /// Simulated members [default: 100; smoke: 3].
    #[arg(long)]
    members: Option<usize>,
    /// Templates in the open-loop Divided run [default: 1000; smoke: 12].
    #[arg(long)]
    templates: Option<usize>,
    /// Offered rate of the open-loop Divided run, templates/s [default: 50; smoke: 10].
    #[arg(long)]
    rate: Option<f64>,
    /// Templates in the as-fast-as-possible Divided run [default: 1000; smoke: 12].
    #[arg(long)]
    burst: Option<usize>,
    /// Templates Duplicated to every member [default: 10; smoke: 2].
    #[arg(long)]
    duplicated: Option<usize>,
    /// The runs to make: `open` (Divided, open loop), `burst` (Divided, as fast as possible),
    /// `dup` (Duplicated to every member), `cold` (cold start and restart).
    #[arg(long, value_delimiter = ',', default_value = "open,burst,dup,cold", value_parser = ["open", "burst", "dup", "cold"])]
    runs: Vec<String>,
    /// Templates of the cold-start run, each with a ConfigMap and a policy, on 2 members
    /// [default: 5000; smoke: 10].
    #[arg(long)]
    cold_start: Option<usize>,
    /// Offered rate of the Duplicated run, templates/s.
    #[arg(long, default_value_t = 1.0)]
    duplicated_rate: f64,
    /// Direct creates in the ceiling run [default: 3000; smoke: 60].
    #[arg(long)]
    ceiling_writes: Option<usize>,
    #[command(flatten)]
    pinning: processes::Pinning,
    /// The `flotilla` binary [default: beside this example, `../flotilla`].
    #[arg(long)]
    flotilla_bin: Option<PathBuf>,
    /// The `testenv` binary that runs Karmada [default: $TESTENV_BIN_DIR or
    /// ~/.cache/flotilla/testenv/bin, `testenv`].
    #[arg(long)]
    testenv_bin: Option<PathBuf>,
    /// An extra argument for `flotilla up` (repeat).
    #[arg(long = "flotilla-arg", allow_hyphen_values = true)]
    flotilla_args: Vec<String>,
    /// An extra argument for `testenv karmada up` (repeat), e.g.
    /// `--karmada-arg=--karmada-controller-manager-arg=--concurrent-work-syncs=64`.
    #[arg(long = "karmada-arg", allow_hyphen_values = true)]
    karmada_args: Vec<String>,
    /// Give up on a control plane or a run that has not come up / arrived this long after it should.
    #[arg(long, default_value = "180s", value_parser = flotilla::federation_args::parse_duration)]
    settle_timeout: Duration,
    /// Keep the data directories (logs) after the run.
    #[arg(long)]
    keep: bool,
}

struct Sizes {
    members: usize,
    templates: usize,
    rate: f64,
    burst: usize,
    duplicated: usize,
    ceiling_writes: usize,
    cold_start: usize,
}

impl Args {
    fn sizes(&self) -> Sizes {
        let s = self.smoke;
        Sizes {
            members: self.members.unwrap_or(if s { 3 } else { 100 }),
            templates: self.templates.unwrap_or(if s { 12 } else { 1000 }),
            rate: self.rate.unwrap_or(if s { 10.0 } else { 50.0 }),
            burst: self.burst.unwrap_or(if s { 12 } else { 1000 }),
            duplicated: self.duplicated.unwrap_or(if s { 2 } else { 10 }),
            ceiling_writes: self.ceiling_writes.unwrap_or(if s { 60 } else { 3000 }),
            cold_start: self.cold_start.unwrap_or(if s { 10 } else { 5000 }),
        }
    }

    fn runs(&self, run: &str) -> bool {
        self.runs.iter().any(|r| r == run)
    }

    fn flotilla_bin(&self) -> PathBuf {
        self.flotilla_bin.clone().unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.parent().and_then(Path::parent).map(|d| d.join("flotilla")).unwrap_or_else(|| PathBuf::from("flotilla"))
        })
    }

    fn testenv_bin(&self) -> PathBuf {
        self.testenv_bin.clone().unwrap_or_else(|| {
            let dir = std::env::var_os("TESTENV_BIN_DIR").map(PathBuf::from).unwrap_or_else(|| {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
                cache.join("flotilla/testenv/bin")
            });
            dir.join("testenv")
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Control planes

struct ControlPlane {
    kind: String,
    main: Proc,
    /// Every process of the control plane but Karmada's controllers, for its CPU time and
    /// resident set.
    pids: Vec<(u32, String)>,
    client: kube::Client,
    /// CPU time of the earlier processes of a restarted control plane.
    earlier_cpu: Duration,
    /// Karmada's controller-manager and scheduler, run by this driver.
    karmada: Option<KarmadaControllers>,
}

impl ControlPlane {
    fn usage(&self) -> (Duration, u64, u64) {
        let controllers = self.karmada.iter().flat_map(|k| k.running.iter().map(|(_, p)| p.pid()));
        self.pids.iter().map(|(p, _)| *p).chain(controllers).map(proc_usage).fold((self.earlier_cpu, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    }

    fn process_names(&self) -> Vec<String> {
        let controllers = self.karmada.iter().flat_map(|k| k.running.iter().map(|(n, _)| n.clone()));
        self.pids.iter().map(|(_, n)| n.clone()).chain(controllers).collect()
    }

    async fn stop(self) {
        if let Some(k) = self.karmada {
            for (_, p) in k.running {
                p.stop().await;
            }
        }
        self.main.stop().await;
    }
}

/// Karmada's controller-manager and scheduler. `testenv karmada up --without-controllers`
/// starts everything else and writes their command lines; the driver runs them itself so the
/// cold start can stop, start and SIGKILL them as it does Flotilla's one process.
struct KarmadaControllers {
    /// (name, command line) of each, from `karmada.json`.
    commands: Vec<(String, Vec<String>)>,
    /// (name, client of its plain-HTTP health and metrics listener).
    health: Vec<(String, kube::Client)>,
    metrics: Vec<kube::Client>,
    running: Vec<(String, Proc)>,
    cpus: String,
    logs: PathBuf,
}

impl KarmadaControllers {
    fn read(out: &Path, cpus: &str, logs: &Path) -> anyhow::Result<KarmadaControllers> {
        let text = std::fs::read_to_string(out.join("karmada.json")).context("read karmada.json")?;
        let sum: Value = serde_json::from_str(&text).context("parse karmada.json")?;
        let mut k =
            KarmadaControllers { commands: Vec::new(), health: Vec::new(), metrics: Vec::new(), running: Vec::new(), cpus: cpus.into(), logs: logs.into() };
        for name in ["karmada-controller-manager", "karmada-scheduler"] {
            let command: Vec<String> = serde_json::from_value(sum["commands"][name].clone()).with_context(|| format!("karmada.json: no command for {name}"))?;
            if command.is_empty() {
                bail!("karmada.json: empty command for {name}");
            }
            let url = |field: &str| -> anyhow::Result<kube::Client> {
                let u = sum[field][name].as_str().with_context(|| format!("karmada.json: no {field} URL for {name}"))?;
                let base = u.rsplit_once('/').map_or(u, |(b, _)| b);
                plain_http_client(base)
            };
            k.health.push((name.to_string(), url("health")?));
            k.metrics.push(url("metrics")?);
            k.commands.push((name.to_string(), command));
        }
        Ok(k)
    }

    /// Start both and wait until each answers its health check.
    async fn start(&mut self, timeout: Duration) -> anyhow::Result<()> {
        for (name, command) in &self.commands {
            let log = self.logs.join(format!("{name}.log"));
            // One replica has no one to elect; with leader election on (Karmada's default) a
            // start after a SIGKILL waits ~15 s for the dead one's lease to expire, which would
            // be charged to Karmada's restart (Flotilla's one process takes no lease).
            let mut args = command[1..].to_vec();
            args.push("--leader-elect=false".into());
            let p = Proc::spawn_quiet(name, &self.cpus, Path::new(&command[0]), &args, &log)?;
            self.running.push((name.clone(), p));
        }
        let deadline = Instant::now() + timeout;
        for (name, client) in &self.health {
            loop {
                let req = http::Request::get("/healthz").body(Vec::new())?;
                if client.request_text(req).await.is_ok_and(|t| t.trim() == "ok") {
                    break;
                }
                if let Some((_, p)) = self.running.iter_mut().find(|(n, _)| n == name)
                    && let Ok(Some(status)) = p.child.try_wait()
                {
                    bail!("{name} exited ({status}); see {}", p.log.display());
                }
                if Instant::now() > deadline {
                    bail!("{name} not healthy within {timeout:?}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// Stop both (SIGTERM, or SIGKILL); returns the CPU time they used.
    async fn stop(&mut self, kill: bool) -> Duration {
        let mut cpu = Duration::ZERO;
        for (_, mut p) in std::mem::take(&mut self.running) {
            cpu += proc_usage(p.pid()).0;
            if kill {
                signal("KILL", p.pid()).await;
                let _ = p.child.wait().await;
            } else {
                p.stop().await;
            }
        }
        cpu
    }
}

/// A client for a component's plain-HTTP loopback listener (health, metrics).
fn plain_http_client(base: &str) -> anyhow::Result<kube::Client> {
    let config = kube::Config::new(base.parse().with_context(|| format!("parse {base}"))?);
    kube::Client::try_from(config).with_context(|| format!("a client for {base}"))
}

/// Start a control plane on `dir` (a data directory already there is reused); `extra` are more
/// arguments for `flotilla up`.
async fn start_control_plane(args: &Args, kind: &str, dir: &Path, extra: &[String]) -> anyhow::Result<ControlPlane> {
    match kind {
        "flotilla" => {
            let data = dir.join("flotilla");
            let mut a: Vec<String> = ["up", "--data-dir", &data.to_string_lossy(), "--listen", "127.0.0.1:0"].iter().map(|s| s.to_string()).collect();
            a.extend(args.flotilla_args.iter().cloned());
            a.extend(extra.iter().cloned());
            let mut p = Proc::spawn("flotilla up", &args.pinning.cp_cpus, &args.flotilla_bin(), &a, &dir.join("flotilla.log"))?;
            p.wait_for(args.settle_timeout, |l| l.starts_with("flotilla: admin kubeconfig:")).await?;
            let client = client_from(&data.join("admin.kubeconfig")).await?;
            let pid = p.pid();
            Ok(ControlPlane { kind: kind.into(), main: p, pids: vec![(pid, "flotilla".into())], client, earlier_cpu: Duration::ZERO, karmada: None })
        }
        "karmada" => {
            let out = dir.join("karmada");
            // Karmada's etcd syncs every write to disk as Flotilla's store does (testenv's own
            // etcd skips it, for test speed); flags given later win.
            let mut a: Vec<String> =
                ["karmada", "up", "--out", &out.to_string_lossy(), "--etcd-arg=--unsafe-no-fsync=false"].iter().map(|s| s.to_string()).collect();
            a.extend(args.karmada_args.iter().cloned());
            let testenv = args.testenv_bin();
            if !testenv.exists() {
                bail!("{} is missing: build it with testenv/build.sh (it runs Karmada for this comparison)", testenv.display());
            }
            // The driver runs the controller-manager and the scheduler itself (KarmadaControllers).
            a.push("--without-controllers".into());
            let mut p = Proc::spawn("testenv karmada up", &args.pinning.cp_cpus, &testenv, &a, &dir.join("karmada-launcher.log"))?;
            p.wait_for(Duration::from_secs(600), |l| l.trim() == "ready").await?;
            let pids: Vec<(u32, String)> = std::fs::read_to_string(out.join("pids"))
                .context("read Karmada's pids file")?
                .lines()
                .filter_map(|l| {
                    let (pid, name) = l.split_once(' ')?;
                    Some((pid.trim().parse().ok()?, name.trim().to_string()))
                })
                .collect();
            p.others = pids.iter().map(|(p, _)| *p).collect();
            let client = client_from(&out.join("karmada.kubeconfig")).await?;
            let mut controllers = KarmadaControllers::read(&out, &args.pinning.cp_cpus, dir)?;
            controllers.start(args.settle_timeout).await?;
            Ok(ControlPlane { kind: kind.into(), main: p, pids, client, earlier_cpu: Duration::ZERO, karmada: Some(controllers) })
        }
        other => bail!("unknown control plane {other}"),
    }
}

fn dynamic(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() { version.into() } else { format!("{group}/{version}") },
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn create(client: &kube::Client, ar: &ApiResource, ns: Option<&str>, body: Value) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
    match api.create(&PostParams::default(), &serde_json::from_value(body)?).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(anyhow::anyhow!("create {} {name}: {e}", ar.kind)),
    }
}

/// Join every member in Push mode with the control plane's own tool: `flotilla join` (a
/// least-privilege identity in the member, its token in `karmada-cluster/<member>`, the Cluster),
/// or `testenv karmada join` (what `karmadactl join` creates, in the member and in Karmada). Both
/// run beside the members, eight joins at a time.
async fn join(args: &Args, cp: &ControlPlane, members: &[Member], dir: &Path) -> anyhow::Result<()> {
    match cp.kind.as_str() {
        "flotilla" => processes::join_flotilla(&args.flotilla_bin(), &args.pinning.member_cpus, &dir.join("flotilla/admin.kubeconfig"), members, dir).await,
        "karmada" => {
            let mut a: Vec<String> =
                vec!["karmada".into(), "join".into(), "--out".into(), dir.join("karmada").to_string_lossy().into(), "--wait".into(), "0".into()];
            for m in members {
                a.push("--member".into());
                a.push(format!("{}={}", m.name, m.kubeconfig.display()));
            }
            let log = dir.join("karmada-join.log");
            let mut p = Proc::spawn("testenv karmada join", &args.pinning.member_cpus, &args.testenv_bin(), &a, &log)?;
            let status = p.child.wait().await?;
            if !status.success() {
                bail!("testenv karmada join: {status} (see {})", log.display());
            }
            Ok(())
        }
        other => bail!("unknown control plane {other}"),
    }
}

/// Wait until namespace `ns`, created on the control plane, is in every member (both control
/// planes propagate namespaces to every cluster).
async fn wait_namespace(members: &[Member], ns: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    for m in members {
        let api: Api<Namespace> = Api::all(m.client.clone());
        while api.get_opt(ns).await.ok().flatten().is_none() {
            if Instant::now() > deadline {
                bail!("namespace {ns} never arrived in {}", m.name);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Observation

/// Record every Deployment of namespace `NS` in member `idx` when first seen (until aborted).
async fn follow_member(idx: usize, client: kube::Client, arrivals: Arc<Arrivals>) {
    let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &ApiResource::erase::<Deployment>(&()));
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
    while let Some(ev) = stream.next().await {
        if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
            && let Some(name) = o.metadata.name.as_deref()
            && !arrivals.known(name, idx)
        {
            arrivals.record(name, idx, Instant::now(), o.data["spec"]["replicas"].as_i64().unwrap_or(-1));
        }
    }
}

async fn follow_bindings(cp: kube::Client, stages: Arc<Stages>) {
    let api: Api<DynamicObject> = Api::namespaced_with(cp, NS, &dynamic("work.karmada.io", "v1alpha2", "ResourceBinding", "resourcebindings"));
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
    while let Some(ev) = stream.next().await {
        if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
            && let Some(name) = o.metadata.name.as_deref().and_then(|n| n.strip_suffix("-deployment"))
        {
            let now = Instant::now();
            stages.binding.lock().entry(name.to_string()).or_insert(now);
            if o.data["spec"]["clusters"].as_array().is_some_and(|c| !c.is_empty()) {
                stages.scheduled.lock().entry(name.to_string()).or_insert(now);
            }
        }
    }
}

async fn follow_works(cp: kube::Client, stages: Arc<Stages>) {
    let api: Api<DynamicObject> = Api::all_with(cp, &dynamic("work.karmada.io", "v1alpha1", "Work", "works"));
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
    while let Some(ev) = stream.next().await {
        if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev {
            let m = &o.data["spec"]["workload"]["manifests"][0]["metadata"];
            if m["namespace"] == NS
                && let Some(name) = m["name"].as_str()
            {
                let key = format!("{}/{}", o.metadata.namespace.as_deref().unwrap_or(""), o.metadata.name.as_deref().unwrap_or(""));
                let mut w = stages.works.lock();
                let e = w.entry(name.to_string()).or_insert_with(|| (Vec::new(), Instant::now()));
                if !e.0.contains(&key) {
                    e.0.push(key);
                    e.1 = Instant::now();
                }
            }
        }
    }
}

/// A server's `/metrics` text, if it answers.
async fn metrics(client: &kube::Client) -> Option<String> {
    let req = http::Request::get("/metrics").body(Vec::new()).ok()?;
    client.request_text(req).await.ok()
}

/// The control plane's API request counters by (verb, resource), from its `/metrics`
/// (Flotilla's `flotilla_apiserver_requests_total`, kube-apiserver's `apiserver_request_total`;
/// Karmada's aggregated API server's Cluster requests are not in the host's counters).
async fn request_counts(cp: &kube::Client) -> HashMap<(String, String), f64> {
    let mut out = HashMap::new();
    let Some(text) = metrics(cp).await else { return out };
    for line in text.lines() {
        // Flotilla's store: how many durable commits (each one fsync) its writes took.
        for (series, key) in [("flotilla_store_durable_commits_total ", COMMITS), ("flotilla_store_committed_writes_total ", COMMITTED_WRITES)] {
            if let Some(Ok(v)) = line.strip_prefix(series).map(|v| v.trim().parse::<f64>()) {
                *out.entry((key.to_string(), String::new())).or_insert(0.0) += v;
            }
        }
        let Some(rest) = line.strip_prefix("flotilla_apiserver_requests_total{").or_else(|| line.strip_prefix("apiserver_request_total{")) else { continue };
        let Some((labels, value)) = rest.rsplit_once('}') else { continue };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| kv.strip_prefix(&format!("{name}=\"")).map(|v| v.trim_end_matches('"').to_string())).unwrap_or_default()
        };
        let Ok(v) = value.trim().parse::<f64>() else { continue };
        *out.entry((label("verb").to_uppercase(), label("resource"))).or_insert(0.0) += v;
    }
    out
}

/// What changed between two snapshots of [`request_counts`], per template, the largest first.
fn requests_per_template(before: &HashMap<(String, String), f64>, after: &HashMap<(String, String), f64>, templates: usize) -> String {
    let mut d: Vec<((String, String), f64)> =
        after.iter().map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0))).filter(|(_, v)| *v > 0.0).collect();
    d.sort_by(|a, b| b.1.total_cmp(&a.1));
    let store = |key: &str| d.iter().find(|((verb, _), _)| verb == key).map(|(_, v)| *v);
    let (commits, committed) = (store(COMMITS), store(COMMITTED_WRITES));
    d.retain(|((verb, _), _)| verb != COMMITS && verb != COMMITTED_WRITES);
    let total: f64 = d.iter().map(|(_, v)| v).sum();
    let writes: f64 =
        d.iter().filter(|((verb, _), _)| matches!(verb.as_str(), "CREATE" | "POST" | "UPDATE" | "PUT" | "PATCH" | "APPLY" | "DELETE")).map(|(_, v)| v).sum();
    let t = templates.max(1) as f64;
    let top: Vec<String> = d.iter().take(8).map(|((verb, res), v)| format!("{verb} {res} {:.1}", v / t)).collect();
    let commits = match (commits, committed) {
        (Some(c), Some(w)) if c > 0.0 => format!("; store commits {:.1}/template, {:.1} writes each", c / t, w / c),
        _ => String::new(),
    };
    format!("{:.1} requests/template ({:.1} writes): {}{commits}", total / t, writes / t, top.join(", "))
}

/// The keys [`request_counts`] files the store's durable commits and the writes they held under.
const COMMITS: &str = "COMMITS";
const COMMITTED_WRITES: &str = "COMMITTED_WRITES";

// ---------------------------------------------------------------------------------------------
// Runs

#[derive(Default, Clone)]
struct RunResult {
    latencies: Vec<Duration>,
    stages: Vec<(&'static str, Duration, Duration)>,
    templates_per_s: f64,
    member_applies_per_s: f64,
    cp_cpu: Duration,
    wall: Duration,
    requests: String,
}

async fn propagate(cp: &ControlPlane, members: &[Member], arrivals: &Arrivals, stages: &Stages, spec: RunSpec, settle: Duration, errors: &Errors) -> RunResult {
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client.clone(), NS, &ApiResource::erase::<Deployment>(&()));
    let cpu0 = cp.usage().0;
    let requests0 = request_counts(&cp.client).await;
    let d = common::drive(api, &spec, arrivals, stages, settle, errors, &format!("{}: ", cp.kind), &|i| members[i].name.clone()).await;
    let span = d.wall.as_secs_f64().max(1e-9);
    RunResult {
        templates_per_s: d.latencies.len() as f64 / span,
        member_applies_per_s: d.total_targets as f64 / span,
        cp_cpu: cp.usage().0.saturating_sub(cpu0),
        requests: requests_per_template(&requests0, &request_counts(&cp.client).await, spec.count),
        wall: d.wall,
        latencies: d.latencies,
        stages: d.stages,
    }
}

/// A figure of a run, or "—" for a run not made.
fn made(r: &RunResult, figure: impl FnOnce() -> String) -> String {
    if r.latencies.is_empty() { "—".into() } else { figure() }
}

fn print_run(title: &str, r: &RunResult, ceiling: f64) {
    if r.latencies.is_empty() {
        println!("  {title}: no template arrived everywhere");
        return;
    }
    println!(
        "  {title}: {} templates, latency p50 {} p99 {} max {}",
        r.latencies.len(),
        ms(pct(&r.latencies, 0.5)),
        ms(pct(&r.latencies, 0.99)),
        ms(r.latencies.last().copied().unwrap_or_default())
    );
    let parts: Vec<String> = r.stages.iter().map(|(n, p50, p99)| format!("{n} {}/{}", ms(*p50), ms(*p99))).collect();
    println!("    where the time goes (p50/p99): {}", parts.join("; "));
    println!(
        "    {:.1} templates/s = {:.1} member applies/s = {:.1}% of the {ceiling:.0} direct creates/s; control plane {:.1} CPU s over {:.1} s ({:.2} cores)",
        r.templates_per_s,
        r.member_applies_per_s,
        100.0 * r.member_applies_per_s / ceiling.max(1e-9),
        r.cp_cpu.as_secs_f64(),
        r.wall.as_secs_f64(),
        r.cp_cpu.as_secs_f64() / r.wall.as_secs_f64().max(1e-9)
    );
    println!("    API: {}", r.requests);
}

/// The members' own rate: the driver creates Deployments straight in them, 64 in flight,
/// round-robin, over the same HTTPS path a control plane uses.
async fn ceiling(members: &[Member], writes: usize, errors: &Errors) -> f64 {
    let ar = ApiResource::erase::<Deployment>(&());
    for m in members {
        if let Err(e) = create(
            &m.client,
            &dynamic("", "v1", "Namespace", "namespaces"),
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CEILING_NS}}),
        )
        .await
        {
            errors.add(format!("ceiling: {}: {e}", m.name));
        }
    }
    let clients: Arc<Vec<kube::Client>> = Arc::new(members.iter().map(|m| m.client.clone()).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (clients, ar, next, failures) = (clients.clone(), ar.clone(), next.clone(), failures.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= writes {
                    break;
                }
                let api: Api<DynamicObject> = Api::namespaced_with(clients[i % clients.len()].clone(), CEILING_NS, &ar);
                let body = deployment(&format!("raw-{i}"), CEILING_NS, 1, &[(PAIR_LABEL, "0".into())]);
                if api.create(&PostParams::default(), &serde_json::from_value(body).expect("a Deployment")).await.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    let rate = writes as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let failed = failures.load(Ordering::Relaxed);
    if failed > 0 {
        errors.add(format!("ceiling: {failed} of {writes} direct creates failed"));
    }
    rate
}

// ---------------------------------------------------------------------------------------------
// One control plane

struct Outcome {
    kind: String,
    ceiling: f64,
    open: RunResult,
    burst: RunResult,
    dup: RunResult,
    cold: Option<cold_start::ColdStart>,
    /// Control plane CPU seconds and resident set (now, peak) at the end, all its processes.
    cpu: Duration,
    rss: u64,
    peak: u64,
    up: Duration,
}

async fn run_one(args: &Args, sizes: &Sizes, kind: &str, errors: &Errors) -> anyhow::Result<Outcome> {
    println!("\n## {kind}");
    let dir = tempfile::Builder::new().prefix(&format!("propagation-compare-{kind}-")).tempdir()?;
    let dir_path = dir.path().to_path_buf();
    if args.keep {
        println!("  data and logs: {} (kept)", dir_path.display());
        std::mem::forget(dir);
    }
    let (members_proc, members) = processes::start_members(&args.flotilla_bin(), &args.pinning.member_cpus, sizes.members, &dir_path, &[]).await?;
    println!("  {} members up (pid {}, CPUs {:?})", members.len(), members_proc.pid(), args.pinning.member_cpus);
    let t0 = Instant::now();
    let mut cp = start_control_plane(args, kind, &dir_path, &[]).await.with_context(|| format!("start {kind} (logs in {})", dir_path.display()))?;
    join(args, &cp, &members, &dir_path).await?;
    wait_ready(&cp.client, members.len(), args.settle_timeout).await?;
    let up = t0.elapsed();
    println!("  control plane up and {} clusters Ready in {:.1}s (processes: {})", members.len(), up.as_secs_f64(), cp.process_names().join(", "));
    create(&cp.client, &dynamic("", "v1", "Namespace", "namespaces"), None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await?;
    wait_namespace(&members, NS, args.settle_timeout).await?;

    let ceiling = ceiling(&members, sizes.ceiling_writes, errors).await;
    println!("  ceiling: {ceiling:.0} direct creates/s into the members ({} writes, 64 in flight)", sizes.ceiling_writes);

    let policies = dynamic("policy.karmada.io", "v1alpha1", "PropagationPolicy", "propagationpolicies");
    let pairs = (members.len() / 2).max(1);
    for k in 0..pairs {
        create(&cp.client, &policies, Some(NS), common::pair_policy(k, &members[2 * k].name, &members[(2 * k + 1) % members.len()].name)).await?;
    }
    create(&cp.client, &policies, Some(NS), duplicated_policy()).await?;
    // Give both control planes' policy caches a moment; Karmada's detector reads policies from
    // an informer, and a template that arrives before its policy waits for a resync.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let arrivals = Arc::new(Arrivals::default());
    let stages = Arc::new(Stages::default());
    let mut followers = tokio::task::JoinSet::new();
    for (i, m) in members.iter().enumerate() {
        followers.spawn(follow_member(i, m.client.clone(), arrivals.clone()));
    }
    followers.spawn(follow_bindings(cp.client.clone(), stages.clone()));
    followers.spawn(follow_works(cp.client.clone(), stages.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let n = members.len();
    let pair_targets = move |i: usize| {
        let k = i % (n / 2).max(1);
        vec![2 * k, (2 * k + 1) % n]
    };
    let divided = |label: &'static str, count: usize, rate: Option<f64>| RunSpec {
        label,
        count,
        rate,
        replicas: 2,
        targets: Arc::new(pair_targets),
        labels: Arc::new(move |i| vec![(PAIR_LABEL, (i % (n / 2).max(1)).to_string())]),
        per_member: |r, t| r / t as i64,
    };
    let mut open = RunResult::default();
    if args.runs("open") {
        open = propagate(&cp, &members, &arrivals, &stages, divided("open", sizes.templates, Some(sizes.rate)), args.settle_timeout, errors).await;
        print_run(&format!("Divided, open loop at {}/s", sizes.rate), &open, ceiling);
    }
    let mut burst = RunResult::default();
    if args.runs("burst") {
        burst = propagate(&cp, &members, &arrivals, &stages, divided("burst", sizes.burst, None), args.settle_timeout, errors).await;
        print_run("Divided, 32 creators as fast as they go", &burst, ceiling);
    }
    let dup_spec = RunSpec {
        label: "dup",
        count: sizes.duplicated,
        rate: Some(args.duplicated_rate),
        replicas: 1,
        targets: Arc::new(move |_| (0..n).collect()),
        labels: Arc::new(|_| vec![(DUP_LABEL, "true".into())]),
        per_member: |r, _| r,
    };
    let mut dup = RunResult::default();
    if args.runs("dup") {
        dup = propagate(&cp, &members, &arrivals, &stages, dup_spec, args.settle_timeout, errors).await;
        print_run(&format!("Duplicated to all {n} at {}/s", args.duplicated_rate), &dup, ceiling);
    }
    followers.abort_all();

    let mut cold = None;
    if args.runs("cold") && sizes.cold_start > 0 {
        match cold_start::run(args, &mut cp, &members, &dir_path, sizes.cold_start).await {
            Ok(c) => {
                c.print();
                cold = Some(c);
            }
            Err(e) => errors.add(format!("{kind}: cold start: {e:#}")),
        }
    }
    let (cpu, rss, peak) = cp.usage();
    println!(
        "  control plane: {:.1} CPU s in all, resident {:.0} MiB (peak {:.0} MiB); load average {}",
        cpu.as_secs_f64(),
        rss as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        loadavg()
    );
    cp.stop().await;
    members_proc.stop().await;
    Ok(Outcome { kind: kind.into(), ceiling, open, burst, dup, cold, cpu, rss, peak, up })
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
        "# propagation side by side ({} run, {} build, {} CPUs, load average {}); control planes on CPUs {:?}, members and driver on {:?}",
        if args.smoke { "smoke" } else { "full" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        cpus,
        loadavg(),
        args.pinning.cp_cpus,
        args.pinning.member_cpus,
    );
    println!(
        "{} members; Divided: {} templates open loop at {}/s, {} as fast as possible; Duplicated: {} at {}/s; ceiling: {} direct creates",
        sizes.members, sizes.templates, sizes.rate, sizes.burst, sizes.duplicated, args.duplicated_rate, sizes.ceiling_writes
    );
    if sizes.members < 2 {
        eprintln!("error: Divided over 2 members needs at least 2 members");
        return std::process::ExitCode::FAILURE;
    }
    let errors = Errors::default();
    let mut outcomes = Vec::new();
    // Interrupted, the run in hand is dropped, and with it every process it started.
    let interrupted = tokio::select! {
        () = async {
            for kind in &args.control_planes {
                match run_one(&args, &sizes, kind, &errors).await {
                    Ok(o) => outcomes.push(o),
                    Err(e) => errors.add(format!("{kind}: {e:#}")),
                }
            }
        } => None,
        signal = interrupt() => Some(signal),
    };
    if let Some(signal) = interrupted {
        eprintln!("{signal}: the control plane and the members were stopped; no figures");
        return std::process::ExitCode::FAILURE;
    }
    if !outcomes.is_empty() {
        println!("\n## side by side");
        println!("| figure | {} |", outcomes.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>().join(" | "));
        println!("|---|{}", "---|".repeat(outcomes.len()));
        let row = |name: &str, f: &dyn Fn(&Outcome) -> String| println!("| {name} | {} |", outcomes.iter().map(f).collect::<Vec<_>>().join(" | "));
        row("up + clusters Ready", &|o| format!("{:.1} s", o.up.as_secs_f64()));
        row("ceiling (direct creates/s)", &|o| format!("{:.0}", o.ceiling));
        row("Divided open loop p50 / p99", &|o| made(&o.open, || format!("{} / {}", ms(pct(&o.open.latencies, 0.5)), ms(pct(&o.open.latencies, 0.99)))));
        row("Divided sustained applies/s (% of ceiling)", &|o| {
            made(&o.burst, || format!("{:.1} ({:.1}%)", o.burst.member_applies_per_s, 100.0 * o.burst.member_applies_per_s / o.ceiling.max(1e-9)))
        });
        row("Divided sustained p50 / p99", &|o| made(&o.burst, || format!("{} / {}", ms(pct(&o.burst.latencies, 0.5)), ms(pct(&o.burst.latencies, 0.99)))));
        row("Duplicated p50 / p99", &|o| made(&o.dup, || format!("{} / {}", ms(pct(&o.dup.latencies, 0.5)), ms(pct(&o.dup.latencies, 0.99)))));
        row("Duplicated applies/s (% of ceiling)", &|o| {
            made(&o.dup, || format!("{:.1} ({:.1}%)", o.dup.member_applies_per_s, 100.0 * o.dup.member_applies_per_s / o.ceiling.max(1e-9)))
        });
        row("control plane CPU s: open / sustained / duplicated / whole run", &|o| {
            format!("{:.1} / {:.1} / {:.1} / {:.1}", o.open.cp_cpu.as_secs_f64(), o.burst.cp_cpu.as_secs_f64(), o.dup.cp_cpu.as_secs_f64(), o.cpu.as_secs_f64())
        });
        row("cold start: propagated / direct (goal ≤ 1.5×)", &|o| match &o.cold {
            Some(c) => format!(
                "{:.1} s / {:.1} s = {:.2}×",
                c.propagated.as_secs_f64(),
                c.direct.as_secs_f64(),
                c.propagated.as_secs_f64() / c.direct.as_secs_f64().max(1e-9)
            ),
            None => "—".into(),
        });
        row("cold start: RSS holding them (per 1,000 templates)", &|o| match &o.cold {
            Some(c) => format!("{:.0} MiB ({:.1} MiB)", c.rss as f64 / 1048576.0, c.rss as f64 / 1048576.0 / (c.templates as f64 / 1000.0)),
            None => "—".into(),
        });
        row("SIGKILL restart: queues drained, member writes (goal ≤ 30 s, 0)", &|o| match &o.cold {
            Some(c) => format!("{:.1} s, {:.0}", c.restart.as_secs_f64(), c.restart_member_writes),
            None => "—".into(),
        });
        row("control plane RSS at the end (peak)", &|o| format!("{:.0} MiB ({:.0} MiB)", o.rss as f64 / 1048576.0, o.peak as f64 / 1048576.0));
    }
    errors.verdict()
}
