//! The control plane's API server on a store: bootstrapped (system namespaces, RBAC defaults)
//! with Flotilla's federation CRDs installed — what `flotilla up` serves and what the
//! benchmarks run in-process.

use std::sync::Arc;

use anyhow::Context as _;
use flotilla_apiserver::{ApiServer, ApiServerConfig};
use flotilla_store::Store;

/// Build the API server on `store`, bootstrap it, install the federation CRDs (Karmada's and
/// KubeFed's fixed kinds) and seed KubeFed's objects on a fresh control plane (the system
/// namespace, the KubeFedConfig, the default FederatedTypeConfigs and their `Federated<Kind>`
/// CRDs; [`crate::kubefed::seed_defaults`]). Returns the server and how many CRDs were
/// registered or changed.
pub async fn start(store: Arc<dyn Store>, config: ApiServerConfig) -> anyhow::Result<(ApiServer, usize)> {
    let api = ApiServer::new(store, config);
    api.bootstrap().await.map_err(|e| anyhow::anyhow!("bootstrap: {e}"))?;
    let installed = api
        .install_crds(flotilla_api::federation::crds())
        .await
        .map_err(|e| anyhow::anyhow!("install the federation CRDs: {e}"))
        .context("start the control plane")?;
    let client = crate::controllers::client(&api, "system:flotilla:kubefed-install");
    let seeded = crate::kubefed::seed_defaults(&client).await.context("seed KubeFed's default objects")?;
    tracing::debug!(created = seeded.created, already = seeded.already, "KubeFed objects");
    Ok((api, installed))
}

/// kubeadm's Role and RoleBinding letting anyone read `kube-public/cluster-info` (token
/// discovery happens before the newcomer has a credential).
pub const CLUSTER_INFO_READER: &str = "kubeadm:bootstrap-signer-clusterinfo";

/// Write `kube-public/cluster-info` as kubeadm does: a kubeconfig naming `server` and its CA (no
/// credential), which the bootstrap signer signs with each signing bootstrap token, readable by
/// anonymous callers. Updated when the server or the CA changed; the signatures are the
/// signer's and are left alone.
pub async fn seed_cluster_info(client: &kube::Client, server: &str, ca_pem: &str) -> anyhow::Result<()> {
    use base64::Engine;
    use flotilla_api::bootstrap_token::{CLUSTER_INFO, CLUSTER_INFO_NAMESPACE, KUBECONFIG_KEY};
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{Api, Patch, PatchParams};
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    );
    let params = PatchParams::apply("flotilla-up").force();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), CLUSTER_INFO_NAMESPACE);
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CLUSTER_INFO, "namespace": CLUSTER_INFO_NAMESPACE},
        "data": {KUBECONFIG_KEY: kubeconfig}});
    configmaps.patch(CLUSTER_INFO, &params, &Patch::Apply(&cm)).await.context("write kube-public/cluster-info")?;
    let roles: Api<Role> = Api::namespaced(client.clone(), CLUSTER_INFO_NAMESPACE);
    let role = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": CLUSTER_INFO_READER, "namespace": CLUSTER_INFO_NAMESPACE},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CLUSTER_INFO], "verbs": ["get"]}]});
    roles.patch(CLUSTER_INFO_READER, &params, &Patch::Apply(&role)).await.context("write the cluster-info reader Role")?;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), CLUSTER_INFO_NAMESPACE);
    let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": CLUSTER_INFO_READER, "namespace": CLUSTER_INFO_NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLUSTER_INFO_READER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]});
    bindings.patch(CLUSTER_INFO_READER, &params, &Patch::Apply(&binding)).await.context("write the cluster-info reader RoleBinding")?;
    Ok(())
}
