//! `work.karmada.io`: ResourceBinding / ClusterResourceBinding (v1alpha2, a template bound to
//! clusters by the scheduler) and Work (v1alpha1, the manifest for one cluster, kept in
//! `karmada-es-<cluster>`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::policy::{ConflictResolution, FailoverBehavior, Placement, PurgeMode, Suspension};
use crate::federation::crd::{preserve_unknown_object, preserve_unknown_objects};

/// API group of the work kinds.
pub const GROUP: &str = "work.karmada.io";
/// Label carrying a ResourceBinding's permanent id.
pub const RESOURCE_BINDING_PERMANENT_ID_LABEL: &str = "resourcebinding.karmada.io/permanent-id";
/// Label carrying a ClusterResourceBinding's permanent id.
pub const CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL: &str = "clusterresourcebinding.karmada.io/permanent-id";
/// Label carrying a Work's permanent id (also copied onto its manifests).
pub const WORK_PERMANENT_ID_LABEL: &str = "work.karmada.io/permanent-id";
/// Annotation on a manifest listing the annotation keys Karmada manages.
pub const MANAGED_ANNOTATIONS_ANNOTATION: &str = "resourcetemplate.karmada.io/managed-annotations";
/// Annotation on a manifest listing the label keys Karmada manages.
pub const MANAGED_LABELS_ANNOTATION: &str = "resourcetemplate.karmada.io/managed-labels";
/// Label on any object (a template, a namespace) whose deletion is refused while it says
/// [`DELETION_PROTECTED_ALWAYS`] (Karmada's `resourcedeletionprotection` webhook).
pub const DELETION_PROTECTED_LABEL: &str = "resourcetemplate.karmada.io/deletion-protected";
pub const DELETION_PROTECTED_ALWAYS: &str = "Always";
/// Label on every object Karmada manages in a member.
pub const MANAGED_LABEL: &str = "karmada.io/managed";
/// Annotation on a template or manifest choosing `overwrite` / `abort` for a pre-existing member object.
pub const CONFLICT_RESOLUTION_ANNOTATION: &str = "work.karmada.io/conflict-resolution";
/// Annotations on a manifest naming its Work.
pub const WORK_NAMESPACE_ANNOTATION: &str = "work.karmada.io/namespace";
pub const WORK_NAME_ANNOTATION: &str = "work.karmada.io/name";
/// Annotations on a Work or manifest naming its ResourceBinding.
pub const RESOURCE_BINDING_NAMESPACE_ANNOTATION: &str = "resourcebinding.karmada.io/namespace";
pub const RESOURCE_BINDING_NAME_ANNOTATION: &str = "resourcebinding.karmada.io/name";
/// Annotation on a Work or manifest naming its ClusterResourceBinding.
pub const CLUSTER_RESOURCE_BINDING_NAME_ANNOTATION: &str = "clusterresourcebinding.karmada.io/name";
/// Annotations on a manifest recording its template's uid and generation.
pub const TEMPLATE_UID_ANNOTATION: &str = "resourcetemplate.karmada.io/uid";
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "resourcetemplate.karmada.io/generation";
/// Annotations on a Work listing the override policies applied to it (JSON).
pub const APPLIED_OVERRIDES_ANNOTATION: &str = "policy.karmada.io/applied-overrides";
pub const APPLIED_CLUSTER_OVERRIDES_ANNOTATION: &str = "policy.karmada.io/applied-cluster-overrides";
/// Finalizers of the controllers that own bindings and Works.
pub const EXECUTION_FINALIZER: &str = "karmada.io/execution-controller";
pub const BINDING_FINALIZER: &str = "karmada.io/binding-controller";
pub const CLUSTER_RESOURCE_BINDING_FINALIZER: &str = "karmada.io/cluster-resource-binding-controller";
/// Prefix of the label on an attached (dependency) binding naming one independent binding that
/// requires it: `<prefix><names::binding_reference_key(ns, name)>`, valued with that binding's
/// permanent id.
pub const DEPENDED_BY_LABEL_PREFIX: &str = "resourcebinding.karmada.io/depended-by-";
/// Annotation on an independent binding listing its template's dependencies (JSON, sorted).
pub const DEPENDENCIES_ANNOTATION: &str = "resourcebinding.karmada.io/dependencies";
/// Finalizer the dependencies distributor keeps on an independent binding with `propagateDeps`
/// until its attached bindings no longer name it.
pub const DEPENDENCIES_DISTRIBUTOR_FINALIZER: &str = "karmada.io/binding-dependencies-distributor";
/// Prefix of the namespace holding a cluster's Works.
pub const EXECUTION_SPACE_PREFIX: &str = "karmada-es-";

