//! The core group (`v1`) apart from Pods: Services, Namespaces, Secrets, ConfigMaps, claims,
//! limit ranges, quotas, Endpoints, ServiceAccounts, PodTemplates and ReplicationControllers.

use serde_json::{Value, json};

use super::FieldError;
use super::pod::{default_claim_spec, default_pod_template_at, template_labels};
use super::quantity::canonicalize_resource_list;
use super::zero_values::{
    Object, always_written, always_written_counters, default_string, default_value, is_unset, object, object_or_insert, objects_mut, omit_empty,
    omit_empty_metadata, str_of,
};

const SERVICE_SPEC_OMIT_EMPTY: &[&str] = &[
    "ports",
    "selector",
    "clusterIP",
    "clusterIPs",
    "externalIPs",
    "loadBalancerIP",
    "loadBalancerSourceRanges",
    "externalName",
    "externalTrafficPolicy",
    "healthCheckNodePort",
    "publishNotReadyAddresses",
    "ipFamilies",
];

pub(crate) fn default_service(service: &mut Object) {
    if let Some(spec) = object_or_insert(service, "spec") {
        default_service_spec(spec);
    }
    let load_balancer = spec_type(service) == "LoadBalancer";
    if let Some(status) = object_or_insert(service, "status") {
        let lb_status = object_or_insert(status, "loadBalancer");
        if let (true, Some(lb_status)) = (load_balancer, lb_status) {
            for (_, ingress) in objects_mut(lb_status, "ingress") {
                if !str_of(ingress, "ip").is_empty() {
                    default_value(ingress, "ipMode", "VIP");
                }
            }
        }
    }
}

fn spec_type(service: &Object) -> &str {
    service.get("spec").and_then(|s| s.get("type")).and_then(Value::as_str).unwrap_or("")
}

fn default_service_spec(spec: &mut Object) {
    default_string(spec, "sessionAffinity", "None");
    match str_of(spec, "sessionAffinity") {
        "None" => {
            spec.remove("sessionAffinityConfig");
        }
        "ClientIP" => {
            let has_timeout =
                spec.get("sessionAffinityConfig").and_then(|c| c.get("clientIP")).and_then(|c| c.get("timeoutSeconds")).is_some_and(|t| !t.is_null());
            if !has_timeout {
                spec.insert("sessionAffinityConfig".into(), json!({"clientIP": {"timeoutSeconds": 10800}}));
            }
        }
        _ => {}
    }
    default_string(spec, "type", "ClusterIP");
    for (_, port) in objects_mut(spec, "ports") {
        default_string(port, "protocol", "TCP");
        let unset = match port.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            Some(_) => false,
        };
        if unset {
            let number = port.get("port").cloned().unwrap_or(json!(0));
            port.insert("targetPort".into(), number);
        }
        omit_empty(port, &["name", "nodePort"]);
    }
    let service_type = str_of(spec, "type").to_owned();
    let external_ips = spec.get("externalIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    let externally_accessible = service_type == "LoadBalancer" || service_type == "NodePort" || (service_type == "ClusterIP" && external_ips);
    if externally_accessible {
        default_string(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(service_type.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        default_value(spec, "internalTrafficPolicy", "Cluster");
    }
    if service_type == "LoadBalancer" {
        default_value(spec, "allocateLoadBalancerNodePorts", true);
    }
    // clusterIP and clusterIPs[0] are one value written twice (see ADR 0004: Flotilla allocates
    // neither, but keeps what the user set, e.g. a headless "None", in both places).
    let cluster_ip = str_of(spec, "clusterIP").to_owned();
    let first = spec.get("clusterIPs").and_then(Value::as_array).and_then(|ips| ips.first()).and_then(Value::as_str).map(str::to_owned);
    match (cluster_ip.is_empty(), first) {
        (false, None) => {
            spec.insert("clusterIPs".into(), json!([cluster_ip]));
        }
        (true, Some(first)) => {
            spec.insert("clusterIP".into(), Value::from(first));
        }
        _ => {}
    }
    omit_empty(spec, SERVICE_SPEC_OMIT_EMPTY);
}

/// Namespaces carry their own name as a label, and a status.
pub(crate) fn default_namespace(namespace: &mut Object) {
    let name = namespace.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str);
    if let Some(name) = name.filter(|n| !n.is_empty()).map(str::to_owned)
        && let Some(labels) = object(namespace, "metadata").and_then(|m| object_or_insert(m, "labels"))
    {
        labels.insert("kubernetes.io/metadata.name".into(), Value::from(name));
    }
    if let Some(spec) = object_or_insert(namespace, "spec") {
        omit_empty(spec, &["finalizers"]);
    }
    if let Some(status) = object_or_insert(namespace, "status") {
        default_string(status, "phase", "Active");
    }
}

/// Creating a Namespace: status `Active` and the `kubernetes` finalizer.
pub(crate) fn prepare_namespace_for_create(namespace: &mut Object) {
    namespace.insert("status".into(), json!({"phase": "Active"}));
    if let Some(spec) = object_or_insert(namespace, "spec") {
        let finalizers = spec.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == "kubernetes")
        {
            list.push(Value::from("kubernetes"));
        }
    }
}

