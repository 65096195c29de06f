//! The dependencies distributor (Karmada's, feature gate `PropagateDeps`, beta, on by default):
//! the ConfigMaps, Secrets, ServiceAccounts and PersistentVolumeClaims a workload references go
//! wherever the workload goes, and a ServiceImport's derived Service and imported EndpointSlices
//! wherever it goes.
//!
//! An *independent* ResourceBinding (one a policy made, with `spec.propagateDeps: true`) is
//! reconciled as Karmada does it: the template's dependencies (the interpreter's
//! InterpretDependency) are recorded, sorted, in its `resourcebinding.karmada.io/dependencies`
//! annotation; for each dependency that exists an *attached* ResourceBinding — named like any
//! binding (`<name>-<kind>`), owned by the dependency, labelled
//! `resourcebinding.karmada.io/depended-by-<hash of ns/name>` = the independent binding's
//! permanent id — gets a `spec.requiredBy` entry with the independent binding's scheduled
//! clusters. The binding controller sends an attached binding to the union of its requiredBy
//! clusters (and its own `spec.clusters`, when a policy schedules it too).
//!
//! An attached binding no policy placed (`spec.placement` unset) takes `conflictResolution` and
//! `preserveResourcesOnDeletion` from the bindings requiring it: any Overwrite wins, any true
//! wins, and a disagreement is a `DependencyPolicyConflict` Warning Event. A dependency a policy
//! selects itself keeps that policy's settings and scheduling; its binding (the same object) just
//! carries requiredBy as well.
//!
//! A binding that stops requiring a dependency (reference removed, `propagateDeps` turned off,
//! the binding deleted — its `karmada.io/binding-dependencies-distributor` finalizer waits for
//! this) loses its requiredBy entry and label; an attached binding left with no requiredBy and
//! no policy claim is deleted, and with it (through the binding controller) its Works and the
//! member copies. (Karmada leaves such a binding, empty, until its dependency is deleted; its
//! Works are removed all the same.)

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::names::{binding_name, binding_reference_key};
use flotilla_api::federation::karmada::policy::{CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, ConflictResolution, PROPAGATION_POLICY_PERMANENT_ID_LABEL};
use flotilla_api::federation::karmada::work::{
    BINDING_FINALIZER, BindingSnapshot, DEPENDED_BY_LABEL_PREFIX, DEPENDENCIES_ANNOTATION, DEPENDENCIES_DISTRIBUTOR_FINALIZER, ObjectReference,
    RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding, ResourceBindingSpec,
};
use flotilla_api::interpreter::{self, ObjectRef};
use flotilla_api::selector::LabelSelector;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;

use crate::kinds::Kinds;
use flotilla_runtime::{Events, finalizer_patch, with_finalizer, without_finalizer};
use flotilla_runtime::{MultiIndex, Next, WorkQueue, run_workers};

pub const NAME: &str = "dependencies-distributor";

/// Event reasons (Karmada's).
pub const REASON_GET_DEPENDENCIES_SUCCEED: &str = "GetDependenciesSucceed";
pub const REASON_GET_DEPENDENCIES_FAILED: &str = "GetDependenciesFailed";
pub const REASON_SYNC_TO_DEPENDENCIES_SUCCEED: &str = "SyncScheduleResultToDependenciesSucceed";
pub const REASON_SYNC_TO_DEPENDENCIES_FAILED: &str = "SyncScheduleResultToDependenciesFailed";
pub const REASON_DEPENDENCY_POLICY_CONFLICT: &str = "DependencyPolicyConflict";

#[derive(Clone, Debug)]
pub struct Config {
    /// Karmada's `--concurrent-dependent-resource-syncs` (default 2).
    pub workers: usize,
    /// How soon a binding whose template kind is not served yet is looked at again.
    pub retry: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 2, retry: Duration::from_secs(5) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {namespace}/{name}: {step}: {source}")]
    Api { namespace: String, name: String, step: String, source: kube::Error },
    #[error("binding {namespace}/{name}: {message}")]
    Sync { namespace: String, name: String, message: String },
}

/// An independent binding in the queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

/// The label an attached binding carries for each independent binding requiring it.
pub fn depended_by_label_key(namespace: &str, name: &str) -> String {
    format!("{DEPENDED_BY_LABEL_PREFIX}{}", binding_reference_key(Some(namespace), name))
}

