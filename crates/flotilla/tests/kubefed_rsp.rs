//! KubeFed's ReplicaSchedulingPreference on the one engine, against `flotilla up --demo 2`:
//! the example RSP (9 replicas, min/max/weights over member1 and member2) is planned by KubeFed's
//! planner and written into the FederatedDeployment's placement and `/spec/replicas`
//! overrides under its own field manager, keeping the other overrides; the member Deployments
//! run exactly the plan; changing the RSP re-plans; minimums the total cannot meet are reported
//! on the RSP and the rest is still placed; `flotilla explain` prints the per-cluster result.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_api::federation::kubefed::scheduling::ReplicaSchedulingPreference;
use flotilla_controllers::kubefed_rsp::planner::{self, PlanInput};
use serde_json::{Value, json};
use support::{Flotilla, flotilla_cmd, get_json, kubectl, kubectl_bin, wait_cluster_ready, wait_for};

const NS: &str = "test-namespace";
const LONG: Duration = Duration::from_secs(180);

fn member(cp: &Flotilla, m: &str) -> PathBuf {
    cp.dir.path().join(format!("data/demo/{m}.kubeconfig"))
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/kubefed").join(name)
}

/// What KubeFed's planner makes of the RSP as it is now in the control plane, over both
/// members (rebalance: nothing running counts).
fn planned(kc: &Path) -> BTreeMap<String, i64> {
    let rsp: ReplicaSchedulingPreference = serde_json::from_value(get_json(kc, &["-n", NS, "get", "rsp", "test-deployment"]).unwrap()).unwrap();
    assert_eq!(rsp.spec.rebalance, Some(true), "the expected answer assumes rebalance");
    let prefs = rsp.spec.clusters.clone().unwrap_or_default();
    let clusters = ["member1".to_string(), "member2".to_string()];
    let plan = planner::plan(&PlanInput {
        total_replicas: i64::from(rsp.spec.total_replicas),
        preferences: &prefs,
        clusters: &clusters,
        current: &BTreeMap::new(),
        capacity: &BTreeMap::new(),
        rebalance: true,
        key: &format!("{NS}/test-deployment"),
    });
    plan.with_overflow()
}

/// Wait until each member's Deployment has `spec.replicas` as `want` says.
fn members_run(cp: &Flotilla, want: &BTreeMap<String, i64>) {
    for (m, n) in want {
        wait_for(&format!("{m}'s Deployment at {n} replicas"), LONG, || {
            let d = get_json(&member(cp, m), &["-n", NS, "get", "deployment", "test-deployment"])?;
            if d["spec"]["replicas"] == *n { Ok(()) } else { Err(d["spec"]["replicas"].to_string()) }
        });
    }
}

fn patch_rsp(kc: &Path, body: &Value) {
    let body = body.to_string();
    kubectl(&kubectl_bin(), kc, &["-n", NS, "patch", "rsp", "test-deployment", "--type", "merge", "-p", &body]);
}

