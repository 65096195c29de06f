//! `propagateDeps` end to end against real kube-apiservers (the shared testenv): a Deployment
//! referencing a ConfigMap and a Secret, selected alone by a PropagationPolicy with
//! `propagateDeps: true`, lands in its member together with both; the attached bindings are
//! named and labelled as Karmada's dependencies distributor names them; moving the Deployment
//! moves its dependencies; dropping a reference removes that dependency from the member.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, kubectl, kubectl_bin, unique, wait_for};

fn gone(kc: &Path, args: &[&str]) -> Result<(), String> {
    match get_json(kc, args) {
        Err(e) if e.contains("NotFound") => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(format!("{args:?} still there")),
    }
}

/// Join testenv's member1 and member2 under `names`, both Ready.
fn join_two(env: &flotilla_testenv::TestEnv, kc: &Path, names: [&str; 2]) -> (PathBuf, PathBuf) {
    let members = [env.member("member1").kubeconfig.clone(), env.member("member2").kubeconfig.clone()];
    for (name, member) in names.iter().zip(&members) {
        let (ok, out) = flotilla_cmd(&["join", name, "--kubeconfig", member.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap()]);
        assert!(ok, "join {name} failed:\n{out}");
        wait_for(&format!("cluster {name} Ready"), Duration::from_secs(120), || {
            let c = get_json(kc, &["get", "cluster", name])?;
            if support::has_condition(&c, "Ready", "True") { Ok(()) } else { Err(c["status"].to_string()) }
        });
    }
    let [m1, m2] = members;
    (m1, m2)
}

/// Delete the test's namespace on the control plane and in the members, and unjoin the
/// clusters (their identity in the shared members goes with them).
fn clean_up(kc: &Path, ns: &str, members: [&PathBuf; 2], clusters: [&str; 2]) {
    for (name, member) in clusters.iter().zip(members) {
        let (ok, out) = flotilla_cmd(&[
            "unjoin",
            name,
            "--kubeconfig",
            member.to_str().unwrap(),
            "--control-plane-kubeconfig",
            kc.to_str().unwrap(),
            "--wait-seconds",
            "120",
        ]);
        assert!(ok, "unjoin {name} failed:\n{out}");
    }
    kubectl(&kubectl_bin(), kc, &["delete", "namespace", ns, "--wait=false"]);
    for member in members {
        let _ = Command::new(kubectl_bin()).arg("--kubeconfig").arg(member).args(["delete", "namespace", ns, "--wait=false"]).output();
    }
}