/// The dependencies as the annotation records them: sorted by apiVersion, kind, namespace, name.
pub fn dependencies_annotation(deps: &[ObjectRef]) -> String {
    let mut deps = deps.to_vec();
    deps.sort_by(|a, b| (&a.api_version, &a.kind, &a.namespace, &a.name).cmp(&(&b.api_version, &b.kind, &b.namespace, &b.name)));
    serde_json::to_string(&deps).unwrap_or_default()
}

/// Whether `binding`'s recorded dependencies name the object (kind, namespace, name, labels).
pub fn names_dependency(binding: &ResourceBinding, api_version: &str, kind: &str, namespace: &str, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let Some(recorded) = binding.metadata.annotations.as_ref().and_then(|a| a.get(DEPENDENCIES_ANNOTATION)) else {
        return false;
    };
    let Ok(deps) = serde_json::from_str::<Vec<ObjectRef>>(recorded) else {
        return false;
    };
    deps.iter().any(|d| d.api_version == api_version && d.kind == kind && d.namespace == namespace && selects(d, name, labels))
}

fn selects(dep: &ObjectRef, name: &str, labels: &BTreeMap<String, String>) -> bool {
    if !dep.name.is_empty() {
        return dep.name == name;
    }
    let selector = dep.label_selector.as_ref().and_then(|s| serde_json::to_value(s).ok()).and_then(|v| LabelSelector::from_json(&v).ok());
    selector.is_some_and(|s| s.matches(labels))
}

/// Whether a policy claims the binding (it then has a placement and is scheduled on its own).
fn claimed(rb: &ResourceBinding) -> bool {
    rb.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PROPAGATION_POLICY_PERMANENT_ID_LABEL) || l.contains_key(CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL))
}

/// The requiredBy entry of `independent` merged into `existing`: replaced when present, appended
/// otherwise (Karmada's `mergeBindingSnapshot`).
pub fn merge_snapshot(existing: &[BindingSnapshot], new: BindingSnapshot) -> Vec<BindingSnapshot> {
    let mut out = existing.to_vec();
    match out.iter_mut().find(|s| s.namespace == new.namespace && s.name == new.name) {
        Some(s) => s.clusters = new.clusters,
        None => out.push(new),
    }
    out
}

/// `existing` without the entries of binding `namespace/name`.
pub fn without_snapshot(existing: &[BindingSnapshot], namespace: &str, name: &str) -> Vec<BindingSnapshot> {
    existing.iter().filter(|s| !(s.namespace.as_deref() == Some(namespace) && s.name == name)).cloned().collect()
}

/// The settings an attached binding takes from the bindings requiring it, and what they
/// disagree on: any `Overwrite` wins over Abort (unset is Abort), any `true` wins for
/// `preserveResourcesOnDeletion` (unset is false).
pub fn resolve_requirers(requirers: &[&ResourceBindingSpec]) -> (ConflictResolution, bool, Vec<&'static str>) {
    let overwrite = requirers.iter().filter(|s| s.conflict_resolution == Some(ConflictResolution::Overwrite)).count();
    let preserve = requirers.iter().filter(|s| s.preserve_resources_on_deletion == Some(true)).count();
    let mut conflicts = Vec::new();
    if overwrite > 0 && overwrite < requirers.len() {
        conflicts.push("ConflictResolution conflicted (Overwrite vs Abort)");
    }
    if preserve > 0 && preserve < requirers.len() {
        conflicts.push("PreserveResourcesOnDeletion conflicted (true vs false)");
    }
    let cr = if overwrite > 0 { ConflictResolution::Overwrite } else { ConflictResolution::Abort };
    (cr, preserve > 0, conflicts)
}

struct Context {
    client: Client,
    events: Events,
    config: Config,
    rbs: Store<ResourceBinding>,
    index: Arc<Mutex<Index>>,
    kinds: Kinds,
}

