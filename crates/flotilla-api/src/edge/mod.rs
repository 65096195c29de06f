//! Edge sync-back's change model (ADR 0032): what a member changed while its control plane was
//! away, and what to do with each change once it is back.
//!
//! - [`SyncPolicy`] and [`SyncSettings`]: the user's choice, read from annotations on the
//!   resource template, the Cluster and the (Cluster)PropagationPolicy — the most specific wins
//!   ([`resolve`]); [`validate_annotations`] refuses bad values at admission.
//! - [`FieldPattern`]: a field path of `edge.flotilla.io/edge-wins-fields`
//!   (`spec.template.spec.containers[*].image`), and the concrete [`FieldPath`] of a change.
//! - [`drift`]: the field changes between what the last applied manifest wants (after Karmada's
//!   Retain) and the member's object — exactly what drift correction would revert.
//! - [`decide`]: one change's outcome given the control plane's current value (three-way).
//! - [`without_secret_values`]: a Secret as the records may hold it (digests, not values).

mod drift;
mod path;

use std::collections::BTreeMap;

use serde_json::Value;

pub use drift::{FieldChange, drift};
pub use path::{FieldPath, FieldPattern, Segment};

use crate::admission::FieldError;

/// `ControlPlaneWins` (default), `EdgeWins` or `Manual`.
pub const SYNC_POLICY_ANNOTATION: &str = "edge.flotilla.io/sync-policy";
/// Comma-separated [`FieldPattern`]s the edge wins under `EdgeWins` (absent: every field).
pub const EDGE_WINS_FIELDS_ANNOTATION: &str = "edge.flotilla.io/edge-wins-fields";

/// Who wins when the edge changed an object while its control plane was away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncPolicy {
    /// The change is reverted on reconnect — and reported, never silently.
    #[default]
    ControlPlaneWins,
    /// The change (of the listed fields) is brought back into the control plane's desired state.
    EdgeWins,
    /// The object is held as the edge left it, marked conflicted, until someone decides.
    Manual,
}

impl SyncPolicy {
    pub const ALL: [&'static str; 3] = ["ControlPlaneWins", "EdgeWins", "Manual"];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncPolicy::ControlPlaneWins => "ControlPlaneWins",
            SyncPolicy::EdgeWins => "EdgeWins",
            SyncPolicy::Manual => "Manual",
        }
    }

    pub fn parse(s: &str) -> Option<SyncPolicy> {
        match s {
            "ControlPlaneWins" => Some(SyncPolicy::ControlPlaneWins),
            "EdgeWins" => Some(SyncPolicy::EdgeWins),
            "Manual" => Some(SyncPolicy::Manual),
            _ => None,
        }
    }
}

impl std::fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sync policy and, under `EdgeWins`, the fields it covers (`None`: all of them, deletion of
/// the whole object included).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncSettings {
    pub policy: SyncPolicy,
    pub edge_wins: Option<Vec<FieldPattern>>,
}

impl SyncSettings {
    /// Whether the edge's value of `path` wins.
    pub fn edge_wins(&self, path: &FieldPath) -> bool {
        self.policy == SyncPolicy::EdgeWins && self.edge_wins.as_ref().is_none_or(|patterns| patterns.iter().any(|p| p.covers(path)))
    }
}

/// A bad sync annotation: which one and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("annotation {annotation}: {message}")]
pub struct AnnotationError {
    pub annotation: &'static str,
    pub value: String,
    pub message: String,
}