#[test]
fn a_replica_scheduling_preference_splits_the_federated_deployment() {
    let cp = Flotilla::start_with(&["--demo", "2"]);
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        wait_cluster_ready(&kc, name, "True");
    }
    kubectl(&k, &kc, &["apply", "-f", example("federateddeployment.yaml").to_str().unwrap()]);
    kubectl(&k, &kc, &["apply", "-f", example("replicaschedulingpreference.yaml").to_str().unwrap()]);

    // 9 over weights 1:2 within [2, 6]: member1 3, member2 6 — the planner's answer, summing to 9.
    let want = planned(&kc);
    assert_eq!(want, BTreeMap::from([("member1".to_string(), 3), ("member2".to_string(), 6)]));
    assert_eq!(want.values().sum::<i64>(), 9);
    members_run(&cp, &want);

    // Written as KubeFed writes it, under the RSP's own field manager; member2 keeps its image
    // and annotation overrides, the template's replicas override for member1 is replaced.
    let fd = get_json(&kc, &["-n", NS, "get", "federateddeployment", "test-deployment", "--show-managed-fields"]).unwrap();
    assert_eq!(fd["spec"]["placement"]["clusters"], json!([{"name": "member1"}, {"name": "member2"}]));
    assert_eq!(fd["spec"]["overrides"][0], json!({"clusterName": "member1", "clusterOverrides": [{"path": "/spec/replicas", "value": 3}]}));
    let m2 = fd["spec"]["overrides"][1]["clusterOverrides"].as_array().unwrap();
    assert_eq!(fd["spec"]["overrides"][1]["clusterName"], "member2");
    assert!(m2.iter().any(|o| o["path"] == "/spec/template/spec/containers/0/image"), "{m2:?}");
    assert!(m2.iter().any(|o| o["path"] == "/spec/replicas" && o["value"] == 6), "{m2:?}");
    let managers: Vec<&str> = fd["metadata"]["managedFields"].as_array().unwrap().iter().filter_map(|m| m["manager"].as_str()).collect();
    let rsp_entry = fd["metadata"]["managedFields"].as_array().unwrap().iter().find(|m| m["manager"] == "kubefed-rsp-controller");
    let owned = rsp_entry.unwrap_or_else(|| panic!("no kubefed-rsp-controller in {managers:?}"))["fieldsV1"]["f:spec"].clone();
    assert!(owned.get("f:overrides").is_some() && owned["f:placement"].get("f:clusters").is_some(), "{owned}");
    let d2 = get_json(&member(&cp, "member2"), &["-n", NS, "get", "deployment", "test-deployment"]).unwrap();
    assert_eq!(d2["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.17.0-alpine");

    // `flotilla explain` prints the per-cluster result.
    let (ok, out) = flotilla_cmd(&["explain", "federateddeployment/test-deployment", "-n", NS, "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.contains("ReplicaSchedulingPreference test-namespace/test-deployment (totalReplicas 9) -> member1:3, member2:6"), "{out}");

    // Changing the RSP re-plans: 5 over weights 3:2 → member1 3, member2 2.
    patch_rsp(&kc, &json!({"spec": {"totalReplicas": 5, "clusters": {"member1": {"weight": 3}}}}));
    let want = planned(&kc);
    assert_eq!(want, BTreeMap::from([("member1".to_string(), 3), ("member2".to_string(), 2)]));
    members_run(&cp, &want);

    // Minimums beyond the total: reported on the RSP, the heavier cluster's minimum first, and
    // the 3 replicas still placed.
    patch_rsp(&kc, &json!({"spec": {"totalReplicas": 3}}));
    let want = planned(&kc);
    assert_eq!(want, BTreeMap::from([("member1".to_string(), 2), ("member2".to_string(), 1)]));
    members_run(&cp, &want);
    wait_for("a MinReplicasNotMet event on the RSP", LONG, || {
        let ev = get_json(&kc, &["-n", NS, "get", "events"])?;
        let found = ev["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["involvedObject"]["kind"] == "ReplicaSchedulingPreference" && e["reason"] == "MinReplicasNotMet" && e["type"] == "Warning");
        match found {
            Some(e) if e["message"].as_str().is_some_and(|m| m.contains("member2 got 1 of minReplicas 2")) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    // An RSP of a kind it cannot scale is reported and changes nothing else.
    support::apply_yaml(
        &kc,
        "apiVersion: scheduling.kubefed.io/v1alpha1\nkind: ReplicaSchedulingPreference\nmetadata: {name: other, namespace: test-namespace}\nspec: {targetKind: FederatedStatefulSet, totalReplicas: 4}\n",
    );
    wait_for("an UnsupportedTargetKind event", LONG, || {
        let ev = get_json(&kc, &["-n", NS, "get", "events"])?;
        let found = ev["items"].as_array().into_iter().flatten().any(|e| e["involvedObject"]["name"] == "other" && e["reason"] == "UnsupportedTargetKind");
        if found { Ok(()) } else { Err("none yet".into()) }
    });
    members_run(&cp, &want);
    drop(cp);
}

/// Candidates are the Ready clusters: a member that stops answering leaves the plan (member1
/// alone takes what its maximum allows), and the plan comes back when it answers again.
#[test]
fn the_plan_follows_cluster_readiness() {
    let cp = Flotilla::start_with(&[&["--demo", "2"], support::FAST_PROBES].concat());
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        wait_cluster_ready(&kc, name, "True");
    }
    kubectl(&k, &kc, &["apply", "-f", example("federateddeployment.yaml").to_str().unwrap()]);
    kubectl(&k, &kc, &["apply", "-f", example("replicaschedulingpreference.yaml").to_str().unwrap()]);
    let both = BTreeMap::from([("member1".to_string(), 3), ("member2".to_string(), 6)]);
    members_run(&cp, &both);

    support::sim_faults(&cp, "member2", r#"{"blackhole": true}"#);
    wait_cluster_ready(&kc, "member2", "False");
    // 9 over member1 alone, capped by its maxReplicas 6; member2's replicas override goes, its
    // image and annotation overrides stay.
    members_run(&cp, &BTreeMap::from([("member1".to_string(), 6)]));
    let fd = wait_for("placement without member2", LONG, || {
        let fd = get_json(&kc, &["-n", NS, "get", "federateddeployment", "test-deployment"])?;
        if fd["spec"]["placement"]["clusters"] == json!([{"name": "member1"}]) { Ok(fd) } else { Err(fd["spec"]["placement"].to_string()) }
    });
    let m2 = fd["spec"]["overrides"].as_array().unwrap().iter().find(|o| o["clusterName"] == "member2").cloned().unwrap_or_default();
    let paths: Vec<&str> = m2["clusterOverrides"].as_array().into_iter().flatten().filter_map(|o| o["path"].as_str()).collect();
    assert_eq!(paths, ["/spec/template/spec/containers/0/image", "/metadata/annotations", "/metadata/annotations/foo"], "{m2}");

    support::sim_faults(&cp, "member2", r#"{"blackhole": false}"#);
    wait_cluster_ready(&kc, "member2", "True");
    members_run(&cp, &both);
    drop(cp);
}
