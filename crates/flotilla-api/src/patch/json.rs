//! RFC 6902 JSON patch as kube-apiserver applies it (Go `json-patch` v4 semantics).
//!
//! Where the server departs from the RFC, we follow the server:
//! - `test` with `null` (or no `value`) passes when the path is missing or holds `null`;
//! - `replace` of a missing object member adds it; `copy` from a missing member copies `null`;
//! - list indices may be negative (counted from the end), and may have a sign or leading
//!   zeros (`01`);
//! - the first path segment is not checked to be empty (`a/b` works like `/b`), and an empty
//!   path works only for `replace` (with an object or list) and `test`.
//!
//! One deliberate difference: the server compares scalars in `test` by their JSON text as its
//! own encoder wrote them, so a stored string containing `<`, `>` or `&` (which Go writes as
//! `\u003c`…) never tests equal. We compare values.

use serde_json::Value;

use super::{PatchError, json_kind};

/// The most operations one JSON patch may hold (kube-apiserver's limit).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// How many bytes (of the copied values' JSON) all `copy` operations of one patch may add
/// together: kube-apiserver's `JSONPatchMaxCopyBytes`, 3 MiB. Without it 20 operations that each
/// copy an array into itself double a 2 KB body into 2 GB.
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";

/// Applies an RFC 6902 patch (a JSON list of operations; `null` is an empty patch) to `doc`.
/// Shape errors are [`PatchError::Decode`] (400), too many operations
/// [`PatchError::TooManyOperations`] (413), operations that do not apply
/// [`PatchError::Apply`] (422).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    check_shape(patch)?;
    let ops = match patch {
        Value::Array(ops) => ops.as_slice(),
        _ => &[],
    };
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations(ops.len()));
    }
    let mut doc = doc.clone();
    if !matches!(doc, Value::Object(_) | Value::Array(_)) {
        return Err(PatchError::Apply("the document is neither an object nor a list".to_string()));
    }
    let mut copied = 0usize;
    for op in ops {
        apply_op(&mut doc, op, &mut copied).map_err(PatchError::Apply)?;
    }
    Ok(doc)
}

/// The length of `v`'s compact JSON, counted without writing it out.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// What the server checks before applying: a list (or `null`) of objects (or `null`s) whose
/// `op`, `path` and `from` are strings (or `null`).
pub(super) fn check_shape(patch: &Value) -> Result<(), PatchError> {
    let decode = |m: String| Err(PatchError::Decode(format!("error decoding patch: json: {m}")));
    let ops = match patch {
        Value::Null => return Ok(()),
        Value::Array(ops) => ops,
        other => {
            return decode(format!("cannot unmarshal {} into Go value of type []handlers.jsonPatchOp", json_kind(other)));
        }
    };
    for op in ops {
        match op {
            Value::Null => {}
            Value::Object(fields) => {
                for name in ["op", "path", "from"] {
                    match fields.get(name) {
                        None | Some(Value::Null | Value::String(_)) => {}
                        Some(other) => {
                            return decode(format!("cannot unmarshal {} into Go struct field jsonPatchOp.{name} of type string", json_kind(other)));
                        }
                    }
                }
            }
            other => {
                return decode(format!("cannot unmarshal {} into Go value of type handlers.jsonPatchOp", json_kind(other)));
            }
        }
    }
    Ok(())
}

/// A string field of an operation; `null` and absent are both missing.
fn field<'a>(op: &'a Value, name: &str) -> Option<&'a str> {
    op.get(name).and_then(Value::as_str)
}

