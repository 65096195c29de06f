//! `apps/v1`: Deployments, StatefulSets, DaemonSets and ReplicaSets.

use serde_json::{Value, json};

use super::FieldError;
use super::core::default_claim_template;
use super::pod::default_pod_template_at;
use super::zero_values::{
    Object, always_written, always_written_counters, default_string, default_value, object, object_or_insert, objects_mut, omit_empty, str_of,
};

pub(crate) fn default_deployment(deployment: &mut Object) -> Result<(), FieldError> {
    let Some(spec) = object_or_insert(deployment, "spec") else {
        return Ok(());
    };
    default_value(spec, "replicas", 1);
    if let Some(strategy) = object_or_insert(spec, "strategy") {
        default_string(strategy, "type", "RollingUpdate");
        if str_of(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = object_or_insert(strategy, "rollingUpdate")
        {
            default_value(rolling, "maxUnavailable", "25%");
            default_value(rolling, "maxSurge", "25%");
        }
    }
    default_value(spec, "revisionHistoryLimit", 10);
    default_value(spec, "progressDeadlineSeconds", 600);
    default_pod_template_at(spec, "template", "spec")?;
    omit_empty(spec, &["minReadySeconds", "paused"]);
    always_written(deployment, "status", json!({}));
    Ok(())
}

pub(crate) fn default_stateful_set(set: &mut Object) -> Result<(), FieldError> {
    let Some(spec) = object_or_insert(set, "spec") else {
        return Ok(());
    };
    default_string(spec, "podManagementPolicy", "OrderedReady");
    if let Some(strategy) = object_or_insert(spec, "updateStrategy") {
        // Only a strategy with no type gets the rolling-update parameters created for it.
        if str_of(strategy, "type").is_empty() {
            strategy.insert("type".into(), Value::from("RollingUpdate"));
            default_value(strategy, "rollingUpdate", json!({}));
        }
        if str_of(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = object(strategy, "rollingUpdate")
        {
            default_value(rolling, "partition", 0);
            default_value(rolling, "maxUnavailable", 1);
        }
    }
    if let Some(retention) = object_or_insert(spec, "persistentVolumeClaimRetentionPolicy") {
        default_string(retention, "whenDeleted", "Retain");
        default_string(retention, "whenScaled", "Retain");
    }
    default_value(spec, "replicas", 1);
    default_value(spec, "revisionHistoryLimit", 10);
    default_pod_template_at(spec, "template", "spec")?;
    for (i, claim) in objects_mut(spec, "volumeClaimTemplates") {
        default_claim_template(claim, &format!("spec.volumeClaimTemplates[{i}]"))?;
    }
    omit_empty(spec, &["volumeClaimTemplates", "minReadySeconds"]);
    // serviceName is optional since 1.36 but still written when empty.
    always_written(spec, "serviceName", Value::from(""));
    if let Some(status) = object_or_insert(set, "status") {
        always_written_counters(status, &["replicas", "availableReplicas"]);
    }
    Ok(())
}

pub(crate) fn default_daemon_set(set: &mut Object) -> Result<(), FieldError> {
    let Some(spec) = object_or_insert(set, "spec") else {
        return Ok(());
    };
    if let Some(strategy) = object_or_insert(spec, "updateStrategy") {
        default_string(strategy, "type", "RollingUpdate");
        if str_of(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = object_or_insert(strategy, "rollingUpdate")
        {
            default_value(rolling, "maxUnavailable", 1);
            default_value(rolling, "maxSurge", 0);
        }
    }
    default_value(spec, "revisionHistoryLimit", 10);
    default_pod_template_at(spec, "template", "spec")?;
    omit_empty(spec, &["minReadySeconds"]);
    if let Some(status) = object_or_insert(set, "status") {
        always_written_counters(status, &["currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady"]);
    }
    Ok(())
}

pub(crate) fn default_replica_set(set: &mut Object) -> Result<(), FieldError> {
    let Some(spec) = object_or_insert(set, "spec") else {
        return Ok(());
    };
    default_value(spec, "replicas", 1);
    default_pod_template_at(spec, "template", "spec")?;
    omit_empty(spec, &["minReadySeconds"]);
    if let Some(status) = object_or_insert(set, "status") {
        always_written_counters(status, &["replicas"]);
    }
    Ok(())
}

/// Creating a DaemonSet starts its template generation (kept in an annotation by `apps/v1`) at 1.
pub(crate) fn prepare_daemon_set_for_create(set: &mut Object) {
    set.insert("status".into(), json!({}));
    const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";
    let Some(annotations) = object_or_insert(set, "metadata").and_then(|m| object_or_insert(m, "annotations")) else {
        return;
    };
    let generation = annotations.get(TEMPLATE_GENERATION).and_then(Value::as_str).and_then(|g| g.parse::<i64>().ok());
    if generation.is_none_or(|g| g < 1) {
        annotations.insert(TEMPLATE_GENERATION.into(), Value::from("1"));
    }
}
