//! The OpenAPI schemas apiextensions-apiserver publishes for one served version of a CRD — the
//! kind and its list — in v3 form (`/openapi/v3/apis/<group>/<version>`) or v2 form
//! (`/openapi/v2` definitions), as its builder of Kubernetes 1.37 makes them:
//!
//! - the version's `openAPIV3Schema` as a structural schema writes it back (false flags
//!   dropped) and unfolded (`x-kubernetes-int-or-string` gets its `anyOf` of integer and string);
//! - v2 only: made fit for kubectl's v2 models (`to_v2`), and a root that keeps unknown fields is
//!   just `type: object`;
//! - apiVersion and kind set from TypeMeta, metadata referring to ObjectMeta; embedded resources
//!   (`x-kubernetes-embedded-resource`) completed the same way;
//! - `x-kubernetes-group-version-kind`, and the version's selectable fields.
//!
//! Models are named by the group reversed (`widgets.example.io/v1` → `io.example.v1.Widget`).

use serde_json::{Map, Value, json};

pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub(crate) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
pub(crate) const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
pub(crate) const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// How apiextensions-apiserver names a custom kind's model: the group reversed, then the
/// version (`widgets.example.io/v1` → `io.example.v1`, followed by `.Widget`).
pub(crate) fn model_prefix(group: &str, version: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}", reversed.join("."))
}

const GVK: &str = "x-kubernetes-group-version-kind";
const METADATA_DOC: &str =
    "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str =
    "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// Which document the schemas are for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    V2,
    V3,
}

impl Form {
    /// A reference to another model with a description beside it: v3 wraps the reference in
    /// `allOf`, v2 puts it next to the description.
    fn reference(self, model: &str, description: &str) -> Value {
        match self {
            Form::V3 => json!({"description": description, "allOf": [{"$ref": format!("#/components/schemas/{model}")}]}),
            Form::V2 => json!({"description": description, "$ref": format!("#/definitions/{model}")}),
        }
    }

    fn bare_reference(self, model: &str) -> Value {
        match self {
            Form::V3 => json!({"$ref": format!("#/components/schemas/{model}")}),
            Form::V2 => json!({"$ref": format!("#/definitions/{model}")}),
        }
    }
}

/// (model name, schema) of the kind and of its list, for one version of a CRD; empty when the
/// CRD has no such version.
pub fn schemas(crd: &Value, version: &str, form: Form) -> Vec<(String, Value)> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let kind = spec["names"]["kind"].as_str().unwrap_or("");
    let list_kind = spec["names"]["listKind"].as_str().map(String::from).unwrap_or_else(|| format!("{kind}List"));
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    let Some(v) = spec["versions"].as_array().into_iter().flatten().find(|v| v["name"] == version) else { return Vec::new() };
    let prefix = model_prefix(group, version);
    let gvk = |k: &str| json!([{"group": group, "kind": k, "version": version}]);
    let type_meta = |doc: &str| json!({"description": doc, "type": "string"});
    let schema = v.pointer("/schema/openAPIV3Schema");
    let preserve = spec["preserveUnknownFields"] == true || schema.is_some_and(|s| s["x-kubernetes-preserve-unknown-fields"] == true);
    let mut kind_schema = match schema {
        Some(s) if !(preserve && form == Form::V2) => {
            let mut s = s.clone();
            structural(&mut s);
            if form == Form::V2 {
                to_v2(&mut s);
            }
            if let Value::Object(m) = &mut s {
                let props = m.entry("properties").or_insert_with(|| json!({}));
                props["metadata"] = form.reference(OBJECT_META, METADATA_DOC);
                props["apiVersion"] = type_meta(API_VERSION_DOC);
                props["kind"] = type_meta(KIND_DOC);
            }
            embedded(&mut s, form);
            s
        }
        _ => json!({"type": "object"}),
    };
    kind_schema[GVK] = gvk(kind);
    let items = form.bare_reference(&format!("{prefix}.{kind}"));
    let mut list = json!({
        "description": format!("{list_kind} is a list of {kind}"),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": type_meta(API_VERSION_DOC),
            "items": {"description": format!("List of {plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"), "type": "array", "items": items},
            "kind": type_meta(KIND_DOC),
            "metadata": form.reference(LIST_META, LIST_METADATA_DOC),
        },
        GVK: gvk(&list_kind),
    });
    // Field selectors (GA since 1.32) name the fields they select on.
    let fields: Vec<Value> = v["selectableFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["jsonPath"].as_str())
        .map(|p| json!({"fieldPath": p.trim_start_matches('.')}))
        .collect();
    if !fields.is_empty() {
        kind_schema["x-kubernetes-selectable-fields"] = json!(fields);
        list["x-kubernetes-selectable-fields"] = json!(fields);
    }
    vec![(format!("{prefix}.{kind}"), kind_schema), (format!("{prefix}.{list_kind}"), list)]
}

