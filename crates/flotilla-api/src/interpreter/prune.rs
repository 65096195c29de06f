//! Prune: what never goes into a Work manifest (Karmada's `prune.RemoveIrrelevantFields` plus
//! the `RemoveJobTTLSeconds` hook the Work webhook adds): fields the control plane's API server
//! set on the template, its status, and per kind the fields a member cluster allocates or
//! generates itself.

use serde_json::Value;

use super::{InterpretError, Operation, unstructured};

/// Metadata the API server sets, removed from every manifest.
const SERVER_SET_METADATA: [&str; 10] = [
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
    "ownerReferences",
    "finalizers",
];

/// Deployment annotations the member's deployment controller writes.
const DEPLOYMENT_REVISION_ANNOTATIONS: [&str; 2] = ["deployment.kubernetes.io/revision", "deployment.kubernetes.io/revision-history"];
/// Selector labels the Job controller generates (legacy and `batch.kubernetes.io/` forms).
const JOB_GENERATED_SELECTOR_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];
const JOB_GENERATED_TEMPLATE_LABELS: [&str; 4] = ["controller-uid", "job-name", "batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name"];
/// Annotation the scheduler sets on a PVC waiting for first consumer.
const PVC_SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// Annotation the token controller sets on a service-account token Secret.
const SERVICE_ACCOUNT_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// The manifest a Work carries for `obj`: `obj` without server-set metadata and status, and per
/// kind (by `kind` alone, as Karmada matches here):
///
/// - Service: `spec.clusterIP` and `spec.clusterIPs`, unless `clusterIP` is `None` (headless);
/// - Job: `spec.ttlSecondsAfterFinished`, and unless `spec.manualSelector` is true the
///   generated `controller-uid` selector label and `controller-uid` / `job-name` template
///   labels (with their `batch.kubernetes.io/` forms);
/// - ServiceAccount: the `<name>-token-*` entries of `secrets` (with Karmada's quirk of not
///   looking at the entry right after one it removed);
/// - Secret of type `kubernetes.io/service-account-token`: `data` and the
///   `kubernetes.io/service-account.uid` annotation;
/// - PersistentVolumeClaim: the `volume.kubernetes.io/selected-node` annotation;
/// - Deployment: the `deployment.kubernetes.io/revision` and `revision-history` annotations.
pub fn prune_for_work(obj: &Value) -> Result<Value, InterpretError> {
    let err = |field: &str, reason: String| InterpretError::new(Operation::Prune, obj, field, reason);
    let mut out = obj.clone();
    for field in SERVER_SET_METADATA {
        unstructured::remove(&mut out, &["metadata", field]);
    }
    unstructured::remove(&mut out, &["status"]);

    match unstructured::string(obj, &["kind"]).unwrap_or("") {
        "Service" => {
            if let Ok(Some(ip)) = unstructured::nested_str(obj, &["spec", "clusterIP"])
                && ip != "None"
            {
                unstructured::remove(&mut out, &["spec", "clusterIP"]);
                unstructured::remove(&mut out, &["spec", "clusterIPs"]);
            }
        }
        "Job" => {
            let manual = match unstructured::nested(obj, &["spec", "manualSelector"]) {
                Ok(None | Some(Value::Null)) => false,
                Ok(Some(Value::Bool(b))) => *b,
                Ok(Some(other)) => return Err(err("spec.manualSelector", format!("expected a bool, got {other}"))),
                Err(e) => return Err(err("spec.manualSelector", e)),
            };
            if !manual {
                remove_generated_labels(&mut out, &["spec", "selector", "matchLabels"], &JOB_GENERATED_SELECTOR_LABELS)
                    .map_err(|e| err("spec.selector.matchLabels", e))?;
                remove_generated_labels(&mut out, &["spec", "template", "metadata", "labels"], &JOB_GENERATED_TEMPLATE_LABELS)
                    .map_err(|e| err("spec.template.metadata.labels", e))?;
            }
            unstructured::remove(&mut out, &["spec", "ttlSecondsAfterFinished"]);
        }
        "ServiceAccount" => prune_token_secrets(&mut out).map_err(|e| err("secrets", e))?,
        "Secret" if unstructured::string(obj, &["type"]) == Some(SERVICE_ACCOUNT_TOKEN_TYPE) => {
            unstructured::remove(&mut out, &["data"]);
            unstructured::remove(&mut out, &["metadata", "annotations", SERVICE_ACCOUNT_UID_ANNOTATION]);
        }
        "PersistentVolumeClaim" => {
            unstructured::remove(&mut out, &["metadata", "annotations", PVC_SELECTED_NODE_ANNOTATION]);
        }
        "Deployment" => {
            for key in DEPLOYMENT_REVISION_ANNOTATIONS {
                unstructured::remove(&mut out, &["metadata", "annotations", key]);
            }
        }
        _ => {}
    }
    Ok(out)
}

/// Removes `keys` (when set to a non-empty value) from the string map at `path`, leaving the
/// map in place even when it empties.
fn remove_generated_labels(obj: &mut Value, path: &[&str], keys: &[&str]) -> Result<(), String> {
    let Some(map) = unstructured::nested_string_map(obj, path)? else {
        return Ok(());
    };
    let mut map = map.clone();
    for key in keys {
        if map.get(*key).and_then(Value::as_str).is_some_and(|v| !v.is_empty()) {
            map.remove(*key);
        }
    }
    unstructured::set(obj, path, Value::Object(map))
}

/// Drops the `<name>-token-` secrets of a ServiceAccount the way Karmada's loop does: removing
/// an entry shifts the next one into its index, which the loop then skips.
fn prune_token_secrets(sa: &mut Value) -> Result<(), String> {
    let Some(secrets) = unstructured::nested_array(sa, &["secrets"])? else {
        return Ok(());
    };
    if secrets.is_empty() {
        return Ok(());
    }
    let prefix = format!("{}-token-", unstructured::string(sa, &["metadata", "name"]).unwrap_or(""));
    let mut secrets = secrets.clone();
    let mut i = 0;
    while i < secrets.len() {
        let name = secrets[i].get("name").and_then(Value::as_str).ok_or_else(|| format!("secrets[{i}].name: expected a string"))?;
        if name.starts_with(&prefix) {
            secrets.remove(i);
        }
        i += 1;
    }
    unstructured::set(sa, &["secrets"], Value::Array(secrets))
}
