//! Pod specs and pod templates: the basics of kube-apiserver's `ValidatePodSpec` (containers,
//! ports, environment, volume mounts, restart and DNS policies, the pod's own names) — the
//! mistakes a manifest actually makes. Security contexts, affinity, probes, resources and the
//! other corners are not checked.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::field::FieldError;
use super::names;
use super::object::{Obj, at, validate_annotations, validate_labels};

/// A pod template (`spec.template` of a workload): its labels and annotations, then its spec.
pub(crate) fn validate_template(template: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let meta = template.get("metadata").unwrap_or(&Value::Null);
    validate_labels(meta.get("labels"), &at(path, "labels"), errs);
    validate_annotations(meta.get("annotations"), &at(path, "annotations"), errs);
    let spec = template.get("spec").unwrap_or(&Value::Null);
    validate_spec(spec, &at(path, "spec"), errs);
    if spec.get("ephemeralContainers").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        errs.push(FieldError::forbidden(at(path, "spec.ephemeralContainers"), "ephemeral containers not allowed in pod template"));
    }
}

/// A pod spec at `path` (`spec` of a Pod, `spec.template.spec` of a workload).
pub(crate) fn validate_spec(spec: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let spec = Obj(spec);
    let volumes = validate_volumes(spec, &at(path, "volumes"), errs);
    let mut names = BTreeSet::new();
    let containers = spec.array("containers");
    if containers.is_empty() {
        errs.push(FieldError::required(at(path, "containers"), ""));
    }
    for (i, c) in containers.iter().enumerate() {
        let here = format!("{path}.containers[{i}]");
        validate_container(Obj(c), &here, &volumes, errs);
        let name = Obj(c).str("name");
        if !name.is_empty() && !names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(at(&here, "name"), &json!(name)));
        }
    }
    for (i, c) in spec.array("initContainers").iter().enumerate() {
        let here = format!("{path}.initContainers[{i}]");
        validate_container(Obj(c), &here, &volumes, errs);
        let name = Obj(c).str("name");
        if !name.is_empty() && !names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(at(&here, "name"), &json!(name)));
        }
    }
    one_of(spec.get("restartPolicy"), &at(path, "restartPolicy"), &["Always", "OnFailure", "Never"], errs);
    one_of(spec.get("dnsPolicy"), &at(path, "dnsPolicy"), &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"], errs);
    validate_labels(spec.get("nodeSelector"), &at(path, "nodeSelector"), errs);
    if let Some(n) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&n)
    {
        errs.push(FieldError::invalid(at(path, "activeDeadlineSeconds"), &json!(n), "must be between 1 and 2147483647, inclusive"));
    }
    let sa = spec.str("serviceAccountName");
    if !sa.is_empty() {
        for msg in names::dns1123_subdomain(sa) {
            errs.push(FieldError::invalid(at(path, "serviceAccountName"), &json!(sa), &msg));
        }
    }
    for field in ["hostname", "subdomain"] {
        let v = spec.str(field);
        if !v.is_empty() {
            for msg in names::dns1123_label(v) {
                errs.push(FieldError::invalid(at(path, field), &json!(v), &msg));
            }
        }
    }
}

/// `Required value` when unset, `Unsupported value` when not one of `supported` (which
/// kube-apiserver lists in this order).
pub(crate) fn one_of(v: Option<&Value>, path: &str, supported: &[&str], errs: &mut Vec<FieldError>) {
    match v.and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required(path, "")),
        Some(s) if supported.contains(&s) => {}
        Some(s) => errs.push(FieldError::not_supported(path, &json!(s), supported)),
    }
}

/// The volumes' names (each a DNS label, unique) and that each has exactly one source.
fn validate_volumes(spec: Obj<'_>, path: &str, errs: &mut Vec<FieldError>) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (i, v) in spec.array("volumes").iter().enumerate() {
        let here = format!("{path}[{i}]");
        let v = Obj(v);
        let sources = v.0.as_object().map_or(0, |m| m.iter().filter(|(k, x)| *k != "name" && !x.is_null()).count());
        if sources == 0 {
            errs.push(FieldError::required(&here, "must specify a volume type"));
        }
        let name = v.str("name");
        if name.is_empty() {
            errs.push(FieldError::required(at(&here, "name"), ""));
        } else {
            for msg in names::dns1123_label(name) {
                errs.push(FieldError::invalid(at(&here, "name"), &json!(name), &msg));
            }
        }
        if !seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(at(&here, "name"), &json!(name)));
        }
    }
    seen
}

