//! The scheduler's I/O, a controller of the runtime (`flotilla-runtime`): it reads
//! ResourceBindings, ClusterResourceBindings and Clusters from the process's shared informers,
//! queues the bindings whose events matter (its `watch` triggers, highest `spec.schedulePriority` first),
//! decides per binding whether it needs scheduling as Karmada's `doScheduleBinding` does
//! ([`decision`]), runs the pure [`schedule()`](crate::schedule()) over a snapshot of the
//! cluster cache, and writes the outcome back ([`writeback`]) through `kube::Client`.
//!
//! Start with [`run`] (or [`Scheduler`] for its [`metrics`]). What happens to a failed pass
//! follows Karmada's `getConditionByError`:
//!
//! | outcome | `Scheduled` | `spec.clusters` | retried |
//! |---|---|---|---|
//! | scheduled | True / `Success` | the result | — |
//! | no cluster fits | False / `NoClusterFit` | emptied (cleanup) | no: the next change retries |
//! | replicas do not fit | False / `Unschedulable` | kept | after `unschedulable_retry` |
//! | any other error | False / `SchedulerError` | kept | with backoff |
//!
//! With the WorkloadAffinity gate the pass also sees where the ResourceBindings of the
//! binding's affinity groups run: the cache, corrected by the results this runner wrote that
//! the cache does not show yet (Karmada's assigning bindings); and bindings with groups are
//! scheduled one at a time, so two of a group never choose at once.
//!
//! Only this module reads a clock or the network.

pub mod decision;
pub mod metrics;
mod watch;
pub mod writeback;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::DEFAULT_SCHEDULER_NAME;
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding};
use flotilla_runtime::Runtime;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use self::decision::{Decision, Trigger, decide, is_ours};
use self::metrics::Metrics;
use self::writeback::{AnyBinding, SCHEDULED_MESSAGE, StatusUpdate, Writer, is_conflict, is_not_found, success_message};
use crate::binding::BindingKind;
use crate::schedule::{ConditionReason, ScheduleOptions, schedule};
use crate::snapshot::Snapshot;

/// Settings of the runner. Every wait is here so tests can shorten them.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bindings scheduled at once (Karmada runs one worker).
    pub workers: usize,
    /// The `spec.schedulerName` this scheduler serves (empty in a binding means
    /// `default-scheduler`).
    pub scheduler_name: String,
    /// First wait before retrying a binding whose pass failed (Karmada: 1 s).
    pub initial_backoff: Duration,
    /// Longest such wait (Karmada: 10 s).
    pub max_backoff: Duration,
    /// How long an unschedulable binding waits before it is tried again unless a change queues
    /// it sooner (Karmada's unschedulable pool: 5 min).
    pub unschedulable_retry: Duration,
    /// Keep selected clusters that get no replicas (`--enable-empty-workload-propagation`).
    pub enable_empty_workload_propagation: bool,
    /// The WorkloadAffinity gate: run the WorkloadAffinity and WorkloadAntiAffinity filters.
    pub workload_affinity: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: 1,
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            unschedulable_retry: Duration::from_secs(5 * 60),
            enable_empty_workload_propagation: false,
            workload_affinity: false,
        }
    }
}

/// A setting [`Config::validate`] refuses.
#[derive(Debug, thiserror::Error)]
#[error("invalid scheduler configuration: {0}")]
pub struct ConfigError(String);

impl Config {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |what: &str| Err(ConfigError(what.to_string()));
        if self.workers == 0 {
            return fail("workers must be at least 1");
        }
        if self.scheduler_name.is_empty() {
            return fail("scheduler_name must not be empty");
        }
        if self.initial_backoff.is_zero() || self.max_backoff < self.initial_backoff {
            return fail("backoff must be positive, initial_backoff <= max_backoff");
        }
        if self.unschedulable_retry.is_zero() {
            return fail("unschedulable_retry must be positive");
        }
        Ok(())
    }
}

/// The scheduler's name in the controller set, its metrics and its spans.
pub const NAME: &str = "scheduler";

/// Why scheduling one binding failed; all are retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {binding} failed: {source}")]
    Read { binding: BindingKey, source: kube::Error },
    #[error("writing the scheduling result of {binding} failed: {source}")]
    WriteResult { binding: BindingKey, source: kube::Error },
    #[error("writing the scheduling status of {binding} failed: {source}")]
    WriteStatus { binding: BindingKey, source: kube::Error },
    /// `schedule` failed with an error that is neither unfitting clusters nor replicas.
    #[error("scheduling {binding} failed: {message}")]
    Schedule { binding: BindingKey, message: String },
}

