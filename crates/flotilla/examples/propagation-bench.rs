//! Propagation benchmark: the control plane `flotilla up` runs (API server on the embedded
//! store, the federation controllers with in-process clients) and a fleet of simulated members
//! joined in Push mode as `flotilla up --demo` joins them, all in this process. Arrival is
//! observed in the members' own stores (a watch per member), never on the control plane.
//!
//!   cargo build --release -p flotilla --example propagation-bench
//!   $CARGO_TARGET_DIR/release/examples/propagation-bench            (10 and 100 members)
//!   (smoke, for CI: target/debug/examples/propagation-bench --smoke)
//!
//! Per member count it measures, in this order:
//! 1. the ceiling: the rate at which the member client the execution controller uses (built from
//!    the Cluster and its Secret) creates the same Deployments straight in the members (64 in
//!    flight), the rate of applies done as the execution controller does them (GET + create),
//!    and the latency of writing one template's copies directly (2 members; all members);
//! 2. Divided over 2 members (static weights 1:1, a PropagationPolicy per member pair), open loop
//!    at `--rate` templates/s: latency from the scheduled create time to the copy in the last
//!    target member, p50/p99, and the achieved rate;
//! 3. the same, as fast as 32 creators go: sustained templates/s and member applies/s;
//! 4. Duplicated to every member at `--duplicated-rate` templates/s: latency to the last member;
//! 5. (at the largest size) a member blackholed → `Ready=False` on its Cluster, at the
//!    `--cluster-*` settings given (the defaults of `flotilla up` unless `--smoke`).
//!
//! Every figure is printed next to its ceiling with the ratio; the goals of issue 7 are printed
//! beside them but never fail the run. The run fails (exit 1) only on errors: a create refused, a
//! template missing in a target member, a copy with the wrong replicas, a member that never
//! turned NotReady. Results go in docs/benchmarks/propagation.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use flotilla::federation_args::FederationArgs;
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_sim::bench::{Arrivals, Errors, Phase, follow_deployments, loadavg, pct};
use flotilla_sim::{FleetConfig, MemberConfig};
use flotilla_store::Store;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use flotilla_store::hub::WatchEvent;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

#[path = "propagation/common.rs"]
mod common;

use common::{DUP_LABEL, NS, PAIR_LABEL, RunSpec, Stages, deployment, duplicated_policy};

/// Namespace of the ceiling's direct writes in the members.
const CEILING_NS: &str = "bench-ceiling";

#[derive(Parser)]
#[command(about = "Propagation latency, throughput and failure detection against simulated members")]
struct Args {
    /// CI size: 4 members, a few dozen templates, short health-probe settings; seconds in a
    /// debug build.
    #[arg(long)]
    smoke: bool,
    /// Member counts to run, one control plane and fleet each [default: 10,100; smoke: 4].
    #[arg(long, value_delimiter = ',')]
    members: Option<Vec<usize>>,
    /// Templates in the open-loop Divided run [default: 2000; smoke: 20].
    #[arg(long)]
    templates: Option<usize>,
    /// Offered rate of the open-loop Divided run, templates/s [default: 100; smoke: 20].
    #[arg(long)]
    rate: Option<f64>,
    /// Templates in the as-fast-as-possible Divided run [default: 2000; smoke: 20].
    #[arg(long)]
    burst: Option<usize>,
    /// Templates Duplicated to every member [default: 20; smoke: 3].
    #[arg(long)]
    duplicated: Option<usize>,
    /// Offered rate of the Duplicated run, templates/s.
    #[arg(long, default_value_t = 1.0)]
    duplicated_rate: f64,
    /// Direct creates in the ceiling run [default: 3000; smoke: 100].
    #[arg(long)]
    ceiling_writes: Option<usize>,
    /// Templates written directly into a pair of members, one after another, for the direct
    /// write latency [default: 200; smoke: 20].
    #[arg(long)]
    ceiling_latency_writes: Option<usize>,
    /// Run the members' workload simulation (ReplicaSets, pods, status) or only store what
    /// they are sent.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    workloads: String,
    /// Measure failure detection at the largest size (`last`), at every size, or not at all.
    #[arg(long, default_value = "last", value_parser = ["last", "all", "off"])]
    failure: String,
    /// Give up on a run whose templates have not all arrived this long after the last create.
    #[arg(long, default_value = "120s", value_parser = flotilla::federation_args::parse_duration)]
    settle_timeout: Duration,
    #[command(flatten)]
    federation: FederationArgs,
}

