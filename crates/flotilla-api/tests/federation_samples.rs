//! Upstream sample manifests (tests/data/federation, provenance in its README) decode into the
//! federation types, round-trip without losing a field, and after admission carry the defaults
//! the upstream webhooks set.

use flotilla_api::admission::{self, Defaulting, GroupVersionKind, Operation};
use flotilla_api::federation::karmada::policy::{OverridePolicy, PropagationPolicy};
use flotilla_api::federation::karmada::work::{ResourceBinding, Work};
use flotilla_api::federation::kubefed::core::KubeFedConfig;
use flotilla_api::federation::kubefed::scheduling::ReplicaSchedulingPreference;
use flotilla_api::federation::kubefed::types::FederatedObject;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const UUID: &str = "5c2d4c4e-2a0f-4f3b-9a8e-0a1b2c3d4e5f";
const NOW: &str = "2026-05-01T10:00:00Z";

fn sample(path: &str) -> Value {
    let text = std::fs::read_to_string(manifest_dir().join(format!("tests/data/federation/{path}"))).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes `value` as `T` and encodes it again; the result must equal the input.
fn round_trip<T: DeserializeOwned + Serialize>(value: &Value) -> T {
    let typed: T = serde_json::from_value(value.clone()).expect("sample decodes");
    assert_eq!(&serde_json::to_value(&typed).unwrap(), value, "round trip lost or changed a field");
    typed
}

fn gvk(group: &str, version: &str, kind: &str) -> GroupVersionKind {
    GroupVersionKind::gvk(group, version, kind)
}

fn create(gvk: &GroupVersionKind, obj: &mut Value, namespace: Option<&str>) {
    let mut uuid = || UUID.to_string();
    let mut ctx = Defaulting { operation: Operation::Create, namespace, now: NOW, new_uuid: &mut uuid };
    admission::default(gvk, obj, &mut ctx).expect("defaulting admits the sample");
}

#[test]
fn karmada_nginx_propagation_policy() {
    let original = sample("karmada/nginx-propagationpolicy.yaml");
    let policy: PropagationPolicy = round_trip(&original);
    assert_eq!(policy.spec.resource_selectors[0].name.as_deref(), Some("nginx"));

    let pp = gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy");
    let mut obj = original.clone();
    create(&pp, &mut obj, Some("default"));
    // What karmada-webhook adds on create: the selector's namespace, the permanent id and the
    // policy controller's finalizer. Nothing else changes (the sample already says Weighted).
    let mut expected = original.clone();
    expected["metadata"]["labels"] = json!({"propagationpolicy.karmada.io/permanent-id": UUID});
    expected["metadata"]["finalizers"] = json!(["karmada.io/propagation-policy-controller"]);
    expected["spec"]["resourceSelectors"][0]["namespace"] = json!("default");
    assert_eq!(obj, expected);
    assert_eq!(admission::validate(&pp, &obj, None, &Default::default()), vec![]);

    // The same policy without a division preference gets Weighted.
    let mut obj = original.clone();
    obj["spec"]["placement"]["replicaScheduling"].as_object_mut().unwrap().remove("replicaDivisionPreference");
    create(&pp, &mut obj, Some("default"));
    assert_eq!(obj["spec"]["placement"]["replicaScheduling"]["replicaDivisionPreference"], "Weighted");
    assert_eq!(obj["spec"]["placement"]["replicaScheduling"]["weightPreference"], original["spec"]["placement"]["replicaScheduling"]["weightPreference"]);

    // Without the permanent id (i.e. not through the mutating step) validation refuses it.
    let errors = admission::validate(&pp, &original, None, &Default::default());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, "metadata.labels[propagationpolicy.karmada.io/permanent-id]");
}

#[test]
fn karmada_override_policies() {
    let op = gvk("policy.karmada.io", "v1alpha1", "OverridePolicy");
    for file in ["karmada/nginx-overridepolicy.yaml", "karmada/alpine-overridepolicy.yaml"] {
        let original = sample(file);
        let _: OverridePolicy = round_trip(&original);
        let mut obj = original.clone();
        create(&op, &mut obj, Some("default"));
        let mut expected = original.clone();
        expected["spec"]["resourceSelectors"][0]["namespace"] = json!("default");
        assert_eq!(obj, expected, "{file}");
        assert_eq!(admission::validate(&op, &obj, None, &Default::default()), vec![], "{file}");
    }
    // The plaintext value is kept as any JSON.
    let alpine = sample("karmada/alpine-overridepolicy.yaml");
    assert_eq!(alpine["spec"]["overrideRules"][0]["overriders"]["plaintext"][0]["value"], "override");
}

