//! Issue 24's "Must show" 4: under concurrent template, policy and cluster changes every member
//! ends in the state the templates and policies say — a randomized test against a model. Real
//! Flotilla parts (the control plane with the whole controller set, in this process: a
//! `flotilla-testkit` world) and simulated Push members (`flotilla_sim::Fleet`).
//!
//! Every cycle, driven by a seeded RNG, a batch of changes is issued at once (each its own
//! future, with a random delay of up to half a second):
//! - templates (Deployments, each depending on a shared ConfigMap through `envFrom`, and
//!   ConfigMaps) created, deleted, or updated: replicas, image, a plain label, the group label the
//!   policies select by, a ConfigMap's data; the shared ConfigMaps' data;
//! - PropagationPolicies and one ClusterPropagationPolicy created, deleted, or changed: switched
//!   to other groups of templates, a new placement (Duplicated by cluster names or by a cluster
//!   label selector, Divided with static weights), a new priority (preemption stays off),
//!   `propagateDeps` on or off;
//! - clusters: a label the selectors read flipped, a NoSchedule taint or the cordon taint
//!   (`cluster.karmada.io/unschedulable`) added or removed, a member unjoined (Karmada's default:
//!   its workloads deleted) and joined again.
//!
//! Then the test waits (generously) until the control plane is quiet and the model holds, and
//! checks it again a moment later:
//! - each template is claimed by the policy Karmada's rules give it (a claim holds while its
//!   policy still selects the template; otherwise the PropagationPolicies of its namespace before
//!   the ClusterPropagationPolicy, higher priority first, then the smaller name); a template no
//!   policy selects any more keeps its binding unclaimed and what runs in the members (Karmada
//!   leaves propagated objects in place when the policy goes); a deleted template takes its
//!   binding, Works and member copies with it;
//! - every binding's `spec.clusters` is a placement the scheduler may reach from the previous one
//!   by Karmada's rules (Duplicated and non-workload bindings follow every cluster change,
//!   Divided ones move only on a placement or replica change or a target being deleted; taints
//!   stop new placement only; static weights divided by Webster), its generation observed and its
//!   Works applied;
//! - exactly one Work per (binding, target cluster) in each execution namespace, with the
//!   template's current content and the cluster's share, and none for anything else;
//! - every member holds exactly the objects its Works say — no missing, stale or duplicated copy —
//!   with the template's content and Karmada's ownership labels and annotations naming the right
//!   binding and Work namespace; a dependency wherever a workload that propagates its dependencies
//!   runs, and nowhere else.
//!
//! Which changes meet in one cycle is chosen so the model stays exact: a template gets at most
//! one change a cycle, and a policy change only when none of the templates it selects (before or
//! after) changes too; clusters change freely. Where the order the controllers see concurrent
//! changes in matters (a taint added while a binding is being rescheduled, a member coming back
//! while a Divided binding is), the model accepts each placement some order gives, and carries
//! on from the one the control plane chose.
//!
//! Smoke size in `cargo test` (3 members, 10 templates, 4 cycles, a fixed seed);
//! `FLOTILLA_PROPAGATION_MODEL_SEED` (a number, or `random`), `_CYCLES`, `_MEMBERS`, `_TEMPLATES`
//! for a longer run (docs/testing.md).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_testkit::{MemberSpec, World, WorldConfig};
use futures::future::join_all;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use support::platform::Flotilla;

/// The smoke's seed: in four cycles it unjoins and joins a member, deletes a policy and
/// templates, moves placements and taints a cluster; it fails if the binding controller leaves
/// the Works of clusters no longer targeted, or if the scheduler ignores NoSchedule taints (both
/// tried).
const SMOKE_SEED: u64 = 2;
/// How long one cycle may take to settle.
const PATIENCE: Duration = Duration::from_secs(300);
/// The templates' namespace.
const NS: &str = "model";
/// Groups of templates the policies select by [`GROUP_LABEL`].
const GROUPS: usize = 4;
/// ConfigMaps the Deployments depend on (never selected by a policy themselves).
const DEPS: usize = 3;
/// PropagationPolicies `pp-0` … (and one ClusterPropagationPolicy).
const PPS: usize = 3;
const GROUP_LABEL: &str = "model.flotilla.io/group";
const COLOR_LABEL: &str = "model.flotilla.io/color";
/// The cluster label Duplicated-by-selector policies read.
const TIER_LABEL: &str = "model.flotilla.io/tier";
const TIERS: [&str; 2] = ["blue", "green"];
const TAINT_KEY: &str = "model.flotilla.io/maintenance";
const CORDON_KEY: &str = "cluster.karmada.io/unschedulable";
const CPP_NAME: &str = "model-cluster";
const RB_ID_LABEL: &str = flotilla_api::federation::karmada::work::RESOURCE_BINDING_PERMANENT_ID_LABEL;
const WORK_NAME_ANNOTATION: &str = flotilla_api::federation::karmada::work::WORK_NAME_ANNOTATION;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// Kinds

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    ApiResource { group: group.into(), version: version.into(), api_version, kind: kind.into(), plural: plural.into() }
}

fn deployments() -> ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}
fn configmaps() -> ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}
fn pps() -> ApiResource {
    resource("policy.karmada.io", "v1alpha1", "PropagationPolicy", "propagationpolicies")
}
fn cpps() -> ApiResource {
    resource("policy.karmada.io", "v1alpha1", "ClusterPropagationPolicy", "clusterpropagationpolicies")
}
fn bindings() -> ApiResource {
    resource("work.karmada.io", "v1alpha2", "ResourceBinding", "resourcebindings")
}
fn works() -> ApiResource {
    resource("work.karmada.io", "v1alpha1", "Work", "works")
}

async fn list(api: &Api<DynamicObject>) -> Result<Vec<Value>, String> {
    let l = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
    Ok(l.items.into_iter().map(|o| serde_json::to_value(o).expect("an object serializes")).collect())
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

// ---------------------------------------------------------------------------------------------
// The model

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    Deployment,
    ConfigMap,
}

