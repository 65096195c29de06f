//! InterpretDependency: the objects a workload needs in every cluster it runs in, which
//! `propagateDeps` propagates along with it (Karmada's `DependentObjectReference` list).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{InterpretError, Native, Operation, unstructured};

/// A dependency: one object by name, or every object of a kind matching a label selector.
/// Serialises as Karmada's `DependentObjectReference`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

impl ObjectRef {
    fn named(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectRef { api_version: api_version.into(), kind: kind.into(), namespace: namespace.into(), name: name.into(), label_selector: None }
    }
}

/// InterpretDependency: what `obj` depends on; `Ok(None)` for kinds without a hook. Per kind
/// (`apiVersion` and `kind`):
///
/// - `apps/v1` Deployment, DaemonSet, StatefulSet, `batch/v1` Job and CronJob (its job
///   template), `v1` Pod: from the pod spec, the ConfigMaps, then Secrets, then the
///   ServiceAccount (other than `default`), then PersistentVolumeClaims it references, each
///   kind's names sorted (Karmada walks a Go set, in no fixed order). A StatefulSet does not
///   depend on claims named like its `volumeClaimTemplates`;
/// - `networking.k8s.io/v1` Ingress: the Secret of each TLS entry;
/// - `multicluster.x-k8s.io/v1alpha1` ServiceImport: the Service `derived-<name>` and the
///   EndpointSlices labelled `kubernetes.io/service-name: derived-<name>`.
///
/// As in Karmada, a reference with neither name nor selector (a TLS entry without
/// `secretName`) is an error.
pub fn get_dependencies(obj: &Value) -> Result<Option<Vec<ObjectRef>>, InterpretError> {
    let err = |field: &str, reason: String| InterpretError::new(Operation::InterpretDependency, obj, field, reason);
    let namespace = unstructured::string(obj, &["metadata", "namespace"]).unwrap_or("");
    let template: &[&str] = &["spec", "template", "spec"];
    let deps = match Native::of(obj) {
        Some(Native::Deployment | Native::DaemonSet | Native::Job) => pod_dependencies(obj, template, namespace),
        Some(Native::CronJob) => pod_dependencies(obj, &["spec", "jobTemplate", "spec", "template", "spec"], namespace),
        Some(Native::Pod) => pod_dependencies(obj, &["spec"], namespace),
        Some(Native::StatefulSet) => {
            let claim_templates: Vec<&str> = unstructured::get(obj, &["spec", "volumeClaimTemplates"])
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| unstructured::string(t, &["metadata", "name"]))
                .collect();
            pod_dependencies(obj, template, namespace)
                .map(|deps| deps.into_iter().filter(|d| d.kind != "PersistentVolumeClaim" || !claim_templates.contains(&d.name.as_str())).collect())
        }
        Some(Native::Ingress) => {
            let tls = unstructured::nested_array(obj, &["spec", "tls"]).map_err(|e| err("spec.tls", e))?;
            Ok(tls
                .into_iter()
                .flatten()
                .map(|t| ObjectRef::named("v1", "Secret", namespace, t.get("secretName").and_then(Value::as_str).unwrap_or("")))
                .collect())
        }
        Some(Native::ServiceImport) => {
            let derived = format!("derived-{}", unstructured::string(obj, &["metadata", "name"]).unwrap_or(""));
            let selector = LabelSelector { match_labels: Some([("kubernetes.io/service-name".to_string(), derived.clone())].into()), match_expressions: None };
            Ok(vec![
                ObjectRef::named("v1", "Service", namespace, &derived),
                ObjectRef { label_selector: Some(selector), ..ObjectRef::named("discovery.k8s.io/v1", "EndpointSlice", namespace, "") },
            ])
        }
        _ => return Ok(None),
    }
    .map_err(|(field, reason)| err(&field, reason))?;
    if let Some(bad) = deps.iter().find(|d| d.name.is_empty() && d.label_selector.is_none()) {
        return Err(err("", format!("dependency {} {} has neither a name nor a labelSelector", bad.api_version, bad.kind)));
    }
    Ok(Some(deps))
}

/// `GetDependenciesFromPodTemplate`: ConfigMaps, Secrets, the ServiceAccount and PVCs the pod
/// spec at `path` references, in that order, names sorted within each kind.
fn pod_dependencies(obj: &Value, path: &[&str], namespace: &str) -> Result<Vec<ObjectRef>, (String, String)> {
    let spec = unstructured::nested(obj, path).map_err(|e| (unstructured::dotted(path), e))?.unwrap_or(&Value::Null);
    let names = PodReferences::of(spec);
    let mut deps = Vec::new();
    for (kind, set) in
        [("ConfigMap", names.config_maps), ("Secret", names.secrets), ("ServiceAccount", names.service_accounts), ("PersistentVolumeClaim", names.claims)]
    {
        deps.extend(set.iter().map(|name| ObjectRef::named("v1", kind, namespace, name)));
    }
    Ok(deps)
}

/// The names a pod spec references (Kubernetes' `VisitPodSecretNames` /
/// `VisitPodConfigmapNames`, over init, app and ephemeral containers and the volumes).
#[derive(Default)]
struct PodReferences {
    config_maps: std::collections::BTreeSet<String>,
    secrets: std::collections::BTreeSet<String>,
    service_accounts: std::collections::BTreeSet<String>,
    claims: std::collections::BTreeSet<String>,
}

impl PodReferences {
    fn of(spec: &Value) -> Self {
        let mut refs = PodReferences::default();
        let str_at = |v: &Value, path: &[&str]| unstructured::string(v, path).filter(|s| !s.is_empty()).map(String::from);
        let list = |v: &Value, key: &str| v.get(key).and_then(Value::as_array).cloned().unwrap_or_default();

        for pull in list(spec, "imagePullSecrets") {
            refs.secrets.extend(str_at(&pull, &["name"]));
        }
        for containers in ["initContainers", "containers", "ephemeralContainers"] {
            for c in list(spec, containers) {
                for from in list(&c, "envFrom") {
                    refs.config_maps.extend(str_at(&from, &["configMapRef", "name"]));
                    refs.secrets.extend(str_at(&from, &["secretRef", "name"]));
                }
                for env in list(&c, "env") {
                    refs.config_maps.extend(str_at(&env, &["valueFrom", "configMapKeyRef", "name"]));
                    refs.secrets.extend(str_at(&env, &["valueFrom", "secretKeyRef", "name"]));
                }
            }
        }
        for volume in list(spec, "volumes") {
            refs.secrets.extend(str_at(&volume, &["azureFile", "secretName"]));
            refs.secrets.extend(str_at(&volume, &["secret", "secretName"]));
            for source in ["cephfs", "cinder", "flexVolume", "rbd", "scaleIO", "iscsi", "storageos"] {
                refs.secrets.extend(str_at(&volume, &[source, "secretRef", "name"]));
            }
            refs.secrets.extend(str_at(&volume, &["csi", "nodePublishSecretRef", "name"]));
            refs.config_maps.extend(str_at(&volume, &["configMap", "name"]));
            for source in volume.get("projected").map(|p| list(p, "sources")).unwrap_or_default() {
                refs.secrets.extend(str_at(&source, &["secret", "name"]));
                refs.config_maps.extend(str_at(&source, &["configMap", "name"]));
            }
            refs.claims.extend(str_at(&volume, &["persistentVolumeClaim", "claimName"]));
        }
        refs.service_accounts.extend(str_at(spec, &["serviceAccountName"]).filter(|sa| sa != "default"));
        refs
    }
}
