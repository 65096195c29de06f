//! The JSON-patch operations overriders compile to, applied with the semantics of the library
//! Karmada applies them with (evanphx/json-patch v5): [`crate::patch::json_patch`] except that
//! `replace` of a missing object member is an error rather than an add.

use serde_json::{Value, json};

use crate::federation::karmada::policy::OverriderOperator;

/// One `add` / `remove` / `replace` operation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PatchOp {
    pub op: OverriderOperator,
    pub path: String,
    pub value: Value,
}

impl PatchOp {
    pub(crate) fn new(op: OverriderOperator, path: impl Into<String>, value: Value) -> Self {
        PatchOp { op, path: path.into(), value }
    }

    pub(crate) fn replace(path: impl Into<String>, value: Value) -> Self {
        PatchOp::new(OverriderOperator::Replace, path, value)
    }
}

fn op_name(op: OverriderOperator) -> &'static str {
    match op {
        OverriderOperator::Add => "add",
        OverriderOperator::Remove => "remove",
        OverriderOperator::Replace => "replace",
    }
}

/// Applies `ops` to `doc` in order.
pub(crate) fn apply(doc: &mut Value, ops: &[PatchOp]) -> Result<(), String> {
    for op in ops {
        if op.op == OverriderOperator::Replace && !op.path.is_empty() {
            let missing = match locate(doc, &op.path) {
                Target::NoParent => Some("path"),
                Target::NoMember => Some("key"),
                Target::Found => None,
            };
            if let Some(what) = missing {
                return Err(format!("replace operation does not apply: doc is missing {what}: {}: missing value", op.path));
            }
        }
        let patch = json!([{ "op": op_name(op.op), "path": op.path, "value": op.value }]);
        *doc = crate::patch::json_patch(doc, &patch).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Whether a JSON pointer's parent and member exist.
enum Target {
    NoParent,
    NoMember,
    Found,
}

/// Resolves the JSON pointer `path` in `doc` (the first segment is skipped unseen, as the patch
/// library does; list indices may count from the end).
fn locate(doc: &Value, path: &str) -> Target {
    let segments: Vec<String> = path.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
    let mut cur = doc;
    for (i, key) in segments.iter().enumerate() {
        let next = match cur {
            Value::Object(m) => m.get(key),
            Value::Array(items) => key.parse::<i64>().ok().and_then(|i| {
                let i = if i < 0 { i + items.len() as i64 } else { i };
                usize::try_from(i).ok().and_then(|i| items.get(i))
            }),
            _ => None,
        };
        match next {
            Some(v) => cur = v,
            None if i + 1 == segments.len() && cur.is_object() | cur.is_array() => return Target::NoMember,
            None => return Target::NoParent,
        }
    }
    Target::Found
}
