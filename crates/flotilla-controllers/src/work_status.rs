//! The work-status controller (Push clusters): watches, in each member, the kinds that Works put
//! there and reports each object back on its Work — `status.manifestStatuses[]` with the
//! identifier (`ordinal`, `group`, `version`, `kind`, `namespace`, `name`), the reflected
//! `status` ([`reflect_status`]) and the `health` ([`interpret_health`]) — and puts objects
//! back when they drift: one changed in the member away from its manifest is re-applied (with
//! Karmada's Retain, so member-owned fields stay), one deleted is re-created.
//!
//! Watches start on demand: the first Work with a manifest of some kind in a member starts one
//! watch of that kind there, over all namespaces, selecting only objects labelled
//! `work.karmada.io/permanent-id` (Karmada's work label). A member object's event queues its
//! Work (found through the `work.karmada.io/{namespace,name}` annotations, which survive the
//! object's deletion in the watch event). A kind the member does not serve or refuses to list
//! (403: outside Flotilla's role there) is tried again after `watch_retry`. A cluster's watches
//! stop when the Cluster goes (or stops being a Push cluster) and restart when its credential
//! changes.
//!
//! Drift is corrected only for Works the execution controller applied (`Applied` True, or False
//! because a correction failed here), not suspended, on a Ready cluster; a failed correction
//! sets `Applied` False `ReCreateFailed` and is retried with backoff; the first later round
//! that finds every object as its manifest wants it (put back here, or applied meanwhile by the
//! execution controller) restores `Applied` True `ReCreateSuccessful`. A correction is made only
//! after the API server confirms the cached Work (same uid and generation, not being deleted),
//! and an object re-created while the Work started going is removed again: the execution
//! controller's removal and a correction from a stale cache never leave an object behind.
//!
//! Deviations from Karmada, deliberate: statuses are merged per manifest (Karmada keeps one
//! entry, its Works having one manifest); watches are label-selected and a drift check compares
//! content ([`apply::needs_update`]) rather than recorded resourceVersions, so a status-only
//! change of a member object costs no request; success Events (`ReflectStatusSucceed`,
//! `InterpretHealthSucceed` on every change) are not published — failures are; a correction's
//! `SyncSucceed`/`SyncFailed` goes to the resource template as Karmada's does, and to the Work
//! when the manifest names no template (Karmada drops it). A Deployment whose manifest lacks
//! `resourcetemplate.karmada.io/generation` has no reflected status (Karmada's interpreter
//! refuses it), only its health.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::karmada::names::cluster_of_execution_space;
use flotilla_api::federation::karmada::work::{
    ManifestStatus, ResourceIdentifier, WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, WORK_PERMANENT_ID_LABEL, Work,
};
use flotilla_api::interpreter::{interpret_health, reflect_status};
use flotilla_member::access::Clients;
use flotilla_member::apply::{self, Applied, ObjectRef};
use flotilla_member::{Connection, MemberAccess};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::execution::{
    APPLIED, APPLIED_MESSAGE, ClusterPrint, EVENT_SYNC_FAILED, EVENT_SYNC_SUCCEED, WorkKey, aggregate, apply_options, cluster_fingerprint, desired_object,
    enqueue_cluster, is_suspended, manifest_display, manifests, template_reference, update_work_conditions,
};
use flotilla_runtime::{Events, condition, condition_status, set_condition};
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "work-status";

/// `Applied` reasons this controller writes (Karmada's).
pub const REASON_RECREATE_FAILED: &str = "ReCreateFailed";
pub const REASON_RECREATE_SUCCESSFUL: &str = "ReCreateSuccessful";
/// Event reason when a member object's status cannot be reflected.
pub const EVENT_REFLECT_STATUS_FAILED: &str = "ReflectStatusFailed";

