//! `flotilla promote` end to end against real members (the shared testenv, with its
//! controllers and fake kubelet): a Deployment created directly in a member — and its ConfigMap,
//! and its namespace — becomes a resource template with a policy placing it on that member; the
//! member's objects are adopted where they are (same UIDs, no new ReplicaSet, the same pods) and
//! the binding ends FullyApplied with the member's status back on the template. The same through
//! a pull member's tunnel, for an object born at the edge. Refusals: an unknown cluster, an
//! object the member does not have, a namespace the control plane lacks, and an object that is
//! already a template.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use flotilla_api::federation::karmada::names::policy_name;
use serde_json::Value;
use support::{Flotilla, flotilla_cmd, get_json, gone, has_condition, kubectl, kubectl_bin, unique, wait_for};

const LONG: Duration = Duration::from_secs(120);

/// A namespace, a ConfigMap and a 2-replica Deployment reading it, created in the member.
fn create_in_member(member: &Path, ns: &str) {
    let yaml = format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{mode: edge}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, labels: {{app: web}}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        envFrom: [{{configMapRef: {{name: settings}}}}]
"#
    );
    support::apply_yaml(member, &yaml);
}

/// What must not change when the member's Deployment is adopted. (Its generation does: the
/// API server counts a Deployment's annotations as part of what a ReplicaSet copies, and the
/// adoption adds Karmada's.)
#[derive(Debug, PartialEq)]
struct Running {
    uid: String,
    spec: Value,
    replica_sets: BTreeSet<String>,
    pods: BTreeSet<String>,
}

fn running(member: &Path, ns: &str) -> Result<Running, String> {
    let d = get_json(member, &["-n", ns, "get", "deployment", "web"])?;
    let uids = |list: &Value| -> BTreeSet<String> {
        list["items"].as_array().into_iter().flatten().filter_map(|o| o["metadata"]["uid"].as_str().map(str::to_string)).collect()
    };
    let rs = get_json(member, &["-n", ns, "get", "replicasets", "-l", "app=web"])?;
    let pods = get_json(member, &["-n", ns, "get", "pods", "-l", "app=web"])?;
    Ok(Running { uid: d["metadata"]["uid"].as_str().unwrap_or_default().to_string(), spec: d["spec"].clone(), replica_sets: uids(&rs), pods: uids(&pods) })
}

/// The Deployment's 2 pods Running and Ready in the member.
fn wait_ready_in_member(member: &Path, ns: &str) -> Running {
    wait_for("web's 2 replicas ready in the member", LONG, || {
        let d = get_json(member, &["-n", ns, "get", "deployment", "web"])?;
        let now = running(member, ns)?;
        if d["status"]["readyReplicas"] == 2 && now.pods.len() == 2 { Ok(now) } else { Err(format!("{} {now:?}", d["status"])) }
    })
}

fn promote(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["promote"];
    all.extend(args);
    all.extend(["--control-plane-kubeconfig", kubeconfig.to_str().unwrap()]);
    flotilla_cmd(&all)
}

/// The binding of web FullyApplied on `cluster`, and the member's status on the template.
fn wait_adopted(kc: &Path, ns: &str, cluster: &str) {
    wait_for("web's binding FullyApplied", LONG, || {
        let rb = get_json(kc, &["-n", ns, "get", "resourcebinding", "web-deployment"])?;
        let item = &rb["status"]["aggregatedStatus"][0];
        if has_condition(&rb, "FullyApplied", "True") && item["clusterName"] == cluster && item["applied"] == true {
            Ok(())
        } else {
            Err(rb["status"].to_string())
        }
    });
    wait_for("the member's status on the template", LONG, || {
        let d = get_json(kc, &["-n", ns, "get", "deployment", "web"])?;
        if d["status"]["readyReplicas"] == 2 { Ok(()) } else { Err(d["status"].to_string()) }
    });
}

/// Adopted, and nothing replaced: the same Deployment, ReplicaSet and pods, now managed.
fn assert_kept(member: &Path, ns: &str, before: &Running) {
    let managed = get_json(member, &["-n", ns, "get", "deployment", "web"]).unwrap();
    assert_eq!(managed["metadata"]["labels"]["karmada.io/managed"], "true", "adopted: {}", managed["metadata"]);
    // Given time to roll, a changed pod template would show as a new ReplicaSet and new pods.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(&running(member, ns).unwrap(), before, "the member's Deployment (its spec as it was), ReplicaSet and pods are the ones it had");
}

