//! KubeFed's ReplicaSchedulingPreference controller on the one engine (target: KubeFed v0.10.0,
//! `../shared/reference/kubefed-and-peers.md` §1.12). For each `ReplicaSchedulingPreference` it
//! runs [`planner::plan`] over the candidate clusters and writes the result into the
//! target `FederatedDeployment` / `FederatedReplicaSet` of the same namespace and name, as
//! KubeFed's RSP controller writes it: `spec.placement.clusters` = every candidate (those planned
//! 0 included) and one `{path: /spec/replicas, value: n}` override per candidate, other
//! overrides kept, the replicas override of a cluster no longer a candidate removed. The sync
//! controller ([`crate::kubefed_sync`]) then propagates the federated object like
//! any other, so there is still one binding, one scheduler decision and one Work per cluster.
//!
//! Writes are JSON merge patches guarded by the resourceVersion they were computed from, under
//! the field manager [`NAME`], so `managedFields` of the federated object says which fields the
//! RSP owns; nothing is written when placement and replica overrides already say the plan.
//!
//! Inputs: candidates are the Ready clusters not being deleted, intersected with the target's
//! `spec.placement.clusterSelector` under `intersectWithClusterSelector` (with no candidate at
//! all nothing is written: the last plan stands); the replicas running
//! per cluster (used when `rebalance` is false) are the member object's `status.readyReplicas`
//! as the work status controller reflects it on the Work. Flotilla does not list member pods, so
//! KubeFed's capacity estimate from long-unschedulable pods is not made (no overflow arises).
//!
//! Re-planned on: the RSP, the target, any Cluster change (readiness) and the target's Works
//! (current replicas). Reported, not fatal: minimums the total cannot meet (Warning
//! `MinReplicasNotMet` on the RSP; the heavier clusters win, as in KubeFed) and a `targetKind`
//! other than FederatedDeployment / FederatedReplicaSet (Warning `UnsupportedTargetKind`).

pub mod planner;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::karmada::names::{execution_space, work_name};
use flotilla_api::federation::karmada::work::{Work, binding_of_work};
use flotilla_api::federation::kubefed::render::{Selection, federated_spec, selects};
use flotilla_api::federation::kubefed::scheduling::ReplicaSchedulingPreference;
use flotilla_api::federation::kubefed::types::{
    ClusterOverride, ClusterOverrides, DEFAULT_FEDERATED_GROUP, DEFAULT_FEDERATED_VERSION, FederatedSpec, GenericClusterReference,
};
use flotilla_runtime::Events;
use flotilla_runtime::{Next, WorkQueue, run_workers};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use planner::PlanInput;

/// The controller's name, its client's user and the field manager of its writes.
pub const NAME: &str = "kubefed-rsp-controller";
/// The JSON pointer the replica overrides set.
pub const REPLICAS_PATH: &str = "/spec/replicas";
/// Warning on the RSP: `totalReplicas` cannot meet every `minReplicas`.
pub const REASON_MIN_REPLICAS_NOT_MET: &str = "MinReplicasNotMet";
/// Warning on the RSP: its `targetKind` is not one an RSP can scale.
pub const REASON_UNSUPPORTED_TARGET_KIND: &str = "UnsupportedTargetKind";
/// The federated kinds an RSP may target, with their plurals.
pub const TARGET_KINDS: [(&str, &str); 2] = [("FederatedDeployment", "federateddeployments"), ("FederatedReplicaSet", "federatedreplicasets")];

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 1 }
    }
}

/// An RSP, and so its target: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RspKey {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key:?}: reading target {kind}: {source}")]
    ReadTarget { key: RspKey, kind: String, source: kube::Error },
    #[error("{key:?}: writing the plan into {kind}: {source}")]
    WritePlan { key: RspKey, kind: String, source: kube::Error },
}

