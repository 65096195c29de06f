//! The built-in admission chain for the federation kinds: what their CRDs cannot express.
//!
//! Upstream these are webhooks (karmada-webhook, kubefed-admission-webhook) and the strategy of
//! karmada-aggregated-apiserver (for Cluster). Here they are pure functions keyed by
//! group/version/kind, which the API server calls after CRD schema defaulting ([`default`],
//! the mutating step) and before persisting ([`validate`], the validating step):
//!
//! 1. decode, CRD schema defaults (the API server's CRD machinery);
//! 2. [`default`] — mutating admission;
//! 3. CRD schema validation (the API server);
//! 4. [`validate`] — validating admission; any error is a 422 with these causes.
//!
//! Invariant: no clock, randomness or I/O here. The UUIDs that permanent-id labels carry and the
//! time that NoExecute taints are stamped with come in through [`Defaulting`].

mod go_url;
pub mod karmada;
pub mod kubefed;

use std::fmt;

pub use kube_core::GroupVersionKind;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The request's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// What defaulting needs from outside the object.
pub struct Defaulting<'a> {
    /// Create or Update.
    pub operation: Operation,
    /// Namespace of the request (upstream webhooks read it from the request, since the object's
    /// own namespace may still be unset on create).
    pub namespace: Option<&'a str>,
    /// The current time, RFC 3339 (`2024-05-01T10:00:00Z`).
    pub now: &'a str,
    /// Returns a fresh UUID string on each call.
    pub new_uuid: &'a mut dyn FnMut() -> String,
}

impl fmt::Debug for Defaulting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Defaulting").field("operation", &self.operation).field("namespace", &self.namespace).field("now", &self.now).finish_non_exhaustive()
    }
}

/// What the administrator configured for admission (karmada-webhook's flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// karmada-webhook's `--allow-no-execute-taint-policy`: a ClusterTaintPolicy may manage
    /// NoExecute taints (which evict). Off by default, as in Karmada.
    pub allow_no_execute_taint_policy: bool,
}

/// Why a field is rejected; the strings are Kubernetes' `StatusCause` types.
pub use crate::validation::Reason;

/// One rejected field, as a Kubernetes `StatusCause`: `path` is the field path
/// (`spec.placement.spreadConstraints[0]`), `message` the detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub reason: Reason,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        FieldError { path: path.into(), reason, message: message.into() }
    }

    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(path, Reason::Invalid, message)
    }

    pub fn required(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(path, Reason::Required, message)
    }

    pub fn forbidden(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(path, Reason::Forbidden, message)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Whether the chain has anything for `gvk`.
pub fn handles(gvk: &GroupVersionKind) -> bool {
    karmada::handles(gvk) || kubefed::handles(gvk)
}

/// The mutating step for `obj` of kind `gvk`. Kinds the chain does not know are left alone.
/// An error means the request is rejected (upstream: the webhook answered an error).
pub fn default(gvk: &GroupVersionKind, obj: &mut Value, ctx: &mut Defaulting<'_>) -> Result<(), Vec<FieldError>> {
    if karmada::handles(gvk) {
        karmada::default(gvk, obj, ctx)
    } else if kubefed::handles(gvk) {
        kubefed::default(gvk, obj, ctx)
    } else {
        Ok(())
    }
}

/// The validating step for `obj` of kind `gvk`; `old` is the stored object on update. Empty
/// means admitted.
pub fn validate(gvk: &GroupVersionKind, obj: &Value, old: Option<&Value>, settings: &Settings) -> Vec<FieldError> {
    if karmada::handles(gvk) {
        karmada::validate(gvk, obj, old, settings)
    } else if kubefed::handles(gvk) {
        kubefed::validate(gvk, obj, old)
    } else {
        Vec::new()
    }
}

/// Flotilla's admission by requester (ADR 0028): a pull agent (`system:karmada:agent:<cluster>`)
/// may write only its own Cluster, and only in Pull mode with no credential Secret — RBAC can
/// name the object of every verb but create, so the create is decided here. Why the write is
/// refused, if it is.
pub fn refuse_for_requester(gvk: &GroupVersionKind, user: &str, obj: &Value) -> Option<String> {
    let cluster = user.strip_prefix(crate::certificates::AGENT_USER_PREFIX)?;
    if gvk.group != "cluster.karmada.io" || gvk.kind != "Cluster" {
        return None;
    }
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if name != cluster {
        return Some(format!("the pull agent of cluster {cluster:?} may write only Cluster {cluster:?}"));
    }
    let spec = obj.get("spec");
    if spec.and_then(|s| s.get("syncMode")).and_then(Value::as_str) != Some("Pull") {
        return Some("a pull agent's Cluster stays in Pull mode (spec.syncMode: Pull)".into());
    }
    if spec.is_some_and(|s| !s.get("secretRef").is_none_or(Value::is_null) || !s.get("impersonatorSecretRef").is_none_or(Value::is_null)) {
        return Some("a pull agent's Cluster names no credential Secret (spec.secretRef, spec.impersonatorSecretRef)".into());
    }
    None
}

/// The validating step of a DELETE, for an object of any kind: why its deletion is refused.
/// Karmada's `resourcedeletionprotection.karmada.io` webhook refuses deleting an object labelled
/// `resourcetemplate.karmada.io/deletion-protected: Always` (any other value is no protection);
/// the message is kube-apiserver's for a webhook's denial.
pub fn refuse_delete(obj: &Value) -> Option<String> {
    use crate::federation::karmada::work::{DELETION_PROTECTED_ALWAYS, DELETION_PROTECTED_LABEL};
    let protected = obj.pointer("/metadata/labels").and_then(|l| l.get(DELETION_PROTECTED_LABEL)).and_then(Value::as_str) == Some(DELETION_PROTECTED_ALWAYS);
    protected.then(|| {
        format!(
            "admission webhook \"resourcedeletionprotection.karmada.io\" denied the request: This resource is protected, please make sure to remove the label: {DELETION_PROTECTED_LABEL}"
        )
    })
}

/// Decodes `obj` as `T`, naming the offending field on failure (the webhook's 400 on decode).
fn decode<T: DeserializeOwned>(obj: &Value) -> Result<T, Vec<FieldError>> {
    serde_path_to_error::deserialize(obj).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        vec![FieldError::invalid(path, e.inner().to_string())]
    })
}

