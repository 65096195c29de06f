//! The workspace's crate edges (ADR 0022), read from `cargo metadata`: what may depend on what.
//! Normal, dev and build dependencies all count, and so do paths through other Flotilla crates.
//!
//! It lives here because this crate is small and sits where the rules bite (the simulator and
//! the conformance target use it instead of the federation controllers); it needs only `cargo`
//! and `serde_json`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

const API: &str = "flotilla-api";
const BINARY: &str = "flotilla";
const CONTROLLERS: &str = "flotilla-controllers";
const KUBE_CONTROLLERS: &str = "flotilla-kube-controllers";
const RUNTIME: &str = "flotilla-runtime";
const SCHEDULER: &str = "flotilla-scheduler";
const SIM: &str = "flotilla-sim";
const TESTKIT: &str = "flotilla-testkit";

/// Every workspace crate with the workspace crates it depends on.
struct Workspace {
    deps: BTreeMap<String, BTreeSet<String>>,
}

fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

fn workspace() -> Workspace {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
    let mut deps = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap().to_string();
        // Every kind (normal, dev, build) and every target: `dependencies` lists them all.
        let on: BTreeSet<String> =
            p["dependencies"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_string()).filter(|d| names.contains(d)).collect();
        deps.insert(name, on);
    }
    Workspace { deps }
}

impl Workspace {
    fn has(&self, krate: &str) -> bool {
        self.deps.contains_key(krate)
    }

    /// The workspace crates `from` reaches, with one path to each.
    fn reach(&self, from: &str) -> BTreeMap<String, Vec<String>> {
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut todo = vec![vec![from.to_string()]];
        while let Some(path) = todo.pop() {
            let last = path.last().unwrap();
            for dep in &self.deps[last] {
                if seen.contains_key(dep) || dep == from {
                    continue;
                }
                let mut next = path.clone();
                next.push(dep.clone());
                seen.insert(dep.clone(), next.clone());
                todo.push(next);
            }
        }
        seen
    }

    fn assert_never_reaches(&self, from: &str, to: &str) {
        if !self.has(from) {
            return;
        }
        if let Some(path) = self.reach(from).get(to) {
            panic!("{from} must not depend on {to}, but does: {}", path.join(" → "));
        }
    }
}

#[test]
fn the_scheduler_does_not_depend_on_the_controllers() {
    let ws = workspace();
    assert!(ws.has(SCHEDULER) && ws.has(CONTROLLERS), "the crates this test is about: {:?}", ws.deps.keys());
    ws.assert_never_reaches(SCHEDULER, CONTROLLERS);
    ws.assert_never_reaches(SCHEDULER, KUBE_CONTROLLERS);
}

#[test]
fn the_simulator_depends_on_neither_the_controllers_nor_the_scheduler() {
    let ws = workspace();
    assert!(ws.has(SIM));
    for not in [CONTROLLERS, SCHEDULER] {
        assert!(!ws.deps[SIM].contains(not), "{SIM} names {not} in its Cargo.toml");
    }
    ws.assert_never_reaches(SIM, CONTROLLERS);
    ws.assert_never_reaches(SIM, SCHEDULER);
}

#[test]
fn nothing_depends_on_the_binary() {
    let ws = workspace();
    for (name, deps) in &ws.deps {
        assert!(!deps.contains(BINARY), "{name} depends on the binary crate {BINARY}");
    }
}

#[test]
fn the_runtime_depends_on_no_flotilla_crate_but_the_api() {
    let ws = workspace();
    assert!(ws.has(RUNTIME));
    let reached: Vec<String> = ws.reach(RUNTIME).into_keys().filter(|c| c != API).collect();
    assert!(reached.is_empty(), "{RUNTIME} depends on {reached:?}; it may depend only on {API}");
}

#[test]
fn the_test_kit_is_only_a_dev_dependency_and_names_no_controller() {
    let ws = workspace();
    assert!(ws.has(TESTKIT));
    let meta = metadata();
    for p in meta["packages"].as_array().expect("packages") {
        for d in p["dependencies"].as_array().unwrap().iter().filter(|d| d["name"] == TESTKIT) {
            assert_eq!(d["kind"], "dev", "{} depends on {TESTKIT} outside its dev-dependencies", p["name"]);
        }
    }
    // It runs the controllers its caller starts, so breaking one breaks the scenario naming it.
    for not in [CONTROLLERS, SCHEDULER, BINARY] {
        ws.assert_never_reaches(TESTKIT, not);
    }
}
