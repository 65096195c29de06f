//! The graceful eviction controller (Karmada's, feature gate `GracefulEviction`, beta, on by
//! default): ends `spec.gracefulEvictionTasks`, which lets the binding controller delete the
//! evicted cluster's Work.
//!
//! A new task gets its `creationTimestamp`. A task ends when `suppressDeletion` is explicitly
//! false (`true` keeps it until a person says so); when its grace period
//! (`gracePeriodSeconds`, else `--graceful-eviction-timeout`, 10m) has passed since creation;
//! or, once the scheduler has seen the binding's generation, when every cluster now in
//! `spec.clusters` reports the resource Healthy in `status.aggregatedStatus`. Every purge mode
//! is assessed alike; a `Directly` task's cluster loses its Work at once anyway (the binding
//! controller keeps only the others').
//!
//! Two deliberate differences (ADR 0013), both so that the old copy never goes before a
//! replacement serves: with **no** cluster scheduled, "every cluster is healthy" is not taken as
//! true (Karmada's vacuous truth there, issue #7455, deletes the only copy with no
//! replacement); and a cluster whose reflected status counts ready replicas must have as many
//! ready as it is scheduled to run ([`serves`]), not only Karmada's Healthy — which a Deployment
//! reports as soon as its pods are updated, and which may still describe the copy before it was
//! scaled up. The task then waits for a replacement that serves, or its grace period.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::work::{AggregatedStatusItem, BindingKey, GracefulEvictionTask, ResourceBindingSpec, TargetCluster};
use flotilla_api::interpreter::Health;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use serde_json::json;

use crate::bindings::Bindings;
use flotilla_runtime::Events;
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "graceful-eviction-controller";

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// `--graceful-eviction-timeout`: a task without `gracePeriodSeconds` ends after this.
    pub timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 2, timeout: Duration::from_secs(600) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key}: writing the eviction tasks: {source}")]
    Write { key: BindingKey, source: kube::Error },
}

