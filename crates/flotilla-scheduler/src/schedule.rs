//! One scheduling pass (`genericScheduler.Schedule`): filter → score → select → assign, for the
//! `clusterAffinity` or for each `clusterAffinities` term in turn until one fits, with an
//! [`Explanation`] of every decision.

use std::collections::BTreeMap;
use std::fmt;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::ClusterAffinity;
use flotilla_api::federation::karmada::work::TargetCluster;

use crate::assign::{AssignError, AssignmentMode, assign};
use crate::binding::BindingView;
use crate::estimator::available_replicas;
use crate::placement::{Strategy, strategy};
use crate::plugins::{FilterContext, Registry, Verdict, registry};
use crate::select::{Candidate, select_clusters, sort_candidates};
use crate::snapshot::{Snapshot, cluster_name, is_deleting};

/// Settings of a scheduling pass.
#[derive(Clone, Debug)]
pub struct ScheduleOptions {
    /// The plugins to run.
    pub registry: Registry,
    /// Keep selected clusters that get no replicas (`--enable-empty-workload-propagation`).
    pub enable_empty_workload_propagation: bool,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        ScheduleOptions { registry: registry(), enable_empty_workload_propagation: false }
    }
}

/// A successful pass.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleResult {
    /// The new `spec.clusters`, in name order.
    pub clusters: Vec<TargetCluster>,
    /// The `clusterAffinities` term that fitted (for `status.schedulerObservingAffinityName`).
    pub affinity_name: Option<String>,
    pub explanation: Explanation,
}

/// A failed pass: the failure (with clusterAffinities, the first term's) and what was tried.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{failure}")]
pub struct ScheduleError {
    pub failure: Failure,
    pub explanation: Explanation,
}

/// Which step failed; the messages are Karmada's.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Failure {
    /// The binding has no placement.
    #[error("failed to get placement from {0}")]
    NoPlacement(String),
    /// No cluster passed the filters.
    #[error("{0}")]
    NoClusterFit(FitError),
    /// The spread constraints could not be met.
    #[error("failed to select clusters: {0}")]
    SelectClusters(String),
    /// The replicas could not be placed.
    #[error("failed to assign replicas: {0}")]
    AssignReplicas(AssignError),
}

impl Failure {
    /// The reason of the `Scheduled=False` condition.
    pub fn reason(&self) -> ConditionReason {
        match self {
            Failure::NoClusterFit(_) => ConditionReason::NoClusterFit,
            Failure::AssignReplicas(e) if e.is_unschedulable() => ConditionReason::Unschedulable,
            _ => ConditionReason::SchedulerError,
        }
    }
}

/// Reasons of the binding's `Scheduled` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionReason {
    Success,
    SchedulerError,
    NoClusterFit,
    Unschedulable,
}

impl ConditionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionReason::Success => "Success",
            ConditionReason::SchedulerError => "SchedulerError",
            ConditionReason::NoClusterFit => "NoClusterFit",
            ConditionReason::Unschedulable => "Unschedulable",
        }
    }
}

/// No cluster fits: how many clusters there are and how many were dropped for each reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FitError {
    pub total: usize,
    pub reasons: BTreeMap<String, usize>,
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.total == 0 || self.reasons.is_empty() {
            return write!(f, "0/{} clusters are available: no cluster exists.", self.total);
        }
        let mut histogram: Vec<String> = self.reasons.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
        histogram.sort();
        write!(f, "0/{} clusters are available: {}.", self.total, histogram.join(", "))
    }
}

impl std::error::Error for FitError {}

/// Why the scheduler placed the binding where it did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Explanation {
    /// The replica strategy; `None` for non-workloads (every selected cluster, no replicas).
    pub strategy: Option<Strategy>,
    pub replicas: i32,
    /// Steady or Fresh, for the dynamic strategies.
    pub mode: Option<AssignmentMode>,
    /// One pass per affinity tried.
    pub attempts: Vec<Attempt>,
}

/// One pass over the snapshot with one cluster affinity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attempt {
    /// The `clusterAffinities` term; `None` for `placement.clusterAffinity`.
    pub affinity_name: Option<String>,
    pub clusters: Vec<ClusterExplanation>,
    /// The failure of this pass.
    pub error: Option<String>,
}