/// Which bindings name which objects, kept from the binding informer's changes, so that a
/// change to a ConfigMap finds the bindings that depend on it, and a requirer its attached
/// bindings, without reading every binding of the cache (with 10,000 bindings, a scan per
/// change made a cold start quadratic). Candidates from the index are checked against the
/// cached binding, so the index only narrows the search.
#[derive(Default)]
struct Index {
    /// A depended-by label key → the attached bindings (namespace, name) that carry it.
    attached: MultiIndex<String, (String, String)>,
    /// (namespace, apiVersion, kind, name) of a dependency named in a binding's recorded
    /// dependencies → the bindings (namespace, name) naming it.
    named: MultiIndex<(String, String, String, String), (String, String)>,
    /// (namespace, apiVersion, kind) → bindings whose recorded dependencies select objects of
    /// that kind by label: candidates for every change of that kind in their namespace.
    selecting: MultiIndex<(String, String, String), String>,
}

impl Index {
    /// Follow one change of the binding cache (`old` as cached before it).
    fn update(&mut self, old: Option<&ResourceBinding>, new: &ResourceBinding, deleted: bool) {
        if let Some(old) = old {
            self.entries(old, false);
        }
        self.entries(new, !deleted);
    }

    fn entries(&mut self, rb: &ResourceBinding, add: bool) {
        let ns = rb.metadata.namespace.clone().unwrap_or_default();
        let me = (ns.clone(), rb.name_any());
        for label in rb.metadata.labels.iter().flat_map(|l| l.keys()).filter(|k| k.starts_with(DEPENDED_BY_LABEL_PREFIX)) {
            self.attached.set(label.clone(), me.clone(), add);
        }
        let recorded = rb.metadata.annotations.as_ref().and_then(|a| a.get(DEPENDENCIES_ANNOTATION));
        for dep in recorded.and_then(|r| serde_json::from_str::<Vec<ObjectRef>>(r).ok()).unwrap_or_default() {
            if dep.name.is_empty() {
                self.selecting.set((ns.clone(), dep.api_version, dep.kind), me.1.clone(), add);
            } else {
                self.named.set((dep.namespace, dep.api_version, dep.kind, dep.name), me.clone(), add);
            }
        }
    }

    /// Bindings of `namespace` that may name the object (by name or by a label selector).
    fn naming(&self, namespace: &str, api_version: &str, kind: &str, name: &str) -> Vec<String> {
        let key = (namespace.to_string(), api_version.to_string(), kind.to_string(), name.to_string());
        let by_name = self.named.get(&key).filter(|(ns, _)| ns == namespace).map(|(_, n)| n.clone());
        let by_selector = self.selecting.get(&(key.0.clone(), key.1.clone(), key.2.clone())).cloned();
        let mut out: Vec<String> = by_name.chain(by_selector).collect();
        out.sort();
        out.dedup();
        out
    }
}

impl Context {
    fn api_err(&self, key: &Key, step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let (namespace, name, step) = (key.namespace.clone(), key.name.clone(), step.into());
        move |source| Error::Api { namespace, name, step, source }
    }

    /// The attached bindings naming `key` in their depended-by label.
    fn attached_to(&self, key: &Key) -> Vec<Arc<ResourceBinding>> {
        let label = depended_by_label_key(&key.namespace, &key.name);
        let candidates: Vec<(String, String)> = self.index.lock().attached.get(&label).cloned().collect();
        candidates
            .into_iter()
            .filter_map(|(ns, name)| self.binding(&ns, &name))
            .filter(|rb| {
                rb.metadata.namespace.as_deref() == Some(key.namespace.as_str()) && rb.metadata.labels.as_ref().is_some_and(|l| l.contains_key(&label))
            })
            .collect()
    }

    fn binding(&self, namespace: &str, name: &str) -> Option<Arc<ResourceBinding>> {
        self.rbs.get(&StoreRef::new(name).within(namespace))
    }
}

