//! Every generated federation CRD names its kind as upstream does and has a structural schema.

use flotilla_api::federation::crd::{crd_structural_problems, structural_problems};
use flotilla_api::federation::kubefed::core::{ApiResource, ResourceScope};
use flotilla_api::federation::kubefed::{FederatedTypeOptions, federated_type_crd, federated_type_crd_with};
use flotilla_api::federation::{crds, crds_yaml};
use serde_json::{Value, json};

/// group, version, kind, plural, singular, scope, shortNames, categories, status subresource,
/// printer column names — as upstream declares them.
type Expected = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    bool,
    &'static [&'static str],
);
const EXPECTED: &[Expected] = &[
    ("cluster.karmada.io", "v1alpha1", "Cluster", "clusters", "cluster", "Cluster", &[], &[], true, &["Version", "Mode", "Ready", "Age"]),
    (
        "policy.karmada.io",
        "v1alpha1",
        "PropagationPolicy",
        "propagationpolicies",
        "propagationpolicy",
        "Namespaced",
        &["pp"],
        &["karmada-io"],
        false,
        &["CONFLICT-RESOLUTION", "PRIORITY", "AGE"],
    ),
    (
        "policy.karmada.io",
        "v1alpha1",
        "ClusterPropagationPolicy",
        "clusterpropagationpolicies",
        "clusterpropagationpolicy",
        "Cluster",
        &["cpp"],
        &["karmada-io"],
        false,
        &["CONFLICT-RESOLUTION", "PRIORITY", "AGE"],
    ),
    ("policy.karmada.io", "v1alpha1", "OverridePolicy", "overridepolicies", "overridepolicy", "Namespaced", &["op"], &["karmada-io"], false, &[]),
    (
        "policy.karmada.io",
        "v1alpha1",
        "ClusterOverridePolicy",
        "clusteroverridepolicies",
        "clusteroverridepolicy",
        "Cluster",
        &["cop"],
        &["karmada-io"],
        false,
        &[],
    ),
    ("policy.karmada.io", "v1alpha1", "ClusterTaintPolicy", "clustertaintpolicies", "clustertaintpolicy", "Cluster", &[], &[], false, &[]),
    ("remedy.karmada.io", "v1alpha1", "Remedy", "remedies", "remedy", "Cluster", &[], &["karmada-io"], false, &[]),
    ("search.karmada.io", "v1alpha1", "ResourceRegistry", "resourceregistries", "resourceregistry", "Cluster", &[], &["karmada-io"], true, &[]),
    (
        "networking.karmada.io",
        "v1alpha1",
        "MultiClusterService",
        "multiclusterservices",
        "multiclusterservice",
        "Namespaced",
        &["mcs"],
        &["karmada-io"],
        true,
        &[],
    ),
    (
        "networking.karmada.io",
        "v1alpha1",
        "MultiClusterIngress",
        "multiclusteringresses",
        "multiclusteringress",
        "Namespaced",
        &["mci"],
        &["karmada-io"],
        true,
        &[],
    ),
    ("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports", "serviceexport", "Namespaced", &["svcex"], &[], true, &["Age"]),
    ("multicluster.x-k8s.io", "v1alpha1", "ServiceImport", "serviceimports", "serviceimport", "Namespaced", &["svcim"], &[], true, &["Type", "IP", "Age"]),
    ("work.karmada.io", "v1alpha1", "Work", "works", "work", "Namespaced", &["wk"], &["karmada-io"], true, &["WORKLOAD-KIND", "APPLIED", "AGE"]),
    (
        "work.karmada.io",
        "v1alpha2",
        "ResourceBinding",
        "resourcebindings",
        "resourcebinding",
        "Namespaced",
        &["rb"],
        &["karmada-io"],
        true,
        &["Scheduled", "FullyApplied", "Age"],
    ),
    (
        "work.karmada.io",
        "v1alpha2",
        "ClusterResourceBinding",
        "clusterresourcebindings",
        "clusterresourcebinding",
        "Cluster",
        &["crb"],
        &["karmada-io"],
        true,
        &["Scheduled", "FullyApplied", "Age"],
    ),
    (
        "core.kubefed.io",
        "v1beta1",
        "KubeFedCluster",
        "kubefedclusters",
        "kubefedcluster",
        "Namespaced",
        &["kfc"],
        &[],
        true,
        &["age", "ready", "kubernetes-version"],
    ),
    ("core.kubefed.io", "v1beta1", "KubeFedConfig", "kubefedconfigs", "kubefedconfig", "Namespaced", &[], &[], false, &[]),
    ("core.kubefed.io", "v1beta1", "FederatedTypeConfig", "federatedtypeconfigs", "federatedtypeconfig", "Namespaced", &["ftc"], &[], true, &[]),
    (
        "scheduling.kubefed.io",
        "v1alpha1",
        "ReplicaSchedulingPreference",
        "replicaschedulingpreferences",
        "replicaschedulingpreference",
        "Namespaced",
        &["rsp"],
        &[],
        true,
        &[],
    ),
    ("core.kubefed.io", "v1alpha1", "PropagatedVersion", "propagatedversions", "propagatedversion", "Namespaced", &[], &[], true, &[]),
    ("core.kubefed.io", "v1alpha1", "ClusterPropagatedVersion", "clusterpropagatedversions", "clusterpropagatedversion", "Cluster", &[], &[], true, &[]),
    ("multiclusterdns.kubefed.io", "v1alpha1", "Domain", "domains", "domain", "Namespaced", &[], &[], false, &[]),
    ("multiclusterdns.kubefed.io", "v1alpha1", "ServiceDNSRecord", "servicednsrecords", "servicednsrecord", "Namespaced", &[], &[], true, &[]),
    ("multiclusterdns.kubefed.io", "v1alpha1", "IngressDNSRecord", "ingressdnsrecords", "ingressdnsrecord", "Namespaced", &[], &[], true, &[]),
    ("multiclusterdns.kubefed.io", "v1alpha1", "DNSEndpoint", "dnsendpoints", "dnsendpoint", "Namespaced", &[], &[], true, &[]),
    // Flotilla's own.
    ("work.flotilla.io", "v1alpha1", "WorkTombstone", "worktombstones", "worktombstone", "Namespaced", &[], &[], false, &["REASON", "DELETED"]),
    (
        "edge.flotilla.io",
        "v1alpha1",
        "EdgeChange",
        "edgechanges",
        "edgechange",
        "Namespaced",
        &[],
        &[],
        true,
        &["CHANGE", "KIND", "OBJECT", "BY", "LAST-SEEN", "DECISION"],
    ),
    ("edge.flotilla.io", "v1alpha1", "EdgeOverride", "edgeoverrides", "edgeoverride", "Namespaced", &[], &[], false, &["BINDING"]),
    ("edge.flotilla.io", "v1alpha1", "EdgeReport", "edgereports", "edgereport", "Cluster", &[], &[], true, &["ONLINE", "PENDING", "CONFLICTS", "BORN-AT-EDGE"]),
];

