//! CRD validation rules: `x-kubernetes-validations` in CEL, with `self` and (on updates)
//! `oldSelf`, evaluated where the rule sits in the schema. A failure is reported with the
//! rule's `reason` at its `fieldPath`, with the message its `messageExpression` works out, else
//! its `message`, else `failed rule: …` (kube-apiserver's fallbacks: an expression that fails,
//! or is blank or several lines once trimmed, gives way to `message`).
//!
//! A rule is compiled when its CRD is written. A rule that does not parse, or that calls a
//! function Flotilla's CEL does not provide (Kubernetes' CEL libraries: lists, strings,
//! regex `find`, quantity, URL, IP, …, and `duration`/`timestamp`), makes the CRD invalid with
//! the rule named — never a rule silently skipped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::cel_cost::{self, Decl, Sizes};
use crate::error::Cause;
use crate::structural::{Schema, SchemaError};

/// Functions (beyond operators and macros) a rule may call: CEL's standard ones this CEL has,
/// and the Kubernetes library functions Flotilla provides ([`context`]).
const SUPPORTED: &[&str] = &["size", "contains", "startsWith", "endsWith", "matches", "string", "int", "uint", "double", "bytes", "type", "dyn", "isURL"];

/// One compiled rule.
#[derive(Clone)]
pub struct Rule {
    pub rule: String,
    pub message: Option<String>,
    /// `messageExpression`: the failure message worked out from the object, and its source.
    message_expression: Option<(Arc<cel::Program>, String)>,
    /// FieldValueInvalid (default), FieldValueForbidden, FieldValueRequired, FieldValueDuplicate.
    pub reason: String,
    /// Where a failure is reported, relative to the rule's node: `fieldPath` as kube-apiserver
    /// normalises it (`.spec['a.b']` is `spec.a.b`, a map key `.labels['x']` is `labels[x]`).
    pub field_path: Option<String>,
    program: Arc<cel::Program>,
    /// A transition rule: only checked when there is an old value.
    uses_old_self: bool,
    /// Its place in the node's `x-kubernetes-validations`.
    index: usize,
    /// What CEL sees of the node it sits on, for its cost ([`check_costs`] sets it).
    decl: Option<Arc<Decl>>,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("rule", &self.rule).finish()
    }
}

