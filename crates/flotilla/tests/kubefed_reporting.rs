//! KubeFed's reporting on the one engine. Bad input, side by side with a well-formed federated
//! object that keeps propagating and updating (`flotilla up --demo 2`): a clusterName twice in
//! `spec.overrides` (every cluster `ApplyOverridesFailed`), a placement naming a cluster that is
//! not joined (ignored as KubeFed ignores it; a Warning `UnknownClusters` names it), an
//! override path that does not exist (`ApplyOverridesFailed` for that cluster only), an RSP
//! whose minimums exceed its total (Warning `MinReplicasNotMet`, the replicas still placed).
//! And a stopped real member (a private testenv member): the federated object's status reports
//! it `ClusterNotReady` and its KubeFedCluster `Offline=True ClusterNotReachable`; started
//! again, both are back to OK / `Ready=True`. And the KubeFedConfig's `clusterHealthCheck`
//! tuning the one probe below explicit flags.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, gone, kubectl, kubectl_bin, wait_cluster_ready, wait_for};

const LONG: Duration = Duration::from_secs(180);

fn member(cp: &Flotilla, m: &str) -> PathBuf {
    cp.dir.path().join(format!("data/demo/{m}.kubeconfig"))
}

/// A FederatedConfigMap in `ns` with `data: {k: value}`, its placement and overrides.
fn federated_configmap(ns: &str, name: &str, value: &str, placement: Value, overrides: Value) -> String {
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"data": {"k": value}}, "placement": placement, "overrides": overrides},
    });
    obj.to_string()
}

/// `status.clusters` and the Propagation condition of a federated object once the clusters are
/// `clusters` and the condition's status `propagated`, at the object's current generation.
fn status_of(kc: &Path, ns: &str, resource: &str, clusters: Value, propagated: &str) -> Value {
    wait_for(&format!("{resource} status {clusters} ({propagated})"), LONG, || {
        let o = get_json(kc, &["-n", ns, "get", resource])?;
        let s = &o["status"];
        let cond = s["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Propagation").cloned().unwrap_or_default();
        let current = s["observedGeneration"] == o["metadata"]["generation"];
        if current && s["clusters"] == clusters && cond["status"] == propagated { Ok(cond) } else { Err(s.to_string()) }
    })
}

