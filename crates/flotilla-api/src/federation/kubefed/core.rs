//! `core.kubefed.io/v1beta1`: KubeFedCluster (a member), KubeFedConfig (control-plane settings,
//! the one named `kubefed` in the system namespace) and FederatedTypeConfig (one per federated
//! target type).

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the core KubeFed kinds.
pub const GROUP: &str = "core.kubefed.io";
/// Default KubeFed system namespace.
pub const DEFAULT_SYSTEM_NAMESPACE: &str = "kube-federation-system";
/// Finalizer the FTC controller adds.
pub const FEDERATED_TYPE_CONFIG_FINALIZER: &str = "core.kubefed.io/federated-type-config";

/// KubeFedClusterSpec: how to reach a member cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "KubeFedCluster",
    plural = "kubefedclusters",
    singular = "kubefedcluster",
    shortname = "kfc",
    namespaced,
    status = "KubeFedClusterStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"kubernetes-version","type":"string","jsonPath":".status.kubernetesVersion"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedClusterSpec {
    /// Address of the member API server: hostname, hostname:port, IP or IP:port (or a URL).
    #[serde(rename = "apiEndpoint")]
    pub api_endpoint: String,
    /// CA bundle of the member API server (base64 in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "byte"))]
    pub ca_bundle: Option<String>,
    /// Secret in the system namespace holding the bearer `token`.
    pub secret_ref: LocalSecretReference,
    /// TLS checks to skip: `*`, `SubjectName`, `ValidityPeriod`.
    #[serde(rename = "disabledTLSValidations", default, skip_serializing_if = "Option::is_none")]
    pub disabled_tls_validations: Option<Vec<TlsValidation>>,
    /// Proxy for reaching the member.
    #[serde(rename = "proxyURL", default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
}

/// A Secret in the KubeFed system namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct LocalSecretReference {
    /// Name of the Secret.
    pub name: String,
}

/// A TLS check KubeFed can skip.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TlsValidation {
    #[serde(rename = "*")]
    All,
    SubjectName,
    ValidityPeriod,
}

/// KubeFedClusterStatus: health of a member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedClusterStatus {
    /// Ready, Offline, ConfigMalformed.
    pub conditions: Vec<ClusterCondition>,
    /// Zones of the member's nodes (no longer populated since v0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Region of the member's nodes (no longer populated since v0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Git version of the member's API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
}

/// One health condition of a member.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// Ready, Offline or ConfigMalformed.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Last probe.
    pub last_probe_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// Last status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// KubeFedConfigSpec: settings of the KubeFed control plane.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "KubeFedConfig",
    plural = "kubefedconfigs",
    singular = "kubefedconfig",
    namespaced,
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct KubeFedConfigSpec {
    /// Cluster or Namespaced; immutable.
    pub scope: ResourceScope,
    /// Reconcile delays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_duration: Option<DurationConfig>,
    /// Leader election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_elect: Option<LeaderElectConfig>,
    /// Feature gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<Vec<FeatureGatesConfig>>,
    /// Cluster health checking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_health_check: Option<ClusterHealthCheckConfig>,
    /// Sync controller settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_controller: Option<SyncControllerConfig>,
    /// Status controller settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_controller: Option<StatusControllerConfig>,
}

/// Scope of a resource or of the control plane.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ResourceScope {
    #[default]
    Cluster,
    Namespaced,
}

/// Delays, as Go duration strings (`20s`, `1m0s`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DurationConfig {
    /// Delay before reconciling everything when a cluster becomes available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_delay: Option<String>,
    /// Delay before reconciling everything when a cluster becomes unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_delay: Option<String>,
    /// How long the sync controller waits for member caches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_sync_timeout: Option<String>,
}

/// Leader election settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectConfig {
    /// Lease duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    /// Renew deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    /// Retry period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
    /// configmaps or endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_lock: Option<ResourceLockType>,
}

/// Leader election lock object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResourceLockType {
    Configmaps,
    Endpoints,
}

/// Enabled or Disabled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConfigurationMode {
    Enabled,
    Disabled,
}

/// One feature gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct FeatureGatesConfig {
    /// PushReconciler, SchedulerPreferences or RawResourceStatusCollection.
    pub name: String,
    /// Enabled or Disabled.
    pub configuration: ConfigurationMode,
}

/// Cluster health check settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterHealthCheckConfig {
    /// Probe period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// Failures before a cluster is NotReady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i64>,
    /// Successes before a cluster is Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i64>,
    /// Probe timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// Sync controller settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncControllerConfig {
    /// Workers per sync controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i64>,
    /// Adopt pre-existing member resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt_resources: Option<ConfigurationMode>,
}

/// Status controller settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusControllerConfig {
    /// Workers of the status controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<i64>,
}

/// FederatedTypeConfigSpec: which target type is federated, and as what.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "core.kubefed.io",
    version = "v1beta1",
    kind = "FederatedTypeConfig",
    plural = "federatedtypeconfigs",
    singular = "federatedtypeconfig",
    shortname = "ftc",
    namespaced,
    status = "FederatedTypeConfigStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct FederatedTypeConfigSpec {
    /// The type being federated.
    pub target_type: ApiResource,
    /// Enabled or Disabled.
    pub propagation: PropagationMode,
    /// The Federated<Kind> type.
    pub federated_type: ApiResource,
    /// The type holding collected status (legacy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_type: Option<ApiResource>,
    /// Enabled or Disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_collection: Option<StatusCollectionMode>,
}

/// A kind with its plural and scope (`TargetType` in `kubefedctl enable`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiResource {
    /// API group; empty for the core group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural_name: String,
    /// Cluster or Namespaced.
    pub scope: ResourceScope,
}

/// The target type of a federated type.
pub type TargetType = ApiResource;

/// Propagation switch.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PropagationMode {
    #[default]
    Enabled,
    Disabled,
}

/// Status collection switch.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StatusCollectionMode {
    Enabled,
    Disabled,
}

/// Running or NotRunning.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ControllerStatus {
    Running,
    NotRunning,
}

/// FederatedTypeConfigStatus: whether the type's controllers run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedTypeConfigStatus {
    /// Generation last acted on.
    pub observed_generation: i64,
    /// Sync controller state.
    pub propagation_controller: Option<ControllerStatus>,
    /// Status controller state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_controller: Option<ControllerStatus>,
}
