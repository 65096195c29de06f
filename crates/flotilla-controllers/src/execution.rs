//! The execution controller (Push clusters): every Work in an execution space
//! `karmada-es-<cluster>` has its manifests applied to that member with Karmada's rules
//! ([`flotilla_member::apply`]: create, refuse to take over objects Karmada does not manage
//! unless told to overwrite, retain member-owned fields, skip writes that change nothing).
//!
//! What it writes on the Work, as Karmada v1.16 does:
//! - the finalizer `karmada.io/execution-controller` (Karmada's binding controller creates
//!   Works with it; the controller adds it to Works made by anyone else);
//! - condition `Dispatching`: True `Dispatching` / False `SuspendDispatching` under
//!   `spec.suspendDispatching`, with a `WorkDispatching` Event when it changes;
//! - condition `Applied`: True `AppliedSuccessful` "Manifest has been successfully applied" or
//!   False `AppliedFailed` "Failed to apply all manifests (n/total): <errors>"; a member's 403
//!   names the verb and resource it refused;
//! - Events `SyncSucceed` / `SyncFailed` on the Work, and per manifest on its resource template
//!   when the manifest names it (`resourcetemplate.karmada.io/uid`).
//!
//! A Work whose cluster is not Ready (or not yet known) is not sent anywhere: it is looked at
//! again when the Cluster's readiness changes, and every `not_ready_requeue` meanwhile. Applying
//! failures are retried with backoff (`retry_base` doubling to `retry_max`).
//!
//! Deletion: the Work's objects are deleted from the member — only objects this Work manages —
//! or, under `spec.preserveResourcesOnDeletion`, released (Karmada's labels and annotations
//! stripped, the object left running); then the finalizer goes. A Work whose Cluster is gone loses
//! its finalizer without anyone touching the member (gone as the API server says, never
//! concluded from a cache that may not have seen the Cluster yet); so does one whose Cluster is being deleted
//! and is not Ready, or whose unjoin asked to abandon the workloads
//! ([`crate::cluster::UNJOIN_ANNOTATION`]). A manifest whose kind Flotilla may not touch in the
//! member (403) cannot have been created by it: it is skipped with a `CleanupWorkFailed` Event
//! rather than holding the Work (and its namespace, and an unjoin) forever.
//!
//! Only Work spec (generation) and deletion changes trigger a reconcile, as with Karmada's
//! `GenerationChangedPredicate`; drift in the member is the work-status controller's to correct.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode, is_cluster_ready};
use flotilla_api::federation::karmada::names::{cluster_of_execution_space, execution_space};
use flotilla_api::federation::karmada::work::{
    CONFLICT_RESOLUTION_ANNOTATION, EXECUTION_FINALIZER, MANAGED_LABEL, TEMPLATE_UID_ANNOTATION, WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION,
    WORK_PERMANENT_ID_LABEL, Work,
};
use flotilla_member::Connection;
use flotilla_member::access::Clients;
use flotilla_member::apply::{self, Applied, ApplyError, ApplyOptions, ObjectRef};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::cluster::UNJOIN_ANNOTATION;
use flotilla_runtime::{Events, condition, condition_status, finalizer_patch, set_condition, with_finalizer, without_finalizer};
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "execution";

/// Condition types and reasons on a Work (Karmada's).
pub const APPLIED: &str = "Applied";
pub const DISPATCHING: &str = "Dispatching";
pub const REASON_APPLIED_SUCCESSFUL: &str = "AppliedSuccessful";
pub const REASON_APPLIED_FAILED: &str = "AppliedFailed";
pub const APPLIED_MESSAGE: &str = "Manifest has been successfully applied";
pub const REASON_DISPATCHING: &str = "Dispatching";
pub const REASON_SUSPEND_DISPATCHING: &str = "SuspendDispatching";
pub const DISPATCHING_MESSAGE: &str = "Work is being dispatched to member clusters.";
pub const SUSPEND_DISPATCHING_MESSAGE: &str = "Work dispatching is in a suspended state.";
/// Event reasons (Karmada's `pkg/events`).
pub const EVENT_SYNC_SUCCEED: &str = "SyncSucceed";
pub const EVENT_SYNC_FAILED: &str = "SyncFailed";
pub const EVENT_WORK_DISPATCHING: &str = "WorkDispatching";
pub const EVENT_CLEANUP_WORK_FAILED: &str = "CleanupWorkFailed";