struct Context {
    client: Client,
    events: Events,
    rsps: Store<ReplicaSchedulingPreference>,
    clusters: Store<Cluster>,
    works: Store<Work>,
    queue: Arc<WorkQueue<RspKey>>,
    /// The last warning published per RSP, so a steady problem is reported once.
    reported: Mutex<HashMap<RspKey, String>>,
}

/// The federated type an RSP's `targetKind` names (KubeFed's default group and version).
pub fn target_resource(kind: &str) -> Option<ApiResource> {
    let (kind, plural) = TARGET_KINDS.iter().find(|(k, _)| *k == kind)?;
    Some(ApiResource {
        group: DEFAULT_FEDERATED_GROUP.into(),
        version: DEFAULT_FEDERATED_VERSION.into(),
        api_version: format!("{DEFAULT_FEDERATED_GROUP}/{DEFAULT_FEDERATED_VERSION}"),
        kind: (*kind).into(),
        plural: (*plural).into(),
    })
}

/// The clusters the planner may use: Ready and not being deleted; with
/// `intersectWithClusterSelector`, also matched by the target's `clusterSelector` (used even
/// when `clusters` names some; no selector selects none, `{}` all). Sorted by name.
pub fn candidate_clusters(clusters: &[Arc<Cluster>], spec: &FederatedSpec, intersect: bool) -> Vec<String> {
    let selector = spec.placement.as_ref().and_then(|p| p.cluster_selector.clone()).map_or(Selection::None, Selection::Selector);
    let mut out: Vec<String> = clusters
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && is_cluster_ready(c))
        .filter(|c| !intersect || selects(&selector, c))
        .map(|c| c.name_any())
        .collect();
    out.sort();
    out
}

/// The replicas running in a cluster as its Work reports them (`status.readyReplicas` of the
/// member object); None while the member object has not been seen.
pub fn current_replicas(work: &Work) -> Option<i64> {
    if work.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = work.status.as_ref()?.manifest_statuses.as_ref()?.first()?.status.as_ref()?;
    Some(status.get("readyReplicas").and_then(Value::as_i64).unwrap_or(0))
}

/// `spec.placement.clusters` and `spec.overrides` once `replicas` is written into `spec`:
/// placement names every planned cluster; each planned cluster's overrides carry
/// `/spec/replicas` = its count (an existing replicas override is updated in place, else one is
/// appended); other clusters lose their replicas override and, left with none, their entry.
/// Entries are sorted by cluster name, as KubeFed writes them.
pub fn planned_spec(spec: &FederatedSpec, replicas: &BTreeMap<String, i64>) -> (Vec<GenericClusterReference>, Vec<ClusterOverrides>) {
    let placement = replicas.keys().map(|name| GenericClusterReference { name: name.clone() }).collect();
    let mut by_cluster: BTreeMap<String, Vec<ClusterOverride>> = BTreeMap::new();
    for o in spec.overrides.iter().flatten() {
        by_cluster.entry(o.cluster_name.clone().unwrap_or_default()).or_default().extend(o.cluster_overrides.iter().flatten().cloned());
    }
    for (cluster, ops) in by_cluster.iter_mut() {
        if !replicas.contains_key(cluster) {
            ops.retain(|op| op.path != REPLICAS_PATH);
        }
    }
    for (cluster, n) in replicas {
        let ops = by_cluster.entry(cluster.clone()).or_default();
        match ops.iter_mut().find(|op| op.path == REPLICAS_PATH) {
            Some(op) => op.value = Some(json!(n)),
            None => ops.push(ClusterOverride { op: None, path: REPLICAS_PATH.into(), value: Some(json!(n)) }),
        }
    }
    let overrides = by_cluster
        .into_iter()
        .filter(|(_, ops)| !ops.is_empty())
        .map(|(cluster, ops)| ClusterOverrides { cluster_name: Some(cluster), cluster_overrides: Some(ops) })
        .collect();
    (placement, overrides)
}

