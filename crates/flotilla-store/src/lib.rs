//! Flotilla's revisioned key-value store: etcd's data model behind one async contract.
//!
//! Every API object lives here as opaque bytes under a key. One global revision increases with
//! every successful write and becomes the object's `resourceVersion`; history is kept as an event
//! log so watches can resume from any revision that has not been compacted.
//!
//! Start reading at [`Store`] (the contract), then [`embedded`] (the default backend: redb with
//! group commit), [`etcd`] and [`memory`]. [`hub`] holds the in-memory watch fan-out shared by the
//! embedded and memory backends.
//!
//! Invariants (checked by the shared conformance suite in `tests/`):
//! - The store never interprets keys or values: no kinds, no JSON.
//! - Revisions strictly increase; a transaction's operations share one revision; on the embedded
//!   and memory backends a failed write consumes no revision, so stored revisions have no holes.
//! - A watch delivers every change after its start revision, in revision order, with no gap and
//!   no duplicate, or ends with an error ([`StoreError::Compacted`], [`StoreError::Lagged`]).
//! - An acknowledged write on the embedded backend has been synced to disk.

pub mod btree;
pub mod embedded;
pub mod encrypted;
mod error;
pub mod etcd;
pub mod hub;
pub mod memory;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

pub use error::{BadDataKind, Result, StoreError};
pub use hub::{WatchEvent, WatchStream};

/// A store revision. Positive; 0 means "none" (for example "the key does not exist").
pub type Revision = i64;

/// The largest value a backend accepts: 1.5 MiB, etcd's default request limit.
pub const MAX_VALUE_BYTES: usize = 1_572_864;

/// The largest number of operations in one transaction: 128, etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;

/// The largest key a backend accepts. Kubernetes keys are short; this guards against misuse.
pub const MAX_KEY_BYTES: usize = 4096;

/// One stored key with its value and revisions.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Bytes,
    pub value: Bytes,
    /// The revision at which the key was created (reset by delete and re-create).
    pub create_revision: Revision,
    /// The revision of the last write to the key.
    pub mod_revision: Revision,
}

impl fmt::Debug for KeyValue {
    // Values can hold Secrets: print their size, never their bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyValue")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("value_len", &self.value.len())
            .field("create_revision", &self.create_revision)
            .field("mod_revision", &self.mod_revision)
            .finish()
    }
}

/// A request for the keys under a prefix.
#[derive(Clone, Debug, Default)]
pub struct RangeRequest {
    /// Every key that starts with these bytes. Empty means every key.
    pub prefix: Bytes,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Only keys strictly greater than this one (pagination).
    pub continue_after: Option<Bytes>,
    /// Read the state as of this revision; `None` reads the current state.
    pub at_revision: Option<Revision>,
    /// Only count the keys, return no values.
    pub count_only: bool,
}

impl RangeRequest {
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        RangeRequest { prefix: prefix.into(), ..Default::default() }
    }
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
    pub fn continue_after(mut self, key: impl Into<Bytes>) -> Self {
        self.continue_after = Some(key.into());
        self
    }
    pub fn at_revision(mut self, revision: Revision) -> Self {
        self.at_revision = Some(revision);
        self
    }
}

/// The keys of a range, read from one consistent snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// The revision of the snapshot the range was read from.
    pub revision: Revision,
    /// True when the limit cut the result short.
    pub more: bool,
    /// The number of keys that matched in total (before `limit` and after `continue_after`).
    pub count: usize,
}

/// A condition a transaction checks before it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compare {
    /// The key's mod revision equals this one; 0 means the key must not exist.
    ModRevision(Bytes, Revision),
    /// The key exists.
    Exists(Bytes),
    /// The key does not exist.
    Absent(Bytes),
}

impl Compare {
    pub fn key(&self) -> &Bytes {
        match self {
            Compare::ModRevision(k, _) | Compare::Exists(k) | Compare::Absent(k) => k,
        }
    }
}

/// A write inside a transaction.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    Put(Bytes, Bytes),
    Delete(Bytes),
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Put(k, v) => write!(f, "Put({:?}, {} bytes)", String::from_utf8_lossy(k), v.len()),
            Op::Delete(k) => write!(f, "Delete({:?})", String::from_utf8_lossy(k)),
        }
    }
}

impl Op {
    pub fn key(&self) -> &Bytes {
        match self {
            Op::Put(k, _) | Op::Delete(k) => k,
        }
    }
}

/// The outcome of one operation of a committed transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The key now holds the value; `prev` is what it held before, if anything.
    Put { prev: Option<KeyValue> },
    /// The key was deleted; `prev` is what it held (None if it did not exist).
    Delete { prev: Option<KeyValue> },
}

/// A committed transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnResponse {
    /// The revision of the write (the store's revision when no operation changed anything).
    pub revision: Revision,
    pub results: Vec<OpResult>,
}

/// Which backend to build, with its settings.
#[derive(Clone, Debug)]
pub enum BackendConfig {
    Embedded(embedded::EmbeddedConfig),
    Etcd(etcd::EtcdConfig),
    Memory(hub::WatchConfig),
}

/// How long history is kept before automatic compaction may drop it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Keep at least this much time of history.
    pub min_age: Duration,
    /// Keep at least this many revisions of history.
    pub min_revisions: i64,
    /// How often to look for history to compact; `None` turns automatic compaction off.
    pub interval: Option<Duration>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { min_age: Duration::from_secs(300), min_revisions: 10_000, interval: Some(Duration::from_secs(60)) }
    }
}

