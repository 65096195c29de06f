//! `cluster.karmada.io/v1alpha1` Cluster: a member cluster and how to reach it.
//!
//! Upstream serves Cluster from karmada-aggregated-apiserver (with `status` and `proxy`
//! subresources); Flotilla serves it as a CRD with the same group, version, plural, scope and
//! printer columns (the `proxy` subresource is the API server's job, not a CRD's).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of Cluster.
pub const GROUP: &str = "cluster.karmada.io";
/// Taint added by the cluster controller while the Ready condition is False.
pub const TAINT_NOT_READY: &str = "cluster.karmada.io/not-ready";
/// Taint added while the Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "cluster.karmada.io/unreachable";
/// Taint set by `cordon`.
pub const TAINT_UNSCHEDULABLE: &str = "cluster.karmada.io/unschedulable";
/// Finalizer of the cluster controller.
pub const FINALIZER_CLUSTER_CONTROLLER: &str = "karmada.io/cluster-controller";

/// ClusterSpec defines the desired state of a member cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cluster.karmada.io",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    singular = "cluster",
    status = "ClusterStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.kubernetesVersion"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.syncMode"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// ID is the unique identifier for the cluster (the member's kube-system namespace UID or
    /// its `cluster.clusterset.k8s.io` ClusterProperty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128000))]
    pub id: Option<String>,
    /// SyncMode describes how a cluster syncs resources from the control plane: Push or Pull.
    pub sync_mode: ClusterSyncMode,
    /// The API endpoint of the member cluster: hostname, hostname:port, IP, IP:port or a URL.
    #[serde(rename = "apiEndpoint", default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    /// Secret holding `token` and `caBundle` for reaching the member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalSecretReference>,
    /// Secret holding the impersonator's `token`, used by the cluster proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonator_secret_ref: Option<LocalSecretReference>,
    /// Skip verification of the member API server's certificate.
    #[serde(rename = "insecureSkipTLSVerification", default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls_verification: Option<bool>,
    /// Proxy used to reach the member (http, https or socks5 URL).
    #[serde(rename = "proxyURL", default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
    /// Headers sent to the proxy; multiple values are comma separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_header: Option<BTreeMap<String, String>>,
    /// Cloud provider name of the member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Region of the member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Deprecated: use `zones`. Migrated into `zones` on write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Zones of the member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Taints of the cluster; NoExecute taints get `timeAdded` on write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Resource models (grades of node sizes) used to estimate available replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_models: Option<Vec<ResourceModel>>,
}

/// How the control plane and a member exchange resources.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterSyncMode {
    /// The control plane pushes to the member.
    #[default]
    Push,
    /// An agent in the member pulls from the control plane.
    Pull,
}

/// A Secret in a given namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalSecretReference {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

/// One grade of node size: the interval [min, max) of each resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceModel {
    /// Index of this model; models are sorted by grade.
    pub grade: u32,
    /// The resource intervals of this grade.
    pub ranges: Vec<ResourceModelRange>,
}

/// One resource interval [min, max) of a resource model.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceModelRange {
    /// Resource name: cpu, memory, storage or ephemeral-storage.
    pub name: String,
    /// Inclusive lower bound.
    pub min: Quantity,
    /// Exclusive upper bound.
    pub max: Quantity,
}

/// ClusterStatus is the observed state of a member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Kubernetes version of the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// API groups, versions and resources the member serves.
    #[serde(rename = "apiEnablements", default, skip_serializing_if = "Option::is_none")]
    pub api_enablements: Option<Vec<ApiEnablement>>,
    /// Ready, CompleteAPIEnablements, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Node counts of the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_summary: Option<NodeSummary>,
    /// Resource totals of the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_summary: Option<ResourceSummary>,
    /// Remedy actions currently in effect (e.g. TrafficControl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remedy_actions: Option<Vec<String>>,
}

/// Resources served under one group/version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEnablement {
    /// Group/version, e.g. `apps/v1`.
    pub group_version: String,
    /// Resources of that group/version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<ApiResource>>,
}

/// One served resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ApiResource {
    /// Plural resource name.
    pub name: String,
    /// Kind of the resource.
    pub kind: String,
}

/// Node counts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// Number of nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_num: Option<i32>,
    /// Number of Ready nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_num: Option<i32>,
}

/// Resource totals of a member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSummary {
    /// Sum of node allocatable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// Requests of pods not yet bound to a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocating: Option<BTreeMap<String, Quantity>>,
    /// Requests of bound, unfinished pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<BTreeMap<String, Quantity>>,
    /// Node counts per resource-model grade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable_modelings: Option<Vec<AllocatableModeling>>,
}

/// Number of nodes of one grade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct AllocatableModeling {
    /// Grade of the resource model.
    pub grade: u32,
    /// Number of nodes of that grade.
    pub count: i32,
}

/// `Toleration.ToleratesTaint`: matching effect (empty = any), key (empty = any), and value
/// (`Equal`, the default) or any value (`Exists`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// Whether the cluster's `Ready` condition is `True`.
/// Whether the cluster's `status.apiEnablements` lists `kind` under `group_version`.
pub fn serves_kind(cluster: &Cluster, group_version: &str, kind: &str) -> bool {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.api_enablements.as_ref())
        .into_iter()
        .flatten()
        .filter(|e| e.group_version == group_version)
        .flat_map(|e| e.resources.iter().flatten())
        .any(|r| r.kind == kind)
}

pub fn is_cluster_ready(cluster: &Cluster) -> bool {
    cluster.status.as_ref().and_then(|s| s.conditions.as_deref()).and_then(|c| c.iter().find(|c| c.type_ == "Ready")).is_some_and(|c| c.status == "True")
}