#[test]
fn a_deployment_created_in_a_member_is_promoted_and_adopted_in_place() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let member = env.member("member1").kubeconfig.clone();
    let cluster = unique("legacy");
    let (ok, out) = flotilla_cmd(&["join", &cluster, "--kubeconfig", member.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "join: {out}");
    support::wait_cluster_ready(&kc, &cluster, "True");
    let ns = unique("promote");
    create_in_member(&member, &ns);
    let before = wait_ready_in_member(&member, &ns);
    let settings_uid = get_json(&member, &["-n", &ns, "get", "configmap", "settings"]).unwrap()["metadata"]["uid"].clone();

    // Refusals, each with its reason and a non-zero exit; nothing is created.
    let (ok, out) = promote(&kc, &["deployment/web", "-n", &ns, "--cluster", "nowhere"]);
    assert!(!ok && out.contains("cluster nowhere is not a member of this control plane"), "{out}");
    let (ok, out) = promote(&kc, &["deployment/absent", "-n", &ns, "--cluster", &cluster]);
    assert!(!ok && out.contains(&format!("deployment absent not found in namespace {ns} of cluster {cluster}")), "{out}");
    let (ok, out) = promote(&kc, &["deploy", "web", "-n", &ns, "-C", &cluster]);
    assert!(!ok && out.contains(&format!("namespace {ns} does not exist on the control plane")), "{out}");

    // -o prints what would be created and creates nothing (so does --dry-run, below).
    let (ok, out) = promote(&kc, &["deployment/web", "-n", &ns, "-C", &cluster, "-o", "yaml"]);
    assert!(ok, "{out}");
    let pp_name = policy_name(&ns, "web", "apps/v1", "Deployment");
    for line in [
        "kind: Deployment",
        "work.karmada.io/conflict-resolution: overwrite",
        "kind: PropagationPolicy",
        &format!("name: {pp_name}"),
        "conflictResolution: Overwrite",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    assert!(!out.contains("uid:") && !out.contains("resourceVersion:") && !out.contains("status:"), "server-set fields stripped:\n{out}");
    gone(&kc, &["-n", &ns, "get", "propagationpolicy", &pp_name]).unwrap();

    // The namespace first (cluster-scoped: a ClusterPropagationPolicy), then the Deployment
    // with what it depends on.
    let (ok, out) = promote(&kc, &[&format!("namespace/{ns}"), "--cluster", &cluster]);
    assert!(ok, "{out}");
    let cpp = get_json(&kc, &["get", "clusterpropagationpolicy", &policy_name("", &ns, "v1", "Namespace")]).unwrap();
    assert_eq!(cpp["spec"]["placement"]["clusterAffinity"]["clusterNames"][0], cluster.as_str(), "{cpp}");
    let (ok, out) = promote(&kc, &["deployment/web", "-n", &ns, "-C", &cluster, "-d", "--dry-run"]);
    assert!(ok && out.contains("configmap/settings created (dry run)") && out.contains("deployment.apps/web created (dry run)"), "{out}");
    gone(&kc, &["-n", &ns, "get", "deployment", "web"]).unwrap();
    let (ok, out) = promote(&kc, &["deployment/web", "-n", &ns, "--cluster", &cluster, "--dependencies"]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("propagationpolicy.policy.karmada.io/{pp_name} created")), "{out}");
    assert!(out.contains("configmap/settings created") && out.contains("deployment.apps/web created"), "{out}");

    let template = get_json(&kc, &["-n", &ns, "get", "deployment", "web"]).unwrap();
    assert_eq!(template["metadata"]["annotations"]["work.karmada.io/conflict-resolution"], "overwrite");
    assert_ne!(template["metadata"]["uid"], before.uid.as_str(), "the template is an object of its own");
    let pp = get_json(&kc, &["-n", &ns, "get", "propagationpolicy", &pp_name]).unwrap();
    assert_eq!(pp["spec"]["resourceSelectors"][0]["name"], "web");
    assert_eq!(pp["spec"]["conflictResolution"], "Overwrite");
    assert_eq!(pp["spec"]["propagateDeps"], true);
    assert_eq!(pp["spec"]["preserveResourcesOnDeletion"], true);

    wait_adopted(&kc, &ns, &cluster);
    assert_kept(&member, &ns, &before);
    // The ConfigMap, propagated as web's dependency, is adopted too.
    let settings = wait_for("the ConfigMap adopted as a dependency", LONG, || {
        let c = get_json(&member, &["-n", &ns, "get", "configmap", "settings"])?;
        if c["metadata"]["labels"]["karmada.io/managed"] == "true" { Ok(c) } else { Err(c["metadata"].to_string()) }
    });
    assert_eq!(settings["metadata"]["uid"], settings_uid, "the member's ConfigMap is the one it had");

    // Promoted once: a second promotion is refused.
    let (ok, out) = promote(&kc, &["deployment/web", "-n", &ns, "--cluster", &cluster]);
    assert!(!ok && out.contains("is already a resource template on the control plane"), "{out}");
    drop(cp);
    kubectl(&kubectl_bin(), &member, &["delete", "namespace", &ns, "--wait=false"]);
}

#[test]
fn a_deployment_born_at_a_pull_member_is_promoted_through_the_tunnel() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let member = env.member("member2").kubeconfig.clone();
    let cluster = unique("edge");
    let agent_kc = support::pull::register(&kc, cp.dir.path(), &cluster);
    let agent = support::pull::agent(&cluster, &agent_kc, &member);
    support::wait_cluster_ready(&kc, &cluster, "True");
    let ns = unique("born");
    create_in_member(&member, &ns);
    let before = wait_ready_in_member(&member, &ns);

    // Read through the agent's tunnel: the control plane holds no address of the member.
    kubectl(&kubectl_bin(), &kc, &["create", "namespace", &ns]);
    let (ok, out) = promote(&kc, &["deployment", "web", "-n", &ns, "-C", &cluster, "--policy-name", "adopt-web"]);
    assert!(ok, "{out}");
    let pp = get_json(&kc, &["-n", &ns, "get", "propagationpolicy", "adopt-web"]).unwrap();
    assert_eq!(pp["spec"]["placement"]["clusterAffinity"]["clusterNames"][0], cluster.as_str(), "{pp}");
    assert!(pp["spec"].get("propagateDeps").is_none(), "no dependencies asked for: {pp}");

    wait_adopted(&kc, &ns, &cluster);
    assert_kept(&member, &ns, &before);
    drop(agent);
    drop(cp);
    kubectl(&kubectl_bin(), &member, &["delete", "namespace", &ns, "--wait=false"]);
}
