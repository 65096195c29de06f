//! RBAC as users meet it, on Flotilla and on a real kube-apiserver side by side (a testenv
//! member with Flotilla's federation CRDs and Karmada's `karmada-view`/`karmada-edit` applied,
//! as a Karmada control plane has them):
//! - the bootstrap policy: a user bound to `view` is listed the same rules by
//!   `kubectl auth can-i --list` (the aggregated `view`, Karmada's kinds included);
//! - impersonation: an admin's `--as` acts as the user (refused what the user may not do,
//!   `auth whoami` names it), a non-admin's `--as=system:admin --as-group=system:masters` is
//!   refused, not dropped.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use support::{Flotilla, flotilla_cmd, kubectl, unique, wait_for};

const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
const KARMADA_ROLES: &str = include_str!("../../flotilla-api/data/karmada-rbac.json");
const FLOTILLA_ROLES: &str = include_str!("../../flotilla-api/data/flotilla-rbac.json");

/// kubectl's answer: stdout when it succeeds, `error: <stderr>` when it fails.
fn answer(out: std::process::Output) -> String {
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        format!("error: {}", String::from_utf8_lossy(&out.stderr).trim())
    }
}

/// kubectl against `kubeconfig`'s server with only a bearer token (no client certificate,
/// which a server would take first).
fn with_token(kubeconfig: &Path, dir: &Path, token: &str, args: &[&str]) -> String {
    let view = |path: &str| kubectl(Path::new(KUBECTL), kubeconfig, &["config", "view", "--raw", "--minify", "-o", &format!("jsonpath={{{path}}}")]);
    let ca: PathBuf = dir.join(format!("ca-{}.crt", unique("rbac")));
    std::fs::write(&ca, base64::engine::general_purpose::STANDARD.decode(view(".clusters[0].cluster.certificate-authority-data").trim()).unwrap()).unwrap();
    let out = Command::new(KUBECTL)
        .args(["--kubeconfig", "/dev/null", "--server", &view(".clusters[0].cluster.server"), "--certificate-authority"])
        .arg(&ca)
        .args(["--token", token])
        .args(args)
        .output()
        .unwrap();
    answer(out)
}

fn as_admin(kubeconfig: &Path, args: &[&str]) -> String {
    answer(Command::new(KUBECTL).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap())
}

/// What one server answers, with the namespace written `{ns}`.
fn scenario(kc: &Path, dir: &Path, ns: &str) -> Vec<String> {
    let k = |args: &[&str]| kubectl(Path::new(KUBECTL), kc, args);
    k(&["create", "namespace", ns]);
    k(&["-n", ns, "create", "secret", "generic", "s1", "--from-literal=a=b"]);
    k(&["-n", ns, "create", "serviceaccount", "viewer"]);
    let alice = format!("{ns}-alice");
    k(&["-n", ns, "create", "rolebinding", "viewers", "--clusterrole=view", &format!("--user={alice}"), &format!("--serviceaccount={ns}:viewer")]);
    let token = k(&["-n", ns, "create", "token", "viewer"]).trim().to_string();
    // Both servers' authorizers follow the binding through a cache: wait until it counts.
    wait_for("alice's binding to count", Duration::from_secs(60), || {
        let a = as_admin(kc, &["auth", "can-i", "list", "configmaps", "-n", ns, &format!("--as={alice}")]);
        (a == "yes").then_some(()).ok_or(a)
    });
    let mut answers = vec![
        as_admin(kc, &["auth", "can-i", "--list", "-n", ns, &format!("--as={alice}")]),
        as_admin(kc, &["-n", ns, "get", "secret", "s1", &format!("--as={ns}-bob")]),
        as_admin(kc, &["auth", "whoami", &format!("--as={ns}-bob"), "--as-group=devs", "-o", "jsonpath={.status.userInfo}"]),
        as_admin(kc, &["-n", ns, "get", "configmaps", &format!("--as={alice}"), "-o", "name"]),
        with_token(kc, dir, &token, &["get", "namespaces", "--as=system:admin", "--as-group=system:masters"]),
        with_token(kc, dir, &token, &["-n", ns, "get", "secret", "s1", "--as=someone"]),
        with_token(kc, dir, &token, &["-n", ns, "get", "secret", "s1"]),
        with_token(kc, dir, &token, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]),
    ];
    k(&["delete", "namespace", ns, "--wait=false"]);
    for a in &mut answers {
        *a = a.replace(ns, "{ns}");
    }
    answers
}

/// The member as a Karmada control plane is: the federation CRDs and Karmada's (and Flotilla's)
/// view/edit roles, aggregated into `view`.
fn prepare_member(kc: &Path, dir: &Path) {
    let (ok, crds) = flotilla_cmd(&["crds"]);
    assert!(ok, "{crds}");
    let file = dir.join("federation-crds.yaml");
    std::fs::write(&file, crds).unwrap();
    kubectl(Path::new(KUBECTL), kc, &["apply", "--server-side", "--force-conflicts", "-f", file.to_str().unwrap()]);
    for (name, text) in [("karmada-roles.json", KARMADA_ROLES), ("flotilla-roles.json", FLOTILLA_ROLES)] {
        let roles: serde_json::Value = serde_json::from_str(text).unwrap();
        let file = dir.join(name);
        std::fs::write(&file, serde_json::json!({"apiVersion": "v1", "kind": "List", "items": roles["items"]}).to_string()).unwrap();
        kubectl(Path::new(KUBECTL), kc, &["apply", "--server-side", "--force-conflicts", "-f", file.to_str().unwrap()]);
    }
}

#[test]
fn view_users_and_impersonation_behave_as_on_kube_apiserver() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("SKIPPED: {KUBECTL} not found");
        return;
    }
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member2").kubeconfig.clone();
    let cp = Flotilla::start();
    prepare_member(&member, cp.dir.path());
    // Both aggregate Karmada's roles into view.
    for kc in [&member, &cp.kubeconfig] {
        wait_for("view to aggregate karmada-view", Duration::from_secs(60), || {
            let rules = as_admin(kc, &["get", "clusterrole", "view", "-o", "jsonpath={.rules}"]);
            rules.contains("policy.karmada.io").then_some(()).ok_or(rules)
        });
    }
    let ns = unique("rbacpolicy");
    let real = scenario(&member, cp.dir.path(), &ns);
    let ours = scenario(&cp.kubeconfig, cp.dir.path(), &ns);
    // The scenario means something on the real server.
    assert!(real[0].contains("propagationpolicies.policy.karmada.io") && real[0].contains("configmaps"), "{}", real[0]);
    assert!(real[1].contains("Forbidden") && real[4].contains("Forbidden") && real[6].contains("Forbidden"), "{real:?}");
    assert!(real[2].contains("{ns}-bob") && real[2].contains("devs"), "{}", real[2]);
    for (i, (r, o)) in real.iter().zip(&ours).enumerate() {
        assert_eq!(o, r, "answer {i}: Flotilla (left), kube-apiserver (right)");
    }
    drop(cp);
}
