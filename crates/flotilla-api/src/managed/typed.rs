//! Walks over objects that know each node's merge semantics: which maps are granular (one
//! owner per key) or atomic, which lists are atomic, sets of values, or keyed by some of their
//! items' fields. Built-in kinds take it from the recorded schema (`data/patch-meta.json`);
//! anything without a schema is deduced from its value: maps granular, lists atomic.

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, PathElement, key_json};
use crate::patch::{NodeShape, SchemaNode};

/// How one node merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape<'a> {
    Scalar,
    Map { atomic: bool },
    List(ListKind<'a>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind<'a> {
    Atomic,
    Set,
    Map(&'a [String]),
}

/// A node's type: from a schema, or deduced from the value.
#[derive(Clone, Copy, Debug)]
pub enum Ty<'a> {
    Schema {
        node: SchemaNode<'a>,
        atomic: bool,
    },
    /// A custom resource: deduced from its values, except `metadata` (ObjectMeta).
    Object {
        metadata: Option<SchemaNode<'a>>,
    },
    Deduced,
}

fn deduce(v: &Value) -> Shape<'static> {
    match v {
        Value::Object(_) => Shape::Map { atomic: false },
        Value::Array(_) => Shape::List(ListKind::Atomic),
        _ => Shape::Scalar,
    }
}

impl<'a> Ty<'a> {
    pub fn of(node: Option<SchemaNode<'a>>) -> Ty<'a> {
        node.map_or(Ty::Deduced, |node| Ty::Schema { node, atomic: false })
    }

    pub fn shape(&self, v: &Value) -> Shape<'a> {
        let Ty::Schema { node, atomic } = self else { return deduce(v) };

        match node.shape() {
            NodeShape::Struct | NodeShape::Map => Shape::Map { atomic: *atomic || node.map_type() == Some("atomic") },
            NodeShape::List => {
                let meta = node.list_meta().unwrap_or_default();
                Shape::List(match meta.list_type {
                    Some("set") => ListKind::Set,
                    Some("map") if !meta.list_map_keys.is_empty() => ListKind::Map(meta.list_map_keys),
                    _ => ListKind::Atomic,
                })
            }
            NodeShape::Scalar => Shape::Scalar,
            NodeShape::Opaque if node.scalar_type().is_some() => Shape::Scalar,
            NodeShape::Opaque | NodeShape::Unknown => deduce(v),
        }
    }

    pub fn child(&self, key: &str) -> Ty<'a> {
        match self {
            Ty::Schema { node, .. } => match node.shape() {
                NodeShape::Struct => match node.field(key) {
                    Ok((child, meta)) => Ty::Schema { node: child, atomic: meta.map_type == Some("atomic") },
                    Err(_) => Ty::Deduced,
                },
                NodeShape::Map => node.values().map_or(Ty::Deduced, |n| Ty::Schema { node: n, atomic: false }),
                _ => Ty::Deduced,
            },
            Ty::Object { metadata } if key == "metadata" => Ty::of(*metadata),
            Ty::Object { .. } | Ty::Deduced => Ty::Deduced,
        }
    }

    /// Whether the API server leaves this node out once it is empty (a Go map or slice).
    fn omitted_when_empty(&self) -> bool {
        matches!(self, Ty::Schema { node, .. } if matches!(node.shape(), NodeShape::Map | NodeShape::List))
    }

    pub fn item(&self) -> Ty<'a> {
        match self {
            Ty::Schema { node, .. } => node.items().map_or(Ty::Deduced, |n| Ty::Schema { node: n, atomic: false }),
            Ty::Object { .. } | Ty::Deduced => Ty::Deduced,
        }
    }
}

/// Key fields the API server defaults before it keys an item (a port's protocol).
fn default_key_field(name: &str) -> Option<Value> {
    (name == "protocol").then(|| Value::String("TCP".into()))
}

/// The path element of a keyed list's item.
pub fn item_key(item: &Value, keys: &[String]) -> Result<PathElement, String> {
    let obj = item.as_object().ok_or_else(|| format!("an item of a list keyed by {keys:?} must be an object"))?;
    let mut fields = Map::new();
    for k in keys {
        match obj.get(k).cloned().or_else(|| default_key_field(k)) {
            Some(v) => {
                fields.insert(k.clone(), v);
            }
            None => return Err(format!("an item of a list keyed by {keys:?} has no {k:?}")),
        }
    }
    Ok(PathElement::Key(key_json(fields.iter())))
}

