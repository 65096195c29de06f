//! `work.flotilla.io/v1alpha1` WorkTombstone: the record the control plane keeps of a Work deleted
//! while its Pull cluster was not Ready — what it held, when and why — so that an agent back
//! from an outage removes a member object only for a deletion made on purpose (karmada#5406:
//! Karmada's agent replays every pending deletion blindly). One per Work, named as the Work, in
//! the cluster's execution space; the agent deletes it once the objects it names are gone from
//! the member (ADR 0031).

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Why a Work went while its cluster was away.
pub mod reason {
    /// Its binding is gone: the template was deleted, or no policy selects it any more.
    pub const BINDING_DELETED: &str = "BindingDeleted";
    /// Its binding no longer places the resource on this cluster (a placement change,
    /// rescheduling or an eviction that completed).
    pub const DESCHEDULED: &str = "Descheduled";
    /// The cluster itself is being removed.
    pub const CLUSTER_REMOVED: &str = "ClusterRemoved";
}

/// What a Work held and why it went.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "work.flotilla.io",
    version = "v1alpha1",
    kind = "WorkTombstone",
    plural = "worktombstones",
    singular = "worktombstone",
    namespaced,
    derive = "PartialEq",
    printcolumn = r#"{"name":"REASON","type":"string","jsonPath":".spec.reason"}"#,
    printcolumn = r#"{"name":"DELETED","type":"date","jsonPath":".spec.deletedAt"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkTombstoneSpec {
    /// The Work's name.
    pub work_name: String,
    /// The Work's `work.karmada.io/permanent-id`: a member object is removed only while it
    /// still carries this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_permanent_id: Option<String>,
    /// When the Work's deletion was asked for (RFC 3339).
    pub deleted_at: String,
    /// [`reason`]'s words.
    pub reason: String,
    /// A sentence for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The objects the Work held in the member.
    #[serde(default)]
    pub manifests: Vec<ManifestReference>,
}

/// One object of a Work's manifests.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestReference {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}
