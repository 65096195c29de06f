//! A pull agent's certificate end to end on `flotilla up`, with real kubectl: a bootstrap token
//! bound to cluster `edge-1` creates a CertificateSigningRequest for `system:karmada:agent:edge-1`;
//! the agent CSR approver approves it after its SubjectAccessReview and creates the agent's RBAC
//! (Karmada's names); csrsigning issues the certificate from the control plane's CA; the
//! certificate authenticates as the agent, who reaches its own execution space and Cluster only.
//! The token may not ask for another cluster's agent, nor anyone for a system:masters client
//! certificate; Karmada's rbac-generator request is denied with the reason; `kubectl
//! certificate approve|deny` work on any request.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use flotilla_api::bootstrap_token::Token;
use serde_json::Value;
use support::{Flotilla, flotilla_cmd, get_json, kubectl_stdin, kubectl_try, wait_for};

const LONG: Duration = Duration::from_secs(60);
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn run(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    kubectl_try(kubeconfig, args)
}

/// `kubectl create -f -` of `yaml`.
fn create(kubeconfig: &Path, yaml: &str) -> (bool, String) {
    kubectl_stdin(kubeconfig, &["create", "-f", "-"], yaml)
}

/// The admin kubeconfig's server and CA (base64).
fn server_and_ca(admin: &Path) -> (String, String) {
    let text = std::fs::read_to_string(admin).unwrap();
    let field = |k: &str| text.lines().find_map(|l| l.trim_start().strip_prefix(k)).map(|v| v.trim().to_string()).unwrap();
    (field("server:"), field("certificate-authority-data:"))
}

fn kubeconfig(dir: &Path, name: &str, admin: &Path, user: &str) -> PathBuf {
    let (server, ca) = server_and_ca(admin);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\nusers:\n- name: u\n  user:\n{user}"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A key and a PEM certificate request for `cn` in `org`.
fn request(cn: &str, org: &str) -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.distinguished_name.push(rcgen::DnType::OrganizationName, org);
    let pem = p.serialize_request(&key).unwrap().pem().unwrap();
    (key, pem)
}

fn csr_yaml(name: &str, pem: &str, signer: &str) -> String {
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\nspec:\n  request: {}\n  signerName: {signer}\n  usages: [digital signature, client auth]\n",
        B64.encode(pem)
    )
}

fn token(admin: &Path, cluster: Option<&str>) -> Token {
    let mut args = vec!["token", "create", "--ttl", "1h", "--control-plane-kubeconfig", admin.to_str().unwrap()];
    if let Some(c) = cluster {
        args.extend(["--cluster-name", c]);
    }
    let (ok, out) = flotilla_cmd(&args);
    assert!(ok, "{out}");
    Token::parse(out.trim()).unwrap_or_else(|| panic!("the token, alone: {out}"))
}