async fn reconcile(key: Key, ctx: Arc<Context>) -> Result<Next, Error> {
    let b = ctx.binding(&key.namespace, &key.name);
    let Some(b) = b.filter(|b| b.spec.propagate_deps == Some(true) && b.metadata.deletion_timestamp.is_none()) else {
        // Gone, being deleted or no longer propagating its dependencies: let go of them.
        for attached in ctx.attached_to(&key) {
            release(&ctx, &key, &attached).await?;
        }
        if let Some(b) = ctx.binding(&key.namespace, &key.name) {
            let f = without_finalizer(b.metadata.finalizers.as_ref(), DEPENDENCIES_DISTRIBUTOR_FINALIZER);
            write_finalizers(&ctx, &key, &b, f).await?;
        }
        return Ok(Next::Done);
    };
    let resource = &b.spec.resource;
    let Some(ar) = ctx.kinds.resolve(&ctx.client, &resource.api_version, &resource.kind).await.map_err(ctx.api_err(&key, "discovering the template kind"))?
    else {
        return Ok(Next::After(ctx.config.retry));
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &ar);
    // A template that is gone takes its binding with it (the detector deletes it).
    let Some(template) = api.get_opt(&resource.name).await.map_err(ctx.api_err(&key, "reading the template"))? else {
        return Ok(Next::Done);
    };
    let mut template_json = serde_json::to_value(&template).unwrap_or_default();
    template_json["apiVersion"] = json!(ar.api_version);
    template_json["kind"] = json!(ar.kind);
    let template_ref = template.object_ref(&ar);
    let deps = match interpreter::get_dependencies(&template_json) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(Next::Done),
        Err(e) => {
            ctx.events.publish_ref(&template_ref, true, REASON_GET_DEPENDENCIES_FAILED, "GetDependencies", e.to_string()).await;
            return Err(Error::Sync { namespace: key.namespace, name: key.name, message: e.to_string() });
        }
    };
    let f = with_finalizer(b.metadata.finalizers.as_ref(), DEPENDENCIES_DISTRIBUTOR_FINALIZER);
    if write_finalizers(&ctx, &key, &b, f).await? {
        // The watch brings the binding back with its finalizer.
        return Ok(Next::Done);
    }
    let recorded = dependencies_annotation(&deps);
    let mut changed = false;
    if b.metadata.annotations.as_ref().and_then(|a| a.get(DEPENDENCIES_ANNOTATION)) != Some(&recorded) {
        ctx.events
            .publish_ref(&template_ref, false, REASON_GET_DEPENDENCIES_SUCCEED, "GetDependencies", format!("Get dependencies({recorded}) succeed."))
            .await;
        let patch = json!({"metadata": {"annotations": {DEPENDENCIES_ANNOTATION: recorded}, "resourceVersion": b.metadata.resource_version}});
        patch_binding(&ctx, &key, patch).await?;
        changed = true;
    }
    let result = sync_attached(&ctx, &key, &b, &deps).await;
    match &result {
        Ok(c) if *c || changed => {
            ctx.events
                .publish(
                    &*b,
                    false,
                    REASON_SYNC_TO_DEPENDENCIES_SUCCEED,
                    "SyncScheduleResultToDependencies",
                    "Sync schedule results to dependencies succeed.".into(),
                )
                .await;
        }
        Ok(_) => {}
        Err(e) => ctx.events.publish(&*b, true, REASON_SYNC_TO_DEPENDENCIES_FAILED, "SyncScheduleResultToDependencies", e.to_string()).await,
    }
    result.map(|_| Next::Done)
}

/// Orphaned attached bindings released, every existing dependency's attached binding written;
/// returns whether anything was written.
async fn sync_attached(ctx: &Context, key: &Key, b: &ResourceBinding, deps: &[ObjectRef]) -> Result<bool, Error> {
    let mut dependents = Vec::new();
    for dep in deps {
        let Some(ar) = ctx.kinds.resolve(&ctx.client, &dep.api_version, &dep.kind).await.map_err(ctx.api_err(key, format!("discovering {}", dep.kind)))? else {
            continue;
        };
        let ns = if dep.namespace.is_empty() { key.namespace.as_str() } else { dep.namespace.as_str() };
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        if !dep.name.is_empty() {
            // A dependency that does not exist (yet) is skipped; its creation brings us back.
            if let Some(o) = api.get_opt(&dep.name).await.map_err(ctx.api_err(key, format!("reading {} {ns}/{}", dep.kind, dep.name)))? {
                dependents.push((ar.clone(), o));
            }
        } else {
            let list = api.list(&ListParams::default()).await.map_err(ctx.api_err(key, format!("listing {}", dep.kind)))?;
            dependents.extend(
                list.items.into_iter().filter(|o| selects(dep, &o.name_any(), o.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))).map(|o| (ar.clone(), o)),
            );
        }
    }
    let wanted: Vec<String> = dependents.iter().map(|(ar, o)| binding_name(&ar.kind, &o.name_any())).collect();
    let mut changed = false;
    for attached in ctx.attached_to(key) {
        if !wanted.contains(&attached.name_any()) {
            release(ctx, key, &attached).await?;
            changed = true;
        }
    }
    let snapshot = BindingSnapshot { namespace: Some(key.namespace.clone()), name: key.name.clone(), clusters: b.spec.clusters.clone() };
    let id = b.metadata.labels.as_ref().and_then(|l| l.get(RESOURCE_BINDING_PERMANENT_ID_LABEL)).cloned().unwrap_or_default();
    for (ar, o) in dependents {
        changed |= write_attached(ctx, key, &ar, &o, &snapshot, &id).await?;
    }
    Ok(changed)
}

