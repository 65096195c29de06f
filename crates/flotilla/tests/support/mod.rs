//! Test support: start the real `flotilla` binary on a free port with a fresh data directory,
//! find client binaries, and make unique names. The process is stopped when dropped (and killed
//! by the kernel if the test process dies).

#![allow(dead_code)]

pub mod netns;
pub mod platform;
pub mod pull;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct Flotilla {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub server: String,
    process: Daemon,
}

fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    #[allow(unsafe_code)]
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

fn terminate(child: &mut Child) -> Option<std::process::ExitStatus> {
    #[allow(unsafe_code)]
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

impl Flotilla {
    /// Start `flotilla up` and wait until it serves.
    pub fn start() -> Flotilla {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Flotilla {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, extra)
    }

    /// The process lives until the `Flotilla` is dropped (see [`Daemon`]).
    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Flotilla {
        let data = dir.path().join("data");
        let mut args: Vec<std::ffi::OsString> = ["up", "--listen", "127.0.0.1:0", "--data-dir"].iter().map(Into::into).collect();
        args.push(data.into());
        args.extend(extra.iter().map(Into::into));
        let mut process = Daemon::start_os(args, "warn");
        // `flotilla up` prints the address first, then the kubeconfig.
        let line = process.wait_line("flotilla: serving the Kubernetes API on ", Duration::from_secs(60));
        let server = line.trim_start_matches("flotilla: serving the Kubernetes API on ").split_whitespace().next().expect("an address").to_string();
        let line = process.wait_line("flotilla: admin kubeconfig: ", Duration::from_secs(60));
        let kubeconfig = PathBuf::from(line.trim_start_matches("flotilla: admin kubeconfig: ").trim());
        Flotilla { dir, kubeconfig, server, process }
    }

    /// Wait for a line of `flotilla up`'s output that contains `marker`; returns it.
    pub fn wait_line(&mut self, marker: &str, timeout: Duration) -> String {
        self.process.wait_line(marker, timeout)
    }

    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        kube::Client::try_from(cfg).unwrap()
    }

    /// Stop with SIGTERM, check it exited cleanly within 20 s, and hand back the data
    /// directory.
    pub fn stop(self) -> tempfile::TempDir {
        let status = self.process.stop();
        assert!(status.is_some_and(|s| s.success()), "flotilla did not exit cleanly on SIGTERM: {status:?}");
        self.dir
    }

    /// SIGKILL the process (no shutdown at all) and hand back the data directory.
    pub fn kill(self) -> tempfile::TempDir {
        self.process.kill();
        self.dir
    }
}

/// Another long-running `flotilla` command (e.g. `flotilla controllers`), owned like
/// [`Flotilla`]: SIGTERM when stopped or dropped, SIGKILL if the test process dies. Its stdout
/// lines are kept for the test to wait on; stderr goes to the test's stderr and is kept too.
pub struct Daemon {
    lines: std::sync::Mutex<std::sync::mpsc::Receiver<String>>,
    pub output: Vec<String>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// `true` asks the keeper to SIGKILL instead of SIGTERM.
    stop: Option<std::sync::mpsc::Sender<bool>>,
    keeper: Option<std::thread::JoinHandle<Option<std::process::ExitStatus>>>,
}

impl Daemon {
    pub fn start(args: &[&str], log: &str) -> Daemon {
        Self::start_os(args.iter().map(Into::into).collect(), log)
    }

    /// Start `flotilla ARGS` owned by a keeper thread that lives until the `Daemon` is
    /// stopped or dropped: the kernel's parent-death signal fires when the *thread* that forked
    /// exits, so the fork must not happen on a short-lived test thread.
    pub fn start_os(args: Vec<std::ffi::OsString>, log: &str) -> Daemon {
        let log = log.to_string();
        let (line_tx, lines) = std::sync::mpsc::channel::<String>();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<bool>();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = stderr.clone();
        let keeper = std::thread::spawn(move || {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
            cmd.args(&args).env("FLOTILLA_LOG", log).stdout(Stdio::piped()).stderr(Stdio::piped());
            die_with_parent(&mut cmd);
            let mut child = cmd.spawn().expect("start flotilla");
            let stdout = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let _ = line_tx.send(line);
                }
            });
            let err = child.stderr.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    kept.lock().unwrap().push(line);
                }
            });
            if stop_rx.recv().unwrap_or(false) {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            terminate(&mut child)
        });
        Daemon { lines: std::sync::Mutex::new(lines), output: Vec::new(), stderr, stop: Some(stop_tx), keeper: Some(keeper) }
    }

    /// Wait for a stdout line containing `marker`; panics with what was printed otherwise.
    pub fn wait_line(&mut self, marker: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = self.lines.lock().expect("the line receiver").recv_timeout(left);
            match next {
                Ok(line) => {
                    self.output.push(line.clone());
                    if line.contains(marker) {
                        return line;
                    }
                }
                Err(_) => panic!("no line containing {marker:?} within {timeout:?}; stdout so far:\n{}", self.output.join("\n")),
            }
        }
    }

    /// The stderr lines so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Stop with SIGTERM; the exit status, or `None` when it had to be killed.
    pub fn stop(mut self) -> Option<std::process::ExitStatus> {
        self.shutdown()
    }

    /// SIGKILL the process: no shutdown at all.
    pub fn kill(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        let _ = self.keeper.take().map(|k| k.join());
    }

    fn shutdown(&mut self) -> Option<std::process::ExitStatus> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(false);
        }
        self.keeper.take().and_then(|k| k.join().ok().flatten())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A DNS-label-safe unique name for this test run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id() % 100_000, COUNTER.fetch_add(1, Ordering::Relaxed))
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"))
        .join("flotilla")
}

