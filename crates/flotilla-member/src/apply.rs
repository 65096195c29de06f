//! Applying one manifest to a member the way Karmada's execution controller does.
//!
//! - Absent → created.
//! - Present but not labelled `karmada.io/managed=true` → refused ([`ApplyError::Conflict`])
//!   unless the caller resolved the conflict as overwrite.
//! - Present and labelled `kubefed.io/managed=false` while the manifest is KubeFed's (it carries
//!   `kubefed.io/managed`) → refused whatever the conflict resolution
//!   ([`ApplyError::ExplicitlyUnmanaged`]), and never deleted: KubeFed's explicit opt-out.
//! - Present and ours → Karmada's Retain (`flotilla_api::interpreter::retain`): the observed
//!   `resourceVersion`, finalizers, owner references and member-owned labels/annotations, then
//!   the kind's member-owned fields (a Service's `clusterIP`, replicas under
//!   `retain-replicas`); the write is skipped when the member already holds it
//!   ([`is_derivative`]), so a resync costs one GET.
//! - Deleting removes only an object this Work manages, with a UID precondition; with
//!   `preserve` it strips Karmada's labels and annotations instead and leaves the object running.

use flotilla_api::federation::karmada::work as keys;
use flotilla_api::federation::kubefed::types::MANAGED_LABEL as KUBEFED_MANAGED_LABEL;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Map, Value};

use crate::discovery::{MemberDiscovery, Served};

/// A member as the apply functions need it.
#[derive(Clone, Copy)]
pub struct Member<'a> {
    pub cluster: &'a str,
    pub client: &'a kube::Client,
    pub discovery: &'a MemberDiscovery,
}

impl std::fmt::Debug for Member<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

/// The identity of a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub gvk: GroupVersionKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn of(manifest: &Value) -> Result<ObjectRef, ApplyError> {
        let api_version = manifest.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = manifest.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            return Err(ApplyError::Manifest("a manifest needs apiVersion, kind and metadata.name".into()));
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.to_string()),
        };
        let namespace = manifest.pointer("/metadata/namespace").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        Ok(ObjectRef { gvk: GroupVersionKind { group, version, kind: kind.to_string() }, namespace, name: name.to_string() })
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}", ns, self.name),
            None => self.name.clone(),
        }
    }
}

/// What an apply did; carries the member object as it now is.
#[derive(Clone, Debug)]
pub enum Applied {
    Created(Value),
    Updated(Value),
    Unchanged(Value),
}

impl Applied {
    pub fn object(&self) -> &Value {
        match self {
            Applied::Created(v) | Applied::Updated(v) | Applied::Unchanged(v) => v,
        }
    }
}

/// What a delete did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted (or already being deleted).
    Deleted,
    /// Nothing there.
    Absent,
    /// Kept running, Karmada's labels and annotations removed.
    Released,
    /// Present but not ours (unmanaged, or another Work's): left alone.
    NotOurs,
}

/// Why an apply failed. The message names the member and the object.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "the {kind} {object} already exists in the cluster {cluster} and the work.karmada.io/conflict-resolution strategy value is empty, {}",
        NOT_MANAGED_CONFLICT
    )]
    Conflict { cluster: String, kind: String, object: String },
    #[error("the {kind} {object} in the cluster {cluster} {}: it is not touched", EXPLICITLY_UNMANAGED)]
    ExplicitlyUnmanaged { cluster: String, kind: String, object: String },
    #[error("the cluster {cluster} does not serve {api_version} {kind}")]
    NotServed { cluster: String, api_version: String, kind: String },
    #[error("the cluster {cluster} refused to {verb} {resource}: {message}; to grant it: {}", crate::join::grant_hint(cluster, resource))]
    Forbidden { cluster: String, verb: String, resource: String, message: String },
    #[error("the cluster {cluster} rejected the credential: {message}")]
    Unauthorized { cluster: String, message: String },
    #[error("the cluster {cluster} rejected {kind} {object}: {message}")]
    Rejected { cluster: String, kind: String, object: String, code: u16, reason: String, message: String },
    #[error("invalid manifest: {0}")]
    Manifest(String),
    #[error("the cluster {cluster}: {source}")]
    Transport { cluster: String, source: kube::Error },
}