struct Sizes {
    members: Vec<usize>,
    templates: usize,
    rate: f64,
    burst: usize,
    duplicated: usize,
    ceiling_writes: usize,
    ceiling_latency_writes: usize,
}

impl Args {
    fn sizes(&self) -> Sizes {
        let s = self.smoke;
        Sizes {
            members: self.members.clone().unwrap_or_else(|| if s { vec![4] } else { vec![10, 100] }),
            templates: self.templates.unwrap_or(if s { 20 } else { 2000 }),
            rate: self.rate.unwrap_or(if s { 20.0 } else { 100.0 }),
            burst: self.burst.unwrap_or(if s { 20 } else { 2000 }),
            duplicated: self.duplicated.unwrap_or(if s { 3 } else { 20 }),
            ceiling_writes: self.ceiling_writes.unwrap_or(if s { 100 } else { 3000 }),
            ceiling_latency_writes: self.ceiling_latency_writes.unwrap_or(if s { 20 } else { 200 }),
        }
    }

    /// The health-probe settings: as given, except that a smoke run with the defaults
    /// shortens them (the default detection takes 30–45 s).
    fn federation(&self) -> FederationArgs {
        let mut f = self.federation.clone();
        let d = FederationArgs::default();
        let untouched = f.cluster_status_update_frequency == d.cluster_status_update_frequency
            && f.cluster_probe_timeout == d.cluster_probe_timeout
            && f.cluster_failure_threshold == d.cluster_failure_threshold;
        if self.smoke && untouched {
            f.cluster_status_update_frequency = Some(Duration::from_millis(200));
            f.cluster_probe_timeout = Some(Duration::from_millis(500));
            f.cluster_failure_threshold = Some(Duration::from_secs(1));
            f.cluster_success_threshold = Some(Duration::from_secs(1));
        }
        // Given explicitly, so the seeded KubeFedConfig does not change what is measured.
        let c = f.cluster_status();
        f.cluster_status_update_frequency = Some(c.interval);
        f.cluster_probe_timeout = Some(c.probe_timeout);
        f.cluster_failure_threshold = Some(c.failure_threshold);
        f.cluster_success_threshold = Some(c.success_threshold);
        f
    }
}

// ---------------------------------------------------------------------------------------------
// Figures

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

// ---------------------------------------------------------------------------------------------
// Arrivals in the members

