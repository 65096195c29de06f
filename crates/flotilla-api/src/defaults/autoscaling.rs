//! `autoscaling/v2` HorizontalPodAutoscalers and `policy/v1` PodDisruptionBudgets: the objects
//! that bound how many replicas run.

use serde_json::{Value, json};

use super::FieldError;
use super::quantity::canonicalize_field;
use super::zero_values::{Object, always_written, always_written_counters, default_value, object, object_or_insert, objects_mut};

pub(crate) fn default_horizontal_pod_autoscaler(hpa: &mut Object) -> Result<(), FieldError> {
    if let Some(spec) = object_or_insert(hpa, "spec") {
        default_value(spec, "minReplicas", 1);
        let no_metrics = spec.get("metrics").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if no_metrics {
            spec.insert(
                "metrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
            );
        }
        for (i, metric) in objects_mut(spec, "metrics") {
            for source in ["object", "pods", "resource", "containerResource", "external"] {
                if let Some(target) = object(metric, source).and_then(|s| object(s, "target")) {
                    let path = format!("spec.metrics[{i}].{source}.target");
                    canonicalize_field(target, "value", &path)?;
                    canonicalize_field(target, "averageValue", &path)?;
                }
            }
        }
        if let Some(behavior) = object(spec, "behavior") {
            // A behavior fills in every rule it leaves unset; scale-down keeps no window of its
            // own (the controller's flag decides it).
            let scale_up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15}]});
            let scale_down = json!({"selectPolicy": "Max", "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15}]});
            for (direction, rules) in [("scaleUp", scale_up), ("scaleDown", scale_down)] {
                if let (Some(target), Value::Object(rules)) = (object_or_insert(behavior, direction), rules) {
                    for (key, value) in rules {
                        default_value(target, &key, value);
                    }
                }
            }
        }
    }
    if let Some(status) = object_or_insert(hpa, "status") {
        always_written(status, "currentMetrics", Value::Null);
        always_written_counters(status, &["desiredReplicas"]);
    }
    Ok(())
}

pub(crate) fn default_pod_disruption_budget(budget: &mut Object) {
    if let Some(status) = object_or_insert(budget, "status") {
        always_written_counters(status, &["disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"]);
    }
}