#[derive(Clone, Debug)]
pub struct Config {
    /// Works reconciled at once.
    pub workers: usize,
    /// Timeout of each request to a member (re-applies).
    pub member_timeout: Duration,
    /// Read timeout of the clients the member watches use: longer than the server's watch
    /// timeout (kube-rs asks for 290 s), or idle watches break.
    pub watch_timeout: Duration,
    /// How long before trying again to watch a kind the member does not serve or refused.
    pub watch_retry: Duration,
    /// First retry after a failed correction; doubles per failure up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How often a Work with an object held as the edge left it (ADR 0032) is looked at again
    /// for its release.
    pub held_recheck: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: 5,
            member_timeout: Duration::from_secs(30),
            watch_timeout: Duration::from_secs(330),
            watch_retry: Duration::from_secs(30),
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(300),
            held_recheck: Duration::from_secs(2),
        }
    }
}

impl Config {
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("work-status: workers must be at least 1".into());
        }
        if self.watch_timeout <= Duration::from_secs(290) {
            return Err("work-status: watch_timeout must exceed the 290 s server-side watch timeout".into());
        }
        if self.retry_base.is_zero() || self.retry_max < self.retry_base {
            return Err("work-status: retry_base must be positive and at most retry_max".into());
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("work {work}: reaching cluster {cluster}: {source}")]
    Member { work: WorkKey, cluster: String, source: flotilla_member::MemberError },
    #[error("work {work}: {step}: {source}")]
    Api { work: WorkKey, step: &'static str, source: kube::Error },
    #[error("work {work}: correcting its objects in cluster {cluster}: {message}")]
    Correct { work: WorkKey, cluster: String, message: String },
}

/// One kind watched in one member.
struct KindWatch {
    resource: ApiResource,
    namespaced: bool,
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KindWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KindWatch {
    fn get(&self, r: &ObjectRef) -> Option<Value> {
        let key = reflector::ObjectRef::new_with(&r.name, self.resource.clone());
        let key = if self.namespaced { key.within(r.namespace.as_deref().unwrap_or("default")) } else { key };
        self.store.get(&key).and_then(|o| serde_json::to_value(&*o).ok())
    }
}

enum KindState {
    Running(Arc<KindWatch>),
    Failed { since: Instant, reason: String },
}

/// The watches of one member, valid for one credential.
struct ClusterWatches {
    access: u64,
    kinds: HashMap<GroupVersionKind, KindState>,
}

type Watches = Arc<Mutex<HashMap<String, ClusterWatches>>>;

pub struct Context {
    pub client: Client,
    pub config: Config,
    clients: Arc<Clients>,
    watch_clients: Arc<Clients>,
    events: Events,
    works: Store<Work>,
    clusters: Store<Cluster>,
    queue: Arc<WorkQueue<WorkKey>>,
    watches: Watches,
}

impl Context {
    /// A context reading Works and Clusters from `works` and `clusters` (the controller's own
    /// watches in [`start`]; tests hand in stores they fill themselves), with no member watch
    /// started yet.
    pub fn new(client: Client, config: Config, clients: Arc<Clients>, works: Store<Work>, clusters: Store<Cluster>) -> Arc<Context> {
        Arc::new(Context {
            events: Events::new(client.clone(), NAME),
            client,
            queue: WorkQueue::new(config.retry_base, config.retry_max),
            config,
            watch_clients: Arc::new(clients.same_mode()),
            clients,
            works,
            clusters,
            watches: Arc::default(),
        })
    }

    /// Whether the watch of `gvk` in `cluster` is running and has listed the member once.
    pub fn is_synced(&self, cluster: &str, gvk: &GroupVersionKind) -> bool {
        matches!(self.watches.lock().get(cluster).and_then(|cw| cw.kinds.get(gvk)), Some(KindState::Running(kw)) if kw.synced.load(Ordering::SeqCst))
    }

    /// The member object `r` as the member watch last saw it (None: absent, or not watched).
    pub fn observed(&self, cluster: &str, r: &ObjectRef) -> Option<Value> {
        match self.watches.lock().get(cluster)?.kinds.get(&r.gvk)? {
            KindState::Running(kw) => kw.get(r),
            KindState::Failed { .. } => None,
        }
    }

    /// The kinds watched in each member (`group/version/Kind`), and why the failed ones are not.
    pub fn watched(&self) -> BTreeMap<String, Vec<String>> {
        self.watches
            .lock()
            .iter()
            .map(|(cluster, cw)| {
                let mut kinds: Vec<String> = cw
                    .kinds
                    .iter()
                    .map(|(gvk, state)| match state {
                        KindState::Running(_) => format!("{}/{}/{}", gvk.group, gvk.version, gvk.kind),
                        KindState::Failed { reason, .. } => format!("{}/{}/{} (not watched: {reason})", gvk.group, gvk.version, gvk.kind),
                    })
                    .collect();
                kinds.sort();
                (cluster.clone(), kinds)
            })
            .collect()
    }

