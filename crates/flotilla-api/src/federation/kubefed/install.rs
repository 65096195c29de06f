//! What a fresh KubeFed control plane holds besides the CRDs (the Helm chart's objects, KubeFed
//! v0.10.0): the system namespace `kube-federation-system`, the `KubeFedConfig` named `kubefed`
//! with every default written out, and one `FederatedTypeConfig` per default target type. Pure
//! JSON builders; `flotilla up` creates them through the API and `flotilla crds
//! --kubefed-objects` prints them for other hosts.
//!
//! The KubeFedConfig is written fully defaulted (as KubeFed's mutating webhook would leave it)
//! because a plain kube-apiserver host has no such webhook.

use serde_json::{Map, Value, json};

use super::core::{ApiResource, DEFAULT_SYSTEM_NAMESPACE, FederatedTypeConfig, FederatedTypeConfigSpec, PropagationMode, ResourceScope, TargetType};
use super::types::{FederatedTypeOptions, federated_type_definition};
use crate::federation::crd::Scope;

/// Name of the one KubeFedConfig the control plane reads.
pub const KUBEFED_CONFIG_NAME: &str = "kubefed";

/// The system namespace.
pub fn system_namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEFAULT_SYSTEM_NAMESPACE}})
}

/// The KubeFedConfig `kubefed` of a cluster-scoped control plane, every default filled in.
pub fn kubefed_config() -> Value {
    let mut spec = Map::new();
    spec.insert("scope".into(), json!("Cluster"));
    crate::admission::kubefed::default_kubefed_config(&mut spec);
    // The one cluster probe reads `clusterHealthCheck` (ADR 0011): seeded as the probe runs by
    // default (Karmada's 10 s period, 5 s timeout, 30 s to withdraw or restore Ready = 4 probes),
    // not KubeFed's own defaults, so seeding changes nothing and the object tells the truth.
    spec.insert("clusterHealthCheck".into(), json!({"period": "10s", "timeout": "5s", "failureThreshold": 4, "successThreshold": 4}));
    json!({
        "apiVersion": "core.kubefed.io/v1beta1",
        "kind": "KubeFedConfig",
        "metadata": {"name": KUBEFED_CONFIG_NAME, "namespace": DEFAULT_SYSTEM_NAMESPACE},
        "spec": spec,
    })
}

/// The FederatedTypeConfig name of `target`: `<plural>[.<group>]`.
pub fn federated_type_config_name(target: &TargetType) -> String {
    match target.group.as_deref().filter(|g| !g.is_empty()) {
        Some(group) => format!("{}.{group}", target.plural_name),
        None => target.plural_name.clone(),
    }
}

/// The FederatedTypeConfig `kubefedctl enable` creates for `target` in `namespace`,
/// propagation enabled.
pub fn federated_type_config(target: &TargetType, options: &FederatedTypeOptions, namespace: &str) -> FederatedTypeConfig {
    let definition = federated_type_definition(target, options);
    let federated_type = ApiResource {
        group: Some(definition.group),
        version: definition.version,
        kind: definition.kind,
        plural_name: definition.plural,
        scope: match definition.scope {
            Scope::Namespaced => ResourceScope::Namespaced,
            Scope::Cluster => ResourceScope::Cluster,
        },
    };
    let mut ftc = FederatedTypeConfig::new(
        &federated_type_config_name(target),
        FederatedTypeConfigSpec {
            target_type: target.clone(),
            propagation: PropagationMode::Enabled,
            federated_type,
            status_type: None,
            status_collection: None,
        },
    );
    ftc.metadata.namespace = Some(namespace.to_string());
    ftc
}

/// The default FederatedTypeConfigs (one per [`super::default_target_types`]) in the default
/// system namespace, as JSON.
pub fn default_federated_type_configs() -> Vec<Value> {
    super::default_target_types()
        .iter()
        .map(|t| {
            let ftc = federated_type_config(t, &super::default_type_options(t), DEFAULT_SYSTEM_NAMESPACE);
            serde_json::to_value(ftc).expect("a FederatedTypeConfig serialises")
        })
        .collect()
}

/// The system namespace, the KubeFedConfig and the default FederatedTypeConfigs, in the order
/// they can be created.
pub fn objects() -> Vec<Value> {
    let mut out = vec![system_namespace(), kubefed_config()];
    out.extend(default_federated_type_configs());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_fully_defaulted() {
        let config = kubefed_config();
        assert_eq!(config["spec"]["scope"], "Cluster");
        assert_eq!(config["spec"]["controllerDuration"]["availableDelay"], "20s");
        assert_eq!(config["spec"]["clusterHealthCheck"]["failureThreshold"], 4);
        assert_eq!(config["spec"]["syncController"]["adoptResources"], "Enabled");
        assert_eq!(config["spec"]["featureGates"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn default_ftcs_are_named_like_kubefeds() {
        let names: Vec<String> = default_federated_type_configs().iter().map(|f| f["metadata"]["name"].as_str().unwrap().to_string()).collect();
        assert_eq!(
            names,
            [
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
            ]
        );
    }

    #[test]
    fn namespaces_are_federated_by_a_namespaced_type() {
        let ftcs = default_federated_type_configs();
        let ns = ftcs.iter().find(|f| f["metadata"]["name"] == "namespaces").unwrap();
        assert_eq!(ns["spec"]["targetType"]["scope"], "Cluster");
        assert_eq!(ns["spec"]["federatedType"]["scope"], "Namespaced");
        assert_eq!(ns["spec"]["federatedType"]["kind"], "FederatedNamespace");
        assert_eq!(ns["spec"]["federatedType"]["pluralName"], "federatednamespaces");
        assert_eq!(ns["spec"]["federatedType"]["group"], "types.kubefed.io");
        assert_eq!(ns["spec"]["propagation"], "Enabled");
        assert!(ns["spec"]["targetType"].get("group").is_none());
        let cr = ftcs.iter().find(|f| f["metadata"]["name"] == "clusterroles.rbac.authorization.k8s.io").unwrap();
        assert_eq!(cr["spec"]["federatedType"]["scope"], "Cluster");
        assert!(ftcs.iter().all(|f| f.get("status").is_none()));
    }
}
