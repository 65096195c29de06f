//! Sets of field paths, and their wire form `FieldsV1` (`metadata.managedFields[].fieldsV1`).
//!
//! A path is a list of elements: a field name (`f:replicas`), the key of an item in a list
//! keyed by some of its fields (`k:{"name":"app"}`), the value of an item in a list of
//! unique values (`v:"a"`), or an index (`i:3`). A set is a tree of elements; a node is a
//! member when its own path is in the set (written `".": {}` when it also has children).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    Field(String),
    /// The compact JSON of the key fields, sorted by name: `{"containerPort":80,"protocol":"TCP"}`.
    Key(String),
    /// The compact JSON of the value.
    Value(String),
    Index(u64),
}

impl PathElement {
    fn encode(&self) -> String {
        match self {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(text: &str) -> Result<PathElement, String> {
        let (prefix, rest) = text.split_at_checked(2).ok_or_else(|| format!("invalid path element {text:?}"))?;
        let json = |s: &str| -> Result<String, String> {
            let v: Value = serde_json::from_str(s).map_err(|e| format!("invalid path element {text:?}: {e}"))?;
            Ok(v.to_string())
        };
        match prefix {
            "f:" => Ok(PathElement::Field(rest.to_string())),
            "k:" => {
                let v: Value = serde_json::from_str(rest).map_err(|e| format!("invalid path element {text:?}: {e}"))?;
                let obj = v.as_object().ok_or_else(|| format!("invalid path element {text:?}: a key must be an object"))?;
                Ok(PathElement::Key(key_json(obj.iter())))
            }
            "v:" => Ok(PathElement::Value(json(rest)?)),
            "i:" => rest.parse().map(PathElement::Index).map_err(|_| format!("invalid path element {text:?}")),
            _ => Err(format!("invalid path element {text:?}: expected a prefix f:, k:, v: or i:")),
        }
    }

    /// As kube-apiserver prints it in conflict messages: `.name`, `[name="app"]`, `[="x"]`,
    /// `[3]`.
    pub fn display(&self) -> String {
        match self {
            PathElement::Field(f) => format!(".{f}"),
            PathElement::Key(k) => {
                let v: Value = serde_json::from_str(k).unwrap_or(Value::Null);
                let parts: Vec<String> = v.as_object().into_iter().flatten().map(|(f, x)| format!("{f}={x}")).collect();
                format!("[{}]", parts.join(","))
            }
            PathElement::Value(v) => format!("[={v}]"),
            PathElement::Index(i) => format!("[{i}]"),
        }
    }
}

/// The canonical JSON of a list item's key: fields sorted by name, compact.
pub fn key_json<'a>(fields: impl Iterator<Item = (&'a String, &'a Value)>) -> String {
    let mut sorted: Vec<(&String, &Value)> = fields.collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let parts: Vec<String> = sorted.iter().map(|(k, v)| format!("{}:{}", Value::String((*k).clone()), v)).collect();
    format!("{{{}}}", parts.join(","))
}

/// A path written as kube-apiserver writes it: `.spec.containers[name="app"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(PathElement::display).collect()
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    pub fn is_member(&self) -> bool {
        self.member
    }

    pub fn set_member(&mut self) {
        self.member = true;
    }

    /// A set holding only its own (empty) path.
    pub fn leaf() -> FieldSet {
        FieldSet { member: true, children: BTreeMap::new() }
    }

    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub fn child_mut(&mut self, pe: PathElement) -> &mut FieldSet {
        self.children.entry(pe).or_default()
    }

    pub fn children(&self) -> impl Iterator<Item = (&PathElement, &FieldSet)> {
        self.children.iter()
    }

    /// Attach `sub` under `pe` unless it is empty.
    pub fn attach(&mut self, pe: PathElement, sub: FieldSet) {
        if sub.is_empty() {
            return;
        }
        match self.children.get_mut(&pe) {
            Some(existing) => *existing = existing.union(&sub),
            None => {
                self.children.insert(pe, sub);
            }
        }
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (pe, sub) in &other.children {
            out.attach(pe.clone(), sub.clone());
        }
        out
    }

