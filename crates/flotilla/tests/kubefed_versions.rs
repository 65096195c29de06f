//! KubeFed's PropagatedVersions against real members (the shared testenv; skipped without one).
//! For each of KubeFed's default namespaced federated types (FederatedNamespace and
//! FederatedClusterRole have their own tests): created with a template, an override and a
//! placement on two members, the PropagatedVersion `<kind>-<name>` carries the template and
//! override digests KubeFed's own code computes for the same object (`kubefed-versions`, built
//! by `testenv/build.sh` from KubeFed v0.10.0's module) and each member's copy's version
//! (`gen:N`, or `rv:X` for kinds without a generation); an update of template and overrides
//! moves both digests; a placement shrink drops the removed cluster's version (and its copy);
//! deleting the federated object takes its PropagatedVersion with it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Flotilla, apply_yaml, get_json, gone, has_condition, kubectl, kubectl_bin, kubefed_versions, member_version, wait_for};

const LONG: Duration = Duration::from_secs(180);

/// (federated kind, target plural, template, override path, override value, updated value).
fn types() -> Vec<(&'static str, &'static str, Value, &'static str, Value, Value)> {
    let pod = json!({"metadata": {"labels": {"app": "v"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    vec![
        ("FederatedConfigMap", "configmaps", json!({"data": {"a": "1", "b": "2"}}), "/data/a", json!("one"), json!("uno")),
        ("FederatedSecret", "secrets", json!({"type": "Opaque", "data": {"k": "dmFsdWU="}}), "/data/k", json!("b3RoZXI="), json!("dGhpcmQ=")),
        (
            "FederatedServiceAccount",
            "serviceaccounts",
            json!({"automountServiceAccountToken": false}),
            "/automountServiceAccountToken",
            json!(true),
            json!(false),
        ),
        ("FederatedService", "services", json!({"spec": {"ports": [{"port": 80}], "selector": {"app": "v"}}}), "/spec/ports/0/port", json!(81), json!(82)),
        (
            "FederatedDeployment",
            "deployments",
            json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "v"}}, "template": pod}}),
            "/spec/replicas",
            json!(2),
            json!(3),
        ),
        (
            "FederatedReplicaSet",
            "replicasets",
            json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "v"}}, "template": pod}}),
            "/spec/replicas",
            json!(2),
            json!(3),
        ),
        (
            "FederatedJob",
            "jobs",
            json!({"spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}),
            "/spec/backoffLimit",
            json!(2),
            json!(3),
        ),
        (
            "FederatedIngress",
            "ingresses.networking.k8s.io",
            json!({"spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
            "/spec/defaultBackend/service/port/number",
            json!(81),
            json!(82),
        ),
    ]
}

fn target_kind(federated_kind: &str) -> &str {
    federated_kind.trim_start_matches("Federated")
}

/// Wait until the PropagatedVersion of `fed_kind/name` says what KubeFed would for the federated
/// object as it is now, and for the member copies in `clusters` as they are now.
fn versions_converge(cp: &Path, ns: &str, fed_kind: &str, plural: &str, clusters: &[(&str, PathBuf)]) -> Value {
    let pv_name = format!("{}-v", target_kind(fed_kind).to_lowercase());
    wait_for(&format!("{fed_kind}'s PropagatedVersion {pv_name}"), LONG, || {
        let fed = get_json(cp, &["-n", ns, "get", &fed_kind.to_lowercase(), "v"])?;
        let pv = get_json(cp, &["-n", ns, "get", "propagatedversions", &pv_name])?;
        let (template, overrides) = kubefed_versions(&fed);
        let mut want_clusters = Vec::new();
        for (name, kc) in clusters {
            let obj = get_json(kc, &["-n", ns, "get", plural, "v"])?;
            want_clusters.push(json!({"clusterName": name, "version": member_version(&obj)}));
        }
        let want = json!({"templateVersion": template, "overridesVersion": overrides, "clusterVersions": want_clusters});
        if pv["status"] != want {
            return Err(format!("PropagatedVersion says {}, KubeFed would say {want}", pv["status"]));
        }
        let owner = &pv["metadata"]["ownerReferences"][0];
        if owner["kind"] != fed_kind || owner["uid"] != fed["metadata"]["uid"] {
            return Err(format!("owner {owner}"));
        }
        Ok(pv)
    })
}

#[test]
fn propagated_versions_follow_every_default_namespaced_type() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    let members = support::join_members(&env, &kc, &["member1", "member2"]);
    let ns = support::unique("kubefed-versions");
    kubectl(&k, &kc, &["create", "namespace", &ns]);
    support::federate_namespace(&kc, &ns);

    let both = || json!({"clusters": [{"name": "member1"}, {"name": "member2"}]});
    for (kind, _, template, path, value, _) in types() {
        let fed = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": kind,
            "metadata": {"name": "v", "namespace": ns},
            "spec": {"template": template, "placement": both(),
                "overrides": [{"clusterName": "member1", "clusterOverrides": [{"path": path, "value": value}]}]},
        });
        apply_yaml(&kc, &fed.to_string());
    }
    let mut first = Vec::new();
    for (kind, plural, ..) in types() {
        let pv = versions_converge(&kc, &ns, kind, plural, &members);
        let fed = get_json(&kc, &["-n", &ns, "get", &kind.to_lowercase(), "v"]).unwrap();
        assert!(has_condition(&fed, "Propagation", "True"), "{kind}: {}", fed["status"]);
        assert_eq!(fed["status"]["clusters"], json!([{"name": "member1"}, {"name": "member2"}]), "{kind}");
        first.push(pv["status"].clone());
    }

    // Template and overrides change: both digests move, the copies' versions follow.
    for (kind, _, mut template, path, _, updated) in types() {
        template["metadata"] = json!({"labels": {"revision": "2"}});
        let body = json!({"spec": {"template": template,
            "overrides": [{"clusterName": "member1", "clusterOverrides": [{"path": path, "value": updated}]}]}});
        kubectl(&k, &kc, &["-n", &ns, "patch", &kind.to_lowercase(), "v", "--type", "merge", "-p", &body.to_string()]);
    }
    for ((kind, plural, ..), before) in types().into_iter().zip(&first) {
        let pv = versions_converge(&kc, &ns, kind, plural, &members);
        assert_ne!(pv["status"]["templateVersion"], before["templateVersion"], "{kind}");
        assert_ne!(pv["status"]["overridesVersion"], before["overridesVersion"], "{kind}");
    }

    // The placement shrinks to member1: member2's copy goes, and so does its version.
    for (kind, ..) in types() {
        let body = json!({"spec": {"placement": {"clusters": [{"name": "member1"}]}}});
        kubectl(&k, &kc, &["-n", &ns, "patch", &kind.to_lowercase(), "v", "--type", "merge", "-p", &body.to_string()]);
    }
    for (kind, plural, ..) in types() {
        wait_for(&format!("member2's {plural} copy deleted"), LONG, || gone(&members[1].1, &["-n", &ns, "get", plural, "v"]));
        let pv = versions_converge(&kc, &ns, kind, plural, &members[..1]);
        assert_eq!(pv["status"]["clusterVersions"].as_array().map(Vec::len), Some(1), "{kind}");
    }

    // Deleting the federated object takes its PropagatedVersion with it.
    for (kind, ..) in types() {
        kubectl(&k, &kc, &["-n", &ns, "delete", &kind.to_lowercase(), "v"]);
    }
    for (kind, ..) in types() {
        let pv_name = format!("{}-v", target_kind(kind).to_lowercase());
        wait_for(&format!("{pv_name} collected"), LONG, || gone(&kc, &["-n", &ns, "get", "propagatedversions", &pv_name]));
    }
    for (_, mk) in &members {
        let _ = Command::new(&k).arg("--kubeconfig").arg(mk).args(["delete", "namespace", &ns, "--wait=false"]).output();
    }
    drop(cp);
}