/// The tasks kept and the clusters whose eviction is complete, at `now`; and how soon the
/// nearest kept task times out. Until the scheduler has seen the binding's generation
/// (`scheduled_now` false) the aggregated status may predate the new schedule, so no task ends
/// for health (Karmada's `hasScheduled`); suppression and timeouts still apply.
pub fn assess(
    spec: &ResourceBindingSpec,
    observed: &[AggregatedStatusItem],
    scheduled_now: bool,
    timeout: Duration,
    now: jiff::Timestamp,
) -> (Vec<GracefulEvictionTask>, Vec<String>, Option<Duration>) {
    let scheduled: Vec<&TargetCluster> = spec.clusters.iter().flatten().collect();
    let healthy = !scheduled.is_empty() && scheduled.iter().all(|c| observed.iter().any(|i| i.cluster_name == c.name && serves(i, c.replicas)));
    let mut kept = Vec::new();
    let mut done = Vec::new();
    let mut next: Option<Duration> = None;
    for task in spec.graceful_eviction_tasks.iter().flatten() {
        let Some(created) = task.creation_timestamp.as_ref() else {
            let mut t = task.clone();
            t.creation_timestamp = Some(Time(now));
            kept.push(t);
            next = Some(next.map_or(Duration::ZERO, |n| n.min(Duration::ZERO)));
            continue;
        };
        match task.suppress_deletion {
            Some(true) => {
                kept.push(task.clone());
                continue;
            }
            Some(false) => {
                done.push(task.from_cluster.clone());
                continue;
            }
            None => {}
        }
        let grace = task.grace_period_seconds.map_or(timeout, |s| Duration::from_secs(s.max(0) as u64));
        let elapsed = Duration::try_from(now.duration_since(created.0)).unwrap_or(Duration::ZERO);
        let timed_out = elapsed >= grace;
        let replaced = scheduled_now && healthy;
        if timed_out || replaced {
            done.push(task.from_cluster.clone());
        } else {
            kept.push(task.clone());
            let left = grace.saturating_sub(elapsed);
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    (kept, done, next)
}

/// Whether a cluster's copy can take over: Healthy, and — when its reflected status counts
/// ready replicas (`readyReplicas`, a DaemonSet's `numberReady`) — as many ready as the cluster
/// is now scheduled to run. The count guards against a status reflected before the copy was
/// scaled up for the takeover: a Deployment is Healthy by Karmada's rule as soon as its pods
/// are updated, ready or not.
pub fn serves(item: &AggregatedStatusItem, replicas: Option<i32>) -> bool {
    if item.health != Some(Health::Healthy) {
        return false;
    }
    let ready = item.status.as_ref().and_then(|s| s.get("readyReplicas").or_else(|| s.get("numberReady"))).map(|v| v.as_i64().unwrap_or(0));
    match (ready, replicas) {
        (Some(ready), Some(want)) => ready >= i64::from(want),
        _ => true,
    }
}

struct Context {
    client: Client,
    events: Events,
    config: Config,
    bindings: Bindings,
}

async fn reconcile(key: BindingKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let b = ctx.bindings.get(&key);
    let Some(b) = b.filter(|b| b.spec.graceful_eviction_tasks.as_ref().is_some_and(|t| !t.is_empty())) else {
        return Ok(Next::Done);
    };
    // Judge against the schedule made for this generation; the scheduler's write brings it back.
    let fresh = b.status.scheduler_observed_generation == b.meta.generation;
    let observed = b.status.aggregated_status.clone().unwrap_or_default();
    let (kept, done, next) = assess(&b.spec, &observed, fresh, ctx.config.timeout, jiff::Timestamp::now());
    if b.spec.graceful_eviction_tasks.as_deref() == Some(kept.as_slice()) {
        return Ok(next.map_or(Next::Done, |d| Next::After(d + Duration::from_millis(100))));
    }
    let patch = json!({"metadata": {"resourceVersion": b.meta.resource_version}, "spec": {"gracefulEvictionTasks": kept}});
    let r = Bindings::patch(&ctx.client, &key, &patch).await;
    match r {
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(Next::Done),
        r => r.map_err(|source| Error::Write { key: key.clone(), source })?,
    }
    for cluster in done {
        tracing::info!(controller = NAME, binding = %key, cluster = %cluster, "graceful eviction complete");
        ctx.bindings.publish_eviction(&ctx.events, &key, &cluster).await;
    }
    Ok(Next::Done)
}

/// Run the controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<BindingKey>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let (bindings, watches) = Bindings::watch(&rt.informers, |spec| spec.graceful_eviction_tasks.as_ref().is_some_and(|t| !t.is_empty()), queue.clone());
    let ctx = Arc::new(Context { events: Events::new(client.clone(), NAME), client, config: config.clone(), bindings });
    let workers = run_workers(queue, config.workers, NAME, move |key| reconcile(key, ctx.clone()));
    tokio::select! {
        _ = watches => tracing::warn!(controller = NAME, "binding watches ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::policy::PurgeMode;

    fn assess_now(
        spec: &ResourceBindingSpec,
        observed: &[AggregatedStatusItem],
        timeout: Duration,
        now: jiff::Timestamp,
    ) -> (Vec<GracefulEvictionTask>, Vec<String>, Option<Duration>) {
        assess(spec, observed, true, timeout, now)
    }

    fn at(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).unwrap()
    }

    fn spec(clusters: &[&str], task: GracefulEvictionTask) -> ResourceBindingSpec {
        ResourceBindingSpec {
            clusters: Some(clusters.iter().map(|c| TargetCluster { name: (*c).into(), ..Default::default() }).collect()),
            graceful_eviction_tasks: Some(vec![task]),
            ..Default::default()
        }
    }

    fn task(created: Option<i64>) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: "m1".into(),
            purge_mode: Some(PurgeMode::Gracefully),
            reason: "TaintUntolerated".into(),
            producer: "TaintManager".into(),
            creation_timestamp: created.map(|s| Time(at(s))),
            ..Default::default()
        }
    }

    fn item(cluster: &str, health: Health) -> AggregatedStatusItem {
        AggregatedStatusItem { cluster_name: cluster.into(), health: Some(health), ..Default::default() }
    }

    #[test]
    fn a_task_ends_when_the_replacement_is_healthy_or_its_time_is_up() {
        let ten_minutes = Duration::from_secs(600);
        // New: stamped, kept.
        let (kept, done, _) = assess_now(&spec(&["m2"], task(None)), &[], ten_minutes, at(100));
        assert_eq!(kept[0].creation_timestamp, Some(Time(at(100))));
        assert!(done.is_empty());
        // The replacement not yet healthy: kept, looked at again when the time is up.
        let (kept, done, next) = assess_now(&spec(&["m2"], task(Some(100))), &[item("m2", Health::Unhealthy)], ten_minutes, at(160));
        assert_eq!((kept.len(), done.len(), next), (1, 0, Some(Duration::from_secs(540))));
        // Healthy: done.
        let (kept, done, _) = assess_now(&spec(&["m2"], task(Some(100))), &[item("m2", Health::Healthy)], ten_minutes, at(160));
        assert_eq!((kept.len(), done), (0, vec!["m1".to_string()]));
        // Time up: done even though unhealthy; a task's own grace period counts first.
        assert_eq!(assess_now(&spec(&["m2"], task(Some(100))), &[], ten_minutes, at(700)).1, ["m1"]);
        let short = GracefulEvictionTask { grace_period_seconds: Some(30), ..task(Some(100)) };
        assert_eq!(assess_now(&spec(&["m2"], short), &[], ten_minutes, at(131)).1, ["m1"]);
    }

    #[test]
    fn a_replacement_serves_once_its_scheduled_replicas_are_ready() {
        let with =
            |ready: i64| AggregatedStatusItem { status: Some(serde_json::json!({"replicas": 4, "readyReplicas": ready})), ..item("m2", Health::Healthy) };
        assert!(!serves(&with(2), Some(4)), "a status from before the scale-up does not serve");
        assert!(serves(&with(4), Some(4)));
        assert!(serves(&item("m2", Health::Healthy), Some(4)), "no counters: health alone");
        assert!(!serves(&item("m2", Health::Unknown), None));
    }

    #[test]
    fn nothing_scheduled_is_no_healthy_replacement_and_suppression_is_for_people() {
        let ten_minutes = Duration::from_secs(600);
        let (kept, done, _) = assess_now(&spec(&[], task(Some(100))), &[], ten_minutes, at(160));
        assert_eq!((kept.len(), done.len()), (1, 0), "the only copy is not deleted with no replacement");
        let held = GracefulEvictionTask { suppress_deletion: Some(true), ..task(Some(100)) };
        assert_eq!(assess_now(&spec(&["m2"], held), &[item("m2", Health::Healthy)], ten_minutes, at(10_000)).0.len(), 1);
        let released = GracefulEvictionTask { suppress_deletion: Some(false), ..task(Some(100)) };
        assert_eq!(assess_now(&spec(&["m2"], released), &[], ten_minutes, at(101)).1, ["m1"]);
        // Health counts only once the scheduler has seen the binding as it is.
        assert!(assess(&spec(&["m2"], task(Some(100))), &[item("m2", Health::Healthy)], false, ten_minutes, at(160)).1.is_empty());
    }
}
