//! Taint-based failover with graceful eviction, on simulated members (`flotilla up --demo 2`)
//! with the `Failover` gate and NoExecute eviction turned on (both off by default, as in
//! Karmada v1.16): member1 stops and gets a NoExecute taint; the binding moves its replicas
//! to member2 with a graceful eviction task; member1's copy is kept while member2's is not
//! healthy, and removed only once it is (and member1 is back to be cleaned); its ConfigMap,
//! propagated with `propagateDeps`, follows.
//!
//! The gate-off case and application failover are scenarios (`tests/scenarios/
//! failover_gate_off_taint_evicts_nothing.yaml`, `application_failover_suppressed_deletion.yaml`),
//! which show the same outcomes in-process; these tests keep what needs the real binary.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::{Flotilla, apply_yaml, get_json, has_condition, kubectl_bin, wait_for};

const LONG: Duration = Duration::from_secs(120);

fn sim(cp: &Flotilla, path: &str, body: &str) {
    use std::io::Write;
    let admin = cp.dir.path().join("data/demo/fleet-admin.kubeconfig");
    let mut child = std::process::Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(&admin)
        .args(["create", "--raw", path, "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
}

fn member(cp: &Flotilla, m: &str) -> PathBuf {
    cp.dir.path().join(format!("data/demo/{m}.kubeconfig"))
}

fn binding(kc: &std::path::Path) -> Result<serde_json::Value, String> {
    get_json(kc, &["-n", "shop", "get", "resourcebinding", "web-deployment"])
}

fn clusters(rb: &serde_json::Value) -> Vec<(String, i64)> {
    rb["spec"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["name"].as_str().unwrap_or("").to_string(), c["replicas"].as_i64().unwrap_or(0)))
        .collect()
}

fn old_work(kc: &std::path::Path) -> Option<serde_json::Value> {
    let works = get_json(kc, &["-n", "karmada-es-member1", "get", "works"]).ok()?;
    works["items"].as_array()?.iter().find(|w| w["metadata"]["annotations"]["resourcebinding.karmada.io/name"] == "web-deployment").cloned()
}

/// Taint-based eviction on (off by default, as in Karmada v1.16).
const FAILOVER: &[&str] = &["--feature-gates", "Failover=true", "--enable-no-execute-taint-eviction"];

/// `flotilla up --demo 2` with fast probes and `flags`, and the shop's Deployment (4 replicas,
/// Divided 1:1 over both members, `policy_extra` added to the policy's spec) running 2 + 2.
fn started(flags: &[&str], policy_extra: &str) -> Flotilla {
    let mut args = vec![
        "--demo",
        "2",
        "--cluster-status-update-frequency",
        "500ms",
        "--cluster-probe-timeout",
        "1s",
        "--cluster-failure-threshold",
        "1s",
        "--cluster-success-threshold",
        "1s",
        "--unschedulable-retry",
        "1s",
    ];
    args.extend_from_slice(flags);
    let cp = Flotilla::start_with(&args);
    let kc = cp.kubeconfig.clone();
    for name in ["member1", "member2"] {
        wait_for(&format!("{name} Ready"), LONG, || {
            let c = get_json(&kc, &["get", "cluster", name])?;
            if has_condition(&c, "Ready", "True") { Ok(()) } else { Err(c["status"].to_string()) }
        });
    }
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 4
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        envFrom:
        - configMapRef:
            name: web-config
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: shop
data:
  mode: demo
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: shop
spec:
{policy_extra}  resourceSelectors:
  - apiVersion: apps/v1
    kind: Deployment
    name: web
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
"#
        ),
    );
    wait_for("2 + 2 ready in the members", LONG, || {
        for m in ["member1", "member2"] {
            let d = get_json(&member(&cp, m), &["-n", "shop", "get", "deployment", "web"])?;
            if d["status"]["readyReplicas"] != 2 {
                return Err(format!("{m}: {}", d["status"]));
            }
        }
        Ok(())
    });
    cp
}

/// Wait until the member no longer has the object.
fn wait_gone(cp: &Flotilla, m: &str, kind: &str, name: &str) {
    wait_for(&format!("{kind} {name} removed from {m}"), LONG, || match get_json(&member(cp, m), &["-n", "shop", "get", kind, name]) {
        Err(e) if e.contains("NotFound") => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err("still there".into()),
    });
}