fn owner_of(o: &DynamicObject, ar: &kube::core::ApiResource) -> OwnerReference {
    OwnerReference {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
        name: o.name_any(),
        uid: o.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Create or update the attached binding of dependency `o` with `snapshot` in its requiredBy.
async fn write_attached(
    ctx: &Context,
    key: &Key,
    ar: &kube::core::ApiResource,
    o: &DynamicObject,
    snapshot: &BindingSnapshot,
    id: &str,
) -> Result<bool, Error> {
    let name = binding_name(&ar.kind, &o.name_any());
    let ns = o.metadata.namespace.clone().unwrap_or_else(|| key.namespace.clone());
    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = api.get_opt(&name).await.map_err(ctx.api_err(key, format!("reading attached binding {ns}/{name}")))?;
    if existing.as_ref().is_some_and(|e| e.metadata.deletion_timestamp.is_some()) {
        // Its last requirer let it go and it is on its way out (its finalizer waits for its
        // Works): a requirer written into it now would be deleted with it, and nothing would
        // bring this binding back. Wait until it is gone, then create it afresh.
        return Err(Error::Sync {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            message: format!("attached binding {ns}/{name} is being deleted; it is created again once it is gone"),
        });
    }
    let owner = owner_of(o, ar);
    let resource = ObjectReference {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
        namespace: Some(ns.clone()),
        name: o.name_any(),
        uid: None,
        resource_version: o.metadata.resource_version.clone(),
    };
    let mut rb = existing.clone().unwrap_or_else(|| {
        let mut rb = ResourceBinding::new(&name, ResourceBindingSpec::default());
        rb.metadata.namespace = Some(ns.clone());
        rb.metadata.owner_references = Some(vec![owner.clone()]);
        rb.metadata.finalizers = Some(vec![BINDING_FINALIZER.to_string()]);
        rb.metadata.labels = Some(BTreeMap::from([(RESOURCE_BINDING_PERMANENT_ID_LABEL.to_string(), uuid::Uuid::new_v4().to_string())]));
        rb
    });
    if let Some(controller) = rb.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true))
        && controller.uid != owner.uid
    {
        // A binding left from an earlier object of the same name: wait for it to be collected.
        return Err(Error::Sync {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            message: format!("attached binding {ns}/{name} is owned by another object (uid {}); waiting for it to be garbage collected", controller.uid),
        });
    }
    rb.metadata.labels.get_or_insert_default().insert(depended_by_label_key(&key.namespace, &key.name), id.to_string());
    rb.spec.resource = resource;
    rb.spec.required_by = Some(merge_snapshot(rb.spec.required_by.as_deref().unwrap_or_default(), snapshot.clone()));
    if rb.spec.placement.is_none() {
        resolve_settings(ctx, &mut rb, &ns).await;
    }
    if existing.as_ref().is_some_and(|e| e.spec == rb.spec && e.metadata.labels == rb.metadata.labels) {
        return Ok(false);
    }
    let r = match existing {
        Some(_) => api.replace(&name, &PostParams::default(), &rb).await.map(|_| ()),
        None => api.create(&PostParams::default(), &rb).await.map(|_| ()),
    };
    r.map_err(ctx.api_err(key, format!("writing attached binding {ns}/{name}")))?;
    Ok(true)
}

