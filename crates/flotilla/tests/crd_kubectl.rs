//! Custom resources with kubectl 1.20 and 1.33 against `flotilla up`, compared with a real
//! kube-apiserver (the shared testenv) for printer columns; and Karmada's and KubeFed's
//! kinds as their upstream manifests use them.

mod support;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use support::{Flotilla, kubectl, kubectls};

fn server() -> &'static Flotilla {
    static SERVER: OnceLock<Flotilla> = OnceLock::new();
    SERVER.get_or_init(Flotilla::start)
}

fn crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
              color: {{type: string, default: red}}
              replicas: {{type: integer}}
          status:
            type: object
            properties:
              replicas: {{type: integer}}
    subresources:
      status: {{}}
      scale: {{specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}
    additionalPrinterColumns:
    - {{name: Size, type: integer, jsonPath: .spec.size}}
    - {{name: Color, type: string, jsonPath: .spec.color}}
    - {{name: Replicas, type: integer, jsonPath: .spec.replicas, priority: 1}}
"#
    )
}

fn gadget(group: &str, name: &str, size: i64) -> String {
    format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: {name}\nspec:\n  size: {size}\n  replicas: 1\n")
}

/// `kubectl get` output without the values that differ run to run (AGE).
fn table_without_age(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().filter(|c| !c.ends_with('s') || c.parse::<f64>().is_ok() || *c == "gadgets").collect::<Vec<_>>().join(" "))
        .collect()
}

