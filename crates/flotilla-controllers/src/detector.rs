//! The resource detector: matches resource templates of any kind (built-in or CRD) to the
//! winning PropagationPolicy / ClusterPropagationPolicy, claims them with Karmada's labels and
//! annotations, and keeps their ResourceBinding / ClusterResourceBinding up to date.
//!
//! Only kinds some policy selects are watched: a policy naming a new apiVersion/kind starts a
//! watch of that kind on the control plane (a CRD not yet installed is retried). Every template
//! event that changes more than the template's status, and every policy change for the kinds that
//! policy selects, queues the template.
//!
//! Policy choice (Karmada's): a namespaced template takes the best PropagationPolicy of its
//! namespace, and only when there is none the best ClusterPropagationPolicy; best = higher
//! `spec.priority`, then the more specific selector (name > label selector > all), then the
//! smaller name. A claimed template stays with its policy unless a better one has
//! `preemption: Always`. Templates in reserved namespaces are never propagated.
//!
//! Lazy activation (Karmada's `activationPreference: Lazy`): a template claimed by a lazy policy
//! keeps its binding as it is until a user changes the template (labels and annotations in
//! `*.karmada.io` do not count); the watch callback records such changes, and only they let the
//! reconcile refresh the binding.
//!
//! A deleted template deletes its binding (Karmada relies on garbage collection through the
//! owner reference; the detector does it directly so it works without a collector).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::admission::karmada::{default_propagation_spec, validate_propagation_spec};
use flotilla_api::federation::karmada::names::binding_name;
use flotilla_api::federation::karmada::networking::CLAIMED_BY_LABEL;
use flotilla_api::federation::karmada::policy::{
    ActivationPreference, CLUSTER_PROPAGATION_POLICY_FINALIZER, CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL,
    ClusterPropagationPolicy, ConflictResolution, DEFAULT_SCHEDULER_NAME, OverridePolicy, PROPAGATION_POLICY_FINALIZER, PROPAGATION_POLICY_NAME_ANNOTATION,
    PROPAGATION_POLICY_NAMESPACE_ANNOTATION, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PreemptionBehavior, PriorityClassSource, PropagationPolicy,
    PropagationSpec, ResourceSelector, SchedulePriority,
};
use flotilla_api::federation::karmada::work::{
    BINDING_FINALIZER, BindingSchedulePriority, BindingSuspension, CLUSTER_RESOURCE_BINDING_FINALIZER, CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL,
    ClusterResourceBinding, ClusterResourceBindingSpec, ObjectReference, RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding, ResourceBindingSpec,
    WorkloadAffinityGroups,
};
use flotilla_api::overrides::{ImplicitPriority, selector_priority};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use flotilla_runtime::Events;
use flotilla_runtime::{Informers, Next, Runtime, WorkQueue};

pub const NAME: &str = "resource-detector";

/// Event reasons on templates (Karmada's).
pub const REASON_APPLY_POLICY_SUCCEED: &str = "ApplyPolicySucceed";
pub const REASON_APPLY_POLICY_FAILED: &str = "ApplyPolicyFailed";
pub const REASON_GET_REPLICAS_SUCCEED: &str = "GetReplicasSucceed";
pub const REASON_GET_REPLICAS_FAILED: &str = "GetReplicasFailed";
pub const REASON_PREEMPT_POLICY_SUCCEED: &str = "PreemptPolicySucceed";

/// Namespaces whose objects are never propagated.
pub fn is_reserved_namespace(ns: &str) -> bool {
    matches!(ns, "kube-system" | "kube-public" | "kube-node-lease" | "karmada-system" | "karmada-cluster" | "flotilla-system" | "kube-federation-system")
        || ns.starts_with("karmada-es-")
}

/// API groups the detector never watches: Karmada v1.18's defaults (`NewSkippedResourceConfig`:
/// exact groups, so a custom resource of `example.karmada.io` is propagated), KubeFed's own
/// groups, and Events.
const SKIPPED_GROUPS: &[&str] = &[
    "cluster.karmada.io",
    "policy.karmada.io",
    "work.karmada.io",
    "config.karmada.io",
    "networking.karmada.io",
    "autoscaling.karmada.io",
    "remedy.karmada.io",
    "apps.karmada.io",
    "events.k8s.io",
    "types.kubefed.io",
    "core.kubefed.io",
    "scheduling.kubefed.io",
];

/// Whether templates of `kind` are never propagated: a skipped group, core Events, or Leases
/// (`coordination.k8s.io/v1`), as Karmada skips them.
fn is_skipped(kind: &Kind) -> bool {
    let group = kind.api_version.split_once('/').map_or("", |(g, _)| g);
    SKIPPED_GROUPS.contains(&group) || (kind.api_version == "v1" && kind.kind == "Event") || kind.api_version == "coordination.k8s.io/v1"
}

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// How long to wait before looking again for a kind the control plane does not serve yet.
    pub missing_kind_retry: Duration,
    /// The `PriorityBasedScheduling` gate: a policy's `schedulePriority` resolves its
    /// PriorityClass into the binding's `schedulePriority.priority` (the scheduler's order).
    pub priority_based_scheduling: bool,
    /// The `WorkloadAffinity` gate: a namespaced template's binding carries the groups its
    /// policy's `placement.workloadAffinity` names (`spec.workloadAffinityGroups`).
    pub workload_affinity: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 4, missing_kind_retry: Duration::from_secs(5), priority_based_scheduling: false, workload_affinity: false }
    }
}

/// How soon a claim that raced another write of the template is tried again.
const CLAIM_RETRY: Duration = Duration::from_millis(200);

/// A kind as policies name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kind {
    pub api_version: String,
    pub kind: String,
}

impl Kind {
    fn gvk(&self) -> GroupVersionKind {
        let (group, version) = self.api_version.split_once('/').unwrap_or(("", &self.api_version));
        GroupVersionKind { group: group.into(), version: version.into(), kind: self.kind.clone() }
    }
}

/// A template in the queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TemplateKey {
    pub kind: Kind,
    pub namespace: Option<String>,
    pub name: String,
}

/// The policy chosen for a template.
#[derive(Clone, Debug, PartialEq)]
pub struct Chosen {
    /// `None` for a ClusterPropagationPolicy.
    pub namespace: Option<String>,
    pub name: String,
    pub permanent_id: Option<String>,
    pub priority: i32,
    pub preemption: bool,
    pub spec: PropagationSpec,
}

impl Chosen {
    fn display(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
    fn is_cluster(&self) -> bool {
        self.namespace.is_none()
    }
}

/// How well a set of selectors picks the template.
fn implicit(template: &Value, selectors: &[ResourceSelector]) -> ImplicitPriority {
    selectors.iter().map(|s| selector_priority(template, s)).max().unwrap_or(ImplicitPriority::MisMatch)
}

fn candidates_pp<'a>(template: &'a Value, pps: &'a [Arc<PropagationPolicy>]) -> impl Iterator<Item = (ImplicitPriority, Chosen)> + 'a {
    let ns = template.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    pps.iter()
        .filter(move |p| !ns.is_empty() && p.metadata.namespace.as_deref() == Some(ns) && p.metadata.deletion_timestamp.is_none())
        .filter(|p| may_select(template, &p.spec.resource_selectors))
        .filter_map(move |p| {
            // A namespaced policy only selects in its own namespace.
            let selectors: Vec<ResourceSelector> = p
                .spec
                .resource_selectors
                .iter()
                .cloned()
                .map(|mut s| {
                    s.namespace = Some(ns.to_string());
                    s
                })
                .collect();
            let i = implicit(template, &selectors);
            // The policy is copied and defaulted only when it matches: a namespace may hold
            // thousands of policies, each template matching one.
            (i > ImplicitPriority::MisMatch).then(|| (i, chosen_of(&p.metadata, Some(ns.to_string()), &p.spec, PROPAGATION_POLICY_PERMANENT_ID_LABEL)))
        })
}

fn candidates_cpp<'a>(template: &'a Value, cpps: &'a [Arc<ClusterPropagationPolicy>]) -> impl Iterator<Item = (ImplicitPriority, Chosen)> + 'a {
    cpps.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).filter(|p| may_select(template, &p.spec.0.resource_selectors)).filter_map(move |p| {
        let i = implicit(template, &p.spec.0.resource_selectors);
        (i > ImplicitPriority::MisMatch).then(|| (i, chosen_of(&p.metadata, None, &p.spec.0, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL)))
    })
}