fn strings(value: Option<&Value>) -> Vec<String> {
    value.and_then(Value::as_array).map(|items| items.iter().map(|v| v.as_str().unwrap().to_string()).collect()).unwrap_or_default()
}

#[test]
fn every_kind_has_its_upstream_names_and_scope() {
    let crds = crds();
    assert_eq!(crds.len(), EXPECTED.len());
    for (crd, &(group, version, kind, plural, singular, scope, short, categories, status, columns)) in crds.iter().zip(EXPECTED) {
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        assert_eq!(crd["metadata"]["name"], format!("{plural}.{group}"), "{kind}");
        let spec = &crd["spec"];
        assert_eq!(spec["group"], group, "{kind}");
        assert_eq!(spec["scope"], scope, "{kind}");
        let names = &spec["names"];
        assert_eq!(names["kind"], kind);
        assert_eq!(names["plural"], plural, "{kind}");
        assert_eq!(names["singular"], singular, "{kind}");
        assert_eq!(strings(names.get("shortNames")), short, "{kind}");
        assert_eq!(strings(names.get("categories")), categories, "{kind}");
        let versions = spec["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{kind}");
        let v = &versions[0];
        assert_eq!(v["name"], version, "{kind}");
        assert_eq!((v["served"].clone(), v["storage"].clone()), (json!(true), json!(true)));
        assert_eq!(v.pointer("/subresources/status").is_some(), status, "{kind} status subresource");
        let got_columns: Vec<&str> =
            v["additionalPrinterColumns"].as_array().map(|c| c.iter().map(|c| c["name"].as_str().unwrap()).collect()).unwrap_or_default();
        assert_eq!(got_columns, columns, "{kind} printer columns");
        // The propagated versions and a ServiceExport have no spec; a Domain's
        // fields sit beside its metadata.
        let required = match kind {
            _ if kind.ends_with("PropagatedVersion") || kind == "ServiceExport" => None,
            "Domain" => Some(json!(["domain"])),
            _ => Some(json!(["spec"])),
        };
        assert_eq!(v.pointer("/schema/openAPIV3Schema/required").cloned(), required, "{kind}");
    }
}

