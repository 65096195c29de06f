//! Karmada's cluster proxy (`clusters/{name}/proxy/{path...}`) and `flotilla get --clusters`
//! against `flotilla up --demo 2`: forwarding with the stored member credential, RBAC on
//! `clusters/proxy`, the error Statuses, discovery, and one view of member objects in which an
//! unreachable member is reported without hiding the others.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::{Flotilla, kubectls, wait_for};

const PROXY: &str = "/apis/cluster.karmada.io/v1alpha1/clusters";

fn kubectl_bin() -> PathBuf {
    kubectls().into_iter().map(|(_, p)| p).next_back().unwrap_or_else(|| PathBuf::from("kubectl"))
}

fn run(kc: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(kubectl_bin());
    cmd.arg("--kubeconfig").arg(kc).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run kubectl");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn ok(kc: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = run(kc, args, stdin);
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(kc: &Path, args: &[&str]) -> String {
    let out = run(kc, args, None);
    assert!(!out.status.success(), "kubectl {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn flotilla_get(kc: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla")).arg("get").args(args).arg("--kubeconfig").arg(kc).env("FLOTILLA_LOG", "warn").output().unwrap()
}

/// A kubeconfig for a bearer token (the admin kubeconfig's server and CA, no certificate).
fn token_kubeconfig(admin: &Path, dir: &Path, user: &str, token: &str) -> PathBuf {
    let server = ok(admin, &["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}"], None);
    let ca = ok(admin, &["config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"], None);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: flotilla\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {user}\n  context:\n    cluster: flotilla\n    user: {user}\ncurrent-context: {user}\n"
    );
    let path = dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_cluster_proxy_forwards_authorizes_and_feeds_flotilla_get() {
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), "alice-token,alice,u1\nbob-token,bob,u2\n").unwrap();
    let cp = Flotilla::start_with(&["--demo", "2", "--token-auth-file", tokens.path().to_str().unwrap(), "--cluster-proxy-timeout-seconds", "2"]);
    let kc = cp.kubeconfig.clone();
    let data = kc.parent().unwrap().to_path_buf();

    // An administrator reads a member's namespaces through the proxy (once the demo has joined).
    let namespaces = wait_for("member1 through the proxy", Duration::from_secs(60), || {
        let out = run(&kc, &["get", "--raw", &format!("{PROXY}/member1/proxy/api/v1/namespaces")], None);
        if out.status.success() { Ok(String::from_utf8_lossy(&out.stdout).into_owned()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    });
    let list: serde_json::Value = serde_json::from_str(&namespaces).unwrap();
    assert_eq!(list["kind"], "NamespaceList");
    assert!(list["items"].as_array().unwrap().iter().any(|n| n["metadata"]["name"] == "karmada-cluster"), "the member's own namespaces: {namespaces}");

    // Discovery lists the subresource as Karmada's aggregated API does.
    let disc: serde_json::Value = serde_json::from_str(&ok(&kc, &["get", "--raw", "/apis/cluster.karmada.io/v1alpha1"], None)).unwrap();
    let proxy = disc["resources"].as_array().unwrap().iter().find(|r| r["name"] == "clusters/proxy").expect("clusters/proxy in discovery").clone();
    assert_eq!(proxy["kind"], "ClusterProxyOptions");
    assert_eq!(proxy["verbs"], serde_json::json!(["create", "delete", "get", "patch", "update"]));

    // Unknown cluster: 404 naming it.
    let e = fails(&kc, &["get", "--raw", &format!("{PROXY}/nope/proxy/api/v1/namespaces")]);
    assert!(e.contains("NotFound") && e.contains("clusters.cluster.karmada.io \"nope\" not found"), "{e}");

    // A user without clusters/proxy is refused; one granted only clusters/proxy gets through.
    let alice = token_kubeconfig(&kc, cp.dir.path(), "alice", "alice-token");
    let e = fails(&alice, &["get", "--raw", &format!("{PROXY}/member1/proxy/api/v1/namespaces")]);
    assert!(e.contains("Forbidden") && e.contains("cannot get resource \"clusters/proxy\" in API group \"cluster.karmada.io\""), "{e}");
    // (Karmada ships this role as cluster-proxy-admin.)
    let rbac = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "cluster-proxy"},
         "rules": [{"apiGroups": ["cluster.karmada.io"], "resources": ["clusters/proxy"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bob-proxy"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-proxy"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}]}"#;
    ok(&kc, &["apply", "-f", "-"], Some(rbac));
    let bob = token_kubeconfig(&kc, cp.dir.path(), "bob", "bob-token");
    // Through Flotilla's check, the member judges bob (the proxy impersonates him there): it
    // grants him nothing yet, then reading namespaces.
    let default_ns = format!("{PROXY}/member1/proxy/api/v1/namespaces/default");
    wait_for("bob's binding", Duration::from_secs(10), || {
        let out = run(&bob, &["get", "--raw", &default_ns], None);
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        e.contains("User \"bob\" cannot get resource \"namespaces\"").then_some(()).ok_or(e)
    });
    let member1 = data.join("demo/member1.kubeconfig");
    let member_rbac = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "ns-reader"},
         "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "bob-reads-ns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-reader"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}]}"#;
    ok(&member1, &["apply", "-f", "-"], Some(member_rbac));
    wait_for("the member's grant to bob", Duration::from_secs(10), || {
        let out = run(&bob, &["get", "--raw", &default_ns], None);
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    });
    let e = fails(&bob, &["get", "clusters"]);
    assert!(e.contains("Forbidden"), "the grant covers the subresource only: {e}");

    // `flotilla get` shows a Deployment created directly in a member, with its CLUSTER.
    let deployment = |ns: &str, name: &str, replicas: u32| {
        format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}","namespace":"{ns}"}},"spec":{{"replicas":{replicas},"selector":{{"matchLabels":{{"app":"{name}"}}}},"template":{{"metadata":{{"labels":{{"app":"{name}"}}}},"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}}}}}"#
        )
    };
    ok(&member1, &["apply", "-f", "-"], Some(&deployment("default", "web", 2)));
    let member2 = data.join("demo/member2.kubeconfig");
    ok(&member2, &["apply", "-f", "-"], Some(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop"}}"#));
    ok(&member2, &["apply", "-f", "-"], Some(&deployment("shop", "cart", 1)));
    let out = flotilla_get(&kc, &["deploy", "-A", "--clusters", "all"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["CLUSTER", "NAMESPACE", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "{stdout}");
    assert!(lines.iter().any(|l| l[..3] == ["member1", "default", "web"]), "{stdout}");
    assert!(lines.iter().any(|l| l[..3] == ["member2", "shop", "cart"]), "{stdout}");
    let out = flotilla_get(&kc, &["deployment", "web", "--clusters", "member1", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["items"][0]["kind"], "Deployment");
    assert_eq!(list["items"][0]["metadata"]["annotations"]["resource.karmada.io/cached-from-cluster"], "member1");

    // A kubeconfig whose server is the proxy URL works as a member kubeconfig (Karmada's usage),
    // and a watch streams through.
    let admin_text = std::fs::read_to_string(&kc).unwrap();
    let server = ok(&kc, &["config", "view", "-o", "jsonpath={.clusters[0].cluster.server}"], None);
    let proxied = cp.dir.path().join("member1-proxied.kubeconfig");
    std::fs::write(&proxied, admin_text.replace(&format!("server: {server}"), &format!("server: {server}{PROXY}/member1/proxy"))).unwrap();
    let out = ok(&proxied, &["get", "deployments", "-A"], None);
    assert!(out.lines().any(|l| l.starts_with("default") && l.contains("web")), "{out}");
    let events = ok(&kc, &["get", "--raw", &format!("{PROXY}/member1/proxy/apis/apps/v1/namespaces/default/deployments?watch=true&timeoutSeconds=1")], None);
    assert!(events.contains("\"type\":\"ADDED\"") && events.contains("\"name\":\"web\""), "{events}");

    // member2 stops answering: its error goes to stderr, member1's rows still print.
    let admin = data.join("demo/fleet-admin.kubeconfig");
    ok(&admin, &["create", "--raw", "/sim/v1/members/member2/faults", "-f", "-"], Some(r#"{"blackhole": true}"#));
    let e = fails(&kc, &["get", "--raw", &format!("{PROXY}/member2/proxy/api")]);
    assert!(e.contains("ServiceUnavailable") && e.contains("cluster member2 at https://") && e.contains("did not answer within 2s"), "{e}");
    let out = flotilla_get(&kc, &["deploy", "-A", "--clusters", "all"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(stdout.lines().any(|l| l.starts_with("member1 ") && l.contains("web")), "{stdout}");
    assert!(!stdout.contains("member2"), "{stdout}");
    assert!(stderr.contains("error: cluster member2: cluster member2 at") && stderr.contains("did not answer within 2s"), "{stderr}");
    // A client-side limit shorter than the proxy's reports the member the same way.
    let out = flotilla_get(&kc, &["deploy", "-A", "--clusters", "all", "--request-timeout", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: cluster member2: no answer within 1s"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("web"));
    ok(&admin, &["create", "--raw", "/sim/v1/members/member2/faults", "-f", "-"], Some(r#"{"blackhole": false}"#));

    // Clusters the proxy cannot serve answer with a Status that says why.
    let cluster = |name: &str, mode: &str, endpoint: &str, secret: &str| {
        format!(
            r#"{{"apiVersion":"cluster.karmada.io/v1alpha1","kind":"Cluster","metadata":{{"name":"{name}"}},"spec":{{"syncMode":"{mode}","apiEndpoint":"{endpoint}","secretRef":{{"namespace":"karmada-cluster","name":"{secret}"}}}}}}"#
        )
    };
    ok(&kc, &["apply", "-f", "-"], Some(&cluster("pulled", "Pull", "https://127.0.0.1:1", "pulled")));
    let e = fails(&kc, &["get", "--raw", &format!("{PROXY}/pulled/proxy/api")]);
    assert!(e.contains("ServiceUnavailable") && e.contains("Pull mode and its agent has no tunnel open"), "{e}");
    ok(&kc, &["apply", "-f", "-"], Some(&cluster("nosecret", "Push", "https://127.0.0.1:1", "absent")));
    let e = fails(&kc, &["get", "--raw", &format!("{PROXY}/nosecret/proxy/api")]);
    assert!(e.contains("ServiceUnavailable") && e.contains("credential secret karmada-cluster/absent"), "{e}");
    ok(
        &kc,
        &["apply", "-f", "-"],
        Some(r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"ghost","namespace":"karmada-cluster"},"stringData":{"token":"abc"}}"#),
    );
    ok(&kc, &["apply", "-f", "-"], Some(&cluster("ghost", "Push", "https://127.0.0.1:1", "ghost")));
    let e = fails(&kc, &["get", "--raw", &format!("{PROXY}/ghost/proxy/api")]);
    assert!(e.contains("ServiceUnavailable") && e.contains("error trying to reach cluster ghost at https://127.0.0.1:1"), "{e}");
    drop(cp);
}

/// Runs its closure when dropped, even after a failed assertion.
struct Cleanup(Box<dyn Fn()>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Security review: a user granted only `clusters/proxy` for a member listed every Secret there
/// (Flotilla's own identity made the request). `flotilla join` now gives the cluster proxy an
/// identity of its own that may only impersonate, so the member's RBAC decides for the caller.
/// Needs a real member (the shared testenv); skipped without one.
#[test]
fn the_cluster_proxy_acts_as_the_caller_in_the_member() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member_kc = env.members[0].kubeconfig.clone();
    let name = support::unique("pximp");
    let group = format!("{name}-devs");
    let tokens = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tokens.path(), format!("dave-token,dave,u3,\"{group}\"\nerin-token,erin,u4\n")).unwrap();
    let cp = Flotilla::start_with(&["--token-auth-file", tokens.path().to_str().unwrap()]);
    let kc = cp.kubeconfig.clone();
    // In the member: reading namespaces for dave's group, nothing for erin.
    let member_rbac = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
        {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {{"name": "{name}-ns-reader"}},
         "rules": [{{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}}]}},
        {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {{"name": "{name}-devs-ns-reader"}},
         "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "{name}-ns-reader"}},
         "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "{group}"}}]}}]}}"#
    );
    // Whatever happens, leave the shared member as it was.
    let _cleanup = Cleanup(Box::new({
        let (name, kc, member_kc, member_rbac) = (name.clone(), kc.clone(), member_kc.clone(), member_rbac.clone());
        move || {
            let _ = Command::new(env!("CARGO_BIN_EXE_flotilla"))
                .args(["unjoin", &name, "--wait-seconds", "30", "--control-plane-kubeconfig"])
                .arg(&kc)
                .arg("--kubeconfig")
                .arg(&member_kc)
                .output();
            let _ = run(&member_kc, &["delete", "-f", "-", "--ignore-not-found"], Some(&member_rbac));
        }
    }));
    let join = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["join", &name, "--token-wait-seconds", "3", "--kubeconfig"])
        .arg(&member_kc)
        .arg("--control-plane-kubeconfig")
        .arg(&kc)
        .output()
        .unwrap();
    assert!(join.status.success(), "{}", String::from_utf8_lossy(&join.stderr));
    ok(&member_kc, &["apply", "-f", "-"], Some(&member_rbac));
    // The join made the impersonator: an identity that may only impersonate.
    let impersonator = format!("karmada-impersonator-{name}");
    let rules = ok(&member_kc, &["get", "clusterrole", &impersonator, "-o", "jsonpath={.rules}"], None);
    assert_eq!(rules, r#"[{"apiGroups":[""],"resources":["users","groups","serviceaccounts"],"verbs":["impersonate"]}]"#);
    let reference = ok(&kc, &["get", "cluster", &name, "-o", "jsonpath={.spec.impersonatorSecretRef.name}"], None);
    assert_eq!(reference, format!("{name}-impersonator"));

    // On the control plane: clusters/proxy of this member only, for both callers.
    let rbac = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
        {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {{"name": "{name}-proxy"}},
         "rules": [{{"apiGroups": ["cluster.karmada.io"], "resources": ["clusters/proxy"], "resourceNames": ["{name}"], "verbs": ["*"]}}]}},
        {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {{"name": "{name}-proxy"}},
         "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "{name}-proxy"}},
         "subjects": [{{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}},
                      {{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "erin"}}]}}]}}"#
    );
    ok(&kc, &["apply", "-f", "-"], Some(&rbac));

    let namespaces = format!("{PROXY}/{name}/proxy/api/v1/namespaces");
    let secrets = format!("{PROXY}/{name}/proxy/api/v1/namespaces/karmada-cluster/secrets");
    let dave = token_kubeconfig(&kc, cp.dir.path(), "dave", "dave-token");
    let erin = token_kubeconfig(&kc, cp.dir.path(), "erin", "erin-token");
    // dave's group may list namespaces in the member, and only that.
    let listed = wait_for("dave through the impersonator", Duration::from_secs(20), || {
        let out = run(&dave, &["get", "--raw", &namespaces], None);
        if out.status.success() { Ok(String::from_utf8_lossy(&out.stdout).into_owned()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    });
    assert!(listed.contains("\"kind\":\"NamespaceList\""), "{listed}");
    let e = fails(&dave, &["get", "--raw", &secrets]);
    assert!(e.contains("User \"dave\" cannot list resource \"secrets\""), "the member refused dave the secrets (its own token among them): {e}");
    let e = fails(&erin, &["get", "--raw", &namespaces]);
    assert!(e.contains("User \"erin\" cannot list resource \"namespaces\""), "the member judged erin: {e}");
    // `_cleanup` runs before `cp` stops (unjoin needs the control plane).
}