/// A cheap first look: can any of the selectors match the template at all (same apiVersion and
/// kind, and the same name where the selector names one)? Exact matching follows for those
/// that can.
fn may_select(template: &Value, selectors: &[ResourceSelector]) -> bool {
    let field = |path: &str| template.pointer(path).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind, name) = (field("/apiVersion"), field("/kind"), field("/metadata/name"));
    selectors.iter().any(|s| s.api_version == api_version && s.kind == kind && s.name.as_deref().is_none_or(|n| n.is_empty() || n == name))
}

/// The policy as the detector uses it. Its spec gets Karmada's webhook defaults (spread by
/// cluster, at least one group, Divided means Weighted, ...): on Flotilla's API server the
/// admission chain set them already; a plain kube-apiserver host has no such chain, and the
/// binding and the scheduler must see the same placement either way.
fn chosen_of(meta: &kube::api::ObjectMeta, namespace: Option<String>, spec: &PropagationSpec, id_label: &str) -> Chosen {
    let mut spec = spec.clone();
    default_propagation_spec(&mut spec);
    Chosen {
        namespace,
        name: meta.name.clone().unwrap_or_default(),
        permanent_id: meta.labels.as_ref().and_then(|l| l.get(id_label)).cloned(),
        priority: spec.priority.unwrap_or(0),
        preemption: spec.preemption == Some(PreemptionBehavior::Always),
        spec,
    }
}

fn best(mut list: Vec<(ImplicitPriority, Chosen)>) -> Option<Chosen> {
    list.sort_by(|(ia, a), (ib, b)| b.priority.cmp(&a.priority).then(ib.cmp(ia)).then(a.name.cmp(&b.name)));
    list.into_iter().next().map(|(_, c)| c)
}

/// The policy a template belongs to. `claimed` is the policy currently claiming it (by
/// namespace/name), if it still exists.
pub fn choose_policy(
    template: &Value,
    pps: &[Arc<PropagationPolicy>],
    cpps: &[Arc<ClusterPropagationPolicy>],
    claimed: Option<(Option<&str>, &str)>,
) -> Option<Chosen> {
    let pp_list: Vec<_> = candidates_pp(template, pps).collect();
    let cpp_list: Vec<_> = candidates_cpp(template, cpps).collect();
    let current = claimed
        .and_then(|(ns, name)| pp_list.iter().chain(cpp_list.iter()).find(|(_, c)| c.namespace.as_deref() == ns && c.name == name).map(|(_, c)| c.clone()));
    let fresh = if pp_list.is_empty() { best(cpp_list.clone()) } else { best(pp_list.clone()) };
    let Some(current) = current else { return fresh };
    // Preemption: a PP with `Always` takes over from a lower-priority PP or from any CPP; a CPP
    // with `Always` only from a lower-priority CPP.
    let preemptor = |cand: &Chosen| {
        cand.preemption
            && match (cand.is_cluster(), current.is_cluster()) {
                (false, true) => true,
                (false, false) | (true, true) => cand.priority > current.priority,
                (true, false) => false,
            }
    };
    let challengers: Vec<_> = pp_list.into_iter().chain(cpp_list).filter(|(_, c)| preemptor(c)).collect();
    // PPs first, as for a fresh choice.
    let (pp, cpp): (Vec<_>, Vec<_>) = challengers.into_iter().partition(|(_, c)| !c.is_cluster());
    best(pp).or_else(|| best(cpp)).or(Some(current))
}

/// The claim (labels, annotations) of `chosen` on a template or binding.
fn claim(chosen: &Chosen) -> (BTreeMap<String, Option<String>>, BTreeMap<String, Option<String>>) {
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    let id = chosen.permanent_id.clone().unwrap_or_default();
    match &chosen.namespace {
        Some(ns) => {
            labels.insert(PROPAGATION_POLICY_PERMANENT_ID_LABEL.into(), Some(id));
            labels.insert(CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL.into(), None);
            annotations.insert(PROPAGATION_POLICY_NAMESPACE_ANNOTATION.into(), Some(ns.clone()));
            annotations.insert(PROPAGATION_POLICY_NAME_ANNOTATION.into(), Some(chosen.name.clone()));
            annotations.insert(CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION.into(), None);
        }
        None => {
            labels.insert(CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL.into(), Some(id));
            labels.insert(PROPAGATION_POLICY_PERMANENT_ID_LABEL.into(), None);
            annotations.insert(CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION.into(), Some(chosen.name.clone()));
            annotations.insert(PROPAGATION_POLICY_NAMESPACE_ANNOTATION.into(), None);
            annotations.insert(PROPAGATION_POLICY_NAME_ANNOTATION.into(), None);
        }
    }
    (labels, annotations)
}

fn unclaim() -> (BTreeMap<String, Option<String>>, BTreeMap<String, Option<String>>) {
    let labels = [PROPAGATION_POLICY_PERMANENT_ID_LABEL, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL].iter().map(|k| ((*k).to_string(), None)).collect();
    let annotations = [PROPAGATION_POLICY_NAMESPACE_ANNOTATION, PROPAGATION_POLICY_NAME_ANNOTATION, CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION]
        .iter()
        .map(|k| ((*k).to_string(), None))
        .collect();
    (labels, annotations)
}

/// A merge patch making `meta`'s labels/annotations agree with `want`; `None` when they already do.
fn metadata_patch(obj: &Value, labels: &BTreeMap<String, Option<String>>, annotations: &BTreeMap<String, Option<String>>) -> Option<Value> {
    let differs = |field: &str, want: &BTreeMap<String, Option<String>>| {
        let have = obj.pointer(&format!("/metadata/{field}")).and_then(Value::as_object);
        want.iter().any(|(k, v)| have.and_then(|h| h.get(k)).and_then(Value::as_str) != v.as_deref())
    };
    if !differs("labels", labels) && !differs("annotations", annotations) {
        return None;
    }
    let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
    Some(json!({"metadata": {"labels": labels, "annotations": annotations, "resourceVersion": rv}}))
}

/// Which policy claims `obj` (namespace/name from its annotations).
fn claimed_by(obj: &Value) -> Option<(Option<String>, String)> {
    let ann = |k: &str| obj.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str).map(str::to_string);
    let label = |k: &str| obj.pointer("/metadata/labels").and_then(|a| a.get(k)).and_then(Value::as_str).is_some();
    if label(PROPAGATION_POLICY_PERMANENT_ID_LABEL) {
        return Some((ann(PROPAGATION_POLICY_NAMESPACE_ANNOTATION), ann(PROPAGATION_POLICY_NAME_ANNOTATION)?));
    }
    if label(CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL) {
        return Some((None, ann(CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION)?));
    }
    None
}

