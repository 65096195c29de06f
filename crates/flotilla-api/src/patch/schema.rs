//! Patch metadata of the built-in kinds, recorded from a real kube-apiserver's `/openapi/v2`
//! by `scripts/regen-patch-meta.sh` into `data/patch-meta.json` (never typed by hand).
//!
//! [`PatchSchema::builtin`] parses that file once; [`PatchSchema::kind`] finds a kind's root
//! [`SchemaNode`], which navigates like the Go struct the real server patches against:
//! [`SchemaNode::field`] looks up a struct field (failing for unknown fields, as Go does),
//! [`SchemaNode::items`] / [`SchemaNode::values`] step into lists and maps.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use serde_json::Value;

const BUILTIN: &str = include_str!("../../data/patch-meta.json");

/// The patch metadata of a set of kinds.
#[derive(Debug)]
pub struct PatchSchema {
    kinds: HashMap<String, usize>,
    definitions: Vec<Definition>,
    source_version: String,
}

#[derive(Debug)]
struct Definition {
    /// OpenAPI name, e.g. `io.k8s.api.core.v1.Container`.
    name: String,
    /// Properties for struct-like definitions; `None` for opaque ones (Time, Quantity,
    /// IntOrString, RawExtension, JSON): Go structs with custom JSON and no visible fields.
    properties: Option<BTreeMap<String, Property>>,
    /// `type` of definitions without properties (`string` for Time, Quantity, IntOrString).
    scalar_type: Option<String>,
    format: Option<String>,
    map_type: Option<String>,
}

/// A property's (or list item's, or map value's) schema and extensions.
#[derive(Debug, Default)]
struct Property {
    shape: Shape,
    patch_strategy: Option<String>,
    patch_merge_key: Option<String>,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    map_type: Option<String>,
}

#[derive(Debug, Default)]
enum Shape {
    /// `string`, `integer`, `number`, `boolean`.
    Scalar(String),
    Ref(usize),
    List(Box<Property>),
    Map(Box<Property>),
    /// A property with no type information at all.
    #[default]
    Unknown,
}

/// What a field lookup found besides the field's schema: the `x-kubernetes-*` extensions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldMeta<'a> {
    /// `x-kubernetes-patch-strategy`, e.g. `merge`, `merge,retainKeys`, `retainKeys`,
    /// `replace`; empty when absent.
    pub patch_strategy: &'a str,
    /// `x-kubernetes-patch-merge-key`; empty when absent.
    pub patch_merge_key: &'a str,
    /// `x-kubernetes-list-type` (`atomic`, `set`, `map`).
    pub list_type: Option<&'a str>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: &'a [String],
    /// `x-kubernetes-map-type` on the field (`atomic`, `granular`).
    pub map_type: Option<&'a str>,
}

/// A position in a kind's schema. Cheap to copy.
#[derive(Clone, Copy)]
pub struct SchemaNode<'a> {
    schema: &'a PatchSchema,
    kind: NodeKind<'a>,
}

#[derive(Clone, Copy)]
enum NodeKind<'a> {
    Definition(&'a Definition),
    Scalar(&'a str),
    List(&'a Property),
    Map(&'a Property),
    Unknown,
}

impl std::fmt::Debug for SchemaNode<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            NodeKind::Definition(d) => write!(f, "SchemaNode({})", d.name),
            NodeKind::Scalar(t) => write!(f, "SchemaNode({t})"),
            NodeKind::List(_) => f.write_str("SchemaNode(list)"),
            NodeKind::Map(_) => f.write_str("SchemaNode(map)"),
            NodeKind::Unknown => f.write_str("SchemaNode(unknown)"),
        }
    }
}

/// What kind of value a node describes, in the words Go's reflection would use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeShape {
    /// A struct with named fields (most definitions).
    Struct,
    /// A Go struct with custom JSON and no visible fields (Time, Quantity, RawExtension…).
    Opaque,
    List,
    Map,
    Scalar,
    Unknown,
}

impl<'a> SchemaNode<'a> {
    fn of(schema: &'a PatchSchema, p: &'a Property) -> Self {
        let kind = match &p.shape {
            Shape::Scalar(t) => NodeKind::Scalar(t),
            Shape::Ref(i) => NodeKind::Definition(&schema.definitions[*i]),
            Shape::List(_) => NodeKind::List(p),
            Shape::Map(_) => NodeKind::Map(p),
            Shape::Unknown => NodeKind::Unknown,
        };
        SchemaNode { schema, kind }
    }

