//! The cold-start run of `propagation-compare` (issue 24): templates created while the
//! propagation controllers are off, then the controllers started on them, then a SIGKILL and a
//! restart of a control plane that holds them all.
//!
//! 1. the members' own rate for the same writes: per template its ConfigMap and Deployment
//!    created straight in its two members (namespace `cold-ceiling`), 64 in flight;
//! 2. the control plane restarted with the propagation controllers off (`--controllers
//!    *,-detector,...`); per template a ConfigMap, a Deployment that reads it (`envFrom`) and a
//!    PropagationPolicy with `propagateDeps` placing it on two members, 32 creators;
//! 3. the control plane restarted with every controller: the time until every object is in
//!    both of its members (watched in the members) and every binding says `FullyApplied`;
//!    then until its work queues are empty, and its resident set holding them;
//! 4. SIGKILL and start: the time until every queue is drained again, and the members' write
//!    requests over that restart (there should be none: everything is in place).
//!
//! For Karmada "the controllers off" and "SIGKILL and start" are its controller-manager and
//! scheduler (run by the driver, see `KarmadaControllers`): its host API server, etcd, webhook
//! and aggregated API server keep running, as a Karmada upgrade or a controller-manager crash
//! leaves them. Flotilla is one process, so all of it restarts.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::common::deployment;
use super::{Args, ControlPlane, Member, create, dynamic, metrics, signal, start_control_plane};

/// Namespace of the cold-start templates on the control plane and in the members.
pub const COLD_NS: &str = "cold";
/// Namespace of the same writes made straight in the members.
const COLD_CEILING_NS: &str = "cold-ceiling";
/// The controllers that propagate; off while the templates are created.
const PROPAGATION_OFF: &str = "*,-detector,-scheduler,-binding,-dependenciesDistributor,-execution,-workStatus";

/// What the cold-start run measured.
pub struct ColdStart {
    pub templates: usize,
    /// Member writes the run needs (a ConfigMap and a Deployment in two members each).
    pub writes: usize,
    pub direct: Duration,
    pub created: Duration,
    /// From the start of the control plane with its controllers to every object in place and
    /// every binding FullyApplied.
    pub propagated: Duration,
    /// Until its queues were empty, from the same start.
    pub drained: Duration,
    pub rss: u64,
    /// SIGKILL, start: until every queue was drained again.
    pub restart: Duration,
    /// Writes to deployments and configmaps the members served during that restart.
    pub restart_member_writes: f64,
}

impl ColdStart {
    pub fn print(&self) {
        println!("  cold start: {} templates (+ {} ConfigMaps, {} policies) = {} member writes", self.templates, self.templates, self.templates, self.writes);
        println!(
            "    direct: {:.1} s ({:.0} writes/s); created on the control plane with its propagation controllers off in {:.1} s",
            self.direct.as_secs_f64(),
            self.writes as f64 / self.direct.as_secs_f64().max(1e-9),
            self.created.as_secs_f64()
        );
        println!(
            "    controllers started → everything in place and FullyApplied: {:.1} s = {:.2}× the direct time (goal ≤ 1.5×); queues empty after {:.1} s",
            self.propagated.as_secs_f64(),
            self.propagated.as_secs_f64() / self.direct.as_secs_f64().max(1e-9),
            self.drained.as_secs_f64()
        );
        println!(
            "    control plane resident set holding them: {:.0} MiB ({:.1} MiB per 1,000 templates; goal ≤ 300 MB at 5,000)",
            self.rss as f64 / 1048576.0,
            self.rss as f64 / 1048576.0 / (self.templates as f64 / 1000.0).max(1e-9)
        );
        println!(
            "    SIGKILL and start → every queue drained: {:.1} s (goal ≤ 30 s); member writes meanwhile: {:.0} (goal 0)",
            self.restart.as_secs_f64(),
            self.restart_member_writes
        );
    }
}

fn configmap(name: &str, ns: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"greeting": format!("hello from {name}")}})
}

