//! Property tests with oracles:
//! - JSON patch agrees with the `json-patch` crate (RFC 6902), operation by operation, except
//!   where the real server is deliberately more lenient (tested by the tables and goldens):
//!   `test` of `null` on a missing or null path, `replace` of a missing object member, `copy`
//!   from a missing object member;
//! - merge patch agrees with the `json-patch` crate's RFC 7386 merge, for patches whose lists
//!   hold no objects with `null` members (where the server prunes);
//! - a strategic merge patch without directives or lists equals a merge patch;
//! - applying a directive-free strategic merge patch twice gives the result of once.

mod rfc;

use flotilla_api::patch::{PatchSchema, SchemaNode, json_patch, merge_patch, strategic_merge_patch};
use proptest::prelude::*;
use rfc::{Rfc6902, merge_patch_prunes_lists, rfc6902_expectation};
use serde_json::{Map, Value, json};

const KEYS: &[&str] = &["a", "b", "c", "a/b", "c~d", "-", "0"];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..10).prop_map(Value::from),
        Just(json!(1.5)),
        "[a-c]{0,2}".prop_map(Value::String),
    ]
}

fn json_value(with_nulls: bool) -> impl Strategy<Value = Value> {
    let leaf = scalar().prop_filter("no nulls", move |v| with_nulls || !v.is_null());
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(proptest::sample::select(KEYS).prop_map(str::to_string), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_object(with_nulls: bool) -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(proptest::sample::select(KEYS).prop_map(str::to_string), json_value(with_nulls), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Every pointer into `v` (not the root), plus for lists one past the end and `-`.
fn pointers(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{prefix}/{}", escape(k));
                out.push(p.clone());
                pointers(child, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let p = format!("{prefix}/{i}");
                out.push(p.clone());
                pointers(child, &p, out);
            }
            out.push(format!("{prefix}/{}", items.len()));
            out.push(format!("{prefix}/-"));
        }
        _ => {}
    }
}

/// A document and operations whose paths mostly exist in it.
fn doc_and_ops() -> impl Strategy<Value = (Value, Vec<Value>)> {
    json_object(true).prop_flat_map(|doc| {
        let mut paths = Vec::new();
        pointers(&doc, "", &mut paths);
        paths.extend(["/zz".to_string(), "/a/zz".to_string(), "/a/0".to_string()]);
        let path = proptest::sample::select(paths);
        let op = (proptest::sample::select(&["add", "remove", "replace", "move", "copy", "test"][..]), path.clone(), path, json_value(true)).prop_map(
            |(op, path, from, value)| match op {
                "move" | "copy" => json!({"op": op, "from": from, "path": path}),
                "remove" => json!({"op": op, "path": path}),
                _ => json!({"op": op, "path": path, "value": value}),
            },
        );
        (Just(doc), proptest::collection::vec(op, 1..6))
    })
}

/// Merge patches whose lists hold no objects with `null` members.
fn merge_patch_value() -> impl Strategy<Value = Value> {
    json_object(true).prop_filter("the server prunes nulls in lists", |p| !merge_patch_prunes_lists(p))
}

/// A value shaped by `node` (lists left out unless `lists`): known struct fields, map
/// values, scalars of the right type; `null`s in patches when `nulls`.
fn shaped(node: SchemaNode<'static>, depth: u32, lists: bool, nulls: bool) -> BoxedStrategy<Value> {
    use flotilla_api::patch::NodeShape;
    let scalar_of = |t: Option<&str>| -> BoxedStrategy<Value> {
        match t {
            Some("integer") => (0i64..3).prop_map(Value::from).boxed(),
            Some("boolean") => any::<bool>().prop_map(Value::Bool).boxed(),
            _ => "[a-c]{1,2}".prop_map(Value::String).boxed(),
        }
    };
    let maybe_null = move |s: BoxedStrategy<Value>| -> BoxedStrategy<Value> { if nulls { prop_oneof![1 => Just(Value::Null), 4 => s].boxed() } else { s } };
    match node.shape() {
        NodeShape::Struct if depth > 0 => {
            let fields: Vec<(String, BoxedStrategy<Value>)> = node
                .field_names()
                .into_iter()
                .filter_map(|name| {
                    let (child, meta) = node.field(name).ok()?;
                    let is_list = child.shape() == NodeShape::List;
                    if is_list && !lists {
                        return None;
                    }
                    if is_list && meta.patch_strategy.contains("merge") && meta.patch_merge_key.is_empty() && child.items()?.shape() != NodeShape::Scalar {
                        return None;
                    }
                    Some((name.to_string(), maybe_null(shaped(child, depth - 1, lists, nulls))))
                })
                .collect();
            if fields.is_empty() {
                return Just(json!({})).boxed();
            }
            let most = fields.len().min(3);
            proptest::sample::subsequence(fields.into_iter().map(|(k, s)| s.prop_map(move |v| (k.clone(), v))).collect::<Vec<_>>(), 0..=most)
                .prop_flat_map(|chosen| chosen)
                .prop_map(|pairs: Vec<(String, Value)>| Value::Object(pairs.into_iter().collect::<Map<_, _>>()))
                .boxed()
        }
        NodeShape::Map if depth > 0 => {
            let values = node.values().map(|v| shaped(v, depth - 1, lists, nulls)).unwrap_or_else(|| scalar_of(None));
            proptest::collection::btree_map("[a-c]", maybe_null(values), 0..3).prop_map(|m| Value::Object(m.into_iter().collect())).boxed()
        }
        NodeShape::List if depth > 0 => {
            let items = node.items().map(|i| shaped(i, depth - 1, lists, false)).unwrap_or_else(|| scalar_of(None));
            proptest::collection::vec(items, 0..3).prop_map(Value::Array).boxed()
        }
        NodeShape::Scalar | NodeShape::Opaque => scalar_of(node.scalar_type()),
        _ => Just(json!({})).boxed(),
    }
}

fn deployment() -> SchemaNode<'static> {
    PatchSchema::builtin().kind("apps", "v1", "Deployment").unwrap()
}