    pub fn shape(&self) -> NodeShape {
        match self.kind {
            NodeKind::Definition(d) if d.properties.is_some() => NodeShape::Struct,
            NodeKind::Definition(_) => NodeShape::Opaque,
            NodeKind::Scalar(_) => NodeShape::Scalar,
            NodeKind::List(_) => NodeShape::List,
            NodeKind::Map(_) => NodeShape::Map,
            NodeKind::Unknown => NodeShape::Unknown,
        }
    }

    /// The OpenAPI definition name, for definition nodes.
    pub fn definition(&self) -> Option<&'a str> {
        match self.kind {
            NodeKind::Definition(d) => Some(&d.name),
            _ => None,
        }
    }

    /// The scalar type (`string`, `integer`, …), also for opaque definitions that have one.
    pub fn scalar_type(&self) -> Option<&'a str> {
        match self.kind {
            NodeKind::Scalar(t) => Some(t),
            NodeKind::Definition(d) => d.scalar_type.as_deref(),
            _ => None,
        }
    }

    /// `format` of an opaque definition (`date-time`, `int-or-string`).
    pub fn format(&self) -> Option<&'a str> {
        match self.kind {
            NodeKind::Definition(d) => d.format.as_deref(),
            _ => None,
        }
    }

    /// `x-kubernetes-map-type` of a definition (`atomic` for e.g. `LabelSelector`'s parts).
    pub fn map_type(&self) -> Option<&'a str> {
        match self.kind {
            NodeKind::Definition(d) => d.map_type.as_deref(),
            NodeKind::Map(p) => p.map_type.as_deref(),
            _ => None,
        }
    }

    /// The name Go's reflection gives the struct (`Container`), used in error messages.
    pub fn go_name(&self) -> &'a str {
        match self.kind {
            NodeKind::Definition(d) => d.name.rsplit('.').next().unwrap_or(&d.name),
            _ => "",
        }
    }

    /// Go's `reflect.Kind` name for this node (`struct`, `map`, `slice`, `string`, …).
    pub fn go_kind(&self) -> &'static str {
        match self.kind {
            NodeKind::Definition(_) => "struct",
            NodeKind::List(_) => "slice",
            NodeKind::Map(_) => "map",
            NodeKind::Scalar("integer") => "int64",
            NodeKind::Scalar("number") => "float64",
            NodeKind::Scalar("boolean") => "bool",
            NodeKind::Scalar(_) => "string",
            NodeKind::Unknown => "interface",
        }
    }

    /// Field names of a struct node, sorted.
    pub fn field_names(&self) -> Vec<&'a str> {
        match self.kind {
            NodeKind::Definition(Definition { properties: Some(p), .. }) => p.keys().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// Looks a struct field up, as the real server's strategic merge patch does: unknown
    /// fields, opaque structs and non-structs fail with the messages Go prints.
    pub fn field(&self, name: &str) -> Result<(SchemaNode<'a>, FieldMeta<'a>), String> {
        match self.kind {
            NodeKind::Definition(d) => {
                let found = d.properties.as_ref().and_then(|p| p.get(name));
                match found {
                    Some(p) => Ok((SchemaNode::of(self.schema, p), meta(p))),
                    None => Err(format!("unable to find api field in struct {} for the json field {}", self.go_name(), super::go_format::quote(name))),
                }
            }
            _ => Err(format!("merging an object in json but data type is not struct, instead is: {}", self.go_kind())),
        }
    }

    /// Looks a list field up and returns its element schema (Go's `LookupPatchMetadataForSlice`).
    pub fn list_field(&self, name: &str) -> Result<(SchemaNode<'a>, FieldMeta<'a>), String> {
        let (node, meta) = self.field(name)?;
        match node.kind {
            NodeKind::List(p) => {
                let Shape::List(items) = &p.shape else { unreachable!("list node without items") };
                if matches!(items.shape, Shape::List(_)) {
                    return Err("unexpected slice of slice".to_string());
                }
                Ok((SchemaNode::of(self.schema, items), meta))
            }
            _ => Err(format!("expected slice or array type, but got: {}", self.go_kind())),
        }
    }

    /// The `x-kubernetes-list-*` extensions of a list node.
    pub fn list_meta(&self) -> Option<FieldMeta<'a>> {
        match self.kind {
            NodeKind::List(p) => Some(meta(p)),
            _ => None,
        }
    }

    /// The element schema of a list node.
    pub fn items(&self) -> Option<SchemaNode<'a>> {
        match self.kind {
            NodeKind::List(Property { shape: Shape::List(items), .. }) => Some(SchemaNode::of(self.schema, items)),
            _ => None,
        }
    }

    /// The value schema of a map node.
    pub fn values(&self) -> Option<SchemaNode<'a>> {
        match self.kind {
            NodeKind::Map(Property { shape: Shape::Map(values), .. }) => Some(SchemaNode::of(self.schema, values)),
            _ => None,
        }
    }

    /// The child under `key` whatever the node: a struct field, a map value, nothing for
    /// anything else. For walks that must not fail.
    pub fn child(&self, key: &str) -> Option<SchemaNode<'a>> {
        match self.kind {
            NodeKind::Definition(_) => self.field(key).ok().map(|(n, _)| n),
            NodeKind::Map(_) => self.values(),
            _ => None,
        }
    }
}