fn value_element(item: &Value) -> PathElement {
    PathElement::Value(item.to_string())
}

fn is_empty_composite(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Whether `v` is owned as a whole (a leaf of the field set).
fn is_leaf(v: &Value, ty: Ty) -> bool {
    match ty.shape(v) {
        Shape::Scalar | Shape::Map { atomic: true } | Shape::List(ListKind::Atomic) => true,
        Shape::Map { atomic: false } => !matches!(v, Value::Object(m) if !m.is_empty()),
        Shape::List(_) => !matches!(v, Value::Array(a) if !a.is_empty()),
    }
}

/// The fields an applied configuration sets: its leaves and its list items.
pub fn to_set(v: &Value, ty: Ty) -> Result<FieldSet, String> {
    let mut out = FieldSet::default();
    walk_set(v, ty, &mut out)?;
    Ok(out)
}

fn walk_set(v: &Value, ty: Ty, out: &mut FieldSet) -> Result<(), String> {
    match (ty.shape(v), v) {
        (Shape::Map { atomic: false }, Value::Object(m)) => {
            for (k, cv) in m {
                let cty = ty.child(k);
                let node = out.child_mut(PathElement::Field(k.clone()));
                if is_leaf(cv, cty) {
                    node.set_member();
                } else {
                    walk_set(cv, cty, node)?;
                }
            }
        }
        (Shape::List(ListKind::Set), Value::Array(a)) => {
            for item in a {
                out.child_mut(value_element(item)).set_member();
            }
        }
        (Shape::List(ListKind::Map(keys)), Value::Array(a)) => {
            for item in a {
                let node = out.child_mut(item_key(item, keys)?);
                node.set_member();
                walk_set(item, ty.item(), node)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Every node of `v` as a member (what appears or disappears with it).
fn all_nodes(v: &Value, ty: Ty) -> Result<FieldSet, String> {
    let mut out = FieldSet::leaf();
    match (ty.shape(v), v) {
        (Shape::Map { atomic: false }, Value::Object(m)) => {
            for (k, cv) in m {
                out.attach(PathElement::Field(k.clone()), all_nodes(cv, ty.child(k))?);
            }
        }
        (Shape::List(ListKind::Set), Value::Array(a)) => {
            for item in a {
                out.attach(value_element(item), FieldSet::leaf());
            }
        }
        (Shape::List(ListKind::Map(keys)), Value::Array(a)) => {
            for item in a {
                out.attach(item_key(item, keys)?, all_nodes(item, ty.item())?);
            }
        }
        _ => {}
    }
    Ok(out)
}

/// What changed between two versions of an object, path by path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    fn attach(&mut self, pe: PathElement, sub: Comparison) {
        self.added.attach(pe.clone(), sub.added);
        self.modified.attach(pe.clone(), sub.modified);
        self.removed.attach(pe, sub.removed);
    }
}

/// Compare two versions of a node. A node that appears is added with everything under it; a
/// node present on both sides (even as null) is compared inside.
pub fn compare(old: Option<&Value>, new: Option<&Value>, ty: Ty) -> Result<Comparison, String> {
    let mut c = Comparison::default();
    match (old, new) {
        (None, None) => {}
        (None, Some(n)) => c.added = all_nodes(n, ty)?,
        (Some(o), None) => c.removed = all_nodes(o, ty)?,
        (Some(o), Some(n)) => {
            let shape = ty.shape(if n.is_null() { o } else { n });
            let both_empty = is_empty_composite(o) && is_empty_composite(n);
            match shape {
                Shape::Map { atomic: false } if !both_empty && (o.is_object() || o.is_null()) && (n.is_object() || n.is_null()) => {
                    let empty = Map::new();
                    let (om, nm) = (o.as_object().unwrap_or(&empty), n.as_object().unwrap_or(&empty));
                    let keys: std::collections::BTreeSet<&String> = om.keys().chain(nm.keys()).collect();
                    for k in keys {
                        c.attach(PathElement::Field(k.clone()), compare(om.get(k), nm.get(k), ty.child(k))?);
                    }
                }
                Shape::List(ListKind::Set) if !both_empty && (o.is_array() || o.is_null()) && (n.is_array() || n.is_null()) => {
                    let empty = Vec::new();
                    let (oa, na) = (o.as_array().unwrap_or(&empty), n.as_array().unwrap_or(&empty));
                    for item in na.iter().filter(|i| !oa.contains(i)) {
                        c.added.attach(value_element(item), FieldSet::leaf());
                    }
                    for item in oa.iter().filter(|i| !na.contains(i)) {
                        c.removed.attach(value_element(item), FieldSet::leaf());
                    }
                }
                Shape::List(ListKind::Map(keys)) if !both_empty && (o.is_array() || o.is_null()) && (n.is_array() || n.is_null()) => {
                    let empty = Vec::new();
                    let (oa, na) = (o.as_array().unwrap_or(&empty), n.as_array().unwrap_or(&empty));
                    let keyed =
                        |a: &'_ Vec<Value>| -> Result<Vec<(PathElement, Value)>, String> { a.iter().map(|i| Ok((item_key(i, keys)?, i.clone()))).collect() };
                    let (ok, nk) = (keyed(oa)?, keyed(na)?);
                    let find = |list: &[(PathElement, Value)], pe: &PathElement| list.iter().find(|(k, _)| k == pe).map(|(_, v)| v.clone());
                    for (pe, item) in &nk {
                        let before = find(&ok, pe);
                        c.attach(pe.clone(), compare(before.as_ref(), Some(item), ty.item())?);
                    }
                    for (pe, item) in &ok {
                        if find(&nk, pe).is_none() {
                            c.attach(pe.clone(), compare(Some(item), None, ty.item())?);
                        }
                    }
                }
                _ => {
                    if o != n {
                        c.modified = FieldSet::leaf();
                    }
                }
            }
        }
    }
    Ok(c)
}

/// The live object with an applied configuration merged in: granular maps merged key by key,
/// keyed lists item by item, sets by value; everything else replaced.
pub fn merge(live: &Value, config: &Value, ty: Ty) -> Result<Value, String> {
    Ok(match (ty.shape(config), live, config) {
        (Shape::Map { atomic: false }, Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (k, cv) in c {
                let merged = match l.get(k) {
                    Some(lv) => merge(lv, cv, ty.child(k))?,
                    None => cv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Shape::List(ListKind::Set), Value::Array(l), Value::Array(c)) => {
            let mut out = l.clone();
            out.extend(c.iter().filter(|i| !l.contains(i)).cloned());
            Value::Array(out)
        }
        (Shape::List(ListKind::Map(keys)), Value::Array(l), Value::Array(c)) => {
            let ckeys: Vec<PathElement> = c.iter().map(|i| item_key(i, keys)).collect::<Result<_, _>>()?;
            let mut out = Vec::with_capacity(l.len() + c.len());
            let mut seen = Vec::new();
            for item in l {
                let k = item_key(item, keys)?;
                match ckeys.iter().position(|ck| *ck == k) {
                    Some(i) => out.push(merge(item, &c[i], ty.item())?),
                    None => out.push(item.clone()),
                }
                seen.push(k);
            }
            for (i, k) in ckeys.iter().enumerate() {
                if !seen.contains(k) {
                    out.push(c[i].clone());
                }
            }
            Value::Array(out)
        }
        _ => config.clone(),
    })
}

/// Remove the members of `set` from `v`, except where `keep` still owns something under them
/// (then only what nobody keeps goes). Maps emptied by the removal go too.
pub fn remove(v: &mut Value, set: &FieldSet, keep: &FieldSet, ty: Ty) -> Result<(), String> {
    match (ty.shape(v), &mut *v) {
        (Shape::Map { atomic: false }, Value::Object(m)) => {
            for (pe, sub) in set.children() {
                let PathElement::Field(k) = pe else { continue };
                let kept = keep.child(pe).cloned().unwrap_or_default();
                if sub.is_member() && kept.children().next().is_none() {
                    m.remove(k);
                    continue;
                }
                if let Some(cv) = m.get_mut(k) {
                    let cty = ty.child(k);
                    let was_empty = is_empty_composite(cv);
                    remove(cv, sub, &kept, cty)?;
                    // Go leaves out a map or list the removal emptied (omitempty); a struct stays.
                    if !was_empty && is_empty_composite(cv) && cty.omitted_when_empty() && !kept.is_member() {
                        m.remove(k);
                    }
                }
            }
        }
        (Shape::List(ListKind::Set), Value::Array(a)) => {
            a.retain(|item| !set.child(&value_element(item)).is_some_and(|s| s.is_member()));
        }
        (Shape::List(ListKind::Map(keys)), Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for mut item in std::mem::take(a) {
                let pe = item_key(&item, keys)?;
                match set.child(&pe) {
                    Some(sub) => {
                        let kept = keep.child(&pe).cloned().unwrap_or_default();
                        if sub.is_member() && kept.is_empty() {
                            continue;
                        }
                        remove(&mut item, sub, &kept, ty.item())?;
                        out.push(item);
                    }
                    None => out.push(item),
                }
            }
            *a = out;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::PatchSchema;
    use serde_json::json;

    fn deployment() -> Ty<'static> {
        Ty::of(PatchSchema::builtin().kind("apps", "v1", "Deployment"))
    }

    #[test]
    fn an_applied_configuration_owns_its_leaves_and_list_items() {
        let cfg = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"rollingUpdate": {"maxSurge": 1}},
            "template": {"spec": {"containers": [{"name": "app", "image": "nginx", "args": ["a"], "ports": [{"containerPort": 80}], "resources": {}}]}}}});
        let set = to_set(&cfg, deployment()).unwrap();
        // What kube-apiserver 1.37 records for the same configuration.
        assert_eq!(
            set.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:selector": {}, "f:strategy": {"f:rollingUpdate": {"f:maxSurge": {}}},
            "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {},
                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}, "f:resources": {}}}}}}})
        );
    }

    #[test]
    fn appearing_nodes_are_added_whole_and_nodes_present_before_only_inside() {
        let zero =
            json!({"metadata": {}, "spec": {"selector": null, "strategy": {}, "template": {"metadata": {}, "spec": {"containers": null}}}, "status": {}});
        let new = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}, "status": {}});
        let c = compare(Some(&zero), Some(&new), deployment()).unwrap();
        assert_eq!(
            c.added.union(&c.modified).to_fields_v1(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:selector": {}, "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}}, "f:type": {}},
            "f:template": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
        );
        assert!(c.removed.is_empty());
        let back = compare(Some(&new), Some(&zero), deployment()).unwrap();
        assert_eq!(back.removed.to_fields_v1()["f:metadata"], json!({"f:labels": {".": {}, "f:app": {}}}));
    }

    #[test]
    fn merging_follows_list_semantics() {
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}}, "metadata": {"finalizers": ["f1"]}});
        let cfg = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}]}}}, "metadata": {"finalizers": ["f2"]}});
        let m = merge(&live, &cfg, deployment()).unwrap();
        let images: Vec<&str> = m["spec"]["template"]["spec"]["containers"].as_array().unwrap().iter().map(|c| c["image"].as_str().unwrap()).collect();
        assert_eq!(images, ["x", "z", "w"]);
        assert_eq!(m["metadata"]["finalizers"], json!(["f1", "f2"]));
    }

    #[test]
    fn removal_spares_what_others_keep() {
        let mut obj = json!({"metadata": {"labels": {"a": "1"}}, "data": {"x": "1", "y": "2"}});
        let set = FieldSet::from_fields_v1(&json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:x": {}, "f:y": {}}})).unwrap();
        let keep = FieldSet::from_fields_v1(&json!({"f:data": {"f:y": {}}})).unwrap();
        let config_map = Ty::of(PatchSchema::builtin().kind("", "v1", "ConfigMap"));
        remove(&mut obj, &set.difference(&keep), &keep, config_map).unwrap();
        assert_eq!(obj, json!({"metadata": {}, "data": {"y": "2"}}));
    }
}
