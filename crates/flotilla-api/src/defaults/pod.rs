//! Pods and every embedded pod template: the defaults kube-apiserver gives a `PodSpec`, its
//! containers, probes and volumes, the extra ones only a `Pod` gets, and what creating a Pod adds
//! (initial status, QoS class, and the `DefaultTolerationSeconds` and `Priority` admission
//! plugins that a Karmada-style kube-apiserver runs).

use serde_json::{Value, json};

use super::FieldError;
use super::quantity::{Quantity, canonicalize_field, canonicalize_resource_list, resource_quantity};
use super::zero_values::{
    Object, always_written, default_number, default_string, default_value, object, object_or_insert, objects_mut, omit_empty, omit_empty_metadata, str_of,
};

/// Which object embeds the spec: a `Pod` gets a few defaults a template does not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Pod,
    Template,
}

/// Defaults a `Pod` object (spec and status) as decoding does on every request.
pub(crate) fn default_pod(pod: &mut Object) -> Result<(), FieldError> {
    if let Some(spec) = object(pod, "spec") {
        default_pod_spec(spec, "spec", Owner::Pod)?;
    }
    always_written(pod, "spec", json!({"containers": null}));
    if let Some(status) = object_or_insert(pod, "status") {
        default_pod_status(status);
    }
    Ok(())
}

/// Defaults a `PodTemplateSpec` (`metadata` + `spec`) embedded at `path`.
pub(crate) fn default_pod_template(template: &mut Object, path: &str) -> Result<(), FieldError> {
    if let Some(meta) = object_or_insert(template, "metadata") {
        omit_empty_metadata(meta);
    }
    let spec_path = format!("{path}.spec");
    match object(template, "spec") {
        Some(spec) => default_pod_spec(spec, &spec_path, Owner::Template),
        None => {
            always_written(template, "spec", json!({"containers": null}));
            Ok(())
        }
    }
}

/// The labels of the pod template at `spec.template` of a workload (an empty map counts).
pub(crate) fn template_labels(workload: &Object) -> Option<Object> {
    workload.get("spec")?.get("template")?.get("metadata")?.get("labels")?.as_object().cloned()
}

/// Defaults the pod template at `key` of `parent`, if present.
pub(crate) fn default_pod_template_at(parent: &mut Object, key: &str, path: &str) -> Result<(), FieldError> {
    match object(parent, key) {
        Some(template) => default_pod_template(template, &format!("{path}.{key}")),
        None => Ok(()),
    }
}

const POD_SPEC_OMIT_EMPTY: &[&str] = &[
    "volumes",
    "initContainers",
    "ephemeralContainers",
    "nodeSelector",
    "serviceAccountName",
    "serviceAccount",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "imagePullSecrets",
    "hostname",
    "subdomain",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "readinessGates",
    "topologySpreadConstraints",
    "schedulingGates",
    "resourceClaims",
    "overhead",
    "dnsPolicy",
    "restartPolicy",
    "schedulerName",
];

fn default_pod_spec(spec: &mut Object, path: &str, owner: Owner) -> Result<(), FieldError> {
    if owner == Owner::Pod {
        // A negative grace period means "as soon as possible", which a Pod stores as 1.
        if spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64).is_some_and(|s| s < 0) {
            spec.insert("terminationGracePeriodSeconds".into(), json!(1));
        }
        for key in ["containers", "initContainers"] {
            for (_, container) in objects_mut(spec, key) {
                requests_from_limits(container);
            }
        }
        default_value(spec, "enableServiceLinks", true);
        if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
            for key in ["containers", "initContainers"] {
                for (_, container) in objects_mut(spec, key) {
                    for (_, port) in objects_mut(container, "ports") {
                        if let Some(container_port) = port.get("containerPort").and_then(Value::as_i64) {
                            default_number(port, "hostPort", container_port);
                        }
                    }
                }
            }
        }
    }

    // serviceAccount is the deprecated spelling of serviceAccountName; the two are kept equal.
    if str_of(spec, "serviceAccountName").is_empty() {
        let deprecated = str_of(spec, "serviceAccount").to_owned();
        spec.insert("serviceAccountName".into(), Value::from(deprecated));
    }
    let name = spec.get("serviceAccountName").cloned().unwrap_or(Value::Null);
    spec.insert("serviceAccount".into(), name);
    default_string(spec, "dnsPolicy", "ClusterFirst");
    default_string(spec, "restartPolicy", "Always");
    default_value(spec, "securityContext", json!({}));
    default_value(spec, "terminationGracePeriodSeconds", 30);
    default_string(spec, "schedulerName", "default-scheduler");

    for (_, toleration) in objects_mut(spec, "tolerations") {
        omit_empty(toleration, &["key", "operator", "value", "effect"]);
    }
    for (i, volume) in objects_mut(spec, "volumes") {
        default_volume(volume, &format!("{path}.volumes[{i}]"))?;
    }
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, container) in objects_mut(spec, key) {
            default_container(container, &format!("{path}.{key}[{i}]"))?;
        }
    }
    canonicalize_resource_list(spec, "overhead", path)?;
    if let Some(resources) = object(spec, "resources") {
        let resources_path = format!("{path}.resources");
        canonicalize_resource_list(resources, "limits", &resources_path)?;
        canonicalize_resource_list(resources, "requests", &resources_path)?;
    }
    omit_empty(spec, POD_SPEC_OMIT_EMPTY);
    always_written(spec, "containers", Value::Null);
    Ok(())
}

