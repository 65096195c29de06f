//! One cluster registry, two APIs, against real kube-apiservers (the shared testenv; skipped
//! without one): a cluster joined with `flotilla join` is rendered as a KubeFedCluster with its
//! token Secret and KubeFed's `Ready` condition; a KubeFedCluster written the kubefedctl way
//! (a Secret with `token`, `apiEndpoint`, `caBundle`) registers a Cluster that
//! the one health probe then reports in both renderings; deleting that KubeFedCluster removes
//! the Cluster it registered.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, has_condition, kubectl, kubectl_bin, unique, wait_for};

const NS: &str = "kube-federation-system";
const LONG: Duration = Duration::from_secs(180);

fn kfc_condition(kfc: &Value, type_: &str) -> Value {
    kfc["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == type_).cloned().unwrap_or_default()
}

/// A field of the member kubeconfig's (only) cluster entry.
fn kubeconfig_cluster_field(kubeconfig: &std::path::Path, field: &str) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    text.lines().find_map(|l| l.trim().strip_prefix(&format!("{field}: "))).unwrap_or_else(|| panic!("{field} in {}", kubeconfig.display())).trim().to_string()
}

#[test]
fn joined_clusters_are_kubefed_clusters_and_kubefed_clusters_join() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();

    // Joined the Karmada way: rendered for KubeFed.
    let m1 = env.member("member1").kubeconfig.clone();
    let (ok, out) = flotilla_cmd(&["join", "member1", "--kubeconfig", m1.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "join failed:\n{out}");
    let kfc = wait_for("KubeFedCluster member1 Ready", LONG, || {
        let kfc = get_json(&kc, &["-n", NS, "get", "kubefedclusters", "member1"])?;
        if kfc_condition(&kfc, "Ready")["status"] == "True" { Ok(kfc) } else { Err(kfc["status"].to_string()) }
    });
    let ready = kfc_condition(&kfc, "Ready");
    assert_eq!(ready["reason"], "ClusterReady");
    assert_eq!(ready["message"], "/healthz responded with ok");
    assert!(ready["lastProbeTime"].is_string(), "{ready}");
    assert!(kfc["status"]["kubernetesVersion"].as_str().is_some_and(|v| v.starts_with("v1.")), "{}", kfc["status"]);
    assert_eq!(kfc["spec"]["apiEndpoint"], kubeconfig_cluster_field(&m1, "server"));
    assert_eq!(kfc["spec"]["caBundle"], kubeconfig_cluster_field(&m1, "certificate-authority-data"));
    assert_eq!(kfc["spec"]["secretRef"]["name"], "member1-kubefed-token");
    assert_eq!(kfc["metadata"]["ownerReferences"][0]["kind"], "Cluster");
    let secret = get_json(&kc, &["-n", NS, "get", "secret", "member1-kubefed-token"]).unwrap();
    let karmada_secret = get_json(&kc, &["-n", "karmada-cluster", "get", "secret", "member1"]).unwrap();
    assert_eq!(secret["data"]["token"], karmada_secret["data"]["token"], "the KubeFed Secret carries the cluster's token");
    assert!(secret["data"].get("caBundle").is_none(), "KubeFed reads only `token`");
    // kubectl's table, as KubeFed prints it.
    let table = kubectl(&k, &kc, &["-n", NS, "get", "kfc"]);
    assert!(table.lines().any(|l| l.starts_with("member1") && l.contains("True")), "{table}");

    // Joined the KubeFed way: a ServiceAccount token of member2 in a Secret, and a
    // KubeFedCluster naming it.
    let m2 = env.member("member2").kubeconfig.clone();
    let name = unique("kf");
    let member_ns = unique("kf-sa");
    apply_yaml(
        &m2,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {member_ns}}}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: fed, namespace: {member_ns}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {member_ns}}}\nrules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: [get, list, watch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {member_ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {member_ns}}}\nsubjects:\n- {{kind: ServiceAccount, name: fed, namespace: {member_ns}}}\n"
        ),
    );
    let token = kubectl(&k, &m2, &["-n", &member_ns, "create", "token", "fed", "--duration", "1h"]).trim().to_string();
    let server = kubeconfig_cluster_field(&m2, "server");
    kubectl(&k, &kc, &["-n", NS, "create", "secret", "generic", &format!("{name}-token"), &format!("--from-literal=token={token}")]);
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: core.kubefed.io/v1beta1\nkind: KubeFedCluster\nmetadata:\n  name: {name}\n  namespace: {NS}\nspec:\n  apiEndpoint: {server}\n  caBundle: {}\n  secretRef:\n    name: {name}-token\n",
            kubeconfig_cluster_field(&m2, "certificate-authority-data")
        ),
    );
    let cluster = wait_for("the registered Cluster Ready", LONG, || {
        let c = get_json(&kc, &["get", "cluster", &name])?;
        if has_condition(&c, "Ready", "True") { Ok(c) } else { Err(c.to_string()) }
    });
    assert_eq!(cluster["spec"]["apiEndpoint"], server);
    assert_eq!(cluster["spec"]["syncMode"], "Push");
    assert_eq!(cluster["metadata"]["annotations"]["kubefed.flotilla.io/registered-from"], format!("{NS}/{name}"));
    let stored = get_json(&kc, &["-n", "karmada-cluster", "get", "secret", &name]).unwrap();
    assert!(stored["data"]["token"].is_string() && stored["data"]["caBundle"].is_string(), "{}", stored["data"]);
    let kfc = wait_for("the user's KubeFedCluster reports Ready", LONG, || {
        let kfc = get_json(&kc, &["-n", NS, "get", "kubefedclusters", &name])?;
        if kfc_condition(&kfc, "Ready")["status"] == "True" { Ok(kfc) } else { Err(kfc["status"].to_string()) }
    });
    assert!(kfc["metadata"]["labels"].get("kubefed.flotilla.io/projected-from-cluster").is_none(), "the user's object is not taken over: {}", kfc["metadata"]);
    assert_eq!(kfc["spec"]["secretRef"]["name"], format!("{name}-token"), "the user's spec is left as written");

    // Deleting the KubeFedCluster unregisters the Cluster (kubefedctl unjoin leaves workloads).
    kubectl(&k, &kc, &["-n", NS, "delete", "kubefedcluster", &name]);
    wait_for("the registered Cluster gone", LONG, || match get_json(&kc, &["get", "cluster", &name]) {
        Err(e) if e.contains("NotFound") || e.contains("not found") => Ok(()),
        other => Err(format!("{:?}", other.map(|c| c["metadata"].clone()))),
    });

    for what in [vec!["delete", "namespace", &member_ns, "--wait=false"], vec!["delete", "clusterrole,clusterrolebinding", &member_ns]] {
        let _ = Command::new(&k).arg("--kubeconfig").arg(&m2).args(&what).output();
    }
    drop(cp);
}

