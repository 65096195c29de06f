//! What is made comparable, and how. The same [`Normaliser`] runs over the real server's answers
//! when recording and over Flotilla's when replaying; one instance lives for one case run, so
//! tokens that relate values (uids, resourceVersions) are consistent within a case.
//!
//! - **resourceVersion** of an object becomes `<rv:same>` (equal to the last one seen for the
//!   same kind/namespace/name), `<rv:new>` (greater than every object resourceVersion seen so
//!   far in the case), `<rv:seen>` (equal to one seen before) or `<rv:old>`. That of a list or a
//!   BOOKMARK becomes `<rv:current>` (not older than any object seen) or `<rv:older>`.
//!   Values are never compared, only these relations; other writers on the real server (leases)
//!   move its global revision, so list revisions are only "current or not".
//! - **uids** (any UUID in any string) become `<uid:N>`, numbered by first appearance.
//! - **timestamps** (any string that is an RFC 3339 date-time) become `<time>`.
//! - **managedFields**: each entry's `time` becomes `<time>`; manager, operation, apiVersion,
//!   fieldsType, fieldsV1 and subresource are compared as they are (the keys of `fieldsV1`
//!   that name list elements by value go through the uid and run-value rules).
//! - **generated names**: when a request sends `metadata.generateName`, that prefix (cut to 58
//!   characters, as the server cuts it) followed by five characters of the server's alphabet
//!   becomes `<prefix><suffix>`, wherever it appears.
//! - **allocations**: `clusterIP`/`clusterIPs` entries other than `None` become `<clusterIP>`,
//!   `nodePort`/`healthCheckNodePort` `<nodePort>`, `/api`'s `serverAddress` `<serverAddress>`.
//! - **selfLink** (if present) becomes `<selfLink>`; **continue** tokens become `<continue>`.
//! - **run values**: the case's namespace becomes `{{ns}}` and captured strings of six or more
//!   characters (not all digits) become `{{var}}`, wherever they appear.
//! - **messages**: revision numbers inside the real server's fixed phrases (listed in
//!   [`MESSAGE_RULES`]) become `<rv>`, a client certificate fingerprint `<fingerprint>`;
//!   everything else in a message is compared exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::case::Keep;
use crate::path::{self, Segment};

static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$").expect("valid regex"));
static UUID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").expect("valid regex"));

