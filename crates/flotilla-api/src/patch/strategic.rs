//! Kubernetes strategic merge patch, as kube-apiserver applies it to built-in kinds.
//!
//! - Maps merge recursively; `null` deletes a key.
//! - Lists whose field has patch strategy `merge` merge element-wise by the patch merge key
//!   (`containers` by `name`); primitive `merge` lists are set unions (`finalizers`); other
//!   lists are replaced. A field with strategy `replace` (PodDisruptionBudget `spec.selector`)
//!   is replaced whole.
//! - Directives: `$patch: replace | delete` in maps and list elements, `$retainKeys`,
//!   `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`.
//! - The order of a merged list: `$setElementOrder` first, then the patch's order, then the
//!   object's, interleaved as the server interleaves them.
//!
//! The server then decodes the result into its Go struct, which drops directive keys and
//! `null`s; [`strategic_merge_patch`] returns that decoded form (outside opaque fields such as
//! `RawExtension`), so the result can be stored as it is.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::go_format::{self, GoType, go_eq, go_type, type_name};
use super::schema::{NodeShape, SchemaNode};
use super::{PatchError, drop_null_members, json_kind};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

type Result<T> = std::result::Result<T, PatchError>;

/// Applies a strategic merge patch to `doc` with the patch metadata of its kind. `None` for
/// `schema` (a kind without metadata, i.e. a custom resource) answers 415 as the real server
/// does. A `null` patch changes nothing; a patch that is not an object is a 400.
pub fn strategic_merge_patch(doc: &Value, patch: &Value, schema: Option<SchemaNode<'_>>) -> Result<Value> {
    let schema = schema.ok_or(PatchError::StrategicUnsupported)?;
    check_shape(patch)?;
    let Value::Object(original) = doc else {
        return Err(PatchError::StrategicFormat("invalid JSON document".to_string()));
    };
    let patch = match patch {
        Value::Object(p) => p.clone(),
        _ => Map::new(),
    };
    let merged = merge_map(original.clone(), patch, schema)?;
    Ok(decode_nulls(Value::Object(merged), schema))
}

/// What decoding into the kind's Go struct does to `null`s and patch directives: `null`
/// members and directive keys (`$patch`, `$retainKeys`, `$setElementOrder/…`,
/// `$deleteFromPrimitiveList/…`) are dropped, `null` values of string/number/boolean maps
/// become `""`/`0`/`false`; opaque fields (`RawExtension`, CRD `JSON`) are left alone.
/// [`strategic_merge_patch`] returns its result in this form; the API server can apply it to
/// JSON and merge patch results of built-in kinds too.
pub fn decode_nulls(value: Value, schema: SchemaNode<'_>) -> Value {
    decoded(value, Some(schema))
}

/// A strategic merge patch must be an object (or `null`).
pub(super) fn check_shape(patch: &Value) -> Result<()> {
    match patch {
        Value::Object(_) | Value::Null => Ok(()),
        other => Err(PatchError::Decode(format!("json: cannot unmarshal {} into Go value of type map[string]interface {{}}", json_kind(other)))),
    }
}

fn fail(message: impl Into<String>) -> PatchError {
    PatchError::Strategic(message.into())
}

fn bad_arg(expected: &str, actual: &Value) -> PatchError {
    fail(format!("expected a {expected}, but received a {}", type_name(actual)))
}

fn no_merge_key(element: &Value, key: &str) -> PatchError {
    fail(format!("map: {} does not contain declared merge key: {key}", go_format::v(element)))
}

fn bad_directive(directive: &Value, map: &Value) -> PatchError {
    fail(format!("unknown patch type: {} in map: {}", go_format::s(directive), go_format::v(map)))
}

/// `$deleteFromPrimitiveList/x` → `x`; a key with the prefix but not this shape is a 400.
fn directive_target(key: &str, prefix: &str) -> Result<String> {
    match key.split_once('/') {
        Some((head, rest)) if head == prefix => Ok(rest.to_string()),
        _ => Err(PatchError::StrategicFormat(
            if prefix == DELETE_FROM_PRIMITIVE_LIST { "invalid patch format of primitive list" } else { "invalid patch format of setElementOrder list" }
                .to_string(),
        )),
    }
}

