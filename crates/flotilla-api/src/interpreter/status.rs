//! InterpretStatus and InterpretHealth: what the work-status controller records about a member
//! object in `Work.status.manifestStatuses[]` (`status` and `health`).

use serde_json::{Map, Value, json};

use super::{Health, InterpretError, Native, Operation, RESOURCE_TEMPLATE_GENERATION_ANNOTATION, unstructured};

/// Fields of a typed status: `(name, omitted when zero)` (Go's `omitempty`).
type StatusFields = &'static [(&'static str, bool)];

const DEPLOYMENT_REFLECTED: StatusFields = &[
    ("replicas", true),
    ("updatedReplicas", true),
    ("readyReplicas", true),
    ("availableReplicas", true),
    ("unavailableReplicas", true),
    ("observedGeneration", true),
];
const DAEMONSET_REFLECTED: StatusFields = &[
    ("currentNumberScheduled", false),
    ("numberMisscheduled", false),
    ("desiredNumberScheduled", false),
    ("numberReady", false),
    ("observedGeneration", true),
    ("updatedNumberScheduled", true),
    ("numberAvailable", true),
    ("numberUnavailable", true),
];
const STATEFULSET_REFLECTED: StatusFields = &[
    ("observedGeneration", true),
    ("replicas", false),
    ("readyReplicas", true),
    ("currentReplicas", true),
    ("updatedReplicas", true),
    ("availableReplicas", false),
];
const JOB_REFLECTED: StatusFields = &[("active", true), ("succeeded", true), ("failed", true)];
const PDB_REFLECTED: StatusFields = &[("disruptionsAllowed", false), ("currentHealthy", false), ("desiredHealthy", false), ("expectedPods", false)];
const HPA_REFLECTED: StatusFields = &[("currentReplicas", true), ("desiredReplicas", false)];

/// InterpretStatus: the status to record for the member object `observed`, or `None` when
/// there is nothing to record. Per kind (`apiVersion` and `kind`):
///
/// - `apps/v1` Deployment: `replicas`, `updatedReplicas`, `readyReplicas`, `availableReplicas`,
///   `unavailableReplicas`, `observedGeneration`, plus `generation` (the member object's) and
///   `resourceTemplateGeneration` (its `resourcetemplate.karmada.io/generation` annotation,
///   required); `None` when all are zero;
/// - `apps/v1` DaemonSet and StatefulSet: their counters and `observedGeneration`, with the same
///   `generation` / `resourceTemplateGeneration` pair;
/// - `batch/v1` Job: `active`, `succeeded`, `failed`, `conditions`, `startTime`, `completionTime`;
/// - `v1` Service of type LoadBalancer: `loadBalancer` only (other types: `None`);
/// - `policy/v1` PodDisruptionBudget: the healthy/expected counters and `disruptedPods`;
/// - `autoscaling/v2` HorizontalPodAutoscaler: `currentReplicas`, `desiredReplicas`;
/// - anything else (Ingress included): the whole `.status`.
///
/// Numbers are written as Go writes the typed status: zero-valued `omitempty` fields left out.
pub fn reflect_status(observed: &Value) -> Result<Option<Value>, InterpretError> {
    let err = |field: &str, reason: String| InterpretError::new(Operation::InterpretStatus, observed, field, reason);
    let status = match unstructured::nested_object(observed, &["status"]).map_err(|e| err("status", e))? {
        Some(status) => status,
        None => {
            return Ok(None);
        }
    };
    let native = Native::of(observed);
    if native == Some(Native::Service) {
        // Only a LoadBalancer has a status worth reflecting.
        if unstructured::string(observed, &["spec", "type"]) != Some("LoadBalancer") {
            return Ok(None);
        }
        let lb = status.get("loadBalancer").filter(|v| !v.is_null()).cloned().unwrap_or_else(|| json!({}));
        return Ok(Some(json!({ "loadBalancer": lb })));
    }
    let fields = match native {
        Some(Native::Deployment) => DEPLOYMENT_REFLECTED,
        Some(Native::DaemonSet) => DAEMONSET_REFLECTED,
        Some(Native::StatefulSet) => STATEFULSET_REFLECTED,
        Some(Native::Job) => JOB_REFLECTED,
        Some(Native::PodDisruptionBudget) => PDB_REFLECTED,
        Some(Native::HorizontalPodAutoscaler) => HPA_REFLECTED,
        _ => return Ok(Some(Value::Object(status.clone()))),
    };
    let mut out = Map::new();
    copy_counters(status, &mut out, fields).map_err(|(f, e)| err(&format!("status.{f}"), e))?;
    match native {
        Some(Native::Job) => {
            for field in ["conditions", "startTime", "completionTime"] {
                if let Some(v) = status.get(field).filter(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty())) {
                    out.insert(field.into(), v.clone());
                }
            }
        }
        Some(Native::PodDisruptionBudget) => {
            if let Some(pods) = status.get("disruptedPods").filter(|v| v.as_object().is_some_and(|m| !m.is_empty())) {
                out.insert("disruptedPods".into(), pods.clone());
            }
        }
        Some(Native::Deployment | Native::DaemonSet | Native::StatefulSet) => {
            let annotation = unstructured::string(observed, &["metadata", "annotations", RESOURCE_TEMPLATE_GENERATION_ANNOTATION]);
            let template_generation: i64 = annotation.unwrap_or("").parse().map_err(|_| {
                err(&format!("metadata.annotations[{RESOURCE_TEMPLATE_GENERATION_ANNOTATION}]"), format!("{:?} is not a generation", annotation.unwrap_or("")))
            })?;
            let generation = unstructured::get(observed, &["metadata", "generation"]).and_then(Value::as_i64).unwrap_or(0);
            put_counter(&mut out, "generation", generation, true);
            put_counter(&mut out, "resourceTemplateGeneration", template_generation, true);
            if native == Some(Native::Deployment) && out.is_empty() {
                // All zero: the member has not reported a status yet.
                return Ok(None);
            }
        }
        _ => {}
    }
    Ok(Some(Value::Object(out)))
}

