//! `/openapi/v2`: one Swagger 2.0 document with the definitions of every kind, what kubectl
//! before 1.27 reads for `explain` and client-side validation (and later kubectl for
//! validation when the server has no v3).
//!
//! Built-in definitions are derived from the recorded OpenAPI v3 schemas (`openapi.rs`): the
//! two documents come from the same Go definitions and differ in form only (`$ref` under
//! `#/definitions/`, a referencing schema's `allOf: [{$ref}]` flattened to `$ref`, defaults
//! pruned, Quantity and IntOrString typed `string`). What v3 lacks is recorded in
//! `flotilla-api/data/openapi-v2-extra.json` (`scripts/regen-openapi-v2.sh`; ADR 0014). A
//! custom resource's definitions are its CRD's schema per served version, converted as
//! apiextensions-apiserver converts it for v2 (no junctors, nullable and
//! x-kubernetes-preserve-unknown-fields subtrees untyped, …).
//!
//! The document (JSON and gnostic protobuf, `gnostic.rs`) is rendered once per set of CRDs and
//! shared; a request compares the CRDs' revisions and the served custom kinds with the
//! rendered ones and renders again only when they changed.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::openapi::{API_VERSION_DOC, KIND_DOC, LIST_META, OBJECT_META, model_prefix, recorded};
use crate::resources::Catalog;

const EXTRA: &str = include_str!("../../flotilla-api/data/openapi-v2-extra.json");
const GVK: &str = "x-kubernetes-group-version-kind";
const PROTOBUF: &str = "com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The content type the real server answers protobuf with: a dot before v1.0 (the request's
/// `@v1.0` form breaks Go's mime parser).
const PROTOBUF_REPLY: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const DEFINITION: &str = "#/definitions/";

/// What a rendered document was rendered from.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Key {
    /// (name, revision) of every CRD.
    crds: Vec<(String, i64)>,
    /// (group, version, kind) of every served custom resource.
    served: BTreeSet<(String, String, String)>,
    info_version: String,
}

/// One rendering of the document.
struct Rendered {
    key: Key,
    json: Bytes,
    protobuf: Bytes,
    etag: HeaderValue,
    last_modified: HeaderValue,
}

/// The last rendering, shared by requests until the CRDs change.
#[derive(Default)]
pub struct Cache(tokio::sync::Mutex<Option<Arc<Rendered>>>);

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("openapi_v2::Cache")
    }
}

/// Which form a request accepts, by its `Accept` header (highest quality first, then the
/// order given; kube-openapi's negotiation). None: neither (406).
fn negotiate(headers: &HeaderMap) -> Option<bool> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.trim().is_empty() {
        return Some(false);
    }
    let mut clauses: Vec<(f32, &str)> = accept
        .split(',')
        .map(|c| {
            let mut parts = c.split(';');
            let media = parts.next().unwrap_or("").trim();
            let q = parts.filter_map(|p| p.trim().strip_prefix("q=")).find_map(|q| q.trim().parse::<f32>().ok()).unwrap_or(1.0);
            (q, media)
        })
        .filter(|(q, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, media) in clauses {
        let (ty, sub) = media.split_once('/').unwrap_or((media, ""));
        if ty != "application" && ty != "*" {
            continue;
        }
        match sub {
            "json" | "*" => return Some(false),
            s if s == PROTOBUF || s == &PROTOBUF_REPLY["application/".len()..] => {
                return Some(true);
            }
            _ => {}
        }
    }
    None
}

