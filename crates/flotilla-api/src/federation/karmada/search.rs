//! `search.karmada.io/v1alpha1` ResourceRegistry (Karmada v1.2+, karmada-search): which kinds of
//! which member clusters the control plane keeps in its cache of member objects, the global
//! view that `search/cache/...` and `proxying/karmada/proxy/...` serve.
//!
//! Field names and JSON casing follow Karmada v1.18 (`pkg/apis/search/v1alpha1/searchregistry_types.go`).
//! Karmada serves the kind from an aggregated API server; Flotilla serves it as a custom resource,
//! the same on the wire. Karmada writes no status; Flotilla writes the conditions
//! [`CACHED`] and [`STALE`] (see `flotilla_controllers::search`). `backendStore` (OpenSearch) is
//! accepted and kept, and not used: the cache is Flotilla's own.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::cluster::LocalSecretReference;
use super::policy::ClusterAffinity;

/// The annotation every cached object carries: the cluster it was read from.
pub const CACHED_FROM_CLUSTER: &str = "resource.karmada.io/cached-from-cluster";
/// Flotilla's annotation on a cached object whose cluster is out of reach: when its watch was
/// lost (RFC 3339); the object is what the cluster last said.
pub const STALE_SINCE: &str = "search.flotilla.io/stale-since";
/// Condition: every selected kind of every selected cluster is being cached.
pub const CACHED: &str = "Cached";
/// Condition: some selected clusters are out of reach; their objects are served as last seen.
pub const STALE: &str = "Stale";

/// Which kinds of which clusters to cache.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "search.karmada.io",
    version = "v1alpha1",
    kind = "ResourceRegistry",
    plural = "resourceregistries",
    singular = "resourceregistry",
    category = "karmada-io",
    status = "ResourceRegistryStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRegistrySpec {
    /// The clusters whose objects are cached.
    #[serde(default)]
    pub target_cluster: ClusterAffinity,
    /// The kinds cached.
    pub resource_selectors: Vec<ResourceSelector>,
    /// Karmada's OpenSearch backend: accepted, not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_store: Option<BackendStoreConfig>,
}

/// A kind, optionally in one namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// The kind's group and version, e.g. `apps/v1`, `v1`.
    pub api_version: String,
    /// The kind, e.g. `Deployment`.
    pub kind: String,
    /// Only this namespace's objects; empty means all namespaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// Where Karmada would keep the objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendStoreConfig {
    /// An OpenSearch cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_search: Option<OpenSearchConfig>,
}

/// An OpenSearch cluster and its credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenSearchConfig {
    /// Its addresses.
    pub addresses: Vec<String>,
    /// A Secret in `karmada-system` with its credentials.
    pub secret_ref: LocalSecretReference,
}

/// What the cache holds for this registry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRegistryStatus {
    /// `Cached` and `Stale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karmadas_sample_reads_and_writes_back_the_same() {
        // docs/userguide/globalview/proxy-global-resource.md's registry.
        let sample = serde_json::json!({
            "apiVersion": "search.karmada.io/v1alpha1",
            "kind": "ResourceRegistry",
            "metadata": {"name": "proxy-sample"},
            "spec": {
                "targetCluster": {"clusterNames": ["member1", "member2", "member3"]},
                "resourceSelectors": [
                    {"apiVersion": "v1", "kind": "Pod"},
                    {"apiVersion": "v1", "kind": "Node"}
                ]
            }
        });
        let r: ResourceRegistry = serde_json::from_value(sample.clone()).unwrap();
        assert_eq!(r.spec.resource_selectors[1].kind, "Node");
        assert_eq!(r.spec.target_cluster.cluster_names.as_deref().unwrap().len(), 3);
        assert_eq!(serde_json::to_value(&r).unwrap()["spec"], sample["spec"]);
    }
}
