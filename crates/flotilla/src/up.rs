//! `flotilla up`: the all-in-one control plane. For now: open the embedded store and serve
//! `/healthz` (the Kubernetes API server arrives with issue 3).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::routing::get;
use clap::Args;
use flotilla_store::Store;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};

use crate::store_cmd::store_path;

#[derive(Args)]
pub struct UpArgs {
    /// Where the store and credentials live (created with mode 0700).
    #[arg(long, env = "FLOTILLA_DATA_DIR", default_value = "./flotilla-data")]
    pub data_dir: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "FLOTILLA_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let path = store_path(&args.data_dir);
    let store: Arc<dyn Store> = Arc::new(
        EmbeddedStore::open(EmbeddedConfig::new(&path)).await.with_context(|| format!("open the store in {}", args.data_dir.display()))?,
    );
    let rev = store.current_revision().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("flotilla: store {} at revision {rev}; serving /healthz on http://{addr}", path.display());
    let app = axum::Router::new().route("/healthz", get(|| async { "ok" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
