//! Edge sync-back benchmark (issue 23, "Must show" 4): the cost of N pull members reconnecting
//! at once, each with objects changed at the edge while the control plane was away.
//!
//! One process: the control plane served over HTTPS on loopback as `flotilla up` serves it
//! (embedded store, certificates, the CSR approver and signer, every controller) on a tokio
//! runtime of its own — threads named `flotilla-cp`, so its CPU time is read per thread from
//! `/proc/self/task/*/stat` together with its store's writer thread — and N simulated members
//! (`flotilla-sim`), each registered with a bootstrap token and `flotilla register`'s code and run
//! behind `flotilla agent`'s code as a task of the process on the benchmark's own runtime. Each
//! agent reaches the control plane through an in-process TCP relay the benchmark cuts and
//! restores, so the member and its agent keep running while the control plane is unreachable.
//!
//!   cargo build --release -p flotilla --example edge-bench
//!   $CARGO_TARGET_DIR/release/examples/edge-bench                  (100 members × 50 objects)
//!   (smoke, for CI: $CARGO_TARGET_DIR/debug/examples/edge-bench --smoke)
//!
//! Steps:
//! 1. N members registered and Ready; per member M objects (Deployments and ConfigMaps in
//!    namespace `edge`, a PropagationPolicy placing them on that member only) with sync policies
//!    on the templates in the ratio 6 ControlPlaneWins : 3 EdgeWins (`spec.replicas`, `data`) :
//!    1 Manual; wait until every object is applied and acknowledged (its AppliedWork in the
//!    member with status);
//! 2. a quiet window online: the control plane's CPU at rest (leases, statuses);
//! 3. every relay cut; once the agents count as offline, 5 edge changes per member made straight
//!    to the members' API servers, all members at once (scale and data edit under
//!    ControlPlaneWins, scale and data edit under EdgeWins, and a delete under ControlPlaneWins
//!    on even members, a scale under Manual on odd ones) — the time these writes take is the
//!    physical ceiling the reconnect is compared with; wait until every member holds its 5
//!    records;
//! 4. every relay restored at once (t0): time until every decision is applied — every record
//!    decided on the control plane, and every member in its decided state (ControlPlaneWins
//!    reverted or re-created, EdgeWins kept and its Work carrying the edge's value, Manual held)
//!    — per member p50/p99 and in all, and the control plane's CPU seconds over that window.
//!
//! The run fails (exit 1) only on errors or wrong end states, never on its figures. Results go
//! in docs/benchmarks/edge.md.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use flotilla::federation_args::{FederationArgs, parse_duration};
use flotilla_api::bootstrap_token as bt;
use flotilla_api::federation::flotilla::edge::phase;
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_apiserver::ApiServerConfig;
use flotilla_apiserver::pki::Bundle;
use flotilla_apiserver::serve::{ServeConfig, serve_on};
use flotilla_runtime::CancellationToken;
use flotilla_sim::bench::{Errors, Phase, cpu_time, loadavg, mib, pct, rss};
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use flotilla_store::Store;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Namespace of the templates on the control plane and of their copies in the members.
const NS: &str = "edge";
const MEMBER_LABEL: &str = "bench.flotilla.io/member";
/// Thread name of the control plane's runtime (workers and blocking pool).
const CP_THREADS: &str = "flotilla-cp";
/// The agents' timings besides `--edge-offline-after` (also printed): probing and recording
/// every second, the tunnel redialled within a second, the Lease renewed every 2s (backoff up to
/// its 8s duration while the control plane is away).
const AGENT_FLAGS: &[&str] = &["--edge-record-interval", "1s", "--tunnel-max-backoff", "1s", "--cluster-lease-duration", "8s"];
/// Sync policy of object `j` of each kind, by `j % 10`: 6 ControlPlaneWins, 3 EdgeWins, 1 Manual.
const POLICIES: [Policy; 10] = [
    Policy::ControlPlaneWins,
    Policy::EdgeWins,
    Policy::ControlPlaneWins,
    Policy::Manual,
    Policy::ControlPlaneWins,
    Policy::EdgeWins,
    Policy::ControlPlaneWins,
    Policy::ControlPlaneWins,
    Policy::EdgeWins,
    Policy::ControlPlaneWins,
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    ControlPlaneWins,
    EdgeWins,
    Manual,
}

