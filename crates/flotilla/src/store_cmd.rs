//! `flotilla store …`: offline maintenance of the embedded store.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use flotilla_store::Store;
use flotilla_store::embedded::{self, EmbeddedConfig, EmbeddedStore};

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Check the store in a data directory and print its revision and size.
    Inspect {
        #[arg(long, default_value = "./flotilla-data")]
        data_dir: PathBuf,
    },
    /// Write a consistent copy of the store to FILE (the server must be stopped).
    Snapshot {
        file: PathBuf,
        #[arg(long, default_value = "./flotilla-data")]
        data_dir: PathBuf,
    },
    /// Replace the store in a data directory with a snapshot (the server must be stopped); the
    /// old store is kept beside it.
    Restore {
        file: PathBuf,
        #[arg(long, default_value = "./flotilla-data")]
        data_dir: PathBuf,
    },
}

/// The store file inside a data directory.
pub fn store_path(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("store.redb")
}

pub async fn run(cmd: StoreCommand) -> anyhow::Result<()> {
    match cmd {
        StoreCommand::Inspect { data_dir } => {
            let path = store_path(&data_dir);
            anyhow::ensure!(path.exists(), "no store at {}", path.display());
            let mut config = EmbeddedConfig::new(&path);
            config.retention.interval = None;
            let store = EmbeddedStore::open(config).await?;
            let rev = store.current_revision().await?;
            let compacted = store.compacted_revision().await?;
            let keys = store.range(flotilla_store::RangeRequest { count_only: true, ..Default::default() }).await?.count;
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            println!(
                "store {}: format {}, revision {rev}, compacted {compacted}, {keys} keys, {bytes} bytes",
                path.display(),
                embedded::FORMAT_VERSION
            );
        }
        StoreCommand::Snapshot { file, data_dir } => {
            let path = store_path(&data_dir);
            anyhow::ensure!(path.exists(), "no store at {}", path.display());
            let mut config = EmbeddedConfig::new(&path);
            config.retention.interval = None;
            let store = EmbeddedStore::open(config).await.context("open the store (is flotilla still running?)")?;
            let info = store.snapshot(&file).await?;
            println!("snapshot {}: revision {}, {} keys, {} bytes", file.display(), info.revision, info.keys, info.bytes);
        }
        StoreCommand::Restore { file, data_dir } => {
            let path = store_path(&data_dir);
            let (info, backup) = tokio::task::spawn_blocking(move || embedded::restore(&file, &path)).await??;
            println!("restored revision {} ({} keys) into {}", info.revision, info.keys, data_dir.display());
            if let Some(b) = backup {
                println!("the previous store was kept as {}", b.display());
            }
        }
    }
    Ok(())
}