/// ResourceBindingSpec represents the expectation of a ResourceBinding.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.karmada.io",
    version = "v1alpha2",
    kind = "ResourceBinding",
    plural = "resourcebindings",
    singular = "resourcebinding",
    shortname = "rb",
    category = "karmada-io",
    namespaced,
    status = "ResourceBindingStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Scheduled","type":"string","jsonPath":".status.conditions[?(@.type==\"Scheduled\")].status"}"#,
    printcolumn = r#"{"name":"FullyApplied","type":"string","jsonPath":".status.conditions[?(@.type==\"FullyApplied\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceBindingSpec {
    /// The resource template this binding propagates.
    pub resource: ObjectReference,
    /// Propagate the resources the template references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagate_deps: Option<bool>,
    /// Requirements of one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,
    /// Number of replicas of the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Components of a multi-template workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<Component>>,
    /// The scheduling result: target clusters and their replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<TargetCluster>>,
    /// Placement copied from the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Evictions in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_eviction_tasks: Option<Vec<GracefulEvictionTask>>,
    /// Independent bindings that depend on this (dependency) binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_by: Option<Vec<BindingSnapshot>>,
    /// Scheduler that schedules this binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Failover behaviour copied from the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverBehavior>,
    /// Conflict resolution copied from the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Abort"))]
    pub conflict_resolution: Option<ConflictResolution>,
    /// A later time than status.lastScheduledTime triggers a fresh reschedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reschedule_triggered_at: Option<Time>,
    /// Suspension of dispatching and scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspension: Option<BindingSuspension>,
    /// Keep member copies when the template is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
    /// Scheduling priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_priority: Option<BindingSchedulePriority>,
    /// The workload's affinity groups, from its policy's `placement.workloadAffinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_affinity_groups: Option<WorkloadAffinityGroups>,
}

/// The groups `<labelKey>=<value>` a workload belongs to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAffinityGroups {
    /// Its affinity group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity_group: Option<String>,
    /// Its anti-affinity group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity_group: Option<String>,
}

/// The spec of a ClusterResourceBinding: the same ResourceBindingSpec.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.karmada.io",
    version = "v1alpha2",
    kind = "ClusterResourceBinding",
    plural = "clusterresourcebindings",
    singular = "clusterresourcebinding",
    shortname = "crb",
    category = "karmada-io",
    status = "ResourceBindingStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Scheduled","type":"string","jsonPath":".status.conditions[?(@.type==\"Scheduled\")].status"}"#,
    printcolumn = r#"{"name":"FullyApplied","type":"string","jsonPath":".status.conditions[?(@.type==\"FullyApplied\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(transparent)]
pub struct ClusterResourceBindingSpec(pub ResourceBindingSpec);

/// Reference to the resource template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// API version of the referent.
    pub api_version: String,
    /// Kind of the referent.
    pub kind: String,
    /// Namespace of the referent; empty for cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the referent.
    pub name: String,
    /// UID of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Resource version of the referent when it was bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// What one replica needs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRequirements {
    /// Node constraints of a replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<NodeClaim>,
    /// Resources requested by one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_request: Option<BTreeMap<String, Quantity>>,
    /// Namespace of the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// PriorityClass of the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// Node constraints of a replica.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaim {
    /// Required node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_node_affinity: Option<NodeSelector>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

/// One component of a multi-template workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// Name of the component.
    #[schemars(length(max = 32))]
    pub name: String,
    /// Replicas of the component.
    pub replicas: i32,
    /// Requirements of one replica of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,
}

/// A cluster chosen by the scheduler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetCluster {
    /// Name of the cluster.
    pub name: String,
    /// Replicas placed there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// First ordinal of StatefulSet pods there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ordinal: Option<i32>,
}

/// A cluster being evicted from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GracefulEvictionTask {
    /// Cluster being evicted from.
    pub from_cluster: String,
    /// What happens to the old copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purge_mode: Option<PurgeMode>,
    /// Replicas the cluster had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Why (TaintUntolerated, ApplicationFailure, ...).
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"))]
    pub reason: String,
    /// Human-readable details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// Who created the task.
    pub producer: String,
    /// Longest wait before the old copy is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// Keep the old copy until this is set to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_deletion: Option<bool>,
    /// State carried over to the new cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserved_label_state: Option<BTreeMap<String, String>>,
    /// Clusters the binding was on before failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters_before_failover: Option<Vec<String>>,
    /// When the task was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
}