    fn work(&self, key: &WorkKey) -> Option<Arc<Work>> {
        self.works.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace))
    }
}

/// The Work a member object belongs to, from its annotations; only Works of `cluster`.
fn work_of(obj: &DynamicObject, cluster: &str) -> Option<WorkKey> {
    let a = obj.metadata.annotations.as_ref()?;
    let namespace = a.get(WORK_NAMESPACE_ANNOTATION)?;
    (cluster_of_execution_space(namespace) == Some(cluster))
        .then(|| WorkKey { namespace: namespace.clone(), name: a.get(WORK_NAME_ANNOTATION).cloned().unwrap_or_default() })
}

/// True when `observed` is this Work's (or names no Work: a correction will say whose it is).
fn owned_by(observed: &Value, work: &WorkKey) -> bool {
    let a = |k: &str| observed.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(Value::as_str);
    match (a(WORK_NAMESPACE_ANNOTATION), a(WORK_NAME_ANNOTATION)) {
        (Some(ns), Some(name)) => ns == work.namespace && name == work.name,
        _ => true,
    }
}

/// A watch error the member will keep answering the same way (no permission, no such resource).
fn refused(e: &watcher::Error) -> Option<String> {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => (s.code, s.message.clone()),
        watcher::Error::WatchError(s) => (s.code, s.message.clone()),
        _ => return None,
    };
    matches!(code.0, 401 | 403 | 404 | 405).then(|| format!("{} {}", code.0, code.1))
}

/// `manifestStatuses[]` entry of the manifest at `ordinal` from its member copy, as Karmada's
/// `reflectStatus` builds it; the error is the interpreter's when the status could not be
/// reflected (the entry then has none).
pub fn manifest_status(ordinal: usize, r: &ObjectRef, observed: &Value) -> (ManifestStatus, Option<String>) {
    let (status, error) = match reflect_status(observed) {
        Ok(s) => (s, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let identifier = ResourceIdentifier {
        ordinal: ordinal as i32,
        group: Some(r.gvk.group.clone()),
        version: r.gvk.version.clone(),
        kind: r.gvk.kind.clone(),
        // Karmada leaves it empty.
        resource: String::new(),
        namespace: Some(observed.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string()),
        name: r.name.clone(),
    };
    let version = flotilla_api::federation::kubefed::version::object_version(observed);
    let remote_status = flotilla_member::apply::is_kubefed_managed(observed).then(|| observed.get("status").filter(|s| !s.is_null()).cloned()).flatten();
    (ManifestStatus { identifier, status, health: Some(interpret_health(observed)), version, remote_status }, error)
}

/// The new `manifestStatuses`: `fresh` entries, plus the `current` entries of manifests that could
/// not be observed this time (`unobserved` ordinals), by ordinal.
pub fn merge_statuses(current: &[ManifestStatus], fresh: Vec<ManifestStatus>, unobserved: &[i32]) -> Vec<ManifestStatus> {
    let mut out = fresh;
    out.extend(current.iter().filter(|s| unobserved.contains(&s.identifier.ordinal)).cloned());
    out.sort_by_key(|s| s.identifier.ordinal);
    out
}

fn access_fingerprint(access: &MemberAccess) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (&access.endpoint, &access.token, &access.ca_bundle, access.insecure).hash(&mut h);
    h.finish()
}

/// The watch connection to `cluster`, resetting its watches when its credential changed.
async fn ensure_cluster(ctx: &Context, key: &WorkKey, cluster: &Cluster) -> Result<Connection, Error> {
    let name = cluster.name_any();
    let member_err = |source| Error::Member { work: key.clone(), cluster: name.clone(), source };
    let access = ctx.clients.access(&ctx.client, cluster).await.map_err(member_err)?;
    let conn = ctx.watch_clients.connection(&access, ctx.config.watch_timeout).map_err(member_err)?;
    let print = access_fingerprint(&access);
    let mut watches = ctx.watches.lock();
    if watches.get(&name).is_none_or(|cw| cw.access != print) {
        // Dropping the old entry stops its watches.
        watches.insert(name.clone(), ClusterWatches { access: print, kinds: HashMap::new() });
    }
    Ok(conn)
}

/// The watch of `gvk` in `cluster`, started if needed; None while the kind cannot be watched.
async fn ensure_kind_watch(ctx: &Arc<Context>, cluster: &str, conn: &Connection, gvk: &GroupVersionKind) -> Option<Arc<KindWatch>> {
    match ctx.watches.lock().get(cluster)?.kinds.get(gvk) {
        Some(KindState::Running(k)) => return Some(k.clone()),
        Some(KindState::Failed { since, .. }) if since.elapsed() < ctx.config.watch_retry => return None,
        _ => {}
    }
    let served = match conn.discovery.resolve(&conn.client, gvk).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err("the member does not serve it".to_string()),
        Err(e) => Err(e.to_string()),
    };
    let mut watches = ctx.watches.lock();
    let cw = watches.get_mut(cluster)?;
    let served = match served {
        Ok(s) => s,
        Err(reason) => {
            cw.kinds.insert(gvk.clone(), KindState::Failed { since: Instant::now(), reason });
            return None;
        }
    };
    if let Some(KindState::Running(k)) = cw.kinds.get(gvk) {
        return Some(k.clone());
    }
    let writer = reflector::store::Writer::new(served.resource.clone());
    let store = writer.as_reader();
    let synced = Arc::new(AtomicBool::new(false));
    let task =
        tokio::spawn(watch_kind(Arc::downgrade(ctx), cluster.to_string(), gvk.clone(), conn.client.clone(), served.resource.clone(), writer, synced.clone()));
    let kw = Arc::new(KindWatch { resource: served.resource, namespaced: served.namespaced, store, synced, task });
    cw.kinds.insert(gvk.clone(), KindState::Running(kw.clone()));
    tracing::info!(controller = NAME, cluster, kind = %gvk.kind, group = %gvk.group, "watching a kind in the member");
    Some(kw)
}