#[test]
fn dependencies_follow_the_workload_and_leave_with_its_reference() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else {
        return;
    };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    // Cluster names of this test's own, so other tests joining the same members do not collide.
    let (c1, c2) = ("deps1", "deps2");
    let (m1, m2) = join_two(&env, &kc, [c1, c2]);

    let ns = unique("deps");
    let deployment = |volumes: &str| {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.25
        envFrom:
        - secretRef:
            name: web-secret
      volumes:
{volumes}"#
        )
    };
    let with_config = "      - name: config\n        configMap:\n          name: web-config\n";
    let policy = |cluster: &str| {
        format!(
            r#"apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: {ns}
spec:
  propagateDeps: true
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: web
  placement:
    clusterAffinity:
      clusterNames: [{cluster}]
"#
        )
    };
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  namespace: {ns}\ndata:\n  mode: federated\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: web-secret\n  namespace: {ns}\nstringData:\n  token: s3cret\n---\n{}---\n{}",
            deployment(with_config),
            policy(c1)
        ),
    );

    // The Deployment and both of its dependencies run in the chosen member.
    wait_for("deployment in member1", Duration::from_secs(180), || get_json(&m1, &["-n", &ns, "get", "deployment", "web"]));
    let cm = wait_for("configmap in member1", Duration::from_secs(120), || get_json(&m1, &["-n", &ns, "get", "configmap", "web-config"]));
    assert_eq!(cm["data"]["mode"], "federated");
    assert_eq!(cm["metadata"]["labels"]["karmada.io/managed"], "true");
    assert_eq!(cm["metadata"]["annotations"]["resourcebinding.karmada.io/name"], "web-config-configmap");
    let secret = wait_for("secret in member1", Duration::from_secs(120), || get_json(&m1, &["-n", &ns, "get", "secret", "web-secret"]));
    assert_eq!(secret["data"]["token"], "czNjcmV0");
    // Nothing went to the other member.
    assert!(gone(&m2, &["-n", &ns, "get", "configmap", "web-config"]).is_ok());
    // A dependency's change follows it into the member.
    apply_yaml(&kc, &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  namespace: {ns}\ndata:\n  mode: changed\n"));
    wait_for("the changed configmap in member1", Duration::from_secs(120), || {
        let cm = get_json(&m1, &["-n", &ns, "get", "configmap", "web-config"])?;
        if cm["data"]["mode"] == "changed" { Ok(()) } else { Err(cm["data"].to_string()) }
    });

    // Karmada's bookkeeping: the independent binding records its dependencies and keeps the
    // distributor's finalizer; each attached binding is named like any binding, owned by its
    // dependency, labelled with the requirer's permanent id, and lists it in requiredBy.
    let rb = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "web-deployment"]).unwrap();
    assert_eq!(rb["spec"]["propagateDeps"], true);
    let deps: serde_json::Value =
        serde_json::from_str(rb["metadata"]["annotations"]["resourcebinding.karmada.io/dependencies"].as_str().expect("dependencies annotation")).unwrap();
    assert_eq!(
        deps,
        serde_json::json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": "web-config"},
            {"apiVersion": "v1", "kind": "Secret", "namespace": ns, "name": "web-secret"},
        ])
    );
    assert!(rb["metadata"]["finalizers"].as_array().unwrap().iter().any(|f| f == "karmada.io/binding-dependencies-distributor"), "{rb}");
    let rb_id = rb["metadata"]["labels"]["resourcebinding.karmada.io/permanent-id"].as_str().unwrap().to_string();
    for (attached, kind, name) in [("web-config-configmap", "ConfigMap", "web-config"), ("web-secret-secret", "Secret", "web-secret")] {
        let a = get_json(&kc, &["-n", &ns, "get", "resourcebinding", attached]).unwrap();
        assert_eq!(a["spec"]["resource"]["kind"], kind);
        assert_eq!(a["metadata"]["ownerReferences"][0]["name"], name);
        let labels = a["metadata"]["labels"].as_object().unwrap();
        let depended: Vec<(&String, &serde_json::Value)> = labels.iter().filter(|(k, _)| k.starts_with("resourcebinding.karmada.io/depended-by-")).collect();
        assert_eq!(depended.len(), 1, "{labels:?}");
        assert_eq!(depended[0].1, &serde_json::json!(rb_id));
        assert_eq!(a["spec"]["requiredBy"][0]["name"], "web-deployment");
        assert_eq!(a["spec"]["requiredBy"][0]["clusters"][0]["name"], c1);
        assert!(a["spec"].get("placement").is_none(), "no policy placed it: {a}");
    }

    // Placement moves: the dependencies move with the workload, and leave the old member.
    apply_yaml(&kc, &policy(c2));
    for (kind, name) in [("deployment", "web"), ("configmap", "web-config"), ("secret", "web-secret")] {
        wait_for(&format!("{kind} in member2"), Duration::from_secs(180), || get_json(&m2, &["-n", &ns, "get", kind, name]));
        wait_for(&format!("{kind} gone from member1"), Duration::from_secs(180), || gone(&m1, &["-n", &ns, "get", kind, name]));
    }

    // The ConfigMap reference removed: its attached binding goes, and its member copy with it;
    // the Secret stays.
    apply_yaml(&kc, &deployment("      - name: scratch\n        emptyDir: {}\n"));
    wait_for("attached ConfigMap binding deleted", Duration::from_secs(120), || gone(&kc, &["-n", &ns, "get", "resourcebinding", "web-config-configmap"]));
    wait_for("configmap gone from member2", Duration::from_secs(120), || gone(&m2, &["-n", &ns, "get", "configmap", "web-config"]));
    assert!(get_json(&m2, &["-n", &ns, "get", "secret", "web-secret"]).is_ok());
    // The control plane's ConfigMap itself is untouched.
    assert!(get_json(&kc, &["-n", &ns, "get", "configmap", "web-config"]).is_ok());

    // propagateDeps turned off: the Secret is let go as well; the Deployment keeps running.
    apply_yaml(&kc, &policy(c2).replace("propagateDeps: true", "propagateDeps: false"));
    wait_for("attached Secret binding deleted", Duration::from_secs(120), || gone(&kc, &["-n", &ns, "get", "resourcebinding", "web-secret-secret"]));
    wait_for("secret gone from member2", Duration::from_secs(120), || gone(&m2, &["-n", &ns, "get", "secret", "web-secret"]));
    let rb = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "web-deployment"]).unwrap();
    let finalizers = rb["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
    assert!(!finalizers.iter().any(|f| f == "karmada.io/binding-dependencies-distributor"), "{rb}");
    assert!(get_json(&m2, &["-n", &ns, "get", "deployment", "web"]).is_ok());

    clean_up(&kc, &ns, [&m1, &m2], [c1, c2]);
    drop(cp);
}