/// `GET /openapi/v2`.
pub async fn serve(
    cache: &Cache,
    catalog: &Catalog,
    store: &dyn flotilla_store::Store,
    version: &crate::server::VersionInfo,
    headers: &HeaderMap,
) -> Response {
    let Some(protobuf) = negotiate(headers) else {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    };
    let crds: Vec<(Value, i64)> = crate::crd::load(store).await.unwrap_or_default();
    let key = Key {
        crds: crds.iter().map(|(c, rev)| (crate::meta::name(c).to_string(), *rev)).collect(),
        served: catalog.all().filter(|r| r.is_custom()).map(|r| (r.group.clone(), r.version.clone(), r.kind.clone())).collect(),
        info_version: format!("{}.{}", version.major, version.minor.trim_end_matches('+')),
    };
    // Held while rendering: requests arriving meanwhile wait for this rendering, not start their
    // own. Rendering (a few MB of JSON) runs off the async workers.
    let mut slot = cache.0.lock().await;
    let rendered = match slot.clone().filter(|r| r.key == key) {
        Some(r) => r,
        None => {
            let Ok(r) = tokio::task::spawn_blocking(move || Arc::new(render(key, &crds))).await else {
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            };
            *slot = Some(r.clone());
            r
        }
    };
    drop(slot);
    let matches = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        v.split(',').map(|t| t.trim().trim_start_matches("W/")).any(|t| t == "*" || t.as_bytes() == rendered.etag.as_bytes())
    });
    let mut resp = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else if protobuf {
        let mut r = (StatusCode::OK, rendered.protobuf.clone()).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF_REPLY));
        r
    } else {
        let mut r = (StatusCode::OK, rendered.json.clone()).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, rendered.etag.clone());
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if !matches {
        h.insert(header::LAST_MODIFIED, rendered.last_modified.clone());
    }
    resp
}

fn render(key: Key, crds: &[(Value, i64)]) -> Rendered {
    let served: Vec<(&Value, &str)> = crds
        .iter()
        .flat_map(|(crd, _)| {
            let spec = &crd["spec"];
            spec["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["name"].as_str())
                .filter(|v| {
                    let gvk = (
                        spec["group"].as_str().unwrap_or("").to_string(),
                        v.to_string(),
                        spec["names"]["kind"].as_str().unwrap_or("").to_string(),
                    );
                    key.served.contains(&gvk)
                })
                .map(move |v| (crd, v))
        })
        .collect();
    let doc = document(&key.info_version, &served);
    let json = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
    let protobuf = Bytes::from(crate::gnostic::encode_document(&doc));
    let etag = HeaderValue::from_str(&format!("\"{}\"", crate::openapi::hash_of_bytes(&json))).unwrap_or(HeaderValue::from_static("\"\""));
    let now = jiff::Timestamp::now();
    let last_modified = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&now)
        .ok()
        .and_then(|s| HeaderValue::from_str(&s).ok())
        .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"));
    Rendered { key, json, protobuf, etag, last_modified }
}

