//! Object metadata: reading and writing `metadata` on JSON objects, and the validation rules
//! kube-apiserver applies to names, labels, annotations, finalizers and owner references.

use serde_json::{Map, Value};

use crate::error::Cause;

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

/// `metadata`, created as `{}` when missing or not an object.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Map::new());
    }
    obj["metadata"].as_object_mut().expect("metadata was just made an object")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> Option<&str> {
    meta_str(obj, "namespace").filter(|s| !s.is_empty())
}

pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

pub fn is_terminating(obj: &Value) -> bool {
    meta(obj).and_then(|m| m.get("deletionTimestamp")).is_some_and(|v| !v.is_null())
}

pub fn generation(obj: &Value) -> i64 {
    meta(obj).and_then(|m| m.get("generation")).and_then(Value::as_i64).unwrap_or(0)
}

/// Now as `metav1.Time`: RFC 3339, second precision, `Z`.
pub fn now() -> String {
    now_plus(0)
}

/// `now()` that many seconds from now (a deletionTimestamp with a grace period).
pub fn now_plus(seconds: i64) -> String {
    let t = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Seconds since a `metav1.Time`, for printer columns.
pub fn age_seconds(ts: &str) -> Option<i64> {
    let t: jiff::Timestamp = ts.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - t.as_second())
}

/// `5m`, `3h12m`, `2d`: kubectl's human durations.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    if s < 120 {
        format!("{s}s")
    } else if s < 600 {
        let (m, r) = (s / 60, s % 60);
        if r == 0 { format!("{m}m") } else { format!("{m}m{r}s") }
    } else if s < 3 * 3600 {
        format!("{}m", s / 60)
    } else if s < 8 * 3600 {
        let (h, m) = (s / 3600, (s % 3600) / 60);
        if m == 0 { format!("{h}h") } else { format!("{h}h{m}m") }
    } else if s < 2 * 86400 {
        format!("{}h", s / 3600)
    } else if s < 8 * 86400 {
        let (d, h) = (s / 86400, (s % 86400) / 3600);
        if h == 0 { format!("{d}d") } else { format!("{d}d{h}h") }
    } else if s < 365 * 86400 {
        format!("{}d", s / 86400)
    } else {
        format!("{}y{}d", s / (365 * 86400), (s % (365 * 86400)) / 86400)
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS1123_LABEL_MAX
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= DNS1123_SUBDOMAIN_MAX && s.split('.').all(is_dns1123_label)
}

/// The rule a resource's object names follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    /// Anything that is a valid path segment (RBAC objects allow `system:…`).
    PathSegment,
}

/// The messages of the name rule, in kube-apiserver's words (one cause each); `prefix` for a
/// generateName, whose trailing `-` is allowed.
fn name_errors(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    use flotilla_api::validation::names;
    let masked;
    let name = if prefix && name.len() > 1 && name.ends_with('-') {
        masked = format!("{}a", &name[..name.len() - 1]);
        masked.as_str()
    } else {
        name
    };
    match rule {
        NameRule::Dns1123Subdomain => names::dns1123_subdomain(name),
        NameRule::Dns1123Label => names::dns1123_label(name),
        NameRule::Dns1035Label => names::dns1035_label(name),
        NameRule::PathSegment if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('%') => {
            vec!["may not be '.' or '..' and may not contain '/' or '%'".to_string()]
        }
        NameRule::PathSegment => Vec::new(),
    }
}