impl ApplyError {
    /// True when retrying later may succeed without anyone changing anything (network, 5xx,
    /// a namespace not yet created, a stale resourceVersion).
    pub fn is_transient(&self) -> bool {
        match self {
            ApplyError::Transport { .. } => true,
            ApplyError::Rejected { code, reason, .. } => *code >= 500 || *code == 409 || *code == 429 || reason == "NotFound",
            _ => false,
        }
    }

    /// The Karmada-style reason for an Event or condition.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Conflict { .. } => "ApplyConflict",
            ApplyError::ExplicitlyUnmanaged { .. } => "ManagedLabelFalse",
            ApplyError::Forbidden { .. } => "PermissionDenied",
            ApplyError::Unauthorized { .. } => "CredentialRejected",
            _ => "AppliedFailed",
        }
    }
}

fn classify(cluster: &str, r: &ObjectRef, verb: &str, e: kube::Error) -> ApplyError {
    match e {
        kube::Error::Api(s) if s.code == 401 => ApplyError::Unauthorized { cluster: cluster.into(), message: s.message },
        kube::Error::Api(s) if s.code == 403 => {
            // Not an RBAC denial (the escalation check, a webhook): the kind and its group.
            let (v, resource) = forbidden_parts(&s.message).unwrap_or_else(|| {
                let kind = r.gvk.kind.to_lowercase();
                (verb.to_string(), if r.gvk.group.is_empty() { kind } else { format!("{kind}.{}", r.gvk.group) })
            });
            ApplyError::Forbidden { cluster: cluster.into(), verb: v, resource, message: s.message }
        }
        kube::Error::Api(s) => {
            ApplyError::Rejected { cluster: cluster.into(), kind: r.gvk.kind.clone(), object: r.display(), code: s.code, reason: s.reason, message: s.message }
        }
        e => ApplyError::Transport { cluster: cluster.into(), source: e },
    }
}

/// `verb` and `resource` (with group) from an RBAC denial: `... cannot create resource
/// "deployments" in API group "apps" in the namespace "default"`.
fn forbidden_parts(message: &str) -> Option<(String, String)> {
    let rest = &message[message.find("cannot ")? + 7..];
    let (verb, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix("resource \"")?;
    let (resource, rest) = rest.split_once('"')?;
    let group = rest.strip_prefix(" in API group \"").and_then(|g| g.split_once('"')).map(|(g, _)| g).unwrap_or("");
    Some((verb.to_string(), if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }))
}

async fn served(m: Member<'_>, r: &ObjectRef) -> Result<(Api<DynamicObject>, Served), ApplyError> {
    served_as(m, r, false).await
}

/// The member's API for `r`'s kind; with `confirmed`, a kind the cache says is not served is
/// looked up again.
async fn served_as(m: Member<'_>, r: &ObjectRef, confirmed: bool) -> Result<(Api<DynamicObject>, Served), ApplyError> {
    let lookup = if confirmed { m.discovery.resolve_confirmed(m.client, &r.gvk).await } else { m.discovery.resolve(m.client, &r.gvk).await };
    let served = lookup.map_err(|e| classify(m.cluster, r, "discover", e))?;
    let Some(served) = served else {
        let api_version = if r.gvk.group.is_empty() { r.gvk.version.clone() } else { format!("{}/{}", r.gvk.group, r.gvk.version) };
        return Err(ApplyError::NotServed { cluster: m.cluster.into(), api_version, kind: r.gvk.kind.clone() });
    };
    let api = if served.namespaced {
        Api::namespaced_with(m.client.clone(), r.namespace.as_deref().unwrap_or("default"), &served.resource)
    } else {
        Api::all_with(m.client.clone(), &served.resource)
    };
    Ok((api, served))
}

