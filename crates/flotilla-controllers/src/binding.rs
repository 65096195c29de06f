//! The binding controller, with Karmada's binding-status duties: every scheduled
//! ResourceBinding / ClusterResourceBinding becomes one Work per target cluster, and the Works'
//! status flows back into the binding and the resource template.
//!
//! Per target cluster (`spec.clusters` ∪ the clusters of `spec.requiredBy`) the template is
//! pruned, its replicas revised to the cluster's share (when the binding carries replicas),
//! ClusterOverridePolicies then OverridePolicies applied, Karmada's labels and annotations added,
//! and the Work `<name>-<hash>` written in `karmada-es-<cluster>`. Works of clusters no longer
//! targeted are deleted, except clusters a graceful eviction still keeps; a `Directly` eviction's
//! Work is deleted first and no Work is written until it is gone.
//!
//! Stateful failover (the `StatefulFailoverInjection` gate): a binding moved from one cluster
//! to one other by a `Directly` eviction gets the last task's `preservedLabelState` as labels
//! on the replacement's manifest, while that task lasts (Karmada's `injectReservedLabelState`).
//!
//! Status: `status.aggregatedStatus` (one item per target or still-evicting cluster with a Work,
//! sorted by cluster)
//! and the `FullyApplied` condition on the binding; the template's `.status` from the
//! interpreter's AggregateStatus, for the kinds that have one.
//!
//! Deletion: the binding's finalizer stays until its Works are gone.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::admission::karmada::prepare_work_manifest;
use flotilla_api::federation::flotilla::edge::EdgeOverride;
use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::karmada::names::{cluster_of_execution_space, execution_space, work_name};
use flotilla_api::federation::karmada::policy::{ClusterOverridePolicy, ConflictResolution, OverridePolicy, PurgeMode};
use flotilla_api::federation::karmada::work::{
    AggregatedStatusItem, BINDING_FINALIZER, BindingKey, CLUSTER_RESOURCE_BINDING_FINALIZER, CLUSTER_RESOURCE_BINDING_NAME_ANNOTATION,
    CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL, CONFLICT_RESOLUTION_ANNOTATION, ClusterResourceBinding, EXECUTION_FINALIZER, MANAGED_LABEL,
    RESOURCE_BINDING_NAME_ANNOTATION, RESOURCE_BINDING_NAMESPACE_ANNOTATION, RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding, ResourceBindingSpec,
    ResourceBindingStatus, TEMPLATE_GENERATION_ANNOTATION, TEMPLATE_UID_ANNOTATION, WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, WORK_PERMANENT_ID_LABEL,
    Work, WorkSpec, WorkloadTemplate, binding_of_work,
};
use flotilla_api::interpreter::{self, Health};
use flotilla_api::overrides::{self, AppliedOverrides};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use flotilla_runtime::Next;
use flotilla_runtime::{Events, condition, condition_status, finalizer_patch, set_condition, with_finalizer, without_finalizer};

pub const NAME: &str = "binding-controller";

/// Event reasons (Karmada's).
pub const REASON_SYNC_WORK_SUCCEED: &str = "SyncWorkSucceed";
pub const REASON_SYNC_WORK_FAILED: &str = "SyncWorkFailed";
pub const REASON_AGGREGATE_STATUS_SUCCEED: &str = "AggregateStatusSucceed";
pub const REASON_AGGREGATE_STATUS_FAILED: &str = "AggregateStatusFailed";

/// The binding condition saying whether every target cluster applied its Work.
pub const CONDITION_FULLY_APPLIED: &str = "FullyApplied";
pub const REASON_FULLY_APPLIED_SUCCESS: &str = "FullyAppliedSuccess";
pub const REASON_FULLY_APPLIED_FAILED: &str = "FullyAppliedFailed";
pub const MESSAGE_FULLY_APPLIED_SUCCESS: &str = "All works have been successfully applied";
pub const MESSAGE_FULLY_APPLIED_FAILED: &str = "Failed to apply all works, see status.aggregatedStatus for details";

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// How soon to look again while Works are still being deleted or a template kind is
    /// not served yet.
    pub retry: Duration,
    /// The `StatefulFailoverInjection` gate: put a failover's preserved state on the replacement.
    pub inject_preserved_state: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 4, retry: Duration::from_secs(2), inject_preserved_state: false }
    }
}

/// A binding of either scope, as this controller needs it.
#[derive(Clone, Debug)]
pub struct Binding {
    pub key: BindingKey,
    pub meta: ObjectMeta,
    pub spec: ResourceBindingSpec,
    pub status: ResourceBindingStatus,
}

impl Binding {
    pub fn of_rb(rb: &ResourceBinding) -> Binding {
        Binding {
            key: BindingKey { namespace: rb.metadata.namespace.clone(), name: rb.name_any() },
            meta: rb.metadata.clone(),
            spec: rb.spec.clone(),
            status: rb.status.clone().unwrap_or_default(),
        }
    }

    pub fn of_crb(crb: &ClusterResourceBinding) -> Binding {
        Binding {
            key: BindingKey { namespace: None, name: crb.name_any() },
            meta: crb.metadata.clone(),
            spec: crb.spec.0.clone(),
            status: crb.status.clone().unwrap_or_default(),
        }
    }

    fn is_cluster_scoped(&self) -> bool {
        self.key.namespace.is_none()
    }

    /// The permanent-id label key of this binding's kind.
    pub fn id_label(&self) -> &'static str {
        if self.is_cluster_scoped() { CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL } else { RESOURCE_BINDING_PERMANENT_ID_LABEL }
    }

    pub fn permanent_id(&self) -> Option<&str> {
        self.meta.labels.as_ref()?.get(self.id_label()).map(String::as_str)
    }

    fn finalizer(&self) -> &'static str {
        if self.is_cluster_scoped() { CLUSTER_RESOURCE_BINDING_FINALIZER } else { BINDING_FINALIZER }
    }

    /// The annotations naming this binding, on its Works and their manifests.
    fn reference_annotations(&self) -> Vec<(&'static str, String)> {
        match &self.key.namespace {
            Some(ns) => vec![(RESOURCE_BINDING_NAMESPACE_ANNOTATION, ns.clone()), (RESOURCE_BINDING_NAME_ANNOTATION, self.key.name.clone())],
            None => vec![(CLUSTER_RESOURCE_BINDING_NAME_ANNOTATION, self.key.name.clone())],
        }
    }
}

/// The clusters a binding's Works go to, with each one's replicas: the scheduling result,
/// plus the clusters of the bindings that depend on it (`spec.requiredBy`).
pub fn target_clusters(spec: &ResourceBindingSpec) -> BTreeMap<String, Option<i32>> {
    let mut out = BTreeMap::new();
    for c in spec.clusters.iter().flatten() {
        out.insert(c.name.clone(), c.replicas);
    }
    for snapshot in spec.required_by.iter().flatten() {
        for c in snapshot.clusters.iter().flatten() {
            out.entry(c.name.clone()).or_insert(None);
        }
    }
    out
}

/// Clusters whose Works stay although they are no longer targeted: graceful evictions that
/// have not finished (any purge mode but `Directly`).
fn evicting_clusters(spec: &ResourceBindingSpec) -> Vec<&str> {
    spec.graceful_eviction_tasks.iter().flatten().filter(|t| !purges_directly(t.purge_mode)).map(|t| t.from_cluster.as_str()).collect()
}