/// The binding spec a policy gives a template (the scheduling result is kept by the caller).
pub fn binding_spec(template: &Value, chosen: &Chosen) -> Result<ResourceBindingSpec, String> {
    let s = &chosen.spec;
    let meta = |k: &str| template.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).map(str::to_string);
    let replicas = flotilla_api::interpreter::get_replicas(template).map_err(|e| e.to_string())?;
    Ok(ResourceBindingSpec {
        resource: ObjectReference {
            api_version: template.get("apiVersion").and_then(Value::as_str).unwrap_or_default().into(),
            kind: template.get("kind").and_then(Value::as_str).unwrap_or_default().into(),
            namespace: meta("namespace"),
            name: meta("name").unwrap_or_default(),
            uid: meta("uid"),
            resource_version: meta("resourceVersion"),
        },
        propagate_deps: s.propagate_deps.or(s.association),
        replicas: replicas.as_ref().map(|r| r.replicas).filter(|r| *r > 0),
        replica_requirements: replicas.and_then(|r| r.requirements),
        placement: s.placement.clone(),
        scheduler_name: Some(s.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.to_string())),
        failover: s.failover.clone(),
        conflict_resolution: Some(s.conflict_resolution.unwrap_or(ConflictResolution::Abort)),
        suspension: s.suspension.clone().map(|suspension| BindingSuspension { suspension, scheduling: None }),
        preserve_resources_on_deletion: s.preserve_resources_on_deletion,
        ..Default::default()
    })
}

/// One watched kind.
struct Watched {
    store: Store<DynamicObject>,
    resource: ApiResource,
    namespaced: bool,
}

pub struct Context {
    pub client: Client,
    pub config: Config,
    events: Events,
    pps: Store<PropagationPolicy>,
    cpps: Store<ClusterPropagationPolicy>,
    ops: Store<OverridePolicy>,
    kinds: Mutex<HashMap<Kind, Option<Arc<Watched>>>>,
    queue: Arc<WorkQueue<TemplateKey>>,
    informers: Informers,
    /// Templates changed by someone other than Karmada's controllers since their binding was
    /// last refreshed, each with the sequence number of its latest such change: a Lazy policy
    /// refreshes only those.
    user_changes: Mutex<HashMap<TemplateKey, u64>>,
    change_seq: std::sync::atomic::AtomicU64,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("{0}")]
    Template(String),
}

impl flotilla_runtime::ReconcileError for Error {}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

impl Context {
    fn watched(&self, kind: &Kind) -> Option<Arc<Watched>> {
        self.kinds.lock().get(kind).cloned().flatten()
    }

    fn note_user_change(&self, key: TemplateKey) {
        let seq = self.change_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.user_changes.lock().insert(key, seq);
    }

    /// The template's pending user change, if any (its sequence number).
    fn user_change(&self, key: &TemplateKey) -> Option<u64> {
        self.user_changes.lock().get(key).copied()
    }

    /// The change `seen` has been acted on; a later one stays pending.
    fn user_change_done(&self, key: &TemplateKey, seen: Option<u64>) {
        let mut changes = self.user_changes.lock();
        if changes.get(key).copied() == seen {
            changes.remove(key);
        }
    }

    /// Queue every template of `kinds` (all watched kinds when `None`).
    fn enqueue_kinds(&self, kinds: Option<&HashSet<Kind>>) {
        let watched: Vec<(Kind, Arc<Watched>)> =
            self.kinds.lock().iter().filter(|(k, _)| kinds.is_none_or(|ks| ks.contains(*k))).filter_map(|(k, w)| w.clone().map(|w| (k.clone(), w))).collect();
        for (kind, w) in watched {
            for obj in w.store.state() {
                self.queue.add(TemplateKey { kind: kind.clone(), namespace: obj.metadata.namespace.clone(), name: obj.name_any() });
            }
        }
    }
}

/// Start watching `kind` unless already watched.
fn ensure_watch(ctx: &Arc<Context>, kind: Kind) {
    if is_skipped(&kind) {
        return;
    }
    {
        let mut kinds = ctx.kinds.lock();
        if kinds.contains_key(&kind) {
            return;
        }
        kinds.insert(kind.clone(), None);
    }
    let ctx = ctx.clone();
    let kind_key = kind.clone();
    tokio::spawn(async move {
        let (resource, caps) = loop {
            match kube::discovery::oneshot::pinned_kind(&ctx.client, &kind.gvk()).await {
                Ok(found) => break found,
                Err(e) => {
                    tracing::debug!(controller = NAME, kind = ?kind, error = %e, "kind not served yet; retrying");
                    tokio::time::sleep(ctx.config.missing_kind_retry).await;
                }
            }
        };
        let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
        tracing::debug!(controller = NAME, kind = ?kind, "watching templates");
        // Templates not written since this revision were there before the detector looked at
        // the kind: listing them is no change of theirs (see `is_user_change`).
        let since = loop {
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
            match api.list_metadata(&kube::api::ListParams::default().limit(1)).await {
                Ok(list) => break list.metadata.resource_version.and_then(|rv| rv.parse::<u64>().ok()),
                Err(e) => {
                    tracing::debug!(controller = NAME, kind = ?kind, error = %e, "listing templates failed; retrying");
                    tokio::time::sleep(ctx.config.missing_kind_retry).await;
                }
            }
        };
        let store = ctx.informers.dynamic_store(&resource);
        let c = ctx.clone();
        // An update of a template's status alone (the binding controller's aggregated status, on
        // every member change) queues nothing.
        ctx.informers.subscribe_dynamic(&resource, move |old, o, deleted| {
            let key = TemplateKey { kind: kind.clone(), namespace: o.metadata.namespace.clone(), name: o.name_any() };
            if !deleted && is_user_change(old, o, since) {
                c.note_user_change(key.clone());
            }
            if deleted || old.is_none_or(|old| specification_print(old) != specification_print(o)) {
                c.queue.add(key);
            }
        });
        ctx.kinds.lock().insert(kind_key, Some(Arc::new(Watched { store, resource, namespaced })));
    });
}

/// A fingerprint of what a template's update can change for the detector: everything but its
/// `status` and the fields every write moves (`resourceVersion`, `generation`, `managedFields`)
/// — Karmada's detector drops updates that change nothing else the same way.
fn specification_print(o: &DynamicObject) -> u64 {
    fingerprint(o, false)
}

/// `specification_print` without what Karmada's controllers write on templates: their
/// `.karmada.io` labels and annotations (but the user's skip-auto-propagation label).
fn user_print(o: &DynamicObject) -> u64 {
    fingerprint(o, true)
}

fn fingerprint(o: &DynamicObject, without_karmada_metadata: bool) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut meta = o.metadata.clone();
    meta.resource_version = None;
    meta.generation = None;
    meta.managed_fields = None;
    if without_karmada_metadata {
        let by_karmada = |k: &str| k.contains(".karmada.io") && k != NAMESPACE_SKIP_AUTO_PROPAGATION_LABEL;
        for map in [&mut meta.labels, &mut meta.annotations] {
            if let Some(m) = map.as_mut() {
                m.retain(|k, _| !by_karmada(k));
            }
            if map.as_ref().is_some_and(|m| m.is_empty()) {
                *map = None;
            }
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&meta).unwrap_or_default().hash(&mut hasher);
    match o.data.as_object() {
        Some(fields) => {
            for (name, value) in fields.iter().filter(|(name, _)| name.as_str() != "status") {
                name.hash(&mut hasher);
                serde_json::to_string(value).unwrap_or_default().hash(&mut hasher);
            }
        }
        None => serde_json::to_string(&o.data).unwrap_or_default().hash(&mut hasher),
    }
    hasher.finish()
}

/// Whether a template event is a change Karmada's own controllers did not make
/// (`eventfilter.ResourceChangeByKarmada`'s complement): its `.karmada.io` labels and annotations
/// (but the user's `namespace.karmada.io/skip-auto-propagation`), generation, status and
/// bookkeeping aside, it differs from before. A template heard of first is a change if it was
/// written after `since`, the revision at which the detector began watching its kind — so a
/// policy that starts the watch does not count its templates as changed.
fn is_user_change(old: Option<&DynamicObject>, new: &DynamicObject, since: Option<u64>) -> bool {
    match old {
        Some(old) => user_print(old) != user_print(new),
        None => match (since, new.metadata.resource_version.as_deref().and_then(|rv| rv.parse::<u64>().ok())) {
            (Some(since), Some(rv)) => rv > since,
            _ => true,
        },
    }
}

