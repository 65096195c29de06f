//! KubeFed's documented lifecycle for the default types that need more than a plain copy,
//! against real members (the shared testenv; skipped without one):
//! - FederatedClusterRole: with the default join every copy ends `CreationFailed` (the member
//!   identity holds no RBAC rights, and the member's escalation check lets it grant only what
//!   it holds), and the Event names the command that fixes it; after
//!   `flotilla join NAME --update --access full` it propagates, and create, the
//!   ClusterPropagatedVersion (KubeFed's own digests), update of template and overrides,
//!   placement shrink and delete behave as KubeFed's.
//! - FederatedNamespace: a namespaced federated object in a namespace without one reaches no
//!   cluster (`NamespaceNotFederated`); the FederatedNamespace places the namespace (template,
//!   overrides, `kubefed.io/managed`, its PropagatedVersion) and confines every federated
//!   object in it to the clusters it places; a placement shrink deletes the namespace there;
//!   deleting it deletes the member namespaces, which namespace auto-propagation then leaves
//!   alone; a FederatedNamespace not named as its namespace is refused (`InvalidName`).
//! - Remote status (`RawResourceStatusCollection` with the FTC's `statusCollection: Enabled`):
//!   Deployments, ReplicaSets and Jobs report each member object's status in
//!   `status.clusters[].remoteStatus`; with the gate off it is not written.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, gone, has_condition, kubectl, kubectl_bin, kubefed_versions, member_version, wait_for};

const LONG: Duration = Duration::from_secs(180);

