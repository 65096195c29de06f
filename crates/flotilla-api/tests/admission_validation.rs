//! Admission cases with expected outcomes: what karmada-webhook, karmada-aggregated-apiserver
//! and kubefed-admission-webhook reject, and the defaults they set.

use flotilla_api::admission::{self, Defaulting, FieldError, GroupVersionKind, Operation, Reason};
use serde_json::{Value, json};

const NOW: &str = "2026-05-01T10:00:00Z";

fn cluster_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("cluster.karmada.io", "v1alpha1", "Cluster")
}
fn pp_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy")
}
fn op_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "OverridePolicy")
}
fn core_gvk(kind: &str) -> GroupVersionKind {
    GroupVersionKind::gvk("core.kubefed.io", "v1beta1", kind)
}

fn default(gvk: &GroupVersionKind, obj: &mut Value, operation: Operation) -> Result<(), Vec<FieldError>> {
    let mut counter = 0;
    let mut uuid = || {
        counter += 1;
        format!("uuid-{counter}")
    };
    let mut ctx = Defaulting { operation, namespace: Some("default"), now: NOW, new_uuid: &mut uuid };
    admission::default(gvk, obj, &mut ctx)
}

/// `(path, message)` pairs, for compact assertions.
fn causes(errors: &[FieldError]) -> Vec<(String, String)> {
    errors.iter().map(|e| (e.path.clone(), e.message.clone())).collect()
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": spec})
}

#[test]
fn cluster_names_are_dns_labels_of_at_most_48_characters() {
    let push = json!({"syncMode": "Push", "apiEndpoint": "https://10.0.0.1:6443"});
    let ok = "a".repeat(48);
    assert_eq!(admission::validate(&cluster_gvk(), &cluster(&ok, push.clone()), None, &Default::default()), vec![]);
    let long = "a".repeat(49);
    let errors = admission::validate(&cluster_gvk(), &cluster(&long, push.clone()), None, &Default::default());
    assert_eq!(causes(&errors), [("metadata.name".to_string(), "must be no more than 48 characters".to_string())]);
    assert_eq!(errors[0].reason, Reason::Invalid);
    assert_eq!(errors[0].reason.as_str(), "FieldValueInvalid");
    let upper = admission::validate(&cluster_gvk(), &cluster("Member1", push.clone()), None, &Default::default());
    assert_eq!(upper.len(), 1);
    assert!(upper[0].message.contains("RFC 1123 label"), "{upper:?}");
    let empty = admission::validate(&cluster_gvk(), &cluster("", push), None, &Default::default());
    assert_eq!(empty[0].message, "must be not empty");
}