/// Compile the `x-kubernetes-validations` of `node`, the schema at `path` whose own and whose
/// children's problems are `errors[node_errors..]`. As kube-apiserver, every rule's fields are
/// checked first (`rule`, `reason`, `message`, `messageExpression`, `fieldPath` — the latter
/// replaced by the path failures are reported at); the expressions are compiled only when the
/// schema here and below has no such problem (a rule may not make sense over a broken schema).
pub fn compile(rules: &Value, node: &Schema, path: &str, errors: &mut Vec<SchemaError>, node_errors: usize) -> Vec<Rule> {
    let invalid =
        |at: String, value: &str, why: &str| SchemaError { path: at, reason: "FieldValueInvalid", message: format!("Invalid value: {value:?}: {why}") };
    let required = |at: String, why: &str| SchemaError { path: at, reason: "FieldValueRequired", message: format!("Required value: {why}") };
    let mut checked = Vec::new();
    for (i, r) in rules.as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        let before = errors.len();
        let text = r.get("rule").and_then(Value::as_str).unwrap_or("");
        if text.trim().is_empty() {
            errors.push(required(format!("{at}.rule"), "rule is not specified"));
        }
        let reason = r.get("reason").and_then(Value::as_str).unwrap_or("FieldValueInvalid");
        if !["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"].contains(&reason) {
            errors.push(SchemaError { path: format!("{at}.reason"), reason: "FieldValueNotSupported", message: format!("Unsupported value: {reason:?}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"") });
        }
        let message = r.get("message").and_then(Value::as_str).unwrap_or("");
        if !message.is_empty() && message.trim().is_empty() {
            errors.push(required(format!("{at}.message"), "message must be non-empty if specified"));
        }
        if message.contains('\n') {
            errors.push(invalid(format!("{at}.message"), message, "message must not contain line breaks"));
        }
        if message.is_empty() && text.contains('\n') {
            errors.push(required(format!("{at}.message"), "message must be specified if rule contains line breaks"));
        }
        let message_expression = r.get("messageExpression").and_then(Value::as_str).unwrap_or("");
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            errors.push(required(format!("{at}.messageExpression"), "messageExpression must be non-empty if specified"));
        }
        let mut field_path = None;
        if let Some(fp) = r.get("fieldPath").and_then(Value::as_str) {
            if fp.trim().is_empty() {
                errors.push(invalid(format!("{at}.fieldPath"), fp, "must be non-empty if specified"));
            }
            if fp.contains('\n') {
                errors.push(invalid(format!("{at}.fieldPath"), fp, "must not contain line breaks"));
            }
            match normalize_field_path(fp, node) {
                Ok(n) => field_path = Some(n),
                Err(_) => errors.push(invalid(format!("{at}.fieldPath"), fp, "must be a valid path")),
            }
        }
        if errors.len() == before {
            checked.push((i, at, text, reason, message, message_expression, field_path));
        }
    }
    // A child's rule that does not compile is not a problem of the schema.
    let expression_error = |e: &SchemaError| (e.path.ends_with(".rule") || e.path.ends_with(".messageExpression")) && e.message.contains("compilation failed");
    if errors[node_errors..].iter().any(|e| !expression_error(e)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (index, at, text, reason, message, message_expression, field_path) in checked {
        let program = match compile_expression(text) {
            Ok(p) => p,
            Err(e) => {
                errors.push(invalid(format!("{at}.rule"), text, &format!("compilation failed: {e}")));
                continue;
            }
        };
        let message_expression = match message_expression {
            "" => None,
            e => match compile_expression(e) {
                Ok(p) => Some((Arc::new(p), e.to_string())),
                Err(why) => {
                    errors.push(invalid(format!("{at}.messageExpression"), e, &format!("messageExpression compilation failed: {why}")));
                    continue;
                }
            },
        };
        out.push(Rule {
            rule: text.to_string(),
            message: Some(message.trim().to_string()).filter(|m| !m.is_empty()),
            message_expression,
            reason: reason.to_string(),
            field_path,
            uses_old_self: program.references().has_variable("oldSelf"),
            program: Arc::new(program),
            index,
            decl: None,
        });
    }
    out
}

/// kube-apiserver's `ValidFieldPath`: `.name` and `['name']` steps through properties (named
/// children) or additionalProperties (keys), rendered as its field paths render them. The
/// error says why (kube-apiserver v1.37 reports only "must be a valid path").
fn normalize_field_path(fp: &str, mut node: &Schema) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = fp;
    // A token: up to the next delimiter, or the delimiter itself.
    let token = |s: &str| -> usize { s.find(['.', '[', ']']).map_or(s.len(), |i| i.max(1)) };
    while !rest.is_empty() {
        let (name, named) = if let Some(r) = rest.strip_prefix('.') {
            if r.is_empty() {
                return Err("unexpected end of JSON path".into());
            }
            let end = token(r);
            rest = &r[end..];
            (r[..end].to_string(), !node.properties.is_empty())
        } else if let Some(r) = rest.strip_prefix('[') {
            if r.is_empty() {
                return Err("unexpected end of JSON path".into());
            }
            // A single-quoted string, ending at a quote not escaped.
            let end = if r.starts_with('\'') {
                r.char_indices().skip(1).find(|&(i, c)| c == '\'' && !r[..i].ends_with('\\')).map_or(r.len(), |(i, _)| i + 1)
            } else {
                token(r)
            };
            let quoted = &r[..end];
            if quoted.len() < 2 || !quoted.starts_with('\'') || !quoted.ends_with('\'') {
                return Err(format!("expected single quoted string but got {quoted}"));
            }
            let name = unescape_single_quoted(&quoted[1..quoted.len() - 1])?;
            let after = &r[end..];
            match after.strip_prefix(']') {
                Some(a) => rest = a,
                None if after.is_empty() => return Err("unexpected end of JSON path".into()),
                None => return Err(format!("expected ] but got {}", &after[..token(after)])),
            }
            (name, !node.properties.is_empty())
        } else {
            return Err(format!("expected [ or . but got: {}", &rest[..token(rest)]));
        };
        if named {
            node = node.properties.get(&name).ok_or("does not refer to a valid field")?;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&name);
        } else {
            node = node.additional_properties.as_deref().ok_or("does not refer to a valid field")?;
            out.push_str(&format!("[{name}]"));
        }
    }
    Ok(out)
}

fn unescape_single_quoted(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('a') => '\u{7}',
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('v') => '\u{b}',
            Some('\'') => '\'',
            Some('\\') => '\\',
            other => return Err(format!("invalid string literal: invalid escape char \\{}", other.map(String::from).unwrap_or_default())),
        });
    }
    Ok(out)
}

