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
