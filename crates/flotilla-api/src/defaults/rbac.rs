//! `rbac.authorization.k8s.io/v1`: roles and bindings.

use serde_json::Value;

use super::zero_values::{Object, always_written, default_string, object_or_insert, objects_mut, str_of};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Roles always write their rules (`null` when there are none).
pub(crate) fn default_role(role: &mut Object) {
    always_written(role, "rules", Value::Null);
}

/// Bindings name the RBAC group for their role and for user and group subjects.
pub(crate) fn default_binding(binding: &mut Object) {
    if let Some(role_ref) = object_or_insert(binding, "roleRef") {
        default_string(role_ref, "apiGroup", RBAC_GROUP);
    }
    for (_, subject) in objects_mut(binding, "subjects") {
        if matches!(str_of(subject, "kind"), "User" | "Group") {
            default_string(subject, "apiGroup", RBAC_GROUP);
        }
    }
}
