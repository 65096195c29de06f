//! KubeFed's sync controller, mapped onto the one engine: every `Federated<Kind>` of an
//! enabled FederatedTypeConfig gets one binding (ResourceBinding in its namespace, or a
//! ClusterResourceBinding for a cluster-scoped federated type) named as Karmada names bindings
//! (`<name>-federated<kind>`), owned by the federated object, with its placement as the cluster
//! affinity and Duplicated scheduling. The scheduler fills `spec.clusters`; the binding
//! controller renders each cluster's member object through [`render::member_object_for_binding`](flotilla_api::federation::kubefed::render::member_object_for_binding)
//! (template, overrides, `kubefed.io/managed`); execution and work status are Karmada's.
//!
//! Back onto the federated object: `status.clusters[]`, the `Propagation` condition with
//! KubeFed's reasons and `status.observedGeneration`, from the placement, the clusters'
//! readiness, the overrides and the Works' `Applied` conditions; Events
//! `CreateInCluster` / `UpdateInCluster` / `DeleteInCluster` and their failures. A placement
//! naming clusters that are not joined propagates to the joined ones, as KubeFed's does;
//! KubeFed says nothing about the others, Flotilla adds a Warning `UnknownClusters` naming
//! them (an Event only: `status` keeps KubeFed's schema and lists joined clusters only).
//!
//! KubeFed's namespace rule, while a FederatedTypeConfig of core/v1 Namespace is enabled: a
//! namespaced federated object reaches only the clusters its namespace's FederatedNamespace
//! places the namespace in (the two placements intersected), none without one
//! (`NamespaceNotFederated`). A FederatedNamespace takes its namespace out of Karmada's
//! namespace auto-propagation (the skip label on the control plane's namespace; ADR 0026). With
//! KubeFed's `RawResourceStatusCollection` gate and the FTC's `statusCollection: Enabled`, each
//! cluster's `remoteStatus` is its member object's status as the Work records it.
//!
//! Deletion: the federated object carries no finalizer of ours. The garbage collector deletes
//! the binding through its owner reference; the binding's finalizer holds until its Works are
//! gone, and each Work until its member object is deleted (or released, under
//! `kubefed.io/orphan: "true"`, which becomes `preserveResourcesOnDeletion`). A member that is
//! not ready holds only its own Work, never the federated object.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::karmada::names::{binding_name, execution_space, work_name};
use flotilla_api::federation::karmada::work::{
    BINDING_FINALIZER, CLUSTER_RESOURCE_BINDING_FINALIZER, CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL, ClusterResourceBinding,
    RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding, ResourceBindingSpec, TEMPLATE_GENERATION_ANNOTATION, Work, binding_of_work,
};
use flotilla_api::federation::kubefed::core::{
    ConfigurationMode, DEFAULT_SYSTEM_NAMESPACE, FederatedTypeConfig, KubeFedConfig, PropagationMode, ResourceScope, StatusCollectionMode,
};
use flotilla_api::federation::kubefed::install::KUBEFED_CONFIG_NAME;
use flotilla_api::federation::kubefed::render::{self, ClusterFacts, MANAGED_BY, MANAGED_BY_LABEL, Outcome, Selection, Target, WorkState};
use flotilla_api::federation::kubefed::types::FederatedSpec;
use flotilla_api::federation::kubefed::version::{self, ClusterObjectVersion, PropagatedVersionStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::namespace_sync::SKIP_AUTO_PROPAGATION_LABEL;
use flotilla_runtime::{Events, condition_status};
use flotilla_runtime::{Next, WorkQueue, run_workers};
use k8s_openapi::api::core::v1::Namespace;

pub const NAME: &str = MANAGED_BY;
/// KubeFed's feature gate for `status.clusters[].remoteStatus`.
pub const RAW_RESOURCE_STATUS_COLLECTION: &str = "RawResourceStatusCollection";

/// KubeFed's Event reasons on federated objects.
pub const REASON_CREATE_IN_CLUSTER: &str = "CreateInCluster";
pub const REASON_UPDATE_IN_CLUSTER: &str = "UpdateInCluster";
pub const REASON_DELETE_IN_CLUSTER: &str = "DeleteInCluster";
pub const REASON_CREATE_IN_CLUSTER_FAILED: &str = "CreateInClusterFailed";
pub const REASON_UPDATE_IN_CLUSTER_FAILED: &str = "UpdateInClusterFailed";
/// Flotilla's Warning (KubeFed says nothing): the placement names clusters that are not
/// joined. They are ignored as KubeFed ignores them; the Event names them, once per change.
pub const REASON_UNKNOWN_CLUSTERS: &str = "UnknownClusters";
/// KubeFed's Warning: a FederatedNamespace not named as its namespace is not propagated.
pub const REASON_INVALID_NAME: &str = "InvalidName";

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// How soon to look again while a selected cluster's Work has no result yet.
    pub pending_recheck: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 2, pending_recheck: Duration::from_secs(5) }
    }
}

/// A federated object: the FTC of its type, its namespace (None when cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FedKey {
    pub ftc: String,
    pub namespace: Option<String>,
    pub name: String,
}