#[derive(Parser)]
#[command(about = "Edge sync-back: N pull members reconnecting at once with edge changes — time until every decision is applied, control-plane CPU")]
struct Args {
    /// CI size: 3 members × 8 objects; seconds in a debug build.
    #[arg(long)]
    smoke: bool,
    /// Members behind agents [default: 100; smoke: 3].
    #[arg(long)]
    members: Option<usize>,
    /// Objects per member, half Deployments and half ConfigMaps, at least 8 [default: 50; smoke: 8].
    #[arg(long)]
    objects: Option<usize>,
    /// Length of the quiet online window the control plane's CPU at rest is measured over.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    quiet_window: Duration,
    /// The agents' `--edge-offline-after`: how long a control plane may take to answer before a
    /// member counts as offline [default: 20s, the agent's own default; smoke: 2s]. At 100
    /// members on 2 cores a reconnecting control plane answers a probe in more than 2 s, and
    /// agents with 2 s flap offline and back through the whole reconnect.
    #[arg(long, value_parser = parse_duration)]
    edge_offline_after: Option<Duration>,
    /// Give up on any wait (registration, propagation, records, decisions) after this long.
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    settle_timeout: Duration,
    #[command(flatten)]
    federation: FederationArgs,
}

impl Args {
    fn offline_after(&self) -> Duration {
        self.edge_offline_after.unwrap_or(if self.smoke { Duration::from_secs(2) } else { Duration::from_secs(20) })
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn sorted(mut v: Vec<Duration>) -> Vec<Duration> {
    v.sort_unstable();
    v
}

// ---------------------------------------------------------------------------------------------
// CPU per thread

/// CPU time (user + system) of this process's threads that `select` picks by id and name.
fn threads_cpu(mut select: impl FnMut(u32, &str) -> bool) -> Duration {
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let (Some((head, after)), Some(open)) = (stat.rsplit_once(')'), stat.find('(')) else { continue };
        if !select(tid, &head[open + 1..]) {
            continue;
        }
        let f: Vec<&str> = after.split_whitespace().collect();
        ticks += f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    }
    Duration::from_millis(ticks * 10)
}

/// The control plane's threads: its runtime's (by name) and its store's (by id, taken once it
/// is open and before any member's store is).
struct CpThreads {
    store: HashSet<u32>,
}

impl CpThreads {
    fn find() -> CpThreads {
        let mut store = HashSet::new();
        threads_cpu(|tid, name| {
            if name.starts_with("flotilla-store") {
                store.insert(tid);
            }
            false
        });
        CpThreads { store }
    }

    fn cpu(&self) -> Duration {
        threads_cpu(|tid, name| name == CP_THREADS || self.store.contains(&tid))
    }
}

// ---------------------------------------------------------------------------------------------
// The control plane, served

struct ControlPlane {
    store: Arc<dyn Store>,
    api: flotilla_apiserver::ApiServer,
    serving: flotilla_apiserver::serve::Serving,
    controllers: flotilla::controllers::Running,
    /// `HOST:PORT`, as `flotilla register` takes it.
    address: String,
    ca_pem: String,
}

/// The control plane as `flotilla up` serves it, on a loopback port of its own (as pull-bench).
async fn serve_control_plane(dir: PathBuf, federation: FederationArgs) -> anyhow::Result<ControlPlane> {
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(EmbeddedConfig::new(dir.join("store.redb"))).await?);
    let bundle = Bundle::ensure(&dir, &["127.0.0.1".to_string(), "localhost".to_string()]).context("certificates")?;
    let listener = flotilla_apiserver::serve::bind("127.0.0.1:0".parse()?)?;
    let advertise = listener.local_addr()?;
    let (api, _) = flotilla::control_plane::start(store.clone(), ApiServerConfig { advertise, ..ApiServerConfig::default() }).await?;
    flotilla::cluster_proxy::install(&api, Default::default(), Default::default());
    let mut serve_cfg = ServeConfig::new(advertise, bundle.serving.cert_pem.clone(), bundle.serving.key_pem.clone());
    serve_cfg.client_ca_pem = Some(bundle.ca.cert_pem.clone());
    let serving = serve_on(listener, api.router(), serve_cfg).await?;
    let url = format!("https://{advertise}");
    flotilla::control_plane::seed_cluster_info(&flotilla::controllers::client(&api, "system:flotilla:cluster-info"), &url, &bundle.ca.cert_pem).await?;
    let signing = flotilla_kube_controllers::csr_signing::SigningCa {
        cert_pem: bundle.ca.cert_pem.clone(),
        key_pem: bundle.ca.key_pem(),
        max_duration: flotilla_kube_controllers::csr_signing::DEFAULT_DURATION,
    };
    let controllers = flotilla::controllers::start(&api, &federation, Some(signing))?;
    Ok(ControlPlane { store, api, serving, controllers, address: advertise.to_string(), ca_pem: bundle.ca.cert_pem.clone() })
}

// ---------------------------------------------------------------------------------------------
// The relay between an agent and the control plane

/// A TCP relay the benchmark controls: cut (every connection dropped, new ones closed at once)
/// and restored. Runs on the benchmark's runtime, not the control plane's.
struct Relay {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    connections: Arc<Mutex<CancellationToken>>,
}