fn to_value(o: DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

fn from_value(v: &Value) -> Result<DynamicObject, ApplyError> {
    serde_json::from_value(v.clone()).map_err(|e| ApplyError::Manifest(e.to_string()))
}

/// Read the member's copy of `r`.
pub async fn get(m: Member<'_>, r: &ObjectRef) -> Result<Option<Value>, ApplyError> {
    let (api, _) = served(m, r).await?;
    api.get_opt(&r.name).await.map(|o| o.map(to_value)).map_err(|e| classify(m.cluster, r, "get", e))
}

/// The member's objects of `r`'s kind in `r`'s namespace (the name is not looked at).
pub async fn list(m: Member<'_>, r: &ObjectRef) -> Result<Vec<Value>, ApplyError> {
    let (api, _) = served(m, r).await?;
    api.list(&Default::default()).await.map(|l| l.items.into_iter().map(to_value).collect()).map_err(|e| classify(m.cluster, r, "list", e))
}

/// How to apply.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyOptions {
    /// Take over an existing object Karmada does not manage.
    pub overwrite: bool,
    /// Write even when the member's object already holds everything desired.
    pub force: bool,
    /// The object is most likely absent (never applied before): try to create it without
    /// reading it first; an object that exists after all is read and updated as usual.
    pub create_first: bool,
}

/// Apply `manifest` (already carrying Karmada's labels and annotations) to the member.
pub async fn apply(m: Member<'_>, manifest: &Value, opts: ApplyOptions) -> Result<Applied, ApplyError> {
    let r = ObjectRef::of(manifest)?;
    let (api, served) = served(m, &r).await?;
    let mut desired = manifest.clone();
    if !served.namespaced
        && let Some(meta) = desired.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("namespace");
    }
    // Two rounds after the first read: a create racing another writer, or a stale
    // resourceVersion, gets one retry. Creating without a read first adds a round.
    let rounds = if opts.create_first { 3 } else { 2 };
    for round in 0..rounds {
        let retry = round + 1 < rounds;
        let observed = if round == 0 && opts.create_first { None } else { api.get_opt(&r.name).await.map_err(|e| classify(m.cluster, &r, "get", e))? };
        let Some(observed) = observed.map(to_value) else {
            let mut fresh = desired.clone();
            strip_server_fields(&mut fresh);
            match api.create(&PostParams::default(), &from_value(&fresh)?).await {
                Ok(o) => return Ok(Applied::Created(to_value(o))),
                Err(kube::Error::Api(s)) if s.code == 409 && retry => continue,
                Err(e) => return Err(classify(m.cluster, &r, "create", e)),
            }
        };
        if is_explicitly_unmanaged(&observed) && desired.pointer(KUBEFED_MANAGED_POINTER).is_some() {
            return Err(ApplyError::ExplicitlyUnmanaged { cluster: m.cluster.into(), kind: r.gvk.kind.clone(), object: r.display() });
        }
        if !is_managed(&observed) && !opts.overwrite {
            return Err(ApplyError::Conflict { cluster: m.cluster.into(), kind: r.gvk.kind.clone(), object: r.display() });
        }
        let next = retained(&desired, &observed)?;
        if !opts.force && is_derivative(&next, &observed) {
            return Ok(Applied::Unchanged(observed));
        }
        match api.replace(&r.name, &PostParams::default(), &from_value(&next)?).await {
            Ok(o) => return Ok(Applied::Updated(to_value(o))),
            Err(kube::Error::Api(s)) if s.code == 409 && retry => continue,
            Err(e) => return Err(classify(m.cluster, &r, "update", e)),
        }
    }
    Err(ApplyError::Rejected {
        cluster: m.cluster.into(),
        kind: r.gvk.kind.clone(),
        object: r.display(),
        code: 409,
        reason: "Conflict".into(),
        message: "the object kept changing while it was applied".into(),
    })
}