/// The message of a Warning Event `reason` on the object `kind/name` in `ns`, once its message
/// contains `needle`.
fn warning(kc: &Path, ns: &str, kind: &str, name: &str, reason: &str, needle: &str) -> String {
    event(kc, ns, "Warning", reason, needle, |e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
}

/// The same for an Event of type `type_` on the KubeFedConfig `kubefed`.
fn kubefed_config_event(kc: &Path, type_: &str, reason: &str, needle: &str) -> String {
    event(kc, "kube-federation-system", type_, reason, needle, |e| e["involvedObject"]["kind"] == "KubeFedConfig" && e["involvedObject"]["name"] == "kubefed")
}

fn event(kc: &Path, ns: &str, type_: &str, reason: &str, needle: &str, on: impl Fn(&Value) -> bool) -> String {
    wait_for(&format!("{type_} {reason} saying {needle:?}"), LONG, || {
        let ev = get_json(kc, &["-n", ns, "get", "events"])?;
        let items = ev["items"].as_array().cloned().unwrap_or_default();
        let found = items.iter().find(|e| on(e) && e["reason"] == reason && e["type"] == type_ && e["message"].as_str().is_some_and(|m| m.contains(needle)));
        found.map(|e| e["message"].as_str().unwrap_or_default().to_string()).ok_or_else(|| {
            let seen: Vec<&str> = items.iter().filter(|e| e["reason"] == reason).filter_map(|e| e["message"].as_str()).collect();
            format!("seen: {seen:?}")
        })
    })
}

fn configmap_value(kc: &Path, ns: &str, name: &str) -> Result<String, String> {
    get_json(kc, &["-n", ns, "get", "configmap", name]).map(|cm| cm["data"]["k"].as_str().unwrap_or_default().to_string())
}

#[test]
fn bad_input_is_each_reported_and_nothing_else_stalls() {
    let cp = Flotilla::start_with(&[&["--demo", "2"], support::FAST_PROBES].concat());
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        wait_cluster_ready(&kc, name, "True");
    }
    let ns = "mixed";
    kubectl(&k, &kc, &["create", "namespace", ns]);
    support::federate_namespace(&kc, ns);
    let both = json!({"clusters": [{"name": "member1"}, {"name": "member2"}]});
    let (m1, m2) = (member(&cp, "member1"), member(&cp, "member2"));

    // The well-formed one, first in and propagated.
    apply_yaml(&kc, &federated_configmap(ns, "good", "v1", both.clone(), json!([])));
    status_of(&kc, ns, "federatedconfigmap/good", json!([{"name": "member1"}, {"name": "member2"}]), "True");

    // (a) member1 twice in overrides: the whole override set is invalid, so every placed
    // cluster fails and no member gets the object.
    let twice = json!([
        {"clusterName": "member1", "clusterOverrides": [{"path": "/data/k", "value": "a"}]},
        {"clusterName": "member1", "clusterOverrides": [{"path": "/data/k", "value": "b"}]}
    ]);
    apply_yaml(&kc, &federated_configmap(ns, "dup", "v", both.clone(), twice));
    // (b) a cluster that is not joined: ignored, the joined one still gets the object.
    apply_yaml(&kc, &federated_configmap(ns, "elsewhere", "v", json!({"clusters": [{"name": "nowhere"}, {"name": "member1"}]}), json!([])));
    // (c) a path that does not exist, for member2 only.
    apply_yaml(
        &kc,
        &federated_configmap(
            ns,
            "badpath",
            "v",
            both.clone(),
            json!([{"clusterName": "member2", "clusterOverrides": [{"path": "/data/missing/deeper", "value": "x"}]}]),
        ),
    );
    // (d) an RSP whose minimums (2 + 2) exceed its 3 replicas.
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedDeployment\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  template:\n    spec:\n      replicas: 1\n      selector: {{matchLabels: {{app: web}}}}\n      template:\n        metadata: {{labels: {{app: web}}}}\n        spec: {{containers: [{{name: web, image: nginx}}]}}\n  placement:\n    clusters: [{{name: member1}}, {{name: member2}}]\n---\napiVersion: scheduling.kubefed.io/v1alpha1\nkind: ReplicaSchedulingPreference\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  targetKind: FederatedDeployment\n  totalReplicas: 3\n  rebalance: true\n  clusters:\n    member1: {{minReplicas: 2, weight: 2}}\n    member2: {{minReplicas: 2, weight: 1}}\n"
        ),
    );

    // Each is reported with KubeFed's reason codes (and an Event naming the cause).
    let cond = status_of(
        &kc,
        ns,
        "federatedconfigmap/dup",
        json!([{"name": "member1", "status": "ApplyOverridesFailed"}, {"name": "member2", "status": "ApplyOverridesFailed"}]),
        "False",
    );
    assert_eq!(cond["reason"], "CheckClusters", "{cond}");
    warning(&kc, ns, "FederatedConfigMap", "dup", "ApplyOverridesFailed", "member1 appears more than once in spec.overrides");

    let cond = status_of(&kc, ns, "federatedconfigmap/elsewhere", json!([{"name": "member1"}]), "True");
    assert!(cond.get("reason").is_none_or(|r| r == ""), "{cond}");
    assert_eq!(wait_for("elsewhere in member1", LONG, || configmap_value(&m1, ns, "elsewhere")), "v");
    let msg = warning(&kc, ns, "FederatedConfigMap", "elsewhere", "UnknownClusters", "nowhere");
    assert!(!msg.contains("member1"), "{msg}");

    let cond = status_of(&kc, ns, "federatedconfigmap/badpath", json!([{"name": "member1"}, {"name": "member2", "status": "ApplyOverridesFailed"}]), "False");
    assert_eq!(cond["reason"], "CheckClusters", "{cond}");
    assert_eq!(wait_for("badpath in member1", LONG, || configmap_value(&m1, ns, "badpath")), "v");
    warning(&kc, ns, "FederatedConfigMap", "badpath", "ApplyOverridesFailed", "member2");

    warning(&kc, ns, "ReplicaSchedulingPreference", "web", "MinReplicasNotMet", "member2 got 1 of minReplicas 2");
    for (m, n) in [(&m1, 2), (&m2, 1)] {
        wait_for(&format!("web at {n} replicas in {}", m.display()), LONG, || {
            let d = get_json(m, &["-n", ns, "get", "deployment", "web"])?;
            if d["spec"]["replicas"] == n { Ok(()) } else { Err(d["spec"]["replicas"].to_string()) }
        });
    }

    // Nothing bad reached a member it should not have.
    for m in [&m1, &m2] {
        gone(m, &["-n", ns, "get", "configmap", "dup"]).unwrap();
    }
    gone(&m2, &["-n", ns, "get", "configmap", "elsewhere"]).unwrap();
    gone(&m2, &["-n", ns, "get", "configmap", "badpath"]).unwrap();

    // And the well-formed one still updates while the bad ones stay.
    apply_yaml(
        &kc,
        &federated_configmap(ns, "good", "v2", both, json!([{"clusterName": "member2", "clusterOverrides": [{"path": "/data/k", "value": "v2-on-2"}]}])),
    );
    assert_eq!(wait_for("good v2 in member1", LONG, || configmap_value(&m1, ns, "good").and_then(|v| if v == "v2" { Ok(v) } else { Err(v) })), "v2");
    wait_for("good's override in member2", LONG, || configmap_value(&m2, ns, "good").and_then(|v| if v == "v2-on-2" { Ok(v) } else { Err(v) }));
    status_of(&kc, ns, "federatedconfigmap/good", json!([{"name": "member1"}, {"name": "member2"}]), "True");
    // The bad ones are still reported as they were.
    status_of(
        &kc,
        ns,
        "federatedconfigmap/dup",
        json!([{"name": "member1", "status": "ApplyOverridesFailed"}, {"name": "member2", "status": "ApplyOverridesFailed"}]),
        "False",
    );

    // Fixing the duplicate lets it through.
    apply_yaml(
        &kc,
        &federated_configmap(
            ns,
            "dup",
            "v",
            json!({"clusters": [{"name": "member1"}, {"name": "member2"}]}),
            json!([{"clusterName": "member1", "clusterOverrides": [{"path": "/data/k", "value": "a"}]}]),
        ),
    );
    status_of(&kc, ns, "federatedconfigmap/dup", json!([{"name": "member1"}, {"name": "member2"}]), "True");
    assert_eq!(configmap_value(&m1, ns, "dup").unwrap(), "a");
    assert_eq!(configmap_value(&m2, ns, "dup").unwrap(), "v");
    drop(cp);
}