/// The label a user puts on a namespace to keep it from being propagated (Karmada's, with the
/// karmada prefix yet the user's).
const NAMESPACE_SKIP_AUTO_PROPAGATION_LABEL: &str = "namespace.karmada.io/skip-auto-propagation";

fn kinds_of(selectors: &[ResourceSelector]) -> HashSet<Kind> {
    selectors.iter().map(|s| Kind { api_version: s.api_version.clone(), kind: s.kind.clone() }).collect()
}

async fn reconcile(key: TemplateKey, ctx: Arc<Context>) -> Result<Next, Error> {
    tracing::debug!(controller = NAME, template = %describe(&key), "reconciling");
    let Some(watched) = ctx.watched(&key.kind) else { return Ok(Next::After(ctx.config.missing_kind_retry)) };
    let user_change = ctx.user_change(&key);
    let Some(obj) = crate::kinds::cached(&watched.store, &watched.resource, key.namespace.as_deref(), &key.name) else {
        delete_binding(&ctx, &key, watched.namespaced).await?;
        ctx.user_changes.lock().remove(&key);
        return Ok(Next::Done);
    };
    if obj.metadata.deletion_timestamp.is_some() || key.namespace.as_deref().is_some_and(is_reserved_namespace) {
        return Ok(Next::Done);
    }
    if obj.labels().get(CLAIMED_BY_LABEL).is_some_and(|v| !v.is_empty()) {
        // Another subsystem (a MultiClusterService) took it over: no policy claims it.
        ctx.user_change_done(&key, user_change);
        return Ok(Next::Done);
    }
    let template = crate::kinds::template_json(&obj, &watched.resource).map_err(|e| Error::Template(e.to_string()))?;
    let api: Api<DynamicObject> = match &key.namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &watched.resource),
        None => Api::all_with(ctx.client.clone(), &watched.resource),
    };
    let claimed = claimed_by(&template);
    let chosen = {
        let pps = ctx.pps.state();
        let cpps = ctx.cpps.state();
        choose_policy(&template, &pps, &cpps, claimed.as_ref().map(|(ns, n)| (ns.as_deref(), n.as_str())))
    };
    let Some(chosen) = chosen else {
        tracing::debug!(controller = NAME, template = %describe(&key), policies = ctx.pps.state().len(), "no policy selects it");
        if claimed.is_some() {
            // Its policy is gone or no longer selects it: release the claim, keep what runs.
            let (labels, annotations) = unclaim();
            if let Some(patch) = metadata_patch(&template, &labels, &annotations) {
                api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(api_err(format!("releasing {}", key.name)))?;
            }
            release_binding(&ctx, &key, watched.namespaced).await?;
        }
        ctx.user_change_done(&key, user_change);
        return Ok(Next::Done);
    };
    tracing::debug!(controller = NAME, template = %describe(&key), policy = %chosen.display(), id = ?chosen.permanent_id, "chosen");
    if chosen.permanent_id.is_none() {
        // The policy has not been given its permanent id yet (admission does it on Flotilla; a
        // plain kube-apiserver host needs the policy watcher to): look again shortly.
        return Ok(Next::After(Duration::from_millis(200)));
    }
    if let Some(missing) = missing_dependent_override(&ctx, &chosen) {
        let msg = format!("Failed to apply policy({}) for {}: waiting for dependent overrides: {missing}", chosen.display(), describe(&key));
        ctx.events.publish_ref(&object_reference(&obj, &watched.resource), true, REASON_APPLY_POLICY_FAILED, "ApplyPolicy", msg).await;
        return Ok(Next::After(Duration::from_secs(1)));
    }
    // Another policy still there claims it: the chosen one preempts it (Karmada's Event).
    let preempted = claimed.as_ref().filter(|(ns, name)| (ns.as_deref(), name.as_str()) != (chosen.namespace.as_deref(), chosen.name.as_str())).filter(
        |(ns, name)| match ns {
            Some(ns) => ctx.pps.get(&ObjectRef::new(name).within(ns)).is_some(),
            None => ctx.cpps.get(&ObjectRef::new(name)).is_some(),
        },
    );
    let (labels, annotations) = claim(&chosen);
    if let Some(patch) = metadata_patch(&template, &labels, &annotations) {
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                if let Some((ns, name)) = preempted {
                    let msg = preemption_message(&chosen, ns.as_deref(), name);
                    ctx.events.publish_ref(&object_reference(&obj, &watched.resource), false, REASON_PREEMPT_POLICY_SUCCEED, "PreemptPolicy", msg).await;
                }
            }
            // Gone: the watch brings the deletion.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Next::Done),
            // Changed meanwhile. The watch brings the new version but queues it only if more
            // than its status changed, so look again once the store has it.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(controller = NAME, template = %describe(&key), "claim raced a change; looking again");
                return Ok(Next::After(CLAIM_RETRY));
            }
            Err(e) => return Err(api_err(format!("claiming {}", describe(&key)))(e)),
        }
        return Ok(Next::Done);
    }
    // Lazy activation (Karmada's): the policy's claim is taken at once, but its placement
    // reaches the binding only with the template's own next change; a policy change or a
    // preemption alone changes nothing in the members.
    if is_lazy(&chosen) && user_change.is_none() {
        tracing::debug!(controller = NAME, template = %describe(&key), policy = %chosen.display(), "lazy policy: binding left until the template changes");
        return Ok(Next::Done);
    }
    let reference = object_reference(&obj, &watched.resource);
    let mut spec = match binding_spec(&template, &chosen) {
        Ok(s) => s,
        Err(e) => {
            // binding_spec fails only on the replica interpretation.
            ctx.events.publish_ref(&reference, true, REASON_GET_REPLICAS_FAILED, "GetReplicas", e.clone()).await;
            let msg = format!("Failed to apply policy({}) for {}: {e}", chosen.display(), describe(&key));
            ctx.events.publish_ref(&reference, true, REASON_APPLY_POLICY_FAILED, "ApplyPolicy", msg).await;
            return Ok(Next::Done);
        }
    };
    if ctx.config.workload_affinity && watched.namespaced {
        spec.workload_affinity_groups = workload_affinity_groups(&template, &chosen.spec);
    }
    if let (true, Some(wanted)) = (ctx.config.priority_based_scheduling, &chosen.spec.schedule_priority) {
        match schedule_priority(&ctx.client, wanted).await {
            Ok(priority) => spec.schedule_priority = Some(priority),
            Err(e) => {
                // No binding until the PriorityClass exists (Karmada's BuildResourceBinding
                // fails); the retry finds it once it is created.
                let msg = format!("Failed to apply policy({}) for {}: {e}", chosen.display(), describe(&key));
                ctx.events.publish_ref(&reference, true, REASON_APPLY_POLICY_FAILED, "ApplyPolicy", msg).await;
                return Err(Error::Template(format!("{}: {e}", describe(&key))));
            }
        }
    }
    let replicas_interpreted = flotilla_api::interpreter::get_replicas(&template).is_ok_and(|r| r.is_some());
    let changed = ensure_binding(&ctx, &key, watched.namespaced, &obj, &chosen, spec).await?;
    ctx.user_change_done(&key, user_change);
    if changed {
        if replicas_interpreted {
            ctx.events
                .publish_ref(&reference, false, REASON_GET_REPLICAS_SUCCEED, "GetReplicas", "Get replicas of resource template successfully.".into())
                .await;
        }
        let msg = format!("Apply policy({}) succeed", chosen.display());
        ctx.events.publish_ref(&reference, false, REASON_APPLY_POLICY_SUCCEED, "ApplyPolicy", msg).await;
    }
    Ok(Next::Done)
}

