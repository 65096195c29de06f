//! The shared testenv: three real members answer through kube-rs; kubectl works against them.

use flotilla_testenv::TestEnv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_answer() {
    let Some(env) = TestEnv::connect() else { return };
    assert!(env.members.len() >= 3, "the test command starts three members");
    for m in &env.members {
        let client = m.client().await;
        let v = client.apiserver_version().await.unwrap();
        assert_eq!(v.major, "1", "{}", m.name);
        let out = std::process::Command::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33")
            .arg("--kubeconfig")
            .arg(&m.kubeconfig)
            .args(["get", "ns", "default", "-o", "name"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "namespace/default", "{}", m.name);
    }
}
