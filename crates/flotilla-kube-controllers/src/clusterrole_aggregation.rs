//! kube-controller-manager's `clusterrole-aggregation` controller: a ClusterRole with an
//! `aggregationRule` gets as its rules those of every ClusterRole its `clusterRoleSelectors`
//! select — selectors in order, the selected roles by name, each rule once — so `view`, `edit`
//! and `admin` grow with the roles labelled `rbac.authorization.k8s.io/aggregate-to-*` (the
//! bootstrap `system:aggregate-to-*` roles, Karmada's `karmada-view`/`karmada-edit`, a CRD's).
//!
//! Every change of a ClusterRole queues one pass (a burst of changes waits in the queue as one
//! key) that recomputes the aggregated roles from the shared cache; one whose rules differ is
//! written with a merge patch guarded by its resourceVersion (a conflict comes back through the
//! watch).

use std::collections::BTreeMap;

use flotilla_api::selector::LabelSelector;
use flotilla_runtime::{Next, Runtime};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;

pub const NAME: &str = "clusterrole-aggregation-controller";

/// The rules `target`'s aggregation rule gathers from `roles` (None: it has no aggregation rule).
pub fn aggregated_rules(target: &ClusterRole, roles: &[&ClusterRole]) -> Option<Vec<PolicyRule>> {
    let selectors = target.aggregation_rule.as_ref()?.cluster_role_selectors.as_ref()?;
    let mut by_name: Vec<&ClusterRole> = roles.iter().copied().filter(|r| r.name_any() != target.name_any()).collect();
    by_name.sort_by_key(|r| r.name_any());
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in selectors {
        let Ok(selector) = serde_json::to_value(selector).map_err(|_| ()).and_then(|v| LabelSelector::from_json(&v).map_err(|_| ())) else { continue };
        for role in &by_name {
            let labels: BTreeMap<String, String> = role.labels().clone();
            if !selector.matches(&labels) {
                continue;
            }
            for rule in role.rules.iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

/// Writes the rules of every aggregated ClusterRole whose rules differ from what it gathers.
async fn sync(client: &Client, store: &Store<ClusterRole>) -> Result<Next, kube::Error> {
    let state = store.state();
    let roles: Vec<&ClusterRole> = state.iter().map(|r| r.as_ref()).collect();
    let api: Api<ClusterRole> = Api::all(client.clone());
    let mut failed = None;
    for target in &roles {
        let Some(rules) = aggregated_rules(target, &roles) else { continue };
        if target.rules.clone().unwrap_or_default() == rules {
            continue;
        }
        let patch = json!({"metadata": {"resourceVersion": target.resource_version()}, "rules": rules});
        match api.patch(&target.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::debug!(controller = NAME, role = %target.name_any(), rules = rules.len(), "aggregated"),
            // A newer role is on its way through the watch.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => failed = Some(e),
        }
    }
    failed.map_or(Ok(Next::Done), Err)
}

/// Run the controller on `rt`'s shared ClusterRole informer until it shuts down.
pub async fn run(client: Client, rt: Runtime) {
    let store = rt.informers.store::<ClusterRole>();
    rt.controller::<()>(NAME)
        .watches(|_: &ClusterRole, _| Some(()))
        .run(move |()| {
            let (client, store) = (client.clone(), store.clone());
            async move { sync(&client, &store).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, labels: &[(&str, &str)], rules: &[(&str, &str)]) -> ClusterRole {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
            "rules": rules.iter().map(|(g, r)| json!({"apiGroups": [g], "resources": [r], "verbs": ["get"]})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn rules_are_gathered_by_selector_then_name_each_once() {
        let mut view: ClusterRole = role("view", &[], &[]);
        view.aggregation_rule = serde_json::from_value(json!({"clusterRoleSelectors": [
            {"matchLabels": {"aggregate-to-view": "true"}}, {"matchLabels": {"extra": "true"}}]}))
        .unwrap();
        let b = role("b-role", &[("aggregate-to-view", "true")], &[("", "pods"), ("apps", "deployments")]);
        let a = role("a-role", &[("aggregate-to-view", "true"), ("extra", "true")], &[("", "pods")]);
        let c = role("c-role", &[("extra", "true")], &[("batch", "jobs")]);
        let other = role("other", &[], &[("", "secrets")]);
        let rules = aggregated_rules(&view, &[&view, &b, &c, &a, &other]).unwrap();
        let names: Vec<String> = rules.iter().map(|r| r.resources.clone().unwrap_or_default().join(",")).collect();
        assert_eq!(names, ["pods", "deployments", "jobs"]);
        assert!(aggregated_rules(&other, &[&view]).is_none());
    }
}