#[test]
fn cluster_spec_validation() {
    let check = |spec: Value| admission::validate(&cluster_gvk(), &cluster("member1", spec), None, &Default::default());
    // Go's url.Parse refuses a bare IP:port although the message names that form.
    let errors = check(json!({"syncMode": "Push", "apiEndpoint": "10.0.0.1:6443"}));
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("first path segment in URL cannot contain colon"), "{errors:?}");
    let errors = check(json!({"syncMode": "Push", "apiEndpoint": "https://u@h:6443/?x=1"}));
    assert_eq!(errors.len(), 2, "{errors:?}");
    let errors = check(json!({"syncMode": "Pull", "proxyURL": "ftp://proxy:21"}));
    assert_eq!(causes(&errors), [("spec.proxyURL".into(), "unsupported scheme \"ftp\", must be http, https, or socks5".into())]);
    let errors = check(json!({"syncMode": "Push", "secretRef": {"namespace": "", "name": "member1"}}));
    assert_eq!(errors[0].path, "spec.secretRef.namespace");
    assert_eq!(errors[0].reason, Reason::Required);
    let errors = check(json!({"syncMode": "Push", "taints": [
        {"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "Sometimes"}]}));
    assert_eq!(errors.iter().map(|e| e.reason).collect::<Vec<_>>(), [Reason::Duplicate, Reason::NotSupported]);
    // An unknown sync mode fails decoding, naming the field.
    let errors = check(json!({"syncMode": "Both"}));
    assert_eq!(errors[0].path, "spec.syncMode");
}

#[test]
fn cluster_defaults_on_create() {
    let mut obj = cluster(
        "member1",
        json!({"syncMode": "Push", "zone": "z1", "taints": [
            {"key": "cluster.karmada.io/not-ready", "effect": "NoExecute"},
            {"key": "cluster.karmada.io/unreachable", "effect": "NoSchedule"}]}),
    );
    default(&cluster_gvk(), &mut obj, Operation::Create).unwrap();
    let spec = &obj["spec"];
    assert_eq!(spec["zones"], json!(["z1"]));
    assert!(spec.get("zone").is_none());
    assert_eq!(spec["taints"][0]["timeAdded"], NOW);
    assert!(spec["taints"][1].get("timeAdded").is_none());
    let models = spec["resourceModels"].as_array().unwrap();
    assert_eq!(models.len(), 9);
    assert_eq!(
        models[0],
        json!({"grade": 0, "ranges": [
        {"name": "cpu", "min": "0", "max": "1"}, {"name": "memory", "min": "0", "max": "4Gi"}]})
    );
    assert_eq!(models[7]["ranges"][1], json!({"name": "memory", "min": "512Gi", "max": "1Ti"}));
    assert_eq!(models[8]["ranges"][0]["max"], "9223372036854775807");
    assert_eq!(admission::validate(&cluster_gvk(), &obj, None, &Default::default()), vec![]);

    // Given models are sorted and their outer bounds forced; broken intervals are refused.
    let mut given = cluster(
        "member2",
        json!({"syncMode": "Pull", "resourceModels": [
        {"grade": 1, "ranges": [{"name": "cpu", "min": "2", "max": "8"}]},
        {"grade": 0, "ranges": [{"name": "cpu", "min": "1", "max": "2"}]}]}),
    );
    default(&cluster_gvk(), &mut given, Operation::Update).unwrap();
    assert_eq!(given["spec"]["resourceModels"][0]["ranges"][0], json!({"name": "cpu", "min": "0", "max": "2"}));
    assert_eq!(given["spec"]["resourceModels"][1]["ranges"][0]["max"], "9223372036854775807");
    assert_eq!(admission::validate(&cluster_gvk(), &given, None, &Default::default()), vec![]);
    given["spec"]["resourceModels"][1]["ranges"][0]["min"] = json!("3");
    let errors = admission::validate(&cluster_gvk(), &given, None, &Default::default());
    assert_eq!(errors[0].message, "Model intervals for resources must be contiguous and non-overlapping");
}

fn policy(spec: Value) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "p", "namespace": "default", "labels": {"propagationpolicy.karmada.io/permanent-id": "id"}},
        "spec": spec,
    })
}

fn selectors() -> Value {
    json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}])
}

