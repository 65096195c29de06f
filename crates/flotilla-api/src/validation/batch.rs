//! `batch/v1` Jobs: counts and deadlines, a pod template that does not restart always, the
//! selector (generated on create unless manual) and what an update may not change.

use serde_json::{Value, json};

use super::field::FieldError;
use super::object::{Obj, immutable, label_selector, label_selector_json, nonnegative};
use super::pod;

pub(crate) fn job(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = Obj(obj).obj("spec");
    for f in ["parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"] {
        if spec.get(f).is_some() {
            nonnegative(spec.int(f), &format!("spec.{f}"), errs);
        }
    }
    match spec.str("completionMode") {
        "" | "NonIndexed" => {}
        "Indexed" => {
            if spec.get("completions").is_none() {
                errs.push(FieldError::required("spec.completions", "when completion mode is Indexed"));
            }
        }
        other => errs.push(FieldError::not_supported("spec.completionMode", &json!(other), &["NonIndexed", "Indexed"])),
    }
    let template = spec.obj("template");
    pod::validate_template(template.0, "spec.template", errs);
    match template.at("spec").str("restartPolicy") {
        "OnFailure" | "Never" => {}
        "" | "Always" => errs.push(FieldError::required("spec.template.spec.restartPolicy", "valid values: [\"OnFailure\" \"Never\"]")),
        other => errs.push(FieldError::not_supported("spec.template.spec.restartPolicy", &json!(other), &["OnFailure", "Never"])),
    }
    let selector = match spec.get("selector") {
        None => {
            errs.push(FieldError::required("spec.selector", ""));
            None
        }
        Some(sel) => label_selector(sel, "spec.selector", errs),
    };
    // Generated or manual, the selector must select the Job's own pods.
    let labels = template.at("metadata").get("labels");
    let selects = |s: &crate::selector::LabelSelector| s.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str));
    if spec.get("selector").is_none() || selector.as_ref().is_some_and(|s| !selects(s)) {
        errs.push(FieldError::invalid("spec.template.metadata.labels", labels.unwrap_or(&Value::Null), "`selector` does not match template `labels`"));
    }
}

/// The selector, completion mode and (unless the Job is suspended) the pod template are fixed
/// once the Job exists.
pub(crate) fn job_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let (n, o) = (Obj(new).obj("spec"), Obj(old).obj("spec"));
    let mut selector = Vec::new();
    immutable(n.get("selector"), o.get("selector"), "spec.selector", &mut selector);
    if !selector.is_empty() {
        let printed = n.get("selector").map_or("null".to_string(), label_selector_json);
        errs.push(FieldError::invalid_printed("spec.selector", &printed, "field is immutable"));
    }
    let suspended = o.get("suspend").and_then(Value::as_bool) == Some(true) && n.get("suspend").and_then(Value::as_bool) == Some(true);
    if !suspended {
        immutable(n.get("template"), o.get("template"), "spec.template", errs);
    }
    immutable(n.get("completionMode"), o.get("completionMode"), "spec.completionMode", errs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_with(restart: &str) -> Value {
        json!({"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
            "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u"}}, "spec": {
                "containers": [{"name": "c", "image": "busybox", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
                "restartPolicy": restart, "dnsPolicy": "ClusterFirst"}}}})
    }

    #[test]
    fn jobs() {
        let cases = [("Never", vec![]), ("Always", vec!["spec.template.spec.restartPolicy: Required value: valid values: [\"OnFailure\" \"Never\"]"])];
        for (restart, want) in cases {
            let mut errs = Vec::new();
            job(&job_with(restart), &mut errs);
            assert_eq!(errs.iter().map(ToString::to_string).collect::<Vec<_>>(), want, "{restart}");
        }
        let mut errs = Vec::new();
        let mut changed = job_with("Never");
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("alpine");
        job_update(&changed, &job_with("Never"), &mut errs);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.template");
    }
}