/// The nginx Deployment as a Work manifest (what the binding controller writes), with the
/// fields a member owns: the Work webhook prunes them and labels the manifest.
#[test]
fn karmada_work_for_the_nginx_deployment() {
    let mut deployment = sample("karmada/nginx-deployment.yaml");
    deployment["metadata"]["resourceVersion"] = json!("12");
    deployment["metadata"]["uid"] = json!("0b5e0f5c-0000-4000-8000-000000000001");
    deployment["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1", "team": "web"});
    deployment["status"] = json!({"replicas": 2});
    let work = json!({
        "apiVersion": "work.karmada.io/v1alpha1",
        "kind": "Work",
        "metadata": {"name": "nginx-687f7fb96f", "namespace": "karmada-es-member1"},
        "spec": {"workload": {"manifests": [deployment]}},
    });
    let _: Work = round_trip(&work);
    let mut obj = work.clone();
    create(&gvk("work.karmada.io", "v1alpha1", "Work"), &mut obj, Some("karmada-es-member1"));
    assert_eq!(obj["metadata"]["labels"], json!({"work.karmada.io/permanent-id": UUID}));
    let manifest = &obj["spec"]["workload"]["manifests"][0];
    assert!(manifest.get("status").is_none());
    assert!(manifest["metadata"].get("resourceVersion").is_none());
    assert!(manifest["metadata"].get("uid").is_none());
    assert_eq!(manifest["metadata"]["labels"], json!({"app": "nginx", "work.karmada.io/permanent-id": UUID}));
    assert_eq!(
        manifest["metadata"]["annotations"],
        json!({
            "team": "web",
            "resourcetemplate.karmada.io/managed-annotations":
                "resourcetemplate.karmada.io/managed-annotations,resourcetemplate.karmada.io/managed-labels,team",
            "resourcetemplate.karmada.io/managed-labels": "app,work.karmada.io/permanent-id",
        })
    );
    assert_eq!(manifest["spec"], sample("karmada/nginx-deployment.yaml")["spec"]);
}

#[test]
fn karmada_binding_gets_a_permanent_id_once() {
    let rb = gvk("work.karmada.io", "v1alpha2", "ResourceBinding");
    let binding = json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": "nginx-deployment", "namespace": "default"},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "nginx", "uid": "u1"},
            "replicas": 2,
            "clusters": [{"name": "member1", "replicas": 1}, {"name": "member2", "replicas": 1}],
            "placement": sample("karmada/nginx-propagationpolicy.yaml")["spec"]["placement"],
        },
    });
    let _: ResourceBinding = round_trip(&binding);
    let mut obj = binding.clone();
    create(&rb, &mut obj, Some("default"));
    assert_eq!(obj["metadata"]["labels"]["resourcebinding.karmada.io/permanent-id"], UUID);
    // An existing id is kept, also on update.
    let mut again = obj.clone();
    let mut other = || "other".to_string();
    let mut ctx = Defaulting { operation: Operation::Update, namespace: None, now: NOW, new_uuid: &mut other };
    admission::default(&rb, &mut again, &mut ctx).unwrap();
    assert_eq!(again, obj);
}

#[test]
fn kubefed_federated_deployment() {
    let original = sample("kubefed/federateddeployment.yaml");
    let object: FederatedObject = round_trip(&original);
    let overrides = object.spec.overrides.as_ref().unwrap();
    assert_eq!(overrides[0].cluster_overrides.as_ref().unwrap().len(), 4);
    assert_eq!(object.spec.template.as_ref().unwrap()["spec"]["replicas"], 3);
    // Federated<Kind> objects have no admission duties upstream: only their CRD schema.
    let mut obj = original.clone();
    create(&gvk("types.kubefed.io", "v1beta1", "FederatedDeployment"), &mut obj, Some("test-namespace"));
    assert_eq!(obj, original);
}

#[test]
fn kubefed_replica_scheduling_preference() {
    let original = sample("kubefed/federateddeployment-rsp.yaml");
    let rsp: ReplicaSchedulingPreference = round_trip(&original);
    assert_eq!(rsp.spec.total_replicas, 10);
    assert_eq!(rsp.spec.clusters.as_ref().unwrap()["cluster2"].weight, Some(3));
    // No RSP webhook upstream; the planner reads absent min/weight as 0.
    let mut obj = original.clone();
    create(&gvk("scheduling.kubefed.io", "v1alpha1", "ReplicaSchedulingPreference"), &mut obj, None);
    assert_eq!(obj, original);
}

#[test]
fn kubefed_config_defaults_and_removed_gates() {
    let original = sample("kubefed/kubefedconfig.yaml");
    let kfc = gvk("core.kubefed.io", "v1beta1", "KubeFedConfig");
    let mut obj = original.clone();
    create(&kfc, &mut obj, Some("kube-federation-system"));
    let spec = &obj["spec"];
    // Given values stay as written; missing ones get KubeFed's defaults.
    assert_eq!(spec["controllerDuration"]["availableDelay"], "20s");
    assert_eq!(spec["controllerDuration"]["unavailableDelay"], "60s");
    assert_eq!(spec["controllerDuration"]["cacheSyncTimeout"], "5m0s");
    assert_eq!(spec["clusterHealthCheck"], json!({"period": "10s", "failureThreshold": 3, "successThreshold": 1, "timeout": "3s"}));
    assert_eq!(spec["syncController"], json!({"maxConcurrentReconciles": 1, "adoptResources": "Enabled"}));
    assert_eq!(spec["statusController"], json!({"maxConcurrentReconciles": 1}));
    assert_eq!(spec["featureGates"][4], json!({"name": "RawResourceStatusCollection", "configuration": "Disabled"}));
    assert_eq!(spec["featureGates"].as_array().unwrap().len(), 5);
    let typed: KubeFedConfig = serde_json::from_value(obj.clone()).unwrap();
    assert_eq!(typed.spec.leader_elect.unwrap().lease_duration.as_deref(), Some("15s"));
    // The example still names the gates v0.7 removed; v0.10's validation refuses them.
    let errors = admission::validate(&kfc, &obj, None, &Default::default());
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["spec.featureGates[2].name", "spec.featureGates[3].name"]);
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
