//! `fieldOverrider`: JSON-patch operations on a JSON or YAML document held in one string
//! field (ConfigMap data, typically), written back as Karmada writes it: JSON compact with the
//! document's key order kept (json-patch v5 keeps it; added keys go last) and Go's HTML
//! escaping; YAML as go-yaml v2 writes it (see [`super::yaml`]).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::go_json;
use super::yaml::to_yaml;
use crate::federation::karmada::policy::{FieldOverrider, OverriderOperator, PatchOperation};

/// Applies one field overrider to `obj`. YAML operations win over JSON ones when both are
/// given; with neither, the field is emptied (Karmada writes the empty result back).
pub(crate) fn apply(obj: &mut Value, overrider: &FieldOverrider) -> Result<(), String> {
    let pointer = parse_pointer(&overrider.field_path)?;
    let text = match get(obj, &pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(format!("Get object's value by overrider's path({}) is not string", overrider.field_path));
        }
        None => {
            return Err(format!("Get value by overrider's path({}) err: not found", overrider.field_path));
        }
    };
    let yaml = overrider.yaml.as_deref().unwrap_or_default();
    let json = overrider.json.as_deref().unwrap_or_default();
    let result = if !yaml.is_empty() {
        let mut doc: Value = serde_saphyr::from_str(&text).map_err(|e| format!("failed to convert yaml to json: {e}"))?;
        let ops: Vec<_> = yaml.iter().map(|op| super::patch::PatchOp::new(op.operator, op.sub_path.clone(), op_value(op))).collect();
        super::patch::apply(&mut doc, &ops)?;
        to_yaml(&doc)
    } else if !json.is_empty() {
        let mut doc: Node = serde_json::from_str(&text).map_err(|e| format!("invalid JSON in {}: {e}", overrider.field_path))?;
        for op in json {
            doc.apply(op.operator, &op.sub_path, Node::from(op_value(op)))?;
        }
        doc.to_string()
    } else {
        String::new()
    };
    set(obj, &pointer, Value::String(result)).map_err(|e| format!("{}: {e}", overrider.field_path))
}

fn op_value(op: &PatchOperation) -> Value {
    op.value.clone().unwrap_or(Value::Null)
}

/// An RFC 6901 pointer: empty (the whole document) or `/`-led segments with `~1` and `~0`.
fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer.strip_prefix('/').ok_or_else(|| format!("JSON pointer must be empty or start with a \"/\": {pointer}"))?;
    Ok(rest.split('/').map(|s| s.replace("~1", "/").replace("~0", "~")).collect())
}

fn get<'a>(obj: &'a Value, pointer: &[String]) -> Option<&'a Value> {
    pointer.iter().try_fold(obj, |cur, key| match cur {
        Value::Object(m) => m.get(key),
        Value::Array(items) => items.get(key.parse::<usize>().ok()?),
        _ => None,
    })
}

fn set(obj: &mut Value, pointer: &[String], value: Value) -> Result<(), String> {
    let Some((last, parents)) = pointer.split_last() else {
        *obj = value;
        return Ok(());
    };
    let mut cur = obj;
    for key in parents {
        cur = match cur {
            Value::Object(m) => m.get_mut(key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| format!("object has no key {key:?}"))?;
    }
    match cur {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let slot = last.parse::<usize>().ok().and_then(|i| items.get_mut(i)).ok_or_else(|| format!("index {last} out of range"))?;
            *slot = value;
            Ok(())
        }
        _ => Err(format!("cannot set {last:?} on a scalar")),
    }
}

/// A JSON document that remembers the order of its object members.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    Object(Vec<(String, Node)>),
    Array(Vec<Node>),
    Leaf(Value),
}

impl From<Value> for Node {
    fn from(v: Value) -> Node {
        match v {
            Value::Object(m) => Node::Object(m.into_iter().map(|(k, v)| (k, Node::from(v))).collect()),
            Value::Array(a) => Node::Array(a.into_iter().map(Node::from).collect()),
            leaf => Node::Leaf(leaf),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct NodeVisitor;
        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut members: Vec<(String, Node)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Node>()? {
                    match members.iter_mut().find(|(key, _)| *key == k) {
                        Some(slot) => slot.1 = v,
                        None => members.push((k, v)),
                    }
                }
                Ok(Node::Object(members))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Node>()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Leaf(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Leaf(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Leaf(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Leaf(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Leaf(Value::from(v)))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Leaf(Value::String(v)))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Leaf(Value::Null))
            }
        }
        d.deserialize_any(NodeVisitor)
    }
}

impl Node {
    /// One json-patch v5 operation (`add` replaces an existing member in place or appends a
    /// new one; list indices may count from the end).
    fn apply(&mut self, op: OverriderOperator, path: &str, value: Node) -> Result<(), String> {
        let name = match op {
            OverriderOperator::Add => "add",
            OverriderOperator::Remove => "remove",
            OverriderOperator::Replace => "replace",
        };
        let missing = || format!("{name} operation does not apply: doc is missing path: \"{path}\": missing value");
        // As the patch library does, the first segment is skipped unseen.
        let segments: Vec<String> = path.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
        let Some((last, parents)) = segments.split_last() else {
            return Err(missing());
        };
        let mut cur = self;
        for key in parents {
            cur = match cur {
                Node::Object(members) => members.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
                Node::Array(items) => index(key, items.len(), false).and_then(|i| items.get_mut(i)),
                Node::Leaf(_) => None,
            }
            .ok_or_else(missing)?;
        }
        match (cur, op) {
            (Node::Object(members), _) => {
                let at = members.iter().position(|(k, _)| k == last);
                match (op, at) {
                    (OverriderOperator::Add, None) => members.push((last.clone(), value)),
                    (OverriderOperator::Add | OverriderOperator::Replace, Some(i)) => members[i].1 = value,
                    (OverriderOperator::Remove, Some(i)) => {
                        members.remove(i);
                    }
                    (_, None) => {
                        return Err(format!("{name} operation does not apply: doc is missing key: {path}: missing value"));
                    }
                }
            }
            (Node::Array(items), OverriderOperator::Add) => {
                let i = if last == "-" { items.len() } else { index(last, items.len(), true).ok_or_else(missing)? };
                items.insert(i, value);
            }
            (Node::Array(items), OverriderOperator::Remove) => {
                let i = index(last, items.len(), false).ok_or_else(missing)?;
                items.remove(i);
            }
            (Node::Array(items), OverriderOperator::Replace) => {
                let i = index(last, items.len(), false).ok_or_else(missing)?;
                items[i] = value;
            }
            (Node::Leaf(_), _) => return Err(missing()),
        }
        Ok(())
    }
}

/// A list index, negative counting from the end; `insert` allows the one-past-the-end index.
fn index(key: &str, len: usize, insert: bool) -> Option<usize> {
    let i: i64 = key.parse().ok()?;
    let i = if i < 0 { i + len as i64 } else { i };
    let limit = if insert { len } else { len.checked_sub(1)? };
    usize::try_from(i).ok().filter(|i| *i <= limit)
}

impl fmt::Display for Node {
    /// Compact JSON in member order, escaped as Go escapes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Object(members) => {
                f.write_str("{")?;
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}:{v}", go_json(&Value::String(k.clone())))?;
                }
                f.write_str("}")
            }
            Node::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Node::Leaf(v) => f.write_str(&go_json(v)),
        }
    }
}
