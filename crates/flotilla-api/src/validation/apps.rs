//! `apps/v1`: Deployments, ReplicaSets, StatefulSets and DaemonSets — their specs, what an
//! update may not change, and their status writes.

use serde_json::{Value, json};

use super::field::FieldError;
use super::object::{Obj, immutable, label_selector, label_selector_json, nonnegative, validate_annotations, validate_labels};
use super::pod;
use crate::selector::LabelSelector;

/// What a workload's selector turned out to be.
enum Selected {
    /// No selector: selects nothing.
    Missing,
    /// Not a valid selector (the causes are recorded).
    Invalid,
    Valid(LabelSelector),
}

/// A workload's selector: required, valid, not empty. `invalid_detail` is what the second
/// cause of an invalid selector says (kube-apiserver converts it after validating it).
fn workload_selector(spec: Obj<'_>, kind: &str, invalid_detail: &str, errs: &mut Vec<FieldError>) -> Selected {
    let Some(sel) = spec.get("selector") else {
        errs.push(FieldError::required("spec.selector", ""));
        return Selected::Missing;
    };
    let parsed = label_selector(sel, "spec.selector", errs);
    if is_empty_selector(sel) {
        errs.push(FieldError::invalid_printed("spec.selector", &label_selector_json(sel), &format!("empty selector is invalid for {kind}")));
    }
    match parsed {
        Some(s) => Selected::Valid(s),
        None => {
            errs.push(FieldError::invalid_printed("spec.selector", &label_selector_json(sel), invalid_detail));
            Selected::Invalid
        }
    }
}

fn is_empty_selector(sel: &Value) -> bool {
    Obj(sel).array("matchExpressions").is_empty() && Obj(sel).get("matchLabels").and_then(Value::as_object).is_none_or(|m| m.is_empty())
}

/// The template's labels must be selected by the workload's selector (a missing selector
/// selects nothing; an empty one everything).
fn template_matches(selected: &Selected, template: Obj<'_>, errs: &mut Vec<FieldError>) {
    let labels = template.at("metadata").get("labels");
    let matches = match selected {
        Selected::Missing => false,
        Selected::Invalid => true,
        Selected::Valid(s) => s.is_empty() || s.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str)),
    };
    if !matches {
        errs.push(FieldError::invalid("spec.template.metadata.labels", labels.unwrap_or(&Value::Null), "`selector` does not match template `labels`"));
    }
}

/// A pod template of a ReplicaSet or Deployment: selected by the selector, a valid pod
/// template, restarted always, no deadline. Not checked at all behind an invalid selector.
fn replica_set_template(spec: Obj<'_>, selected: &Selected, errs: &mut Vec<FieldError>) {
    if matches!(selected, Selected::Invalid) {
        return;
    }
    let template = spec.obj("template");
    template_matches(selected, template, errs);
    pod::validate_template(template.0, "spec.template", errs);
    let restart = template.at("spec").str("restartPolicy");
    if restart != "Always" {
        errs.push(FieldError::not_supported("spec.template.spec.restartPolicy", &json!(restart), &["Always"]));
    }
    if let Some(d) = template.at("spec").get("activeDeadlineSeconds") {
        errs.push(FieldError::invalid("spec.template.spec.activeDeadlineSeconds", d, "activeDeadlineSeconds in ReplicaSet is not Supported"));
    }
}

pub(crate) fn deployment(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = Obj(obj).obj("spec");
    nonnegative(spec.int("replicas"), "spec.replicas", errs);
    let selected = workload_selector(spec, "deployment", "invalid label selector", errs);
    replica_set_template(spec, &selected, errs);
    deployment_strategy(spec.obj("strategy"), errs);
    nonnegative(spec.int("minReadySeconds"), "spec.minReadySeconds", errs);
    if spec.get("revisionHistoryLimit").is_some() {
        nonnegative(spec.int("revisionHistoryLimit"), "spec.revisionHistoryLimit", errs);
    }
    if let Some(p) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        nonnegative(p, "spec.progressDeadlineSeconds", errs);
        if p <= spec.int("minReadySeconds") {
            errs.push(FieldError::invalid("spec.progressDeadlineSeconds", &json!(p), "must be greater than minReadySeconds"));
        }
    }
}