/// The settings one object's annotations give, if it sets any.
pub fn settings_from(annotations: &BTreeMap<String, String>) -> Result<Option<SyncSettings>, AnnotationError> {
    let policy = annotations.get(SYNC_POLICY_ANNOTATION);
    let fields = annotations.get(EDGE_WINS_FIELDS_ANNOTATION);
    let Some(policy) = policy else {
        return match fields {
            None => Ok(None),
            Some(v) => Err(AnnotationError {
                annotation: EDGE_WINS_FIELDS_ANNOTATION,
                value: v.clone(),
                message: format!("given without {SYNC_POLICY_ANNOTATION}: EdgeWins beside it"),
            }),
        };
    };
    let policy = SyncPolicy::parse(policy.trim()).ok_or_else(|| AnnotationError {
        annotation: SYNC_POLICY_ANNOTATION,
        value: policy.clone(),
        message: format!("supported values: {}", SyncPolicy::ALL.map(|s| format!("\"{s}\"")).join(", ")),
    })?;
    let edge_wins = match fields {
        None => None,
        Some(v) if policy != SyncPolicy::EdgeWins => {
            return Err(AnnotationError {
                annotation: EDGE_WINS_FIELDS_ANNOTATION,
                value: v.clone(),
                message: format!("applies only to {SYNC_POLICY_ANNOTATION}: EdgeWins, not {policy}"),
            });
        }
        Some(v) => {
            let patterns = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    FieldPattern::parse(p).map_err(|e| AnnotationError {
                        annotation: EDGE_WINS_FIELDS_ANNOTATION,
                        value: v.clone(),
                        message: format!("{p:?}: {e}"),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            if patterns.is_empty() {
                return Err(AnnotationError {
                    annotation: EDGE_WINS_FIELDS_ANNOTATION,
                    value: v.clone(),
                    message: "lists no field (leave it out for every field)".into(),
                });
            }
            Some(patterns)
        }
    };
    Ok(Some(SyncSettings { policy, edge_wins }))
}

/// The settings for one object in one cluster: the first of `levels` (most specific first:
/// the resource template, the Cluster, the policy) that sets any; the default otherwise.
pub fn resolve<'a>(levels: impl IntoIterator<Item = Option<&'a BTreeMap<String, String>>>) -> Result<SyncSettings, AnnotationError> {
    for annotations in levels.into_iter().flatten() {
        if let Some(s) = settings_from(annotations)? {
            return Ok(s);
        }
    }
    Ok(SyncSettings::default())
}

/// Admission: the object's sync annotations, as `metadata.annotations[...]` field errors.
pub fn validate_annotations(annotations: Option<&BTreeMap<String, String>>) -> Vec<FieldError> {
    let Some(annotations) = annotations else { return Vec::new() };
    match settings_from(annotations) {
        Ok(_) => Vec::new(),
        Err(e) => vec![FieldError::invalid(format!("metadata.annotations[{}]", e.annotation), format!("Invalid value: {:?}: {}", e.value, e.message))],
    }
}

/// The annotation `kubectl apply` keeps the whole last applied object in — a Secret's values
/// included.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn digest(v: &mut Value) {
    if let Some(text) = v.as_str() {
        let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
        *v = Value::String(format!("sha256:{}", digest.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>()));
    }
}

/// `manifest` as edge records may hold it: a core Secret's `data` and `stringData` values, and
/// the copy of them `kubectl apply` keeps in an annotation, replaced by their digests
/// (`sha256:<hex>`), so that no Secret's content is copied out of it into an object others may
/// read. Applied alike to the member's Secret, a change of a value still shows, as a change of
/// its digest.
pub fn without_secret_values(manifest: &Value) -> Value {
    let secret = manifest["kind"] == "Secret" && manifest["apiVersion"] == "v1";
    let mut out = manifest.clone();
    if !secret {
        return out;
    }
    for field in ["data", "stringData"] {
        out.get_mut(field).and_then(Value::as_object_mut).into_iter().flat_map(|m| m.values_mut()).for_each(digest);
    }
    if let Some(v) = out.pointer_mut(&format!("/metadata/annotations/{}", LAST_APPLIED_ANNOTATION.replace('/', "~1"))) {
        digest(v);
    }
    out
}

/// What becomes of one edge change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The control plane wants what the edge has now: nothing to do.
    Converged,
    /// The control plane's value is put back (and the change reported).
    Revert,
    /// The edge's value becomes the control plane's; `over_control_plane` when the control plane
    /// had changed the same field meanwhile (its change loses, and the report says so).
    Adopt { over_control_plane: bool },
    /// Held as the edge left it until someone decides.
    Conflict,
}