impl Relay {
    async fn start(target: SocketAddr) -> std::io::Result<Relay> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let relay = Relay { addr: listener.local_addr()?, cut: Arc::default(), connections: Arc::new(Mutex::new(CancellationToken::new())) };
        let (cut, connections) = (relay.cut.clone(), relay.connections.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: the agent sees the connection closed
                }
                let token = connections.lock().clone();
                tokio::spawn(async move {
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                        _ = token.cancelled() => {}
                    }
                });
            }
        });
        Ok(relay)
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        std::mem::replace(&mut *self.connections.lock(), CancellationToken::new()).cancel();
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Members and their agents

fn member_name(i: usize) -> String {
    format!("edge-{}", i + 1)
}

fn ready(c: &Cluster) -> bool {
    c.status.as_ref().and_then(|s| s.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")).is_some_and(|c| c.status == "True")
}

async fn ready_clusters(cp: &kube::Client) -> anyhow::Result<HashSet<String>> {
    let list = Api::<Cluster>::all(cp.clone()).list(&Default::default()).await?;
    Ok(list.items.iter().filter(|c| ready(c)).map(|c| c.name_any()).collect())
}

struct Reach<'a> {
    client: &'a kube::Client,
    address: &'a str,
    pin: &'a str,
    /// The agents' `--edge-offline-after`.
    offline_after: &'a str,
}

/// Register member `name` with a token made for it, point its agent kubeconfig at a relay of its
/// own, and run its agent until `stop`.
async fn register_and_run(
    cp: Reach<'_>,
    name: &str,
    member_kubeconfig: &Path,
    out: &Path,
    stop: CancellationToken,
) -> anyhow::Result<(Relay, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let at = flotilla::demo::RegisterAt { client: cp.client, address: cp.address, pin: cp.pin };
    flotilla::demo::register_pull_member(at, name, out, "edge-bench").await?;
    let relay = Relay::start(cp.address.parse()?).await?;
    let text = std::fs::read_to_string(out)?;
    std::fs::write(out, text.replace(&format!("https://{}", cp.address), &format!("https://{}", relay.addr)))?;
    let mut extra = vec!["--edge-offline-after", cp.offline_after];
    extra.extend(AGENT_FLAGS);
    let agent = flotilla::demo::agent_args(name, out, member_kubeconfig, &extra)?;
    Ok((relay, tokio::spawn(flotilla::agent::run_until(agent, stop))))
}

async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(flotilla::agent::load(path).await?)?)
}

// ---------------------------------------------------------------------------------------------
// The objects and the edge's changes

fn deployment_name(member: usize, j: usize) -> String {
    format!("e{}-d{j}", member + 1)
}

fn configmap_name(member: usize, j: usize) -> String {
    format!("e{}-c{j}", member + 1)
}

fn annotations(policy: Policy, edge_wins_fields: &str) -> Value {
    match policy {
        Policy::ControlPlaneWins => json!({"edge.flotilla.io/sync-policy": "ControlPlaneWins"}),
        Policy::EdgeWins => json!({"edge.flotilla.io/sync-policy": "EdgeWins", "edge.flotilla.io/edge-wins-fields": edge_wins_fields}),
        Policy::Manual => json!({"edge.flotilla.io/sync-policy": "Manual"}),
    }
}

fn deployment(member: usize, j: usize) -> Value {
    let name = deployment_name(member, j);
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {MEMBER_LABEL: member_name(member)}, "annotations": annotations(POLICIES[j % 10], "spec.replicas")},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

fn configmap(member: usize, j: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": configmap_name(member, j), "namespace": NS, "labels": {MEMBER_LABEL: member_name(member)}, "annotations": annotations(POLICIES[j % 10], "data")},
        "data": {"mode": "cloud"}
    })
}

fn policy(member: usize) -> Value {
    let selector = json!({"matchLabels": {MEMBER_LABEL: member_name(member)}});
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": member_name(member), "namespace": NS},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": selector},
                {"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": selector}
            ],
            "placement": {"clusterAffinity": {"clusterNames": [member_name(member)]}}
        }
    })
}

/// One change the edge makes, with what it must end as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Deployment d0 (ControlPlaneWins) scaled 1 → 3: reverted to 1.
    ScaleReverted,
    /// ConfigMap c0 (ControlPlaneWins) `data.mode` cloud → edge: reverted.
    EditReverted,
    /// Deployment d2 (ControlPlaneWins) deleted: re-created. Even members.
    DeleteRecreated,
    /// Deployment d3 (Manual) scaled 1 → 3: held at 3, in conflict. Odd members.
    ScaleHeld,
    /// Deployment d1 (EdgeWins on spec.replicas) scaled 1 → 3: kept, its Work at 3.
    ScaleAdopted,
    /// ConfigMap c1 (EdgeWins on data) edited: kept, its Work with the edge's data.
    EditAdopted,
}

