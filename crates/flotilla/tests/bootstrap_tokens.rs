//! Bootstrap tokens end to end on `flotilla up`, as kubeadm and Karmada's pull registration use
//! them: `flotilla token create` stores one (`kube-system/bootstrap-token-<id>`) and prints it; the token authenticates as `system:bootstrap:<id>` in
//! `system:bootstrappers`, Karmada's group and its cluster's group, and may do nothing else;
//! anyone may read `kube-public/cluster-info`, whose kubeconfig the bootstrap signer signs with
//! each token (a detached JWS the token verifies); an expired token is refused and the token
//! cleaner deletes it; `token delete` revokes one and its signature goes.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_api::bootstrap_token::{self as bt, Token};
use serde_json::{Value, json};
use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, gone, kubectl_bin, wait_for};

const LONG: Duration = Duration::from_secs(60);

/// The admin kubeconfig's CA, base64 as kubeconfigs hold it.
fn ca_data(admin: &Path) -> String {
    let text = std::fs::read_to_string(admin).unwrap();
    let line = text.lines().find(|l| l.trim_start().starts_with("certificate-authority-data:")).expect("a CA in the admin kubeconfig");
    line.split_once(':').unwrap().1.trim().to_string()
}

/// A kubeconfig for `server` with the control plane's CA and a bearer token.
fn kubeconfig(dir: &Path, name: &str, server: &str, ca: &str, token: &str) -> PathBuf {
    let user = format!("users:\n- name: u\n  user:\n    token: {token}\n");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n{user}"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// GET `path` with no credential at all (kube-rs: kubectl would prompt for one).
fn anonymous_get(server: &str, ca_der: &[u8], path: &str) -> Result<Value, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut config = kube::Config::new(server.parse().map_err(|e| format!("{e}"))?);
        config.root_cert = Some(vec![ca_der.to_vec()]);
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        let request = http::Request::get(path).body(Vec::new()).map_err(|e| e.to_string())?;
        let text = client.request_text(request).await.map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    })
}

fn run(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(kubectl_bin()).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn bootstrap_tokens_authenticate_sign_cluster_info_and_expire() {
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let kc_s = kc.to_str().unwrap();
    let dir = cp.dir.path().to_path_buf();
    let server = format!("https://{}", cp.server.trim_start_matches("https://"));
    let ca = ca_data(&kc);

    let (ok, out) =
        flotilla_cmd(&["token", "create", "--cluster-name", "edge-1", "--ttl", "1h", "--description", "edge site 1", "--control-plane-kubeconfig", kc_s]);
    assert!(ok, "{out}");
    let token = Token::parse(out.trim()).unwrap_or_else(|| panic!("the token, alone: {out}"));
    use base64::Engine;
    let ca_der = {
        let pem = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(&ca).unwrap()).unwrap();
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD.decode(b64).unwrap()
    };

    // The token's identity, and nothing more.
    let with_token = kubeconfig(&dir, "token.kubeconfig", &server, &ca, &token.expose());
    let (ok, out) = run(&with_token, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{out}");
    let review: Value = serde_json::from_str(&out).unwrap();
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], format!("system:bootstrap:{}", token.id));
    assert_eq!(
        user["groups"],
        json!([
            "system:bootstrappers",
            "system:bootstrappers:karmada:default-cluster-token",
            "system:bootstrappers:flotilla:cluster:edge-1",
            "system:authenticated"
        ])
    );
    let (ok, out) = run(&with_token, &["-n", "kube-system", "get", "secrets"]);
    assert!(!ok && out.contains("Forbidden"), "a bootstrap token reads no Secrets: {out}");

    // cluster-info: readable with no credential, signed with the token.
    let info = wait_for("cluster-info signed by the token", LONG, || {
        let cm = anonymous_get(&server, &ca_der, "/api/v1/namespaces/kube-public/configmaps/cluster-info")?;
        if cm["data"].get(format!("jws-kubeconfig-{}", token.id)).is_some() { Ok(cm) } else { Err(cm["data"].to_string()) }
    });
    let embedded = info["data"]["kubeconfig"].as_str().unwrap();
    assert!(embedded.contains(&format!("server: {server}")) && embedded.contains(&ca) && !embedded.contains("token"), "{embedded}");
    let signature = info["data"][format!("jws-kubeconfig-{}", token.id)].as_str().unwrap();
    assert!(bt::signature_is_valid(signature, embedded, &token), "the signature verifies with the token");
    let refused = anonymous_get(&server, &ca_der, "/api/v1/namespaces/kube-public/configmaps").unwrap_err();
    assert!(refused.contains("401"), "anonymous reads cluster-info only: {refused}");

    // Listed, then revoked: refused, and its signature goes.
    let (ok, out) = flotilla_cmd(&["token", "list", "--control-plane-kubeconfig", kc_s]);
    assert!(
        ok && out.lines().any(|l| l.starts_with(&token.id) && l.contains("authentication,signing") && l.contains("edge-1") && l.ends_with("edge site 1")),
        "{out}"
    );
    let (ok, out) = flotilla_cmd(&["token", "delete", &token.id, "--control-plane-kubeconfig", kc_s]);
    assert!(ok, "{out}");
    let (ok, out) = run(&with_token, &["auth", "whoami"]);
    assert!(!ok && out.contains("Unauthorized"), "a deleted token authenticates no one: {out}");
    wait_for("the signature removed", LONG, || {
        let cm = get_json(&kc, &["-n", "kube-public", "get", "configmap", "cluster-info"])?;
        if cm["data"].get(format!("jws-kubeconfig-{}", token.id)).is_none() { Ok(()) } else { Err(cm["data"].to_string()) }
    });

    // An expired token is refused, and the token cleaner deletes it.
    let old = Token::parse("zzzzzz.0123456789abcdef").unwrap();
    let options = bt::Options { expiration: Some("2020-01-01T00:00:00Z".parse().unwrap()), authentication: true, ..Default::default() };
    apply_yaml(&kc, &bt::secret(&old, &options).to_string());
    let expired = kubeconfig(&dir, "expired.kubeconfig", &server, &ca, &old.expose());
    let (ok, out) = run(&expired, &["auth", "whoami"]);
    assert!(!ok && out.contains("Unauthorized"), "an expired token authenticates no one: {out}");
    wait_for("the expired token deleted", LONG, || gone(&kc, &["-n", "kube-system", "get", "secret", "bootstrap-token-zzzzzz"]));

    let (ok, out) = flotilla_cmd(&["token", "create", "--cluster-name", "Not_A_Name", "--control-plane-kubeconfig", kc_s]);
    assert!(!ok && out.contains("DNS label"), "{out}");
    drop(cp);
}
