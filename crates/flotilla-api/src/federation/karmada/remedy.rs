//! `remedy.karmada.io/v1alpha1` Remedy (Karmada v1.10+): actions a Cluster needs while its
//! status conditions say so — today `TrafficControl`, e.g. while the cluster's Service DNS
//! resolution fails — recorded in the Cluster's `status.remedyActions` for the systems that
//! act on them (multi-cluster ingress and services).
//!
//! Field names and JSON casing follow Karmada v1.18 (`pkg/apis/remedy/v1alpha1/remedy_types.go`).
//! What the controller does with it is in `flotilla_controllers::remedy`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The one condition type Karmada defines for remedies; any condition type is accepted.
pub const SERVICE_DOMAIN_NAME_RESOLUTION_READY: &str = "ServiceDomainNameResolutionReady";
/// The one action Karmada defines.
pub const TRAFFIC_CONTROL: &str = "TrafficControl";

/// Which clusters a Remedy watches, when to act, and what the action is.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "remedy.karmada.io",
    version = "v1alpha1",
    kind = "Remedy",
    plural = "remedies",
    singular = "remedy",
    category = "karmada-io",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct RemedySpec {
    /// The clusters this Remedy looks at; unset means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<RemedyClusterAffinity>,
    /// When to act: any one match is enough; unset means always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_matches: Option<Vec<DecisionMatch>>,
    /// What the selected clusters need while a match holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<String>>,
}

/// Clusters by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemedyClusterAffinity {
    /// The clusters selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_names: Option<Vec<String>>,
}

/// One way a Remedy's decision can match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionMatch {
    /// A requirement on one of the cluster's status conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_condition_match: Option<ClusterConditionRequirement>,
}

/// A cluster status condition compared with a status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConditionRequirement {
    /// The condition's type.
    pub condition_type: String,
    /// `Equal` or `NotEqual`.
    #[schemars(extend("enum" = ["Equal", "NotEqual"]))]
    pub operator: String,
    /// The status (`True`, `False`, `Unknown`) compared with.
    pub condition_status: String,
}

impl RemedySpec {
    /// Whether the Remedy looks at the cluster of this name (Karmada's `isRemedyWorkOnCluster`).
    pub fn selects(&self, cluster: &str) -> bool {
        self.cluster_affinity.as_ref().is_none_or(|a| a.cluster_names.iter().flatten().any(|n| n == cluster))
    }

    /// Whether the cluster's conditions call for the actions (Karmada's
    /// `remedyDecisionMatchWithCluster`): no matches means always; otherwise any one match
    /// whose condition is present and compares as its operator says.
    pub fn decides(&self, conditions: &[Condition]) -> bool {
        let Some(matches) = &self.decision_matches else { return true };
        matches.iter().filter_map(|m| m.cluster_condition_match.as_ref()).any(|want| {
            conditions.iter().find(|c| c.type_ == want.condition_type).is_some_and(|c| match want.operator.as_str() {
                "Equal" => c.status == want.condition_status,
                "NotEqual" => c.status != want.condition_status,
                _ => false,
            })
        })
    }
}

/// The actions a cluster needs under these Remedies: every action of each Remedy that
/// selects it and whose decision matches, sorted and without repeats (Karmada's
/// `calculateActions`).
pub fn actions_for<'a>(remedies: impl IntoIterator<Item = &'a RemedySpec>, cluster: &str, conditions: &[Condition]) -> Vec<String> {
    let mut actions: Vec<String> =
        remedies.into_iter().filter(|r| r.selects(cluster) && r.decides(conditions)).flat_map(|r| r.actions.iter().flatten().cloned()).collect();
    actions.sort();
    actions.dedup();
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: &str) -> Condition {
        serde_json::from_value(serde_json::json!({"type": type_, "status": status, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
            .unwrap()
    }

    fn remedy(clusters: Option<&[&str]>, operator: &str, status: &str, actions: &[&str]) -> RemedySpec {
        RemedySpec {
            cluster_affinity: clusters.map(|c| RemedyClusterAffinity { cluster_names: Some(c.iter().map(|s| s.to_string()).collect()) }),
            decision_matches: Some(vec![DecisionMatch {
                cluster_condition_match: Some(ClusterConditionRequirement {
                    condition_type: SERVICE_DOMAIN_NAME_RESOLUTION_READY.into(),
                    operator: operator.into(),
                    condition_status: status.into(),
                }),
            }]),
            actions: Some(actions.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn actions_follow_conditions_as_karmada_decides_them() {
        let failing = [condition("Ready", "True"), condition(SERVICE_DOMAIN_NAME_RESOLUTION_READY, "False")];
        let fine = [condition("Ready", "True"), condition(SERVICE_DOMAIN_NAME_RESOLUTION_READY, "True")];
        let on_false = remedy(None, "Equal", "False", &[TRAFFIC_CONTROL]);
        let not_true = remedy(Some(&["m1"]), "NotEqual", "True", &[TRAFFIC_CONTROL, "Custom"]);
        assert_eq!(actions_for([&on_false, &not_true], "m1", &failing), ["Custom", "TrafficControl"]);
        assert_eq!(actions_for([&on_false, &not_true], "m2", &failing), ["TrafficControl"], "m2 is not in the second's clusterNames");
        assert!(actions_for([&on_false, &not_true], "m1", &fine).is_empty());
        // A condition the cluster does not report never matches; no matches at all always do.
        assert!(actions_for([&on_false], "m1", &[condition("Ready", "True")]).is_empty());
        let always = RemedySpec { decision_matches: None, ..on_false.clone() };
        assert_eq!(actions_for([&always], "m1", &[]), ["TrafficControl"]);
    }
}
