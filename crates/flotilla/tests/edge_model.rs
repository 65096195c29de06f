//! Issue 23's "Must show" 3: nothing changed at the edge is lost — a randomized test against a
//! model. Real Flotilla parts (the control plane served over HTTPS on loopback on an embedded
//! store with the whole controller set, agents registered with bootstrap tokens and run with
//! `flotilla::agent::run_until`) and simulated members (`flotilla_sim::Fleet`). Each agent reaches
//! its control plane through a TCP relay of this process that the test cuts and restores: a cut
//! member keeps its agent, only the control plane is unreachable.
//!
//! Every cycle, driven by a seeded RNG: some members cut; once they are offline, random edits at
//! the edge (scale, image, a label the template sets, a ConfigMap's data, a deletion) and on the
//! control plane's templates (the same field or another); sometimes an agent restarted and the
//! control plane restarted (on its store file) while cut; restored. Then the model's invariants:
//!
//! - every edge edit has a record on the control plane naming its path with the edge's value,
//!   decided (none disappears unrecorded);
//! - a field under `EdgeWins` ends as the edge left it, in the member and in the cluster's Work;
//! - a `ControlPlaneWins` field (or a field outside an `EdgeWins` list) is `Reverted` with an
//!   `EdgeChangeReverted` Event, and the member ends at the control plane's desired value;
//! - a `Manual` change is `Conflict`, held as the edge left it, until resolved (at random: edge or
//!   control-plane), then ends as the resolution says;
//! - deletions: re-created under `ControlPlaneWins`, gone with their Work under `EdgeWins` (all
//!   fields), held under `Manual` until resolved;
//! - afterwards every object of every member and every Work is as the model says, and no record
//!   is left open in a member.
//!
//! Smoke size in `cargo test` (2 members, 12 objects, 3 cycles with one agent restart and one
//! control-plane restart); `FLOTILLA_EDGE_MODEL_SEED`, `_CYCLES`, `_MEMBERS`, `_OBJECTS` for a
//! longer run (docs/testing.md).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use flotilla::federation_args::FederationArgs;
use flotilla_api::bootstrap_token::{self as bt, Token};
use flotilla_api::federation::flotilla::edge::{AppliedWork, EDGE_NAMESPACE, EdgeChange, RESOLVE_ANNOTATION, change_kind, outcome, phase};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::Work;
use flotilla_apiserver::ApiServerConfig;
use flotilla_apiserver::pki::Bundle;
use flotilla_apiserver::serve::{ServeConfig, Serving, serve_on};
use flotilla_runtime::CancellationToken;
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use flotilla_store::Store;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(180);
/// The agents' `--edge-offline-after`.
const OFFLINE_AFTER: Duration = Duration::from_secs(1);
const RECORD_INTERVAL: Duration = Duration::from_millis(500);
const NAMESPACES: [&str; 2] = ["model-a", "model-b"];
/// model-b's PropagationPolicy sets a policy for the templates there that set none.
const INHERITED_FIELDS: &str = "spec.replicas,data";
/// Who edits at the edge.
const EDGE_MANAGER: &str = "edge-operator";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    flotilla_testkit::expect::eventually(PATIENCE, check).await.unwrap_or_else(|last| panic!("{what}: still {last}"))
}

// ---------------------------------------------------------------------------------------------
// A relay the test cuts: between an agent and the control plane.

struct Relay {
    addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    cut: Arc<AtomicBool>,
    /// Cancelled to drop every connection open at a cut.
    severed: Arc<Mutex<CancellationToken>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: SocketAddr) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (target, cut, severed) = (Arc::new(Mutex::new(target)), Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(CancellationToken::new())));
        let (t, c, s) = (target.clone(), cut.clone(), severed.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                // The token before the flag: a cut between the two still severs this connection.
                let severed = s.lock().clone();
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: refused at once
                }
                let upstream = *t.lock();
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut up) => {}
                        _ = severed.cancelled() => {}
                    }
                });
            }
        });
        Relay { addr, target, cut, severed, task }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        std::mem::replace(&mut *self.severed.lock(), CancellationToken::new()).cancel();
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    fn retarget(&self, to: SocketAddr) {
        *self.target.lock() = to;
        // Connections to the old address are dead anyway.
        std::mem::replace(&mut *self.severed.lock(), CancellationToken::new()).cancel();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        self.severed.lock().cancel();
    }
}

// ---------------------------------------------------------------------------------------------
// The control plane, served on an embedded store in `dir`; restartable on the same file.

struct ControlPlane {
    api: flotilla_apiserver::ApiServer,
    serving: Serving,
    controllers: flotilla::controllers::Running,
    address: SocketAddr,
    ca_pem: String,
    client: kube::Client,
}

async fn open_store(path: &Path) -> Arc<dyn Store> {
    Arc::new(EmbeddedStore::open(EmbeddedConfig::new(path.to_path_buf())).await.unwrap())
}

