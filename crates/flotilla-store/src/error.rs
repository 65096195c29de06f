//! The store's one error type. Each variant names what went wrong and carries what a caller
//! needs to answer a client (the API server maps these to Kubernetes `Status` objects).

use crate::Revision;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A compare of a transaction did not hold (a stale revision, an existing or missing key).
    #[error("conflict on key {key:?}: expected mod revision {expected}, found {actual}")]
    Conflict { key: String, expected: Revision, actual: Revision },

    #[error("key {key:?} already exists")]
    AlreadyExists { key: String },

    #[error("key {key:?} not found")]
    NotFound { key: String },

    /// The revision asked for is older than the compacted revision.
    #[error("revision {requested} has been compacted (compacted revision {compacted})")]
    Compacted { requested: Revision, compacted: Revision },

    /// The revision asked for is newer than the store's current revision.
    #[error("revision {requested} is in the future (current revision {current})")]
    FutureRevision { requested: Revision, current: Revision },

    /// A watcher fell so far behind that events it had not read were dropped.
    #[error("watch fell too far behind and was ended; restart it from the last revision seen")]
    Lagged,

    #[error("value of {size} bytes for key {key:?} exceeds the limit of {max} bytes")]
    ValueTooLarge { key: String, size: usize, max: usize },

    #[error("transaction has {ops} operations, more than the limit of {max}")]
    TooManyOps { ops: usize, max: usize },

    #[error("key {key:?} appears more than once in one transaction")]
    DuplicateKeyInTxn { key: String },

    #[error("invalid key: {reason}")]
    InvalidKey { reason: String },

    /// The data path holds something this store cannot open; the file was left untouched.
    #[error("cannot open store at {path}: {reason}")]
    BadDataFile { path: String, reason: String, kind: BadDataKind },

    /// A write could not be made durable (I/O error, full disk). Nothing of the batch was
    /// acknowledged.
    #[error("storage I/O failed: {0}")]
    Io(String),

    /// The backend is unreachable or answered with an error (etcd).
    #[error("backend unavailable: {0}")]
    Unavailable(String),

    /// The store has been shut down.
    #[error("store is closed")]
    Closed,

    /// An invariant of the store's own data was broken. Never expected; reported, not panicked.
    #[error("internal store error: {0}")]
    Internal(String),
}

/// Why a data file was refused, so callers and tests can tell the cases apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadDataKind {
    /// Not a redb file at all (random bytes, another format).
    NotADatabase,
    /// A redb file cut short or damaged.
    Corrupted,
    /// A valid redb file that Flotilla did not write.
    Foreign,
    /// Written by a newer Flotilla whose store format this build does not know.
    NewerFormat,
    /// Another process holds the database open.
    Locked,
}

impl StoreError {
    /// Whether retrying the same request later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Io(_) | StoreError::Unavailable(_))
    }
}