impl Change {
    fn of_member(member: usize) -> [Change; 5] {
        let fifth = if member.is_multiple_of(2) { Change::DeleteRecreated } else { Change::ScaleHeld };
        [Change::ScaleReverted, Change::EditReverted, fifth, Change::ScaleAdopted, Change::EditAdopted]
    }

    /// Kind and name of the object it changes.
    fn object(self, member: usize) -> (&'static str, String) {
        match self {
            Change::ScaleReverted => ("Deployment", deployment_name(member, 0)),
            Change::EditReverted => ("ConfigMap", configmap_name(member, 0)),
            Change::DeleteRecreated => ("Deployment", deployment_name(member, 2)),
            Change::ScaleHeld => ("Deployment", deployment_name(member, 3)),
            Change::ScaleAdopted => ("Deployment", deployment_name(member, 1)),
            Change::EditAdopted => ("ConfigMap", configmap_name(member, 1)),
        }
    }

    /// The record's change kind.
    fn record(self) -> &'static str {
        if self == Change::DeleteRecreated { "Deleted" } else { "Modified" }
    }

    /// The decision each field of the record must get.
    fn outcome(self) -> &'static str {
        match self {
            Change::ScaleReverted | Change::EditReverted | Change::DeleteRecreated => "Reverted",
            Change::ScaleHeld => "Conflict",
            Change::ScaleAdopted | Change::EditAdopted => "Adopted",
        }
    }

    /// Make the change in the member, as a local operator would.
    async fn make(self, member_client: &kube::Client, member: usize) -> Result<(), kube::Error> {
        let (kind, name) = self.object(member);
        let resource = if kind == "Deployment" { deployments() } else { configmaps() };
        let api: Api<DynamicObject> = Api::namespaced_with(member_client.clone(), NS, &resource);
        let params = PatchParams { field_manager: Some("edge-operator".into()), ..Default::default() };
        match self {
            Change::DeleteRecreated => api.delete(&name, &DeleteParams::default()).await.map(|_| ()),
            Change::EditReverted | Change::EditAdopted => api.patch(&name, &params, &Patch::Merge(json!({"data": {"mode": "edge"}}))).await.map(|_| ()),
            _ => api.patch(&name, &params, &Patch::Merge(json!({"spec": {"replicas": 3}}))).await.map(|_| ()),
        }
    }

    /// Whether the member's object (None: absent) is as decided.
    fn member_settled(self, object: Option<&Value>) -> bool {
        match (self, object) {
            (Change::DeleteRecreated, o) => o.is_some(),
            (_, None) => false,
            (Change::ScaleReverted, Some(o)) => o["spec"]["replicas"] == 1,
            (Change::ScaleHeld | Change::ScaleAdopted, Some(o)) => o["spec"]["replicas"] == 3,
            (Change::EditReverted, Some(o)) => o["data"]["mode"] == "cloud",
            (Change::EditAdopted, Some(o)) => o["data"]["mode"] == "edge",
        }
    }

    /// Whether the Work's manifest must carry the edge's value, and does.
    fn work_settled(self, manifest: Option<&Value>) -> bool {
        match self {
            Change::ScaleAdopted => manifest.is_some_and(|m| m["spec"]["replicas"] == 3),
            Change::EditAdopted => manifest.is_some_and(|m| m["data"]["mode"] == "edge"),
            _ => true,
        }
    }
}

fn deployments() -> ApiResource {
    ApiResource { group: "apps".into(), version: "v1".into(), api_version: "apps/v1".into(), kind: "Deployment".into(), plural: "deployments".into() }
}

fn configmaps() -> ApiResource {
    ApiResource { group: "".into(), version: "v1".into(), api_version: "v1".into(), kind: "ConfigMap".into(), plural: "configmaps".into() }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource { group: group.into(), version: version.into(), api_version: format!("{group}/{version}"), kind: kind.into(), plural: plural.into() }
}

/// The values under `prefix` in a member's store, decoded.
async fn stored(store: &Arc<dyn Store>, prefix: &str) -> Vec<Value> {
    match store.range(flotilla_store::RangeRequest::prefix(bytes::Bytes::from(prefix.to_string()))).await {
        Ok(r) => r.kvs.iter().filter_map(|kv| serde_json::from_slice(&kv.value).ok()).collect(),
        Err(_) => Vec::new(),
    }
}

async fn stored_one(store: &Arc<dyn Store>, key: &str) -> Option<Value> {
    store.get(key.as_bytes()).await.ok().flatten().and_then(|kv| serde_json::from_slice(&kv.value).ok())
}