/// A binding in the queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BindingKey {
    pub kind: BindingKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for BindingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}({ns}/{})", self.kind.as_str(), self.name),
            None => write!(f, "{}({})", self.kind.as_str(), self.name),
        }
    }
}

impl flotilla_runtime::ReconcileError for Error {}

/// What becomes of a key after its pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Nothing more until an event queues it again.
    Done,
    /// Replicas did not fit: wait in the unschedulable pool.
    Unschedulable,
}

/// How many times a pass is recomputed on the fresh binding after its result write conflicted.
const RESULT_ATTEMPTS: usize = 3;

/// What the handlers and workers share.
pub(crate) struct Shared {
    config: Config,
    options: ScheduleOptions,
    writer: Writer,
    metrics: Metrics,
    bindings: Store<ResourceBinding>,
    cluster_bindings: Store<ClusterResourceBinding>,
    clusters: Store<Cluster>,
    /// Results written for grouped bindings, by (namespace, name): the resourceVersion written
    /// and the clusters, until the cache has caught up.
    assigned: parking_lot::Mutex<HashMap<(String, String), (u64, Vec<String>)>>,
    /// Held while a binding with workload affinity groups is scheduled.
    grouped: tokio::sync::Mutex<()>,
}

/// The scheduler, built from a client and a validated [`Config`].
pub struct Scheduler {
    client: kube::Client,
    config: Config,
    metrics: Metrics,
}

impl Scheduler {
    pub fn new(client: kube::Client, config: Config) -> Result<Scheduler, ConfigError> {
        config.validate()?;
        Ok(Scheduler { client, config, metrics: Metrics::default() })
    }

    /// The runner's metrics; register them once with
    /// [`Metrics::register`](metrics::Metrics::register) before [`Scheduler::run`].
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Schedules until `rt` shuts down, reading bindings and clusters from its informers.
    pub async fn run(self, rt: Runtime) {
        let Scheduler { client, config, metrics } = self;
        let shared = Arc::new(Shared {
            options: ScheduleOptions {
                enable_empty_workload_propagation: config.enable_empty_workload_propagation,
                registry: if config.workload_affinity { crate::plugins::registry_with_workload_affinity() } else { crate::plugins::registry() },
            },
            writer: Writer::new(client.clone(), &config.scheduler_name),
            metrics,
            bindings: rt.informers.store::<ResourceBinding>(),
            cluster_bindings: rt.informers.store::<ClusterResourceBinding>(),
            clusters: rt.informers.store::<Cluster>(),
            assigned: Default::default(),
            grouped: Default::default(),
            config,
        });
        let priority = {
            let shared = shared.clone();
            move |key: &BindingKey| shared.lookup(key).map_or(0, |b| watch::priority_of(&b.view()))
        };
        let controller = rt
            .controller::<BindingKey>(NAME)
            .workers(shared.config.workers)
            .backoff(shared.config.initial_backoff, shared.config.max_backoff)
            .priority(priority)
            .watches_changes(watch::on_binding::<ResourceBinding>(shared.clone(), "binding"))
            .watches_changes(watch::on_binding::<ClusterResourceBinding>(shared.clone(), "cluster_binding"))
            .watches_changes(watch::on_cluster(shared.clone()));

        // Schedule nothing against a cluster cache that is still empty for want of a first list.
        let synced = async {
            rt.informers.synced::<ResourceBinding>().await;
            rt.informers.synced::<ClusterResourceBinding>().await;
            rt.informers.synced::<Cluster>().await;
        };
        tokio::select! {
            () = rt.shutdown.cancelled() => return,
            () = synced => {}
        }
        tracing::info!(workers = shared.config.workers, "scheduler caches synced; scheduling");
        controller
            .run(move |key: BindingKey| {
                let shared = shared.clone();
                async move {
                    let started = Instant::now();
                    let outcome = shared.schedule_key(&key).await;
                    shared.metrics.e2e_duration.observe(started.elapsed().as_secs_f64());
                    outcome.map(|next| match next {
                        Next::Done => flotilla_runtime::Next::Done,
                        Next::Unschedulable => flotilla_runtime::Next::After(shared.config.unschedulable_retry),
                    })
                }
            })
            .await;
    }
}

