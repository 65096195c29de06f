//! `flotilla` as a library: the pieces `flotilla up` is assembled from — the control plane (API
//! server on a store, federation CRDs installed), its controllers with in-process clients, the
//! simulated demo members, KubeFed's objects ([`kubefed`]: seeding a fresh control plane,
//! `enable`/`disable`), the cluster proxy and tunnel endpoints ([`cluster_proxy`]) and pull mode's
//! two halves ([`register`], [`agent`]) — so the binary and the benchmarks (`examples/`) run the
//! same wiring (the pull benchmark runs a hundred agents as tasks of one process).
//! Start at [`control_plane`], then [`controllers`] and [`demo`].
//!
//! Invariant: these pieces take typed settings and return running components; the command
//! line (`main.rs` and its `*_cmd` modules, `up.rs`) stays in the binary.

pub mod agent;
pub mod cluster_proxy;
pub mod control_plane;
pub mod controllers;
pub mod dashboard;
pub mod demo;
pub mod federation_args;
pub mod kubefed;
pub mod register;
pub mod search_view;
pub mod traffic;