/// `Directly` (and its deprecated name `Immediately`): the old copy goes at once, and the new
/// ones wait until it has.
fn purges_directly(mode: Option<PurgeMode>) -> bool {
    matches!(mode, Some(PurgeMode::Directly | PurgeMode::Immediately))
}

/// Clusters of `Directly` evictions: their Works go first, before any Work is written.
fn directly_evicted(spec: &ResourceBindingSpec) -> Vec<&str> {
    spec.graceful_eviction_tasks.iter().flatten().filter(|t| purges_directly(t.purge_mode)).map(|t| t.from_cluster.as_str()).collect()
}

/// Why a Work could not be rendered for a cluster.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{0}")]
    Interpret(String),
    #[error("{} {}", .0.event_message(.1), .0)]
    Override(overrides::OverrideError, String),
}

/// How many of one binding's Work writes are in flight at once.
const WORK_WRITES_IN_FLIGHT: usize = 16;

/// The manifest a cluster's Work carries, and the overrides applied to it.
pub fn render_manifest(
    template: &Value,
    binding: &Binding,
    cluster: &Cluster,
    replicas: Option<i32>,
    cops: &[ClusterOverridePolicy],
    ops: &[OverridePolicy],
    work: (&str, &str, &str),
) -> Result<(Value, AppliedOverrides), RenderError> {
    let (work_namespace, work_name, work_id) = work;
    let mut manifest = interpreter::prune_for_work(template).map_err(|e| RenderError::Interpret(e.to_string()))?;
    let binding_replicas = binding.spec.replicas.unwrap_or(0);
    if let (true, Some(share)) = (binding_replicas > 0, replicas)
        && let Some(revised) = interpreter::revise_replicas(&manifest, i64::from(share)).map_err(|e| RenderError::Interpret(e.to_string()))?
    {
        manifest = revised;
    }
    let chosen = overrides::applicable(&manifest, cluster, cops, ops);
    let applied = overrides::apply(&mut manifest, &chosen).map_err(|e| RenderError::Override(e, cluster.name_any()))?;

    let meta = manifest.as_object_mut().and_then(|m| m.get_mut("metadata")).and_then(Value::as_object_mut);
    let Some(meta) = meta else {
        return Err(RenderError::Interpret("the template has no metadata".into()));
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(MANAGED_LABEL.into(), json!("true"));
        if let Some(id) = binding.permanent_id() {
            labels.insert(binding.id_label().into(), json!(id));
        }
    }
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        for (k, v) in binding.reference_annotations() {
            annotations.insert(k.into(), json!(v));
        }
        annotations.insert(WORK_NAMESPACE_ANNOTATION.into(), json!(work_namespace));
        annotations.insert(WORK_NAME_ANNOTATION.into(), json!(work_name));
        if let Some(uid) = template.pointer("/metadata/uid").and_then(Value::as_str) {
            annotations.insert(TEMPLATE_UID_ANNOTATION.into(), json!(uid));
        }
        let generation = template.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
        annotations.insert(TEMPLATE_GENERATION_ANNOTATION.into(), json!(generation.to_string()));
        // The template's own annotation wins; otherwise the binding's policy decides.
        if !annotations.contains_key(CONFLICT_RESOLUTION_ANNOTATION) && binding.spec.conflict_resolution == Some(ConflictResolution::Overwrite) {
            annotations.insert(CONFLICT_RESOLUTION_ANNOTATION.into(), json!("overwrite"));
        }
    }
    prepare_work_manifest(&mut manifest, Some(work_id));
    Ok((manifest, applied))
}

/// Karmada's `injectReservedLabelState`: the labels of the last eviction task's
/// `preservedLabelState` go onto the manifest of `cluster` when the binding targets that one
/// cluster only, the task purges `Directly` (or `Immediately`) and the cluster is not one the
/// binding was on before the failover.
pub fn inject_preserved_label_state(spec: &ResourceBindingSpec, cluster: &str, targets: usize, manifest: &mut Value) {
    let Some(task) = spec.graceful_eviction_tasks.as_deref().and_then(<[_]>::last) else { return };
    if targets > 1 || !purges_directly(task.purge_mode) || task.clusters_before_failover.iter().flatten().any(|c| c == cluster) {
        return;
    }
    let Some(state) = task.preserved_label_state.as_ref().filter(|s| !s.is_empty()) else { return };
    let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if let Some(labels) = meta.entry("labels").or_insert_with(|| json!({})).as_object_mut() {
        for (k, v) in state {
            labels.insert(k.clone(), json!(v));
        }
    }
}

/// Whether dispatching to `cluster` is suspended for this binding.
fn dispatch_suspended(spec: &ResourceBindingSpec, cluster: &str) -> bool {
    let Some(s) = &spec.suspension else { return false };
    s.suspension.dispatching == Some(true)
        || s.suspension.dispatching_on_clusters.as_ref().and_then(|c| c.cluster_names.as_ref()).is_some_and(|names| names.iter().any(|n| n == cluster))
}

/// The Work a cluster gets.
fn desired_work(binding: &Binding, namespace: &str, name: &str, work_id: &str, manifest: Value, applied: &AppliedOverrides, cluster: &str) -> Work {
    let mut labels = BTreeMap::from([(WORK_PERMANENT_ID_LABEL.to_string(), work_id.to_string())]);
    if let Some(id) = binding.permanent_id() {
        labels.insert(binding.id_label().into(), id.into());
    }
    let mut annotations: BTreeMap<String, String> = binding.reference_annotations().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    for (k, v) in applied.annotations() {
        annotations.insert(k.into(), v);
    }
    if let Some(v) = manifest.pointer(&format!("/metadata/annotations/{}", CONFLICT_RESOLUTION_ANNOTATION.replace('/', "~1"))).and_then(Value::as_str) {
        annotations.insert(CONFLICT_RESOLUTION_ANNOTATION.into(), v.into());
    }
    let mut work = Work::new(
        name,
        WorkSpec {
            workload: Some(WorkloadTemplate { manifests: Some(vec![manifest]) }),
            suspend_dispatching: dispatch_suspended(&binding.spec, cluster).then_some(true),
            preserve_resources_on_deletion: binding.spec.preserve_resources_on_deletion,
        },
    );
    work.metadata.namespace = Some(namespace.into());
    work.metadata.labels = Some(labels);
    work.metadata.annotations = Some(annotations);
    work.metadata.finalizers = Some(vec![EXECUTION_FINALIZER.into()]);
    work
}

/// Whether `have` already is `want` in everything the binding controller owns.
fn work_matches(have: &Work, want: &Work) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>, have: &Option<BTreeMap<String, String>>| {
        want.iter().flatten().all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    have.spec == want.spec && subset(&want.metadata.labels, &have.metadata.labels) && subset(&want.metadata.annotations, &have.metadata.annotations)
}

