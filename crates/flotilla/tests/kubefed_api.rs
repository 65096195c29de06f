//! KubeFed's API on a fresh `flotilla up`: the seeded system namespace, KubeFedConfig and
//! default FederatedTypeConfigs; KubeFed's manifests applied unchanged with kubectl; bad input
//! refused with the field named; `flotilla enable`/`disable` for a CRD kind Flotilla does not
//! know; seeding that leaves everything alone on restart.

mod support;

use std::path::Path;
use std::sync::OnceLock;

use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, kubectl, kubectl_bin, kubectl_fails};

const NS: &str = "kube-federation-system";

const DEFAULT_FTCS: [&str; 10] = [
    "clusterroles.rbac.authorization.k8s.io",
    "configmaps",
    "deployments.apps",
    "ingresses.networking.k8s.io",
    "jobs.batch",
    "namespaces",
    "replicasets.apps",
    "secrets",
    "serviceaccounts",
    "services",
];

fn server() -> &'static Flotilla {
    static SERVER: OnceLock<Flotilla> = OnceLock::new();
    SERVER.get_or_init(Flotilla::start)
}

fn data(file: &str) -> String {
    support::manifest_dir().join("../flotilla-api/tests/data/federation/kubefed").join(file).to_str().unwrap().to_string()
}

/// `flotilla ARGS --control-plane-kubeconfig KC`.
fn flotilla(kc: &Path, args: &[&str]) -> (bool, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--control-plane-kubeconfig", kc.to_str().unwrap()]);
    flotilla_cmd(&all)
}