fn apply_op(doc: &mut Value, op: &Value, copied: &mut usize) -> Result<(), String> {
    let kind = field(op, "op").unwrap_or("unknown");
    let path = field(op, "path");
    // An absent `value` and `null` behave alike everywhere except `test` on a present value.
    let value = op.get("value");
    let value_or_null = || value.cloned().unwrap_or(Value::Null);
    match kind {
        "add" => {
            let path = path.ok_or_else(|| format!("add operation failed to decode path: {MISSING}"))?;
            let (parent, key) = locate(doc, path).ok_or_else(|| format!("add operation does not apply: doc is missing path: \"{path}\": {MISSING}"))?;
            add(parent, &key, value_or_null()).map_err(|e| format!("error in add for path: '{path}': {e}"))
        }
        "remove" => {
            let path = path.ok_or_else(|| format!("remove operation failed to decode path: {MISSING}"))?;
            let (parent, key) = locate(doc, path).ok_or_else(|| format!("remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"))?;
            remove(parent, &key).map(drop).map_err(|e| format!("error in remove for path: '{path}': {e}"))
        }
        "replace" => {
            let path = path.ok_or_else(|| format!("replace operation failed to decode path: operation missing path field: {MISSING}"))?;
            if path.is_empty() {
                return match value_or_null() {
                    v @ (Value::Object(_) | Value::Array(_)) => {
                        *doc = v;
                        Ok(())
                    }
                    _ => Err("replace operation value must be object or array: %!w(<nil>)".to_string()),
                };
            }
            let (parent, key) = locate(doc, path).ok_or_else(|| format!("replace operation does not apply: doc is missing path: {path}: {MISSING}"))?;
            if let Value::Array(items) = parent {
                resolve_index(items.len(), &key, false).map_err(|_| format!("replace operation does not apply: doc is missing key: {path}: {MISSING}"))?;
            }
            set(parent, &key, value_or_null());
            Ok(())
        }
        "move" => {
            let from = field(op, "from").ok_or_else(|| format!("move operation failed to decode from: operation, missing from field: {MISSING}"))?;
            let (parent, key) = locate(doc, from).ok_or_else(|| format!("move operation does not apply: doc is missing from path: {from}: {MISSING}"))?;
            get(parent, &key).map_err(|e| format!("error in move for path: '{key}': {e}"))?;
            let moved = remove(parent, &key).map_err(|e| format!("error in move for path: '{key}': {e}"))?;
            let path = path.ok_or_else(|| format!("move operation failed to decode path: operation missing path field: {MISSING}"))?;
            let (parent, key) =
                locate(doc, path).ok_or_else(|| format!("move operation does not apply: doc is missing destination path: {path}: {MISSING}"))?;
            add(parent, &key, moved).map_err(|e| format!("error in move for path: '{path}': {e}"))
        }
        "copy" => {
            let from = field(op, "from").ok_or_else(|| format!("copy operation failed to decode from: operation, missing from field: {MISSING}"))?;
            let (parent, key) = locate(doc, from).ok_or_else(|| format!("copy operation does not apply: doc is missing from path: {from}: {MISSING}"))?;
            let source = get(parent, &key).map_err(|e| format!("error in copy for from: '{from}': {e}"))?;
            // Counted before the value is cloned: a copy over the budget allocates nothing.
            *copied = copied.saturating_add(source.map_or(4, json_len));
            if *copied > MAX_COPY_BYTES {
                return Err(format!("Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_COPY_BYTES}"));
            }
            let copied = source.cloned().unwrap_or(Value::Null);
            let path = path.ok_or_else(|| format!("copy operation failed to decode path: {MISSING}"))?;
            let (parent, key) =
                locate(doc, path).ok_or_else(|| format!("copy operation does not apply: doc is missing destination path: {path}: {MISSING}"))?;
            add(parent, &key, copied).map_err(|e| format!("error while adding value during copy: {e}"))
        }
        "test" => {
            let path = path.ok_or_else(|| format!("test operation failed to decode path: operation missing path field: {MISSING}"))?;
            let failed = || format!("testing value {path} failed: test failed");
            if path.is_empty() {
                return if value.is_some_and(|v| !v.is_null() && v == &*doc) { Ok(()) } else { Err(failed()) };
            }
            let (parent, key) = locate(doc, path).ok_or_else(|| format!("test operation does not apply: is missing path: {path}: {MISSING}"))?;
            let actual = get(parent, &key).map_err(|e| format!("error in test for path: '{path}': {e}"))?;
            match (actual.filter(|v| !v.is_null()), value) {
                (None, None | Some(Value::Null)) => Ok(()),
                (None, Some(_)) | (Some(_), None) => Err(failed()),
                (Some(actual), Some(want)) if actual == want => Ok(()),
                (Some(_), Some(_)) => Err(failed()),
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

/// Finds the container holding the path's last segment, and that segment (unescaped). The
/// first segment is skipped unchecked, as the server does; a missing, `null` or scalar
/// intermediate means the path is missing.
fn locate<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let mut segments: Vec<&str> = path.split('/').collect();
    if segments.len() < 2 {
        return None;
    }
    let last = unescape(segments.pop().unwrap_or_default());
    let mut current = doc;
    for segment in &segments[1..] {
        let key = unescape(segment);
        let next = match current {
            Value::Object(map) => map.get_mut(&key),
            Value::Array(items) => {
                let len = items.len();
                resolve_index(len, &key, false).ok().and_then(|i| items.get_mut(i))
            }
            _ => None,
        }?;
        if !matches!(next, Value::Object(_) | Value::Array(_)) {
            return None;
        }
        current = next;
    }
    Some((current, last))
}

/// RFC 6901 unescaping in one pass: `~1` → `/`, `~0` → `~`.
fn unescape(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    let mut chars = segment.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.peek() {
                Some('1') => {
                    chars.next();
                    out.push('/');
                    continue;
                }
                Some('0') => {
                    chars.next();
                    out.push('~');
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out
}

/// Go's `strconv.Atoi` error text for a bad index.
fn atoi(key: &str) -> Result<i64, String> {
    key.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {}: {why}", super::go_format::quote(key))
    })
}

/// A list index as the server reads it: an integer, negative counting from the end, which
/// must address an element (or, for `insert`, the position after the last one).
fn resolve_index(len: usize, key: &str, insert: bool) -> Result<usize, String> {
    let idx = atoi(key)?;
    let size = if insert { len as i64 + 1 } else { len as i64 };
    let invalid = || format!("Unable to access invalid index: {idx}: {INVALID_INDEX}");
    if idx >= size {
        return Err(invalid());
    }
    let idx = if idx < 0 {
        if idx < -size {
            return Err(invalid());
        }
        idx + size
    } else {
        idx
    };
    Ok(idx as usize)
}

/// The value at `key`, `None` when an object lacks it; list indices must be valid.
fn get<'a>(parent: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match parent {
        Value::Object(map) => Ok(map.get(key)),
        Value::Array(items) => Ok(Some(&items[resolve_index(items.len(), key, false)?])),
        _ => Ok(None),
    }
}

fn add(parent: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match parent {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            atoi(key).map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let idx = resolve_index(items.len(), key, true)?;
            items.insert(idx, value);
            Ok(())
        }
        _ => Err(format!("cannot add to a scalar at {key}")),
    }
}

