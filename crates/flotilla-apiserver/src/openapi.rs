//! `/openapi/v3`: one document per served group-version with the schemas of its kinds (below),
//! which current kubectl reads first. `/openapi/v2` is derived from the same recorded schemas
//! (`openapi_v2.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::crd_openapi::{Form, LIST_META, OBJECT_META, model_prefix};
use crate::resources::Catalog;

// ---------------------------------------------------------------------------------------------
// OpenAPI v3: what `kubectl explain` reads.
//
// `/openapi/v3` lists one document per served group-version; each document holds, in
// `components.schemas`, the schemas of the kinds served there and everything they refer to.
// Built-in kinds' schemas are a real kube-apiserver's, recorded in
// `flotilla-api/data/openapi-v3-schemas.json` (`scripts/regen-openapi-v3.sh`); a custom
// resource's are built from its CRD as apiextensions-apiserver builds them (`crd_openapi.rs`).
// Paths carry two operations per resource, what clients read of them (`ServedKind::paths`);
// clients of the documents (kubectl explain, kube-rs' schema tools) read the schemas.

const RECORDED: &str = include_str!("../../flotilla-api/data/openapi-v3-schemas.json");

pub(crate) struct Recorded {
    pub schemas: Map<String, Value>,
    /// (group, version, kind) → schema name.
    pub by_gvk: HashMap<(String, String, String), String>,
}

pub(crate) fn recorded() -> &'static Recorded {
    static R: OnceLock<Recorded> = OnceLock::new();
    R.get_or_init(|| {
        let doc: Value = serde_json::from_str(RECORDED).unwrap_or_else(|e| panic!("data/openapi-v3-schemas.json: {e}"));
        let schemas = doc.get("schemas").and_then(Value::as_object).cloned().unwrap_or_default();
        let mut by_gvk = HashMap::new();
        for (name, s) in &schemas {
            for g in s.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten() {
                let f = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                by_gvk.insert((f("group"), f("version"), f("kind")), name.clone());
            }
        }
        Recorded { schemas, by_gvk }
    })
}

/// `api/v1`, `apis/apps/v1`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// Add `name` and every schema it refers to (recorded ones) to `out`.
fn with_references(name: &str, out: &mut BTreeMap<String, Value>) {
    if out.contains_key(name) {
        return;
    }
    let Some(s) = recorded().schemas.get(name) else { return };
    out.insert(name.to_string(), s.clone());
    for r in references(s) {
        with_references(&r, out);
    }
}

fn references(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/components/schemas/")) {
                    out.insert(r.to_string());
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    out
}

/// The schemas apiextensions-apiserver publishes for one version of a CRD (its kind and list),
/// and those they refer to.
fn custom_schemas(crd: &Value, version: &str, out: &mut BTreeMap<String, Value>) {
    out.extend(crate::crd_openapi::schemas(crd, version, crate::crd_openapi::Form::V3));
    for name in [OBJECT_META, LIST_META] {
        with_references(name, out);
    }
}

/// The document of one group-version; None when nothing is served there.
fn v3_document(catalog: &Catalog, crds: &[Value], group: &str, version: &str) -> Option<Value> {
    let resources = catalog.resources(group, version);
    if resources.is_empty() {
        return None;
    }
    let mut schemas = BTreeMap::new();
    let custom = resources.iter().any(|r| r.is_custom());
    if custom {
        for crd in crds.iter().filter(|c| c["spec"]["group"] == group) {
            custom_schemas(crd, version, &mut schemas);
        }
    } else {
        for r in resources {
            for kind in [&r.kind, &r.list_kind] {
                if let Some(name) = recorded().by_gvk.get(&(group.to_string(), version.to_string(), kind.clone())) {
                    with_references(name, &mut schemas);
                }
            }
        }
    }
    let mut paths = Map::new();
    for r in resources.iter().filter(|r| !r.plural.contains('/')) {
        let served = ServedKind::of(r);
        let [kind, list] = served.models();
        let known = |m: Option<String>| m.filter(|m| schemas.contains_key(m));
        let (kind, list) = (known(kind), known(list));
        paths.extend(served.paths([kind.as_deref(), list.as_deref()], Form::V3));
    }
    let title = if custom { "Kubernetes CRD Swagger" } else { "Kubernetes" };
    let info_version = if custom { "v0.1.0".to_string() } else { "unversioned".to_string() };
    Some(json!({"openapi": "3.0.0", "info": {"title": title, "version": info_version}, "paths": paths, "components": {"schemas": schemas}}))
}

/// What the documents' paths say of a served resource.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) struct ServedKind {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub patch: bool,
    pub custom: bool,
}

const DRY_RUN_DOC: &str = "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed";
const FIELD_VALIDATION_DOC: &str = "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.";

