//! `policy.karmada.io/v1alpha1`: PropagationPolicy / ClusterPropagationPolicy (which resource
//! templates go where) and OverridePolicy / ClusterOverridePolicy (how they differ per cluster).
//!
//! Field names, JSON casing, enum strings and CRD defaults follow Karmada v1.16
//! (`pkg/apis/policy/v1alpha1`). Fields added after v1.16 (workloadAffinity, overflowAffinities)
//! are not here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::federation::crd::any_json;

/// API group of the policy kinds.
pub const GROUP: &str = "policy.karmada.io";
/// Label carrying a PropagationPolicy's permanent id (set at create by admission).
pub const PROPAGATION_POLICY_PERMANENT_ID_LABEL: &str = "propagationpolicy.karmada.io/permanent-id";
/// Label carrying a ClusterPropagationPolicy's permanent id.
pub const CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL: &str = "clusterpropagationpolicy.karmada.io/permanent-id";
/// Annotations naming the PropagationPolicy that claimed a template.
pub const PROPAGATION_POLICY_NAMESPACE_ANNOTATION: &str = "propagationpolicy.karmada.io/namespace";
pub const PROPAGATION_POLICY_NAME_ANNOTATION: &str = "propagationpolicy.karmada.io/name";
/// Annotation naming the ClusterPropagationPolicy that claimed a template.
pub const CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION: &str = "clusterpropagationpolicy.karmada.io/name";
/// Finalizers added to policies at create by admission.
pub const PROPAGATION_POLICY_FINALIZER: &str = "karmada.io/propagation-policy-controller";
pub const CLUSTER_PROPAGATION_POLICY_FINALIZER: &str = "karmada.io/cluster-propagation-policy-controller";
/// Scheduler used when `schedulerName` is not set.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// PropagationSpec represents the desired behavior of PropagationPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "PropagationPolicy",
    plural = "propagationpolicies",
    singular = "propagationpolicy",
    shortname = "pp",
    category = "karmada-io",
    namespaced,
    derive = "PartialEq",
    printcolumn = r#"{"name":"CONFLICT-RESOLUTION","type":"string","jsonPath":".spec.conflictResolution"}"#,
    printcolumn = r#"{"name":"PRIORITY","type":"string","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct PropagationSpec {
    /// Resources this policy propagates. Empty does not mean all resources.
    #[schemars(length(min = 1))]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Deprecated in favour of propagateDeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub association: Option<bool>,
    /// Propagate the resources a workload references (ConfigMaps, Secrets, ...) with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,
    /// Where the resources go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Explicit priority among policies matching the same template; higher wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub priority: Option<i32>,
    /// Whether this policy may take templates claimed by lower-priority policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Never"))]
    pub preemption: Option<PreemptionBehavior>,
    /// OverridePolicies that must exist before this policy takes effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependent_overrides: Option<Vec<String>>,
    /// Scheduler that schedules the bindings of this policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default-scheduler"))]
    pub scheduler_name: Option<String>,
    /// Failover behaviour; nil disables failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverBehavior>,
    /// What to do when the resource already exists in a member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Abort"))]
    pub conflict_resolution: Option<ConflictResolution>,
    /// Lazy: policy changes take effect only when the template changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_preference: Option<ActivationPreference>,
    /// Suspension of dispatching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,
    /// Keep member copies when the template is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
    /// Scheduling priority of the bindings of this policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_priority: Option<SchedulePriority>,
}

/// The spec of a ClusterPropagationPolicy: the same PropagationSpec as PropagationPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "ClusterPropagationPolicy",
    plural = "clusterpropagationpolicies",
    singular = "clusterpropagationpolicy",
    shortname = "cpp",
    category = "karmada-io",
    derive = "PartialEq",
    printcolumn = r#"{"name":"CONFLICT-RESOLUTION","type":"string","jsonPath":".spec.conflictResolution"}"#,
    printcolumn = r#"{"name":"PRIORITY","type":"string","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(transparent)]
pub struct ClusterPropagationSpec(pub PropagationSpec);

/// Selects resource templates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// API version of the target resources.
    pub api_version: String,
    /// Kind of the target resources.
    pub kind: String,
    /// Namespace of the target resources; empty inherits the policy's scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the target resource; empty selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Label query; ignored when name is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// Field filter over cluster provider, region and zone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldSelector {
    /// Requirements; keys provider, region or zone; operators In or NotIn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<NodeSelectorRequirement>>,
}

/// Suspension of propagation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Suspension {
    /// Stop dispatching to all clusters (only `true` is meaningful).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatching: Option<bool>,
    /// Stop dispatching to these clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatching_on_clusters: Option<SuspendClusters>,
}

/// A set of clusters by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspendClusters {
    /// Cluster names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_names: Option<Vec<String>>,
}

/// How to treat the copy left on the cluster an application is migrated away from.
/// `Immediately`/`Graciously` are deprecated since v1.15 and mean `Directly`/`Gracefully`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PurgeMode {
    Immediately,
    Graciously,
    Never,
    Directly,
    Gracefully,
}