/// Every kubectl the matrix covers: (version, path).
pub fn kubectls() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let k120 = std::env::var_os("FLOTILLA_KUBECTL_1_20").map(PathBuf::from).unwrap_or_else(|| cache_dir().join("kubectl-1.20/usr/bin/kubectl"));
    if k120.is_file() {
        out.push(("1.20".to_string(), k120));
    } else if std::env::var("FLOTILLA_REQUIRE_CLIENTS").as_deref() == Ok("1") {
        panic!("kubectl 1.20 is missing at {} (the test command extracts it from Debian's kubernetes-client)", k120.display());
    } else {
        eprintln!("SKIPPED kubectl 1.20: not found at {}", k120.display());
    }
    for minor in 27..=33 {
        let p = PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.1.{minor}"));
        if p.is_file() {
            out.push((format!("1.{minor}"), p));
        } else if std::env::var("FLOTILLA_REQUIRE_CLIENTS").as_deref() == Ok("1") {
            panic!("{} is missing", p.display());
        }
    }
    out
}

/// Run kubectl and return stdout; panics with stderr on failure.
pub fn kubectl(bin: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("run kubectl");
    assert!(
        out.status.success(),
        "{} {:?} failed ({}):\nstdout: {}\nstderr: {}",
        bin.display(),
        args,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run kubectl expecting failure; returns (exit code, stderr).
pub fn kubectl_fails(bin: &Path, kubeconfig: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("run kubectl");
    assert!(!out.status.success(), "{} {:?} should have failed", bin.display(), args);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The newest kubectl of the matrix.
pub fn kubectl_bin() -> PathBuf {
    kubectls().into_iter().map(|(_, p)| p).next_back().expect("a kubectl")
}

/// `kubectl get ... -o json`, or kubectl's stderr.
pub fn get_json(kubeconfig: &Path, args: &[&str]) -> Result<serde_json::Value, String> {
    let out = Command::new(kubectl_bin()).arg("--kubeconfig").arg(kubeconfig).args(args).args(["-o", "json"]).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Poll `f` until it succeeds; panic naming `what` and the last failure after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match f() {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("timed out waiting for {what}; last: {last}");
}

/// Run the `flotilla` binary: (success, stdout + stderr).
pub fn flotilla_cmd(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla")).args(args).output().expect("run flotilla");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Whether a Cluster (or any object) has condition `type_` with `status`.
pub fn has_condition(obj: &serde_json::Value, type_: &str, status: &str) -> bool {
    obj["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == type_ && c["status"] == status)
}

/// Wait until Cluster `name` has `Ready` = `ready` ("True", "False").
pub fn wait_cluster_ready(kubeconfig: &Path, name: &str, ready: &str) {
    wait_for(&format!("cluster {name} Ready={ready}"), Duration::from_secs(180), || {
        let c = get_json(kubeconfig, &["get", "cluster", name])?;
        if has_condition(&c, "Ready", ready) { Ok(()) } else { Err(c["status"]["conditions"].to_string()) }
    });
}

/// A namespaced CRD `plural.group` of `kind` (version v1, any content).
pub fn crd_yaml(group: &str, kind: &str, plural: &str, short: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: {plural}, singular: {singular}, kind: {kind}, shortNames: [{short}]}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n",
        singular = kind.to_lowercase()
    )
}

/// Set simulated member `m`'s faults (`{"blackhole": true}` …): `kubectl create --raw
/// /sim/v1/members/M/faults -f -` with `body` on stdin, as the demo's fleet admin.
pub fn sim_faults(cp: &Flotilla, m: &str, body: &str) {
    use std::io::Write;
    let admin = cp.dir.path().join("data/demo/fleet-admin.kubeconfig");
    let mut child = std::process::Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(&admin)
        .args(["create", "--raw", &format!("/sim/v1/members/{m}/faults"), "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// kubectl with `args`, `input` on stdin: whether it succeeded, and stdout then stderr.
pub fn kubectl_stdin(kubeconfig: &Path, args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// kubectl with `args`: whether it succeeded, and stdout then stderr.
pub fn kubectl_try(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(kubectl_bin()).arg("--kubeconfig").arg(kubeconfig).args(args).output().expect("run kubectl");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `flotilla up` flags for a health probe that notices a member going or coming within seconds.
pub const FAST_PROBES: &[&str] =
    &["--cluster-status-update-frequency", "500ms", "--cluster-probe-timeout", "1s", "--cluster-failure-threshold", "1s", "--cluster-success-threshold", "1s"];

/// `kubectl apply -f` of a YAML text.
pub fn apply_yaml(kubeconfig: &Path, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.yaml");
    std::fs::write(&f, yaml).unwrap();
    kubectl(&kubectl_bin(), kubeconfig, &["apply", "-f", f.to_str().unwrap()]);
}

/// `Ok` once `kubectl get <args>` answers NotFound; else the object's metadata, for the message.
pub fn gone(kubeconfig: &Path, args: &[&str]) -> Result<(), String> {
    match get_json(kubeconfig, args) {
        Err(e) if e.contains("NotFound") || e.contains("not found") => Ok(()),
        other => Err(format!("{:?}", other.map(|o| o["metadata"].clone()))),
    }
}

/// The `flotilla` crate's directory, as `cargo test` reports it when running the test (the path
/// compiled in is where the binary was built, which a shared target directory may have done in
/// another checkout).
pub fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
}

/// What KubeFed's code computes for `fed`: (templateVersion, overridesVersion).
pub fn kubefed_versions(fed: &serde_json::Value) -> (String, String) {
    let tool = flotilla_testenv::tool("kubefed-versions");
    let mut child = std::process::Command::new(&tool)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (built by testenv/build.sh)", tool.display()));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), fed.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kubefed-versions: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (v[0]["templateVersion"].as_str().unwrap().to_string(), v[0]["overridesVersion"].as_str().unwrap().to_string())
}

/// The version KubeFed records for a member object.
pub fn member_version(obj: &serde_json::Value) -> String {
    match obj["metadata"]["generation"].as_i64() {
        Some(g) if g != 0 => format!("gen:{g}"),
        _ => format!("rv:{}", obj["metadata"]["resourceVersion"].as_str().unwrap()),
    }
}

/// KubeFed's FederatedNamespace for `ns`, placing the namespace in every cluster
/// (`clusterSelector: {}`): without one, a namespaced federated object in `ns` reaches no
/// cluster (`NamespaceNotFederated`).
pub fn federate_namespace(kubeconfig: &Path, ns: &str) {
    apply_yaml(
        kubeconfig,
        &format!(
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedNamespace\nmetadata: {{name: {ns}, namespace: {ns}}}\nspec:\n  placement:\n    clusterSelector: {{}}\n"
        ),
    );
}

/// Join testenv's members `names` to the control plane at `kubeconfig` under their own names
/// (the default join) and wait until each is Ready; returns each name with its kubeconfig.
pub fn join_members(env: &flotilla_testenv::TestEnv, kubeconfig: &Path, names: &[&'static str]) -> Vec<(&'static str, PathBuf)> {
    let members: Vec<(&str, PathBuf)> = names.iter().map(|m| (*m, env.member(m).kubeconfig.clone())).collect();
    for (name, mk) in &members {
        let (ok, out) = flotilla_cmd(&["join", name, "--kubeconfig", mk.to_str().unwrap(), "--control-plane-kubeconfig", kubeconfig.to_str().unwrap()]);
        assert!(ok, "join {name} failed:\n{out}");
        wait_cluster_ready(kubeconfig, name, "True");
    }
    members
}

/// The MCS API's CRDs (ServiceExport, ServiceImport) installed and Established in each of
/// `members` of a testenv, as Karmada's docs have them there; before the join, so that
/// Flotilla's identity in the member covers them.
pub fn install_mcs_crds(env: &flotilla_testenv::TestEnv, members: &[&str]) {
    let crds: Vec<serde_json::Value> = flotilla_api::federation::crds().into_iter().filter(|c| c["spec"]["group"] == "multicluster.x-k8s.io").collect();
    assert_eq!(crds.len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcs-crds.json");
    std::fs::write(&file, serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds}).to_string()).unwrap();
    for m in members {
        let mk = env.member(m).kubeconfig.clone();
        kubectl(&kubectl_bin(), &mk, &["apply", "-f", file.to_str().unwrap()]);
        kubectl(
            &kubectl_bin(),
            &mk,
            &["wait", "--for=condition=Established", "crd/serviceexports.multicluster.x-k8s.io", "crd/serviceimports.multicluster.x-k8s.io", "--timeout=60s"],
        );
    }
}