/// The outcome of `change` (a field the edge changed from `change.old` to `change.new`) when the
/// control plane now wants `control_plane` there (`None`: the field, or the object, is not in
/// its desired state any more).
pub fn decide(change: &FieldChange, control_plane: Option<&Value>, settings: &SyncSettings) -> Outcome {
    if change.new.as_ref() == control_plane {
        return Outcome::Converged;
    }
    match settings.policy {
        SyncPolicy::Manual => Outcome::Conflict,
        SyncPolicy::EdgeWins if settings.edge_wins(&change.path) => Outcome::Adopt { over_control_plane: control_plane != change.old.as_ref() },
        SyncPolicy::EdgeWins | SyncPolicy::ControlPlaneWins => Outcome::Revert,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn settings_come_from_the_most_specific_object_that_sets_any() {
        let template = annotations(&[("app", "x")]);
        let cluster = annotations(&[(SYNC_POLICY_ANNOTATION, "Manual")]);
        let policy = annotations(&[(SYNC_POLICY_ANNOTATION, "EdgeWins"), (EDGE_WINS_FIELDS_ANNOTATION, "spec.replicas, metadata.labels")]);
        assert_eq!(resolve([Some(&template), Some(&cluster), Some(&policy)]).unwrap().policy, SyncPolicy::Manual);
        let s = resolve([Some(&template), None, Some(&policy)]).unwrap();
        assert_eq!(s.policy, SyncPolicy::EdgeWins);
        assert_eq!(s.edge_wins.as_ref().map(Vec::len), Some(2));
        assert_eq!(resolve([None, None, None]).unwrap(), SyncSettings::default());
        assert_eq!(SyncSettings::default().policy, SyncPolicy::ControlPlaneWins);
    }

    #[test]
    fn bad_annotations_name_the_annotation_and_why() {
        let e = settings_from(&annotations(&[(SYNC_POLICY_ANNOTATION, "EdgeFirst")])).unwrap_err();
        assert_eq!(e.annotation, SYNC_POLICY_ANNOTATION);
        assert!(e.message.contains("\"ControlPlaneWins\", \"EdgeWins\", \"Manual\""), "{e}");
        let e = settings_from(&annotations(&[(EDGE_WINS_FIELDS_ANNOTATION, "spec.replicas")])).unwrap_err();
        assert!(e.message.contains("without"), "{e}");
        let e = settings_from(&annotations(&[(SYNC_POLICY_ANNOTATION, "Manual"), (EDGE_WINS_FIELDS_ANNOTATION, "spec.replicas")])).unwrap_err();
        assert!(e.message.contains("only to"), "{e}");
        let e = settings_from(&annotations(&[(SYNC_POLICY_ANNOTATION, "EdgeWins"), (EDGE_WINS_FIELDS_ANNOTATION, "spec..replicas")])).unwrap_err();
        assert!(e.message.contains("spec..replicas"), "{e}");
        let errors = validate_annotations(Some(&annotations(&[(SYNC_POLICY_ANNOTATION, "edgewins")])));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "metadata.annotations[edge.flotilla.io/sync-policy]");
        assert!(errors[0].message.contains("\"edgewins\""), "{}", errors[0].message);
        assert!(validate_annotations(Some(&annotations(&[(SYNC_POLICY_ANNOTATION, "EdgeWins")]))).is_empty());
    }

    #[test]
    fn secret_values_are_kept_as_digests_only() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "data": {"password": "c2VjcmV0"}, "stringData": {"token": "t0p"},
            "metadata": {"name": "s", "annotations": {LAST_APPLIED_ANNOTATION: "{\"data\":{\"password\":\"c2VjcmV0\"}}", "team": "a"}}});
        let kept = without_secret_values(&secret);
        let text = kept.to_string();
        assert!(!text.contains("c2VjcmV0") && !text.contains("t0p"), "{text}");
        assert!(kept["data"]["password"].as_str().unwrap().starts_with("sha256:"));
        assert_eq!(kept["metadata"]["name"], "s");
        assert_eq!(kept["metadata"]["annotations"]["team"], "a");
        // A changed value shows as a changed digest; an unchanged one does not.
        let mut edited = secret.clone();
        edited["data"]["password"] = json!("b3RoZXI=");
        let changes = drift(&kept, &without_secret_values(&edited));
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path.to_string(), "data.password");
        assert!(drift(&kept, &without_secret_values(&secret)).is_empty());
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}});
        assert_eq!(without_secret_values(&cm), cm);
    }

    fn change(path: &str, old: Value, new: Value) -> FieldChange {
        FieldChange { path: FieldPath::parse(path).unwrap(), old: Some(old), new: Some(new) }
    }

    #[test]
    fn each_policy_decides_a_change_and_the_three_way_cases() {
        let replicas = change("spec.replicas", json!(2), json!(5));
        let cpw = SyncSettings::default();
        let edge = SyncSettings { policy: SyncPolicy::EdgeWins, edge_wins: Some(vec![FieldPattern::parse("spec.replicas").unwrap()]) };
        let manual = SyncSettings { policy: SyncPolicy::Manual, edge_wins: None };
        // The control plane did not touch the field.
        assert_eq!(decide(&replicas, Some(&json!(2)), &cpw), Outcome::Revert);
        assert_eq!(decide(&replicas, Some(&json!(2)), &edge), Outcome::Adopt { over_control_plane: false });
        assert_eq!(decide(&replicas, Some(&json!(2)), &manual), Outcome::Conflict);
        // Both changed the same field.
        assert_eq!(decide(&replicas, Some(&json!(3)), &edge), Outcome::Adopt { over_control_plane: true });
        assert_eq!(decide(&replicas, Some(&json!(3)), &cpw), Outcome::Revert);
        // Both made the same change.
        assert_eq!(decide(&replicas, Some(&json!(5)), &manual), Outcome::Converged);
        // A field outside the EdgeWins list is the control plane's.
        let image = change("spec.template.spec.containers[0].image", json!("nginx:1.27"), json!("nginx:1.28"));
        assert_eq!(decide(&image, Some(&json!("nginx:1.27")), &edge), Outcome::Revert);
        // A deletion is a change of the whole object: only EdgeWins over every field keeps it.
        let deleted = FieldChange { path: FieldPath::root(), old: Some(json!({"kind": "ConfigMap"})), new: None };
        assert_eq!(decide(&deleted, Some(&json!({"kind": "ConfigMap"})), &edge), Outcome::Revert);
        let all = SyncSettings { policy: SyncPolicy::EdgeWins, edge_wins: None };
        assert_eq!(decide(&deleted, Some(&json!({"kind": "ConfigMap"})), &all), Outcome::Adopt { over_control_plane: false });
    }
}