/// Karmada's Retain: `desired` with the member's resourceVersion, finalizers, owner references
/// and member-owned labels/annotations, then the kind's own member-owned fields.
fn retained(desired: &Value, observed: &Value) -> Result<Value, ApplyError> {
    flotilla_api::interpreter::retain(desired, observed).map_err(|e| ApplyError::Manifest(e.to_string()))
}

/// True when applying `desired` (a manifest as [`apply`] takes it) would change the member's
/// `observed` copy: the decision [`apply`] makes after its read, for a caller that already holds
/// the member object (a watch) and wants to spend no request when nothing drifted.
pub fn needs_update(desired: &Value, observed: &Value) -> bool {
    match retained(desired, observed) {
        Ok(next) => !is_derivative(&next, observed),
        // Apply will report what is wrong with the manifest.
        Err(_) => true,
    }
}

/// Remove (or, with `preserve`, release) the member's copy of `r`, but only when it is managed
/// by Karmada and — when `work_id` is given — by that Work.
pub async fn delete(m: Member<'_>, r: &ObjectRef, preserve: bool, work_id: Option<&str>) -> Result<Deleted, ApplyError> {
    // "Not served" is asked of the member itself: a cached answer from before its CRD was
    // installed would leave the object behind.
    let (api, _) = match served_as(m, r, true).await {
        Ok(x) => x,
        // The kind is gone from the member (its CRD was removed): so is the object.
        Err(ApplyError::NotServed { .. }) => return Ok(Deleted::Absent),
        Err(e) => return Err(e),
    };
    let Some(observed) = api.get_opt(&r.name).await.map_err(|e| classify(m.cluster, r, "get", e))?.map(to_value) else {
        return Ok(Deleted::Absent);
    };
    if !is_managed(&observed) || is_explicitly_unmanaged(&observed) {
        return Ok(Deleted::NotOurs);
    }
    if let Some(id) = work_id {
        let theirs = observed.pointer(&format!("/metadata/labels/{}", keys::WORK_PERMANENT_ID_LABEL.replace('/', "~1"))).and_then(Value::as_str);
        if theirs.is_some_and(|t| t != id) {
            return Ok(Deleted::NotOurs);
        }
    }
    if preserve {
        let patch = release_patch(&observed);
        api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| classify(m.cluster, r, "patch", e))?;
        return Ok(Deleted::Released);
    }
    let uid = observed.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions { uid, resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&r.name, &dp).await {
        Ok(_) => Ok(Deleted::Deleted),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deleted::Absent),
        // The UID precondition failed: someone recreated it; it is no longer the object we managed.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Deleted::NotOurs),
        Err(e) => Err(classify(m.cluster, r, "delete", e)),
    }
}

/// Labels Karmada writes on member objects.
pub const KARMADA_LABELS: &[&str] =
    &[keys::MANAGED_LABEL, keys::WORK_PERMANENT_ID_LABEL, keys::RESOURCE_BINDING_PERMANENT_ID_LABEL, keys::CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL];

/// Annotations Karmada writes on member objects.
pub const KARMADA_ANNOTATIONS: &[&str] = &[
    keys::WORK_NAMESPACE_ANNOTATION,
    keys::WORK_NAME_ANNOTATION,
    keys::RESOURCE_BINDING_NAMESPACE_ANNOTATION,
    keys::RESOURCE_BINDING_NAME_ANNOTATION,
    keys::CLUSTER_RESOURCE_BINDING_NAME_ANNOTATION,
    keys::TEMPLATE_UID_ANNOTATION,
    keys::TEMPLATE_GENERATION_ANNOTATION,
    keys::MANAGED_LABELS_ANNOTATION,
    keys::MANAGED_ANNOTATIONS_ANNOTATION,
    keys::CONFLICT_RESOLUTION_ANNOTATION,
];

