//! The workspace's crate edges (ADR 0020), read from `cargo metadata`: what may depend on what.
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

/// Edges that stand only until `flotilla-runtime` holds the controller plumbing: the crate, the
/// Flotilla crate it may still depend on for that, and the only paths of it the crate's sources
/// may name. Once a `flotilla-runtime` crate is in the workspace these lapse, and the test fails
/// until the imports are switched to it.
const UNTIL_RUNTIME: &[(&str, &str, &[&str])] = &[
    // The scheduler's runner writes Events and the Scheduled condition (runner/writeback.rs).
    (SCHEDULER, CONTROLLERS, &["flotilla_controllers::util::{Events, set_condition}"]),
    // The garbage collector's work queue, ClusterRole aggregation's watch, a finalizer edit.
    (
        KUBE_CONTROLLERS,
        CONTROLLERS,
        &[
            "flotilla_controllers::queue::{Next, WorkQueue, run_workers}",
            "flotilla_controllers::util::watch_into_store",
            "flotilla_controllers::util::without_finalizer",
        ],
    ),
];

/// Every workspace crate with its manifest directory and the workspace crates it depends on.
struct Workspace {
    dirs: BTreeMap<String, String>,
    deps: BTreeMap<String, BTreeSet<String>>,
}

fn workspace() -> Workspace {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages.iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
    let mut dirs = BTreeMap::new();
    let mut deps = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap().to_string();
        let manifest = Path::new(p["manifest_path"].as_str().unwrap());
        dirs.insert(name.clone(), manifest.parent().unwrap().to_string_lossy().into_owned());
        // Every kind (normal, dev, build) and every target: `dependencies` lists them all.
        let on: BTreeSet<String> =
            p["dependencies"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_string()).filter(|d| names.contains(d)).collect();
        deps.insert(name, on);
    }
    Workspace { dirs, deps }
}

impl Workspace {
    fn has(&self, krate: &str) -> bool {
        self.deps.contains_key(krate)
    }

    /// The edges still allowed: none once `flotilla-runtime` exists.
    fn pending(&self) -> &'static [(&'static str, &'static str, &'static [&'static str])] {
        if self.has(RUNTIME) { &[] } else { UNTIL_RUNTIME }
    }

    fn allowed(&self, from: &str, to: &str) -> bool {
        self.pending().iter().any(|(f, t, _)| *f == from && *t == to)
    }

    /// The workspace crates `from` reaches, with one path to each, not following allowed edges.
    fn reach(&self, from: &str) -> BTreeMap<String, Vec<String>> {
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut todo = vec![vec![from.to_string()]];
        while let Some(path) = todo.pop() {
            let last = path.last().unwrap();
            for dep in &self.deps[last] {
                if seen.contains_key(dep) || dep == from || self.allowed(last, dep) {
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
    // Directly, not even through a pending edge.
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
    if !ws.has(RUNTIME) {
        return;
    }
    let reached: Vec<String> = ws.reach(RUNTIME).into_keys().filter(|c| c != API).collect();
    assert!(reached.is_empty(), "{RUNTIME} depends on {reached:?}; it may depend only on {API}");
}

/// A pending edge carries only what it is there for: the crate's library sources (`src/`) name
/// nothing else of the crate depended on.
#[test]
fn pending_edges_carry_only_the_plumbing() {
    let ws = workspace();
    for (from, to, paths) in ws.pending() {
        if !ws.has(from) || !ws.deps[*from].contains(*to) {
            continue;
        }
        let prefix = format!("{}::", to.replace('-', "_"));
        let mut stray = Vec::new();
        for file in rust_files(&Path::new(&ws.dirs[*from]).join("src")) {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap();
                let mut rest = code;
                while let Some(at) = rest.find(&prefix) {
                    let here = &rest[at..];
                    if !paths.iter().any(|p| here.starts_with(p)) {
                        stray.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                    }
                    rest = &here[prefix.len()..];
                }
            }
        }
        assert!(stray.is_empty(), "{from} may use of {to} only {paths:?} until {RUNTIME} exists; also uses:\n{}", stray.join("\n"));
    }
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}