/// member1 stops answering (its fault knob), and the control plane sees it not Ready.
fn member1_down(cp: &Flotilla) {
    sim(cp, "/sim/v1/members/member1/faults", r#"{"blackhole": true}"#);
    wait_for("member1 not Ready", LONG, || {
        let c = get_json(&cp.kubeconfig, &["get", "cluster", "member1"])?;
        if has_condition(&c, "Ready", "False") { Ok(()) } else { Err(c["status"].to_string()) }
    });
}

/// Add a NoExecute taint to the cluster, as a ClusterTaintPolicy or an operator would.
fn taint_no_execute(kc: &std::path::Path, cluster: &str) {
    let c = get_json(kc, &["get", "cluster", cluster]).unwrap();
    let mut taints = c["spec"]["taints"].as_array().cloned().unwrap_or_default();
    taints.push(serde_json::json!({"key": "example.com/outage", "effect": "NoExecute"}));
    let patch = serde_json::json!({"metadata": {"resourceVersion": c["metadata"]["resourceVersion"]}, "spec": {"taints": taints}}).to_string();
    support::kubectl(&kubectl_bin(), kc, &["patch", "cluster", cluster, "--type", "merge", "-p", &patch]);
}

#[test]
fn a_tainted_member_is_evicted_gracefully() {
    let cp = started(FAILOVER, "  propagateDeps: true\n");
    let kc = cp.kubeconfig.clone();

    // member2 cannot run new pods for now, so a replacement there is not healthy yet.
    sim(&cp, "/sim/v1/members/member2/nodes/fail", "{}");
    // member1 goes away, and is tainted NoExecute (as a ClusterTaintPolicy or an operator would).
    member1_down(&cp);
    taint_no_execute(&kc, "member1");

    // Evicted: all replicas go to member2, the task remembers member1.
    let rb = wait_for("the binding failed over to member2", LONG, || {
        let rb = binding(&kc)?;
        let tasks = rb["spec"]["gracefulEvictionTasks"].as_array().cloned().unwrap_or_default();
        if clusters(&rb) == [("member2".to_string(), 4)] && tasks.len() == 1 && tasks[0]["creationTimestamp"].is_string() {
            Ok(rb)
        } else {
            Err(rb["spec"].to_string())
        }
    });
    let task = &rb["spec"]["gracefulEvictionTasks"][0];
    assert_eq!(task["fromCluster"], "member1");
    assert_eq!(task["reason"], "TaintUntolerated");
    assert_eq!(task["producer"], "TaintManager");
    assert_eq!(task["purgeMode"], "Gracefully");
    assert_eq!(task["replicas"], 2);
    // While member2's copy is not healthy, member1's Work stays (the old copy is not deleted).
    for _ in 0..6 {
        let rb = binding(&kc).unwrap();
        assert_eq!(rb["spec"]["gracefulEvictionTasks"].as_array().map(Vec::len), Some(1), "the task ended with no healthy replacement: {}", rb["spec"]);
        let work = old_work(&kc).expect("member1's Work is kept during the eviction");
        assert!(work["metadata"]["deletionTimestamp"].is_null(), "member1's Work deleted early: {work}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // member2 can run pods again: its 4 replicas become healthy, the task ends, and only then
    // is member1's Work deleted.
    sim(&cp, "/sim/v1/members/member2/nodes/recover", "{}");
    wait_for("the eviction task ended", LONG, || {
        let rb = binding(&kc)?;
        if rb["spec"]["gracefulEvictionTasks"].as_array().is_none_or(Vec::is_empty) { Ok(()) } else { Err(rb["spec"].to_string()) }
    });
    let d = get_json(&member(&cp, "member2"), &["-n", "shop", "get", "deployment", "web"]).unwrap();
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(d["status"]["availableReplicas"], 4, "the task ended before member2 was healthy: {}", d["status"]);
    // Karmada's eviction Event, on the binding and on the template.
    let events = get_json(&kc, &["-n", "shop", "get", "events"]).unwrap();
    for (kind, name) in [("ResourceBinding", "web-deployment"), ("Deployment", "web")] {
        let reasons: Vec<&str> = events["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
            .filter_map(|e| e["reason"].as_str())
            .collect();
        assert!(reasons.contains(&"EvictWorkloadFromClusterSucceed"), "{kind} {name}: {reasons:?}");
    }

    // member1 back: its old copy is cleaned up; member2 keeps all 4 (no rebalance, as Karmada).
    sim(&cp, "/sim/v1/members/member1/faults", r#"{"blackhole": false}"#);
    wait_for("member1's Work gone", LONG, || match old_work(&kc) {
        None => Ok(()),
        Some(w) => Err(w["metadata"].to_string()),
    });
    wait_gone(&cp, "member1", "deployment", "web");
    assert_eq!(clusters(&binding(&kc).unwrap()), [("member2".to_string(), 4)]);
    // Its ConfigMap (propagateDeps) followed: only member2 has it now.
    wait_gone(&cp, "member1", "configmap", "web-config");
    assert!(get_json(&member(&cp, "member2"), &["-n", "shop", "get", "configmap", "web-config"]).is_ok());
    drop(cp);
}

/// `failover.cluster.purgeMode: Directly`: the old copy goes first, and the new one is written
/// only once it has — never two at once, even while the old cluster cannot be reached.
#[test]
fn a_directly_purged_eviction_removes_the_old_copy_first() {
    let cp = started(FAILOVER, "  failover:\n    cluster:\n      purgeMode: Directly\n");
    let kc = cp.kubeconfig.clone();
    member1_down(&cp);
    taint_no_execute(&kc, "member1");
    let rb = wait_for("the binding evicted from member1", LONG, || {
        let rb = binding(&kc)?;
        if clusters(&rb) == [("member2".to_string(), 4)] { Ok(rb) } else { Err(rb["spec"].to_string()) }
    });
    let tasks = rb["spec"]["gracefulEvictionTasks"].as_array().cloned().unwrap_or_default();
    assert!(tasks.iter().all(|t| t["purgeMode"] == "Directly"), "{tasks:?}");
    // member1's copy cannot be deleted while it is unreachable, so member2 is not given more.
    for _ in 0..6 {
        let d = get_json(&member(&cp, "member2"), &["-n", "shop", "get", "deployment", "web"]).unwrap();
        assert_eq!(d["spec"]["replicas"], 2, "member2 scaled up while member1's copy may still run");
        std::thread::sleep(Duration::from_millis(500));
    }
    // member1 back: its copy goes, then member2 runs all 4.
    sim(&cp, "/sim/v1/members/member1/faults", r#"{"blackhole": false}"#);
    wait_for("member2 running all 4", LONG, || {
        let d = get_json(&member(&cp, "member2"), &["-n", "shop", "get", "deployment", "web"])?;
        if d["spec"]["replicas"] == 4 { Ok(()) } else { Err(d["spec"].to_string()) }
    });
    assert!(
        get_json(&member(&cp, "member1"), &["-n", "shop", "get", "deployment", "web"]).is_err_and(|e| e.contains("NotFound")),
        "member1 still runs web while member2 has been given all replicas"
    );
    drop(cp);
}
