//! Tombstones for Works deleted while their Pull cluster is away, and the agent's check against
//! them when it is back (ADR 0031; karmada#5406: Karmada's agent, back after downtime, replays
//! every pending deletion and deletes workloads).
//!
//! - On the control plane, [`run_recorder`]: a Work being deleted whose cluster is in Pull mode
//!   and not Ready does not wait for its agent. When its binding no longer wants it there (the
//!   binding is gone, or no longer places the resource on the cluster) the deletion is recorded
//!   as a `WorkTombstone` — what the Work held, when and why — in the execution space; in every
//!   case the execution finalizer is then released and the Work goes. (A Work deleted while its
//!   binding still places it there is recreated by the binding controller under a new permanent
//!   id, and the agent takes the member's objects over with it: nothing to remove.)
//! - In the agent, [`run_sweeper`], at start and every `interval`: every member object that a Work
//!   of its execution space applied (`flotilla_member::applied`) and whose Work no longer exists
//!   is removed only when a tombstone of that Work with the object's permanent id says so;
//!   otherwise it is kept and reported — a Warning Event on the Cluster and its condition
//!   `OrphanedObjects`. A tombstone no member object still answers to is deleted.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::flotilla::tombstone::{ManifestReference, WorkTombstone, WorkTombstoneSpec, reason};
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode, is_cluster_ready};
use flotilla_api::federation::karmada::names::{cluster_of_execution_space, execution_space};
use flotilla_api::federation::karmada::work::{
    BindingKey, ClusterResourceBinding, EXECUTION_FINALIZER, ResourceBinding, WORK_PERMANENT_ID_LABEL, Work, binding_of_work,
};
use flotilla_member::access::Clients;
use flotilla_member::applied::{Applied, applied_objects};
use flotilla_runtime::{Events, Next, ReconcileError, condition, set_condition};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use serde_json::json;

