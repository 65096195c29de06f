//! KubeFed's federation kinds (target: KubeFed v0.10.0): `core.kubefed.io`,
//! `scheduling.kubefed.io`, the `core.kubefed.io/v1alpha1` propagated versions, and the generated `types.kubefed.io` `Federated<Kind>` types.
//!
//! `multiclusterdns.kubefed.io` ([`dns`]) is KubeFed v0.6.1's: KubeFed removed it in v0.7.0;
//! Flotilla serves it again.

pub mod core;
pub mod dns;
pub mod enable;
pub mod install;
pub mod render;
pub mod scheduling;
pub mod types;
pub mod version;

use serde_json::Value;

use crate::federation::crd::crd_of;
pub use types::{FederatedTypeOptions, federated_type_crd, federated_type_crd_with};

/// CRDs of every fixed KubeFed kind (not the per-target `Federated<Kind>` types).
pub fn crds() -> Vec<Value> {
    vec![
        crd_of::<core::KubeFedCluster>(),
        crd_of::<core::KubeFedConfig>(),
        crd_of::<core::FederatedTypeConfig>(),
        crd_of::<scheduling::ReplicaSchedulingPreference>(),
    ]
    .into_iter()
    .chain(version::crds())
    .chain(dns::crds())
    .collect()
}

/// The types `kubefedctl` enables by default (KubeFed v0.10.0's default FederatedTypeConfigs):
/// `flotilla up` registers their `Federated<Kind>` CRDs so KubeFed manifests apply unchanged on
/// a fresh control plane.
pub fn default_target_types() -> Vec<core::TargetType> {
    use core::ResourceScope::{Cluster, Namespaced};
    let t = |group: &str, version: &str, kind: &str, plural: &str, scope| core::TargetType {
        group: (!group.is_empty()).then(|| group.to_string()),
        version: version.into(),
        kind: kind.into(),
        plural_name: plural.into(),
        scope,
    };
    vec![
        t("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", Cluster),
        t("", "v1", "ConfigMap", "configmaps", Namespaced),
        t("apps", "v1", "Deployment", "deployments", Namespaced),
        t("networking.k8s.io", "v1", "Ingress", "ingresses", Namespaced),
        t("batch", "v1", "Job", "jobs", Namespaced),
        t("", "v1", "Namespace", "namespaces", Cluster),
        t("apps", "v1", "ReplicaSet", "replicasets", Namespaced),
        t("", "v1", "Secret", "secrets", Namespaced),
        t("", "v1", "ServiceAccount", "serviceaccounts", Namespaced),
        t("", "v1", "Service", "services", Namespaced),
    ]
}

/// Options of the default types' `Federated<Kind>`s: KubeFed's defaults with the built-in
/// kinds' short names (`fdeploy`, `fcm`, ...).
pub fn default_type_options(target: &core::TargetType) -> FederatedTypeOptions {
    let mut options = FederatedTypeOptions::for_target(target);
    options.target_short_names = builtin_short_names(&target.kind).iter().map(|s| s.to_string()).collect();
    options
}

/// Short names of the built-in kinds among [`default_target_types`] (kube-apiserver v1.37's
/// discovery): `kubefedctl enable` prefixes each with `f` (`fdeploy`, `fcm`, ...).
fn builtin_short_names(kind: &str) -> &'static [&'static str] {
    match kind {
        "ConfigMap" => &["cm"],
        "Deployment" => &["deploy"],
        "Ingress" => &["ing"],
        "Namespace" => &["ns"],
        "ReplicaSet" => &["rs"],
        "ServiceAccount" => &["sa"],
        "Service" => &["svc"],
        _ => &[],
    }
}

/// CRDs of the `Federated<Kind>` types of [`default_target_types`].
pub fn default_federated_type_crds() -> Vec<Value> {
    default_target_types().iter().map(|t| federated_type_crd_with(t, &default_type_options(t))).collect()
}