/// A merge patch removing Karmada's labels and annotations from `observed`, and KubeFed's
/// `kubefed.io/managed=true` as KubeFed's sync controller removes it from an object it stops
/// managing (an opt-out `false` is the user's and stays).
fn release_patch(observed: &Value) -> Value {
    let mut labels = Map::new();
    let mut annotations = Map::new();
    if let Some(l) = observed.pointer("/metadata/labels").and_then(Value::as_object) {
        for k in KARMADA_LABELS.iter().filter(|k| l.contains_key(**k)) {
            labels.insert((*k).to_string(), Value::Null);
        }
        if is_kubefed_managed(observed) {
            labels.insert(KUBEFED_MANAGED_LABEL.to_string(), Value::Null);
        }
    }
    if let Some(a) = observed.pointer("/metadata/annotations").and_then(Value::as_object) {
        for k in KARMADA_ANNOTATIONS.iter().filter(|k| a.contains_key(**k)) {
            annotations.insert((*k).to_string(), Value::Null);
        }
    }
    let mut patch = serde_json::json!({"metadata": {"labels": labels, "annotations": annotations}});
    // Only the object as observed: should another Work take it over meanwhile (its labels are
    // the same keys), the patch conflicts and the next look finds it no longer ours.
    if let Some(rv) = observed.pointer("/metadata/resourceVersion") {
        patch["metadata"]["resourceVersion"] = rv.clone();
    }
    patch
}

/// True when the object carries `karmada.io/managed=true`.
/// How an [`ApplyError::Conflict`] message ends (Karmada's words): a Work's `Applied` message
/// carries it, for KubeFed's `AlreadyExists` status.
pub const NOT_MANAGED_CONFLICT: &str = "Karmada will not manage this resource";
/// How an [`ApplyError::ExplicitlyUnmanaged`] message says why (a Work's `Applied` message
/// carries it, for KubeFed's `ManagedLabelFalse` status).
pub const EXPLICITLY_UNMANAGED: &str = "is labelled kubefed.io/managed=false";
/// `metadata.labels["kubefed.io/managed"]` as a JSON pointer.
const KUBEFED_MANAGED_POINTER: &str = "/metadata/labels/kubefed.io~1managed";

/// KubeFed's opt-out: the member object is labelled `kubefed.io/managed=false`.
pub fn is_explicitly_unmanaged(obj: &Value) -> bool {
    obj.pointer(KUBEFED_MANAGED_POINTER).and_then(Value::as_str) == Some("false")
}

/// KubeFed's API manages the object: it is labelled `kubefed.io/managed=true`.
pub fn is_kubefed_managed(obj: &Value) -> bool {
    obj.pointer(KUBEFED_MANAGED_POINTER).and_then(Value::as_str) == Some("true")
}

pub fn is_managed(obj: &Value) -> bool {
    obj.pointer("/metadata/labels").and_then(|l| l.get(keys::MANAGED_LABEL)).and_then(Value::as_str) == Some("true")
}

fn strip_server_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink", "deletionTimestamp"] {
            meta.remove(k);
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
}

/// True when `observed` already holds everything `desired` says: every field set in `desired`
/// is equal in `observed` (fields only the member has — defaults, status — do not count),
/// lists compare element by element at equal length, and labels and annotations compare
/// exactly. The semantics of Kubernetes' `DeepDerivative`, which Karmada uses for the same
/// decision.
pub fn is_derivative(desired: &Value, observed: &Value) -> bool {
    for field in ["labels", "annotations"] {
        let empty = Value::Object(Map::new());
        let a = desired.pointer(&format!("/metadata/{field}")).unwrap_or(&empty);
        let b = observed.pointer(&format!("/metadata/{field}")).unwrap_or(&empty);
        if !same_map(a, b) {
            return false;
        }
    }
    let (Some(d), Some(o)) = (desired.as_object(), observed.as_object()) else { return desired == observed };
    d.iter().all(|(k, v)| match k.as_str() {
        "status" => true,
        "metadata" => {
            let om = o.get("metadata").cloned().unwrap_or(Value::Null);
            v.as_object().is_none_or(|m| {
                m.iter().all(|(mk, mv)| match mk.as_str() {
                    "labels" | "annotations" | "resourceVersion" | "uid" | "creationTimestamp" | "generation" | "managedFields" => true,
                    _ => derivative(mv, om.get(mk).unwrap_or(&Value::Null)),
                })
            })
        }
        _ => derivative(v, o.get(k).unwrap_or(&Value::Null)),
    })
}

