//! `policy.karmada.io/v1alpha1` ClusterTaintPolicy (Karmada v1.14+): taints a Cluster gets and
//! loses as its status conditions change, so that any system that writes a Cluster condition
//! can drive scheduling and, with NoExecute, eviction.
//!
//! Field names and JSON casing follow Karmada v1.18 (`pkg/apis/policy/v1alpha1/clustertaint_types.go`).
//! What the controller does with it is in `flotilla_controllers::cluster_taint_policy`.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::policy::ClusterAffinity;

/// The taints `targetClusters` get when every `addOnConditions` entry matches their conditions,
/// and lose when every `removeOnConditions` entry matches.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "ClusterTaintPolicy",
    plural = "clustertaintpolicies",
    singular = "clustertaintpolicy",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaintPolicySpec {
    /// The clusters this policy looks at; nil means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_clusters: Option<ClusterAffinity>,
    /// Conditions (ANDed) under which the taints are added; empty means never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_on_conditions: Option<Vec<MatchCondition>>,
    /// Conditions (ANDed) under which the taints are removed; empty means never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_on_conditions: Option<Vec<MatchCondition>>,
    /// The taints added or removed.
    #[schemars(length(min = 1))]
    pub taints: Vec<PolicyTaint>,
}

/// A requirement on one of the cluster's status conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    /// The condition's type (`Ready`, or any a third party writes).
    pub condition_type: String,
    /// `In` or `NotIn`.
    pub operator: String,
    /// The condition statuses (`True`, `False`, `Unknown`) the operator compares with.
    pub status_values: Vec<String>,
}

/// A taint a policy manages.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTaint {
    /// The taint key.
    pub key: String,
    /// `NoSchedule` or `NoExecute`.
    pub effect: String,
    /// The taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Whether `conditions` meet every one of `wanted` (Karmada's `conditionMatches`): an entry
/// matches when the cluster has a condition of its type whose status is (`In`) or is not
/// (`NotIn`) among its values. An empty list never matches; neither does an unknown operator.
pub fn conditions_match(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], wanted: &[MatchCondition]) -> bool {
    !wanted.is_empty()
        && wanted.iter().all(|w| {
            conditions.iter().filter(|c| c.type_ == w.condition_type).any(|c| {
                let listed = w.status_values.contains(&c.status);
                match w.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
                    _ => false,
                }
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    fn condition(type_: &str, status: &str) -> Condition {
        serde_json::from_value(serde_json::json!({"type": type_, "status": status, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
            .unwrap()
    }

    fn wanted(type_: &str, operator: &str, values: &[&str]) -> MatchCondition {
        MatchCondition { condition_type: type_.into(), operator: operator.into(), status_values: values.iter().map(|v| v.to_string()).collect() }
    }

    #[test]
    fn conditions_match_as_karmada_matches_them() {
        let have = [condition("Ready", "False"), condition("NetworkOK", "True")];
        assert!(conditions_match(&have, &[wanted("Ready", "In", &["False", "Unknown"])]));
        assert!(!conditions_match(&have, &[wanted("Ready", "In", &["True"])]));
        assert!(conditions_match(&have, &[wanted("Ready", "NotIn", &["True"])]));
        // ANDed.
        assert!(!conditions_match(&have, &[wanted("Ready", "In", &["False"]), wanted("NetworkOK", "In", &["False"])]));
        assert!(conditions_match(&have, &[wanted("Ready", "In", &["False"]), wanted("NetworkOK", "In", &["True"])]));
        // A condition the cluster does not have matches neither In nor NotIn; nor does an empty list.
        assert!(!conditions_match(&have, &[wanted("Disk", "NotIn", &["True"])]));
        assert!(!conditions_match(&have, &[]));
        assert!(!conditions_match(&have, &[wanted("Ready", "Exists", &["False"])]));
    }
}