/// The aggregated-status item of one cluster's Work.
pub fn status_item(cluster: &str, work: &Work) -> AggregatedStatusItem {
    let applied = condition_status(work.status.as_ref().and_then(|s| s.conditions.as_deref()), "Applied");
    let manifest = work.status.as_ref().and_then(|s| s.manifest_statuses.as_ref()).and_then(|m| m.first());
    AggregatedStatusItem {
        cluster_name: cluster.into(),
        status: manifest.and_then(|m| m.status.clone()),
        applied: Some(applied.is_some_and(|c| c.status == "True")),
        applied_message: applied.filter(|c| c.status != "True").map(|c| c.message.clone()).filter(|m| !m.is_empty()),
        health: Some(manifest.and_then(|m| m.health).unwrap_or(Health::Unknown)),
    }
}

/// The binding condition that says whether every target cluster's status is current
/// (Flotilla's; Karmada has none): False naming the clusters that are not Ready, True again once
/// they are. Written only once some cluster was out of reach (`present`), so a binding whose
/// clusters were always Ready gets no extra write.
pub const CONDITION_STATUS_CURRENT: &str = "MemberStatusCurrent";

fn current_condition(unreachable: &[String], present: bool) -> Option<Condition> {
    if unreachable.is_empty() {
        return present.then(|| condition(CONDITION_STATUS_CURRENT, true, "ClustersReady", "every target cluster is Ready: its status is current", None));
    }
    let message = format!(
        "not Ready, their status is unknown (their last report is kept in aggregatedStatus and left out of the template's status): {}",
        unreachable.join(", ")
    );
    Some(condition(CONDITION_STATUS_CURRENT, false, "ClusterNotReady", message, None))
}

/// The binding's `FullyApplied` condition: every target cluster has an applied Work.
pub fn fully_applied(targets: usize, items: &[AggregatedStatusItem]) -> (bool, &'static str, &'static str) {
    let all = targets > 0 && items.len() >= targets && items.iter().all(|i| i.applied == Some(true));
    if all { (true, REASON_FULLY_APPLIED_SUCCESS, MESSAGE_FULLY_APPLIED_SUCCESS) } else { (false, REASON_FULLY_APPLIED_FAILED, MESSAGE_FULLY_APPLIED_FAILED) }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key}: {step}: {source}")]
    Api { key: BindingKey, step: String, source: kube::Error },
    /// `terminal`: every failure was a Work that cannot be rendered (an override that does not
    /// apply, a KubeFed override that is invalid): retrying cannot help until the binding or a
    /// policy changes, and either queues the binding again.
    #[error("{key}: syncing works failed for {failed} of {total} clusters: {first}")]
    Sync { key: BindingKey, failed: usize, total: usize, first: String, terminal: bool },
}

impl flotilla_runtime::ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        matches!(self, Error::Sync { terminal: true, .. })
    }

    fn reason(&self) -> &str {
        REASON_SYNC_WORK_FAILED
    }
}

struct Context {
    client: Client,
    config: Config,
    events: Events,
    rbs: Store<ResourceBinding>,
    crbs: Store<ClusterResourceBinding>,
    works: Store<Work>,
    clusters: Store<Cluster>,
    ops: Store<OverridePolicy>,
    cops: Store<ClusterOverridePolicy>,
    /// Edge values adopted per binding (ADR 0032), applied after the user's overrides.
    edge_overrides: Store<EdgeOverride>,
    /// The Works of each binding, kept by the Work watch.
    index: Arc<WorkIndex>,
    /// Template kinds resolved through discovery.
    kinds: crate::kinds::Kinds,
    /// The process's informers: templates are read from the detector's caches.
    informers: flotilla_runtime::Informers,
}

impl Context {
    fn binding(&self, key: &BindingKey) -> Option<Binding> {
        match &key.namespace {
            Some(ns) => self.rbs.get(&ObjectRef::new(&key.name).within(ns)).map(|b| Binding::of_rb(&b)),
            None => self.crbs.get(&ObjectRef::new(&key.name)).map(|b| Binding::of_crb(&b)),
        }
    }

    /// Every Work of a binding, found by the binding's reference annotations (a permanent id
    /// may be missing on a binding written by hand).
    fn works_of(&self, key: &BindingKey) -> Vec<Arc<Work>> {
        let refs = self.index.works_of(key);
        refs.iter().filter_map(|(ns, name)| self.works.get(&ObjectRef::new(name).within(ns))).filter(|w| binding_of_work(w).as_ref() == Some(key)).collect()
    }

    /// The binding's EdgeOverride, if the edge has won anything of it.
    fn edge_override(&self, key: &BindingKey) -> Option<Arc<EdgeOverride>> {
        let (namespace, name) = crate::edge_sync::override_location(key);
        self.edge_overrides
            .get(&ObjectRef::new(&name).within(&namespace))
            .filter(|o| o.spec.binding.name == key.name && o.spec.binding.namespace == key.namespace)
    }

    fn api_err(&self, key: &BindingKey, step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let key = key.clone();
        let step = step.into();
        move |source| Error::Api { key, step, source }
    }
}

/// What of a Cluster can change a binding's Works: whether it exists, its labels and spec
/// (override policies select and rewrite by them) and its deletion — not its status.
type ClusterPrint = (Option<BTreeMap<String, String>>, String, bool);

fn cluster_fingerprint(c: &Cluster) -> ClusterPrint {
    (c.metadata.labels.clone(), serde_json::to_string(&c.spec).unwrap_or_default(), c.metadata.deletion_timestamp.is_some())
}

/// The Works of each binding (by the Works' reference annotations), so a reconcile looks up its
/// own Works instead of scanning every Work in the control plane.
#[derive(Default)]
struct WorkIndex {
    inner: Mutex<WorkIndexInner>,
}

#[derive(Default)]
struct WorkIndexInner {
    by_binding: flotilla_runtime::MultiIndex<BindingKey, (String, String)>,
    binding_of: HashMap<(String, String), BindingKey>,
}

impl WorkIndex {
    /// Record a Work event: `binding` is the binding the Work now names (if any).
    fn record(&self, w: &Work, binding: Option<BindingKey>, deleted: bool) {
        let work = (w.metadata.namespace.clone().unwrap_or_default(), w.name_any());
        let mut inner = self.inner.lock();
        let binding = binding.filter(|_| !deleted);
        if let Some(old) = inner.binding_of.get(&work).cloned()
            && Some(&old) != binding.as_ref()
        {
            inner.by_binding.set(old, work.clone(), false);
            inner.binding_of.remove(&work);
        }
        if let Some(b) = binding {
            inner.by_binding.set(b.clone(), work.clone(), true);
            inner.binding_of.insert(work, b);
        }
    }

    fn works_of(&self, key: &BindingKey) -> Vec<(String, String)> {
        self.inner.lock().by_binding.get(key).cloned().collect()
    }
}

async fn patch_finalizers(ctx: &Context, b: &Binding, finalizers: Vec<String>) -> Result<(), Error> {
    let patch = finalizer_patch(finalizers, b.meta.resource_version.as_deref());
    let r = match &b.key.namespace {
        Some(ns) => {
            Api::<ResourceBinding>::namespaced(ctx.client.clone(), ns).patch(&b.key.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
        }
        None => Api::<ClusterResourceBinding>::all(ctx.client.clone()).patch(&b.key.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ()),
    };
    match r {
        // Changed or gone meanwhile: the watch brings the news.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        r => r.map_err(ctx.api_err(&b.key, "updating finalizers")),
    }
}

async fn publish_binding_event(ctx: &Context, b: &Binding, warning: bool, reason: &str, note: String) {
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("work.karmada.io/v1alpha2".into()),
        kind: Some(if b.is_cluster_scoped() { "ClusterResourceBinding" } else { "ResourceBinding" }.into()),
        name: Some(b.key.name.clone()),
        namespace: b.key.namespace.clone(),
        uid: b.meta.uid.clone(),
        resource_version: None,
        field_path: None,
    };
    ctx.events.publish_ref(&reference, warning, reason, "SyncWork", note).await;
}