#[test]
fn propagation_policy_validation() {
    let check = |placement: Value| {
        let errors = admission::validate(&pp_gvk(), &policy(json!({"resourceSelectors": selectors(), "placement": placement})), None, &Default::default());
        causes(&errors)
    };
    assert_eq!(check(json!({"clusterAffinity": {"clusterNames": ["m1"]}})), []);
    assert_eq!(
        check(json!({"clusterAffinity": {}, "clusterAffinities": [{"affinityName": "a"}]})),
        [("spec.placement".into(), "clusterAffinities cannot co-exist with clusterAffinity".into())]
    );
    assert_eq!(
        check(json!({"clusterAffinities": [{"affinityName": "a"}, {"affinityName": "a"}]})),
        [("spec.placement.clusterAffinities".into(), "each affinity term in a policy must have a unique name".into())]
    );
    assert_eq!(
        check(json!({"clusterAffinity": {"fieldSelector": {"matchExpressions": [{"key": "color", "operator": "In", "values": ["x"]}]}}})),
        [("spec.placement.clusterAffinity.fieldSelector".into(), "unsupported key \"color\", must be provider, region, or zone".into())]
    );
    let spread = |constraints: Value| check(json!({"spreadConstraints": constraints}));
    assert_eq!(
        spread(json!([{"spreadByField": "cluster", "spreadByLabel": "x", "minGroups": 1}])),
        [("spec.placement.spreadConstraints[0]".into(), "spreadByLabel should not co-exist with spreadByField".into())]
    );
    assert_eq!(
        spread(json!([{"spreadByField": "cluster", "minGroups": 3, "maxGroups": 2}])),
        [("spec.placement.spreadConstraints[0]".into(), "maxGroups lower than minGroups is not allowed".into())]
    );
    assert_eq!(
        spread(json!([{"spreadByField": "region", "minGroups": 1}])),
        [(
            "spec.placement.spreadConstraints".into(),
            "the cluster spread constraint must be enabled in one of the constraints in case of SpreadByField is enabled".into()
        )]
    );
    assert_eq!(
        spread(
            json!([{"spreadByField": "cluster", "minGroups": 1}, {"spreadByField": "cluster", "minGroups": 1}, {"spreadByField": "cluster", "minGroups": 1}])
        ),
        [("spec.placement.spreadConstraints".into(), "multiple cluster spread constraints are not allowed".into())]
    );

    let spec_errors = |spec: Value| causes(&admission::validate(&pp_gvk(), &policy(spec), None, &Default::default()));
    assert_eq!(
        spec_errors(json!({"resourceSelectors": selectors(), "failover": {"application": {"decisionConditions": {}, "gracePeriodSeconds": 600}}})),
        [("spec.propagateDeps".into(), "application failover is set, propagateDeps must be true".into())]
    );
    assert_eq!(
        spec_errors(json!({"resourceSelectors": selectors(), "propagateDeps": true, "failover": {"application": {
            "decisionConditions": {"tolerationSeconds": -1}, "purgeMode": "Directly", "gracePeriodSeconds": 0}}})),
        [
            ("spec.failover.application.decisionConditions.tolerationSeconds".into(), "must be greater than or equal to 0".into()),
            ("spec.failover.application.gracePeriodSeconds".into(), "only takes effect when purgeMode is gracefully".into()),
            ("spec.failover.application.gracePeriodSeconds".into(), "must be greater than 0".into()),
        ]
    );
    // workloadAffinity's keys are label keys, and not the same for both terms.
    let errs = spec_errors(json!({"resourceSelectors": selectors(), "placement": {"workloadAffinity": {
        "affinity": {"groupByLabelKey": "app.group"}, "antiAffinity": {"groupByLabelKey": "app.group"}}}}));
    assert_eq!(errs, [("spec.placement.workloadAffinity".into(), "affinity and antiAffinity must not use the same groupByLabelKey".into())]);
    let errs = spec_errors(json!({"resourceSelectors": selectors(), "placement": {"workloadAffinity": {"antiAffinity": {"groupByLabelKey": "-bad"}}}}));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, "spec.placement.workloadAffinity.antiAffinity.groupByLabelKey");
    // statePreservation's alias names are label keys, in both failover kinds.
    let errs = spec_errors(json!({"resourceSelectors": selectors(), "propagateDeps": true, "failover": {
        "cluster": {"purgeMode": "Directly", "statePreservation": {"rules": [{"aliasLabelName": "example.com/ok", "jsonPath": "{.a}"}, {"aliasLabelName": "bad key!", "jsonPath": "{.b}"}]}},
        "application": {"decisionConditions": {}, "purgeMode": "Directly", "statePreservation": {"rules": [{"aliasLabelName": "/x", "jsonPath": "{.c}"}]}}}}));
    let at: Vec<&str> = errs.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        at,
        ["spec.failover.cluster.statePreservation.rules[1].aliasLabelName", "spec.failover.application.statePreservation.rules[0].aliasLabelName"],
        "{errs:?}"
    );
    assert!(errs[0].1.contains("name part must consist of alphanumeric characters"), "{errs:?}");
    assert!(errs[1].1.contains("prefix part must be non-empty"), "{errs:?}");
    assert_eq!(
        spec_errors(json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}], "preemption": "Always"})),
        [(
            "spec.resourceSelectors[0].name".into(),
            "name cannot be empty if preemption is Always, the empty name may cause unexpected resources preemption".into()
        )]
    );
    assert_eq!(
        spec_errors(json!({"resourceSelectors": selectors(), "suspension": {"dispatching": true, "dispatchingOnClusters": {"clusterNames": ["m1"]}}})).len(),
        1
    );
    // resourceSelectors is required (the CRD also says minItems 1).
    assert_eq!(spec_errors(json!({}))[0].0, "spec");
}