fn meta(p: &Property) -> FieldMeta<'_> {
    FieldMeta {
        patch_strategy: p.patch_strategy.as_deref().unwrap_or(""),
        patch_merge_key: p.patch_merge_key.as_deref().unwrap_or(""),
        list_type: p.list_type.as_deref(),
        list_map_keys: &p.list_map_keys,
        map_type: p.map_type.as_deref(),
    }
}

impl PatchSchema {
    /// The built-in kinds' metadata (parsed once, on first use).
    pub fn builtin() -> &'static PatchSchema {
        static SCHEMA: OnceLock<PatchSchema> = OnceLock::new();
        SCHEMA.get_or_init(|| {
            // The file is generated and committed; a parse failure is a build defect that
            // every test exercising patches reports at once.
            PatchSchema::from_json_str(BUILTIN).unwrap_or_else(|e| panic!("data/patch-meta.json: {e}"))
        })
    }

    /// Parses metadata in the format of `data/patch-meta.json`.
    pub fn from_json_str(text: &str) -> Result<PatchSchema, String> {
        let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let defs = doc.get("definitions").and_then(Value::as_object).ok_or("no definitions")?;
        let index: HashMap<&str, usize> = defs.keys().enumerate().map(|(i, k)| (k.as_str(), i)).collect();
        let mut definitions = Vec::with_capacity(defs.len());
        for (name, d) in defs {
            let properties = match d.get("properties").and_then(Value::as_object) {
                Some(props) => {
                    let mut out = BTreeMap::new();
                    for (k, v) in props {
                        out.insert(k.clone(), property(v, &index).map_err(|e| format!("{name}.{k}: {e}"))?);
                    }
                    Some(out)
                }
                None => None,
            };
            let s = |k: &str| d.get(k).and_then(Value::as_str).map(str::to_string);
            definitions.push(Definition { name: name.clone(), properties, scalar_type: s("type"), format: s("format"), map_type: s("mapType") });
        }
        let mut kinds = HashMap::new();
        for (key, def) in doc.get("kinds").and_then(Value::as_object).ok_or("no kinds")? {
            let def = def.as_str().ok_or("kind entry is not a string")?;
            let i = *index.get(def).ok_or_else(|| format!("kind {key}: no definition {def}"))?;
            kinds.insert(key.clone(), i);
        }
        let source_version = doc.pointer("/source/kubernetesVersion").and_then(Value::as_str).unwrap_or("").to_string();
        Ok(PatchSchema { kinds, definitions, source_version })
    }

    /// The root node of a kind (`group` empty for the core group), if the metadata has it.
    pub fn kind(&self, group: &str, version: &str, kind: &str) -> Option<SchemaNode<'_>> {
        let key = if group.is_empty() { format!("{version}/{kind}") } else { format!("{group}/{version}/{kind}") };
        self.kinds.get(&key).map(|&i| SchemaNode { schema: self, kind: NodeKind::Definition(&self.definitions[i]) })
    }

    /// [`PatchSchema::kind`] from an `apiVersion` (`apps/v1`, `v1`) and a kind.
    pub fn kind_for(&self, api_version: &str, kind: &str) -> Option<SchemaNode<'_>> {
        match api_version.split_once('/') {
            Some((group, version)) => self.kind(group, version, kind),
            None => self.kind("", api_version, kind),
        }
    }

    /// A definition by its OpenAPI name.
    pub fn definition(&self, name: &str) -> Option<SchemaNode<'_>> {
        self.definitions.iter().find(|d| d.name == name).map(|d| SchemaNode { schema: self, kind: NodeKind::Definition(d) })
    }

    /// `group/version/Kind` keys (`v1/Pod` for the core group) of every kind, sorted.
    pub fn kinds(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.kinds.keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    /// The Kubernetes version the metadata was recorded from.
    pub fn source_version(&self) -> &str {
        &self.source_version
    }
}

