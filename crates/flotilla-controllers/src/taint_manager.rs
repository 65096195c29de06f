//! The NoExecute taint manager (Karmada's, inside its cluster controller): runs only with the
//! `Failover` feature gate (beta, **off** by default since Karmada v1.12) and
//! `--enable-no-execute-taint-eviction` (default false), as in Karmada v1.16.
//!
//! For every binding scheduled to a cluster with NoExecute taints, the tolerations of the
//! placement the binding was last scheduled with (the `policy.karmada.io/applied-placement`
//! annotation) decide: a taint no toleration tolerates evicts now; tolerations with
//! `tolerationSeconds` evict once the shortest has passed since the taint's `timeAdded`; a
//! toleration without seconds tolerates forever.
//!
//! Eviction is Karmada's `GracefulEvictCluster`: the cluster leaves `spec.clusters` and a
//! `spec.gracefulEvictionTasks` entry {fromCluster, replicas it had, reason `TaintUntolerated`,
//! producer `TaintManager`, purgeMode from `failover.cluster.purgeMode`, else
//! `--no-execute-taint-eviction-purge-mode` (Gracefully)} is added — in one write guarded by the
//! binding's resourceVersion, at most `--resource-eviction-rate` (0.5/s) evictions per second
//! over all bindings. The scheduler then places the replicas elsewhere (its
//! ClusterEviction filter keeps the evicted cluster out), the binding controller keeps the old
//! cluster's Work while the task lasts, and the graceful eviction controller ends the task.
//!
//! With the `StatefulFailoverInjection` gate, `failover.cluster.statePreservation` is read
//! from the status collected from the cluster being left into the task's
//! `preservedLabelState` (the eviction waits until that status is there); the binding
//! controller puts it on the replacement.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, tolerates};
use flotilla_api::federation::karmada::policy::{Placement, PurgeMode};
use flotilla_api::federation::karmada::work::{BindingKey, GracefulEvictionTask, ResourceBindingSpec};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;

use crate::binding::Binding;
use crate::bindings::{Bindings, graceful_evict_cluster, preserved_label_state};
use flotilla_runtime::Events;
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "taint-manager";
/// The annotation recording the placement a binding was last scheduled with.
pub const APPLIED_PLACEMENT_ANNOTATION: &str = "policy.karmada.io/applied-placement";
pub const REASON_TAINT_UNTOLERATED: &str = "TaintUntolerated";
pub const PRODUCER_TAINT_MANAGER: &str = "TaintManager";

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// `--no-execute-taint-eviction-purge-mode`: used when the binding has no `failover.cluster`.
    pub purge_mode: PurgeMode,
    /// `--resource-eviction-rate`: evictions per second at most, over all bindings (Karmada's
    /// default 0.5), so a tainted cluster is drained gradually.
    pub eviction_rate: f64,
    /// The `StatefulFailoverInjection` gate: record `failover.cluster.statePreservation`.
    pub preserve_state: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 2, purge_mode: PurgeMode::Gracefully, eviction_rate: 0.5, preserve_state: false }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key}: evicting from {cluster}: {source}")]
    Evict { key: BindingKey, cluster: String, source: kube::Error },
    #[error("{key}: preserving state for the eviction from {cluster}: {message}")]
    PreserveState { key: BindingKey, cluster: String, message: String },
}

/// What the taints of one cluster mean for one binding's tolerations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No NoExecute taint, or every one tolerated forever.
    Stay,
    /// Evict now.
    Evict,
    /// Tolerated for this long yet.
    EvictAfter(Duration),
}

/// Karmada's `needEviction` with `GetMinTolerationTime`; `now` and `timeAdded` in seconds since
/// the epoch (a taint without `timeAdded` counts as added at `first_seen`).
pub fn verdict(taints: &[Taint], tolerations: &[Toleration], now: i64, first_seen: i64) -> Verdict {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return Verdict::Stay;
    }
    let mut left: Option<i64> = None;
    for taint in no_execute {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if matching.is_empty() {
            return Verdict::Evict;
        }
        let added = taint.time_added.as_ref().map_or(first_seen, |t| t.0.as_second());
        for seconds in matching.iter().filter_map(|t| t.toleration_seconds) {
            if seconds <= 0 {
                return Verdict::Evict;
            }
            let remaining = added + seconds - now;
            if remaining <= 0 {
                return Verdict::Evict;
            }
            left = Some(left.map_or(remaining, |l| l.min(remaining)));
        }
    }
    match left {
        None => Verdict::Stay,
        Some(s) => Verdict::EvictAfter(Duration::from_secs(s as u64)),
    }
}

/// The binding spec after evicting `cluster` for an untolerated taint, with the state to
/// carry to the replacement (Karmada's taint manager records no `clustersBeforeFailover`).
pub fn evict(
    spec: &ResourceBindingSpec,
    cluster: &str,
    purge_mode: PurgeMode,
    message: String,
    preserved: Option<BTreeMap<String, String>>,
) -> ResourceBindingSpec {
    graceful_evict_cluster(
        spec,
        GracefulEvictionTask {
            from_cluster: cluster.to_string(),
            purge_mode: Some(purge_mode),
            reason: REASON_TAINT_UNTOLERATED.into(),
            message: Some(message),
            producer: PRODUCER_TAINT_MANAGER.into(),
            preserved_label_state: preserved,
            ..Default::default()
        },
    )
}

