//! Flotilla's own kinds, in groups of their own so that Karmada's and KubeFed's manifests stay
//! valid unchanged: `work.flotilla.io` [`tombstone::WorkTombstone`] on the control plane, and
//! `edge.flotilla.io` [`edge::AppliedWork`] and [`edge::EdgeChange`], which a pull agent keeps in
//! its member ([`edge::member_crds`]); on the control plane, the agents' copies of their
//! EdgeChanges with the decisions taken, [`edge::EdgeOverride`] and [`edge::EdgeReport`]
//! ([`edge::control_plane_crds`]).

pub mod edge;
pub mod tombstone;

use serde_json::Value;

use crate::federation::crd::crd_of;

/// CRDs of Flotilla's own kinds on the control plane.
pub fn crds() -> Vec<Value> {
    let mut crds = vec![crd_of::<tombstone::WorkTombstone>()];
    crds.extend(edge::control_plane_crds());
    crds
}
