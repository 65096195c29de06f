//! `batch/v1`: Jobs and CronJobs.

use serde_json::{Value, json};

use super::FieldError;
use super::pod::{default_pod_template_at, template_labels};
use super::zero_values::{Object, always_written, default_string, default_value, is_unset, object, object_or_insert, objects_mut, omit_empty_metadata, str_of};

/// The label keys a generated Job selector uses, legacy spelling first.
const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const CONTROLLER_UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];

pub(crate) fn default_job(job: &mut Object) -> Result<(), FieldError> {
    if let Some(labels) = template_labels(job)
        && let Some(meta) = object_or_insert(job, "metadata")
        && meta.get("labels").and_then(Value::as_object).is_none_or(Object::is_empty)
    {
        meta.insert("labels".into(), Value::Object(labels));
        omit_empty_metadata(meta);
    }
    let Some(spec) = object_or_insert(job, "spec") else {
        return Ok(());
    };
    default_job_spec(spec, "spec")?;
    default_value(spec, "manualSelector", false);
    always_written(job, "status", json!({}));
    Ok(())
}

/// What a CronJob's job template shares with a Job: only the pod template and the failure
/// policy are defaulted there, none of a Job's own fields.
fn default_job_template_spec(spec: &mut Object, path: &str) -> Result<(), FieldError> {
    default_pod_failure_policy(spec);
    default_pod_template_at(spec, "template", path)
}

fn default_job_spec(spec: &mut Object, path: &str) -> Result<(), FieldError> {
    if is_unset(spec, "completions") && is_unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    default_value(spec, "parallelism", 1);
    let per_index = !is_unset(spec, "backoffLimitPerIndex");
    default_value(spec, "backoffLimit", if per_index { i64::from(i32::MAX) } else { 6 });
    default_value(spec, "completionMode", "NonIndexed");
    default_value(spec, "suspend", false);
    let replacement = if is_unset(spec, "podFailurePolicy") { "TerminatingOrFailed" } else { "Failed" };
    default_value(spec, "podReplacementPolicy", replacement);
    default_job_template_spec(spec, path)
}

fn default_pod_failure_policy(spec: &mut Object) {
    if let Some(policy) = object(spec, "podFailurePolicy") {
        for (_, rule) in objects_mut(policy, "rules") {
            for (_, pattern) in objects_mut(rule, "onPodConditions") {
                default_string(pattern, "status", "True");
            }
        }
    }
}

/// Creating a Job: unless the selector is manual, the pods are selected by the Job's uid and
/// labelled with its name and uid. A Job whose request carried no labels ends up with its pod
/// template's labels, generated ones included (`labels_were_empty`).
pub(crate) fn prepare_job_for_create(job: &mut Object, labels_were_empty: bool) {
    job.insert("status".into(), json!({}));
    let meta = job.get("metadata").and_then(Value::as_object);
    let name = meta.map(|m| str_of(m, "name").to_owned()).unwrap_or_default();
    let uid = meta.map(|m| str_of(m, "uid").to_owned()).unwrap_or_default();
    let Some(spec) = object(job, "spec") else {
        return;
    };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let Some(labels) = object_or_insert(spec, "template").and_then(|t| object_or_insert(t, "metadata")).and_then(|m| object_or_insert(m, "labels")) else {
        return;
    };
    for key in JOB_NAME_LABELS {
        labels.entry(key).or_insert_with(|| Value::from(name.clone()));
    }
    for key in CONTROLLER_UID_LABELS {
        labels.entry(key).or_insert_with(|| Value::from(uid.clone()));
    }
    let labels = labels.clone();
    if let Some(match_labels) = object_or_insert(spec, "selector").and_then(|s| object_or_insert(s, "matchLabels")) {
        match_labels.entry(CONTROLLER_UID_LABELS[1]).or_insert_with(|| Value::from(uid.clone()));
    }
    if labels_were_empty && let Some(meta) = object_or_insert(job, "metadata") {
        meta.insert("labels".into(), Value::Object(labels));
    }
}

pub(crate) fn default_cron_job(cron_job: &mut Object) -> Result<(), FieldError> {
    let Some(spec) = object_or_insert(cron_job, "spec") else {
        return Ok(());
    };
    default_string(spec, "concurrencyPolicy", "Allow");
    default_value(spec, "suspend", false);
    default_value(spec, "successfulJobsHistoryLimit", 3);
    default_value(spec, "failedJobsHistoryLimit", 1);
    if let Some(template) = object_or_insert(spec, "jobTemplate") {
        if let Some(meta) = object_or_insert(template, "metadata") {
            omit_empty_metadata(meta);
        }
        if let Some(job_spec) = object_or_insert(template, "spec") {
            default_job_template_spec(job_spec, "spec.jobTemplate.spec")?;
        }
    }
    always_written(cron_job, "status", json!({}));
    Ok(())
}
