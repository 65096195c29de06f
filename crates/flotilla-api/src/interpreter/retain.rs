//! Retain: the object the execution controller writes over a member object it manages, i.e.
//! the desired manifest with what the member owns kept from the observed object (Karmada's
//! `objectWatcher.retainClusterFields` followed by the native Retain hook of the kind).

use serde_json::Value;

use super::{InterpretError, Native, Operation, RETAIN_REPLICAS_LABEL, RETAIN_REPLICAS_VALUE, unstructured};

/// Annotation on a member object listing the annotation keys that came from the template.
pub const MANAGED_ANNOTATIONS_ANNOTATION: &str = "resourcetemplate.karmada.io/managed-annotations";
/// Annotation on a member object listing the label keys that came from the template.
pub const MANAGED_LABELS_ANNOTATION: &str = "resourcetemplate.karmada.io/managed-labels";

const SERVICE_ACCOUNT_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// The object to update the member with: `desired` (the Work manifest) with, from `observed`
/// (the live member object):
///
/// - `metadata.resourceVersion` (the update's precondition), `finalizers` and
///   `ownerReferences` (set by member controllers; absent in `observed` means removed);
/// - every label and annotation of `observed` that `desired` does not set, except keys the
///   observed object's `managed-labels` / `managed-annotations` lists record as having come
///   from the template (the template has since dropped them, so they go);
/// - then per kind (`apiVersion` and `kind`):
///   - `apps/v1` Deployment labelled `resourcetemplate.karmada.io/retain-replicas: "true"`:
///     `spec.replicas` (an error when `observed` has none);
///   - `v1` Pod: `observed` as the base (a running pod barely changes), with the desired labels,
///     annotations, container and init container images (matched by name), a shorter
///     `activeDeadlineSeconds`, and desired tolerations the pod lacks appended;
///   - `v1` Service: `spec.clusterIP` (when non-empty) and `spec.healthCheckNodePort` (when > 0);
///   - `v1` ServiceAccount: `secrets` merged by name, desired first;
///   - `v1` PersistentVolumeClaim: `spec.volumeName` (when non-empty);
///   - `v1` PersistentVolume: `spec.claimRef`;
///   - `batch/v1` Job: `spec.selector.matchLabels` and `spec.template.metadata.labels`;
///   - `v1` Secret of type `kubernetes.io/service-account-token`: `data` and the
///     `kubernetes.io/service-account.uid` annotation.
pub fn retain(desired: &Value, observed: &Value) -> Result<Value, InterpretError> {
    let err = |field: &str, reason: String| InterpretError::new(Operation::Retain, desired, field, reason);
    let mut out = desired.clone();
    let metadata = |obj: &Value, field: &str| unstructured::get(obj, &["metadata", field]).cloned();

    // resourceVersion: an empty one is no field at all.
    match unstructured::string(observed, &["metadata", "resourceVersion"]).filter(|rv| !rv.is_empty()) {
        Some(rv) => set(&mut out, &["metadata", "resourceVersion"], Value::from(rv)).map_err(|e| err("metadata", e))?,
        None => unstructured::remove(&mut out, &["metadata", "resourceVersion"]),
    }
    for field in ["finalizers", "ownerReferences"] {
        match metadata(observed, field).filter(|v| !v.is_null()) {
            Some(v) => set(&mut out, &["metadata", field], v).map_err(|e| err("metadata", e))?,
            None => unstructured::remove(&mut out, &["metadata", field]),
        }
    }
    retain_keys(&mut out, observed, "annotations", MANAGED_ANNOTATIONS_ANNOTATION).map_err(|e| err("metadata.annotations", e))?;
    retain_keys(&mut out, observed, "labels", MANAGED_LABELS_ANNOTATION).map_err(|e| err("metadata.labels", e))?;

    match Native::of(desired) {
        Some(Native::Deployment) => retain_replicas(&mut out, observed).map_err(|(f, e)| err(f, e))?,
        Some(Native::Pod) => out = retain_pod(&out, observed).map_err(|(f, e)| err(&f, e))?,
        Some(Native::Service) => retain_service(&mut out, observed).map_err(|(f, e)| err(f, e))?,
        Some(Native::ServiceAccount) => retain_service_account(&mut out, observed).map_err(|e| err("secrets", e))?,
        Some(Native::PersistentVolumeClaim) => {
            let name = unstructured::nested_str(observed, &["spec", "volumeName"]).map_err(|e| err("spec.volumeName", e))?;
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                set(&mut out, &["spec", "volumeName"], Value::from(name)).map_err(|e| err("spec.volumeName", e))?;
            }
        }
        Some(Native::PersistentVolume) => {
            let claim = unstructured::nested(observed, &["spec", "claimRef"]).map_err(|e| err("spec.claimRef", e))?;
            if let Some(claim) = claim {
                set(&mut out, &["spec", "claimRef"], claim.clone()).map_err(|e| err("spec.claimRef", e))?;
            }
        }
        Some(Native::Job) => {
            for path in [&["spec", "selector", "matchLabels"][..], &["spec", "template", "metadata", "labels"]] {
                let field = unstructured::dotted(path);
                let labels = unstructured::nested_string_map(observed, path).map_err(|e| err(&field, e))?;
                if let Some(labels) = labels {
                    set(&mut out, path, Value::Object(labels.clone())).map_err(|e| err(&field, e))?;
                }
            }
        }
        Some(Native::Secret) if unstructured::string(desired, &["type"]) == Some(SERVICE_ACCOUNT_TOKEN_TYPE) => {
            if let Some(data) = unstructured::get(observed, &["data"]).filter(|d| d.is_object()) {
                set(&mut out, &["data"], data.clone()).map_err(|e| err("data", e))?;
            }
            let path = ["metadata", "annotations", SERVICE_ACCOUNT_UID_ANNOTATION];
            if let Some(uid) = unstructured::string(observed, &path) {
                set(&mut out, &path, Value::from(uid)).map_err(|e| err("metadata.annotations", e))?;
            }
        }
        _ => {}
    }
    Ok(out)
}

