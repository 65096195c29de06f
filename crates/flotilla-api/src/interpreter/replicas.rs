//! InterpretReplica and ReviseReplica: how many replicas a workload asks for and what one of
//! them needs (the shape of a binding's `spec.replicaRequirements`), and the per-cluster copy
//! of a workload with its replicas set.
//!
//! Karmada v1.16 has replica hooks for `apps/v1` Deployment and StatefulSet, `batch/v1` Job and
//! `v1` Pod, and revision hooks for Deployment, StatefulSet and Job. ReplicaSet and DaemonSet have
//! neither: a ReplicaSet template is propagated with its own `spec.replicas` to every cluster.

use k8s_openapi::api::core::v1::{NodeSelector, Toleration};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::resources::pod_request;
use super::{InterpretError, Native, Operation, ReplicaRequirements, unstructured};
use crate::federation::karmada::work::NodeClaim;

/// The replicas of a workload and what each one needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replicas {
    /// Desired replicas (`0` when the field is absent, as in Karmada).
    pub replicas: i32,
    /// Per-replica requirements; `None` when the pod template constrains nothing.
    pub requirements: Option<ReplicaRequirements>,
}

/// Karmada feature gates that change what the interpreter reports. The defaults are v1.16's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// `ResourceQuotaEstimate` (alpha, off by default): also report the workload's namespace and
    /// `priorityClassName` in the replica requirements, for quota-aware estimation.
    pub resource_quota_estimate: bool,
}

/// InterpretReplica with v1.16's default feature gates. `Ok(None)` for kinds without a hook.
pub fn get_replicas(obj: &Value) -> Result<Option<Replicas>, InterpretError> {
    get_replicas_with(obj, Features::default())
}

/// InterpretReplica with explicit feature gates.
pub fn get_replicas_with(obj: &Value, features: Features) -> Result<Option<Replicas>, InterpretError> {
    let err = |field: &str, reason: String| InterpretError::new(Operation::InterpretReplica, obj, field, reason);
    let int = |path: &[&str]| -> Result<Option<i32>, InterpretError> {
        let v = unstructured::nested_i64(obj, path).map_err(|e| err(&unstructured::dotted(path), e))?;
        v.map(|v| i32::try_from(v).map_err(|_| err(&unstructured::dotted(path), format!("{v} does not fit int32")))).transpose()
    };
    let (replicas, pod_spec_path): (i32, &[&str]) = match Native::of(obj) {
        Some(Native::Deployment | Native::StatefulSet) => (int(&["spec", "replicas"])?.unwrap_or(0), &["spec", "template", "spec"]),
        Some(Native::Job) => {
            // Parallelism, capped by the completions still to run (a Job never runs more pods
            // at once than it has completions).
            let parallelism = int(&["spec", "parallelism"])?.unwrap_or(0);
            let completions = int(&["spec", "completions"])?.unwrap_or(parallelism);
            (parallelism.min(completions), &["spec", "template", "spec"])
        }
        Some(Native::Pod) => (1, &["spec"]),
        _ => return Ok(None),
    };
    let pod_spec = unstructured::nested(obj, pod_spec_path).map_err(|e| err(&unstructured::dotted(pod_spec_path), e))?.cloned().unwrap_or(Value::Null);
    let requirements = replica_requirements(&pod_spec, &unstructured::dotted(pod_spec_path)).map_err(|(field, reason)| err(&field, reason))?.map(|mut r| {
        if features.resource_quota_estimate {
            r.namespace = unstructured::string(obj, &["metadata", "namespace"]).filter(|s| !s.is_empty()).map(String::from);
            r.priority_class_name = pod_spec.get("priorityClassName").and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from);
        }
        r
    });
    Ok(Some(Replicas { replicas, requirements }))
}

/// `GenerateReplicaRequirements`: the node claim and resource request of one replica; `None`
/// when both are empty.
fn replica_requirements(pod_spec: &Value, path: &str) -> Result<Option<ReplicaRequirements>, (String, String)> {
    let node_claim = node_claim(pod_spec, path)?;
    // Resource errors read `<field>: <reason>`.
    let resource_request = pod_request(pod_spec, path).map_err(|e| match e.split_once(": ") {
        Some((field, reason)) => (field.to_string(), reason.to_string()),
        None => (path.to_string(), e),
    })?;
    if node_claim.is_none() && resource_request.is_none() {
        return Ok(None);
    }
    Ok(Some(ReplicaRequirements { node_claim, resource_request, ..Default::default() }))
}