/// A Pod (never a template) with limits but no request for a resource requests its limit.
fn requests_from_limits(container: &mut Object) {
    let Some(resources) = object(container, "resources") else {
        return;
    };
    let Some(limits) = object(resources, "limits").cloned() else {
        return;
    };
    if let Some(requests) = object_or_insert(resources, "requests") {
        for (name, limit) in limits {
            requests.entry(name).or_insert(limit);
        }
    }
}

const CONTAINER_OMIT_EMPTY: &[&str] = &[
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resizePolicy",
    "restartPolicyRules",
    "volumeMounts",
    "volumeDevices",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "stdin",
    "stdinOnce",
    "tty",
];

fn default_container(container: &mut Object, path: &str) -> Result<(), FieldError> {
    if str_of(container, "imagePullPolicy").is_empty() {
        let policy = pull_policy_for(str_of(container, "image"));
        container.insert("imagePullPolicy".into(), Value::from(policy));
    }
    default_string(container, "terminationMessagePath", "/dev/termination-log");
    default_string(container, "terminationMessagePolicy", "File");
    for (_, port) in objects_mut(container, "ports") {
        default_string(port, "protocol", "TCP");
        omit_empty(port, &["name", "hostPort", "hostIP"]);
    }
    for (i, env) in objects_mut(container, "env") {
        let env_path = format!("{path}.env[{i}].valueFrom");
        if let Some(from) = object(env, "valueFrom") {
            default_env_source(from, &env_path)?;
        }
        omit_empty(env, &["value"]);
    }
    for (_, mount) in objects_mut(container, "volumeMounts") {
        omit_empty(mount, &["readOnly", "subPath", "subPathExpr"]);
    }
    if let Some(resources) = object_or_insert(container, "resources") {
        let resources_path = format!("{path}.resources");
        canonicalize_resource_list(resources, "limits", &resources_path)?;
        canonicalize_resource_list(resources, "requests", &resources_path)?;
        omit_empty(resources, &["limits", "requests", "claims"]);
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = object(container, probe) {
            default_probe(probe);
        }
    }
    if let Some(lifecycle) = object(container, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(get) = object(lifecycle, hook).and_then(|h| object(h, "httpGet")) {
                default_http_get(get);
            }
        }
    }
    omit_empty(container, CONTAINER_OMIT_EMPTY);
    Ok(())
}

fn default_env_source(from: &mut Object, path: &str) -> Result<(), FieldError> {
    if let Some(field) = object(from, "fieldRef") {
        default_string(field, "apiVersion", "v1");
    }
    if let Some(file) = object(from, "fileKeyRef") {
        default_value(file, "optional", false);
    }
    if let Some(resource) = object(from, "resourceFieldRef") {
        canonicalize_field(resource, "divisor", &format!("{path}.resourceFieldRef"))?;
    }
    Ok(())
}