/// One enabled federated type and the watch of its objects.
struct FedType {
    spec: (flotilla_api::federation::kubefed::core::ApiResource, flotilla_api::federation::kubefed::core::ApiResource),
    federated: ApiResource,
    target: Target,
    store: Store<DynamicObject>,
    /// The FTC's `statusCollection: Enabled`: with KubeFed's `RawResourceStatusCollection`
    /// gate on, each cluster's `remoteStatus` is the member object's status.
    collect_status: std::sync::atomic::AtomicBool,
    /// Whether this type is still synced: the shared watch of its federated kind outlives it
    /// (another FTC may name the same kind), so its trigger stops queueing once this is false.
    live: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for FedType {
    fn drop(&mut self) {
        self.live.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key:?}: {step}: {source}")]
    Api { key: FedKey, step: String, source: kube::Error },
    #[error("{key:?}: binding {binding} belongs to something else")]
    BindingTaken { key: FedKey, binding: String },
    #[error("{key:?}: binding {binding} kept changing under our writes; retrying")]
    BindingConflict { key: FedKey, binding: String },
}

struct Context {
    client: Client,
    config: Config,
    events: Events,
    queue: Arc<WorkQueue<FedKey>>,
    types: Mutex<HashMap<String, Arc<FedType>>>,
    rbs: Store<ResourceBinding>,
    crbs: Store<ClusterResourceBinding>,
    works: Store<Work>,
    clusters: Store<Cluster>,
    /// The KubeFedConfig `kube-federation-system/kubefed` (its feature gates).
    configs: Store<KubeFedConfig>,
    /// The control plane's namespaces (a FederatedNamespace's own).
    namespaces: Store<Namespace>,
    informers: flotilla_runtime::Informers,
    /// The unknown cluster names last reported per federated object.
    unknown: Mutex<HashMap<FedKey, Vec<String>>>,
    /// The (Cluster)PropagatedVersion status last written (or read) per federated object.
    versions: Mutex<HashMap<FedKey, PropagatedVersionStatus>>,
    /// FederatedNamespaces already warned about a name that is not their namespace's.
    invalid_names: Mutex<std::collections::HashSet<FedKey>>,
}

/// KubeFed's namespace rule for a namespaced federated object.
#[derive(Clone, Debug, PartialEq)]
enum NamespaceRule {
    /// No FederatedNamespace type is synced: the object's own placement decides.
    Off,
    /// The type is enabled but its objects are not listed yet: look again shortly.
    NotReady,
    /// The object reaches only where its namespace's FederatedNamespace places the namespace
    /// (`None`: there is no FederatedNamespace, so nowhere).
    Within(Option<Selection>),
}

fn api_err(key: &FedKey, step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let (key, step) = (key.clone(), step.into());
    move |source| Error::Api { key, step, source }
}

fn kube_resource(r: &flotilla_api::federation::kubefed::core::ApiResource) -> ApiResource {
    let group = r.group.clone().unwrap_or_default();
    let api_version = if group.is_empty() { r.version.clone() } else { format!("{group}/{}", r.version) };
    ApiResource { group, version: r.version.clone(), api_version, kind: r.kind.clone(), plural: r.plural_name.clone() }
}

impl Context {
    /// The federated object a binding of ours refers to.
    fn key_of_binding(&self, meta: &ObjectMeta, spec: &ResourceBindingSpec) -> Option<FedKey> {
        Target::of_binding(meta)?;
        let r = &spec.resource;
        let types = self.types.lock();
        let (ftc, _) = types.iter().find(|(_, t)| t.federated.api_version == r.api_version && t.federated.kind == r.kind)?;
        Some(FedKey { ftc: ftc.clone(), namespace: r.namespace.clone().filter(|n| !n.is_empty()), name: r.name.clone() })
    }

    fn key_of_work(&self, w: &Work) -> Option<FedKey> {
        let b = binding_of_work(w)?;
        match &b.namespace {
            Some(ns) => self.rbs.get(&ObjectRef::new(&b.name).within(ns)).and_then(|rb| self.key_of_binding(&rb.metadata, &rb.spec)),
            None => self.crbs.get(&ObjectRef::new(&b.name)).and_then(|crb| self.key_of_binding(&crb.metadata, &crb.spec.0)),
        }
    }

