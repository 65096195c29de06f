//! Flotilla's own kinds, in groups of their own so that Karmada's and KubeFed's manifests stay
//! valid unchanged: `work.flotilla.io` [`tombstone::WorkTombstone`].

pub mod tombstone;

use serde_json::Value;

use crate::federation::crd::crd_of;

/// CRDs of Flotilla's own kinds.
pub fn crds() -> Vec<Value> {
    vec![crd_of::<tombstone::WorkTombstone>()]
}
