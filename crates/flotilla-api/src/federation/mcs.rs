//! The Multi-Cluster Services API (`multicluster.x-k8s.io/v1alpha1`, sigs.k8s.io/mcs-api v0.1.0,
//! as Karmada v1.18 installs it): a ServiceExport marks a Service of a member as offered to the
//! cluster set; a ServiceImport is how consumers see it.
//!
//! Karmada's path (its `serviceExport`, `endpointSlice` and `serviceImport` controllers; here
//! `flotilla_controllers::mcs`): each exported member EndpointSlice is reported as a Work in the
//! cluster's execution space, becomes the control plane's EndpointSlice
//! `imported-<cluster>-<slice>` labelled with the Service `derived-<name>`, which the
//! ServiceImport's dependencies carry to the consumer clusters with the Service itself.
//! [`report_work_name`] and the constants are Karmada's names.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The group and version of both kinds.
pub const API_VERSION: &str = "multicluster.x-k8s.io/v1alpha1";

/// Label of a report Work and of its slice: the namespace of the exported Service.
pub const SERVICE_NAMESPACE_LABEL: &str = "endpointslice.karmada.io/namespace";
/// Label of a report Work: the name of the exported Service.
pub const SERVICE_NAME_LABEL: &str = "endpointslice.karmada.io/name";
/// Label of a report Work: which paths report it (`ServiceExport`, `MultiClusterService`,
/// joined with `.` when both do).
pub const WORK_MANAGED_BY_LABEL: &str = "endpointslice.karmada.io/managed-by";
/// [`WORK_MANAGED_BY_LABEL`]'s value for the ServiceExport path.
pub const MANAGED_BY_SERVICE_EXPORT: &str = "ServiceExport";
/// [`WORK_MANAGED_BY_LABEL`]'s value for the MultiClusterService path.
pub const MANAGED_BY_MULTI_CLUSTER_SERVICE: &str = "MultiClusterService";
/// Finalizer of a report Work, held until its control-plane EndpointSlices are gone.
pub const ENDPOINTSLICE_FINALIZER: &str = "karmada.io/endpointslice-controller";
/// `endpointslice.kubernetes.io/managed-by` of the control plane's imported slices.
pub const IMPORTED_MANAGED_BY: &str = "endpointslice-controller.karmada.io";
/// `endpointslice.kubernetes.io/managed-by` of the slices MultiClusterService dispatches.
pub const DISPATCHED_MANAGED_BY: &str = "endpointslice-dispatch-controller.karmada.io";
/// Kubernetes' label naming an EndpointSlice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Kubernetes' label naming an EndpointSlice's manager.
pub const SLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Flotilla's annotation on a reported slice (in its Work's manifest) and on the imported
/// slice: the exported Service's cluster IPs in that cluster, comma-separated (the DNS server
/// answers them for a ClusterSetIP import, as Submariner's Lighthouse does; ADR 0037).
pub const SERVICE_CLUSTER_IPS_ANNOTATION: &str = "multicluster.flotilla.io/service-cluster-ips";
/// Flotilla's annotation on an imported slice: the cluster it was reported from. Karmada's
/// imported slices carry it only in their name (`imported-<cluster>-<slice>`), which cannot be
/// split when names contain dashes.
pub const SOURCE_CLUSTER_ANNOTATION: &str = "multicluster.flotilla.io/source-cluster";

/// The derived Service a ServiceImport's consumers get (Karmada's `GenerateDerivedServiceName`).
pub fn derived_service_name(service: &str) -> String {
    format!("derived-{service}")
}

/// The control plane's copy of a cluster's slice (Karmada's `GenerateEndpointSliceName`).
pub fn imported_slice_name(cluster: &str, slice: &str) -> String {
    format!("imported-{cluster}-{slice}")
}

/// Whether an EndpointSlice is one Karmada's or Flotilla's controllers wrote (never reported
/// back, which would loop).
/// Whether a Work reports a member's EndpointSlice to the control plane (either path's: the
/// ServiceExport's or a MultiClusterService's), as opposed to a dispatched copy, which carries
/// the provision-cluster annotation.
pub fn is_report(w: &crate::federation::karmada::work::Work) -> bool {
    let has = |map: &Option<std::collections::BTreeMap<String, String>>, key: &str| map.as_ref().is_some_and(|m| m.contains_key(key));
    has(&w.metadata.labels, WORK_MANAGED_BY_LABEL) && !has(&w.metadata.annotations, crate::federation::karmada::networking::PROVISION_CLUSTER_ANNOTATION)
}

pub fn is_managed_by_federation(managed_by: Option<&str>) -> bool {
    matches!(managed_by, Some(IMPORTED_MANAGED_BY | DISPATCHED_MANAGED_BY))
}

/// The ServiceExport CRD: no spec at all (kube-derive's would require an empty one).
pub fn service_export_crd() -> serde_json::Value {
    let mut crd = crate::federation::crd::crd_of::<ServiceExport>();
    if let Some(schema) = crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema").and_then(serde_json::Value::as_object_mut) {
        schema.remove("required");
        if let Some(props) = schema.get_mut("properties").and_then(serde_json::Value::as_object_mut) {
            props.remove("spec");
        }
    }
    crd
}

/// A Service offered to the cluster set. No spec: its name and namespace are the Service's.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceExport",
    plural = "serviceexports",
    singular = "serviceexport",
    shortname = "svcex",
    namespaced,
    status = "ServiceExportStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
pub struct ServiceExportSpec {}

/// What the export's controller says about it (`Valid`, `Conflict`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}

/// A Service of the cluster set as its consumers see it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ServiceImport",
    plural = "serviceimports",
    singular = "serviceimport",
    shortname = "svcim",
    namespaced,
    status = "ServiceImportStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Type","type":"string","description":"The type of this ServiceImport.","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"IP","type":"string","description":"The VIP for this ServiceImport.","jsonPath":".spec.ips"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    /// The ports consumers reach.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub ports: Vec<ServicePort>,
    /// The cluster-set IP (at most one), for a `ClusterSetIP` import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxItems" = 1))]
    pub ips: Option<Vec<String>>,
    /// `ClusterSetIP` (one virtual IP) or `Headless` (the endpoints' own addresses).
    #[serde(rename = "type")]
    #[schemars(extend("enum" = ["ClusterSetIP", "Headless"]))]
    pub type_: String,
    /// `ClientIP` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// The session affinity's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<k8s_openapi::api::core::v1::SessionAffinityConfig>,
}

/// `spec.type` of a ServiceImport with one virtual IP.
pub const CLUSTER_SET_IP: &str = "ClusterSetIP";
/// `spec.type` of a ServiceImport answered with its endpoints' addresses.
pub const HEADLESS: &str = "Headless";

/// One port of a ServiceImport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    pub port: i32,
}

/// The clusters that export the Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Option<Vec<ClusterStatus>>,
}

/// One exporting cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterStatus {
    pub cluster: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_karmadas() {
        assert_eq!(derived_service_name("web"), "derived-web");
        assert_eq!(imported_slice_name("member-1", "web-abc12"), "imported-member-1-web-abc12");
        assert!(is_managed_by_federation(Some(IMPORTED_MANAGED_BY)));
        assert!(!is_managed_by_federation(Some("endpointslice-controller.k8s.io")));
        assert!(!is_managed_by_federation(None));
    }
}