fn default_probe(probe: &mut Object) {
    default_number(probe, "timeoutSeconds", 1);
    default_number(probe, "periodSeconds", 10);
    default_number(probe, "successThreshold", 1);
    default_number(probe, "failureThreshold", 3);
    omit_empty(probe, &["initialDelaySeconds"]);
    if let Some(get) = object(probe, "httpGet") {
        default_http_get(get);
    }
    if let Some(socket) = object(probe, "tcpSocket") {
        omit_empty(socket, &["host"]);
    }
    if let Some(grpc) = object(probe, "grpc") {
        default_value(grpc, "service", "");
    }
}

fn default_http_get(get: &mut Object) {
    default_string(get, "path", "/");
    default_string(get, "scheme", "HTTP");
    omit_empty(get, &["host", "httpHeaders"]);
}

/// The volume-source fields of a `Volume`: a volume that names none of them is an `emptyDir`.
fn has_source(volume: &Object) -> bool {
    volume.iter().any(|(key, value)| key != "name" && !value.is_null())
}

fn default_volume(volume: &mut Object, path: &str) -> Result<(), FieldError> {
    if !has_source(volume) {
        volume.insert("emptyDir".into(), json!({}));
    }
    if let Some(image) = object(volume, "image")
        && str_of(image, "pullPolicy").is_empty()
    {
        let policy = pull_policy_for(str_of(image, "reference"));
        image.insert("pullPolicy".into(), Value::from(policy));
    }
    if let Some(host_path) = object(volume, "hostPath") {
        default_value(host_path, "type", "");
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(source) = object(volume, source) {
            default_value(source, "defaultMode", 420);
            omit_empty(source, &["items", "secretName"]);
        }
    }
    if let Some(iscsi) = object(volume, "iscsi") {
        default_string(iscsi, "iscsiInterface", "default");
    }
    if let Some(rbd) = object(volume, "rbd") {
        default_string(rbd, "pool", "rbd");
        default_string(rbd, "user", "admin");
        default_string(rbd, "keyring", "/etc/ceph/keyring");
    }
    if let Some(disk) = object(volume, "azureDisk") {
        default_value(disk, "cachingMode", "ReadWrite");
        default_value(disk, "fsType", "ext4");
        default_value(disk, "readOnly", false);
        default_value(disk, "kind", "Shared");
    }
    if let Some(scale_io) = object(volume, "scaleIO") {
        default_string(scale_io, "storageMode", "ThinProvisioned");
        default_string(scale_io, "fsType", "xfs");
    }
    if let Some(empty_dir) = object(volume, "emptyDir") {
        canonicalize_field(empty_dir, "sizeLimit", &format!("{path}.emptyDir"))?;
        omit_empty(empty_dir, &["medium"]);
    }
    if let Some(downward) = object(volume, "downwardAPI") {
        default_downward_items(downward, &format!("{path}.downwardAPI"))?;
    }
    if let Some(projected) = object(volume, "projected") {
        for (i, source) in objects_mut(projected, "sources") {
            let source_path = format!("{path}.projected.sources[{i}]");
            if let Some(downward) = object(source, "downwardAPI") {
                default_downward_items(downward, &format!("{source_path}.downwardAPI"))?;
            }
            if let Some(token) = object(source, "serviceAccountToken") {
                default_value(token, "expirationSeconds", 3600);
            }
        }
    }
    if let Some(template) = object(volume, "ephemeral").and_then(|e| object(e, "volumeClaimTemplate")) {
        if let Some(meta) = object_or_insert(template, "metadata") {
            omit_empty_metadata(meta);
        }
        if let Some(spec) = object(template, "spec") {
            default_claim_spec(spec, &format!("{path}.ephemeral.volumeClaimTemplate.spec"))?;
        }
    }
    Ok(())
}

fn default_downward_items(downward: &mut Object, path: &str) -> Result<(), FieldError> {
    for (i, item) in objects_mut(downward, "items") {
        if let Some(field) = object(item, "fieldRef") {
            default_string(field, "apiVersion", "v1");
        }
        if let Some(resource) = object(item, "resourceFieldRef") {
            canonicalize_field(resource, "divisor", &format!("{path}.items[{i}].resourceFieldRef"))?;
        }
    }
    Ok(())
}

/// A `PersistentVolumeClaimSpec` (in a claim, an ephemeral volume or a StatefulSet template).
pub(crate) fn default_claim_spec(spec: &mut Object, path: &str) -> Result<(), FieldError> {
    default_value(spec, "volumeMode", "Filesystem");
    if let Some(resources) = object(spec, "resources") {
        let resources_path = format!("{path}.resources");
        canonicalize_resource_list(resources, "limits", &resources_path)?;
        canonicalize_resource_list(resources, "requests", &resources_path)?;
        omit_empty(resources, &["limits", "requests"]);
    }
    omit_empty(spec, &["accessModes", "volumeName"]);
    Ok(())
}