fn set(obj: &mut Value, path: &[&str], value: Value) -> Result<(), String> {
    unstructured::set(obj, path, value)
}

/// Labels or annotations: the desired ones, plus the observed ones the desired object does not
/// set and the template did not drop (`managed` lists, in `observed`'s annotations, the keys that
/// came from the template).
fn retain_keys(out: &mut Value, observed: &Value, field: &str, managed: &str) -> Result<(), String> {
    let mut keys = unstructured::string_map(out, &["metadata", field]);
    let observed_keys = unstructured::string_map(observed, &["metadata", field]);
    let recorded = unstructured::string(observed, &["metadata", "annotations", managed]).unwrap_or("");
    let dropped = |key: &str| recorded.split(',').any(|k| k == key) && !keys.contains_key(key);
    let kept: Vec<(String, Value)> = observed_keys.into_iter().filter(|(k, _)| !dropped(k) && !keys.contains_key(k)).collect();
    keys.extend(kept);
    if !keys.is_empty() {
        set(out, &["metadata", field], Value::Object(keys))?;
    }
    Ok(())
}

/// Deployment under `retain-replicas`: the member's `spec.replicas`.
fn retain_replicas(out: &mut Value, observed: &Value) -> Result<(), (&'static str, String)> {
    let labels = unstructured::string_map(out, &["metadata", "labels"]);
    if labels.get(RETAIN_REPLICAS_LABEL).and_then(Value::as_str) != Some(RETAIN_REPLICAS_VALUE) {
        return Ok(());
    }
    let missing = || ("spec.replicas", "the member object has no spec.replicas to retain".to_string());
    let replicas = unstructured::nested_i64(observed, &["spec", "replicas"]).map_err(|_| missing())?.ok_or_else(missing)?;
    set(out, &["spec", "replicas"], Value::from(replicas)).map_err(|e| ("spec.replicas", e))
}

