//! The federation controllers out of process against a plain kube-apiserver host: testenv's
//! member3 gets the federation CRDs (`flotilla crds`) and nothing else of Flotilla — no
//! admission chain, no Flotilla API server — and `flotilla controllers` propagates a Deployment
//! divided by static weights (and overridden for one cluster) to member1 and member2. Proof
//! that the controllers rely on no Flotilla-only API behaviour.
//!
//! The host is a real cluster with kube-controller-manager's deployment controller (Karmada's
//! host runs none), so the template also runs on member3 itself and that controller writes the
//! same totals to the template's status; the per-cluster status in the binding comes only from
//! the members, and an AggregateStatusSucceed Event shows the binding controller's write.
//! While the test runs, a namespace another test creates in member3 is auto-propagated to
//! member1 and member2 as on any Karmada host; unjoin keeps it there (namespace Works preserve
//! what they created), so nothing of another test's is ever deleted.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{Daemon, apply_yaml, flotilla_cmd, get_json, has_condition, kubectl_bin, unique, wait_for};

/// `flotilla crds | kubectl apply --server-side -f -` into the host, then wait until served.
/// Cluster-scoped and server-side applied: a rerun (or another test doing the same) is a no-op.
fn install_crds(host: &Path) {
    let (ok, crds) = flotilla_cmd(&["crds"]);
    assert!(ok, "flotilla crds failed:\n{crds}");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &crds).unwrap();
    let file = file.path().to_str().unwrap();
    for args in [
        vec!["apply", "--server-side", "--force-conflicts", "--field-manager", "flotilla-crds", "-f", file],
        vec!["wait", "--for", "condition=Established", "--timeout", "60s", "-f", file],
    ] {
        let out = Command::new(kubectl_bin()).arg("--kubeconfig").arg(host).args(&args).stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?} on the host failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
}

fn label<'a>(obj: &'a serde_json::Value, key: &str) -> &'a str {
    obj["metadata"]["labels"][key].as_str().unwrap_or_else(|| panic!("no label {key} on {}", obj["metadata"]))
}

fn annotation<'a>(obj: &'a serde_json::Value, key: &str) -> &'a str {
    obj["metadata"]["annotations"][key].as_str().unwrap_or_else(|| panic!("no annotation {key} on {}", obj["metadata"]))
}