fn crd_flow(bin: &Path, kc: &Path, group: &str, ns: &str, dir: &Path) -> (String, String) {
    let crd_file = dir.join(format!("crd-{group}.yaml"));
    std::fs::write(&crd_file, crd(group)).unwrap();
    kubectl(bin, kc, &["apply", "-f", crd_file.to_str().unwrap()]);
    kubectl(bin, kc, &["wait", "--for", "condition=established", "--timeout=60s", &format!("crd/gadgets.{group}")]);
    kubectl(bin, kc, &["create", "namespace", ns]);
    for (name, size) in [("g1", 3), ("g2", 7)] {
        let f = dir.join(format!("{group}-{name}.yaml"));
        std::fs::write(&f, gadget(group, name, size)).unwrap();
        // The discovery cache may lag the new CRD for a moment.
        let mut tries = 0;
        loop {
            let out = std::process::Command::new(bin).arg("--kubeconfig").arg(kc).args(["apply", "-n", ns, "-f", f.to_str().unwrap()]).output().unwrap();
            if out.status.success() {
                break;
            }
            tries += 1;
            assert!(tries < 20, "apply of {name} kept failing: {}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let table = kubectl(bin, kc, &["get", &format!("gadgets.{group}"), "-n", ns]);
    let wide = kubectl(bin, kc, &["get", &format!("gadgets.{group}"), "-n", ns, "-o", "wide"]);
    // patch, scale, and the objects' fields read back.
    kubectl(bin, kc, &["patch", &format!("gadgets.{group}"), "g1", "-n", ns, "--type=merge", "-p", r#"{"spec":{"size":4}}"#]);
    kubectl(bin, kc, &["scale", &format!("gadgets.{group}"), "g1", "-n", ns, "--replicas=3"]);
    let json: serde_json::Value = serde_json::from_str(&kubectl(bin, kc, &["get", &format!("gadgets.{group}"), "g1", "-n", ns, "-o", "json"])).unwrap();
    assert_eq!((json["spec"]["size"].as_i64(), json["spec"]["replicas"].as_i64(), json["spec"]["color"].as_str()), (Some(4), Some(3), Some("red")));
    kubectl(bin, kc, &["delete", &format!("gadgets.{group}"), "g2", "-n", ns]);
    // Deleting the CRD deletes its objects.
    kubectl(bin, kc, &["delete", &format!("crd/gadgets.{group}"), "--timeout=60s"]);
    let crds = kubectl(bin, kc, &["get", "crd", "-o", "name"]);
    assert!(!crds.contains(&format!("gadgets.{group}")), "{crds}");
    kubectl(bin, kc, &["delete", "namespace", ns, "--wait=false"]);
    (table, wide)
}

#[test]
fn custom_resources_with_kubectl_match_a_real_apiserver() {
    let env = flotilla_testenv::TestEnv::connect();
    let versions: Vec<_> = kubectls().into_iter().filter(|(v, _)| v == "1.20" || v == "1.33").collect();
    assert!(!versions.is_empty());
    for (v, bin) in &versions {
        let tag = v.replace('.', "");
        let group = format!("k{tag}p{}.example.com", std::process::id() % 100000);
        let ns = format!("crd-k{tag}");
        let (table, wide) = crd_flow(bin, &server().kubeconfig, &group, &ns, server().dir.path());
        assert!(table.contains("SIZE") && table.contains("COLOR") && !table.contains("REPLICAS"), "{table}");
        assert!(wide.contains("REPLICAS"), "{wide}");
        if let Some(env) = &env {
            // The same steps against a real kube-apiserver give the same table.
            let real_group = format!("r{tag}p{}.example.com", std::process::id() % 100000);
            let (real_table, real_wide) = crd_flow(bin, &env.member("member1").kubeconfig, &real_group, &ns, server().dir.path());
            assert_eq!(table_without_age(&table), table_without_age(&real_table), "kubectl {v}: tables differ");
            assert_eq!(table_without_age(&wide), table_without_age(&real_wide), "kubectl {v}: wide tables differ");
        }
    }
}

/// Karmada's samples and KubeFed's documented manifests apply unchanged and read back with the
/// defaults the upstream webhooks and CRD schemas set; every federation kind is served with its
/// upstream group, version, kind, plural and scope.
#[test]
fn federation_manifests_apply_unchanged() {
    let bin = Path::new("/usr/lib/google-cloud-sdk/bin/kubectl.1.33");
    let kc = &server().kubeconfig;
    let data = support::manifest_dir().join("../flotilla-api/tests/data/federation");
    kubectl(bin, kc, &["create", "namespace", "test-namespace"]);
    for f in [
        "karmada/nginx-deployment.yaml",
        "karmada/nginx-propagationpolicy.yaml",
        "karmada/nginx-overridepolicy.yaml",
        "kubefed/federateddeployment.yaml",
        "kubefed/federateddeployment-rsp.yaml",
    ] {
        kubectl(bin, kc, &["apply", "-f", data.join(f).to_str().unwrap()]);
    }
    let pp: serde_json::Value = serde_json::from_str(&kubectl(bin, kc, &["get", "pp", "nginx-propagation", "-o", "json"])).unwrap();
    assert!(pp["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"].as_str().is_some_and(|s| s.len() == 36));
    assert_eq!(pp["metadata"]["finalizers"][0], "karmada.io/propagation-policy-controller");
    assert_eq!(pp["spec"]["conflictResolution"], "Abort");
    assert_eq!(pp["spec"]["preemption"], "Never");
    assert_eq!(pp["spec"]["priority"], 0);
    assert_eq!(pp["spec"]["resourceSelectors"][0]["namespace"], "default");
    let fd: serde_json::Value =
        serde_json::from_str(&kubectl(bin, kc, &["get", "federateddeployment", "test-deployment", "-n", "test-namespace", "-o", "json"])).unwrap();
    assert_eq!(fd["spec"]["overrides"][0]["clusterOverrides"][0]["value"], 5);
    assert_eq!(fd["spec"]["template"]["spec"]["replicas"], 3);
    // Discovery: every kind with its upstream names and scope.
    let resources = kubectl(bin, kc, &["api-resources", "-o", "wide", "--no-headers"]);
    for (name, short, api_version, namespaced, kind) in [
        ("clusters", "", "cluster.karmada.io/v1alpha1", "false", "Cluster"),
        ("propagationpolicies", "pp", "policy.karmada.io/v1alpha1", "true", "PropagationPolicy"),
        ("clusterpropagationpolicies", "cpp", "policy.karmada.io/v1alpha1", "false", "ClusterPropagationPolicy"),
        ("overridepolicies", "op", "policy.karmada.io/v1alpha1", "true", "OverridePolicy"),
        ("clusteroverridepolicies", "cop", "policy.karmada.io/v1alpha1", "false", "ClusterOverridePolicy"),
        ("clustertaintpolicies", "", "policy.karmada.io/v1alpha1", "false", "ClusterTaintPolicy"),
        ("remedies", "", "remedy.karmada.io/v1alpha1", "false", "Remedy"),
        ("works", "wk", "work.karmada.io/v1alpha1", "true", "Work"),
        ("resourcebindings", "rb", "work.karmada.io/v1alpha2", "true", "ResourceBinding"),
        ("clusterresourcebindings", "crb", "work.karmada.io/v1alpha2", "false", "ClusterResourceBinding"),
        ("kubefedclusters", "kfc", "core.kubefed.io/v1beta1", "true", "KubeFedCluster"),
        ("federatedtypeconfigs", "ftc", "core.kubefed.io/v1beta1", "true", "FederatedTypeConfig"),
        ("replicaschedulingpreferences", "rsp", "scheduling.kubefed.io/v1alpha1", "true", "ReplicaSchedulingPreference"),
        ("federateddeployments", "fdeploy", "types.kubefed.io/v1beta1", "true", "FederatedDeployment"),
    ] {
        let line = resources
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name) && l.contains(api_version))
            .unwrap_or_else(|| panic!("{name} not served:\n{resources}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (got_short, rest) = if short.is_empty() { ("", &cols[1..]) } else { (cols[1], &cols[2..]) };
        assert_eq!((got_short, rest[0], rest[1], rest[2]), (short, api_version, namespaced, kind), "{line}");
    }
}
