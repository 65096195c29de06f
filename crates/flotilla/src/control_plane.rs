//! The control plane's API server on a store: bootstrapped (system namespaces, RBAC defaults)
//! with Flotilla's federation CRDs installed — what `flotilla up` serves and what the
//! benchmarks run in-process.

use std::sync::Arc;

use anyhow::Context as _;
use flotilla_apiserver::{ApiServer, ApiServerConfig};
use flotilla_store::Store;

/// Build the API server on `store`, bootstrap it and install the federation CRDs (Karmada's and
/// KubeFed's kinds). Returns the server and how many CRDs were registered.
pub async fn start(store: Arc<dyn Store>, config: ApiServerConfig) -> anyhow::Result<(ApiServer, usize)> {
    let api = ApiServer::new(store, config);
    api.bootstrap().await.map_err(|e| anyhow::anyhow!("bootstrap: {e}"))?;
    let mut crds = flotilla_api::federation::crds();
    crds.extend(flotilla_api::federation::kubefed::default_federated_type_crds());
    let installed = api.install_crds(crds).await.map_err(|e| anyhow::anyhow!("install the federation CRDs: {e}")).context("start the control plane")?;
    Ok((api, installed))
}