/// The control plane on `store` (the same store across a restart: see [`ControlPlane::stop`]).
async fn serve_control_plane(dir: &Path, store: Arc<dyn Store>) -> ControlPlane {
    let bundle = Bundle::ensure(dir, &["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let listener = flotilla_apiserver::serve::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = listener.local_addr().unwrap();
    let (api, _) = flotilla::control_plane::start(store, ApiServerConfig { advertise: address, ..ApiServerConfig::default() }).await.unwrap();
    flotilla::cluster_proxy::install(&api, Default::default(), Default::default());
    let mut serve = ServeConfig::new(address, bundle.serving.cert_pem.clone(), bundle.serving.key_pem.clone());
    serve.client_ca_pem = Some(bundle.ca.cert_pem.clone());
    let serving = serve_on(listener, api.router(), serve).await.unwrap();
    let url = format!("https://{address}");
    flotilla::control_plane::seed_cluster_info(&flotilla::controllers::client(&api, "system:flotilla:cluster-info"), &url, &bundle.ca.cert_pem).await.unwrap();
    let signing = flotilla_kube_controllers::csr_signing::SigningCa {
        cert_pem: bundle.ca.cert_pem.clone(),
        key_pem: bundle.ca.key_pem(),
        max_duration: flotilla_kube_controllers::csr_signing::DEFAULT_DURATION,
    };
    let controllers = flotilla::controllers::start(&api, &FederationArgs::default(), Some(signing)).unwrap();
    let client = flotilla::controllers::client(&api, "edge-model");
    ControlPlane { api, serving, controllers, address, ca_pem: bundle.ca.cert_pem.clone(), client }
}

impl ControlPlane {
    /// Stop serving, the controllers and the API server. The store stays open: dropped here, an
    /// in-process API server's store is still held by others (the count this prints), so its file
    /// cannot be reopened in this process — a restart keeps the store and rebuilds everything on
    /// top of it (API server, caches, RBAC, serving on a new port, every controller).
    async fn stop(self, store: &Arc<dyn Store>) {
        self.controllers.shutdown(Duration::from_secs(5)).await;
        self.serving.shutdown().await.unwrap();
        drop(self.client);
        drop(self.api);
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!("  control plane stopped; its store is still held by {} other(s)", Arc::strong_count(store) - 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Agents

fn parse_as<T: clap::Args>(argv: &[&str]) -> T {
    #[derive(Parser)]
    struct Wrap<T: clap::Args> {
        #[command(flatten)]
        inner: T,
    }
    Wrap::<T>::try_parse_from(argv).unwrap().inner
}

struct Agent {
    name: String,
    relay: Relay,
    kubeconfig: PathBuf,
    member_kubeconfig: PathBuf,
    member: kube::Client,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Agent {
    /// Register `name` with a bootstrap token, point its kubeconfig at a relay, start it.
    async fn register(cp: &ControlPlane, dir: &Path, name: &str, member_kubeconfig: PathBuf) -> Agent {
        let token = Token::from_random(&rand::random());
        let secret =
            flotilla::register::token_secret(&token, Some(name), Duration::from_secs(3600), Some("edge-model".into()), jiff::Timestamp::now()).unwrap();
        Api::<Secret>::namespaced(cp.client.clone(), bt::NAMESPACE).create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
        let pin = bt::ca_cert_hash(&cp.ca_pem).unwrap();
        let kubeconfig = dir.join(format!("{name}-agent.kubeconfig"));
        let out = kubeconfig.display().to_string();
        let address = cp.address.to_string();
        let exposed = token.expose();
        let register: flotilla::register::RegisterArgs =
            parse_as(&["register", &address, "--token", &exposed, "--discovery-token-ca-cert-hash", &pin, "--cluster-name", name, "--out", &out, "--quiet"]);
        flotilla::register::register(&register).await.unwrap();
        let relay = Relay::start(cp.address).await;
        let text = std::fs::read_to_string(&kubeconfig).unwrap();
        std::fs::write(&kubeconfig, text.replace(&format!("https://{}", cp.address), &format!("https://{}", relay.addr))).unwrap();
        let member = kube::Client::try_from(flotilla::agent::load(&member_kubeconfig).await.unwrap()).unwrap();
        let mut agent = Agent { name: name.to_string(), relay, kubeconfig, member_kubeconfig, member, stop: CancellationToken::new(), task: None };
        agent.start();
        agent
    }

    fn start(&mut self) {
        let (cp, member) = (self.kubeconfig.display().to_string(), self.member_kubeconfig.display().to_string());
        let offline = format!("{}ms", OFFLINE_AFTER.as_millis());
        let record = format!("{}ms", RECORD_INTERVAL.as_millis());
        #[rustfmt::skip]
        let mut args: flotilla::agent::AgentArgs = parse_as(&[
            "agent", "--cluster-name", &self.name, "--control-plane-kubeconfig", &cp, "--kubeconfig", &member, "--cluster-provider", "flotilla-sim",
            "--edge-offline-after", &offline, "--edge-record-interval", &record, "--cluster-lease-duration", "4s",
            "--cluster-status-update-frequency", "2s", "--tunnel-max-backoff", "1s", "--tunnel-keepalive-interval", "1s", "--tunnel-keepalive-timeout", "2s",
        ]);
        args.quiet = true;
        self.stop = CancellationToken::new();
        self.task = Some(tokio::spawn(flotilla::agent::run_until(args, self.stop.clone())));
    }

    async fn halt(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            match tokio::time::timeout(Duration::from_secs(30), t).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => panic!("agent {} failed: {e:#}", self.name),
                Ok(Err(e)) => panic!("agent {} panicked: {e}", self.name),
                Err(_) => panic!("agent {} did not stop within 30s", self.name),
            }
        }
    }

    fn check_running(&self) {
        if let Some(t) = &self.task {
            assert!(!t.is_finished(), "agent {} ended on its own", self.name);
        }
    }
}

fn ready(c: &Cluster) -> bool {
    c.status.as_ref().and_then(|s| s.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")).is_some_and(|c| c.status == "True")
}

// ---------------------------------------------------------------------------------------------
// The model

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Deployment,
    ConfigMap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Replicas,
    Image,
    Label,
    Data,
}

impl Field {
    /// As a record names it.
    fn path(self) -> &'static str {
        match self {
            Field::Replicas => "spec.replicas",
            Field::Image => "spec.template.spec.containers[0].image",
            Field::Label => "metadata.labels.tier",
            Field::Data => "data.mode",
        }
    }
    /// As `edge-wins-fields` lists it.
    fn listed(self) -> &'static str {
        match self {
            Field::Replicas => "spec.replicas",
            Field::Image => "spec.template.spec.containers[*].image",
            Field::Label => "metadata.labels",
            Field::Data => "data",
        }
    }
    fn pointer(self) -> &'static str {
        match self {
            Field::Replicas => "/spec/replicas",
            Field::Image => "/spec/template/spec/containers/0/image",
            Field::Label => "/metadata/labels/tier",
            Field::Data => "/data/mode",
        }
    }
    fn of(kind: Kind) -> &'static [Field] {
        match kind {
            Kind::Deployment => &[Field::Replicas, Field::Image, Field::Label],
            Kind::ConfigMap => &[Field::Data],
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Policy {
    ControlPlaneWins,
    /// `None`: every field.
    EdgeWins(Option<Vec<Field>>),
    Manual,
}

impl Policy {
    fn covers(&self, f: Field) -> bool {
        matches!(self, Policy::EdgeWins(None)) || matches!(self, Policy::EdgeWins(Some(l)) if l.contains(&f))
    }
    /// The outcome of an edge change to `f` (`None`: a deletion) before any resolution.
    fn outcome(&self, f: Option<Field>) -> &'static str {
        match (self, f) {
            (Policy::Manual, _) => outcome::CONFLICT,
            (Policy::EdgeWins(None), _) => outcome::ADOPTED,
            (p, Some(f)) if p.covers(f) => outcome::ADOPTED,
            _ => outcome::REVERTED,
        }
    }
    fn annotations(&self) -> Value {
        match self {
            Policy::ControlPlaneWins => json!({"edge.flotilla.io/sync-policy": "ControlPlaneWins"}),
            Policy::EdgeWins(None) => json!({"edge.flotilla.io/sync-policy": "EdgeWins"}),
            Policy::EdgeWins(Some(l)) => json!({"edge.flotilla.io/sync-policy": "EdgeWins",
                "edge.flotilla.io/edge-wins-fields": l.iter().map(|f| f.listed()).collect::<Vec<_>>().join(", ")}),
            Policy::Manual => json!({"edge.flotilla.io/sync-policy": "Manual"}),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct InCluster {
    /// Values the edge won for this cluster (the EdgeOverride).
    overrides: BTreeMap<Field, Value>,
    /// Deleted at the edge, and the edge won: no Work, no object.
    gone: bool,
}

#[derive(Clone, Debug)]
struct Object {
    kind: Kind,
    namespace: &'static str,
    name: String,
    policy: Policy,
    /// The policy comes from model-b's PropagationPolicy, not the template.
    inherited: bool,
    template: BTreeMap<Field, Value>,
    clusters: BTreeMap<String, InCluster>,
}

impl Object {
    fn desired(&self, cluster: &str, f: Field) -> Value {
        self.clusters[cluster].overrides.get(&f).cloned().unwrap_or_else(|| self.template[&f].clone())
    }

    fn body(&self) -> Value {
        let mut annotations = if self.inherited { json!({}) } else { self.policy.annotations() };
        annotations["model.flotilla.io/policy"] = json!(format!("{:?}", self.policy));
        let t = |f: Field| self.template[&f].clone();
        match self.kind {
            Kind::Deployment => json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": {"tier": t(Field::Label)}, "annotations": annotations},
                "spec": {
                    "replicas": t(Field::Replicas),
                    "selector": {"matchLabels": {"app": self.name}},
                    "template": {"metadata": {"labels": {"app": self.name}},
                        "spec": {"containers": [{"name": "c", "image": t(Field::Image), "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}}
                }
            }),
            Kind::ConfigMap => json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": {"model": "yes"}, "annotations": annotations},
                "data": {"mode": t(Field::Data)}
            }),
        }
    }

    fn resource(&self) -> ApiResource {
        match self.kind {
            Kind::Deployment => ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
            Kind::ConfigMap => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        }
    }

    fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), self.namespace, &self.resource())
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Deployment => "Deployment",
            Kind::ConfigMap => "ConfigMap",
        }
    }
}

fn random_policy(rng: &mut StdRng, kind: Kind) -> Policy {
    match rng.random_range(0..4) {
        0 => Policy::ControlPlaneWins,
        1 => Policy::EdgeWins(None),
        2 => {
            let all = Field::of(kind);
            let mut some: Vec<Field> = all.iter().copied().filter(|_| rng.random_bool(0.5)).collect();
            if some.is_empty() || (some.len() == all.len() && all.len() > 1) {
                some = vec![all[rng.random_range(0..all.len())]];
            }
            Policy::EdgeWins(Some(some))
        }
        _ => Policy::Manual,
    }
}

/// A new value of `f` different from `current`, the edge's or the control plane's: the two never
/// meet (replicas 1–5 at the edge, 6–9 on the control plane; strings numbered and named apart).
fn new_value(rng: &mut StdRng, f: Field, n: usize, current: &Value, edge: bool) -> Value {
    let (replicas, side) = if edge { (1..=5, "edge") } else { (6..=9, "cloud") };
    match f {
        Field::Replicas => loop {
            let v = json!(rng.random_range(replicas.clone()));
            if &v != current {
                return v;
            }
        },
        Field::Image => json!(format!("nginx:{side}-{n}")),
        Field::Label | Field::Data => json!(format!("{side}-{n}")),
    }
}

/// A strategic merge patch setting `fields` (the container by its name).
fn set_patch(fields: &BTreeMap<Field, Value>) -> Value {
    let mut patch = json!({});
    for (f, v) in fields {
        let part = match f {
            Field::Replicas => json!({"spec": {"replicas": v}}),
            Field::Image => json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": v}]}}}}),
            Field::Label => json!({"metadata": {"labels": {"tier": v}}}),
            Field::Data => json!({"data": {"mode": v}}),
        };
        merge(&mut patch, part);
    }
    patch
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// What the edge did to one object in one cycle.
#[derive(Clone, Debug)]
enum EdgeEdit {
    Set(BTreeMap<Field, Value>),
    Delete,
}

/// One object's EdgeChange on the control plane for `cluster`.
async fn record_of(cp: &kube::Client, cluster: &str, o: &Object) -> Option<EdgeChange> {
    let list = Api::<EdgeChange>::namespaced(cp.clone(), &format!("karmada-es-{cluster}")).list(&Default::default()).await.ok()?;
    list.items
        .into_iter()
        .find(|c| c.spec.object.kind == o.kind_name() && c.spec.object.name == o.name && c.spec.object.namespace.as_deref() == Some(o.namespace))
}

/// The Work of `o` for `cluster` on the control plane, as JSON.
async fn work_of(cp: &kube::Client, cluster: &str, o: &Object) -> Result<Option<Value>, String> {
    let list = Api::<Work>::namespaced(cp.clone(), &format!("karmada-es-{cluster}")).list(&Default::default()).await.map_err(|e| e.to_string())?;
    Ok(list.items.iter().map(|w| serde_json::to_value(w).unwrap()).find(|w| {
        let m = &w["spec"]["workload"]["manifests"][0];
        m["kind"] == o.kind_name() && m["metadata"]["name"] == o.name.as_str() && m["metadata"]["namespace"] == o.namespace
    }))
}

/// The decided record of this cycle's edit of `o` in `cluster`: it names every edited path with
/// the edge's value (or the deletion), and is decided at its generation.
fn check_record(r: &EdgeChange, edit: &EdgeEdit, conflict_ok: bool) -> Result<(), String> {
    let status = r.status.clone().unwrap_or_default();
    let shown = || format!("{} {:?} {:?}", r.name_any(), r.spec.fields, status);
    match edit {
        EdgeEdit::Delete if r.spec.change != change_kind::DELETED => return Err(format!("not a deletion: {}", shown())),
        EdgeEdit::Set(fields) => {
            if r.spec.change != change_kind::MODIFIED {
                return Err(format!("not a modification: {}", shown()));
            }
            let recorded: BTreeMap<&str, Option<&Value>> = r.spec.fields.iter().map(|f| (f.path.as_str(), f.new.as_ref())).collect();
            let wanted: BTreeMap<&str, Option<&Value>> = fields.iter().map(|(f, v)| (f.path(), Some(v))).collect();
            if recorded != wanted {
                return Err(format!("recorded {recorded:?}, the edge made {wanted:?}"));
            }
        }
        EdgeEdit::Delete => {}
    }
    let at_generation = status.observed_generation.is_some() && status.observed_generation == r.metadata.generation;
    let phases: &[&str] = if conflict_ok { &[phase::DECIDED, phase::CONFLICT] } else { &[phase::DECIDED] };
    if !at_generation || !phases.contains(&status.phase.as_str()) {
        return Err(format!("not decided yet: {}", shown()));
    }
    Ok(())
}

fn outcomes(r: &EdgeChange) -> BTreeMap<String, String> {
    r.status.iter().flat_map(|s| s.fields.iter()).map(|f| (f.path.clone(), f.outcome.clone())).collect()
}

/// An Event with `reason` on the template `o` since `since` that mentions `needle`.
async fn has_event(cp: &kube::Client, o: &Object, reason: &str, needle: &str, since: jiff::Timestamp) -> Result<(), String> {
    let events = Api::<Event>::namespaced(cp.clone(), o.namespace).list(&Default::default()).await.map_err(|e| e.to_string())?;
    let when = |e: &Event| -> Option<jiff::Timestamp> { e.last_timestamp.as_ref().map(|t| t.0).or_else(|| e.event_time.as_ref().map(|t| t.0)) };
    let found = events.items.iter().any(|e| {
        e.reason.as_deref() == Some(reason)
            && e.involved_object.name.as_deref() == Some(o.name.as_str())
            && e.message.as_deref().is_some_and(|m| m.contains(needle))
            && when(e).is_none_or(|t| t >= since)
    });
    if found { Ok(()) } else { Err(format!("no {reason} Event on {}/{} naming {needle:?} since {since}", o.namespace, o.name)) }
}

/// An object held in a member for an open conflict: as the edge left it (its edit over the values
/// the object had when the member was cut — a control-plane change meanwhile waits too).
#[derive(Clone, Debug)]
struct Held {
    edit: EdgeEdit,
    before: BTreeMap<Field, Value>,
}

/// Whether the member's object of `o` is as the model wants it.
async fn member_matches(member: &kube::Client, cluster: &str, o: &Object, held: Option<&Held>) -> Result<(), String> {
    let got = o.api(member).get_opt(&o.name).await.map_err(|e| e.to_string())?;
    let want_gone = o.clusters[cluster].gone || matches!(held, Some(Held { edit: EdgeEdit::Delete, .. }));
    let Some(got) = got else {
        return if want_gone { Ok(()) } else { Err(format!("{cluster}: {}/{} missing", o.namespace, o.name)) };
    };
    if want_gone {
        return Err(format!("{cluster}: {}/{} still there", o.namespace, o.name));
    }
    let got = serde_json::to_value(&got).unwrap();
    for &f in Field::of(o.kind) {
        let want = match held {
            Some(Held { edit: EdgeEdit::Set(m), .. }) if m.contains_key(&f) => m[&f].clone(),
            Some(h) => h.before[&f].clone(),
            None => o.desired(cluster, f),
        };
        let have = got.pointer(f.pointer()).cloned().unwrap_or(Value::Null);
        if have != want {
            return Err(format!("{cluster}: {}/{} {} is {have}, want {want}", o.namespace, o.name, f.path()));
        }
    }
    Ok(())
}

async fn work_matches(cp: &kube::Client, cluster: &str, o: &Object) -> Result<(), String> {
    let work = work_of(cp, cluster, o).await?;
    match (work, o.clusters[cluster].gone) {
        (None, true) => Ok(()),
        (Some(_), true) => Err(format!("{cluster}: the Work of {}/{} is still there", o.namespace, o.name)),
        (None, false) => Err(format!("{cluster}: no Work of {}/{}", o.namespace, o.name)),
        (Some(w), false) => {
            let m = &w["spec"]["workload"]["manifests"][0];
            for &f in Field::of(o.kind) {
                let (have, want) = (m.pointer(f.pointer()).cloned().unwrap_or(Value::Null), o.desired(cluster, f));
                if have != want {
                    return Err(format!("{cluster}: the Work of {}/{} has {} = {have}, want {want}", o.namespace, o.name, f.path()));
                }
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------

struct Sizes {
    seed: u64,
    cycles: usize,
    members: usize,
    objects: usize,
}

/// Prints the seed if the test fails.
struct SeedOnFailure(u64);

impl Drop for SeedOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("edge model FAILED with FLOTILLA_EDGE_MODEL_SEED={}", self.0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_changed_at_the_edge_is_lost() {
    let sizes = Sizes {
        seed: env_or("FLOTILLA_EDGE_MODEL_SEED", rand::random::<u32>() as u64),
        cycles: env_or("FLOTILLA_EDGE_MODEL_CYCLES", 3),
        members: env_or("FLOTILLA_EDGE_MODEL_MEMBERS", 2).max(1),
        objects: env_or("FLOTILLA_EDGE_MODEL_OBJECTS", 12).max(1),
    };
    let _guard = SeedOnFailure(sizes.seed);
    println!(
        "edge model: FLOTILLA_EDGE_MODEL_SEED={} FLOTILLA_EDGE_MODEL_CYCLES={} members {} objects {}",
        sizes.seed, sizes.cycles, sizes.members, sizes.objects
    );
    let mut rng = StdRng::seed_from_u64(sizes.seed);
    let dir = tempfile::Builder::new().prefix("edge-model-").tempdir().unwrap();
    let store = open_store(&dir.path().join("store.redb")).await;
    let mut cp = serve_control_plane(dir.path(), store.clone()).await;

    // Members and their agents.
    let names: Vec<String> = (0..sizes.members).map(|i| format!("edge-{}", i + 1)).collect();
    let configs: Vec<MemberConfig> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut c = MemberConfig::new(n);
            c.pod_cidr = flotilla_sim::config::pod_cidr_for(i);
            c
        })
        .collect();
    let fleet = Fleet::start(FleetConfig::new(configs, dir.path().join("fleet")), |_, _| {}).await.unwrap();
    let mut agents = Vec::new();
    for n in &names {
        let kubeconfig = fleet.entry(n).unwrap().kubeconfig.clone();
        agents.push(Agent::register(&cp, dir.path(), n, kubeconfig).await);
    }
    let clusters: Api<Cluster> = Api::all(cp.client.clone());
    eventually("every pull cluster Ready", || async {
        let ready: Vec<String> =
            clusters.list(&Default::default()).await.map_err(|e| e.to_string())?.items.iter().filter(|c| ready(c)).map(|c| c.name_any()).collect();
        if names.iter().all(|n| ready.contains(n)) { Ok(()) } else { Err(format!("Ready: {ready:?}")) }
    })
    .await;

    // The objects.
    let mut counter = 0usize;
    let mut objects: Vec<Object> = (0..sizes.objects)
        .map(|i| {
            let kind = if i % 3 == 2 { Kind::ConfigMap } else { Kind::Deployment };
            let namespace = NAMESPACES[i % NAMESPACES.len()];
            // In model-b, a third of the templates set no policy: the PropagationPolicy's.
            let inherited = namespace == "model-b" && rng.random_bool(0.33);
            let policy = if inherited {
                Policy::EdgeWins(Some(Field::of(kind).iter().copied().filter(|f| matches!(f, Field::Replicas | Field::Data)).collect()))
            } else {
                random_policy(&mut rng, kind)
            };
            let template = Field::of(kind)
                .iter()
                .map(|&f| {
                    let v = match f {
                        Field::Replicas => json!(2),
                        Field::Image => json!("nginx:1.27"),
                        Field::Label | Field::Data => json!("cloud"),
                    };
                    (f, v)
                })
                .collect();
            let name = format!("{}-{i}", if kind == Kind::Deployment { "web" } else { "settings" });
            Object { kind, namespace, name, policy, inherited, template, clusters: names.iter().map(|n| (n.clone(), InCluster::default())).collect() }
        })
        .collect();
    for o in &objects {
        println!("  {}/{} {:?}: {:?}{}", o.namespace, o.name, o.kind, o.policy, if o.inherited { " (from the PropagationPolicy)" } else { "" });
    }
    let policies = ApiResource {
        group: "policy.karmada.io".into(),
        version: "v1alpha1".into(),
        api_version: "policy.karmada.io/v1alpha1".into(),
        kind: "PropagationPolicy".into(),
        plural: "propagationpolicies".into(),
    };
    for ns in NAMESPACES {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.client.clone());
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap()).await.unwrap();
        let annotations = if ns == "model-b" {
            json!({"edge.flotilla.io/sync-policy": "EdgeWins", "edge.flotilla.io/edge-wins-fields": INHERITED_FIELDS})
        } else {
            json!({})
        };
        let policy = json!({
            "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "model", "namespace": ns, "annotations": annotations},
            "spec": {
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}, {"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"model": "yes"}}}],
                "placement": {"clusterAffinity": {"clusterNames": names}}
            }
        });
        Api::<DynamicObject>::namespaced_with(cp.client.clone(), ns, &policies)
            .create(&PostParams::default(), &serde_json::from_value(policy).unwrap())
            .await
            .unwrap();
    }
    for o in &objects {
        o.api(&cp.client).create(&PostParams::default(), &serde_json::from_value(o.body()).unwrap()).await.unwrap();
    }

    let mut stats = BTreeMap::<&str, usize>::new();
    for cycle in 0..sizes.cycles {
        let since = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
        converged(&cp.client, &agents, &objects, &BTreeMap::new()).await;
        let cut: Vec<usize> = loop {
            let c: Vec<usize> = (0..agents.len()).filter(|_| rng.random_bool(0.7)).collect();
            if !c.is_empty() {
                break c;
            }
        };
        let restart_agent = (cycle == 0 || rng.random_bool(0.3)).then(|| cut[rng.random_range(0..cut.len())]);
        let restart_cp = cycle == 1 || rng.random_bool(0.2);
        println!(
            "cycle {cycle}: cut {:?}{}{}",
            cut.iter().map(|&i| &names[i]).collect::<Vec<_>>(),
            restart_agent.map(|i| format!(", agent {} restarted", names[i])).unwrap_or_default(),
            if restart_cp { ", control plane restarted" } else { "" }
        );
        for &i in &cut {
            acknowledged(&cp.client, &agents[i], &objects).await;
        }
        for &i in &cut {
            agents[i].relay.cut();
        }
        tokio::time::sleep(OFFLINE_AFTER * 3).await;

        // The edge's edits.
        let before: BTreeMap<(usize, usize), BTreeMap<Field, Value>> = objects
            .iter()
            .enumerate()
            .flat_map(|(oi, o)| cut.iter().map(move |&ai| (oi, ai)).map(move |(oi, ai)| ((oi, ai), o)))
            .map(|((oi, ai), o)| ((oi, ai), Field::of(o.kind).iter().map(|&f| (f, o.desired(&names[ai], f))).collect()))
            .collect();
        let mut edits: BTreeMap<(usize, usize), EdgeEdit> = BTreeMap::new();
        for (oi, o) in objects.iter().enumerate() {
            for &ai in &cut {
                let cluster = &names[ai];
                if o.clusters[cluster].gone || !rng.random_bool(0.4) {
                    continue;
                }
                let api = o.api(&agents[ai].member);
                let edit = if rng.random_bool(0.15) {
                    api.delete(&o.name, &DeleteParams::default()).await.unwrap();
                    EdgeEdit::Delete
                } else {
                    let fields = Field::of(o.kind);
                    let mut chosen: BTreeMap<Field, Value> = BTreeMap::new();
                    for _ in 0..rng.random_range(1..=2) {
                        let f = fields[rng.random_range(0..fields.len())];
                        counter += 1;
                        chosen.insert(f, new_value(&mut rng, f, counter, &o.desired(cluster, f), true));
                    }
                    let patch = set_patch(&chosen);
                    api.patch(&o.name, &PatchParams { field_manager: Some(EDGE_MANAGER.into()), ..Default::default() }, &Patch::Strategic(&patch))
                        .await
                        .unwrap();
                    EdgeEdit::Set(chosen)
                };
                edits.insert((oi, ai), edit);
            }
        }
        // The control plane's edits meanwhile.
        for o in objects.iter_mut() {
            if !rng.random_bool(0.3) {
                continue;
            }
            let fields = Field::of(o.kind);
            let f = fields[rng.random_range(0..fields.len())];
            counter += 1;
            let v = new_value(&mut rng, f, counter, &o.template[&f], false);
            let patch = set_patch(&BTreeMap::from([(f, v.clone())]));
            o.api(&cp.client).patch(&o.name, &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
            o.template.insert(f, v);
            *stats.entry("control-plane edits").or_default() += 1;
        }
        tokio::time::sleep(RECORD_INTERVAL * 3).await;
        if let Some(i) = restart_agent {
            agents[i].halt().await;
            agents[i].start();
            tokio::time::sleep(OFFLINE_AFTER * 3).await;
        }
        if restart_cp {
            cp.stop(&store).await;
            cp = serve_control_plane(dir.path(), store.clone()).await;
            for a in &agents {
                a.relay.retarget(cp.address);
            }
        }
        for &i in &cut {
            agents[i].relay.restore();
        }

        // Every edit recorded and decided, as the policy says.
        let mut conflicts = Vec::new();
        for ((oi, ai), edit) in &edits {
            let (o, cluster) = (&objects[*oi], &names[*ai]);
            let r = eventually(&format!("cycle {cycle}: the record of {}/{} in {cluster} decided", o.namespace, o.name), || async {
                let r = record_of(&cp.client, cluster, o).await.ok_or_else(|| "no record".to_string())?;
                check_record(&r, edit, true)?;
                Ok(r)
            })
            .await;
            let paths: Vec<(String, Option<Field>)> = match edit {
                EdgeEdit::Delete => vec![(String::new(), None)],
                EdgeEdit::Set(m) => m.keys().map(|f| (f.path().to_string(), Some(*f))).collect(),
            };
            let got = outcomes(&r);
            let want: BTreeMap<String, String> = paths.iter().map(|(p, f)| (p.clone(), o.policy.outcome(*f).to_string())).collect();
            assert_eq!(got, want, "cycle {cycle}: outcomes of {}/{} in {cluster} under {:?} ({edit:?})", o.namespace, o.name, o.policy);
            for (p, f) in &paths {
                let needle = if f.is_none() { "delet" } else { p.as_str() };
                let reason = match o.policy.outcome(*f) {
                    outcome::REVERTED => flotilla_controllers::edge_sync::REASON_REVERTED,
                    outcome::ADOPTED => flotilla_controllers::edge_sync::REASON_ADOPTED,
                    _ => flotilla_controllers::edge_sync::REASON_CONFLICT,
                };
                let needle = if reason == flotilla_controllers::edge_sync::REASON_CONFLICT { o.name.as_str() } else { needle };
                eventually(&format!("cycle {cycle}: the Event of {}/{} in {cluster}", o.namespace, o.name), || has_event(&cp.client, o, reason, needle, since))
                    .await;
                *stats
                    .entry(match o.policy.outcome(*f) {
                        outcome::REVERTED => "reverted",
                        outcome::ADOPTED => "adopted",
                        _ => "conflicts",
                    })
                    .or_default() += 1;
            }
            *stats.entry(if matches!(edit, EdgeEdit::Delete) { "edge deletions" } else { "edge modifications" }).or_default() += 1;
            if r.status.as_ref().is_some_and(|s| s.phase == phase::CONFLICT) {
                conflicts.push(((*oi, *ai), r.name_any()));
            }
            // The model's consequences of this decision.
            let o = &mut objects[*oi];
            match edit {
                EdgeEdit::Delete if o.policy == Policy::EdgeWins(None) => o.clusters.get_mut(cluster).unwrap().gone = true,
                EdgeEdit::Set(m) => {
                    for (f, v) in m {
                        if o.policy.covers(*f) {
                            o.clusters.get_mut(cluster).unwrap().overrides.insert(*f, v.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        // The Manual ones held as the edge left them, everything else as decided.
        let held: BTreeMap<(usize, usize), Held> = conflicts.iter().map(|(k, _)| (*k, Held { edit: edits[k].clone(), before: before[k].clone() })).collect();
        converged(&cp.client, &agents, &objects, &held).await;

        // Resolved at random.
        for ((oi, ai), record) in &conflicts {
            let keep_edge = rng.random_bool(0.5);
            let cluster = &names[*ai];
            let patch = json!({"metadata": {"annotations": {RESOLVE_ANNOTATION: if keep_edge { "edge" } else { "control-plane" }}}});
            Api::<EdgeChange>::namespaced(cp.client.clone(), &format!("karmada-es-{cluster}"))
                .patch(record, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
            let o = &mut objects[*oi];
            let want = if keep_edge { outcome::ADOPTED } else { outcome::REVERTED };
            let r = eventually(&format!("cycle {cycle}: {}/{} in {cluster} resolved", o.namespace, o.name), || async {
                let r = record_of(&cp.client, cluster, o).await.ok_or_else(|| "no record".to_string())?;
                check_record(&r, &edits[&(*oi, *ai)], false)?;
                if outcomes(&r).values().all(|v| v == want) { Ok(r) } else { Err(format!("{:?}", r.status)) }
            })
            .await;
            assert!(r.status.as_ref().and_then(|s| s.resolution.as_deref()).is_some());
            *stats.entry(if keep_edge { "resolved for the edge" } else { "resolved for the control plane" }).or_default() += 1;
            if keep_edge {
                match &edits[&(*oi, *ai)] {
                    EdgeEdit::Delete => o.clusters.get_mut(cluster).unwrap().gone = true,
                    EdgeEdit::Set(m) => o.clusters.get_mut(cluster).unwrap().overrides.extend(m.clone()),
                }
            }
        }
        converged(&cp.client, &agents, &objects, &BTreeMap::new()).await;
        for a in &agents {
            a.check_running();
        }
        *stats.entry("cycles").or_default() += 1;
        println!("cycle {cycle}: {} edge edits decided, {} conflicts resolved; totals {stats:?}", edits.len(), conflicts.len());
    }
    println!("edge model PASSED: FLOTILLA_EDGE_MODEL_SEED={} cycles {} — {stats:?}", sizes.seed, sizes.cycles);

    for a in &mut agents {
        a.halt().await;
    }
    cp.stop(&store).await;
    fleet.shutdown().await.unwrap();
}

/// Every member's AppliedWork of our objects carries its Work's current generation and was
/// acknowledged: a cut from here on records against what the control plane wants now.
async fn acknowledged(cp: &kube::Client, agent: &Agent, objects: &[Object]) {
    eventually(&format!("{}'s AppliedWorks acknowledged", agent.name), || async {
        let mut want = BTreeMap::new();
        for o in objects {
            if o.clusters[&agent.name].gone {
                continue;
            }
            let w = work_of(cp, &agent.name, o).await?.ok_or_else(|| format!("no Work of {}", o.name))?;
            want.insert(w["metadata"]["name"].as_str().unwrap_or_default().to_string(), w["metadata"]["generation"].as_i64().unwrap_or_default());
        }
        let applied = Api::<AppliedWork>::namespaced(agent.member.clone(), EDGE_NAMESPACE).list(&Default::default()).await.map_err(|e| e.to_string())?;
        let have: BTreeMap<String, (i64, bool)> = applied
            .items
            .iter()
            .map(|a| (a.spec.work_name.clone(), (a.spec.work_generation, a.status.as_ref().is_some_and(|s| s.acknowledged_at.is_some()))))
            .collect();
        let behind: Vec<&String> = want.iter().filter(|(n, g)| have.get(*n) != Some(&(**g, true))).map(|(n, _)| n).collect();
        if behind.is_empty() { Ok(()) } else { Err(format!("behind: {behind:?}")) }
    })
    .await;
}

/// Every object in every member and every Work as the model says (`held`: the edge's values the
/// agent holds for open conflicts); once nothing is held, no record is left in a member.
async fn converged(cp: &kube::Client, agents: &[Agent], objects: &[Object], held: &BTreeMap<(usize, usize), Held>) {
    eventually("the members and Works as the model says", || async {
        let mut wrong = Vec::new();
        for (ai, a) in agents.iter().enumerate() {
            for (oi, o) in objects.iter().enumerate() {
                if let Err(e) = member_matches(&a.member, &a.name, o, held.get(&(oi, ai))).await {
                    wrong.push(e);
                }
                if let Err(e) = work_matches(cp, &a.name, o).await {
                    wrong.push(e);
                }
            }
            if held.is_empty() {
                let open = Api::<EdgeChange>::namespaced(a.member.clone(), EDGE_NAMESPACE).list(&Default::default()).await.map_err(|e| e.to_string())?;
                let ours: BTreeSet<String> = open
                    .items
                    .iter()
                    .filter(|c| c.spec.object.namespace.as_deref().is_some_and(|ns| NAMESPACES.contains(&ns)))
                    .map(|c| format!("{}: {} {}", a.name, c.spec.object.name, c.spec.change))
                    .collect();
                wrong.extend(ours.into_iter().map(|c| format!("a record still in the member: {c}")));
            }
        }
        if wrong.is_empty() { Ok(()) } else { Err(wrong.join("; ")) }
    })
    .await;
}
