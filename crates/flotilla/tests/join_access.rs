//! The member role `flotilla join` creates, against a real kube-apiserver (the shared testenv):
//! the default role covers every kind the member serves at join — a Pod and Karmada's nginx
//! sample propagate with their status collected — but withholds RBAC; a Work refused for a
//! missing right names it and the command that grants it; `flotilla join --update` derives the
//! role again for a CRD installed after join, and `--access full` (Karmada's rights) lets
//! Roles, RoleBindings and ClusterRoles through.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, kubectl_bin, unique, wait_for};

/// A namespaced CRD with a status subresource.
fn crd_with_status(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gizmos.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gizmos, singular: gizmo, kind: Gizmo}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    subresources: {{status: {{}}}}\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    )
}

/// The Work of binding `rb` (in `ns`) in cluster `cluster`'s execution space, once it has an
/// `Applied` condition of `status`.
fn work_applied(kc: &std::path::Path, ns: &str, rb: &str, cluster: &str, status: &str) -> serde_json::Value {
    wait_for(&format!("the Work of {ns}/{rb} Applied={status}"), Duration::from_secs(180), || {
        let works = get_json(kc, &["-n", &format!("karmada-es-{cluster}"), "get", "works"])?;
        let items = works["items"].as_array().cloned().unwrap_or_default();
        let of_binding = |w: &serde_json::Value| {
            let a = &w["metadata"]["annotations"];
            a["resourcebinding.karmada.io/name"] == rb && a["resourcebinding.karmada.io/namespace"] == ns
        };
        let w = items.into_iter().find(of_binding).ok_or("no Work yet")?;
        let c = w["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Applied").cloned().ok_or_else(|| w["status"].to_string())?;
        if c["status"] == status { Ok(c) } else { Err(c.to_string()) }
    })
}

fn in_member(member: &std::path::Path, args: &[&str]) -> Result<serde_json::Value, String> {
    get_json(member, args)
}

#[test]
fn the_default_role_covers_served_kinds_and_full_access_adds_rbac() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let kc_s = kc.to_str().unwrap();
    let m = env.member("member3").kubeconfig.clone();
    let m_s = m.to_str().unwrap();
    let name = unique("access");
    let ns = unique("access");
    let group = format!("{}.flotilla.example.com", unique("gizmo"));
    let viewer = unique("viewer");
    let k = kubectl_bin();
    let run = |kubeconfig: &std::path::Path, args: &[&str]| Command::new(&k).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap();

    // Join with the default access: Pods and status subresources are covered, RBAC is not.
    let (ok, out) = flotilla_cmd(&["join", &name, "--kubeconfig", m_s, "--control-plane-kubeconfig", kc_s]);
    assert!(ok, "join failed:\n{out}");
    assert!(out.contains("rules over the kinds the member serves, no wildcards"), "{out}");
    support::wait_cluster_ready(&kc, &name, "True");
    let secret = get_json(&kc, &["-n", "karmada-cluster", "get", "secret", &name]).unwrap();
    let decode = |k: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(secret["data"][k].as_str().unwrap()).unwrap()
    };
    let token = String::from_utf8(decode("token")).unwrap();
    let ca = cp.dir.path().join("member-ca.crt");
    std::fs::write(&ca, decode("caBundle")).unwrap();
    let server = env.member("member3").server.clone();
    let can_i = |args: &[&str]| {
        let out = Command::new(kubectl_bin())
            .args(["--server", &server, "--token", &token, "--certificate-authority", ca.to_str().unwrap(), "auth", "can-i"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(can_i(&["create", "pods", "-n", "anywhere"]), "yes");
    assert_eq!(can_i(&["update", "deployments.apps", "--subresource=status", "-n", "anywhere"]), "yes");
    assert_eq!(can_i(&["create", "roles.rbac.authorization.k8s.io", "-n", "anywhere"]), "no");
    assert_eq!(can_i(&["create", "validatingadmissionpolicies.admissionregistration.k8s.io"]), "no");
    assert_eq!(can_i(&["create", "pods", "--subresource=exec", "-n", "anywhere"]), "no");
    assert_eq!(can_i(&["create", "serviceaccounts", "--subresource=token", "-n", "anywhere"]), "no");
    assert_eq!(can_i(&["delete", "nodes"]), "no");

    // Karmada's nginx sample, a Pod, a Role and its RoleBinding; a ClusterRole.
    let yaml = format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: nginx, namespace: {ns}, labels: {{app: nginx}}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: nginx}}}}
  template:
    metadata: {{labels: {{app: nginx}}}}
    spec:
      containers: [{{name: nginx, image: "nginx:1.25"}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: solo, namespace: {ns}}}