/// Validate the metadata every kind shares.
pub fn validate_object_meta(obj: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(m) = meta(obj) else {
        return vec![Cause::new("FieldValueRequired", "metadata", "Required value")];
    };
    use flotilla_api::selector::{label_key_errors, label_value_errors};
    let invalid = |field: &str, value: &dyn std::fmt::Debug, msg: &str| Cause::new("FieldValueInvalid", field, format!("Invalid value: {value:?}: {msg}"));
    if let Some(g) = m.get("generateName").and_then(Value::as_str).filter(|g| !g.is_empty()) {
        for msg in name_errors(rule, g, true) {
            causes.push(invalid("metadata.generateName", &g, &msg));
        }
    }
    match m.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::new("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")),
        Some(n) => {
            for msg in name_errors(rule, n, false) {
                causes.push(invalid("metadata.name", &n, &msg));
            }
        }
    }
    if namespaced && let Some(ns) = m.get("namespace").and_then(Value::as_str).filter(|ns| !ns.is_empty()) {
        for msg in flotilla_api::validation::names::dns1123_label(ns) {
            causes.push(invalid("metadata.namespace", &ns, &msg));
        }
    }
    if let Some(labels) = m.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            for msg in label_key_errors(k) {
                causes.push(invalid("metadata.labels", k, &msg));
            }
            match v.as_str() {
                Some(v) => {
                    for msg in label_value_errors(v) {
                        causes.push(invalid("metadata.labels", &v, &msg));
                    }
                }
                None => causes.push(Cause::new("FieldValueTypeInvalid", format!("metadata.labels.{k}"), "Invalid value: label values must be strings")),
            }
        }
    }
    if let Some(ann) = m.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (k, v) in ann {
            for msg in label_key_errors(&k.to_lowercase()) {
                causes.push(invalid("metadata.annotations", k, &msg));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_MAX_BYTES {
            causes.push(Cause::new("FieldValueTooLong", "metadata.annotations", format!("Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes")));
        }
    }
    if let Some(fins) = m.get("finalizers").and_then(Value::as_array) {
        for (i, f) in fins.iter().enumerate() {
            let Some(name) = f.as_str() else {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    format!("metadata.finalizers[{i}]"),
                    format!("Invalid value: {f}: name is neither a standard finalizer name nor is it fully qualified"),
                ));
                continue;
            };
            // The qualified-name rule names the list, the finalizer rule the item.
            for msg in label_key_errors(name) {
                causes.push(invalid("metadata.finalizers", &name, &msg));
            }
            if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
                causes.push(invalid(&format!("metadata.finalizers[{i}]"), &name, "name is neither a standard finalizer name nor is it fully qualified"));
            }
        }
    }
    if let Some(owners) = m.get("ownerReferences").and_then(Value::as_array) {
        let mut first_controller: Option<String> = None;
        for (i, o) in owners.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if o.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    let msg = if f == "uid" { "Required value: must not be empty" } else { "Required value" };
                    causes.push(Cause::new("FieldValueRequired", format!("metadata.ownerReferences[{i}].{f}"), msg));
                }
            }
            if o.get("controller").and_then(Value::as_bool) == Some(true) {
                let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
                let this = format!("{}/{}", s("kind"), s("name"));
                match &first_controller {
                    None => first_controller = Some(this),
                    Some(first) => causes.push(Cause::new(
                        "FieldValueInvalid",
                        "metadata.ownerReferences",
                        format!(
                            "Invalid value: {}: Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}",
                            go_owner_references(owners)
                        ),
                    )),
                }
            }
        }
    }
    causes
}

/// ownerReferences as Go's encoder writes them: fields in struct order, empty ones left out.
fn go_owner_references(owners: &[Value]) -> String {
    let items: Vec<String> = owners
        .iter()
        .map(|o| {
            // Written by hand: serde_json's maps sort their keys.
            let mut parts = Vec::new();
            for k in ["apiVersion", "kind", "name", "uid"] {
                parts.push(format!("\"{k}\":{}", o.get(k).cloned().unwrap_or(Value::String(String::new()))));
            }
            for k in ["controller", "blockOwnerDeletion"] {
                if let Some(v) = o.get(k).filter(|v| v.is_boolean()) {
                    parts.push(format!("\"{k}\":{v}"));
                }
            }
            format!("{{{}}}", parts.join(","))
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// Finalizer names that need no domain prefix.
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_labels_follow_the_real_rules() {
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("A"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(!name_errors(NameRule::Dns1035Label, "1svc", false).is_empty());
        assert_eq!(name_errors(NameRule::Dns1123Label, "a.b", false), ["must not contain dots"]);
        assert!(name_errors(NameRule::PathSegment, "system:controller", false).is_empty());
        assert!(name_errors(NameRule::Dns1123Subdomain, "web-", true).is_empty(), "a generateName may end in '-'");
        assert!(!name_errors(NameRule::Dns1123Subdomain, "web-", false).is_empty());
    }

    #[test]
    fn metadata_validation_collects_every_cause() {
        let obj = json!({"metadata": {"name": "Bad_Name", "labels": {"ok": "fine", "x": "not ok"}, "finalizers": ["nodomain"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "a", "uid": "1", "controller": true}, {"kind": "Y", "controller": true}]}});
        let causes = validate_object_meta(&obj, NameRule::Dns1123Subdomain, true);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert!(fields.contains(&"metadata.name"));
        assert!(fields.contains(&"metadata.labels"));
        assert!(fields.contains(&"metadata.finalizers[0]"));
        assert!(fields.contains(&"metadata.ownerReferences[1].apiVersion"));
        assert!(fields.contains(&"metadata.ownerReferences"));
        let two = causes.iter().find(|c| c.field == "metadata.ownerReferences").unwrap();
        assert!(two.message.ends_with("Found \"true\" in references for X/a and Y/"), "{}", two.message);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(130), "2m10s");
        assert_eq!(human_duration(3600), "60m");
        assert_eq!(human_duration(4 * 3600 + 60), "4h1m");
        assert_eq!(human_duration(3 * 86400), "3d");
    }
}