impl PurgeMode {
    /// Whether this mode waits for the new copy to be healthy (Gracefully or its old name).
    pub fn is_graceful(self) -> bool {
        matches!(self, PurgeMode::Gracefully | PurgeMode::Graciously)
    }
}

/// Failover behaviour of a policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverBehavior {
    /// Failover when the application is unhealthy; nil disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<ApplicationFailoverBehavior>,
    /// Failover when the cluster fails; nil disables it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterFailoverBehavior>,
}

/// Application failover.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationFailoverBehavior {
    /// Conditions that must hold before failing over.
    pub decision_conditions: DecisionConditions,
    /// What happens to the old copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Gracefully"))]
    pub purge_mode: Option<PurgeMode>,
    /// Longest wait before deleting the old copy (Gracefully only; defaults to 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// State to carry over to the new cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

/// Cluster failover.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFailoverBehavior {
    /// What happens to the copy on the failed cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Gracefully"))]
    pub purge_mode: Option<PurgeMode>,
    /// State to carry over to the new cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_preservation: Option<StatePreservation>,
}

/// When to fail over.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionConditions {
    /// Seconds the application may stay unhealthy before failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 300))]
    pub toleration_seconds: Option<i32>,
}

/// State preserved across failover.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatePreservation {
    /// Rules extracting state into labels.
    pub rules: Vec<StatePreservationRule>,
}

/// One JSONPath (relative to `.status`) stored under a label key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatePreservationRule {
    /// Label key under which the value is injected.
    pub alias_label_name: String,
    /// JSONPath relative to the resource's status.
    pub json_path: String,
}

/// Preemption behaviour.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PreemptionBehavior {
    Always,
    Never,
}

/// Conflict resolution with pre-existing member resources.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConflictResolution {
    Abort,
    Overwrite,
}

/// Activation preference.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ActivationPreference {
    Lazy,
}

/// Scheduling priority source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulePriority {
    /// Where the priority comes from; only KubePriorityClass is implemented upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_source: Option<PriorityClassSource>,
    /// Name of the PriorityClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// Source of a scheduling priority.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PriorityClassSource {
    FederatedPriorityClass,
    KubePriorityClass,
    PodPriorityClass,
}

/// Rules for selecting clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Restrictions on the clusters; cannot co-exist with clusterAffinities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Cluster groups tried in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinities: Option<Vec<ClusterAffinityTerm>>,
    /// Taints tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_tolerations: Option<Vec<Toleration>>,
    /// How clusters are spread over groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_constraints: Option<Vec<SpreadConstraint>>,
    /// How replicas are scheduled; nil means Duplicated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaSchedulingStrategy>,
    /// Inter-workload affinity and anti-affinity (the WorkloadAffinity gate, alpha).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_affinity: Option<WorkloadAffinity>,
}

/// Hard rules between workloads: co-locate with the workloads of the same affinity group,
/// avoid the clusters of the same anti-affinity group. Groups are per namespace; the first
/// workload of an affinity group is placed freely.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAffinity {
    /// Only clusters where the other workloads of the group run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<WorkloadAffinityTerm>,
    /// No cluster where another workload of the group runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<WorkloadAffinityTerm>,
}

/// The template label whose value names the group (`<key>=<value>`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAffinityTerm {
    /// A label key of the resource template.
    pub group_by_label_key: String,
}

/// Selects clusters; all non-empty parts must match and `exclude` wins.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Label query over clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Field query over clusters (provider, region, zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    /// Clusters selected by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_names: Option<Vec<String>>,
    /// Clusters never selected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
}

/// A named cluster group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinityTerm {
    /// Name of the group.
    #[schemars(length(min = 1, max = 32))]
    pub affinity_name: String,
    /// The group's cluster restrictions.
    #[serde(flatten)]
    pub affinity: ClusterAffinity,
}

/// Cluster field a spread constraint groups by.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SpreadByField {
    Cluster,
    Region,
    Zone,
    Provider,
}

/// How clusters are spread over groups.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// Group by a cluster field; exclusive with spreadByLabel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by_field: Option<SpreadByField>,
    /// Group by a cluster label; exclusive with spreadByField.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_by_label: Option<String>,
    /// At most this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_groups: Option<i32>,
    /// At least this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_groups: Option<i32>,
}

/// Duplicated or Divided.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ReplicaSchedulingType {
    Duplicated,
    Divided,
}

/// How Divided replicas are split.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ReplicaDivisionPreference {
    Aggregated,
    Weighted,
}

/// Replica scheduling.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSchedulingStrategy {
    /// Duplicated or Divided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Divided"))]
    pub replica_scheduling_type: Option<ReplicaSchedulingType>,
    /// Aggregated or Weighted (Divided only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_division_preference: Option<ReplicaDivisionPreference>,
    /// Weights for Weighted; nil means equal weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_preference: Option<ClusterPreferences>,
}