/// Fixed phrases of the real server whose numbers are resourceVersions (pattern, replacement).
pub const MESSAGE_RULES: &[(&str, &str)] = &[
    (r"too old resource version: \d+ \(\d+\)", "too old resource version: <rv> (<rv>)"),
    (r"Too large resource version: \d+, current: \d+", "Too large resource version: <rv>, current: <rv>"),
    (
        r"ResourceVersion in precondition: \d+, ResourceVersion in object meta: \d+",
        "ResourceVersion in precondition: <rv>, ResourceVersion in object meta: <rv>",
    ),
    (r"resourceVersion: \d+", "resourceVersion: <rv>"),
    // An object quoted as JSON inside a message (a strict patch error quotes the patched object).
    (r#"\\"resourceVersion\\":\\"\d+\\""#, r#"\"resourceVersion\":\"<rv>\""#),
    (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z", "<time>"),
    // The admin client certificate's fingerprint (new with every testenv).
    (r"X509SHA256=[0-9a-f]{64}", "X509SHA256=<fingerprint>"),
    (
        r"the ResourceVersion in the precondition \(\d+\) does not match the ResourceVersion in record \(\d+\)",
        "the ResourceVersion in the precondition (<rv>) does not match the ResourceVersion in record (<rv>)",
    ),
];

static MESSAGES: LazyLock<Vec<(Regex, &'static str)>> =
    LazyLock::new(|| MESSAGE_RULES.iter().map(|(p, r)| (Regex::new(p).expect("valid regex"), *r)).collect());

/// Normalisation state for one case run.
#[derive(Debug, Default)]
pub struct Normaliser {
    /// (value, placeholder), longest value first.
    substitutions: Vec<(String, String)>,
    /// `generateName` prefixes seen in requests, as patterns of the names made from them.
    generated: Vec<(Regex, String)>,
    uids: BTreeMap<String, usize>,
    last_rv: BTreeMap<String, u64>,
    seen: BTreeSet<u64>,
    max_rv: Option<u64>,
}

impl Normaliser {
    pub fn new(namespace: &str) -> Normaliser {
        let mut n = Normaliser::default();
        n.substitute(namespace, "{{ns}}");
        n
    }

    /// Replace `value` by `placeholder` wherever it appears from now on.
    pub fn substitute(&mut self, value: &str, placeholder: &str) {
        self.substitutions.push((value.to_string(), placeholder.to_string()));
        self.substitutions.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
    }

    /// A captured value: substituted when it is distinctive enough not to collide with data.
    pub fn captured(&mut self, var: &str, value: &str) {
        if value.chars().count() >= 6 && !value.chars().all(|c| c.is_ascii_digit()) && !UUID.is_match(value) {
            self.substitute(value, &format!("{{{{{var}}}}}"));
        }
    }

    /// A request asked for a generated name with this prefix.
    pub fn generate_name(&mut self, prefix: &str) {
        let base: String = prefix.chars().take(58).collect();
        if base.is_empty() || self.generated.iter().any(|(_, b)| *b == base) {
            return;
        }
        if let Ok(re) = Regex::new(&format!("{}[bcdfghjklmnpqrstvwxz2456789]{{5}}", regex::escape(&base))) {
            self.generated.push((re, base));
        }
    }

    /// Normalise a response body.
    pub fn body(&mut self, mut v: Value) -> Value {
        self.resource_versions(&mut v);
        self.walk(&mut v);
        v
    }

    /// Normalise the events of a watch (each `{"type": ..., "object": ...}`).
    pub fn events(&mut self, events: Vec<Value>) -> Value {
        let mut out = Vec::with_capacity(events.len());
        for mut ev in events {
            if ev.get("object").is_none() {
                // Not a watch event (a server that answered with a plain object).
                out.push(self.body(ev));
                continue;
            }
            let kind = ev.get("type").and_then(Value::as_str).unwrap_or("").to_string();
            if let Some(obj) = ev.get_mut("object") {
                match kind.as_str() {
                    "BOOKMARK" => self.collection_rv(obj),
                    "ERROR" => {}
                    _ => {
                        let k = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
                        self.object_rv(obj, &k);
                    }
                }
            }
            self.walk(&mut ev);
            out.push(ev);
        }
        Value::Array(out)
    }

    /// Normalise one string (header values, messages, any JSON string).
    pub fn text(&mut self, s: &str) -> String {
        // Captured values first: a captured timestamp stays recognisable as itself.
        if let Some((_, placeholder)) = self.substitutions.iter().find(|(v, _)| v == s) {
            return placeholder.clone();
        }
        if TIMESTAMP.is_match(s) {
            return "<time>".into();
        }
        let mut out = s.to_string();
        if UUID.is_match(&out) {
            let found: Vec<String> = UUID.find_iter(&out).map(|m| m.as_str().to_string()).collect();
            for u in found {
                let next = self.uids.len() + 1;
                let n = *self.uids.entry(u.clone()).or_insert(next);
                out = out.replace(&u, &format!("<uid:{n}>"));
            }
        }
        for (value, placeholder) in &self.substitutions {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), placeholder);
            }
        }
        for (re, base) in &self.generated {
            if re.is_match(&out) {
                out = re.replace_all(&out, regex::NoExpand(&format!("{base}<suffix>"))).into_owned();
            }
        }
        for (re, with) in MESSAGES.iter() {
            if re.is_match(&out) {
                out = re.replace_all(&out, *with).into_owned();
            }
        }
        out
    }

    fn resource_versions(&mut self, v: &mut Value) {
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        if kind == "Status" {
            return;
        }
        if kind == "Table" {
            // A Table (`as=Table`): its revision is the list's, each row's object an object.
            self.collection_rv(v);
            if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
                for row in rows {
                    if let Some(obj) = row.get_mut("object") {
                        let k = obj.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
                        self.object_rv(obj, &k);
                    }
                }
            }
        } else if v.get("items").is_some_and(Value::is_array) {
            self.collection_rv(v);
            let item_kind = kind.strip_suffix("List").unwrap_or(&kind).to_string();
            if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
                for item in items {
                    let k = item.get("kind").and_then(Value::as_str).map(String::from).unwrap_or_else(|| item_kind.clone());
                    self.object_rv(item, &k);
                }
            }
        } else if v.get("metadata").is_some_and(Value::is_object) {
            self.object_rv(v, &kind);
        }
    }

    fn object_rv(&mut self, obj: &mut Value, kind: &str) {
        let meta = obj.get("metadata");
        let identity = format!(
            "{kind}/{}/{}",
            meta.and_then(|m| m.get("namespace")).and_then(Value::as_str).unwrap_or(""),
            meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("")
        );
        let Some(slot) = obj.pointer_mut("/metadata/resourceVersion") else { return };
        let Some(rv) = slot.as_str().and_then(|s| s.parse::<u64>().ok()) else { return };
        let token = if self.last_rv.get(&identity) == Some(&rv) {
            "same"
        } else if self.max_rv.is_none_or(|m| rv > m) {
            "new"
        } else if self.seen.contains(&rv) {
            "seen"
        } else {
            "old"
        };
        *slot = json!(format!("<rv:{token}>"));
        self.last_rv.insert(identity, rv);
        self.seen.insert(rv);
        self.max_rv = Some(self.max_rv.map_or(rv, |m| m.max(rv)));
    }

    fn collection_rv(&mut self, obj: &mut Value) {
        let Some(slot) = obj.pointer_mut("/metadata/resourceVersion") else { return };
        let Some(rv) = slot.as_str().and_then(|s| s.parse::<u64>().ok()) else { return };
        // Only "current or older": whether an older list revision equals some object's depends
        // on whether anything else (a lease) wrote in between, on the real server.
        let token = if self.max_rv.is_none_or(|m| rv >= m) { "current" } else { "older" };
        *slot = json!(format!("<rv:{token}>"));
    }

    fn walk(&mut self, v: &mut Value) {
        match v {
            Value::String(s) => {
                let t = self.text(s);
                *s = t;
            }
            Value::Array(items) => {
                for item in items {
                    self.walk(item);
                }
            }
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    if let Some(token) = allocation_token(key, item) {
                        *item = token;
                    } else if key == "fieldsV1" {
                        self.field_set(item);
                    } else {
                        self.walk(item);
                    }
                }
            }
            _ => {}
        }
    }

    /// A managedFields entry's `fieldsV1`: its keys name list elements by value
    /// (`k:{"uid":"…"}`, `v:"{{ns}}"`), so keys are normalised like strings.
    fn field_set(&mut self, v: &mut Value) {
        if let Value::Object(map) = v {
            for (key, mut item) in std::mem::take(map) {
                self.field_set(&mut item);
                map.insert(self.text(&key), item);
            }
        }
    }
}

