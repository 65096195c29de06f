//! Core `v1` kinds: Services, ConfigMaps, Secrets, Namespaces, Pods and PodTemplates.

use serde_json::{Value, json};

use super::field::{FieldError, go_json};
use super::names;
use super::object::{Obj, immutable, validate_labels};
use super::pod::{self, one_of};
use crate::selector::label_key_errors;

/// The largest ConfigMap or Secret payload (`core.MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

pub(crate) fn service(obj: &Value, errs: &mut Vec<FieldError>) {
    let spec = Obj(obj).obj("spec");
    let kind = spec.str("type");
    let headless = spec.str("clusterIP") == "None";
    let ports = spec.array("ports");
    if ports.is_empty() && !headless && kind != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if kind == "ExternalName" {
        let cname = spec.str("externalName").trim_end_matches('.');
        if cname.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else {
            for msg in names::dns1123_subdomain(cname) {
                errs.push(FieldError::invalid("spec.externalName", &json!(cname), &msg));
            }
        }
    }
    let mut port_names = std::collections::BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        service_port(Obj(p), &format!("spec.ports[{i}]"), ports.len() > 1, &mut port_names, errs);
    }
    validate_labels(spec.get("selector"), "spec.selector", errs);
    one_of(spec.get("sessionAffinity"), "spec.sessionAffinity", &["ClientIP", "None"], errs);
    one_of(spec.get("type"), "spec.type", &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"], errs);
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let p = Obj(p);
        if !seen.insert((p.str("protocol").to_string(), p.int("port"))) {
            let key = format!(
                "{{\"Name\":\"\",\"Protocol\":{},\"AppProtocol\":null,\"Port\":{},\"TargetPort\":0,\"NodePort\":0}}",
                go_json(&json!(p.str("protocol"))),
                p.int("port")
            );
            errs.push(FieldError { reason: super::field::Reason::Duplicate, field: format!("spec.ports[{i}]"), message: format!("Duplicate value: {key}") });
        }
    }
}

fn service_port(p: Obj<'_>, path: &str, name_required: bool, seen: &mut std::collections::BTreeSet<String>, errs: &mut Vec<FieldError>) {
    let name = p.str("name");
    if name_required && name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    } else if !name.is_empty() {
        for msg in names::dns1123_label(name) {
            errs.push(FieldError::invalid(format!("{path}.name"), &json!(name), &msg));
        }
        if !seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(format!("{path}.name"), &json!(name)));
        }
    }
    pod::port_number(p.int("port"), &format!("{path}.port"), errs);
    pod::protocol(p.get("protocol"), &format!("{path}.protocol"), errs);
    match p.get("targetPort") {
        Some(Value::String(s)) => {
            for msg in names::port_name(s) {
                errs.push(FieldError::invalid(format!("{path}.targetPort"), &json!(s), &msg));
            }
        }
        other => pod::port_number(other.and_then(Value::as_i64).unwrap_or(0), &format!("{path}.targetPort"), errs),
    }
    if let Some(ap) = p.get("appProtocol").and_then(Value::as_str) {
        for msg in label_key_errors(ap) {
            errs.push(FieldError::invalid(format!("{path}.appProtocol"), &json!(ap), &msg));
        }
    }
}

/// Bytes of a base64 value (`binaryData`, a Secret's `data`) once decoded.
fn decoded_len(b64: &str) -> usize {
    let padding = b64.bytes().rev().take_while(|b| *b == b'=').count();
    (b64.len() / 4 * 3).saturating_sub(padding)
}