/// Static or dynamic weights.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreferences {
    /// Static weights per cluster group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_weight_list: Option<Vec<StaticClusterWeight>>,
    /// Dynamic weight factor; when set, staticWeightList is ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_weight: Option<DynamicWeightFactor>,
}

/// A weight for the clusters an affinity selects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticClusterWeight {
    /// Clusters the weight applies to.
    pub target_cluster: ClusterAffinity,
    /// The weight.
    #[schemars(range(min = 1))]
    pub weight: i64,
}

/// Factor of dynamic weights.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DynamicWeightFactor {
    AvailableReplicas,
}

/// OverrideSpec defines the desired behavior of OverridePolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "OverridePolicy",
    plural = "overridepolicies",
    singular = "overridepolicy",
    shortname = "op",
    category = "karmada-io",
    namespaced,
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct OverrideSpec {
    /// Resources this policy overrides; nil means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_selectors: Option<Vec<ResourceSelector>>,
    /// Override rules per target cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_rules: Option<Vec<RuleWithCluster>>,
    /// Deprecated: use overrideRules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterAffinity>,
    /// Deprecated: use overrideRules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overriders: Option<Overriders>,
}

/// The spec of a ClusterOverridePolicy: the same OverrideSpec as OverridePolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.karmada.io",
    version = "v1alpha1",
    kind = "ClusterOverridePolicy",
    plural = "clusteroverridepolicies",
    singular = "clusteroverridepolicy",
    shortname = "cop",
    category = "karmada-io",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(transparent)]
pub struct ClusterOverrideSpec(pub OverrideSpec);

/// Overriders for the clusters a target selects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleWithCluster {
    /// Clusters the rule applies to; nil means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cluster: Option<ClusterAffinity>,
    /// The overriders.
    pub overriders: Overriders,
}

/// Override rules; applied in the order image, command, args, labels, annotations, field,
/// plaintext.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// JSON-patch-like rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plaintext: Option<Vec<PlaintextOverrider>>,
    /// Image rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_overrider: Option<Vec<ImageOverrider>>,
    /// Container command rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_overrider: Option<Vec<CommandArgsOverrider>>,
    /// Container args rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_overrider: Option<Vec<CommandArgsOverrider>>,
    /// Label rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels_overrider: Option<Vec<LabelAnnotationOverrider>>,
    /// Annotation rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations_overrider: Option<Vec<LabelAnnotationOverrider>>,
    /// Rules editing JSON/YAML held in a string field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_overrider: Option<Vec<FieldOverrider>>,
}

impl Overriders {
    /// No overrider of the kinds upstream counts (plaintext, image, command, args, labels,
    /// annotations).
    pub fn is_empty(&self) -> bool {
        fn empty<T>(list: &Option<Vec<T>>) -> bool {
            list.as_ref().is_none_or(Vec::is_empty)
        }
        empty(&self.plaintext)
            && empty(&self.image_overrider)
            && empty(&self.command_overrider)
            && empty(&self.args_overrider)
            && empty(&self.labels_overrider)
            && empty(&self.annotations_overrider)
    }
}

/// Operators of overriders.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OverriderOperator {
    Add,
    Remove,
    Replace,
}

/// Operators of command/args overriders.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommandArgsOperator {
    Add,
    Remove,
}

/// A JSON-patch-like operation on the manifest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlaintextOverrider {
    /// JSON pointer of the target field.
    pub path: String,
    /// add, remove or replace.
    pub operator: OverriderOperator,
    /// Value to set; must be empty for remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<Value>,
}

/// Part of an image reference.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ImageComponent {
    Registry,
    Repository,
    Tag,
}

/// Image rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverrider {
    /// Which image fields; nil detects the containers of well-known workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicate: Option<ImagePredicate>,
    /// Registry, Repository or Tag.
    pub component: ImageComponent,
    /// add, remove or replace.
    pub operator: OverriderOperator,
    /// New value; required for add and replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Image field filter.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ImagePredicate {
    /// JSON pointer of the image field.
    pub path: String,
}

/// Container command or args rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandArgsOverrider {
    /// Name of the container.
    pub container_name: String,
    /// add or remove.
    pub operator: CommandArgsOperator,
    /// Items appended or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Vec<String>>,
}

/// Label or annotation rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct LabelAnnotationOverrider {
    /// add, remove or replace.
    pub operator: OverriderOperator,
    /// Keys and values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<BTreeMap<String, String>>,
}

/// Edits of JSON or YAML held in one string field (e.g. ConfigMap data).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldOverrider {
    /// JSON pointer of the string field.
    pub field_path: String,
    /// Operations on the field as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<Vec<PatchOperation>>,
    /// Operations on the field as YAML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yaml: Option<Vec<PatchOperation>>,
}

/// One operation of a field overrider (JSONPatchOperation / YAMLPatchOperation upstream, which
/// have the same shape).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchOperation {
    /// JSON pointer inside the field's document.
    pub sub_path: String,
    /// add, remove or replace.
    pub operator: OverriderOperator,
    /// New value for add and replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<Value>,
}