/// Fields whose value the server allocates or encodes opaquely.
fn allocation_token(key: &str, v: &Value) -> Option<Value> {
    let ip = |s: &str| if s.is_empty() || s == "None" { json!(s) } else { json!("<clusterIP>") };
    match (key, v) {
        ("continue", Value::String(s)) if !s.is_empty() => Some(json!("<continue>")),
        ("clusterIP", Value::String(s)) => Some(ip(s)),
        ("clusterIPs", Value::Array(a)) => Some(Value::Array(a.iter().map(|x| x.as_str().map_or(x.clone(), ip)).collect())),
        ("nodePort" | "healthCheckNodePort", Value::Number(_)) => Some(json!("<nodePort>")),
        ("serverAddress", Value::String(_)) => Some(json!("<serverAddress>")),
        ("selfLink", Value::String(_)) => Some(json!("<selfLink>")),
        _ => None,
    }
}

/// Sort the arrays at `paths` (by their compact JSON): for lists whose order the server does
/// not define.
pub fn unordered(v: &mut Value, paths: &[String]) {
    for p in paths {
        let Ok(at) = path::parse(p) else { continue };
        path::for_each_mut(v, &at, &mut |arr| {
            if let Some(items) = arr.as_array_mut() {
                items.sort_by_key(|x| serde_json::to_string(x).unwrap_or_default());
            }
        });
    }
}

/// Keys and value types only.
pub fn shape(v: &Value) -> Value {
    match v {
        Value::Null => json!("<null>"),
        Value::Bool(_) => json!("<bool>"),
        Value::Number(_) => json!("<number>"),
        Value::String(_) => json!("<string>"),
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), shape(x))).collect()),
    }
}

