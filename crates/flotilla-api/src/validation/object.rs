//! What every kind's rules share: reading a decoded object with Go's zero values for absent
//! fields, and the checks of labels, annotations, selectors, non-negative numbers and immutable
//! fields.

use serde_json::{Value, json};

use super::field::{FieldError, Reason};
use crate::selector::{LabelSelector, SelectorError, ViolationKind, label_key_errors, label_value_errors};

/// A decoded object read as Go reads its struct: an absent or null field is the zero value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Obj<'a>(pub &'a Value);

impl<'a> Obj<'a> {
    /// The field, unless absent or null.
    pub fn get(self, key: &str) -> Option<&'a Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub fn str(self, key: &str) -> &'a str {
        self.get(key).and_then(Value::as_str).unwrap_or("")
    }

    pub fn int(self, key: &str) -> i64 {
        self.get(key).and_then(Value::as_i64).unwrap_or(0)
    }

    pub fn array(self, key: &str) -> &'a [Value] {
        self.get(key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// A nested object (or null, read as all zero values).
    pub fn obj(self, key: &str) -> Obj<'a> {
        static NULL: Value = Value::Null;
        Obj(self.get(key).unwrap_or(&NULL))
    }

    /// A dotted path of nested objects (`spec.template.spec`).
    pub fn at(self, path: &str) -> Obj<'a> {
        path.split('.').fold(self, Obj::obj)
    }
}

/// `path.child`, or `child` at the root.
pub(crate) fn at(path: &str, child: &str) -> String {
    if path.is_empty() { child.to_string() } else { format!("{path}.{child}") }
}

/// `ValidateNonnegativeField`.
pub(crate) fn nonnegative(n: i64, path: &str, errs: &mut Vec<FieldError>) {
    if n < 0 {
        errs.push(FieldError::invalid(path, &json!(n), "must be greater than or equal to 0"));
    }
}

/// Label keys and values of a labels map (`metadata.labels`, a template's labels, a
/// nodeSelector); each cause is at the map's path.
pub(crate) fn validate_labels(labels: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    for (k, v) in labels.and_then(Value::as_object).into_iter().flatten() {
        for msg in label_key_errors(k) {
            errs.push(FieldError::invalid(path, &json!(k), &msg));
        }
        let v = v.as_str().unwrap_or("");
        for msg in label_value_errors(v) {
            errs.push(FieldError::invalid(path, &json!(v), &msg));
        }
    }
}

/// The largest total size of an object's annotations (keys and values).
pub(crate) const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// Annotation keys (qualified names, case-insensitive) and their total size.
pub(crate) fn validate_annotations(annotations: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let mut total = 0;
    for (k, v) in annotations.and_then(Value::as_object).into_iter().flatten() {
        for msg in label_key_errors(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, &json!(k), &msg));
        }
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_MAX_BYTES {
        errs.push(FieldError::too_long(path, ANNOTATIONS_MAX_BYTES));
    }
}

/// A `LabelSelector` object's own rules (valid keys and values, operators with or without
/// values); the parsed selector when it is valid.
pub(crate) fn label_selector(selector: &Value, path: &str, errs: &mut Vec<FieldError>) -> Option<LabelSelector> {
    match LabelSelector::from_json(selector) {
        Ok(s) => Some(s),
        Err(SelectorError::InvalidObject(violations)) => {
            for v in violations {
                let (reason, head) = match &v.kind {
                    ViolationKind::Invalid(value) => (Reason::Invalid, format!("Invalid value: {value}")),
                    ViolationKind::Required => (Reason::Required, "Required value".to_string()),
                    ViolationKind::Forbidden => (Reason::Forbidden, "Forbidden".to_string()),
                };
                let message = if v.detail.is_empty() { head } else { format!("{head}: {}", v.detail) };
                errs.push(FieldError { reason, field: at(path, &v.field), message });
            }
            None
        }
        Err(_) => None,
    }
}

/// A `LabelSelector` as Go's `json.Marshal` prints the struct: `matchLabels`, then
/// `matchExpressions` (`key`, `operator`, `values`), empty parts left out.
pub(crate) fn label_selector_json(selector: &Value) -> String {
    use super::field::{go_json, write_go_string};
    let s = Obj(selector);
    let mut parts = Vec::new();
    if let Some(m) = s.get("matchLabels").filter(|m| m.as_object().is_some_and(|m| !m.is_empty())) {
        parts.push(format!("\"matchLabels\":{}", go_json(m)));
    }
    let exprs = s.array("matchExpressions");
    if !exprs.is_empty() {
        let items: Vec<String> = exprs
            .iter()
            .map(|e| {
                let e = Obj(e);
                let mut out = String::from("{\"key\":");
                write_go_string(e.str("key"), &mut out);
                out.push_str(",\"operator\":");
                write_go_string(e.str("operator"), &mut out);
                if !e.array("values").is_empty() {
                    out.push_str(",\"values\":");
                    out.push_str(&go_json(&Value::Array(e.array("values").to_vec())));
                }
                out.push('}');
                out
            })
            .collect();
        parts.push(format!("\"matchExpressions\":[{}]", items.join(",")));
    }
    format!("{{{}}}", parts.join(","))
}

/// `field is immutable` when `new` differs from `old`; the message shows the new value.
pub(crate) fn immutable(new: Option<&Value>, old: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let norm = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    if norm(new) != norm(old) {
        errs.push(FieldError::invalid(path, new.unwrap_or(&Value::Null), "field is immutable"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_in_struct_order() {
        let s = json!({"matchExpressions": [{"values": ["a"], "operator": "In", "key": "k"}], "matchLabels": {"b": "2", "a": "1"}});
        assert_eq!(label_selector_json(&s), r#"{"matchLabels":{"a":"1","b":"2"},"matchExpressions":[{"key":"k","operator":"In","values":["a"]}]}"#);
    }

    #[test]
    fn selector_violations_carry_the_selector_path() {
        let mut errs = Vec::new();
        assert!(label_selector(&json!({"matchExpressions": [{"key": "k", "operator": "In"}]}), "spec.selector", &mut errs).is_none());
        assert_eq!(errs[0].to_string(), "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'");
    }
}