fn default_pod_status(status: &mut Object) {
    // Condition times are plain (non-pointer) timestamps: always written, `null` when unset.
    for (_, condition) in objects_mut(status, "conditions") {
        always_written(condition, "lastProbeTime", Value::Null);
        always_written(condition, "lastTransitionTime", Value::Null);
    }
    // podIP and podIPs describe the same address; podIP wins when they disagree.
    let pod_ip = str_of(status, "podIP").to_owned();
    let first_of_list =
        status.get("podIPs").and_then(Value::as_array).and_then(|ips| ips.first()).and_then(|ip| ip.get("ip")).and_then(Value::as_str).map(str::to_owned);
    match (pod_ip.is_empty(), first_of_list) {
        (false, Some(first)) if first == pod_ip => {}
        (false, _) => {
            status.insert("podIPs".into(), json!([{ "ip": pod_ip }]));
        }
        (true, Some(first)) => {
            status.insert("podIP".into(), Value::from(first));
        }
        (true, None) => {}
    }
}

/// What creating a Pod adds after decoding: a fresh status (`Pending`, the QoS class, the
/// scheduling-gated condition) and the admission plugins' tolerations and priority.
pub(crate) fn prepare_pod_for_create(pod: &mut Object) {
    let created = pod.get("metadata").and_then(|m| m.get("creationTimestamp")).cloned().unwrap_or(Value::Null);
    let metadata_map = |key: &str| pod.get("metadata").and_then(|m| m.get(key)).and_then(Value::as_object).cloned().unwrap_or_default();
    let (labels, annotations) = (metadata_map("labels"), metadata_map("annotations"));
    let Some(spec) = object(pod, "spec") else {
        return;
    };
    merge_match_label_keys(spec, &labels);
    copy_app_armor_annotations(spec, &annotations);
    admit_default_toleration_seconds(spec);
    admit_priority(spec);
    let mut status = json!({"phase": "Pending"});
    let gated = spec.get("schedulingGates").and_then(Value::as_array).is_some_and(|g| !g.is_empty());
    if gated {
        status["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": null,
            // The server stamps the condition with its clock while creating the object; the
            // creation timestamp is that same instant to the second.
            "lastTransitionTime": created,
        }]);
    }
    status["qosClass"] = Value::from(qos_class(spec));
    pod.insert("status".into(), status);
}

/// A Pod's pod-affinity terms and topology spread constraints select, in addition, the pod's own
/// values of their `matchLabelKeys` (`In`) and `mismatchLabelKeys` (`NotIn`). Templates are
/// left as written: the pods created from them are merged by their own server.
fn merge_match_label_keys(spec: &mut Object, labels: &Object) {
    let merge = |term: &mut Object| {
        let keys = |field: &str| -> Vec<String> {
            term.get(field).and_then(Value::as_array).map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default()
        };
        let (matching, mismatching) = (keys("matchLabelKeys"), keys("mismatchLabelKeys"));
        let Some(selector) = object(term, "labelSelector") else {
            return;
        };
        for (keys, operator) in [(matching, "In"), (mismatching, "NotIn")] {
            for key in keys {
                if let Some(value) = labels.get(&key) {
                    let requirement = json!({"key": key, "operator": operator, "values": [value]});
                    let list = selector.entry("matchExpressions").or_insert_with(|| json!([]));
                    if let Some(list) = list.as_array_mut() {
                        list.push(requirement);
                    }
                }
            }
        }
    };
    if let Some(affinity) = object(spec, "affinity") {
        for kind in ["podAffinity", "podAntiAffinity"] {
            let Some(terms) = object(affinity, kind) else {
                continue;
            };
            for (_, term) in objects_mut(terms, "requiredDuringSchedulingIgnoredDuringExecution") {
                merge(term);
            }
            for (_, weighted) in objects_mut(terms, "preferredDuringSchedulingIgnoredDuringExecution") {
                if let Some(term) = object(weighted, "podAffinityTerm") {
                    merge(term);
                }
            }
        }
    }
    for (_, constraint) in objects_mut(spec, "topologySpreadConstraints") {
        merge(constraint);
    }
}