fn member_key(kind: &str, name: &str) -> String {
    if kind == "Deployment" { format!("/registry/apps/deployments/{NS}/{name}") } else { format!("/registry/core/configmaps/{NS}/{name}") }
}

/// The member's AppliedWorks of objects in `NS` acknowledged with status.
async fn acknowledged(store: &Arc<dyn Store>) -> usize {
    stored(store, "/registry/edge.flotilla.io/appliedworks/flotilla-edge/")
        .await
        .iter()
        .filter(|a| a["spec"]["manifests"][0]["metadata"]["namespace"] == NS)
        .filter(|a| a["status"]["manifests"][0]["uid"].as_str().is_some_and(|u| !u.is_empty()))
        .count()
}

/// Whether `records` (EdgeChanges) hold one of each of `changes`, and decided if `decided`
/// (Decided, or Conflict: a Manual change is decided to be held).
fn has_records(records: &[Value], member: usize, changes: &[Change], decided: bool) -> bool {
    changes.iter().all(|c| {
        let (kind, name) = c.object(member);
        records.iter().any(|r| {
            let o = &r["spec"]["object"];
            o["namespace"] == NS
                && o["kind"] == kind
                && o["name"] == name.as_str()
                && r["spec"]["change"] == c.record()
                && (!decided || r["status"]["phase"].as_str().is_some_and(|p| phase::is_final(p) || p == phase::CONFLICT))
        })
    })
}