/// The store contract every backend implements. Bytes in, bytes out.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The current value of `key`.
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>>;

    /// The keys under a prefix, from one consistent snapshot.
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// The revision of the last committed write.
    async fn current_revision(&self) -> Result<Revision>;

    /// The oldest revision whose state can still be read (reads below it fail with
    /// [`StoreError::Compacted`]).
    async fn compacted_revision(&self) -> Result<Revision>;

    /// All-or-nothing: when every compare holds, apply every op at one new revision; otherwise
    /// fail with [`StoreError::Conflict`] naming a key whose compare failed.
    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnResponse>;

    /// Every change under `prefix` with a revision greater than `after_revision`.
    ///
    /// Fails with [`StoreError::Compacted`] when `after_revision` is below the compacted
    /// revision: a watch can resume from any revision whose state can still be read.
    async fn watch(&self, prefix: &[u8], after_revision: Revision) -> Result<WatchStream>;

    /// Drop the history before `revision`: reads at older revisions and watches that would
    /// need older events fail with [`StoreError::Compacted`] from now on.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// A short name for logs and metrics ("embedded", "etcd", "memory").
    fn backend_name(&self) -> &'static str;

    /// Create `key`; fails with [`StoreError::AlreadyExists`] when it exists.
    async fn create(&self, key: Bytes, value: Bytes) -> Result<Revision> {
        let res = self.txn(vec![Compare::Absent(key.clone())], vec![Op::Put(key.clone(), value)]).await;
        match res {
            Ok(r) => Ok(r.revision),
            Err(StoreError::Conflict { .. }) => Err(StoreError::AlreadyExists { key: lossy(&key) }),
            Err(e) => Err(e),
        }
    }

    /// Replace `key` if its mod revision is still `expected`; fails with
    /// [`StoreError::Conflict`] when it changed and [`StoreError::NotFound`] when it is gone.
    async fn update_if(&self, key: Bytes, value: Bytes, expected: Revision) -> Result<Revision> {
        let res = self.txn(vec![Compare::ModRevision(key.clone(), expected)], vec![Op::Put(key.clone(), value)]).await;
        match res {
            Ok(r) => Ok(r.revision),
            Err(StoreError::Conflict { key: k, actual: 0, .. }) => Err(StoreError::NotFound { key: k }),
            Err(e) => Err(e),
        }
    }

    /// Delete `key`, if its mod revision is still `expected` (when given). Returns the revision
    /// of the delete and the deleted value.
    async fn delete_if(&self, key: Bytes, expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let compares = match expected {
            Some(rev) => vec![Compare::ModRevision(key.clone(), rev)],
            None => vec![Compare::Exists(key.clone())],
        };
        let res = self.txn(compares, vec![Op::Delete(key.clone())]).await;
        match res {
            Ok(r) => match r.results.into_iter().next() {
                Some(OpResult::Delete { prev: Some(prev) }) => Ok((r.revision, prev)),
                _ => Err(StoreError::NotFound { key: lossy(&key) }),
            },
            Err(StoreError::Conflict { key: k, actual: 0, .. }) => Err(StoreError::NotFound { key: k }),
            Err(e) => Err(e),
        }
    }
}

/// A key as text for messages (keys are paths; values are never printed).
pub(crate) fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// The smallest key greater than every key with this prefix, or `None` when the prefix is empty
/// or all 0xff (no upper bound).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Checks shared by every backend before a transaction reaches storage.
pub(crate) fn validate_txn(compares: &[Compare], ops: &[Op]) -> Result<()> {
    if ops.len() > MAX_TXN_OPS || compares.len() > MAX_TXN_OPS {
        return Err(StoreError::TooManyOps { ops: ops.len().max(compares.len()), max: MAX_TXN_OPS });
    }
    let mut seen = std::collections::HashSet::new();
    for op in ops {
        let key = op.key();
        if key.is_empty() {
            return Err(StoreError::InvalidKey { reason: "empty key".into() });
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(StoreError::InvalidKey { reason: format!("key of {} bytes exceeds {} bytes", key.len(), MAX_KEY_BYTES) });
        }
        if !seen.insert(key.clone()) {
            return Err(StoreError::DuplicateKeyInTxn { key: lossy(key) });
        }
        if let Op::Put(_, value) = op
            && value.len() > MAX_VALUE_BYTES
        {
            return Err(StoreError::ValueTooLarge { key: lossy(key), size: value.len(), max: MAX_VALUE_BYTES });
        }
    }
    Ok(())
}

/// Open the backend a configuration names.
pub async fn open(config: BackendConfig) -> Result<std::sync::Arc<dyn Store>> {
    Ok(match config {
        BackendConfig::Embedded(c) => std::sync::Arc::new(embedded::EmbeddedStore::open(c).await?),
        BackendConfig::Etcd(c) => std::sync::Arc::new(etcd::EtcdStore::connect(c).await?),
        BackendConfig::Memory(w) => std::sync::Arc::new(memory::memory_store(w)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_handles_ff_and_empty() {
        assert_eq!(prefix_end(b"/a/"), Some(b"/a0".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn txn_limits_are_checked() {
        let k = Bytes::from_static(b"k");
        let too_big = Bytes::from(vec![0u8; MAX_VALUE_BYTES + 1]);
        assert!(matches!(validate_txn(&[], &[Op::Put(k.clone(), too_big)]), Err(StoreError::ValueTooLarge { .. })));
        let exact = Bytes::from(vec![0u8; MAX_VALUE_BYTES]);
        assert!(validate_txn(&[], &[Op::Put(k.clone(), exact)]).is_ok());
        let ops: Vec<Op> = (0..=MAX_TXN_OPS).map(|i| Op::Delete(Bytes::from(format!("k{i}")))).collect();
        assert!(matches!(validate_txn(&[], &ops), Err(StoreError::TooManyOps { .. })));
        assert!(matches!(validate_txn(&[], &[Op::Delete(k.clone()), Op::Delete(k)]), Err(StoreError::DuplicateKeyInTxn { .. })));
    }
}