/// One cluster in one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterExplanation {
    pub name: String,
    /// Every filter plugin's verdict, in plugin order.
    pub filters: Vec<PluginVerdict>,
    /// Sum of the score plugins, for clusters that passed the filters.
    pub score: Option<i64>,
    /// Replicas the cluster can hold (estimate plus what it runs of this binding).
    pub available_replicas: Option<i64>,
    /// The cluster's Webster votes (static weight or available replicas), when divided.
    pub weight: Option<i64>,
    pub outcome: Outcome,
    /// Replicas assigned (selected workloads).
    pub replicas: Option<i32>,
}

/// One filter plugin's verdict on one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginVerdict {
    pub plugin: &'static str,
    pub verdict: Verdict,
}

/// What became of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The cluster is being deleted and is never scheduled onto.
    Deleting,
    /// Dropped by the first filter plugin that failed.
    Filtered { plugin: &'static str, reason: String },
    /// Feasible but not chosen (spread constraints).
    NotSelected(String),
    /// Chosen.
    Selected,
    /// Feasible; the pass failed before selection finished.
    Undecided,
}

/// Schedules a binding onto a snapshot of clusters. Pure and deterministic.
///
/// With `clusterAffinities`, terms are tried from the observed one (the first on a fresh
/// reschedule) until one schedules; if none does, the error is the first term's.
pub fn schedule(binding: &BindingView<'_>, snapshot: &Snapshot, options: &ScheduleOptions) -> Result<ScheduleResult, ScheduleError> {
    let mut explanation = Explanation {
        strategy: binding.placement().filter(|_| binding.is_workload()).map(strategy),
        replicas: binding.replicas(),
        mode: None,
        attempts: Vec::new(),
    };
    let Some(placement) = binding.placement() else {
        return Err(ScheduleError { failure: Failure::NoPlacement(binding.to_string()), explanation });
    };
    let terms = placement.cluster_affinities.as_deref().filter(|t| !t.is_empty());
    let Some(terms) = terms else {
        let pass = run_pass(binding, snapshot, options, placement.cluster_affinity.as_ref(), None);
        return finish(pass, explanation, None);
    };
    let start = match binding.observed_affinity_name() {
        Some(observed) if !binding.reschedule_required() => terms.iter().position(|t| t.affinity_name == observed).unwrap_or(0),
        _ => 0,
    };
    let mut first_failure = None;
    for term in &terms[start..] {
        let pass = run_pass(binding, snapshot, options, Some(&term.affinity), Some(term.affinity_name.clone()));
        match pass.result {
            Ok(clusters) => {
                explanation.mode = pass.mode;
                explanation.attempts.push(pass.attempt);
                return Ok(ScheduleResult { clusters, affinity_name: Some(term.affinity_name.clone()), explanation });
            }
            Err(failure) => {
                explanation.attempts.push(pass.attempt);
                first_failure.get_or_insert(failure);
            }
        }
    }
    let failure = first_failure.expect("at least one clusterAffinities term was tried");
    Err(ScheduleError { failure, explanation })
}

fn finish(pass: Pass, mut explanation: Explanation, affinity_name: Option<String>) -> Result<ScheduleResult, ScheduleError> {
    explanation.mode = pass.mode;
    explanation.attempts.push(pass.attempt);
    match pass.result {
        Ok(clusters) => Ok(ScheduleResult { clusters, affinity_name, explanation }),
        Err(failure) => Err(ScheduleError { failure, explanation }),
    }
}

struct Pass {
    attempt: Attempt,
    mode: Option<AssignmentMode>,
    result: Result<Vec<TargetCluster>, Failure>,
}

fn run_pass(
    binding: &BindingView<'_>,
    snapshot: &Snapshot,
    options: &ScheduleOptions,
    affinity: Option<&ClusterAffinity>,
    affinity_name: Option<String>,
) -> Pass {
    let mut attempt = Attempt { affinity_name, clusters: Vec::new(), error: None };
    let mut mode = None;
    let result = place(binding, snapshot, options, affinity, &mut attempt, &mut mode);
    if let Err(failure) = &result {
        attempt.error = Some(failure.to_string());
    }
    Pass { attempt, mode, result }
}

