//! KubeFed's federation kinds (target: KubeFed v0.10.0): `core.kubefed.io`,
//! `scheduling.kubefed.io`, and the generated `types.kubefed.io` `Federated<Kind>` types.
//!
//! `multiclusterdns.kubefed.io` is not here: KubeFed removed it in v0.7.0.

pub mod core;
pub mod scheduling;
pub mod types;

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
}
