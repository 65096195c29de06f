//! The bootstrap RBAC policy, created and reconciled at start-up as kube-apiserver's
//! `rbac/bootstrap-roles` post-start hook does: kube-apiserver v1.37.2's own ClusterRoles,
//! ClusterRoleBindings, Roles and RoleBindings (`cluster-admin`, `admin`/`edit`/`view` with
//! their aggregation rules, `system:discovery`, `system:basic-user`, the controllers' roles…,
//! recorded by `scripts/regen-bootstrap-rbac.sh` into `flotilla-api/data/bootstrap-rbac.json`)
//! and Karmada's `karmada-view` and `karmada-edit` (aggregated into `view` and `edit`, as
//! Karmada's installers create them; `flotilla-api/data/karmada-rbac.json`) and what pull
//! registration needs of Karmada's bootstrap-token configuration (the bootstrap token's
//! `system:node-bootstrapper` binding and the agent CSR auto-approval roles;
//! `flotilla-api/data/karmada-bootstrap-rbac.json`), and Flotilla's own `flotilla-view` and
//! `flotilla-edit` (aggregated into `view` and `edit`: the bindings' `explain` subresource,
//! edge reports and records; `flotilla-api/data/flotilla-rbac.json`).
//!
//! Each object is created when missing. One that exists is left alone when its
//! `rbac.authorization.kubernetes.io/autoupdate` annotation is `false`; otherwise what the
//! policy has and it lacks is added — labels, annotations, rules, aggregation selectors,
//! subjects — and nothing it has is removed (kube-apiserver's reconciliation without
//! `removeExtraPermissions`). A binding whose `roleRef` was changed cannot be mended (the field
//! is immutable) and is left with a warning.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::ApiResult;
use crate::state::ApiState;

const KUBERNETES: &str = include_str!("../../flotilla-api/data/bootstrap-rbac.json");
const KARMADA: &str = include_str!("../../flotilla-api/data/karmada-rbac.json");
const KARMADA_BOOTSTRAP: &str = include_str!("../../flotilla-api/data/karmada-bootstrap-rbac.json");
const FLOTILLA: &str = include_str!("../../flotilla-api/data/flotilla-rbac.json");
const GROUP: &str = "rbac.authorization.k8s.io";
const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// Every object of the policy.
pub(crate) fn policy() -> Vec<Value> {
    let items = |text: &str| -> Vec<Value> {
        serde_json::from_str::<Value>(text).ok().and_then(|v| v.get("items").and_then(Value::as_array).cloned()).unwrap_or_default()
    };
    let mut all = items(KUBERNETES);
    all.extend(items(KARMADA));
    all.extend(items(KARMADA_BOOTSTRAP));
    all.extend(items(FLOTILLA));
    all
}

fn plural(kind: &str) -> &'static str {
    match kind {
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        _ => "rolebindings",
    }
}