/// conflictResolution and preserveResourcesOnDeletion of an attached binding no policy placed,
/// from the bindings its requiredBy names (cleared when it names none), with a Warning Event
/// when they disagree.
async fn resolve_settings(ctx: &Context, rb: &mut ResourceBinding, namespace: &str) {
    let requirers: Vec<Arc<ResourceBinding>> =
        rb.spec.required_by.iter().flatten().filter_map(|s| ctx.binding(s.namespace.as_deref().unwrap_or(namespace), &s.name)).collect();
    if requirers.is_empty() {
        rb.spec.conflict_resolution = None;
        rb.spec.preserve_resources_on_deletion = None;
        return;
    }
    let (cr, preserve, conflicts) = resolve_requirers(&requirers.iter().map(|r| &r.spec).collect::<Vec<_>>());
    rb.spec.conflict_resolution = Some(cr);
    rb.spec.preserve_resources_on_deletion = preserve.then_some(true);
    if !conflicts.is_empty() && rb.metadata.uid.is_some() {
        let note = format!("Dependency policy conflict detected: {}.", conflicts.join("; "));
        ctx.events.publish(&*rb, true, REASON_DEPENDENCY_POLICY_CONFLICT, "SyncScheduleResultToDependencies", note).await;
    }
}

/// Remove `key` from an attached binding; delete the binding when nothing requires it any more
/// and no policy claims it.
async fn release(ctx: &Context, key: &Key, attached: &ResourceBinding) -> Result<(), Error> {
    let name = attached.name_any();
    let ns = attached.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
    let mut rb = attached.clone();
    rb.metadata.labels.get_or_insert_default().remove(&depended_by_label_key(&key.namespace, &key.name));
    let remaining = without_snapshot(rb.spec.required_by.as_deref().unwrap_or_default(), &key.namespace, &key.name);
    let r = if remaining.is_empty() && !claimed(&rb) {
        if rb.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        tracing::debug!(controller = NAME, binding = %format!("{ns}/{name}"), "nothing requires the attached binding any more; deleting it");
        let dp = DeleteParams {
            preconditions: Some(kube::api::Preconditions { resource_version: rb.metadata.resource_version.clone(), uid: None }),
            ..DeleteParams::background()
        };
        api.delete(&name, &dp).await.map(|_| ())
    } else {
        rb.spec.required_by = (!remaining.is_empty()).then_some(remaining);
        if rb.spec.placement.is_none() {
            resolve_settings(ctx, &mut rb, &ns).await;
        }
        api.replace(&name, &PostParams::default(), &rb).await.map(|_| ())
    };
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r.map_err(ctx.api_err(key, format!("releasing attached binding {ns}/{name}"))),
    }
}

/// Write the binding's finalizers when they change (`Some`); returns whether it wrote.
async fn write_finalizers(ctx: &Context, key: &Key, b: &ResourceBinding, finalizers: Option<Vec<String>>) -> Result<bool, Error> {
    let Some(f) = finalizers else {
        return Ok(false);
    };
    patch_binding(ctx, key, finalizer_patch(f, b.metadata.resource_version.as_deref())).await?;
    Ok(true)
}

async fn patch_binding(ctx: &Context, key: &Key, patch: serde_json::Value) -> Result<(), Error> {
    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &key.namespace);
    match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ctx.api_err(key, "writing the binding")(e)),
    }
}

/// What of a binding the distributor reads: a change of anything else (status writes) queues
/// nothing.
type Print = (Option<i64>, bool, Option<bool>, bool, Option<String>);

fn print_of(rb: &ResourceBinding) -> Print {
    let has_finalizer = rb.metadata.finalizers.iter().flatten().any(|f| f == DEPENDENCIES_DISTRIBUTOR_FINALIZER);
    let recorded = rb.metadata.annotations.as_ref().and_then(|a| a.get(DEPENDENCIES_ANNOTATION)).cloned();
    (rb.metadata.generation, rb.metadata.deletion_timestamp.is_some(), rb.spec.propagate_deps, has_finalizer, recorded)
}

/// Queue the independent bindings of `namespace` whose recorded dependencies name the object.
fn wake_requirers(rbs: &Store<ResourceBinding>, index: &Mutex<Index>, queue: &WorkQueue<Key>, api_version: &str, kind: &str, meta: &kube::api::ObjectMeta) {
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return;
    };
    let labels = meta.labels.clone().unwrap_or_default();
    let candidates = index.lock().naming(ns, api_version, kind, name);
    for candidate in candidates {
        if let Some(rb) = rbs.get(&StoreRef::new(&candidate).within(ns))
            && names_dependency(&rb, api_version, kind, ns, name, &labels)
        {
            queue.add(Key { namespace: ns.to_string(), name: candidate });
        }
    }
}

