//! Flotilla's controllers. Each is one module with one shape: `NAME`, a `Context`,
//! `reconcile(obj, ctx)`, `error_policy`, a `run` the controller set starts, a module-local error
//! type and tests at the bottom.
//!
//! Invariant: controllers reach the control plane only through `kube::Client` — in the
//! all-in-one binary over the API server's router in-process, elsewhere over HTTPS — never the
//! store.

pub mod agent_csr_approving;
pub mod application_failover;
pub mod binding;
pub mod bindings;
pub mod cluster;
pub mod cluster_status;
pub mod cluster_taint_policy;
pub mod dependencies;
pub mod detector;
pub mod edge_mirror;
pub mod edge_recorder;
pub mod edge_report;
pub mod edge_sync;
pub mod execution;
pub mod graceful_eviction;
pub mod kinds;
pub mod kubefed_cluster;
pub mod kubefed_dns;
pub mod kubefed_rsp;
pub mod kubefed_sync;
pub mod mcs;
pub mod namespace_sync;
pub mod policy_report;
pub mod remedy;
pub mod search;
pub mod taint_manager;
pub mod work_status;
pub mod work_tombstones;