/// A real member (a private testenv member, so stopping it disturbs no other test) stopped:
/// the federated object reports it `ClusterNotReady` (Propagation False `CheckClusters`) and its
/// KubeFedCluster says `Offline=True ClusterNotReachable`; started again, status is back to OK
/// and the KubeFedCluster `Ready=True`.
#[test]
fn a_stopped_real_member_is_reported_with_kubefeds_reason() {
    if flotilla_testenv::TestEnv::connect().is_none() {
        return;
    }
    let mut env = flotilla_testenv::TestEnv::start_private(1, &[]);
    let member_kc = env.member("member1").kubeconfig.clone();
    let cp = Flotilla::start_with(support::FAST_PROBES);
    let kc = cp.kubeconfig.clone();
    let (ok, out) = flotilla_cmd(&["join", "edge1", "--kubeconfig", member_kc.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "join failed:\n{out}");
    wait_cluster_ready(&kc, "edge1", "True");
    kubectl(&kubectl_bin(), &kc, &["create", "namespace", "outage"]);
    support::federate_namespace(&kc, "outage");
    apply_yaml(&kc, &federated_configmap("outage", "cfg", "v", json!({"clusters": [{"name": "edge1"}]}), json!([])));
    status_of(&kc, "outage", "federatedconfigmap/cfg", json!([{"name": "edge1"}]), "True");
    assert_eq!(wait_for("cfg in the member", LONG, || configmap_value(&member_kc, "outage", "cfg")), "v");
    let kfc = |want: &dyn Fn(&[Value]) -> bool| {
        wait_for("the KubeFedCluster's conditions", LONG, || {
            let o = get_json(&kc, &["-n", "kube-federation-system", "get", "kubefedcluster", "edge1"])?;
            let conds = o["status"]["conditions"].as_array().cloned().unwrap_or_default();
            if want(&conds) { Ok(()) } else { Err(o["status"].to_string()) }
        })
    };
    kfc(&|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True" && c["reason"] == "ClusterReady"));

    env.lifecycle("stop", "member1");
    let cond = status_of(&kc, "outage", "federatedconfigmap/cfg", json!([{"name": "edge1", "status": "ClusterNotReady"}]), "False");
    assert_eq!(cond["reason"], "CheckClusters", "{cond}");
    kfc(&|c| {
        c.iter().any(|c| c["type"] == "Offline" && c["status"] == "True" && c["reason"] == "ClusterNotReachable") && !c.iter().any(|c| c["type"] == "Ready")
    });

    env.lifecycle("start", "member1");
    kfc(&|c| c.len() == 1 && c[0]["type"] == "Ready" && c[0]["status"] == "True");
    let cond = status_of(&kc, "outage", "federatedconfigmap/cfg", json!([{"name": "edge1"}]), "True");
    assert!(cond.get("reason").is_none_or(|r| r == ""), "{cond}");
    assert_eq!(configmap_value(&member_kc, "outage", "cfg").unwrap(), "v", "the member object survived the outage");
    drop(cp);
}

/// The KubeFedConfig's `spec.clusterHealthCheck` tunes the one probe below explicit flags: the
/// settings in force are announced on the KubeFedConfig (flag, then KubeFedConfig, then
/// default), follow an edit, and the probe still takes a member down and up under them.
#[test]
fn the_kubefed_config_tunes_the_probe_below_explicit_flags() {
    let cp = Flotilla::start_with(&["--demo", "2", "--cluster-probe-timeout", "2s"]);
    let kc = cp.kubeconfig.clone();
    let settings = |needle: &str| kubefed_config_event(&kc, "Normal", "ClusterHealthCheckSettings", needle);
    // The seeded KubeFedConfig states the default probe (10s, 5s, 4, 4 = 30s); the flag keeps 2s.
    settings("probe every 10s (KubeFedConfig), timeout 2s (flag), Ready withdrawn after 30s failing (KubeFedConfig), restored after 30s ready (KubeFedConfig)");
    kubectl(
        &kubectl_bin(),
        &kc,
        &[
            "-n",
            "kube-federation-system",
            "patch",
            "kubefedconfig",
            "kubefed",
            "--type",
            "merge",
            "-p",
            r#"{"spec": {"clusterHealthCheck": {"period": "500ms", "timeout": "1s", "failureThreshold": 3, "successThreshold": 2}}}"#,
        ],
    );
    settings(
        "probe every 500ms (KubeFedConfig), timeout 2s (flag), Ready withdrawn after 1s failing (KubeFedConfig), restored after 500ms ready (KubeFedConfig)",
    );
    wait_cluster_ready(&kc, "member2", "True");
    support::sim_faults(&cp, "member2", r#"{"blackhole": true}"#);
    wait_cluster_ready(&kc, "member2", "False");
    support::sim_faults(&cp, "member2", r#"{"blackhole": false}"#);
    wait_cluster_ready(&kc, "member2", "True");
    drop(cp);
}