/// One member watch: every event queues the object's Work; the end of the first list queues
/// every Work of the cluster (objects missing since before the watch are then noticed).
async fn watch_kind(
    ctx: Weak<Context>,
    cluster: String,
    gvk: GroupVersionKind,
    client: Client,
    resource: ApiResource,
    writer: reflector::store::Writer<DynamicObject>,
    synced: Arc<AtomicBool>,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let config = watcher::Config::default().labels(WORK_PERMANENT_ID_LABEL);
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    let mut stream = std::pin::pin!(stream);
    // Listed objects reach the store only at InitDone: their Works are queued then.
    let mut listed = Vec::new();
    while let Some(event) = stream.next().await {
        let Some(ctx) = ctx.upgrade() else { return };
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                if let Some(key) = work_of(&o, &cluster) {
                    ctx.queue.add(key);
                }
            }
            Ok(watcher::Event::InitApply(o)) => listed.extend(work_of(&o, &cluster)),
            Ok(watcher::Event::InitDone) => {
                for key in listed.drain(..) {
                    ctx.queue.add(key);
                }
                if !synced.swap(true, Ordering::SeqCst) {
                    enqueue_cluster(&ctx.works, &ctx.queue, &cluster);
                }
            }
            Ok(watcher::Event::Init) => listed.clear(),
            Err(e) => match refused(&e) {
                Some(reason) => {
                    tracing::info!(controller = NAME, cluster = %cluster, kind = %gvk.kind, %reason, "the member refuses this watch; trying again later");
                    // The Works look again: with a rotated credential they restart the watches,
                    // otherwise those needing this kind wait `watch_retry`. Queued first: the
                    // entry replaced below is what runs this task, and dropping it aborts it.
                    enqueue_cluster(&ctx.works, &ctx.queue, &cluster);
                    if let Some(cw) = ctx.watches.lock().get_mut(&cluster) {
                        cw.kinds.insert(gvk.clone(), KindState::Failed { since: Instant::now(), reason });
                    }
                    return;
                }
                None => tracing::debug!(controller = NAME, cluster = %cluster, kind = %gvk.kind, error = %e, "member watch error; retrying"),
            },
        }
    }
}

