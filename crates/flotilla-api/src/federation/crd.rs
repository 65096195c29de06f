//! CustomResourceDefinitions generated from Rust types, and the structural-schema rules they obey.
//!
//! Fixed kinds derive `kube::CustomResource` (kube-derive without kube's client): the derive gives
//! each kind its `Resource` impl and a CRD whose schema schemars generates from the type.
//! [`crd_of`] turns that into plain JSON and applies the few normalisations that make the
//! generated schema read like the upstream controller-gen output (no `nullable`, Kubernetes
//! integer formats). KubeFed's `Federated<Kind>` CRDs are built per target kind from one generic
//! type with [`openapi_schema`] and [`CrdDefinition`].
//!
//! [`structural_problems`] is the checker the tests run over every CRD: a schema must be
//! structural (kube-apiserver refuses to serve one that is not, and Flotilla's API server prunes
//! and validates with it).

use kube_core::CustomResourceExt;
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

/// The CRD of a kind that derives `CustomResource`, as an `apiextensions.k8s.io/v1` object ready
/// to POST.
pub fn crd_of<K: CustomResourceExt>() -> Value {
    let mut crd = serde_json::to_value(K::crd()).expect("a derived CRD serialises");
    if let Some(versions) = crd.pointer_mut("/spec/versions").and_then(Value::as_array_mut) {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                normalize_schema(schema);
            }
        }
    }
    crd
}

/// The OpenAPI v3 schema of `T`, generated the way kube-derive generates a CRD schema (inlined
/// subschemas, structural rewrites) and then normalised like [`crd_of`].
pub fn openapi_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(kube_core::schema::StructuralSchemaRewriter)
        .with_transform(kube_core::schema::OptionalEnum)
        .with_transform(kube_core::schema::OptionalIntOrString)
        .into_generator();
    let mut schema = serde_json::to_value(generator.into_root_schema_for::<T>()).expect("a generated schema serialises");
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    normalize_schema(&mut schema);
    schema
}

/// Upstream CRDs (controller-gen) never say `nullable`, and use only the integer formats
/// Kubernetes knows; schemars adds `nullable` (and a `null` enum member) to optional fields and
/// `uint*` formats to unsigned integers. Both are rewritten here so pruning and defaulting behave as upstream:
/// an explicit `null` in an optional field is dropped rather than stored.
pub fn normalize_schema(node: &mut Value) {
    match node {
        Value::Object(object) => {
            object.remove("nullable");
            if let Some(Value::Array(values)) = object.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            if let Some(Value::String(format)) = object.get("format") {
                let replacement = match format.as_str() {
                    "uint8" | "uint16" | "int8" | "int16" => Some("int32"),
                    "uint32" | "uint64" | "uint" => Some("int64"),
                    _ => None,
                };
                if let Some(replacement) = replacement {
                    object.insert("format".into(), json!(replacement));
                }
            }
            for child in object.values_mut() {
                normalize_schema(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_schema),
        _ => {}
    }
}

/// Schema of a field that holds an arbitrary embedded object the API server must keep as it is
/// (`runtime.RawExtension` with `+kubebuilder:pruning:PreserveUnknownFields`): Work manifests,
/// raw member status, KubeFed templates.
pub fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of a field that holds any JSON value (`apiextensionsv1.JSON`): override values.
pub fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `Vec` of [`preserve_unknown_object`].
pub fn preserve_unknown_objects(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let items = preserve_unknown_object(generator);
    schemars::json_schema!({
        "type": "array",
        "items": items,
    })
}

/// Whether a CRD is cluster-scoped or namespaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Namespaced => "Namespaced",
            Scope::Cluster => "Cluster",
        }
    }
}

/// One printer column of a CRD version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
}

impl PrinterColumn {
    pub fn new(name: &str, type_: &str, json_path: &str) -> Self {
        PrinterColumn { name: name.into(), type_: type_.into(), json_path: json_path.into() }
    }
}

/// What a CRD says besides its schema; used for CRDs built at run time (KubeFed's generated
/// `Federated<Kind>` types).
#[derive(Clone, Debug, PartialEq)]
pub struct CrdDefinition {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub scope: Scope,
    pub status_subresource: bool,
    pub printer_columns: Vec<PrinterColumn>,
}

impl CrdDefinition {
    /// The `apiextensions.k8s.io/v1` object for this definition with `schema` as the
    /// `openAPIV3Schema` of its one version.
    pub fn to_crd(&self, schema: Value) -> Value {
        let mut names = Map::new();
        if !self.categories.is_empty() {
            names.insert("categories".into(), json!(self.categories));
        }
        names.insert("kind".into(), json!(self.kind));
        names.insert("listKind".into(), json!(format!("{}List", self.kind)));
        names.insert("plural".into(), json!(self.plural));
        if !self.short_names.is_empty() {
            names.insert("shortNames".into(), json!(self.short_names));
        }
        names.insert("singular".into(), json!(self.singular));

        let mut version = Map::new();
        if !self.printer_columns.is_empty() {
            let columns: Vec<Value> = self.printer_columns.iter().map(|c| json!({"jsonPath": c.json_path, "name": c.name, "type": c.type_})).collect();
            version.insert("additionalPrinterColumns".into(), Value::Array(columns));
        }
        version.insert("name".into(), json!(self.version));
        version.insert("schema".into(), json!({ "openAPIV3Schema": schema }));
        version.insert("served".into(), json!(true));
        version.insert("storage".into(), json!(true));
        if self.status_subresource {
            version.insert("subresources".into(), json!({"status": {}}));
        }

        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("{}.{}", self.plural, self.group) },
            "spec": {
                "group": self.group,
                "names": names,
                "scope": self.scope.as_str(),
                "versions": [Value::Object(version)],
            },
        })
    }
}