/// Whether every decision of member `i` is applied: its records decided on the control plane,
/// the member's objects as decided, the Works carrying what the edge won; or what is still
/// missing.
async fn settled(client: &kube::Client, fleet: &Fleet, works: &ApiResource, cp_records: &[Value], i: usize) -> Result<(), String> {
    let es = format!("karmada-es-{}", member_name(i));
    let ours: Vec<Value> = cp_records.iter().filter(|r| r["metadata"]["namespace"] == es.as_str()).cloned().collect();
    let changes = Change::of_member(i);
    if !has_records(&ours, i, &changes, true) {
        let seen: Vec<String> = ours.iter().map(|r| format!("{} {}: {}", r["spec"]["object"]["name"], r["spec"]["change"], r["status"]["phase"])).collect();
        return Err(format!("records on the control plane not all decided: {seen:?}"));
    }
    let store = fleet.member(&member_name(i)).expect("a member").store();
    for c in changes {
        let (kind, name) = c.object(i);
        let object = stored_one(&store, &member_key(kind, &name)).await;
        if !c.member_settled(object.as_ref()) {
            let got = object.map_or("absent".to_string(), |o| format!("replicas {} data {}", o["spec"]["replicas"], o["data"]));
            return Err(format!("{kind} {name} ({c:?}) in the member: {got}"));
        }
    }
    let list = Api::<DynamicObject>::namespaced_with(client.clone(), &es, works).list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let manifest = |name: &str| {
        list.iter().find_map(|w| {
            let m = &w.data["spec"]["workload"]["manifests"][0];
            (m["metadata"]["name"] == name && m["metadata"]["namespace"] == NS).then(|| m.clone())
        })
    };
    for c in changes {
        if !c.work_settled(manifest(&c.object(i).1).as_ref()) {
            return Err(format!("the Work of {} ({c:?}) does not carry the edge's value", c.object(i).1));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------

async fn run(args: &Args, cp_runtime: &tokio::runtime::Handle, errors: &Errors) -> anyhow::Result<()> {
    let n = args.members.unwrap_or(if args.smoke { 3 } else { 100 });
    let objects = args.objects.unwrap_or(if args.smoke { 8 } else { 50 });
    anyhow::ensure!(n >= 1 && objects >= 8, "--members must be at least 1 and --objects at least 8");
    let (n_deploy, n_cm) = (objects.div_ceil(2), objects / 2);
    let dir = tempfile::Builder::new().prefix("edge-bench-").tempdir()?;
    let start_rss = rss().0;

    // The control plane on its runtime, with the timings of a control plane that watches Leases
    // closely (as the end-to-end test's).
    let phase = Phase::start();
    let mut federation = args.federation.clone();
    federation.cluster_monitor_grace_period = Duration::from_secs(3);
    federation.cluster_startup_grace_period = Duration::from_secs(3);
    federation.cluster_monitor_period = Duration::from_millis(500);
    let cp = cp_runtime.spawn(serve_control_plane(dir.path().to_path_buf(), federation)).await??;
    let cp_threads = CpThreads::find();
    let client = flotilla::controllers::client(&cp.api, "bench");
    println!(
        "control plane serving on https://{} (its runtime: threads {CP_THREADS:?}, store writer threads {:?}) {}",
        cp.address,
        cp_threads.store,
        phase.end()
    );

    // The members, registered and behind agents.
    let phase = Phase::start();
    let configs: Vec<MemberConfig> = (0..n)
        .map(|i| {
            let mut c = MemberConfig::new(&member_name(i));
            c.pod_cidr = flotilla_sim::config::pod_cidr_for(i);
            c.nodes.pods = 20_000;
            c
        })
        .collect();
    let fleet = Fleet::start(FleetConfig::new(configs, dir.path().join("fleet")), |done, total| {
        if done == total || done % 50 == 0 {
            println!("    … {done}/{total} members started");
        }
    })
    .await?;
    let pin = bt::ca_cert_hash(&cp.ca_pem).map_err(anyhow::Error::msg)?;
    let stop = CancellationToken::new();
    let mut relays: Vec<Option<Relay>> = (0..n).map(|_| None).collect();
    let mut agents = Vec::new();
    {
        let registrations = (0..n).map(|i| {
            let (client, pin, stop, address) = (client.clone(), pin.clone(), stop.clone(), cp.address.clone());
            let offline_after = format!("{}ms", args.offline_after().as_millis());
            let member = fleet.entry(&member_name(i)).expect("a started member").kubeconfig.clone();
            let out = dir.path().join(format!("{}-agent.kubeconfig", member_name(i)));
            async move {
                let r = register_and_run(
                    Reach { client: &client, address: &address, pin: &pin, offline_after: &offline_after },
                    &member_name(i),
                    &member,
                    &out,
                    stop,
                )
                .await;
                (i, r)
            }
        });
        let mut registering = futures::stream::iter(registrations).buffer_unordered(16);
        while let Some((i, r)) = registering.next().await {
            let (relay, agent) = r?;
            relays[i] = Some(relay);
            agents.push(agent);
        }
    }
    let relays: Vec<Relay> = relays.into_iter().map(|r| r.expect("every member registered")).collect();
    let deadline = Instant::now() + args.settle_timeout;
    while ready_clusters(&client).await?.len() < n {
        anyhow::ensure!(Instant::now() < deadline, "the members did not all turn Ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "members: {n} started, registered, behind agents (--edge-offline-after {:?} {}) and Ready {}",
        args.offline_after(),
        AGENT_FLAGS.join(" "),
        phase.end()
    );

    // 1. The objects, applied and acknowledged.
    println!("\n## objects: {objects} per member ({n_deploy} Deployments, {n_cm} ConfigMaps), {} in all", n * objects);
    let phase = Phase::start();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await?;
    let policies: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &resource("policy.karmada.io", "v1alpha1", "PropagationPolicy", "propagationpolicies"));
    for i in 0..n {
        policies.create(&PostParams::default(), &serde_json::from_value(policy(i))?).await?;
    }
    let (deploy_api, cm_api): (Api<DynamicObject>, Api<DynamicObject>) =
        (Api::namespaced_with(client.clone(), NS, &deployments()), Api::namespaced_with(client.clone(), NS, &configmaps()));
    let bodies: Vec<(bool, Value)> =
        (0..n).flat_map(|i| (0..n_deploy).map(move |j| (true, deployment(i, j))).chain((0..n_cm).map(move |j| (false, configmap(i, j))))).collect();
    let mut creating = futures::stream::iter(bodies.into_iter().map(|(is_deploy, body)| {
        let api = if is_deploy { deploy_api.clone() } else { cm_api.clone() };
        async move {
            let obj: DynamicObject = serde_json::from_value(body)?;
            api.create(&PostParams::default(), &obj).await.with_context(|| format!("create {NS}/{}", obj.name_any()))
        }
    }))
    .buffer_unordered(16);
    while let Some(r) = creating.next().await {
        r?;
    }
    drop(creating);
    let deadline = Instant::now() + args.settle_timeout;
    let mut last_report = Instant::now();
    loop {
        let mut behind = Vec::new();
        for i in 0..n {
            let acked = acknowledged(&fleet.member(&member_name(i)).expect("a member").store()).await;
            if acked < objects {
                behind.push(format!("{}: {acked}", member_name(i)));
            }
        }
        if behind.is_empty() {
            break;
        }
        let behind_s = behind.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        anyhow::ensure!(Instant::now() < deadline, "{} of {n} members without all {objects} objects applied and acknowledged ({behind_s} …)", behind.len());
        if last_report.elapsed() >= Duration::from_secs(15) {
            println!("    … {} of {n} members with every object acknowledged ({:.0}s; behind: {behind_s})", n - behind.len(), phase.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("  every object applied and acknowledged in its member {}", phase.end());
    for m in fleet.members() {
        let _ = m.member.idle().await;
    }

    // 2. The control plane at rest, online.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rest_cp, rest_wall) = (cp_threads.cpu(), Instant::now());
    tokio::time::sleep(args.quiet_window).await;
    let rest_rate = (cp_threads.cpu() - rest_cp).as_secs_f64() / rest_wall.elapsed().as_secs_f64();
    let rss_online = rss().0;
    println!("\n## at rest, online: control plane {:.3} cores over {}; RSS {}", rest_rate, secs(args.quiet_window), mib(rss_online as f64));

    // 3. Cut; offline; the edge's changes.
    println!("\n## cut: every relay cut, 5 edge changes per member once the agents are offline");
    let phase = Phase::start();
    for r in &relays {
        r.cut();
    }
    // Offline once the probes have gone unanswered for --edge-offline-after (probes every 1s).
    tokio::time::sleep(args.offline_after() + Duration::from_secs(3)).await;
    let member_clients = futures::future::try_join_all((0..n).map(|i| {
        let kc = fleet.entry(&member_name(i)).expect("a member").kubeconfig.clone();
        async move { client_from(&kc).await }
    }))
    .await?;
    let write_start = Instant::now();
    let per_member: Vec<Result<Duration, String>> = futures::future::join_all(member_clients.iter().enumerate().map(|(i, mc)| async move {
        let t = Instant::now();
        for c in Change::of_member(i) {
            c.make(mc, i).await.map_err(|e| format!("{}: {c:?}: {e}", member_name(i)))?;
        }
        Ok(t.elapsed())
    }))
    .await;
    let ceiling_all = write_start.elapsed();
    let mut ceiling = Vec::new();
    for r in per_member {
        match r {
            Ok(d) => ceiling.push(d),
            Err(e) => errors.add(format!("edge change: {e}")),
        }
    }
    let ceiling = sorted(ceiling);
    println!(
        "  {} writes straight to the members (5 per member, all members at once): per member p50 {} p99 {}, all in {}",
        5 * n,
        secs(pct(&ceiling, 0.5)),
        secs(pct(&ceiling, 0.99)),
        secs(ceiling_all)
    );
    let deadline = Instant::now() + args.settle_timeout;
    loop {
        let mut done = 0;
        for i in 0..n {
            let records = stored(&fleet.member(&member_name(i)).expect("a member").store(), "/registry/edge.flotilla.io/edgechanges/flotilla-edge/").await;
            if has_records(&records, i, &Change::of_member(i), false) {
                done += 1;
            }
        }
        if done == n {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "only {done} of {n} members recorded their 5 edge changes");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("  every member holds its 5 records {}", phase.end());

    // 4. Reconnect at once.
    println!("\n## reconnect: every relay restored at once");
    let phase = Phase::start();
    let load_at_t0 = loadavg();
    let (cp0, proc0) = (cp_threads.cpu(), cpu_time());
    let t0 = Instant::now();
    for r in &relays {
        r.restore();
    }
    let edge_changes_api: Api<DynamicObject> = Api::all_with(client.clone(), &resource("edge.flotilla.io", "v1alpha1", "EdgeChange", "edgechanges"));
    let works = resource("work.karmada.io", "v1alpha1", "Work", "works");
    let mut done_at: Vec<Option<Instant>> = vec![None; n];
    let deadline = t0 + args.settle_timeout;
    let mut last_report = Instant::now();
    let mut cp_records = Vec::new();
    let mut waiting = vec![String::new(); n];
    while done_at.iter().any(Option::is_none) && Instant::now() < deadline {
        let now = Instant::now();
        cp_records =
            edge_changes_api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default().into_iter().map(|o| json!(o)).collect::<Vec<Value>>();
        for (i, done) in done_at.iter_mut().enumerate() {
            if done.is_some() {
                continue;
            }
            match settled(&client, &fleet, &works, &cp_records, i).await {
                Ok(()) => *done = Some(now),
                Err(why) => waiting[i] = why,
            }
        }
        if last_report.elapsed() >= Duration::from_secs(if args.smoke { 2 } else { 10 }) {
            let first = done_at.iter().position(Option::is_none).map(|i| format!("; {}: {}", member_name(i), waiting[i])).unwrap_or_default();
            println!("    … {} of {n} members settled ({:.0}s){first}", done_at.iter().filter(|d| d.is_some()).count(), t0.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let window = done_at.iter().flatten().max().map_or(t0.elapsed(), |d| d.saturating_duration_since(t0));
    let (cp_cpu, proc_cpu) = ((cp_threads.cpu() - cp0).as_secs_f64(), (cpu_time() - proc0).as_secs_f64());
    let times = sorted(done_at.iter().flatten().map(|d| d.saturating_duration_since(t0)).collect());
    for (i, d) in done_at.iter().enumerate() {
        if d.is_none() {
            errors.add(format!("{}: not every decision applied within {}: {}", member_name(i), secs(args.settle_timeout), waiting[i]));
        }
    }
    // Each decision as its change wants it (wrong ones also counted by change and outcome,
    // since only the first errors are printed).
    let mut wrong = std::collections::BTreeMap::new();
    for i in 0..n {
        let es = format!("karmada-es-{}", member_name(i));
        for c in Change::of_member(i) {
            let (kind, name) = c.object(i);
            let record = cp_records
                .iter()
                .find(|r| r["metadata"]["namespace"] == es.as_str() && r["spec"]["object"]["kind"] == kind && r["spec"]["object"]["name"] == name.as_str());
            let outcomes: Vec<&str> =
                record.and_then(|r| r["status"]["fields"].as_array()).into_iter().flatten().filter_map(|f| f["outcome"].as_str()).collect();
            if outcomes.is_empty() || outcomes.iter().any(|o| *o != c.outcome()) {
                *wrong.entry(format!("{c:?} decided {outcomes:?}, want {}", c.outcome())).or_insert(0usize) += 1;
                errors.add(format!("{}: {kind} {name} ({c:?}): decided {outcomes:?}, want {}", member_name(i), c.outcome()));
            }
        }
    }
    for (what, count) in &wrong {
        println!("  WRONG DECISIONS: {count} × {what}");
    }
    let decisions = 5 * n;
    println!(
        "  every decision applied: per member p50 {} p99 {}; all {n} in {} ({} of {n} members)",
        secs(pct(&times, 0.5)),
        secs(pct(&times, 0.99)),
        secs(window),
        times.len()
    );
    println!(
        "  control plane CPU over the window: {cp_cpu:.2} s ({:.2} cores; at rest it would have spent {:.2} s) — {:.1} ms per decision; whole process {proc_cpu:.2} s",
        cp_cpu / window.as_secs_f64().max(1e-9),
        rest_rate * window.as_secs_f64(),
        cp_cpu * 1000.0 / decisions as f64
    );
    println!(
        "  against the ceiling ({} writes straight to the members): all {:.1}×, per member p50 {:.1}× p99 {:.1}×",
        5 * n,
        window.as_secs_f64() / ceiling_all.as_secs_f64().max(1e-9),
        pct(&times, 0.5).as_secs_f64() / pct(&ceiling, 0.5).as_secs_f64().max(1e-9),
        pct(&times, 0.99).as_secs_f64() / pct(&ceiling, 0.99).as_secs_f64().max(1e-9)
    );
    println!("  load average at t0 {load_at_t0} {}", phase.end());

    // Stop everything; an agent that ended with an error is one.
    stop.cancel();
    for h in agents {
        match tokio::time::timeout(Duration::from_secs(30), h).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => errors.add(format!("an agent failed: {e:#}")),
            Ok(Err(e)) => errors.add(format!("an agent panicked: {e}")),
            Err(_) => errors.add("an agent did not stop within 30s".into()),
        }
    }
    println!(
        "\n## summary\n  {n} members × {objects} objects, 5 edge changes each: all {decisions} decisions applied {} after reconnect (per member p50 {} p99 {}), ceiling {}; control plane {cp_cpu:.2} CPU s; RSS {} at start, {} online",
        secs(window),
        secs(pct(&times, 0.5)),
        secs(pct(&times, 0.99)),
        secs(ceiling_all),
        mib(start_rss as f64),
        mib(rss_online as f64)
    );
    let ControlPlane { store, api, serving, controllers, .. } = cp;
    controllers.shutdown(Duration::from_secs(5)).await;
    fleet.shutdown().await?;
    serving.shutdown().await?;
    drop(api);
    drop(store);
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    flotilla_sim::bench::init();
    // Two runtimes: the control plane's (its threads named, so that its CPU is its own) and the
    // benchmark's (members, agents, relays and the observer).
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cp_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .thread_name(CP_THREADS)
        .thread_keep_alive(Duration::from_secs(24 * 3600)) // a blocking thread that ended would take its CPU time along
        .enable_all()
        .build()
        .expect("the control plane's runtime");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(cores).thread_name("bench").enable_all().build().expect("the benchmark's runtime");
    println!(
        "# edge sync-back benchmark ({} run, {} build, {cores} CPUs, load average {})",
        if args.smoke { "smoke" } else { "full" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        loadavg()
    );
    let errors = Errors::default();
    if let Err(e) = runtime.block_on(run(&args, cp_runtime.handle(), &errors)) {
        errors.add(format!("{e:#}"));
    }
    runtime.shutdown_timeout(Duration::from_secs(5));
    cp_runtime.shutdown_timeout(Duration::from_secs(5));
    errors.verdict()
}