pub const RECORDER: &str = "workTombstone";
pub const SWEEPER: &str = "tombstoneSweep";
/// The agent's Event when it removes an object a tombstone names.
pub const REASON_REMOVED: &str = "RemovedByTombstone";
/// The agent's Event when it keeps an object whose Work vanished without a tombstone.
pub const REASON_KEPT: &str = "OrphanKept";
/// The Cluster condition that lists the objects kept.
pub const ORPHANED_OBJECTS: &str = "OrphanedObjects";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("work {work}: {step}: {source}")]
    Api { work: String, step: &'static str, source: kube::Error },
    #[error("cluster {cluster}: {step}: {source}")]
    ClusterApi { cluster: String, step: &'static str, source: kube::Error },
    #[error("cluster {cluster}: {source}")]
    Member { cluster: String, source: flotilla_member::MemberError },
}

impl ReconcileError for Error {}

/// The tombstone of `work`, when its binding (`placed`: whether the binding still exists and
/// places it on `cluster`) no longer wants it there.
pub fn tombstone_of(work: &Work, cluster: &str, binding: Option<&BindingKey>, placed: Option<bool>, now: &str) -> Option<WorkTombstone> {
    let (why, message) = match (binding, placed) {
        (_, Some(true)) => return None,
        (Some(b), None) => (reason::BINDING_DELETED, format!("its binding {b} is gone (the template was deleted, or no policy selects it any more)")),
        (Some(b), Some(false)) => (reason::DESCHEDULED, format!("its binding {b} no longer places the resource on cluster {cluster}")),
        (None, _) => (reason::BINDING_DELETED, "it names no binding".to_string()),
    };
    let manifests = work
        .spec
        .workload
        .as_ref()
        .and_then(|w| w.manifests.as_ref())
        .into_iter()
        .flatten()
        .map(|m| ManifestReference {
            api_version: m["apiVersion"].as_str().unwrap_or_default().to_string(),
            kind: m["kind"].as_str().unwrap_or_default().to_string(),
            namespace: m.pointer("/metadata/namespace").and_then(|v| v.as_str()).map(String::from),
            name: m.pointer("/metadata/name").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
        })
        .collect();
    let deleted_at = work.metadata.deletion_timestamp.as_ref().map_or_else(|| now.to_string(), |t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let mut t = WorkTombstone::new(
        &work.name_any(),
        WorkTombstoneSpec {
            work_name: work.name_any(),
            work_permanent_id: work.labels().get(WORK_PERMANENT_ID_LABEL).cloned(),
            deleted_at,
            reason: why.to_string(),
            message: format!("Work {} was deleted while cluster {cluster} was not Ready: {message}", work.name_any()),
            manifests,
        },
    );
    t.metadata.namespace = work.namespace();
    Some(t)
}

/// Whether `key` exists and places its resource on `cluster` (None: the binding is gone or
/// going — a binding being deleted keeps its clusters until its Works are gone).
async fn placement(client: &Client, key: &BindingKey, cluster: &str) -> Result<Option<bool>, kube::Error> {
    let targets = |deleting: bool, clusters: Option<Vec<flotilla_api::federation::karmada::work::TargetCluster>>| {
        (!deleting).then(|| clusters.unwrap_or_default().iter().any(|t| t.name == cluster))
    };
    Ok(match &key.namespace {
        Some(ns) => Api::<ResourceBinding>::namespaced(client.clone(), ns)
            .get_opt(&key.name)
            .await?
            .and_then(|b| targets(b.metadata.deletion_timestamp.is_some(), b.spec.clusters)),
        None => Api::<ClusterResourceBinding>::all(client.clone())
            .get_opt(&key.name)
            .await?
            .and_then(|b| targets(b.metadata.deletion_timestamp.is_some(), b.spec.0.clusters)),
    })
}

struct Recorder {
    client: Client,
    events: Events,
    clusters: kube::runtime::reflector::Store<Cluster>,
}

async fn record(work: Arc<Work>, ctx: Arc<Recorder>) -> Result<Next, Error> {
    let name = work.name_any();
    let namespace = work.namespace().unwrap_or_default();
    if work.metadata.deletion_timestamp.is_none() || !work.finalizers().iter().any(|f| f == EXECUTION_FINALIZER) {
        return Ok(Next::Done);
    }
    let Some(cluster_name) = cluster_of_execution_space(&namespace) else { return Ok(Next::Done) };
    let Some(cluster) = ctx.clusters.get(&kube::runtime::reflector::ObjectRef::new(cluster_name)) else { return Ok(Next::Done) };
    // A cluster being deleted is the cluster controller's; a Ready one's agent removes its objects.
    if cluster.spec.sync_mode != ClusterSyncMode::Pull || is_cluster_ready(&cluster) || cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    let err = |step: &'static str| {
        let work = format!("{namespace}/{name}");
        move |source| Error::Api { work, step, source }
    };
    let binding = binding_of_work(&work);
    let placed = match &binding {
        Some(b) => placement(&ctx.client, b, cluster_name).await.map_err(err("reading its binding"))?,
        None => None,
    };
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    if let Some(t) = tombstone_of(&work, cluster_name, binding.as_ref(), placed, &now) {
        let api: Api<WorkTombstone> = Api::namespaced(ctx.client.clone(), &namespace);
        match api.create(&PostParams::default(), &t).await {
            Ok(_) => ctx.events.publish(&*cluster, false, "WorkTombstoned", "Delete", t.spec.message.clone()).await,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // A tombstone of an earlier Work of the same name: this one's replaces it.
                api.replace(
                    &name,
                    &PostParams::default(),
                    &WorkTombstone { metadata: api.get(&name).await.map_err(err("reading the tombstone"))?.metadata, ..t },
                )
                .await
                .map_err(err("replacing the tombstone"))?;
            }
            Err(e) => return Err(err("writing the tombstone")(e)),
        }
    }
    let api: Api<Work> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(fresh) = api.get_opt(&name).await.map_err(err("reading the work"))? else { return Ok(Next::Done) };
    let finalizers: Vec<String> = fresh.finalizers().iter().filter(|f| *f != EXECUTION_FINALIZER).cloned().collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": fresh.resource_version()}});
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Next::After(Duration::from_millis(200))),
        Err(e) => Err(err("releasing the work")(e)),
    }
}

/// The control plane's part: record tombstones and release Works of unready Pull clusters.
pub async fn run_recorder(client: Client, rt: flotilla_runtime::Runtime) {
    let clusters = rt.informers.store::<Cluster>();
    tokio::select! {
        _ = rt.informers.synced::<Cluster>() => {}
        _ = rt.shutdown.cancelled() => return,
    }
    let ctx = Arc::new(Recorder { events: Events::new(client.clone(), RECORDER), client, clusters });
    rt.controller_for::<Work>(RECORDER)
        .backoff(Duration::from_millis(200), Duration::from_secs(30))
        .run_objects(move |w: Arc<Work>| {
            let ctx = ctx.clone();
            async move { record(w, ctx).await }
        })
        .await;
}

/// What the sweep decides for one member object whose Work is gone.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A tombstone of its Work with its permanent id: remove it.
    Remove,
    /// No such tombstone: keep it, report it.
    Keep,
}

/// Decide for `object` (its Work absent) from the tombstones by Work name.
pub fn verdict(object: &Applied, tombstones: &BTreeMap<String, WorkTombstoneSpec>) -> Verdict {
    match tombstones.get(&object.work) {
        Some(t) if t.work_permanent_id.as_deref() == Some(object.work_permanent_id.as_str()) => Verdict::Remove,
        _ => Verdict::Keep,
    }
}

