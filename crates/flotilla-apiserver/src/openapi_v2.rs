//! `/openapi/v2`: one Swagger 2.0 document with the definitions of every kind, what kubectl
//! before 1.27 reads for `explain` and client-side validation (and later kubectl for
//! validation when the server has no v3).
//!
//! Built-in definitions are derived from the recorded OpenAPI v3 schemas (`openapi.rs`): the
//! two documents come from the same Go definitions and differ in form only (`$ref` under
//! `#/definitions/`, a referencing schema's `allOf: [{$ref}]` flattened to `$ref`, defaults
//! pruned, Quantity and IntOrString typed `string`). What v3 lacks is recorded in
//! `flotilla-api/data/openapi-v2-extra.json` (`scripts/regen-openapi-v2.sh`; ADR 0014). A
//! custom resource's definitions are built from its CRD per served version as
//! apiextensions-apiserver builds them for v2 (`crd_openapi.rs`: no junctors, nullable and
//! x-kubernetes-preserve-unknown-fields subtrees untyped, …).
//!
//! Paths name each served resource's kind and say that patch takes `fieldValidation`, which is
//! all clients read of them (`openapi::ServedKind::paths`).
//!
//! The document (JSON and gnostic protobuf, `gnostic.rs`) is rendered once per set of CRDs and
//! shared; a request compares the CRDs' revisions and the served resources with the rendered
//! ones and renders again only when they changed.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::crd_openapi::Form;
use crate::openapi::{ServedKind, recorded};
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
    /// Every served resource (built-in ones can be taken out of service).
    served: BTreeSet<ServedKind>,
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
pub async fn serve(cache: &Cache, catalog: &Catalog, store: &dyn flotilla_store::Store, version: &crate::config::VersionInfo, headers: &HeaderMap) -> Response {
    let Some(protobuf) = negotiate(headers) else {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    };
    let crds: Vec<(Value, i64)> = crate::storage::load_crds(store).await.unwrap_or_default();
    let key = Key {
        crds: crds.iter().map(|(c, rev)| (crate::meta::name(c).to_string(), *rev)).collect(),
        served: catalog.all().filter(|r| !r.plural.contains('/')).map(|r| ServedKind::of(r)).collect(),
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
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').map(|t| t.trim().trim_start_matches("W/")).any(|t| t == "*" || t.as_bytes() == rendered.etag.as_bytes()));
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
    let custom: Vec<(&Value, &str)> = crds
        .iter()
        .flat_map(|(crd, _)| {
            let spec = &crd["spec"];
            let served = |v: &str| {
                key.served.iter().any(|s| {
                    s.custom && s.group == spec["group"].as_str().unwrap_or("") && s.version == v && s.kind == spec["names"]["kind"].as_str().unwrap_or("")
                })
            };
            spec["versions"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).filter(move |v| served(v)).map(move |v| (crd, v))
        })
        .collect();
    let doc = document(&key.info_version, &custom, &key.served);
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

/// The whole document: built-in definitions and those of each served (CRD, version), and the
/// paths of the served resources.
fn document(info_version: &str, custom: &[(&Value, &str)], served: &BTreeSet<ServedKind>) -> Value {
    let mut definitions = builtin_definitions();
    for (crd, version) in custom {
        for (name, schema) in crate::crd_openapi::schemas(crd, version, Form::V2) {
            definitions.insert(name, schema);
        }
    }
    let mut paths = Map::new();
    for r in served {
        let [kind, list] = r.models().map(|m| m.filter(|m| definitions.contains_key(m)));
        paths.extend(r.paths([kind.as_deref(), list.as_deref()], Form::V2));
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": info_version},
        "paths": paths,
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
            "allOf" if v.as_array().is_some_and(|a| a.len() == 1 && a[0].as_object().is_some_and(|r| r.len() == 1 && r.contains_key("$ref"))) => {
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