/// Parse a CEL expression and check that it calls only functions Flotilla's CEL provides.
fn compile_expression(text: &str) -> Result<cel::Program, String> {
    let program = cel::Program::compile(text).map_err(|e| e.to_string())?;
    let refs = program.references();
    let unsupported: Vec<&str> = refs
        .functions()
        .into_iter()
        .filter(|f| !(f.starts_with('_') || f.starts_with('@') || f.starts_with('!') || f.starts_with('-') || SUPPORTED.contains(f)))
        .collect();
    if !unsupported.is_empty() {
        return Err(format!("Flotilla does not support the CEL function(s) {} (supported: {})", unsupported.join(", "), SUPPORTED.join(", ")));
    }
    Ok(program)
}

/// The variables and the Kubernetes library functions a rule runs with.
fn context(new: &Value, old: Option<&Value>) -> cel::Context<'static, 'static> {
    let mut ctx = cel::Context::default();
    ctx.add_variable_from_value("self", to_cel(new));
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", to_cel(o));
    }
    ctx.add_function("isURL", |s: Arc<String>| crate::url_syntax::is_request_uri(&s)).expect("isURL is not a CEL standard overload");
    ctx
}

/// What `messageExpression` says, or None when kube-apiserver would fall back to `message`: it
/// failed to evaluate, is not a string, or is empty, blank or more than one line once trimmed.
fn evaluated_message(program: &cel::Program, ctx: &cel::Context) -> Option<String> {
    match program.execute(ctx) {
        Ok(cel::Value::String(s)) => Some(s.trim().to_string()).filter(|m| !m.is_empty() && !m.contains('\n') && m.len() <= MAX_MESSAGE_EXPRESSION_BYTES),
        _ => None,
    }
}

/// kube-apiserver's limit on an evaluated messageExpression (celconfig).
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

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

/// What the rules of one request may still cost, and whether they ran out.
pub struct Budget {
    remaining: u64,
    exhausted: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { remaining: cel_cost::RUNTIME_BUDGET, exhausted: false }
    }
}

impl Budget {
    /// Charge `cost` for one evaluation, or say why it may not run: over the per-call limit
    /// (`per_call`, the message when it is), or over what is left. Either ends validation.
    fn charge(&mut self, cost: u64, per_call: impl FnOnce() -> String, out_of_budget: &str) -> Result<(), String> {
        // Upstream cancels a call once its running cost passes the limit, having spent that.
        let spent = if cost > cel_cost::PER_CALL_LIMIT { cel_cost::PER_CALL_LIMIT + 1 } else { cost };
        if spent > self.remaining {
            self.exhausted = true;
            return Err(out_of_budget.to_string());
        }
        self.remaining -= spent;
        if cost > cel_cost::PER_CALL_LIMIT {
            self.exhausted = true;
            return Err(per_call());
        }
        Ok(())
    }
}

const OUT_OF_BUDGET: &str = "validation failed due to running out of cost budget, no further validation rules will be run";

/// Check the estimated cost of every rule under `root` (a resource's root schema at `base`), as
/// kube-apiserver does when a CRD is written: a rule's estimate times the number of times it
/// can run in one object, and the schema's total. Also gives every rule what it needs to be
/// charged at run time.
pub fn check_costs(root: &mut Schema, base: &str, errors: &mut Vec<SchemaError>) {
    // Most schemas (every CRD parsed at start-up among them) have no rules: nothing to declare.
    if !root.has_rules() {
        return;
    }
    let Some(decl) = Decl::of(root, true) else { return };
    let mut total = Total::default();
    estimate_node(root, &decl, base, Some(1), errors, &mut total);
    if total.sum > cel_cost::ESTIMATED_CRD_COST_LIMIT {
        for (path, _) in &total.most_expensive {
            errors.push(forbidden(path.clone(), "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema".into()));
        }
        let what = "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema";
        errors.push(forbidden(base.to_string(), cel_cost::exceeds_message(what, total.sum, cel_cost::ESTIMATED_CRD_COST_LIMIT)));
    }
}

/// Whether a schema problem is one rule's estimated cost, which an update that leaves the
/// schema unchanged does not answer for.
pub fn is_per_expression_cost_error(message: &str) -> bool {
    message.starts_with("Forbidden: estimated rule cost exceeds") || message.starts_with("Forbidden: estimated messageExpression cost exceeds")
}

