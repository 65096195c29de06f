//! KubeFed's API against real kube-apiservers (the shared testenv; each test skips without one):
//! a ReplicaSchedulingPreference splitting a FederatedDeployment over two members, and
//! `flotilla enable` of a CRD kind Flotilla does not know followed by a federated object of that
//! kind reaching the members. Members join under names unique to the test run, so the
//! identities (service account, cluster role) they get in the shared members are their own.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Flotilla, apply_yaml, crd_yaml, flotilla_cmd, get_json, kubectl, kubectl_bin, unique, wait_cluster_ready, wait_for};

const LONG: Duration = Duration::from_secs(180);

/// Two testenv members joined to `cp` under fresh names, with `extra` passed to `flotilla join`.
fn join_two(env: &flotilla_testenv::TestEnv, cp: &Flotilla, extra: &[&str]) -> Vec<(String, PathBuf)> {
    let base = unique("m");
    let kc = cp.kubeconfig.to_str().unwrap();
    let mut out = Vec::new();
    for (i, testenv_name) in ["member1", "member2"].iter().enumerate() {
        let name = format!("{base}-{}", i + 1);
        let mk = env.member(testenv_name).kubeconfig.clone();
        let mut args = vec!["join", &name, "--kubeconfig", mk.to_str().unwrap(), "--control-plane-kubeconfig", kc];
        args.extend(extra);
        let (ok, printed) = flotilla_cmd(&args);
        assert!(ok, "join {name} failed:\n{printed}");
        wait_cluster_ready(&cp.kubeconfig, &name, "True");
        out.push((name, mk));
    }
    out
}

/// Remove what the test left in the shared members: its namespace and its join identities.
fn clean_members(cp: &Flotilla, members: &[(String, PathBuf)], ns: &str) {
    for (name, mk) in members {
        let _ = std::process::Command::new(kubectl_bin()).arg("--kubeconfig").arg(mk).args(["delete", "namespace", ns, "--wait=false"]).output();
        let (ok, out) = flotilla_cmd(&[
            "unjoin",
            name,
            "--yes",
            "--kubeconfig",
            mk.to_str().unwrap(),
            "--control-plane-kubeconfig",
            cp.kubeconfig.to_str().unwrap(),
            "--wait-seconds",
            "60",
        ]);
        if !ok {
            eprintln!("unjoin {name}: {out}");
        }
    }
}

fn member_replicas(mk: &Path, ns: &str) -> Result<Value, String> {
    get_json(mk, &["-n", ns, "get", "deployment", "web"]).map(|d| d["spec"]["replicas"].clone())
}

fn wait_replicas(name: &str, mk: &Path, ns: &str, want: i64) {
    wait_for(&format!("{name} at {want} replicas"), LONG, || member_replicas(mk, ns).and_then(|r| if r == want { Ok(()) } else { Err(r.to_string()) }));
}

#[test]
fn a_replica_scheduling_preference_on_real_members() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    let members = join_two(&env, &cp, &[]);
    let (a, b) = (&members[0].0, &members[1].0);
    let ns = unique("rsp");
    kubectl(&kubectl_bin(), &kc, &["create", "namespace", &ns]);
    support::federate_namespace(&kc, &ns);
    let template = "    spec:\n      replicas: 1\n      selector: {matchLabels: {app: web}}\n      template:\n        metadata: {labels: {app: web}}\n        spec:\n          containers: [{name: web, image: nginx}]\n";
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedDeployment\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  template:\n{template}  placement:\n    clusters: [{{name: {a}}}]\n---\napiVersion: scheduling.kubefed.io/v1alpha1\nkind: ReplicaSchedulingPreference\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  targetKind: FederatedDeployment\n  totalReplicas: 9\n  rebalance: true\n  clusters:\n    {a}: {{minReplicas: 2, maxReplicas: 6, weight: 1}}\n    {b}: {{minReplicas: 2, maxReplicas: 6, weight: 2}}\n"
        ),
    );
    // KubeFed's planner: 9 over weights 1:2 within [2, 6] → 3 and 6; the RSP's placement
    // replaces the object's own (only the first member), so both members run their share.
    wait_replicas(a, &members[0].1, &ns, 3);
    wait_replicas(b, &members[1].1, &ns, 6);
    let fd = get_json(&kc, &["-n", &ns, "get", "federateddeployment", "web"]).unwrap();
    assert_eq!(fd["spec"]["placement"]["clusters"], json!([{"name": a}, {"name": b}]));

    // A change of the RSP re-plans: weights 1:1 split 9 as the planner does (the tie broken by
    // KubeFed's hash of the names).
    let body = json!({"spec": {"clusters": {b.as_str(): {"weight": 1}}}}).to_string();
    kubectl(&kubectl_bin(), &kc, &["-n", &ns, "patch", "rsp", "web", "--type", "merge", "-p", &body]);
    let prefs = json!({a.as_str(): {"minReplicas": 2, "maxReplicas": 6, "weight": 1}, b.as_str(): {"minReplicas": 2, "maxReplicas": 6, "weight": 1}});
    let prefs = serde_json::from_value(prefs).unwrap();
    let clusters = [a.clone(), b.clone()];
    let plan = flotilla_controllers::kubefed_rsp::planner::plan(&flotilla_controllers::kubefed_rsp::planner::PlanInput {
        total_replicas: 9,
        preferences: &prefs,
        clusters: &clusters,
        current: &Default::default(),
        capacity: &Default::default(),
        rebalance: true,
        key: &format!("{ns}/web"),
    });
    assert_eq!(plan.replicas.values().sum::<i64>(), 9);
    let mut shares: Vec<i64> = plan.replicas.values().copied().collect();
    shares.sort();
    assert_eq!(shares, [4, 5], "{plan:?}");
    for (name, mk) in &members {
        wait_replicas(name, mk, &ns, plan.replicas[name]);
    }
    clean_members(&cp, &members, &ns);
    drop(cp);
}

