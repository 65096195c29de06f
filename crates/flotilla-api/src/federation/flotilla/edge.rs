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
    status = "EdgeChangeStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"CHANGE","type":"string","jsonPath":".spec.change"}"#,
    printcolumn = r#"{"name":"KIND","type":"string","jsonPath":".spec.object.kind"}"#,
    printcolumn = r#"{"name":"OBJECT","type":"string","jsonPath":".spec.object.name"}"#,
    printcolumn = r#"{"name":"BY","type":"string","jsonPath":".spec.manager"}"#,
    printcolumn = r#"{"name":"LAST-SEEN","type":"date","jsonPath":".spec.lastSeen"}"#,
    printcolumn = r#"{"name":"DECISION","type":"string","jsonPath":".status.phase"}"#,
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

/// Where a recorded change stands on the control plane ([`phase`]'s words).
pub mod phase {
    /// Not decided yet: the agent holds the object as the edge left it.
    pub const PENDING: &str = "Pending";
    /// Edge values are being written into the control plane's desired state (an
    /// [`super::EdgeOverride`]); the agent holds the object until its Work carries them.
    pub const ADOPTING: &str = "Adopting";
    /// Every field decided and carried out on the control plane: the agent lets go of the object
    /// (reverted fields are put back by drift correction).
    pub const DECIDED: &str = "Decided";
    /// `Manual`: held as the edge left it until `flotilla edge resolve`.
    pub const CONFLICT: &str = "Conflict";
    /// An object born at the edge: listed, left alone (`flotilla promote` adopts it).
    pub const LISTED: &str = "Listed";

    /// Whether the agent may let go of the object.
    pub fn is_final(phase: &str) -> bool {
        phase == DECIDED || phase == LISTED
    }
}

/// What became of one field change ([`outcome`]'s words).
pub mod outcome {
    /// The control plane already wants the edge's value.
    pub const CONVERGED: &str = "Converged";
    /// The control plane's value is put back.
    pub const REVERTED: &str = "Reverted";
    /// The edge's value became the control plane's desired value.
    pub const ADOPTED: &str = "Adopted";
    /// Open until someone decides.
    pub const CONFLICT: &str = "Conflict";
}

/// `flotilla edge resolve`'s choice, an annotation on the control plane's copy of an EdgeChange:
/// `edge` or `control-plane`.
pub const RESOLVE_ANNOTATION: &str = "edge.flotilla.io/resolve";
/// The values of [`RESOLVE_ANNOTATION`].
pub const KEEP_EDGE: &str = "edge";
pub const KEEP_CONTROL_PLANE: &str = "control-plane";

/// The control plane's decision on a recorded change (written by its `edgeSync` controller on
/// its copy in the cluster's execution space; the agent reads it).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeChangeStatus {
    /// The generation (spec) decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// [`phase`]'s words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// The sync policy the decision was taken under.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// Per field change, in the spec's order (a deletion is one entry with path `""`).
    #[serde(default)]
    pub fields: Vec<FieldDecision>,
    /// A sentence for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the decision was taken (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    /// `edge` or `control-plane` when someone resolved a conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

/// The decision on one field change.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldDecision {
    pub path: String,
    /// [`outcome`]'s words.
    pub outcome: String,
    /// The control plane's value when decided (absent: not set there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub control_plane: Option<Value>,
    /// The control plane had changed this field too while the edge was away (and lost, under
    /// `EdgeWins`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub over_control_plane: bool,
}

/// Edge values adopted into the control plane's desired state (`EdgeWins`): one per binding,
/// owned by it, named as it and in its namespace (a ClusterResourceBinding's in
/// `karmada-cluster`), applied by the binding controller after the user's OverridePolicies.
/// Visible and editable; a user's OverridePolicy or a Federated object's `spec.overrides` is
/// never touched.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "edge.flotilla.io",
    version = "v1alpha1",
    kind = "EdgeOverride",
    plural = "edgeoverrides",
    singular = "edgeoverride",
    namespaced,
    derive = "PartialEq",
    printcolumn = r#"{"name":"BINDING","type":"string","jsonPath":".spec.binding.name"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct EdgeOverrideSpec {
    /// The binding whose Works this rewrites.
    pub binding: BindingReference,
    /// Per cluster, what the edge made of the binding's resource.
    #[serde(default)]
    pub clusters: Vec<ClusterEdgeOverride>,
}

/// A ResourceBinding (namespace set) or ClusterResourceBinding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

/// One cluster's edge values.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterEdgeOverride {
    pub cluster: String,
    /// The edge deleted the object and the edge won: no Work for this cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// Applied in order to the cluster's manifest, after the user's overrides.
    #[serde(default)]
    pub operations: Vec<EdgeOperation>,
}

/// One field set (`replace`) or removed (`remove`), by a field path as the records write it
/// (`spec.template.spec.containers[0].image`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeOperation {
    pub path: String,
    /// `replace` or `remove`.
    pub op: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<Value>,
    /// The EdgeChange it came from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

/// One pull cluster's edge report (cluster-scoped, named as the cluster): its connectivity,
/// the changes still pending, the decisions taken and the open conflicts — what
/// `flotilla edge status` prints and the dashboard reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "edge.flotilla.io",
    version = "v1alpha1",
    kind = "EdgeReport",
    plural = "edgereports",
    singular = "edgereport",
    status = "EdgeReportStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"ONLINE","type":"boolean","jsonPath":".status.online"}"#,
    printcolumn = r#"{"name":"PENDING","type":"integer","jsonPath":".status.pending"}"#,
    printcolumn = r#"{"name":"CONFLICTS","type":"integer","jsonPath":".status.conflicts"}"#,
    printcolumn = r#"{"name":"BORN-AT-EDGE","type":"integer","jsonPath":".status.bornAtEdge"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct EdgeReportSpec {
    /// The cluster reported on.
    pub cluster: String,
}

/// What an edge report says.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeReportStatus {
    /// Whether the cluster's agent is in touch (its Cluster Ready).
    #[serde(default)]
    pub online: bool,
    /// Since when it is not (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_since: Option<String>,
    /// Counts: changes not decided yet, open conflicts, objects born at the edge.
    #[serde(default)]
    pub pending: i64,
    #[serde(default)]
    pub conflicts: i64,
    #[serde(default)]
    pub born_at_edge: i64,
    /// One entry per recorded change the control plane holds, newest first (by `lastSeen`), at
    /// most as many as the controller is configured to keep (`--edge-report-max-entries`).
    #[serde(default)]
    pub entries: Vec<EdgeReportEntry>,
    /// How many older recorded changes the entries leave out (the counts include them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_entries: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One recorded change and what became of it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EdgeReportEntry {
    /// The EdgeChange (in the cluster's execution space).
    pub record: String,
    pub object: ObjectReference,
    /// [`change_kind`]'s words.
    pub change: String,
    /// [`phase`]'s words (a record not looked at yet is `Pending`).
    pub phase: String,
    /// `path: outcome` per field: the decisions; for a change not decided yet, the recorded
    /// paths with outcome `Pending`.
    #[serde(default)]
    pub fields: Vec<FieldDecision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    pub last_seen: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
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

/// The CRDs of the edge kinds the control plane serves: the agent's copies of its records
/// (with the decisions), the adopted edge values and the reports.
pub fn control_plane_crds() -> Vec<Value> {
    vec![crd_of::<EdgeChange>(), crd_of::<EdgeOverride>(), crd_of::<EdgeReport>()]
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
