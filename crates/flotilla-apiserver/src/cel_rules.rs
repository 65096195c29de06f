//! CRD validation rules: `x-kubernetes-validations` in CEL, with `self` and (on updates)
//! `oldSelf`, evaluated where the rule sits in the schema.
//!
//! A rule is compiled when its CRD is written. A rule that does not parse, or that calls a
//! function Flotilla's CEL does not provide (Kubernetes' CEL libraries: lists, strings,
//! regex `find`, quantity, URL, IP, …, and `duration`/`timestamp`), makes the CRD invalid with
//! the rule named — never a rule silently skipped.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::error::Cause;
use crate::structural::{Schema, SchemaError};

/// Functions (beyond operators and macros) a rule may call.
const SUPPORTED: &[&str] = &["size", "contains", "startsWith", "endsWith", "matches", "string", "int", "uint", "double", "bytes", "type", "dyn"];

/// One compiled rule.
#[derive(Clone)]
pub struct Rule {
    pub rule: String,
    pub message: Option<String>,
    /// FieldValueInvalid (default), FieldValueForbidden, FieldValueRequired, FieldValueDuplicate.
    pub reason: String,
    /// Where a failure is reported, relative to the rule's node (`.spec.replicas`).
    pub field_path: Option<String>,
    program: Arc<cel::Program>,
    /// A transition rule: only checked when there is an old value.
    uses_old_self: bool,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("rule", &self.rule).finish()
    }
}

/// Compile the `x-kubernetes-validations` of the node at `path`.
pub fn compile(rules: &Value, path: &str, errors: &mut Vec<SchemaError>) -> Vec<Rule> {
    let mut out = Vec::new();
    for (i, r) in rules.as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let Some(text) = r.get("rule").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) else {
            errors.push(SchemaError { path: format!("{at}.rule"), reason: "FieldValueRequired", message: "Required value: rule is not specified".into() });
            continue;
        };
        let program = match cel::Program::compile(text) {
            Ok(p) => p,
            Err(e) => {
                errors.push(SchemaError { path: format!("{at}.rule"), reason: "FieldValueInvalid", message: format!("Invalid value: {text:?}: compilation failed: {e}") });
                continue;
            }
        };
        let refs = program.references();
        let unsupported: Vec<&str> =
            refs.functions().into_iter().filter(|f| !(f.starts_with('_') || f.starts_with('@') || f.starts_with('!') || f.starts_with('-') || SUPPORTED.contains(f))).collect();
        if !unsupported.is_empty() {
            errors.push(SchemaError {
                path: format!("{at}.rule"),
                reason: "FieldValueInvalid",
                message: format!("Invalid value: {text:?}: compilation failed: Flotilla does not support the CEL function(s) {} (supported: {})", unsupported.join(", "), SUPPORTED.join(", ")),
            });
            continue;
        }
        let reason = r.get("reason").and_then(Value::as_str).unwrap_or("FieldValueInvalid").to_string();
        if !["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"].contains(&reason.as_str()) {
            errors.push(SchemaError { path: format!("{at}.reason"), reason: "FieldValueNotSupported", message: format!("Unsupported value: {reason:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"") });
            continue;
        }
        if r.get("messageExpression").is_some() {
            errors.push(SchemaError { path: format!("{at}.messageExpression"), reason: "FieldValueForbidden", message: "Forbidden: messageExpression is not supported by Flotilla yet; use message".into() });
            continue;
        }
        out.push(Rule {
            rule: text.to_string(),
            message: r.get("message").and_then(Value::as_str).map(String::from),
            reason,
            field_path: r.get("fieldPath").and_then(Value::as_str).map(String::from),
            uses_old_self: refs.has_variable("oldSelf"),
            program: Arc::new(program),
        });
    }
    out
}

/// A JSON value as CEL sees it (integers are `int`).
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => n.as_i64().map(cel::Value::Int).unwrap_or_else(|| cel::Value::Float(n.as_f64().unwrap_or(0.0))),
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => cel::Value::from(m.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect::<HashMap<String, cel::Value>>()),
    }
}

fn join(path: &str, child: &str) -> String {
    if path.is_empty() { child.to_string() } else { format!("{path}.{child}") }
}