fn forbidden(path: String, why: String) -> SchemaError {
    SchemaError { path, reason: "FieldValueForbidden", message: format!("Forbidden: {why}") }
}

/// The schema's estimated cost so far, and its (at most four) most expensive rules of at
/// least 1% of the limit.
#[derive(Default)]
struct Total {
    sum: u64,
    most_expensive: Vec<(String, u64)>,
}

impl Total {
    fn observe(&mut self, path: String, cost: u64) {
        self.sum = self.sum.saturating_add(cost);
        if cost < cel_cost::ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path, cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

/// `cardinality`: how many times this node can occur in one object, None when unbounded.
fn estimate_node(s: &mut Schema, decl: &Decl, path: &str, cardinality: Option<u64>, errors: &mut Vec<SchemaError>, total: &mut Total) {
    if !s.rules.is_empty() {
        let shared = Arc::new(decl.clone());
        for r in &mut s.rules {
            let at = format!("{path}.x-kubernetes-validations[{}]", r.index);
            let estimate = cel_cost::cost(r.program.expression(), decl, &Sizes::Declared).max;
            let times = cardinality.unwrap_or_else(|| decl.max_cardinality());
            let cost = if estimate == 0 { 0 } else { estimate.saturating_mul(times) };
            if cost > cel_cost::ESTIMATED_COST_LIMIT {
                errors.push(forbidden(format!("{at}.rule"), cel_cost::exceeds_message("estimated rule cost", cost, cel_cost::ESTIMATED_COST_LIMIT)));
            }
            total.observe(format!("{at}.rule"), cost);
            if let Some((program, _)) = &r.message_expression {
                // A message is worked out once per failure, so its estimate is not multiplied.
                let cost = cel_cost::cost(program.expression(), decl, &Sizes::Declared).max;
                if cost > cel_cost::ESTIMATED_COST_LIMIT {
                    errors.push(forbidden(
                        format!("{at}.messageExpression"),
                        cel_cost::exceeds_message("estimated messageExpression cost", cost, cel_cost::ESTIMATED_COST_LIMIT),
                    ));
                }
                total.observe(format!("{at}.messageExpression"), cost);
            }
            r.decl = Some(shared.clone());
        }
    }
    // A child occurs as often as its parent times the parent's elements: once in an object,
    // up to maxItems or maxProperties in a list or map, unboundedly often without them.
    let elements = match s.type_.as_deref() {
        Some("object") if s.additional_properties.is_some() => s.max_properties,
        Some("array") => s.max_items,
        _ => Some(1),
    };
    let child_cardinality = cardinality.zip(elements).map(|(c, n)| c.saturating_mul(n));
    let fields = match &decl.kind {
        cel_cost::Kind::Object(fields) => Some(fields),
        _ => None,
    };
    for (name, child) in &mut s.properties {
        if let Some(d) = declared(fields.and_then(|f| f.get(name)), child) {
            estimate_node(child, &d, &format!("{path}.properties[{name}]"), child_cardinality, errors, total);
        }
    }
    let items = match &decl.kind {
        cel_cost::Kind::List(e) => Some(&**e),
        _ => None,
    };
    let values = match &decl.kind {
        cel_cost::Kind::Map(v) => Some(&**v),
        _ => None,
    };
    for (child, from_parent, at) in [(s.items.as_deref_mut(), items, "items"), (s.additional_properties.as_deref_mut(), values, "additionalProperties")] {
        let Some(child) = child else { continue };
        if let Some(d) = declared(from_parent, child) {
            estimate_node(child, &d, &format!("{path}.{at}"), child_cardinality, errors, total);
        }
    }
}

/// A child's declaration: the parent's part of it, or, where the parent's declaration has none
/// (a node CEL cannot see from there), its own.
fn declared<'a>(from_parent: Option<&'a Decl>, child: &Schema) -> Option<Cow<'a, Decl>> {
    match from_parent {
        Some(d) => Some(Cow::Borrowed(d)),
        None => Decl::of(child, child.embedded_resource).map(Cow::Owned),
    }
}

/// What a rule costs over the values it runs with.
fn charge_of(program: &cel::Program, decl: Option<&Decl>, new: &Value, old: Option<&Value>) -> u64 {
    decl.map_or(0, |d| cel_cost::cost(program.expression(), d, &Sizes::Actual { new, old }).max)
}

/// The type kube-apiserver names in a cost error: the node's schema type.
fn type_name(s: &Schema) -> String {
    Value::String(s.type_.clone().unwrap_or_default()).to_string()
}