/// A SyncWork Event, as Karmada records it: on the binding and on its template (where users
/// look Events up).
async fn publish_sync_event(ctx: &Context, b: &Binding, template: &Value, warning: bool, reason: &str, note: String) {
    publish_binding_event(ctx, b, warning, reason, note.clone()).await;
    ctx.events.publish_ref(&template_reference(template), warning, reason, "SyncWork", note).await;
}

fn template_reference(template: &Value) -> k8s_openapi::api::core::v1::ObjectReference {
    let s = |p: &str| template.pointer(p).and_then(Value::as_str).map(str::to_string);
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: s("/apiVersion"),
        kind: s("/kind"),
        name: s("/metadata/name"),
        namespace: s("/metadata/namespace"),
        uid: s("/metadata/uid"),
        resource_version: None,
        field_path: None,
    }
}

async fn reconcile(key: BindingKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(b) = ctx.binding(&key) else {
        return Ok(Next::Done);
    };
    if b.meta.deletion_timestamp.is_some() {
        return delete_works(&ctx, &b).await;
    }
    if let Some(f) = with_finalizer(b.meta.finalizers.as_ref(), b.finalizer()) {
        patch_finalizers(&ctx, &b, f).await?;
        return Ok(Next::Done);
    }
    let resource = &b.spec.resource;
    let Some(ar) = ctx.kinds.resolve(&ctx.client, &resource.api_version, &resource.kind).await.map_err(ctx.api_err(&key, "discovering the template kind"))?
    else {
        return Ok(Next::After(ctx.config.retry));
    };
    let api: Api<DynamicObject> = match &resource.namespace {
        Some(ns) if !ns.is_empty() => Api::namespaced_with(ctx.client.clone(), ns, &ar),
        _ => Api::all_with(ctx.client.clone(), &ar),
    };
    let template = match cached_template(&ctx, &ar, resource) {
        Some(t) => t,
        None => match api.get_opt(&resource.name).await.map_err(ctx.api_err(&key, "reading the template"))? {
            Some(t) => serde_json::to_value(&t).unwrap_or_default(),
            // The detector deletes the binding of a deleted template.
            None => return Ok(Next::Done),
        },
    };
    // Status is aggregated even when some Work could not be written: FullyApplied then says so.
    let synced = sync_works(&ctx, &b, &template).await;
    aggregate(&ctx, &b, &template, &api).await?;
    synced
}

/// The template from the informer the detector shares (no request), when the cache holds the
/// version the binding was made from or a later one; else `None`, and the API server is asked.
fn cached_template(ctx: &Context, ar: &kube::api::ApiResource, resource: &flotilla_api::federation::karmada::work::ObjectReference) -> Option<Value> {
    let cached = crate::kinds::cached(&ctx.informers.dynamic_store(ar), ar, resource.namespace.as_deref(), &resource.name)?;
    // Revisions are the store's counters: a cache behind the binding is never used.
    let revision = |rv: Option<&str>| rv.and_then(|v| v.parse::<u64>().ok());
    let (have, want) = (revision(cached.metadata.resource_version.as_deref()), revision(resource.resource_version.as_deref()));
    if want.is_some_and(|want| have.is_none_or(|have| have < want)) {
        return None;
    }
    if resource.uid.as_deref().is_some_and(|uid| cached.metadata.uid.as_deref() != Some(uid)) {
        return None;
    }
    crate::kinds::template_json(&cached, ar).ok()
}