/// Karmada's `getWorkloadAffinityGroups`: `<key>=<value>` for each term whose key the
/// template's labels have; none when neither has.
pub fn workload_affinity_groups(template: &Value, spec: &PropagationSpec) -> Option<WorkloadAffinityGroups> {
    let w = spec.placement.as_ref()?.workload_affinity.as_ref()?;
    let labels = template.pointer("/metadata/labels").and_then(Value::as_object);
    let group = |term: &Option<flotilla_api::federation::karmada::policy::WorkloadAffinityTerm>| {
        let key = &term.as_ref()?.group_by_label_key;
        let value = labels?.get(key)?.as_str()?;
        Some(format!("{key}={value}"))
    };
    let groups = WorkloadAffinityGroups { affinity_group: group(&w.affinity), anti_affinity_group: group(&w.anti_affinity) };
    (groups.affinity_group.is_some() || groups.anti_affinity_group.is_some()).then_some(groups)
}

/// Karmada's priority resolution (`PriorityBasedScheduling`): a `KubePriorityClass` source
/// gives the named PriorityClass's value; the other sources are not supported upstream either.
async fn schedule_priority(client: &Client, wanted: &SchedulePriority) -> Result<BindingSchedulePriority, String> {
    match wanted.priority_class_source {
        Some(PriorityClassSource::KubePriorityClass) => {
            let name = wanted.priority_class_name.as_deref().unwrap_or_default();
            let api: Api<PriorityClass> = Api::all(client.clone());
            match api.get_opt(name).await {
                Ok(Some(pc)) => Ok(BindingSchedulePriority { priority: Some(pc.value.unwrap_or_default()) }),
                Ok(None) => Err(format!("PriorityClass {name:?} (scheduling.k8s.io/v1) not found")),
                Err(e) => Err(format!("reading PriorityClass {name:?}: {e}")),
            }
        }
        Some(source) => Err(format!("priority class source is {source:?}, but {source:?} is not supported yet")),
        None => Err("unsupported priority class source".into()),
    }
}

fn is_lazy(chosen: &Chosen) -> bool {
    chosen.spec.activation_preference == Some(ActivationPreference::Lazy)
}

/// Karmada's message for a preemption: `chosen` took the template from the policy `name` (in
/// `namespace`; a ClusterPropagationPolicy without).
fn preemption_message(chosen: &Chosen, namespace: Option<&str>, name: &str) -> String {
    let from = match namespace {
        Some(ns) => format!("propagation policy({ns}/{name})"),
        None => format!("cluster propagation policy({name})"),
    };
    match &chosen.namespace {
        Some(ns) => format!("Propagation policy({ns}/{}) preempted {from} successfully", chosen.name),
        None => format!("Cluster propagation policy({}) preempted {from} successfully", chosen.name),
    }
}

fn describe(key: &TemplateKey) -> String {
    match &key.namespace {
        Some(ns) => format!("{} {ns}/{}", key.kind.kind, key.name),
        None => format!("{} {}", key.kind.kind, key.name),
    }
}

fn object_reference(obj: &DynamicObject, ar: &ApiResource) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(ar.api_version.clone()),
        kind: Some(ar.kind.clone()),
        name: obj.metadata.name.clone(),
        namespace: obj.metadata.namespace.clone(),
        uid: obj.metadata.uid.clone(),
        resource_version: obj.metadata.resource_version.clone(),
        field_path: None,
    }
}

fn missing_dependent_override(ctx: &Context, chosen: &Chosen) -> Option<String> {
    let wanted = chosen.spec.dependent_overrides.as_ref()?;
    let ns = chosen.namespace.as_deref()?;
    let have: HashSet<String> = ctx.ops.state().iter().filter(|o| o.metadata.namespace.as_deref() == Some(ns)).map(|o| o.name_any()).collect();
    let missing: Vec<&String> = wanted.iter().filter(|w| !have.contains(*w)).collect();
    (!missing.is_empty()).then(|| missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
}

fn owner_of(obj: &DynamicObject, ar: &ApiResource) -> OwnerReference {
    OwnerReference {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
        name: obj.name_any(),
        uid: obj.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Create or update the binding; returns whether anything was written.
async fn ensure_binding(
    ctx: &Context,
    key: &TemplateKey,
    namespaced: bool,
    obj: &DynamicObject,
    chosen: &Chosen,
    mut spec: ResourceBindingSpec,
) -> Result<bool, Error> {
    let name = binding_name(&key.kind.kind, &key.name);
    let watched = ctx.watched(&key.kind).ok_or_else(|| Error::Template("kind no longer watched".into()))?;
    let (claim_labels, claim_annotations) = claim(chosen);
    let set = |m: &mut BTreeMap<String, String>, want: &BTreeMap<String, Option<String>>| {
        for (k, v) in want {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
    };
    if namespaced {
        let ns = key.namespace.clone().unwrap_or_default();
        let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
        let existing = api.get_opt(&name).await.map_err(api_err(format!("reading binding {ns}/{name}")))?;
        let mut rb = existing.clone().unwrap_or_else(|| ResourceBinding::new(&name, ResourceBindingSpec::default()));
        if let Some(old) = &existing {
            spec.clusters = old.spec.clusters.clone();
            spec.graceful_eviction_tasks = old.spec.graceful_eviction_tasks.clone();
            spec.required_by = old.spec.required_by.clone();
            spec.reschedule_triggered_at = old.spec.reschedule_triggered_at.clone();
        }
        rb.metadata.namespace = Some(ns.clone());
        set(rb.metadata.labels.get_or_insert_with(Default::default), &claim_labels);
        set(rb.metadata.annotations.get_or_insert_with(Default::default), &claim_annotations);
        rb.metadata
            .labels
            .get_or_insert_with(Default::default)
            .entry(RESOURCE_BINDING_PERMANENT_ID_LABEL.into())
            .or_insert_with(|| uuid::Uuid::new_v4().to_string());
        rb.metadata.owner_references = Some(vec![owner_of(obj, &watched.resource)]);
        if let Some(f) = flotilla_runtime::with_finalizer(rb.metadata.finalizers.as_ref(), BINDING_FINALIZER) {
            rb.metadata.finalizers = Some(f);
        }
        rb.spec = spec;
        if existing.as_ref().is_some_and(|e| {
            e.spec == rb.spec
                && e.metadata.labels == rb.metadata.labels
                && e.metadata.annotations == rb.metadata.annotations
                && e.metadata.owner_references == rb.metadata.owner_references
                && e.metadata.finalizers == rb.metadata.finalizers
        }) {
            return Ok(false);
        }
        let r = if existing.is_some() { api.replace(&name, &PostParams::default(), &rb).await } else { api.create(&PostParams::default(), &rb).await };
        match r {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Template(format!("binding {ns}/{name} changed meanwhile; retrying"))),
            Err(e) => Err(api_err(format!("writing binding {ns}/{name}"))(e)),
        }
    } else {
        let api: Api<ClusterResourceBinding> = Api::all(ctx.client.clone());
        let existing = api.get_opt(&name).await.map_err(api_err(format!("reading cluster binding {name}")))?;
        let mut crb = existing.clone().unwrap_or_else(|| ClusterResourceBinding::new(&name, ClusterResourceBindingSpec::default()));
        if let Some(old) = &existing {
            spec.clusters = old.spec.0.clusters.clone();
            spec.graceful_eviction_tasks = old.spec.0.graceful_eviction_tasks.clone();
            spec.required_by = old.spec.0.required_by.clone();
            spec.reschedule_triggered_at = old.spec.0.reschedule_triggered_at.clone();
        }
        set(crb.metadata.labels.get_or_insert_with(Default::default), &claim_labels);
        set(crb.metadata.annotations.get_or_insert_with(Default::default), &claim_annotations);
        crb.metadata
            .labels
            .get_or_insert_with(Default::default)
            .entry(CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL.into())
            .or_insert_with(|| uuid::Uuid::new_v4().to_string());
        crb.metadata.owner_references = Some(vec![owner_of(obj, &watched.resource)]);
        if let Some(f) = flotilla_runtime::with_finalizer(crb.metadata.finalizers.as_ref(), CLUSTER_RESOURCE_BINDING_FINALIZER) {
            crb.metadata.finalizers = Some(f);
        }
        crb.spec = ClusterResourceBindingSpec(spec);
        if existing.as_ref().is_some_and(|e| {
            e.spec == crb.spec
                && e.metadata.labels == crb.metadata.labels
                && e.metadata.annotations == crb.metadata.annotations
                && e.metadata.owner_references == crb.metadata.owner_references
                && e.metadata.finalizers == crb.metadata.finalizers
        }) {
            return Ok(false);
        }
        let r = if existing.is_some() { api.replace(&name, &PostParams::default(), &crb).await } else { api.create(&PostParams::default(), &crb).await };
        match r {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Template(format!("cluster binding {name} changed meanwhile; retrying"))),
            Err(e) => Err(api_err(format!("writing cluster binding {name}"))(e)),
        }
    }
}

/// The template is gone: delete its binding (as the garbage collector would through the owner
/// reference), but only a binding that refers to this kind and name.
async fn delete_binding(ctx: &Context, key: &TemplateKey, namespaced: bool) -> Result<(), Error> {
    let name = binding_name(&key.kind.kind, &key.name);
    let refers = |r: &ObjectReference| r.kind == key.kind.kind && r.name == key.name && r.api_version == key.kind.api_version;
    let result = if namespaced {
        let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), key.namespace.as_deref().unwrap_or("default"));
        match api.get_opt(&name).await.map_err(api_err(format!("reading binding {name}")))? {
            Some(rb) if refers(&rb.spec.resource) && rb.metadata.deletion_timestamp.is_none() => {
                api.delete(&name, &DeleteParams::background()).await.map(|_| ())
            }
            _ => Ok(()),
        }
    } else {
        let api: Api<ClusterResourceBinding> = Api::all(ctx.client.clone());
        match api.get_opt(&name).await.map_err(api_err(format!("reading cluster binding {name}")))? {
            Some(crb) if refers(&crb.spec.0.resource) && crb.metadata.deletion_timestamp.is_none() => {
                api.delete(&name, &DeleteParams::background()).await.map(|_| ())
            }
            _ => Ok(()),
        }
    };
    match result {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r.map_err(api_err(format!("deleting binding {name}"))),
    }
}