/// Evaluate every rule in `s` against `new` (and `old`, the value at the same place before an
/// update), reporting failures as field causes. Every evaluation is charged to `budget`; once
/// it runs out, or one evaluation would cost more than a call may, nothing more is evaluated.
pub fn check(new: &Value, old: Option<&Value>, s: &Schema, path: &str, causes: &mut Vec<Cause>, budget: &mut Budget) {
    // Unchanged values are not judged again (kube-apiserver's validation ratcheting): an
    // object stored before a rule existed can still be updated elsewhere.
    if budget.exhausted || new.is_null() || old == Some(new) {
        return;
    }
    for r in &s.rules {
        if r.uses_old_self && old.is_none() {
            continue;
        }
        let cost = charge_of(&r.program, r.decl.as_deref(), new, old);
        let rule_name = || r.message.clone().unwrap_or_else(|| r.rule.trim().to_string());
        let per_call = || {
            format!(
                "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                rule_name()
            )
        };
        if let Err(why) = budget.charge(cost, per_call, OUT_OF_BUDGET) {
            causes.push(Cause::new("FieldValueInvalid", path.to_string(), format!("Invalid value: {}: {why}", type_name(s))));
            return;
        }
        let ctx = context(new, old);
        let field = match &r.field_path {
            Some(fp) => join(path, fp),
            None => path.to_string(),
        };
        let failed = match r.program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => None,
            Ok(cel::Value::Bool(false)) => {
                let mut message = None;
                if let Some((program, src)) = &r.message_expression {
                    let cost = charge_of(program, r.decl.as_deref(), new, old);
                    let per_call = || {
                        format!("no further validation rules will be run due to call cost exceeds limit for messageExpression: {}", Value::String(src.clone()))
                    };
                    let out = "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run";
                    if let Err(why) = budget.charge(cost, per_call, out) {
                        causes.push(Cause::new("FieldValueInvalid", field, format!("Invalid value: {}: {why}", type_name(s))));
                        return;
                    }
                    message = evaluated_message(program, &ctx);
                }
                Some(message.or_else(|| r.message.clone()).unwrap_or_else(|| format!("failed rule: {}", r.rule.trim())))
            }
            Ok(other) => Some(format!("rule {:?} did not evaluate to a bool: {other:?}", r.rule)),
            Err(e) => Some(format!("rule {:?} could not be evaluated: {e}", r.rule)),
        };
        if let Some(message) = failed {
            let text = match r.reason.as_str() {
                "FieldValueForbidden" => format!("Forbidden: {message}"),
                "FieldValueRequired" => format!("Required value: {message}"),
                // kube-apiserver's Duplicate error carries the value, not the message.
                "FieldValueDuplicate" => match new {
                    Value::Object(_) | Value::Array(_) => "Duplicate value".to_string(),
                    other => format!("Duplicate value: {other}"),
                },
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
                    check(v, old.and_then(|o| o.get(k)), cs, &join(path, k), causes, budget);
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
                    check(v, before, is, &format!("{path}[{i}]"), causes, budget);
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
        check(&json!({"a": 2, "b": 1, "n": "x"}), None, &s, "", &mut causes, &mut Budget::default());
        assert_eq!(causes, vec![Cause::new("FieldValueInvalid", "", "Invalid value: failed rule: self.a < self.b")]);
        let mut causes = Vec::new();
        check(&json!({"a": 1, "b": 2, "n": "y"}), Some(&json!({"a": 1, "b": 2, "n": "x"})), &s, "", &mut causes, &mut Budget::default());
        assert_eq!(causes, vec![Cause::new("FieldValueForbidden", "n", "Forbidden: immutable")]);
        // Unchanged values are not judged again.
        let mut causes = Vec::new();
        let stored = json!({"a": 2, "b": 1, "n": "x"});
        check(&stored, Some(&stored), &s, "", &mut causes, &mut Budget::default());
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

    #[test]
    fn a_message_expression_gives_the_message_unless_kube_apiserver_would_fall_back() {
        for (expression, message, want) in [
            // (A message of unknown length, such as 'too big: ' + string(self.n), is refused
            // for its estimated cost, as kube-apiserver refuses it.)
            ("self.n == 5 ? 'too big: 5' : 'too big'", None, "too big: 5"),
            ("'  padded  '", None, "padded"),
            ("'   '", Some("static"), "static"),
            ("'two\\nlines'", Some("static"), "static"),
            ("string(1 / 0)", None, "failed rule: self.n < 3"),
            ("self.n", Some("not a string"), "not a string"),
        ] {
            let mut rule = json!({"rule": "self.n < 3", "messageExpression": expression});
            if let Some(m) = message {
                rule["message"] = json!(m);
            }
            let s = schema(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "x-kubernetes-validations": [rule]}));
            let mut causes = Vec::new();
            check(&json!({"n": 5}), None, &s, "spec", &mut causes, &mut Budget::default());
            assert_eq!(causes, vec![Cause::new("FieldValueInvalid", "spec", format!("Invalid value: {want}"))], "{expression}");
        }
        let mut errs = Vec::new();
        Schema::parse(&json!({"type": "object", "x-kubernetes-validations": [{"rule": "true", "messageExpression": "'a' +"}]}), "s", &mut errs);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].path, "s.x-kubernetes-validations[0].messageExpression");
        assert!(errs[0].message.contains("messageExpression compilation failed"), "{}", errs[0].message);
    }

    #[test]
    fn is_url_is_a_kubernetes_library_function_rules_may_call() {
        let s = schema(json!({"type": "object", "x-kubernetes-validations": [{"rule": "isURL(self.u)", "message": "not a URL"}]}));
        let mut causes = Vec::new();
        check(&json!({"u": "https://example.com/x"}), None, &s, "", &mut causes, &mut Budget::default());
        assert!(causes.is_empty(), "{causes:?}");
        check(&json!({"u": "example.com"}), None, &s, "", &mut causes, &mut Budget::default());
        assert_eq!(causes, vec![Cause::new("FieldValueInvalid", "", "Invalid value: not a URL")]);
    }

    #[test]
    fn field_paths_are_checked_against_the_schema_and_normalised_as_kube_apiserver_does() {
        let s = schema(json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}, "d": {"type": "integer"}}},
            "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}}},
            "l": {"type": "array", "items": {"type": "string"}}}}));
        for (fp, want) in [(".a.d", "a.d"), (".a['b.c']", "a.b.c"), ("['a'].d", "a.d"), (".m['k 1'].x", "m[k 1].x"), (".m.k", "m[k]"), (".a['it\\'s']", "")] {
            let got = normalize_field_path(fp, &s);
            if want.is_empty() {
                assert!(got.is_err(), "{fp}: {got:?}");
            } else {
                assert_eq!(got.as_deref(), Ok(want), "{fp}");
            }
        }
        for fp in [".nope", "a", ".l[0]", ".a[d]", ".a['d'", ".a.", ".a..d", ".a['d']x", ".l.x"] {
            assert!(normalize_field_path(fp, &s).is_err(), "{fp}");
        }
        let mut errs = Vec::new();
        Schema::parse(
            &json!({"type": "object", "properties": {"n": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "true"}, {"rule": "true", "fieldPath": " "}]}),
            "s",
            &mut errs,
        );
        let got: Vec<_> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(
            got,
            [
                ("s.x-kubernetes-validations[1].fieldPath", "Invalid value: \" \": must be non-empty if specified"),
                ("s.x-kubernetes-validations[1].fieldPath", "Invalid value: \" \": must be a valid path")
            ]
        );
    }

    #[test]
    fn expressions_are_compiled_only_over_a_schema_without_problems() {
        // A fieldPath naming no field: only that is reported, as kube-apiserver reports it.
        let mut errs = Vec::new();
        Schema::parse(
            &json!({"type": "object", "properties": {"n": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "self.n <", "fieldPath": ".nope", "messageExpression": "'a' +"}]}),
            "s",
            &mut errs,
        );
        let got: Vec<_> = errs.iter().map(|e| (e.path.as_str(), e.message.as_str())).collect();
        assert_eq!(got, [("s.x-kubernetes-validations[0].fieldPath", "Invalid value: \".nope\": must be a valid path")]);
        // A problem below: the rules above are not compiled either; a child's rule that does not
        // compile does not stop the parent's.
        let mut errs = Vec::new();
        Schema::parse(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a <"}], "properties": {"a": {"description": "no type"}}}),
            "s",
            &mut errs,
        );
        assert_eq!(errs.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["s.properties[a].type"], "{errs:?}");
        let mut errs = Vec::new();
        Schema::parse(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a <"}], "properties": {"a": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >"}]}}}),
            "s",
            &mut errs,
        );
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["s.properties[a].x-kubernetes-validations[0].rule", "s.x-kubernetes-validations[0].rule"], "{errs:?}");
    }
}