/// Runs the scheduler with `config` on `rt` until it shuts down. An invalid `config` is logged
/// and nothing runs.
pub async fn run(client: kube::Client, rt: Runtime, config: Config) {
    match Scheduler::new(client, config) {
        Ok(scheduler) => scheduler.run(rt).await,
        Err(error) => tracing::error!(%error, "the scheduler does not start"),
    }
}

/// A resourceVersion as a number (the store's revisions are; anything else counts as 0).
fn revision(rv: Option<&str>) -> u64 {
    rv.and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl Shared {
    /// The ResourceBindings with workload affinity groups and where they run: the cache, or the
    /// result this runner wrote when the cache is older.
    fn grouped_workloads(&self) -> Vec<crate::snapshot::GroupedWorkload> {
        let mut assigned = self.assigned.lock();
        // What stays remembered: results the cache does not show yet, of bindings still there.
        let mut pending = HashMap::new();
        let mut out = Vec::new();
        for rb in self.bindings.state() {
            let Some(groups) = &rb.spec.workload_affinity_groups else { continue };
            let key = (rb.metadata.namespace.clone().unwrap_or_default(), rb.metadata.name.clone().unwrap_or_default());
            let cached = revision(rb.metadata.resource_version.as_deref());
            let mut clusters: Vec<String> = rb.spec.clusters.iter().flatten().map(|c| c.name.clone()).collect();
            if let Some((written, mine)) = assigned.remove(&key).filter(|(written, _)| *written > cached) {
                clusters = mine.clone();
                pending.insert(key.clone(), (written, mine));
            }
            out.push(crate::snapshot::GroupedWorkload {
                namespace: key.0,
                name: key.1,
                affinity_group: groups.affinity_group.clone(),
                anti_affinity_group: groups.anti_affinity_group.clone(),
                clusters,
            });
        }
        *assigned = pending;
        out
    }

    /// Remembers a grouped binding's result until the cache shows it.
    fn note_assigned(&self, stored: &AnyBinding, clusters: &[flotilla_api::federation::karmada::work::TargetCluster]) {
        let meta = stored.metadata();
        let key = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
        let names = clusters.iter().map(|c| c.name.clone()).collect();
        self.assigned.lock().insert(key, (revision(meta.resource_version.as_deref()), names));
    }

    /// The binding as the reflector has it.
    fn lookup(&self, key: &BindingKey) -> Option<AnyBinding> {
        match key.kind {
            BindingKind::ResourceBinding => {
                let reference = ObjectRef::new(&key.name).within(key.namespace.as_deref().unwrap_or_default());
                self.bindings.get(&reference).map(AnyBinding::Namespaced)
            }
            BindingKind::ClusterResourceBinding => self.cluster_bindings.get(&ObjectRef::new(&key.name)).map(AnyBinding::Cluster),
        }
    }

    /// One key: the pass, recomputed on the binding as stored when the result write conflicted.
    async fn schedule_key(&self, key: &BindingKey) -> Result<Next, Error> {
        let Some(mut binding) = self.lookup(key) else { return Ok(Next::Done) };
        for attempt in 1..=RESULT_ATTEMPTS {
            match self.pass(key, &binding).await {
                Err(Error::WriteResult { source, .. }) if is_conflict(&source) && attempt < RESULT_ATTEMPTS => {
                    binding = match binding.refetch(self.writer.client()).await {
                        Ok(fresh) => fresh,
                        Err(source) if is_not_found(&source) => return Ok(Next::Done),
                        Err(source) => return Err(Error::Read { binding: key.clone(), source }),
                    };
                }
                outcome => return outcome,
            }
        }
        Ok(Next::Done)
    }

    /// `doScheduleBinding`: skip what is not ours, decide, and schedule if needed.
    async fn pass(&self, key: &BindingKey, binding: &AnyBinding) -> Result<Next, Error> {
        let view = binding.view();
        let meta = binding.metadata();
        if meta.deletion_timestamp.is_some() || !is_ours(meta.labels.as_ref(), view.spec, &self.config.scheduler_name) {
            return Ok(Next::Done);
        }
        let mut snapshot = Snapshot::from_shared(self.clusters.state());
        let grouped = self.config.workload_affinity && view.spec.workload_affinity_groups.is_some();
        let _one_at_a_time = if grouped {
            let guard = self.grouped.lock().await;
            snapshot = snapshot.with_workloads(self.grouped_workloads());
            Some(guard)
        } else {
            None
        };
        match decide(&view, meta.generation, binding.applied_placement(), &snapshot) {
            Decision::Nothing => Ok(Next::Done),
            Decision::ObserveGeneration => {
                tracing::debug!("nothing to schedule; recording the observed generation");
                self.observe_generation(key, binding).await.map(|()| Next::Done)
            }
            Decision::Schedule(trigger) => {
                tracing::info!(?trigger, "scheduling");
                self.schedule_binding(key, binding, &snapshot, trigger).await
            }
        }
    }

    async fn observe_generation(&self, key: &BindingKey, binding: &AnyBinding) -> Result<(), Error> {
        let Some(generation) = binding.metadata().generation else { return Ok(()) };
        let patch = json!({ "status": { "schedulerObservedGeneration": generation } });
        let name = &key.name;
        let params = PatchParams::default();
        let client = self.writer.client().clone();
        let written = match key.kind {
            BindingKind::ResourceBinding => {
                let api: Api<ResourceBinding> = Api::namespaced(client, key.namespace.as_deref().unwrap_or_default());
                api.patch_status(name, &params, &Patch::Merge(&patch)).await.map(drop)
            }
            BindingKind::ClusterResourceBinding => {
                Api::<ClusterResourceBinding>::all(client).patch_status(name, &params, &Patch::Merge(&patch)).await.map(drop)
            }
        };
        match written {
            Err(source) if !is_not_found(&source) => Err(Error::WriteStatus { binding: key.clone(), source }),
            _ => Ok(()),
        }
    }

    /// Runs the algorithm and writes its outcome: result, status, Events, metrics.
    async fn schedule_binding(&self, key: &BindingKey, binding: &AnyBinding, snapshot: &Snapshot, trigger: Trigger) -> Result<Next, Error> {
        let view = binding.view();
        let started = Instant::now();
        let outcome = schedule(&view, snapshot, &self.options);
        self.metrics.algorithm_duration.observe(started.elapsed().as_secs_f64());
        let placement_json = view.placement().and_then(|p| serde_json::to_string(p).ok());
        let write_result = |source| Error::WriteResult { binding: key.clone(), source };
        let write_status = |source| Error::WriteStatus { binding: key.clone(), source };

        let result = match outcome {
            Ok(result) => result,
            Err(error) => {
                let reason = error.failure.reason();
                let message = error.failure.to_string();
                tracing::info!(reason = reason.as_str(), %message, "binding not scheduled");
                // Karmada writes the empty result when no cluster fits, so a placement that
                // excludes every cluster withdraws the workload.
                let stored = match (reason, &placement_json) {
                    (ConditionReason::NoClusterFit, Some(placement)) => self.writer.write_result(binding, placement, &[]).await.map_err(write_result)?,
                    _ => binding.clone(),
                };
                let update = StatusUpdate { reason: reason.as_str(), message: message.clone(), success: false, affinity_name: None };
                self.writer.write_status(&stored, &update).await.map_err(write_status)?;
                self.writer.event(&stored, false, &message).await;
                let result_label = if reason == ConditionReason::SchedulerError { "error" } else { "unschedulable" };
                self.metrics.attempt(result_label, trigger.schedule_type());
                return match reason {
                    ConditionReason::NoClusterFit => Ok(Next::Done),
                    ConditionReason::Unschedulable => Ok(Next::Unschedulable),
                    _ => Err(Error::Schedule { binding: key.clone(), message }),
                };
            }
        };
        let placement = placement_json.unwrap_or_default();
        let stored = self.writer.write_result(binding, &placement, &result.clusters).await.map_err(write_result)?;
        if self.config.workload_affinity && view.spec.workload_affinity_groups.is_some() {
            self.note_assigned(&stored, &result.clusters);
        }
        let update = StatusUpdate {
            reason: ConditionReason::Success.as_str(),
            message: SCHEDULED_MESSAGE.to_string(),
            success: true,
            affinity_name: result.affinity_name.clone(),
        };
        self.writer.write_status(&stored, &update).await.map_err(write_status)?;
        self.writer.event(&stored, true, &success_message(view.kind, &result.clusters)).await;
        self.metrics.attempt("scheduled", trigger.schedule_type());
        tracing::info!(clusters = %writeback::clusters_text(&result.clusters), "binding scheduled");
        Ok(Next::Done)
    }
}
