//! Cluster health against a real kube-apiserver of its own (a private testenv member, so
//! stopping it disturbs no other test), with short probe settings: the member's role read back
//! without wildcards; the member stopped → Ready=False and the unreachable/not-ready taint;
//! started again → Ready, taints gone, and the workload untouched (no replica churn); the
//! member rejecting the stored credential → a condition naming the cause.

mod support;

use std::time::Duration;

use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, has_condition, kubectl, kubectl_bin, wait_for};

const FAST: &[&str] = support::FAST_PROBES;

fn taint_keys(cluster: &serde_json::Value) -> Vec<String> {
    cluster["spec"]["taints"].as_array().into_iter().flatten().filter_map(|t| t["key"].as_str().map(str::to_string)).collect()
}

#[test]
fn member_outage_recovery_and_rejected_credential() {
    if flotilla_testenv::TestEnv::connect().is_none() {
        return;
    }
    let mut env = flotilla_testenv::TestEnv::start_private(1, &[]);
    let member_kc = env.member("member1").kubeconfig.clone();
    let cp = Flotilla::start_with(FAST);
    let kc = cp.kubeconfig.clone();
    let (ok, out) =
        flotilla_cmd(&["join", "edge1", "--kubeconfig", member_kc.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap(), "--zone", "z1"]);
    assert!(ok, "join failed:\n{out}");
    wait_for("edge1 Ready", Duration::from_secs(60), || {
        let c = get_json(&kc, &["get", "cluster", "edge1"])?;
        if has_condition(&c, "Ready", "True") && taint_keys(&c).is_empty() { Ok(()) } else { Err(c.to_string()) }
    });

    // The role join created, read back from the member: no wildcard anywhere.
    let role = get_json(&member_kc, &["get", "clusterrole", "karmada-controller-manager:karmada-edge1"]).unwrap();
    let text = role["rules"].to_string();
    assert!(!text.contains('*'), "wildcard in the member role: {text}");
    assert!(text.contains("deployments") && text.contains("configmaps"), "{text}");

    // Something running there to watch for churn.
    apply_yaml(
        &kc,
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: health
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: health
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.25
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: health
spec:
  resourceSelectors:
  - apiVersion: apps/v1
    kind: Deployment
    name: web
  placement:
    clusterAffinity:
      clusterNames: [edge1]
"#,
    );
    let before = wait_for("web in the member", Duration::from_secs(60), || get_json(&member_kc, &["-n", "health", "get", "deployment", "web"]));
    let rb_before = wait_for("web scheduled", Duration::from_secs(60), || {
        let rb = get_json(&kc, &["-n", "health", "get", "resourcebinding", "web-deployment"])?;
        if rb["spec"]["clusters"].is_array() { Ok(rb) } else { Err(rb.to_string()) }
    });

    // Outage: Ready=False with a reason, and a NoSchedule taint.
    env.lifecycle("stop", "member1");
    let down = wait_for("edge1 not Ready and tainted", Duration::from_secs(60), || {
        let c = get_json(&kc, &["get", "cluster", "edge1"])?;
        if has_condition(&c, "Ready", "False") && !taint_keys(&c).is_empty() { Ok(c) } else { Err(c.to_string()) }
    });
    let keys = taint_keys(&down);
    assert!(keys.iter().all(|k| k == "cluster.karmada.io/not-ready" || k == "cluster.karmada.io/unreachable"), "{keys:?}");
    assert!(down["spec"]["taints"].as_array().unwrap().iter().all(|t| t["effect"] == "NoSchedule"), "{}", down["spec"]);

    // Recovery: Ready, taints gone, nothing rescheduled or rewritten.
    env.lifecycle("start", "member1");
    wait_for("edge1 Ready again without taints", Duration::from_secs(90), || {
        let c = get_json(&kc, &["get", "cluster", "edge1"])?;
        if has_condition(&c, "Ready", "True") && taint_keys(&c).is_empty() { Ok(()) } else { Err(c.to_string()) }
    });
    std::thread::sleep(Duration::from_secs(3));
    let rb_after = get_json(&kc, &["-n", "health", "get", "resourcebinding", "web-deployment"]).unwrap();
    assert_eq!(rb_after["spec"]["clusters"], rb_before["spec"]["clusters"]);
    let after = get_json(&member_kc, &["-n", "health", "get", "deployment", "web"]).unwrap();
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"], "the member Deployment was recreated");
    assert_eq!(after["metadata"]["generation"], before["metadata"]["generation"], "the member Deployment spec was rewritten");
    assert_eq!(after["spec"]["replicas"], 3);

    // The member stops accepting Flotilla's credential: the condition says so.
    kubectl(&kubectl_bin(), &member_kc, &["-n", "karmada-cluster", "delete", "serviceaccount", "karmada-edge1"]);
    let rejected = wait_for("edge1 reporting its rejected credential", Duration::from_secs(90), || {
        let c = get_json(&kc, &["get", "cluster", "edge1"])?;
        let cond = c["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready").cloned().unwrap_or_default();
        if cond["status"] == "False" && cond["message"].as_str().is_some_and(|m| m.contains("rejected")) { Ok(cond) } else { Err(c["status"].to_string()) }
    });
    assert!(rejected["message"].as_str().unwrap().contains("flotilla join"), "{rejected}");
    drop(cp);
}
