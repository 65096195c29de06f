//! Karmada's federation kinds (target: Karmada v1.16): `cluster.karmada.io`,
//! `networking.karmada.io`, `policy.karmada.io`, `remedy.karmada.io`, `search.karmada.io` and
//! `work.karmada.io`, and the MCS API's `multicluster.x-k8s.io`, whose CRDs Karmada installs.

pub mod cluster;
pub mod names;
pub mod networking;
pub mod policy;
pub mod remedy;
pub mod search;
pub mod taint;
pub mod work;

use serde_json::Value;

use crate::federation::crd::crd_of;

/// CRDs of every Karmada kind Flotilla serves.
pub fn crds() -> Vec<Value> {
    vec![
        crd_of::<cluster::Cluster>(),
        crd_of::<policy::PropagationPolicy>(),
        crd_of::<policy::ClusterPropagationPolicy>(),
        crd_of::<policy::OverridePolicy>(),
        crd_of::<policy::ClusterOverridePolicy>(),
        crd_of::<taint::ClusterTaintPolicy>(),
        crd_of::<remedy::Remedy>(),
        crd_of::<search::ResourceRegistry>(),
        crd_of::<networking::MultiClusterService>(),
        crd_of::<networking::MultiClusterIngress>(),
        crate::federation::mcs::service_export_crd(),
        crd_of::<crate::federation::mcs::ServiceImport>(),
        crd_of::<work::Work>(),
        crd_of::<work::ResourceBinding>(),
        crd_of::<work::ClusterResourceBinding>(),
    ]
}
