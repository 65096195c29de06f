//! TokenRequest tokens (`kubectl create token`) on Flotilla and on a real kube-apiserver: a JWT
//! with kube-apiserver's claims, that authenticates as the service account
//! (`kubectl --token … auth whoami`), is refused (401) for another audience, once its account is
//! deleted (also after the account is made again: another uid) and once the object it is bound
//! to is deleted. Flotilla serves the key that verifies it at `/openid/v1/jwks`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::Value;
use support::{Flotilla, kubectl, unique, wait_for};

const KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";

/// A kubeconfig for `kubeconfig`'s server and CA carrying only a bearer token (no client
/// certificate, which a server would take first).
struct TokenAccess {
    server: String,
    ca: PathBuf,
}

impl TokenAccess {
    fn new(kubeconfig: &Path, dir: &Path) -> TokenAccess {
        let view = |path: &str| kubectl(Path::new(KUBECTL), kubeconfig, &["config", "view", "--raw", "--minify", "-o", &format!("jsonpath={{{path}}}")]);
        let ca = dir.join(format!("ca-{}.crt", std::process::id()));
        std::fs::write(&ca, base64::engine::general_purpose::STANDARD.decode(view(".clusters[0].cluster.certificate-authority-data").trim()).unwrap()).unwrap();
        TokenAccess { server: view(".clusters[0].cluster.server"), ca }
    }

    /// `kubectl auth whoami` with `token`: the userInfo (the token's id and its account's and
    /// bound object's uids as placeholders), or kubectl's error.
    fn whoami(&self, token: &str) -> Result<String, String> {
        let out = Command::new(KUBECTL)
            .args(["--kubeconfig", "/dev/null", "--server", &self.server, "--certificate-authority"])
            .arg(&self.ca)
            .args(["--token", token, "auth", "whoami", "-o", "jsonpath={.status.userInfo}"])
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let c = claims(token);
        let mut info = String::from_utf8_lossy(&out.stdout).into_owned();
        for (v, placeholder) in
            [(&c["jti"], "<jti>"), (&c["kubernetes.io"]["serviceaccount"]["uid"], "<uid>"), (&c["kubernetes.io"]["secret"]["uid"], "<secret-uid>")]
        {
            if let Some(v) = v.as_str() {
                info = info.replace(v, placeholder);
            }
        }
        Ok(info)
    }
}

fn claims(token: &str) -> Value {
    let parts: Vec<&str> = token.trim().split('.').collect();
    assert_eq!(parts.len(), 3, "a JWT: {token}");
    serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap()
}

