//! RFC 7386 JSON merge patch as kube-apiserver applies it.
//!
//! Objects merge recursively and `null` deletes a member; anything else replaces. Like the
//! server, `null` members are also dropped inside values that land where there was no object
//! to merge into (a new member, a scalar, a list), including inside lists there; a list that
//! replaces an object keeps its `null`s. Plain RFC 7386 would keep every list as sent.

use serde_json::{Map, Value};

use super::drop_null_members;

/// Applies a JSON merge patch. A patch that is not an object replaces the document (the
/// server refuses such patches before applying them; see [`super::decode_patch`]).
pub fn merge_patch(doc: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(_) => merge(doc.clone(), patch.clone()),
        other => prune_nulls(other.clone()),
    }
}

fn merge(target: Value, patch: Value) -> Value {
    match (target, patch) {
        (Value::Object(mut target), Value::Object(patch)) => {
            merge_members(&mut target, patch);
            Value::Object(target)
        }
        // Into an object, anything but an object replaces it as sent.
        (Value::Object(_), patch) => patch,
        (_, patch) => prune_nulls(patch),
    }
}

fn merge_members(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        if value.is_null() {
            target.remove(&key);
            continue;
        }
        let merged = match target.remove(&key) {
            None | Some(Value::Null) => prune_nulls(value),
            Some(current) => merge(current, value),
        };
        target.insert(key, merged);
    }
}

fn prune_nulls(mut value: Value) -> Value {
    drop_null_members(&mut value);
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc7386_appendix_a() {
        // (target, patch, result) from RFC 7386 Appendix A.
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (json!({"a":"b","b":"c"}), json!({"a":null}), json!({"b":"c"})),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (json!({"a":{"b":"c"}}), json!({"a":{"b":"d","c":null}}), json!({"a":{"b":"d"}})),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (json!({}), json!({"a":{"bb":{"ccc":null}}}), json!({"a":{"bb":{}}})),
        ];
        for (target, patch, want) in cases {
            assert_eq!(merge_patch(&target, &patch), want, "{target} + {patch}");
        }
    }

    #[test]
    fn nulls_inside_lists_follow_the_server() {
        let doc = json!({"over_list": [1], "over_map": {"x": 1}});
        let patch = json!({
            "over_list": [{"a": null, "b": 1}, null],
            "over_map": [{"a": null}],
            "fresh": [{"a": null}]
        });
        assert_eq!(merge_patch(&doc, &patch), json!({"over_list": [{"b": 1}, null], "over_map": [{"a": null}], "fresh": [{}]}));
    }
}