pub async fn reconcile(key: WorkKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(cluster_name) = cluster_of_execution_space(&key.namespace).map(str::to_string) else { return Ok(Next::Done) };
    let Some(work) = ctx.work(&key) else { return Ok(Next::Done) };
    if work.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    let Some(cluster) = ctx.clusters.get(&reflector::ObjectRef::new(&cluster_name)) else { return Ok(Next::Done) };
    // A pull agent does not wait for its own Cluster's Ready: the control plane derives it from
    // the agent's own Lease (and marks it only after the agent's watches are back), while the
    // agent knows itself whether it may write (its holds, ADR 0032).
    let ready = is_cluster_ready(&cluster) || ctx.clients.own_cluster().is_some();
    if !ctx.clients.reaches(&cluster) || cluster.metadata.deletion_timestamp.is_some() || !ready {
        // The Cluster watch queues the Work again when this changes.
        return Ok(Next::Done);
    }
    let conditions = work.status.as_ref().and_then(|s| s.conditions.as_deref());
    // Not dispatched yet: the execution controller's condition write brings it back.
    let Some(applied) = condition_status(conditions, APPLIED).cloned() else { return Ok(Next::Done) };
    let correct = !is_suspended(&work) && (applied.status == "True" || applied.reason == REASON_RECREATE_FAILED);
    let conn = ensure_cluster(&ctx, &key, &cluster).await?;
    let api: Api<Work> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let err = |step: &'static str| {
        let work = key.clone();
        move |source| Error::Api { work, step, source }
    };
    // Whether the API server still holds the Work this round's corrections are based on: asked
    // once, before the first write to the member.
    let mut confirmed = false;
    let mut fresh = Vec::new();
    let mut unobserved = Vec::new();
    let mut errors = Vec::new();
    let mut corrected = false;
    let mut look_again = None;
    let mut requests: Option<Connection> = None;
    for (ordinal, manifest) in manifests(&work).iter().enumerate() {
        let desired = desired_object(&work, manifest);
        let Ok(r) = ObjectRef::of(&desired) else { continue };
        let Some(kw) = ensure_kind_watch(&ctx, &cluster_name, &conn, &r.gvk).await else {
            unobserved.push(ordinal as i32);
            look_again = Some(ctx.config.watch_retry);
            continue;
        };
        if !kw.synced.load(Ordering::SeqCst) {
            // The end of its first list queues the Work again.
            unobserved.push(ordinal as i32);
            continue;
        }
        let mut observed = kw.get(&r);
        if observed.as_ref().is_some_and(|o| !owned_by(o, &key)) {
            continue;
        }
        // Changed at the edge while offline and not decided yet (ADR 0032): not reverted now.
        let held = ctx.clients.holds().is_held(&r);
        if held {
            look_again = Some(look_again.map_or(ctx.config.held_recheck, |d: Duration| d.min(ctx.config.held_recheck)));
        }
        if correct && !held && observed.as_ref().is_none_or(|o| apply::needs_update(&desired, o)) {
            let req = match &requests {
                Some(c) => c.clone(),
                None => {
                    let c = ctx.clients.connect(&ctx.client, &cluster, ctx.config.member_timeout).await.map_err(|source| Error::Member {
                        work: key.clone(),
                        cluster: cluster_name.clone(),
                        source,
                    })?;
                    requests = Some(c.clone());
                    c
                }
            };
            // The cached Work may be behind the API server: the execution controller may
            // already be deleting it (and have removed this very object, which is why it is
            // missing). A correction made from the stale copy would outlive the Work.
            if !confirmed {
                if !still_current(&api, &work).await.map_err(err("reading the work"))? {
                    tracing::debug!(controller = NAME, work = %key, "the work changed or is going; no correction from the cached copy");
                    return Ok(Next::Done);
                }
                confirmed = true;
            }
            let what = manifest_display(manifest);
            match apply::apply(req.member(), &desired, apply_options(&work, manifest)).await {
                // The Work may have started going between the check and the create, with the
                // execution controller finding nothing to remove: take back what was made.
                Ok(Applied::Created(created)) if !still_current(&api, &work).await.map_err(err("reading the work"))? => {
                    let work_id = work.labels().get(WORK_PERMANENT_ID_LABEL).map(String::as_str);
                    let undone = apply::delete(req.member(), &r, false, work_id).await;
                    tracing::info!(controller = NAME, work = %key, cluster = %cluster_name, object = %what, ?undone, uid = ?created.pointer("/metadata/uid"), "the work went while its object was re-created; removed it again");
                    if let Err(e) = undone {
                        return Err(Error::Correct { work: key.clone(), cluster: cluster_name, message: e.to_string() });
                    }
                    return Ok(Next::Done);
                }
                Ok(Applied::Unchanged(o)) => observed = Some(o),
                Ok(a @ (Applied::Created(_) | Applied::Updated(_))) => {
                    let verb = if matches!(a, Applied::Created(_)) { "re-created" } else { "reverted a change to" };
                    tracing::info!(controller = NAME, work = %key, cluster = %cluster_name, object = %what, "{verb} the member object");
                    let note = format!("Successfully applied resource({what}) to cluster {cluster_name}");
                    match template_reference(manifest) {
                        Some(t) => ctx.events.publish_ref(&t, false, EVENT_SYNC_SUCCEED, "Apply", note).await,
                        None => ctx.events.publish(&*work, false, EVENT_SYNC_SUCCEED, "Apply", note).await,
                    }
                    corrected = true;
                    observed = Some(a.object().clone());
                }
                Err(e) => {
                    let note = format!("Failed to create or update resource({what}) in member cluster({cluster_name}): {e}");
                    match template_reference(manifest) {
                        Some(t) => ctx.events.publish_ref(&t, true, EVENT_SYNC_FAILED, "Apply", note).await,
                        None => ctx.events.publish(&*work, true, EVENT_SYNC_FAILED, "Apply", note).await,
                    }
                    errors.push(e.to_string());
                }
            }
        }
        if let Some(o) = observed {
            let (status, error) = manifest_status(ordinal, &r, &o);
            if let Some(e) = error {
                let note = format!("Reflect status for object({}/{}/{}) failed, err: {e}.", r.gvk.kind, r.namespace.as_deref().unwrap_or_default(), r.name);
                ctx.events.publish(&*work, true, EVENT_REFLECT_STATUS_FAILED, "ReflectStatus", note).await;
            }
            fresh.push(status);
        }
    }
    let current = work.status.as_ref().and_then(|s| s.manifest_statuses.clone()).unwrap_or_default();
    let statuses = merge_statuses(&current, fresh, &unobserved);
    if statuses != current {
        let patch = json!({"status": {"manifestStatuses": statuses}});
        match api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Next::Done),
            Err(e) => return Err(err("writing manifestStatuses")(e)),
        }
    }
    if !errors.is_empty() {
        let message = aggregate(&errors);
        let failed = condition(APPLIED, false, REASON_RECREATE_FAILED, message.clone(), None);
        update_work_conditions(&api, &key.name, None, |c| set_condition(c, failed.clone())).await.map_err(err("updating the Applied condition"))?;
        return Err(Error::Correct { work: key.clone(), cluster: cluster_name, message });
    }
    // A failed correction is cleared by the next round that finds every object as its manifest
    // wants it, whether this controller put it back or the execution controller (applying a
    // newer manifest) did: nothing else rewrites a `ReCreateFailed`, and a Work left at it would
    // report a failure that no longer exists.
    if applied.reason == REASON_RECREATE_FAILED && (corrected || unobserved.is_empty()) {
        let ok = condition(APPLIED, true, REASON_RECREATE_SUCCESSFUL, APPLIED_MESSAGE, None);
        update_work_conditions(&api, &key.name, None, |c| {
            // Only our own failure is ours to clear.
            condition_status(Some(c), APPLIED).is_some_and(|a| a.reason == REASON_RECREATE_FAILED) && set_condition(c, ok.clone())
        })
        .await
        .map_err(err("updating the Applied condition"))?;
    }
    Ok(look_again.map_or(Next::Done, Next::After))
}

