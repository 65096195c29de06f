//! `rbac.authorization.k8s.io`: what an update of a binding may not change.

use serde_json::Value;

use super::field::{FieldError, go_json};

/// A RoleBinding's or ClusterRoleBinding's `roleRef` is immutable; kube-apiserver prints the
/// new one as its internal Go struct (`{"APIGroup":…,"Kind":…,"Name":…}`).
pub(super) fn role_ref_immutable(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    let (n, o) = (new.get("roleRef"), old.get("roleRef"));
    if n == o {
        return;
    }
    let field = |f: &str| Value::from(n.and_then(|r| r.get(f)).and_then(Value::as_str).unwrap_or_default());
    let printed = format!("{{\"APIGroup\":{},\"Kind\":{},\"Name\":{}}}", go_json(&field("apiGroup")), go_json(&field("kind")), go_json(&field("name")));
    errs.push(FieldError::invalid_printed("roleRef", &printed, "field is immutable"));
}
