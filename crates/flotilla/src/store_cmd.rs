//! `flotilla store …`: offline maintenance of the embedded store.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use flotilla_store::Store;
use flotilla_store::embedded::{self, EmbeddedConfig, EmbeddedStore};
use flotilla_store::encrypted::{EncryptedStore, EncryptionConfig};

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
    /// Write every value the encryption configuration covers again with its current (first)
    /// key, then compact so that no revision keeps the old form (after a key rotation; the
    /// server must be stopped — `flotilla up` does the same at start-up).
    Reencrypt {
        #[arg(long, default_value = "./flotilla-data")]
        data_dir: PathBuf,
        /// The EncryptionConfiguration (default: DATA_DIR/encryption-config.yaml).
        #[arg(long)]
        encryption_provider_config: Option<PathBuf>,
    },
    /// Replace the store in a data directory with a snapshot (the server must be stopped); the
    /// old store is kept beside it.
    Restore {
        file: PathBuf,
        #[arg(long, default_value = "./flotilla-data")]
        data_dir: PathBuf,
    },
}

/// The encryption configuration of a data directory: `explicit`, else
/// DATA_DIR/encryption-config.yaml — written with a fresh secretbox key when missing (mode
/// 0600). Returns its path and the rules it gives the store.
pub fn encryption_config(data_dir: &std::path::Path, explicit: Option<&std::path::Path>) -> anyhow::Result<(PathBuf, EncryptionConfig)> {
    let path = explicit.map(PathBuf::from).unwrap_or_else(|| data_dir.join("encryption-config.yaml"));
    if !path.exists() {
        anyhow::ensure!(explicit.is_none(), "--encryption-provider-config {}: no such file", path.display());
        let key: [u8; 32] = rand::random();
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).with_context(|| format!("create {}", path.display()))?;
        f.write_all(flotilla_apiserver::encryption::default_config(&key).as_bytes())
            .and_then(|_| f.sync_all())
            .with_context(|| format!("write {}", path.display()))?;
        println!("flotilla: Secrets are encrypted at rest with the new key in {} (keep a copy of it apart from the data directory)", path.display());
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let config = flotilla_apiserver::encryption::parse(&text).with_context(|| path.display().to_string())?;
    Ok((path, config))
}

/// The embedded store of a data directory behind its encryption rules. Values stored in
/// another form (a store written before encryption, or before a key rotation) are written
/// again with the current key; then the old revisions are compacted away and the store is
/// written afresh into a new file that replaces the old one, since the pages that held the old
/// form may still hold its bytes. A wrong key fails before anything is written.
pub async fn open_encrypted(config: EmbeddedConfig, encryption: EncryptionConfig, encryption_path: &std::path::Path) -> anyhow::Result<Arc<dyn Store>> {
    let path = config.path.clone();
    let context = || format!("the store cannot be read with {}: is it the key this data directory was encrypted with?", encryption_path.display());
    // Checked read-only first: a wrong key leaves the data file exactly as it was. A file that
    // needs repair (after a crash) cannot be read so: the open below repairs it, and the keys
    // are checked right after it, before anything is written.
    for rule in &encryption.rules {
        if let Ok(sample) = embedded::read_prefix(&path, &rule.prefix, flotilla_store::encrypted::SAMPLE) {
            encryption.check(sample).with_context(context)?;
        }
    }
    let embedded = Arc::new(EmbeddedStore::open(config.clone()).await.with_context(|| format!("open the store {}", path.display()))?);
    let store = EncryptedStore::new(embedded.clone(), encryption.clone()).await.with_context(context)?;
    // The marker is the write after the last rewrite that lets compaction drop what it replaced.
    let marker = |done: &flotilla_store::encrypted::Rewritten| {
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        (
            bytes::Bytes::from_static(b"/registry/flotilla.io/encryption-rewritten"),
            bytes::Bytes::from(format!("{{\"rewritten\":{},\"at\":{at}}}", done.rewritten)),
        )
    };
    let done = store
        .reencrypt(marker, |n| {
            if n % 1000 == 0 {
                eprintln!("flotilla: re-encrypting: {n} values written")
            }
        })
        .await
        .context("re-encrypting the store and compacting the values' old form away")?;
    if done.rewritten == 0 {
        return Ok(Arc::new(store));
    }
    let fresh = path.with_extension("reencrypted");
    let _ = std::fs::remove_file(&fresh);
    embedded.snapshot(&fresh).await.context("writing the re-encrypted store afresh")?;
    drop(store);
    drop(embedded);
    // The writer has closed the file once the last handle is gone; a moment may pass before
    // its background work lets go of it too.
    let mut restored = embedded::restore(&fresh, &path);
    for _ in 0..50 {
        if restored.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        restored = embedded::restore(&fresh, &path);
    }
    let (_, old) = restored.context("replacing the store with its re-encrypted copy")?;
    // The old file held the plain form.
    if let Some(old) = old {
        std::fs::remove_file(&old).with_context(|| format!("remove {}", old.display()))?;
    }
    let _ = std::fs::remove_file(&fresh);
    println!("flotilla: {} stored values written with the current encryption key ({} already were)", done.rewritten, done.current);
    let embedded = Arc::new(EmbeddedStore::open(config).await.with_context(|| format!("reopen the store {}", path.display()))?);
    Ok(Arc::new(EncryptedStore::new(embedded, encryption).await.with_context(context)?))
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
            println!("store {}: format {}, revision {rev}, compacted {compacted}, {keys} keys, {bytes} bytes", path.display(), embedded::FORMAT_VERSION);
        }
        StoreCommand::Reencrypt { data_dir, encryption_provider_config } => {
            let path = store_path(&data_dir);
            anyhow::ensure!(path.exists(), "no store at {}", path.display());
            let (config_path, config) = encryption_config(&data_dir, encryption_provider_config.as_deref())?;
            let mut store_config = EmbeddedConfig::new(&path);
            store_config.retention.interval = None;
            open_encrypted(store_config, config, &config_path).await.context("is flotilla still running?")?;
            println!("store {}: every value {} covers is in its current key's form", path.display(), config_path.display());
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