fn join(name: &str, member: &Path, cp: &Path, extra: &[&str]) {
    let mut args = vec!["join", name, "--kubeconfig", member.to_str().unwrap(), "--control-plane-kubeconfig", cp.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (ok, out) = flotilla_cmd(&args);
    assert!(ok, "join {name} {extra:?} failed:\n{out}");
}

fn cluster_statuses(fed: &Value) -> Value {
    json!(fed["status"]["clusters"].as_array().into_iter().flatten().map(|c| json!({"name": c["name"], "status": c["status"]})).collect::<Vec<_>>())
}

/// The federated ClusterRole's Events with `reason`.
fn events(cp: &Path, name: &str, reason: &str) -> Vec<String> {
    let list = get_json(cp, &["get", "events", "-A"]).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["kind"] == "FederatedClusterRole" && e["involvedObject"]["name"] == name && e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_federated_cluster_role_needs_full_access_says_so_and_then_follows_kubefeds_lifecycle() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    // Own cluster names: the member-side identity is per name, and this test raises its rights.
    let members: Vec<(String, PathBuf)> =
        ["member1", "member2"].iter().map(|m| (support::unique(&format!("fcr-{m}")), env.member(m).kubeconfig.clone())).collect();
    for (name, mk) in &members {
        join(name, mk, &kc, &[]);
        support::wait_cluster_ready(&kc, name, "True");
    }
    let role = support::unique("kubefed-viewer");
    let (c1, c2) = (members[0].0.as_str(), members[1].0.as_str());
    let fed = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedClusterRole",
        "metadata": {"name": role},
        "spec": {
            "template": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
            "placement": {"clusters": [{"name": c1}, {"name": c2}]},
            "overrides": [{"clusterName": c1, "clusterOverrides": [{"path": "/rules/0/verbs", "value": ["get", "list"]}]}],
        },
    });
    apply_yaml(&kc, &fed.to_string());

    // The default join: refused in both members, and the Event says what to run.
    wait_for("CreationFailed in both clusters", LONG, || {
        let f = get_json(&kc, &["get", "federatedclusterrole", &role])?;
        let want = json!([{"name": c1, "status": "CreationFailed"}, {"name": c2, "status": "CreationFailed"}]);
        if cluster_statuses(&f) == want && has_condition(&f, "Propagation", "False") { Ok(()) } else { Err(f["status"].to_string()) }
    });
    let failed = wait_for("a CreateInClusterFailed Event", LONG, || {
        let e = events(&kc, &role, "CreateInClusterFailed");
        if e.is_empty() { Err("none yet".into()) } else { Ok(e) }
    });
    assert!(
        failed.iter().any(|m| m.contains(&format!("flotilla join {c1} "))
            && m.contains("--update --access full")
            && m.contains("clusterroles.rbac.authorization.k8s.io")),
        "{failed:?}"
    );

    // Full access: the copies go through, with member1's override.
    for (name, mk) in &members {
        join(name, mk, &kc, &["--update", "--access", "full"]);
    }
    let member_role = |i: usize| get_json(&members[i].1, &["get", "clusterrole", &role]);
    wait_for("propagated to both", LONG, || {
        let f = get_json(&kc, &["get", "federatedclusterrole", &role])?;
        let want = json!([{"name": c1, "status": null}, {"name": c2, "status": null}]);
        if cluster_statuses(&f) == want && has_condition(&f, "Propagation", "True") { Ok(()) } else { Err(f["status"].to_string()) }
    });
    let r1 = member_role(0).unwrap();
    assert_eq!(r1["rules"][0]["verbs"], json!(["get", "list"]), "member1's override");
    assert_eq!(r1["metadata"]["labels"]["kubefed.io/managed"], "true");
    assert_eq!(member_role(1).unwrap()["rules"][0]["verbs"], json!(["get"]));

    let versions_converge = |clusters: &[(String, PathBuf)]| -> Value {
        wait_for("the ClusterPropagatedVersion", LONG, || {
            let f = get_json(&kc, &["get", "federatedclusterrole", &role])?;
            let cpv = get_json(&kc, &["get", "clusterpropagatedversions", &format!("clusterrole-{role}")])?;
            let (template, overrides) = kubefed_versions(&f);
            let mut want_clusters = Vec::new();
            for (name, mk) in clusters {
                want_clusters.push(json!({"clusterName": name, "version": member_version(&get_json(mk, &["get", "clusterrole", &role])?)}));
            }
            let want = json!({"templateVersion": template, "overridesVersion": overrides, "clusterVersions": want_clusters});
            if cpv["status"] == want { Ok(cpv["status"].clone()) } else { Err(format!("{} vs KubeFed's {want}", cpv["status"])) }
        })
    };
    let mut sorted = members.clone();
    sorted.sort();
    let first = versions_converge(&sorted);

    // Template and overrides change: both digests move, the copies follow.
    let body = json!({"spec": {
        "template": {"rules": [{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]}]},
        "overrides": [{"clusterName": c1, "clusterOverrides": [{"path": "/rules/0/verbs", "value": ["get", "watch"]}]}],
    }});
    kubectl(&k, &kc, &["patch", "federatedclusterrole", &role, "--type", "merge", "-p", &body.to_string()]);
    let second = versions_converge(&sorted);
    assert_ne!(second["templateVersion"], first["templateVersion"]);
    assert_ne!(second["overridesVersion"], first["overridesVersion"]);
    wait_for("the updated copies", LONG, || {
        let (r1, r2) = (member_role(0)?, member_role(1)?);
        let ok = r1["rules"][0]["verbs"] == json!(["get", "watch"]) && r2["rules"][0]["resources"] == json!(["configmaps", "secrets"]);
        if ok { Ok(()) } else { Err(format!("{} / {}", r1["rules"], r2["rules"])) }
    });

    // The placement shrinks: the second cluster's copy and version go.
    let body = json!({"spec": {"placement": {"clusters": [{"name": c1}]}}});
    kubectl(&k, &kc, &["patch", "federatedclusterrole", &role, "--type", "merge", "-p", &body.to_string()]);
    wait_for("the removed cluster's copy deleted", LONG, || gone(&members[1].1, &["get", "clusterrole", &role]));
    let third = versions_converge(&members[..1]);
    assert_eq!(third["clusterVersions"].as_array().map(Vec::len), Some(1));

    // Delete: the copy and the ClusterPropagatedVersion go with it.
    kubectl(&k, &kc, &["delete", "federatedclusterrole", &role]);
    wait_for("the copy deleted", LONG, || gone(&members[0].1, &["get", "clusterrole", &role]));
    wait_for("the ClusterPropagatedVersion collected", LONG, || gone(&kc, &["get", "clusterpropagatedversions", &format!("clusterrole-{role}")]));

    for (name, mk) in &members {
        let (ok, out) =
            flotilla_cmd(&["unjoin", name, "--control-plane-kubeconfig", kc.to_str().unwrap(), "--kubeconfig", mk.to_str().unwrap(), "--wait-seconds", "120"]);
        assert!(ok, "unjoin {name} failed:\n{out}");
    }
    drop(cp);
}