impl Kind {
    fn resource(self) -> ApiResource {
        match self {
            Kind::Deployment => deployments(),
            Kind::ConfigMap => configmaps(),
        }
    }
    fn lower(self) -> &'static str {
        match self {
            Kind::Deployment => "deployment",
            Kind::ConfigMap => "configmap",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum PolicyId {
    Pp(usize),
    Cpp,
}

impl PolicyId {
    fn name(self) -> String {
        match self {
            PolicyId::Pp(i) => format!("pp-{i}"),
            PolicyId::Cpp => CPP_NAME.to_string(),
        }
    }
    fn is_cluster(self) -> bool {
        self == PolicyId::Cpp
    }
    fn all() -> Vec<PolicyId> {
        (0..PPS).map(PolicyId::Pp).chain([PolicyId::Cpp]).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Placement {
    /// Duplicated to the clusters named.
    Names(BTreeSet<String>),
    /// Duplicated to the clusters whose [`TIER_LABEL`] is this.
    Tier(String),
    /// Divided over the clusters named, by static weight.
    Divided(BTreeMap<String, i64>),
}

impl Placement {
    fn selects(&self, cluster: &str, state: &ClusterState) -> bool {
        match self {
            Placement::Names(n) => n.contains(cluster),
            Placement::Tier(t) => state.tier == *t,
            Placement::Divided(w) => w.contains_key(cluster),
        }
    }

    fn json(&self) -> Value {
        match self {
            Placement::Names(n) => json!({"clusterAffinity": {"clusterNames": n}, "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}),
            Placement::Tier(t) => json!({
                "clusterAffinity": {"labelSelector": {"matchLabels": {TIER_LABEL: t}}},
                "replicaScheduling": {"replicaSchedulingType": "Duplicated"}
            }),
            Placement::Divided(w) => json!({
                "clusterAffinity": {"clusterNames": w.keys().collect::<Vec<_>>()},
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": w.iter().map(|(c, w)| json!({"targetCluster": {"clusterNames": [c]}, "weight": w})).collect::<Vec<_>>()}
                }
            }),
        }
    }

    fn random(rng: &mut StdRng, members: &[String]) -> Placement {
        let some = |rng: &mut StdRng| -> Vec<String> {
            let mut s: Vec<String> = members.iter().filter(|_| rng.random_bool(0.6)).cloned().collect();
            if s.is_empty() {
                s.push(members[rng.random_range(0..members.len())].clone());
            }
            s
        };
        match rng.random_range(0..3) {
            0 => Placement::Names(some(rng).into_iter().collect()),
            1 => Placement::Tier(TIERS[rng.random_range(0..TIERS.len())].to_string()),
            _ => Placement::Divided(some(rng).into_iter().map(|c| (c, rng.random_range(1..=3))).collect()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Policy {
    exists: bool,
    groups: BTreeSet<usize>,
    priority: i32,
    placement: Placement,
    deps: bool,
}

impl Policy {
    fn random(rng: &mut StdRng, members: &[String]) -> Policy {
        Policy {
            exists: true,
            groups: random_groups(rng),
            priority: rng.random_range(0..3),
            placement: Placement::random(rng, members),
            deps: rng.random_bool(0.6),
        }
    }

    fn body(&self, id: PolicyId) -> Value {
        let selector = |api_version: &str, kind: &str| {
            let mut s = json!({"apiVersion": api_version, "kind": kind,
                "labelSelector": {"matchExpressions": [{"key": GROUP_LABEL, "operator": "In", "values": self.groups.iter().map(|g| format!("g{g}")).collect::<Vec<_>>()}]}});
            if id.is_cluster() {
                s["namespace"] = json!(NS);
            }
            s
        };
        let mut metadata = json!({"name": id.name()});
        if !id.is_cluster() {
            metadata["namespace"] = json!(NS);
        }
        json!({
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": if id.is_cluster() { "ClusterPropagationPolicy" } else { "PropagationPolicy" },
            "metadata": metadata,
            "spec": {
                "resourceSelectors": [selector("apps/v1", "Deployment"), selector("v1", "ConfigMap")],
                "priority": self.priority,
                "propagateDeps": self.deps,
                "placement": self.placement.json(),
            }
        })
    }

    fn selects(&self, t: &Template) -> bool {
        self.exists && t.exists && self.groups.contains(&t.group)
    }
}

fn random_groups(rng: &mut StdRng) -> BTreeSet<usize> {
    let mut g: BTreeSet<usize> = (0..GROUPS).filter(|_| rng.random_bool(0.35)).collect();
    if g.is_empty() {
        g.insert(rng.random_range(0..GROUPS));
    }
    g
}

fn policy_api(client: &kube::Client, id: PolicyId) -> Api<DynamicObject> {
    if id.is_cluster() { Api::all_with(client.clone(), &cpps()) } else { Api::namespaced_with(client.clone(), NS, &pps()) }
}

/// A cluster as the model sees it once the control plane is quiet (every member is joined then).
#[derive(Clone, Debug, PartialEq)]
struct ClusterState {
    tier: String,
    tainted: bool,
    cordoned: bool,
}

impl ClusterState {
    /// A NoSchedule taint keeps new placement off it.
    fn blocked(&self) -> bool {
        self.tainted || self.cordoned
    }
}

/// What happens to a cluster in a cycle (one change each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClusterOp {
    FlipTier,
    Taint(bool),
    Cordon(bool),
    /// Unjoined (workloads deleted) and joined again.
    Bounce,
}

/// A ResourceBinding as the model knows it.
#[derive(Clone, Debug, PartialEq)]
struct Binding {
    /// The claiming policy; `None`: released (its policy went or stopped selecting it).
    claimer: Option<PolicyId>,
    placement: Placement,
    replicas: i32,
    deps: bool,
    /// `spec.clusters`: cluster → replicas (0 for a non-workload).
    targets: BTreeMap<String, i32>,
    /// Released: the template's contents since the release. Nothing updates a released binding,
    /// so its Works keep the template as it was until something else wakes the binding
    /// controller (in Karmada an OverridePolicy change; in Flotilla also any Cluster change),
    /// which renders them again from the template as it is then: any of these.
    since_release: Vec<Content>,
}

/// What a template's copy carries besides its replicas: image, the plain label, data.
type Content = (Option<String>, Option<String>, Option<String>);

#[derive(Clone, Debug, PartialEq)]
struct Template {
    kind: Kind,
    name: String,
    exists: bool,
    group: usize,
    replicas: i32,
    image: String,
    color: String,
    data: String,
    /// The shared ConfigMap a Deployment reads.
    dep: usize,
    binding: Option<Binding>,
}

impl Template {
    fn content(&self) -> Content {
        match self.kind {
            Kind::Deployment => (Some(self.image.clone()), Some(self.color.clone()), None),
            Kind::ConfigMap => (None, Some(self.color.clone()), Some(self.data.clone())),
        }
    }

    fn binding_name(&self) -> String {
        format!("{}-{}", self.name, self.kind.lower())
    }

    fn container(&self) -> Value {
        json!({"name": "c", "image": self.image, "envFrom": [{"configMapRef": {"name": format!("dep-{}", self.dep)}}],
            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}})
    }

    fn body(&self) -> Value {
        let labels = json!({GROUP_LABEL: format!("g{}", self.group), COLOR_LABEL: self.color});
        match self.kind {
            Kind::Deployment => json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": self.name, "namespace": NS, "labels": labels},
                "spec": {
                    "replicas": self.replicas,
                    "selector": {"matchLabels": {"app": self.name}},
                    "template": {"metadata": {"labels": {"app": self.name}}, "spec": {"containers": [self.container()]}}
                }
            }),
            Kind::ConfigMap => json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": NS, "labels": labels},
                "data": {"mode": self.data}
            }),
        }
    }
}

#[derive(Clone, Debug)]
struct Model {
    members: Vec<String>,
    clusters: BTreeMap<String, ClusterState>,
    policies: BTreeMap<PolicyId, Policy>,
    templates: Vec<Template>,
    /// The shared ConfigMaps' data.
    deps: Vec<String>,
}

impl Model {
    /// The policy a template belongs to now, `claimed` the one claiming it before (Karmada's
    /// choice with preemption off): the claim holds while its policy still selects the template;
    /// otherwise the namespace's PropagationPolicies before the ClusterPropagationPolicy, higher
    /// priority first, then the smaller name.
    fn choose(&self, t: &Template, claimed: Option<PolicyId>) -> Option<PolicyId> {
        let candidates: Vec<PolicyId> = self.policies.iter().filter(|(_, p)| p.selects(t)).map(|(id, _)| *id).collect();
        if let Some(c) = claimed.filter(|c| candidates.contains(c)) {
            return Some(c);
        }
        let pps: Vec<PolicyId> = candidates.iter().copied().filter(|c| !c.is_cluster()).collect();
        let pool = if pps.is_empty() { candidates } else { pps };
        pool.into_iter().min_by(|a, b| self.policies[b].priority.cmp(&self.policies[a].priority).then(a.name().cmp(&b.name())))
    }
}

// ---------------------------------------------------------------------------------------------
// Where a binding may be: Karmada's scheduler, from the previous placement

/// Webster (Sainte-Laguë): the next seat to the highest `weight / (2·seats + 1)`, ties to fewer
/// seats, then by name in the direction `ascending` says. Clusters left with no seat are left out.
fn webster(seats: i32, weights: &[(String, i64)], ascending: bool) -> BTreeMap<String, i32> {
    let mut got: BTreeMap<String, i32> = weights.iter().map(|(n, _)| (n.clone(), 0)).collect();
    for _ in 0..seats {
        let Some((next, _)) = weights.iter().max_by(|(na, wa), (nb, wb)| {
            let (sa, sb) = (i128::from(got[na]), i128::from(got[nb]));
            (i128::from(*wa) * (2 * sb + 1)).cmp(&(i128::from(*wb) * (2 * sa + 1))).then(sb.cmp(&sa)).then(if ascending { nb.cmp(na) } else { na.cmp(nb) })
        }) else {
            break;
        };
        *got.get_mut(next).expect("a party") += 1;
    }
    got.retain(|_, s| *s > 0);
    got
}

/// `spec.clusters` for `candidates` (the clusters that pass the filters).
fn assign(kind: Kind, placement: &Placement, replicas: i32, candidates: &BTreeSet<String>, ascending: bool) -> BTreeMap<String, i32> {
    match (kind, placement) {
        (Kind::ConfigMap, _) => candidates.iter().map(|c| (c.clone(), 0)).collect(),
        (Kind::Deployment, Placement::Divided(w)) => {
            let weights: Vec<(String, i64)> = candidates.iter().map(|c| (c.clone(), w[c])).collect();
            webster(replicas, &weights, ascending)
        }
        (Kind::Deployment, _) => candidates.iter().map(|c| (c.clone(), replicas)).collect(),
    }
}

/// Every subset of `maybe` added to `sure`.
fn subsets(sure: &BTreeSet<String>, maybe: &BTreeSet<String>) -> Vec<BTreeSet<String>> {
    let maybe: Vec<&String> = maybe.iter().collect();
    assert!(maybe.len() <= 12, "too many undecided clusters: {maybe:?}");
    (0..1usize << maybe.len())
        .map(|mask| sure.iter().cloned().chain(maybe.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| (*c).clone())).collect())
        .collect()
}

/// The cycle as one binding sees it.
struct Cycle<'a> {
    start: &'a Model,
    end: &'a Model,
    ops: &'a BTreeMap<String, ClusterOp>,
}

impl Cycle<'_> {
    /// Which clusters the scheduler surely passes (`.0`) or may pass (`.1`) for a binding whose
    /// placement is `placement` and whose targets were `before`, in a pass at some moment of the
    /// cycle (`anytime`) or after all of it. A NoSchedule taint keeps a cluster out unless the
    /// binding already targets it.
    fn candidates(&self, placement: &Placement, before: &BTreeMap<String, i32>, anytime: bool) -> (BTreeSet<String>, BTreeSet<String>) {
        let (mut sure, mut maybe) = (BTreeSet::new(), BTreeSet::new());
        let target_bounced = before.keys().any(|c| self.ops.get(c) == Some(&ClusterOp::Bounce));
        for (name, end) in &self.end.clusters {
            let start = &self.start.clusters[name];
            let op = self.ops.get(name).copied();
            let targeted = before.contains_key(name);
            let states: Vec<&ClusterState> = if anytime { vec![start, end] } else { vec![end] };
            let selected: Vec<bool> = states.iter().map(|s| placement.selects(name, s)).collect();
            let passes: Vec<bool> = states.iter().zip(&selected).map(|(s, sel)| *sel && (!s.blocked() || targeted)).collect();
            if op == Some(ClusterOp::Bounce) && anytime {
                // Gone a while, then back (tainted not-ready until Ready): either.
                if selected.iter().any(|s| *s) {
                    maybe.insert(name.clone());
                }
            } else if passes.iter().all(|p| *p) {
                // A target tainted may lose its place in an earlier pass of the same cycle.
                if targeted && end.blocked() && target_bounced {
                    maybe.insert(name.clone())
                } else {
                    sure.insert(name.clone())
                };
            } else if passes.iter().any(|p| *p) {
                maybe.insert(name.clone());
            } else if !anytime && matches!(op, Some(ClusterOp::Taint(true) | ClusterOp::Cordon(true))) && selected[0] && !targeted && !start.blocked() {
                // Taken while it was still free, then tainted: it stays.
                maybe.insert(name.clone());
            }
        }
        (sure, maybe)
    }
}