/// The field's patch strategy besides `retainKeys` (which only says `$retainKeys` may come).
fn strategy_without_retain_keys(strategies: &str) -> Result<&str> {
    let parts: Vec<&str> = strategies.split(',').collect();
    match parts.as_slice() {
        [one] => Ok(if *one == "retainKeys" { "" } else { one }),
        ["retainKeys", other] | [other, "retainKeys"] => Ok(other),
        _ => Err(fail(format!("unexpected patch strategy: [{}]", parts.join(" ")))),
    }
}

fn merge_map(mut original: Map<String, Value>, mut patch: Map<String, Value>, schema: SchemaNode<'_>) -> Result<Map<String, Value>> {
    if let Some(directive) = patch.get(PATCH) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(PATCH);
                Ok(patch)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(bad_directive(directive, &Value::Object(patch.clone()))),
        };
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_ordered_lists(&mut original, &mut patch, schema)?;

    // The real server walks the patch in Go map order (random); sorted keys make ours fixed.
    let mut entries: Vec<(String, Value)> = patch.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, patch_value) in entries {
        let (key, delete_list) =
            if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) { (directive_target(&key, DELETE_FROM_PRIMITIVE_LIST)?, true) } else { (key, false) };
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let same_type = original.get(&key).is_some_and(|current| go_type(current) == go_type(&patch_value));
        if !same_type {
            if !delete_list {
                set_new_value(&mut original, key, patch_value);
            }
            continue;
        }
        let current = original.remove(&key).unwrap_or(Value::Null);
        let merged = match (current, patch_value) {
            (Value::Object(current), Value::Object(p)) => {
                let (sub, meta) = schema.field(&key).map_err(fail)?;
                if strategy_without_retain_keys(meta.patch_strategy)? == "replace" { Value::Object(p) } else { Value::Object(merge_map(current, p, sub)?) }
            }
            (Value::Array(current), Value::Array(p)) => {
                let (items, meta) = schema.list_field(&key).map_err(fail)?;
                let strategy = strategy_without_retain_keys(meta.patch_strategy)?;
                Value::Array(merge_list_field(current, p, items, strategy, meta.patch_merge_key, delete_list)?)
            }
            (_, scalar) => scalar,
        };
        original.insert(key, merged);
    }
    Ok(original)
}

/// A value the object did not have (or had with another type) is taken from the patch with
/// its `null`s dropped and its `$patch` maps removed; a `$patch` map itself removes the key.
fn set_new_value(original: &mut Map<String, Value>, key: String, mut value: Value) {
    drop_null_members(&mut value);
    match remove_directives(value) {
        Some(v) => {
            original.insert(key, v);
        }
        None => {
            original.remove(&key);
        }
    }
}

/// Drops maps holding `$patch` (as list elements or map values); `None` if `value` is one.
fn remove_directives(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) => {
            if map.contains_key(PATCH) {
                return None;
            }
            Some(Value::Object(map.into_iter().filter_map(|(k, v)| remove_directives(v).map(|v| (k, v))).collect()))
        }
        Value::Array(items) => Some(Value::Array(items.into_iter().filter_map(remove_directives).collect())),
        other => Some(other),
    }
}

/// `$retainKeys: [..]`: the object keeps only those keys, and the patch may set no others.
fn apply_retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<()> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let bad = || PatchError::StrategicFormat("invalid patch format of retainKeys".to_string());
    let Value::Array(keys) = retain else { return Err(bad()) };
    let retained = |k: &str| keys.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        let exempt = v.is_null() || k.starts_with(DELETE_FROM_PRIMITIVE_LIST) || k.starts_with(SET_ELEMENT_ORDER);
        if !exempt && !retained(k) {
            return Err(bad());
        }
    }
    original.retain(|k, _| retained(k));
    Ok(())
}