/// An int-or-percent as Go prints an `IntOrString`: bare.
fn int_or_percent(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The value of an int-or-percent (`25%` → 25), when it is one.
fn int_or_percent_value(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> i64 {
    match v {
        Value::String(s) => {
            match s.strip_suffix('%').and_then(|n| n.parse::<i64>().ok()) {
                Some(n) => {
                    nonnegative(n, path, errs);
                    n
                }
                None => {
                    errs.push(FieldError::invalid(path, v, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"));
                    0
                }
            }
        }
        other => {
            let n = other.as_i64().unwrap_or(0);
            nonnegative(n, path, errs);
            n
        }
    }
}

fn deployment_strategy(strategy: Obj<'_>, errs: &mut Vec<FieldError>) {
    match strategy.str("type") {
        "Recreate" if strategy.get("rollingUpdate").is_some() => {
            errs.push(FieldError::forbidden("spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'"));
        }
        "RollingUpdate" => {
            let ru = strategy.obj("rollingUpdate");
            let zero = json!(0);
            let unavailable = ru.get("maxUnavailable").unwrap_or(&zero);
            let surge = ru.get("maxSurge").unwrap_or(&zero);
            let u = int_or_percent_value(unavailable, "spec.strategy.rollingUpdate.maxUnavailable", errs);
            let s = int_or_percent_value(surge, "spec.strategy.rollingUpdate.maxSurge", errs);
            if u == 0 && s == 0 {
                errs.push(FieldError::invalid_printed(
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    &int_or_percent(unavailable),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
            if unavailable.is_string() && u > 100 {
                errs.push(FieldError::invalid_printed(
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    &int_or_percent(unavailable),
                    "must not be greater than 100%",
                ));
            }
        }
        _ => {}
    }
}

pub(crate) fn replica_set(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = Obj(obj).obj("spec");
    nonnegative(spec.int("replicas"), "spec.replicas", errs);
    nonnegative(spec.int("minReadySeconds"), "spec.minReadySeconds", errs);
    // kube-apiserver's ReplicaSet message names deployments too.
    let selected = workload_selector(spec, "deployment", "invalid label selector", errs);
    replica_set_template(spec, &selected, errs);
}

pub(crate) fn stateful_set(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = Obj(obj).obj("spec");
    match spec.str("podManagementPolicy") {
        "" => errs.push(FieldError::required("spec.podManagementPolicy", "")),
        "OrderedReady" | "Parallel" => {}
        other => errs.push(FieldError::invalid("spec.podManagementPolicy", &json!(other), "must be 'OrderedReady' or 'Parallel'")),
    }
    match spec.at("updateStrategy").str("type") {
        "" => errs.push(FieldError::required("spec.updateStrategy", "")),
        "OnDelete" => {
            if let Some(ru) = spec.at("updateStrategy").get("rollingUpdate") {
                errs.push(FieldError::invalid("spec.updateStrategy.rollingUpdate", ru, "only allowed for updateStrategy 'RollingUpdate'"));
            }
        }
        "RollingUpdate" => {
            let partition = spec.at("updateStrategy.rollingUpdate").int("partition");
            nonnegative(partition, "spec.updateStrategy.rollingUpdate.partition", errs);
        }
        _ => errs.push(FieldError::invalid("spec.updateStrategy", spec.get("updateStrategy").unwrap_or(&Value::Null), "must be 'RollingUpdate' or 'OnDelete'")),
    }
    nonnegative(spec.int("replicas"), "spec.replicas", errs);
    nonnegative(spec.int("minReadySeconds"), "spec.minReadySeconds", errs);
    let selected = workload_selector(spec, "statefulset", "", errs);
    let template = spec.obj("template");
    if !matches!(selected, Selected::Invalid) {
        template_matches(&selected, template, errs);
        // kube-apiserver checks a StatefulSet's template metadata but not its pod spec.
        let meta = template.obj("metadata");
        validate_labels(meta.get("labels"), "spec.template.labels", errs);
        validate_annotations(meta.get("annotations"), "spec.template.annotations", errs);
    }
    let restart = template.at("spec").str("restartPolicy");
    if restart != "Always" {
        errs.push(FieldError::not_supported("spec.template.spec.restartPolicy", &json!(restart), &["Always"]));
    }
    if template.at("spec").get("activeDeadlineSeconds").is_some() {
        errs.push(FieldError::forbidden("spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds in StatefulSet is not Supported"));
    }
}

/// A StatefulSet update may change only some of the spec.
pub(crate) fn stateful_set_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    const MUTABLE: &[&str] =
        &["replicas", "ordinals", "template", "updateStrategy", "revisionHistoryLimit", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"];
    let rest = |o: &Value| -> Value {
        let mut spec = o.get("spec").cloned().unwrap_or(json!({}));
        if let Some(m) = spec.as_object_mut() {
            m.retain(|k, v| !MUTABLE.contains(&k.as_str()) && !v.is_null());
        }
        spec
    };
    if rest(new) != rest(old) {
        errs.push(FieldError::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
}

pub(crate) fn daemon_set(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = Obj(obj).obj("spec");
    let selected = match spec.get("selector") {
        None => Selected::Missing,
        Some(sel) => label_selector(sel, "spec.selector", errs).map_or(Selected::Invalid, Selected::Valid),
    };
    let template = spec.obj("template");
    template_matches(&selected, template, errs);
    if let Some(sel) = spec.get("selector").filter(|s| is_empty_selector(s)) {
        errs.push(FieldError::invalid_printed("spec.selector", &label_selector_json(sel), "empty selector is invalid for daemonset"));
    }
    pod::validate_template(template.0, "spec.template", errs);
    let restart = template.at("spec").str("restartPolicy");
    if restart != "Always" {
        errs.push(FieldError::not_supported("spec.template.spec.restartPolicy", &json!(restart), &["Always"]));
    }
    if let Some(d) = template.at("spec").get("activeDeadlineSeconds") {
        errs.push(FieldError::invalid("spec.template.spec.activeDeadlineSeconds", d, "activeDeadlineSeconds in DaemonSet is not Supported"));
    }
    nonnegative(spec.int("minReadySeconds"), "spec.minReadySeconds", errs);
    if spec.get("revisionHistoryLimit").is_some() {
        nonnegative(spec.int("revisionHistoryLimit"), "spec.revisionHistoryLimit", errs);
    }
}

/// Deployments, ReplicaSets and DaemonSets keep their selector for life (apps/v1).
pub(crate) fn selector_immutable(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let (n, o) = (new.pointer("/spec/selector"), old.pointer("/spec/selector"));
    let mut found = Vec::new();
    immutable(n, o, "spec.selector", &mut found);
    if !found.is_empty() {
        errs.push(FieldError::invalid_printed("spec.selector", &n.map_or("null".to_string(), label_selector_json), "field is immutable"));
    }
}

/// Status counters: each non-negative, and none above the total (field, compared with).
fn status_counts(status: Obj<'_>, counters: &[&str], bounded: &[(&str, &str, &str)], errs: &mut Vec<FieldError>) {
    for c in counters {
        if status.get(c).is_some() {
            nonnegative(status.int(c), &format!("status.{c}"), errs);
        }
    }
    for (field, bound, message) in bounded {
        if status.int(field) > status.int(bound) {
            errs.push(FieldError::invalid(format!("status.{field}"), &json!(status.int(field)), message));
        }
    }
}

const ABOVE_REPLICAS: &str = "cannot be greater than status.replicas";

pub(crate) fn deployment_status(obj: &Value, errs: &mut Vec<FieldError>) {
    let counters = [
        "observedGeneration",
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
        "terminatingReplicas",
        "collisionCount",
    ];
    let bounded = [
        ("updatedReplicas", "replicas", ABOVE_REPLICAS),
        ("readyReplicas", "replicas", ABOVE_REPLICAS),
        ("availableReplicas", "replicas", ABOVE_REPLICAS),
        ("availableReplicas", "readyReplicas", "cannot be greater than readyReplicas"),
    ];
    status_counts(Obj(obj).obj("status"), &counters, &bounded, errs);
}

pub(crate) fn replica_set_status(obj: &Value, errs: &mut Vec<FieldError>) {
    let counters = ["replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "terminatingReplicas", "observedGeneration"];
    let bounded = [
        ("fullyLabeledReplicas", "replicas", ABOVE_REPLICAS),
        ("readyReplicas", "replicas", ABOVE_REPLICAS),
        ("availableReplicas", "replicas", ABOVE_REPLICAS),
        ("availableReplicas", "readyReplicas", "cannot be greater than readyReplicas"),
    ];
    status_counts(Obj(obj).obj("status"), &counters, &bounded, errs);
}

pub(crate) fn stateful_set_status(obj: &Value, errs: &mut Vec<FieldError>) {
    let counters = ["replicas", "readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas", "observedGeneration", "collisionCount"];
    let bounded = [
        ("readyReplicas", "replicas", ABOVE_REPLICAS),
        ("currentReplicas", "replicas", ABOVE_REPLICAS),
        ("updatedReplicas", "replicas", ABOVE_REPLICAS),
        ("availableReplicas", "replicas", ABOVE_REPLICAS),
        ("availableReplicas", "readyReplicas", "cannot be greater than status.readyReplicas"),
    ];
    status_counts(Obj(obj).obj("status"), &counters, &bounded, errs);
}

pub(crate) fn daemon_set_status(obj: &Value, errs: &mut Vec<FieldError>) {
    let counters = [
        "currentNumberScheduled",
        "numberMisscheduled",
        "desiredNumberScheduled",
        "numberReady",
        "observedGeneration",
        "updatedNumberScheduled",
        "numberAvailable",
        "numberUnavailable",
        "collisionCount",
    ];
    status_counts(Obj(obj).obj("status"), &counters, &[], errs);
}