/// Settings of the sweep.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    pub interval: Duration,
    pub member_timeout: Duration,
}

/// One sweep: returns the objects kept.
async fn sweep(
    client: &Client,
    members: &Clients,
    cluster: &Cluster,
    events: &Events,
    reported: &mut HashSet<String>,
    config: &SweepConfig,
) -> Result<Vec<String>, Error> {
    let name = cluster.name_any();
    let es = execution_space(&name);
    let api_err = |step: &'static str| {
        let cluster = name.clone();
        move |source| Error::ClusterApi { cluster, step, source }
    };
    let conn = members.connect(client, cluster, config.member_timeout).await.map_err(|source| Error::Member { cluster: name.clone(), source })?;
    let applied = applied_objects(&name, &conn.client, &es).await.map_err(|source| Error::Member { cluster: name.clone(), source })?;
    let works: BTreeMap<String, Option<String>> = Api::<Work>::namespaced(client.clone(), &es)
        .list(&Default::default())
        .await
        .map_err(api_err("listing works"))?
        .items
        .iter()
        .map(|w| (w.name_any(), w.labels().get(WORK_PERMANENT_ID_LABEL).cloned()))
        .collect();
    let tombstone_api: Api<WorkTombstone> = Api::namespaced(client.clone(), &es);
    let tombstones: BTreeMap<String, WorkTombstoneSpec> =
        tombstone_api.list(&Default::default()).await.map_err(api_err("listing tombstones"))?.items.into_iter().map(|t| (t.name_any(), t.spec)).collect();
    let mut kept = Vec::new();
    let mut remaining: HashSet<(String, String)> = HashSet::new();
    for object in applied.iter().filter(|o| !works.contains_key(&o.work)) {
        match verdict(object, &tombstones) {
            Verdict::Remove => {
                let ar = ApiResource::from_gvk_with_plural(&crate::kinds::gvk_of(&object.api_version, &object.kind), &object.plural);
                let api: Api<DynamicObject> = match &object.namespace {
                    Some(ns) => Api::namespaced_with(conn.client.clone(), ns, &ar),
                    None => Api::all_with(conn.client.clone(), &ar),
                };
                let dp = DeleteParams {
                    preconditions: Some(kube::api::Preconditions { uid: Some(object.uid.clone()), resource_version: None }),
                    ..Default::default()
                };
                match api.delete(&object.name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(source) => {
                        remaining.insert((object.work.clone(), object.work_permanent_id.clone()));
                        tracing::warn!(controller = SWEEPER, object = %object.display(), error = %source, "removing an object its tombstone names failed");
                        continue;
                    }
                }
                let t = &tombstones[&object.work];
                let note = format!("removed {} from the member: {} ({}, {})", object.display(), t.message, t.reason, t.deleted_at);
                events.publish(cluster, false, REASON_REMOVED, "Delete", note).await;
            }
            Verdict::Keep => {
                let what = format!("{} (Work {}, permanent id {})", object.display(), object.work, object.work_permanent_id);
                if reported.insert(object.uid.clone()) {
                    let note = format!(
                        "kept {what} in the member: its Work is gone from the control plane without a tombstone, so nothing says it was deleted on purpose; delete it in the member, or propagate it again"
                    );
                    events.publish(cluster, true, REASON_KEPT, "Keep", note).await;
                }
                kept.push(what);
            }
        }
    }
    // A tombstone has done its work once no member object it names is left (a removal that
    // failed keeps it) and its Work is gone or was made again under another id; while the Work
    // still exists it is being released.
    for (work, t) in &tombstones {
        let id = t.work_permanent_id.clone().unwrap_or_default();
        let pending = remaining.contains(&(work.clone(), id.clone()));
        let work_still_there = works.get(work).is_some_and(|w| w.as_deref() == Some(id.as_str()));
        if !pending && !work_still_there {
            match tombstone_api.delete(work, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(api_err("deleting a tombstone")(e)),
            }
        }
    }
    Ok(kept)
}

