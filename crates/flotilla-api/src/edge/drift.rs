//! What a member changed: the field changes between `desired` — the last applied manifest after
//! Karmada's Retain against the member's object (`interpreter::retain`) — and the member's
//! object. The comparison is the one drift correction makes (`flotilla_member::apply::
//! is_derivative`): a field the manifest leaves out, or sets to its zero value, may hold anything
//! in the member (the API server's defaults); labels and annotations compare exactly (Retain has
//! already copied in those the template does not manage); `status` and the server's metadata are
//! not compared. So a change is reported exactly when correcting drift would revert it.

use serde_json::{Map, Value};

use super::path::{FieldPath, Segment};

/// One field the member holds differently from the manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldChange {
    pub path: FieldPath,
    /// The manifest's value (`None`: the manifest does not set it — a label added at the edge).
    pub old: Option<Value>,
    /// The member's value (`None`: removed at the edge).
    pub new: Option<Value>,
}

/// Metadata fields the API server owns.
const SERVER_METADATA: [&str; 5] = ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"];

/// Every field change from `desired` to `observed`, in path order within each part.
pub fn drift(desired: &Value, observed: &Value) -> Vec<FieldChange> {
    let mut out = Vec::new();
    let empty = Map::new();
    for field in ["labels", "annotations"] {
        let map = |v: &Value| v.pointer(&format!("/metadata/{field}")).and_then(Value::as_object).cloned().unwrap_or_else(|| empty.clone());
        let (d, o) = (map(desired), map(observed));
        let path = |k: &str| FieldPath(vec![Segment::Key("metadata".into()), Segment::Key(field.into()), Segment::Key(k.into())]);
        for (k, v) in &d {
            if o.get(k) != Some(v) {
                out.push(FieldChange { path: path(k), old: Some(v.clone()), new: o.get(k).cloned() });
            }
        }
        for (k, v) in o.iter().filter(|(k, _)| !d.contains_key(*k)) {
            out.push(FieldChange { path: path(k), old: None, new: Some(v.clone()) });
        }
    }
    let (Some(d), Some(o)) = (desired.as_object(), observed.as_object()) else {
        if desired != observed {
            out.push(FieldChange { path: FieldPath::root(), old: Some(desired.clone()), new: Some(observed.clone()) });
        }
        return out;
    };
    for (k, v) in d {
        match k.as_str() {
            "status" => {}
            "metadata" => {
                let om = o.get("metadata");
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if mk == "labels" || mk == "annotations" || SERVER_METADATA.contains(&mk.as_str()) {
                        continue;
                    }
                    let path = FieldPath(vec![Segment::Key("metadata".into()), Segment::Key(mk.clone())]);
                    walk(path, mv, om.and_then(|m| m.get(mk)), &mut out);
                }
            }
            _ => walk(FieldPath(vec![Segment::Key(k.clone())]), v, o.get(k), &mut out),
        }
    }
    out
}

fn walk(path: FieldPath, d: &Value, o: Option<&Value>, out: &mut Vec<FieldChange>) {
    let ov = o.unwrap_or(&Value::Null);
    match (d, ov) {
        (Value::Null, _) => {}
        (Value::Object(dm), Value::Object(om)) => {
            for (k, v) in dm {
                walk(path.child(Segment::Key(k.clone())), v, om.get(k), out);
            }
        }
        // Zero values in the manifest are "unset" (Go's omitempty).
        (Value::Object(m), Value::Null) if m.is_empty() => {}
        (Value::Array(a), Value::Null) if a.is_empty() => {}
        (Value::String(s), Value::Null) if s.is_empty() => {}
        (Value::Bool(false), Value::Null) => {}
        (Value::Number(n), Value::Null) if n.as_f64() == Some(0.0) => {}
        (Value::Array(da), Value::Array(oa)) if da.len() == oa.len() => {
            for (i, (a, b)) in da.iter().zip(oa).enumerate() {
                walk(path.child(Segment::Index(i)), a, Some(b), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a == b || a.as_f64() == b.as_f64() => {}
        _ if d == ov => {}
        _ => out.push(FieldChange { path, old: Some(d.clone()), new: o.filter(|v| !v.is_null()).cloned() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image, "resources": {}}]}}}
        })
    }

    fn paths(changes: &[FieldChange]) -> Vec<String> {
        changes.iter().map(|c| c.path.to_string()).collect()
    }

    #[test]
    fn the_edges_edits_are_found_field_by_field() {
        let desired = deployment(2, "nginx:1.27");
        let mut observed = deployment(5, "nginx:1.28");
        // What the API server adds is not a change.
        observed["metadata"]["resourceVersion"] = json!("42");
        observed["metadata"]["uid"] = json!("u-1");
        observed["status"] = json!({"replicas": 5});
        observed["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        observed["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        observed["metadata"]["labels"]["tier"] = json!("back");
        observed["metadata"]["labels"]["edge"] = json!("yes");
        let changes = drift(&desired, &observed);
        assert_eq!(paths(&changes), ["metadata.labels.tier", "metadata.labels.edge", "spec.replicas", "spec.template.spec.containers[0].image"], "{changes:?}");
        assert_eq!(changes[2].old, Some(json!(2)));
        assert_eq!(changes[2].new, Some(json!(5)));
        assert_eq!(changes[1].old, None);
        assert!(drift(&desired, &deployment(2, "nginx:1.27")).is_empty());
    }

    #[test]
    fn removals_and_reshaped_lists_are_changes_at_their_level() {
        let desired = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        let observed = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let changes = drift(&desired, &observed);
        assert_eq!(paths(&changes), ["data.b"]);
        assert_eq!(changes[0].new, None);
        let desired = json!({"spec": {"ports": [{"port": 80}]}});
        let observed = json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}});
        let changes = drift(&desired, &observed);
        assert_eq!(paths(&changes), ["spec.ports"]);
        // 1 and 1.0 are the same number; zero values are "unset".
        assert!(drift(&json!({"spec": {"n": 1, "flag": false, "s": "", "m": {}}}), &json!({"spec": {"n": 1.0}})).is_empty());
    }
}