/// Secrets: type `Opaque`, and `stringData` folded into `data` (base64), as the server's
/// conversion does.
pub(crate) fn default_secret(secret: &mut Object) {
    default_string(secret, "type", "Opaque");
    if let Some(Value::Object(strings)) = secret.remove("stringData")
        && let Some(data) = object_or_insert(secret, "data")
    {
        for (key, value) in strings {
            let text = value.as_str().unwrap_or("");
            data.insert(key, Value::from(base64(text.as_bytes())));
        }
    }
    omit_empty(secret, &["data"]);
}

pub(crate) fn default_config_map(config_map: &mut Object) {
    omit_empty(config_map, &["data", "binaryData"]);
}

pub(crate) fn default_service_account(account: &mut Object) {
    omit_empty(account, &["secrets", "imagePullSecrets"]);
}

pub(crate) fn default_claim(claim: &mut Object) -> Result<(), FieldError> {
    if let Some(spec) = object_or_insert(claim, "spec") {
        default_claim_spec(spec, "spec")?;
    }
    if let Some(status) = object_or_insert(claim, "status") {
        default_string(status, "phase", "Pending");
        canonicalize_resource_list(status, "capacity", "status")?;
        canonicalize_resource_list(status, "allocatedResources", "status")?;
    }
    Ok(())
}

/// A claim template inside a StatefulSet: a whole claim, type meta included.
pub(crate) fn default_claim_template(claim: &mut Object, path: &str) -> Result<(), FieldError> {
    always_written(claim, "apiVersion", Value::from("v1"));
    always_written(claim, "kind", Value::from("PersistentVolumeClaim"));
    if let Some(meta) = object_or_insert(claim, "metadata") {
        omit_empty_metadata(meta);
    }
    if let Some(spec) = object_or_insert(claim, "spec") {
        default_claim_spec(spec, &format!("{path}.spec"))?;
    }
    if let Some(status) = object_or_insert(claim, "status") {
        default_string(status, "phase", "Pending");
    }
    Ok(())
}

/// Container limits fill each other in: default ← max, defaultRequest ← default, then ← min.
pub(crate) fn default_limit_range(range: &mut Object) -> Result<(), FieldError> {
    let Some(spec) = object(range, "spec") else {
        return Ok(());
    };
    for (i, item) in objects_mut(spec, "limits") {
        if str_of(item, "type") == "Container" {
            for (from, to) in [("max", "default"), ("default", "defaultRequest"), ("min", "defaultRequest")] {
                let source = item.get(from).and_then(Value::as_object).cloned().unwrap_or_default();
                if let Some(target) = object_or_insert(item, to) {
                    for (name, value) in source {
                        target.entry(name).or_insert(value);
                    }
                }
            }
        }
        let path = format!("spec.limits[{i}]");
        for list in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
            canonicalize_resource_list(item, list, &path)?;
        }
        omit_empty(item, &["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"]);
    }
    Ok(())
}

pub(crate) fn default_resource_quota(quota: &mut Object) -> Result<(), FieldError> {
    if let Some(spec) = object_or_insert(quota, "spec") {
        canonicalize_resource_list(spec, "hard", "spec")?;
        omit_empty(spec, &["hard", "scopes"]);
    }
    if let Some(status) = object_or_insert(quota, "status") {
        canonicalize_resource_list(status, "hard", "status")?;
        canonicalize_resource_list(status, "used", "status")?;
        omit_empty(status, &["hard", "used"]);
    }
    Ok(())
}

pub(crate) fn default_endpoints(endpoints: &mut Object) {
    for (_, subset) in objects_mut(endpoints, "subsets") {
        for (_, port) in objects_mut(subset, "ports") {
            default_string(port, "protocol", "TCP");
            omit_empty(port, &["name"]);
        }
    }
    omit_empty(endpoints, &["subsets"]);
}

pub(crate) fn default_pod_template_object(template: &mut Object) -> Result<(), FieldError> {
    if is_unset(template, "template") {
        template.insert("template".into(), json!({}));
    }
    default_pod_template_at(template, "template", "")
}

/// ReplicationControllers select and label by their template's labels unless told otherwise.
pub(crate) fn default_replication_controller(controller: &mut Object) -> Result<(), FieldError> {
    if let Some(labels) = template_labels(controller) {
        if let Some(spec) = object(controller, "spec")
            && spec.get("selector").and_then(Value::as_object).is_none_or(Object::is_empty)
        {
            spec.insert("selector".into(), Value::Object(labels.clone()));
        }
        if let Some(meta) = object_or_insert(controller, "metadata")
            && meta.get("labels").and_then(Value::as_object).is_none_or(Object::is_empty)
        {
            meta.insert("labels".into(), Value::Object(labels));
        }
    }
    if let Some(spec) = object_or_insert(controller, "spec") {
        default_value(spec, "replicas", 1);
        default_pod_template_at(spec, "template", "spec")?;
        omit_empty(spec, &["selector", "minReadySeconds"]);
    }
    if let Some(status) = object_or_insert(controller, "status") {
        always_written_counters(status, &["replicas"]);
    }
    Ok(())
}

/// Standard base64 with padding, as Go's `[]byte` fields are written.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_the_recorded_secret() {
        assert_eq!(base64(b"admin"), "YWRtaW4=");
        assert_eq!(base64(b"s3cr3t!"), "czNjcjN0IQ==");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b""), "");
    }
}