fn validate_container(c: Obj<'_>, path: &str, volumes: &BTreeSet<String>, errs: &mut Vec<FieldError>) {
    let name = c.str("name");
    if name.is_empty() {
        errs.push(FieldError::required(at(path, "name"), ""));
    } else {
        for msg in names::dns1123_label(name) {
            errs.push(FieldError::invalid(at(path, "name"), &json!(name), &msg));
        }
    }
    if c.str("image").is_empty() {
        errs.push(FieldError::required(at(path, "image"), ""));
    }
    match c.str("terminationMessagePolicy") {
        "File" | "FallbackToLogsOnError" => {}
        "" => errs.push(FieldError::required(at(path, "terminationMessagePolicy"), "must be 'File' or 'FallbackToLogsOnError'")),
        other => errs.push(FieldError::not_supported(at(path, "terminationMessagePolicy"), &json!(other), &["File", "FallbackToLogsOnError"])),
    }
    validate_container_ports(c, &at(path, "ports"), errs);
    for (i, e) in c.array("env").iter().enumerate() {
        let here = format!("{path}.env[{i}].name");
        let n = Obj(e).str("name");
        if n.is_empty() {
            errs.push(FieldError::required(&here, ""));
        }
        for msg in names::env_var_name(n) {
            errs.push(FieldError::invalid(&here, &json!(n), &msg));
        }
    }
    let mut mount_paths = BTreeSet::new();
    for (i, m) in c.array("volumeMounts").iter().enumerate() {
        let here = format!("{path}.volumeMounts[{i}]");
        let m = Obj(m);
        let n = m.str("name");
        if n.is_empty() {
            errs.push(FieldError::required(at(&here, "name"), ""));
        } else if !volumes.contains(n) {
            errs.push(FieldError::not_found(at(&here, "name"), &json!(n)));
        }
        let p = m.str("mountPath");
        if p.is_empty() {
            errs.push(FieldError::required(at(&here, "mountPath"), ""));
        } else if !mount_paths.insert(p.to_string()) {
            errs.push(FieldError::invalid(at(&here, "mountPath"), &json!(p), "must be unique"));
        }
    }
    one_of(c.get("imagePullPolicy"), &at(path, "imagePullPolicy"), &["Always", "IfNotPresent", "Never"], errs);
}

fn validate_container_ports(c: Obj<'_>, path: &str, errs: &mut Vec<FieldError>) {
    let mut seen = BTreeSet::new();
    for (i, p) in c.array("ports").iter().enumerate() {
        let here = format!("{path}[{i}]");
        let p = Obj(p);
        let name = p.str("name");
        if !name.is_empty() {
            let msgs = names::port_name(name);
            for msg in &msgs {
                errs.push(FieldError::invalid(at(&here, "name"), &json!(name), msg));
            }
            if msgs.is_empty() && !seen.insert(name.to_string()) {
                errs.push(FieldError::duplicate(at(&here, "name"), &json!(name)));
            }
        }
        match p.int("containerPort") {
            0 => errs.push(FieldError::required(at(&here, "containerPort"), "")),
            n => port_number(n, &at(&here, "containerPort"), errs),
        }
        if p.int("hostPort") != 0 {
            port_number(p.int("hostPort"), &at(&here, "hostPort"), errs);
        }
        protocol(p.get("protocol"), &at(&here, "protocol"), errs);
    }
}

pub(crate) fn port_number(n: i64, path: &str, errs: &mut Vec<FieldError>) {
    for msg in names::port_number(n) {
        errs.push(FieldError::invalid(path, &json!(n), &msg));
    }
}

pub(crate) fn protocol(v: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    one_of(v, path, &["SCTP", "TCP", "UDP"], errs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(spec: Value) -> Vec<String> {
        let mut errs = Vec::new();
        validate_spec(&spec, "spec", &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    /// A spec as defaulting leaves it, with `patch` merged over the first container.
    fn spec_with(container: Value, extra: Value) -> Value {
        let mut c = json!({"name": "app", "image": "nginx", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"});
        for (k, v) in container.as_object().unwrap() {
            c[k] = v.clone();
        }
        let mut s = json!({"containers": [c], "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    }

    #[test]
    fn pod_specs() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("valid", spec_with(json!({}), json!({})), vec![]),
            ("no containers", json!({"containers": [], "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}), vec!["spec.containers: Required value"]),
            ("no image", spec_with(json!({"image": ""}), json!({})), vec!["spec.containers[0].image: Required value"]),
            (
                "bad container name",
                spec_with(json!({"name": "App"}), json!({})),
                vec![
                    "spec.containers[0].name: Invalid value: \"App\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                ],
            ),
            (
                "port out of range",
                spec_with(json!({"ports": [{"containerPort": 70000, "protocol": "TCP"}]}), json!({})),
                vec!["spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"],
            ),
            (
                "bad protocol",
                spec_with(json!({"ports": [{"containerPort": 80, "protocol": "HTTP"}]}), json!({})),
                vec!["spec.containers[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\""],
            ),
            (
                "restart policy",
                spec_with(json!({}), json!({"restartPolicy": "Sometimes"})),
                vec!["spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""],
            ),
            (
                "mount of a missing volume",
                spec_with(json!({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}), json!({})),
                vec!["spec.containers[0].volumeMounts[0].name: Not found: \"data\""],
            ),
            (
                "volume without a source",
                spec_with(json!({}), json!({"volumes": [{"name": "data"}]})),
                vec!["spec.volumes[0]: Required value: must specify a volume type"],
            ),
            (
                "env name with =",
                spec_with(json!({"env": [{"name": "A=B", "value": "1"}]}), json!({})),
                vec![
                    "spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
                ],
            ),
        ];
        for (name, spec, want) in cases {
            assert_eq!(errors(spec), want, "{name}");
        }
    }

    #[test]
    fn duplicate_container_names() {
        let spec = json!({"containers": [
            {"name": "a", "image": "x", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"},
            {"name": "a", "image": "x", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"});
        assert_eq!(errors(spec), ["spec.containers[1].name: Duplicate value: \"a\""]);
    }
}
