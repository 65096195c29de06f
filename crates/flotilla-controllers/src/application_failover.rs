//! The application failover controller (Karmada's `applicationFailover`): for a binding whose
//! policy sets `failover.application`, a cluster where the resource stays `Unhealthy` (in
//! `status.aggregatedStatus`; `Unknown` does not count) longer than
//! `decisionConditions.tolerationSeconds` (default 300, 0 = at once) is evicted with reason
//! `ApplicationFailure` and the policy's purge mode: `Gracefully` with its
//! `gracePeriodSeconds`, `Never` with `suppressDeletion: true` (the old copy stays until a person
//! sets it false), `Directly`. The scheduler then places the replicas elsewhere and the graceful
//! eviction controller ends the task, as for a taint eviction.
//!
//! With the `StatefulFailoverInjection` gate, `statePreservation` is read from the status
//! collected from the unhealthy cluster into the task's `preservedLabelState`, with the clusters
//! the binding was on (`clustersBeforeFailover`); the binding controller puts it on the
//! replacement.
//!
//! When a cluster turned unhealthy is kept in memory, per binding and cluster (as Karmada's
//! controller does); a restart starts the toleration again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::federation::karmada::policy::{ApplicationFailoverBehavior, PurgeMode};
use flotilla_api::federation::karmada::work::{AggregatedStatusItem, BindingKey, GracefulEvictionTask, ResourceBindingSpec};
use flotilla_api::interpreter::Health;
use kube::Client;
use parking_lot::Mutex;
use serde_json::json;

use crate::bindings::{Bindings, graceful_evict_cluster, preserved_label_state};
use flotilla_runtime::Events;
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "application-failover-controller";
/// Producers of the eviction tasks (Karmada's controller names).
pub const PRODUCER_RB: &str = "resource-binding-application-failover-controller";
pub const PRODUCER_CRB: &str = "cluster-resource-binding-application-failover-controller";
pub const REASON_APPLICATION_FAILURE: &str = "ApplicationFailure";
/// `decisionConditions.tolerationSeconds` when unset.
pub const DEFAULT_TOLERATION_SECONDS: i32 = 300;

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// The `StatefulFailoverInjection` gate: record `statePreservation`.
    pub preserve_state: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 2, preserve_state: false }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{key}: evicting unhealthy clusters: {source}")]
    Evict { key: BindingKey, source: kube::Error },
    #[error("{key}: preserving state for the eviction from {cluster}: {message}")]
    PreserveState { key: BindingKey, cluster: String, message: String },
}