/// The policy let go of the template: remove the claim from the binding too (it stays, and
/// with it what runs in the members, as Karmada leaves it).
async fn release_binding(ctx: &Context, key: &TemplateKey, namespaced: bool) -> Result<(), Error> {
    let name = binding_name(&key.kind.kind, &key.name);
    let (labels, annotations) = unclaim();
    let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
    let r = if namespaced {
        Api::<ResourceBinding>::namespaced(ctx.client.clone(), key.namespace.as_deref().unwrap_or("default"))
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    } else {
        Api::<ClusterResourceBinding>::all(ctx.client.clone()).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
    };
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r.map_err(api_err(format!("releasing binding {name}"))),
    }
}

/// What the detector writes on a policy itself, as a merge patch guarded by its
/// resourceVersion: its permanent id when nothing else gave it one (a plain kube-apiserver host
/// has no Karmada webhook), and, once it is being deleted, the removal of the policy finalizer
/// Karmada's webhook adds (Flotilla's admission adds it too). Claims on templates and bindings
/// need no wait: a terminating policy is no candidate, so every template it claimed is
/// re-evaluated and released (or taken by another policy) when it is queued.
fn policy_patch(meta: &kube::api::ObjectMeta, id_label: &str, finalizer: &str) -> Option<Value> {
    if meta.deletion_timestamp.is_some() {
        let finalizers = flotilla_runtime::without_finalizer(meta.finalizers.as_ref(), finalizer)?;
        return Some(flotilla_runtime::finalizer_patch(finalizers, meta.resource_version.as_deref()));
    }
    if meta.labels.as_ref().is_some_and(|l| l.contains_key(id_label)) {
        return None;
    }
    Some(json!({"metadata": {"labels": {id_label: uuid::Uuid::new_v4().to_string()}, "resourceVersion": meta.resource_version}}))
}

/// Event reason for a policy Karmada's validating webhook would have refused (Flotilla's own).
pub const REASON_INVALID_POLICY: &str = "InvalidPolicy";