#[test]
fn controllers_out_of_process_on_a_plain_kube_apiserver_host() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let host = env.member("member3").kubeconfig.clone();
    let host_s = host.to_str().unwrap();
    let m1 = env.member("member1").kubeconfig.clone();
    let m2 = env.member("member2").kubeconfig.clone();
    install_crds(&host);

    let start_controllers = || {
        let mut controllers = Daemon::start(
            &[
                "controllers",
                "--kubeconfig",
                host_s,
                "--cluster-status-update-frequency",
                "1s",
                "--cluster-success-threshold",
                "1s",
                "--unschedulable-retry",
                "2s",
            ],
            "warn",
        );
        controllers.wait_line("controllers running", Duration::from_secs(60));
        controllers
    };
    // Nothing the controllers wrote was unknown to the CRDs (the host would have pruned it and
    // said so in a Warning header, which the controllers log), and SIGTERM ends them cleanly.
    let stop_controllers = |controllers: Daemon| {
        let warned: Vec<String> = controllers.stderr().into_iter().filter(|l| l.contains("the host API server warned")).collect();
        assert!(warned.is_empty(), "the host warned about what the controllers wrote:\n{}", warned.join("\n"));
        let status = controllers.stop();
        assert!(status.is_some_and(|s| s.success()), "flotilla controllers did not exit cleanly on SIGTERM: {status:?}");
    };
    let controllers = start_controllers();

    // Cluster names of this test only: member1 and member2 are shared with other tests.
    let clusters = [("oop-m1", &m1), ("oop-m2", &m2)];
    for (name, member) in clusters {
        let (ok, out) = flotilla_cmd(&["join", name, "--kubeconfig", member.to_str().unwrap(), "--control-plane-kubeconfig", host_s]);
        assert!(ok, "join {name} failed:\n{out}");
    }
    for (name, _) in clusters {
        wait_for(&format!("cluster {name} Ready on the host"), Duration::from_secs(120), || {
            let c = get_json(&host, &["get", "cluster", name])?;
            if has_condition(&c, "Ready", "True") { Ok(()) } else { Err(c["status"].to_string()) }
        });
        // Karmada's default resource models, which no admission added here: join wrote them.
        let c = get_json(&host, &["get", "cluster", name]).unwrap();
        assert_eq!(c["spec"]["resourceModels"].as_array().map(Vec::len), Some(9), "{}", c["spec"]);
    }

    let ns = unique("oop");
    apply_yaml(
        &host,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx
  namespace: {ns}
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: nginx-propagation
  namespace: {ns}
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  placement:
    clusterAffinity:
      clusterNames: [oop-m1, oop-m2]
    replicaScheduling:
      replicaSchedulingType: Divided
      weightPreference:
        staticWeightList:
          - targetCluster:
              clusterNames: [oop-m1]
            weight: 2
          - targetCluster:
              clusterNames: [oop-m2]
            weight: 1
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata:
  name: mirror-registry
  namespace: {ns}
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  overrideRules:
    - targetCluster:
        clusterNames: [oop-m2]
      overriders:
        imageOverrider:
          - component: Registry
            operator: replace
            value: mirror.example.com
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: {ns}
data:
  mode: federated
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: settings-everywhere
  namespace: {ns}
spec:
  resourceSelectors:
    - apiVersion: v1
      kind: ConfigMap
      name: settings
  placement:
    clusterAffinity:
      clusterNames: [oop-m1, oop-m2]
    spreadConstraints:
      - maxGroups: 2
    replicaScheduling:
      replicaSchedulingType: Duplicated
"#
        ),
    );

    // The policy got its permanent id from the detector (no webhook on this host).
    let policy_id = wait_for("policy permanent id", Duration::from_secs(60), || {
        let pp = get_json(&host, &["-n", &ns, "get", "propagationpolicy", "nginx-propagation"])?;
        pp["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"].as_str().map(String::from).ok_or_else(|| pp["metadata"].to_string())
    });

    // The binding: claimed by the policy, with its own permanent id, scheduled 2:1, fully applied.
    let rb = wait_for("binding FullyApplied", Duration::from_secs(180), || {
        let rb = get_json(&host, &["-n", &ns, "get", "resourcebinding", "nginx-deployment"])?;
        if has_condition(&rb, "FullyApplied", "True") { Ok(rb) } else { Err(rb["status"].to_string()) }
    });
    assert_eq!(label(&rb, "propagationpolicy.karmada.io/permanent-id"), policy_id);
    let binding_id = label(&rb, "resourcebinding.karmada.io/permanent-id").to_string();
    assert!(!binding_id.is_empty());
    let placed: Vec<(String, i64)> =
        rb["spec"]["clusters"].as_array().unwrap().iter().map(|c| (c["name"].as_str().unwrap().to_string(), c["replicas"].as_i64().unwrap_or(0))).collect();
    assert_eq!(placed, vec![("oop-m1".to_string(), 2), ("oop-m2".to_string(), 1)]);
    // Each controller has its own User-Agent, so the host names it as the field manager.
    let rb = get_json(&host, &["-n", &ns, "get", "resourcebinding", "nginx-deployment", "--show-managed-fields"]).unwrap();
    let managers: Vec<&str> = rb["metadata"]["managedFields"].as_array().into_iter().flatten().filter_map(|f| f["manager"].as_str()).collect();
    for manager in ["flotilla-resource-detector", "flotilla-scheduler", "flotilla-binding-controller"] {
        assert!(managers.contains(&manager), "{manager} not among {managers:?}");
    }

    // Each member runs its share, oop-m2 with the overridden image, labelled and annotated as
    // Karmada does; the Work behind it carries the same ids.
    for ((cluster, member), (replicas, image)) in clusters.iter().zip([(2, "nginx:1.25"), (1, "mirror.example.com/nginx:1.25")]) {
        let d = wait_for(&format!("deployment in {cluster}"), Duration::from_secs(120), || {
            let d = get_json(member, &["-n", &ns, "get", "deployment", "nginx"])?;
            if d["spec"]["replicas"] == replicas { Ok(d) } else { Err(d["spec"].to_string()) }
        });
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], image);
        assert_eq!(label(&d, "karmada.io/managed"), "true");
        assert_eq!(label(&d, "resourcebinding.karmada.io/permanent-id"), binding_id);
        assert_eq!(annotation(&d, "resourcebinding.karmada.io/namespace"), ns);
        assert_eq!(annotation(&d, "resourcebinding.karmada.io/name"), "nginx-deployment");
        let es = format!("karmada-es-{cluster}");
        assert_eq!(annotation(&d, "work.karmada.io/namespace"), es);
        let work_name = annotation(&d, "work.karmada.io/name");
        assert!(work_name.starts_with("nginx-"), "{work_name}");
        let work = get_json(&host, &["-n", &es, "get", "work", work_name]).unwrap();
        let work_id = label(&work, "work.karmada.io/permanent-id");
        assert!(!work_id.is_empty());
        assert_eq!(label(&d, "work.karmada.io/permanent-id"), work_id);
        assert_eq!(label(&work, "resourcebinding.karmada.io/permanent-id"), binding_id);
        let managed = annotation(&d, "resourcetemplate.karmada.io/managed-labels");
        assert!(managed.contains("work.karmada.io/permanent-id"), "{managed}");
        annotation(&d, "resourcetemplate.karmada.io/uid");
    }

    // Webhook defaults the host did not set are the detector's: Weighted for Divided, and a
    // spread constraint without a field spreads by cluster over at least one group.
    assert_eq!(rb["spec"]["placement"]["replicaScheduling"]["replicaDivisionPreference"], "Weighted");
    let cm_rb = wait_for("ConfigMap binding FullyApplied", Duration::from_secs(120), || {
        let rb = get_json(&host, &["-n", &ns, "get", "resourcebinding", "settings-configmap"])?;
        if has_condition(&rb, "FullyApplied", "True") { Ok(rb) } else { Err(rb["status"].to_string()) }
    });
    assert_eq!(cm_rb["spec"]["placement"]["spreadConstraints"], serde_json::json!([{"spreadByField": "cluster", "maxGroups": 2, "minGroups": 1}]));
    for (cluster, member) in clusters {
        let cm = get_json(member, &["-n", &ns, "get", "configmap", "settings"]).unwrap_or_else(|e| panic!("ConfigMap in {cluster}: {e}"));
        assert_eq!(cm["data"]["mode"], "federated");
    }

    // A policy Karmada's webhook would refuse is stored by this host; the detector says why.
    apply_yaml(
        &host,
        &format!(
            r#"apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: refused-by-karmada
  namespace: {ns}
spec:
  preemption: Always
  resourceSelectors:
    - apiVersion: v1
      kind: Secret
      labelSelector:
        matchLabels:
          selects: nothing
"#
        ),
    );
    wait_for("InvalidPolicy Event", Duration::from_secs(60), || {
        let events = get_json(&host, &["-n", &ns, "get", "events", "--field-selector", "involvedObject.name=refused-by-karmada,reason=InvalidPolicy"])?;
        let notes: Vec<&str> = events["items"].as_array().into_iter().flatten().filter_map(|e| e["message"].as_str()).collect();
        if notes.iter().any(|n| n.contains("name cannot be empty if preemption is Always")) { Ok(()) } else { Err(format!("{notes:?}")) }
    });

    // Status flows back: each member's ready replicas in the binding, their sum on the template.
    wait_for("per-cluster status in the binding", Duration::from_secs(240), || {
        let rb = get_json(&host, &["-n", &ns, "get", "resourcebinding", "nginx-deployment"])?;
        let items = rb["status"]["aggregatedStatus"].as_array().cloned().unwrap_or_default();
        let got: Vec<(String, i64, String)> = items
            .iter()
            .map(|i| {
                (
                    i["clusterName"].as_str().unwrap_or("").to_string(),
                    i["status"]["readyReplicas"].as_i64().unwrap_or(0),
                    i["health"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let want = vec![("oop-m1".to_string(), 2, "Healthy".to_string()), ("oop-m2".to_string(), 1, "Healthy".to_string())];
        if got == want { Ok(()) } else { Err(format!("{got:?}")) }
    });
    wait_for("aggregated status on the template", Duration::from_secs(120), || {
        let d = get_json(&host, &["-n", &ns, "get", "deployment", "nginx"])?;
        let s = &d["status"];
        let ok = s["readyReplicas"] == 3 && s["replicas"] == 3 && s["observedGeneration"] == d["metadata"]["generation"];
        if ok { Ok(()) } else { Err(s.to_string()) }
    });
    // The host's own deployment controller reaches the same figures for its copy, so the Event
    // shows that the binding controller wrote the template's status.
    wait_for("AggregateStatusSucceed on the template", Duration::from_secs(60), || {
        let events = get_json(&host, &["-n", &ns, "get", "events", "--field-selector", "involvedObject.kind=Deployment,involvedObject.name=nginx"])?;
        let reasons: Vec<&str> = events["items"].as_array().into_iter().flatten().filter_map(|e| e["reason"].as_str()).collect();
        if reasons.contains(&"AggregateStatusSucceed") { Ok(()) } else { Err(format!("{reasons:?}")) }
    });

    // Restarted, the controllers start from LISTs, whose items a real server sends without
    // apiVersion and kind, and pick up where they left off: a scale-out is divided 4:2.
    stop_controllers(controllers);
    let controllers = start_controllers();
    let out = Command::new(kubectl_bin()).arg("--kubeconfig").arg(&host).args(["-n", &ns, "scale", "deployment", "nginx", "--replicas", "6"]).output().unwrap();
    assert!(out.status.success(), "kubectl scale: {}", String::from_utf8_lossy(&out.stderr));
    for ((cluster, member), replicas) in clusters.iter().zip([4, 2]) {
        wait_for(&format!("{cluster} scaled to {replicas}"), Duration::from_secs(120), || {
            let d = get_json(member, &["-n", &ns, "get", "deployment", "nginx"])?;
            if d["spec"]["replicas"] == replicas { Ok(()) } else { Err(d["spec"]["replicas"].to_string()) }
        });
    }
    let works_after: Vec<String> = clusters
        .iter()
        .map(|(cluster, _)| {
            let work = get_json(
                &host,
                &["-n", &format!("karmada-es-{cluster}"), "get", "work", "-l", &format!("resourcebinding.karmada.io/permanent-id={binding_id}")],
            )
            .unwrap();
            work["items"].as_array().map(|items| items.len().to_string()).unwrap_or_default()
        })
        .collect();
    assert_eq!(works_after, ["1", "1"], "one Work per cluster for the binding, as before the restart");

    // Clean up for the next run, controllers still running: deleting the namespace on the host
    // deletes the templates and their bindings, whose finalizers take the Works and the member
    // copies with them; then the clusters go, then the (auto-propagated) member namespaces.
    // The CRDs stay installed in member3.
    let kubectl = |kc: &Path, args: &[&str]| {
        let out = Command::new(kubectl_bin()).arg("--kubeconfig").arg(kc).args(args).output().unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    kubectl(&host, &["delete", "namespace", &ns, "--timeout=120s"]);
    for (cluster, member) in clusters {
        for object in ["deployment/nginx", "configmap/settings"] {
            wait_for(&format!("{object} removed from {cluster}"), Duration::from_secs(120), || match get_json(member, &["-n", &ns, "get", object]) {
                Err(e) if e.contains("NotFound") => Ok(()),
                Err(e) => Err(e),
                Ok(_) => Err("still there".into()),
            });
        }
    }
    for (cluster, member) in clusters {
        let (ok, out) =
            flotilla_cmd(&["unjoin", cluster, "--control-plane-kubeconfig", host_s, "--kubeconfig", member.to_str().unwrap(), "--wait-seconds", "120"]);
        assert!(ok, "unjoin {cluster} failed:\n{out}");
        kubectl(member, &["delete", "namespace", &ns, "--wait=false", "--ignore-not-found"]);
    }
    stop_controllers(controllers);
}