/// Copies integer status fields, decoding them as Go's typed status does (absent is zero,
/// anything but an integer is an error).
fn copy_counters(status: &Map<String, Value>, out: &mut Map<String, Value>, fields: StatusFields) -> Result<(), (String, String)> {
    for (field, omit_zero) in fields {
        put_counter(out, field, counter(status, field).map_err(|e| (field.to_string(), e))?, *omit_zero);
    }
    Ok(())
}

/// An integer field of a status object: absent or `null` is zero.
pub(crate) fn counter(status: &Map<String, Value>, field: &str) -> Result<i64, String> {
    match status.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_i64().ok_or_else(|| format!("expected an integer, got {v}")),
    }
}

/// Writes an integer as Go writes it: `omit_zero` fields are left out when zero.
pub(crate) fn put_counter(out: &mut Map<String, Value>, field: &str, value: i64, omit_zero: bool) {
    if value == 0 && omit_zero {
        out.remove(field);
    } else {
        out.insert(field.into(), Value::from(value));
    }
}

/// InterpretHealth: the `health` of a member object. Kinds without a health hook are Healthy;
/// an object whose fields do not decode is Unknown (as the work-status controller reports an
/// interpreter error). Per kind (`apiVersion` and `kind`):
///
/// - `apps/v1` Deployment and StatefulSet: the controller has observed the current generation,
///   all `spec.replicas` are updated, and all updated replicas are available;
/// - `apps/v1` ReplicaSet: observed the current generation, `availableReplicas ≥ spec.replicas`;
/// - `apps/v1` DaemonSet: observed the current generation, all desired pods updated, all
///   updated available;
/// - `v1` Service: not a LoadBalancer, or a load-balancer ingress with an IP or hostname;
/// - `networking.k8s.io/v1` Ingress: a load-balancer ingress with an IP or hostname;
/// - `v1` PersistentVolumeClaim: phase Bound;
/// - `v1` Pod: phase Succeeded, or Running with condition Ready=True;
/// - `policy/v1` PodDisruptionBudget: `currentHealthy ≥ desiredHealthy`.
pub fn interpret_health(observed: &Value) -> Health {
    match healthy(observed) {
        Ok(true) => Health::Healthy,
        Ok(false) => Health::Unhealthy,
        Err(()) => Health::Unknown,
    }
}

fn healthy(obj: &Value) -> Result<bool, ()> {
    let int = |path: &[&str]| -> Result<Option<i64>, ()> { unstructured::nested_i64(obj, path).map_err(|_| ()) };
    let status = |field: &str| -> Result<i64, ()> { Ok(int(&["status", field])?.unwrap_or(0)) };
    let generation_observed = || -> Result<bool, ()> { Ok(status("observedGeneration")? == int(&["metadata", "generation"])?.unwrap_or(0)) };
    let lb_ingress_assigned = || -> Result<bool, ()> {
        let ingress = unstructured::nested_array(obj, &["status", "loadBalancer", "ingress"]).map_err(|_| ())?;
        Ok(ingress.into_iter().flatten().any(|i| ["ip", "hostname"].iter().any(|f| i.get(*f).and_then(Value::as_str).is_some_and(|s| !s.is_empty()))))
    };
    Ok(match Native::of(obj) {
        Some(Native::Deployment | Native::StatefulSet) => {
            let updated = status("updatedReplicas")?;
            generation_observed()? && int(&["spec", "replicas"])?.is_none_or(|want| updated >= want) && status("availableReplicas")? >= updated
        }
        Some(Native::ReplicaSet) => {
            generation_observed()? && int(&["spec", "replicas"])?.is_none_or(|want| status("availableReplicas").is_ok_and(|a| a >= want))
        }
        Some(Native::DaemonSet) => {
            let updated = status("updatedNumberScheduled")?;
            generation_observed()? && updated >= status("desiredNumberScheduled")? && status("numberAvailable")? >= updated
        }
        Some(Native::Service) => unstructured::nested_str(obj, &["spec", "type"]).map_err(|_| ())? != Some("LoadBalancer") || lb_ingress_assigned()?,
        Some(Native::Ingress) => lb_ingress_assigned()?,
        Some(Native::PersistentVolumeClaim) => unstructured::nested_str(obj, &["status", "phase"]).map_err(|_| ())? == Some("Bound"),
        Some(Native::Pod) => {
            let phase = unstructured::nested_str(obj, &["status", "phase"]).map_err(|_| ())?;
            let conditions = unstructured::nested_array(obj, &["status", "conditions"]).map_err(|_| ())?;
            let ready = conditions.into_iter().flatten().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"));
            phase == Some("Succeeded") || (phase == Some("Running") && ready.and_then(|c| c.get("status")).and_then(Value::as_str) == Some("True"))
        }
        Some(Native::PodDisruptionBudget) => status("currentHealthy")? >= status("desiredHealthy")?,
        _ => true,
    })
}