/// The deprecated per-container AppArmor annotations become the containers'
/// `securityContext.appArmorProfile` (unless a container has one, or it equals the pod's).
fn copy_app_armor_annotations(spec: &mut Object, annotations: &Object) {
    const PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let windows = spec.get("os").and_then(|os| os.get("name")).and_then(Value::as_str) == Some("windows");
    if windows || !annotations.keys().any(|k| k.starts_with(PREFIX)) {
        return;
    }
    let pod_profile = spec.get("securityContext").and_then(|c| c.get("appArmorProfile")).cloned();
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for (_, container) in objects_mut(spec, key) {
            let annotation = annotations.get(&format!("{PREFIX}{}", str_of(container, "name"))).and_then(Value::as_str);
            let profile = match annotation {
                Some("unconfined") => json!({"type": "Unconfined"}),
                Some("runtime/default") => json!({"type": "RuntimeDefault"}),
                Some(value) => match value.strip_prefix("localhost/") {
                    Some(name) if !name.is_empty() => {
                        json!({"type": "Localhost", "localhostProfile": name})
                    }
                    _ => continue,
                },
                None => continue,
            };
            if pod_profile.as_ref() == Some(&profile) {
                continue;
            }
            if let Some(context) = object_or_insert(container, "securityContext") {
                default_value(context, "appArmorProfile", profile);
            }
        }
    }
}

/// `DefaultTolerationSeconds`: tolerate not-ready and unreachable nodes for 300s unless the pod
/// already tolerates those taints.
fn admit_default_toleration_seconds(spec: &mut Object) {
    let tolerates = |taint: &str| {
        spec.get("tolerations").and_then(Value::as_array).is_some_and(|list| {
            list.iter().any(|t| {
                let key = t.get("key").and_then(Value::as_str).unwrap_or("");
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
                (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
            })
        })
    };
    let missing: Vec<&str> = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"].into_iter().filter(|taint| !tolerates(taint)).collect();
    if missing.is_empty() {
        return;
    }
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = list.as_array_mut() {
        for taint in missing {
            list.push(json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// `Priority`: the value of the pod's priority class. Only the two built-in classes are known
/// here; without a class the pod gets 0 (a cluster-wide `globalDefault` class is not seen).
fn admit_priority(spec: &mut Object) {
    let priority = match str_of(spec, "priorityClassName") {
        "" => Some(0),
        "system-cluster-critical" => Some(2_000_000_000),
        "system-node-critical" => Some(2_000_001_000),
        _ => None,
    };
    if let Some(priority) = priority {
        default_value(spec, "priority", priority);
        default_value(spec, "preemptionPolicy", "PreemptLowerPriority");
    }
}

/// The QoS class, from pod-level resources when they name cpu, memory or huge pages, otherwise
/// from every init and regular container.
fn qos_class(spec: &Object) -> &'static str {
    let pod_level = spec.get("resources").and_then(Value::as_object).filter(|r| {
        ["requests", "limits"]
            .iter()
            .any(|list| r.get(*list).and_then(Value::as_object).is_some_and(|l| l.keys().any(|k| k == "cpu" || k == "memory" || k.starts_with("hugepages-"))))
    });
    if let Some(resources) = pod_level {
        return requirements_qos(resources);
    }
    let mut pod_qos = None;
    for key in ["initContainers", "containers"] {
        let containers = spec.get(key).and_then(Value::as_array).into_iter().flatten();
        for container in containers {
            let empty = Object::new();
            let resources = container.get("resources").and_then(Value::as_object).unwrap_or(&empty);
            let qos = requirements_qos(resources);
            match pod_qos {
                _ if qos == "Burstable" => return "Burstable",
                None => pod_qos = Some(qos),
                Some(existing) if existing != qos => return "Burstable",
                Some(_) => {}
            }
        }
    }
    pod_qos.unwrap_or("BestEffort")
}

fn requirements_qos(resources: &Object) -> &'static str {
    let requests = resources.get("requests").and_then(Value::as_object);
    let limits = resources.get("limits").and_then(Value::as_object);
    if requests.is_none_or(Object::is_empty) && limits.is_none_or(Object::is_empty) {
        return "BestEffort";
    }
    let zero = || Quantity::parse("0").ok();
    let mut qos = None;
    for name in ["cpu", "memory"] {
        let request = resource_quantity(requests, name).or_else(zero);
        let limit = resource_quantity(limits, name).or_else(zero);
        let this = match (request, limit) {
            (Some(r), Some(l)) if r.cmp_value(&l).is_ne() => "Burstable",
            (Some(r), _) if r.is_zero() => "BestEffort",
            _ => "Guaranteed",
        };
        match qos {
            _ if this == "Burstable" => return "Burstable",
            None => qos = Some(this),
            Some(existing) if existing != this => return "Burstable",
            Some(_) => {}
        }
    }
    qos.unwrap_or("BestEffort")
}

/// `Always` for an image whose tag is `latest` (or that names neither tag nor digest),
/// `IfNotPresent` otherwise.
pub(crate) fn pull_policy_for(image: &str) -> &'static str {
    if image_tag(image) == "latest" { "Always" } else { "IfNotPresent" }
}

/// The tag kube-apiserver reads from an image reference: the explicit tag, `latest` when there
/// is neither tag nor digest, and `""` when there is only a digest or the reference does not
/// parse as a container image reference.
fn image_tag(image: &str) -> String {
    let (name_and_tag, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    if digest.is_some_and(|d| !valid_digest(d)) {
        return String::new();
    }
    let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
        Some(i) => (&name_and_tag[..last_slash + i], Some(&name_and_tag[last_slash + i + 1..])),
        None => (name_and_tag, None),
    };
    if !valid_name(name) || tag.is_some_and(|t| !valid_tag(t)) {
        return String::new();
    }
    match (tag, digest) {
        (Some(tag), _) => tag.to_owned(),
        (None, None) => "latest".to_owned(),
        (None, Some(_)) => String::new(),
    }
}

fn valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let algorithm_ok = !algorithm.is_empty()
        && algorithm.split(['+', '.', '_', '-']).all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    let hex_ok = match algorithm {
        "sha256" => hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "sha512" => hex.len() == 128 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        _ => hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_alphanumeric() || b"=_-".contains(&b)),
    };
    algorithm_ok && hex_ok
}