/// The placements the binding of `t_end` may have after the cycle (Webster's name tie-break
/// goes either way: its direction is fixed per binding by a hash of its UID).
fn acceptable(cycle: &Cycle<'_>, t_start: &Template, t_end: &Template) -> Vec<BTreeMap<String, i32>> {
    let b_end = t_end.binding.as_ref().expect("a binding");
    let b_start = t_start.binding.as_ref().filter(|_| t_start.exists);
    let before = b_start.map(|b| b.targets.clone()).unwrap_or_default();
    let mut out = Vec::new();
    let mut add = |m: BTreeMap<String, i32>| {
        if !out.contains(&m) {
            out.push(m);
        }
    };
    let results = |placement: &Placement, replicas: i32, sets: Vec<BTreeSet<String>>| -> Vec<BTreeMap<String, i32>> {
        sets.iter().flat_map(|s| [true, false].map(|asc| assign(t_end.kind, placement, replicas, s, asc))).collect()
    };
    match b_end.claimer {
        None => {
            // Released: the scheduler leaves it; it may have been moved before the release.
            add(before.clone());
            if let Some(b) = b_start.filter(|b| b.claimer.is_some()) {
                let (sure, maybe) = cycle.candidates(&b.placement, &before, true);
                for m in results(&b.placement, b.replicas, subsets(&sure, &maybe)) {
                    add(m);
                }
            }
        }
        Some(_) => {
            let always = t_end.kind == Kind::ConfigMap || !matches!(b_end.placement, Placement::Divided(_));
            let triggered = b_start.is_none_or(|b| b.placement != b_end.placement || b.targets.values().sum::<i32>() != b_end.replicas);
            if always {
                // Rescheduled on every change that concerns it: the last pass saw every cluster
                // as it is now.
                let (sure, maybe) = cycle.candidates(&b_end.placement, &before, false);
                for m in results(&b_end.placement, b_end.replicas, subsets(&sure, &maybe)) {
                    add(m);
                }
            } else {
                // Divided: moved only by a placement or replica change, or a target deleted.
                let target_bounced = before.keys().any(|c| cycle.ops.get(c) == Some(&ClusterOp::Bounce));
                if !triggered {
                    add(before.clone());
                }
                if triggered || target_bounced {
                    let (sure, maybe) = cycle.candidates(&b_end.placement, &before, true);
                    for m in results(&b_end.placement, b_end.replicas, subsets(&sure, &maybe)) {
                        add(m);
                    }
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Changes

#[derive(Clone, Debug)]
enum Change {
    CreateTemplate(usize),
    DeleteTemplate(usize),
    /// A merge patch of the template and what it says.
    PatchTemplate(usize, Value, &'static str),
    PatchDep(usize, String),
    PutPolicy(PolicyId, &'static str),
    DeletePolicy(PolicyId),
    Cluster(String, ClusterOp),
}

/// This cycle's changes, applied to `model`, with the clusters they touch.
fn plan(rng: &mut StdRng, model: &mut Model, counter: &mut usize) -> (Vec<Change>, BTreeMap<String, ClusterOp>) {
    let mut changes = Vec::new();
    let mut touched: BTreeSet<usize> = BTreeSet::new();
    let start = model.clone();
    // Policies first (in random order), then templates, so neither kind crowds out the other.
    let mut ids = PolicyId::all();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.random_range(0..=i));
    }
    for id in ids {
        if !rng.random_bool(0.35) {
            continue;
        }
        let old = model.policies[&id].clone();
        let mut new = old.clone();
        let what = if !old.exists {
            new = Policy::random(rng, &model.members);
            "created"
        } else {
            match rng.random_range(0..6) {
                0 => {
                    new.exists = false;
                    "deleted"
                }
                1 | 2 => {
                    new.groups = random_groups(rng);
                    "switched to other templates"
                }
                3 => {
                    new.placement = Placement::random(rng, &model.members);
                    "placed elsewhere"
                }
                4 => {
                    new.priority = rng.random_range(0..3);
                    "reprioritised"
                }
                _ => {
                    new.deps = !new.deps;
                    "propagateDeps toggled"
                }
            }
        };
        let affected: BTreeSet<usize> = start.templates.iter().enumerate().filter(|(_, t)| old.selects(t) || new.selects(t)).map(|(i, _)| i).collect();
        if !affected.is_disjoint(&touched) {
            continue;
        }
        touched.extend(affected);
        model.policies.insert(id, new.clone());
        changes.push(if new.exists { Change::PutPolicy(id, what) } else { Change::DeletePolicy(id) });
    }
    let changed: Vec<(Policy, Policy)> = changes
        .iter()
        .filter_map(|c| if let Change::PutPolicy(id, _) | Change::DeletePolicy(id) = c { Some(*id) } else { None })
        .map(|id| (start.policies[&id].clone(), model.policies[&id].clone()))
        .collect();
    for i in 0..model.templates.len() {
        if touched.contains(&i) || !rng.random_bool(0.4) {
            continue;
        }
        touched.insert(i);
        *counter += 1;
        let n = *counter;
        let before = model.templates[i].clone();
        let mut t = before.clone();
        let change = if !t.exists {
            t.exists = true;
            t.group = rng.random_range(0..GROUPS);
            t.binding = None;
            Change::CreateTemplate(i)
        } else {
            let (patch, what) = match (t.kind, rng.random_range(0..10)) {
                (_, 0) => {
                    t.exists = false;
                    (Value::Null, "deleted")
                }
                (_, 1 | 2) => {
                    t.group = (t.group + rng.random_range(1..GROUPS)) % GROUPS;
                    (json!({"metadata": {"labels": {GROUP_LABEL: format!("g{}", t.group)}}}), "moved to another group")
                }
                (_, 3) => {
                    t.color = format!("c{n}");
                    (json!({"metadata": {"labels": {COLOR_LABEL: t.color}}}), "relabelled")
                }
                (Kind::Deployment, 4..=6) => {
                    t.replicas = (t.replicas + rng.random_range(1..7)) % 8 + 1;
                    (json!({"spec": {"replicas": t.replicas}}), "scaled")
                }
                (Kind::Deployment, _) => {
                    t.image = format!("nginx:model-{n}");
                    (json!({"spec": {"template": {"spec": {"containers": [t.container()]}}}}), "new image")
                }
                (Kind::ConfigMap, _) => {
                    t.data = format!("d{n}");
                    (json!({"data": {"mode": t.data}}), "new data")
                }
            };
            if t.exists { Change::PatchTemplate(i, patch, what) } else { Change::DeleteTemplate(i) }
        };
        // A template arriving in (or leaving) the selection of a policy changed this cycle would
        // be claimed in whichever order the detector sees the two: not in the same cycle.
        if changed.iter().any(|(a, b)| a.selects(&t) || b.selects(&t) || a.selects(&before) || b.selects(&before)) {
            continue;
        }
        model.templates[i] = t;
        changes.push(change);
    }
    for j in 0..DEPS {
        if rng.random_bool(0.2) {
            *counter += 1;
            model.deps[j] = format!("dep-data-{counter}");
            changes.push(Change::PatchDep(j, model.deps[j].clone()));
        }
    }
    // Clusters: about a third change, at most one leaves and comes back.
    let mut ops = BTreeMap::new();
    let mut bounced = false;
    for name in model.members.clone() {
        if !rng.random_bool(0.35) {
            continue;
        }
        let state = model.clusters.get_mut(&name).expect("a cluster");
        let op = match rng.random_range(0..7) {
            0 | 1 => {
                state.tier = TIERS.iter().find(|t| **t != state.tier).expect("two tiers").to_string();
                ClusterOp::FlipTier
            }
            2 | 3 => {
                state.tainted = !state.tainted;
                ClusterOp::Taint(state.tainted)
            }
            4 | 5 => {
                state.cordoned = !state.cordoned;
                ClusterOp::Cordon(state.cordoned)
            }
            _ if !bounced => {
                bounced = true;
                state.tainted = false;
                state.cordoned = false;
                ClusterOp::Bounce
            }
            _ => continue,
        };
        ops.insert(name.clone(), op);
        changes.push(Change::Cluster(name, op));
    }
    (changes, ops)
}

/// After the changes: each template's binding as the detector leaves it (claim, placement,
/// replicas, dependencies; targets still the old ones, the checks decide the new).
fn claims(end: &mut Model) {
    for i in 0..end.templates.len() {
        let t = end.templates[i].clone();
        if !t.exists {
            end.templates[i].binding = None;
            continue;
        }
        let before = t.binding.clone();
        let chosen = end.choose(&t, before.as_ref().and_then(|b| b.claimer));
        end.templates[i].binding = match (chosen, before) {
            (Some(id), before) => {
                let p = &end.policies[&id];
                let replicas = if t.kind == Kind::Deployment { t.replicas } else { 0 };
                Some(Binding {
                    claimer: Some(id),
                    placement: p.placement.clone(),
                    replicas,
                    deps: p.deps,
                    targets: before.map(|b| b.targets).unwrap_or_default(),
                    since_release: Vec::new(),
                })
            }
            (None, Some(mut b)) => {
                if b.claimer.is_some() {
                    b.since_release.clear();
                }
                if b.since_release.last() != Some(&t.content()) {
                    b.since_release.push(t.content());
                }
                Some(Binding { claimer: None, ..b })
            }
            (None, None) => None,
        };
    }
}

async fn set_taint(cp: &kube::Client, cluster: &str, key: &str, present: bool) -> Result<(), String> {
    let api: Api<Cluster> = Api::all(cp.clone());
    for _ in 0..50 {
        let c = api.get(cluster).await.map_err(|e| e.to_string())?;
        let mut taints: Vec<Value> = c.spec.taints.iter().flatten().map(|t| serde_json::to_value(t).expect("a taint")).collect();
        taints.retain(|t| t["key"] != key);
        if present {
            taints.push(json!({"key": key, "effect": "NoSchedule"}));
        }
        let patch = json!({"metadata": {"resourceVersion": c.metadata.resource_version}, "spec": {"taints": taints}});
        match api.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("{cluster} kept changing; taint {key} not set"))
}

async fn set_tier(cp: &kube::Client, cluster: &str, tier: &str) -> Result<(), String> {
    let patch = json!({"metadata": {"labels": {TIER_LABEL: tier}}});
    Api::<Cluster>::all(cp.clone()).patch(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ()).map_err(|e| e.to_string())
}

/// `flotilla unjoin` (workloads deleted, Karmada's default), then join again with its labels.
async fn bounce(world: &World, cluster: &str, tier: &str) -> Result<(), String> {
    let api: Api<Cluster> = Api::all(world.cp.clone());
    let patch = json!({"metadata": {"annotations": {flotilla_controllers::cluster::UNJOIN_ANNOTATION: "delete"}}});
    api.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| e.to_string())?;
    api.delete(cluster, &DeleteParams::default()).await.map_err(|e| e.to_string())?;
    let deadline = Instant::now() + PATIENCE;
    while api.get_opt(cluster).await.map_err(|e| e.to_string())?.is_some() {
        if Instant::now() > deadline {
            return Err(format!("{cluster} still being unjoined after {PATIENCE:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(world.cp.clone(), "karmada-cluster");
    match secrets.delete(cluster, &DeleteParams::default()).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(e.to_string()),
    }
    world.rejoin(&Flotilla, cluster).await.map_err(|e| format!("{e:#}"))?;
    set_tier(&world.cp, cluster, tier).await
}

async fn apply(world: &World, model: &Model, change: &Change) -> Result<(), String> {
    let cp = &world.cp;
    let pp = PostParams::default();
    let r = match change {
        Change::CreateTemplate(i) => {
            let t = &model.templates[*i];
            let api: Api<DynamicObject> = Api::namespaced_with(cp.clone(), NS, &t.kind.resource());
            api.create(&pp, &serde_json::from_value(t.body()).expect("a template")).await.map(|_| ())
        }
        Change::DeleteTemplate(i) => {
            let t = &model.templates[*i];
            Api::<DynamicObject>::namespaced_with(cp.clone(), NS, &t.kind.resource()).delete(&t.name, &DeleteParams::default()).await.map(|_| ())
        }
        Change::PatchTemplate(i, patch, _) => {
            let t = &model.templates[*i];
            Api::<DynamicObject>::namespaced_with(cp.clone(), NS, &t.kind.resource())
                .patch(&t.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| ())
        }
        Change::PatchDep(j, data) => Api::<DynamicObject>::namespaced_with(cp.clone(), NS, &configmaps())
            .patch(&format!("dep-{j}"), &PatchParams::default(), &Patch::Merge(json!({"data": {"mode": data}})))
            .await
            .map(|_| ()),
        Change::PutPolicy(id, _) => {
            let api = policy_api(cp, *id);
            let body = model.policies[id].body(*id);
            match api.get_opt(&id.name()).await {
                Ok(Some(_)) => {
                    let patch = json!([{"op": "replace", "path": "/spec", "value": body["spec"]}]);
                    api.patch(&id.name(), &PatchParams::default(), &Patch::<Value>::Json(serde_json::from_value(patch).expect("a JSON patch")))
                        .await
                        .map(|_| ())
                }
                Ok(None) => api.create(&pp, &serde_json::from_value(body).expect("a policy")).await.map(|_| ()),
                Err(e) => Err(e),
            }
        }
        Change::DeletePolicy(id) => policy_api(cp, *id).delete(&id.name(), &DeleteParams::default()).await.map(|_| ()),
        Change::Cluster(name, op) => {
            let state = &model.clusters[name];
            return match op {
                ClusterOp::FlipTier => set_tier(cp, name, &state.tier).await,
                ClusterOp::Taint(on) => set_taint(cp, name, TAINT_KEY, *on).await,
                ClusterOp::Cordon(on) => set_taint(cp, name, CORDON_KEY, *on).await,
                ClusterOp::Bounce => bounce(world, name, &state.tier).await,
            }
            .map_err(|e| format!("{change:?}: {e}"));
        }
    };
    r.map_err(|e| format!("{change:?}: {e}"))
}

fn describe(model: &Model, change: &Change) -> String {
    let t = |i: &usize| model.templates[*i].binding_name();
    match change {
        Change::CreateTemplate(i) => format!("create {} (group g{})", t(i), model.templates[*i].group),
        Change::DeleteTemplate(i) => format!("delete {}", t(i)),
        Change::PatchTemplate(i, _, what) => format!("{} {what}", t(i)),
        Change::PatchDep(j, _) => format!("dep-{j} new data"),
        Change::PutPolicy(id, what) => {
            let p = &model.policies[id];
            format!("{} {what}: groups {:?} priority {} deps {} {:?}", id.name(), p.groups, p.priority, p.deps, p.placement)
        }
        Change::DeletePolicy(id) => format!("{} deleted", id.name()),
        Change::Cluster(name, op) => format!("cluster {name} {op:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The checks

/// What the control plane chose where the model allows a choice: each template binding's targets.
type Chosen = BTreeMap<String, BTreeMap<String, i32>>;

fn targets_of(rb: &Value) -> BTreeMap<String, i32> {
    rb["spec"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["name"].as_str().unwrap_or_default().to_string(), c["replicas"].as_i64().unwrap_or(0) as i32))
        .collect()
}

fn condition(obj: &Value, type_: &str) -> Option<String> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).and_then(|c| c["status"].as_str()).map(str::to_string)
}

fn permanent_id(rb: &Value) -> String {
    rb["metadata"]["labels"][RB_ID_LABEL].as_str().unwrap_or_default().to_string()
}

fn claim_of(obj: &Value) -> Option<String> {
    let a = &obj["metadata"]["annotations"];
    let l = &obj["metadata"]["labels"];
    if l.get("propagationpolicy.karmada.io/permanent-id").is_some() {
        return Some(format!("pp {}", a["propagationpolicy.karmada.io/name"].as_str().unwrap_or("?")));
    }
    if l.get("clusterpropagationpolicy.karmada.io/permanent-id").is_some() {
        return Some(format!("cpp {}", a["clusterpropagationpolicy.karmada.io/name"].as_str().unwrap_or("?")));
    }
    None
}

fn want_claim(id: Option<PolicyId>) -> Option<String> {
    id.map(|id| if id.is_cluster() { format!("cpp {}", id.name()) } else { format!("pp {}", id.name()) })
}

/// One object a member (and a Work) should hold.
#[derive(Clone, Debug, PartialEq)]
struct Expected {
    binding: String,
    /// The binding's `resourcebinding.karmada.io/permanent-id`: a copy left by an earlier
    /// binding of the same name carries another.
    binding_id: String,
    replicas: Option<i32>,
    /// Any of these.
    contents: Vec<Content>,
}

/// The model against the control plane and the members; what the control plane chose where the
/// model allows a choice, or every difference.
async fn check(world: &World, cycle: &Cycle<'_>) -> Result<Chosen, String> {
    let (start, end) = (cycle.start, cycle.end);
    let mut wrong: Vec<String> = Vec::new();
    let cp = &world.cp;

    // Clusters: joined, Ready, tainted as the model says.
    let clusters: Vec<Cluster> = Api::<Cluster>::all(cp.clone()).list(&ListParams::default()).await.map_err(|e| e.to_string())?.items;
    for (name, state) in &end.clusters {
        let Some(c) = clusters.iter().find(|c| c.metadata.name.as_deref() == Some(name)) else {
            wrong.push(format!("cluster {name} is not joined"));
            continue;
        };
        let v = serde_json::to_value(c).expect("a cluster");
        if condition(&v, "Ready").as_deref() != Some("True") || c.metadata.deletion_timestamp.is_some() {
            wrong.push(format!("cluster {name} is not Ready"));
        }
        let has = |key: &str| c.spec.taints.iter().flatten().any(|t| t.key == key);
        if has(TAINT_KEY) != state.tainted || has(CORDON_KEY) != state.cordoned || v["metadata"]["labels"][TIER_LABEL] != state.tier.as_str() {
            wrong.push(format!("cluster {name}: {:?} {:?}, want {state:?}", v["metadata"]["labels"], c.spec.taints));
        }
    }

    // Templates' claims and their bindings.
    let rbs: BTreeMap<String, Value> = list(&Api::namespaced_with(cp.clone(), NS, &bindings()))
        .await?
        .into_iter()
        .map(|rb| (str_at(&rb, "/metadata/name").unwrap_or_default().to_string(), rb))
        .collect();
    let mut chosen = Chosen::new();
    let mut expected_bindings = BTreeSet::new();
    for (t_start, t) in start.templates.iter().zip(&end.templates) {
        if !t.exists {
            continue;
        }
        let obj = Api::<DynamicObject>::namespaced_with(cp.clone(), NS, &t.kind.resource()).get_opt(&t.name).await.map_err(|e| e.to_string())?;
        let Some(obj) = obj.map(|o| serde_json::to_value(o).expect("an object")) else {
            wrong.push(format!("template {} is missing", t.name));
            continue;
        };
        let want = want_claim(t.binding.as_ref().and_then(|b| b.claimer));
        if claim_of(&obj) != want {
            wrong.push(format!("template {}: claimed by {:?}, want {want:?}", t.name, claim_of(&obj)));
        }
        let Some(b) = &t.binding else { continue };
        let name = t.binding_name();
        expected_bindings.insert(name.clone());
        let Some(rb) = rbs.get(&name) else {
            wrong.push(format!("binding {name} is missing"));
            continue;
        };
        if claim_of(rb) != want {
            wrong.push(format!("binding {name}: claimed by {:?}, want {want:?}", claim_of(rb)));
        }
        let actual = targets_of(rb);
        if b.claimer.is_some() {
            // Karmada records the generation only once a pass succeeds: no cluster fitting
            // leaves it (and the targets emptied, `Scheduled` False).
            let (generation, observed) = (rb["metadata"]["generation"].as_i64(), rb["status"]["schedulerObservedGeneration"].as_i64());
            let no_fit = actual.is_empty() && condition(rb, "Scheduled").as_deref() == Some("False");
            if generation != observed && !no_fit {
                wrong.push(format!("binding {name}: generation {generation:?} not observed by the scheduler ({observed:?})"));
            }
            if rb["spec"]["replicas"].as_i64().unwrap_or(0) != i64::from(b.replicas) {
                wrong.push(format!("binding {name}: spec.replicas {}, want {}", rb["spec"]["replicas"], b.replicas));
            }
        }
        if rb["spec"]["propagateDeps"].as_bool().unwrap_or(false) != b.deps {
            wrong.push(format!("binding {name}: propagateDeps {}, want {}", rb["spec"]["propagateDeps"], b.deps));
        }
        let allowed = acceptable(cycle, t_start, t);
        if !allowed.contains(&actual) {
            wrong.push(format!(
                "binding {name} ({:?}, replicas {}, claimed by {:?}): spec.clusters {actual:?}, want one of {allowed:?} (before: {:?})",
                b.placement,
                b.replicas,
                b.claimer,
                t_start.binding.as_ref().map(|b| &b.targets)
            ));
        }
        if !actual.is_empty() && condition(rb, "FullyApplied").as_deref() != Some("True") {
            wrong.push(format!("binding {name}: not FullyApplied: {}", rb["status"]["conditions"]));
        }
        chosen.insert(t.name.clone(), actual);
    }

    // Where each object should be: the templates' copies as their bindings say (with the targets
    // the control plane chose), the shared ConfigMaps wherever a workload that propagates its
    // dependencies runs.
    let mut want: BTreeMap<(String, Kind, String), Expected> = BTreeMap::new();
    let mut dep_clusters: [BTreeSet<String>; DEPS] = Default::default();
    let mut dep_required = [false; DEPS];
    for t in &end.templates {
        let (Some(b), Some(targets)) = (&t.binding, chosen.get(&t.name)) else { continue };
        for (cluster, replicas) in targets {
            let contents = if b.claimer.is_some() { vec![t.content()] } else { b.since_release.clone() };
            let replicas = (t.kind == Kind::Deployment).then_some(*replicas);
            let binding_id = rbs.get(&t.binding_name()).map(permanent_id).unwrap_or_default();
            let copy = Expected { binding: t.binding_name(), binding_id, replicas, contents };
            want.insert((cluster.clone(), t.kind, t.name.clone()), copy);
        }
        if t.kind == Kind::Deployment && b.deps {
            dep_required[t.dep] = true;
            dep_clusters[t.dep].extend(targets.keys().cloned());
        }
    }
    for j in 0..DEPS {
        let name = format!("dep-{j}-configmap");
        match (rbs.contains_key(&name), dep_required[j], dep_clusters[j].is_empty()) {
            (false, true, false) => wrong.push(format!("binding {name} of a dependency is missing")),
            (true, false, _) => wrong.push(format!("binding {name}: no workload propagates its dependencies, yet it is there")),
            _ => {}
        }
        if rbs.contains_key(&name) {
            expected_bindings.insert(name.clone());
        }
        for cluster in &dep_clusters[j] {
            let binding_id = rbs.get(&name).map(permanent_id).unwrap_or_default();
            let copy = Expected { binding: name.clone(), binding_id, replicas: None, contents: vec![(None, None, Some(end.deps[j].clone()))] };
            want.insert((cluster.clone(), Kind::ConfigMap, format!("dep-{j}")), copy);
        }
    }
    for name in rbs.keys() {
        if !expected_bindings.contains(name) {
            wrong.push(format!("binding {name}: orphaned (no template, or never claimed)"));
        }
    }

    // Works: exactly one per (binding, target cluster), as the template says.
    let mut have_works: BTreeMap<(String, Kind, String), Vec<Value>> = BTreeMap::new();
    for w in list(&Api::all_with(cp.clone(), &works())).await? {
        let Some(m) = w.pointer("/spec/workload/manifests/0") else { continue };
        if m["metadata"]["namespace"] != NS {
            continue;
        }
        let ns = str_at(&w, "/metadata/namespace").unwrap_or_default();
        let cluster = ns.strip_prefix("karmada-es-").unwrap_or(ns).to_string();
        let kind = if m["kind"] == "Deployment" { Kind::Deployment } else { Kind::ConfigMap };
        have_works.entry((cluster, kind, m["metadata"]["name"].as_str().unwrap_or_default().to_string())).or_default().push(w.clone());
    }
    for (key, list) in &have_works {
        let Some(copy) = want.get(key) else {
            wrong.push(format!("{}: {} Work(s) of {:?} {} that should not be there", key.0, list.len(), key.1, key.2));
            continue;
        };
        if list.len() > 1 {
            wrong.push(format!("{}: {} Works of {:?} {}", key.0, list.len(), key.1, key.2));
        }
        let w = &list[0];
        if let Err(e) = matches_copy(&w["spec"]["workload"]["manifests"][0], copy, None) {
            wrong.push(format!("{}: the Work of {:?} {}: {e}", key.0, key.1, key.2));
        }
        if w["metadata"]["deletionTimestamp"].is_string() {
            wrong.push(format!("{}: the Work of {:?} {} is being deleted", key.0, key.1, key.2));
        }
    }
    for key in want.keys() {
        if !have_works.contains_key(key) {
            wrong.push(format!("{}: no Work of {:?} {}", key.0, key.1, key.2));
        }
    }

    // Members: exactly those objects, as the Works say.
    for member in &end.members {
        let client = world.client(&flotilla_testkit::Place::Member(member.clone())).map_err(|e| format!("{e:#}"))?;
        let mut missing = Vec::new();
        let mut stale = Vec::new();
        let mut differ = Vec::new();
        let mut seen = BTreeSet::new();
        for kind in [Kind::Deployment, Kind::ConfigMap] {
            let objects = match list(&Api::namespaced_with(client.clone(), NS, &kind.resource())).await {
                Ok(o) => o,
                Err(e) if e.contains("NotFound") || e.contains("not found") => Vec::new(),
                Err(e) => return Err(e),
            };
            for o in objects {
                let name = str_at(&o, "/metadata/name").unwrap_or_default().to_string();
                if name == "kube-root-ca.crt" {
                    continue;
                }
                let key = (member.clone(), kind, name.clone());
                seen.insert(key.clone());
                match want.get(&key) {
                    None => stale.push(format!("{kind:?} {name}")),
                    Some(copy) => {
                        let work = have_works.get(&key).and_then(|w| str_at(&w[0], "/metadata/name")).unwrap_or_default();
                        if let Err(e) = matches_copy(&o, copy, Some((member, work))) {
                            differ.push(format!("{kind:?} {name}: {e}"));
                        }
                    }
                }
            }
        }
        for key in want.keys().filter(|k| k.0 == *member) {
            if !seen.contains(key) {
                missing.push(format!("{:?} {}", key.1, key.2));
            }
        }
        if !(missing.is_empty() && stale.is_empty() && differ.is_empty()) {
            wrong.push(format!("member {member}: missing {missing:?}; not expected (stale) {stale:?}; different {differ:?}"));
        }
    }
    if wrong.is_empty() { Ok(chosen) } else { Err(wrong.join("\n  ")) }
}

/// Whether a member object (or a Work's manifest, `member` None) is the copy the model wants,
/// owned as Karmada marks it.
fn matches_copy(o: &Value, copy: &Expected, member: Option<(&str, &str)>) -> Result<(), String> {
    let mut diff = Vec::new();
    let mut field = |what: &str, have: Value, want: Value| {
        if have != want {
            diff.push(format!("{what} {have}, want {want}"));
        }
    };
    if let Some(r) = copy.replicas {
        field("replicas", o["spec"]["replicas"].clone(), json!(r));
    }
    let have: Content = (
        str_at(o, "/spec/template/spec/containers/0/image").map(str::to_string),
        o["metadata"]["labels"][COLOR_LABEL].as_str().map(str::to_string),
        str_at(o, "/data/mode").map(str::to_string),
    );
    let fits = |want: &Content| {
        want.0.as_ref().is_none_or(|i| have.0.as_ref() == Some(i))
            && want.1.as_ref().is_none_or(|c| have.1.as_ref() == Some(c))
            && want.2.as_ref().is_none_or(|d| have.2.as_ref() == Some(d))
    };
    let content_wrong = (!copy.contents.iter().any(fits)).then(|| {
        let want = if copy.contents.len() == 1 { format!("{:?}", copy.contents[0]) } else { format!("one of {:?}", copy.contents) };
        format!("(image, label, data) {have:?}, want {want}")
    });
    field("karmada.io/managed", o["metadata"]["labels"]["karmada.io/managed"].clone(), json!("true"));
    field("binding", o["metadata"]["annotations"]["resourcebinding.karmada.io/name"].clone(), json!(copy.binding));
    field("binding namespace", o["metadata"]["annotations"]["resourcebinding.karmada.io/namespace"].clone(), json!(NS));
    field("binding permanent id", o["metadata"]["labels"][RB_ID_LABEL].clone(), json!(copy.binding_id));
    if let Some((cluster, work)) = member {
        field("work namespace", o["metadata"]["annotations"]["work.karmada.io/namespace"].clone(), json!(format!("karmada-es-{cluster}")));
        field("work name", o["metadata"]["annotations"][WORK_NAME_ANNOTATION].clone(), json!(work));
    }
    diff.extend(content_wrong);
    if diff.is_empty() { Ok(()) } else { Err(diff.join(", ")) }
}

// ---------------------------------------------------------------------------------------------

struct Sizes {
    seed: u64,
    cycles: usize,
    members: usize,
    templates: usize,
}

/// Prints the seed if the test fails.
struct SeedOnFailure(u64);

impl Drop for SeedOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("propagation model FAILED with FLOTILLA_PROPAGATION_MODEL_SEED={}", self.0);
        }
    }
}

/// Wait until the model holds, then again a moment later with the same placements; what the
/// control plane chose, or a panic with the seed, the cycle and every difference.
async fn settle(world: &World, cycle: &Cycle<'_>, seed: u64, n: usize) -> Chosen {
    let started = Instant::now();
    // Let the controllers see the changes before the first look.
    tokio::time::sleep(Duration::from_secs(1)).await;
    loop {
        let last;
        match check(world, cycle).await {
            Ok(first) => {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                match check(world, cycle).await {
                    Ok(again) if again == first => return first,
                    Ok(again) => last = format!("placements still moving: {first:?} then {again:?}"),
                    Err(e) => last = e,
                }
            }
            Err(e) => last = e,
        }
        if started.elapsed() > PATIENCE {
            panic!(
                "propagation model: FLOTILLA_PROPAGATION_MODEL_SEED={seed}, cycle {n}: not as the model says after {PATIENCE:?}:\n  {last}\nmodel: clusters {:?}\npolicies {:#?}\ntemplates {:#?}",
                cycle.end.clusters, cycle.end.policies, cycle.end.templates
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_member_ends_as_the_templates_and_policies_say() {
    let sizes = Sizes {
        seed: match std::env::var("FLOTILLA_PROPAGATION_MODEL_SEED").as_deref() {
            Ok("random") => rand::random::<u32>() as u64,
            _ => env_or("FLOTILLA_PROPAGATION_MODEL_SEED", SMOKE_SEED),
        },
        cycles: env_or("FLOTILLA_PROPAGATION_MODEL_CYCLES", 4),
        members: env_or("FLOTILLA_PROPAGATION_MODEL_MEMBERS", 3).max(1),
        templates: env_or("FLOTILLA_PROPAGATION_MODEL_TEMPLATES", 10).max(1),
    };
    let _guard = SeedOnFailure(sizes.seed);
    println!(
        "propagation model: FLOTILLA_PROPAGATION_MODEL_SEED={} FLOTILLA_PROPAGATION_MODEL_CYCLES={} FLOTILLA_PROPAGATION_MODEL_MEMBERS={} FLOTILLA_PROPAGATION_MODEL_TEMPLATES={}",
        sizes.seed, sizes.cycles, sizes.members, sizes.templates
    );
    let began = Instant::now();
    let mut rng = StdRng::seed_from_u64(sizes.seed);
    let names: Vec<String> = (0..sizes.members).map(|i| format!("m{}", i + 1)).collect();
    let world = World::start(&Flotilla, WorldConfig { members: names.iter().map(|n| MemberSpec::new(n)).collect(), flags: Vec::new() }).await.expect("a world");
    println!("  world: {} members joined and Ready after {:.1}s", names.len(), began.elapsed().as_secs_f64());

    // The starting point: clusters labelled, the shared ConfigMaps, policies, then templates.
    let mut model = Model {
        members: names.clone(),
        clusters: names
            .iter()
            .map(|n| (n.clone(), ClusterState { tier: TIERS[rng.random_range(0..2)].to_string(), tainted: false, cordoned: false }))
            .collect(),
        policies: PolicyId::all()
            .into_iter()
            .map(|id| {
                let mut p = Policy::random(&mut rng, &names);
                p.exists = rng.random_bool(0.75);
                (id, p)
            })
            .collect(),
        templates: (0..sizes.templates)
            .map(|i| {
                let kind = if i % 3 == 2 { Kind::ConfigMap } else { Kind::Deployment };
                Template {
                    kind,
                    name: format!("{}-{i}", if kind == Kind::Deployment { "web" } else { "settings" }),
                    exists: false,
                    group: rng.random_range(0..GROUPS),
                    replicas: rng.random_range(1..=6),
                    image: "nginx:model-0".into(),
                    color: "c0".into(),
                    data: "d0".into(),
                    dep: rng.random_range(0..DEPS),
                    binding: None,
                }
            })
            .collect(),
        deps: (0..DEPS).map(|j| format!("dep-data-{j}")).collect(),
    };
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(world.cp.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap()).await.unwrap();
    for (name, state) in &model.clusters {
        set_tier(&world.cp, name, &state.tier).await.unwrap();
    }
    for j in 0..DEPS {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("dep-{j}"), "namespace": NS}, "data": {"mode": model.deps[j]}});
        Api::<DynamicObject>::namespaced_with(world.cp.clone(), NS, &configmaps())
            .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
            .await
            .unwrap();
    }
    for (id, p) in &model.policies {
        if p.exists {
            policy_api(&world.cp, *id).create(&PostParams::default(), &serde_json::from_value(p.body(*id)).unwrap()).await.unwrap();
        }
    }
    // The detector knows every policy before the first template appears.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = model.clone();
    let mut creates = Vec::new();
    for (i, t) in model.templates.iter_mut().enumerate() {
        if rng.random_bool(0.7) {
            t.exists = true;
            creates.push(Change::CreateTemplate(i));
        }
    }
    claims(&mut model);
    for r in join_all(creates.iter().map(|c| apply(&world, &model, c))).await {
        r.unwrap();
    }
    let no_ops = BTreeMap::new();
    let chosen = settle(&world, &Cycle { start: &start, end: &model, ops: &no_ops }, sizes.seed, 0).await;
    adopt(&mut model, &chosen);
    println!("  cycle 0: {} templates created; settled after {:.1}s", creates.len(), began.elapsed().as_secs_f64());

    let mut counter = 0usize;
    let mut stats: BTreeMap<&str, usize> = BTreeMap::new();
    for n in 1..=sizes.cycles {
        let cycle_began = Instant::now();
        let start = model.clone();
        let (changes, ops) = plan(&mut rng, &mut model, &mut counter);
        claims(&mut model);
        println!("  cycle {n}: {} changes at once:", changes.len());
        for c in &changes {
            println!("    {}", describe(&model, c));
            *stats
                .entry(match c {
                    Change::CreateTemplate(_) => "templates created",
                    Change::DeleteTemplate(_) => "templates deleted",
                    Change::PatchTemplate(..) | Change::PatchDep(..) => "templates updated",
                    Change::PutPolicy(..) => "policies created or changed",
                    Change::DeletePolicy(_) => "policies deleted",
                    Change::Cluster(_, ClusterOp::Bounce) => "members unjoined and joined again",
                    Change::Cluster(..) => "cluster labels or taints changed",
                })
                .or_default() += 1;
        }
        let delays: Vec<u64> = changes.iter().map(|_| rng.random_range(0..500)).collect();
        let results = join_all(changes.iter().zip(&delays).map(|(c, d)| {
            let (world, model) = (&world, &model);
            async move {
                tokio::time::sleep(Duration::from_millis(*d)).await;
                apply(world, model, c).await
            }
        }))
        .await;
        for r in results {
            if let Err(e) = r {
                panic!("propagation model: FLOTILLA_PROPAGATION_MODEL_SEED={}, cycle {n}: a change failed: {e}", sizes.seed);
            }
        }
        let chosen = settle(&world, &Cycle { start: &start, end: &model, ops: &ops }, sizes.seed, n).await;
        adopt(&mut model, &chosen);
        let placed: usize = chosen.values().map(BTreeMap::len).sum();
        *stats.entry("cycles").or_default() += 1;
        println!("  cycle {n}: settled after {:.1}s; {} bindings, {placed} template copies in members", cycle_began.elapsed().as_secs_f64(), chosen.len());
    }
    println!(
        "propagation model PASSED: FLOTILLA_PROPAGATION_MODEL_SEED={} cycles {} members {} templates {} in {:.1}s — {stats:?}",
        sizes.seed,
        sizes.cycles,
        sizes.members,
        sizes.templates,
        began.elapsed().as_secs_f64()
    );
    world.stop().await.unwrap();
}

/// Carry on from the placements the control plane chose.
fn adopt(model: &mut Model, chosen: &Chosen) {
    for t in &mut model.templates {
        if let (Some(b), Some(targets)) = (&mut t.binding, chosen.get(&t.name)) {
            b.targets = targets.clone();
        }
    }
}