#[test]
fn remote_status_reports_each_members_deployment_replicaset_and_job() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    let members = support::join_members(&env, &kc, &["member1", "member2"]);
    let ns = support::unique("kubefed-remote");
    kubectl(&k, &kc, &["create", "namespace", &ns]);
    support::federate_namespace(&kc, &ns);
    // KubeFed's switches: the gate in the KubeFedConfig, statusCollection on each FTC.
    let gate = |on: &str| {
        let gates = json!([
            {"name": "PushReconciler", "configuration": "Enabled"},
            {"name": "RawResourceStatusCollection", "configuration": on},
            {"name": "SchedulerPreferences", "configuration": "Enabled"},
        ]);
        let body = json!({"spec": {"featureGates": gates}});
        kubectl(&k, &kc, &["-n", "kube-federation-system", "patch", "kubefedconfig", "kubefed", "--type", "merge", "-p", &body.to_string()]);
    };
    gate("Enabled");
    for ftc in ["deployments.apps", "replicasets.apps", "jobs.batch"] {
        kubectl(
            &k,
            &kc,
            &["-n", "kube-federation-system", "patch", "federatedtypeconfig", ftc, "--type", "merge", "-p", r#"{"spec":{"statusCollection":"Enabled"}}"#],
        );
    }
    let pod = json!({"metadata": {"labels": {"app": "r"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    let kinds = [
        ("FederatedDeployment", "deployments", json!({"spec": {"replicas": 2, "selector": {"matchLabels": {"app": "r"}}, "template": pod}})),
        ("FederatedReplicaSet", "replicasets", json!({"spec": {"replicas": 1, "selector": {"matchLabels": {"app": "r"}}, "template": pod}})),
        (
            "FederatedJob",
            "jobs",
            json!({"spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}),
        ),
    ];
    for (kind, _, template) in &kinds {
        let fed = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": kind,
            "metadata": {"name": "r", "namespace": ns},
            "spec": {"template": template, "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}},
        });
        apply_yaml(&kc, &fed.to_string());
    }
    for (kind, plural, _) in &kinds {
        wait_for(&format!("{kind}'s remoteStatus equal to each member's status"), LONG, || {
            let fed = get_json(&kc, &["-n", &ns, "get", &kind.to_lowercase(), "r"])?;
            let mut want = Vec::new();
            for (name, mk) in &members {
                let obj = get_json(mk, &["-n", &ns, "get", plural, "r"])?;
                if obj["status"].as_object().is_none_or(|s| s.is_empty()) {
                    return Err(format!("{name}'s {plural} has no status yet"));
                }
                want.push(json!({"name": name, "remoteStatus": obj["status"]}));
            }
            let have = fed["status"]["clusters"].clone();
            if have == json!(want) && has_condition(&fed, "Propagation", "True") { Ok(()) } else { Err(format!("{have} vs {}", json!(want))) }
        });
    }
    // The gate off: remoteStatus is no longer written.
    gate("Disabled");
    for (kind, ..) in &kinds {
        wait_for(&format!("{kind} without remoteStatus"), LONG, || {
            let fed = get_json(&kc, &["-n", &ns, "get", &kind.to_lowercase(), "r"])?;
            let have = fed["status"]["clusters"].clone();
            if have == json!([{"name": "member1"}, {"name": "member2"}]) { Ok(()) } else { Err(have.to_string()) }
        });
    }
    for (kind, ..) in &kinds {
        kubectl(&k, &kc, &["-n", &ns, "delete", &kind.to_lowercase(), "r"]);
    }
    for (_, mk) in &members {
        let _ = std::process::Command::new(&k).arg("--kubeconfig").arg(mk).args(["delete", "namespace", &ns, "--wait=false"]).output();
    }
    drop(cp);
}

fn events_for(cp: &Path, ns: &str, kind: &str, name: &str, reason: &str) -> Vec<String> {
    let list = get_json(cp, &["-n", ns, "get", "events"]).unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name && e["reason"] == reason)
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// The Propagation condition's (status, reason) and `status.clusters` of a federated object.
fn propagation(fed: &Value) -> (Value, Value, Value) {
    let cond = fed["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Propagation").cloned().unwrap_or_default();
    (cond["status"].clone(), cond["reason"].clone(), fed["status"]["clusters"].clone())
}

#[test]
fn a_federated_namespace_places_its_namespace_and_everything_in_it() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let k = kubectl_bin();
    let members = support::join_members(&env, &kc, &["member1", "member2"]);
    let (m1, m2) = (&members[0].1, &members[1].1);
    let ns = support::unique("kubefed-ns");
    kubectl(&k, &kc, &["create", "namespace", &ns]);
    let cfg = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": "cfg", "namespace": ns},
        "spec": {"template": {"data": {"k": "v"}}, "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}},
    });
    apply_yaml(&kc, &cfg.to_string());
    let cfg_is = |status: &str, reason: Value, clusters: Value| {
        wait_for(&format!("the FederatedConfigMap {status} {reason} {clusters}"), LONG, || {
            let f = get_json(&kc, &["-n", &ns, "get", "federatedconfigmap", "cfg"])?;
            let have = propagation(&f);
            if have == (json!(status), reason.clone(), clusters.clone()) { Ok(()) } else { Err(format!("{have:?}")) }
        })
    };
    // No FederatedNamespace: placed nowhere, and the condition says why.
    cfg_is("False", json!("NamespaceNotFederated"), Value::Null);
    for (name, mk) in &members {
        assert!(gone(mk, &["-n", &ns, "get", "configmap", "cfg"]).is_ok(), "{name} got the object of a namespace that is not federated");
    }

    // A FederatedNamespace not named as its namespace is refused.
    apply_yaml(&kc, &format!("apiVersion: types.kubefed.io/v1beta1\nkind: FederatedNamespace\nmetadata: {{name: other, namespace: {ns}}}\nspec: {{}}\n"));
    wait_for("InvalidName", LONG, || {
        let e = events_for(&kc, &ns, "FederatedNamespace", "other", "InvalidName");
        if e.iter().any(|m| m.contains("must match the name of its containing namespace")) { Ok(()) } else { Err(format!("{e:?}")) }
    });

    // The FederatedNamespace places the namespace in member1, with member1's override.
    let fedns = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
        "metadata": {"name": ns, "namespace": ns},
        "spec": {
            "template": {"metadata": {"labels": {"team": "a"}}},
            "placement": {"clusters": [{"name": "member1"}]},
            "overrides": [{"clusterName": "member1", "clusterOverrides": [{"path": "/metadata/labels/team", "value": "b"}]}],
        },
    });
    apply_yaml(&kc, &fedns.to_string());
    let member_ns = |mk: &Path| get_json(mk, &["get", "namespace", &ns]);
    wait_for("member1's namespace federated", LONG, || {
        let n = member_ns(m1)?;
        let l = &n["metadata"]["labels"];
        if l["kubefed.io/managed"] == "true" && l["team"] == "b" { Ok(()) } else { Err(l.to_string()) }
    });
    let fed_ns_is = |clusters: Value| {
        wait_for(&format!("the FederatedNamespace propagated to {clusters}"), LONG, || {
            let f = get_json(&kc, &["-n", &ns, "get", "federatednamespace", &ns])?;
            let have = propagation(&f);
            if have == (json!("True"), Value::Null, clusters.clone()) { Ok(f) } else { Err(format!("{have:?}")) }
        })
    };
    fed_ns_is(json!([{"name": "member1"}]));
    let cp_ns = get_json(&kc, &["get", "namespace", &ns]).unwrap();
    assert_eq!(cp_ns["metadata"]["labels"]["namespace.karmada.io/skip-auto-propagation"], "true", "out of auto-propagation");
    let version_is_kubefeds = || {
        wait_for("the FederatedNamespace's PropagatedVersion", LONG, || {
            let f = get_json(&kc, &["-n", &ns, "get", "federatednamespace", &ns])?;
            let pv = get_json(&kc, &["-n", &ns, "get", "propagatedversions", &format!("namespace-{ns}")])?;
            let (template, overrides) = kubefed_versions(&f);
            let want = json!({"templateVersion": template, "overridesVersion": overrides,
                "clusterVersions": [{"clusterName": "member1", "version": member_version(&member_ns(m1)?)}]});
            if pv["status"] == want { Ok(want) } else { Err(format!("{} vs KubeFed's {want}", pv["status"])) }
        })
    };
    let first = version_is_kubefeds();

    // Template and overrides change: member1's namespace follows, both digests move.
    let body = json!({"spec": {"template": {"metadata": {"labels": {"team": "c"}}},
        "overrides": [{"clusterName": "member1", "clusterOverrides": [{"path": "/metadata/labels/team", "value": "d"}]}]}});
    kubectl(&k, &kc, &["-n", &ns, "patch", "federatednamespace", &ns, "--type", "merge", "-p", &body.to_string()]);
    wait_for("member1's namespace updated", LONG, || {
        let n = member_ns(m1)?;
        if n["metadata"]["labels"]["team"] == "d" { Ok(()) } else { Err(n["metadata"]["labels"].to_string()) }
    });
    let second = version_is_kubefeds();
    assert_ne!(second["templateVersion"], first["templateVersion"]);
    assert_ne!(second["overridesVersion"], first["overridesVersion"]);
    // The federated object in it now reaches member1 only.
    cfg_is("True", Value::Null, json!([{"name": "member1"}]));
    assert_eq!(get_json(m1, &["-n", &ns, "get", "configmap", "cfg"]).unwrap()["data"]["k"], "v");
    assert!(gone(m2, &["-n", &ns, "get", "configmap", "cfg"]).is_ok(), "member2 is outside the namespace's placement");
    // member2's namespace came from auto-propagation before: released, not KubeFed's.
    wait_for("member2's namespace released", LONG, || {
        let n = member_ns(m2)?;
        let l = &n["metadata"]["labels"];
        if l.get("kubefed.io/managed").is_none() && l.get("karmada.io/managed").is_none() { Ok(()) } else { Err(l.to_string()) }
    });

    // Placed in both: the namespace and the object follow to member2.
    let body = json!({"spec": {"placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}}});
    kubectl(&k, &kc, &["-n", &ns, "patch", "federatednamespace", &ns, "--type", "merge", "-p", &body.to_string()]);
    fed_ns_is(json!([{"name": "member1"}, {"name": "member2"}]));
    cfg_is("True", Value::Null, json!([{"name": "member1"}, {"name": "member2"}]));
    wait_for("member2's namespace federated", LONG, || {
        let n = member_ns(m2)?;
        let l = &n["metadata"]["labels"];
        if l["kubefed.io/managed"] == "true" && l["team"] == "c" { Ok(()) } else { Err(l.to_string()) }
    });
    wait_for("the object in member2", LONG, || get_json(m2, &["-n", &ns, "get", "configmap", "cfg"]));

    // Shrunk back to member1: member2's namespace is deleted, as KubeFed deletes it.
    let body = json!({"spec": {"placement": {"clusters": [{"name": "member1"}]}}});
    kubectl(&k, &kc, &["-n", &ns, "patch", "federatednamespace", &ns, "--type", "merge", "-p", &body.to_string()]);
    wait_for("member2's namespace deleted", LONG, || gone(m2, &["get", "namespace", &ns]));
    cfg_is("True", Value::Null, json!([{"name": "member1"}]));

    // Deleted: member1's namespace goes, the object is placed nowhere again, and namespace
    // auto-propagation does not bring the namespace back.
    kubectl(&k, &kc, &["-n", &ns, "delete", "federatednamespace", &ns]);
    wait_for("member1's namespace deleted", LONG, || gone(m1, &["get", "namespace", &ns]));
    cfg_is("False", json!("NamespaceNotFederated"), Value::Null);
    let cp_ns = get_json(&kc, &["get", "namespace", &ns]).unwrap();
    assert_eq!(cp_ns["metadata"]["labels"]["namespace.karmada.io/skip-auto-propagation"], "true");
    for (name, mk) in &members {
        assert!(gone(mk, &["get", "namespace", &ns]).is_ok(), "{name}: the namespace came back");
    }
    drop(cp);
}