/// The whole document: built-in definitions and those of each served (CRD, version).
fn document(info_version: &str, custom: &[(&Value, &str)]) -> Value {
    let mut definitions = builtin_definitions();
    for (crd, version) in custom {
        for (name, schema) in custom_definitions(crd, version) {
            definitions.insert(name, schema);
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": info_version},
        "paths": {},
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

/// Every built-in kind's definition, as a real kube-apiserver's `/openapi/v2` has it. Built
/// afresh for each rendering (rare) rather than kept: the rendered bytes are what stays.
fn builtin_definitions() -> Map<String, Value> {
    let extra: Value = serde_json::from_str(EXTRA).unwrap_or_else(|e| panic!("data/openapi-v2-extra.json: {e}"));
    let mut out: Map<String, Value> = recorded().schemas.iter().map(|(n, s)| (n.clone(), builtin_v2(s))).collect();
    for (name, gvks) in extra["groupVersionKinds"].as_object().into_iter().flatten() {
        if let Some(Value::Object(d)) = out.get_mut(name) {
            d.insert(GVK.into(), gvks.clone());
        }
    }
    for (name, d) in extra["definitions"].as_object().into_iter().flatten() {
        out.insert(name.clone(), d.clone());
    }
    out
}

/// A recorded v3 schema in its v2 form.
fn builtin_v2(s: &Value) -> Value {
    let Value::Object(m) = s else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "$ref" => {
                out.insert(k.clone(), json!(v.as_str().unwrap_or("").replace("#/components/schemas/", DEFINITION)));
            }
            // A referencing property with siblings (a description): v3 wraps the reference.
            "allOf"
                if v.as_array()
                    .is_some_and(|a| a.len() == 1 && a[0].as_object().is_some_and(|r| r.len() == 1 && r.contains_key("$ref"))) =>
            {
                out.insert("$ref".into(), json!(v[0]["$ref"].as_str().unwrap_or("").replace("#/components/schemas/", DEFINITION)));
            }
            "default" => {}
            // Quantity and IntOrString: several types in v3, a string in v2.
            "oneOf" => {
                out.entry("type").or_insert(json!("string"));
            }
            "properties" => {
                let props = v.as_object().map(|p| p.iter().map(|(n, x)| (n.clone(), builtin_v2(x))).collect()).unwrap_or_default();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" => {
                out.insert(k.clone(), builtin_v2(v));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The definitions apiextensions-apiserver publishes in v2 for one served version of a CRD:
/// the kind and its list.
fn custom_definitions(crd: &Value, version: &str) -> Vec<(String, Value)> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let kind = spec["names"]["kind"].as_str().unwrap_or("");
    let list_kind = spec["names"]["listKind"].as_str().map(String::from).unwrap_or_else(|| format!("{kind}List"));
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    let Some(v) = spec["versions"].as_array().into_iter().flatten().find(|v| v["name"] == version) else {
        return Vec::new();
    };
    let prefix = model_prefix(group, version);
    let gvk = |k: &str| json!([{"group": group, "kind": k, "version": version}]);
    let type_meta = |doc: &str| json!({"description": doc, "type": "string"});
    let schema = v.pointer("/schema/openAPIV3Schema");
    let preserve = spec["preserveUnknownFields"] == true || schema.is_some_and(|s| s["x-kubernetes-preserve-unknown-fields"] == true);
    let mut kind_schema = match schema {
        Some(s) if !preserve => {
            let mut s = s.clone();
            to_v2(&mut s);
            if let Value::Object(m) = &mut s {
                let props = m.entry("properties").or_insert_with(|| json!({}));
                props["metadata"] = json!({"description": METADATA_DOC, "$ref": format!("{DEFINITION}{OBJECT_META}")});
                props["apiVersion"] = type_meta(API_VERSION_DOC);
                props["kind"] = type_meta(KIND_DOC);
            }
            embedded(&mut s);
            s
        }
        _ => json!({"type": "object"}),
    };
    kind_schema[GVK] = gvk(kind);
    let mut list = json!({
        "description": format!("{list_kind} is a list of {kind}"),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": type_meta(API_VERSION_DOC),
            "items": {"description": format!("List of {plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"), "type": "array", "items": {"$ref": format!("{DEFINITION}{prefix}.{kind}")}},
            "kind": type_meta(KIND_DOC),
            "metadata": {"description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "$ref": format!("{DEFINITION}{LIST_META}")}
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

const METADATA_DOC: &str =
    "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A CRD schema made fit for v2 (and kubectl's v2 models), node by node from the root: no
/// junctors; a nullable node loses its type and children; a node keeping unknown fields loses
/// its children, and its type when an object; an array without items loses its type; nullable
/// properties are not required; defaults are pruned; false flags are not written.
fn to_v2(s: &mut Value) {
    let Value::Object(m) = s else { return };
    for k in ["allOf", "oneOf", "anyOf", "not", "default"] {
        m.remove(k);
    }
    for k in [
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "uniqueItems",
        "exclusiveMaximum",
        "exclusiveMinimum",
    ] {
        if m.get(k) == Some(&Value::Bool(false)) {
            m.remove(k);
        }
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
    let nullable: Vec<String> = m
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, p)| p["nullable"] == true)
        .map(|(n, _)| n.clone())
        .collect();
    let additional_nullable = m.get("additionalProperties").is_some_and(|a| a["nullable"] == true);
    if let Some(Value::Array(req)) = m.get_mut("required") {
        req.retain(|r| !additional_nullable && !r.as_str().is_some_and(|r| nullable.iter().any(|n| n == r)));
        if req.is_empty() {
            m.remove("required");
        }
    }
    if let Some(items) = m.get_mut("items") {
        to_v2(items);
    }
    for p in m.get_mut("properties").and_then(Value::as_object_mut).into_iter().flat_map(|p| p.values_mut()) {
        to_v2(p);
    }
    if let Some(a) = m.get_mut("additionalProperties") {
        to_v2(a);
    }
}

/// Embedded resources (x-kubernetes-embedded-resource) get apiVersion, kind and metadata, and
/// require the first two; those keeping unknown fields are left as they are.
fn embedded(s: &mut Value) {
    let Value::Object(m) = s else { return };
    for p in m.get_mut("properties").and_then(Value::as_object_mut).into_iter().flat_map(|p| p.values_mut()) {
        embedded(p);
    }
    if let Some(items) = m.get_mut("items") {
        embedded(items);
    }
    if let Some(a) = m.get_mut("additionalProperties") {
        embedded(a);
    }
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || m.get("x-kubernetes-embedded-resource") != Some(&Value::Bool(true))
    {
        return;
    }
    let props = m.entry("properties").or_insert_with(|| json!({}));
    props["apiVersion"] = json!({"description": "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources", "type": "string"});
    props["kind"] = json!({"description": "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds", "type": "string"});
    props["metadata"] = json!({"description": METADATA_DOC, "$ref": format!("{DEFINITION}{OBJECT_META}")});
    let req = m.entry("required").or_insert_with(|| json!([]));
    if let Value::Array(r) = req {
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

    #[test]
    fn builtin_definitions_are_v2() {
        let d = builtin_definitions();
        let spec = &d["io.k8s.api.apps.v1.DeploymentSpec"]["properties"];
        assert_eq!(spec["strategy"]["$ref"], "#/definitions/io.k8s.api.apps.v1.DeploymentStrategy");
        assert!(spec["strategy"].get("allOf").is_none() && spec["strategy"].get("default").is_none());
        assert_eq!(d["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"], "string");
        assert!(d.contains_key("io.k8s.apimachinery.pkg.version.Info"));
        assert!(d["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"][GVK].as_array().unwrap().len() > 10);
        // A property named like a keyword stays a property.
        assert!(d["io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"]["properties"].get("default").is_some());
    }

    #[test]
    fn crd_schemas_are_converted_as_apiextensions_converts_them() {
        let crd = json!({"spec": {"group": "example.io", "names": {"kind": "W", "listKind": "WList", "plural": "ws"}, "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {"type": "object", "required": ["a", "n"], "properties": {
                    "a": {"type": "string", "default": "x", "anyOf": [{"minLength": 1}]},
                    "n": {"type": "object", "nullable": true, "properties": {"b": {"type": "string"}}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"c": {"type": "string"}}},
                    "arr": {"type": "array", "x-kubernetes-preserve-unknown-fields": true, "items": {"type": "string"}},
                    "e": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}}
                }}
            }
        }}}]}});
        let defs: Map<String, Value> = custom_definitions(&crd, "v1").into_iter().collect();
        let w = &defs["io.example.v1.W"];
        assert_eq!(w[GVK], json!([{"group": "example.io", "kind": "W", "version": "v1"}]));
        assert_eq!(w["properties"]["metadata"]["$ref"], "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        let spec = &w["properties"]["spec"];
        assert_eq!(spec["required"], json!(["a"]));
        assert_eq!(spec["properties"]["a"], json!({"type": "string"}));
        assert_eq!(spec["properties"]["n"], json!({}));
        assert_eq!(spec["properties"]["free"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(spec["properties"]["arr"], json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert_eq!(spec["properties"]["e"]["required"], json!(["kind", "apiVersion"]));
        assert_eq!(defs["io.example.v1.WList"]["properties"]["items"]["items"]["$ref"], "#/definitions/io.example.v1.W");
    }

    #[test]
    fn accept_headers() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            negotiate(&m)
        };
        assert_eq!(negotiate(&HeaderMap::new()), Some(false));
        assert_eq!(h("application/json"), Some(false));
        assert_eq!(h("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"), Some(true));
        assert_eq!(h("application/json;q=0.9, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"), Some(true));
        assert_eq!(h("*/*"), Some(false));
        assert_eq!(h("application/yaml"), None);
    }
}
