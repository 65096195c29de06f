//! CustomResourceDefinitions: validating a CRD as the real server does, turning CRDs into
//! served resources, and the API server's own CRD worker (names acceptance, `NamesAccepted` and
//! `Established` conditions, `storedVersions`, and the deletion lifecycle: the
//! `customresourcecleanup` finalizer, a `Terminating` condition, deleting every custom object,
//! then the CRD itself).
//!
//! The worker is part of the API server (as apiextensions-apiserver's controllers are part of
//! kube-apiserver): it serves routes, so it reads and writes the store directly.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_store::{RangeRequest, StoreError};
use serde_json::{Value, json};

use crate::error::Cause;
use crate::meta;
use crate::resources::{Codec, ResourceInfo, ScaleSpec};
use crate::state::ApiState;
use crate::storage::{self, CRD_PREFIX};
use crate::structural::{Schema, Structural};
use crate::table::{CustomColumn, Printer};

pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn enc(e: crate::error::ApiError) -> StoreError {
    StoreError::Internal(e.message)
}

fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

/// kube-apiserver's explanation of a DNS-1035 label (plural and singular names).
const DNS1035_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_dns1035_label(x: &str) -> bool {
    is_dns_label(x) && x.as_bytes()[0].is_ascii_lowercase()
}

fn is_dns_label(x: &str) -> bool {
    !x.is_empty()
        && x.len() <= 63
        && x.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && x.as_bytes()[0].is_ascii_alphanumeric()
        && x.as_bytes()[x.len() - 1].is_ascii_alphanumeric()
}

