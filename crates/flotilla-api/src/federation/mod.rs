//! Flotilla's federation kinds as Rust types, and the CRDs generated from them.
//!
//! - [`karmada`]: Karmada's `cluster.karmada.io`, `policy.karmada.io` and `work.karmada.io`
//!   kinds (target: Karmada v1.16).
//! - [`kubefed`]: KubeFed's `core.kubefed.io` and `scheduling.kubefed.io` kinds and the
//!   generated `types.kubefed.io` `Federated<Kind>` types (target: KubeFed v0.10.0).
//! - [`flotilla`]: Flotilla's own kinds (`work.flotilla.io` WorkTombstone), in groups of their
//!   own.
//! - [`crd`]: how a CRD is generated from a type, and the structural-schema checker.
//!
//! Start at [`crds`]. Invariant: no CRD schema is written by hand — each comes from a Rust type
//! through schemars, so the types the controllers use and the schema the API server prunes and
//! validates with cannot drift apart. What a CRD cannot express lives in
//! [`crate::admission`].

pub mod crd;
pub mod flotilla;
pub mod karmada;
pub mod kubefed;
pub mod mcs;

use serde_json::Value;

/// Every fixed federation CRD (`apiextensions.k8s.io/v1` objects, ready to POST), Karmada's
/// first. KubeFed's per-kind `Federated<Kind>` CRDs come from [`kubefed::federated_type_crd`].
pub fn crds() -> Vec<Value> {
    let mut crds = karmada::crds();
    crds.extend(kubefed::crds());
    crds.extend(flotilla::crds());
    crds
}

/// [`crds`] and the default `Federated<Kind>` CRDs ([`kubefed::default_federated_type_crds`])
/// as multi-document YAML (`---` between documents), the output of `flotilla crds`;
/// `kubectl apply -f -` accepts it as it is.
///
/// A real kube-apiserver host given these CRDs serves the kinds with the same names, schemas,
/// pruning, schema defaults and printer columns, but lacks [`crate::admission`] (permanent-id
/// labels, Weighted and spread defaults, the 48-character Cluster name limit, ...) unless that
/// chain is served to it as a webhook, and serves Cluster without the `proxy` subresource.
pub fn crds_yaml() -> String {
    let mut crds = crds();
    crds.extend(kubefed::default_federated_type_crds());
    serde_saphyr::to_string_multiple(&crds).expect("CRDs serialise to YAML")
}

/// KubeFed's objects of a fresh control plane ([`kubefed::install::objects`]: the system
/// namespace, the KubeFedConfig, the default FederatedTypeConfigs) as multi-document YAML, the
/// output of `flotilla crds --kubefed-objects`, to apply once [`crds_yaml`]'s CRDs are served.
pub fn kubefed_objects_yaml() -> String {
    serde_saphyr::to_string_multiple(&kubefed::install::objects()).expect("objects serialise to YAML")
}