fn tolerations_of(b: &Binding) -> Vec<Toleration> {
    let applied = b.meta.annotations.as_ref().and_then(|a| a.get(APPLIED_PLACEMENT_ANNOTATION)).and_then(|p| serde_json::from_str::<Placement>(p).ok());
    applied.or_else(|| b.spec.placement.clone()).and_then(|p| p.cluster_tolerations).unwrap_or_default()
}

struct Context {
    client: Client,
    events: Events,
    config: Config,
    bindings: Bindings,
    clusters: Store<Cluster>,
    /// When each NoExecute taint without `timeAdded` was first seen, per cluster and taint key.
    first_seen: Mutex<HashMap<(String, String), i64>>,
    /// `--resource-eviction-rate`.
    rate: EvictionRate,
}

/// At most one eviction per `gap`, over all bindings.
pub struct EvictionRate {
    gap: Duration,
    next: Mutex<std::time::Instant>,
}

impl EvictionRate {
    /// `per_second` evictions a second; 0 or less for no limit.
    pub fn new(per_second: f64, now: std::time::Instant) -> EvictionRate {
        let gap = if per_second > 0.0 { Duration::from_secs_f64(1.0 / per_second) } else { Duration::ZERO };
        EvictionRate { gap, next: Mutex::new(now) }
    }

    /// Take a slot at `now`, or say how long until there is one.
    pub fn take(&self, now: std::time::Instant) -> Option<Duration> {
        let mut next = self.next.lock();
        if *next > now {
            return Some(*next - now);
        }
        *next = now + self.gap;
        None
    }
}

async fn reconcile(key: BindingKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(b) = ctx.bindings.get(&key) else {
        return Ok(Next::Done);
    };
    if b.meta.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    let tolerations = tolerations_of(&b);
    let now = jiff::Timestamp::now().as_second();
    let mut soonest: Option<Duration> = None;
    for target in b.spec.clusters.iter().flatten() {
        let Some(cluster) = ctx.clusters.get(&ObjectRef::new(&target.name)) else {
            continue;
        };
        let taints = cluster.spec.taints.clone().unwrap_or_default();
        let first_seen = taints
            .iter()
            .filter(|t| t.effect == "NoExecute" && t.time_added.is_none())
            .map(|t| *ctx.first_seen.lock().entry((target.name.clone(), t.key.clone())).or_insert(now))
            .min()
            .unwrap_or(now);
        match verdict(&taints, &tolerations, now, first_seen) {
            Verdict::Stay => {}
            Verdict::EvictAfter(d) => soonest = Some(soonest.map_or(d, |s| s.min(d))),
            Verdict::Evict => {
                let behavior = b.spec.failover.as_ref().and_then(|f| f.cluster.as_ref());
                let mode = behavior.and_then(|c| c.purge_mode).unwrap_or(ctx.config.purge_mode);
                let preserved = match behavior.filter(|_| ctx.config.preserve_state) {
                    None => None,
                    Some(c) => preserved_label_state(c.state_preservation.as_ref(), b.status.aggregated_status.as_deref().unwrap_or_default(), &target.name)
                        .map_err(|message| Error::PreserveState { key: key.clone(), cluster: target.name.clone(), message })?,
                };
                if let Some(wait) = ctx.rate.take(std::time::Instant::now()) {
                    return Ok(Next::After(wait));
                }
                let message = format!("Evict from cluster {} as its NoExecute taints are not tolerated.", target.name);
                let next = evict(&b.spec, &target.name, mode, message, preserved);
                let patch = json!({
                    "metadata": {"resourceVersion": b.meta.resource_version},
                    "spec": {"clusters": next.clusters, "gracefulEvictionTasks": next.graceful_eviction_tasks},
                });
                let r = Bindings::patch(&ctx.client, &key, &patch).await;
                match r {
                    // A newer binding comes through the watch and is judged again.
                    Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                        return Ok(Next::Done);
                    }
                    r => r.map_err(|source| Error::Evict { key: key.clone(), cluster: target.name.clone(), source })?,
                }
                tracing::info!(controller = NAME, binding = %key, cluster = %target.name, "evicted: NoExecute taint not tolerated");
                ctx.bindings.publish_eviction(&ctx.events, &key, &target.name).await;
                // One cluster per write; the watch brings the binding back for the next.
                return Ok(Next::Done);
            }
        }
    }
    Ok(soonest.map_or(Next::Done, Next::After))
}