#[derive(Clone, Debug)]
pub struct Config {
    /// Works reconciled at once (Karmada: `--concurrent-work-syncs=5`).
    pub workers: usize,
    /// How often a Work waiting for its cluster to become Ready is looked at again (besides the
    /// Cluster's own readiness changes, which wake it at once).
    pub not_ready_requeue: Duration,
    /// First retry after a failed apply; doubles per failure up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Timeout of each request to a member.
    pub member_timeout: Duration,
    /// How often a Work with an object held as the edge left it (ADR 0032) is looked at again.
    pub held_requeue: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: 5,
            not_ready_requeue: Duration::from_secs(30),
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(300),
            member_timeout: Duration::from_secs(30),
            held_requeue: Duration::from_secs(2),
        }
    }
}

impl Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("execution: workers must be at least 1".into());
        }
        if self.retry_base.is_zero() || self.retry_max < self.retry_base {
            return Err("execution: retry_base must be positive and at most retry_max".into());
        }
        Ok(())
    }
}

/// A Work in the queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkKey {
    pub namespace: String,
    pub name: String,
}

impl WorkKey {
    pub fn of(work: &Work) -> WorkKey {
        WorkKey { namespace: work.namespace().unwrap_or_default(), name: work.name_any() }
    }
}

impl std::fmt::Display for WorkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("work {work}: {step}: {source}")]
    Api { work: WorkKey, step: &'static str, source: kube::Error },
    #[error("work {work}: reaching cluster {cluster}: {source}")]
    Member { work: WorkKey, cluster: String, source: flotilla_member::MemberError },
    #[error("work {work}: applying to cluster {cluster}: {message}")]
    Apply { work: WorkKey, cluster: String, message: String },
    #[error("work {work}: removing its objects from cluster {cluster}: {source}")]
    Delete { work: WorkKey, cluster: String, source: ApplyError },
}

pub struct Context {
    pub client: Client,
    pub config: Config,
    clients: Arc<Clients>,
    events: Events,
    works: Store<Work>,
    clusters: Store<Cluster>,
}

// ---------------------------------------------------------------------------------------------
// What a Work's manifest becomes in the member (shared with the work-status controller)

/// The object a Work's manifest becomes in its member: the manifest with the ownership metadata
/// Karmada's Work producers put on it — `karmada.io/managed=true`, the Work's permanent id, the
/// `work.karmada.io/{namespace,name}` annotations — added when the producer did not (a Work
/// written by hand or by another tool), so the object is recognised as managed and its status
/// finds its way back.
pub fn desired_object(work: &Work, manifest: &Value) -> Value {
    let mut obj = manifest.clone();
    let Some(o) = obj.as_object_mut() else { return obj };
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else { return obj };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.entry(MANAGED_LABEL).or_insert_with(|| json!("true"));
        if let Some(id) = work.labels().get(WORK_PERMANENT_ID_LABEL) {
            labels.entry(WORK_PERMANENT_ID_LABEL).or_insert_with(|| json!(id));
        }
    }
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(WORK_NAMESPACE_ANNOTATION.into(), json!(work.namespace().unwrap_or_default()));
        annotations.insert(WORK_NAME_ANNOTATION.into(), json!(work.name_any()));
    }
    obj
}

/// How to apply a manifest: take over an existing unmanaged object only when the manifest (or
/// the Work) says `work.karmada.io/conflict-resolution: overwrite`.
pub fn apply_options(work: &Work, manifest: &Value) -> ApplyOptions {
    let in_manifest = manifest.pointer("/metadata/annotations").and_then(|a| a.get(CONFLICT_RESOLUTION_ANNOTATION)).and_then(Value::as_str);
    let resolution = in_manifest.or_else(|| work.annotations().get(CONFLICT_RESOLUTION_ANNOTATION).map(String::as_str));
    // A Work without an Applied condition has never been applied: its objects are most likely
    // not in the member yet, so creating them needs no read first.
    let never_applied = condition_status(work.status.as_ref().and_then(|s| s.conditions.as_deref()), APPLIED).is_none();
    ApplyOptions { overwrite: resolution == Some("overwrite"), force: false, create_first: never_applied }
}

/// The resource template a manifest was made from, for Events (Karmada's `GenEventRef`: only
/// when the manifest carries `resourcetemplate.karmada.io/uid`).
pub fn template_reference(manifest: &Value) -> Option<ObjectReference> {
    let uid = manifest.pointer("/metadata/annotations").and_then(|a| a.get(TEMPLATE_UID_ANNOTATION)).and_then(Value::as_str).filter(|u| !u.is_empty())?;
    let s = |p: &str| manifest.pointer(p).and_then(Value::as_str).filter(|v| !v.is_empty()).map(str::to_string);
    Some(ObjectReference {
        api_version: s("/apiVersion"),
        kind: s("/kind"),
        namespace: s("/metadata/namespace"),
        name: s("/metadata/name"),
        uid: Some(uid.to_string()),
        ..Default::default()
    })
}

