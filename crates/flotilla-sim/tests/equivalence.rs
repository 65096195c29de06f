//! Simulated members behave like real ones (issue 6): the same scenario runs against a
//! flotilla-sim member (in-process, served over HTTPS by a one-member fleet) and a real testenv
//! member with workloads (kube-controller-manager, kube-scheduler, testenv's fake kubelet),
//! and at each checkpoint the settled, normalised state of the test namespace must be equal;
//! then a kubectl script (apply, get, watch, delete) must print the same normalised output
//! against both.
//!
//! A checkpoint is settled on a side once the step's own condition holds, every
//! `observedGeneration` equals its object's `generation`, and the normalised state has not
//! changed for two seconds. Nothing here bounds how long that takes (120 s deadlines).
//!
//! What is normalised, and why, is data below ([`RULES`], [`ALLOWED`]) and in
//! docs/testing.md ("Simulated members against real ones").

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_sim::{Fleet, FleetConfig, MemberConfig, NodeShape};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The testenv member the scenario runs on (its nodes are copied into the simulated member).
const REAL_MEMBER: &str = "member2";
/// Per checkpoint: generous, never asserted.
const DEADLINE: Duration = Duration::from_secs(120);
/// How long the normalised state must stay the same to count as settled.
const STABLE_FOR: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// The two members

/// One member the scenario runs against.
struct Side {
    label: &'static str,
    client: Client,
    kubeconfig: PathBuf,
    ns: String,
    /// StatefulSet and DaemonSet revisions numbered in the order this side first showed them.
    revisions: BTreeMap<String, String>,
}

/// The simulated member and what keeps it alive.
struct Sim {
    fleet: Fleet,
    _dir: tempfile::TempDir,
}

/// The shared testenv's member, or a panic when FLOTILLA_TESTENV_DIR is set but unusable;
/// `None` (skip) when it is not set at all, as every testenv-attached test does.
fn real_member() -> Option<flotilla_testenv::Member> {
    let env = flotilla_testenv::TestEnv::connect()?;
    let m = env.member(REAL_MEMBER).clone();
    assert!(m.running, "testenv member {REAL_MEMBER} in {} is not running", env.dir.display());
    assert!(m.with_workloads, "testenv member {REAL_MEMBER} in {} runs without workloads (testenv up --with-workloads)", env.dir.display());
    Some(m)
}

/// The real member's nodes as a simulated member's node shape: same count, capacity, region,
/// zones (in node order) and extra labels, so both schedule alike.
async fn node_shape_of(client: &Client) -> NodeShape {
    let mut nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list the real member's nodes").items;
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    assert!(!nodes.is_empty(), "the real member has no nodes");
    let label = |n: &Node, k: &str| n.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned().unwrap_or_default();
    let alloc = |k: &str| nodes[0].status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get(k)).map(|q| q.0.clone()).unwrap_or_default();
    let computed = ["kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "topology.kubernetes.io/region", "topology.kubernetes.io/zone"];
    let labels = nodes[0].metadata.labels.clone().unwrap_or_default().into_iter().filter(|(k, _)| !computed.contains(&k.as_str())).collect();
    let allocatable = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    assert!(nodes.iter().all(|n| allocatable(n) == allocatable(&nodes[0])), "the real member's nodes differ in capacity; a simulated member's are all alike");
    let mut zones: Vec<String> = Vec::new();
    for n in &nodes {
        let z = label(n, "topology.kubernetes.io/zone");
        if !zones.contains(&z) {
            zones.push(z);
        }
    }
    NodeShape {
        count: nodes.len(),
        cpu: alloc("cpu"),
        memory: alloc("memory"),
        pods: alloc("pods").parse().expect("a pod count"),
        region: label(&nodes[0], "topology.kubernetes.io/region"),
        zones,
        labels,
        taints: Vec::new(),
    }
}

/// The scenario's pods (they request nothing, apart from the one that must not fit) need a
/// few pod slots on every node of the shared member, which other tests use too.
async fn has_room(client: &Client, shape: &NodeShape) {
    const NEEDED: usize = 20;
    let running = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    let pods = Api::<Pod>::all(client.clone()).list(&running).await.expect("list the real member's pods").items;
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list the real member's nodes").items;
    for node in nodes.into_iter().filter_map(|n| n.metadata.name) {
        let used = pods.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())).count();
        assert!(used + NEEDED <= shape.pods as usize, "node {node} of the real member runs {used} of {} pods: no room for the scenario", shape.pods);
    }
}

/// A simulated member named like the real one (so node names agree) with its node shape and
/// testenv's fake-kubelet timings.
async fn start_sim(shape: NodeShape) -> Sim {
    let mut config = MemberConfig::new(REAL_MEMBER);
    config.nodes = shape;
    config.timings.pod_ready_delay = Duration::from_millis(100);
    config.timings.job_pod_duration = Duration::from_secs(2);
    config.timings.retry = Duration::from_millis(200);
    let dir = tempfile::tempdir().expect("a temp dir");
    let fleet = Fleet::start(FleetConfig::new(vec![config], dir.path().to_path_buf()), |_, _| {}).await.expect("the simulated member starts");
    Sim { fleet, _dir: dir }
}