fn valid_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(b))
        && !tag.bytes().any(|b| b.is_ascii_uppercase())
}

/// A repository name: an optional registry host (with port) and lowercase path components.
fn valid_name(name: &str) -> bool {
    if name.len() == 64 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return false;
    }
    let (domain, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" || first.bytes().any(|b| b.is_ascii_uppercase()) => (Some(first), rest),
        _ => (None, name),
    };
    if domain.is_some_and(|d| !valid_domain(d)) {
        return false;
    }
    !path.is_empty() && path.split('/').all(valid_path_component)
}

fn valid_domain(domain: &str) -> bool {
    let (host, port) = match domain.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    let host_ok = host.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric() && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    });
    host_ok && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn valid_path_component(component: &str) -> bool {
    let b = component.as_bytes();
    if b.is_empty() || !is_alnum_lower(b[0]) || !is_alnum_lower(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum_lower(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_alnum_lower(b[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = separator == "." || separator == "_" || separator == "__" || separator.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn is_alnum_lower(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        let digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            (&format!("nginx@{digest}") as &str, "IfNotPresent"),
            (&format!("nginx:latest@{digest}"), "Always"),
            ("localhost:5000/team/app", "Always"),
            ("localhost:5000/team/app:v2", "IfNotPresent"),
            ("localhost:5000", "IfNotPresent"),
            ("NGINX", "IfNotPresent"),
            ("nginx:", "IfNotPresent"),
            ("", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy_for(image), policy, "{image:?}");
        }
    }

    #[test]
    fn qos_from_requests_and_limits() {
        let spec = |resources: Value| json!({"containers": [{"name": "a", "resources": resources}]}).as_object().unwrap().clone();
        assert_eq!(qos_class(&spec(json!({}))), "BestEffort");
        assert_eq!(qos_class(&spec(json!({"requests": {"cpu": "1"}}))), "Burstable");
        let equal = json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1000m", "memory": "1024Mi"}});
        assert_eq!(qos_class(&spec(equal)), "Guaranteed");
        assert_eq!(qos_class(&spec(json!({"requests": {"ephemeral-storage": "1Gi"}}))), "BestEffort");
    }
}