/// `namespace/name` of a manifest as Karmada's messages print it (`klog.KObj`).
pub fn manifest_display(manifest: &Value) -> String {
    let s = |p: &str| manifest.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (ns, name) = (s("/metadata/namespace"), s("/metadata/name"));
    if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") }
}

/// Several errors as Kubernetes' `errors.NewAggregate(...).Error()` prints them: one as itself,
/// more as `[a, b]` with duplicates dropped.
pub fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen[0].to_string(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// The `Applied` condition after applying `succeeded` of `total` manifests with `errors`.
pub fn applied_condition(succeeded: usize, total: usize, errors: &[String]) -> Condition {
    if errors.is_empty() {
        condition(APPLIED, true, REASON_APPLIED_SUCCESSFUL, APPLIED_MESSAGE, None)
    } else {
        condition(APPLIED, false, REASON_APPLIED_FAILED, format!("Failed to apply all manifests ({succeeded}/{total}): {}", aggregate(errors)), None)
    }
}

/// The `Dispatching` condition for a Work.
pub fn dispatching_condition(suspended: bool) -> Condition {
    if suspended {
        condition(DISPATCHING, false, REASON_SUSPEND_DISPATCHING, SUSPEND_DISPATCHING_MESSAGE, None)
    } else {
        condition(DISPATCHING, true, REASON_DISPATCHING, DISPATCHING_MESSAGE, None)
    }
}

pub fn is_suspended(work: &Work) -> bool {
    work.spec.suspend_dispatching == Some(true)
}

/// A cluster the control plane pushes to (Pull clusters are their agent's).
pub fn is_push(cluster: &Cluster) -> bool {
    cluster.spec.sync_mode == ClusterSyncMode::Push && cluster.spec.secret_ref.is_some()
}

pub fn manifests(work: &Work) -> &[Value] {
    work.spec.workload.as_ref().and_then(|w| w.manifests.as_deref()).unwrap_or_default()
}

/// What [`update_work_conditions`] did.
pub(crate) struct ConditionsUpdate {
    /// Whether anything was written.
    pub changed: bool,
}

/// Change a Work's conditions with `change` (which says whether it changed anything), guarded by
/// the resourceVersion it was computed from and retried on conflicts on the freshest copy, as
/// Karmada's `RetryOnConflict`.
///
/// `known` is the caller's copy (the informer's, or what its last write returned): when it needs
/// the change, the first attempt patches against it without a read — a stale copy costs a 409
/// and a read. "Nothing to change" is only ever concluded from a fresh read.
pub(crate) async fn update_work_conditions(
    api: &Api<Work>,
    name: &str,
    known: Option<&Work>,
    change: impl Fn(&mut Vec<Condition>) -> bool,
) -> Result<ConditionsUpdate, kube::Error> {
    let unchanged = ConditionsUpdate { changed: false };
    let mut last = None;
    let mut candidate = known.cloned();
    for _ in 0..5 {
        let (work, fresh) = match candidate.take() {
            Some(work) => (work, false),
            None => match api.get_opt(name).await? {
                Some(work) => (work, true),
                None => return Ok(unchanged),
            },
        };
        let mut conditions = work.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        if !change(&mut conditions) {
            if fresh {
                return Ok(unchanged);
            }
            // The caller's copy needs nothing: confirm on a fresh read.
            continue;
        }
        let patch = json!({"metadata": {"resourceVersion": work.metadata.resource_version}, "status": {"conditions": conditions}});
        match api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(ConditionsUpdate { changed: true }),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(unchanged),
            Err(kube::Error::Api(s)) if s.code == 409 => last = Some(kube::Error::Api(s)),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| kube::Error::Service("conflicts kept happening".into())))
}

/// What a deletion does with the member's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Delete them.
    Delete,
    /// Strip Karmada's labels and annotations, leave them running.
    Release,
    /// Do not contact the member; just drop the finalizer.
    Abandon,
    /// The member cannot be reached now and the Work must wait.
    Wait,
}