#[test]
fn every_schema_is_structural() {
    // The control plane's, and those a pull agent installs in its member.
    for crd in crds().into_iter().chain(flotilla_api::federation::flotilla::edge::member_crds()) {
        let problems = crd_structural_problems(&crd);
        assert!(problems.is_empty(), "{}: {problems:#?}", crd["metadata"]["name"]);
    }
}

/// The schema fragments the API server must treat specially, where upstream uses raw objects,
/// arbitrary JSON or int-or-string.
#[test]
fn raw_fields_preserve_unknown_fields_and_quantities_are_int_or_string() {
    let find =
        |kind: &str| crds().into_iter().find(|c| c["spec"]["names"]["kind"] == kind).unwrap()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let work = find("Work");
    assert_eq!(
        work.pointer("/properties/spec/properties/workload/properties/manifests/items"),
        Some(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}))
    );
    let rb = find("ResourceBinding");
    let status = rb.pointer("/properties/status/properties/aggregatedStatus/items/properties/status").unwrap();
    assert_eq!(status["x-kubernetes-preserve-unknown-fields"], true);
    let request = rb.pointer("/properties/spec/properties/replicaRequirements/properties/resourceRequest/additionalProperties").unwrap();
    assert_eq!(request["x-kubernetes-int-or-string"], true);
    assert_eq!(rb.pointer("/properties/spec/properties/conflictResolution/default"), Some(&json!("Abort")));
    let op = find("OverridePolicy");
    let value = op.pointer("/properties/spec/properties/overrideRules/items/properties/overriders/properties/plaintext/items/properties/value").unwrap();
    assert_eq!(value["x-kubernetes-preserve-unknown-fields"], true);
    assert!(value.get("type").is_none(), "any JSON value, as apiextensionsv1.JSON");
    let pp = find("PropagationPolicy");
    let spec = pp.pointer("/properties/spec/properties").unwrap();
    assert_eq!(spec["resourceSelectors"]["minItems"], 1);
    assert_eq!(spec["schedulerName"]["default"], "default-scheduler");
    assert_eq!(spec["priority"]["default"], 0);
    assert_eq!(spec["preemption"]["enum"], json!(["Always", "Never"]));
    assert_eq!(
        spec.pointer("/placement/properties/replicaScheduling/properties/replicaSchedulingType"),
        Some(&json!({"type": "string", "enum": ["Duplicated", "Divided"], "default": "Divided", "description": "Duplicated or Divided."}))
    );
    assert_eq!(
        spec.pointer("/placement/properties/spreadConstraints/items/properties/spreadByField/enum"),
        Some(&json!(["cluster", "region", "zone", "provider"]))
    );
    let cluster = find("Cluster");
    let spec = cluster.pointer("/properties/spec/properties").unwrap();
    assert_eq!(spec["syncMode"]["enum"], json!(["Push", "Pull"]));
    assert!(spec.get("insecureSkipTLSVerification").is_some());
    assert!(spec.get("proxyURL").is_some());
    assert_eq!(cluster["required"], json!(["spec"]));
    assert_eq!(cluster.pointer("/properties/spec/required"), Some(&json!(["syncMode"])));
}