/// Adds to `map` (an object member of `obj`) the entries of `wanted` it lacks.
fn add_missing_entries(obj: &mut Value, path: &[&str], wanted: Option<&Map<String, Value>>) {
    let Some(wanted) = wanted else { return };
    let mut at = obj;
    for p in path {
        let Some(o) = at.as_object_mut() else { return };
        at = o.entry(p.to_string()).or_insert_with(|| Value::Object(Map::new()));
    }
    if let Some(m) = at.as_object_mut() {
        for (k, v) in wanted {
            m.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// Appends to the list `key` of `obj` the items of `wanted` that `present` says it lacks.
fn add_missing_items(obj: &mut Value, key: &str, wanted: &[Value], present: impl Fn(&[Value], &Value) -> bool) {
    let Some(o) = obj.as_object_mut() else { return };
    let list = o.entry(key.to_string()).or_insert_with(|| Value::Array(Vec::new()));
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let Some(items) = list.as_array_mut() else { return };
    for w in wanted {
        if !present(items, w) {
            items.push(w.clone());
        }
    }
}

/// `existing` with what `expected` has and it lacks (see the module header).
pub(crate) fn reconciled(expected: &Value, existing: &Value) -> Value {
    let mut out = existing.clone();
    add_missing_entries(&mut out, &["metadata", "labels"], expected.pointer("/metadata/labels").and_then(Value::as_object));
    add_missing_entries(&mut out, &["metadata", "annotations"], expected.pointer("/metadata/annotations").and_then(Value::as_object));
    let list = |v: &Value, k: &str| v.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
    match expected.get("kind").and_then(Value::as_str) {
        Some("ClusterRole" | "Role") => {
            let wanted = list(expected, "rules");
            if !wanted.is_empty() {
                add_missing_items(&mut out, "rules", &wanted, crate::rbac::covered);
            }
            if let Some(selectors) = expected.pointer("/aggregationRule/clusterRoleSelectors").and_then(Value::as_array) {
                let rule = out.as_object_mut().map(|o| o.entry("aggregationRule").or_insert_with(|| Value::Object(Map::new())));
                if let Some(rule) = rule {
                    add_missing_items(rule, "clusterRoleSelectors", selectors, |have, s| have.contains(s));
                }
            }
        }
        _ => {
            let same = |a: &Value, b: &Value| {
                ["kind", "name", "namespace"].iter().all(|k| a.get(*k).and_then(Value::as_str).unwrap_or("") == b.get(*k).and_then(Value::as_str).unwrap_or(""))
            };
            add_missing_items(&mut out, "subjects", &list(expected, "subjects"), |have, s| have.iter().any(|h| same(h, s)));
        }
    }
    out
}

/// Creates or reconciles every object of the policy. Runs the writes concurrently: on the
/// embedded store they share its group commits.
pub(crate) async fn install(inner: &Arc<ApiState>) -> ApiResult<()> {
    let writes = policy().into_iter().map(|expected| {
        let inner = inner.clone();
        async move {
            let kind = expected.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
            let resource = (GROUP, "v1", plural(&kind));
            let namespace = expected.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_string);
            let name = crate::meta::name(&expected).to_string();
            let Some(existing) = crate::objects::get_internal(&inner, resource, namespace.as_deref(), &name).await? else {
                return match crate::objects::create_internal(&inner, GROUP, "v1", resource.2, namespace.as_deref(), expected).await {
                    Err(e) if e.reason != "AlreadyExists" => Err(e),
                    _ => Ok(()),
                };
            };
            if existing.pointer(&format!("/metadata/annotations/{}", AUTOUPDATE.replace('/', "~1"))).and_then(Value::as_str) == Some("false") {
                return Ok(());
            }
            if existing.get("roleRef") != expected.get("roleRef") && expected.get("roleRef").is_some() {
                tracing::warn!(kind = %kind, name = %name, "a bootstrap binding refers to another role than the policy's; it is left as it is");
                return Ok(());
            }
            let want = reconciled(&expected, &existing);
            if want != existing {
                crate::objects::update_internal(&inner, resource, namespace.as_deref(), &name, |obj| *obj = reconciled(&expected, obj)).await?;
            }
            Ok(())
        }
    });
    futures::future::try_join_all(writes).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_policy_holds_kubernetes_and_karmadas_roles() {
        let p = policy();
        let named = |kind: &str, name: &str| p.iter().any(|o| o["kind"] == kind && o["metadata"]["name"] == name);
        for role in [
            "cluster-admin",
            "admin",
            "edit",
            "view",
            "system:discovery",
            "system:basic-user",
            "karmada-view",
            "karmada-edit",
            "flotilla-view",
            "flotilla-edit",
        ] {
            assert!(named("ClusterRole", role), "{role}");
        }
        assert!(named("ClusterRoleBinding", "cluster-admin") && named("ClusterRoleBinding", "system:discovery"));
        let view = p.iter().find(|o| o["metadata"]["name"] == "view").unwrap();
        assert!(view.get("aggregationRule").is_some() && view.get("rules").is_none());
    }

    #[test]
    fn reconciling_adds_what_is_missing_and_keeps_the_rest() {
        let expected = json!({"kind": "ClusterRole", "metadata": {"name": "r", "labels": {"a": "1"}},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}, {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]});
        let existing = json!({"kind": "ClusterRole", "metadata": {"name": "r", "labels": {"a": "mine", "b": "2"}},
            "rules": [{"apiGroups": ["*"], "resources": ["pods"], "verbs": ["*"]}, {"apiGroups": ["x"], "resources": ["y"], "verbs": ["z"]}]});
        let out = reconciled(&expected, &existing);
        assert_eq!(out["metadata"]["labels"], json!({"a": "mine", "b": "2"}));
        assert_eq!(out["rules"].as_array().unwrap().len(), 3, "the pods rule is covered, the secrets one added: {out}");
        let binding = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "subjects": [{"kind": "Group", "name": "system:authenticated"}]});
        let emptied = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "subjects": [{"kind": "User", "name": "ops"}]});
        assert_eq!(reconciled(&binding, &emptied)["subjects"].as_array().unwrap().len(), 2);
    }
}