/// Karmada's decision for a deleted Work: `cluster` is None when the Cluster is gone.
pub fn removal(work: &Work, cluster: Option<&Cluster>) -> Removal {
    let Some(cluster) = cluster else { return Removal::Abandon };
    let terminating = cluster.metadata.deletion_timestamp.is_some();
    let unjoin = if terminating { cluster.annotations().get(UNJOIN_ANNOTATION).map(String::as_str) } else { None };
    if unjoin == Some("abandon") {
        return Removal::Abandon;
    }
    if !is_cluster_ready(cluster) {
        // Karmada: an unready cluster blocks the deletion unless the cluster itself is going.
        return if terminating { Removal::Abandon } else { Removal::Wait };
    }
    if work.spec.preserve_resources_on_deletion == Some(true) || unjoin == Some("keep") { Removal::Release } else { Removal::Delete }
}

// ---------------------------------------------------------------------------------------------
// Reconcile

impl Context {
    /// A context reading Works and Clusters from `works` and `clusters` (the controller's own
    /// watches in [`run`]; tests hand in stores they fill themselves).
    pub fn new(client: Client, config: Config, clients: Arc<Clients>, works: Store<Work>, clusters: Store<Cluster>) -> Context {
        Context { events: Events::new(client.clone(), NAME), client, config, clients, works, clusters }
    }

    fn work(&self, key: &WorkKey) -> Option<Arc<Work>> {
        self.works.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace))
    }

    fn cluster(&self, name: &str) -> Option<Arc<Cluster>> {
        self.clusters.get(&reflector::ObjectRef::new(name))
    }

    async fn connect(&self, key: &WorkKey, cluster: &Cluster) -> Result<Connection, Error> {
        self.clients.connect(&self.client, cluster, self.config.member_timeout).await.map_err(|source| Error::Member {
            work: key.clone(),
            cluster: cluster.name_any(),
            source,
        })
    }
}

pub async fn reconcile(key: WorkKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(cluster_name) = cluster_of_execution_space(&key.namespace).map(str::to_string) else { return Ok(Next::Done) };
    let Some(work) = ctx.work(&key) else { return Ok(Next::Done) };
    let cluster = ctx.cluster(&cluster_name);
    // Another's to carry out: a Pull cluster's agent (on the control plane), or another cluster.
    if cluster.as_ref().is_some_and(|c| !ctx.clients.serves(c)) {
        return Ok(Next::Done);
    }
    let api: Api<Work> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let err = |step: &'static str| {
        let work = key.clone();
        move |source| Error::Api { work, step, source }
    };
    if work.metadata.deletion_timestamp.is_some() {
        // "The Cluster is gone" lets the finalizer go without touching the member, so it is
        // never concluded from the cache alone: a cache that has not seen the Cluster yet (at
        // start-up, after a relist) would leave the Work's objects in the member for good.
        let cluster = match cluster {
            Some(c) => Some(c),
            None => Api::<Cluster>::all(ctx.client.clone()).get_opt(&cluster_name).await.map_err(err("reading the cluster"))?.map(Arc::new),
        };
        return remove(&ctx, &key, &api, &work, cluster.as_deref()).await;
    }
    // A suspended Work has put nothing in the member, so it needs no finalizer: the multi-cluster
    // service reports (never dispatched) go without one, as in Karmada.
    if let Some(list) = with_finalizer(work.metadata.finalizers.as_ref(), EXECUTION_FINALIZER).filter(|_| !is_suspended(&work)) {
        let patch = finalizer_patch(list, work.metadata.resource_version.as_deref());
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Next::Done),
            // Our copy was stale (a status write in between): look again shortly.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Next::After(ctx.config.retry_base)),
            Err(e) => return Err(err("adding the finalizer")(e)),
        }
    }
    let suspended = is_suspended(&work);
    let dispatching = dispatching_condition(suspended);
    // Karmada writes `Dispatching` before anything else. A Work that goes on to be applied has
    // it written with `Applied`, in one write; one that stops short has it written on its own.
    let reached = if suspended { Err(Ok(Next::Done)) } else { reach(&ctx, &key, &cluster_name, cluster).await };
    match reached {
        Ok(conn) => sync(&ctx, &key, &api, &work, &dispatching, &conn).await,
        Err(stop) => {
            let dispatched = update_work_conditions(&api, &key.name, Some(&*work), |conds| set_dispatching(conds, &dispatching))
                .await
                .map_err(err("updating the Dispatching condition"))?;
            if dispatched.changed {
                ctx.events.publish(&*work, false, EVENT_WORK_DISPATCHING, "Dispatch", dispatching.message.clone()).await;
            }
            stop
        }
    }
}

