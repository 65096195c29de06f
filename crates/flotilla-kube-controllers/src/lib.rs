//! kube-controller-manager's controllers that Flotilla runs on its own API server — what a real
//! cluster's controller manager does and Flotilla's API server needs too: [`namespace`]
//! (namespace lifecycle: empty a deleted namespace, then finalize it), [`garbage_collector`]
//! (owner references: background, foreground and orphan deletion),
//! [`clusterrole_aggregation`] (aggregated ClusterRoles), [`bootstrap_tokens`] (the
//! bootstrap signer of `kube-public/cluster-info` and the token cleaner) and [`csr_signing`]
//! (client certificates for approved CertificateSigningRequests). They know only core Kubernetes kinds,
//! never a federation kind, so the simulated member clusters (`flotilla-sim`) and the
//! conformance target use them without the federation controllers.
//!
//! Invariant: like every controller, they reach the API server only through `kube::Client`. Of
//! `flotilla-controllers` they use only its plumbing (`queue`, `util`), until that moves to
//! `flotilla-runtime` (ADR 0022; `tests/crate_edges.rs` holds the edges).

pub mod bootstrap_tokens;
pub mod clusterrole_aggregation;
pub mod csr_signing;
pub mod garbage_collector;
pub mod namespace;