/// Merge-keyed list elements need their key; and keys must be unique within a list (the
/// real objects' validation guarantees it), so elements are given distinct keys.
fn with_merge_keys(v: Value, node: SchemaNode<'static>) -> Value {
    use flotilla_api::patch::NodeShape;
    match (v, node.shape()) {
        (Value::Object(m), NodeShape::Struct) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let Ok((child, meta)) = node.field(&k) else { return (k, v) };
                    let v = match (v, child.items()) {
                        (Value::Array(items), Some(item_node)) if !meta.patch_merge_key.is_empty() => {
                            let key = meta.patch_merge_key;
                            let mut seen = std::collections::HashSet::new();
                            Value::Array(
                                items
                                    .into_iter()
                                    .enumerate()
                                    .filter_map(|(i, item)| {
                                        let Value::Object(mut m) = with_merge_keys(item, item_node) else {
                                            return None;
                                        };
                                        let id = m.get(key).cloned().unwrap_or_else(|| json!(format!("k{i}")));
                                        if id.is_null() || !seen.insert(id.to_string()) {
                                            return None;
                                        }
                                        m.insert(key.to_string(), id);
                                        Some(Value::Object(m))
                                    })
                                    .collect(),
                            )
                        }
                        (Value::Array(items), _) if meta.patch_strategy.contains("merge") => {
                            // Primitive sets: no duplicates, as validation requires.
                            let mut seen = std::collections::HashSet::new();
                            Value::Array(items.into_iter().filter(|x| seen.insert(x.to_string())).collect())
                        }
                        (v, _) => with_merge_keys(v, child),
                    };
                    (k, v)
                })
                .collect(),
        ),
        (Value::Object(m), NodeShape::Map) => {
            let values = node.values();
            Value::Object(m.into_iter().map(|(k, v)| (k, values.map_or(v.clone(), |n| with_merge_keys(v, n)))).collect())
        }
        (v, _) => v,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn json_patch_agrees_with_rfc6902((doc, ops) in doc_and_ops()) {
        let mut ours = doc.clone();
        let mut theirs = doc;
        for op in &ops {
            let rfc: json_patch::Patch = serde_json::from_value(json!([op])).unwrap();
            let ours_next = json_patch(&ours, &json!([op]));
            let mut theirs_next = theirs.clone();
            let theirs_ok = json_patch::patch(&mut theirs_next, &rfc).is_ok();
            match (ours_next, theirs_ok) {
                (Ok(a), true) => {
                    prop_assert_eq!(&a, &theirs_next, "op {} on {}", op, ours);
                    ours = a;
                    theirs = theirs_next;
                }
                (Err(_), false) => break,
                (Ok(_), false) if rfc6902_expectation(&ours, op) == Rfc6902::ServerLenient => break,
                (Err(_), true) if rfc6902_expectation(&ours, op) == Rfc6902::ServerStricter => break,
                (ours_result, _) => prop_assert!(false, "op {} on {}: ours {:?}, RFC ok={}", op, ours, ours_result, theirs_ok),
            }
        }
    }

    #[test]
    fn merge_patch_agrees_with_rfc7386(doc in json_object(true), patch in merge_patch_value()) {
        let mut theirs = doc.clone();
        json_patch::merge(&mut theirs, &patch);
        prop_assert_eq!(merge_patch(&doc, &patch), theirs);
    }

    #[test]
    fn smp_without_lists_is_a_merge_patch(
        doc in shaped(deployment(), 4, false, false),
        patch in shaped(deployment(), 4, false, true),
    ) {
        let smp = strategic_merge_patch(&doc, &patch, Some(deployment()));
        prop_assert_eq!(smp, Ok(merge_patch(&doc, &patch)), "patch {}", patch);
    }

    #[test]
    fn smp_applied_twice_is_applied_once(
        doc in shaped(deployment(), 5, true, false),
        patch in shaped(deployment(), 5, true, true),
    ) {
        let doc = with_merge_keys(doc, deployment());
        let patch = with_merge_keys(patch, deployment());
        let once = strategic_merge_patch(&doc, &patch, Some(deployment()));
        if let Ok(once) = once {
            let twice = strategic_merge_patch(&once, &patch, Some(deployment()));
            prop_assert_eq!(twice, Ok(once), "patch {}", patch);
        }
    }
}