/// Filter, score, select and assign, recording each cluster's fate in `attempt`.
fn place(
    binding: &BindingView<'_>,
    snapshot: &Snapshot,
    options: &ScheduleOptions,
    affinity: Option<&ClusterAffinity>,
    attempt: &mut Attempt,
    mode: &mut Option<AssignmentMode>,
) -> Result<Vec<TargetCluster>, Failure> {
    let placement = binding.placement().expect("checked by schedule");
    let ctx = FilterContext { binding, affinity, workloads: snapshot.workloads() };
    let mut feasible: Vec<&Cluster> = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for cluster in snapshot.clusters() {
        let mut explained = ClusterExplanation {
            name: cluster_name(cluster).to_string(),
            filters: Vec::new(),
            score: None,
            available_replicas: None,
            weight: None,
            outcome: Outcome::Undecided,
            replicas: None,
        };
        if is_deleting(cluster) {
            explained.outcome = Outcome::Deleting;
            attempt.clusters.push(explained);
            continue;
        }
        for plugin in options.registry.filters() {
            let verdict = plugin.filter(&ctx, cluster);
            if let (Verdict::Fail(reason), Outcome::Undecided) = (&verdict, &explained.outcome) {
                *reasons.entry(reason.clone()).or_default() += 1;
                explained.outcome = Outcome::Filtered { plugin: plugin.name(), reason: reason.clone() };
            }
            explained.filters.push(PluginVerdict { plugin: plugin.name(), verdict });
        }
        if explained.outcome == Outcome::Undecided {
            feasible.push(cluster);
        }
        attempt.clusters.push(explained);
    }
    if feasible.is_empty() {
        return Err(Failure::NoClusterFit(FitError { total: snapshot.len(), reasons }));
    }

    let room = available_replicas(&feasible, binding);
    let mut candidates: Vec<Candidate<'_>> = feasible
        .iter()
        .zip(room)
        .map(|(cluster, room)| {
            let name = cluster_name(cluster);
            let score = options.registry.scores().iter().map(|p| p.score(binding, cluster)).sum();
            Candidate { cluster, name, score, available: room + i64::from(binding.assigned_replicas(name)) }
        })
        .collect();
    sort_candidates(&mut candidates);
    let explained = |attempt: &mut Attempt, name: &str| -> Option<usize> { attempt.clusters.iter().position(|c| c.name == name) };
    for candidate in &candidates {
        if let Some(i) = explained(attempt, candidate.name) {
            attempt.clusters[i].score = Some(candidate.score);
            attempt.clusters[i].available_replicas = Some(candidate.available);
        }
    }

    let selection = select_clusters(candidates, placement, binding).map_err(Failure::SelectClusters)?;
    for (name, why) in &selection.passed_over {
        if let Some(i) = explained(attempt, name) {
            attempt.clusters[i].outcome = Outcome::NotSelected(why.clone());
        }
    }
    for candidate in &selection.selected {
        if let Some(i) = explained(attempt, candidate.name) {
            attempt.clusters[i].outcome = Outcome::Selected;
        }
    }

    let assignment = assign(&selection.selected, binding).map_err(Failure::AssignReplicas)?;
    *mode = assignment.mode;
    let mut clusters = assignment.clusters;
    if options.enable_empty_workload_propagation {
        for candidate in &selection.selected {
            if !clusters.iter().any(|t| t.name == candidate.name) {
                clusters.push(TargetCluster { name: candidate.name.to_string(), replicas: None, start_ordinal: None });
            }
        }
    }
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    for explained_cluster in &mut attempt.clusters {
        explained_cluster.weight = assignment.votes.get(&explained_cluster.name).copied();
        if explained_cluster.outcome == Outcome::Selected && binding.is_workload() {
            let replicas = clusters.iter().find(|t| t.name == explained_cluster.name).and_then(|t| t.replicas);
            explained_cluster.replicas = Some(replicas.unwrap_or(0));
        }
    }
    Ok(clusters)
}