/// Every schema node: what a structural schema writes back (false flags are not written) and
/// the int-or-string unfolding.
fn structural(s: &mut Value) {
    let Value::Object(m) = s else { return };
    for k in [
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "uniqueItems",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "nullable",
    ] {
        if m.get(k) == Some(&Value::Bool(false)) {
            m.remove(k);
        }
    }
    if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        let int_or_string = json!([{"type": "integer"}, {"type": "string"}]);
        let unfolded = m.get("anyOf") == Some(&int_or_string) || m.get("allOf").and_then(|a| a.get(0)).is_some_and(|a| a.get("anyOf") == Some(&int_or_string));
        if !unfolded {
            if m.contains_key("anyOf") {
                let rest = m.remove("allOf").and_then(|a| a.as_array().cloned()).unwrap_or_default();
                m.insert("allOf".into(), Value::Array([vec![json!({"anyOf": int_or_string})], rest].concat()));
            } else {
                m.insert("anyOf".into(), int_or_string);
            }
        }
    }
    children(m, structural);
}

/// Apply `f` to a node's child schemas (items, properties, additionalProperties).
fn children(m: &mut Map<String, Value>, f: fn(&mut Value)) {
    if let Some(items) = m.get_mut("items") {
        f(items);
    }
    for p in m.get_mut("properties").and_then(Value::as_object_mut).into_iter().flat_map(|p| p.values_mut()) {
        f(p);
    }
    if let Some(a) = m.get_mut("additionalProperties") {
        f(a);
    }
}

/// A schema made fit for v2 (and kubectl's v2 models), node by node from the root: no
/// junctors; a nullable node loses its type and children; a node keeping unknown fields loses
/// its children, and its type when an object; an array without items loses its type; nullable
/// properties are not required; defaults are pruned.
fn to_v2(s: &mut Value) {
    let Value::Object(m) = s else { return };
    for k in ["allOf", "oneOf", "anyOf", "not", "default"] {
        m.remove(k);
    }
    if m.remove("nullable") == Some(Value::Bool(true)) {
        for k in ["type", "items", "properties"] {
            m.remove(k);
        }
    }
    let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if preserve {
        m.remove("items");
        m.remove("properties");
    }
    if !m.contains_key("items") && m.get("type").and_then(Value::as_str) == Some("array") {
        m.remove("type");
    }
    if preserve && m.get("type").and_then(Value::as_str) == Some("object") {
        m.remove("type");
    }
    let nullable: Vec<String> =
        m.get("properties").and_then(Value::as_object).into_iter().flatten().filter(|(_, p)| p["nullable"] == true).map(|(n, _)| n.clone()).collect();
    let additional_nullable = m.get("additionalProperties").is_some_and(|a| a["nullable"] == true);
    if let Some(Value::Array(req)) = m.get_mut("required") {
        req.retain(|r| !additional_nullable && !r.as_str().is_some_and(|r| nullable.iter().any(|n| n == r)));
        if req.is_empty() {
            m.remove("required");
        }
    }
    children(m, to_v2);
}