/// Write the `OrphanedObjects` condition when it changes.
async fn report(client: &Client, cluster: &str, kept: &[String]) -> Result<(), kube::Error> {
    let api: Api<Cluster> = Api::all(client.clone());
    let current = api.get(cluster).await?;
    let mut conditions = current.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let c = if kept.is_empty() {
        condition(ORPHANED_OBJECTS, false, "NoOrphans", "", None)
    } else {
        let mut message = format!("{} member object(s) whose Work vanished without a tombstone are kept: ", kept.len());
        message.push_str(&kept.iter().take(10).cloned().collect::<Vec<_>>().join("; "));
        if kept.len() > 10 {
            message.push_str("; …");
        }
        condition(ORPHANED_OBJECTS, true, "KeptWithoutTombstone", message, None)
    };
    let had = conditions.iter().find(|x| x.type_ == ORPHANED_OBJECTS).map(|x| (x.status.clone(), x.message.clone()));
    if had.as_ref().is_some_and(|(s, m)| *s == c.status && *m == c.message) || (had.is_none() && kept.is_empty()) {
        return Ok(());
    }
    set_condition(&mut conditions, c);
    let patch = json!({"metadata": {"resourceVersion": current.resource_version()}, "status": {"conditions": conditions}});
    api.patch_status(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
}

/// The agent's part: sweep its member at start and every `config.interval` until shutdown.
pub async fn run_sweeper(client: Client, rt: flotilla_runtime::Runtime, config: SweepConfig, members: Arc<Clients>) {
    let Some(name) = members.own_cluster().map(str::to_string) else {
        tracing::warn!(controller = SWEEPER, "the tombstone sweep runs in a pull agent only");
        return;
    };
    let events = Events::new(client.clone(), SWEEPER);
    let mut reported = HashSet::new();
    loop {
        let outcome = async {
            let cluster = Api::<Cluster>::all(client.clone()).get(&name).await.map_err(|source| Error::ClusterApi {
                cluster: name.clone(),
                step: "reading the cluster",
                source,
            })?;
            let kept = sweep(&client, &members, &cluster, &events, &mut reported, &config).await?;
            report(&client, &name, &kept).await.map_err(|source| Error::ClusterApi {
                cluster: name.clone(),
                step: "writing the OrphanedObjects condition",
                source,
            })
        };
        if let Err(e) = outcome.await {
            tracing::warn!(controller = SWEEPER, cluster = %name, error = %e, "sweeping the member against tombstones failed; trying again next time");
        }
        tokio::select! {
            () = tokio::time::sleep(config.interval) => {}
            () = rt.shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(work: &str, id: &str) -> Applied {
        Applied {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
            namespace: Some("ns".into()),
            name: "web".into(),
            uid: "u1".into(),
            work: work.into(),
            work_permanent_id: id.into(),
        }
    }

    fn spec(id: Option<&str>) -> WorkTombstoneSpec {
        WorkTombstoneSpec { work_name: "w".into(), work_permanent_id: id.map(String::from), reason: reason::BINDING_DELETED.into(), ..Default::default() }
    }

    #[test]
    fn an_object_goes_only_with_a_tombstone_of_its_own_work_and_id() {
        let mut tombstones = BTreeMap::new();
        assert_eq!(verdict(&applied("w", "id-1"), &tombstones), Verdict::Keep, "no tombstone: kept");
        tombstones.insert("w".to_string(), spec(Some("id-1")));
        assert_eq!(verdict(&applied("w", "id-1"), &tombstones), Verdict::Remove);
        assert_eq!(verdict(&applied("w", "id-2"), &tombstones), Verdict::Keep, "another Work of the same name took it over");
        assert_eq!(verdict(&applied("other", "id-1"), &tombstones), Verdict::Keep);
        tombstones.insert("w".to_string(), spec(None));
        assert_eq!(verdict(&applied("w", "id-1"), &tombstones), Verdict::Keep, "a tombstone without an id removes nothing");
    }

    #[test]
    fn a_tombstone_says_why_and_lists_what_the_work_held() {
        let work: Work = serde_json::from_value(json!({
            "apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "web-1", "namespace": "karmada-es-edge", "labels": {WORK_PERMANENT_ID_LABEL: "p1"}},
            "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}}]}}
        }))
        .unwrap();
        let key = BindingKey { namespace: Some("shop".into()), name: "web-deployment".into() };
        assert!(tombstone_of(&work, "edge", Some(&key), Some(true), "t").is_none(), "still placed there: no tombstone");
        let gone = tombstone_of(&work, "edge", Some(&key), None, "2026-12-05T00:00:00Z").unwrap();
        assert_eq!(gone.spec.reason, reason::BINDING_DELETED);
        assert_eq!(gone.spec.work_permanent_id.as_deref(), Some("p1"));
        assert_eq!(gone.spec.deleted_at, "2026-12-05T00:00:00Z");
        assert_eq!(gone.metadata.namespace.as_deref(), Some("karmada-es-edge"));
        assert_eq!(
            gone.spec.manifests,
            vec![ManifestReference { api_version: "apps/v1".into(), kind: "Deployment".into(), namespace: Some("shop".into()), name: "web".into() }]
        );
        assert!(gone.spec.message.contains("resourceBinding(shop/web-deployment) is gone"), "{}", gone.spec.message);
        let moved = tombstone_of(&work, "edge", Some(&key), Some(false), "t").unwrap();
        assert_eq!(moved.spec.reason, reason::DESCHEDULED);
    }
}