/// The connection to the Work's member, or what the reconcile returns instead: the cluster is
/// missing, terminating, unreachable or not Ready, the member is held, or connecting failed.
async fn reach(ctx: &Context, key: &WorkKey, cluster_name: &str, cluster: Option<Arc<Cluster>>) -> Result<Connection, Result<Next, Error>> {
    let Some(cluster) = cluster.filter(|c| ctx.clients.reaches(c) && c.metadata.deletion_timestamp.is_none()) else {
        tracing::debug!(controller = NAME, work = %key, cluster = %cluster_name, "cluster missing, terminating or unreachable from here; waiting");
        return Err(Ok(Next::After(ctx.config.not_ready_requeue)));
    };
    // A pull agent does not wait for its own Cluster's Ready (the control plane derives it from
    // the agent's own Lease; the agent's holds say when it may write, ADR 0032).
    if !is_cluster_ready(&cluster) && ctx.clients.own_cluster().is_none() {
        tracing::debug!(controller = NAME, work = %key, cluster = %cluster_name, "cluster not ready; waiting");
        return Err(Ok(Next::After(ctx.config.not_ready_requeue)));
    }
    if ctx.clients.holds().holds_all() {
        tracing::debug!(controller = NAME, work = %key, cluster = %cluster_name, "the member is catching up with what changed in it while offline; waiting");
        return Err(Ok(Next::After(ctx.config.held_requeue)));
    }
    ctx.connect(key, &cluster).await.map_err(Err)
}

/// Set `dispatching` unless the Work's `Dispatching` already has its status; whether it did.
fn set_dispatching(conds: &mut Vec<Condition>, dispatching: &Condition) -> bool {
    condition_status(Some(conds), DISPATCHING).is_none_or(|c| c.status != dispatching.status) && set_condition(conds, dispatching.clone())
}

/// Apply every manifest, then record the outcome: `Applied`, and `dispatching` with it.
async fn sync(ctx: &Context, key: &WorkKey, api: &Api<Work>, work: &Work, dispatching: &Condition, conn: &Connection) -> Result<Next, Error> {
    let cluster = conn.cluster.as_str();
    let list = manifests(work);
    let mut errors = Vec::new();
    let mut wrote = false;
    let mut held = 0usize;
    for manifest in list {
        let desired = desired_object(work, manifest);
        let what = manifest_display(manifest);
        // Changed at the edge while offline and not decided yet (ADR 0032): left as it is.
        if ObjectRef::of(&desired).is_ok_and(|r| ctx.clients.holds().is_held(&r)) {
            tracing::debug!(controller = NAME, work = %key, cluster, object = %what, "held as the edge left it until the control plane decides");
            held += 1;
            continue;
        }
        match apply::apply(conn.member(), &desired, apply_options(work, manifest)).await {
            Ok(applied) => {
                if !matches!(applied, Applied::Unchanged(_)) {
                    wrote = true;
                    if let Some(r) = template_reference(manifest) {
                        ctx.events
                            .publish_ref(&r, false, EVENT_SYNC_SUCCEED, "Apply", format!("Successfully applied resource({what}) to cluster {cluster}"))
                            .await;
                    }
                }
            }
            Err(e) => {
                tracing::info!(controller = NAME, work = %key, cluster, object = %what, error = %e, "applying a manifest failed");
                if matches!(e, ApplyError::Unauthorized { .. }) {
                    // The credential may have been rotated since it was read: read it again.
                    ctx.clients.forget(cluster);
                }
                if let Some(r) = template_reference(manifest) {
                    ctx.events
                        .publish_ref(
                            &r,
                            true,
                            EVENT_SYNC_FAILED,
                            "Apply",
                            format!("Failed to create or update resource({what}) in member cluster({cluster}): {e}"),
                        )
                        .await;
                }
                errors.push(e.to_string());
            }
        }
    }
    if held > 0 && errors.is_empty() {
        // Not applied yet, so not acknowledged as applied: looked at again until released.
        return Ok(Next::After(ctx.config.held_requeue));
    }
    let mut applied = applied_condition(list.len() - errors.len() - held, list.len(), &errors);
    // A pull agent says which generation it applied (Karmada's condition does not): its record
    // of what the control plane acknowledged (ADR 0032) must not take a Work updated while its
    // objects were held for one applied.
    if ctx.clients.own_cluster().is_some() {
        applied.observed_generation = work.metadata.generation;
    }
    let dispatched = std::sync::atomic::AtomicBool::new(false);
    let changed = update_work_conditions(api, &key.name, Some(work), |conds| {
        let newly = set_dispatching(conds, dispatching);
        dispatched.store(newly, std::sync::atomic::Ordering::Relaxed);
        set_condition(conds, applied.clone()) || newly
    })
    .await
    .map_err(|source| Error::Api { work: key.clone(), step: "updating the Applied condition", source })?
    .changed;
    if changed && dispatched.load(std::sync::atomic::Ordering::Relaxed) {
        ctx.events.publish(work, false, EVENT_WORK_DISPATCHING, "Dispatch", dispatching.message.clone()).await;
    }
    if errors.is_empty() {
        if wrote || changed {
            ctx.events.publish(work, false, EVENT_SYNC_SUCCEED, "Sync", format!("Sync work({key}) to cluster({cluster}) successful.")).await;
        }
        return Ok(Next::Done);
    }
    let message = aggregate(&errors);
    ctx.events.publish(work, true, EVENT_SYNC_FAILED, "Sync", format!("Failed to sync work({key}) to cluster({cluster}), err: {message}")).await;
    Err(Error::Apply { work: key.clone(), cluster: cluster.into(), message })
}