/// Every label of the real member's nodes is on the simulated one's, with the same value.
async fn same_node_labels(real: &Client, sim: &Client) {
    let labels = |client: &Client| {
        let client = client.clone();
        async move {
            let mut nodes = Api::<Node>::all(client).list(&ListParams::default()).await.expect("list nodes").items;
            nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            nodes.into_iter().map(|n| (n.metadata.name.unwrap_or_default(), n.metadata.labels.unwrap_or_default())).collect::<Vec<_>>()
        }
    };
    let real = labels(real).await;
    // The simulated member registers its nodes once it runs.
    let sim = support::eventually("the simulated member's nodes", || async {
        let sim = labels(sim).await;
        (sim.len() == real.len()).then_some(sim)
    })
    .await;
    for ((rn, rl), (sn, sl)) in real.iter().zip(&sim) {
        assert_eq!(rn, sn, "node names");
        for (k, v) in rl {
            assert_eq!(sl.get(k), Some(v), "label {k} of node {rn}");
        }
    }
}

async fn client_from(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("a readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("a usable kubeconfig");
    Client::try_from(config).expect("a client")
}

/// Both members, with the test namespace `ns` on each; the real one's namespace is deleted
/// when the returned guard drops (also when the test fails).
async fn both(ns: &str) -> Option<(Side, Side, Sim, NamespaceGuard)> {
    let real = real_member()?;
    let real_client = real.client().await;
    let shape = node_shape_of(&real_client).await;
    has_room(&real_client, &shape).await;
    let sim = start_sim(shape).await;
    let sim_kubeconfig = sim.fleet.entry(REAL_MEMBER).expect("the simulated member").kubeconfig.clone();
    let sim_client = client_from(&sim_kubeconfig).await;
    same_node_labels(&real_client, &sim_client).await;
    let guard = NamespaceGuard { kubeconfig: real.kubeconfig.clone(), ns: ns.to_string() };
    let side = |label, client, kubeconfig| Side { label, client, kubeconfig, ns: ns.to_string(), revisions: BTreeMap::new() };
    let real = side("real", real_client, real.kubeconfig.clone());
    let sim_side = side("sim", sim_client, sim_kubeconfig);
    Some((real, sim_side, sim, guard))
}

/// Deletes the test namespace on the real member (the simulated one goes with its process).
struct NamespaceGuard {
    kubeconfig: PathBuf,
    ns: String,
}

impl Drop for NamespaceGuard {
    fn drop(&mut self) {
        let _ = Command::new(kubectl_bin()).arg("--kubeconfig").arg(&self.kubeconfig).args(["delete", "namespace", &self.ns, "--wait=false"]).output();
    }
}

fn unique(prefix: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id() % 100_000, COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

// ---------------------------------------------------------------------------------------------
// Acting on a member

fn resource(kind: &str) -> ApiResource {
    match kind {
        "Namespace" => ApiResource::erase::<Namespace>(&()),
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "ReplicaSet" => ApiResource::erase::<ReplicaSet>(&()),
        "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
        "DaemonSet" => ApiResource::erase::<DaemonSet>(&()),
        "Job" => ApiResource::erase::<Job>(&()),
        "Pod" => ApiResource::erase::<Pod>(&()),
        "Service" => ApiResource::erase::<Service>(&()),
        "EndpointSlice" => ApiResource::erase::<EndpointSlice>(&()),
        other => panic!("no resource for kind {other}"),
    }
}

impl Side {
    fn api(&self, kind: &str) -> Api<DynamicObject> {
        let ar = resource(kind);
        if kind == "Namespace" { Api::all_with(self.client.clone(), &ar) } else { Api::namespaced_with(self.client.clone(), &self.ns, &ar) }
    }

    /// Number a revision of workload `owner` in the order this side first shows it.
    fn revision(&mut self, owner: &str, revision: &str) {
        if revision.is_empty() || self.revisions.contains_key(revision) {
            return;
        }
        let n = self.revisions.values().filter(|v| v.starts_with(&format!("{owner}-["))).count() + 1;
        self.revisions.insert(revision.to_string(), format!("{owner}-[revision {n}]"));
    }

    async fn create(&self, object: Value) {
        let kind = object["kind"].as_str().expect("a kind").to_string();
        let obj: DynamicObject = serde_json::from_value(object).expect("a valid object");
        self.api(&kind).create(&PostParams::default(), &obj).await.unwrap_or_else(|e| panic!("{}: create {kind}: {e}", self.label));
    }

    async fn merge_patch(&self, kind: &str, name: &str, patch: Value) {
        self.api(kind).patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap_or_else(|e| panic!("{}: patch {kind} {name}: {e}", self.label));
    }

    /// Every object of the compared kinds in the namespace, as JSON, with its kind.
    async fn objects(&self) -> Result<Vec<(String, Value)>, kube::Error> {
        let mut out = Vec::new();
        for kind in ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Pod", "Service", "EndpointSlice"] {
            for o in self.api(kind).list(&ListParams::default()).await?.items {
                out.push((kind.to_string(), serde_json::to_value(o).expect("JSON")));
            }
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Normalising

/// What is replaced before comparing, by field name, anywhere in a compared object: values
/// that differ between any two runs of the same member, so comparing them says nothing.
const RULES: &[(&str, &str, &str)] = &[
    // (field, replacement, why)
    ("uid", "[uid]", "random"),
    ("resourceVersion", "[rv]", "storage revision"),
    ("lastTransitionTime", "[time]", "clock"),
    ("lastUpdateTime", "[time]", "clock"),
    ("lastProbeTime", "[time]", "clock"),
    ("lastHeartbeatTime", "[time]", "clock"),
    ("startTime", "[time]", "clock"),
    ("completionTime", "[time]", "clock"),
    ("startedAt", "[time]", "clock"),
    ("finishedAt", "[time]", "clock"),
    ("podIP", "[pod-ip]", "allocated from the member's pod network"),
    ("clusterIP", "[cluster-ip]", "allocated from the member's service network"),
    ("clusterIPs", "[cluster-ip]", "allocated from the member's service network"),
    ("containerID", "[container-id]", "names the pod's uid"),
    // kube-scheduler breaks score ties at random and the shared member also runs other tests'
    // pods, so which node an endpoint is on is not compared (that it has one is).
    ("nodeName", "[node]", "placement"),
    ("zone", "[zone]", "placement"),
    ("topology.kubernetes.io/zone", "[zone]", "placement (the binding copies the node's zone onto the pod)"),
    ("endpoints.kubernetes.io/last-change-trigger-time", "[time]", "clock"),
];

/// Differences between the simulator and the real controllers that are accepted, each with
/// its reason (also listed in docs/testing.md): `(kind, field, why)`; the field's value is
/// replaced by `[allowed]` on both sides.
const ALLOWED: &[(&str, &str, &str)] = &[
    // The container runtime names itself in image and container IDs (`containerd://…`); the
    // fake kubelet says `testenv://`, the simulator `flotilla-sim://`.
    ("Pod", "imageID", "runtime name"),
];

/// Replace every field `key` (anywhere) with `to`, unless it is null.
fn replace_field(v: &mut Value, key: &str, to: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == key && !x.is_null() {
                    *x = match x {
                        Value::Array(items) => Value::Array(items.iter().map(|_| json!(to)).collect()),
                        _ => json!(to),
                    };
                } else {
                    replace_field(x, key, to);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| replace_field(x, key, to)),
        _ => {}
    }
}

/// Replace every occurrence of `from` in every string.
fn replace_text(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Object(m) => m.values_mut().for_each(|x| replace_text(x, from, to)),
        Value::Array(items) => items.iter_mut().for_each(|x| replace_text(x, from, to)),
        _ => {}
    }
}

/// `observedGeneration` (anywhere in an object) as whether it has caught up with the
/// object's generation: the generation a controller-written object reaches depends on how many
/// steps its controller took (a rolling update scales a ReplicaSet several times), and the
/// checkpoint waits for it to catch up anyway.
fn caught_up(v: &mut Value, generation: Option<i64>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "observedGeneration" && x.is_i64() {
                    if x.as_i64() == generation {
                        *x = json!("[generation]");
                    }
                } else {
                    caught_up(x, generation);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| caught_up(x, generation)),
        _ => {}
    }
}

/// `(name, generateName[random])` when the name is the API server's: generateName plus five
/// characters of its alphabet (a StatefulSet's pods have a generateName but are named by
/// ordinal).
fn generated_name(o: &Value) -> Option<(String, String)> {
    let name = text(o, "/metadata/name");
    let generate = text(o, "/metadata/generateName");
    let suffix = name.strip_prefix(generate).filter(|_| !generate.is_empty())?;
    let random = suffix.len() == 5 && suffix.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c));
    random.then(|| (name.to_string(), format!("{generate}[random]")))
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The namespace's objects, normalised and sorted: kind, name, status (and for a few kinds
/// the spec or metadata fields their controllers own).
fn normalise(side: &mut Side, objects: Vec<(String, Value)>) -> Vec<Value> {
    // Names: generated suffixes become `[random]`; a Deployment's ReplicaSets are named by
    // revision instead of template hash; StatefulSet revisions are numbered in the order seen.
    let mut renames: Vec<(String, String)> = objects.iter().filter_map(|(_, o)| generated_name(o)).collect();
    for (kind, o) in &objects {
        if kind == "ReplicaSet" {
            let owner = text(o, "/metadata/ownerReferences/0/name");
            let revision = text(o, "/metadata/annotations/deployment.kubernetes.io~1revision");
            renames.push((text(o, "/metadata/name").to_string(), format!("{owner}-[revision {revision}]")));
            renames.push((text(o, "/metadata/labels/pod-template-hash").to_string(), format!("[hash of revision {revision}]")));
        }
        if kind == "StatefulSet" {
            let name = text(o, "/metadata/name");
            for r in [text(o, "/status/currentRevision"), text(o, "/status/updateRevision")] {
                side.revision(name, r);
            }
        }
        // A DaemonSet's revisions show only in its pods' labels (a bare hash).
        if kind == "Pod" && text(o, "/metadata/ownerReferences/0/kind") == "DaemonSet" {
            side.revision(text(o, "/metadata/ownerReferences/0/name"), text(o, "/metadata/labels/controller-revision-hash"));
        }
    }
    renames.extend(side.revisions.iter().map(|(a, b)| (a.clone(), b.clone())));
    // uids also show in label values (a Job's controller-uid).
    renames.extend(objects.iter().map(|(_, o)| (text(o, "/metadata/uid").to_string(), "[uid]".to_string())));
    renames.retain(|(from, _)| !from.is_empty());
    // Longest first, so a pod's name is replaced before its ReplicaSet's name inside it.
    renames.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));

    let mut out: Vec<Value> = objects
        .into_iter()
        .map(|(kind, o)| {
            let generation = o.pointer("/metadata/generation").and_then(Value::as_i64);
            let m = &o["metadata"];
            let mut v = json!({
                "kind": kind, "name": m["name"],
                "labels": m["labels"], "annotations": m["annotations"], "ownerReferences": m["ownerReferences"],
                "status": o["status"],
            });
            match kind.as_str() {
                // Generations users caused (spec changes), unlike a ReplicaSet's.
                "Deployment" | "StatefulSet" | "DaemonSet" | "Job" => v["generation"] = json!(generation),
                _ => {}
            }
            if kind == "Deployment" || kind == "ReplicaSet" {
                v["revision"] = o.pointer("/metadata/annotations/deployment.kubernetes.io~1revision").cloned().unwrap_or(Value::Null);
            }
            if kind == "ReplicaSet" {
                v["replicas"] = o["spec"]["replicas"].clone();
            }
            if kind == "Service" {
                // What kube-apiserver fills in: the cluster IP, IP families, defaults.
                v["spec"] = o["spec"].clone();
            }
            if kind == "EndpointSlice" {
                v = json!({
                    "kind": kind, "name": m["name"],
                    "labels": m["labels"], "annotations": m["annotations"], "ownerReferences": m["ownerReferences"],
                    "addressType": o["addressType"], "endpoints": o["endpoints"], "ports": o["ports"],
                });
                if let Some(eps) = v.get_mut("endpoints").and_then(Value::as_array_mut) {
                    for e in eps.iter_mut() {
                        replace_field(e, "addresses", "[pod-ip]");
                    }
                }
            }
            if kind == "Pod"
                && let Some(ips) = v.pointer_mut("/status/podIPs").and_then(Value::as_array_mut)
            {
                ips.iter_mut().for_each(|ip| ip["ip"] = json!("[pod-ip]"));
            }
            caught_up(&mut v, generation);
            for (from, to) in &renames {
                replace_text(&mut v, from, to);
            }
            for (field, to, _) in RULES {
                replace_field(&mut v, field, to);
            }
            for (k, field, _) in ALLOWED {
                if *k == kind {
                    replace_field(&mut v, field, "[allowed]");
                }
            }
            if let Some(eps) = v.get_mut("endpoints").and_then(Value::as_array_mut) {
                eps.sort_by_key(|e| e.to_string());
            }
            v
        })
        .collect();
    out.sort_by_key(|v| (v["kind"].to_string(), v["name"].to_string(), v.to_string()));
    out
}

