//! What Flotilla's identity in a member may not do (security review: with the joined identity's
//! token one could create a `kubernetes.io/service-account-token` Secret for a privileged
//! kube-system account and read its token). Against a real testenv member, as that identity:
//! no service account token Secrets, no TokenRequests for other accounts, no impersonation —
//! while the Secrets propagation needs are still written.

mod support;

use std::path::Path;
use std::process::Command;

use base64::Engine;
use support::{Flotilla, kubectl, unique};

const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// Cleans the member whatever the test's outcome.
struct Unjoin<'a> {
    name: String,
    cp: &'a Path,
    member: &'a Path,
}

impl Drop for Unjoin<'_> {
    fn drop(&mut self) {
        // Had the identity minted a token Secret, it goes too.
        let _ = Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(self.member)
            .args(["-n", "kube-system", "delete", "secret", &format!("{}-stolen", self.name), "--ignore-not-found"])
            .output();
        let _ = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["unjoin", &self.name, "--wait-seconds", "30", "--control-plane-kubeconfig"])
            .arg(self.cp)
            .arg("--kubeconfig")
            .arg(self.member)
            .output();
    }
}

#[test]
fn the_member_identity_cannot_mint_other_credentials() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("SKIPPED: {KUBECTL} not found");
        return;
    }
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member3").kubeconfig.clone();
    let cp = Flotilla::start();
    let name = unique("ident");
    let _unjoin = Unjoin { name: name.clone(), cp: &cp.kubeconfig, member: &member };
    let join = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["join", &name, "--token-wait-seconds", "3", "--kubeconfig"])
        .arg(&member)
        .arg("--control-plane-kubeconfig")
        .arg(&cp.kubeconfig)
        .output()
        .unwrap();
    let joined = String::from_utf8_lossy(&join.stdout).into_owned();
    assert!(join.status.success(), "{}", String::from_utf8_lossy(&join.stderr));
    assert!(joined.contains(&format!("admission policy flotilla-member-identity-{name}")), "{joined}");

    // Flotilla's identity, as the control plane holds it.
    let token_b64 = kubectl(Path::new(KUBECTL), &cp.kubeconfig, &["-n", "karmada-cluster", "get", "secret", &name, "-o", "jsonpath={.data.token}"]);
    let token = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(token_b64.trim()).unwrap()).unwrap();
    let server = kubectl(Path::new(KUBECTL), &member, &["config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    let as_flotilla = |args: &[&str], stdin: Option<&str>| {
        let mut cmd = Command::new(KUBECTL);
        cmd.args(["--kubeconfig", "/dev/null", "--server", &server, "--insecure-skip-tls-verify", "--token", &token]).args(args);
        cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(text) = stdin {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    let who = as_flotilla(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"], None);
    assert_eq!(who, (true, format!("system:serviceaccount:karmada-cluster:karmada-{name}")));

    // A token Secret for kube-system's default account: refused by the admission policy.
    let mint = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": format!("{name}-stolen"), "namespace": "kube-system", "annotations": {"kubernetes.io/service-account.name": "default"}}});
    let (ok, out) = as_flotilla(&["create", "-f", "-"], Some(&mint.to_string()));
    assert!(!ok, "created: {out}");
    assert!(out.contains("may not create or update service account token Secrets"), "{out}");
    // A TokenRequest for another account, and impersonation: refused by RBAC.
    let (ok, out) = as_flotilla(&["-n", "kube-system", "create", "token", "default"], None);
    assert!(!ok && out.contains("cannot create resource \"serviceaccounts/token\""), "{out}");
    let (ok, out) = as_flotilla(&["get", "namespaces", "--as=system:admin"], None);
    assert!(!ok && out.contains("cannot impersonate"), "{out}");
    // What propagation needs still works: an ordinary Secret.
    let plain = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": format!("{name}-plain"), "namespace": "karmada-cluster"}, "stringData": {"k": "v"}});
    let (ok, out) = as_flotilla(&["create", "-f", "-"], Some(&plain.to_string()));
    assert!(ok, "{out}");
    let (ok, out) = as_flotilla(&["-n", "karmada-cluster", "delete", "secret", &format!("{name}-plain")], None);
    assert!(ok, "{out}");
}