/// KubeFed's host joins itself; Flotilla's control plane cannot be its own member (ADR 0025):
/// `flotilla join` refuses, says why and what to do, and registers nothing.
#[test]
fn the_control_plane_is_refused_as_its_own_member() {
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.to_str().unwrap().to_string();
    let (ok, out) = flotilla_cmd(&["join", "host", "--kubeconfig", &kc, "--control-plane-kubeconfig", &kc]);
    assert!(!ok, "joining the control plane to itself succeeded:\n{out}");
    assert!(out.contains("refusing to join host: its kubeconfig reaches the control plane itself"), "{out}");
    assert!(out.contains("0025-control-plane-is-not-a-member.md"), "{out}");
    let clusters = get_json(&cp.kubeconfig, &["get", "clusters"]).unwrap();
    assert_eq!(clusters["items"], serde_json::json!([]), "a Cluster was registered");
    let sas = get_json(&cp.kubeconfig, &["get", "serviceaccounts", "-A", "-o", "json"]).unwrap();
    let ours: Vec<&Value> = sas["items"].as_array().unwrap().iter().filter(|s| s["metadata"]["name"].as_str().unwrap_or("").contains("karmada")).collect();
    assert!(ours.is_empty(), "join wrote member credentials into the control plane: {ours:?}");
    drop(cp);
}
