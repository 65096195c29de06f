//! Test support for real Kubernetes members (testenv, see docs/testing.md).
//!
//! The test command starts ONE testenv for the whole run (`testenv up … --out DIR`) and exports
//! `FLOTILLA_TESTENV_DIR`; tests attach with [`TestEnv::connect`] and isolate themselves by
//! namespace and name prefix. A test that stops, kills or otherwise disturbs a member starts a
//! private environment with [`TestEnv::start_private`] (dropped = torn down).
//!
//! Without `FLOTILLA_TESTENV_DIR`, `connect` returns `None` and the test should skip — unless
//! `FLOTILLA_REQUIRE_TESTENV=1` (set by the test command), when it panics instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

/// One member cluster as `ready.json` describes it.
#[derive(Clone, Debug, Deserialize)]
pub struct Member {
    pub name: String,
    pub server: String,
    pub kubeconfig: PathBuf,
    #[serde(default)]
    pub running: bool,
    #[serde(default, rename = "withWorkloads")]
    pub with_workloads: bool,
    #[serde(default)]
    pub region: String,
    #[serde(default)]
    pub zones: Vec<String>,
}

impl Member {
    /// A kube client for the member's admin identity.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read the member kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("member kubeconfig");
        kube::Client::try_from(cfg).expect("member client")
    }
}

#[derive(Debug, Deserialize)]
struct Ready {
    members: Vec<Member>,
}

/// A testenv: the shared one, or a private one owned by this value.
#[derive(Debug)]
pub struct TestEnv {
    pub dir: PathBuf,
    pub members: Vec<Member>,
    private: Option<tempfile::TempDir>,
}

/// The `testenv` binary.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("TESTENV_BIN") {
        return PathBuf::from(p);
    }
    tool("testenv")
}

/// A binary `testenv/build.sh` builds (`kubefed-versions`, ...), in `$TESTENV_BIN_DIR`.
pub fn tool(name: &str) -> PathBuf {
    let bin_dir = std::env::var("TESTENV_BIN_DIR").map(PathBuf::from).unwrap_or_else(|_| {
        std::env::var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"))
            .join("flotilla/testenv/bin")
    });
    bin_dir.join(name)
}

fn read_ready(dir: &Path) -> Vec<Member> {
    let text = std::fs::read_to_string(dir.join("ready.json")).unwrap_or_else(|e| panic!("read {}/ready.json: {e}", dir.display()));
    serde_json::from_str::<Ready>(&text).expect("parse ready.json").members
}

impl TestEnv {
    /// Attach to the shared environment, or `None` (skip) when there is none.
    pub fn connect() -> Option<TestEnv> {
        match std::env::var("FLOTILLA_TESTENV_DIR") {
            Ok(d) if !d.is_empty() => {
                let dir = PathBuf::from(d);
                Some(TestEnv { members: read_ready(&dir), dir, private: None })
            }
            _ => {
                if std::env::var("FLOTILLA_REQUIRE_TESTENV").as_deref() == Ok("1") {
                    panic!("FLOTILLA_TESTENV_DIR is not set but FLOTILLA_REQUIRE_TESTENV=1");
                }
                eprintln!("SKIPPED: no shared testenv (set FLOTILLA_TESTENV_DIR; see docs/testing.md)");
                None
            }
        }
    }

    /// Start a private environment (`testenv up`) with these extra flags; torn down on drop.
    pub fn start_private(members: usize, flags: &[&str]) -> TestEnv {
        let tmp = tempfile::Builder::new().prefix("testenv-private-").tempdir().expect("temp dir");
        let out = Command::new(binary())
            .args(["up", "--members", &members.to_string(), "--out"])
            .arg(tmp.path())
            .arg("--parent-pid")
            .arg(std::process::id().to_string())
            .args(flags)
            .output()
            .expect("run testenv up");
        assert!(out.status.success(), "testenv up failed:\n{}", String::from_utf8_lossy(&out.stderr));
        TestEnv { dir: tmp.path().to_path_buf(), members: read_ready(tmp.path()), private: Some(tmp) }
    }

    pub fn member(&self, name: &str) -> &Member {
        self.members.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no member {name}"))
    }

    /// Run `testenv <verb> --member NAME` (stop, kill, start) and refresh the member list.
    pub fn lifecycle(&mut self, verb: &str, member: &str) {
        assert!(self.private.is_some(), "only a private testenv may be stopped or killed");
        let out = Command::new(binary()).args([verb, "--member", member, "--out"]).arg(&self.dir).output().expect("run testenv");
        assert!(out.status.success(), "testenv {verb} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        self.members = read_ready(&self.dir);
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.private.is_some() {
            let _ = Command::new(binary()).args(["down", "--out"]).arg(&self.dir).output();
        }
    }
}