/// A deleted Work: remove (or release) its objects, then drop the finalizer.
async fn remove(ctx: &Context, key: &WorkKey, api: &Api<Work>, work: &Work, cluster: Option<&Cluster>) -> Result<Next, Error> {
    if !work.finalizers().iter().any(|f| f == EXECUTION_FINALIZER) {
        return Ok(Next::Done);
    }
    let removal = removal(work, cluster);
    match (removal, cluster) {
        (Removal::Wait, _) => return Ok(Next::After(ctx.config.not_ready_requeue)),
        (Removal::Delete | Removal::Release, Some(cluster)) => {
            let conn = ctx.connect(key, cluster).await?;
            let work_id = work.labels().get(WORK_PERMANENT_ID_LABEL).cloned();
            for manifest in manifests(work) {
                let Ok(r) = ObjectRef::of(manifest) else { continue };
                match apply::delete(conn.member(), &r, removal == Removal::Release, work_id.as_deref()).await {
                    Ok(outcome) => tracing::debug!(controller = NAME, work = %key, object = %manifest_display(manifest), ?outcome, "removed from the member"),
                    // Flotilla may not even read this kind there, so it cannot have made the
                    // object: holding the Work would only block its namespace and cluster.
                    Err(e @ ApplyError::Forbidden { .. }) => {
                        let note = format!("Skipped removing resource({}) from cluster {}: {e}", manifest_display(manifest), conn.cluster);
                        ctx.events.publish(work, true, EVENT_CLEANUP_WORK_FAILED, "Delete", note).await;
                    }
                    Err(source) => return Err(Error::Delete { work: key.clone(), cluster: conn.cluster.clone(), source }),
                }
            }
        }
        _ => {}
    }
    // A fresh read: the cached Work may predate writes to it.
    let err = |step: &'static str| {
        let work = key.clone();
        move |source| Error::Api { work, step, source }
    };
    let Some(fresh) = api.get_opt(&key.name).await.map_err(err("reading the work"))? else { return Ok(Next::Done) };
    if let Some(list) = without_finalizer(fresh.metadata.finalizers.as_ref(), EXECUTION_FINALIZER) {
        let patch = finalizer_patch(list, fresh.metadata.resource_version.as_deref());
        match api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(err("removing the finalizer")(e)),
        }
    }
    Ok(Next::Done)
}

// ---------------------------------------------------------------------------------------------
// Run

/// What of a Work makes the controller look at it again: its spec (generation), its deletion
/// and our finalizer.
type WorkPrint = (Option<i64>, bool, bool, Option<String>);

fn work_fingerprint(w: &Work) -> WorkPrint {
    // Without a generation (a server that does not keep one), the spec itself.
    let spec = w.metadata.generation.is_none().then(|| serde_json::to_string(&w.spec).unwrap_or_default());
    (w.metadata.generation, w.metadata.deletion_timestamp.is_some(), w.finalizers().iter().any(|f| f == EXECUTION_FINALIZER), spec)
}

/// What of a Cluster matters to the Works on it: readiness, deletion, how to reach it.
pub(crate) type ClusterPrint = (bool, bool, bool, Option<String>, Option<String>, Option<String>);