/// What Karmada's validating webhook would refuse in a policy's spec (after its defaults), as
/// one message; `None` when valid. Flotilla's API server refuses such a policy at admission; a
/// plain kube-apiserver host stores it, so the detector says so in a Warning Event on the policy
/// — and still uses it, as the host does.
fn invalid_policy_note(spec: &PropagationSpec) -> Option<String> {
    let mut spec = spec.clone();
    default_propagation_spec(&mut spec);
    let errors = validate_propagation_spec(&spec);
    (!errors.is_empty())
        .then(|| format!("Karmada's webhook would refuse this policy: {}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))
}

async fn patch_policy<K>(api: Api<K>, meta: &kube::api::ObjectMeta, id_label: &str, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(patch) = policy_patch(meta, id_label, finalizer) else { return Ok(()) };
    match api.patch(meta.name.as_deref().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        // A newer version is on its way through the watch.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        r => r.map(|_| ()),
    }
}

/// The name of the detector's policy worker (labels, finalizers and validation Events of
/// PropagationPolicies and ClusterPropagationPolicies), in metrics and spans.
pub const POLICY_NAME: &str = "resource-detector-policy";

/// A policy the policy worker looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PolicyKey {
    Namespaced(ObjectRef<PropagationPolicy>),
    Cluster(ObjectRef<ClusterPropagationPolicy>),
}

/// Label and finalize a policy, record an Event when it is invalid, watch the kinds it selects
/// and queue every template (any may change hands).
async fn reconcile_policy(key: PolicyKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let spec = match &key {
        PolicyKey::Namespaced(r) => {
            let Some(p) = ctx.pps.get(r) else { return Ok(Next::Done) };
            let api = Api::<PropagationPolicy>::namespaced(ctx.client.clone(), p.metadata.namespace.as_deref().unwrap_or("default"));
            patch_policy(api, &p.metadata, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PROPAGATION_POLICY_FINALIZER).await.map_err(api_err("labelling a policy"))?;
            if let Some(note) = invalid_policy_note(&p.spec).filter(|_| p.metadata.deletion_timestamp.is_none()) {
                ctx.events.publish(&*p, true, REASON_INVALID_POLICY, "Validate", note).await;
            }
            p.spec.clone()
        }
        PolicyKey::Cluster(r) => {
            let Some(p) = ctx.cpps.get(r) else { return Ok(Next::Done) };
            let api = Api::<ClusterPropagationPolicy>::all(ctx.client.clone());
            patch_policy(api, &p.metadata, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, CLUSTER_PROPAGATION_POLICY_FINALIZER)
                .await
                .map_err(api_err("labelling a cluster policy"))?;
            if let Some(note) = invalid_policy_note(&p.spec.0).filter(|_| p.metadata.deletion_timestamp.is_none()) {
                ctx.events.publish(&*p, true, REASON_INVALID_POLICY, "Validate", note).await;
            }
            p.spec.0.clone()
        }
    };
    for k in kinds_of(&spec.resource_selectors) {
        ensure_watch(&ctx, k);
    }
    ctx.enqueue_kinds(None);
    Ok(Next::Done)
}

/// Run the detector on `rt`'s shared informers until it shuts down: the template worker and
/// the policy worker.
pub async fn run(client: Client, rt: Runtime, config: Config) {
    let templates = rt.controller::<TemplateKey>(NAME).workers(config.workers).backoff(Duration::from_millis(50), Duration::from_secs(30));
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client: client.clone(),
        config: config.clone(),
        pps: rt.informers.store::<PropagationPolicy>(),
        cpps: rt.informers.store::<ClusterPropagationPolicy>(),
        ops: rt.informers.store::<OverridePolicy>(),
        kinds: Mutex::new(HashMap::new()),
        queue: templates.queue(),
        informers: rt.informers.clone(),
        user_changes: Mutex::new(HashMap::new()),
        change_seq: std::sync::atomic::AtomicU64::new(0),
    });
    // A policy gone for good (its finalizer removed) may leave templates to another; override
    // policies appearing wake templates waiting for them (`dependentOverrides`).
    let c = ctx.clone();
    rt.informers.subscribe::<PropagationPolicy>(move |_, deleted| {
        if deleted {
            c.enqueue_kinds(None)
        }
    });
    let c = ctx.clone();
    rt.informers.subscribe::<ClusterPropagationPolicy>(move |_, deleted| {
        if deleted {
            c.enqueue_kinds(None)
        }
    });
    let c = ctx.clone();
    rt.informers.subscribe::<OverridePolicy>(move |_, deleted| {
        if !deleted {
            c.enqueue_kinds(None)
        }
    });
    let policies = rt
        .controller::<PolicyKey>(POLICY_NAME)
        .backoff(Duration::from_millis(50), Duration::from_secs(30))
        .watches(|p: &PropagationPolicy, deleted| (!deleted).then(|| PolicyKey::Namespaced(ObjectRef::from_obj(p))))
        .watches(|p: &ClusterPropagationPolicy, deleted| (!deleted).then(|| PolicyKey::Cluster(ObjectRef::from_obj(p))));
    let c = ctx.clone();
    let policy_worker = policies.run(move |key| reconcile_policy(key, c.clone()));
    let template_worker = templates.run(move |key| reconcile(key, ctx.clone()));
    futures::future::join(policy_worker, template_worker).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_karmadas_own_groups_events_and_leases_are_skipped() {
        let kind = |api_version: &str, kind: &str| Kind { api_version: api_version.into(), kind: kind.into() };
        for skipped in [
            kind("policy.karmada.io/v1alpha1", "PropagationPolicy"),
            kind("work.karmada.io/v1alpha2", "ResourceBinding"),
            kind("apps.karmada.io/v1alpha1", "WorkloadRebalancer"),
            kind("types.kubefed.io/v1beta1", "FederatedDeployment"),
            kind("events.k8s.io/v1", "Event"),
            kind("v1", "Event"),
            kind("coordination.k8s.io/v1", "Lease"),
        ] {
            assert!(is_skipped(&skipped), "{skipped:?}");
        }
        for propagated in [kind("example-x.karmada.io/v1", "Widget"), kind("karmada.io/v1", "Thing"), kind("apps/v1", "Deployment"), kind("v1", "ConfigMap")] {
            assert!(!is_skipped(&propagated), "{propagated:?}");
        }
    }
    use flotilla_api::federation::karmada::policy::ClusterPropagationSpec;

    fn deploy(ns: &str, name: &str, labels: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": ns, "name": name, "labels": labels}})
    }

    fn selector(name: Option<&str>, labels: Option<Value>) -> ResourceSelector {
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "labelSelector": labels})).unwrap()
    }

    fn pp(ns: &str, name: &str, priority: i32, preempt: bool, sel: ResourceSelector) -> Arc<PropagationPolicy> {
        let mut p = PropagationPolicy::new(name, PropagationSpec { resource_selectors: vec![sel], priority: Some(priority), ..Default::default() });
        p.metadata.namespace = Some(ns.into());
        if preempt {
            p.spec.preemption = Some(PreemptionBehavior::Always);
        }
        Arc::new(p)
    }

    fn cpp(name: &str, priority: i32, sel: ResourceSelector) -> Arc<ClusterPropagationPolicy> {
        Arc::new(ClusterPropagationPolicy::new(
            name,
            ClusterPropagationSpec(PropagationSpec { resource_selectors: vec![sel], priority: Some(priority), ..Default::default() }),
        ))
    }

    #[test]
    fn explicit_then_implicit_priority_then_name() {
        let t = deploy("default", "nginx", json!({"app": "nginx"}));
        let all = selector(None, None);
        let by_label = selector(None, Some(json!({"matchLabels": {"app": "nginx"}})));
        let by_name = selector(Some("nginx"), None);
        let pick = |pps: Vec<Arc<PropagationPolicy>>| choose_policy(&t, &pps, &[], None).map(|c| c.name);
        assert_eq!(pick(vec![pp("default", "b", 0, false, all.clone()), pp("default", "a", 0, false, all.clone())]), Some("a".into()));
        assert_eq!(pick(vec![pp("default", "a", 0, false, all.clone()), pp("default", "z", 0, false, by_label.clone())]), Some("z".into()));
        assert_eq!(pick(vec![pp("default", "a", 0, false, by_label.clone()), pp("default", "z", 0, false, by_name.clone())]), Some("z".into()));
        assert_eq!(pick(vec![pp("default", "z", 0, false, by_name.clone()), pp("default", "y", 5, false, all.clone())]), Some("y".into()));
        // Another namespace's policy never applies; a non-matching one neither.
        assert_eq!(pick(vec![pp("other", "a", 9, false, all.clone()), pp("default", "b", 0, false, selector(Some("x"), None))]), None);
    }

    #[test]
    fn namespaced_policies_win_over_cluster_policies() {
        let t = deploy("default", "nginx", json!({}));
        let all = selector(None, None);
        let c = choose_policy(&t, &[pp("default", "low", -5, false, all.clone())], &[cpp("high", 100, all.clone())], None).unwrap();
        assert_eq!((c.namespace.as_deref(), c.name.as_str()), (Some("default"), "low"));
        let c = choose_policy(&t, &[], &[cpp("b", 0, all.clone()), cpp("a", 0, all.clone())], None).unwrap();
        assert_eq!((c.namespace, c.name.as_str()), (None, "a"));
    }

    #[test]
    fn a_claim_holds_unless_a_better_policy_preempts() {
        let t = deploy("default", "nginx", json!({}));
        let all = selector(None, None);
        let claimed = Some((Some("default"), "old"));
        let pps = vec![pp("default", "old", 0, false, all.clone()), pp("default", "better", 5, false, all.clone())];
        assert_eq!(choose_policy(&t, &pps, &[], claimed).unwrap().name, "old");
        let pps = vec![pp("default", "old", 0, false, all.clone()), pp("default", "better", 5, true, all.clone())];
        assert_eq!(choose_policy(&t, &pps, &[], claimed).unwrap().name, "better");
        // A CPP cannot take a template from a PP, even with preemption.
        let cpps = vec![cpp("cluster", 100, all.clone())];
        let mut c: Vec<Arc<ClusterPropagationPolicy>> = cpps.clone();
        Arc::make_mut(&mut c[0]).spec.0.preemption = Some(PreemptionBehavior::Always);
        assert_eq!(choose_policy(&t, &pps[..1], &c, claimed).unwrap().name, "old");
        // A PP with Always takes a template from any CPP.
        let pps = vec![pp("default", "pp", -1, true, all.clone())];
        assert_eq!(choose_policy(&t, &pps, &cpps, Some((None, "cluster"))).unwrap().name, "pp");
        // The claimed policy is gone: a fresh choice.
        assert_eq!(choose_policy(&t, &pps[..], &[], Some((Some("default"), "gone"))).unwrap().name, "pp");
    }

    #[test]
    fn a_policy_without_webhook_defaults_is_defaulted_for_the_binding() {
        // As a plain kube-apiserver host stores it: no spreadByField, no minGroups, Divided
        // without a division preference.
        let t = deploy("default", "nginx", json!({}));
        let mut p = pp("default", "p", 0, false, selector(None, None));
        Arc::make_mut(&mut p).spec.placement = Some(
            serde_json::from_value(json!({
                "spreadConstraints": [{"maxGroups": 2}],
                "replicaScheduling": {"replicaSchedulingType": "Divided"},
            }))
            .unwrap(),
        );
        let placement = choose_policy(&t, &[p], &[], None).unwrap().spec.placement.unwrap();
        assert_eq!(
            serde_json::to_value(&placement).unwrap(),
            json!({
                "spreadConstraints": [{"spreadByField": "cluster", "maxGroups": 2, "minGroups": 1}],
                "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"},
            })
        );
    }

    #[test]
    fn a_policy_gets_its_permanent_id_once_and_loses_its_finalizer_when_deleted() {
        let mut meta = kube::api::ObjectMeta { name: Some("p".into()), resource_version: Some("7".into()), ..Default::default() };
        // A plain host: no id yet.
        let patch = policy_patch(&meta, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PROPAGATION_POLICY_FINALIZER).unwrap();
        assert!(patch["metadata"]["labels"][PROPAGATION_POLICY_PERMANENT_ID_LABEL].as_str().is_some_and(|id| id.len() == 36));
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        // Labelled (by admission or by the patch above): nothing to do.
        meta.labels = Some([(PROPAGATION_POLICY_PERMANENT_ID_LABEL.to_string(), "id".to_string())].into());
        meta.finalizers = Some(vec!["other".into(), PROPAGATION_POLICY_FINALIZER.into()]);
        assert_eq!(policy_patch(&meta, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PROPAGATION_POLICY_FINALIZER), None);
        // Being deleted: Karmada's finalizer goes, others stay.
        meta.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            policy_patch(&meta, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PROPAGATION_POLICY_FINALIZER),
            Some(json!({"metadata": {"finalizers": ["other"], "resourceVersion": "7"}}))
        );
        // Deleted on a plain host, where no finalizer was ever added, or already released.
        meta.finalizers = Some(vec!["other".into()]);
        assert_eq!(policy_patch(&meta, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PROPAGATION_POLICY_FINALIZER), None);
        meta.labels = None;
        assert_eq!(policy_patch(&meta, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PROPAGATION_POLICY_FINALIZER), None);
    }

    #[test]
    fn what_karmadas_webhook_would_refuse_is_named() {
        // Preemption with a selector that names nothing: refused by Karmada, stored by a plain host.
        let p = pp("default", "p", 0, true, selector(None, None));
        let note = invalid_policy_note(&p.spec).unwrap();
        assert!(note.starts_with("Karmada's webhook would refuse this policy: spec.resourceSelectors[0].name: name cannot be empty"), "{note}");
        let p = pp("default", "p", 0, true, selector(Some("nginx"), None));
        assert_eq!(invalid_policy_note(&p.spec), None);
        // Validated after the defaults: a field-less spread constraint is fine.
        let mut p = pp("default", "p", 0, false, selector(None, None));
        Arc::make_mut(&mut p).spec.placement = Some(serde_json::from_value(json!({"spreadConstraints": [{"maxGroups": 2}]})).unwrap());
        assert_eq!(invalid_policy_note(&p.spec), None);
    }

    #[test]
    fn claims_are_karmadas_labels_and_annotations() {
        let c = Chosen {
            namespace: Some("default".into()),
            name: "nginx-propagation".into(),
            permanent_id: Some("id-1".into()),
            priority: 0,
            preemption: false,
            spec: Default::default(),
        };
        let (labels, annotations) = claim(&c);
        assert_eq!(labels[PROPAGATION_POLICY_PERMANENT_ID_LABEL], Some("id-1".into()));
        assert_eq!(annotations["propagationpolicy.karmada.io/namespace"], Some("default".into()));
        assert_eq!(annotations["propagationpolicy.karmada.io/name"], Some("nginx-propagation".into()));
        let t = json!({"metadata": {"labels": {PROPAGATION_POLICY_PERMANENT_ID_LABEL: "id-1"}, "annotations": {"propagationpolicy.karmada.io/namespace": "default", "propagationpolicy.karmada.io/name": "nginx-propagation"}}});
        assert_eq!(metadata_patch(&t, &labels, &annotations), None);
        assert_eq!(claimed_by(&t), Some((Some("default".into()), "nginx-propagation".into())));
        assert!(metadata_patch(&json!({"metadata": {}}), &labels, &annotations).is_some());
    }

    #[test]
    fn bindings_carry_replicas_and_the_policy_settings() {
        let t = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "default", "name": "nginx", "uid": "u1", "resourceVersion": "7"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let c = Chosen {
            namespace: Some("default".into()),
            name: "p".into(),
            permanent_id: Some("i".into()),
            priority: 0,
            preemption: false,
            spec: Default::default(),
        };
        let spec = binding_spec(&t, &c).unwrap();
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(spec.resource.uid.as_deref(), Some("u1"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.conflict_resolution, Some(ConflictResolution::Abort));
        // A policy's schedulePriority reaches the binding only through the PriorityBasedScheduling
        // gate (its PriorityClass resolved); without it the binding has none, as in Karmada.
        let prioritised = Chosen {
            spec: PropagationSpec {
                schedule_priority: Some(SchedulePriority {
                    priority_class_source: Some(PriorityClassSource::KubePriorityClass),
                    priority_class_name: Some("high".into()),
                }),
                ..Default::default()
            },
            ..c.clone()
        };
        assert_eq!(binding_spec(&t, &prioritised).unwrap().schedule_priority, None);

        // WorkloadAffinity: `<key>=<value>` for each term whose key the template carries.
        let affine: PropagationSpec = serde_json::from_value(json!({"resourceSelectors": [], "placement": {"workloadAffinity": {
            "affinity": {"groupByLabelKey": "app.group"}, "antiAffinity": {"groupByLabelKey": "tier"}}}}))
        .unwrap();
        let labelled = |labels: Value| json!({"metadata": {"name": "x", "labels": labels}});
        let groups = workload_affinity_groups(&labelled(json!({"app.group": "shop", "tier": "db"})), &affine).unwrap();
        assert_eq!((groups.affinity_group.as_deref(), groups.anti_affinity_group.as_deref()), (Some("app.group=shop"), Some("tier=db")));
        let groups = workload_affinity_groups(&labelled(json!({"tier": "db"})), &affine).unwrap();
        assert_eq!((groups.affinity_group, groups.anti_affinity_group.as_deref()), (None, Some("tier=db")));
        assert_eq!(workload_affinity_groups(&labelled(json!({"other": "x"})), &affine), None);
        assert_eq!(workload_affinity_groups(&labelled(json!({"tier": "db"})), &PropagationSpec::default()), None);
        assert!(is_reserved_namespace("karmada-es-m1") && is_reserved_namespace("kube-system") && !is_reserved_namespace("default"));
        // KubeFed's system namespace holds member credentials (KubeFedCluster Secrets).
        assert!(is_reserved_namespace("kube-federation-system"));
    }

    #[test]
    fn only_changes_beyond_status_count_as_template_changes() {
        let object = |v: Value| -> DynamicObject { serde_json::from_value(v).unwrap() };
        let base = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "d", "name": "web", "resourceVersion": "5", "generation": 1, "labels": {"app": "web"}},
            "spec": {"replicas": 2}});
        let print = specification_print(&object(base.clone()));
        let mut status_only = base.clone();
        status_only["status"] = json!({"replicas": 2, "readyReplicas": 2});
        status_only["metadata"]["resourceVersion"] = json!("6");
        assert_eq!(specification_print(&object(status_only)), print);
        let mut scaled = base.clone();
        scaled["spec"]["replicas"] = json!(3);
        scaled["metadata"]["generation"] = json!(2);
        assert_ne!(specification_print(&object(scaled)), print);
        let mut claimed = base.clone();
        claimed["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"] = json!("id");
        assert_ne!(specification_print(&object(claimed)), print);
    }
}