/// Keywords a structural schema may not use anywhere (apiextensions-apiserver's
/// `ValidateStructural`): references and schema composition that changes types.
const FORBIDDEN_KEYWORDS: &[&str] = &["$ref", "$schema", "definitions", "$defs", "uniqueItems", "patternProperties", "dependencies", "const"];

/// Problems that make `schema` non-structural, each as `<path>: <what>`. Empty means structural.
///
/// Rules checked: every node below the root has a `type` unless it is
/// `x-kubernetes-int-or-string` or `x-kubernetes-preserve-unknown-fields`; the root is an
/// object; `properties` and `additionalProperties` are not both set; `items` is one schema, not a
/// list; nothing under `anyOf`/`oneOf`/`allOf`/`not` declares types, properties, defaults or
/// descriptions (value validations only); no forbidden keyword; `x-kubernetes-embedded-resource`
/// only on objects; `x-kubernetes-int-or-string` never together with a `type`.
pub fn structural_problems(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if schema.get("type") != Some(&json!("object")) {
        problems.push("<root>: type must be object".into());
    }
    check_node(schema, "", &mut problems);
    problems
}

fn check_node(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        if node != &Value::Bool(true) || path.is_empty() {
            problems.push(format!("{path}: schema must be an object"));
        }
        return;
    };
    let here = if path.is_empty() { "<root>" } else { path };
    for keyword in FORBIDDEN_KEYWORDS {
        if object.contains_key(*keyword) {
            problems.push(format!("{here}: forbidden keyword {keyword}"));
        }
    }
    let flag = |key: &str| object.get(key) == Some(&Value::Bool(true));
    let int_or_string = flag("x-kubernetes-int-or-string");
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    let type_ = object.get("type").and_then(Value::as_str);
    match type_ {
        None if !int_or_string && !preserve => problems.push(format!("{here}: type is missing")),
        Some(t) if !["object", "array", "string", "integer", "number", "boolean"].contains(&t) => problems.push(format!("{here}: unknown type {t}")),
        Some(_) if int_or_string => problems.push(format!("{here}: x-kubernetes-int-or-string must not have a type")),
        _ => {}
    }
    if object.get("type").is_some_and(|t| !t.is_string()) {
        problems.push(format!("{here}: type must be one string"));
    }
    if flag("x-kubernetes-embedded-resource") && type_ != Some("object") {
        problems.push(format!("{here}: x-kubernetes-embedded-resource needs type object"));
    }
    if object.contains_key("properties") && object.contains_key("additionalProperties") {
        problems.push(format!("{here}: properties and additionalProperties are exclusive"));
    }
    if let Some(properties) = object.get("properties") {
        match properties.as_object() {
            Some(properties) => {
                for (name, child) in properties {
                    check_node(child, &format!("{path}.{name}"), problems);
                }
            }
            None => problems.push(format!("{here}: properties must be a map")),
        }
    }
    if let Some(additional) = object.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(additional, &format!("{path}[*]"), problems);
    }
    match object.get("items") {
        Some(items @ Value::Object(_)) => check_node(items, &format!("{path}[]"), problems),
        Some(_) => problems.push(format!("{here}: items must be a single schema")),
        None if type_ == Some("array") => problems.push(format!("{here}: array without items")),
        None => {}
    }
    for junctor in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = object.get(junctor).and_then(Value::as_array) {
            for (i, branch) in branches.iter().enumerate() {
                check_value_validation(branch, &format!("{here}.{junctor}[{i}]"), problems);
            }
        }
    }
    if let Some(not) = object.get("not") {
        check_value_validation(not, &format!("{here}.not"), problems);
    }
}

/// Under a junctor only value validations are allowed; int-or-string nodes may say
/// `type: integer` / `type: string` in their `anyOf` (upstream Quantity and IntOrString).
fn check_value_validation(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        problems.push(format!("{path}: must be an object"));
        return;
    };
    for key in ["properties", "additionalProperties", "items", "default", "description", "nullable"] {
        if object.contains_key(key) {
            problems.push(format!("{path}: {key} is not allowed under a junctor"));
        }
    }
    if let Some(t) = object.get("type").and_then(Value::as_str)
        && t != "integer"
        && t != "string"
    {
        problems.push(format!("{path}: type {t} is not allowed under a junctor"));
    }
}

/// Walks every `openAPIV3Schema` of a CRD object and returns [`structural_problems`] for each.
pub fn crd_structural_problems(crd: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for version in crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten() {
        let name = version.get("name").and_then(Value::as_str).unwrap_or("?");
        match version.pointer("/schema/openAPIV3Schema") {
            Some(schema) => problems.extend(structural_problems(schema).into_iter().map(|p| format!("{name}: {p}"))),
            None => problems.push(format!("{name}: no openAPIV3Schema")),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checker_flags_untyped_and_forbidden_nodes() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"description": "no type"},
                "b": {"x-kubernetes-preserve-unknown-fields": true},
                "c": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "d": {"type": "array", "items": {"$ref": "#/definitions/x"}},
            },
        });
        let problems = structural_problems(&schema);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with(".a: type is missing")));
        assert!(problems.iter().any(|p| p.contains("forbidden keyword $ref")));
    }

    #[test]
    fn normalize_drops_nullable_and_unsigned_formats() {
        let mut schema = json!({"type": "integer", "format": "uint32", "nullable": true});
        normalize_schema(&mut schema);
        assert_eq!(schema, json!({"type": "integer", "format": "int64"}));
    }
}
