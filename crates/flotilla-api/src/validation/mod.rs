//! Validation of built-in kinds as kube-apiserver validates them, for the kinds a platform
//! engineer propagates: Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, Services,
//! ConfigMaps, Secrets, Namespaces, Pods and PodTemplates. Each rule answers the causes a real
//! server's 422 carries — field path, reason and message worded as kube-apiserver 1.37 words
//! them (`Invalid value: -1: must be greater than or equal to 0`).
//!
//! The API server calls these after defaulting, on the object as it would be stored:
//! [`validate`] on create, [`validate_update`] on update, [`validate_status`] on a write to the
//! `/status` subresource. Metadata rules are the API server's own. Not ported: the
//! long tail of Kubernetes validation (security contexts, affinity, probes, resources, cron
//! schedules, Service IP families); kinds not listed here are accepted as they decode.
//!
//! Invariant: pure functions of the objects; no I/O, no clock.

mod apps;
mod batch;
mod core;
pub(crate) mod field;
pub mod names;
mod object;
mod pod;
mod rbac;

use serde_json::Value;

pub use field::{FieldError, Reason, go_json, go_value};

/// The rules of a kind's object (what a create is checked for).
pub fn validate(group: &str, kind: &str, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (group, kind) {
        ("apps", "Deployment") => apps::deployment(obj, &mut errs),
        ("apps", "ReplicaSet") => apps::replica_set(obj, &mut errs),
        ("apps", "StatefulSet") => apps::stateful_set(obj, &mut errs),
        ("apps", "DaemonSet") => apps::daemon_set(obj, &mut errs),
        ("batch", "Job") => batch::job(obj, &mut errs),
        ("", "Service") => core::service(obj, &mut errs),
        ("", "ConfigMap") => core::config_map(obj, &mut errs),
        ("", "Secret") => core::secret(obj, &mut errs),
        ("", "Namespace") => core::namespace(obj, &mut errs),
        ("", "Pod") => core::pod(obj, &mut errs),
        ("", "PodTemplate") => core::pod_template(obj, &mut errs),
        _ => {}
    }
    errs
}

/// Everything an update is checked for, in place of [`validate`]: the new object's spec rules
/// and what may not change from `old`, in kube-apiserver's order (a ConfigMap's or Secret's
/// frozen fields first, a workload's immutable selector last).
pub fn validate_update(group: &str, kind: &str, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (group, kind) {
        ("", "ConfigMap") => core::config_map_update(new, old, &mut errs),
        ("", "Secret") => core::secret_update(new, old, &mut errs),
        _ => {}
    }
    errs.extend(validate(group, kind, new));
    match (group, kind) {
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet") => apps::selector_immutable(new, old, &mut errs),
        ("apps", "StatefulSet") => apps::stateful_set_update(new, old, &mut errs),
        ("batch", "Job") => batch::job_update(new, old, &mut errs),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => rbac::role_ref_immutable(new, old, &mut errs),
        _ => {}
    }
    errs
}

/// The rules of a write to the `/status` subresource (the new object, status replaced).
pub fn validate_status(group: &str, kind: &str, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match (group, kind) {
        ("apps", "Deployment") => apps::deployment_status(obj, &mut errs),
        ("apps", "ReplicaSet") => apps::replica_set_status(obj, &mut errs),
        ("apps", "StatefulSet") => apps::stateful_set_status(obj, &mut errs),
        ("apps", "DaemonSet") => apps::daemon_set_status(obj, &mut errs),
        _ => {}
    }
    errs
}

#[cfg(test)]
mod tests;