fn property(v: &Value, index: &HashMap<&str, usize>) -> Result<Property, String> {
    let resolve = |name: &str| index.get(name).copied().ok_or_else(|| format!("unknown definition {name}"));
    match v {
        Value::String(s) => match s.strip_prefix('#') {
            Some(r) => Ok(Property { shape: Shape::Ref(resolve(r)?), ..Property::default() }),
            None => Ok(Property { shape: Shape::Scalar(s.clone()), ..Property::default() }),
        },
        Value::Object(o) => {
            let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
            let shape = if let Some(r) = o.get("ref").and_then(Value::as_str) {
                Shape::Ref(resolve(r)?)
            } else if let Some(items) = o.get("items") {
                Shape::List(Box::new(property(items, index)?))
            } else if let Some(values) = o.get("values") {
                Shape::Map(Box::new(property(values, index)?))
            } else if let Some(t) = s("type") {
                match t.as_str() {
                    "object" => Shape::Map(Box::default()),
                    "array" => Shape::List(Box::default()),
                    _ => Shape::Scalar(t),
                }
            } else {
                Shape::Unknown
            };
            Ok(Property {
                shape,
                patch_strategy: s("patchStrategy"),
                patch_merge_key: s("patchMergeKey"),
                list_type: s("listType"),
                list_map_keys: o
                    .get("listMapKeys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default(),
                map_type: s("mapType"),
            })
        }
        other => Err(format!("unexpected property {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_has_the_merge_keys_the_reference_lists() {
        let s = PatchSchema::builtin();
        let pod_spec = s.definition("io.k8s.api.core.v1.PodSpec").unwrap();
        for (field, key, strategy) in [
            ("containers", "name", "merge"),
            ("initContainers", "name", "merge"),
            ("volumes", "name", "merge,retainKeys"),
            ("imagePullSecrets", "name", "merge"),
            ("hostAliases", "ip", "merge"),
            ("topologySpreadConstraints", "topologyKey", "merge"),
        ] {
            let (_, m) = pod_spec.list_field(field).unwrap();
            assert_eq!((m.patch_merge_key, m.patch_strategy), (key, strategy), "{field}");
        }
        let deploy = s.kind("apps", "v1", "Deployment").unwrap();
        let (spec, _) = deploy.field("spec").unwrap();
        assert_eq!(spec.field("strategy").unwrap().1.patch_strategy, "retainKeys");
        let (meta, _) = deploy.field("metadata").unwrap();
        let (item, m) = meta.list_field("finalizers").unwrap();
        assert_eq!((m.patch_strategy, m.patch_merge_key, item.shape()), ("merge", "", NodeShape::Scalar));
        assert!(s.kind("", "v1", "ConfigMap").is_some());
        assert!(s.kind_for("autoscaling/v1", "Scale").is_some());
        assert!(s.kind("example.com", "v1", "Widget").is_none());
    }

    #[test]
    fn lookups_fail_like_go() {
        let s = PatchSchema::builtin();
        let c = s.definition("io.k8s.api.core.v1.Container").unwrap();
        assert_eq!(c.field("nope").unwrap_err(), "unable to find api field in struct Container for the json field \"nope\"");
        let raw = s.definition("io.k8s.apimachinery.pkg.runtime.RawExtension").unwrap();
        assert_eq!(raw.shape(), NodeShape::Opaque);
        assert!(raw.field("x").unwrap_err().contains("struct RawExtension"));
        let meta = s.definition("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").unwrap();
        let (labels, _) = meta.field("labels").unwrap();
        assert_eq!(labels.field("a").unwrap_err(), "merging an object in json but data type is not struct, instead is: map");
        assert_eq!(meta.list_field("labels").unwrap_err(), "expected slice or array type, but got: struct");
    }
}