#[test]
fn propagation_policy_updates_keep_scheduler_and_permanent_id() {
    let old = policy(json!({"resourceSelectors": selectors(), "schedulerName": "default-scheduler"}));
    let mut new = old.clone();
    new["spec"]["schedulerName"] = json!("other");
    new["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"] = json!("forged");
    let errors = admission::validate(&pp_gvk(), &new, Some(&old), &Default::default());
    assert_eq!(errors.iter().map(|e| e.reason).collect::<Vec<_>>(), [Reason::Forbidden, Reason::Forbidden]);
    assert_eq!(errors[0].message, "the schedulerName should not be updated");
    // Updates keep the id: defaulting on update does not mint a new one.
    let mut updated = old.clone();
    default(&pp_gvk(), &mut updated, Operation::Update).unwrap();
    assert_eq!(updated["metadata"]["labels"], old["metadata"]["labels"]);
    assert!(updated["metadata"].get("finalizers").is_none());
}

#[test]
fn propagation_policy_defaults() {
    let mut obj = json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "mcs"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport", "name": "s"}],
            "placement": {"spreadConstraints": [{"maxGroups": 2}, {"spreadByLabel": "topology/zone", "minGroups": 2}]},
            "failover": {"application": {"decisionConditions": {}, "purgeMode": "Graciously"}},
        },
    });
    default(&pp_gvk(), &mut obj, Operation::Create).unwrap();
    let spec = &obj["spec"];
    assert_eq!(spec["resourceSelectors"][0]["namespace"], "default");
    assert_eq!(spec["propagateDeps"], true);
    assert_eq!(
        spec["placement"]["spreadConstraints"],
        json!([
        {"spreadByField": "cluster", "maxGroups": 2, "minGroups": 1},
        {"spreadByLabel": "topology/zone", "minGroups": 2}])
    );
    assert_eq!(spec["failover"]["application"]["gracePeriodSeconds"], 600);
    assert_eq!(obj["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"], "uuid-1");
    assert_eq!(admission::validate(&pp_gvk(), &obj, None, &Default::default()), vec![]);

    // Karmada v1.18 has no 63-character limit on a policy's name (its identity is the
    // permanent-id label, its name an annotation): a long name is accepted and labelled.
    let mut long = obj.clone();
    long["metadata"]["name"] = json!("p".repeat(200));
    default(&pp_gvk(), &mut long, Operation::Create).unwrap();
    assert_eq!(long["metadata"]["labels"]["propagationpolicy.karmada.io/permanent-id"], "uuid-1");
    assert_eq!(admission::validate(&pp_gvk(), &long, None, &Default::default()), vec![]);

    // A ClusterPropagationPolicy gets its own label and finalizer, and keeps selector namespaces.
    let cpp = GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "ClusterPropagationPolicy");
    let mut obj = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterPropagationPolicy",
        "metadata": {"name": "c"}, "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace"}],
        "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}}});
    default(&cpp, &mut obj, Operation::Create).unwrap();
    assert_eq!(obj["metadata"]["labels"], json!({"clusterpropagationpolicy.karmada.io/permanent-id": "uuid-1"}));
    assert_eq!(obj["metadata"]["finalizers"], json!(["karmada.io/cluster-propagation-policy-controller"]));
    assert!(obj["spec"]["resourceSelectors"][0].get("namespace").is_none());
    assert_eq!(obj["spec"]["placement"]["replicaScheduling"]["replicaDivisionPreference"], "Weighted");
}