/// A Deployment that reads its ConfigMap, so `propagateDeps` carries the ConfigMap along.
fn reading_deployment(name: &str, ns: &str) -> Value {
    let mut d = deployment(name, ns, 1, &[]);
    d["spec"]["template"]["spec"]["containers"][0]["envFrom"] = json!([{"configMapRef": {"name": name}}]);
    d
}

fn cold_policy(name: &str, a: &str, b: &str) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": COLD_NS},
        "spec": {
            "propagateDeps": true,
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}],
            "placement": {"clusterAffinity": {"clusterNames": [a, b]}, "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}
        }
    })
}

fn pair(members: &[Member], i: usize) -> (usize, usize) {
    let n = members.len();
    let k = i % (n / 2).max(1);
    (2 * k, (2 * k + 1) % n)
}

fn configmaps() -> ApiResource {
    dynamic("", "v1", "ConfigMap", "configmaps")
}

fn deployments() -> ApiResource {
    dynamic("apps", "v1", "Deployment", "deployments")
}

/// Run `jobs` with `width` in flight; the first error ends the run.
async fn in_flight<F>(width: usize, jobs: Vec<F>) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut stream = futures::stream::iter(jobs).buffer_unordered(width);
    while let Some(r) = stream.next().await {
        r?;
    }
    Ok(())
}

/// Sum of a metric's series whose line starts with `prefix` (name and, optionally, labels).
fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Flotilla's propagation controllers, by the names their metrics carry.
const FLOTILLA_CONTROLLERS: [&str; 6] = ["resource-detector", "scheduler", "binding-controller", "dependencies-distributor", "execution", "work-status"];
/// Karmada's: the controller-manager's controller-runtime controllers and async workers, and
/// the scheduler's queue.
const KARMADA_CONTROLLERS: [&str; 10] = [
    "resource detector",
    "propagationPolicy reconciler",
    "dependencies resource detector",
    "dependencies-distributor",
    "binding-controller",
    "resource-binding-status-controller",
    "execution-controller",
    "work-status",
    "work-status-controller",
    "scheduler-queue",
];