fn target(group: &str, kind: &str, plural: &str, scope: ResourceScope) -> ApiResource {
    ApiResource { group: (!group.is_empty()).then(|| group.to_string()), version: "v1".into(), kind: kind.into(), plural_name: plural.into(), scope }
}

#[test]
fn federated_type_crds_follow_kubefedctl_enable() {
    let deployment = federated_type_crd(&target("apps", "Deployment", "deployments", ResourceScope::Namespaced));
    assert_eq!(deployment["metadata"]["name"], "federateddeployments.types.kubefed.io");
    let names = &deployment["spec"]["names"];
    assert_eq!(names["kind"], "FederatedDeployment");
    assert_eq!(names["plural"], "federateddeployments");
    assert_eq!(names["singular"], "federateddeployment");
    assert_eq!(names["listKind"], "FederatedDeploymentList");
    assert_eq!(deployment["spec"]["scope"], "Namespaced");
    let v = &deployment["spec"]["versions"][0];
    assert_eq!(v["name"], "v1beta1");
    assert_eq!(v["subresources"], json!({"status": {}}));
    let schema = &v["schema"]["openAPIV3Schema"];
    assert!(structural_problems(schema).is_empty(), "{:#?}", structural_problems(schema));
    assert_eq!(schema["required"], json!(["spec"]));
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["template"], json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "description": spec["template"]["description"]}));
    assert_eq!(spec["retainReplicas"]["type"], "boolean");
    assert_eq!(spec.pointer("/placement/properties/clusters/items/required"), Some(&json!(["name"])));
    let clause = spec.pointer("/overrides/items/properties/clusterOverrides/items").unwrap();
    assert_eq!(clause["properties"]["op"]["pattern"], "^(add|remove|replace)?$");
    assert_eq!(clause["required"], json!(["path"]));
    assert_eq!(clause["properties"]["value"]["x-kubernetes-preserve-unknown-fields"], true);

    // A mesh kind: not scalable, no retainReplicas; short names get an `f` prefix.
    let vs = target("networking.istio.io", "VirtualService", "virtualservices", ResourceScope::Namespaced);
    let options = FederatedTypeOptions { target_short_names: vec!["vs".into()], ..FederatedTypeOptions::for_target(&vs) };
    let crd = federated_type_crd_with(&vs, &options);
    assert_eq!(crd["metadata"]["name"], "federatedvirtualservices.types.kubefed.io");
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["fvs"]));
    assert!(crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/retainReplicas").is_none());

    // Namespaces are federated by a namespaced type; other cluster-scoped kinds stay cluster-scoped.
    let ns = federated_type_crd(&target("", "Namespace", "namespaces", ResourceScope::Cluster));
    assert_eq!(ns["spec"]["scope"], "Namespaced");
    let cr = federated_type_crd(&target("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", ResourceScope::Cluster));
    assert_eq!(cr["spec"]["scope"], "Cluster");
    assert_eq!(cr["metadata"]["name"], "federatedclusterroles.types.kubefed.io");
}

#[test]
fn crds_yaml_is_one_document_per_crd_and_reads_back() {
    let yaml = crds_yaml();
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&yaml).unwrap();
    let mut all = crds();
    all.extend(flotilla_api::federation::kubefed::default_federated_type_crds());
    assert_eq!(docs, all);
    // Condition enums "True"/"False" must stay strings for YAML 1.1 readers (kubectl).
    assert!(!yaml.contains("- True\n"), "unquoted True would read back as a boolean in YAML 1.1");
}

#[test]
fn kubefed_objects_yaml_reads_back() {
    let yaml = flotilla_api::federation::kubefed_objects_yaml();
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&yaml).unwrap();
    assert_eq!(docs, flotilla_api::federation::kubefed::install::objects());
    assert_eq!(docs.len(), 12, "namespace, KubeFedConfig, ten FederatedTypeConfigs");
}