/// Writes the Work of every target cluster and deletes the orphans.
async fn sync_works(ctx: &Context, b: &Binding, template: &Value) -> Result<Next, Error> {
    // Karmada's checkDirectPurgeOrphanWorks: a `Directly` eviction's Work is deleted first and
    // no Work is written until it is gone (no two copies at once, for exactly-once workloads).
    let directly = directly_evicted(&b.spec);
    let waiting: Vec<Arc<Work>> = ctx
        .works_of(&b.key)
        .into_iter()
        .filter(|w| w.metadata.namespace.as_deref().and_then(cluster_of_execution_space).is_some_and(|c| directly.contains(&c)))
        .collect();
    if !waiting.is_empty() {
        for w in waiting.iter().filter(|w| w.metadata.deletion_timestamp.is_none()) {
            let ns = w.metadata.namespace.clone().unwrap_or_default();
            match Api::<Work>::namespaced(ctx.client.clone(), &ns).delete(&w.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(ctx.api_err(&b.key, format!("deleting the directly evicted work in {ns}"))(e)),
            }
        }
        return Ok(Next::After(ctx.config.retry));
    }
    let targets = target_clusters(&b.spec);
    let kind = b.spec.resource.kind.as_str();
    let name = work_name(kind, &b.spec.resource.name, b.spec.resource.namespace.as_deref());
    let ops: Vec<OverridePolicy> = ctx.ops.state().iter().map(|p| (**p).clone()).collect();
    let cops: Vec<ClusterOverridePolicy> = ctx.cops.state().iter().map(|p| (**p).clone()).collect();
    let edge = ctx.edge_override(&b.key);
    // Clusters whose object the edge deleted, and the edge won: no Work there.
    let mut dropped_at_edge = Vec::new();
    let mut failures = Vec::new();
    // Failures that retrying cannot mend (a Work that cannot be rendered).
    let mut unrenderable = 0usize;
    let mut changed = 0usize;
    // Rendered first, written concurrently: a binding fanned out to a hundred members would
    // otherwise wait for a hundred writes one after another.
    let mut writes = Vec::new();
    for (cluster_name, replicas) in &targets {
        let Some(cluster) = ctx.clusters.get(&ObjectRef::new(cluster_name)) else {
            tracing::debug!(controller = NAME, binding = %b.key, cluster = %cluster_name, "target cluster not found; skipped");
            continue;
        };
        if cluster.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let namespace = execution_space(cluster_name);
        let existing = ctx.works.get(&ObjectRef::new(&name).within(&namespace));
        let cached_id = existing.as_ref().and_then(|w| w.metadata.labels.as_ref()?.get(WORK_PERMANENT_ID_LABEL).cloned());
        // A Work's permanent id never changes: member objects carry it, and a deletion leaves
        // alone an object whose id differs. The cache can lag a Work written moments ago, so
        // ask the API server before minting a new one.
        let work_id = match cached_id {
            Some(id) => id,
            None => match Api::<Work>::namespaced(ctx.client.clone(), &namespace).get_opt(&name).await {
                Ok(found) => {
                    found.and_then(|w| w.metadata.labels.as_ref()?.get(WORK_PERMANENT_ID_LABEL).cloned()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
                }
                Err(e) => return Err(ctx.api_err(&b.key, format!("reading the work in {namespace}"))(e)),
            },
        };
        // A KubeFed federated object's binding: the cluster's member object comes from it.
        let (source, replicas) = match flotilla_api::federation::kubefed::render::member_object_for_binding(&b.meta, template, cluster_name) {
            None => (std::borrow::Cow::Borrowed(template), *replicas),
            Some(Ok(member)) => (std::borrow::Cow::Owned(member), None),
            Some(Err(e)) => {
                failures.push((cluster_name.as_str(), format!("cluster {cluster_name}: {e}")));
                unrenderable += 1;
                continue;
            }
        };
        let (mut manifest, applied) = match render_manifest(&source, b, &cluster, replicas, &cops, &ops, (&namespace, &name, &work_id)) {
            Ok(r) => r,
            Err(e) => {
                if let RenderError::Override(err, cluster) = &e {
                    ctx.events
                        .publish_ref(
                            &template_reference(template),
                            true,
                            overrides::EVENT_REASON_APPLY_OVERRIDE_POLICY_FAILED,
                            "ApplyOverridePolicy",
                            err.event_message(cluster),
                        )
                        .await;
                }
                failures.push((cluster_name.as_str(), format!("cluster {cluster_name}: {e}")));
                unrenderable += 1;
                continue;
            }
        };
        if ctx.config.inject_preserved_state {
            inject_preserved_label_state(&b.spec, cluster_name, targets.len(), &mut manifest);
        }
        if let Some(edge) = &edge {
            match crate::edge_sync::apply_edge_override(&edge.spec, cluster_name, &mut manifest) {
                Ok(true) => {}
                Ok(false) => {
                    dropped_at_edge.push(cluster_name.as_str());
                    continue;
                }
                Err(e) => {
                    failures.push((cluster_name.as_str(), format!("cluster {cluster_name}: {e}")));
                    unrenderable += 1;
                    continue;
                }
            }
        }
        let want = desired_work(b, &namespace, &name, &work_id, manifest, &applied, cluster_name);
        if existing.as_ref().is_some_and(|have| work_matches(have, &want)) {
            continue;
        }
        let works: Api<Work> = Api::namespaced(ctx.client.clone(), &namespace);
        let name = name.clone();
        writes.push(async move {
            let result = match &existing {
                None => works.create(&PostParams::default(), &want).await.map(|_| ()),
                Some(have) => {
                    let mut next = (**have).clone();
                    next.spec = want.spec.clone();
                    next.metadata.labels.get_or_insert_default().extend(want.metadata.labels.clone().unwrap_or_default());
                    next.metadata.annotations.get_or_insert_default().extend(want.metadata.annotations.clone().unwrap_or_default());
                    works.replace(&name, &PostParams::default(), &next).await.map(|_| ())
                }
            };
            (cluster_name.as_str(), applied, result)
        });
    }
    let written: Vec<_> = futures::stream::iter(writes).buffered(WORK_WRITES_IN_FLIGHT).collect().await;
    for (cluster_name, applied, result) in written {
        match result {
            Ok(()) => {
                changed += 1;
                for rule in applied.cluster.iter().chain(&applied.namespaced) {
                    ctx.events
                        .publish_ref(
                            &template_reference(template),
                            false,
                            overrides::EVENT_REASON_APPLY_OVERRIDE_POLICY_SUCCEED,
                            "ApplyOverridePolicy",
                            rule.policy.event_message(cluster_name, true),
                        )
                        .await;
                }
            }
            // Someone else wrote it first (or the namespace is still being made): next round.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => failures.push((cluster_name, format!("cluster {cluster_name}: {}", s.message))),
            Err(e) => failures.push((cluster_name, format!("cluster {cluster_name}: {e}"))),
        }
    }
    // In the targets' order, as if written one after another.
    failures.sort_by_key(|(cluster, _)| *cluster);
    let mut failures: Vec<String> = failures.into_iter().map(|(_, failure)| failure).collect();

    // Works of clusters no longer targeted.
    let keep = evicting_clusters(&b.spec);
    for w in ctx.works_of(&b.key) {
        let ns = w.metadata.namespace.as_deref().unwrap_or_default();
        let Some(cluster) = cluster_of_execution_space(ns) else { continue };
        let targeted = targets.contains_key(cluster) && !dropped_at_edge.contains(&cluster);
        if targeted || keep.contains(&cluster) || w.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match Api::<Work>::namespaced(ctx.client.clone(), ns).delete(&w.name_any(), &DeleteParams::default()).await {
            Ok(_) => changed += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => failures.push(format!("deleting the work in {ns}: {e}")),
        }
    }

    if let Some(first) = failures.first() {
        let msg = format!("Failed to sync work of {}: {}", b.key, failures.join("; "));
        publish_sync_event(ctx, b, template, true, REASON_SYNC_WORK_FAILED, msg).await;
        let terminal = unrenderable == failures.len();
        return Err(Error::Sync { key: b.key.clone(), failed: failures.len(), total: targets.len(), first: first.clone(), terminal });
    }
    if changed > 0 {
        let what = match &b.key.namespace {
            Some(ns) => format!("ResourceBinding({ns}/{})", b.key.name),
            None => format!("ClusterResourceBinding({})", b.key.name),
        };
        publish_sync_event(ctx, b, template, false, REASON_SYNC_WORK_SUCCEED, format!("Sync work of {what} successful.")).await;
    }
    Ok(Next::Done)
}

/// `status.aggregatedStatus` and `FullyApplied` on the binding, then the template's status.
async fn aggregate(ctx: &Context, b: &Binding, template: &Value, api: &Api<DynamicObject>) -> Result<(), Error> {
    // Expected: the targets and the clusters graceful evictions still keep (Karmada's
    // ObtainBindingSpecExistingClusters).
    let mut targets = target_clusters(&b.spec);
    for c in evicting_clusters(&b.spec) {
        targets.entry(c.to_string()).or_insert(None);
    }
    // A cluster whose object the edge deleted, and the edge won (ADR 0032), has no Work to wait for.
    if let Some(edge) = ctx.edge_override(&b.key) {
        for c in edge.spec.clusters.iter().filter(|c| c.deleted) {
            targets.remove(&c.cluster);
        }
    }
    let works: HashMap<String, Arc<Work>> =
        ctx.works_of(&b.key).into_iter().filter_map(|w| Some((cluster_of_execution_space(w.metadata.namespace.as_deref()?)?.to_string(), w))).collect();
    let mut items: Vec<AggregatedStatusItem> = targets.keys().filter_map(|c| works.get(c).map(|w| status_item(c, w))).collect();
    // A cluster that is not Ready reports nothing current (karmada#2989): its item says health
    // Unknown and its last numbers stay out of the template's status.
    let unreachable: Vec<String> =
        targets.keys().filter(|c| ctx.clusters.get(&ObjectRef::new(c)).is_some_and(|cluster| !is_cluster_ready(&cluster))).cloned().collect();
    for item in items.iter_mut().filter(|i| unreachable.contains(&i.cluster_name)) {
        item.health = Some(Health::Unknown);
    }
    let (ok, reason, message) = fully_applied(targets.len(), &items);
    let mut conditions: Vec<Condition> = b.status.conditions.clone().unwrap_or_default();
    let mut cond_changed = set_condition(&mut conditions, condition(CONDITION_FULLY_APPLIED, ok, reason, message, None));
    if let Some(c) = current_condition(&unreachable, conditions.iter().any(|c| c.type_ == CONDITION_STATUS_CURRENT)) {
        cond_changed |= set_condition(&mut conditions, c);
    }
    let items_changed = b.status.aggregated_status.clone().unwrap_or_default() != items;
    if cond_changed || items_changed {
        let patch = json!({
            "metadata": {"resourceVersion": b.meta.resource_version},
            "status": {"aggregatedStatus": items, "conditions": conditions},
        });
        let r = match &b.key.namespace {
            Some(ns) => Api::<ResourceBinding>::namespaced(ctx.client.clone(), ns)
                .patch_status(&b.key.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ()),
            None => Api::<ClusterResourceBinding>::all(ctx.client.clone())
                .patch_status(&b.key.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ()),
        };
        match r {
            // A newer binding is on its way through the watch; it is aggregated then.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(()),
            r => r.map_err(ctx.api_err(&b.key, "writing the aggregated status"))?,
        }
    }
    let current: Vec<AggregatedStatusItem> = items.into_iter().filter(|i| !unreachable.contains(&i.cluster_name)).collect();
    if current.is_empty() && unreachable.is_empty() {
        return Ok(());
    }
    let reference = template_reference(template);
    match write_template_status(api, template, &current).await {
        Ok(TemplateStatus::Written) => {
            let msg = format!("Update resource({}) with AggregatedStatus successfully.", b.spec.resource.name);
            ctx.events.publish_ref(&reference, false, REASON_AGGREGATE_STATUS_SUCCEED, "AggregateStatus", msg).await;
            Ok(())
        }
        Ok(TemplateStatus::Unchanged | TemplateStatus::NoAggregator | TemplateStatus::Stale) => Ok(()),
        Ok(TemplateStatus::Invalid(e)) => {
            let msg = format!("Failed to aggregate status for {}: {e}", b.key);
            ctx.events.publish_ref(&reference, true, REASON_AGGREGATE_STATUS_FAILED, "AggregateStatus", msg).await;
            Ok(())
        }
        Err(e) => Err(ctx.api_err(&b.key, "writing the template status")(e)),
    }
}

/// What [`write_template_status`] did.
#[derive(Debug)]
pub enum TemplateStatus {
    /// The template's status was replaced by the aggregate.
    Written,
    /// The template already had that status.
    Unchanged,
    /// The interpreter has no aggregator for the kind (or it has no status subresource).
    NoAggregator,
    /// The template changed since it was read; the next round aggregates again.
    Stale,
    /// A member status did not decode: the interpreter's error.
    Invalid(interpreter::InterpretError),
}

/// Replaces the template's `.status` with the interpreter's aggregate of `items` (Karmada's
/// status controller updates the whole status, so a field no member reports any more is gone,
/// not merged over). Guarded by the template's resourceVersion.
pub async fn write_template_status(api: &Api<DynamicObject>, template: &Value, items: &[AggregatedStatusItem]) -> Result<TemplateStatus, kube::Error> {
    let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap_or_else(|_| jiff::Timestamp::now()).to_string();
    let status = match interpreter::aggregate_status(template, items, &now) {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(TemplateStatus::NoAggregator),
        Err(e) => return Ok(TemplateStatus::Invalid(e)),
    };
    if template.get("status") == Some(&status) || (status.is_null() && template.get("status").is_none()) {
        return Ok(TemplateStatus::Unchanged);
    }
    let mut replaced = template.clone();
    match replaced.as_object_mut() {
        Some(m) if status.is_null() => {
            m.remove("status");
        }
        Some(m) => {
            m.insert("status".into(), status);
        }
        None => return Ok(TemplateStatus::NoAggregator),
    }
    let name = template.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let body: DynamicObject = serde_json::from_value(replaced).map_err(kube::Error::SerdeError)?;
    match api.replace_status(name, &PostParams::default(), &body).await {
        Ok(_) => Ok(TemplateStatus::Written),
        // A kind without a status subresource keeps no aggregated status.
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 405) => Ok(TemplateStatus::NoAggregator),
        // A newer template brings a new round.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(TemplateStatus::Stale),
        Err(e) => Err(e),
    }
}

