//! Nested-field access on JSON objects with the semantics of Go's `unstructured.Nested*`,
//! `SetNestedField` and `RemoveNestedField`, which Karmada's interpreter and override manager
//! are written against: a missing field is "not found", a field of the wrong type is an error,
//! setting creates the objects on the way, removing something that is not there does nothing.

use serde_json::{Map, Value};

/// The value at `path`, walking objects only; `None` when missing or when something on the
/// way is not an object.
pub(crate) fn get<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, key| v.as_object()?.get(*key))
}

/// The string at `path`, if there is one.
pub(crate) fn string<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(obj, path)?.as_str()
}

/// `a.b.c` for messages.
pub(crate) fn dotted(path: &[&str]) -> String {
    path.join(".")
}

/// Go's type name of a decoded JSON value, for messages.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn wrong_type(path: &[&str], v: &Value, expected: &str) -> String {
    format!("{} accessor error: {v} is of the type {}, expected {expected}", dotted(path), go_type(v))
}

/// `NestedFieldNoCopy`: the value at `path`; an error when something on the way is not an
/// object.
pub(crate) fn nested<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a Value>, String> {
    let mut cur = obj;
    for (i, key) in path.iter().enumerate() {
        match cur {
            Value::Object(m) => match m.get(*key) {
                Some(v) => cur = v,
                None => return Ok(None),
            },
            other => return Err(wrong_type(&path[..i], other, "map[string]interface{}")),
        }
    }
    Ok(Some(cur))
}

/// `NestedInt64`: an integer, or an error for any other value.
pub(crate) fn nested_i64(obj: &Value, path: &[&str]) -> Result<Option<i64>, String> {
    match nested(obj, path)? {
        None => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| wrong_type(path, v, "int64")),
    }
}

/// `NestedString`.
pub(crate) fn nested_str<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a str>, String> {
    match nested(obj, path)? {
        None => Ok(None),
        Some(v) => v.as_str().map(Some).ok_or_else(|| wrong_type(path, v, "string")),
    }
}

/// `NestedMap` / `NestedStringMap` without the copy: an object, or an error.
pub(crate) fn nested_object<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a Map<String, Value>>, String> {
    match nested(obj, path)? {
        None => Ok(None),
        Some(v) => v.as_object().map(Some).ok_or_else(|| wrong_type(path, v, "map[string]interface{}")),
    }
}

/// `NestedStringMap`: an object whose values are all strings.
pub(crate) fn nested_string_map<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a Map<String, Value>>, String> {
    let Some(map) = nested_object(obj, path)? else {
        return Ok(None);
    };
    match map.values().find(|v| !v.is_string()) {
        Some(v) => Err(format!("{} accessor error: contains non-string value {v} of the type {}", dotted(path), go_type(v))),
        None => Ok(Some(map)),
    }
}

/// `NestedSlice`.
pub(crate) fn nested_array<'a>(obj: &'a Value, path: &[&str]) -> Result<Option<&'a Vec<Value>>, String> {
    match nested(obj, path)? {
        None => Ok(None),
        Some(v) => v.as_array().map(Some).ok_or_else(|| wrong_type(path, v, "[]interface{}")),
    }
}

/// `SetNestedField`: sets `path`, creating objects on the way; an error when something on the
/// way exists and is not an object.
pub(crate) fn set(obj: &mut Value, path: &[&str], value: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        *obj = value;
        return Ok(());
    };
    let mut cur = obj;
    for (i, key) in parents.iter().enumerate() {
        let Value::Object(m) = cur else {
            return Err(wrong_type(&path[..i], cur, "map[string]interface{}"));
        };
        cur = m.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
    }
    match cur {
        Value::Object(m) => {
            m.insert(last.to_string(), value);
            Ok(())
        }
        other => Err(wrong_type(parents, other, "map[string]interface{}")),
    }
}

/// `RemoveNestedField`: removes `path` if it is there.
pub(crate) fn remove(obj: &mut Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for key in parents {
        match cur.as_object_mut().and_then(|m| m.get_mut(*key)) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(*last);
    }
}

/// `metadata.labels` / `metadata.annotations` as Go's `GetLabels` reads them: a map of
/// strings, or empty when missing or malformed.
pub(crate) fn string_map(obj: &Value, path: &[&str]) -> Map<String, Value> {
    nested_string_map(obj, path).ok().flatten().cloned().unwrap_or_default()
}