/// Whether every `observedGeneration` has caught up (normalised ones are strings).
fn generations_observed(state: &[Value]) -> bool {
    fn numbers(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, x)| (k == "observedGeneration" && x.is_i64()) || numbers(x)),
            Value::Array(items) => items.iter().any(numbers),
            _ => false,
        }
    }
    !state.iter().any(numbers)
}

/// The normalised state once settled: `ready` holds, generations are observed and nothing
/// changed for [`STABLE_FOR`].
async fn settle(side: &mut Side, checkpoint: &str, ready: &(dyn Fn(&[Value]) -> bool + Sync)) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut last: Option<(Vec<Value>, tokio::time::Instant)> = None;
    loop {
        let now = tokio::time::Instant::now();
        match side.objects().await {
            Ok(objects) => {
                let state = normalise(side, objects);
                let done = ready(&state) && generations_observed(&state);
                match &last {
                    Some((prev, since)) if *prev == state => {
                        if done && now.duration_since(*since) >= STABLE_FOR {
                            return state;
                        }
                    }
                    _ => last = Some((state, now)),
                }
            }
            Err(e) => eprintln!("{}: listing the namespace failed (will retry): {e}", side.label),
        }
        if now > deadline {
            let state = last.map(|(s, _)| serde_json::to_string_pretty(&s).unwrap()).unwrap_or_default();
            panic!("{}: checkpoint {checkpoint:?} did not settle within {DEADLINE:?}; last state:\n{state}", side.label);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Settle both sides and compare, printing every object that differs.
async fn checkpoint(real: &mut Side, sim: &mut Side, name: &str, ready: impl Fn(&[Value]) -> bool + Sync) {
    let (a, b) = tokio::join!(settle(real, name, &ready), settle(sim, name, &ready));
    if a == b {
        eprintln!("checkpoint {name:?}: {} objects equal", a.len());
        return;
    }
    let key = |v: &Value| format!("{} {}", v["kind"], v["name"]);
    let mut report = format!("checkpoint {name:?}: the simulated member differs from the real one\n");
    let keys: std::collections::BTreeSet<String> = a.iter().chain(&b).map(key).collect();
    for k in keys {
        let of = |s: &[Value]| s.iter().filter(|v| key(v) == k).map(|v| serde_json::to_string_pretty(v).unwrap()).collect::<Vec<_>>();
        let (ra, rb) = (of(&a), of(&b));
        if ra != rb {
            report.push_str(&format!("--- {k}\nreal:\n{}\nsim:\n{}\n", ra.join("\n"), rb.join("\n")));
        }
    }
    panic!("{report}");
}

/// The first object of `kind` named `name` in a normalised state.
fn find<'a>(state: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    state.iter().find(|v| v["kind"] == kind && v["name"] == name)
}

fn status_is(state: &[Value], kind: &str, name: &str, pointer: &str, want: Value) -> bool {
    find(state, kind, name).and_then(|v| v.pointer(pointer)).is_some_and(|x| *x == want)
}

fn has_condition(state: &[Value], kind: &str, name: &str, type_: &str, status: &str) -> bool {
    find(state, kind, name).and_then(|v| v["status"]["conditions"].as_array()).is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == status))
}