/// Apply a step's `keep` filters; an array left empty is removed.
pub fn keep(v: &mut Value, filters: &[Keep]) {
    for k in filters {
        let Ok(at) = path::parse(&k.path) else { continue };
        let Ok(key) = path::parse(&k.key) else { continue };
        path::for_each_mut(v, &at, &mut |arr| {
            if let Some(items) = arr.as_array_mut() {
                let key_of = |x: &Value| path::get(x, &key).and_then(Value::as_str).unwrap_or("").to_string();
                items.retain(|x| k.values.iter().any(|want| *want == key_of(x)));
                items.sort_by_key(key_of);
            }
        });
        // A list the filter emptied goes: servers omit empty lists of this kind (subresources),
        // so an empty one would be an artefact of the filter.
        if let Some((Segment::Key(last), parent)) = at.split_last() {
            path::for_each_mut(v, parent, &mut |obj| {
                if let Some(m) = obj.as_object_mut()
                    && m.get(last.as_str()).and_then(Value::as_array).is_some_and(Vec::is_empty)
                {
                    m.remove(last.as_str());
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_become_relations() {
        let mut n = Normaliser::new("c-x");
        let a = n.body(json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "c-x", "resourceVersion": "10"}}));
        assert_eq!(a["metadata"]["resourceVersion"], "<rv:new>");
        assert_eq!(a["metadata"]["namespace"], "{{ns}}");
        let same = n.body(json!({"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "c-x", "resourceVersion": "10"}}));
        assert_eq!(same["metadata"]["resourceVersion"], "<rv:same>");
        let list = n.body(json!({"kind": "ConfigMapList", "metadata": {"resourceVersion": "15"}, "items": [
            {"metadata": {"name": "b", "namespace": "c-x", "resourceVersion": "12"}},
            {"metadata": {"name": "a", "namespace": "c-x", "resourceVersion": "10"}},
        ]}));
        assert_eq!(list["metadata"]["resourceVersion"], "<rv:current>");
        assert_eq!(list["items"][0]["metadata"]["resourceVersion"], "<rv:new>");
        assert_eq!(list["items"][1]["metadata"]["resourceVersion"], "<rv:same>");
        let old = n.body(json!({"kind": "ConfigMapList", "metadata": {"resourceVersion": "10"}, "items": []}));
        assert_eq!(old["metadata"]["resourceVersion"], "<rv:older>");
    }

    #[test]
    fn uids_times_and_allocations() {
        let mut n = Normaliser::new("c-x");
        n.generate_name("web-");
        let v = n.body(json!({
            "metadata": {"uid": "0b7e8c3c-1f2a-4c55-9e0a-0123456789ab", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "generateName": "web-", "name": "web-x7k2p",
                         "managedFields": [{"manager": "m", "time": "2026-01-01T00:00:01Z",
                                            "fieldsV1": {"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"0b7e8c3c-1f2a-4c55-9e0a-0123456789ab\"}": {}}}}}]},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"nodePort": 30001}]},
            "message": "uid 0b7e8c3c-1f2a-4c55-9e0a-0123456789ab in c-x: too old resource version: 1 (523)"
        }));
        assert_eq!(v["metadata"]["uid"], "<uid:1>");
        assert_eq!(v["metadata"]["creationTimestamp"], "<time>");
        assert_eq!(v["metadata"]["name"], "web-<suffix>");
        assert_eq!(
            v["metadata"]["managedFields"],
            json!([{"manager": "m", "time": "<time>", "fieldsV1": {"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"<uid:1>\"}": {}}}}}])
        );
        assert_eq!(v["spec"]["clusterIP"], "<clusterIP>");
        assert_eq!(v["spec"]["ports"][0]["nodePort"], "<nodePort>");
        assert_eq!(v["message"], "uid <uid:1> in {{ns}}: too old resource version: <rv> (<rv>)");
    }

    #[test]
    fn objects_quoted_in_messages() {
        let mut n = Normaliser::new("c-x");
        let quoted = r#"patch: Invalid value: "{\"metadata\":{\"resourceVersion\":\"219\",\"creationTimestamp\":\"2026-11-30T15:22:28Z\"}}""#;
        assert_eq!(n.text(quoted), r#"patch: Invalid value: "{\"metadata\":{\"resourceVersion\":\"<rv>\",\"creationTimestamp\":\"<time>\"}}""#);
    }

    #[test]
    fn table_rows_carry_object_resource_versions() {
        let mut n = Normaliser::new("c-x");
        n.body(json!({"kind": "Widget", "metadata": {"name": "a", "namespace": "c-x", "resourceVersion": "10"}}));
        let t = n.body(json!({"kind": "Table", "metadata": {"resourceVersion": "12"}, "rows": [
            {"cells": ["a"], "object": {"kind": "PartialObjectMetadata", "metadata": {"name": "a", "namespace": "c-x", "resourceVersion": "10"}}},
        ]}));
        assert_eq!(t["metadata"]["resourceVersion"], "<rv:current>");
        assert_eq!(t["rows"][0]["object"]["metadata"]["resourceVersion"], "<rv:seen>");
    }

    #[test]
    fn keep_filters_and_sorts() {
        let mut v = json!({"resources": [{"name": "pods"}, {"name": "bindings"}, {"name": "configmaps"}]});
        keep(&mut v, &[Keep { path: "resources".into(), key: "name".into(), values: vec!["pods".into(), "configmaps".into()] }]);
        assert_eq!(v, json!({"resources": [{"name": "configmaps"}, {"name": "pods"}]}));
    }
}
