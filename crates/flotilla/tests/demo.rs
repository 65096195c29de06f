//! `flotilla up --demo 2`: simulated members start in-process, join in Push mode with a
//! least-privilege identity, turn Ready through the health probe, and Karmada's quick-start
//! sample is claimed by its policy and bound; namespaces propagate, KubeFed's system namespace
//! does not.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{Flotilla, flotilla_cmd, get_json, kubectl_bin, wait_for};

#[test]
fn demo_members_join_and_the_quick_start_sample_is_bound() {
    let cp = Flotilla::start_with(&["--demo", "2"]);
    let kc = cp.kubeconfig.clone();
    for name in ["member1", "member2"] {
        let c = wait_for(&format!("cluster {name} Ready"), Duration::from_secs(120), || {
            let c = get_json(&kc, &["get", "cluster", name])?;
            let ready = c["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True");
            if ready { Ok(c) } else { Err(c["status"].to_string()) }
        });
        assert_eq!(c["spec"]["syncMode"], "Push");
        assert_eq!(c["spec"]["secretRef"]["namespace"], "karmada-cluster");
        assert_eq!(c["spec"]["region"], format!("region-{name}"));
        // The health probe fills in what the scheduler needs.
        assert!(c["status"]["apiEnablements"].as_array().is_some_and(|a| !a.is_empty()), "{}", c["status"]);
        assert_eq!(c["status"]["nodeSummary"]["readyNum"], 2, "{}", c["status"]);
    }
    let sample = support::manifest_dir().join("../../examples/karmada/nginx.yaml");
    let bin = kubectl_bin();
    let out = Command::new(&bin).arg("--kubeconfig").arg(&kc).args(["apply", "-f"]).arg(&sample).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The detector claims the template and binds it.
    let rb = wait_for("the binding", Duration::from_secs(60), || get_json(&kc, &["-n", "default", "get", "resourcebinding", "nginx-deployment"]));
    assert_eq!(rb["spec"]["resource"]["kind"], "Deployment");
    assert_eq!(rb["spec"]["replicas"], 2);
    assert!(rb["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"].is_string(), "{}", rb["metadata"]);
    let d = get_json(&kc, &["-n", "default", "get", "deployment", "nginx"]).unwrap();
    assert_eq!(d["metadata"]["annotations"]["propagationpolicy.karmada.io/name"], "nginx-propagation");
    // Scheduled 1:1, applied in both simulated members, status aggregated back.
    let rb = wait_for("the binding fully applied", Duration::from_secs(120), || {
        let rb = get_json(&kc, &["-n", "default", "get", "resourcebinding", "nginx-deployment"])?;
        let ok = rb["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "FullyApplied" && c["status"] == "True");
        if ok { Ok(rb) } else { Err(rb["status"].to_string()) }
    });
    assert_eq!(rb["spec"]["clusters"], serde_json::json!([{"name": "member1", "replicas": 1}, {"name": "member2", "replicas": 1}]));
    // `flotilla explain` runs the scheduler on the binding and says why.
    let kc_s = kc.to_str().unwrap();
    let (ok, out) = flotilla_cmd(&["explain", "deployment/nginx", "-n", "default", "--control-plane-kubeconfig", kc_s]);
    assert!(ok, "{out}");
    assert!(out.contains("Scheduled -> member1:1, member2:1"), "{out}");
    let (ok, out) = flotilla_cmd(&["explain", "deploy/no-such-app", "--control-plane-kubeconfig", kc_s]);
    assert!(!ok && out.contains("no ResourceBinding default/no-such-app-deployment"), "{out}");
    for m in ["member1", "member2"] {
        let mk = cp.dir.path().join(format!("data/demo/{m}.kubeconfig"));
        let md = wait_for(&format!("nginx in {m}"), Duration::from_secs(60), || get_json(&mk, &["-n", "default", "get", "deployment", "nginx"]));
        assert_eq!(md["spec"]["replicas"], 1);
        assert_eq!(md["metadata"]["labels"]["karmada.io/managed"], "true");
    }
    // The tour's regional override: member2 (region-member2) pulls from the mirror, member1 not.
    let ov = support::manifest_dir().join("../../examples/karmada/override-by-region.yaml");
    let out = Command::new(&bin).arg("--kubeconfig").arg(&kc).args(["apply", "-f"]).arg(&ov).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (m, image) in [("member1", "nginx"), ("member2", "mirror.example.com/nginx")] {
        let mk = cp.dir.path().join(format!("data/demo/{m}.kubeconfig"));
        wait_for(&format!("{m} running {image}"), Duration::from_secs(60), || {
            let d = get_json(&mk, &["-n", "default", "get", "deployment", "nginx"])?;
            let got = &d["spec"]["template"]["spec"]["containers"][0]["image"];
            if got == image { Ok(()) } else { Err(got.to_string()) }
        });
    }
    wait_for("aggregated ready replicas", Duration::from_secs(120), || {
        let d = get_json(&kc, &["-n", "default", "get", "deployment", "nginx"])?;
        if d["status"]["readyReplicas"] == 2 && d["status"]["observedGeneration"] == d["metadata"]["generation"] {
            Ok(())
        } else {
            Err(d["status"].to_string())
        }
    });
    // Namespaces reach the members, but never KubeFed's system namespace (it holds member
    // credentials), which has existed since start-up, before the one created here.
    let out = Command::new(&bin).arg("--kubeconfig").arg(&kc).args(["create", "namespace", "shop"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mk = cp.dir.path().join("data/demo/member1.kubeconfig");
    wait_for("namespace shop in member1", Duration::from_secs(60), || get_json(&mk, &["get", "namespace", "shop"]));
    assert!(get_json(&kc, &["get", "namespace", "kube-federation-system"]).is_ok());
    let err = get_json(&mk, &["get", "namespace", "kube-federation-system"]).unwrap_err();
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");
    drop(cp);
}

/// Karmada's `samples/nginx` files, byte for byte: the Deployment, its PropagationPolicy and the
/// OverridePolicy that edits labels in member2 and annotations in member1.
#[test]
fn karmadas_nginx_samples_apply_unchanged() {
    let dir = support::manifest_dir().join("../../examples/karmada/samples/nginx");
    // Length and FNV-1a of each upstream file (examples/karmada/samples/README.md says where
    // they come from): an edited copy would no longer prove anything.
    for (file, len, fnv) in [("deployment.yaml", 280, 0xaa56_11d5_u32), ("propagationpolicy.yaml", 641, 0xe143_c52c), ("overridepolicy.yaml", 939, 0xdbb3_26dd)]
    {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        assert_eq!((bytes.len(), flotilla_api::federation::karmada::names::fnv32a(&bytes)), (len, fnv), "{file} differs from Karmada's sample");
    }
    let cp = Flotilla::start_with(&["--demo", "2"]);
    let kc = cp.kubeconfig.clone();
    let bin = kubectl_bin();
    for file in ["overridepolicy.yaml", "propagationpolicy.yaml", "deployment.yaml"] {
        let out = Command::new(&bin).arg("--kubeconfig").arg(&kc).args(["apply", "-f"]).arg(dir.join(file)).output().unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
    }
    wait_for("the binding nginx-deployment scheduled", Duration::from_secs(120), || {
        let rb = get_json(&kc, &["-n", "default", "get", "resourcebinding", "nginx-deployment"])?;
        if rb["spec"]["clusters"].as_array().is_some_and(|c| c.len() == 2) { Ok(()) } else { Err(rb["spec"].to_string()) }
    });
    for m in ["member1", "member2"] {
        let ns = format!("karmada-es-{m}");
        let w =
            wait_for(&format!("Work nginx-687f7fb96f in {ns}"), Duration::from_secs(120), || get_json(&kc, &["-n", &ns, "get", "work", "nginx-687f7fb96f"]));
        assert!(w["metadata"]["labels"]["resourcebinding.karmada.io/permanent-id"].is_string(), "{}", w["metadata"]);
    }
    // The OverridePolicy: member2 gets the two labels (remove/replace of absent keys do nothing),
    // member1 the annotation; neither gets the other's.
    let member = |m: &str| cp.dir.path().join(format!("data/demo/{m}.kubeconfig"));
    let d2 = wait_for("labels overridden in member2", Duration::from_secs(120), || {
        let d = get_json(&member("member2"), &["-n", "default", "get", "deployment", "nginx"])?;
        let l = &d["metadata"]["labels"];
        if l["env"] == "skoala-dev" && l["env-stat"] == "skoala-stage" { Ok(d) } else { Err(l.to_string()) }
    });
    assert!(d2["metadata"]["labels"].get("bar").is_none(), "{}", d2["metadata"]["labels"]);
    assert!(d2["metadata"]["annotations"].get("env").is_none(), "{}", d2["metadata"]["annotations"]);
    assert_eq!(d2["metadata"]["labels"]["karmada.io/managed"], "true");
    let d1 = wait_for("annotation overridden in member1", Duration::from_secs(120), || {
        let d = get_json(&member("member1"), &["-n", "default", "get", "deployment", "nginx"])?;
        if d["metadata"]["annotations"]["env"] == "skoala-stage" { Ok(d) } else { Err(d["metadata"]["annotations"].to_string()) }
    });
    assert!(d1["metadata"]["labels"].get("env").is_none(), "{}", d1["metadata"]["labels"]);
    assert!(d1["metadata"]["annotations"].get("emma").is_none(), "{}", d1["metadata"]["annotations"]);
    assert_eq!(d1["spec"]["replicas"], 1);
    drop(cp);
}

/// `flotilla up --demo 1 --demo-pull 1`: the pull member registers with a bootstrap token and
/// its agent (a task of the same process) turns it Ready in Pull mode through its Lease; it has
/// an edge report, and a workload placed on it reaches its member through the agent.
#[test]
fn demo_pull_members_register_and_run_behind_agents() {
    let cp = Flotilla::start_with(&["--demo", "1", "--demo-pull", "1"]);
    let kc = cp.kubeconfig.clone();
    let c = wait_for("cluster edge1 Ready", Duration::from_secs(120), || {
        let c = get_json(&kc, &["get", "cluster", "edge1"])?;
        let ready = c["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready { Ok(c) } else { Err(c["status"].to_string()) }
    });
    assert_eq!(c["spec"]["syncMode"], "Pull");
    assert_eq!(c["spec"]["region"], "region-edge1", "{}", c["spec"]);
    assert_eq!(c["spec"]["zones"], serde_json::json!(["region-edge1-a", "region-edge1-b"]), "{}", c["spec"]);
    // The agent's heartbeat, and the edge report kept for a Pull cluster.
    wait_for("edge1's Lease", Duration::from_secs(60), || get_json(&kc, &["-n", "karmada-cluster", "get", "lease", "edge1"]));
    let report = wait_for("edge1's edge report, online", Duration::from_secs(60), || {
        let r = get_json(&kc, &["get", "edgereport", "edge1"])?;
        if r["status"]["online"] == true { Ok(r) } else { Err(r.to_string()) }
    });
    assert_eq!(report["status"]["conflicts"], 0, "{report}");
    let push = get_json(&kc, &["get", "cluster", "member1"]).unwrap();
    assert_eq!(push["spec"]["syncMode"], "Push");
    // A workload placed on the pull member is applied there by its agent.
    let manifest = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}},
      {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "web", "namespace": "default"},
       "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                "placement": {"clusterAffinity": {"clusterNames": ["edge1"]}}}}]}"#;
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), manifest.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mk = cp.dir.path().join("data/demo/edge1.kubeconfig");
    let d = wait_for("web in edge1", Duration::from_secs(120), || get_json(&mk, &["-n", "default", "get", "deployment", "web"]));
    assert_eq!(d["metadata"]["labels"]["karmada.io/managed"], "true", "{}", d["metadata"]);
    drop(cp);
}