    /// The paths of `self` that are not paths of `other` (path by path).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && !other.member, children: BTreeMap::new() };
        for (pe, sub) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) => sub.difference(o),
                None => sub.clone(),
            };
            out.attach(pe.clone(), d);
        }
        out
    }

    /// `self` without the members of `other` and everything under them.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && !other.member, children: BTreeMap::new() };
        for (pe, sub) in &self.children {
            let d = match other.children.get(pe) {
                Some(o) if o.member => FieldSet::default(),
                Some(o) => sub.recursive_difference(o),
                None => sub.clone(),
            };
            out.attach(pe.clone(), d);
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet { member: self.member && other.member, children: BTreeMap::new() };
        for (pe, sub) in &self.children {
            if let Some(o) = other.children.get(pe) {
                out.attach(pe.clone(), sub.intersection(o));
            }
        }
        out
    }

    /// Every member path, in order.
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect(&mut prefix, &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (pe, sub) in &self.children {
            prefix.push(pe.clone());
            sub.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` object.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (pe, sub) in &self.children {
            m.insert(pe.encode(), sub.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Parse a `fieldsV1` object (the root is never a member).
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let mut set = Self::parse(v)?;
        set.member = false;
        Ok(set)
    }

    fn parse(v: &Value) -> Result<FieldSet, String> {
        let obj = v.as_object().ok_or("fieldsV1 nodes must be objects")?;
        let mut out = FieldSet { member: obj.is_empty(), children: BTreeMap::new() };
        for (k, sub) in obj {
            if k == "." {
                out.member = true;
                continue;
            }
            let child = Self::parse(sub)?;
            out.children.insert(PathElement::decode(k)?, child);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_with_dots_only_where_a_member_has_children() {
        let wire = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}, "f:finalizers": {"v:\"a\"": {}}}});
        let set = FieldSet::from_fields_v1(&wire).unwrap();
        assert_eq!(set.to_fields_v1(), wire);
        let paths: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
        assert_eq!(
            paths,
            [".metadata.labels", ".metadata.labels.app", ".spec.containers[name=\"app\"]", ".spec.containers[name=\"app\"].image", ".spec.finalizers[=\"a\"]"]
        );
    }

    #[test]
    fn keys_are_sorted_and_compact() {
        let item = json!({"protocol": "TCP", "containerPort": 80});
        assert_eq!(key_json(item.as_object().unwrap().iter()), r#"{"containerPort":80,"protocol":"TCP"}"#);
        assert_eq!(
            PathElement::decode(r#"k:{"protocol": "TCP", "containerPort": 80}"#).unwrap(),
            PathElement::Key(r#"{"containerPort":80,"protocol":"TCP"}"#.into())
        );
        assert_eq!(PathElement::Key(r#"{"containerPort":80,"protocol":"TCP"}"#.into()).display(), r#"[containerPort=80,protocol="TCP"]"#);
    }

    #[test]
    fn set_algebra() {
        let a = FieldSet::from_fields_v1(&json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}})).unwrap();
        let b = FieldSet::from_fields_v1(&json!({"f:data": {"f:b": {}}})).unwrap();
        assert_eq!(a.difference(&b).to_fields_v1(), json!({"f:data": {".": {}, "f:a": {}}}));
        assert_eq!(a.intersection(&b).to_fields_v1(), json!({"f:data": {"f:b": {}}}));
        let data = FieldSet::from_fields_v1(&json!({"f:data": {}})).unwrap();
        assert!(a.recursive_difference(&data).is_empty());
        assert_eq!(b.union(&data).to_fields_v1(), json!({"f:data": {".": {}, "f:b": {}}}));
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
    }
}