#[test]
fn override_policy_validation() {
    let check = |spec: Value| {
        let obj = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy",
            "metadata": {"name": "o", "namespace": "default"}, "spec": spec});
        causes(&admission::validate(&op_gvk(), &obj, None, &Default::default()))
    };
    assert_eq!(
        check(json!({"targetCluster": {}, "overrideRules": []})),
        [("spec.targetCluster".into(), "overrideRules and targetCluster can't co-exist".into())]
    );
    assert_eq!(
        check(json!({"overriders": {"plaintext": [{"path": "/a", "operator": "remove"}]}, "overrideRules": []})),
        [("spec.overriders".into(), "overrideRules and overriders can't co-exist".into())]
    );
    let rule = |overriders: Value| check(json!({"overrideRules": [{"overriders": overriders}]}));
    // Flotilla's rule beyond Karmada's: no override moves an object or renames it.
    for path in ["/metadata/namespace", "/metadata/name", "/metadata", ""] {
        assert_eq!(
            rule(json!({"plaintext": [{"path": path, "operator": "replace", "value": "kube-system"}]})),
            [("spec.overrideRules[0].overriders.plaintext[0].path".into(), "an override may not change the object's namespace or name".into())],
            "{path:?}"
        );
    }
    assert!(rule(json!({"plaintext": [{"path": "/metadata/labels/a", "operator": "add", "value": "b"}]})).is_empty());
    assert_eq!(
        rule(json!({"imageOverrider": [{"predicate": {"path": "spec/x"}, "component": "Tag", "operator": "replace", "value": "v2"}]})),
        [("spec.overrideRules[0].overriders.imageOverrider[0].predicate.path".into(), "JSON pointer must be empty or start with a \"/\"".into())]
    );
    assert_eq!(
        rule(json!({"fieldOverrider": [{"fieldPath": "/data/cfg",
            "json": [{"subPath": "/a", "operator": "add"}, {"subPath": "/b", "operator": "remove", "value": 1}],
            "yaml": [{"subPath": "/c", "operator": "replace", "value": "x"}]}]})),
        [
            ("spec.overrideRules[0].overriders.fieldOverrider[0]".into(), "FieldOverrider has both YAML and JSON set. Only one is allowed".into()),
            ("spec.overrideRules[0].overriders.fieldOverrider[0].json[0].value".into(), "value is required for add or replace operation".into()),
            ("spec.overrideRules[0].overriders.fieldOverrider[0].json[1].value".into(), "value is not allowed for remove operation".into()),
        ]
    );
    let bad_label = rule(json!({"labelsOverrider": [{"operator": "add", "value": {"-bad": "ok", "good": "not ok!"}}]}));
    assert_eq!(bad_label.len(), 2, "{bad_label:?}");
    assert_eq!(bad_label[1].0, "spec.overrideRules[0].overriders.labelsOverrider[0].value[good]");
    // An unknown operator fails decoding at its path.
    let errors = rule(json!({"plaintext": [{"path": "/a", "operator": "merge"}]}));
    assert_eq!(errors[0].0, "spec.overrideRules[0].overriders.plaintext[0].operator");
}

fn kubefed_cluster(spec: Value) -> Value {
    json!({"apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
        "metadata": {"name": "cluster1", "namespace": "kube-federation-system"}, "spec": spec})
}

#[test]
fn kubefed_cluster_validation() {
    let check = |spec: Value| causes(&admission::validate(&core_gvk("KubeFedCluster"), &kubefed_cluster(spec), None, &Default::default()));
    assert_eq!(check(json!({"apiEndpoint": "https://172.17.0.2:6443", "secretRef": {"name": "cluster1-x"}})), []);
    assert_eq!(
        check(json!({"apiEndpoint": "https://172.17.0.2:70000", "secretRef": {"name": "s"}})),
        [("spec.apiEndpoint".into(), "port must be between 1 and 65535".into())]
    );
    assert_eq!(
        check(json!({"apiEndpoint": "https://h", "secretRef": {"name": ""}, "disabledTLSValidations": ["*", "SubjectName"]})),
        [
            ("spec.secretRef.name".into(), "".into()),
            ("spec.disabledTLSValidations".into(), "when * is specified, it is expected to be the only option in list".into()),
        ]
    );
}

#[test]
fn federated_type_config_defaults_and_validation() {
    let gvk = core_gvk("FederatedTypeConfig");
    let mut ftc = json!({"apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
    "metadata": {"name": "deployments.apps", "namespace": "kube-federation-system"},
    "spec": {
        "targetType": {"version": "v1", "kind": "Deployment", "scope": "Namespaced"},
        "propagation": "Enabled",
        "federatedType": {"group": "types.kubefed.io", "version": "v1beta1", "kind": "FederatedDeployment", "scope": "Namespaced"},
    }});
    default(&gvk, &mut ftc, Operation::Create).unwrap();
    assert_eq!(ftc["spec"]["targetType"]["pluralName"], "deployments");
    assert_eq!(ftc["spec"]["targetType"]["group"], "apps");
    assert_eq!(ftc["spec"]["federatedType"]["pluralName"], "federateddeployments");
    assert_eq!(admission::validate(&gvk, &ftc, None, &Default::default()), vec![]);

    let mut wrong = ftc.clone();
    wrong["metadata"]["name"] = json!("deployments");
    wrong["spec"]["federatedType"]["group"] = json!("federated");
    assert_eq!(
        causes(&admission::validate(&gvk, &wrong, None, &Default::default())),
        [
            ("metadata.name".into(), "name must be \"deployments.apps\"".into()),
            ("spec.federatedType.group".into(), "should be a domain with at least one dot".into()),
        ]
    );
}