/// Whether `spec` already says what [`planned_spec`] computed.
fn already_planned(spec: &FederatedSpec, placement: &[GenericClusterReference], overrides: &[ClusterOverrides]) -> bool {
    let have_placement = spec.placement.as_ref().and_then(|p| p.clusters.as_deref()).unwrap_or_default();
    let have_overrides = spec.overrides.as_deref().unwrap_or_default();
    have_placement == placement && have_overrides == overrides
}

impl Context {
    /// Publish a warning on the RSP unless it is the one published last.
    async fn warn_once(&self, key: &RspKey, rsp: &ReplicaSchedulingPreference, reason: &str, message: String) {
        let fresh = self.reported.lock().insert(key.clone(), message.clone()).as_ref() != Some(&message);
        if fresh {
            self.events.publish(rsp, true, reason, "Schedule", message).await;
        }
    }

    fn all_keys(&self) -> Vec<RspKey> {
        self.rsps.state().iter().map(|r| RspKey { namespace: r.namespace().unwrap_or_default(), name: r.name_any() }).collect()
    }

    /// The RSP a Work of a federated Deployment or ReplicaSet belongs to, if there is one.
    fn key_of_work(&self, w: &Work) -> Option<RspKey> {
        let b = binding_of_work(w)?;
        let namespace = b.namespace?;
        let name = TARGET_KINDS.iter().find_map(|(kind, _)| b.name.strip_suffix(&format!("-{}", kind.to_lowercase())))?;
        self.rsps.get(&ObjectRef::new(name).within(&namespace))?;
        Some(RspKey { namespace, name: name.to_string() })
    }
}

#[tracing::instrument(skip(ctx), fields(controller = NAME))]
async fn reconcile(key: RspKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(rsp) = ctx.rsps.get(&ObjectRef::new(&key.name).within(&key.namespace)) else {
        ctx.reported.lock().remove(&key);
        return Ok(Next::Done);
    };
    if rsp.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    let kind = rsp.spec.target_kind.clone();
    let Some(ar) = target_resource(&kind) else {
        let msg = format!("targetKind {kind:?} is not FederatedDeployment or FederatedReplicaSet; nothing is scheduled");
        ctx.warn_once(&key, &rsp, REASON_UNSUPPORTED_TARGET_KIND, msg).await;
        return Ok(Next::Done);
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &ar);
    // The target's watch brings it back here when it appears.
    let Some(target) = api.get_opt(&key.name).await.map_err(|source| Error::ReadTarget { key: key.clone(), kind: kind.clone(), source })? else {
        return Ok(Next::Done);
    };
    if target.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    let Ok(spec) = federated_spec(&target.data) else {
        // The sync controller reports an unreadable spec on the target itself.
        return Ok(Next::Done);
    };

    let clusters = candidate_clusters(&ctx.clusters.state(), &spec, rsp.spec.intersect_with_cluster_selector.unwrap_or(false));
    if clusters.is_empty() {
        // Nothing to plan over (no cluster joined or Ready yet, or the whole fleet unready):
        // the last plan stands rather than an empty placement deleting every member copy.
        tracing::debug!(target_kind = %kind, "no candidate cluster; the previous plan stands");
        return Ok(Next::Done);
    }
    let work = work_name(&kind, &key.name, Some(&key.namespace));
    let current: BTreeMap<String, i64> = clusters
        .iter()
        .filter_map(|c| {
            let w = ctx.works.get(&ObjectRef::new(&work).within(&execution_space(c)))?;
            Some((c.clone(), current_replicas(&w)?))
        })
        .collect();
    let preferences = rsp.spec.clusters.clone().unwrap_or_default();
    let total = i64::from(rsp.spec.total_replicas);
    let plan_key = format!("{}/{}", key.namespace, key.name);
    let plan = planner::plan(&PlanInput {
        total_replicas: total,
        preferences: &preferences,
        clusters: &clusters,
        current: &current,
        capacity: &BTreeMap::new(),
        rebalance: rsp.spec.rebalance.unwrap_or(false),
        key: &plan_key,
    });
    match plan.unmet_minimums_message(total) {
        Some(msg) => ctx.warn_once(&key, &rsp, REASON_MIN_REPLICAS_NOT_MET, msg).await,
        None => {
            ctx.reported.lock().remove(&key);
        }
    }

    let (placement, overrides) = planned_spec(&spec, &plan.with_overflow());
    if already_planned(&spec, &placement, &overrides) {
        return Ok(Next::Done);
    }
    tracing::info!(target_kind = %kind, plan = ?plan.replicas, "writing the replica plan");
    let patch = json!({
        "metadata": {"resourceVersion": target.resource_version()},
        "spec": {"placement": {"clusters": placement}, "overrides": overrides},
    });
    let params = PatchParams { field_manager: Some(NAME.into()), ..Default::default() };
    match api.patch(&key.name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Next::Done),
        // Changed since our read: plan again on what is there now.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Next::After(Duration::from_millis(200))),
        // Gone meanwhile.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(source) => Err(Error::WritePlan { key, kind, source }),
    }
}