/// The clusters of `spec.clusters` to evict now, and how soon to look again for the others
/// still unhealthy; `since` is when each was first seen unhealthy (updated here).
pub fn unhealthy_clusters(
    spec: &ResourceBindingSpec,
    observed: &[AggregatedStatusItem],
    toleration: Duration,
    since: &mut HashMap<String, Instant>,
    now: Instant,
) -> (Vec<String>, Option<Duration>) {
    let mut evict = Vec::new();
    let mut next: Option<Duration> = None;
    let scheduled: Vec<&str> = spec.clusters.iter().flatten().map(|c| c.name.as_str()).collect();
    since.retain(|c, _| scheduled.contains(&c.as_str()));
    for cluster in scheduled {
        let unhealthy = observed.iter().any(|i| i.cluster_name == cluster && i.health == Some(Health::Unhealthy));
        if !unhealthy {
            since.remove(cluster);
            continue;
        }
        let first = *since.entry(cluster.to_string()).or_insert(now);
        let elapsed = now.saturating_duration_since(first);
        if elapsed >= toleration {
            evict.push(cluster.to_string());
        } else {
            let left = toleration - elapsed;
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    (evict, next)
}

/// The eviction task for one cluster under the policy's `failover.application`.
pub fn task_for(cluster: &str, app: &ApplicationFailoverBehavior, producer: &str) -> GracefulEvictionTask {
    let mode = match app.purge_mode {
        Some(PurgeMode::Never) => PurgeMode::Never,
        Some(PurgeMode::Directly | PurgeMode::Immediately) => PurgeMode::Directly,
        _ => PurgeMode::Gracefully,
    };
    GracefulEvictionTask {
        from_cluster: cluster.to_string(),
        purge_mode: Some(mode),
        reason: REASON_APPLICATION_FAILURE.into(),
        message: Some(format!("Application is unhealthy in cluster {cluster}.")),
        producer: producer.into(),
        grace_period_seconds: (mode == PurgeMode::Gracefully).then_some(app.grace_period_seconds).flatten(),
        suppress_deletion: (mode == PurgeMode::Never).then_some(true),
        ..Default::default()
    }
}

/// Karmada's stateful failover for one task: the state `statePreservation` reads from the
/// status collected from the task's cluster, and the clusters the binding was on.
pub fn preserve_state(
    task: &mut GracefulEvictionTask,
    app: &ApplicationFailoverBehavior,
    spec: &ResourceBindingSpec,
    observed: &[AggregatedStatusItem],
) -> Result<(), String> {
    if let Some(state) = preserved_label_state(app.state_preservation.as_ref(), observed, &task.from_cluster)? {
        task.preserved_label_state = Some(state);
        task.clusters_before_failover = Some(spec.clusters.iter().flatten().map(|c| c.name.clone()).collect());
    }
    Ok(())
}

struct Context {
    client: Client,
    config: Config,
    events: Events,
    bindings: Bindings,
    unhealthy_since: Mutex<HashMap<BindingKey, HashMap<String, Instant>>>,
}

async fn reconcile(key: BindingKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let b = ctx.bindings.get(&key).filter(|b| b.meta.deletion_timestamp.is_none());
    let Some((b, app)) = b.and_then(|b| {
        let app = b.spec.failover.as_ref()?.application.clone()?;
        Some((b, app))
    }) else {
        ctx.unhealthy_since.lock().remove(&key);
        return Ok(Next::Done);
    };
    let toleration = Duration::from_secs(app.decision_conditions.toleration_seconds.unwrap_or(DEFAULT_TOLERATION_SECONDS).max(0) as u64);
    let observed = b.status.aggregated_status.clone().unwrap_or_default();
    let (evict, next) = {
        let mut all = ctx.unhealthy_since.lock();
        let since = all.entry(key.clone()).or_default();
        unhealthy_clusters(&b.spec, &observed, toleration, since, Instant::now())
    };
    if evict.is_empty() {
        return Ok(next.map_or(Next::Done, Next::After));
    }
    let producer = if key.namespace.is_some() { PRODUCER_RB } else { PRODUCER_CRB };
    let mut spec = b.spec.clone();
    for c in &evict {
        let mut task = task_for(c, &app, producer);
        if ctx.config.preserve_state {
            preserve_state(&mut task, &app, &b.spec, &observed).map_err(|message| Error::PreserveState { key: key.clone(), cluster: c.clone(), message })?;
        }
        spec = graceful_evict_cluster(&spec, task);
    }
    let patch = json!({
        "metadata": {"resourceVersion": b.meta.resource_version},
        "spec": {"clusters": spec.clusters, "gracefulEvictionTasks": spec.graceful_eviction_tasks},
    });
    match Bindings::patch(&ctx.client, &key, &patch).await {
        // A newer binding comes through the watch and is judged again.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(Next::Done),
        r => r.map_err(|source| Error::Evict { key: key.clone(), source })?,
    }
    for c in &evict {
        tracing::info!(controller = NAME, binding = %key, cluster = %c, "evicted: application unhealthy past its toleration");
        ctx.unhealthy_since.lock().entry(key.clone()).or_default().remove(c);
        ctx.bindings.publish_eviction(&ctx.events, &key, c).await;
    }
    Ok(Next::Done)
}

/// Run the controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<BindingKey>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let (bindings, watches) = Bindings::watch(&rt.informers, |spec| spec.failover.as_ref().is_some_and(|f| f.application.is_some()), queue.clone());
    let workers = config.workers;
    let ctx = Arc::new(Context { events: Events::new(client.clone(), NAME), client, config, bindings, unhealthy_since: Mutex::default() });
    let workers = run_workers(queue, workers, NAME, move |key| reconcile(key, ctx.clone()));
    tokio::select! {
        _ = watches => tracing::warn!(controller = NAME, "binding watches ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::policy::DecisionConditions;
    use flotilla_api::federation::karmada::work::TargetCluster;

    fn spec(clusters: &[&str]) -> ResourceBindingSpec {
        ResourceBindingSpec {
            clusters: Some(clusters.iter().map(|c| TargetCluster { name: (*c).into(), replicas: Some(2), ..Default::default() }).collect()),
            ..Default::default()
        }
    }

    fn item(cluster: &str, health: Health) -> AggregatedStatusItem {
        AggregatedStatusItem { cluster_name: cluster.into(), health: Some(health), ..Default::default() }
    }

    #[test]
    fn unhealthy_past_the_toleration_is_evicted() {
        let t0 = Instant::now();
        let mut since = HashMap::new();
        let observed = [item("m1", Health::Unhealthy), item("m2", Health::Healthy)];
        let tol = Duration::from_secs(10);
        assert_eq!(unhealthy_clusters(&spec(&["m1", "m2"]), &observed, tol, &mut since, t0), (vec![], Some(tol)));
        assert_eq!(unhealthy_clusters(&spec(&["m1", "m2"]), &observed, tol, &mut since, t0 + Duration::from_secs(4)), (vec![], Some(Duration::from_secs(6))));
        assert_eq!(unhealthy_clusters(&spec(&["m1", "m2"]), &observed, tol, &mut since, t0 + tol).0, ["m1"]);
        // Healthy again (or Unknown): the clock starts over.
        let recovered = [item("m1", Health::Unknown), item("m2", Health::Healthy)];
        assert_eq!(unhealthy_clusters(&spec(&["m1", "m2"]), &recovered, tol, &mut since, t0 + tol), (vec![], None));
        assert!(since.is_empty());
    }

    #[test]
    fn tasks_follow_the_purge_mode() {
        let app = |mode: Option<PurgeMode>, grace: Option<i32>| ApplicationFailoverBehavior {
            decision_conditions: DecisionConditions { toleration_seconds: Some(0) },
            purge_mode: mode,
            grace_period_seconds: grace,
            state_preservation: None,
        };
        let t = task_for("m1", &app(None, Some(600)), PRODUCER_RB);
        assert_eq!((t.purge_mode, t.grace_period_seconds, t.suppress_deletion), (Some(PurgeMode::Gracefully), Some(600), None));
        assert_eq!((t.reason.as_str(), t.producer.as_str()), ("ApplicationFailure", "resource-binding-application-failover-controller"));
        let t = task_for("m1", &app(Some(PurgeMode::Never), Some(600)), PRODUCER_RB);
        assert_eq!((t.purge_mode, t.grace_period_seconds, t.suppress_deletion), (Some(PurgeMode::Never), None, Some(true)));
        let t = task_for("m1", &app(Some(PurgeMode::Directly), None), PRODUCER_CRB);
        assert_eq!((t.purge_mode, t.suppress_deletion), (Some(PurgeMode::Directly), None));
        let evicted = graceful_evict_cluster(&spec(&["m1", "m2"]), t);
        assert_eq!(evicted.graceful_eviction_tasks.unwrap()[0].replicas, Some(2));
    }

    #[test]
    fn stateful_failover_records_the_state_and_the_clusters_before() {
        use flotilla_api::federation::karmada::policy::{StatePreservation, StatePreservationRule};
        let rule = StatePreservationRule { alias_label_name: "example.com/job".into(), json_path: "{.jobStatus.jobID}".into() };
        let app = ApplicationFailoverBehavior {
            decision_conditions: DecisionConditions { toleration_seconds: Some(0) },
            purge_mode: Some(PurgeMode::Directly),
            grace_period_seconds: None,
            state_preservation: Some(StatePreservation { rules: vec![rule] }),
        };
        let observed = [AggregatedStatusItem { status: Some(json!({"jobStatus": {"jobID": "j-7"}})), ..item("m1", Health::Unhealthy) }];
        let mut task = task_for("m1", &app, PRODUCER_RB);
        preserve_state(&mut task, &app, &spec(&["m1", "m2"]), &observed).unwrap();
        assert_eq!(task.preserved_label_state, Some([("example.com/job".to_string(), "j-7".to_string())].into()));
        assert_eq!(task.clusters_before_failover, Some(vec!["m1".to_string(), "m2".to_string()]));

        // Not collected yet, or the path finds nothing: the eviction waits.
        let mut task = task_for("m2", &app, PRODUCER_RB);
        let err = preserve_state(&mut task, &app, &spec(&["m1", "m2"]), &observed).unwrap_err();
        assert_eq!(err, "the application status has not yet been collected from Cluster(m2)");
        let bare = [item("m1", Health::Unhealthy)];
        let observed = [AggregatedStatusItem { status: Some(json!({"jobStatus": {}})), ..bare[0].clone() }];
        let mut task = task_for("m1", &app, PRODUCER_RB);
        assert!(preserve_state(&mut task, &app, &spec(&["m1"]), &observed).unwrap_err().contains("jobID is not found"), "{task:?}");

        // No rules: nothing recorded.
        let plain = ApplicationFailoverBehavior { state_preservation: None, ..app };
        let mut task = task_for("m1", &plain, PRODUCER_RB);
        preserve_state(&mut task, &plain, &spec(&["m1"]), &bare).unwrap();
        assert_eq!((task.preserved_label_state, task.clusters_before_failover), (None, None));
    }
}
