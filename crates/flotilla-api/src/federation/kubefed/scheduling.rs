//! `scheduling.kubefed.io/v1alpha1` ReplicaSchedulingPreference: split the replicas of a
//! FederatedDeployment or FederatedReplicaSet of the same name by weight, with min/max.

use std::collections::BTreeMap;

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// ReplicaSchedulingPreferenceSpec: the replica split of one target.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "scheduling.kubefed.io",
    version = "v1alpha1",
    kind = "ReplicaSchedulingPreference",
    plural = "replicaschedulingpreferences",
    singular = "replicaschedulingpreference",
    shortname = "rsp",
    namespaced,
    status = "ReplicaSchedulingPreferenceStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSchedulingPreferenceSpec {
    /// FederatedDeployment or FederatedReplicaSet (same name and namespace as this object).
    pub target_kind: String,
    /// Replicas to distribute; replaces the template's replicas.
    pub total_replicas: i32,
    /// Allow moving replicas that already run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebalance: Option<bool>,
    /// Preferences per cluster name; `*` applies to clusters without an entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<BTreeMap<String, ClusterPreferences>>,
    /// Candidates are the ready clusters matching the target's clusterSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intersect_with_cluster_selector: Option<bool>,
}

/// Preference for one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreferences {
    /// At least this many replicas (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_replicas: Option<i64>,
    /// At most this many replicas (unbounded when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_replicas: Option<i64>,
    /// Relative weight (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub weight: Option<i64>,
}

/// ReplicaSchedulingPreferenceStatus is empty upstream.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ReplicaSchedulingPreferenceStatus {}
