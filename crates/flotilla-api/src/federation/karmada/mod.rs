//! Karmada's federation kinds (target: Karmada v1.16): `cluster.karmada.io`,
//! `policy.karmada.io`, `remedy.karmada.io`, `search.karmada.io` and `work.karmada.io`.

pub mod cluster;
pub mod names;
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
        crd_of::<work::Work>(),
        crd_of::<work::ResourceBinding>(),
        crd_of::<work::ClusterResourceBinding>(),
    ]
}
