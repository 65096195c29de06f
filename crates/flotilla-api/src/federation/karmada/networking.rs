//! `networking.karmada.io/v1alpha1` MultiClusterService and MultiClusterIngress (Karmada v1.18,
//! `pkg/apis/networking/v1alpha1/{service,ingress}_types.go`).
//!
//! A MultiClusterService of type `CrossCluster` lets consumer clusters reach the same-named
//! Service's endpoints in provider clusters under the Service's own name: the provider slices
//! are collected and dispatched to each consumer as `<provider>-<slice>`. Karmada serves it
//! behind the Alpha gate `MultiClusterService`; Flotilla serves it on. A MultiClusterIngress is
//! an Ingress across clusters, which Flotilla's gateway serves.

use k8s_openapi::api::core::v1::ServiceStatus;
use k8s_openapi::api::networking::v1::{IngressLoadBalancerStatus, IngressSpec};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.types` value: consumers reach the providers' endpoints under the Service's name.
pub const CROSS_CLUSTER: &str = "CrossCluster";
/// `spec.types` value: an external load balancer (for an external cloud provider; nothing in
/// Karmada or Flotilla acts on it).
pub const LOAD_BALANCER: &str = "LoadBalancer";
/// Condition: the Service reached the provider and consumer clusters.
pub const SERVICE_APPLIED: &str = "ServiceApplied";
/// Condition: the providers' EndpointSlices reached the consumers.
pub const ENDPOINT_SLICE_DISPATCHED: &str = "EndpointSliceDispatched";
/// Labels of the Works and slices of a MultiClusterService.
pub const MCS_NAMESPACE_LABEL: &str = "multiclusterservice.karmada.io/namespace";
pub const MCS_NAME_LABEL: &str = "multiclusterservice.karmada.io/name";
/// The annotation of a dispatched slice and its Work: the cluster it came from.
pub const PROVISION_CLUSTER_ANNOTATION: &str = "endpointslice.karmada.io/provision-cluster";
/// The MultiClusterService's permanent id (admission gives it), on the Service it claims, its
/// binding and its marker Works.
pub const MCS_PERMANENT_ID_LABEL: &str = "multiclusterservice.karmada.io/permanent-id";
/// Finalizer of the multiclusterservice controller on a MultiClusterService.
pub const MCS_FINALIZER: &str = "karmada.io/multiclusterservice-controller";
/// Finalizer of the dispatch controller on a collected slice's Work.
pub const DISPATCH_FINALIZER: &str = "karmada.io/mcs-endpointslice-dispatch-controller";
/// Label of a resource template another subsystem took over (no policy may claim it).
pub const CLAIMED_BY_LABEL: &str = "resourcetemplate.karmada.io/claimed-by";
/// Label of a binding a subsystem made, not the detector.
pub const BINDING_MANAGED_BY_LABEL: &str = "binding.karmada.io/managed-by";
/// The value of both: the MultiClusterService path.
pub const MULTI_CLUSTER_SERVICE: &str = "MultiClusterService";

/// How a Service is exposed across clusters.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "networking.karmada.io",
    version = "v1alpha1",
    kind = "MultiClusterService",
    plural = "multiclusterservices",
    singular = "multiclusterservice",
    shortname = "mcs",
    category = "karmada-io",
    namespaced,
    status = "ServiceStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterServiceSpec {
    /// `CrossCluster` or `LoadBalancer` (one of them).
    pub types: Vec<String>,
    /// The ports exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ExposurePort>>,
    /// Deprecated: the clusters the Service is exposed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<ExposureRange>,
    /// Deprecated: use `providerClusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_provision_clusters: Option<Vec<String>>,
    /// Deprecated: use `consumerClusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_consumption_clusters: Option<Vec<String>>,
    /// The clusters whose endpoints serve the Service; empty means every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_clusters: Option<Vec<ClusterSelector>>,
    /// The clusters that reach it; empty means every cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_clusters: Option<Vec<ClusterSelector>>,
}

/// One exposed port.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ExposurePort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub port: i32,
}

/// Deprecated cluster range.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExposureRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_names: Option<Vec<String>>,
}

/// A cluster by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterSelector {
    pub name: String,
}

impl MultiClusterServiceSpec {
    /// Whether the spec asks for `CrossCluster` exposure.
    pub fn is_cross_cluster(&self) -> bool {
        self.types.iter().any(|t| t == CROSS_CLUSTER)
    }

    /// The providers among `clusters` (all of them when none are named).
    pub fn providers<'a>(&self, clusters: &'a [String]) -> Vec<&'a String> {
        select(self.provider_clusters.as_deref(), clusters)
    }

    /// The consumers among `clusters` (all of them when none are named).
    pub fn consumers<'a>(&self, clusters: &'a [String]) -> Vec<&'a String> {
        select(self.consumer_clusters.as_deref(), clusters)
    }
}

fn select<'a>(named: Option<&[ClusterSelector]>, clusters: &'a [String]) -> Vec<&'a String> {
    match named {
        Some(named) if !named.is_empty() => clusters.iter().filter(|c| named.iter().any(|n| &n.name == *c)).collect(),
        _ => clusters.iter().collect(),
    }
}

/// An Ingress across clusters: the spec of a `networking.k8s.io/v1` Ingress.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "networking.karmada.io",
    version = "v1alpha1",
    kind = "MultiClusterIngress",
    plural = "multiclusteringresses",
    singular = "multiclusteringress",
    shortname = "mci",
    category = "karmada-io",
    namespaced,
    status = "MultiClusterIngressStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(transparent)]
pub struct MultiClusterIngressSpec(pub IngressSpec);

/// The Ingress status plus where traffic goes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterIngressStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<IngressLoadBalancerStatus>,
    /// Clusters whose traffic is blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_block_clusters: Option<Vec<String>>,
    /// Where each backend Service runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_locations: Option<Vec<ServiceLocation>>,
}

/// The clusters a backend Service runs in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ServiceLocation {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_providers_and_consumers_are_every_cluster() {
        let clusters = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let mut spec = MultiClusterServiceSpec { types: vec![CROSS_CLUSTER.into()], ..Default::default() };
        assert_eq!(spec.providers(&clusters).len(), 3);
        spec.provider_clusters = Some(vec![ClusterSelector { name: "b".into() }, ClusterSelector { name: "gone".into() }]);
        spec.consumer_clusters = Some(vec![]);
        assert_eq!(spec.providers(&clusters), [&clusters[1]]);
        assert_eq!(spec.consumers(&clusters).len(), 3);
        assert!(spec.is_cross_cluster());
    }
}