/// Defaults the real server sets on a CRD: singular and listKind names, conversion strategy.
pub fn default_crd(obj: &mut Value) {
    if let Some(kind) = s(obj, "/spec/names/kind").map(String::from) {
        if s(obj, "/spec/names/singular").is_none_or(str::is_empty) {
            obj["spec"]["names"]["singular"] = json!(kind.to_lowercase());
        }
        if s(obj, "/spec/names/listKind").is_none_or(str::is_empty) {
            obj["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
        }
    }
    if obj.get("spec").is_some_and(Value::is_object) && obj.pointer("/spec/conversion").is_none() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    if let Some(versions) = obj.pointer_mut("/spec/versions").and_then(Value::as_array_mut) {
        for v in versions {
            if let Some(schema) = v.pointer_mut("/schema/openAPIV3Schema") {
                integral_bounds(schema);
            }
        }
    }
}

/// `minimum`, `maximum` and `multipleOf` are float64 in kube-apiserver, which writes an integral
/// value without a fraction (`10`, not `10.0`); the typed round trip makes them floats.
fn integral_bounds(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            for key in ["minimum", "maximum", "multipleOf"] {
                if let Some(f) = m.get(key).and_then(Value::as_f64).filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15) {
                    m.insert(key.into(), json!(f as i64));
                }
            }
            for (k, x) in m.iter_mut() {
                if !matches!(k.as_str(), "default" | "enum" | "example") {
                    integral_bounds(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral_bounds),
        _ => {}
    }
}

/// The status a CRD is created with, before its names are accepted (as kube-apiserver answers
/// the create).
pub fn initial_status(obj: &mut Value) {
    let storage: Vec<Value> = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    obj["status"] = json!({"acceptedNames": {"plural": "", "kind": ""}, "conditions": null, "storedVersions": storage});
}

/// What the first delete of a CRD writes: a `Terminating` condition (the worker then deletes its
/// objects and says so).
pub fn mark_deletion_pending(obj: &mut Value) {
    let cond = condition(
        "Terminating",
        "True",
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        obj,
    );
    let conds = obj["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let mut conds: Vec<Value> = conds.into_iter().filter(|c| c["type"] != "Terminating").collect();
    conds.push(cond);
    obj["status"]["conditions"] = Value::Array(conds);
}

/// Validate a CRD object; causes name the field, as the real server's 422 does.
/// `old`: the CRD before an update. A version whose schema an update leaves unchanged is not
/// judged again on the estimated cost of its rules (kube-apiserver's leniency, so that a CRD
/// written under other limits can still be updated).
pub fn validate_crd(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut c = Vec::new();
    let group = s(obj, "/spec/group").unwrap_or("");
    let plural = s(obj, "/spec/names/plural").unwrap_or("");
    let name = meta::name(obj);
    if group.is_empty() {
        c.push(Cause::new("FieldValueRequired", "spec.group", "Required value"));
    } else if !group.contains('.') {
        c.push(Cause::new("FieldValueInvalid", "spec.group", format!("Invalid value: {group:?}: should be a domain with at least one dot")));
    } else if !meta::is_dns1123_subdomain(group) {
        c.push(Cause::new(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: {group:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"),
        ));
    }
    if name != format!("{plural}.{group}") {
        c.push(Cause::new("FieldValueInvalid", "metadata.name", format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group")));
    }
    for (field, required) in [("plural", true), ("singular", false), ("kind", true), ("listKind", false)] {
        match s(obj, &format!("/spec/names/{field}")) {
            None | Some("") if required => c.push(Cause::new("FieldValueRequired", format!("spec.names.{field}"), "Required value")),
            Some(v) if (field == "plural" || field == "singular") && !v.is_empty() && !is_dns1035_label(v) => {
                c.push(Cause::new("FieldValueInvalid", format!("spec.names.{field}"), format!("Invalid value: {v:?}: {DNS1035_MESSAGE}")));
            }
            _ => {}
        }
    }
    if let (Some(kind), Some(list_kind)) = (s(obj, "/spec/names/kind"), s(obj, "/spec/names/listKind"))
        && !kind.is_empty()
        && kind == list_kind
    {
        c.push(Cause::new("FieldValueInvalid", "spec.names.listKind", format!("Invalid value: {list_kind:?}: kind and listKind may not be the same")));
    }
    if let Some(shorts) = obj.pointer("/spec/names/shortNames").and_then(Value::as_array) {
        for (i, sn) in shorts.iter().enumerate() {
            if !sn.as_str().is_some_and(is_dns_label) {
                c.push(Cause::new(
                    "FieldValueInvalid",
                    format!("spec.names.shortNames[{i}]"),
                    format!("Invalid value: {sn}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
                ));
            }
        }
    }
    match s(obj, "/spec/scope") {
        Some("Namespaced" | "Cluster") => {}
        None | Some("") => c.push(Cause::new("FieldValueRequired", "spec.scope", "Required value")),
        Some(x) => {
            c.push(Cause::new("FieldValueNotSupported", "spec.scope", format!("Unsupported value: {x:?}: supported values: \"Cluster\", \"Namespaced\"")))
        }
    }
    match s(obj, "/spec/conversion/strategy") {
        None | Some("None") => {}
        Some("Webhook") => {
            c.push(Cause::new("FieldValueForbidden", "spec.conversion.strategy", "Forbidden: Webhook conversion is not supported by Flotilla yet; use None"))
        }
        Some(x) => c.push(Cause::new(
            "FieldValueNotSupported",
            "spec.conversion.strategy",
            format!("Unsupported value: {x:?}: supported values: \"None\", \"Webhook\""),
        )),
    }
    let versions = obj.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    if versions.is_empty() {
        c.push(Cause::new("FieldValueRequired", "spec.versions", "Required value: must have exactly one version marked as storage version"));
    }
    let storage = versions.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true)).count();
    if !versions.is_empty() && storage != 1 {
        c.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            format!("Invalid value: must have exactly one version marked as storage version, status.storedVersions[{storage}]"),
        ));
    }
    // kube-apiserver validates its internal version, where a schema every version shares is
    // hoisted to spec.validation: its errors are reported there.
    // Subresources and printer columns are hoisted the same way.
    let shared_schema = !versions.is_empty()
        && versions.iter().all(|v| v.pointer("/schema/openAPIV3Schema").is_some() && v.pointer("/schema") == versions[0].pointer("/schema"));
    let shared = |pointer: &str| versions.iter().all(|v| v.pointer(pointer) == versions[0].pointer(pointer));
    let (shared_subresources, shared_columns) = (shared("/subresources"), shared("/additionalPrinterColumns"));
    let mut seen = HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        let vn = v.get("name").and_then(Value::as_str).unwrap_or("");
        if vn.is_empty() || !is_dns_label(vn) {
            c.push(Cause::new(
                "FieldValueInvalid",
                format!("spec.versions[{i}].name"),
                format!("Invalid value: {vn:?}: a DNS-1035 label must consist of lower case alphanumeric characters or '-'"),
            ));
        }
        if !seen.insert(vn.to_string()) {
            c.push(Cause::new("FieldValueInvalid", format!("spec.versions[{i}].name"), format!("Invalid value: {vn:?}: must be unique")));
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None => c.push(Cause::new("FieldValueRequired", format!("spec.versions[{i}].schema.openAPIV3Schema"), "Required value")),
            Some(_) if shared_schema && i > 0 => {}
            Some(schema) => {
                let mut errs = Vec::new();
                let base = if shared_schema { "spec.validation.openAPIV3Schema".to_string() } else { format!("spec.versions[{i}].schema.openAPIV3Schema") };
                Schema::parse(schema, &base, &mut errs);
                let old_schema = old
                    .and_then(|o| o.pointer("/spec/versions"))
                    .and_then(Value::as_array)
                    .and_then(|vs| vs.iter().find(|ov| ov.get("name") == v.get("name")))
                    .and_then(|ov| ov.pointer("/schema/openAPIV3Schema"));
                if old_schema == Some(schema) {
                    errs.retain(|e| !crate::structural::cel_rules::is_per_expression_cost_error(&e.message));
                }
                c.extend(errs.into_iter().map(|e| Cause::new(e.reason, e.path, e.message)));
                invalid_defaults(schema, &base, &mut c);
                top_level_metadata(schema, &base, &mut c);
            }
        }
        let scale = v.pointer("/subresources/scale").filter(|_| !(shared_subresources && i > 0));
        if let Some(scale) = scale {
            let base = if shared_subresources { "spec.subresources.scale".to_string() } else { format!("spec.versions[{i}].subresources.scale") };
            for (f, req) in [("specReplicasPath", true), ("statusReplicasPath", true), ("labelSelectorPath", false)] {
                match scale.get(f).and_then(Value::as_str) {
                    None if req => c.push(Cause::new("FieldValueRequired", format!("{base}.{f}"), "Required value")),
                    Some(p) if !p.starts_with('.') => c.push(Cause::new(
                        "FieldValueInvalid",
                        format!("{base}.{f}"),
                        format!("Invalid value: {p:?}: must be a simple json path starting with ."),
                    )),
                    _ => {}
                }
            }
        }
        let cols = v.get("additionalPrinterColumns").and_then(Value::as_array).filter(|_| !(shared_columns && i > 0));
        for (j, col) in cols.into_iter().flatten().enumerate() {
            let base = if shared_columns { format!("spec.additionalPrinterColumns[{j}]") } else { format!("spec.versions[{i}].additionalPrinterColumns[{j}]") };
            for f in ["name", "type", "jsonPath"] {
                if col.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    c.push(Cause::new("FieldValueRequired", format!("{base}.{f}"), "Required value"));
                }
            }
            if let Some(t) = col.get("type").and_then(Value::as_str)
                && !matches!(t, "integer" | "number" | "string" | "boolean" | "date")
            {
                c.push(Cause::new(
                    "FieldValueInvalid",
                    format!("{base}.type"),
                    format!("Invalid value: {t:?}: must be one of boolean,date,integer,number,string"),
                ));
            }
        }
    }
    c
}