/// An independent binding that needs this dependency, and where it went.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingSnapshot {
    /// Namespace of the binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the binding.
    pub name: String,
    /// Its scheduling result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<TargetCluster>>,
}

/// Policy suspension plus scheduling suspension.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingSuspension {
    /// Dispatching suspension copied from the policy.
    #[serde(flatten)]
    pub suspension: Suspension,
    /// Suspend scheduling (for third-party queueing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<bool>,
}

/// Resolved scheduling priority.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct BindingSchedulePriority {
    /// The priority value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// ResourceBindingStatus is the observed state of a binding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceBindingStatus {
    /// Generation the scheduler last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_observed_generation: Option<i64>,
    /// The clusterAffinities term used by the last schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_observing_affinity_name: Option<String>,
    /// When the binding was last scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_time: Option<Time>,
    /// Scheduled, FullyApplied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Status of the resource in each cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated_status: Option<Vec<AggregatedStatusItem>>,
}

/// Health of a member object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ResourceHealth {
    Healthy,
    Unhealthy,
    Unknown,
}

/// Status of the resource in one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatusItem {
    /// The member cluster.
    pub cluster_name: String,
    /// Reflected status of the member object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub status: Option<Value>,
    /// Whether the Work was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<bool>,
    /// Why applying failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_message: Option<String>,
    /// Health of the member object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
}

/// WorkSpec defines the desired state of Work.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.karmada.io",
    version = "v1alpha1",
    kind = "Work",
    plural = "works",
    singular = "work",
    shortname = "wk",
    category = "karmada-io",
    namespaced,
    status = "WorkStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"WORKLOAD-KIND","type":"string","jsonPath":".spec.workload.manifests[*].kind"}"#,
    printcolumn = r#"{"name":"APPLIED","type":"string","jsonPath":".status.conditions[?(@.type==\"Applied\")].status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkSpec {
    /// The manifests to apply to the member cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadTemplate>,
    /// Stop applying to the member (status is still collected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_dispatching: Option<bool>,
    /// Keep the member objects when the Work is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_resources_on_deletion: Option<bool>,
}

/// The manifests of a Work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WorkloadTemplate {
    /// Whole Kubernetes objects, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_objects")]
    pub manifests: Option<Vec<Value>>,
}

/// WorkStatus is the observed state of a Work.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkStatus {
    /// Applied, Progressing, Available, Degraded, Dispatching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Status of each manifest in the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_statuses: Option<Vec<ManifestStatus>>,
}

/// Status of one manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ManifestStatus {
    /// Which manifest.
    pub identifier: ResourceIdentifier,
    /// Reflected status of the member object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub status: Option<Value>,
    /// Health of the member object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
    /// Flotilla's addition (Karmada has no such field): the member object's version as KubeFed
    /// records it, `gen:<generation>` or `rv:<resourceVersion>` for kinds without a
    /// generation. KubeFed's PropagatedVersions are written from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Flotilla's addition (Karmada has no such field): the member object's whole `status`,
    /// recorded only for objects KubeFed's API manages (labelled `kubefed.io/managed=true`);
    /// KubeFed's `status.clusters[].remoteStatus` is written from it.
    #[serde(default, rename = "remoteStatus", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub remote_status: Option<Value>,
}

/// Identity of a manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ResourceIdentifier {
    /// Index in spec.workload.manifests.
    pub ordinal: i32,
    /// API group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource.
    pub resource: String,
    /// Namespace; empty for cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// A ResourceBinding (`namespace` set) or a ClusterResourceBinding.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BindingKey {
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for BindingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "resourceBinding({ns}/{})", self.name),
            None => write!(f, "clusterResourceBinding({})", self.name),
        }
    }
}

/// The binding a Work belongs to, from its reference annotations.
pub fn binding_of_work(work: &Work) -> Option<BindingKey> {
    let a = work.metadata.annotations.as_ref()?;
    if let (Some(ns), Some(name)) = (a.get(RESOURCE_BINDING_NAMESPACE_ANNOTATION), a.get(RESOURCE_BINDING_NAME_ANNOTATION)) {
        return Some(BindingKey { namespace: Some(ns.clone()), name: name.clone() });
    }
    a.get(CLUSTER_RESOURCE_BINDING_NAME_ANNOTATION).map(|name| BindingKey { namespace: None, name: name.clone() })
}