/// Whether the API server's copy of `cached` is still the Work it shows: present, the same
/// object (uid), not being deleted, at the same generation. Corrections are made only then.
async fn still_current(api: &Api<Work>, cached: &Work) -> Result<bool, kube::Error> {
    Ok(api
        .get_opt(&cached.name_any())
        .await?
        .is_some_and(|w| w.uid() == cached.uid() && w.metadata.deletion_timestamp.is_none() && w.metadata.generation == cached.metadata.generation))
}

/// Start the controller: its context (to look at what it watches) and the future that runs it
/// until its control-plane watches end.
pub fn start(
    client: Client,
    rt: &flotilla_runtime::Runtime,
    config: Config,
    clients: Arc<Clients>,
) -> (Arc<Context>, impl std::future::Future<Output = ()> + Send + use<>) {
    let queue = WorkQueue::new(config.retry_base, config.retry_max);
    let q = queue.clone();
    let (works, works_task) = rt.informers.watch::<Work>(move |w: &Work, deleted| {
        if !deleted && w.namespace().as_deref().and_then(cluster_of_execution_space).is_some() {
            q.add(WorkKey::of(w));
        }
    });
    let watches: Watches = Arc::default();
    let watch_clients = Arc::new(clients.same_mode());
    let q = queue.clone();
    let works_for_clusters = works.clone();
    let (w, wc, reach) = (watches.clone(), watch_clients.clone(), clients.clone());
    let seen: Mutex<HashMap<String, ClusterPrint>> = Mutex::default();
    let (clusters, clusters_task) = rt.informers.watch::<Cluster>(move |c: &Cluster, deleted| {
        let name = c.name_any();
        if deleted || !reach.reaches(c) || c.metadata.deletion_timestamp.is_some() {
            seen.lock().remove(&name);
            if w.lock().remove(&name).is_some() {
                tracing::info!(controller = NAME, cluster = %name, "stopped watching the member");
            }
            wc.forget(&name);
            return;
        }
        let print = cluster_fingerprint(c);
        if seen.lock().insert(name.clone(), print.clone()).as_ref() != Some(&print) {
            enqueue_cluster(&works_for_clusters, &q, &name);
        }
    });
    // A pull agent's objects released after the edge's changes were decided (ADR 0032): every
    // Work looked at again, so what was decided for the control plane is put back now.
    let released = clients.own_cluster().map(|own| {
        let (own, works, q, mut releases) = (own.to_string(), works.clone(), queue.clone(), clients.holds().releases());
        async move {
            while releases.changed().await.is_ok() {
                enqueue_cluster(&works, &q, &own);
            }
            std::future::pending::<()>().await
        }
    });
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client,
        config: config.clone(),
        clients,
        watch_clients,
        works,
        clusters,
        queue: queue.clone(),
        watches,
    });
    let worker_ctx = ctx.clone();
    let fut = async move {
        if let Err(e) = config.validate() {
            tracing::error!(controller = NAME, error = %e, "invalid configuration; not started");
            return;
        }
        let workers = run_workers(queue, config.workers, NAME, move |key: WorkKey| {
            let span = tracing::debug_span!("reconcile", controller = NAME, work = %key);
            tracing::Instrument::instrument(reconcile(key, worker_ctx.clone()), span)
        });
        let released = async move {
            match released {
                Some(r) => r.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = works_task => tracing::warn!(controller = NAME, "work watch ended"),
            _ = clusters_task => tracing::warn!(controller = NAME, "cluster watch ended"),
            _ = workers => {},
            () = released => {},
        }
    };
    (ctx, fut)
}