/// Evaluate every rule in `s` against `new` (and `old`, the value at the same place before an
/// update), reporting failures as field causes.
pub fn check(new: &Value, old: Option<&Value>, s: &Schema, path: &str, causes: &mut Vec<Cause>) {
    // Unchanged values are not judged again (kube-apiserver's validation ratcheting): an
    // object stored before a rule existed can still be updated elsewhere.
    if new.is_null() || old == Some(new) {
        return;
    }
    for r in &s.rules {
        if r.uses_old_self && old.is_none() {
            continue;
        }
        let mut ctx = cel::Context::default();
        ctx.add_variable_from_value("self", to_cel(new));
        if let Some(o) = old {
            ctx.add_variable_from_value("oldSelf", to_cel(o));
        }
        let failed = match r.program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => None,
            Ok(cel::Value::Bool(false)) => Some(r.message.clone().unwrap_or_else(|| format!("failed rule: {}", r.rule))),
            Ok(other) => Some(format!("rule {:?} did not evaluate to a bool: {other:?}", r.rule)),
            Err(e) => Some(format!("rule {:?} could not be evaluated: {e}", r.rule)),
        };
        if let Some(message) = failed {
            let field = match &r.field_path {
                Some(fp) => join(path, fp.trim_start_matches('.')),
                None => path.to_string(),
            };
            let text = match r.reason.as_str() {
                "FieldValueForbidden" => format!("Forbidden: {message}"),
                "FieldValueRequired" => format!("Required value: {message}"),
                "FieldValueDuplicate" => format!("Duplicate value: {message}"),
                // kube-apiserver names a scalar's value, not an object's or a list's.
                _ => match new {
                    Value::Object(_) | Value::Array(_) => format!("Invalid value: {message}"),
                    Value::String(v) => format!("Invalid value: {}: {message}", Value::String(v.clone())),
                    other => format!("Invalid value: {other}: {message}"),
                },
            };
            causes.push(Cause::new(&r.reason, field, text));
        }
    }
    match new {
        Value::Object(m) => {
            for (k, v) in m {
                let child = s.properties.get(k).or(s.additional_properties.as_deref());
                if let Some(cs) = child {
                    check(v, old.and_then(|o| o.get(k)), cs, &join(path, k), causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for (i, v) in items.iter().enumerate() {
                    // Items of a keyed list keep their old selves; others have none.
                    let before = match (s.list_type.as_deref(), old.and_then(Value::as_array)) {
                        (Some("map"), Some(olds)) => olds.iter().find(|o| s.list_map_keys.iter().all(|k| o.get(k) == v.get(k))),
                        _ => None,
                    };
                    check(v, before, is, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        let mut errs = Vec::new();
        let s = Schema::parse(&v, "s", &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        s
    }

    #[test]
    fn rules_are_judged_where_they_sit_with_old_self_on_updates_only() {
        let s = schema(json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a < self.b"}],
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                "n": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable", "reason": "FieldValueForbidden"}]}}}));
        let mut causes = Vec::new();
        check(&json!({"a": 2, "b": 1, "n": "x"}), None, &s, "", &mut causes);
        assert_eq!(causes, vec![Cause::new("FieldValueInvalid", "", "Invalid value: failed rule: self.a < self.b")]);
        let mut causes = Vec::new();
        check(&json!({"a": 1, "b": 2, "n": "y"}), Some(&json!({"a": 1, "b": 2, "n": "x"})), &s, "", &mut causes);
        assert_eq!(causes, vec![Cause::new("FieldValueForbidden", "n", "Forbidden: immutable")]);
        // Unchanged values are not judged again.
        let mut causes = Vec::new();
        let stored = json!({"a": 2, "b": 1, "n": "x"});
        check(&stored, Some(&stored), &s, "", &mut causes);
        assert!(causes.is_empty());
    }

    #[test]
    fn a_rule_that_cannot_run_here_makes_the_schema_invalid() {
        for (rule, needle) in [("self.l.isSorted()", "isSorted"), ("self.a <", "compilation failed"), ("duration('1s') > duration('0s')", "duration")] {
            let mut errs = Vec::new();
            Schema::parse(&json!({"type": "object", "x-kubernetes-validations": [{"rule": rule}]}), "s", &mut errs);
            assert_eq!(errs.len(), 1, "{rule}: {errs:?}");
            assert_eq!(errs[0].path, "s.x-kubernetes-validations[0].rule");
            assert!(errs[0].message.contains(needle), "{rule}: {}", errs[0].message);
        }
    }
}