impl ServedKind {
    pub fn of(r: &crate::resources::ResourceInfo) -> ServedKind {
        ServedKind {
            group: r.group.clone(),
            version: r.version.clone(),
            plural: r.plural.clone(),
            kind: r.kind.clone(),
            list_kind: r.list_kind.clone(),
            namespaced: r.namespaced,
            patch: r.has_verb("patch"),
            custom: r.is_custom(),
        }
    }

    /// The models (schema names) of the kind and of its list: a CRD's by apiextensions' naming,
    /// a built-in kind's as recorded.
    pub fn models(&self) -> [Option<String>; 2] {
        [&self.kind, &self.list_kind].map(|k| {
            if self.custom {
                Some(format!("{}.{k}", model_prefix(&self.group, &self.version)))
            } else {
                recorded().by_gvk.get(&(self.group.clone(), self.version.clone(), k.clone())).cloned()
            }
        })
    }

    /// The resource's collection path with its list operation and its object path with its
    /// patch operation. Clients read no more of the paths than which kind a path serves
    /// (kubectl explain) and whether patch takes `fieldValidation` (kubectl ≥ 1.27 then leaves
    /// validation to the server, as it does with a real one) and `dryRun` (kubectl before 1.26
    /// refuses `diff` and `--dry-run=server` otherwise); the operations say only that.
    pub fn paths(&self, [model, list_model]: [Option<&str>; 2], form: Form) -> Vec<(String, Value)> {
        let ok = |m: Option<&str>| match (form, m) {
            (Form::V3, Some(m)) => {
                json!({"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{m}")}}}})
            }
            (Form::V2, Some(m)) => json!({"description": "OK", "schema": {"$ref": format!("#/definitions/{m}")}}),
            (_, None) => json!({"description": "OK"}),
        };
        let root = if self.group.is_empty() { format!("/api/{}", self.version) } else { format!("/apis/{}/{}", self.group, self.version) };
        let collection = if self.namespaced { format!("{root}/namespaces/{{namespace}}/{}", self.plural) } else { format!("{root}/{}", self.plural) };
        let gvk = json!({"group": self.group, "kind": self.kind, "version": self.version});
        let list = json!({"description": format!("list or watch objects of kind {}", self.kind), "responses": {"200": ok(list_model)}, "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk});
        let mut out = vec![(collection.clone(), json!({"get": list}))];
        if self.patch {
            let query = |name: &str, doc: &str| match form {
                Form::V3 => json!({"name": name, "in": "query", "description": doc, "schema": {"type": "string", "uniqueItems": true}}),
                Form::V2 => json!({"uniqueItems": true, "type": "string", "description": doc, "name": name, "in": "query"}),
            };
            let patch = json!({
                "description": format!("partially update the specified {}", self.kind),
                "parameters": [query("dryRun", DRY_RUN_DOC), query("fieldValidation", FIELD_VALIDATION_DOC)],
                "responses": {"200": ok(model)},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            });
            out.push((format!("{collection}/{{name}}"), json!({"patch": patch})));
        }
        out
    }
}

/// A document's hash, as its URL carries it (clients cache by URL).
fn hash_of(doc: &Value) -> String {
    hash_of_bytes(doc.to_string().as_bytes())
}

/// A 128-bit hash of `text` in upper-case hex (ETags, URL hashes).
pub(crate) fn hash_of_bytes(text: &[u8]) -> String {
    let (mut a, mut b) = (0xcbf2_9ce4_8422_2325_u64, 0x8422_2325_cbf2_9ce4_u64);
    for &byte in text {
        a = (a ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        b = (b ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(7);
    }
    format!("{a:016X}{b:016X}")
}

fn json_ok(body: &Value) -> Response {
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `/openapi/v3` and `/openapi/v3/<api/v1 | apis/<group>/<version>>`.
pub async fn v3(catalog: &Catalog, store: &dyn flotilla_store::Store, path: &str) -> Option<Response> {
    let crds: Vec<Value> = crate::storage::load_crds(store).await.map(|v| v.into_iter().map(|(c, _)| c).collect()).unwrap_or_default();
    let rest = path.strip_prefix("/openapi/v3").unwrap_or("").trim_matches('/');
    if rest.is_empty() {
        let mut paths = Map::new();
        for g in catalog.groups() {
            for v in &g.versions {
                if let Some(doc) = v3_document(catalog, &crds, &g.name, v) {
                    let p = gv_path(&g.name, v);
                    paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", hash_of(&doc))}));
                }
            }
        }
        return Some(json_ok(&json!({"paths": paths})));
    }
    let (group, version) = match rest.split('/').collect::<Vec<_>>()[..] {
        ["api", v] => ("", v),
        ["apis", g, v] => (g, v),
        _ => return None,
    };
    v3_document(catalog, &crds, group, version).map(|doc| json_ok(&doc))
}