/// Run the taint manager until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<BindingKey>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let (bindings, watches) = Bindings::watch(&rt.informers, |spec| spec.clusters.as_ref().is_some_and(|c| !c.is_empty()), queue.clone());
    // A cluster's NoExecute taints changing wakes every binding scheduled to it.
    let (q, b) = (queue.clone(), bindings.clone());
    let taints_seen: Mutex<HashMap<String, Vec<Taint>>> = Mutex::default();
    let (clusters, cluster_task) = rt.informers.watch::<Cluster>(move |c: &Cluster, deleted| {
        let name = c.name_any();
        let taints: Vec<Taint> = c.spec.taints.clone().unwrap_or_default().into_iter().filter(|t| t.effect == "NoExecute").collect();
        let changed = if deleted {
            taints_seen.lock().remove(&name).is_some()
        } else {
            taints_seen.lock().insert(name.clone(), taints.clone()).as_ref() != Some(&taints)
        };
        if changed && !taints.is_empty() {
            for key in b.keys_where(|spec| spec.clusters.iter().flatten().any(|t| t.name == name)) {
                q.add(key);
            }
        }
    });
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client,
        config: config.clone(),
        bindings,
        clusters,
        first_seen: Mutex::default(),
        rate: EvictionRate::new(config.eviction_rate, std::time::Instant::now()),
    });
    let workers = run_workers(queue, config.workers, NAME, move |key| reconcile(key, ctx.clone()));
    tokio::select! {
        _ = watches => tracing::warn!(controller = NAME, "binding watches ended"),
        _ = cluster_task => tracing::warn!(controller = NAME, "cluster watch ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::work::TargetCluster;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn taint(key: &str, effect: &str, added: Option<i64>) -> Taint {
        Taint { key: key.into(), effect: effect.into(), value: None, time_added: added.map(|s| Time(jiff::Timestamp::from_second(s).unwrap())) }
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration { key: Some(key.into()), operator: Some("Exists".into()), effect: Some("NoExecute".into()), toleration_seconds: seconds, value: None }
    }

    #[test]
    fn no_execute_taints_against_tolerations() {
        let down = taint("cluster.karmada.io/not-ready", "NoExecute", Some(1000));
        // NoSchedule taints never evict; untolerated NoExecute evicts now.
        assert_eq!(verdict(&[taint("x", "NoSchedule", None)], &[], 1000, 1000), Verdict::Stay);
        assert_eq!(verdict(std::slice::from_ref(&down), &[], 1000, 1000), Verdict::Evict);
        // Tolerated forever, tolerated for a while, tolerated no longer.
        let key = "cluster.karmada.io/not-ready";
        assert_eq!(verdict(std::slice::from_ref(&down), &[toleration(key, None)], 1000, 1000), Verdict::Stay);
        assert_eq!(verdict(std::slice::from_ref(&down), &[toleration(key, Some(300))], 1100, 1100), Verdict::EvictAfter(Duration::from_secs(200)));
        assert_eq!(verdict(std::slice::from_ref(&down), &[toleration(key, Some(300))], 1300, 1300), Verdict::Evict);
        assert_eq!(verdict(std::slice::from_ref(&down), &[toleration(key, Some(0))], 1000, 1000), Verdict::Evict);
        // A taint without timeAdded counts from when it was first seen.
        assert_eq!(verdict(&[taint(key, "NoExecute", None)], &[toleration(key, Some(60))], 1030, 1000), Verdict::EvictAfter(Duration::from_secs(30)));
        // Another NoExecute taint nobody tolerates still evicts.
        assert_eq!(verdict(&[down.clone(), taint("other", "NoExecute", Some(1000))], &[toleration(key, None)], 1000, 1000), Verdict::Evict);
    }

    #[test]
    fn evictions_are_spaced_by_the_rate() {
        let t0 = std::time::Instant::now();
        let rate = EvictionRate::new(0.5, t0);
        assert_eq!(rate.take(t0), None);
        assert_eq!(rate.take(t0 + Duration::from_millis(500)), Some(Duration::from_millis(1500)));
        assert_eq!(rate.take(t0 + Duration::from_secs(2)), None);
        let unlimited = EvictionRate::new(0.0, t0);
        assert_eq!((unlimited.take(t0), unlimited.take(t0)), (None, None));
    }

    #[test]
    fn eviction_moves_the_cluster_into_a_task_once() {
        let spec = ResourceBindingSpec {
            clusters: Some(vec![
                TargetCluster { name: "m1".into(), replicas: Some(2), ..Default::default() },
                TargetCluster { name: "m2".into(), replicas: Some(2), ..Default::default() },
            ]),
            ..Default::default()
        };
        let next = evict(&spec, "m1", PurgeMode::Gracefully, "why".into(), None);
        assert_eq!(next.clusters.as_ref().unwrap().iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["m2"]);
        let task = &next.graceful_eviction_tasks.as_ref().unwrap()[0];
        assert_eq!(
            (task.from_cluster.as_str(), task.replicas, task.reason.as_str(), task.producer.as_str()),
            ("m1", Some(2), "TaintUntolerated", "TaintManager")
        );
        assert_eq!(task.purge_mode, Some(PurgeMode::Gracefully));
        assert_eq!(evict(&next, "m1", PurgeMode::Gracefully, "again".into(), None).graceful_eviction_tasks.unwrap().len(), 1);
    }
}