/// Run the controller until its control-plane watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config, clients: Arc<Clients>) {
    start(client, &rt, config, clients).1.await
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::work::ResourceHealth;

    fn deployment(ready: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2,
                "annotations": {WORK_NAMESPACE_ANNOTATION: "karmada-es-m1", WORK_NAME_ANNOTATION: "web-x", "resourcetemplate.karmada.io/generation": "5"}},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": ready, "availableReplicas": ready,
                "conditions": [{"type": "Available", "status": "True"}]}})
    }

    #[test]
    fn a_deployments_status_and_health_as_karmada_reports_them() {
        let obj = deployment(2);
        let r = ObjectRef::of(&obj).unwrap();
        let (s, err) = manifest_status(1, &r, &obj);
        assert!(err.is_none(), "{err:?}");
        let id = &s.identifier;
        assert_eq!((id.ordinal, id.group.as_deref(), id.version.as_str(), id.kind.as_str()), (1, Some("apps"), "v1", "Deployment"));
        assert_eq!((id.namespace.as_deref(), id.name.as_str(), id.resource.as_str()), (Some("shop"), "web", ""));
        assert_eq!(s.health, Some(ResourceHealth::Healthy));
        let status = s.status.unwrap();
        assert_eq!(status["readyReplicas"], 2);
        assert!(status.get("conditions").is_none(), "Karmada reflects counters only: {status}");
        assert_eq!(status["resourceTemplateGeneration"], 5);
        let (s, _) = manifest_status(1, &r, &deployment(1));
        assert_eq!(s.health, Some(ResourceHealth::Unhealthy));
        // Without its template's generation Karmada cannot reflect a Deployment: health only.
        let mut bare = deployment(2);
        bare["metadata"]["annotations"].as_object_mut().unwrap().remove("resourcetemplate.karmada.io/generation");
        let (s, err) = manifest_status(1, &r, &bare);
        assert!(err.is_some() && s.status.is_none() && s.health == Some(ResourceHealth::Healthy));
        // A kind without status: no status, healthy.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}});
        let (s, _) = manifest_status(0, &ObjectRef::of(&cm).unwrap(), &cm);
        assert_eq!((s.status, s.health, s.identifier.group.as_deref()), (None, Some(ResourceHealth::Healthy), Some("")));
    }

    #[test]
    fn the_whole_status_is_kept_only_for_kubefeds_objects() {
        let mut obj = deployment(2);
        let r = ObjectRef::of(&obj).unwrap();
        assert_eq!(manifest_status(0, &r, &obj).0.remote_status, None, "a Karmada object keeps the reflected status only");
        obj["metadata"]["labels"] = json!({"kubefed.io/managed": "true"});
        let remote = manifest_status(0, &r, &obj).0.remote_status.expect("KubeFed's object keeps its status");
        assert_eq!(remote, obj["status"], "the whole status, conditions included");
        obj["metadata"]["labels"] = json!({"kubefed.io/managed": "false"});
        assert_eq!(manifest_status(0, &r, &obj).0.remote_status, None);
    }

    #[test]
    fn statuses_merge_by_ordinal_and_keep_what_was_not_observed() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}});
        let entry = |i: usize, o: &Value| manifest_status(i, &ObjectRef::of(o).unwrap(), o).0;
        let current = vec![entry(0, &cm), entry(1, &deployment(1))];
        let merged = merge_statuses(&current, vec![entry(1, &deployment(2))], &[0]);
        assert_eq!(merged.iter().map(|s| s.identifier.ordinal).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(merged[1].health, Some(ResourceHealth::Healthy));
        // An object gone (observed absent, not re-created): its entry goes.
        assert_eq!(merge_statuses(&current, vec![entry(1, &deployment(2))], &[]).len(), 1);
    }

    #[test]
    fn member_objects_lead_back_to_their_work() {
        let obj: DynamicObject = serde_json::from_value(deployment(2)).unwrap();
        assert_eq!(work_of(&obj, "m1"), Some(WorkKey { namespace: "karmada-es-m1".into(), name: "web-x".into() }));
        assert_eq!(work_of(&obj, "m2"), None, "another cluster's watch never queues it");
        let key = WorkKey { namespace: "karmada-es-m1".into(), name: "web-x".into() };
        assert!(owned_by(&deployment(2), &key));
        assert!(!owned_by(&deployment(2), &WorkKey { namespace: "karmada-es-m1".into(), name: "other".into() }));
    }

    #[test]
    fn only_lasting_refusals_stop_a_watch() {
        let status = |code: u16| kube::core::Status { code, message: "no".into(), ..Default::default() };
        assert!(refused(&watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(403))))).is_some());
        assert!(refused(&watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(500))))).is_none());
        assert!(refused(&watcher::Error::NoResourceVersion).is_none());
    }
}
