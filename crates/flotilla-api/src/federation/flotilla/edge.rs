//! `edge.flotilla.io/v1alpha1`: what a pull agent keeps in its own member so that the member stays
//! autonomous while its control plane is away and nothing it changes meanwhile is lost (ADR 0032).
//! Both kinds live in the member, in namespace [`EDGE_NAMESPACE`]; the agent installs their CRDs
//! ([`member_crds`]).
//!
//! - [`AppliedWork`]: one per Work the agent applied, named as the Work — its manifests as last
//!   received and, per manifest, the member object's resourceVersion after the last apply the
//!   control plane acknowledged: the base of the three-way merge, and what an agent restarted
//!   while offline (here or on another machine) starts from.
//! - [`EdgeChange`]: one per member object changed while offline — the field changes, who made
//!   them and when.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::federation::crd::{any_json, crd_of, preserve_unknown_objects};

/// The member namespace the agent keeps its records in.
pub const EDGE_NAMESPACE: &str = "flotilla-edge";
/// The label naming the cluster a record belongs to (a member may be registered under one name
/// at a time, but records outlive a rename).
pub const CLUSTER_LABEL: &str = "edge.flotilla.io/cluster";

/// A Work as the agent last applied it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "edge.flotilla.io",
    version = "v1alpha1",
    kind = "AppliedWork",
    plural = "appliedworks",
    singular = "appliedwork",
    namespaced,
    status = "AppliedWorkStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"WORK-GENERATION","type":"integer","jsonPath":".spec.workGeneration"}"#,
    printcolumn = r#"{"name":"ACKNOWLEDGED","type":"date","jsonPath":".status.acknowledgedAt"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct AppliedWorkSpec {
    /// The Work's execution space on the control plane (`karmada-es-<cluster>`).
    pub work_namespace: String,
    pub work_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub work_uid: String,
    /// The Work's `work.karmada.io/permanent-id` (also on every object it made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_permanent_id: Option<String>,
    /// The Work's generation these manifests are from.
    pub work_generation: i64,
    /// The manifests as the control plane sent them.
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_objects")]
    pub manifests: Vec<Value>,
}

/// What the control plane acknowledged of an AppliedWork.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedWorkStatus {
    /// When the control plane last acknowledged the apply (the Work's `Applied` condition True
    /// for this generation, RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<String>,
    /// Per manifest, the member object as of that acknowledgement.
    #[serde(default)]
    pub manifests: Vec<AppliedManifest>,
}

/// One member object as the control plane last acknowledged it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedManifest {
    /// Index in `spec.manifests`.
    pub ordinal: i32,
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The member's resourceVersion of the object then.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

/// How a member object was changed at the edge.
pub mod change_kind {
    /// Fields of an object a Work made were changed.
    pub const MODIFIED: &str = "Modified";
    /// An object a Work made was deleted.
    pub const DELETED: &str = "Deleted";
    /// An object was created at the edge, from no Work (born at the edge).
    pub const CREATED: &str = "Created";
}

/// What the edge changed of one member object while its control plane was away.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "edge.flotilla.io",
    version = "v1alpha1",
    kind = "EdgeChange",
    plural = "edgechanges",
    singular = "edgechange",
    namespaced,
    derive = "PartialEq",
    printcolumn = r#"{"name":"CHANGE","type":"string","jsonPath":".spec.change"}"#,
    printcolumn = r#"{"name":"KIND","type":"string","jsonPath":".spec.object.kind"}"#,
    printcolumn = r#"{"name":"OBJECT","type":"string","jsonPath":".spec.object.name"}"#,
    printcolumn = r#"{"name":"BY","type":"string","jsonPath":".spec.manager"}"#,
    printcolumn = r#"{"name":"LAST-SEEN","type":"date","jsonPath":".spec.lastSeen"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct EdgeChangeSpec {
    /// The cluster's name.
    pub cluster: String,
    pub object: ObjectReference,
    /// The Work that made the object (none for an object born at the edge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_name: Option<String>,
    /// [`change_kind`]'s words.
    pub change: String,
    /// The fields changed (a `Modified` change), each from the manifest's value to the member's.
    #[serde(default)]
    pub fields: Vec<FieldChangeRecord>,
    /// The member-side field manager that made the latest change (from `managedFields`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// When the change was first and last seen (RFC 3339).
    pub first_seen: String,
    pub last_seen: String,
}

/// A member object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// One field the edge changed: its path (`spec.template.spec.containers[0].image`), the
/// manifest's value and the member's (absent: not set on that side).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldChangeRecord {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub old: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub new: Option<Value>,
}

impl From<&crate::edge::FieldChange> for FieldChangeRecord {
    fn from(c: &crate::edge::FieldChange) -> Self {
        FieldChangeRecord { path: c.path.to_string(), old: c.old.clone(), new: c.new.clone() }
    }
}

/// The CRDs a pull agent installs in its member.
pub fn member_crds() -> Vec<Value> {
    vec![crd_of::<AppliedWork>(), crd_of::<EdgeChange>()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_crds_keep_manifests_and_values_whole() {
        let crds = member_crds();
        assert_eq!(crds.len(), 2);
        let applied = &crds[0];
        assert_eq!(applied["spec"]["group"], "edge.flotilla.io");
        assert_eq!(applied["spec"]["names"]["plural"], "appliedworks");
        let schema = &applied["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["properties"]["spec"]["properties"]["manifests"]["items"]["x-kubernetes-preserve-unknown-fields"], true, "{schema}");
        let change = &crds[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["fields"]["items"];
        assert_eq!(change["properties"]["new"]["x-kubernetes-preserve-unknown-fields"], true, "{change}");
    }
}