/// What one server answers, in order; tokens' claims with their per-server values removed.
fn scenario(kc: &Path, access: &TokenAccess, ns: &str) -> Vec<String> {
    let k = |args: &[&str]| kubectl(Path::new(KUBECTL), kc, args);
    k(&["create", "namespace", ns]);
    k(&["-n", ns, "create", "serviceaccount", "bot"]);
    k(&["-n", ns, "create", "secret", "generic", "binder", "--from-literal=a=b"]);
    let token = k(&["-n", ns, "create", "token", "bot", "--duration=1h"]).trim().to_string();
    let other_audience = k(&["-n", ns, "create", "token", "bot", "--audience=vault"]).trim().to_string();
    let bound = k(&["-n", ns, "create", "token", "bot", "--bound-object-kind=Secret", "--bound-object-name=binder"]).trim().to_string();
    let mut c = claims(&token);
    let sa_uid = k(&["-n", ns, "get", "serviceaccount", "bot", "-o", "jsonpath={.metadata.uid}"]);
    let secret_uid = k(&["-n", ns, "get", "secret", "binder", "-o", "jsonpath={.metadata.uid}"]);
    assert_eq!(c["kubernetes.io"]["serviceaccount"]["uid"], sa_uid.as_str(), "{c}");
    assert_eq!(claims(&bound)["kubernetes.io"]["secret"]["uid"], secret_uid.as_str());
    assert_eq!(c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(), 3600, "{c}");
    assert_eq!(c["nbf"], c["iat"]);
    for k in ["exp", "iat", "nbf", "jti"] {
        assert!(!c[k].is_null(), "{k} in {c}");
        c.as_object_mut().unwrap().remove(k);
    }
    c["kubernetes.io"]["serviceaccount"]["uid"] = "<uid>".into();
    let mut answers =
        vec![c.to_string(), format!("{:?}", access.whoami(&token)), format!("{:?}", access.whoami(&bound)), format!("{:?}", access.whoami(&other_audience))];
    // Deleting the bound object revokes its token (kube-apiserver's cache may lag a moment).
    k(&["-n", ns, "delete", "secret", "binder"]);
    answers.push(wait_for("the bound token refused", Duration::from_secs(60), || access.whoami(&bound).err().ok_or_else(|| "still accepted".to_string())));
    // Deleting the account revokes its tokens; an account made again under the name does not
    // inherit them.
    k(&["-n", ns, "delete", "serviceaccount", "bot"]);
    answers.push(wait_for("the token refused", Duration::from_secs(60), || access.whoami(&token).err().ok_or_else(|| "still accepted".to_string())));
    k(&["-n", ns, "create", "serviceaccount", "bot"]);
    std::thread::sleep(Duration::from_secs(2));
    answers.push(format!("{:?}", access.whoami(&token)));
    let fresh = k(&["-n", ns, "create", "token", "bot"]);
    answers.push(format!("{:?}", wait_for("the new account's token accepted", Duration::from_secs(60), || access.whoami(fresh.trim()))));
    k(&["delete", "namespace", ns, "--wait=false"]);
    answers.into_iter().map(|a| a.replace(ns, "{ns}")).collect()
}

#[test]
fn create_token_gives_a_jwt_that_authenticates_as_the_service_account_until_revoked() {
    if !Path::new(KUBECTL).is_file() {
        eprintln!("SKIPPED: {KUBECTL} not found");
        return;
    }
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member3").kubeconfig.clone();
    let cp = Flotilla::start();
    let ns = unique("satoken");
    let mut answers = Vec::new();
    for kc in [&member, &cp.kubeconfig] {
        let access = TokenAccess::new(kc, cp.dir.path());
        answers.push(scenario(kc, &access, &ns));
    }
    let (real, ours) = (&answers[0], &answers[1]);
    // The scenario means something on the real server.
    let user = "system:serviceaccount:{ns}:bot";
    assert!(
        real[1].contains(user)
            && real[1].contains("system:serviceaccounts:{ns}")
            && real[1].contains("JTI=<jti>")
            && real[1].contains("<uid>")
            && real[2].contains(user),
        "{real:?}"
    );
    for refused in [3, 4, 5, 6] {
        assert!(real[refused].contains("Unauthorized"), "answer {refused}: {}", real[refused]);
    }
    assert!(real[7].contains(user), "{real:?}");
    for (i, (r, o)) in real.iter().zip(ours).enumerate() {
        assert_eq!(o, r, "answer {i}: Flotilla (left), kube-apiserver (right)");
    }

    // The key set names the key the token was signed with; the discovery document names the
    // issuer the tokens carry.
    let k = |args: &[&str]| kubectl(Path::new(KUBECTL), &cp.kubeconfig, args);
    k(&["create", "namespace", &format!("{ns}-k")]);
    k(&["-n", &format!("{ns}-k"), "create", "serviceaccount", "bot"]);
    let token = k(&["-n", &format!("{ns}-k"), "create", "token", "bot"]);
    let header: Value = serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    let jwks: Value = serde_json::from_str(&k(&["get", "--raw", "/openid/v1/jwks"])).unwrap();
    assert_eq!(header["alg"], "ES256");
    assert_eq!(jwks["keys"][0]["kid"], header["kid"], "{jwks}");
    let discovery: Value = serde_json::from_str(&k(&["get", "--raw", "/.well-known/openid-configuration"])).unwrap();
    assert_eq!(discovery["issuer"], claims(&token)["iss"]);
    assert!(discovery["jwks_uri"].as_str().unwrap().ends_with("/openid/v1/jwks"), "{discovery}");
    drop(cp);
}