    fn all_keys(&self) -> Vec<FedKey> {
        let types: Vec<(String, Arc<FedType>)> = self.types.lock().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        types
            .into_iter()
            .flat_map(|(ftc, t)| {
                t.store
                    .state()
                    .into_iter()
                    .map(move |o| FedKey { ftc: ftc.clone(), namespace: o.metadata.namespace.clone(), name: o.name_any() })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Start, restart or stop the watch of an FTC's federated type.
    fn sync_type(self: &Arc<Self>, ftc: &FederatedTypeConfig, deleted: bool) {
        let name = ftc.name_any();
        let namespaces = is_namespace_target(&ftc.spec.target_type);
        let wanted = !deleted && ftc.metadata.deletion_timestamp.is_none() && ftc.spec.propagation == PropagationMode::Enabled;
        let spec = (ftc.spec.target_type.clone(), ftc.spec.federated_type.clone());
        let collect_status = ftc.spec.status_collection == Some(StatusCollectionMode::Enabled);
        let mut types = self.types.lock();
        if wanted && let Some(t) = types.get(&name).filter(|t| t.spec == spec).cloned() {
            drop(types);
            if t.collect_status.swap(collect_status, std::sync::atomic::Ordering::SeqCst) != collect_status {
                // Same watch, other status: every object of the type writes its status again.
                self.requeue_type(&name, &t);
            }
            return;
        }
        types.remove(&name);
        drop(types);
        // Started unlocked: subscribing replays the cache into handlers that read the types.
        if wanted {
            let t = self.start_type(&name, spec, collect_status);
            self.types.lock().insert(name.clone(), t);
        }
        if namespaces {
            // KubeFed's namespace rule starts or stops: every namespaced object places again.
            for k in self.all_keys() {
                self.queue.add(k);
            }
        }
    }

    /// Queue every namespaced federated object in `ns` (its FederatedNamespace changed).
    fn requeue_namespace(&self, ns: &str) {
        for k in self.all_keys() {
            if k.namespace.as_deref() == Some(ns) {
                self.queue.add(k);
            }
        }
    }

    /// KubeFed's namespace rule for an object in `ns`: in force while a FederatedTypeConfig of
    /// core/v1 Namespace is enabled.
    async fn namespace_rule(&self, ns: &str) -> NamespaceRule {
        self.informers.synced::<FederatedTypeConfig>().await;
        let ftcs = self.informers.store::<FederatedTypeConfig>().state();
        let enabled = ftcs
            .iter()
            .find(|f| is_namespace_target(&f.spec.target_type) && f.metadata.deletion_timestamp.is_none() && f.spec.propagation == PropagationMode::Enabled);
        let Some(ftc) = enabled else { return NamespaceRule::Off };
        let Some(t) = self.types.lock().get(&ftc.name_any()).cloned() else { return NamespaceRule::NotReady };
        self.informers.dynamic_synced(&t.federated).await;
        let Some(fedns) = t.store.get(&ObjectRef::new_with(ns, t.federated.clone()).within(ns)) else { return NamespaceRule::Within(None) };
        let placement = serde_json::to_value(&*fedns).ok().and_then(|v| render::federated_spec(&v).ok()).and_then(|s| s.placement);
        NamespaceRule::Within(Some(render::selection(placement.as_ref())))
    }

    /// Queue every object of one federated type.
    fn requeue_type(&self, ftc: &str, t: &FedType) {
        for o in t.store.state() {
            self.queue.add(FedKey { ftc: ftc.to_string(), namespace: o.metadata.namespace.clone(), name: o.name_any() });
        }
    }

    /// The KubeFedConfig `kube-federation-system/kubefed`, as cached.
    fn kubefed_config(&self) -> Option<Arc<KubeFedConfig>> {
        self.configs.get(&ObjectRef::new(KUBEFED_CONFIG_NAME).within(DEFAULT_SYSTEM_NAMESPACE))
    }

    /// KubeFed's `syncController.adoptResources` in the KubeFedConfig (on without one, as
    /// KubeFed's default): whether an existing member object is taken over.
    fn adopt_resources(&self) -> bool {
        self.kubefed_config().and_then(|c| c.spec.sync_controller.as_ref()?.adopt_resources) != Some(ConfigurationMode::Disabled)
    }

    /// KubeFed's `RawResourceStatusCollection` gate in the KubeFedConfig (off without one, as
    /// KubeFed's default).
    fn raw_status_collection(&self) -> bool {
        let config = self.kubefed_config();
        let gates = config.as_ref().and_then(|c| c.spec.feature_gates.as_deref()).unwrap_or_default();
        gates.iter().any(|g| g.name == RAW_RESOURCE_STATUS_COLLECTION && g.configuration == ConfigurationMode::Enabled)
    }

    fn start_type(
        self: &Arc<Self>,
        ftc: &str,
        spec: (flotilla_api::federation::kubefed::core::ApiResource, flotilla_api::federation::kubefed::core::ApiResource),
        collect_status: bool,
    ) -> Arc<FedType> {
        let federated = kube_resource(&spec.1);
        let target_ar = kube_resource(&spec.0);
        let target = Target { api_version: target_ar.api_version.clone(), kind: target_ar.kind.clone(), namespaced: spec.0.scope == ResourceScope::Namespaced };
        let store = self.informers.dynamic_store(&federated);
        let queue = self.queue.clone();
        let ftc_name = ftc.to_string();
        let live = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let alive = live.clone();
        let namespaces = is_namespace_target(&spec.0);
        let weak = Arc::downgrade(self);
        self.informers.subscribe_dynamic(&federated, move |_, o, _deleted| {
            if alive.load(std::sync::atomic::Ordering::SeqCst) {
                queue.add(FedKey { ftc: ftc_name.clone(), namespace: o.metadata.namespace.clone(), name: o.name_any() });
                // A FederatedNamespace places everything in its namespace.
                if namespaces && let (Some(ctx), Some(ns)) = (weak.upgrade(), o.metadata.namespace.as_deref()) {
                    ctx.requeue_namespace(ns);
                }
            }
        });
        Arc::new(FedType { spec, federated, target, store, collect_status: collect_status.into(), live })
    }
}

/// Whether a target type is core/v1 Namespace.
fn is_namespace_target(t: &flotilla_api::federation::kubefed::core::ApiResource) -> bool {
    t.group.as_deref().unwrap_or_default().is_empty() && t.kind == "Namespace"
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

/// The binding metadata we own, on top of what `have` carries.
fn binding_meta(have: Option<&ObjectMeta>, name: &str, namespace: Option<&str>, owner: OwnerReference, target: &Target) -> ObjectMeta {
    let mut meta = have.cloned().unwrap_or_else(|| ObjectMeta { name: Some(name.into()), namespace: namespace.map(str::to_string), ..Default::default() });
    let (id_label, finalizer) = if namespace.is_some() {
        (RESOURCE_BINDING_PERMANENT_ID_LABEL, BINDING_FINALIZER)
    } else {
        (CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL, CLUSTER_RESOURCE_BINDING_FINALIZER)
    };
    let labels = meta.labels.get_or_insert_default();
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels.entry(id_label.into()).or_insert_with(|| uuid::Uuid::new_v4().to_string());
    let annotations = meta.annotations.get_or_insert_default();
    for (k, v) in target.annotations() {
        annotations.insert(k.into(), v);
    }
    meta.owner_references = Some(vec![owner]);
    if let Some(f) = flotilla_runtime::with_finalizer(meta.finalizers.as_ref(), finalizer) {
        meta.finalizers = Some(f);
    }
    meta
}

/// Keep what the scheduler and the eviction machinery own.
fn carry_over(spec: &mut ResourceBindingSpec, old: &ResourceBindingSpec) {
    spec.clusters = old.clusters.clone();
    spec.graceful_eviction_tasks = old.graceful_eviction_tasks.clone();
    spec.required_by = old.required_by.clone();
    spec.reschedule_triggered_at = old.reschedule_triggered_at.clone();
}

/// Whether `meta` is a binding this controller may write for `owner_uid`.
fn ours(meta: &ObjectMeta, owner_uid: &str) -> bool {
    Target::of_binding(meta).is_some() && meta.owner_references.iter().flatten().all(|o| o.uid == owner_uid)
}

/// Create or update the federated object's binding (a ResourceBinding beside a namespaced
/// federated object, else a ClusterResourceBinding); returns whether anything was written.
async fn ensure_binding(ctx: &Context, key: &FedKey, t: &FedType, obj: &DynamicObject, spec: ResourceBindingSpec) -> Result<bool, Error> {
    let name = binding_name(&t.federated.kind, &key.name);
    let owner = owner_of(obj, &t.federated);
    let uid = owner.uid.clone();
    let (ar, api): (ApiResource, Api<DynamicObject>) = match &key.namespace {
        Some(ns) => {
            let ar = ApiResource::erase::<ResourceBinding>(&());
            (ar.clone(), Api::namespaced_with(ctx.client.clone(), ns, &ar))
        }
        None => {
            let ar = ApiResource::erase::<ClusterResourceBinding>(&());
            (ar.clone(), Api::all_with(ctx.client.clone(), &ar))
        }
    };
    // The scheduler and the binding controller write the same binding: a conflict means it
    // changed since our read, so read it again and redo the change (nothing else brings this
    // object back here).
    for _ in 0..8 {
        let existing = api.get_opt(&name).await.map_err(api_err(key, "reading the binding"))?;
        let old_spec: Option<ResourceBindingSpec> = existing.as_ref().and_then(|e| serde_json::from_value(e.data.get("spec")?.clone()).ok());
        let mut spec = spec.clone();
        if let Some(old) = &existing {
            if !ours(&old.metadata, &uid) {
                return Err(Error::BindingTaken { key: key.clone(), binding: name });
            }
            if let Some(old_spec) = &old_spec {
                carry_over(&mut spec, old_spec);
            }
        }
        let meta = binding_meta(existing.as_ref().map(|e| &e.metadata), &name, key.namespace.as_deref(), owner.clone(), &t.target);
        if existing.as_ref().is_some_and(|e| e.metadata == meta) && old_spec.as_ref() == Some(&spec) {
            return Ok(false);
        }
        let mut binding = DynamicObject::new(&name, &ar);
        binding.metadata = meta;
        binding.data = json!({"spec": spec});
        let r = match existing {
            Some(_) => api.replace(&name, &PostParams::default(), &binding).await.map(|_| ()),
            None => api.create(&PostParams::default(), &binding).await.map(|_| ()),
        };
        match r {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(api_err(key, "writing the binding")(e)),
            Ok(()) => return Ok(true),
        }
    }
    Err(Error::BindingConflict { key: key.clone(), binding: name })
}

fn reference(obj: &DynamicObject, ar: &ApiResource) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(ar.api_version.clone()),
        kind: Some(ar.kind.clone()),
        name: Some(obj.name_any()),
        namespace: obj.metadata.namespace.clone(),
        uid: obj.metadata.uid.clone(),
        ..Default::default()
    }
}

/// What a cluster's Work says about the current generation.
fn work_state(work: Option<&Work>, generation: i64) -> (WorkState, String) {
    let Some(w) = work.filter(|w| w.metadata.deletion_timestamp.is_none()) else { return (WorkState::Pending, String::new()) };
    let manifest = w.spec.workload.as_ref().and_then(|l| l.manifests.as_ref()).and_then(|m| m.first());
    let carried = manifest
        .and_then(|m| m.pointer("/metadata/annotations"))
        .and_then(|a| a.get(TEMPLATE_GENERATION_ANNOTATION))
        .and_then(Value::as_str)
        .and_then(|g| g.parse::<i64>().ok());
    if carried != Some(generation) {
        return (WorkState::Pending, String::new());
    }
    match condition_status(w.status.as_ref().and_then(|s| s.conditions.as_deref()), "Applied") {
        Some(c) if c.status == "True" => (WorkState::Applied, String::new()),
        Some(c) if c.message.contains(flotilla_member::apply::EXPLICITLY_UNMANAGED) => (WorkState::Unmanaged, c.message.clone()),
        Some(c) if c.message.contains(flotilla_member::apply::NOT_MANAGED_CONFLICT) => (WorkState::AlreadyExists, c.message.clone()),
        Some(c) => (WorkState::Failed, c.message.clone()),
        None => (WorkState::Pending, String::new()),
    }
}

async fn reconcile(key: FedKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(t) = ctx.types.lock().get(&key.ftc).cloned() else { return Ok(Next::Done) };
    let oref = match &key.namespace {
        Some(ns) => ObjectRef::new_with(&key.name, t.federated.clone()).within(ns),
        None => ObjectRef::new_with(&key.name, t.federated.clone()),
    };
    // Gone or going: the garbage collector deletes the binding through its owner reference.
    let Some(obj) = t.store.get(&oref).filter(|o| o.metadata.deletion_timestamp.is_none()) else {
        ctx.unknown.lock().remove(&key);
        ctx.versions.lock().remove(&key);
        ctx.invalid_names.lock().remove(&key);
        return Ok(Next::Done);
    };
    let fed = serde_json::to_value(&*obj).unwrap_or_default();
    let fed_ref = reference(&obj, &t.federated);
    let generation = obj.metadata.generation.unwrap_or(0);
    let observed = fed.pointer("/status/observedGeneration").and_then(Value::as_i64);
    let spec = match render::federated_spec(&fed) {
        Ok(s) => s,
        Err(e) => {
            ctx.events.publish_ref(&fed_ref, true, render::REASON_COMPUTE_PLACEMENT_FAILED, "Propagate", e).await;
            return Ok(Next::Done);
        }
    };
    if observed != Some(generation) {
        for reason in render::dropped_template_fields(&spec) {
            let what = if reason == "AnnotationsNotSupported" { "annotations" } else { "finalizers" };
            let msg = format!("spec.template.metadata.{what} are not propagated (members own them); use overrides instead");
            ctx.events.publish_ref(&fed_ref, true, reason, "Propagate", msg).await;
        }
    }
    if is_namespace_target(&t.spec.0) && !admit_federated_namespace(&ctx, &key, &fed_ref).await? {
        return Ok(Next::Done);
    }
    let rule = match (&key.namespace, t.target.namespaced) {
        (Some(ns), true) => ctx.namespace_rule(ns).await,
        _ => NamespaceRule::Off,
    };
    let (within, not_federated) = match rule {
        NamespaceRule::NotReady => return Ok(Next::After(Duration::from_secs(1))),
        NamespaceRule::Off => (None, false),
        NamespaceRule::Within(s) => {
            let not_federated = s.is_none();
            (Some(s.unwrap_or(Selection::None)), not_federated)
        }
    };
    let bspec = match render::binding_spec(&fed, &spec, &t.target, within.as_ref(), ctx.adopt_resources()) {
        Ok(b) => b,
        Err(e) => {
            ctx.events.publish_ref(&fed_ref, true, "ComputeResourceFailed", "Propagate", e).await;
            return Ok(Next::Done);
        }
    };
    match ensure_binding(&ctx, &key, &t, &obj, bspec).await {
        Err(e @ Error::BindingTaken { .. }) => {
            ctx.events.publish_ref(&fed_ref, true, "BindingConflict", "Propagate", e.to_string()).await;
            return Ok(Next::Done);
        }
        r => r?,
    };
    warn_unknown_clusters(&ctx, &key, &spec, &fed_ref).await;
    let placed = Placed { within: within.as_ref(), not_federated };
    write_status(&ctx, &key, &t, &obj, &fed, &spec, &fed_ref, generation, placed).await
}

/// What KubeFed's namespace rule adds to an object's placement.
struct Placed<'a> {
    /// The FederatedNamespace's selection the placement is intersected with.
    within: Option<&'a Selection>,
    /// No FederatedNamespace: nothing is placed, and the condition says why.
    not_federated: bool,
}

/// A FederatedNamespace's own checks, as KubeFed's: the KubeFed system namespace is never
/// federated, a FederatedNamespace must be named as its namespace (a Warning `InvalidName`
/// otherwise, once), and the namespace must still exist on the control plane. Once federated,
/// the namespace leaves Karmada's namespace auto-propagation (its skip label is set on the
/// control plane's namespace): it reaches the members its FederatedNamespace places it in, and
/// no others, also after the FederatedNamespace is gone.
async fn admit_federated_namespace(ctx: &Context, key: &FedKey, fed_ref: &k8s_openapi::api::core::v1::ObjectReference) -> Result<bool, Error> {
    let Some(ns) = key.namespace.as_deref() else { return Ok(false) };
    if ns == DEFAULT_SYSTEM_NAMESPACE {
        return Ok(false);
    }
    if key.name != ns {
        if ctx.invalid_names.lock().insert(key.clone()) {
            let msg = "The name of a federated namespace must match the name of its containing namespace.";
            ctx.events.publish_ref(fed_ref, true, REASON_INVALID_NAME, "Propagate", msg.to_string()).await;
        }
        return Ok(false);
    }
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    // From the cache; one the cache has not seen yet (just created) is confirmed with the API
    // server, so a new FederatedNamespace is never dropped for a lagging watch.
    let host = match ctx.namespaces.get(&ObjectRef::new(ns)) {
        Some(n) => n,
        None => match api.get_opt(ns).await.map_err(api_err(key, "reading the namespace"))? {
            Some(n) => Arc::new(n),
            None => return Ok(false),
        },
    };
    if host.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    if host.labels().get(SKIP_AUTO_PROPAGATION_LABEL).map(String::as_str) != Some("true") {
        let patch = json!({"metadata": {"labels": {SKIP_AUTO_PROPAGATION_LABEL: "true"}}});
        api.patch(ns, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(api_err(key, "taking the namespace out of auto-propagation"))?;
        tracing::info!(controller = NAME, namespace = ns, "federated: the namespace follows its FederatedNamespace, not namespace auto-propagation");
    }
    Ok(true)
}

/// A Warning Event naming the placement's clusters that are not joined, when that set changes.
async fn warn_unknown_clusters(ctx: &Context, key: &FedKey, spec: &FederatedSpec, fed_ref: &k8s_openapi::api::core::v1::ObjectReference) {
    // Before the first list every name would look unknown.
    if ctx.clusters.wait_until_ready().await.is_err() {
        return;
    }
    let known: Vec<String> = ctx.clusters.state().iter().filter(|c| c.metadata.deletion_timestamp.is_none()).map(|c| c.name_any()).collect();
    let unknown = render::unknown_clusters(&render::selection(spec.placement.as_ref()), &known);
    let changed = {
        let mut last = ctx.unknown.lock();
        if unknown.is_empty() {
            last.remove(key);
            false
        } else if last.get(key) == Some(&unknown) {
            false
        } else {
            last.insert(key.clone(), unknown.clone());
            true
        }
    };
    if changed {
        let msg = format!("spec.placement.clusters names clusters that are not joined, ignored: {}", unknown.join(", "));
        ctx.events.publish_ref(fed_ref, true, REASON_UNKNOWN_CLUSTERS, "Propagate", msg).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn write_status(
    ctx: &Context,
    key: &FedKey,
    t: &FedType,
    obj: &DynamicObject,
    fed: &Value,
    spec: &FederatedSpec,
    fed_ref: &k8s_openapi::api::core::v1::ObjectReference,
    generation: i64,
    placed: Placed<'_>,
) -> Result<Next, Error> {
    let own = render::selection(spec.placement.as_ref());
    let selection: Selection = match placed.within {
        Some(w) => render::intersection(own, w.clone()),
        None => own,
    };
    // The status as last written: each cluster's status and remote status.
    let mut previous: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut previous_remote: BTreeMap<String, Value> = BTreeMap::new();
    for c in fed.pointer("/status/clusters").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = c.get("name").and_then(Value::as_str) else { continue };
        previous.insert(name.to_string(), c.get("status").and_then(Value::as_str).map(str::to_string));
        if let Some(r) = c.get("remoteStatus").filter(|s| !s.is_null()) {
            previous_remote.insert(name.to_string(), r.clone());
        }
    }
    let collect = t.collect_status.load(std::sync::atomic::Ordering::SeqCst) && ctx.raw_status_collection();
    let observed = fed.pointer("/status/observedGeneration").and_then(Value::as_i64);
    let work = work_name(&t.federated.kind, &key.name, key.namespace.as_deref());
    let mut clusters: Vec<Arc<Cluster>> = ctx.clusters.state().into_iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
    clusters.sort_by_key(|c| c.name_any());
    let target_display = match &key.namespace {
        Some(ns) => format!("{} \"{ns}/{}\"", t.target.kind, key.name),
        None => format!("{} \"{}\"", t.target.kind, key.name),
    };

    let mut out: Vec<(String, Option<&'static str>)> = Vec::new();
    let mut pending = false;
    let mut events: Vec<(bool, &'static str, String)> = Vec::new();
    let mut cluster_versions: Vec<ClusterObjectVersion> = Vec::new();
    // KubeFed's remoteStatus: the member object's status, as its Work last recorded it.
    let mut remote: BTreeMap<String, Value> = BTreeMap::new();
    for c in &clusters {
        let name = c.name_any();
        let w = ctx.works.get(&ObjectRef::new(&work).within(&execution_space(&name)));
        if collect && let Some(s) = w.as_deref().and_then(member_remote_status) {
            remote.insert(name.clone(), s);
        }
        if !render::selects(&selection, c) {
            if w.is_some() {
                out.push((name, Some(render::cluster_status::WAITING_FOR_REMOVAL)));
            } else if previous.contains_key(&name) {
                events.push((false, REASON_DELETE_IN_CLUSTER, format!("Deleted {target_display} in cluster \"{name}\"")));
            }
            continue;
        }
        let override_error = render::member_object(fed, spec, &t.target, &name).err();
        let (state, message) = work_state(w.as_deref(), generation);
        if state == WorkState::Applied
            && let Some(v) = w.as_deref().and_then(member_version)
        {
            cluster_versions.push(ClusterObjectVersion { cluster_name: name.clone(), version: v });
        }
        let was_ok = previous.get(&name).is_some_and(Option::is_none);
        let facts = ClusterFacts { name: name.clone(), ready: is_cluster_ready(c), override_error: override_error.is_some(), work: state, was_ok };
        let status = match render::cluster_outcome(&facts) {
            Outcome::Ok => None,
            Outcome::Status(s) => Some(s),
            Outcome::Pending => {
                pending = true;
                continue;
            }
        };
        let changed = previous.get(&name) != Some(&status.map(str::to_string)) || observed != Some(generation);
        if changed {
            match (status, &override_error) {
                (None, _) if was_ok => events.push((false, REASON_UPDATE_IN_CLUSTER, format!("Updated {target_display} in cluster \"{name}\""))),
                (None, _) => events.push((false, REASON_CREATE_IN_CLUSTER, format!("Created {target_display} in cluster \"{name}\""))),
                (Some(s), Some(e)) if s == render::cluster_status::APPLY_OVERRIDES_FAILED => events.push((true, s, format!("Cluster \"{name}\": {e}"))),
                (Some(s), _) if s == render::cluster_status::CREATION_FAILED => {
                    events.push((true, REASON_CREATE_IN_CLUSTER_FAILED, format!("Failed to create {target_display} in cluster \"{name}\": {message}")))
                }
                (Some(s), _) if s == render::cluster_status::MANAGED_LABEL_FALSE => events.push((true, s, format!("Cluster \"{name}\": {message}"))),
                // KubeFed's words, when adoption is off.
                (Some(s), _) if s == render::cluster_status::ALREADY_EXISTS => events.push((
                    true,
                    REASON_CREATE_IN_CLUSTER_FAILED,
                    format!("Failed to create {target_display} in cluster \"{name}\": Resource pre-exist in cluster"),
                )),
                (Some(s), _) if s == render::cluster_status::UPDATE_FAILED => {
                    events.push((true, REASON_UPDATE_IN_CLUSTER_FAILED, format!("Failed to update {target_display} in cluster \"{name}\": {message}")))
                }
                (Some(s), _) => events.push((true, s, format!("Cluster \"{name}\" is not ready"))),
            }
        }
        out.push((name, status));
    }
    if pending {
        return Ok(Next::After(ctx.config.pending_recheck));
    }
    // As KubeFed's: a failure to record versions is no failure to propagate.
    if let Err(e) = write_versions(ctx, key, t, obj, fed, cluster_versions).await {
        tracing::warn!(controller = NAME, federated = ?key, error = %e, "recording the propagated versions failed");
    }
    // As KubeFed's: with status collection, a cluster whose object has no status yet is not done.
    let ok = out.iter().all(|(n, s)| s.is_none() && (!collect || remote.contains_key(n)));
    // One reason at a time, as KubeFed's: a namespace not federated only when nothing else is.
    let reason = if !ok {
        Some(render::REASON_CHECK_CLUSTERS)
    } else if placed.not_federated {
        Some(render::REASON_NAMESPACE_NOT_FEDERATED)
    } else {
        None
    };
    let old_cond = fed.pointer("/status/conditions").and_then(Value::as_array).and_then(|cs| cs.iter().find(|c| c["type"] == "Propagation")).cloned();
    let old_status = old_cond.as_ref().and_then(|c| c["status"].as_str()).map(str::to_string);
    let old_reason = old_cond.as_ref().and_then(|c| c.get("reason")).and_then(Value::as_str).filter(|r| !r.is_empty()).map(str::to_string);
    let want_status = if reason.is_none() { "True" } else { "False" };
    let new_clusters: BTreeMap<String, Option<String>> = out.iter().map(|(n, s)| (n.clone(), s.map(str::to_string))).collect();
    remote.retain(|n, _| new_clusters.contains_key(n));
    let same = observed == Some(generation)
        && previous == new_clusters
        && previous_remote == remote
        && old_status.as_deref() == Some(want_status)
        && old_reason.as_deref() == reason;
    if !same {
        let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap_or_else(|_| jiff::Timestamp::now()).to_string();
        let transition = match &old_cond {
            Some(c) if old_status.as_deref() == Some(want_status) && old_reason.as_deref() == reason => {
                c.get("lastTransitionTime").cloned().unwrap_or(json!(now))
            }
            _ => json!(now),
        };
        let mut cond = json!({"type": "Propagation", "status": want_status, "lastUpdateTime": now, "lastTransitionTime": transition});
        if let Some(r) = reason {
            cond["reason"] = json!(r);
        }
        let clusters: Vec<Value> = out
            .iter()
            .map(|(n, s)| {
                let mut c = json!({"name": n});
                if let Some(s) = s {
                    c["status"] = json!(s);
                }
                if let Some(r) = remote.get(n) {
                    c["remoteStatus"] = r.clone();
                }
                c
            })
            .collect();
        // As KubeFed's (`omitempty`): no clusters, no field.
        let clusters = if clusters.is_empty() { Value::Null } else { json!(clusters) };
        let patch = json!({
            "metadata": {"resourceVersion": obj.metadata.resource_version},
            "status": {"observedGeneration": generation, "conditions": [cond], "clusters": clusters},
        });
        let api: Api<DynamicObject> = match &key.namespace {
            Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &t.federated),
            None => Api::all_with(ctx.client.clone(), &t.federated),
        };
        match api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            // A newer object is on its way through the watch; its round writes the status.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(Next::Done),
            r => {
                r.map_err(api_err(key, "writing the status"))?;
            }
        }
    }
    for (warning, reason, msg) in events {
        ctx.events.publish_ref(fed_ref, warning, reason, "Propagate", msg).await;
    }
    Ok(Next::Done)
}

/// The member object's whole status its Work reports (recorded for KubeFed's objects only).
fn member_remote_status(w: &Work) -> Option<Value> {
    w.status.as_ref()?.manifest_statuses.as_ref()?.iter().find(|m| m.identifier.ordinal == 0)?.remote_status.clone()
}

/// The member object's version its Work reports (the work-status controller records it).
fn member_version(w: &Work) -> Option<String> {
    w.status.as_ref()?.manifest_statuses.as_ref()?.iter().find(|m| m.identifier.ordinal == 0)?.version.clone()
}

/// Keep the federated object's (Cluster)PropagatedVersion as KubeFed's version manager keeps it:
/// named `<lower-case target kind>-<name>`, owned by the federated object (the garbage collector
/// takes it with it), its status the template and override digests and the version of each
/// selected cluster's copy, sorted by cluster. Written only when that changes.
async fn write_versions(
    ctx: &Context,
    key: &FedKey,
    t: &FedType,
    obj: &DynamicObject,
    fed: &Value,
    mut clusters: Vec<ClusterObjectVersion>,
) -> Result<(), Error> {
    let (template_version, overrides_version) = match (version::template_version(fed), version::overrides_version(fed)) {
        (Ok(t), Ok(o)) => (t, o),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(controller = NAME, federated = ?key, error = %e, "no propagated version: the versions cannot be computed");
            return Ok(());
        }
    };
    clusters.sort();
    let want = PropagatedVersionStatus { template_version, overrides_version, cluster_versions: clusters };
    if ctx.versions.lock().get(key) == Some(&want) {
        return Ok(());
    }
    let (kind, plural) = version::version_kind(key.namespace.is_some());
    let ar = ApiResource {
        group: flotilla_api::federation::kubefed::core::GROUP.into(),
        version: version::VERSION.into(),
        api_version: version::API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = match &key.namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
        None => Api::all_with(ctx.client.clone(), &ar),
    };
    let name = version::propagated_version_name(&t.target.kind, &key.name);
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    let existing = api.get_opt(&name).await.map_err(api_err(key, "reading the propagated version"))?;
    let existing = match existing {
        // A leftover of an earlier object of the same name: replaced.
        Some(e) if !e.metadata.owner_references.iter().flatten().any(|o| o.uid == uid) => {
            api.delete(&name, &Default::default()).await.map_err(api_err(key, "deleting a stale propagated version"))?;
            None
        }
        e => e,
    };
    let have: Option<PropagatedVersionStatus> = existing.as_ref().and_then(|e| serde_json::from_value(e.data.get("status")?.clone()).ok());
    if have.as_ref() != Some(&want) {
        if existing.is_none() {
            let mut pv = DynamicObject::new(&name, &ar);
            pv.metadata.namespace = key.namespace.clone();
            // KubeFed's owner reference: neither controller nor blocking.
            pv.metadata.owner_references = Some(vec![OwnerReference {
                api_version: t.federated.api_version.clone(),
                kind: t.federated.kind.clone(),
                name: key.name.clone(),
                uid,
                ..Default::default()
            }]);
            match api.create(&PostParams::default(), &pv).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(api_err(key, "creating the propagated version")(e)),
            }
        }
        let clusters = if want.cluster_versions.is_empty() { Value::Null } else { json!(want.cluster_versions) };
        let patch = json!({"status": {
            "templateVersion": want.template_version,
            "overridesVersion": want.overrides_version,
            "clusterVersions": clusters,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(api_err(key, "writing the propagated version"))?;
    }
    ctx.versions.lock().insert(key.clone(), want);
    Ok(())
}

/// Run the KubeFed sync controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<FedKey>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let everything: Arc<Mutex<Option<Arc<Context>>>> = Arc::new(Mutex::new(None));
    // Of the shared binding informers, only the bindings this controller manages
    // (`key_of_binding` checks the managed-by label).
    let on_binding = |everything: Arc<Mutex<Option<Arc<Context>>>>| {
        move |meta: &ObjectMeta, spec: &ResourceBindingSpec| {
            if let Some(ctx) = everything.lock().clone()
                && let Some(k) = ctx.key_of_binding(meta, spec)
            {
                ctx.queue.add(k);
            }
        }
    };
    let f = on_binding(everything.clone());
    let (rbs, rb_task) = rt.informers.watch::<ResourceBinding>(move |b: &ResourceBinding, _| f(&b.metadata, &b.spec));
    let f = on_binding(everything.clone());
    let (crbs, crb_task) = rt.informers.watch::<ClusterResourceBinding>(move |b: &ClusterResourceBinding, _| f(&b.metadata, &b.spec.0));
    let e = everything.clone();
    let (works, work_task) = rt.informers.watch::<Work>(move |w: &Work, _| {
        if let Some(ctx) = e.lock().clone()
            && let Some(k) = ctx.key_of_work(w)
        {
            ctx.queue.add(k);
        }
    });
    let e = everything.clone();
    let (clusters, cluster_task) = rt.informers.watch::<Cluster>(move |_: &Cluster, _| {
        if let Some(ctx) = e.lock().clone() {
            for k in ctx.all_keys() {
                ctx.queue.add(k);
            }
        }
    });
    let e = everything.clone();
    let (configs, config_task) = rt.informers.watch::<KubeFedConfig>(move |c: &KubeFedConfig, _| {
        // The gates decide what every federated object's status holds.
        if c.name_any() == KUBEFED_CONFIG_NAME
            && c.metadata.namespace.as_deref() == Some(DEFAULT_SYSTEM_NAMESPACE)
            && let Some(ctx) = e.lock().clone()
        {
            for k in ctx.all_keys() {
                ctx.queue.add(k);
            }
        }
    });
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client: client.clone(),
        config: config.clone(),
        queue: queue.clone(),
        types: Mutex::new(HashMap::new()),
        rbs,
        crbs,
        works,
        clusters,
        configs,
        namespaces: rt.informers.store::<Namespace>(),
        informers: rt.informers.clone(),
        unknown: Mutex::new(HashMap::new()),
        versions: Mutex::new(HashMap::new()),
        invalid_names: Mutex::new(Default::default()),
    });
    *everything.lock() = Some(ctx.clone());
    let c = ctx.clone();
    let (_ftcs, ftc_task) = rt.informers.watch::<FederatedTypeConfig>(move |ftc: &FederatedTypeConfig, deleted| c.sync_type(ftc, deleted));
    let workers = run_workers(queue, config.workers, NAME, move |key| reconcile(key, ctx.clone()));
    tokio::select! {
        _ = ftc_task => tracing::warn!(controller = NAME, "federated type config watch ended"),
        _ = rb_task => tracing::warn!(controller = NAME, "binding watch ended"),
        _ = crb_task => tracing::warn!(controller = NAME, "cluster binding watch ended"),
        _ = work_task => tracing::warn!(controller = NAME, "work watch ended"),
        _ = cluster_task => tracing::warn!(controller = NAME, "cluster watch ended"),
        _ = config_task => tracing::warn!(controller = NAME, "KubeFedConfig watch ended"),
        _ = workers => {},
    }
    everything.lock().take();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_apart_from_the_plain_objects() {
        assert_eq!(binding_name("FederatedDeployment", "test-deployment"), "test-deployment-federateddeployment");
        let fed = work_name("FederatedDeployment", "test-deployment", Some("test-namespace"));
        assert_eq!(fed, work_name("FederatedDeployment", "test-deployment", Some("test-namespace")));
        assert_ne!(fed, work_name("Deployment", "test-deployment", Some("test-namespace")));
        assert_ne!(binding_name("FederatedDeployment", "web"), binding_name("Deployment", "web"));
    }

    #[test]
    fn work_state_follows_the_generation_and_applied() {
        use flotilla_api::federation::karmada::work::{WorkSpec, WorkStatus, WorkloadTemplate};
        let mut w = Work::new(
            "n",
            WorkSpec {
                workload: Some(WorkloadTemplate { manifests: Some(vec![json!({"metadata": {"annotations": {TEMPLATE_GENERATION_ANNOTATION: "2"}}})]) }),
                ..Default::default()
            },
        );
        assert_eq!(work_state(None, 2).0, WorkState::Pending);
        assert_eq!(work_state(Some(&w), 2).0, WorkState::Pending);
        w.status =
            Some(WorkStatus { conditions: Some(vec![flotilla_runtime::condition("Applied", false, "AppliedFailed", "boom", None)]), ..Default::default() });
        assert_eq!(work_state(Some(&w), 2), (WorkState::Failed, "boom".into()));
        let opted_out = format!(
            "Failed to apply all manifests (0/1): the ConfigMap ns/keep in the cluster m1 {}: it is not touched",
            flotilla_member::apply::EXPLICITLY_UNMANAGED
        );
        w.status = Some(WorkStatus {
            conditions: Some(vec![flotilla_runtime::condition("Applied", false, "AppliedFailed", opted_out.clone(), None)]),
            ..Default::default()
        });
        assert_eq!(work_state(Some(&w), 2), (WorkState::Unmanaged, opted_out));
        // A Work still carrying the previous generation says nothing about this one.
        assert_eq!(work_state(Some(&w), 3).0, WorkState::Pending);
        w.status =
            Some(WorkStatus { conditions: Some(vec![flotilla_runtime::condition("Applied", true, "AppliedSuccessful", "", None)]), ..Default::default() });
        assert_eq!(work_state(Some(&w), 2).0, WorkState::Applied);
    }

    #[test]
    fn only_the_namespace_target_carries_the_namespace_rule() {
        use flotilla_api::federation::kubefed::default_target_types;
        let ruling: Vec<String> = default_target_types().iter().filter(|t| is_namespace_target(t)).map(|t| t.plural_name.clone()).collect();
        assert_eq!(ruling, ["namespaces"]);
    }

    #[test]
    fn bindings_of_others_are_left_alone() {
        let mut meta = ObjectMeta::default();
        assert!(!ours(&meta, "u"));
        meta.labels = Some(BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]));
        meta.annotations = Some(
            Target { api_version: "v1".into(), kind: "ConfigMap".into(), namespaced: true }
                .annotations()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        );
        assert!(ours(&meta, "u"));
        meta.owner_references = Some(vec![OwnerReference { uid: "other".into(), ..Default::default() }]);
        assert!(!ours(&meta, "u"));
    }
}