/// Handles every `$setElementOrder/<list>` of this map: merges `<list>` (if the patch has it)
/// and orders the result; the list is then done and leaves the patch.
fn merge_ordered_lists(original: &mut Map<String, Value>, patch: &mut Map<String, Value>, schema: SchemaNode<'_>) -> Result<()> {
    let mut keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    keys.sort();
    for key in keys {
        let order = match patch.remove(&key) {
            Some(Value::Array(order)) => order,
            Some(other) => return Err(bad_arg("[]interface {}", &other)),
            None => continue,
        };
        let list_key = directive_target(&key, SET_ELEMENT_ORDER)?;
        let as_list = |v: Option<&Value>| -> Result<Option<Vec<Value>>> {
            match v {
                None => Ok(None),
                Some(Value::Array(items)) => Ok(Some(items.clone())),
                Some(other) => Err(bad_arg("[]interface {}", other)),
            }
        };
        let original_list = as_list(original.get(&list_key))?;
        let patch_list = as_list(patch.get(&list_key))?;
        let (items, meta) = schema.list_field(&list_key).map_err(fail)?;
        let strategy = strategy_without_retain_keys(meta.patch_strategy)?;
        let merge_key = meta.patch_merge_key;
        check_order_matches_patch(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let merged = match (&original_list, &patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => p.iter().cloned().filter_map(remove_directives).collect(),
            (Some(o), Some(p)) => merge_list_field(o.clone(), p.clone(), items, strategy, merge_key, false)?,
            (None, None) => continue,
        };
        let (in_patch, server_only) = partition(&merged, &order, merge_key)?;
        let original_list = original_list.unwrap_or_default();
        let kind = element_type(&[&original_list, patch_list.as_deref().unwrap_or(&[])])?;
        let ordered = order_elements(in_patch, server_only, &order, &original_list, merge_key, kind)?;
        original.insert(list_key.clone(), Value::Array(ordered));
        patch.remove(&list_key);
    }
    Ok(())
}

/// The patch list's elements must appear in `$setElementOrder` in the same relative order
/// (elements carrying `$patch` aside).
fn check_order_matches_patch(patch_list: &[Value], order: &[Value], merge_key: &str) -> Result<()> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let kept = if merge_key.is_empty() { patch_list.to_vec() } else { split_deletes(patch_list.to_vec())?.0 };
    let (mut p, mut o) = (0, 0);
    while p < kept.len() && o < order.len() {
        if kept[p].get(PATCH).is_some() && kept[p].is_object() {
            p += 1;
            continue;
        }
        if merge_key_values_equal(&kept[p], &order[o], merge_key)? {
            p += 1;
        }
        o += 1;
    }
    if p < kept.len() && o >= order.len() {
        return Err(fail(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            go_format::v(&Value::Array(patch_list.to_vec())),
            go_format::v(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn merge_key_values_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool> {
    if merge_key.is_empty() {
        return Ok(go_eq(left, right));
    }
    let key_of = |v: &Value| -> Result<Value> {
        let map = v.as_object().ok_or_else(|| bad_arg("map[string]interface {}", v))?;
        map.get(merge_key).cloned().ok_or_else(|| no_merge_key(v, merge_key))
    };
    Ok(go_eq(&key_of(left)?, &key_of(right)?))
}

fn merge_list_field(original: Vec<Value>, patch: Vec<Value>, items: SchemaNode<'_>, strategy: &str, merge_key: &str, delete_list: bool) -> Result<Vec<Value>> {
    // A delete list works whatever the field's strategy.
    if strategy == "merge" || delete_list { merge_list(original, patch, items, merge_key, delete_list) } else { Ok(patch) }
}

fn merge_list(original: Vec<Value>, patch: Vec<Value>, items: SchemaNode<'_>, merge_key: &str, delete_list: bool) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = element_type(&[&original, &patch])?;
    let (original, patch, merged) = if kind != GoType::Map {
        if delete_list {
            let doomed = Positions::of(&patch, Some);
            return Ok(original.into_iter().filter(|v| doomed.find(v).is_none()).collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        let mut seen = Positions::default();
        for v in original.iter().chain(&patch) {
            if seen.find(v).is_none() {
                seen.add(v, merged.len());
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(fail(format!("cannot merge lists without merge key for {}", items.go_kind())));
        }
        let (original, patch) = apply_element_directives(original, patch, merge_key)?;
        let merged = merge_elements(original.clone(), &patch, merge_key, items)?;
        (original, patch, merged)
    };
    let (in_patch, server_only) = partition(&merged, &patch, merge_key)?;
    order_elements(in_patch, server_only, &patch, &original, merge_key, kind)
}

/// Elements carrying `$patch`: `delete` removes the object's elements with that key,
/// `replace` makes the patch's other elements the whole list. Returns the (new) original and
/// the patch without those elements.
fn apply_element_directives(mut original: Vec<Value>, patch: Vec<Value>, merge_key: &str) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for element in patch {
        let Some(directive) = element.get(PATCH) else {
            plain.push(element);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let key = element.get(merge_key).ok_or_else(|| no_merge_key(&element, merge_key))?;
                for (i, v) in original.iter().enumerate() {
                    if !v.is_object() {
                        return Err(fail(format!("value for key {i} is not a map")));
                    }
                }
                original.retain(|v| !v.get(merge_key).is_some_and(|k| go_eq(k, key)));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(fail("merging lists cannot yet be specified in the patch")),
            _ => return Err(bad_directive(directive, &element)),
        }
    }
    Ok(if replace { (plain, Vec::new()) } else { (original, plain) })
}

/// Merges each patch element into the object's element with the same merge key value, or
/// appends it.
fn merge_elements(mut original: Vec<Value>, patch: &[Value], merge_key: &str, items: SchemaNode<'_>) -> Result<Vec<Value>> {
    let mut positions = Positions::default();
    for (i, v) in original.iter().enumerate() {
        let Some(map) = v.as_object() else { return Err(fail(format!("value for key {i} is not a map"))) };
        if let Some(k) = map.get(merge_key) {
            positions.add_if_absent(k, i);
        }
    }
    for element in patch {
        let key = element.get(merge_key).ok_or_else(|| no_merge_key(element, merge_key))?;
        match positions.find(key) {
            Some(i) => {
                let current = std::mem::take(&mut original[i]);
                let (Value::Object(current), Value::Object(p)) = (current, element.clone()) else {
                    unreachable!("elements were checked to be maps");
                };
                original[i] = Value::Object(merge_map(current, p, items)?);
            }
            None => {
                positions.add_if_absent(key, original.len());
                original.push(element.clone());
            }
        }
    }
    Ok(original)
}

/// Splits `merged` into the elements `by` names (by merge key, or by value for primitives)
/// and the rest.
fn partition(merged: &[Value], by: &[Value], merge_key: &str) -> Result<(Vec<Value>, Vec<Value>)> {
    let (mut named, mut rest) = (Vec::new(), Vec::new());
    if merge_key.is_empty() {
        let names = Positions::of(by, Some);
        for v in merged {
            if names.find(v).is_some() { named.push(v.clone()) } else { rest.push(v.clone()) }
        }
        return Ok((named, rest));
    }
    let mut names = Positions::default();
    for (i, v) in by.iter().enumerate() {
        let map = v.as_object().ok_or_else(|| fail(format!("value for key {i} is not a map")))?;
        if let Some(k) = map.get(merge_key) {
            names.add_if_absent(k, i);
        }
    }
    for v in merged {
        let map = v.as_object().ok_or_else(|| bad_arg("map[string]interface {}", v))?;
        let key = map.get(merge_key).ok_or_else(|| no_merge_key(v, merge_key))?;
        if names.find(key).is_some() { named.push(v.clone()) } else { rest.push(v.clone()) }
    }
    Ok((named, rest))
}

/// Orders a merged list as the server does: the patch's elements in `patch_order`, the
/// object's own in `server_order`, then interleaved by where they stood in the object.
fn order_elements(
    in_patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>> {
    let in_patch = sort_by_order(in_patch, patch_order, merge_key, kind)?;
    let server_only = sort_by_order(server_only, server_order, merge_key, kind)?;
    let at = Positions::of(server_order, |v| order_key(v, merge_key, kind));
    let position = |v: &Value| order_key(v, merge_key, kind).and_then(|k| at.find(k));
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(in_patch.len() + server_only.len());
    // Take the server-only element first only when both stood in the object and it stood
    // earlier.
    while i < server_only.len() || j < in_patch.len() {
        let take_server = if i >= server_only.len() {
            false
        } else if j >= in_patch.len() {
            true
        } else {
            matches!((position(&server_only[i]), position(&in_patch[j])), (Some(a), Some(b)) if a < b)
        };
        if take_server {
            out.push(server_only[i].clone());
            i += 1;
        } else {
            out.push(in_patch[j].clone());
            j += 1;
        }
    }
    Ok(out)
}

/// What identifies an element for ordering: its merge key value for maps (absent and `null`
/// alike), itself otherwise.
fn order_key<'v>(v: &'v Value, merge_key: &str, kind: GoType) -> Option<&'v Value> {
    static NULL: Value = Value::Null;
    if kind == GoType::Map { Some(v.as_object().and_then(|m| m.get(merge_key)).unwrap_or(&NULL)) } else { Some(v) }
}

/// Sorts `items` by their position in `order` (stable); for maps, elements carrying
/// `$patch: delete` go last. Elements missing from `order` compare as the server's comparator
/// makes them compare (always "less"), with the same insertion sort.
fn sort_by_order(items: Vec<Value>, order: &[Value], merge_key: &str, kind: GoType) -> Result<Vec<Value>> {
    let (mut items, deletes) = if kind == GoType::Map {
        for v in items.iter().chain(order) {
            let map = v.as_object().ok_or_else(|| bad_arg("map[string]interface {}", v))?;
            if !map.contains_key(merge_key) {
                return Err(no_merge_key(v, merge_key));
            }
        }
        split_deletes(items)?
    } else {
        (items, Vec::new())
    };
    let at = Positions::of(order, |v| order_key(v, merge_key, kind));
    let keys: Vec<Option<usize>> = items.iter().map(|v| order_key(v, merge_key, kind).and_then(|k| at.find(k))).collect();
    if keys.iter().all(Option::is_some) {
        // A consistent order: any stable sort gives the server's result.
        let mut pairs: Vec<(Option<usize>, Value)> = keys.into_iter().zip(items).collect();
        pairs.sort_by_key(|(k, _)| *k);
        items = pairs.into_iter().map(|(_, v)| v).collect();
    } else {
        let mut pairs: Vec<(Option<usize>, Value)> = keys.into_iter().zip(items).collect();
        let less = |a: Option<usize>, b: Option<usize>| match (a, b) {
            (Some(a), Some(b)) => a < b,
            _ => true,
        };
        for i in 1..pairs.len() {
            let mut j = i;
            while j > 0 && less(pairs[j].0, pairs[j - 1].0) {
                pairs.swap(j, j - 1);
                j -= 1;
            }
        }
        items = pairs.into_iter().map(|(_, v)| v).collect();
    }
    items.extend(deletes);
    Ok(items)
}

/// (elements without `$patch: delete`, elements with it); every element must be a map.
fn split_deletes(items: Vec<Value>) -> Result<(Vec<Value>, Vec<Value>)> {
    let (mut keep, mut delete) = (Vec::new(), Vec::new());
    for v in items {
        let map = v.as_object().ok_or_else(|| bad_arg("map[string]interface {}", &v))?;
        if map.get(PATCH).and_then(Value::as_str) == Some("delete") { delete.push(v) } else { keep.push(v) }
    }
    Ok((keep, delete))
}

/// The one Go type all elements share; lists of lists are refused.
fn element_type(lists: &[&[Value]]) -> Result<GoType> {
    let mut kind = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let t = go_type(v);
        match kind {
            None => {
                if t == GoType::List {
                    return Err(PatchError::StrategicUnprocessable("lists of lists are not supported".to_string()));
                }
                if t == GoType::Nil {
                    // The real server crashes on this input (a recovered panic: 500).
                    return Err(fail("list element is null"));
                }
                kind = Some(t);
            }
            Some(k) if k != t => {
                return Err(fail(format!("list element types are not identical: {}", go_format::v_lists(lists))));
            }
            Some(_) => {}
        }
    }
    kind.ok_or_else(|| fail("no elements in any of the given slices"))
}

/// First positions of values by Go equality, for constant-time lookups in long lists.
#[derive(Default)]
struct Positions {
    by_text: HashMap<String, usize>,
}

impl Positions {
    fn of<'v>(list: &'v [Value], key: impl Fn(&'v Value) -> Option<&'v Value>) -> Self {
        let mut p = Positions::default();
        for (i, v) in list.iter().enumerate() {
            if let Some(k) = key(v) {
                p.add_if_absent(k, i);
            }
        }
        p
    }

    /// The text of a value, which differs exactly when Go's `==` says the values differ
    /// (integers and floats print differently).
    fn text(v: &Value) -> String {
        serde_json::to_string(v).unwrap_or_default()
    }

    fn add(&mut self, v: &Value, at: usize) {
        self.by_text.insert(Self::text(v), at);
    }

    fn add_if_absent(&mut self, v: &Value, at: usize) {
        self.by_text.entry(Self::text(v)).or_insert(at);
    }

    fn find(&self, v: &Value) -> Option<usize> {
        self.by_text.get(&Self::text(v)).copied()
    }
}

/// The patched object as the server's decode into its Go struct leaves it: no directive keys,
/// no `null` members (`null` map values become the zero value). Opaque fields
/// (`RawExtension`, CRD `JSON`) are left as they are.
fn decoded(value: Value, schema: Option<SchemaNode<'_>>) -> Value {
    let shape = schema.map(|s| s.shape());
    match value {
        Value::Object(map) if shape == Some(NodeShape::Opaque) => Value::Object(map),
        Value::Object(map) => {
            let is_map = shape == Some(NodeShape::Map);
            let values = schema.and_then(|s| s.values());
            let mut out = Map::new();
            for (k, v) in map {
                if is_directive_key(&k) {
                    continue;
                }
                let child = if is_map { values } else { schema.and_then(|s| s.child(&k)) };
                if v.is_null() {
                    if let Some(zero) = is_map.then(|| zero_value(values)).flatten() {
                        out.insert(k, zero);
                    }
                    continue;
                }
                out.insert(k, decoded(v, child));
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.items());
            Value::Array(items.into_iter().map(|v| decoded(v, item_schema)).collect())
        }
        other => other,
    }
}

fn is_directive_key(k: &str) -> bool {
    k == PATCH || k == RETAIN_KEYS || k.starts_with(SET_ELEMENT_ORDER) || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// Go's zero value for a scalar map value type (`""`, `0`, `false`).
fn zero_value(schema: Option<SchemaNode<'_>>) -> Option<Value> {
    match schema?.scalar_type()? {
        "string" => Some(Value::String(String::new())),
        "integer" | "number" => Some(Value::from(0)),
        "boolean" => Some(Value::Bool(false)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_split_like_go() {
        assert_eq!(strategy_without_retain_keys("").unwrap(), "");
        assert_eq!(strategy_without_retain_keys("merge").unwrap(), "merge");
        assert_eq!(strategy_without_retain_keys("retainKeys").unwrap(), "");
        assert_eq!(strategy_without_retain_keys("merge,retainKeys").unwrap(), "merge");
        assert!(strategy_without_retain_keys("a,b").is_err());
    }

    #[test]
    fn directive_targets() {
        assert_eq!(directive_target("$setElementOrder/env", SET_ELEMENT_ORDER).unwrap(), "env");
        assert_eq!(directive_target("$setElementOrder/", SET_ELEMENT_ORDER).unwrap(), "");
        assert!(directive_target("$setElementOrderenv", SET_ELEMENT_ORDER).is_err());
        assert!(directive_target("$deleteFromPrimitiveListX/a", DELETE_FROM_PRIMITIVE_LIST).is_err());
    }
}
