//! KubeFed's sync path on the one engine, against `flotilla up --demo 2`: the documented
//! FederatedDeployment (examples/kubefed) reaches both simulated members with each one's
//! overrides through exactly one binding and one Work per cluster with deterministic names;
//! status.clusters and the Propagation condition report it; a bad override fails only its
//! cluster; shrinking the placement deletes the member object; deleting the federated object
//! deletes member objects, except under `kubefed.io/orphan: "true"`.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_api::federation::karmada::names::work_name;
use serde_json::{Value, json};
use support::{Flotilla, apply_yaml, get_json, gone, has_condition, kubectl, kubectl_bin, sim_faults, wait_cluster_ready as cluster_ready, wait_for};

const NS: &str = "test-namespace";
const LONG: Duration = Duration::from_secs(180);

fn member(cp: &Flotilla, m: &str) -> PathBuf {
    cp.dir.path().join(format!("data/demo/{m}.kubeconfig"))
}

fn patch(kc: &Path, args: &[&str], body: &Value) {
    let body = body.to_string();
    let mut all = args.to_vec();
    all.extend(["--type", "merge", "-p", &body]);
    kubectl(&kubectl_bin(), kc, &all);
}

/// `status.clusters` and the Propagation condition once they say `want` for `generation`.
fn status_says(kc: &Path, generation: i64, clusters: Value, propagated: bool) -> Value {
    wait_for(&format!("status {clusters} at generation {generation}"), LONG, || {
        let fd = get_json(kc, &["-n", NS, "get", "federateddeployment", "test-deployment"])?;
        let s = &fd["status"];
        let cond = s["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Propagation").cloned().unwrap_or_default();
        let want_status = if propagated { "True" } else { "False" };
        if s["observedGeneration"] == generation && s["clusters"] == clusters && cond["status"] == want_status { Ok(fd) } else { Err(s.to_string()) }
    })
}

/// The Works of the binding `test-deployment-federateddeployment`, as (namespace, name).
fn works(kc: &Path) -> Vec<(String, String)> {
    let list = get_json(kc, &["get", "works", "-A"]).unwrap();
    let mut out: Vec<(String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["metadata"]["annotations"]["resourcebinding.karmada.io/name"] == "test-deployment-federateddeployment")
        .map(|w| (w["metadata"]["namespace"].as_str().unwrap().to_string(), w["metadata"]["name"].as_str().unwrap().to_string()))
        .collect();
    out.sort();
    out
}