/// A Pod can hardly change once created: start from the observed pod and bring over what an
/// update may change.
fn retain_pod(desired: &Value, observed: &Value) -> Result<Value, (String, String)> {
    let mut pod = observed.clone();
    for field in ["labels", "annotations"] {
        match unstructured::get(desired, &["metadata", field]) {
            Some(v) => set(&mut pod, &["metadata", field], v.clone()).map_err(|e| (format!("metadata.{field}"), e))?,
            None => unstructured::remove(&mut pod, &["metadata", field]),
        }
    }
    for list in ["initContainers", "containers"] {
        let Some(Value::Array(live)) = unstructured::get(&pod, &["spec", list]).cloned() else {
            continue;
        };
        let wanted = unstructured::get(desired, &["spec", list]).and_then(Value::as_array).cloned().unwrap_or_default();
        let updated: Vec<Value> = live
            .into_iter()
            .map(|mut c| {
                let twin = wanted.iter().find(|w| w.get("name") == c.get("name"));
                if let (Some(twin), Some(map)) = (twin, c.as_object_mut()) {
                    // The desired image, or none at all (Go writes an empty image as absent).
                    match twin.get("image").filter(|i| i.as_str() != Some("")) {
                        Some(image) => map.insert("image".into(), image.clone()),
                        None => map.remove("image"),
                    };
                }
                c
            })
            .collect();
        set(&mut pod, &["spec", list], Value::Array(updated)).map_err(|e| (format!("spec.{list}"), e))?;
    }
    // activeDeadlineSeconds may only be set or shortened.
    let deadline = |obj: &Value| unstructured::get(obj, &["spec", "activeDeadlineSeconds"]).and_then(Value::as_i64);
    let (want, have) = (deadline(desired).unwrap_or(0), deadline(observed));
    if want > 0 && (have.is_none() || want < have.unwrap_or(0)) {
        set(&mut pod, &["spec", "activeDeadlineSeconds"], Value::from(want)).map_err(|e| ("spec".to_string(), e))?;
    }
    // Tolerations may only be added.
    let tolerations = |obj: &Value| unstructured::get(obj, &["spec", "tolerations"]).and_then(Value::as_array).cloned().unwrap_or_default();
    let mut have = tolerations(&pod);
    let before = have.len();
    for t in tolerations(desired) {
        if !have.iter().any(|h| same_toleration(h, &t)) {
            have.push(t);
        }
    }
    if have.len() != before {
        set(&mut pod, &["spec", "tolerations"], Value::Array(have)).map_err(|e| ("spec.tolerations".to_string(), e))?;
    }
    Ok(pod)
}

/// `Toleration.MatchToleration`: same key, effect, operator and value.
fn same_toleration(a: &Value, b: &Value) -> bool {
    ["key", "effect", "operator", "value"].iter().all(|f| {
        let s = |t: &Value| t.get(*f).and_then(Value::as_str).unwrap_or("").to_string();
        s(a) == s(b)
    })
}

/// Service: what the member's API server allocated.
fn retain_service(out: &mut Value, observed: &Value) -> Result<(), (&'static str, String)> {
    let port = unstructured::nested_i64(observed, &["spec", "healthCheckNodePort"]).map_err(|e| ("spec.healthCheckNodePort", e))?;
    if let Some(port) = port.filter(|p| *p > 0) {
        set(out, &["spec", "healthCheckNodePort"], Value::from(port)).map_err(|e| ("spec.healthCheckNodePort", e))?;
    }
    let ip = unstructured::nested_str(observed, &["spec", "clusterIP"]).map_err(|e| ("spec.clusterIP", e))?;
    if let Some(ip) = ip.filter(|ip| !ip.is_empty()) {
        set(out, &["spec", "clusterIP"], Value::from(ip)).map_err(|e| ("spec.clusterIP", e))?;
    }
    Ok(())
}

/// ServiceAccount: desired secrets, then the observed ones (token secrets the member's
/// controller generated) not already named. With neither, `secrets` is written as `null`, as
/// Karmada writes its nil list.
fn retain_service_account(out: &mut Value, observed: &Value) -> Result<(), String> {
    let mut merged: Vec<Value> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (which, obj) in [("desired", &*out), ("observed", observed)] {
        let secrets = unstructured::nested_array(obj, &["secrets"]).map_err(|e| format!("{which}: {e}"))?;
        for secret in secrets.into_iter().flatten() {
            let name = secret.get("name").and_then(Value::as_str).ok_or_else(|| format!("{which}: a secret without a name"))?;
            // Every desired entry is kept; an observed one only under a name not seen yet.
            if which == "desired" || !names.iter().any(|n| n == name) {
                names.push(name.to_string());
                merged.push(secret.clone());
            }
        }
    }
    let value = if merged.is_empty() { Value::Null } else { Value::Array(merged) };
    if let Value::Object(map) = out {
        map.insert("secrets".into(), value);
    }
    Ok(())
}