fn same_map(a: &Value, b: &Value) -> bool {
    let empty = Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

fn derivative(d: &Value, o: &Value) -> bool {
    match (d, o) {
        (Value::Null, _) => true,
        (Value::Object(dm), Value::Object(om)) => dm.iter().all(|(k, v)| derivative(v, om.get(k).unwrap_or(&Value::Null))),
        // An empty object in desired is "unset" (Go's zero value).
        (Value::Object(dm), Value::Null) => dm.is_empty(),
        (Value::Array(da), Value::Array(oa)) => da.len() == oa.len() && da.iter().zip(oa).all(|(a, b)| derivative(a, b)),
        (Value::Array(da), Value::Null) => da.is_empty(),
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (Value::String(s), Value::Null) => s.is_empty(),
        (Value::Bool(false), Value::Null) => true,
        (Value::Number(n), Value::Null) => n.as_f64() == Some(0.0),
        _ => d == o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Edge sync-back reports exactly what drift correction would revert.
    #[test]
    fn drift_as_field_changes_agrees_with_the_drift_check() {
        let d = json!({"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"replicas": 2, "flag": false, "list": [{"x": 1}], "empty": {}}});
        let cases = [
            json!({"metadata": {"name": "w", "labels": {"a": "1"}, "uid": "u"}, "spec": {"replicas": 2, "list": [{"x": 1, "y": 2}]}, "status": {}}),
            json!({"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"replicas": 3, "list": [{"x": 1}]}}),
            json!({"metadata": {"name": "w", "labels": {"a": "2"}}, "spec": {"replicas": 2, "list": [{"x": 1}]}}),
            json!({"metadata": {"name": "w", "labels": {"a": "1", "b": "x"}}, "spec": {"replicas": 2, "list": [{"x": 1}]}}),
            json!({"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"replicas": 2.0, "list": [{"x": 1}, {"x": 2}]}}),
            json!({"metadata": {"name": "w", "labels": {"a": "1"}}, "spec": {"replicas": 2, "flag": true, "list": [{"x": 1}]}}),
            json!({"metadata": {"name": "v", "labels": {"a": "1"}}, "spec": {"replicas": 2, "list": [{"x": 1}]}}),
        ];
        for o in &cases {
            assert_eq!(flotilla_api::edge::drift(&d, o).is_empty(), is_derivative(&d, o), "{o}");
        }
        assert!(cases.iter().any(|o| is_derivative(&d, o)) && cases.iter().any(|o| !is_derivative(&d, o)));
    }
    use serde_json::json;

    #[test]
    fn only_the_managed_false_label_opts_out() {
        assert!(is_explicitly_unmanaged(&json!({"metadata": {"labels": {"kubefed.io/managed": "false"}}})));
        assert!(!is_explicitly_unmanaged(&json!({"metadata": {"labels": {"kubefed.io/managed": "true"}}})));
        assert!(!is_explicitly_unmanaged(&json!({"metadata": {}})));
        let e = ApplyError::ExplicitlyUnmanaged { cluster: "m1".into(), kind: "ConfigMap".into(), object: "ns/keep".into() };
        assert!(e.to_string().contains(EXPLICITLY_UNMANAGED) && !e.is_transient() && e.reason() == "ManagedLabelFalse", "{e}");
    }

    #[test]
    fn derivative_ignores_member_defaults_but_sees_changes() {
        let observed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "9", "uid": "u",
            "labels": {"k": "v"}}, "data": {"x": "1"},
            "spec": {"replicas": 3, "strategy": {"type": "RollingUpdate"}, "ports": [{"port": 80, "protocol": "TCP"}]}});
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"k": "v"}}, "data": {"x": "1"},
            "spec": {"replicas": 3, "ports": [{"port": 80}]}});
        assert!(is_derivative(&same, &observed));
        let mut changed = same.clone();
        changed["data"]["x"] = json!("2");
        assert!(!is_derivative(&changed, &observed));
        let mut fewer_ports = same.clone();
        fewer_ports["spec"]["ports"] = json!([]);
        assert!(!is_derivative(&fewer_ports, &observed));
        let mut label_gone = same.clone();
        label_gone["metadata"]["labels"] = json!({});
        assert!(!is_derivative(&label_gone, &observed));
        let mut float = same;
        float["spec"]["replicas"] = json!(3.0);
        assert!(is_derivative(&float, &observed));
    }

    #[test]
    fn drift_is_a_change_to_what_the_manifest_says_not_to_what_the_member_adds() {
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d",
            "labels": {"karmada.io/managed": "true"}}, "data": {"x": "1"}});
        let observed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d", "uid": "u",
            "resourceVersion": "5", "labels": {"karmada.io/managed": "true"}, "annotations": {"member.example/seen": "yes"}},
            "data": {"x": "1"}});
        assert!(!needs_update(&desired, &observed), "member-owned annotations are retained, not drift");
        let mut edited = observed.clone();
        edited["data"]["x"] = json!("2");
        assert!(needs_update(&desired, &edited));
        let mut unlabelled = observed;
        unlabelled["metadata"]["labels"] = json!({});
        assert!(needs_update(&desired, &unlabelled));
    }

    #[test]
    fn forbidden_messages_name_verb_and_resource() {
        let m = r#"deployments.apps "x" is forbidden: User "system:serviceaccount:flotilla-system:flotilla" cannot create resource "deployments" in API group "apps" in the namespace "default""#;
        assert_eq!(forbidden_parts(m), Some(("create".into(), "deployments.apps".into())));
        let core = r#"User "u" cannot list resource "pods" in API group "" at the cluster scope"#;
        assert_eq!(forbidden_parts(core), Some(("list".into(), "pods".into())));
        assert_eq!(forbidden_parts("nope"), None);
    }

    #[test]
    fn release_patch_removes_only_karmada_keys() {
        let observed = json!({"metadata": {"labels": {"karmada.io/managed": "true", "app": "x", "work.karmada.io/permanent-id": "1"},
            "annotations": {"work.karmada.io/name": "w", "other": "y"}}});
        assert_eq!(
            release_patch(&observed),
            json!({"metadata": {"labels": {"karmada.io/managed": null, "work.karmada.io/permanent-id": null}, "annotations": {"work.karmada.io/name": null}}})
        );
    }

    #[test]
    fn release_patch_removes_kubefeds_managed_label_but_not_an_opt_out() {
        let managed = json!({"metadata": {"labels": {"karmada.io/managed": "true", "kubefed.io/managed": "true"}}});
        assert_eq!(release_patch(&managed)["metadata"]["labels"], json!({"karmada.io/managed": null, "kubefed.io/managed": null}));
        let opted_out = json!({"metadata": {"labels": {"karmada.io/managed": "true", "kubefed.io/managed": "false"}, "resourceVersion": "7"}});
        assert_eq!(release_patch(&opted_out)["metadata"]["labels"], json!({"karmada.io/managed": null}));
        assert_eq!(release_patch(&opted_out)["metadata"]["resourceVersion"], "7", "the patch holds only for the object as observed");
    }

    #[test]
    fn object_refs_need_kind_version_and_name() {
        let r = ObjectRef::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "n", "namespace": "d"}})).unwrap();
        assert_eq!((r.gvk.group.as_str(), r.gvk.version.as_str(), r.namespace.as_deref()), ("apps", "v1", Some("d")));
        assert!(ObjectRef::of(&json!({"kind": "X"})).is_err());
    }
}
