//! A pull member for tests: a bootstrap token, `flotilla register` with the command the token
//! prints, then `flotilla agent` beside a testenv member. (`pull_agent.rs` has its own copies,
//! with options these do not need.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Daemon, flotilla_cmd};

/// Register pull cluster `name` with the control plane at `kubeconfig`; the agent's kubeconfig,
/// written into `dir`.
pub fn register(kubeconfig: &Path, dir: &Path, name: &str) -> PathBuf {
    let (ok, out) =
        flotilla_cmd(&["token", "create", "--cluster-name", name, "--print-register-command", "--control-plane-kubeconfig", kubeconfig.to_str().unwrap()]);
    assert!(ok, "{out}");
    let printed = out.lines().find(|l| l.starts_with("flotilla register ")).unwrap_or_else(|| panic!("no register command in:\n{out}"));
    let agent_kubeconfig = dir.join(format!("{name}-agent.kubeconfig"));
    let args: Vec<&str> = printed.split_whitespace().skip(1).chain(["--out", agent_kubeconfig.to_str().unwrap()]).collect();
    let (ok, out) = flotilla_cmd(&args);
    assert!(ok, "{out}");
    agent_kubeconfig
}

/// `flotilla agent` for cluster `name` beside the member at `member`, with a short lease, once
/// its controllers run.
pub fn agent(name: &str, agent_kubeconfig: &Path, member: &Path) -> Daemon {
    let args = [
        "agent",
        "--cluster-name",
        name,
        "--control-plane-kubeconfig",
        agent_kubeconfig.to_str().unwrap(),
        "--kubeconfig",
        member.to_str().unwrap(),
        "--cluster-lease-duration",
        "2s",
        "--cluster-status-update-frequency",
        "500ms",
    ];
    let mut agent = Daemon::start(&args, "info");
    agent.wait_line("controllers running", Duration::from_secs(60));
    agent
}
