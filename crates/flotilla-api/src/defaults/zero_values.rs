//! Go's zero values seen through `serde_json`: when a field counts as unset for defaulting, and
//! what Go's JSON encoder leaves out (`omitempty` on a zero value) or always writes (a struct
//! that is not a pointer). Kubernetes' defaulting is written against Go structs, so "unset"
//! means `""` for a string, `0` for a number and `nil` for a pointer, and a value the encoder
//! drops never reaches the client. These helpers let the kind modules say that in one line.

use serde_json::{Map, Value};

/// A JSON object (a Go struct or map).
pub(crate) type Object = Map<String, Value>;

/// Absent or `null` (a nil pointer, slice or map).
pub(crate) fn is_unset(o: &Object, key: &str) -> bool {
    matches!(o.get(key), None | Some(Value::Null))
}

/// The string at `key`, or `""`.
pub(crate) fn str_of<'a>(o: &'a Object, key: &str) -> &'a str {
    o.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A string field: absent, `null` or `""` becomes `value`.
pub(crate) fn default_string(o: &mut Object, key: &str, value: &str) {
    if str_of(o, key).is_empty() && !matches!(o.get(key), Some(v) if !v.is_null() && !v.is_string()) {
        o.insert(key.to_owned(), Value::from(value));
    }
}

/// A pointer field: absent or `null` becomes `value`.
pub(crate) fn default_value(o: &mut Object, key: &str, value: impl Into<Value>) {
    if is_unset(o, key) {
        o.insert(key.to_owned(), value.into());
    }
}

/// A plain number field: absent, `null` or `0` becomes `value`.
pub(crate) fn default_number(o: &mut Object, key: &str, value: i64) {
    let zero = match o.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(_) => false,
    };
    if zero {
        o.insert(key.to_owned(), Value::from(value));
    }
}

/// The object at `key`, if there is one.
pub(crate) fn object<'a>(o: &'a mut Object, key: &str) -> Option<&'a mut Object> {
    o.get_mut(key).and_then(Value::as_object_mut)
}

/// The object at `key`, created empty when unset (`None` only if `key` holds another type,
/// which the server's decoder would have refused).
pub(crate) fn object_or_insert<'a>(o: &'a mut Object, key: &str) -> Option<&'a mut Object> {
    if is_unset(o, key) {
        o.insert(key.to_owned(), Value::Object(Object::new()));
    }
    object(o, key)
}

/// The elements of the array at `key` that are objects, with their indices.
pub(crate) fn objects_mut<'a>(o: &'a mut Object, key: &str) -> impl Iterator<Item = (usize, &'a mut Object)> + 'a {
    o.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flat_map(|items| items.iter_mut().enumerate())
        .filter_map(|(i, item)| item.as_object_mut().map(|obj| (i, obj)))
}

/// Removes every `null` object member, recursively: the decoder turns them into nil pointers,
/// slices and maps, which the encoder omits.
pub(crate) fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(o) => {
            o.retain(|_, v| !v.is_null());
            o.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Whether `v` is Go's zero value for a scalar, slice or map field.
fn is_go_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// Drops the listed `omitempty` fields (strings, numbers, booleans, slices and maps — never
/// pointers or structs) when they hold their zero value, as Go's encoder does.
pub(crate) fn omit_empty(o: &mut Object, keys: &[&str]) {
    for key in keys {
        if o.get(*key).is_some_and(is_go_zero) {
            o.remove(*key);
        }
    }
}

/// Writes `value` at `key` when absent: a non-pointer struct or a field without `omitempty`
/// that Go's encoder always writes.
pub(crate) fn always_written(o: &mut Object, key: &str, value: Value) {
    o.entry(key.to_owned()).or_insert(value);
}

/// Integer counters of a status (no `omitempty`): written as `0` when absent.
pub(crate) fn always_written_counters(status: &mut Object, fields: &[&str]) {
    for field in fields {
        always_written(status, field, Value::from(0));
    }
}

/// `metadata` of an object or template: every field is `omitempty`.
pub(crate) fn omit_empty_metadata(meta: &mut Object) {
    omit_empty(
        meta,
        &[
            "name",
            "generateName",
            "namespace",
            "selfLink",
            "uid",
            "resourceVersion",
            "generation",
            "labels",
            "annotations",
            "ownerReferences",
            "finalizers",
            "managedFields",
        ],
    );
}

/// Label selectors (`matchLabels` and `matchExpressions` are both `omitempty`), wherever they sit
/// under `value`: fields named `selector` that hold a selector, `labelSelector`,
/// `namespaceSelector` and `podSelector`. A Service's `selector` (a plain map) is not touched,
/// because the caller never passes a Service's spec here.
pub(crate) fn omit_empty_label_selectors(value: &mut Value) {
    match value {
        Value::Object(o) => {
            for (key, child) in o.iter_mut() {
                let selector_field = matches!(key.as_str(), "selector" | "labelSelector" | "namespaceSelector" | "podSelector");
                if let (true, Some(selector)) = (selector_field, child.as_object_mut()) {
                    omit_empty(selector, &["matchLabels", "matchExpressions"]);
                }
                omit_empty_label_selectors(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(omit_empty_label_selectors),
        _ => {}
    }
}