/// A ConfigMap two Deployments share, and that its own policy also selects: the policy's
/// placement and the requirers' clusters both count; the attached binding keeps the policy's
/// settings.
#[test]
fn a_dependency_its_own_policy_selects_goes_where_both_say() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else {
        return;
    };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let (c1, c2) = ("shared1", "shared2");
    let (m1, m2) = join_two(&env, &kc, [c1, c2]);
    let ns = unique("shared");
    let deploy = |name: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n      - name: c\n        image: nginx:1.25\n        env:\n        - name: MODE\n          valueFrom:\n            configMapKeyRef:\n              name: shared\n              key: mode\n"
        )
    };
    let pp = |name: &str, kind: &str, target: &str, cluster: &str, extra: &str| {
        format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n{extra}  resourceSelectors:\n    - apiVersion: {}\n      kind: {kind}\n      name: {target}\n  placement:\n    clusterAffinity:\n      clusterNames: [{cluster}]\n",
            if kind == "ConfigMap" { "v1" } else { "apps/v1" }
        )
    };
    apply_yaml(
        &kc,
        &[
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n  namespace: {ns}\ndata:\n  mode: one\n"),
            deploy("a"),
            deploy("b"),
            pp("a", "Deployment", "a", c1, "  propagateDeps: true\n  conflictResolution: Overwrite\n"),
            pp("b", "Deployment", "b", c1, "  propagateDeps: true\n"),
        ]
        .join("---\n"),
    );
    // Both requirers listed, their settings resolved as Karmada does (Overwrite wins) with a
    // Warning Event naming the disagreement.
    let a = wait_for("attached binding required by both", Duration::from_secs(180), || {
        let a = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "shared-configmap"])?;
        if a["spec"]["requiredBy"].as_array().map(Vec::len) == Some(2) { Ok(a) } else { Err(a["spec"].to_string()) }
    });
    assert_eq!(a["spec"]["conflictResolution"], "Overwrite");
    wait_for("DependencyPolicyConflict event", Duration::from_secs(60), || {
        let list = get_json(&kc, &["-n", &ns, "get", "events"])?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let found = items.iter().any(|e| {
            e["reason"] == "DependencyPolicyConflict"
                && e["involvedObject"]["name"] == "shared-configmap"
                && e["message"].as_str().unwrap_or("").contains("ConflictResolution conflicted (Overwrite vs Abort)")
        });
        if found { Ok(()) } else { Err(format!("{} events, none the conflict", items.len())) }
    });
    wait_for("shared configmap in member1", Duration::from_secs(180), || get_json(&m1, &["-n", &ns, "get", "configmap", "shared"]));
    assert!(gone(&m2, &["-n", &ns, "get", "configmap", "shared"]).is_ok());

    // Its own policy places it in the second member: it now runs in both, the policy's
    // settings (Abort) win over the requirers', and requiredBy stays.
    apply_yaml(&kc, &pp("shared", "ConfigMap", "shared", c2, ""));
    wait_for("shared configmap in member2", Duration::from_secs(180), || get_json(&m2, &["-n", &ns, "get", "configmap", "shared"]));
    let a = wait_for("the policy's placement on the attached binding", Duration::from_secs(60), || {
        let a = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "shared-configmap"])?;
        if a["spec"]["placement"].is_object() && a["spec"]["conflictResolution"] == "Abort" { Ok(a) } else { Err(a["spec"].to_string()) }
    });
    assert_eq!(a["spec"]["requiredBy"].as_array().map(Vec::len), Some(2), "{a}");
    assert!(get_json(&m1, &["-n", &ns, "get", "configmap", "shared"]).is_ok());

    // Both requirers deleted: the binding stays (its policy claims it), only in member2.
    kubectl(&kubectl_bin(), &kc, &["-n", &ns, "delete", "deployment", "a", "b"]);
    wait_for("requiredBy emptied", Duration::from_secs(120), || {
        let a = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "shared-configmap"])?;
        if a["spec"]["requiredBy"].as_array().is_none_or(Vec::is_empty) { Ok(()) } else { Err(a["spec"].to_string()) }
    });
    wait_for("shared configmap gone from member1", Duration::from_secs(120), || gone(&m1, &["-n", &ns, "get", "configmap", "shared"]));
    assert!(get_json(&m2, &["-n", &ns, "get", "configmap", "shared"]).is_ok());

    clean_up(&kc, &ns, [&m1, &m2], [c1, c2]);
    drop(cp);
}