/// Wait until the control plane's propagation controllers have taken at least
/// `min_binding_adds` binding keys and each of their queues is empty with no worker busy,
/// three polls in a row (the others, such as the clusters' health checks, requeue themselves
/// for ever). Flotilla's controllers count on its API server's `/metrics`, Karmada's on its
/// controller-manager's and scheduler's.
async fn wait_drained(cp: &ControlPlane, min_binding_adds: f64, timeout: Duration) -> anyhow::Result<()> {
    let (sources, controllers): (Vec<kube::Client>, &[&str]) = match &cp.karmada {
        Some(k) => (k.metrics.clone(), &KARMADA_CONTROLLERS),
        None => (vec![cp.client.clone()], &FLOTILLA_CONTROLLERS),
    };
    let deadline = Instant::now() + timeout;
    let mut quiet = 0;
    loop {
        let mut text = String::new();
        for source in &sources {
            text.push_str(&metrics(source).await.unwrap_or_default());
        }
        let adds = metric_sum(&text, "workqueue_adds_total{controller=\"binding-controller\"");
        let sum = |family: &str| controllers.iter().map(|c| metric_sum(&text, &format!("{family}{{controller=\"{c}\""))).sum::<f64>();
        let (depth, active) = (sum("workqueue_depth"), sum("controller_runtime_active_workers"));
        quiet = if adds >= min_binding_adds && depth == 0.0 && active == 0.0 { quiet + 1 } else { 0 };
        if quiet >= 3 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the control plane's queues were not drained within {timeout:?} (binding keys taken {adds}, depth {depth}, busy workers {active})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Write requests to deployments and configmaps the members have served so far.
async fn member_writes(members: &[Member]) -> f64 {
    let mut total = 0.0;
    for m in members {
        let Some(text) = metrics(&m.client).await else { continue };
        for verb in ["create", "update", "patch", "apply", "delete"] {
            for resource in ["deployments", "configmaps"] {
                total += metric_sum(&text, &format!("flotilla_apiserver_requests_total{{verb=\"{verb}\",resource=\"{resource}\""));
            }
        }
    }
    total
}

/// Watch each member's cold namespace and record every (kind, name, member) that appears.
fn follow_arrivals(members: &[Member], seen: Arc<Mutex<HashSet<(bool, String, usize)>>>) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for (idx, m) in members.iter().enumerate() {
        for (is_deployment, ar) in [(true, deployments()), (false, configmaps())] {
            let api: Api<DynamicObject> = Api::namespaced_with(m.client.clone(), COLD_NS, &ar);
            let seen = seen.clone();
            set.spawn(async move {
                let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Some(ev) = stream.next().await {
                    if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                        && let Some(name) = o.metadata.name.as_deref()
                        && name.starts_with("cold-")
                    {
                        seen.lock().insert((is_deployment, name.to_string(), idx));
                    }
                }
            });
        }
    }
    set
}

async fn fully_applied(cp: &kube::Client) -> anyhow::Result<usize> {
    let api: Api<DynamicObject> = Api::namespaced_with(cp.clone(), COLD_NS, &dynamic("work.karmada.io", "v1alpha2", "ResourceBinding", "resourcebindings"));
    let list = api.list(&ListParams::default()).await.context("list the cold bindings")?;
    Ok(list
        .items
        .iter()
        .filter(|b| b.data["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "FullyApplied" && c["status"] == "True")))
        .count())
}

/// The whole run; `cp` is replaced by each restart (same data directory).
pub async fn run(args: &Args, cp: &mut ControlPlane, members: &[Member], dir: &std::path::Path, templates: usize) -> anyhow::Result<ColdStart> {
    let writes = templates * 4;
    let timeout = args.settle_timeout.max(Duration::from_secs(templates as u64 / 5));

    // 1. The members' own rate for the same writes.
    for m in members {
        create(
            &m.client,
            &dynamic("", "v1", "Namespace", "namespaces"),
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": COLD_CEILING_NS}}),
        )
        .await
        .with_context(|| format!("{}: namespace {COLD_CEILING_NS}", m.name))?;
    }
    let start = Instant::now();
    let mut jobs = Vec::new();
    for i in 0..templates {
        let (a, b) = pair(members, i);
        for idx in [a, b] {
            let client = members[idx].client.clone();
            let name = format!("cold-{i}");
            jobs.push(async move {
                create(&client, &configmaps(), Some(COLD_CEILING_NS), configmap(&name, COLD_CEILING_NS)).await?;
                create(&client, &deployments(), Some(COLD_CEILING_NS), reading_deployment(&name, COLD_CEILING_NS)).await
            });
        }
    }
    // Each job makes two writes in a row: 32 jobs are the ceiling's 64 writers.
    in_flight(32, jobs).await.context("direct writes")?;
    let direct = start.elapsed();
    println!("  cold start: {writes} direct writes in {:.1} s", direct.as_secs_f64());

    // 2. Templates created with the propagation controllers off.
    create(&cp.client, &dynamic("", "v1", "Namespace", "namespaces"), None, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": COLD_NS}}))
        .await?;
    super::wait_namespace(members, COLD_NS, args.settle_timeout).await?;
    controllers_off(args, cp, dir).await?;
    let start = Instant::now();
    let mut jobs = Vec::new();
    for i in 0..templates {
        let (a, b) = pair(members, i);
        let (client, name) = (cp.client.clone(), format!("cold-{i}"));
        let policy = cold_policy(&name, &members[a].name, &members[b].name);
        jobs.push(async move {
            create(&client, &configmaps(), Some(COLD_NS), configmap(&name, COLD_NS)).await?;
            create(&client, &deployments(), Some(COLD_NS), reading_deployment(&name, COLD_NS)).await?;
            create(&client, &dynamic("policy.karmada.io", "v1alpha1", "PropagationPolicy", "propagationpolicies"), Some(COLD_NS), policy).await
        });
    }
    in_flight(32, jobs).await.context("create the cold templates")?;
    let created = start.elapsed();
    println!("  cold start: {templates} templates created with the propagation controllers off in {:.1} s", created.as_secs_f64());

    // 3. Every controller on.
    let writes_before = member_writes(members).await;
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let mut followers = follow_arrivals(members, seen.clone());
    let start = Instant::now();
    controllers_on(args, cp, dir).await?;
    let deadline = start + timeout;
    let mut last_report = Instant::now();
    loop {
        let arrived = seen.lock().len();
        if arrived >= writes && fully_applied(&cp.client).await? >= 2 * templates {
            break;
        }
        if Instant::now() > deadline {
            followers.abort_all();
            bail!("cold start: {arrived} of {writes} objects in their members after {timeout:?}");
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            println!("    … cold start: {arrived}/{writes} in their members ({:.0}s)", start.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let propagated = start.elapsed();
    followers.abort_all();
    // The members' write counters must have seen these writes, or the restart's 0 below means nothing.
    let counted = member_writes(members).await - writes_before;
    if counted < writes as f64 {
        bail!("the members' request counters show {counted} writes for the {writes} the cold start made: cannot count member writes");
    }
    wait_drained(cp, 2.0 * templates as f64, timeout).await?;
    let drained = start.elapsed();
    let rss = cp.usage().1;
    println!(
        "  cold start: everything in place and FullyApplied {:.1} s after the controllers started ({:.2}× the direct time), queues empty after {:.1} s, {:.0} MiB resident; now SIGKILL and start",
        propagated.as_secs_f64(),
        propagated.as_secs_f64() / direct.as_secs_f64().max(1e-9),
        drained.as_secs_f64(),
        rss as f64 / 1048576.0
    );

    // 4. SIGKILL and start.
    let before = member_writes(members).await;
    let start = Instant::now();
    kill_and_start(args, cp, dir).await?;
    wait_drained(cp, 2.0 * templates as f64, timeout).await?;
    let restart_time = start.elapsed();
    let restart_member_writes = member_writes(members).await - before;
    Ok(ColdStart { templates, writes, direct, created, propagated, drained, rss, restart: restart_time, restart_member_writes })
}

/// Flotilla: restart with the propagation controllers off. Karmada: stop its controller-manager
/// and scheduler (its API server, etcd and webhook stay).
async fn controllers_off(args: &Args, cp: &mut ControlPlane, dir: &std::path::Path) -> anyhow::Result<()> {
    match cp.karmada.as_mut() {
        Some(k) => {
            cp.earlier_cpu += k.stop(false).await;
            Ok(())
        }
        None => restart(args, cp, dir, false, &[format!("--controllers={PROPAGATION_OFF}")]).await,
    }
}

/// Flotilla: restart with every controller. Karmada: start its controller-manager and scheduler.
async fn controllers_on(args: &Args, cp: &mut ControlPlane, dir: &std::path::Path) -> anyhow::Result<()> {
    match cp.karmada.as_mut() {
        Some(k) => k.start(args.settle_timeout).await,
        None => restart(args, cp, dir, false, &[]).await,
    }
}

/// SIGKILL and start: Flotilla's one process, or Karmada's controller-manager and scheduler
/// (what holds its propagation state; its API server and etcd keep running).
async fn kill_and_start(args: &Args, cp: &mut ControlPlane, dir: &std::path::Path) -> anyhow::Result<()> {
    match cp.karmada.as_mut() {
        Some(k) => {
            cp.earlier_cpu += k.stop(true).await;
            k.start(args.settle_timeout).await
        }
        None => restart(args, cp, dir, true, &[]).await,
    }
}

/// Stop the control plane (SIGTERM, or SIGKILL) and start it again on the same data directory.
async fn restart(args: &Args, cp: &mut ControlPlane, dir: &std::path::Path, kill: bool, extra: &[String]) -> anyhow::Result<()> {
    let pid = cp.main.pid();
    // Read before it stops: /proc forgets a process once it is reaped.
    let cpu = cp.usage().0;
    if kill {
        signal("KILL", pid).await;
        let _ = cp.main.child.wait().await;
    } else {
        signal("TERM", pid).await;
        if tokio::time::timeout(Duration::from_secs(60), cp.main.child.wait()).await.is_err() {
            signal("KILL", pid).await;
            let _ = cp.main.child.wait().await;
        }
    }
    *cp = start_control_plane(args, "flotilla", dir, extra).await.context("restart the control plane")?;
    cp.earlier_cpu = cpu;
    Ok(())
}