pub(crate) fn cluster_fingerprint(c: &Cluster) -> ClusterPrint {
    (
        is_cluster_ready(c),
        c.metadata.deletion_timestamp.is_some(),
        is_push(c),
        c.spec.api_endpoint.clone(),
        c.spec.secret_ref.as_ref().map(|s| format!("{}/{}", s.namespace, s.name)),
        // A member role widened by `flotilla join --update`: refused Works may apply now.
        c.annotations().get(flotilla_member::join::MEMBER_ROLE_ANNOTATION).cloned(),
    )
}

/// Queue every Work of `cluster`'s execution space.
pub(crate) fn enqueue_cluster(works: &Store<Work>, queue: &WorkQueue<WorkKey>, cluster: &str) {
    let es = execution_space(cluster);
    for w in works.state().iter().filter(|w| w.namespace().as_deref() == Some(es.as_str())) {
        queue.add(WorkKey::of(w));
    }
}

/// Run the controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config, clients: Arc<Clients>) {
    if let Err(e) = config.validate() {
        tracing::error!(controller = NAME, error = %e, "invalid configuration; not started");
        return;
    }
    let queue = WorkQueue::new(config.retry_base, config.retry_max);
    let seen: Mutex<HashMap<WorkKey, WorkPrint>> = Mutex::default();
    let q = queue.clone();
    let (works, works_task) = rt.informers.watch::<Work>(move |w: &Work, deleted| {
        if w.namespace().as_deref().and_then(cluster_of_execution_space).is_none() {
            return;
        }
        let key = WorkKey::of(w);
        if deleted {
            seen.lock().remove(&key);
            return;
        }
        let print = work_fingerprint(w);
        if seen.lock().insert(key.clone(), print.clone()).as_ref() != Some(&print) {
            q.add(key);
        }
    });
    let q = queue.clone();
    let works_for_clusters = works.clone();
    let cluster_seen: Mutex<HashMap<String, ClusterPrint>> = Mutex::default();
    let clients_for_clusters = clients.clone();
    let (clusters, clusters_task) = rt.informers.watch::<Cluster>(move |c: &Cluster, deleted| {
        let name = c.name_any();
        if deleted {
            cluster_seen.lock().remove(&name);
            clients_for_clusters.forget(&name);
            enqueue_cluster(&works_for_clusters, &q, &name);
            return;
        }
        let print = cluster_fingerprint(c);
        if cluster_seen.lock().insert(name.clone(), print.clone()).as_ref() != Some(&print) {
            enqueue_cluster(&works_for_clusters, &q, &name);
        }
    });
    let ctx = Arc::new(Context::new(client, config.clone(), clients, works, clusters));
    let workers = run_workers(queue, config.workers, NAME, move |key: WorkKey| {
        let span = tracing::debug_span!("reconcile", controller = NAME, work = %key);
        tracing::Instrument::instrument(reconcile(key, ctx.clone()), span)
    });
    tokio::select! {
        _ = works_task => tracing::warn!(controller = NAME, "work watch ended"),
        _ = clusters_task => tracing::warn!(controller = NAME, "cluster watch ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::cluster::{ClusterSpec, ClusterStatus, LocalSecretReference};
    use flotilla_api::federation::karmada::work::WorkSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn work(manifest: Value) -> Work {
        let mut w = Work::new("nginx-687f7fb96f", WorkSpec::default());
        w.metadata.namespace = Some("karmada-es-m1".into());
        w.metadata.labels = Some([(WORK_PERMANENT_ID_LABEL.to_string(), "id-1".to_string())].into());
        w.spec.workload = Some(flotilla_api::federation::karmada::work::WorkloadTemplate { manifests: Some(vec![manifest]) });
        w
    }

    fn cluster(ready: Option<bool>, deleting: bool, unjoin: Option<&str>) -> Cluster {
        let mut c = Cluster::new(
            "m1",
            ClusterSpec { secret_ref: Some(LocalSecretReference { namespace: "karmada-cluster".into(), name: "m1".into() }), ..Default::default() },
        );
        if let Some(r) = ready {
            c.status = Some(ClusterStatus { conditions: Some(vec![condition("Ready", r, "x", "", None)]), ..Default::default() });
        }
        if deleting {
            c.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        }
        if let Some(u) = unjoin {
            c.metadata.annotations = Some([(UNJOIN_ANNOTATION.to_string(), u.to_string())].into());
        }
        c
    }

    #[test]
    fn applied_messages_are_karmadas() {
        let ok = applied_condition(1, 1, &[]);
        assert_eq!((ok.status.as_str(), ok.reason.as_str(), ok.message.as_str()), ("True", "AppliedSuccessful", "Manifest has been successfully applied"));
        let one = applied_condition(0, 1, &["the cluster m1 refused to create roles.rbac.authorization.k8s.io: forbidden".into()]);
        assert_eq!((one.status.as_str(), one.reason.as_str()), ("False", "AppliedFailed"));
        assert_eq!(one.message, "Failed to apply all manifests (0/1): the cluster m1 refused to create roles.rbac.authorization.k8s.io: forbidden");
        let two = applied_condition(1, 3, &["a".into(), "b".into(), "a".into()]);
        assert_eq!(two.message, "Failed to apply all manifests (1/3): [a, b]");
        let suspended = dispatching_condition(true);
        assert_eq!(
            (suspended.status.as_str(), suspended.reason.as_str(), suspended.message.as_str()),
            ("False", "SuspendDispatching", "Work dispatching is in a suspended state.")
        );
        assert_eq!(dispatching_condition(false).reason, "Dispatching");
    }

    #[test]
    fn the_desired_object_carries_ownership_and_keeps_the_producers() {
        let m = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d", "labels": {"app": "x", WORK_PERMANENT_ID_LABEL: "from-producer"}}});
        let d = desired_object(&work(m.clone()), &m);
        assert_eq!(d["metadata"]["labels"][MANAGED_LABEL], "true");
        assert_eq!(d["metadata"]["labels"][WORK_PERMANENT_ID_LABEL], "from-producer");
        assert_eq!(d["metadata"]["labels"]["app"], "x");
        assert_eq!(d["metadata"]["annotations"][WORK_NAMESPACE_ANNOTATION], "karmada-es-m1");
        assert_eq!(d["metadata"]["annotations"][WORK_NAME_ANNOTATION], "nginx-687f7fb96f");
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(desired_object(&work(bare.clone()), &bare)["metadata"]["labels"][WORK_PERMANENT_ID_LABEL], "id-1");
    }

    #[test]
    fn overwrite_only_when_asked() {
        let plain = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(!apply_options(&work(plain.clone()), &plain).overwrite);
        let asked = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {CONFLICT_RESOLUTION_ANNOTATION: "overwrite"}}});
        assert!(apply_options(&work(asked.clone()), &asked).overwrite);
        let mut w = work(plain.clone());
        w.metadata.annotations = Some([(CONFLICT_RESOLUTION_ANNOTATION.to_string(), "overwrite".to_string())].into());
        assert!(apply_options(&w, &plain).overwrite);
        let abort = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {CONFLICT_RESOLUTION_ANNOTATION: "abort"}}});
        assert!(!apply_options(&w, &abort).overwrite, "the manifest's own choice comes first");
    }

    #[test]
    fn deletion_follows_cluster_state_preserve_and_unjoin() {
        let m = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let w = work(m.clone());
        assert_eq!(removal(&w, None), Removal::Abandon);
        assert_eq!(removal(&w, Some(&cluster(Some(true), false, None))), Removal::Delete);
        assert_eq!(removal(&w, Some(&cluster(Some(false), false, None))), Removal::Wait);
        assert_eq!(removal(&w, Some(&cluster(None, false, None))), Removal::Wait);
        assert_eq!(removal(&w, Some(&cluster(Some(false), true, None))), Removal::Abandon);
        assert_eq!(removal(&w, Some(&cluster(Some(true), true, Some("keep")))), Removal::Release);
        assert_eq!(removal(&w, Some(&cluster(Some(true), true, Some("abandon")))), Removal::Abandon);
        // The unjoin annotation means nothing while the cluster stays.
        assert_eq!(removal(&w, Some(&cluster(Some(true), false, Some("abandon")))), Removal::Delete);
        let mut preserved = w.clone();
        preserved.spec.preserve_resources_on_deletion = Some(true);
        assert_eq!(removal(&preserved, Some(&cluster(Some(true), false, None))), Removal::Release);
    }

    #[test]
    fn template_references_need_the_template_uid() {
        let m =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "n", "namespace": "d", "annotations": {TEMPLATE_UID_ANNOTATION: "u"}}});
        let r = template_reference(&m).unwrap();
        assert_eq!((r.kind.as_deref(), r.namespace.as_deref(), r.uid.as_deref()), (Some("Deployment"), Some("d"), Some("u")));
        assert!(template_reference(&json!({"kind": "ConfigMap", "metadata": {"name": "n"}})).is_none());
        assert_eq!(manifest_display(&m), "d/n");
    }
}