/// Check the keys of a data map (`field`), none also in `other`; returns the payload's size
/// (`base64` values counted decoded).
fn data_keys(obj: Obj<'_>, field: &str, other: Option<&str>, base64: bool, errs: &mut Vec<FieldError>) -> usize {
    let mut total = 0;
    for (k, v) in obj.get(field).and_then(Value::as_object).into_iter().flatten() {
        let here = format!("{field}[{k}]");
        for msg in names::config_key(k) {
            errs.push(FieldError::invalid(&here, &json!(k), &msg));
        }
        if let Some(other) = other.filter(|o| obj.get(o).is_some_and(|m| m.get(k).is_some())) {
            errs.push(FieldError::invalid(&here, &json!(k), &format!("duplicate of key present in {other}")));
        }
        let v = v.as_str().unwrap_or("");
        total += if base64 { decoded_len(v) } else { v.len() };
    }
    total
}

pub(crate) fn config_map(obj: &Value, errs: &mut Vec<FieldError>) {
    let o = Obj(obj);
    let total = data_keys(o, "data", Some("binaryData"), false, errs) + data_keys(o, "binaryData", Some("data"), true, errs);
    if total > MAX_DATA_BYTES {
        errs.push(FieldError::too_long("", MAX_DATA_BYTES));
    }
}

/// `immutable: true` freezes the data (and itself).
fn frozen_data(new: Obj<'_>, old: Obj<'_>, fields: &[&str], errs: &mut Vec<FieldError>) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    const FROZEN: &str = "field is immutable when `immutable` is set";
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        errs.push(FieldError::forbidden("immutable", FROZEN));
    }
    for f in fields {
        if new.get(f) != old.get(f) {
            errs.push(FieldError::forbidden(*f, FROZEN));
        }
    }
}

pub(crate) fn config_map_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    frozen_data(Obj(new), Obj(old), &["data", "binaryData"], errs);
}

pub(crate) fn secret(obj: &Value, errs: &mut Vec<FieldError>) {
    let o = Obj(obj);
    if data_keys(o, "data", None, true, errs) > MAX_DATA_BYTES {
        errs.push(FieldError::too_long("data", MAX_DATA_BYTES));
    }
    let has = |k: &str| o.obj("data").get(k).is_some();
    let required = |k: &str| FieldError::required(format!("data[{k}]"), "");
    match o.str("type") {
        "kubernetes.io/service-account-token" if o.at("metadata.annotations").str("kubernetes.io/service-account.name").is_empty() => {
            errs.push(FieldError::required("metadata.annotations[kubernetes.io/service-account.name]", ""));
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => errs.push(required(".dockercfg")),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => errs.push(required(".dockerconfigjson")),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(required("username"));
            errs.push(required("password"));
        }
        "kubernetes.io/ssh-auth" if o.obj("data").str("ssh-privatekey").is_empty() => errs.push(required("ssh-privatekey")),
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(required(k));
                }
            }
        }
        _ => {}
    }
}

pub(crate) fn secret_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    immutable(Obj(new).get("type"), Obj(old).get("type"), "type", errs);
    frozen_data(Obj(new), Obj(old), &["data"], errs);
}

/// A Namespace's `spec.finalizers`: qualified names, fully qualified unless standard.
pub(crate) fn namespace(obj: &Value, errs: &mut Vec<FieldError>) {
    for f in Obj(obj).obj("spec").array("finalizers") {
        let f = f.as_str().unwrap_or("");
        for msg in label_key_errors(f) {
            errs.push(FieldError::invalid("spec.finalizers", &json!(f), &msg));
        }
        if !f.contains('/') && !["kubernetes", "orphan", "foregroundDeletion"].contains(&f) {
            errs.push(FieldError::invalid("spec.finalizers", &json!(f), "name is neither a standard finalizer name nor is it fully qualified"));
        }
    }
}

pub(crate) fn pod(obj: &Value, errs: &mut Vec<FieldError>) {
    pod::validate_spec(Obj(obj).get("spec").unwrap_or(&Value::Null), "spec", errs);
}

pub(crate) fn pod_template(obj: &Value, errs: &mut Vec<FieldError>) {
    pod::validate_template(Obj(obj).get("template").unwrap_or(&Value::Null), "template", errs);
}