#[test]
fn an_enabled_crd_kind_unknown_to_flotilla_reaches_real_members() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    // A group of this run's own, so runs sharing the members do not meet.
    let group = format!("{}.istio.example.com", unique("net"));
    let plural_group = format!("virtualservices.{group}");
    let crd = crd_yaml(&group, "VirtualService", "virtualservices", "vs");
    let k = kubectl_bin();
    for m in ["member1", "member2"] {
        let mk = &env.member(m).kubeconfig;
        apply_yaml(mk, &crd);
        kubectl(&k, mk, &["wait", "--for", "condition=Established", "--timeout=60s", &format!("crd/{plural_group}")]);
    }
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    apply_yaml(&kc, &crd);
    // The documented path: the member role covers the kind through `join --allow-kinds`.
    let members = join_two(&env, &cp, &["--allow-kinds", &plural_group]);
    let (ok, out) = flotilla_cmd(&["enable", &plural_group, "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.contains("customresourcedefinition.apiextensions.k8s.io/federatedvirtualservices.types.kubefed.io created"), "{out}");
    assert!(out.contains(&format!("--allow-kinds {plural_group}")), "enable names the member permission it needs: {out}");

    let ns = unique("mesh");
    kubectl(&k, &kc, &["create", "namespace", &ns]);
    support::federate_namespace(&kc, &ns);
    let (a, b) = (&members[0].0, &members[1].0);
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedVirtualService\nmetadata: {{name: reviews, namespace: {ns}}}\nspec:\n  template:\n    spec:\n      hosts: [reviews]\n      http:\n      - route:\n        - destination: {{host: reviews, subset: v1}}\n  placement:\n    clusters: [{{name: {a}}}, {{name: {b}}}]\n  overrides:\n  - clusterName: {b}\n    clusterOverrides:\n    - path: /spec/hosts/0\n      value: reviews.{b}\n"
        ),
    );
    for (name, mk) in &members {
        let vs = wait_for(&format!("the VirtualService in {name}"), LONG, || get_json(mk, &["-n", &ns, "get", &plural_group, "reviews"]));
        assert_eq!(vs["apiVersion"], format!("{group}/v1"));
        assert_eq!(vs["metadata"]["labels"]["kubefed.io/managed"], "true");
        assert_eq!(vs["spec"]["http"][0]["route"][0]["destination"], json!({"host": "reviews", "subset": "v1"}));
        let host = if name == b { format!("reviews.{b}") } else { "reviews".to_string() };
        assert_eq!(vs["spec"]["hosts"], json!([host]));
    }
    wait_for("Propagation True", LONG, || {
        let o = get_json(&kc, &["-n", &ns, "get", "federatedvirtualservice", "reviews"])?;
        if support::has_condition(&o, "Propagation", "True") { Ok(()) } else { Err(o["status"].to_string()) }
    });
    clean_members(&cp, &members, &ns);
    for m in ["member1", "member2"] {
        let _ =
            std::process::Command::new(&k).arg("--kubeconfig").arg(&env.member(m).kubeconfig).args(["delete", "crd", &plural_group, "--wait=false"]).output();
    }
    drop(cp);
}