/// The first column of a `kubectl get` table, header dropped.
fn names(table: &str) -> Vec<String> {
    // The first line of a kubectl table is its header.
    table.lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

fn resource_version(kc: &Path, args: &[&str]) -> String {
    get_json(kc, args).unwrap()["metadata"]["resourceVersion"].as_str().unwrap().to_string()
}

/// A CRD of kind `kind` in `group`, as e.g. Istio's installer creates it.
#[test]
fn a_fresh_control_plane_serves_kubefeds_defaults() {
    let kc = &server().kubeconfig;
    let k = kubectl_bin();
    let table = kubectl(&k, kc, &["-n", NS, "get", "federatedtypeconfigs"]);
    assert_eq!(names(&table), DEFAULT_FTCS, "{table}");
    // Each default type's Federated<Kind> is served, with the scope of its target (namespaces
    // excepted: FederatedNamespace is namespaced).
    let resources = kubectl(&k, kc, &["api-resources", "--api-group", "types.kubefed.io", "--no-headers"]);
    for (plural, namespaced) in
        [("federateddeployments", "true"), ("federatednamespaces", "true"), ("federatedclusterroles", "false"), ("federatedconfigmaps", "true")]
    {
        let line = resources.lines().find(|l| l.starts_with(&format!("{plural} "))).unwrap_or_else(|| panic!("{plural} not served:\n{resources}"));
        assert!(line.split_whitespace().any(|c| c == namespaced), "{line}");
    }
    let config = get_json(kc, &["-n", NS, "get", "kubefedconfig", "kubefed"]).unwrap();
    assert_eq!(config["spec"]["scope"], "Cluster");
    assert_eq!(config["spec"]["clusterHealthCheck"]["period"], "10s");
    assert_eq!(config["spec"]["syncController"]["adoptResources"], "Enabled");
    let ftc = get_json(kc, &["-n", NS, "get", "ftc", "deployments.apps"]).unwrap();
    assert_eq!(ftc["spec"]["federatedType"]["kind"], "FederatedDeployment");
    assert_eq!(ftc["spec"]["targetType"]["group"], "apps");
    assert_eq!(ftc["spec"]["propagation"], "Enabled");
}

#[test]
fn kubefed_manifests_apply_unchanged() {
    let kc = &server().kubeconfig;
    let k = kubectl_bin();
    kubectl(&k, kc, &["create", "namespace", "test-namespace"]);
    for f in ["federatednamespace.yaml", "federateddeployment.yaml", "federateddeployment-rsp.yaml", "federatedingress.yaml", "kubefedcluster.yaml"] {
        kubectl(&k, kc, &["apply", "-f", &data(f)]);
    }
    let fd = get_json(kc, &["-n", "test-namespace", "get", "fdeploy", "test-deployment"]).unwrap();
    assert_eq!(fd["spec"]["placement"]["clusters"], serde_json::json!([{"name": "cluster2"}, {"name": "cluster1"}]));
    let ops = &fd["spec"]["overrides"][0]["clusterOverrides"];
    assert_eq!(ops[1]["value"], "nginx:1.17.0-alpine");
    assert_eq!(ops[2]["op"], "add");
    assert_eq!(ops[2]["value"], serde_json::json!({"foo": "bar"}));
    assert_eq!(ops[3]["op"], "remove");
    assert_eq!(fd["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]["image"], "nginx");
    let rsp = get_json(kc, &["-n", "test-namespace", "get", "rsp", "test-deployment"]).unwrap();
    assert_eq!(rsp["spec"]["totalReplicas"], 10);
    assert_eq!(rsp["spec"]["clusters"]["cluster2"]["weight"], 3);
    let fns = get_json(kc, &["-n", "test-namespace", "get", "federatednamespace", "test-namespace"]).unwrap();
    assert_eq!(fns["metadata"]["namespace"], "test-namespace");
    let ing = get_json(kc, &["-n", "test-namespace", "get", "federatedingress", "test-ingress"]).unwrap();
    assert_eq!(ing["spec"]["template"]["spec"]["rules"][0]["http"]["paths"][0]["backend"]["serviceName"], "test-service");
    let kfc = get_json(kc, &["-n", NS, "get", "kfc", "cluster1"]).unwrap();
    assert_eq!(kfc["spec"]["secretRef"]["name"], "cluster1-x7k2p");
    assert_eq!(kfc["spec"]["apiEndpoint"], "https://172.17.0.2:6443");
    let table = kubectl(&k, kc, &["-n", NS, "get", "kubefedclusters"]);
    assert_eq!(table.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["NAME", "AGE", "READY", "KUBERNETES-VERSION"]);
    assert_eq!(names(&table), ["cluster1"]);
}

#[test]
fn bad_kubefed_input_is_refused_naming_the_field() {
    let kc = &server().kubeconfig;
    let k = kubectl_bin();
    kubectl(&k, kc, &["create", "namespace", "bad-input"]);
    let cases = [
        (
            "apiVersion: scheduling.kubefed.io/v1alpha1\nkind: ReplicaSchedulingPreference\nmetadata: {name: web, namespace: bad-input}\nspec:\n  targetKind: FederatedDeployment\n  totalReplicas: 9\n  clusters:\n    cluster1: {weight: -1}\n",
            "spec.clusters.cluster1.weight",
        ),
        (
            "apiVersion: core.kubefed.io/v1beta1\nkind: FederatedTypeConfig\nmetadata: {name: widgets, namespace: kube-federation-system}\nspec:\n  targetType: {group: example.com, version: v1, kind: Widget, scope: Namespaced}\n  federatedType: {group: types.kubefed.io, version: v1beta1, kind: FederatedWidget, scope: Namespaced}\n  propagation: Enabled\n",
            "name must be \"widgets.example.com\"",
        ),
        (
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata: {name: cm, namespace: bad-input}\nspec:\n  template: {data: {a: b}}\n  overrides:\n  - clusterName: cluster1\n    clusterOverrides:\n    - {op: move, path: /data/a}\n",
            "spec.overrides[0].clusterOverrides[0].op",
        ),
        (
            "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedConfigMap\nmetadata: {name: cm2, namespace: bad-input}\nspec:\n  placement:\n    clusters: [{}]\n",
            "spec.placement.clusters[0].name",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (yaml, field)) in cases.iter().enumerate() {
        let f = dir.path().join(format!("{i}.yaml"));
        std::fs::write(&f, yaml).unwrap();
        let (_, stderr) = kubectl_fails(&k, kc, &["apply", "-f", f.to_str().unwrap()]);
        assert!(stderr.contains(field), "case {i}: {stderr}");
    }
    // KubeFed accepts minimums that exceed the total (its planner lets the heaviest clusters
    // win); so does Flotilla — the planner reports the shortfall when it plans.
    apply_yaml(
        kc,
        "apiVersion: scheduling.kubefed.io/v1alpha1\nkind: ReplicaSchedulingPreference\nmetadata: {name: greedy, namespace: bad-input}\nspec:\n  targetKind: FederatedDeployment\n  totalReplicas: 3\n  clusters:\n    '*': {minReplicas: 5, weight: 1}\n",
    );
}

#[test]
fn enable_and_disable_a_crd_kind_flotilla_does_not_know() {
    let kc = &server().kubeconfig;
    let k = kubectl_bin();
    apply_yaml(kc, &support::crd_yaml("networking.istio.io", "VirtualService", "virtualservices", "vs"));
    // -o yaml prints and creates nothing.
    let (ok, printed) = flotilla(kc, &["enable", "vs", "-o", "yaml"]);
    assert!(ok, "{printed}");
    assert!(printed.contains("kind: FederatedTypeConfig") && printed.contains("name: federatedvirtualservices.types.kubefed.io"), "{printed}");
    kubectl_fails(&k, kc, &["-n", NS, "get", "ftc", "virtualservices.networking.istio.io"]);

    let (ok, out) = flotilla(kc, &["enable", "VirtualService"]);
    assert!(ok, "{out}");
    assert!(out.contains("customresourcedefinition.apiextensions.k8s.io/federatedvirtualservices.types.kubefed.io created"), "{out}");
    // Members joined by `flotilla join` cannot write VirtualServices yet: enable says how to fix it.
    assert!(out.contains("--allow-kinds virtualservices.networking.istio.io"), "{out}");
    let ftc = get_json(kc, &["-n", NS, "get", "ftc", "virtualservices.networking.istio.io"]).unwrap();
    assert_eq!(
        ftc["spec"]["targetType"],
        serde_json::json!({"group": "networking.istio.io", "version": "v1", "kind": "VirtualService", "pluralName": "virtualservices", "scope": "Namespaced"})
    );
    assert_eq!(ftc["spec"]["federatedType"]["kind"], "FederatedVirtualService");
    let generated = get_json(kc, &["get", "crd", "federatedvirtualservices.types.kubefed.io"]).unwrap();
    assert_eq!(generated["spec"]["scope"], "Namespaced");
    assert_eq!(generated["spec"]["names"]["shortNames"], serde_json::json!(["fvs"]));
    // Enabling again changes nothing.
    let rv = resource_version(kc, &["get", "crd", "federatedvirtualservices.types.kubefed.io"]);
    let (ok, out) = flotilla(kc, &["enable", "virtualservices.networking.istio.io"]);
    assert!(ok && out.contains("federatedvirtualservices.types.kubefed.io unchanged"), "{out}");
    assert_eq!(resource_version(kc, &["get", "crd", "federatedvirtualservices.types.kubefed.io"]), rv);

    // The new type accepts an object, template kept as written.
    kubectl(&k, kc, &["create", "namespace", "mesh"]);
    apply_yaml(
        kc,
        "apiVersion: types.kubefed.io/v1beta1\nkind: FederatedVirtualService\nmetadata: {name: reviews, namespace: mesh}\nspec:\n  template:\n    spec:\n      hosts: [reviews]\n      http:\n      - route:\n        - destination: {host: reviews, subset: v1}\n  placement:\n    clusterSelector:\n      matchLabels: {mesh: istio}\n  overrides:\n  - clusterName: cluster1\n    clusterOverrides:\n    - path: /spec/hosts/0\n      value: reviews.cluster1\n",
    );
    let fvs = get_json(kc, &["-n", "mesh", "get", "fvs", "reviews"]).unwrap();
    assert_eq!(fvs["spec"]["template"]["spec"]["http"][0]["route"][0]["destination"]["subset"], "v1");
    assert_eq!(fvs["spec"]["placement"]["clusterSelector"]["matchLabels"]["mesh"], "istio");

    // Unknown and ambiguous names are refused with the reason.
    let (ok, out) = flotilla(kc, &["enable", "nosuchkind"]);
    assert!(!ok && out.contains("no API resource named \"nosuchkind\""), "{out}");
    apply_yaml(kc, &support::crd_yaml("a.example.com", "Gizmo", "gizmos", "gz"));
    apply_yaml(kc, &support::crd_yaml("b.example.com", "Gizmo", "gizmos", "gzb"));
    let (ok, out) = flotilla(kc, &["enable", "gizmo"]);
    assert!(!ok && out.contains("gizmos.a.example.com, gizmos.b.example.com"), "{out}");

    // --delete-crd is refused while objects exist, and then nothing changed.
    let (ok, out) = flotilla(kc, &["disable", "vs", "--delete-crd"]);
    assert!(!ok && out.contains("mesh/reviews"), "{out}");
    get_json(kc, &["-n", NS, "get", "ftc", "virtualservices.networking.istio.io"]).unwrap();
    kubectl(&k, kc, &["-n", "mesh", "delete", "fvs", "reviews"]);
    let (ok, out) = flotilla(kc, &["disable", "vs", "--delete-crd"]);
    assert!(ok, "{out}");
    kubectl_fails(&k, kc, &["-n", NS, "get", "ftc", "virtualservices.networking.istio.io"]);
    kubectl_fails(&k, kc, &["get", "crd", "federatedvirtualservices.types.kubefed.io"]);
    let (ok, out) = flotilla(kc, &["disable", "vs"]);
    assert!(!ok && out.contains("is not enabled"), "{out}");
}

/// `enable` of a default type finds it exactly as seeded; a CRD target whose `spec.replicas` is
/// an integer gets `spec.retainReplicas` in its federated type, as kubefedctl decides it.
#[test]
fn enable_agrees_with_the_seeded_types_and_detects_scalable_crds() {
    let kc = &server().kubeconfig;
    let (ok, out) = flotilla(kc, &["enable", "deploy"]);
    assert!(ok, "{out}");
    assert!(out.contains("federateddeployments.types.kubefed.io unchanged") && out.contains("deployments.apps unchanged"), "{out}");
    assert!(!out.contains("--allow-kinds"), "the member role covers Deployments: {out}");
    let retain = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/retainReplicas";
    let fdeploy = get_json(kc, &["get", "crd", "federateddeployments.types.kubefed.io"]).unwrap();
    assert_eq!(fdeploy.pointer(retain).unwrap()["type"], "boolean");

    apply_yaml(
        kc,
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: scalers.example.com\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: scalers, singular: scaler, kind: Scaler}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              replicas: {type: integer, format: int32}\n",
    );
    let (ok, out) = flotilla(kc, &["enable", "scalers.example.com"]);
    assert!(ok, "{out}");
    let fscaler = get_json(kc, &["get", "crd", "federatedscalers.types.kubefed.io"]).unwrap();
    assert_eq!(fscaler.pointer(retain).unwrap()["type"], "boolean");
    let fcm = get_json(kc, &["get", "crd", "federatedconfigmaps.types.kubefed.io"]).unwrap();
    assert!(fcm.pointer(retain).is_none(), "ConfigMaps have no replicas");
}

/// Seeding happens once: a restart rewrites nothing (neither the seeded objects nor the fixed
/// CRDs installed at every start), and a type the user disabled stays disabled.
#[test]
fn seeding_leaves_a_seeded_control_plane_alone() {
    let first = Flotilla::start();
    let kc = first.kubeconfig.clone();
    let config = ["-n", NS, "get", "kubefedconfig", "kubefed"];
    let ftc = ["-n", NS, "get", "ftc", "deployments.apps"];
    let crd = ["get", "crd", "federateddeployments.types.kubefed.io"];
    // A fixed CRD, which every start installs again: unchanged, it must not be rewritten.
    let fixed = ["get", "crd", "kubefedclusters.core.kubefed.io"];
    let before = [resource_version(&kc, &config), resource_version(&kc, &ftc), resource_version(&kc, &crd), resource_version(&kc, &fixed)];
    let (ok, out) = flotilla(&kc, &["disable", "jobs.batch"]);
    assert!(ok, "{out}");
    let second = Flotilla::start_in(first.stop(), &[]);
    let kc = second.kubeconfig.clone();
    let after = [resource_version(&kc, &config), resource_version(&kc, &ftc), resource_version(&kc, &crd), resource_version(&kc, &fixed)];
    assert_eq!(before, after);
    let table = kubectl(&kubectl_bin(), &kc, &["-n", NS, "get", "federatedtypeconfigs"]);
    let expected: Vec<&str> = DEFAULT_FTCS.iter().copied().filter(|n| *n != "jobs.batch").collect();
    assert_eq!(names(&table), expected);
}

/// `flotilla federate` as `kubefedctl federate`: the object's content (labels kept, the rest of
/// its metadata and status dropped) as the template of its Federated<Kind>, placed on every
/// cluster; `-o yaml` only prints; a type not enabled is refused unless `--enable-type`;
/// `--contents` federates a namespace and what it holds, minus what is skipped.
#[test]
fn federate_turns_existing_objects_into_federated_ones() {
    let kc = &server().kubeconfig;
    let ns = "federate-me";
    apply_yaml(
        kc,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-config\n  namespace: {ns}\n  labels: {{app: web}}\n  annotations: {{note: dropped}}\ndata: {{color: blue}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: web-secret, namespace: {ns}}}\nstringData: {{k: v}}\n"
        ),
    );

    // -o yaml prints and creates nothing.
    let (ok, out) = flotilla(kc, &["federate", "configmap", "web-config", "-n", ns, "-o", "yaml"]);
    assert!(ok, "{out}");
    assert!(out.contains("kind: FederatedConfigMap") && out.contains("color: blue"), "{out}");
    kubectl_fails(&kubectl_bin(), kc, &["-n", ns, "get", "federatedconfigmap", "web-config"]);

    let (ok, out) = flotilla(kc, &["federate", "cm", "web-config", "-n", ns]);
    assert!(ok, "{out}");
    assert!(out.contains("federatedconfigmap.types.kubefed.io/web-config created"), "{out}");
    let fed = get_json(kc, &["-n", ns, "get", "federatedconfigmap", "web-config"]).unwrap();
    assert_eq!(fed["spec"]["template"], serde_json::json!({"metadata": {"labels": {"app": "web"}}, "data": {"color": "blue"}}));
    assert_eq!(fed["spec"]["placement"], serde_json::json!({"clusterSelector": {"matchLabels": {}}}));
    // Again: it exists, as kubefedctl says.
    let (ok, out) = flotilla(kc, &["federate", "cm", "web-config", "-n", ns]);
    assert!(!ok && out.contains("already exists"), "{out}");
    // A namespaced type without -n, and an object that is not there.
    let (ok, out) = flotilla(kc, &["federate", "cm", "web-config"]);
    assert!(!ok && out.contains("-n"), "{out}");
    let (ok, out) = flotilla(kc, &["federate", "cm", "nothing-here", "-n", ns]);
    assert!(!ok && out.contains("not found"), "{out}");

    // A CRD kind that is not enabled: refused, then enabled on the way with --enable-type.
    apply_yaml(kc, &support::crd_yaml("federate.example.com", "Doohickey", "doohickeys", "dh"));
    wait_served(kc, "doohickeys.federate.example.com");
    apply_yaml(kc, &format!("apiVersion: federate.example.com/v1\nkind: Doohickey\nmetadata: {{name: g1, namespace: {ns}}}\nspec: {{size: 2}}\n"));
    let (ok, out) = flotilla(kc, &["federate", "doohickey", "g1", "-n", ns]);
    assert!(!ok && out.contains("--enable-type"), "{out}");
    let (ok, out) = flotilla(kc, &["federate", "doohickey", "g1", "-n", ns, "--enable-type"]);
    assert!(ok, "{out}");
    let fed = get_json(kc, &["-n", ns, "get", "federateddoohickeys.types.kubefed.io", "g1"]).unwrap();
    assert_eq!(fed["spec"]["template"]["spec"]["size"], 2);

    // --contents: the namespace, then what it holds (Secrets skipped here; the ConfigMap and
    // Gizmo already federated make it fail as kubefedctl does, so use a fresh namespace).
    let ns2 = "federate-contents";
    apply_yaml(
        kc,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns2}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a, namespace: {ns2}}}\ndata: {{x: \"1\"}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: {ns2}}}\nstringData: {{k: v}}\n"
        ),
    );
    let (ok, out) = flotilla(kc, &["federate", "namespace", ns2, "--contents", "--skip-api-resources", "secrets"]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("federatednamespace.types.kubefed.io/{ns2} created")), "{out}");
    assert!(out.contains("federatedconfigmap.types.kubefed.io/a created"), "{out}");
    assert!(!out.contains("federatedsecret"), "secrets were skipped: {out}");
    get_json(kc, &["-n", ns2, "get", "federatednamespace", ns2]).unwrap();
    let (ok, out) = flotilla(kc, &["federate", "configmap", "a", "-n", ns2, "--contents"]);
    assert!(!ok && out.contains("not a namespace"), "{out}");
}

/// Wait until the API server serves `plural.group` (a CRD just created).
fn wait_served(kc: &Path, resource: &str) {
    support::wait_for(&format!("{resource} served"), std::time::Duration::from_secs(60), || get_json(kc, &["get", resource]).map(|_| ()));
}