#[test]
fn the_documented_federated_deployment_propagates_with_its_overrides() {
    let cp = Flotilla::start_with(&["--demo", "2"]);
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        cluster_ready(&kc, name, "True");
    }
    let example = support::manifest_dir().join("../../examples/kubefed/federateddeployment.yaml");
    kubectl(&k, &kc, &["apply", "-f", example.to_str().unwrap()]);

    // Each member gets its own rendering: member1 5 replicas of the template's image, member2
    // the template's 3 replicas of another image with the annotation added then partly removed.
    let d1 = wait_for("member1's Deployment with 5 replicas", LONG, || {
        let d = get_json(&member(&cp, "member1"), &["-n", NS, "get", "deployment", "test-deployment"])?;
        if d["spec"]["replicas"] == 5 { Ok(d) } else { Err(d["spec"].to_string()) }
    });
    assert_eq!(d1["spec"]["template"]["spec"]["containers"][0]["image"], "nginx");
    assert_eq!(d1["metadata"]["labels"]["kubefed.io/managed"], "true");
    assert_eq!(d1["metadata"]["labels"]["app"], "nginx");
    assert!(d1["metadata"]["annotations"].get("team").is_none(), "{}", d1["metadata"]);
    let d2 = wait_for("member2's Deployment with the other image", LONG, || {
        let d = get_json(&member(&cp, "member2"), &["-n", NS, "get", "deployment", "test-deployment"])?;
        if d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.17.0-alpine" { Ok(d) } else { Err(d["spec"].to_string()) }
    });
    assert_eq!(d2["spec"]["replicas"], 3);
    assert_eq!(d2["metadata"]["annotations"]["team"], "edge");
    assert!(d2["metadata"]["annotations"].get("foo").is_none(), "{}", d2["metadata"]);
    assert_eq!(d2["metadata"]["labels"]["kubefed.io/managed"], "true");

    // Exactly one binding, owned by the federated object, pointing at it; one Work per cluster,
    // named as Karmada names a template's Works, apart from a plain Deployment's of that name.
    let fd = get_json(&kc, &["-n", NS, "get", "federateddeployment", "test-deployment"]).unwrap();
    let rbs = get_json(&kc, &["-n", NS, "get", "resourcebindings"]).unwrap();
    // (The FederatedNamespace has its own.)
    let rbs: Vec<&Value> = rbs["items"].as_array().unwrap().iter().filter(|b| b["spec"]["resource"]["kind"] == "FederatedDeployment").collect();
    assert_eq!(rbs.len(), 1, "{rbs:?}");
    let rb = &rbs[0];
    assert_eq!(rb["metadata"]["name"], "test-deployment-federateddeployment");
    assert_eq!(rb["spec"]["resource"]["kind"], "FederatedDeployment");
    assert_eq!(rb["spec"]["resource"]["apiVersion"], "types.kubefed.io/v1beta1");
    assert_eq!(rb["spec"]["replicas"], 3);
    assert_eq!(rb["metadata"]["ownerReferences"][0]["uid"], fd["metadata"]["uid"]);
    assert_eq!(rb["spec"]["placement"]["clusterAffinity"]["clusterNames"], json!(["member2", "member1"]));
    let wn = work_name("FederatedDeployment", "test-deployment", Some(NS));
    assert_ne!(wn, work_name("Deployment", "test-deployment", Some(NS)));
    assert_eq!(works(&kc), vec![("karmada-es-member1".to_string(), wn.clone()), ("karmada-es-member2".to_string(), wn.clone())]);

    // Status: both clusters OK, Propagation True, the generation observed; Events as KubeFed's.
    let generation = fd["metadata"]["generation"].as_i64().unwrap();
    let fd = status_says(&kc, generation, json!([{"name": "member1"}, {"name": "member2"}]), true);
    let cond = &fd["status"]["conditions"][0];
    assert!(cond.get("reason").is_none() && cond["lastTransitionTime"].is_string(), "{cond}");
    wait_for("CreateInCluster events", LONG, || {
        let ev = get_json(&kc, &["-n", NS, "get", "events"])?;
        let created: Vec<String> = ev["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["kind"] == "FederatedDeployment" && e["reason"] == "CreateInCluster")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect();
        let both = ["member1", "member2"].iter().all(|m| created.iter().any(|msg| msg.contains(&format!("\"{m}\""))));
        if both { Ok(()) } else { Err(format!("{created:?}")) }
    });

    // A forbidden override path fails member2 only: member1 still takes the new replicas.
    patch(
        &kc,
        &["-n", NS, "patch", "federateddeployment", "test-deployment"],
        &json!({"spec": {"overrides": [
            {"clusterName": "member1", "clusterOverrides": [{"path": "/spec/replicas", "value": 4}]},
            {"clusterName": "member2", "clusterOverrides": [{"path": "/metadata/name", "value": "elsewhere"}]}
        ]}}),
    );
    wait_for("member1 scaled to 4", LONG, || {
        let d = get_json(&member(&cp, "member1"), &["-n", NS, "get", "deployment", "test-deployment"])?;
        if d["spec"]["replicas"] == 4 { Ok(()) } else { Err(d["spec"]["replicas"].to_string()) }
    });
    let fd = status_says(&kc, generation + 1, json!([{"name": "member1"}, {"name": "member2", "status": "ApplyOverridesFailed"}]), false);
    assert_eq!(fd["status"]["conditions"][0]["reason"], "CheckClusters");
    let d2 = get_json(&member(&cp, "member2"), &["-n", NS, "get", "deployment", "test-deployment"]).unwrap();
    assert_eq!(d2["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.17.0-alpine", "member2 keeps what it had");

    // Placement shrinks to member1: member2's object and Work go; status lists member1 only.
    patch(
        &kc,
        &["-n", NS, "patch", "federateddeployment", "test-deployment"],
        &json!({"spec": {"overrides": null, "placement": {"clusters": [{"name": "member1"}]}}}),
    );
    wait_for("the Deployment deleted from member2", LONG, || match get_json(&member(&cp, "member2"), &["-n", NS, "get", "deployment", "test-deployment"]) {
        Err(e) if e.contains("NotFound") || e.contains("not found") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    status_says(&kc, generation + 2, json!([{"name": "member1"}]), true);
    wait_for("one Work left", LONG, || {
        let w = works(&kc);
        if w == vec![("karmada-es-member1".to_string(), wn.clone())] { Ok(()) } else { Err(format!("{w:?}")) }
    });
    let d1 = get_json(&member(&cp, "member1"), &["-n", NS, "get", "deployment", "test-deployment"]).unwrap();
    assert_eq!(d1["spec"]["replicas"], 3, "without overrides member1 runs the template's count");

    // Deleting the federated object deletes the member object (binding → Works → member).
    kubectl(&k, &kc, &["-n", NS, "delete", "federateddeployment", "test-deployment"]);
    wait_for("the Deployment deleted from member1", LONG, || match get_json(&member(&cp, "member1"), &["-n", NS, "get", "deployment", "test-deployment"]) {
        Err(e) if e.contains("NotFound") || e.contains("not found") => Ok(()),
        other => Err(format!("{:?}", other.map(|d| d["metadata"].clone()))),
    });
    wait_for("the binding gone", LONG, || {
        let rbs = get_json(&kc, &["-n", NS, "get", "resourcebindings"])?;
        let left: Vec<&Value> = rbs["items"].as_array().into_iter().flatten().filter(|b| b["spec"]["resource"]["kind"] != "FederatedNamespace").collect();
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
    });

    // `clusterSelector: {}` selects every cluster; `kubefed.io/orphan: "true"` keeps member
    // objects when the federated object goes.
    apply_yaml(
        &kc,
        "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata:\n  name: keep\n  namespace: test-namespace\n  annotations: {kubefed.io/orphan: \"true\"}\nspec:\n  template:\n    data: {a: b}\n  placement:\n    clusterSelector: {}\n",
    );
    for m in ["member1", "member2"] {
        let cm = wait_for(&format!("configmap keep in {m}"), LONG, || get_json(&member(&cp, m), &["-n", NS, "get", "configmap", "keep"]));
        assert_eq!(cm["data"]["a"], "b");
    }
    kubectl(&k, &kc, &["-n", NS, "delete", "federatedconfigmap", "keep"]);
    wait_for("the configmap's Works released", LONG, || {
        let list = get_json(&kc, &["get", "works", "-A"])?;
        let left = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["metadata"]["annotations"]["resourcebinding.karmada.io/name"] == "keep-federatedconfigmap")
            .count();
        if left == 0 { Ok(()) } else { Err(format!("{left} works")) }
    });
    for m in ["member1", "member2"] {
        let cm = get_json(&member(&cp, m), &["-n", NS, "get", "configmap", "keep"]).unwrap();
        assert_eq!(cm["data"]["a"], "b", "{m} keeps the orphaned object");
        // Released as KubeFed releases it: no longer labelled managed, by KubeFed or Karmada.
        let labels = &cm["metadata"]["labels"];
        assert!(labels.get("kubefed.io/managed").is_none() && labels.get("karmada.io/managed").is_none(), "{m}: {labels}");
    }
    drop(cp);
}

/// A member that stops answering is reported `ClusterNotReady`; deleting the federated object
/// then neither hangs on it nor spares the ready member: the object goes at once, member1's copy
/// is deleted, and member2's when it answers again.
#[test]
fn an_unready_member_is_reported_and_does_not_hold_a_deletion() {
    let cp = Flotilla::start_with(&[&["--demo", "2"], support::FAST_PROBES].concat());
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        cluster_ready(&kc, name, "True");
    }
    kubectl(&k, &kc, &["create", "namespace", "shop"]);
    support::federate_namespace(&kc, "shop");
    apply_yaml(
        &kc,
        "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata:\n  name: cfg\n  namespace: shop\nspec:\n  template:\n    data: {k: v}\n  placement:\n    clusters: [{name: member1}, {name: member2}]\n",
    );
    let status = |clusters: Value, propagated: &str| {
        wait_for(&format!("cfg status {clusters}"), LONG, || {
            let o = get_json(&kc, &["-n", "shop", "get", "federatedconfigmap", "cfg"])?;
            let cond = o["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Propagation").cloned().unwrap_or_default();
            if o["status"]["clusters"] == clusters && cond["status"] == propagated { Ok(cond) } else { Err(o["status"].to_string()) }
        })
    };
    status(json!([{"name": "member1"}, {"name": "member2"}]), "True");
    for m in ["member1", "member2"] {
        wait_for(&format!("cfg in {m}"), LONG, || get_json(&member(&cp, m), &["-n", "shop", "get", "configmap", "cfg"]));
    }

    sim_faults(&cp, "member2", r#"{"blackhole": true}"#);
    cluster_ready(&kc, "member2", "False");
    // The one probe, KubeFed's rendering: Offline, and no Ready condition at all.
    wait_for("KubeFedCluster member2 Offline", LONG, || {
        let kfc = get_json(&kc, &["-n", "kube-federation-system", "get", "kubefedcluster", "member2"])?;
        let conds = kfc["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let offline = conds.iter().any(|c| c["type"] == "Offline" && c["status"] == "True" && c["reason"] == "ClusterNotReachable");
        if offline && !conds.iter().any(|c| c["type"] == "Ready") { Ok(()) } else { Err(kfc["status"].to_string()) }
    });
    let cond = status(json!([{"name": "member1"}, {"name": "member2", "status": "ClusterNotReady"}]), "False");
    assert_eq!(cond["reason"], "CheckClusters");

    kubectl(&k, &kc, &["-n", "shop", "delete", "federatedconfigmap", "cfg"]);
    wait_for("the federated object gone", LONG, || gone(&kc, &["-n", "shop", "get", "federatedconfigmap", "cfg"]));
    wait_for("cfg deleted from member1", LONG, || gone(&member(&cp, "member1"), &["-n", "shop", "get", "configmap", "cfg"]));
    // member2's Work waits for its member; the binding with it.
    let wn = work_name("FederatedConfigMap", "cfg", Some("shop"));
    wait_for("member2's Work deleted but waiting for its member", LONG, || {
        let w = get_json(&kc, &["-n", "karmada-es-member2", "get", "work", &wn])?;
        if w["metadata"]["deletionTimestamp"].is_string() { Ok(()) } else { Err(w["metadata"].to_string()) }
    });

    sim_faults(&cp, "member2", r#"{"blackhole": false}"#);
    cluster_ready(&kc, "member2", "True");
    wait_for("KubeFedCluster member2 Ready again", LONG, || {
        let kfc = get_json(&kc, &["-n", "kube-federation-system", "get", "kubefedcluster", "member2"])?;
        let conds = kfc["status"]["conditions"].as_array().cloned().unwrap_or_default();
        if conds.len() == 1 && conds[0]["type"] == "Ready" && conds[0]["status"] == "True" { Ok(()) } else { Err(kfc["status"].to_string()) }
    });
    wait_for("cfg deleted from member2", LONG, || gone(&member(&cp, "member2"), &["-n", "shop", "get", "configmap", "cfg"]));
    wait_for("the binding gone", LONG, || gone(&kc, &["-n", "shop", "get", "resourcebinding", "cfg-federatedconfigmap"]));
    drop(cp);
}

/// The same against real kube-apiservers (the shared testenv; skipped without one): two
/// members joined, the documented FederatedDeployment with its overrides in each, status
/// back, a placement shrink deleting member2's copy, deletion removing member1's.
#[test]
fn the_federated_deployment_on_real_members() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let kc_s = kc.to_str().unwrap();
    let members = [("member1", env.member("member1").kubeconfig.clone()), ("member2", env.member("member2").kubeconfig.clone())];
    for (name, mk) in &members {
        let (ok, out) = support::flotilla_cmd(&["join", name, "--kubeconfig", mk.to_str().unwrap(), "--control-plane-kubeconfig", kc_s]);
        assert!(ok, "join {name} failed:\n{out}");
        cluster_ready(&kc, name, "True");
    }
    let ns = support::unique("kubefed");
    let example = std::fs::read_to_string(support::manifest_dir().join("../../examples/kubefed/federateddeployment.yaml")).unwrap();
    apply_yaml(&kc, &example.replace(NS, &ns));
    let deploy = |m: usize| get_json(&members[m].1, &["-n", &ns, "get", "deployment", "test-deployment"]);
    let d1 = wait_for("member1's Deployment with 5 replicas", LONG, || {
        deploy(0).and_then(|d| if d["spec"]["replicas"] == 5 { Ok(d) } else { Err(d["spec"].to_string()) })
    });
    assert_eq!(d1["metadata"]["labels"]["kubefed.io/managed"], "true");
    assert_eq!(d1["spec"]["template"]["spec"]["containers"][0]["image"], "nginx");
    let d2 = wait_for("member2's Deployment with the other image", LONG, || {
        deploy(1)
            .and_then(|d| if d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.17.0-alpine" { Ok(d) } else { Err(d["spec"].to_string()) })
    });
    assert_eq!(d2["spec"]["replicas"], 3);
    assert_eq!(d2["metadata"]["annotations"]["team"], "edge");
    assert!(d2["metadata"]["annotations"].get("foo").is_none(), "{}", d2["metadata"]);
    let fd = wait_for("status of both clusters", LONG, || {
        let fd = get_json(&kc, &["-n", &ns, "get", "federateddeployment", "test-deployment"])?;
        if fd["status"]["clusters"] == json!([{"name": "member1"}, {"name": "member2"}]) && has_condition(&fd, "Propagation", "True") {
            Ok(fd)
        } else {
            Err(fd["status"].to_string())
        }
    });
    assert_eq!(fd["status"]["observedGeneration"], fd["metadata"]["generation"]);

    patch(&kc, &["-n", &ns, "patch", "federateddeployment", "test-deployment"], &json!({"spec": {"placement": {"clusters": [{"name": "member1"}]}}}));
    wait_for("member2's copy deleted", LONG, || gone(&members[1].1, &["-n", &ns, "get", "deployment", "test-deployment"]));
    kubectl(&kubectl_bin(), &kc, &["-n", &ns, "delete", "federateddeployment", "test-deployment"]);
    wait_for("member1's copy deleted", LONG, || {
        gone(&members[0].1, &["-n", &ns, "get", "deployment", "test-deployment"]).map_err(|e| {
            // What still holds it, for the failure message.
            let rb = get_json(&kc, &["-n", &ns, "get", "resourcebindings"]).map(|l| l["items"].to_string());
            let works = get_json(&kc, &["-n", "karmada-es-member1", "get", "works"]).map(|l| l["items"].to_string());
            format!("{e}; bindings {rb:?}; works {works:?}")
        })
    });
    for (_, mk) in &members {
        let _ = std::process::Command::new(kubectl_bin()).arg("--kubeconfig").arg(mk).args(["delete", "namespace", &ns, "--wait=false"]).output();
    }
    drop(cp);
}

/// A member object labelled `kubefed.io/managed=false` is never touched: not adopted or
/// updated (status `ManagedLabelFalse`, the other member still gets its copy) and not deleted
/// with the federated object.
#[test]
fn a_member_object_labelled_managed_false_is_never_touched() {
    let cp = Flotilla::start_with(&["--demo", "2"]);
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        cluster_ready(&kc, name, "True");
    }
    kubectl(&k, &kc, &["create", "namespace", "own"]);
    support::federate_namespace(&kc, "own");
    let m1 = member(&cp, "member1");
    wait_for("namespace own in member1", LONG, || get_json(&m1, &["get", "namespace", "own"]));
    apply_yaml(&m1, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: own\n  labels: {kubefed.io/managed: \"false\"}\ndata: {k: mine}\n");
    apply_yaml(
        &kc,
        "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata:\n  name: cfg\n  namespace: own\nspec:\n  template:\n    data: {k: federated}\n  placement:\n    clusters: [{name: member1}, {name: member2}]\n",
    );
    let cm2 = wait_for("cfg in member2", LONG, || get_json(&member(&cp, "member2"), &["-n", "own", "get", "configmap", "cfg"]));
    assert_eq!(cm2["data"]["k"], "federated");
    wait_for("member1 reported ManagedLabelFalse", LONG, || {
        let o = get_json(&kc, &["-n", "own", "get", "federatedconfigmap", "cfg"])?;
        let want = json!([{"name": "member1", "status": "ManagedLabelFalse"}, {"name": "member2"}]);
        if o["status"]["clusters"] == want { Ok(()) } else { Err(o["status"].to_string()) }
    });
    let cm1 = get_json(&m1, &["-n", "own", "get", "configmap", "cfg"]).unwrap();
    assert_eq!(cm1["data"]["k"], "mine");
    assert_eq!(cm1["metadata"]["labels"], json!({"kubefed.io/managed": "false"}), "no label of ours was added");

    kubectl(&k, &kc, &["-n", "own", "delete", "federatedconfigmap", "cfg"]);
    wait_for("cfg deleted from member2", LONG, || gone(&member(&cp, "member2"), &["-n", "own", "get", "configmap", "cfg"]));
    wait_for("the binding gone", LONG, || gone(&kc, &["-n", "own", "get", "resourcebinding", "cfg-federatedconfigmap"]));
    let cm1 = get_json(&m1, &["-n", "own", "get", "configmap", "cfg"]).unwrap();
    assert_eq!(cm1["data"]["k"], "mine", "member1's own object stays");
    drop(cp);
}

/// With the KubeFedConfig's `syncController.adoptResources: Disabled`, a member object that
/// already exists is left alone and reported `AlreadyExists` (with KubeFed's Warning); once
/// adoption is enabled again it is taken over.
#[test]
fn existing_member_objects_are_adopted_only_while_adoption_is_on() {
    let cp = Flotilla::start_with(&["--demo", "2"]);
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    for name in ["member1", "member2"] {
        cluster_ready(&kc, name, "True");
    }
    let adoption = |mode: &str| {
        let body = json!({"spec": {"syncController": {"adoptResources": mode}}});
        kubectl(&k, &kc, &["-n", "kube-federation-system", "patch", "kubefedconfig", "kubefed", "--type", "merge", "-p", &body.to_string()]);
    };
    adoption("Disabled");
    kubectl(&k, &kc, &["create", "namespace", "pre"]);
    support::federate_namespace(&kc, "pre");
    let m1 = member(&cp, "member1");
    wait_for("namespace pre in member1", LONG, || get_json(&m1, &["get", "namespace", "pre"]));
    apply_yaml(&m1, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: pre\ndata: {k: mine}\n");
    apply_yaml(
        &kc,
        "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata:\n  name: cfg\n  namespace: pre\nspec:\n  template:\n    data: {k: federated}\n  placement:\n    clusters: [{name: member1}, {name: member2}]\n",
    );
    wait_for("member1 reported AlreadyExists", LONG, || {
        let o = get_json(&kc, &["-n", "pre", "get", "federatedconfigmap", "cfg"])?;
        let want = json!([{"name": "member1", "status": "AlreadyExists"}, {"name": "member2"}]);
        if o["status"]["clusters"] == want && has_condition(&o, "Propagation", "False") { Ok(()) } else { Err(o["status"].to_string()) }
    });
    let cm1 = get_json(&m1, &["-n", "pre", "get", "configmap", "cfg"]).unwrap();
    assert_eq!(cm1["data"]["k"], "mine", "not adopted");
    assert!(cm1["metadata"]["labels"].get("kubefed.io/managed").is_none(), "{}", cm1["metadata"]);
    wait_for("KubeFed's Warning", LONG, || {
        let events = get_json(&kc, &["-n", "pre", "get", "events"])?;
        let found = events["items"].as_array().into_iter().flatten().any(|e| {
            e["reason"] == "CreateInClusterFailed"
                && e["message"].as_str().is_some_and(|m| m.contains("member1") && m.contains("Resource pre-exist in cluster"))
        });
        if found { Ok(()) } else { Err("no CreateInClusterFailed yet".into()) }
    });

    // Adoption on: the existing object is taken over.
    adoption("Enabled");
    wait_for("member1's object adopted", LONG, || {
        let cm = get_json(&m1, &["-n", "pre", "get", "configmap", "cfg"])?;
        if cm["data"]["k"] == "federated" && cm["metadata"]["labels"]["kubefed.io/managed"] == "true" { Ok(()) } else { Err(cm.to_string()) }
    });
    status_of_all(&kc, "pre", json!([{"name": "member1"}, {"name": "member2"}]));
    drop(cp);
}

/// Wait until the FederatedConfigMap `cfg` in `ns` reports `clusters` and propagated.
fn status_of_all(kc: &Path, ns: &str, clusters: Value) {
    wait_for(&format!("cfg propagated to {clusters}"), LONG, || {
        let o = get_json(kc, &["-n", ns, "get", "federatedconfigmap", "cfg"])?;
        if o["status"]["clusters"] == clusters && has_condition(&o, "Propagation", "True") { Ok(()) } else { Err(o["status"].to_string()) }
    });
}