/// Embedded resources (x-kubernetes-embedded-resource) get apiVersion, kind and metadata, and
/// require the first two; in v2, those keeping unknown fields are left as they are.
fn embedded(s: &mut Value, form: Form) {
    let Value::Object(m) = s else { return };
    if let Some(items) = m.get_mut("items") {
        embedded(items, form);
    }
    for p in m.get_mut("properties").and_then(Value::as_object_mut).into_iter().flat_map(|p| p.values_mut()) {
        embedded(p, form);
    }
    if let Some(a) = m.get_mut("additionalProperties") {
        embedded(a, form);
    }
    let preserve = m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if (preserve && form == Form::V2) || m.get("x-kubernetes-embedded-resource") != Some(&Value::Bool(true)) {
        return;
    }
    let props = m.entry("properties").or_insert_with(|| json!({}));
    props["apiVersion"] = json!({"description": "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"});
    props["kind"] = json!({"description": "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"});
    props["metadata"] = form.reference(OBJECT_META, METADATA_DOC);
    if let Value::Array(r) = m.entry("required").or_insert_with(|| json!([])) {
        for f in ["kind", "apiVersion"] {
            if !r.iter().any(|x| x == f) {
                r.push(json!(f));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget() -> Value {
        json!({"spec": {"group": "example.io", "names": {"kind": "W", "listKind": "WList", "plural": "ws"}, "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {"type": "object", "required": ["a", "n"], "properties": {
                    "a": {"type": "string", "default": "x", "anyOf": [{"minLength": 1}]},
                    "n": {"type": "object", "nullable": true, "properties": {"b": {"type": "string"}}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"c": {"type": "string"}}},
                    "arr": {"type": "array", "x-kubernetes-preserve-unknown-fields": true, "items": {"type": "string"}},
                    "port": {"x-kubernetes-int-or-string": true, "uniqueItems": false},
                    "e": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}
                }}
            }
        }}}]}})
    }

    #[test]
    fn v2_is_what_apiextensions_publishes() {
        let defs: Map<String, Value> = schemas(&widget(), "v1", Form::V2).into_iter().collect();
        let w = &defs["io.example.v1.W"];
        assert_eq!(w[GVK], json!([{"group": "example.io", "kind": "W", "version": "v1"}]));
        assert_eq!(w["properties"]["metadata"]["$ref"], "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        let spec = &w["properties"]["spec"];
        assert_eq!(spec["required"], json!(["a"]));
        assert_eq!(spec["properties"]["a"], json!({"type": "string"}));
        assert_eq!(spec["properties"]["n"], json!({}));
        assert_eq!(spec["properties"]["free"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(spec["properties"]["arr"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(spec["properties"]["port"], json!({"x-kubernetes-int-or-string": true}));
        assert_eq!(spec["properties"]["e"]["required"], json!(["kind", "apiVersion"]));
        assert_eq!(defs["io.example.v1.WList"]["properties"]["items"]["items"], json!({"$ref": "#/definitions/io.example.v1.W"}));
    }

    #[test]
    fn v3_keeps_the_schema_and_unfolds_int_or_string() {
        let defs: Map<String, Value> = schemas(&widget(), "v1", Form::V3).into_iter().collect();
        let spec = &defs["io.example.v1.W"]["properties"]["spec"];
        assert_eq!(spec["required"], json!(["a", "n"]));
        assert_eq!(spec["properties"]["a"]["default"], "x");
        assert_eq!(spec["properties"]["n"]["nullable"], true);
        assert_eq!(spec["properties"]["port"], json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}));
        assert_eq!(
            spec["properties"]["e"]["properties"]["metadata"]["allOf"],
            json!([{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}])
        );
    }
}