/// How many objects of `kind` have a name starting with `prefix`.
fn count(state: &[Value], kind: &str, prefix: &str) -> usize {
    state.iter().filter(|v| v["kind"] == kind && v["name"].as_str().is_some_and(|n| n.starts_with(prefix))).count()
}

// ---------------------------------------------------------------------------------------------
// The scenario

fn web(image: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image, "ports": [{"name": "http", "containerPort": 80}]}]}
            }
        }
    })
}

fn web_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}
    })
}

/// Step by step on both members: (what to do to a member, the checkpoint it leads to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_state_matches_a_real_member() {
    let ns = unique("simeq");
    let Some((mut real, mut sim, _sim, _guard)) = both(&ns).await else { return };
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    for side in [&real, &sim] {
        side.create(namespace.clone()).await;
    }

    // A 3-replica Deployment and a Service with endpoints over it.
    for side in [&real, &sim] {
        side.create(web("nginx:1.25", 3)).await;
        side.create(web_service()).await;
    }
    let web_ready = |s: &[Value]| {
        status_is(s, "Deployment", "web", "/status/availableReplicas", json!(3))
            && status_is(s, "Deployment", "web", "/status/updatedReplicas", json!(3))
            && status_is(s, "Deployment", "web", "/status/replicas", json!(3))
            && count(s, "Pod", "web-") == 3
            && find(s, "EndpointSlice", "web-[random]").and_then(|e| e["endpoints"].as_array()).is_some_and(|e| e.len() == 3)
    };
    checkpoint(&mut real, &mut sim, "deployment and service", web_ready).await;

    // A rolling image update. A merge patch replaces the container list, so the new pods no
    // longer have the named port `http` the Service targets: its slice then lists no ports.
    for side in [&real, &sim] {
        side.merge_patch("Deployment", "web", json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1.26"}]}}}})).await;
    }
    checkpoint(&mut real, &mut sim, "rolling update", |s| web_ready(s) && status_is(s, "Deployment", "web", "/revision", json!("2"))).await;

    // Scale to 0 and back.
    for side in [&real, &sim] {
        side.merge_patch("Deployment", "web", json!({"spec": {"replicas": 0}})).await;
    }
    checkpoint(&mut real, &mut sim, "scaled to zero", |s| {
        find(s, "Deployment", "web").is_some_and(|d| d["status"].get("replicas").is_none_or(|r| *r == json!(0))) && count(s, "Pod", "web-") == 0
    })
    .await;
    for side in [&real, &sim] {
        side.merge_patch("Deployment", "web", json!({"spec": {"replicas": 3}})).await;
    }
    checkpoint(&mut real, &mut sim, "scaled back to three", web_ready).await;

    // A StatefulSet.
    for side in [&real, &sim] {
        side.create(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {
                "replicas": 2, "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "postgres:16"}]}}
            }
        }))
        .await;
    }
    checkpoint(&mut real, &mut sim, "statefulset", |s| web_ready(s) && status_is(s, "StatefulSet", "db", "/status/readyReplicas", json!(2))).await;

    // The StatefulSet's rolling update: highest ordinal first, one at a time.
    for side in [&real, &sim] {
        side.merge_patch("StatefulSet", "db", json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}})).await;
    }
    checkpoint(&mut real, &mut sim, "statefulset rolling update", |s| {
        status_is(s, "StatefulSet", "db", "/status/updatedReplicas", json!(2))
            && status_is(s, "StatefulSet", "db", "/status/readyReplicas", json!(2))
            && status_is(s, "StatefulSet", "db", "/status/currentRevision", json!("db-[revision 2]"))
    })
    .await;

    // A DaemonSet: a pod on every node.
    for side in [&real, &sim] {
        side.create(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
            }
        }))
        .await;
    }
    checkpoint(&mut real, &mut sim, "daemonset", |s| {
        find(s, "DaemonSet", "agent")
            .is_some_and(|d| d["status"]["numberReady"].as_i64() > Some(0) && d["status"]["numberReady"] == d["status"]["desiredNumberScheduled"])
    })
    .await;

    // A Job to completion.
    for side in [&real, &sim] {
        side.create(json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "perl:5"}]}}}
        }))
        .await;
    }
    checkpoint(&mut real, &mut sim, "job complete", |s| has_condition(s, "Job", "pi", "Complete", "True")).await;

    // A pod no node has room for.
    for side in [&real, &sim] {
        side.create(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.25", "resources": {"requests": {"cpu": "100"}}}]}
        }))
        .await;
    }
    checkpoint(&mut real, &mut sim, "unschedulable pod", |s| {
        has_condition(s, "Job", "pi", "Complete", "True") && has_condition(s, "Pod", "big", "PodScheduled", "False")
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// A kubectl script

/// The newest kubectl the repository's tests use (`crates/flotilla/tests/support`); plain
/// `kubectl` would dispatch on the server's version, which the two members report differently.
fn kubectl_bin() -> PathBuf {
    (27..=40)
        .rev()
        .map(|minor| PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.1.{minor}")))
        .find(|p| p.is_file())
        .expect("a kubectl in /usr/lib/google-cloud-sdk/bin (kubectl.1.NN)")
}

fn kubectl<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(kubeconfig: &Path, args: &[S], stdin: Option<&str>) -> String {
    let mut cmd = Command::new(kubectl_bin());
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().expect("run kubectl");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write kubectl's stdin");
    }
    let out = child.wait_with_output().expect("kubectl's output");
    assert!(out.status.success(), "kubectl {args:?} against {} failed:\n{}", kubeconfig.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `kubectl get --watch-only` running in the background; killed when dropped, and ending by
/// itself after its request timeout (longer than the script) if the test process is killed.
struct Watch {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    fn start<S: AsRef<std::ffi::OsStr>>(kubeconfig: &Path, args: &[S]) -> Watch {
        let mut child = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "--watch-only", "--output-watch-events", "--request-timeout=600s"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kubectl get --watch-only");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Watch { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Wait for a line containing all of `parts`.
    fn wait_for(&self, parts: &[&str], deadline: Duration) -> bool {
        let until = std::time::Instant::now() + deadline;
        while std::time::Instant::now() < until {
            if self.lines().iter().any(|l| parts.iter().all(|p| l.contains(p))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubectl's output with what differs between runs replaced: ages (`7s`, `2m3s`, `<invalid>`),
/// generated names and hashes, IPs, node names (placement, see [`RULES`]), resourceVersions,
/// uids and timestamps in YAML; runs of spaces (column widths follow the names) become one.
fn normalise_output(out: &str, renames: &[(String, String)]) -> Vec<String> {
    let mut text = out.to_string();
    for (from, to) in renames {
        text = text.replace(from.as_str(), to);
    }
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            for key in ["resourceVersion:", "uid:", "creationTimestamp:"] {
                if trimmed.starts_with(key) {
                    return format!("{}{key} [x]", &line[..line.len() - trimmed.len()]);
                }
            }
            line.split_whitespace().map(normalise_token).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

fn normalise_token(t: &str) -> String {
    let is_age = |s: &str| {
        !s.is_empty()
            && s.chars().next().is_some_and(|c| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_digit() || "smhdy".contains(c))
            && s.chars().last().is_some_and(|c| "smhdy".contains(c))
    };
    let is_ip = |s: &str| s.split('.').count() == 4 && s.split('.').all(|p| !p.is_empty() && p.parse::<u8>().is_ok());
    if is_age(t) || t == "<invalid>" {
        return "[age]".into();
    }
    if is_ip(t) && t != "127.0.0.1" {
        return "[ip]".into();
    }
    if t.split(',').count() > 1 && t.split(',').all(|p| is_ip(p.split(':').next().unwrap_or(""))) {
        return "[ips]".into();
    }
    if let Some(rest) = t.strip_prefix(&format!("{REAL_MEMBER}-node-"))
        && rest.parse::<u32>().is_ok()
    {
        return "[node]".into();
    }
    t.to_string()
}

/// Generated names in the namespace (pods, ReplicaSets, slices) and template hashes, to
/// normalise in output.
fn output_renames(kubeconfig: &Path, ns: &str) -> Vec<(String, String)> {
    let out = kubectl(kubeconfig, &["-n", ns, "get", "replicasets,pods,endpointslices", "-o", "json"], None);
    let list: Value = serde_json::from_str(&out).expect("kubectl's JSON");
    let mut renames = Vec::new();
    for o in list["items"].as_array().into_iter().flatten() {
        let name = text(o, "/metadata/name").to_string();
        if o["kind"] == "ReplicaSet" {
            let revision = text(o, "/metadata/annotations/deployment.kubernetes.io~1revision");
            renames.push((name.clone(), format!("{}-[revision {revision}]", text(o, "/metadata/ownerReferences/0/name"))));
            renames.push((text(o, "/metadata/labels/pod-template-hash").to_string(), format!("[hash of revision {revision}]")));
        }
        renames.extend(generated_name(o));
    }
    renames.retain(|(from, _)| !from.is_empty());
    renames.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    renames
}

/// The script's app, as one JSON `List` (kubectl applies and deletes it item by item): a
/// ConfigMap, a 2-replica Deployment and a Service.
fn script_app() -> String {
    let mut settings = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "blue"}});
    let mut items = vec![web("nginx:1.25", 2), web_service()];
    for o in items.iter_mut().chain([&mut settings]) {
        o["metadata"]["labels"] = json!({"app": "web"});
    }
    items.insert(0, settings);
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// What the script printed on one member, step by step, normalised. Blocking: run it off the
/// runtime's workers (the simulated member is served by them).
fn run_script(label: &str, kc: &Path, ns: &str) -> Vec<(String, Vec<String>)> {
    let (kc, ns) = (kc.to_path_buf(), ns.to_string());
    let n = |args: &[&str]| -> Vec<String> { ["-n", ns.as_str()].iter().chain(args).map(|a| a.to_string()).collect() };
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    let record = |steps: &mut Vec<(String, Vec<String>)>, step: &str, out: String, renames: &[(String, String)]| {
        steps.push((step.to_string(), normalise_output(&out, renames)));
    };

    record(&mut steps, "create namespace", kubectl(&kc, &["create", "namespace", &ns], None), &[]);
    // Watches first, each made live with a marker object it must report before the script goes on.
    let cm_watch = Watch::start(&kc, &n(&["configmaps", "-l", "watched=yes"]));
    let mut live = false;
    for attempt in 0..20 {
        kubectl(&kc, &n(&["create", "configmap", &format!("marker-{attempt}"), "--from-literal=k=v"]), None);
        kubectl(&kc, &n(&["label", "configmap", &format!("marker-{attempt}"), "watched=yes"]), None);
        if cm_watch.wait_for(&[&format!("marker-{attempt}")], Duration::from_secs(3)) {
            live = true;
            break;
        }
    }
    assert!(live, "{}: the configmap watch never reported a marker", label);
    let pod_watch = Watch::start(&kc, &n(&["pods", "-l", "app=web"]));

    record(&mut steps, "apply", kubectl(&kc, &n(&["apply", "-f", "-"]), Some(&script_app())), &[]);
    record(&mut steps, "wait", kubectl(&kc, &n(&["wait", "--for=condition=Available", "deployment/web", "--timeout=120s"]), None), &[]);
    // The Service's endpoints and every pod Ready before `get` (what `get` shows then is settled).
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let out = kubectl(
            &kc,
            &n(&["get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "jsonpath={.items[*].endpoints[*].conditions.ready}"]),
            None,
        );
        let pods = kubectl(&kc, &n(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}"]), None);
        if out.split_whitespace().filter(|r| *r == "true").count() == 2 && pods.split_whitespace().filter(|r| *r == "True").count() == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}: web's endpoints never became ready: {out:?} {pods:?}", label);
        std::thread::sleep(Duration::from_millis(300));
    }
    let renames = output_renames(&kc, &ns);
    record(&mut steps, "get", kubectl(&kc, &n(&["get", "deployments,replicasets,pods,services,configmaps", "-o", "wide", "-l", "app=web"]), None), &renames);
    record(&mut steps, "get endpointslices", kubectl(&kc, &n(&["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]), None), &renames);
    record(&mut steps, "get -o yaml", kubectl(&kc, &n(&["get", "configmap", "settings", "-o", "yaml"]), None), &renames);

    // A rollout and a scale-up, each waited for; `rollout status` prints progress lines as it
    // sees them (timing), so only its verdict, the last line, is compared.
    let verdict = |out: String| out.lines().last().unwrap_or_default().to_string();
    record(&mut steps, "set image", kubectl(&kc, &n(&["set", "image", "deployment/web", "c=nginx:1.26"]), None), &[]);
    record(&mut steps, "rollout status", verdict(kubectl(&kc, &n(&["rollout", "status", "deployment/web", "--timeout=120s"]), None)), &[]);
    record(&mut steps, "rollout history", kubectl(&kc, &n(&["rollout", "history", "deployment/web"]), None), &[]);
    record(&mut steps, "scale", kubectl(&kc, &n(&["scale", "deployment/web", "--replicas=3"]), None), &[]);
    record(&mut steps, "rollout status after scale", verdict(kubectl(&kc, &n(&["rollout", "status", "deployment/web", "--timeout=120s"]), None)), &[]);
    let renames = output_renames(&kc, &ns);
    record(&mut steps, "get after rollout", kubectl(&kc, &n(&["get", "deployments,replicasets", "-l", "app=web"]), None), &renames);

    // Watched: a ConfigMap applied, changed by apply, deleted.
    let watched = |mode: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\n  labels: {{watched: \"yes\"}}\ndata:\n  mode: {mode}\n");
    record(&mut steps, "apply watched", kubectl(&kc, &n(&["apply", "-f", "-"]), Some(&watched("blue"))), &[]);
    record(&mut steps, "apply watched again", kubectl(&kc, &n(&["apply", "-f", "-"]), Some(&watched("green"))), &[]);
    record(&mut steps, "delete watched", kubectl(&kc, &n(&["delete", "configmap", "watched"]), None), &[]);
    assert!(cm_watch.wait_for(&["DELETED", "watched"], DEADLINE), "{}: the watch never saw the ConfigMap deleted: {:?}", label, cm_watch.lines());
    // In order, without the markers: ADDED, MODIFIED, DELETED of one object are one sequence.
    let cm_lines: Vec<String> = cm_watch.lines().into_iter().filter(|l| !l.contains("marker-")).collect();
    drop(cm_watch);
    record(&mut steps, "watch configmaps", cm_lines.join("\n"), &[]);

    // Deleting the app: `delete` waits for the objects to be gone.
    record(&mut steps, "delete", kubectl(&kc, &n(&["delete", "-f", "-"]), Some(&script_app())), &[]);
    let deadline = std::time::Instant::now() + DEADLINE;
    while !kubectl(&kc, &n(&["get", "pods", "-l", "app=web", "-o", "name"]), None).trim().is_empty() {
        assert!(std::time::Instant::now() < deadline, "{}: web's pods were never deleted", label);
        std::thread::sleep(Duration::from_millis(300));
    }
    // The pod watch saw the start, the rollout, the scale-up and the deletion; how many MODIFIED events each pod
    // went through and how pods interleave depend on timing, so each pod is compared by the
    // last event the watch reported for it (all DELETED), and the number of pods.
    assert!(pod_watch.wait_for(&["DELETED"], DEADLINE), "{}: the pod watch saw no deletion", label);
    std::thread::sleep(Duration::from_secs(1));
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for line in pod_watch.lines() {
        let mut cols = line.split_whitespace();
        if let (Some(_event), Some(name)) = (cols.next(), cols.next())
            && name != "NAME"
        {
            last.insert(name.to_string(), line.clone());
        }
    }
    drop(pod_watch);
    let pod_renames: Vec<(String, String)> = last.keys().map(|name| (name.clone(), pod_name_shape(name))).collect();
    let mut finals: Vec<String> = last.values().flat_map(|l| normalise_output(l, &pod_renames)).collect();
    finals.sort();
    steps.push(("watch pods: last event per pod".into(), finals));
    record(&mut steps, "delete namespace", kubectl(&kc, &["delete", "namespace", &ns, "--wait=false"], None), &[]);
    steps
}

/// `web-<hash>-<random>` → `web-[hash]-[random]` (the ReplicaSet is gone by the time the pod
/// watch is read, so its revision cannot be looked up).
fn pod_name_shape(name: &str) -> String {
    let parts: Vec<&str> = name.rsplitn(3, '-').collect();
    match parts.as_slice() {
        [_, _, base] => format!("{base}-[hash]-[random]"),
        _ => name.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_script_prints_the_same_against_both() {
    let ns = unique("simeq-kubectl");
    let Some((real, sim, _sim, _guard)) = both(&ns).await else { return };
    let script = |side: &Side| {
        let (label, kc, ns) = (side.label, side.kubeconfig.clone(), side.ns.clone());
        tokio::task::spawn_blocking(move || run_script(label, &kc, &ns))
    };
    let real_out = script(&real).await.expect("the script against the real member");
    let sim_out = script(&sim).await.expect("the script against the simulated member");
    let mut report = String::new();
    for ((step, a), (_, b)) in real_out.iter().zip(&sim_out) {
        if a != b {
            report.push_str(&format!("--- {step}\nreal:\n{}\nsim:\n{}\n", a.join("\n"), b.join("\n")));
        } else {
            eprintln!("{step}: {} lines equal", a.len());
        }
    }
    assert_eq!(real_out.len(), sim_out.len());
    assert!(report.is_empty(), "kubectl printed differently against the simulated member:\n{report}");
}