/// Wake the bindings that name the objects of dependency kind `K` when one changes. The kind is
/// read as dynamic objects: the detector reads the same kinds that way when a policy selects
/// them, and both share one watch.
fn watch_dependency<K>(informers: &flotilla_runtime::Informers, rbs: Store<ResourceBinding>, index: Arc<Mutex<Index>>, queue: Arc<WorkQueue<Key>>)
where
    K: Resource<DynamicType = ()>,
{
    let resource = kube::api::ApiResource::erase::<K>(&());
    let (api_version, kind) = (resource.api_version.clone(), resource.kind.clone());
    informers.subscribe_dynamic(&resource, move |old, o, deleted| {
        if deleted || old.is_none_or(|old| old.metadata.resource_version != o.metadata.resource_version) {
            wake_requirers(&rbs, &index, &queue, &api_version, &kind, &o.metadata);
        }
    });
}

/// Run the distributor until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<Key>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let q = queue.clone();
    let seen: Mutex<HashMap<(String, String), Print>> = Mutex::default();
    let (rbs, rb_task) = rt.informers.watch::<ResourceBinding>(move |rb: &ResourceBinding, deleted| {
        let key = Key { namespace: rb.metadata.namespace.clone().unwrap_or_default(), name: rb.name_any() };
        let print = print_of(rb);
        let relevant = print.2 == Some(true) || print.3 || print.4.is_some();
        let changed = if deleted {
            seen.lock().remove(&(key.namespace.clone(), key.name.clone())).is_some()
        } else {
            seen.lock().insert((key.namespace.clone(), key.name.clone()), print.clone()).as_ref() != Some(&print)
        };
        if changed && relevant {
            q.add(key);
        }
    });
    // Subscribed before the dependency kinds: their first events already find it filled as far
    // as the binding cache is.
    let index: Arc<Mutex<Index>> = Arc::default();
    let i = index.clone();
    rt.informers.subscribe_changes::<ResourceBinding>(move |old, rb, deleted| i.lock().update(old, rb, deleted));
    watch_dependency::<ConfigMap>(&rt.informers, rbs.clone(), index.clone(), queue.clone());
    watch_dependency::<Secret>(&rt.informers, rbs.clone(), index.clone(), queue.clone());
    watch_dependency::<ServiceAccount>(&rt.informers, rbs.clone(), index.clone(), queue.clone());
    watch_dependency::<PersistentVolumeClaim>(&rt.informers, rbs.clone(), index.clone(), queue.clone());
    // A ServiceImport's: its derived Service and the imported EndpointSlices, which appear as
    // the exporting clusters report them.
    watch_dependency::<Service>(&rt.informers, rbs.clone(), index.clone(), queue.clone());
    watch_dependency::<EndpointSlice>(&rt.informers, rbs.clone(), index.clone(), queue.clone());
    let ctx = Arc::new(Context { events: Events::new(client.clone(), NAME), client, config: config.clone(), rbs, index, kinds: Kinds::default() });
    let workers = run_workers(queue, config.workers, NAME, move |key| reconcile(key, ctx.clone()));
    tokio::select! {
        _ = rb_task => tracing::warn!(controller = NAME, "binding watch ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::work::TargetCluster;

    fn snap(name: &str, clusters: &[&str]) -> BindingSnapshot {
        BindingSnapshot {
            namespace: Some("default".into()),
            name: name.into(),
            clusters: Some(clusters.iter().map(|c| TargetCluster { name: (*c).into(), ..Default::default() }).collect()),
        }
    }

    #[test]
    fn labels_and_annotation_are_karmadas() {
        assert_eq!(depended_by_label_key("test", "test-binding"), "resourcebinding.karmada.io/depended-by-5dbb6dc9c8");
        let deps = vec![
            ObjectRef { api_version: "v1".into(), kind: "Secret".into(), namespace: "default".into(), name: "s".into(), label_selector: None },
            ObjectRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: "default".into(), name: "c".into(), label_selector: None },
        ];
        assert_eq!(
            dependencies_annotation(&deps),
            r#"[{"apiVersion":"v1","kind":"ConfigMap","namespace":"default","name":"c"},{"apiVersion":"v1","kind":"Secret","namespace":"default","name":"s"}]"#
        );
        let mut rb = ResourceBinding::new("web-deployment", ResourceBindingSpec::default());
        rb.metadata.annotations = Some(BTreeMap::from([(DEPENDENCIES_ANNOTATION.to_string(), dependencies_annotation(&deps))]));
        assert!(names_dependency(&rb, "v1", "ConfigMap", "default", "c", &BTreeMap::new()));
        assert!(!names_dependency(&rb, "v1", "ConfigMap", "default", "s", &BTreeMap::new()));
        assert!(!names_dependency(&rb, "v1", "ConfigMap", "other", "c", &BTreeMap::new()));
    }

    #[test]
    fn required_by_entries_merge_by_binding_and_leave_by_binding() {
        let one = merge_snapshot(&[], snap("a", &["m1"]));
        let two = merge_snapshot(&one, snap("b", &["m2"]));
        let moved = merge_snapshot(&two, snap("a", &["m3"]));
        assert_eq!(moved, vec![snap("a", &["m3"]), snap("b", &["m2"])]);
        assert_eq!(without_snapshot(&moved, "default", "a"), vec![snap("b", &["m2"])]);
        assert_eq!(without_snapshot(&moved, "other", "a"), moved);
    }

    #[test]
    fn requirers_settings_resolve_overwrite_and_preserve_first() {
        let abort = ResourceBindingSpec::default();
        let overwrite =
            ResourceBindingSpec { conflict_resolution: Some(ConflictResolution::Overwrite), preserve_resources_on_deletion: Some(true), ..Default::default() };
        assert_eq!(resolve_requirers(&[&abort]), (ConflictResolution::Abort, false, vec![]));
        assert_eq!(resolve_requirers(&[&overwrite, &overwrite]), (ConflictResolution::Overwrite, true, vec![]));
        let (cr, preserve, conflicts) = resolve_requirers(&[&abort, &overwrite]);
        assert_eq!((cr, preserve), (ConflictResolution::Overwrite, true));
        assert_eq!(conflicts, vec!["ConflictResolution conflicted (Overwrite vs Abort)", "PreserveResourcesOnDeletion conflicted (true vs false)"]);
    }

    #[test]
    fn the_index_follows_bindings_as_they_change_and_go() {
        let by_name = ObjectRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: "default".into(), name: "c".into(), label_selector: None };
        let by_label = ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: "default".into(),
            name: String::new(),
            label_selector: Some(Default::default()),
        };
        let mut requirer = ResourceBinding::new("web-deployment", ResourceBindingSpec::default());
        requirer.metadata.namespace = Some("default".into());
        requirer.metadata.annotations = Some(BTreeMap::from([(DEPENDENCIES_ANNOTATION.to_string(), dependencies_annotation(std::slice::from_ref(&by_name)))]));
        let mut attached = ResourceBinding::new("c-configmap", ResourceBindingSpec::default());
        attached.metadata.namespace = Some("default".into());
        let label = depended_by_label_key("default", "web-deployment");
        attached.metadata.labels = Some(BTreeMap::from([(label.clone(), String::new())]));

        let mut index = Index::default();
        index.update(None, &requirer, false);
        index.update(None, &attached, false);
        assert_eq!(index.naming("default", "v1", "ConfigMap", "c"), vec!["web-deployment"]);
        assert!(index.naming("other", "v1", "ConfigMap", "c").is_empty(), "only bindings of the object's namespace");
        assert!(index.naming("default", "v1", "ConfigMap", "d").is_empty());
        assert_eq!(index.attached.get(&label).count(), 1);

        // The requirer now selects Secrets by label: any Secret of its namespace may wake it.
        let mut changed = requirer.clone();
        changed.metadata.annotations = Some(BTreeMap::from([(DEPENDENCIES_ANNOTATION.to_string(), dependencies_annotation(std::slice::from_ref(&by_label)))]));
        index.update(Some(&requirer), &changed, false);
        assert!(index.naming("default", "v1", "ConfigMap", "c").is_empty(), "the old entry went with the change");
        assert_eq!(index.naming("default", "v1", "Secret", "anything"), vec!["web-deployment"]);

        index.update(Some(&changed), &changed, true);
        index.update(Some(&attached), &attached, true);
        assert!(index.named.is_empty() && index.selecting.is_empty() && index.attached.is_empty(), "deleted bindings leave nothing behind");
    }
}
