//! The JSONPath subset Kubernetes objects are read with: printer columns (`.spec.replicas`,
//! `.a.b[0].c`, `.spec.list[*].kind`, `.status.conditions[?(@.type=="Ready")].status`) and
//! kubectl-style templates (`{.availableReplicas}`, text around `{...}` kept as it is), as
//! Karmada's `statePreservation` rules use them.

use serde_json::Value;

/// The first match of a path.
pub fn first<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    all(obj, path).into_iter().next()
}

/// Every match of a path, in document order. The path may be wrapped in `{...}` and start
/// with `$`.
pub fn all<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut cur: Vec<&Value> = vec![obj];
    for seg in split_segments(path) {
        let (field, selector) = match seg.split_once('[') {
            Some((f, rest)) => (f, Some(rest.strip_suffix(']').unwrap_or(rest))),
            None => (seg, None),
        };
        if !field.is_empty() {
            cur = cur.into_iter().filter_map(|v| v.get(field)).collect();
        }
        let Some(sel) = selector else { continue };
        cur = cur.into_iter().flat_map(|v| select(v, sel)).collect();
    }
    cur
}

/// The items of an array a `[...]` selector picks: `*`, an index, or `?(@.key==value)` /
/// `?(@.key)`.
fn select<'a>(v: &'a Value, sel: &str) -> Vec<&'a Value> {
    let items = v.as_array().map(Vec::as_slice).unwrap_or(&[]);
    if sel == "*" {
        return items.iter().collect();
    }
    if let Some(filter) = sel.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
        return match filter.split_once("==") {
            Some((key, want)) => {
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                let key = key.trim();
                items.iter().filter(|i| i.get(key).is_some_and(|x| text(x) == want)).collect()
            }
            None => items.iter().filter(|i| i.get(filter.trim()).is_some()).collect(),
        };
    }
    sel.parse::<usize>().ok().and_then(|n| items.get(n)).into_iter().collect()
}

/// Split a path on the dots outside brackets.
fn split_segments(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in path.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => {
                if i > start {
                    out.push(&path[start..i]);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < path.len() {
        out.push(&path[start..]);
    }
    out
}

/// A value as a template prints it: a string as it is, anything else as JSON.
pub fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// Why a template could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed action in template {0:?}")]
    Unclosed(String),
    #[error("{0} is not found")]
    NotFound(String),
}

/// Evaluate a kubectl-style template with missing keys refused (client-go's jsonpath with
/// `AllowMissingKeys(false)`): the text outside `{...}` is kept, each action prints its
/// matches separated by spaces.
pub fn template(obj: &Value, template: &str) -> Result<String, TemplateError> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| TemplateError::Unclosed(template.to_string()))?;
        let action = after[..close].trim();
        let found = all(obj, action);
        if found.is_empty() {
            return Err(TemplateError::NotFound(action.trim_start_matches('$').trim_start_matches('.').to_string()));
        }
        out.push_str(&found.iter().map(|v| text(v)).collect::<Vec<_>>().join(" "));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_pick_fields_items_and_filtered_items() {
        let obj = json!({"spec": {"replicas": 3, "list": [{"a": 1}]}, "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]}});
        assert_eq!(first(&obj, ".spec.replicas"), Some(&json!(3)));
        assert_eq!(first(&obj, "{$.spec.list[0].a}"), Some(&json!(1)));
        assert_eq!(first(&obj, ".spec.missing"), None);
        assert_eq!(all(&obj, ".status.conditions[*].type"), [&json!("Ready"), &json!("Synced")]);
        assert_eq!(first(&obj, r#".status.conditions[?(@.type=="Synced")].status"#), Some(&json!("False")));
    }

    #[test]
    fn templates_print_matches_and_refuse_missing_keys() {
        let status = json!({"availableReplicas": 2, "jobID": "abc", "tags": ["x", "y"]});
        assert_eq!(template(&status, "{.jobID}"), Ok("abc".into()));
        assert_eq!(template(&status, "{.availableReplicas}"), Ok("2".into()));
        assert_eq!(template(&status, "id-{.jobID}-{.tags[*]}"), Ok("id-abc-x y".into()));
        assert_eq!(template(&status, "{.checkpoint}"), Err(TemplateError::NotFound("checkpoint".into())));
        assert!(matches!(template(&status, "{.jobID"), Err(TemplateError::Unclosed(_))));
    }
}