spec:
  containers: [{{name: solo, image: "nginx:1.25"}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {ns}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects: [{{kind: ServiceAccount, name: default, namespace: {ns}}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {viewer}}}
rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get]}}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: nginx-propagation, namespace: {ns}}}
spec:
  resourceSelectors:
    - {{apiVersion: apps/v1, kind: Deployment, name: nginx}}
    - {{apiVersion: v1, kind: Pod, name: solo}}
    - {{apiVersion: rbac.authorization.k8s.io/v1, kind: Role, name: reader}}
    - {{apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, name: reader}}
  placement:
    clusterAffinity: {{clusterNames: [{name}]}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: ClusterPropagationPolicy
metadata: {{name: {viewer}}}
spec:
  resourceSelectors:
    - {{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, name: {viewer}}}
  placement:
    clusterAffinity: {{clusterNames: [{name}]}}
"#
    );
    apply_yaml(&kc, &yaml);

    // The Deployment and the Pod run in the member, and their status comes back.
    wait_for("nginx ready replicas on the template", Duration::from_secs(240), || {
        let d = get_json(&kc, &["-n", &ns, "get", "deployment", "nginx"])?;
        if d["status"]["readyReplicas"] == 2 { Ok(()) } else { Err(d["status"].to_string()) }
    });
    in_member(&m, &["-n", &ns, "get", "pod", "solo"]).expect("the Pod runs in the member");
    wait_for("the Pod's status collected on its binding", Duration::from_secs(180), || {
        let rb = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "solo-pod"])?;
        let status = &rb["status"]["aggregatedStatus"][0];
        if status["clusterName"] == name.as_str() && status["applied"] == true && status["status"]["phase"].is_string() {
            Ok(())
        } else {
            Err(rb["status"].to_string())
        }
    });

    // The Role is refused: the condition and the Event name the right and the command.
    let refused = work_applied(&kc, &ns, "reader-role", &name, "False");
    let message = refused["message"].as_str().unwrap_or_default();
    // The first request the member refuses is the read before the write, or the create itself
    // when the execution controller's cache already says the Role is absent.
    assert!(
        message.contains("refused to get roles.rbac.authorization.k8s.io") || message.contains("refused to create roles.rbac.authorization.k8s.io"),
        "{message}"
    );
    assert!(message.contains(&format!("flotilla join {name} --kubeconfig <the member's admin kubeconfig> --update --access full")), "{message}");
    wait_for("a SyncFailed Event naming the command", Duration::from_secs(60), || {
        let events = get_json(&kc, &["-n", &format!("karmada-es-{name}"), "get", "events"])?;
        let found = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["reason"] == "SyncFailed" && e["message"].as_str().is_some_and(|m| m.contains("--update --access full")));
        if found { Ok(()) } else { Err(events.to_string()) }
    });

    // A CRD installed after join: its object is refused until `join --update`.
    let crd = crd_with_status(&group);
    apply_yaml(&m, &crd);
    apply_yaml(&kc, &crd);
    for kubeconfig in [&m, &kc] {
        wait_for("the CRD served", Duration::from_secs(60), || {
            let out = run(kubeconfig, &["get", &format!("gizmos.{group}"), "-A"]);
            if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).to_string()) }
        });
    }
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: {group}/v1\nkind: Gizmo\nmetadata: {{name: g1, namespace: {ns}}}\nspec: {{size: 3}}\n---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: gizmos, namespace: {ns}}}\nspec:\n  resourceSelectors: [{{apiVersion: {group}/v1, kind: Gizmo}}]\n  placement:\n    clusterAffinity: {{clusterNames: [{name}]}}\n"
        ),
    );
    let refused = work_applied(&kc, &ns, "g1-gizmo", &name, "False");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("gizmos.{group}")) && message.contains(&format!("flotilla join {name} ")) && message.contains("--update"), "{message}");
    let (ok, out) = flotilla_cmd(&["join", &name, "--kubeconfig", m_s, "--control-plane-kubeconfig", kc_s, "--update"]);
    assert!(ok, "join --update failed:\n{out}");
    assert!(out.contains("(access default)") && out.contains("retried now"), "{out}");
    work_applied(&kc, &ns, "g1-gizmo", &name, "True");
    let g = in_member(&m, &["-n", &ns, "get", &format!("gizmos.{group}"), "g1"]).expect("the Gizmo reaches the member");
    assert_eq!(g["spec"]["size"], 3);
    // Its status, written in the member, is collected through the role's gizmos/status.
    assert_eq!(can_i(&["update", &format!("gizmos.{group}"), "--subresource=status", "-n", &ns]), "yes");
    let out = run(&m, &["-n", &ns, "patch", &format!("gizmos.{group}"), "g1", "--subresource=status", "--type=merge", "-p", r#"{"status":{"state":"ready"}}"#]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for("the Gizmo's status collected", Duration::from_secs(180), || {
        let rb = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "g1-gizmo"])?;
        if rb["status"]["aggregatedStatus"][0]["status"]["state"] == "ready" { Ok(()) } else { Err(rb["status"].to_string()) }
    });
    // Still no RBAC: --update keeps the recorded access.
    assert_eq!(can_i(&["create", "roles.rbac.authorization.k8s.io", "-n", "anywhere"]), "no");

    // Full access: the Role, the RoleBinding and the ClusterRole go through.
    let (ok, out) = flotilla_cmd(&["join", &name, "--kubeconfig", m_s, "--control-plane-kubeconfig", kc_s, "--update", "--access", "full"]);
    assert!(ok, "join --update --access full failed:\n{out}");
    for rb in ["reader-role", "reader-rolebinding"] {
        work_applied(&kc, &ns, rb, &name, "True");
    }
    in_member(&m, &["-n", &ns, "get", "role", "reader"]).expect("the Role in the member");
    in_member(&m, &["-n", &ns, "get", "rolebinding", "reader"]).expect("the RoleBinding in the member");
    wait_for("the ClusterRole in the member", Duration::from_secs(180), || in_member(&m, &["get", "clusterrole", &viewer]));
    let (ok, out) = flotilla_cmd(&["join", &name, "--kubeconfig", m_s, "--access", "admin"]);
    assert!(!ok && out.contains("expected default or full"), "{out}");

    // Clean the member for the next run.
    let (ok, out) = flotilla_cmd(&["unjoin", &name, "--control-plane-kubeconfig", kc_s, "--kubeconfig", m_s, "--wait-seconds", "120"]);
    assert!(ok, "unjoin failed:\n{out}");
    for args in [vec!["delete", "namespace", &ns, "--wait=false"], vec!["delete", "clusterrole", &viewer], vec!["delete", "crd", &format!("gizmos.{group}")]] {
        let _ = run(&m, &args);
    }
    drop(cp);
}