/// Removes and returns the value at `key`.
fn remove(parent: &mut Value, key: &str) -> Result<Value, String> {
    match parent {
        Value::Object(map) => map.remove(key).ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(items) => {
            let idx = resolve_index(items.len(), key, false)?;
            Ok(items.remove(idx))
        }
        _ => Err(format!("Unable to remove nonexistent key: {key}: {MISSING}")),
    }
}

/// Sets an object member (adding it if missing) or a list element (index checked by the caller).
fn set(parent: &mut Value, key: &str, value: Value) {
    match parent {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            if let Ok(idx) = resolve_index(items.len(), key, false) {
                items[idx] = value;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unescape_is_one_pass() {
        assert_eq!(unescape("a~1b~0c~01"), "a/b~c~1");
        assert_eq!(unescape("~2~"), "~2~");
    }

    #[test]
    fn indices_read_like_atoi() {
        assert_eq!(resolve_index(3, "01", false), Ok(1));
        assert_eq!(resolve_index(3, "+2", false), Ok(2));
        assert_eq!(resolve_index(3, "-1", false), Ok(2));
        assert_eq!(resolve_index(3, "-1", true), Ok(3));
        assert!(resolve_index(3, "-4", false).is_err());
        assert_eq!(resolve_index(3, "-", false).unwrap_err(), "strconv.Atoi: parsing \"-\": invalid syntax");
    }

    #[test]
    fn kube_rs_finalizer_patches_apply() {
        let doc = json!({"metadata": {"name": "x"}});
        let add_first = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["a"]}
        ]);
        let doc = json_patch(&doc, &add_first).unwrap();
        let append = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "b"}
        ]);
        let doc = json_patch(&doc, &append).unwrap();
        let remove = json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "a"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]);
        assert_eq!(json_patch(&doc, &remove).unwrap(), json!({"metadata": {"name": "x", "finalizers": ["b"]}}));
    }
}