/// Writes a typed object back over the request body.
fn encode<T: serde::Serialize>(typed: &T, obj: &mut Value) {
    *obj = serde_json::to_value(typed).expect("admission types serialise");
}

/// Field path builder: `path("spec").child("placement").index(0)`.
#[derive(Clone, Debug)]
struct FieldPath(String);

fn path(root: &str) -> FieldPath {
    FieldPath(root.to_string())
}

impl FieldPath {
    fn child(&self, name: &str) -> FieldPath {
        if self.0.is_empty() { FieldPath(name.to_string()) } else { FieldPath(format!("{}.{name}", self.0)) }
    }

    fn index(&self, i: usize) -> FieldPath {
        FieldPath(format!("{}[{i}]", self.0))
    }

    fn key(&self, key: &str) -> FieldPath {
        FieldPath(format!("{}[{key}]", self.0))
    }
}

impl From<FieldPath> for String {
    fn from(p: FieldPath) -> String {
        p.0
    }
}

impl From<&FieldPath> for String {
    fn from(p: &FieldPath) -> String {
        p.0.clone()
    }
}

/// Kubernetes' `IsDNS1123Label` messages; empty when `value` is a valid label.
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = value.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !b.is_empty() && edge(b[0]) && edge(b[b.len() - 1]) && b.iter().all(|&c| edge(c) || c == b'-');
    if !ok {
        errs.push(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .to_string(),
        );
    }
    errs
}

/// go-openapi `jsonpointer.New`: a pointer is empty or starts with `/`.
fn json_pointer_error(pointer: &str) -> Option<String> {
    (!pointer.is_empty() && !pointer.starts_with('/')).then(|| "JSON pointer must be empty or start with a \"/\"".to_string())
}

#[cfg(test)]
mod requester_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pull_agent_writes_only_its_own_pull_cluster() {
        let cluster = GroupVersionKind::gvk("cluster.karmada.io", "v1alpha1", "Cluster");
        let agent = "system:karmada:agent:edge-1";
        let obj = |name: &str, spec: serde_json::Value| json!({"metadata": {"name": name}, "spec": spec});
        assert_eq!(refuse_for_requester(&cluster, agent, &obj("edge-1", json!({"syncMode": "Pull"}))), None);
        assert!(refuse_for_requester(&cluster, agent, &obj("edge-2", json!({"syncMode": "Pull"}))).unwrap().contains("may write only Cluster \"edge-1\""));
        assert!(refuse_for_requester(&cluster, agent, &obj("edge-1", json!({"syncMode": "Push"}))).unwrap().contains("stays in Pull mode"));
        let with_secret = obj("edge-1", json!({"syncMode": "Pull", "secretRef": {"namespace": "karmada-cluster", "name": "x"}}));
        assert!(refuse_for_requester(&cluster, agent, &with_secret).unwrap().contains("no credential Secret"));
        assert_eq!(refuse_for_requester(&cluster, "admin", &obj("edge-2", json!({"syncMode": "Push"}))), None, "anyone else: RBAC decides");
        let work = GroupVersionKind::gvk("work.karmada.io", "v1alpha1", "Work");
        assert_eq!(refuse_for_requester(&work, agent, &obj("w", json!({}))), None);
    }
}
