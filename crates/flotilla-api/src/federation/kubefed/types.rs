//! `types.kubefed.io/v1beta1` `Federated<Kind>`: the generic shape every federated type shares
//! (template, placement, overrides), and the CRD `kubefedctl enable` (here `flotilla enable`)
//! creates for one target kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::core::{ResourceScope, TargetType};
use crate::federation::crd::{CrdDefinition, Scope, any_json, openapi_schema, preserve_unknown_object};

/// Default group of generated federated types.
pub const DEFAULT_FEDERATED_GROUP: &str = "types.kubefed.io";
/// Default version of generated federated types.
pub const DEFAULT_FEDERATED_VERSION: &str = "v1beta1";
/// Label on every propagated member object.
pub const MANAGED_LABEL: &str = "kubefed.io/managed";
/// Annotation asking deletion to leave member objects in place.
pub const ORPHAN_ANNOTATION: &str = "kubefed.io/orphan";
/// Finalizer of the sync controller.
pub const SYNC_CONTROLLER_FINALIZER: &str = "kubefed.io/sync-controller";

/// A `Federated<Kind>` object of any target kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedObject {
    /// `<federated group>/<federated version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `Federated<Kind>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Standard object metadata.
    #[serde(default)]
    #[schemars(schema_with = "object_metadata")]
    pub metadata: ObjectMeta,
    /// Template, placement and overrides.
    pub spec: FederatedSpec,
    /// Propagation status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FederatedStatus>,
}

fn object_metadata(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// The spec every federated type shares.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedSpec {
    /// The target object (metadata, spec, ...), not validated against the target's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: Option<Value>,
    /// Which clusters get the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<FederatedPlacement>,
    /// Per-cluster JSON patches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Vec<ClusterOverrides>>,
    /// Keep member replicas (scalable target types only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain_replicas: Option<bool>,
}

/// Clusters by name or by label selector; names win.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedPlacement {
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<GenericClusterReference>>,
    /// Clusters by KubeFedCluster labels; `{}` selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

/// A cluster by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct GenericClusterReference {
    /// Name of the KubeFedCluster.
    pub name: String,
}

/// Overrides for one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverrides {
    /// Name of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// JSON patch operations (add, remove, replace; empty op means replace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_overrides: Option<Vec<ClusterOverride>>,
}

/// One JSON patch operation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterOverride {
    /// add, remove or replace; empty means replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(add|remove|replace)?$"))]
    pub op: Option<String>,
    /// JSON pointer into the object.
    pub path: String,
    /// Value for add and replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<Value>,
}

/// Propagation status of a federated object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedStatus {
    /// Generation last propagated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Propagation condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<GenericCondition>>,
    /// Status per cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<GenericClusterStatus>>,
}

/// A KubeFed condition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenericCondition {
    /// Propagation.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Aggregate reason (CheckClusters, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Last error or last propagation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Last status or reason change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Propagation status in one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenericClusterStatus {
    /// Name of the cluster.
    pub name: String,
    /// Empty when OK, else a reason (CreationFailed, ClusterNotReady, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The member object's status (raw status collection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub remote_status: Option<Value>,
}

/// How a federated type is named and shaped, besides its target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FederatedTypeOptions {
    /// Group of the federated type (`--federated-group`).
    pub federated_group: String,
    /// Version of the federated type (`--federated-version`).
    pub federated_version: String,
    /// Short names of the target; each gets an `f` prefix.
    pub target_short_names: Vec<String>,
    /// Whether the target's `spec.replicas` is an int32 (adds `spec.retainReplicas`).
    pub scalable: bool,
}

impl FederatedTypeOptions {
    /// Defaults for `target`: `types.kubefed.io/v1beta1`, no short names, scalable for the
    /// built-in kinds with an integer `spec.replicas`.
    pub fn for_target(target: &TargetType) -> Self {
        let group = target.group.as_deref().unwrap_or("");
        let scalable = matches!((group, target.kind.as_str()), ("apps", "Deployment" | "ReplicaSet" | "StatefulSet") | ("", "ReplicationController"));
        FederatedTypeOptions {
            federated_group: DEFAULT_FEDERATED_GROUP.into(),
            federated_version: DEFAULT_FEDERATED_VERSION.into(),
            target_short_names: Vec::new(),
            scalable,
        }
    }
}

/// Names and scope of the federated type of `target` (`Federated<Kind>`,
/// `federated<plural>`); namespaces are federated by a namespaced type.
pub fn federated_type_definition(target: &TargetType, options: &FederatedTypeOptions) -> CrdDefinition {
    let kind = format!("Federated{}", target.kind);
    let scope = if target.group.as_deref().unwrap_or("").is_empty() && target.kind == "Namespace" {
        Scope::Namespaced
    } else {
        match target.scope {
            ResourceScope::Namespaced => Scope::Namespaced,
            ResourceScope::Cluster => Scope::Cluster,
        }
    };
    CrdDefinition {
        group: options.federated_group.clone(),
        version: options.federated_version.clone(),
        singular: kind.to_lowercase(),
        kind,
        plural: format!("federated{}", target.plural_name),
        short_names: options.target_short_names.iter().map(|s| format!("f{s}")).collect(),
        categories: Vec::new(),
        scope,
        status_subresource: true,
        printer_columns: Vec::new(),
    }
}

/// The CRD of the federated type of `target` with default options (see
/// [`FederatedTypeOptions::for_target`]).
pub fn federated_type_crd(target: &TargetType) -> Value {
    federated_type_crd_with(target, &FederatedTypeOptions::for_target(target))
}

/// The CRD of the federated type of `target`: the schema of [`FederatedObject`], without
/// `spec.retainReplicas` unless the target is scalable.
pub fn federated_type_crd_with(target: &TargetType, options: &FederatedTypeOptions) -> Value {
    let mut schema = openapi_schema::<FederatedObject>();
    // kube-apiserver allows nothing about a custom resource's top-level metadata but name
    // and generateName: metadata is implied.
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.remove("metadata");
    }
    if !options.scalable
        && let Some(spec) = schema.pointer_mut("/properties/spec/properties").and_then(Value::as_object_mut)
    {
        spec.remove("retainReplicas");
    }
    federated_type_definition(target, options).to_crd(schema)
}
