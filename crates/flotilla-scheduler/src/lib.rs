//! The Karmada-compatible scheduler (target: Karmada v1.16 with its default feature gates).
//!
//! Start at [`schedule()`]: a pure function from a binding ([`BindingView`]) and a [`Snapshot`] of
//! clusters to the binding's new `spec.clusters` ([`ScheduleResult`]) or a [`ScheduleError`]
//! carrying Karmada's message and condition reason. The pipeline is Karmada's: filter plugins
//! and score plugins ([`plugins::registry`]) → selection under spread constraints ([`select`])
//! → replica assignment ([`assign`]) by the Webster method ([`webster`]) with the general
//! estimator over `status.resourceSummary` ([`estimator`]). Each pass records why in an
//! [`Explanation`], which [`explain_text`] prints for `flotilla explain`.
//!
//! [`runner`] is the only part with I/O: [`runner::run`] (or [`runner::Scheduler`]) is a
//! controller of `flotilla-runtime` that reads ResourceBindings, ClusterResourceBindings and
//! Clusters from the process's shared informers, queues bindings on the events Karmada reacts to
//! (highest `spec.schedulePriority` first), decides per binding whether it needs
//! scheduling as Karmada's `doScheduleBinding` does ([`runner::decision`]), calls [`schedule()`]
//! on a snapshot of the cluster store, and writes `spec.clusters` with the applied-placement
//! annotation, the `Scheduled` condition, the observed generation and `lastScheduledTime`, and
//! `ScheduleBindingSucceed`/`ScheduleBindingFailed` Events ([`runner::writeback`]).
//!
//! KubeFed's ReplicaSchedulingPreference (its planner and controller) is not here: it is a
//! controller that writes federated objects, `flotilla_controllers::kubefed_rsp`.
//!
//! Invariant: outside [`runner`], nothing reads a clock, a random source or the network — the
//! same binding and snapshot always give the same result.

pub mod assign;
pub mod binding;
pub mod estimator;
pub mod explain;
pub mod placement;
pub mod plugins;
pub mod runner;
pub mod schedule;
pub mod select;
pub mod snapshot;
pub mod webster;

pub use binding::{BindingKind, BindingView};
pub use explain::{explain_json, explain_text};
pub use schedule::{
    Attempt, ClusterExplanation, ConditionReason, Explanation, Failure, FitError, Outcome, PluginVerdict, ScheduleError, ScheduleOptions, ScheduleResult,
    schedule,
};
pub use snapshot::Snapshot;
