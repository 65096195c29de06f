//! `flotilla up` as a process: restart keeps every object and the certificates, the data
//! directory is private, SIGTERM stops it cleanly, and certificate rotation works.

mod support;

use std::os::unix::fs::PermissionsExt;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use support::Flotilla;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_objects_and_certificates() {
    let f = Flotilla::start();
    let data = f.dir.path().join("data");
    assert_eq!(mode(&data), 0o700, "the data directory is private");
    for key in ["pki/ca.key", "pki/apiserver.key", "pki/admin.key", "admin.kubeconfig"] {
        assert_eq!(mode(&data.join(key)), 0o600, "{key}");
    }
    let ca_before = std::fs::read(data.join("pki/ca.crt")).unwrap();
    let serving_before = std::fs::read(data.join("pki/apiserver.crt")).unwrap();
    let client = f.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "keep"}, "data": {"k": "v"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let dir = f.stop();

    let f = Flotilla::start_in(dir, &[]);
    assert_eq!(std::fs::read(data_of(&f).join("pki/ca.crt")).unwrap(), ca_before, "the CA is reused");
    assert_eq!(std::fs::read(data_of(&f).join("pki/apiserver.crt")).unwrap(), serving_before, "the serving certificate is reused");
    let cms: Api<ConfigMap> = Api::namespaced(f.client().await, "default");
    let got = cms.get("keep").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.data.unwrap()["k"], "v");

    // Rotation: new serving and admin certificates from the same CA; the restarted server
    // serves them and the rewritten kubeconfig works.
    let dir = f.stop();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["certs", "rotate", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = Flotilla::start_in(dir, &[]);
    let data = data_of(&f);
    assert_eq!(std::fs::read(data.join("pki/ca.crt")).unwrap(), ca_before);
    assert_ne!(std::fs::read(data.join("pki/apiserver.crt")).unwrap(), serving_before, "rotation issues a new serving certificate");
    let cms: Api<ConfigMap> = Api::namespaced(f.client().await, "default");
    assert!(cms.get_opt("keep").await.unwrap().is_some());
}

fn data_of(f: &Flotilla) -> std::path::PathBuf {
    f.dir.path().join("data")
}

#[test]
fn sigterm_exits_cleanly() {
    let f = Flotilla::start();
    // Stop sends SIGTERM and waits; a clean exit releases the store so it can be inspected.
    let dir = f.stop();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["store", "inspect", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("keys"));
}