#[test]
fn kubefed_config_validation() {
    let gvk = core_gvk("KubeFedConfig");
    let config = |spec: Value| {
        json!({"apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedConfig",
        "metadata": {"name": "kubefed", "namespace": "kube-federation-system"}, "spec": spec})
    };
    let mut ok = config(json!({"scope": "Namespaced"}));
    default(&gvk, &mut ok, Operation::Create).unwrap();
    assert_eq!(admission::validate(&gvk, &ok, None, &Default::default()), vec![]);
    let mut cluster_scope = ok.clone();
    cluster_scope["spec"]["scope"] = json!("Cluster");
    assert_eq!(causes(&admission::validate(&gvk, &cluster_scope, Some(&ok), &Default::default())), [("spec.scope".into(), "field is immutable".into())]);
    let mut bad = ok.clone();
    bad["spec"]["leaderElect"]["leaseDuration"] = json!("10s");
    bad["spec"]["leaderElect"]["retryPeriod"] = json!("9s");
    bad["spec"]["featureGates"][1] = bad["spec"]["featureGates"][0].clone();
    bad["spec"]["clusterHealthCheck"]["period"] = json!("0s");
    let errors = admission::validate(&gvk, &bad, None, &Default::default());
    assert_eq!(
        causes(&errors),
        [
            ("spec.clusterHealthCheck.period".into(), "should be positive".into()),
            ("spec.leaderElect.leaseDuration".into(), "leaseDuration must be greater than renewDeadline".into()),
            ("spec.leaderElect.renewDeadline".into(), "renewDeadline must be greater than retryPeriod*JitterFactor(1.2)".into()),
            ("spec.featureGates[1].name".into(), "\"PushReconciler\"".into()),
        ]
    );
    assert_eq!(errors[3].reason, Reason::Duplicate);
}

#[test]
fn unknown_kinds_pass_through() {
    let gvk = GroupVersionKind::gvk("apps", "v1", "Deployment");
    assert!(!admission::handles(&gvk));
    let mut obj = json!({"spec": {"replicas": 1}});
    default(&gvk, &mut obj, Operation::Create).unwrap();
    assert_eq!(obj, json!({"spec": {"replicas": 1}}));
    assert_eq!(admission::validate(&gvk, &obj, None, &Default::default()), vec![]);
}