/// Queue the RSP of the same name on every change of a federated target type's object (read
/// from the shared dynamic informer the KubeFed sync controller reads too).
fn watch_targets(informers: &flotilla_runtime::Informers, ar: &ApiResource, queue: Arc<WorkQueue<RspKey>>) {
    informers.subscribe_dynamic(ar, move |_, o, _| queue.add(RspKey { namespace: o.namespace().unwrap_or_default(), name: o.name_any() }));
}

/// Run the RSP controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<RspKey>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let everything: Arc<Mutex<Option<Arc<Context>>>> = Arc::new(Mutex::new(None));
    let q = queue.clone();
    let (rsps, rsp_task) = rt.informers.watch::<ReplicaSchedulingPreference>(move |r: &ReplicaSchedulingPreference, _| {
        q.add(RspKey { namespace: r.namespace().unwrap_or_default(), name: r.name_any() });
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
    let (works, work_task) = rt.informers.watch::<Work>(move |w: &Work, _| {
        if let Some(ctx) = e.lock().clone()
            && let Some(k) = ctx.key_of_work(w)
        {
            ctx.queue.add(k);
        }
    });
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client: client.clone(),
        rsps,
        clusters,
        works,
        reported: Mutex::new(HashMap::new()),
        queue: queue.clone(),
    });
    *everything.lock() = Some(ctx.clone());
    for (kind, _) in TARGET_KINDS {
        if let Some(ar) = target_resource(kind) {
            watch_targets(&rt.informers, &ar, queue.clone());
        }
    }
    let workers = run_workers(queue, config.workers, NAME, move |key| reconcile(key, ctx.clone()));
    tokio::select! {
        _ = rsp_task => tracing::warn!(controller = NAME, "replicaschedulingpreference watch ended"),
        _ = cluster_task => tracing::warn!(controller = NAME, "cluster watch ended"),
        _ = work_task => tracing::warn!(controller = NAME, "work watch ended"),
        _ = workers => {},
    }
    everything.lock().take();
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::kubefed::types::FederatedPlacement;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn cluster(name: &str, ready: bool, labels: &[(&str, &str)]) -> Arc<Cluster> {
        let mut c: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
            "spec": {"syncMode": "Push"},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap();
        c.metadata.uid = Some(name.into());
        Arc::new(c)
    }

    fn spec(v: Value) -> FederatedSpec {
        serde_json::from_value(v).unwrap()
    }

    fn replicas(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(c, n)| (c.to_string(), *n)).collect()
    }

    #[test]
    fn candidates_are_ready_clusters_and_with_intersection_the_selected_ones() {
        let all = [cluster("c", true, &[("zone", "a")]), cluster("a", true, &[("zone", "b")]), cluster("b", false, &[("zone", "a")])];
        let s = FederatedSpec {
            placement: Some(FederatedPlacement {
                clusters: Some(vec![GenericClusterReference { name: "a".into() }]),
                cluster_selector: Some(LabelSelector { match_labels: Some([("zone".to_string(), "a".to_string())].into()), ..Default::default() }),
            }),
            ..Default::default()
        };
        assert_eq!(candidate_clusters(&all, &s, false), ["a", "c"], "unready b is no candidate; placement is overwritten, not read");
        assert_eq!(candidate_clusters(&all, &s, true), ["c"], "the selector is used even though clusters names a");
        assert!(candidate_clusters(&all, &FederatedSpec::default(), true).is_empty(), "no selector selects none");
        let everything = spec(json!({"placement": {"clusterSelector": {}}}));
        assert_eq!(candidate_clusters(&all, &everything, true), ["a", "c"]);
    }

    #[test]
    fn the_plan_becomes_placement_and_replica_overrides_keeping_the_others() {
        let s = spec(json!({"overrides": [
            {"clusterName": "m2", "clusterOverrides": [{"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.17"}, {"path": "/spec/replicas", "value": 1}]},
            {"clusterName": "gone", "clusterOverrides": [{"path": "/spec/replicas", "value": 7}]},
            {"clusterName": "other", "clusterOverrides": [{"op": "add", "path": "/metadata/labels/x", "value": "y"}, {"path": "/spec/replicas", "value": 2}]},
        ]}));
        let (placement, overrides) = planned_spec(&s, &replicas(&[("m1", 4), ("m2", 5)]));
        assert_eq!(serde_json::to_value(&placement).unwrap(), json!([{"name": "m1"}, {"name": "m2"}]));
        assert_eq!(
            serde_json::to_value(&overrides).unwrap(),
            json!([
                {"clusterName": "m1", "clusterOverrides": [{"path": "/spec/replicas", "value": 4}]},
                {"clusterName": "m2", "clusterOverrides": [{"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.17"}, {"path": "/spec/replicas", "value": 5}]},
                {"clusterName": "other", "clusterOverrides": [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]},
            ])
        );
    }

    #[test]
    fn a_plan_already_written_is_not_written_again() {
        let s = spec(json!({"placement": {"clusters": [{"name": "m1"}, {"name": "m2"}]}, "overrides": [
            {"clusterName": "m1", "clusterOverrides": [{"path": "/spec/replicas", "value": 4}]},
            {"clusterName": "m2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]},
        ]}));
        let (p, o) = planned_spec(&s, &replicas(&[("m1", 4), ("m2", 5)]));
        assert!(already_planned(&s, &p, &o));
        let (p, o) = planned_spec(&s, &replicas(&[("m1", 3), ("m2", 6)]));
        assert!(!already_planned(&s, &p, &o));
        let (p, o) = planned_spec(&s, &replicas(&[("m1", 9)]));
        assert!(!already_planned(&s, &p, &o));
    }

    #[test]
    fn current_replicas_come_from_the_reflected_status() {
        let mut w: Work =
            serde_json::from_value(json!({"apiVersion": "work.karmada.io/v1alpha1", "kind": "Work", "metadata": {"name": "w"}, "spec": {}})).unwrap();
        assert_eq!(current_replicas(&w), None);
        w.status = serde_json::from_value(json!({"manifestStatuses": [{"identifier": {"ordinal": 0, "version": "v1", "kind": "Deployment", "resource": "", "name": "d"}, "status": {"replicas": 5, "readyReplicas": 3}}]})).unwrap();
        assert_eq!(current_replicas(&w), Some(3));
    }

    #[test]
    fn only_federated_deployments_and_replicasets_are_targets() {
        assert_eq!(target_resource("FederatedDeployment").unwrap().plural, "federateddeployments");
        assert_eq!(target_resource("FederatedReplicaSet").unwrap().api_version, "types.kubefed.io/v1beta1");
        assert!(target_resource("FederatedStatefulSet").is_none());
    }
}