/// A custom resource's top-level `metadata` may say nothing but restrictions of name and
/// generateName: the rest is implied (ObjectMeta), as kube-apiserver insists.
fn top_level_metadata(schema: &Value, base: &str, c: &mut Vec<Cause>) {
    let Some(meta) = schema.pointer("/properties/metadata").and_then(Value::as_object) else { return };
    let path = format!("{base}.properties[metadata]");
    let only_names = meta.iter().all(|(k, v)| match k.as_str() {
        "type" => v == "object",
        "properties" => v.as_object().is_some_and(|p| p.keys().all(|n| n == "name" || n == "generateName")),
        _ => false,
    });
    if !only_names {
        c.push(Cause::new(
            "FieldValueForbidden",
            path.clone(),
            "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
    if meta.contains_key("default") {
        c.push(Cause::new("FieldValueForbidden", format!("{path}.default"), "Forbidden: must not be set in top-level metadata"));
    }
}

/// Every `default` in a schema must pass its own node's validation (kube-apiserver reports it at
/// `<node>.default`, with a message relative to the default itself: ` in body must be ...`).
fn invalid_defaults(node: &Value, path: &str, c: &mut Vec<Cause>) {
    let Some(o) = node.as_object() else { return };
    if let Some(d) = o.get("default") {
        let schema = Schema::parse_node_at(node, path);
        let mut causes = Vec::new();
        crate::structural::validate(d, &schema, "", &mut causes);
        for cause in causes {
            let field = if cause.field.is_empty() { format!("{path}.default") } else { format!("{path}.default.{}", cause.field) };
            c.push(Cause { field, ..cause });
        }
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            invalid_defaults(p, &format!("{path}.properties[{k}]"), c);
        }
    }
    if let Some(items) = o.get("items") {
        invalid_defaults(items, &format!("{path}.items"), c);
    }
    if let Some(ap) = o.get("additionalProperties").filter(|v| v.is_object()) {
        invalid_defaults(ap, &format!("{path}.additionalProperties"), c);
    }
}

/// What may not change once a CRD is established: its scope and kind (they shape storage).
pub fn validate_crd_update(new: &Value, old: &Value) -> Vec<Cause> {
    let established =
        old.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    if !established {
        return Vec::new();
    }
    let mut c = Vec::new();
    for (pointer, field) in [("/spec/scope", "spec.scope"), ("/spec/names/kind", "spec.names.kind")] {
        if let (Some(n), Some(o)) = (s(new, pointer), s(old, pointer))
            && n != o
        {
            c.push(Cause::new("FieldValueInvalid", field, format!("Invalid value: {n:?}: field is immutable")));
        }
    }
    c
}

fn json_path_to_pointer(p: &str) -> String {
    p.trim_start_matches('.').split('.').map(|x| format!("/{x}")).collect()
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// The resources one accepted CRD serves, one per served version.
pub fn resources_of(crd: &Value) -> Vec<ResourceInfo> {
    let group = s(crd, "/spec/group").unwrap_or("").to_string();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    let plural = names["plural"].as_str().unwrap_or("").to_string();
    let singular = names["singular"].as_str().map(String::from).unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names["listKind"].as_str().map(String::from).unwrap_or_else(|| format!("{kind}List"));
    let namespaced = s(crd, "/spec/scope") == Some("Namespaced");
    let terminating = meta::is_terminating(crd);
    let mut out = Vec::new();
    for v in crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default() {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let mut errs = Vec::new();
        let schema = v.pointer("/schema/openAPIV3Schema").map(|sc| Schema::parse(sc, "schema", &mut errs)).unwrap_or_default();
        let scale = v.pointer("/subresources/scale").map(|sc| ScaleSpec {
            spec_replicas: json_path_to_pointer(sc["specReplicasPath"].as_str().unwrap_or(".spec.replicas")),
            status_replicas: json_path_to_pointer(sc["statusReplicasPath"].as_str().unwrap_or(".status.replicas")),
            selector: sc["labelSelectorPath"].as_str().map(json_path_to_pointer),
        });
        let cols: Vec<CustomColumn> = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|c| CustomColumn {
                        name: c["name"].as_str().unwrap_or("").to_string(),
                        type_: c["type"].as_str().unwrap_or("string").to_string(),
                        format: c["format"].as_str().unwrap_or("").to_string(),
                        json_path: c["jsonPath"].as_str().unwrap_or("").to_string(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        description: c["description"].as_str().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let storage_version = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| vs.iter().find(|x| x["storage"] == true))
            .and_then(|x| x["name"].as_str())
            .unwrap_or("")
            .to_string();
        out.push(ResourceInfo {
            group: group.clone(),
            version: v["name"].as_str().unwrap_or("").to_string(),
            kind: kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
            verbs: ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"].iter().map(|x| x.to_string()).collect(),
            status: v.pointer("/subresources/status").is_some(),
            finalize: false,
            approval: false,
            scale,
            generation: true,
            returns_deleted: false,
            codec: Codec::Custom(Arc::new(Structural { schema, storage_version, terminating })),
            strategic_patch: false,
            printer: Printer::Custom(cols),
        });
    }
    out
}

/// Decide which names of `crd` it may have, as kube-apiserver's naming controller does: each
/// name not taken by a built-in or a CRD accepted before it in the group is accepted, a taken
/// one keeps what was accepted before; every check runs, so the last conflict found is the one
/// reported (reason, message). Returns the accepted names and that conflict, if any.
fn accept_names(crd: &Value, taken: &HashMap<String, HashSet<String>>) -> (Value, Option<(&'static str, String)>) {
    let group = s(crd, "/spec/group").unwrap_or("");
    let empty = HashSet::new();
    let names = taken.get(group).unwrap_or(&empty);
    let n = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = crd.pointer("/status/acceptedNames").cloned().filter(Value::is_object).unwrap_or(json!({}));
    for key in ["plural", "kind"] {
        if accepted.get(key).is_none() {
            accepted[key] = json!("");
        }
    }
    let mut conflict = None;
    let checks: [(&str, &str, Option<&str>); 4] = [
        ("plural", "PluralConflict", None),
        ("singular", "SingularConflict", None),
        ("kind", "KindConflict", Some("kind:")),
        ("listKind", "ListKindConflict", Some("kind:")),
    ];
    for (i, (field, reason, prefix)) in checks.into_iter().enumerate() {
        if i == 2 {
            // Short names are checked between singular and kind.
            let shorts = strings(n.get("shortNames"));
            match shorts.iter().find(|x| names.contains(x.as_str())) {
                Some(x) => conflict = Some(("ShortNamesConflict", format!("{x:?} is already in use"))),
                None if !shorts.is_empty() => accepted["shortNames"] = json!(shorts),
                None => {}
            }
        }
        let Some(v) = n.get(field).and_then(Value::as_str).filter(|v| !v.is_empty()) else { continue };
        if names.contains(&format!("{}{v}", prefix.unwrap_or(""))) {
            conflict = Some((reason, format!("{v:?} is already in use")));
        } else {
            accepted[field] = json!(v);
        }
    }
    let categories = strings(n.get("categories"));
    if !categories.is_empty() {
        accepted["categories"] = json!(categories);
    }
    (accepted, conflict)
}

fn names_of(crd: &Value) -> HashSet<String> {
    let n = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut out = HashSet::new();
    for f in ["plural", "singular"] {
        if let Some(x) = n[f].as_str() {
            out.insert(x.to_string());
        }
    }
    for f in ["kind", "listKind"] {
        if let Some(x) = n[f].as_str() {
            out.insert(format!("kind:{x}"));
        }
    }
    out.extend(strings(n.get("shortNames")));
    out
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, old: &Value) -> Value {
    // Keep the transition time while the status stays the same.
    let previous = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .filter(|c| c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned());
    json!({
        "type": type_,
        "status": status,
        "lastTransitionTime": previous.unwrap_or_else(|| json!(meta::now())),
        "reason": reason,
        "message": message,
    })
}

/// Recompute which CRDs are served, refresh the registry, and bring every CRD's status up to
/// date. Returns CRDs that are terminating.
pub async fn sync(inner: &ApiState) -> Result<Vec<Value>, StoreError> {
    // One sync at a time: a sync that read the CRDs before another's write must not publish
    // its older set of served resources after the newer one.
    let _one_at_a_time = inner.crd_sync.lock().await;
    let crds = storage::load_crds(inner.store.as_ref()).await?;
    let catalog = inner.registry.catalog();
    let mut taken: HashMap<String, HashSet<String>> = HashMap::new();
    for r in inner.registry.builtin_resources() {
        let e = taken.entry(r.group.clone()).or_default();
        e.insert(r.plural.clone());
        e.insert(r.singular.clone());
        e.insert(format!("kind:{}", r.kind));
        e.extend(r.short_names.iter().cloned());
    }
    drop(catalog);
    let mut served = Vec::new();
    let mut terminating = Vec::new();
    for (crd, rev) in &crds {
        let group = s(crd, "/spec/group").unwrap_or("").to_string();
        let (accepted_names, conflict) = accept_names(crd, &taken);
        let mut status = crd.get("status").cloned().unwrap_or(json!({}));
        let accepted = conflict.is_none();
        let mut conds = Vec::new();
        match &conflict {
            None => {
                conds.push(condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", crd));
                conds.push(condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted", crd));
                taken.entry(group.clone()).or_default().extend(names_of(crd));
                served.extend(resources_of(crd));
                status["acceptedNames"] = accepted_names;
            }
            Some((reason, message)) => {
                conds.push(condition("NamesAccepted", "False", reason, message, crd));
                conds.push(condition("Established", "False", "NotAccepted", "not all names are accepted", crd));
                status["acceptedNames"] = accepted_names;
            }
        }
        if meta::is_terminating(crd) {
            conds.push(condition("Terminating", "True", "InstanceDeletionInProgress", "CustomResource deletion is in progress", crd));
            terminating.push(crd.clone());
        }
        status["conditions"] = Value::Array(conds);
        let storage = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| vs.iter().find(|x| x["storage"] == true))
            .and_then(|x| x["name"].as_str())
            .map(String::from);
        let mut stored = strings(crd.pointer("/status/storedVersions"));
        if let Some(sv) = storage
            && accepted
            && !stored.contains(&sv)
        {
            stored.push(sv);
        }
        status["storedVersions"] = json!(stored);
        // Compare without transition times churning: conditions keep theirs when unchanged.
        if crd.get("status") != Some(&status) {
            let mut updated = crd.clone();
            updated["status"] = status;
            let key = Bytes::from(format!("{CRD_PREFIX}{}", meta::name(crd)));
            match inner.store.update_if(key, storage::encode(&updated).map_err(enc)?, *rev).await {
                Ok(_) | Err(StoreError::Conflict { .. }) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    inner.registry.set_custom(served);
    Ok(terminating)
}

/// Delete every object of a terminating CRD; when none remain, drop the cleanup finalizer.
async fn clean_up(inner: &ApiState, crd: &Value) -> Result<(), StoreError> {
    let group = s(crd, "/spec/group").unwrap_or("");
    let plural = s(crd, "/spec/names/plural").unwrap_or("");
    let prefix = format!("/registry/{group}/{plural}/");
    let resp = inner.store.range(RangeRequest::prefix(Bytes::from(prefix))).await?;
    let mut remaining = 0;
    for kv in &resp.kvs {
        let obj = storage::decode(kv).map_err(|e| StoreError::Internal(e.to_string()))?;
        if meta::finalizers(&obj).is_empty() {
            match inner.store.delete_if(kv.key.clone(), Some(kv.mod_revision)).await {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(StoreError::Conflict { .. }) => remaining += 1,
                Err(e) => return Err(e),
            }
        } else {
            remaining += 1;
            if !meta::is_terminating(&obj) {
                let mut o = obj.clone();
                meta::meta_mut(&mut o).insert("deletionTimestamp".into(), json!(meta::now()));
                meta::meta_mut(&mut o).insert("deletionGracePeriodSeconds".into(), json!(0));
                let g = meta::generation(&o);
                meta::meta_mut(&mut o).insert("generation".into(), json!(g + 1));
                let _ = inner.store.update_if(kv.key.clone(), storage::encode(&o).map_err(enc)?, kv.mod_revision).await;
            }
        }
    }
    if remaining > 0 {
        return Ok(());
    }
    // Every object is gone: remove the finalizer; with no finalizers left the CRD goes away.
    let key = Bytes::from(format!("{CRD_PREFIX}{}", meta::name(crd)));
    let Some(kv) = inner.store.get(&key).await? else { return Ok(()) };
    let mut current = storage::decode(&kv).map_err(|e| StoreError::Internal(e.to_string()))?;
    let fins: Vec<String> = meta::finalizers(&current).into_iter().filter(|f| f != CLEANUP_FINALIZER).collect();
    if fins.is_empty() {
        match inner.store.delete_if(key, Some(kv.mod_revision)).await {
            Ok(_) | Err(StoreError::NotFound { .. }) | Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
    } else {
        meta::meta_mut(&mut current).insert("finalizers".into(), json!(fins));
        let _ = inner.store.update_if(key, storage::encode(&current).map_err(enc)?, kv.mod_revision).await;
    }
    Ok(())
}

/// The CRD worker: react to every CRD change, and retry terminating CRDs periodically. It
/// holds the server only while working, so it ends when the server is dropped.
pub async fn run(weak: std::sync::Weak<ApiState>, retry: Duration) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let start = match inner.store.current_revision().await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        let terminating = match sync(&inner).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "CRD sync failed");
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        for crd in &terminating {
            if let Err(e) = clean_up(&inner, crd).await {
                tracing::warn!(error = %e, crd = meta::name(crd), "CRD clean-up failed");
            }
        }
        let store = inner.store.clone();
        drop(inner);
        let mut watch = match store.watch(CRD_PREFIX.as_bytes(), start).await {
            Ok(w) => w,
            Err(_) => continue,
        };
        drop(store);
        let wait = async {
            loop {
                match watch.next_event().await {
                    Some(Ok(flotilla_store::WatchEvent::Progress(_))) => continue,
                    _ => return,
                }
            }
        };
        let pause = if terminating.is_empty() { Duration::from_secs(60) } else { retry };
        let _ = tokio::time::timeout(pause, wait).await;
    }
}
