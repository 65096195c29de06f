//! `networking.k8s.io/v1` (Ingresses, IngressClasses, NetworkPolicies) and
//! `discovery.k8s.io/v1` EndpointSlices: the objects that describe traffic.

use serde_json::{Value, json};

use super::zero_values::{Object, always_written, default_value, object, object_or_insert, objects_mut, omit_empty};

pub(crate) fn default_ingress(ingress: &mut Object) {
    always_written(ingress, "spec", json!({}));
    if let Some(status) = object_or_insert(ingress, "status") {
        always_written(status, "loadBalancer", json!({}));
    }
}

pub(crate) fn default_ingress_class(class: &mut Object) {
    if let Some(parameters) = object(class, "spec").and_then(|s| object(s, "parameters")) {
        default_value(parameters, "scope", "Cluster");
    }
}

/// A policy without `policyTypes` covers ingress, and egress too when it has egress rules.
pub(crate) fn default_network_policy(policy: &mut Object) {
    let Some(spec) = object(policy, "spec") else {
        return;
    };
    for direction in ["ingress", "egress"] {
        for (_, rule) in objects_mut(spec, direction) {
            for (_, port) in objects_mut(rule, "ports") {
                default_value(port, "protocol", "TCP");
            }
        }
    }
    let no_types = spec.get("policyTypes").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if no_types {
        let egress = spec.get("egress").and_then(Value::as_array).is_some_and(|e| !e.is_empty());
        let types = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
        spec.insert("policyTypes".into(), types);
    }
    omit_empty(spec, &["ingress", "egress"]);
    always_written(spec, "podSelector", json!({}));
}

pub(crate) fn default_endpoint_slice(slice: &mut Object) {
    for (_, port) in objects_mut(slice, "ports") {
        default_value(port, "name", "");
        default_value(port, "protocol", "TCP");
    }
    for (_, endpoint) in objects_mut(slice, "endpoints") {
        // EndpointConditions is a struct: the encoder always writes it.
        always_written(endpoint, "conditions", json!({}));
    }
    always_written(slice, "endpoints", Value::Null);
    always_written(slice, "ports", Value::Null);
}