/// `GenerateNodeClaimByPodSpec`: node selector, required node affinity and tolerations; `None`
/// when the pod has none of them. An empty `nodeSelector: {}` still makes a (empty) claim, as
/// in Karmada, where only a nil map counts as absent.
fn node_claim(pod_spec: &Value, path: &str) -> Result<Option<NodeClaim>, (String, String)> {
    fn decode<T: DeserializeOwned>(v: Option<&Value>, field: String) -> Result<Option<T>, (String, String)> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| (field, e.to_string())),
        }
    }
    let selector: Option<std::collections::BTreeMap<String, String>> = decode(pod_spec.get("nodeSelector"), format!("{path}.nodeSelector"))?;
    let affinity = unstructured::get(pod_spec, &["affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"]);
    let hard_node_affinity: Option<NodeSelector> = decode(affinity, format!("{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"))?;
    let tolerations: Option<Vec<Toleration>> = decode(pod_spec.get("tolerations"), format!("{path}.tolerations"))?;
    let tolerations = tolerations.filter(|t| !t.is_empty());
    if selector.is_none() && hard_node_affinity.is_none() && tolerations.is_none() {
        return Ok(None);
    }
    Ok(Some(NodeClaim {
        hard_node_affinity,
        // Go leaves an empty map out of the JSON.
        node_selector: selector.filter(|s| !s.is_empty()),
        tolerations,
    }))
}

/// ReviseReplica: `obj` with its replicas set to `replicas` (Deployment and StatefulSet
/// `spec.replicas`, Job `spec.parallelism`); `Ok(None)` for kinds without a hook. As in
/// Karmada, the field is only changed when it is present.
///
/// The binding controller calls this for every target cluster whenever the binding has
/// replicas (Duplicated placements included: the scheduling result is authoritative).
pub fn revise_replicas(obj: &Value, replicas: i64) -> Result<Option<Value>, InterpretError> {
    let field = match Native::of(obj) {
        Some(Native::Deployment | Native::StatefulSet) => "replicas",
        Some(Native::Job) => "parallelism",
        _ => return Ok(None),
    };
    apply_replica(obj, field, replicas, Operation::ReviseReplica).map(Some)
}

/// The `spec.completions` of a Job template, which the binding controller divides over the
/// target clusters when the placement is Divided (`None` for a work-queue Job without
/// completions, which is then left alone).
///
/// The division is the scheduler's weighted split (`SpreadReplicasByTargetClusters`, Webster
/// with the template UID tie-break in v1.16) with each cluster's assigned replicas as its
/// weight; feed each share to [`revise_job_completions`].
pub fn job_completions(obj: &Value) -> Result<Option<i64>, InterpretError> {
    if Native::of(obj) != Some(Native::Job) {
        return Ok(None);
    }
    unstructured::nested_i64(obj, &["spec", "completions"]).map_err(|e| InterpretError::new(Operation::ReviseReplica, obj, "spec.completions", e))
}

/// The Job `obj` with `spec.completions` set to `completions` (only when present, as in
/// Karmada); `Ok(None)` when `obj` is not a `batch/v1` Job.
pub fn revise_job_completions(obj: &Value, completions: i64) -> Result<Option<Value>, InterpretError> {
    if Native::of(obj) != Some(Native::Job) {
        return Ok(None);
    }
    apply_replica(obj, "completions", completions, Operation::ReviseReplica).map(Some)
}

/// `helper.ApplyReplica`: sets `spec.<field>` when it already holds an integer.
fn apply_replica(obj: &Value, field: &str, value: i64, operation: Operation) -> Result<Value, InterpretError> {
    let path = ["spec", field];
    let present = unstructured::nested_i64(obj, &path).map_err(|e| InterpretError::new(operation, obj, unstructured::dotted(&path), e))?;
    let mut revised = obj.clone();
    if present.is_some() {
        unstructured::set(&mut revised, &path, Value::from(value)).map_err(|e| InterpretError::new(operation, obj, unstructured::dotted(&path), e))?;
    }
    Ok(revised)
}