#[test]
fn a_bootstrap_token_obtains_its_clusters_agent_certificate_and_nothing_else() {
    let cp = Flotilla::start();
    let admin = cp.kubeconfig.clone();
    let dir = cp.dir.path().to_path_buf();
    let edge = token(&admin, Some("edge-1"));
    let bootstrap = kubeconfig(&dir, "bootstrap.kubeconfig", &admin, &format!("    token: {}\n", edge.expose()));

    // The token registers edge-1: approved after review, RBAC created, signed.
    let (key, pem) = request("system:karmada:agent:edge-1", "system:karmada:agents");
    let mine = format!("bootstrap-{}-edge-1", edge.id);
    let (ok, out) = create(&bootstrap, &csr_yaml("agent-edge-1", &pem, "kubernetes.io/kube-apiserver-client"));
    assert!(!ok && out.contains(&format!("names its certificate requests bootstrap-{}-", edge.id)), "{out}");
    let (ok, out) = create(&bootstrap, &csr_yaml(&mine, &pem, "kubernetes.io/kube-apiserver-client"));
    assert!(ok, "{out}");
    let issued: Value = wait_for("the agent certificate issued", LONG, || {
        let csr = get_json(&bootstrap, &["get", "csr", &mine])?;
        if csr["status"]["certificate"].is_string() { Ok(csr) } else { Err(csr["status"].to_string()) }
    });
    assert_eq!(issued["spec"]["username"], format!("system:bootstrap:{}", edge.id), "the requester is the token");
    let approved = &issued["status"]["conditions"][0];
    assert_eq!((approved["type"].as_str(), approved["reason"].as_str()), (Some("Approved"), Some("AutoApproved")), "{issued}");
    for (kind, ns, name) in [
        ("clusterrole", "", "system:karmada:edge-1:agent"),
        ("clusterrolebinding", "", "system:karmada:edge-1:agent"),
        ("role", "karmada-cluster", "system:karmada:edge-1:agent-secret"),
        ("rolebinding", "karmada-es-edge-1", "system:karmada:edge-1:agent-work"),
    ] {
        let mut args = vec!["get", kind, name];
        if !ns.is_empty() {
            args.extend(["-n", ns]);
        }
        get_json(&admin, &args).unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    }

    // The certificate is the agent, and the agent reaches its own cluster's objects only.
    let cert = String::from_utf8(B64.decode(issued["status"]["certificate"].as_str().unwrap()).unwrap()).unwrap();
    let agent = kubeconfig(
        &dir,
        "agent.kubeconfig",
        &admin,
        &format!("    client-certificate-data: {}\n    client-key-data: {}\n", B64.encode(&cert), B64.encode(key.serialize_pem())),
    );
    let (ok, out) = run(&agent, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{out}");
    let who: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(who["status"]["userInfo"]["username"], "system:karmada:agent:edge-1");
    assert!(who["status"]["userInfo"]["groups"].as_array().unwrap().iter().any(|g| g == "system:karmada:agents"), "{who}");
    let (ok, out) = run(&agent, &["get", "works.work.karmada.io", "-n", "karmada-es-edge-1"]);
    assert!(ok, "its own execution space: {out}");
    let (ok, out) = run(&agent, &["get", "clusters.cluster.karmada.io", "edge-1"]);
    assert!(!ok && out.contains("NotFound"), "its own Cluster (not created yet), allowed: {out}");
    for args in [
        &["get", "clusters.cluster.karmada.io", "edge-2"][..],
        &["get", "works.work.karmada.io", "-n", "karmada-es-edge-2"],
        &["get", "secrets", "-n", "karmada-es-edge-2"],
        &["get", "events", "-n", "karmada-es-edge-2"],
        &["get", "secrets", "-n", "karmada-cluster"],
        &["get", "secrets", "other", "-n", "karmada-cluster"],
        &["get", "secrets", "-n", "karmada-es-edge-1"],
    ] {
        let (ok, out) = run(&agent, args);
        assert!(!ok && out.contains("Forbidden"), "{args:?}: {out}");
    }

    // The token asks for nothing else: not another cluster's agent, not system:masters.
    let (_, other) = request("system:karmada:agent:edge-2", "system:karmada:agents");
    let (ok, out) = create(&bootstrap, &csr_yaml(&format!("bootstrap-{}-edge-2", edge.id), &other, "kubernetes.io/kube-apiserver-client"));
    assert!(!ok && out.contains("Forbidden") && out.contains("bound to cluster \"edge-1\"") && out.contains("system:karmada:agent:edge-1"), "{out}");
    let (_, masters) = request("evil", "system:masters");
    let (ok, out) = create(&admin, &csr_yaml("masters", &masters, "kubernetes.io/kube-apiserver-client"));
    assert!(!ok && out.contains("use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"), "{out}");

    // Karmada's rbac-generator request is denied, with the reason.
    let open = token(&admin, None);
    let unbound = kubeconfig(&dir, "unbound.kubeconfig", &admin, &format!("    token: {}\n", open.expose()));
    let (_, generator) = request("system:karmada:agent:rbac-generator", "system:karmada:agents");
    let generator_csr = format!("bootstrap-{}-rbac-generator", open.id);
    let (ok, out) = create(&unbound, &csr_yaml(&generator_csr, &generator, "kubernetes.io/kube-apiserver-client"));
    assert!(ok, "{out}");
    let denied = wait_for("the rbac-generator request denied", LONG, || {
        let csr = get_json(&admin, &["get", "csr", &generator_csr])?;
        let c = &csr["status"]["conditions"][0];
        if c["type"] == "Denied" { Ok(c.clone()) } else { Err(csr["status"].to_string()) }
    });
    assert!(denied["message"].as_str().unwrap().contains("karmada#7147"), "{denied}");
    assert!(get_json(&admin, &["get", "csr", &generator_csr]).unwrap()["status"]["certificate"].is_null());

    // kubectl certificate approve and deny, on requests no Flotilla controller handles.
    let (_, plain) = request("someone", "some-group");
    for name in ["approve-me", "deny-me", "not-by-a-token"] {
        let (ok, out) = create(&admin, &csr_yaml(name, &plain, "example.com/signer"));
        assert!(ok, "{out}");
    }
    let (ok, out) = run(&admin, &["certificate", "approve", "approve-me"]);
    assert!(ok, "{out}");
    let (ok, out) = run(&admin, &["certificate", "deny", "deny-me"]);
    assert!(ok, "{out}");
    let kinds = |name: &str| -> Vec<String> {
        let csr = get_json(&admin, &["get", "csr", name]).unwrap();
        csr["status"]["conditions"].as_array().unwrap().iter().map(|c| format!("{}/{}", c["type"].as_str().unwrap(), c["reason"].as_str().unwrap())).collect()
    };
    assert_eq!(kinds("approve-me"), ["Approved/KubectlApprove"]);
    assert_eq!(kinds("deny-me"), ["Denied/KubectlDeny"]);
    let (ok, out) = run(&bootstrap, &["certificate", "approve", "not-by-a-token"]);
    assert!(!ok && out.contains("Forbidden"), "a bootstrap token approves nothing: {out}");
    // It reads the requests it made, and no others: not the list, not another's by name.
    for args in [&["get", "csr"][..], &["get", "csr", "approve-me"], &["get", "csr", &generator_csr], &["get", "csr", "--watch", "--request-timeout=1s"]] {
        let (ok, out) = run(&bootstrap, args);
        assert!(!ok && out.contains("Forbidden"), "{args:?}: {out}");
    }
    let (ok, out) = run(&bootstrap, &["get", "csr", &mine, "-o", "name"]);
    assert!(ok, "its own: {out}");
    drop(cp);
}

#[test]
fn register_discovers_the_control_plane_with_a_pinned_ca_and_writes_the_agent_kubeconfig() {
    let cp = Flotilla::start();
    let admin = cp.kubeconfig.clone();
    let dir = cp.dir.path().to_path_buf();
    let (ok, out) =
        flotilla_cmd(&["token", "create", "--cluster-name", "edge-7", "--print-register-command", "--control-plane-kubeconfig", admin.to_str().unwrap()]);
    assert!(ok, "{out}");
    let command = out.lines().find(|l| l.starts_with("flotilla register ")).unwrap_or_else(|| panic!("the register command: {out}"));
    let args: Vec<String> = command.split_whitespace().skip(1).map(String::from).collect();
    assert!(command.contains("--discovery-token-ca-cert-hash sha256:") && command.ends_with("--cluster-name edge-7"), "{command}");
    let with = |replace: &[(&str, &str)], extra: &[&str]| -> (bool, String) {
        let mut a: Vec<String> = args.clone();
        for (flag, value) in replace {
            let i = a.iter().position(|x| x == flag).unwrap();
            a[i + 1] = value.to_string();
        }
        a.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        flotilla_cmd(&refs)
    };

    // The printed command, as is, registers the cluster.
    let kubeconfig = dir.join("edge-7-agent.kubeconfig");
    let (ok, out) = with(&[], &["--out", kubeconfig.to_str().unwrap()]);
    assert!(ok && out.contains("registered cluster edge-7"), "{out}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777, 0o600, "the agent's key is private");
    let (ok, out) = run(&kubeconfig, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(ok && out.trim() == "system:karmada:agent:edge-7", "{out}");
    let (ok, out) = run(&kubeconfig, &["get", "works.work.karmada.io", "-n", "karmada-es-edge-7"]);
    assert!(ok, "{out}");

    // Discovery refuses a CA that is not pinned, an unpinned run, and a token it does not know.
    let (ok, out) = with(&[("--discovery-token-ca-cert-hash", "sha256:0000000000000000000000000000000000000000000000000000000000000000")], &[]);
    assert!(!ok && out.contains("is not trusted") && out.contains("its public key pin sha256:"), "{out}");
    let unpinned: Vec<&str> = {
        let i = args.iter().position(|x| x == "--discovery-token-ca-cert-hash").unwrap();
        args.iter().enumerate().filter(|(j, _)| *j != i && *j != i + 1).map(|(_, s)| s.as_str()).collect()
    };
    let (ok, out) = flotilla_cmd(&unpinned);
    assert!(!ok && out.contains("--discovery-token-ca-cert-hash"), "{out}");
    let (ok, out) = with(&[("--token", "zzzzzz.0123456789abcdef")], &["--discovery-timeout", "2s"]);
    assert!(!ok && out.contains("token id \"zzzzzz\" is invalid"), "{out}");
    // The token registers only the cluster it was made for.
    let (ok, out) = with(&[("--cluster-name", "edge-8")], &["--out", dir.join("edge-8.kubeconfig").to_str().unwrap()]);
    assert!(!ok && out.contains("bound to cluster \"edge-7\""), "{out}");
    drop(cp);
}
