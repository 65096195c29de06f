//! Table tests: objects as defaulting leaves them, in; the causes kube-apiserver answers, out.
//! Expected messages marked "recorded" are copied from `conformance/recorded/`.

use serde_json::{Value, json};

use super::*;

/// A defaulted container.
fn container() -> Value {
    json!({"name": "app", "image": "nginx:1.27", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"})
}

/// A defaulted pod template with these labels.
fn template(labels: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": {"containers": [container()], "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}})
}

fn deployment() -> Value {
    json!({"metadata": {"name": "web"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template(json!({"app": "web"})),
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
        "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}})
}

fn service() -> Value {
    json!({"metadata": {"name": "svc"}, "spec": {"type": "ClusterIP", "sessionAffinity": "None",
        "ports": [{"port": 80, "targetPort": 80, "protocol": "TCP"}], "selector": {"app": "web"}}})
}

/// `obj` with the JSON pointer `at` set to `v` (null removes).
fn with(mut obj: Value, at: &str, v: Value) -> Value {
    let (parent, key) = at.rsplit_once('/').unwrap();
    let target = obj.pointer_mut(parent).unwrap().as_object_mut().unwrap();
    if v.is_null() {
        target.remove(key);
    } else {
        target.insert(key.to_string(), v);
    }
    obj
}

fn messages(errs: Vec<FieldError>) -> Vec<String> {
    errs.into_iter().map(|e| format!("{} {}: {}", e.reason.as_str(), e.field, e.message)).collect()
}

#[test]
fn creates() {
    let cases: Vec<(&str, &str, &str, Value, Vec<&str>)> = vec![
        ("valid deployment", "apps", "Deployment", deployment(), vec![]),
        (
            // recorded: errors-deployment-invalid-causes
            "negative replicas, template not selected",
            "apps",
            "Deployment",
            with(with(deployment(), "/spec/replicas", json!(-1)), "/spec/template", template(json!({"app": "other"}))),
            vec![
                "FieldValueInvalid spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "FieldValueInvalid spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`",
            ],
        ),
        (
            // recorded: errors-deployment-missing-template (defaulting leaves the policies)
            "missing template",
            "apps",
            "Deployment",
            with(deployment(), "/spec/template", json!({"spec": {"restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}})),
            vec![
                "FieldValueInvalid spec.template.metadata.labels: Invalid value: null: `selector` does not match template `labels`",
                "FieldValueRequired spec.template.spec.containers: Required value",
            ],
        ),
        (
            "empty selector",
            "apps",
            "Deployment",
            with(deployment(), "/spec/selector", json!({})),
            vec!["FieldValueInvalid spec.selector: Invalid value: {}: empty selector is invalid for deployment"],
        ),
        (
            "both surge and unavailable zero",
            "apps",
            "Deployment",
            with(deployment(), "/spec/strategy/rollingUpdate", json!({"maxUnavailable": 0, "maxSurge": "0%"})),
            vec!["FieldValueInvalid spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"],
        ),
        (
            "daemonset restarts always",
            "apps",
            "DaemonSet",
            json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": with(template(json!({"app": "a"})), "/spec/restartPolicy", json!("Never"))}}),
            vec!["FieldValueNotSupported spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""],
        ),
        (
            "statefulset without selector",
            "apps",
            "StatefulSet",
            json!({"spec": {"replicas": 1, "podManagementPolicy": "OrderedReady", "updateStrategy": {"type": "RollingUpdate"}, "template": template(json!({"app": "a"}))}}),
            vec![
                "FieldValueRequired spec.selector: Required value",
                "FieldValueInvalid spec.template.metadata.labels: Invalid value: {\"app\":\"a\"}: `selector` does not match template `labels`",
            ],
        ),
        (
            // recorded: errors-service-invalid-port (targetPort defaults to the port)
            "service port out of range",
            "",
            "Service",
            with(service(), "/spec/ports", json!([{"port": 70000, "targetPort": 70000, "protocol": "TCP"}])),
            vec![
                "FieldValueInvalid spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "FieldValueInvalid spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ],
        ),
        ("service without ports", "", "Service", with(service(), "/spec/ports", Value::Null), vec!["FieldValueRequired spec.ports: Required value"]),
        ("headless service without ports", "", "Service", with(with(service(), "/spec/ports", Value::Null), "/spec/clusterIP", json!("None")), vec![]),
        (
            "two unnamed ports",
            "",
            "Service",
            with(service(), "/spec/ports", json!([{"port": 80, "targetPort": 80, "protocol": "TCP"}, {"port": 81, "targetPort": "web", "protocol": "TCP"}])),
            vec!["FieldValueRequired spec.ports[0].name: Required value", "FieldValueRequired spec.ports[1].name: Required value"],
        ),
        (
            // recorded: errors-pod-no-containers
            "pod without containers",
            "",
            "Pod",
            json!({"spec": {"containers": [], "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}}),
            vec!["FieldValueRequired spec.containers: Required value"],
        ),
        ("valid configmap", "", "ConfigMap", json!({"data": {"a.b_C-1": "x"}, "binaryData": {"b": "eA=="}}), vec![]),
        (
            "configmap key with a slash, key in both maps",
            "",
            "ConfigMap",
            json!({"data": {"a/b": "x", "c": "y"}, "binaryData": {"c": "eA=="}}),
            vec![
                "FieldValueInvalid data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                "FieldValueInvalid data[c]: Invalid value: \"c\": duplicate of key present in binaryData",
                "FieldValueInvalid binaryData[c]: Invalid value: \"c\": duplicate of key present in data",
            ],
        ),
        (
            "tls secret without a key",
            "",
            "Secret",
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}),
            vec!["FieldValueRequired data[tls.key]: Required value"],
        ),
        (
            "namespace finalizer not qualified",
            "",
            "Namespace",
            json!({"spec": {"finalizers": ["kubernetes", "mine"]}}),
            vec!["FieldValueInvalid spec.finalizers: Invalid value: \"mine\": name is neither a standard finalizer name nor is it fully qualified"],
        ),
        ("unknown kinds pass", "example.com", "Widget", json!({"spec": {"replicas": -1}}), vec![]),
    ];
    for (name, group, kind, obj, want) in cases {
        assert_eq!(messages(validate(group, kind, &obj)), want, "{name}");
    }
}

#[test]
fn updates() {
    let cm = json!({"data": {"a": "1"}, "immutable": true});
    let secret = json!({"type": "Opaque"});
    let cases: Vec<(&str, &str, &str, Value, Value, Vec<&str>)> = vec![
        (
            // recorded: errors-immutable-configmap
            "immutable configmap data",
            "",
            "ConfigMap",
            json!({"data": {"a": "2"}, "immutable": true}),
            cm.clone(),
            vec!["FieldValueForbidden data: Forbidden: field is immutable when `immutable` is set"],
        ),
        (
            "immutable configmap made mutable",
            "",
            "ConfigMap",
            json!({"data": {"a": "1"}}),
            cm.clone(),
            vec!["FieldValueForbidden immutable: Forbidden: field is immutable when `immutable` is set"],
        ),
        ("mutable configmap", "", "ConfigMap", json!({"data": {"a": "2"}}), json!({"data": {"a": "1"}}), vec![]),
        (
            // recorded: errors-secret-type-immutable
            "secret type",
            "",
            "Secret",
            json!({"type": "example.com/other"}),
            secret,
            vec!["FieldValueInvalid type: Invalid value: \"example.com/other\": field is immutable"],
        ),
        (
            // recorded: errors-deployment-selector-immutable
            "deployment selector",
            "apps",
            "Deployment",
            with(with(deployment(), "/spec/selector", json!({"matchLabels": {"app": "web2"}})), "/spec/template", template(json!({"app": "web2"}))),
            deployment(),
            vec!["FieldValueInvalid spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web2\"}}: field is immutable"],
        ),
        ("deployment scaled", "apps", "Deployment", with(deployment(), "/spec/replicas", json!(5)), deployment(), vec![]),
        (
            "statefulset service name",
            "apps",
            "StatefulSet",
            json!({"spec": {"serviceName": "b", "replicas": 1, "podManagementPolicy": "OrderedReady", "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": {"app": "a"}}, "template": template(json!({"app": "a"}))}}),
            json!({"spec": {"serviceName": "a", "replicas": 3, "podManagementPolicy": "OrderedReady", "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": {"app": "a"}}, "template": template(json!({"app": "a"}))}}),
            vec![
                "FieldValueForbidden spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ],
        ),
    ];
    for (name, group, kind, new, old, want) in cases {
        assert_eq!(messages(validate_update(group, kind, &new, &old)), want, "{name}");
    }
}

#[test]
fn status_writes() {
    // recorded: sub-status-invalid
    let obj = json!({"status": {"replicas": -3}});
    assert_eq!(
        messages(validate_status("apps", "Deployment", &obj)),
        [
            "FieldValueInvalid status.replicas: Invalid value: -3: must be greater than or equal to 0",
            "FieldValueInvalid status.updatedReplicas: Invalid value: 0: cannot be greater than status.replicas",
            "FieldValueInvalid status.readyReplicas: Invalid value: 0: cannot be greater than status.replicas",
            "FieldValueInvalid status.availableReplicas: Invalid value: 0: cannot be greater than status.replicas",
        ]
    );
    assert!(validate_status("apps", "Deployment", &json!({"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 1}})).is_empty());
    assert_eq!(
        messages(validate_status("apps", "ReplicaSet", &json!({"status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 2}}))),
        [
            "FieldValueInvalid status.availableReplicas: Invalid value: 2: cannot be greater than status.replicas",
            "FieldValueInvalid status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas",
        ]
    );
}
