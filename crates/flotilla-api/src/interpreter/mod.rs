//! Karmada's native resource interpreter (v1.16, `pkg/resourceinterpreter/default/native`)
//! as pure functions over `serde_json::Value`: what the detector, the binding controller, the
//! execution controller and the status controllers ask of a resource they know nothing about
//! beyond its JSON.
//!
//! | operation | function | used by |
//! |---|---|---|
//! | InterpretReplica | [`get_replicas`] | detector: `spec.replicas` / `spec.replicaRequirements` of a binding |
//! | ReviseReplica | [`revise_replicas`], [`revise_job_completions`] | binding controller, per target cluster |
//! | Prune | [`prune_for_work`] | Work admission: what a manifest in a Work never carries |
//! | Retain | [`retain`] | execution controller, before updating a member object |
//! | InterpretStatus | [`reflect_status`] | work-status controller: `manifestStatuses[].status` |
//! | InterpretHealth | [`interpret_health`] | work-status controller: `manifestStatuses[].health` |
//! | AggregateStatus | [`aggregate_status`] | binding-status controller: the template's `.status` |
//! | InterpretDependency | [`get_dependencies`] | `propagateDeps` |
//!
//! Each operation answers `Ok(None)` for a kind Karmada has no native hook for (the caller
//! then does what Karmada does without one: no replicas, no revision, the generic retain only,
//! ...). Kinds are matched by `apiVersion` and `kind` together, as Karmada's hook tables are keyed
//! by GroupVersionKind; pruning (like Karmada's) looks at `kind` alone.
//!
//! Invariant: no clock, no randomness, no I/O. The one place Karmada reads the clock (the
//! condition times of an aggregated Job) takes `now` from the caller.

mod aggregate;
mod dependencies;
mod prune;
mod replicas;
mod resources;
mod retain;
mod status;
mod summary;
pub(crate) mod unstructured;

use std::fmt;

use serde_json::Value;

pub use crate::federation::karmada::work::{AggregatedStatusItem, ReplicaRequirements, ResourceHealth as Health};
pub use aggregate::aggregate_status;
pub use dependencies::{ObjectRef, get_dependencies};
pub use prune::prune_for_work;
pub use replicas::{Features, Replicas, get_replicas, get_replicas_with, job_completions, revise_job_completions, revise_replicas};
pub use resources::milli_value;
pub use retain::retain;
pub use status::{interpret_health, reflect_status};
pub use summary::resource_summary;

/// Label on a workload whose replicas the member keeps (an HPA scales it there).
pub const RETAIN_REPLICAS_LABEL: &str = "resourcetemplate.karmada.io/retain-replicas";
/// The only value of [`RETAIN_REPLICAS_LABEL`] that retains.
pub const RETAIN_REPLICAS_VALUE: &str = "true";
/// Annotation on a member object: the generation of the template it was made from.
pub const RESOURCE_TEMPLATE_GENERATION_ANNOTATION: &str = "resourcetemplate.karmada.io/generation";

/// The interpreter operations, named as Karmada names them (`InterpreterOperation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    InterpretReplica,
    ReviseReplica,
    Prune,
    Retain,
    InterpretStatus,
    InterpretHealth,
    AggregateStatus,
    InterpretDependency,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An operation could not interpret the object: a field it reads has the wrong shape or is
/// missing where Karmada requires it. Karmada reports these as the operation's error (an Event
/// such as `InterpretHealthFailed`, or a failed sync).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{operation} {object}: {field}: {reason}")]
pub struct InterpretError {
    pub operation: Operation,
    /// `Kind namespace/name` of the object.
    pub object: String,
    /// Dotted path of the offending field (`spec.replicas`, `status.items[1].status`).
    pub field: String,
    pub reason: String,
}

impl InterpretError {
    pub(crate) fn new(operation: Operation, obj: &Value, field: impl Into<String>, reason: impl Into<String>) -> Self {
        InterpretError { operation, object: describe(obj), field: field.into(), reason: reason.into() }
    }
}

/// `Kind namespace/name` (or `Kind name`) for messages.
fn describe(obj: &Value) -> String {
    let s = |path: &[&str]| unstructured::string(obj, path).unwrap_or("");
    let (kind, ns, name) = (s(&["kind"]), s(&["metadata", "namespace"]), s(&["metadata", "name"]));
    if ns.is_empty() { format!("{kind} {name}") } else { format!("{kind} {ns}/{name}") }
}

/// The built-in kinds Karmada's native interpreter has hooks for, by group/version and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Native {
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    Pod,
    Service,
    ServiceAccount,
    Secret,
    PersistentVolumeClaim,
    PersistentVolume,
    Ingress,
    PodDisruptionBudget,
    HorizontalPodAutoscaler,
    ServiceImport,
}

impl Native {
    /// The kind of `obj` if its `apiVersion` and `kind` name one of the native kinds.
    pub(crate) fn of(obj: &Value) -> Option<Native> {
        let api_version = unstructured::string(obj, &["apiVersion"])?;
        let kind = unstructured::string(obj, &["kind"])?;
        Some(match (api_version, kind) {
            ("apps/v1", "Deployment") => Native::Deployment,
            ("apps/v1", "ReplicaSet") => Native::ReplicaSet,
            ("apps/v1", "StatefulSet") => Native::StatefulSet,
            ("apps/v1", "DaemonSet") => Native::DaemonSet,
            ("batch/v1", "Job") => Native::Job,
            ("batch/v1", "CronJob") => Native::CronJob,
            ("v1", "Pod") => Native::Pod,
            ("v1", "Service") => Native::Service,
            ("v1", "ServiceAccount") => Native::ServiceAccount,
            ("v1", "Secret") => Native::Secret,
            ("v1", "PersistentVolumeClaim") => Native::PersistentVolumeClaim,
            ("v1", "PersistentVolume") => Native::PersistentVolume,
            ("networking.k8s.io/v1", "Ingress") => Native::Ingress,
            ("policy/v1", "PodDisruptionBudget") => Native::PodDisruptionBudget,
            ("autoscaling/v2", "HorizontalPodAutoscaler") => Native::HorizontalPodAutoscaler,
            ("multicluster.x-k8s.io/v1alpha1", "ServiceImport") => Native::ServiceImport,
            _ => return None,
        })
    }
}