/// Deleting binding: delete its Works; drop the finalizer once they are gone.
async fn delete_works(ctx: &Context, b: &Binding) -> Result<Next, Error> {
    let works = ctx.works_of(&b.key);
    for w in &works {
        if w.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = w.metadata.namespace.clone().unwrap_or_default();
        match Api::<Work>::namespaced(ctx.client.clone(), &ns).delete(&w.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(ctx.api_err(&b.key, format!("deleting work {ns}/{}", w.name_any()))(e)),
        }
    }
    if works.is_empty() {
        if let Some(f) = without_finalizer(b.meta.finalizers.as_ref(), b.finalizer()) {
            patch_finalizers(ctx, b, f).await?;
        }
        return Ok(Next::Done);
    }
    Ok(Next::After(ctx.config.retry))
}

/// Run the binding controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let rbs = rt.informers.store::<ResourceBinding>();
    let crbs = rt.informers.store::<ClusterResourceBinding>();
    // Cluster and override-policy changes may change any binding's Works.
    let everything = {
        let (rbs, crbs) = (rbs.clone(), crbs.clone());
        move || -> Vec<BindingKey> {
            let rbs = rbs.state().into_iter().map(|b| BindingKey { namespace: b.metadata.namespace.clone(), name: b.name_any() });
            let crbs = crbs.state().into_iter().map(|b| BindingKey { namespace: None, name: b.name_any() });
            rbs.chain(crbs).collect()
        }
    };
    // The bindings targeting a cluster (its readiness changed: rare, so a scan will do).
    let placed_on = {
        let (rbs, crbs) = (rbs.clone(), crbs.clone());
        move |cluster: &str| -> Vec<BindingKey> {
            let rbs = rbs
                .state()
                .into_iter()
                .filter(|b| target_clusters(&b.spec).contains_key(cluster))
                .map(|b| BindingKey { namespace: b.metadata.namespace.clone(), name: b.name_any() })
                .collect::<Vec<_>>();
            let crbs = crbs
                .state()
                .into_iter()
                .filter(|b| target_clusters(&Binding::of_crb(b).spec).contains_key(cluster))
                .map(|b| BindingKey { namespace: None, name: b.name_any() });
            rbs.into_iter().chain(crbs).collect()
        }
    };
    let index = Arc::new(WorkIndex::default());
    let work_index = index.clone();
    let (on_cluster, on_op, on_cop) = (everything.clone(), everything.clone(), everything);
    let controller = rt
        .controller::<BindingKey>(NAME)
        .workers(config.workers)
        .backoff(Duration::from_millis(50), Duration::from_secs(60))
        .watches(|b: &ResourceBinding, _| Some(BindingKey { namespace: b.metadata.namespace.clone(), name: b.name_any() }))
        .watches(|b: &ClusterResourceBinding, _| Some(BindingKey { namespace: None, name: b.name_any() }))
        .watches(move |w: &Work, deleted| {
            let key = binding_of_work(w);
            work_index.record(w, key.clone(), deleted);
            key
        })
        // Status writes (health, resource summaries: one per member every probe interval) change
        // no Work; waking every binding on each of them kept the queue full.
        .watches_changes(move |old: Option<&Cluster>, c: &Cluster, deleted| {
            let changed = deleted || old.is_none_or(|old| cluster_fingerprint(old) != cluster_fingerprint(c));
            if changed {
                return on_cluster();
            }
            // Ready or not: the aggregated status of the bindings placed there changes.
            if old.is_some_and(|old| is_cluster_ready(old) != is_cluster_ready(c)) { placed_on(&c.name_any()) } else { Vec::new() }
        })
        .watches(|o: &EdgeOverride, _| Some(BindingKey { namespace: o.spec.binding.namespace.clone(), name: o.spec.binding.name.clone() }))
        .watches(move |_: &OverridePolicy, _| on_op())
        .watches(move |_: &ClusterOverridePolicy, _| on_cop());
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client,
        config,
        rbs,
        crbs,
        works: rt.informers.store::<Work>(),
        clusters: rt.informers.store::<Cluster>(),
        ops: rt.informers.store::<OverridePolicy>(),
        cops: rt.informers.store::<ClusterOverridePolicy>(),
        edge_overrides: rt.informers.store::<EdgeOverride>(),
        index,
        kinds: Default::default(),
        informers: rt.informers.clone(),
    });
    controller.run(move |key| reconcile(key, ctx.clone())).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::work::{BindingSnapshot, ManifestStatus, ResourceIdentifier, TargetCluster, WorkStatus};

    fn binding(spec: Value) -> Binding {
        let mut rb = ResourceBinding::new("nginx-deployment", serde_json::from_value(spec).unwrap());
        rb.metadata.namespace = Some("default".into());
        rb.metadata.labels = Some(BTreeMap::from([(RESOURCE_BINDING_PERMANENT_ID_LABEL.to_string(), "rb-id".to_string())]));
        Binding::of_rb(&rb)
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "nginx", "namespace": "default", "uid": "tmpl-uid", "generation": 3, "resourceVersion": "9",
                         "labels": {"app": "nginx"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "nginx"}},
                     "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}},
            "status": {"replicas": 5}
        })
    }

    fn cluster(name: &str) -> Cluster {
        serde_json::from_value(
            json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": {"syncMode": "Push"}}),
        )
        .unwrap()
    }

    #[test]
    fn evictions_keep_the_old_work_unless_directly() {
        let b = binding(json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"},
            "gracefulEvictionTasks": [
                {"fromCluster": "m1", "purgeMode": "Gracefully", "reason": "TaintUntolerated", "producer": "TaintManager"},
                {"fromCluster": "m2", "purgeMode": "Directly", "reason": "TaintUntolerated", "producer": "TaintManager"},
                {"fromCluster": "m3", "purgeMode": "Immediately", "reason": "TaintUntolerated", "producer": "TaintManager"},
                {"fromCluster": "m4", "reason": "ApplicationFailure", "producer": "x"},
            ],
        }));
        assert_eq!(evicting_clusters(&b.spec), ["m1", "m4"]);
        assert_eq!(directly_evicted(&b.spec), ["m2", "m3"]);
    }

    #[test]
    fn preserved_state_goes_only_to_the_one_new_cluster_of_a_direct_purge() {
        let spec = |mode: &str, before: Value| {
            binding(json!({
                "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "job"},
                "gracefulEvictionTasks": [
                    {"fromCluster": "m0", "purgeMode": "Directly", "reason": "TaintUntolerated", "producer": "TaintManager", "preservedLabelState": {"old": "x"}},
                    {"fromCluster": "m1", "purgeMode": mode, "reason": "TaintUntolerated", "producer": "TaintManager",
                     "preservedLabelState": {"example.com/job": "j-7"}, "clustersBeforeFailover": before},
                ],
            }))
            .spec
        };
        let injected = |spec: &ResourceBindingSpec, cluster: &str, targets: usize| {
            let mut m = json!({"metadata": {"name": "job", "labels": {"app": "job"}}});
            inject_preserved_label_state(spec, cluster, targets, &mut m);
            m["metadata"]["labels"].clone()
        };
        // The last task's state, and only it.
        assert_eq!(injected(&spec("Directly", Value::Null), "m2", 1), json!({"app": "job", "example.com/job": "j-7"}));
        assert_eq!(injected(&spec("Immediately", Value::Null), "m2", 1), json!({"app": "job", "example.com/job": "j-7"}));
        // Not when the binding spans clusters, the old copy stays a while, or the cluster was there before.
        assert_eq!(injected(&spec("Directly", Value::Null), "m2", 2), json!({"app": "job"}));
        assert_eq!(injected(&spec("Gracefully", Value::Null), "m2", 1), json!({"app": "job"}));
        assert_eq!(injected(&spec("Directly", json!(["m1", "m2"])), "m2", 1), json!({"app": "job"}));
        assert_eq!(injected(&spec("Directly", json!(["m1"])), "m2", 1), json!({"app": "job", "example.com/job": "j-7"}));
    }

    #[test]
    fn targets_join_the_schedule_and_dependents() {
        let spec: ResourceBindingSpec = ResourceBindingSpec {
            clusters: Some(vec![TargetCluster { name: "b".into(), replicas: Some(2), ..Default::default() }]),
            required_by: Some(vec![BindingSnapshot {
                name: "x".into(),
                clusters: Some(vec![TargetCluster { name: "a".into(), ..Default::default() }, TargetCluster { name: "b".into(), ..Default::default() }]),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let t = target_clusters(&spec);
        assert_eq!(t.into_iter().collect::<Vec<_>>(), vec![("a".into(), None), ("b".into(), Some(2))]);
    }

    #[test]
    fn manifest_gets_the_cluster_share_and_karmada_metadata() {
        let b = binding(json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"}, "replicas": 5,
                               "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}, "conflictResolution": "Overwrite"}));
        let (m, applied) =
            render_manifest(&deployment(), &b, &cluster("member1"), Some(2), &[], &[], ("karmada-es-member1", "nginx-687f7fb96f", "work-id")).unwrap();
        assert_eq!(m["spec"]["replicas"], 2);
        assert!(m.get("status").is_none());
        assert!(m["metadata"].get("uid").is_none() && m["metadata"].get("resourceVersion").is_none());
        let labels = &m["metadata"]["labels"];
        assert_eq!(labels[MANAGED_LABEL], "true");
        assert_eq!(labels[RESOURCE_BINDING_PERMANENT_ID_LABEL], "rb-id");
        assert_eq!(labels[WORK_PERMANENT_ID_LABEL], "work-id");
        assert_eq!(labels["app"], "nginx");
        let ann = &m["metadata"]["annotations"];
        assert_eq!(ann[RESOURCE_BINDING_NAMESPACE_ANNOTATION], "default");
        assert_eq!(ann[RESOURCE_BINDING_NAME_ANNOTATION], "nginx-deployment");
        assert_eq!(ann[WORK_NAME_ANNOTATION], "nginx-687f7fb96f");
        assert_eq!(ann[TEMPLATE_UID_ANNOTATION], "tmpl-uid");
        assert_eq!(ann[TEMPLATE_GENERATION_ANNOTATION], "3");
        assert_eq!(ann[CONFLICT_RESOLUTION_ANNOTATION], "overwrite");
        assert!(applied.cluster.is_empty() && applied.namespaced.is_empty());
        let w = desired_work(&b, "karmada-es-member1", "nginx-687f7fb96f", "work-id", m, &applied, "member1");
        assert_eq!(w.metadata.annotations.as_ref().unwrap()[CONFLICT_RESOLUTION_ANNOTATION], "overwrite");
        assert_eq!(w.metadata.labels.as_ref().unwrap()[WORK_PERMANENT_ID_LABEL], "work-id");
        assert_eq!(binding_of_work(&w), Some(b.key.clone()));
    }

    #[test]
    fn no_replicas_on_the_binding_leaves_the_template_count() {
        let b = binding(json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"}}));
        let (m, _) = render_manifest(&deployment(), &b, &cluster("m"), Some(2), &[], &[], ("ns", "n", "id")).unwrap();
        assert_eq!(m["spec"]["replicas"], 5);
        assert!(m["metadata"]["annotations"].get(CONFLICT_RESOLUTION_ANNOTATION).is_none());
    }

    #[test]
    fn overrides_apply_per_cluster() {
        let b = binding(json!({"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx"}}));
        let mut op: OverridePolicy = serde_json::from_value(json!({
            "apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy", "metadata": {"name": "img", "namespace": "default"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
                     "overrideRules": [{"targetCluster": {"clusterNames": ["member1"]},
                                        "overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "registry.example"}]}}]}
        }))
        .unwrap();
        op.metadata.namespace = Some("default".into());
        let (m1, a1) = render_manifest(&deployment(), &b, &cluster("member1"), None, &[], std::slice::from_ref(&op), ("ns", "n", "id")).unwrap();
        assert_eq!(m1["spec"]["template"]["spec"]["containers"][0]["image"], "registry.example/nginx:1.25");
        assert_eq!(a1.namespaced.len(), 1);
        let (m2, a2) = render_manifest(&deployment(), &b, &cluster("member2"), None, &[], &[op], ("ns", "n", "id")).unwrap();
        assert_eq!(m2["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.25");
        assert!(a2.namespaced.is_empty());
    }

    #[test]
    fn suspension_by_cluster_name() {
        let spec: ResourceBindingSpec = serde_json::from_value(json!({"resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c"},
            "suspension": {"dispatchingOnClusters": {"clusterNames": ["m2"]}}}))
        .unwrap();
        assert!(!dispatch_suspended(&spec, "m1"));
        assert!(dispatch_suspended(&spec, "m2"));
    }

    #[test]
    fn status_items_and_fully_applied() {
        let mut w = Work::new("n", WorkSpec::default());
        let applied_cond = condition("Applied", true, "AppliedSuccessful", "Manifest has been successfully applied", None);
        w.status = Some(WorkStatus {
            conditions: Some(vec![applied_cond]),
            manifest_statuses: Some(vec![ManifestStatus {
                identifier: ResourceIdentifier { ordinal: 0, version: "v1".into(), kind: "ConfigMap".into(), name: "c".into(), ..Default::default() },
                status: Some(json!({"replicas": 1})),
                health: Some(Health::Healthy),
                version: None,
                remote_status: None,
            }]),
        });
        let item = status_item("m1", &w);
        assert_eq!(item.applied, Some(true));
        assert_eq!(item.applied_message, None);
        assert_eq!(item.health, Some(Health::Healthy));
        assert!(fully_applied(1, std::slice::from_ref(&item)).0);
        assert_eq!(fully_applied(2, std::slice::from_ref(&item)).1, REASON_FULLY_APPLIED_FAILED);
        let failed = condition("Applied", false, "AppliedFailed", "Failed to apply all manifests (0/1): boom", None);
        w.status.as_mut().unwrap().conditions = Some(vec![failed]);
        let item = status_item("m1", &w);
        assert_eq!(item.applied, Some(false));
        assert_eq!(item.applied_message.as_deref(), Some("Failed to apply all manifests (0/1): boom"));
        assert_eq!(fully_applied(1, &[item]).2, MESSAGE_FULLY_APPLIED_FAILED);
    }

    fn work_of(namespace: &str, name: &str, binding: &str) -> Work {
        let mut w = Work::new(name, WorkSpec::default());
        w.metadata.namespace = Some(namespace.into());
        w.metadata.annotations = Some(BTreeMap::from([
            (RESOURCE_BINDING_NAMESPACE_ANNOTATION.to_string(), "default".to_string()),
            (RESOURCE_BINDING_NAME_ANNOTATION.to_string(), binding.to_string()),
        ]));
        w
    }

    #[test]
    fn the_work_index_follows_works_between_bindings_and_out() {
        let index = WorkIndex::default();
        let key = |b: &str| BindingKey { namespace: Some("default".into()), name: b.into() };
        let refs = |b: &str| {
            let mut v = index.works_of(&key(b));
            v.sort();
            v
        };
        let a1 = work_of("karmada-es-m1", "w", "a");
        let a2 = work_of("karmada-es-m2", "w", "a");
        index.record(&a1, binding_of_work(&a1), false);
        index.record(&a2, binding_of_work(&a2), false);
        assert_eq!(refs("a"), vec![("karmada-es-m1".to_string(), "w".to_string()), ("karmada-es-m2".to_string(), "w".to_string())]);
        // Re-pointed at another binding (annotations rewritten by hand): it moves.
        let moved = work_of("karmada-es-m2", "w", "b");
        index.record(&moved, binding_of_work(&moved), false);
        assert_eq!(refs("a"), vec![("karmada-es-m1".to_string(), "w".to_string())]);
        assert_eq!(refs("b"), vec![("karmada-es-m2".to_string(), "w".to_string())]);
        index.record(&a1, binding_of_work(&a1), true);
        assert!(refs("a").is_empty());
        let mut unowned = moved.clone();
        unowned.metadata.annotations = None;
        index.record(&unowned, binding_of_work(&unowned), false);
        assert!(refs("b").is_empty());
    }

    #[test]
    fn cluster_status_changes_wake_no_binding() {
        let c = cluster("m1");
        let mut with_status = c.clone();
        with_status.status = Some(serde_json::from_value(json!({"kubernetesVersion": "v1.31.0"})).unwrap());
        assert_eq!(cluster_fingerprint(&c), cluster_fingerprint(&with_status));
        let mut labelled = c.clone();
        labelled.metadata.labels = Some(BTreeMap::from([("region".to_string(), "eu".to_string())]));
        assert_ne!(cluster_fingerprint(&c), cluster_fingerprint(&labelled));
        let mut moved = c.clone();
        moved.spec.region = Some("eu".into());
        assert_ne!(cluster_fingerprint(&c), cluster_fingerprint(&moved));
    }

    #[test]
    fn a_cluster_not_ready_makes_the_status_not_current_and_its_return_current_again() {
        assert!(current_condition(&[], false).is_none(), "no write for bindings that never lost a cluster");
        let gone = current_condition(&["member2".to_string()], false).unwrap();
        assert_eq!((gone.type_.as_str(), gone.status.as_str(), gone.reason.as_str()), (CONDITION_STATUS_CURRENT, "False", "ClusterNotReady"));
        assert!(gone.message.contains("member2"));
        let back = current_condition(&[], true).unwrap();
        assert_eq!((back.status.as_str(), back.reason.as_str()), ("True", "ClustersReady"));
    }
}