/// The control plane's own store is watched (a watch, no API load) for each template's
/// ResourceBinding created, scheduled and its last Work; only to show where the time goes.
async fn follow_control_plane(store: Arc<dyn Store>, stages: Arc<Stages>) {
    let prefix = "/registry/work.karmada.io/";
    let rb = format!("{prefix}resourcebindings/{NS}/");
    let works = format!("{prefix}works/");
    let mut from = store.current_revision().await.unwrap_or(0);
    loop {
        let Ok(mut watch) = store.watch(prefix.as_bytes(), from).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while let Some(ev) = watch.next_event().await {
            let Ok(WatchEvent::Put { kv, .. }) = ev else {
                match ev {
                    Ok(WatchEvent::Delete { revision, .. }) => from = revision,
                    Ok(WatchEvent::Progress(r)) => from = r,
                    _ => break,
                }
                continue;
            };
            from = kv.mod_revision;
            let now = Instant::now();
            let key = String::from_utf8_lossy(&kv.key).to_string();
            if let Some(name) = key.strip_prefix(&rb).and_then(|n| n.strip_suffix("-deployment")) {
                stages.binding.lock().entry(name.to_string()).or_insert(now);
                if !stages.scheduled.lock().contains_key(name) {
                    let v: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
                    if v["spec"]["clusters"].as_array().is_some_and(|c| !c.is_empty()) {
                        stages.scheduled.lock().insert(name.to_string(), now);
                    }
                }
            } else if key.starts_with(&works) {
                let v: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
                let m = &v["spec"]["workload"]["manifests"][0]["metadata"];
                if m["namespace"] == NS
                    && let Some(name) = m["name"].as_str()
                {
                    let mut w = stages.works.lock();
                    let e = w.entry(name.to_string()).or_insert_with(|| (Vec::new(), now));
                    if !e.0.contains(&key) {
                        e.0.push(key);
                        e.1 = now;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Objects

fn member_name(i: usize) -> String {
    format!("member{}", i + 1)
}

/// A template's copy as the execution controller writes it: Karmada's labels and annotations
/// on the template, replicas as scheduled. Used by the ceiling, so both write the same bytes.
fn member_copy(name: &str, ns: &str, replicas: i64) -> Value {
    let mut d = deployment(name, NS, replicas, &[(PAIR_LABEL, "0".into())]);
    let id = "5f0e2c1a-7b7d-4d7e-9a61-0c3c2f9b1e42";
    d["metadata"]["namespace"] = json!(ns);
    let labels = d["metadata"]["labels"].as_object_mut().expect("labels");
    labels.insert("karmada.io/managed".into(), json!("true"));
    labels.insert("propagationpolicy.karmada.io/permanent-id".into(), json!(id));
    labels.insert("resourcebinding.karmada.io/permanent-id".into(), json!(id));
    labels.insert("work.karmada.io/permanent-id".into(), json!(id));
    d["metadata"]["annotations"] = json!({
        "propagationpolicy.karmada.io/name": "pair-0",
        "propagationpolicy.karmada.io/namespace": NS,
        "resourcebinding.karmada.io/name": format!("{name}-deployment"),
        "resourcebinding.karmada.io/namespace": NS,
        "resourcetemplate.karmada.io/uid": id,
        "resourcetemplate.karmada.io/managed-annotations": "propagationpolicy.karmada.io/name,propagationpolicy.karmada.io/namespace,resourcebinding.karmada.io/name,resourcebinding.karmada.io/namespace,resourcetemplate.karmada.io/managed-annotations,resourcetemplate.karmada.io/managed-labels,resourcetemplate.karmada.io/uid,work.karmada.io/conflict-resolution,work.karmada.io/name,work.karmada.io/namespace",
        "resourcetemplate.karmada.io/managed-labels": "karmada.io/managed,propagationpolicy.karmada.io/permanent-id,resourcebinding.karmada.io/permanent-id,work.karmada.io/permanent-id",
        "work.karmada.io/conflict-resolution": "abort",
        "work.karmada.io/name": format!("{name}-6d4b9c8f7"),
        "work.karmada.io/namespace": "karmada-es-member1",
    });
    d
}

fn propagation_policies() -> ApiResource {
    ApiResource {
        group: "policy.karmada.io".into(),
        version: "v1alpha1".into(),
        api_version: "policy.karmada.io/v1alpha1".into(),
        kind: "PropagationPolicy".into(),
        plural: "propagationpolicies".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// One propagation run

struct RunResult {
    latencies: Vec<Duration>,
    /// p50/p99 of each stage's share: create → binding, → scheduled, → last Work, → last member.
    stages: Vec<(&'static str, Duration, Duration)>,
    /// Templates per second, from the first create to the last arrival.
    templates_per_s: f64,
    member_applies_per_s: f64,
    offered: Option<f64>,
    /// Creates per second actually issued.
    created_per_s: f64,
}

async fn propagate(cp: &kube::Client, arrivals: &Arrivals, stages: &Stages, spec: RunSpec, settle: Duration, errors: &Errors) -> RunResult {
    let api: Api<DynamicObject> = Api::namespaced_with(cp.clone(), NS, &ApiResource::erase::<Deployment>(&()));
    let d = common::drive(api, &spec, arrivals, stages, settle, errors, "", &member_name).await;
    let span = d.wall.as_secs_f64().max(1e-9);
    RunResult {
        templates_per_s: d.latencies.len() as f64 / span,
        member_applies_per_s: d.total_targets as f64 / span,
        offered: spec.rate,
        created_per_s: spec.count as f64 / d.created_span.as_secs_f64().max(1e-9),
        latencies: d.latencies,
        stages: d.stages,
    }
}

fn print_run(title: &str, r: &RunResult, ceiling_p50: Duration, ceiling_p99: Duration, ceiling_rate: f64) {
    if r.latencies.is_empty() {
        println!("  {title}: no template arrived everywhere");
        return;
    }
    let (p50, p99) = (pct(&r.latencies, 0.5), pct(&r.latencies, 0.99));
    let max = r.latencies.last().copied().unwrap_or_default();
    println!("  {title}: {} templates", r.latencies.len());
    if let Some(o) = r.offered {
        println!("    offered {o:.1}/s, created {:.1}/s", r.created_per_s);
    }
    println!(
        "    latency p50 {} p99 {} max {}  | direct write p50 {} p99 {}  | ratio direct/propagated p50 {:.0}% p99 {:.0}%",
        ms(p50),
        ms(p99),
        ms(max),
        ms(ceiling_p50),
        ms(ceiling_p99),
        100.0 * ceiling_p50.as_secs_f64() / p50.as_secs_f64().max(1e-9),
        100.0 * ceiling_p99.as_secs_f64() / p99.as_secs_f64().max(1e-9),
    );
    let parts: Vec<String> = r.stages.iter().map(|(n, p50, p99)| format!("{n} {}/{}", ms(*p50), ms(*p99))).collect();
    println!("    where the time goes (p50/p99, control plane's store): {}", parts.join("; "));
    println!(
        "    throughput {:.1} templates/s = {:.0} member applies/s  | ceiling {:.0} direct creates/s  | ratio {:.1}%",
        r.templates_per_s,
        r.member_applies_per_s,
        ceiling_rate,
        100.0 * r.member_applies_per_s / ceiling_rate.max(1e-9)
    );
}

// ---------------------------------------------------------------------------------------------
// The ceiling: the same client writing the same objects straight into the members

struct Ceiling {
    create_per_s: f64,
    apply_per_s: f64,
    pair_p50: Duration,
    pair_p99: Duration,
    all_p50: Duration,
    all_p99: Duration,
}

async fn ceiling(cp: &kube::Client, m: usize, sizes: &Sizes, timeout: Duration, errors: &Errors) -> Ceiling {
    let (writes, pair_reps, dup_reps) = (sizes.ceiling_writes, sizes.ceiling_latency_writes, sizes.duplicated);
    let clients = flotilla_member::Clients::default();
    let clusters: Api<Cluster> = Api::all(cp.clone());
    let mut conns = Vec::new();
    for i in 0..m {
        let c = clusters.get(&member_name(i)).await.expect("the cluster is registered");
        conns.push(clients.connect(cp, &c, timeout).await.expect("the member's credential works"));
    }
    let conns = Arc::new(conns);
    let ar = ApiResource::erase::<Deployment>(&());
    for c in conns.iter() {
        let ns: Api<Namespace> = Api::all(c.client.clone());
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": CEILING_NS}})).expect("a namespace");
        if let Err(e) = ns.create(&PostParams::default(), &body).await {
            errors.add(format!("ceiling: create namespace {CEILING_NS} in {}: {e}", c.cluster));
        }
    }
    // Raw creates, 64 in flight, round-robin over the members.
    let raw = |prefix: &'static str, count: usize, via_apply: bool| {
        let conns = conns.clone();
        let ar = ar.clone();
        async move {
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let start = Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..64 {
                let (conns, ar, next, failures) = (conns.clone(), ar.clone(), next.clone(), failures.clone());
                set.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= count {
                            break;
                        }
                        let c = &conns[i % conns.len()];
                        let body = member_copy(&format!("{prefix}-{i}"), CEILING_NS, 1);
                        let ok = if via_apply {
                            flotilla_member::apply::apply(c.member(), &body, Default::default()).await.is_ok()
                        } else {
                            let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), CEILING_NS, &ar);
                            api.create(&PostParams::default(), &serde_json::from_value(body).expect("a Deployment")).await.is_ok()
                        };
                        if !ok {
                            failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
            while set.join_next().await.is_some() {}
            (count as f64 / start.elapsed().as_secs_f64(), failures.load(std::sync::atomic::Ordering::Relaxed))
        }
    };
    let (create_per_s, f1) = raw("raw", writes, false).await;
    let (apply_per_s, f2) = raw("apply", writes / 3, true).await;
    if f1 + f2 > 0 {
        errors.add(format!("ceiling: {} direct writes failed", f1 + f2));
    }
    // Latency of writing one template's copies directly: into a pair, and into every member.
    let write_to = |targets: Vec<usize>, name: String| {
        let conns = conns.clone();
        let ar = ar.clone();
        async move {
            let start = Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for t in targets {
                let c = conns[t].client.clone();
                let body = member_copy(&name, CEILING_NS, 1);
                let ar = ar.clone();
                set.spawn(async move {
                    let api: Api<DynamicObject> = Api::namespaced_with(c, CEILING_NS, &ar);
                    api.create(&PostParams::default(), &serde_json::from_value(body).expect("a Deployment")).await.is_ok()
                });
            }
            let mut ok = true;
            while let Some(r) = set.join_next().await {
                ok &= r.unwrap_or(false);
            }
            (start.elapsed(), ok)
        }
    };
    let mut pair = Vec::new();
    let mut all = Vec::new();
    let mut failed = 0;
    for rep in 0..pair_reps {
        let k = rep % (m / 2).max(1);
        let (d, ok) = write_to(vec![2 * k, (2 * k + 1) % m], format!("pair-{rep}")).await;
        pair.push(d);
        failed += usize::from(!ok);
    }
    for rep in 0..dup_reps.max(3) {
        let (d, ok) = write_to((0..m).collect(), format!("all-{rep}")).await;
        all.push(d);
        failed += usize::from(!ok);
    }
    if failed > 0 {
        errors.add(format!("ceiling: {failed} direct latency writes failed"));
    }
    pair.sort_unstable();
    all.sort_unstable();
    Ceiling { create_per_s, apply_per_s, pair_p50: pct(&pair, 0.5), pair_p99: pct(&pair, 0.99), all_p50: pct(&all, 0.5), all_p99: pct(&all, 0.99) }
}

// ---------------------------------------------------------------------------------------------
// One size

struct SizeResult {
    members: usize,
    ceiling: Ceiling,
    open: RunResult,
    burst: RunResult,
    dup: RunResult,
    failure: Option<(Duration, String)>,
}

fn ready_status(c: &Cluster) -> Option<(String, String)> {
    let v = serde_json::to_value(c).ok()?;
    let conds = v["status"]["conditions"].as_array()?.clone();
    conds.iter().find(|c| c["type"] == "Ready").map(|c| (c["status"].as_str().unwrap_or("").to_string(), c["reason"].as_str().unwrap_or("").to_string()))
}

async fn wait_members_idle(fleet: &flotilla_sim::Fleet) {
    for m in fleet.members() {
        let _ = m.member.idle().await;
    }
}

async fn run_size(args: &Args, sizes: &Sizes, m: usize, measure_failure: bool, errors: &Errors) -> anyhow::Result<SizeResult> {
    let federation = args.federation();
    println!("\n## {m} members");
    let dir = tempfile::Builder::new().prefix("propagation-bench-").tempdir()?;
    // The control plane as `flotilla up` runs it: the embedded (redb) store, durable.
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("store.redb"))).await?);
    let (api, _) = flotilla::control_plane::start(store.clone(), Default::default()).await?;
    let controllers = flotilla::controllers::start(&api, &federation, None)?;
    let cp = flotilla::controllers::client(&api, "bench");

    let phase = Phase::start();
    let members: Vec<MemberConfig> = (0..m)
        .map(|i| {
            let mut c = MemberConfig::new(&member_name(i));
            c.pod_cidr = flotilla_sim::config::pod_cidr_for(i);
            c.simulate_workloads = args.workloads == "on";
            // Room for every pod the run makes: no pod waits for a node.
            c.nodes.pods = 20_000;
            c
        })
        .collect();
    let total = members.len();
    let fleet = flotilla::demo::start_fleet(FleetConfig::new(members, dir.path().join("fleet")), &cp, |p| {
        if let flotilla::demo::Progress::Started { done, total } = p
            && (done == total || done % 25 == 0)
        {
            println!("    … {done}/{total} members started");
        }
    })
    .await?;
    let clusters: Api<Cluster> = Api::all(cp.clone());
    let ready_deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let list = clusters.list(&Default::default()).await?;
        let ready = list.items.iter().filter(|c| ready_status(c).is_some_and(|(s, _)| s == "True")).count();
        if ready == total {
            break;
        }
        anyhow::ensure!(Instant::now() < ready_deadline, "only {ready} of {total} clusters turned Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("  fleet: {total} members started, joined and Ready {}", phase.end());

    // The namespace reaches every member through namespace propagation; then the policies.
    let ns: Api<Namespace> = Api::all(cp.clone());
    ns.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await?;
    let ns_key = format!("/registry/core/namespaces/{NS}");
    let ns_deadline = Instant::now() + Duration::from_secs(120);
    for e in fleet.members() {
        while e.member.store().get(ns_key.as_bytes()).await?.is_none() {
            anyhow::ensure!(Instant::now() < ns_deadline, "namespace {NS} never reached {}", e.member.name());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let policies: Api<DynamicObject> = Api::namespaced_with(cp.clone(), NS, &propagation_policies());
    let pairs = (m / 2).max(1);
    for k in 0..pairs {
        policies.create(&PostParams::default(), &serde_json::from_value(common::pair_policy(k, &member_name(2 * k), &member_name(2 * k + 1)))?).await?;
    }
    policies.create(&PostParams::default(), &serde_json::from_value(duplicated_policy())?).await?;
    let arrivals = Arc::new(Arrivals::default());
    // Members are indexed by their number (member<i+1>), not by the fleet's name order.
    let mut watchers: Vec<_> =
        (0..m).map(|i| tokio::spawn(follow_deployments(i, fleet.member(&member_name(i)).expect("a started member").store(), NS, arrivals.clone()))).collect();
    let stages = Arc::new(Stages::default());
    watchers.push(tokio::spawn(follow_control_plane(store.clone(), stages.clone())));
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. The ceiling.
    let phase = Phase::start();
    let ceiling = ceiling(&cp, m, sizes, federation.member_request_timeout, errors).await;
    println!(
        "  ceiling (member client straight into the members): {:.0} creates/s (64 in flight), {:.0} applies/s as the execution controller does them (GET + create) {}",
        ceiling.create_per_s,
        ceiling.apply_per_s,
        phase.end()
    );
    println!(
        "    one template's copies written directly: 2 members p50 {} p99 {}; all {m} members p50 {} p99 {}",
        ms(ceiling.pair_p50),
        ms(ceiling.pair_p99),
        ms(ceiling.all_p50),
        ms(ceiling.all_p99)
    );
    wait_members_idle(&fleet).await;

    let pair_targets: Arc<dyn Fn(usize) -> Vec<usize> + Send + Sync> = Arc::new(move |i| {
        let k = i % pairs;
        vec![2 * k, (2 * k + 1) % m]
    });
    let pair_labels: Arc<dyn Fn(usize) -> Vec<(&'static str, String)> + Send + Sync> = Arc::new(move |i| vec![(PAIR_LABEL, (i % pairs).to_string())]);
    let halves: fn(i64, usize) -> i64 = |r, n| r / n as i64;

    // 2. Divided, open loop.
    let phase = Phase::start();
    let open = propagate(
        &cp,
        &arrivals,
        &stages,
        RunSpec {
            label: "open",
            count: sizes.templates,
            rate: Some(sizes.rate),
            replicas: 2,
            targets: pair_targets.clone(),
            labels: pair_labels.clone(),
            per_member: halves,
        },
        args.settle_timeout,
        errors,
    )
    .await;
    print_run(&format!("Divided over 2 members, open loop {} {}", sizes.rate, phase.end()), &open, ceiling.pair_p50, ceiling.pair_p99, ceiling.create_per_s);
    wait_members_idle(&fleet).await;

    // 3. Divided, as fast as it goes.
    let phase = Phase::start();
    let burst = propagate(
        &cp,
        &arrivals,
        &stages,
        RunSpec { label: "burst", count: sizes.burst, rate: None, replicas: 2, targets: pair_targets, labels: pair_labels, per_member: halves },
        args.settle_timeout,
        errors,
    )
    .await;
    print_run(
        &format!("Divided over 2 members, 32 creators as fast as they go {}", phase.end()),
        &burst,
        ceiling.pair_p50,
        ceiling.pair_p99,
        ceiling.create_per_s,
    );
    wait_members_idle(&fleet).await;

    // 4. Duplicated to every member.
    let phase = Phase::start();
    let dup = propagate(
        &cp,
        &arrivals,
        &stages,
        RunSpec {
            label: "dup",
            count: sizes.duplicated,
            rate: Some(args.duplicated_rate),
            replicas: 2,
            targets: Arc::new(move |_| (0..m).collect()),
            labels: Arc::new(|_| vec![(DUP_LABEL, "true".to_string())]),
            per_member: |r, _| r,
        },
        args.settle_timeout,
        errors,
    )
    .await;
    print_run(
        &format!("Duplicated to all {m} members at {}/s {}", args.duplicated_rate, phase.end()),
        &dup,
        ceiling.all_p50,
        ceiling.all_p99,
        ceiling.create_per_s,
    );

    // 5. A member fails.
    let failure = if measure_failure {
        let victim = fleet.members().last().expect("a member").clone();
        let name = victim.member.name().to_string();
        let phase = Phase::start();
        let mut f = victim.member.faults().get();
        f.blackhole = true;
        victim.member.faults().set(f.clone()).map_err(anyhow::Error::msg)?;
        let t0 = Instant::now();
        let probes = federation.cluster_status();
        let limit = probes.failure_threshold + probes.interval * 3 + probes.probe_timeout * 3 + Duration::from_secs(60);
        let mut last_report = Instant::now();
        let outcome = loop {
            if let Ok(c) = clusters.get(&name).await
                && let Some((s, reason)) = ready_status(&c).filter(|(s, _)| s == "False")
            {
                let _ = s;
                break Some((t0.elapsed(), reason));
            }
            if t0.elapsed() > limit {
                break None;
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                println!("    … {name} blackholed {:.0}s ago, still Ready=True", t0.elapsed().as_secs_f64());
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        f.blackhole = false;
        victim.member.faults().set(f).map_err(anyhow::Error::msg)?;
        match &outcome {
            Some((d, reason)) => println!(
                "  member failure (blackhole) → Ready=False ({reason}) after {:.1}s {}; settings: probe every {:?}, timeout {:?}, failure threshold {:?}",
                d.as_secs_f64(),
                phase.end(),
                probes.interval,
                probes.probe_timeout,
                probes.failure_threshold,
            ),
            None => errors.add(format!("member {name} blackholed for {:.0}s and never turned Ready=False", limit.as_secs_f64())),
        }
        outcome
    } else {
        None
    };

    for w in watchers {
        w.abort();
    }
    controllers.shutdown(Duration::ZERO).await;
    fleet.shutdown().await?;
    drop(api);
    drop(store);
    Ok(SizeResult { members: m, ceiling, open, burst, dup, failure })
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    flotilla_sim::bench::init();
    let sizes = args.sizes();
    let federation = args.federation();
    println!(
        "# propagation benchmark ({} run, {} build, workload simulation {}, {} CPUs, load average {})",
        if args.smoke { "smoke" } else { "full" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        args.workloads,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    println!(
        "members {:?}; Divided: {} templates open loop at {}/s, {} as fast as possible; Duplicated: {} at {}/s; ceiling: {} direct creates",
        sizes.members, sizes.templates, sizes.rate, sizes.burst, sizes.duplicated, args.duplicated_rate, sizes.ceiling_writes
    );
    println!(
        "cluster status: probe every {:?}, timeout {:?}, failure threshold {:?}{}",
        federation.cluster_status().interval,
        federation.cluster_status().probe_timeout,
        federation.cluster_status().failure_threshold,
        if args.smoke && args.federation.cluster_failure_threshold == federation.cluster_failure_threshold {
            ""
        } else if args.smoke {
            " (shortened for the smoke run)"
        } else {
            " (the flags' defaults unless set)"
        }
    );
    let errors = Errors::default();
    let mut results = Vec::new();
    let largest = sizes.members.iter().copied().max().unwrap_or(0);
    for &m in &sizes.members {
        if m < 2 {
            errors.add(format!("{m} members: Divided over 2 members needs at least 2"));
            continue;
        }
        let failure = match args.failure.as_str() {
            "all" => true,
            "last" => m == largest,
            _ => false,
        };
        match run_size(&args, &sizes, m, failure, &errors).await {
            Ok(r) => results.push(r),
            Err(e) => errors.add(format!("{m} members: {e:#}")),
        }
    }

    println!("\n## summary against issue 7's goals (never a failure)");
    for r in &results {
        let p99 = pct(&r.open.latencies, 0.99);
        println!(
            "{:>4} members: Divided open loop at {}/s p99 {} (goal ≤ 250 ms at 100 members and 100/s: {}); sustained {:.0} member applies/s (goal ≥ 2,000: {}), {:.0}% of the direct create rate (goal ≥ 40%: {})",
            r.members,
            r.open.offered.unwrap_or(0.0),
            ms(p99),
            verdict(p99 <= Duration::from_millis(250)),
            r.burst.member_applies_per_s,
            verdict(r.burst.member_applies_per_s >= 2000.0),
            100.0 * r.burst.member_applies_per_s / r.ceiling.create_per_s.max(1e-9),
            verdict(r.burst.member_applies_per_s >= 0.4 * r.ceiling.create_per_s),
        );
        println!("               Duplicated to all {} members p50 {} p99 {}", r.members, ms(pct(&r.dup.latencies, 0.5)), ms(pct(&r.dup.latencies, 0.99)));
        if let Some((d, reason)) = &r.failure {
            println!("               member failure → Ready=False ({reason}) in {:.1}s (Karmada: 30–40 s; proposed goal ≤ 10 s)", d.as_secs_f64());
        }
    }
    errors.verdict()
}