/// karmada-webhook's ClusterTaintPolicy check: NoExecute only when the administrator allows
/// it, no duplicate key and effect; and what would only fail later, refused at once.
#[test]
fn cluster_taint_policies_refuse_no_execute_unless_allowed_and_duplicates() {
    let gvk = GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "ClusterTaintPolicy");
    let policy = |taints: Value, operator: &str| {
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterTaintPolicy", "metadata": {"name": "p"},
            "spec": {"addOnConditions": [{"conditionType": "Ready", "operator": operator, "statusValues": ["False"]}], "taints": taints}})
    };
    let no_schedule = json!([{"key": "cluster.karmada.io/not-ready", "effect": "NoSchedule"}]);
    assert_eq!(admission::validate(&gvk, &policy(no_schedule, "In"), None, &Default::default()), vec![]);
    let no_execute = policy(json!([{"key": "k", "effect": "NoExecute"}]), "In");
    let errors = admission::validate(&gvk, &no_execute, None, &Default::default());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].path.as_str(), errors[0].reason), ("spec.taints[0]", Reason::Forbidden));
    assert!(errors[0].message.contains("NoExecute effect is not allowed"), "{}", errors[0].message);
    let allowed = admission::Settings { allow_no_execute_taint_policy: true };
    assert_eq!(admission::validate(&gvk, &no_execute, None, &allowed), vec![]);
    let twice = policy(json!([{"key": "k", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule", "value": "v"}]), "In");
    assert_eq!(
        causes(&admission::validate(&gvk, &twice, None, &Default::default())),
        [("spec.taints[1]".into(), "Duplicate taint with the same key(k) and effect(NoSchedule) is not allowed".into())]
    );
    let bad = policy(json!([{"key": "k", "effect": "PreferNoSchedule"}]), "Exists");
    let paths: Vec<String> = admission::validate(&gvk, &bad, None, &Default::default()).into_iter().map(|e| e.path).collect();
    assert_eq!(paths, ["spec.taints[0].effect", "spec.addOnConditions[0].operator"]);
}

#[test]
fn edge_sync_annotations_are_checked_on_policies_and_clusters() {
    let with = |mut obj: Value, annotations: Value| {
        obj["metadata"]["annotations"] = annotations;
        obj
    };
    let pp = policy(json!({"resourceSelectors": selectors(), "placement": {}}));
    let good = with(
        pp.clone(),
        json!({"edge.flotilla.io/sync-policy": "EdgeWins", "edge.flotilla.io/edge-wins-fields": "spec.replicas, spec.template.spec.containers[*].image"}),
    );
    assert_eq!(admission::validate(&pp_gvk(), &good, None, &Default::default()), vec![]);
    let bad = with(pp, json!({"edge.flotilla.io/sync-policy": "EdgeFirst"}));
    let errors = admission::validate(&pp_gvk(), &bad, None, &Default::default());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "metadata.annotations[edge.flotilla.io/sync-policy]");
    assert!(errors[0].message.contains("\"EdgeFirst\"") && errors[0].message.contains("ControlPlaneWins"), "{}", errors[0].message);
    let push = json!({"syncMode": "Push", "apiEndpoint": "https://10.0.0.1:6443"});
    let bad_fields = with(cluster("edge-1", push), json!({"edge.flotilla.io/sync-policy": "EdgeWins", "edge.flotilla.io/edge-wins-fields": "spec..replicas"}));
    let errors = admission::validate(&cluster_gvk(), &bad_fields, None, &Default::default());
    assert_eq!(causes(&errors).len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "metadata.annotations[edge.flotilla.io/edge-wins-fields]");
}

fn mcs(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "networking.karmada.io/v1alpha1", "kind": "MultiClusterService", "metadata": {"name": name, "namespace": "shop"}, "spec": spec})
}

#[test]
fn multi_cluster_services_get_a_permanent_id_and_karmadas_validation() {
    let gvk = GroupVersionKind::gvk("networking.karmada.io", "v1alpha1", "MultiClusterService");
    let mut obj = mcs("web", json!({"types": ["CrossCluster"]}));
    default(&gvk, &mut obj, Operation::Create).unwrap();
    assert_eq!(obj["metadata"]["labels"]["multiclusterservice.karmada.io/permanent-id"], "uuid-1");
    let kept = obj.clone();
    default(&gvk, &mut obj, Operation::Update).unwrap();
    assert_eq!(obj, kept, "an existing id stays");
    let check = |o: &Value, old: Option<&Value>| causes(&admission::validate(&gvk, o, old, &Default::default()));
    assert_eq!(check(&obj, None), vec![]);
    let bad = mcs(
        "Web",
        json!({"types": ["CrossCluster", "NodePort"], "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 70000}],
            "providerClusters": [{"name": "member_1"}], "consumerClusters": [{"name": ""}]}),
    );
    let got = check(&bad, None);
    let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "metadata.name",
            "spec.ports[1].name",
            "spec.ports[1].port",
            "spec.types[1]",
            "spec.types",
            "spec.providerClusters[0].name",
            "spec.consumerClusters[0].name"
        ],
        "{got:?}"
    );
    assert!(got.iter().any(|(_, m)| m == "MultiClusterService types should not contain more than one type"));
    let changed = mcs("web", json!({"types": ["LoadBalancer"]}));
    assert_eq!(check(&changed, Some(&obj)), [("spec.types".to_string(), "MultiClusterService types are immutable".to_string())]);
}
