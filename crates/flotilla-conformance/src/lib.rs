//! Differential API conformance: the same request scripts run against a real kube-apiserver
//! (to record what it answers) and against Flotilla's API server in-process (to compare).
//!
//! Start at [`case`] (the data format of `conformance/cases/*.yaml`), then [`exec`] (running one
//! case against a [`target::Target`] into a [`recording::Transcript`]), [`normalise`] (what is
//! made comparable and why), [`diff`] and [`allowlist`] (the machine-readable table in
//! `docs/conformance.md`), and [`suite`] (record, replay, gate). `docs/conformance.md` is the
//! user-facing description of all of it.
//!
//! Invariants: expected responses are only ever recorded from a real server, never written by
//! hand; the same normalisation runs on both sides; a replay fails on every divergence that the
//! allowlist does not name and on every allowlist row that no longer matches anything.

pub mod allowlist;
pub mod case;
pub mod diff;
pub mod exec;
pub mod normalise;
pub mod path;
pub mod recording;
pub mod report;
pub mod suite;
pub mod target;
pub mod template;

use std::path::PathBuf;

/// The repository root (cases, recordings and the allowlist live there).
pub fn repo_root() -> PathBuf {
    manifest_dir().join("../..")
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
