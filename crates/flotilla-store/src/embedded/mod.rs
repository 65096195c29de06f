//! The embedded backend: one redb file, one writer thread with group commit.
//!
//! Writers send requests to the writer thread; it takes every request waiting (up to
//! `max_batch`) — under a steady stream of writes, also those arriving within the commit window
//! (`commit_window`, see `Gather`) — applies them in one redb transaction — each successful request at its own
//! revision — and commits it durably once. Only then are the requests answered and the batch
//! published to watchers. If the commit fails, every request of the batch fails and the revision
//! counter rolls back, so a failed batch leaves no hole.
//!
//! Reads open their own redb read transaction (an MVCC snapshot) and never wait for the writer.

pub mod backends;
mod format;
mod open;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, StorageBackend, Table, WriteTransaction};
use tokio::sync::{mpsc, oneshot};

pub use format::FORMAT_VERSION;
use format::{
    CURRENT, HISTORY, INITIAL_REVISION, LOG, LogOp, LogRecord, META, META_COMPACTED, META_FORMAT, META_REVISION, Version, decode_version, encode_put,
    encode_tombstone,
};
pub use open::prepare_dir;

use crate::hub::{Batch, History, Hub, WatchConfig, WatchEvent, WatchStream};
use crate::{
    Compare, KeyValue, Op, OpResult, RangeRequest, RangeResponse, Result, RetentionConfig, Revision, Store, StoreError, TxnResponse, lossy, prefix_end,
    validate_txn,
};

/// Settings of the embedded backend.
#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    /// The database file (created with mode 0600 in a 0700 directory if missing).
    pub path: PathBuf,
    /// The most write requests committed in one durable transaction.
    pub max_batch: usize,
    /// Requests waiting for the writer before senders are made to wait.
    pub queue_depth: usize,
    /// redb's page cache.
    pub cache_bytes: usize,
    /// How long the writer may hold a batch open for more writes before committing it, while
    /// holding batches open pays (see [`Gather`]). Zero commits each batch as soon as the
    /// queue is empty.
    pub commit_window: Duration,
    /// Where to count durable commits and the writes they held (for metrics), if anywhere.
    pub commit_stats: Option<Arc<CommitStats>>,
    pub retention: RetentionConfig,
    pub watch: WatchConfig,
}

impl EmbeddedConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        EmbeddedConfig {
            path: path.into(),
            max_batch: 1024,
            queue_depth: 8192,
            cache_bytes: 256 << 20,
            commit_window: DEFAULT_COMMIT_WINDOW,
            commit_stats: None,
            retention: RetentionConfig::default(),
            watch: WatchConfig::default(),
        }
    }
}

/// The default [`EmbeddedConfig::commit_window`]: a write waits at most this long for company.
pub const DEFAULT_COMMIT_WINDOW: Duration = Duration::from_millis(1);

/// Durable commits of a store and the write requests they answered: their ratio is how well
/// group commit groups.
#[derive(Debug, Default)]
pub struct CommitStats {
    commits: std::sync::atomic::AtomicU64,
    writes: std::sync::atomic::AtomicU64,
}

impl CommitStats {
    /// Durable commits (each one fsync) so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Write requests answered by those commits.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

enum Request {
    Txn { compares: Vec<Compare>, ops: Vec<Op>, reply: oneshot::Sender<Result<TxnResponse>> },
    Compact { revision: Revision, reply: oneshot::Sender<Result<()>> },
}

/// How to open the database again after a storage error left redb unable to write, and how to
/// tell that the storage works again (until it does, the old handle keeps serving reads).
struct Reopen {
    open: Box<dyn Fn() -> Result<Database> + Send + Sync>,
    healthy: Box<dyn Fn() -> std::result::Result<(), String> + Send + Sync>,
}

struct Shared {
    /// `None` only while the writer reopens the database after a storage error.
    db: parking_lot::RwLock<Option<Arc<Database>>>,
    reopen: Reopen,
    hub: Arc<Hub>,
    /// Revision of the last durable commit, readable without a transaction.
    revision: AtomicI64,
    compacted: AtomicI64,
}

/// The embedded store. Cheap to share behind an `Arc`; dropping the last handle stops the writer
/// after it has finished the batch in hand.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    requests: mpsc::Sender<Request>,
    name: &'static str,
    _background: Option<tokio::task::JoinHandle<()>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").field("backend", &self.name).finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn storage(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

impl EmbeddedStore {
    /// Open (or create) the store in the file the config names. A file that is not a Flotilla
    /// store, is damaged, or was written by a newer Flotilla is refused and left untouched.
    pub async fn open(config: EmbeddedConfig) -> Result<Self> {
        let path = config.path.clone();
        let cache = config.cache_bytes;
        let db = tokio::task::spawn_blocking({
            let path = path.clone();
            move || open_file(&path, cache)
        })
        .await
        .map_err(|e| StoreError::Internal(e.to_string()))??;
        let probe_path = path.clone();
        let reopen = Reopen { open: Box::new(move || open_file(&path, cache)), healthy: Box::new(move || probe_storage(&probe_path)) };
        Self::start(db, reopen, config, "embedded")
    }

    /// Open the store on any redb storage backend: memory (see [`crate::memory`]), or the
    /// fault-injecting disks of the durability tests.
    /// `backend` is called again to reopen the database after a storage error.
    pub fn open_with_backend<B: StorageBackend>(backend: impl Fn() -> B + Send + Sync + 'static, config: EmbeddedConfig, name: &'static str) -> Result<Self> {
        Self::open_with_backend_checked(backend, || Ok(()), config, name)
    }

    /// Like [`Self::open_with_backend`], with a check that says when failed storage works again.
    pub fn open_with_backend_checked<B: StorageBackend>(
        backend: impl Fn() -> B + Send + Sync + 'static,
        healthy: impl Fn() -> std::result::Result<(), String> + Send + Sync + 'static,
        config: EmbeddedConfig,
        name: &'static str,
    ) -> Result<Self> {
        let cache = config.cache_bytes;
        let open = move || -> Result<Database> {
            let db =
                redb::Builder::new().set_cache_size(cache).create_with_backend(backend()).map_err(|e| open::classify_open_error(Path::new("<backend>"), e))?;
            initialise(&db)?;
            Ok(db)
        };
        let db = open()?;
        Self::start(db, Reopen { open: Box::new(open), healthy: Box::new(healthy) }, config, name)
    }

    fn start(db: Database, reopen: Reopen, config: EmbeddedConfig, name: &'static str) -> Result<Self> {
        let (revision, compacted) = {
            let txn = db.begin_read().map_err(storage)?;
            let meta = txn.open_table(META).map_err(storage)?;
            let get = |k: &str| -> Result<i64> { meta.get(k).map_err(storage)?.map(|g| g.value()).ok_or_else(|| StoreError::Internal(format!("missing {k}"))) };
            (get(META_REVISION)?, get(META_COMPACTED)?)
        };
        let hub = Hub::new(config.watch.clone(), revision);
        let shared = Arc::new(Shared {
            db: parking_lot::RwLock::new(Some(Arc::new(db))),
            reopen,
            hub,
            revision: AtomicI64::new(revision),
            compacted: AtomicI64::new(compacted),
        });
        let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
        let writer_shared = shared.clone();
        let max_batch = config.max_batch.max(1);
        let commit_window = config.commit_window;
        let stats = config.commit_stats.clone();
        let writer = std::thread::Builder::new()
            .name(format!("flotilla-store-{name}-writer"))
            .spawn(move || Writer { shared: writer_shared, next: revision, max_batch, broken: false, gather: Gather::new(commit_window), stats }.run(rx))
            .map_err(|e| StoreError::Internal(format!("cannot start the store writer: {e}")))?;
        let background = match (config.retention.interval, tokio::runtime::Handle::try_current()) {
            (Some(interval), Ok(rt)) => Some(rt.spawn(auto_compact(Arc::downgrade(&shared), tx.downgrade(), config.retention.clone(), interval))),
            _ => None,
        };
        Ok(EmbeddedStore { shared, requests: tx, name, _background: background, writer: Some(writer) })
    }

    async fn send(&self, req: Request) -> Result<()> {
        self.requests.send(req).await.map_err(|_| StoreError::Closed)
    }

    /// Write a consistent copy of the whole store to `dest` (a new file) while it keeps serving.
    pub async fn snapshot(&self, dest: &Path) -> Result<SnapshotInfo> {
        let shared = self.shared.clone();
        let dest = dest.to_path_buf();
        tokio::task::spawn_blocking(move || snapshot_db(&*shared.db()?, &dest)).await.map_err(|e| StoreError::Internal(e.to_string()))?
    }

    /// Statistics for benchmarks and metrics.
    pub fn watcher_count(&self) -> usize {
        self.shared.hub.watcher_count()
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Some(bg) = self._background.take() {
            bg.abort();
        }
        // Closing the queue ends the writer after its current batch; wait so the file is closed
        // when the store is gone (a restart in the same process can reopen it at once).
        let (tx, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.requests, tx));
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Write and sync a small file beside the store: does the disk accept writes again?
fn probe_storage(store: &Path) -> std::result::Result<(), String> {
    use std::io::Write;
    let probe = store.with_extension("probe");
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&probe)?;
        f.write_all(&[0u8; 64 * 1024])?;
        f.sync_all()
    })();
    let _ = std::fs::remove_file(&probe);
    result.map_err(|e| e.to_string())
}

/// Open a data file after inspecting it; create and initialise it when fresh.
fn open_file(path: &Path, cache_bytes: usize) -> Result<Database> {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(cache_bytes);
    let inspection = open::inspect(path, &builder)?;
    open::prepare_dir(path)?;
    if inspection == open::Inspection::Fresh {
        open::touch_private(path)?;
    }
    let db = builder.create(path).map_err(|e| open::classify_open_error(path, e))?;
    match inspection {
        open::Inspection::Fresh => initialise(&db)?,
        open::Inspection::Ours { format } => open::migrate(&db, format)?,
    }
    Ok(db)
}

/// Create the tables and metadata of a new store (a no-op on an initialised one).
fn initialise(db: &Database) -> Result<()> {
    {
        let txn = db.begin_read().map_err(storage)?;
        let done = match txn.open_table(META) {
            Ok(meta) => meta.get(META_FORMAT).map_err(storage)?.is_some(),
            Err(_) => false,
        };
        if done {
            return Ok(());
        }
    }
    let mut txn = db.begin_write().map_err(storage)?;
    txn.set_durability(Durability::Immediate).map_err(storage)?;
    {
        let mut meta = txn.open_table(META).map_err(storage)?;
        if meta.get(META_FORMAT).map_err(storage)?.is_none() {
            meta.insert(META_FORMAT, FORMAT_VERSION).map_err(storage)?;
            meta.insert(META_REVISION, INITIAL_REVISION).map_err(storage)?;
            meta.insert(META_COMPACTED, 0).map_err(storage)?;
        }
        txn.open_table(CURRENT).map_err(storage)?;
        txn.open_table(HISTORY).map_err(storage)?;
        txn.open_table(LOG).map_err(storage)?;
    }
    txn.commit().map_err(storage)
}

// ---------------------------------------------------------------------------------------------
// The writer

struct Writer {
    shared: Arc<Shared>,
    /// The revision of the last successful write; the next one gets `next + 1`.
    next: Revision,
    max_batch: usize,
    /// A commit failed: redb refuses further writes until the database is reopened.
    broken: bool,
    gather: Gather,
    stats: Option<Arc<CommitStats>>,
}

/// When to hold a batch open for more writes. A durable commit has a large fixed cost (page
/// writes and an fsync) whatever it holds, so under a steady stream of writes from many
/// callers, waiting a moment for more and committing them together costs each write little
/// latency and saves most of the commits. A lone sequential writer gains nothing by waiting
/// (its next write comes only after this one is answered), so the writer keeps a running
/// average of how many writes each wait gathered, stops waiting when waits gather nothing, and
/// tries again every [`Gather::PROBE_EVERY`] batches.
struct Gather {
    window: Duration,
    /// Exponential moving average of the writes one wait gathered.
    gain: f64,
    since_probe: u32,
}

impl Gather {
    const PROBE_EVERY: u32 = 64;
    /// Below this average gain, waiting stops until the next probe.
    const WORTH_IT: f64 = 0.5;
    /// The longest single sleep while waiting: the queue is checked at least this often.
    const POLL: Duration = Duration::from_micros(100);

    fn new(window: Duration) -> Self {
        Gather { window, gain: 1.0, since_probe: 0 }
    }

    fn should_wait(&mut self) -> bool {
        if self.window.is_zero() {
            return false;
        }
        if self.gain >= Self::WORTH_IT {
            return true;
        }
        self.since_probe += 1;
        if self.since_probe >= Self::PROBE_EVERY {
            self.since_probe = 0;
            return true;
        }
        false
    }

    fn record(&mut self, gathered: usize) {
        self.gain = 0.75 * self.gain + 0.25 * gathered as f64;
    }
}

/// A failure while applying one request: its own fault, or the storage's (fatal to the batch).
enum ApplyError {
    Request(StoreError),
    Storage(StoreError),
}

impl From<redb::StorageError> for ApplyError {
    fn from(e: redb::StorageError) -> Self {
        ApplyError::Storage(storage(e))
    }
}

/// A write request waiting in the batch: its compares, its ops and where its answer goes.
type PendingTxn = (Vec<Compare>, Vec<Op>, oneshot::Sender<Result<TxnResponse>>);

struct Tables<'t> {
    current: Table<'t, &'static [u8], (i64, i64)>,
    history: Table<'t, (&'static [u8], i64), &'static [u8]>,
    log: Table<'t, i64, &'static [u8]>,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        while let Some(first) = rx.blocking_recv() {
            let mut txns = Vec::new();
            self.take(first, &mut txns);
            // Everything already waiting joins the batch.
            while txns.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(req) => self.take(req, &mut txns),
                    Err(_) => break,
                }
            }
            if !txns.is_empty() && txns.len() < self.max_batch && self.gather.should_wait() {
                let gathered = self.gather_more(&mut rx, &mut txns);
                self.gather.record(gathered);
            }
            self.commit_batch(txns);
        }
    }

    /// Add one request to the batch in hand; a compaction first commits the batch, so writes
    /// queued before it commit first.
    fn take(&mut self, req: Request, txns: &mut Vec<PendingTxn>) {
        match req {
            Request::Txn { compares, ops, reply } => txns.push((compares, ops, reply)),
            Request::Compact { revision, reply } => {
                self.commit_batch(std::mem::take(txns));
                let _ = reply.send(self.compact(revision));
            }
        }
    }

    /// Wait up to the commit window for more requests; returns how many arrived.
    fn gather_more(&mut self, rx: &mut mpsc::Receiver<Request>, txns: &mut Vec<PendingTxn>) -> usize {
        let deadline = std::time::Instant::now() + self.gather.window;
        let mut gathered = 0;
        while txns.len() < self.max_batch {
            match rx.try_recv() {
                Ok(req) => {
                    gathered += 1;
                    self.take(req, txns);
                }
                Err(mpsc::error::TryRecvError::Empty) => {
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        break;
                    }
                    std::thread::sleep((deadline - now).min(Gather::POLL));
                }
                Err(mpsc::error::TryRecvError::Disconnected) => break,
            }
        }
        gathered
    }

    fn commit_batch(&mut self, batch: Vec<PendingTxn>) {
        if batch.is_empty() {
            return;
        }
        if self.broken
            && let Err(e) = self.reopen()
        {
            tracing::error!(error = %e, "cannot reopen the store after a storage error");
            for (_, _, reply) in batch {
                let _ = reply.send(Err(StoreError::Io(format!("the store cannot write: {e}"))));
            }
            return;
        }
        let start = self.next;
        let now = now_ms();
        let mut outcomes: Vec<Result<TxnResponse>> = Vec::with_capacity(batch.len());
        let mut events = Vec::new();
        let result = (|| -> Result<WriteTransaction> {
            let db = self.shared.db()?;
            let mut txn = db.begin_write().map_err(storage)?;
            txn.set_durability(Durability::Immediate).map_err(storage)?;
            {
                let mut tables = Tables {
                    current: txn.open_table(CURRENT).map_err(storage)?,
                    history: txn.open_table(HISTORY).map_err(storage)?,
                    log: txn.open_table(LOG).map_err(storage)?,
                };
                for (compares, ops, _) in &batch {
                    match apply_txn(&mut tables, compares, ops, self.next + 1, now, &mut events) {
                        Ok((changed, results)) => {
                            if changed {
                                self.next += 1;
                            }
                            outcomes.push(Ok(TxnResponse { revision: self.next, results }));
                        }
                        Err(ApplyError::Request(e)) => outcomes.push(Err(e)),
                        Err(ApplyError::Storage(e)) => return Err(e),
                    }
                }
            }
            if self.next != start {
                let mut meta = txn.open_table(META).map_err(storage)?;
                meta.insert(META_REVISION, self.next).map_err(storage)?;
            }
            Ok(txn)
        })();
        let committed = result.and_then(|txn| txn.commit().map_err(storage));
        match committed {
            Ok(()) => {
                if let Some(stats) = &self.stats {
                    stats.commits.fetch_add(1, Ordering::Relaxed);
                    stats.writes.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                self.shared.revision.store(self.next, Ordering::Release);
                if self.next != start {
                    self.shared.hub.publish(Batch { last_revision: self.next, events });
                }
                for ((_, _, reply), outcome) in batch.into_iter().zip(outcomes) {
                    let _ = reply.send(outcome);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, writes = batch.len(), "store commit failed; no write of the batch was acknowledged");
                self.next = start;
                self.broken = true;
                let msg = e.to_string();
                for (_, _, reply) in batch {
                    let _ = reply.send(Err(StoreError::Io(msg.clone())));
                }
            }
        }
    }

    /// Close the database (waiting for readers to let go of it) and open it again, as redb
    /// requires after an I/O error. Reads fail with `Unavailable` for that moment.
    fn reopen(&mut self) -> Result<()> {
        (self.shared.reopen.healthy)().map_err(|e| StoreError::Io(format!("storage still failing: {e}")))?;
        let old = self.shared.db.write().take();
        if let Some(mut old) = old {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(still_shared) if std::time::Instant::now() < deadline => {
                        old = still_shared;
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(still_shared) => {
                        *self.shared.db.write() = Some(still_shared);
                        return Err(StoreError::Io("readers held the database too long to reopen it".into()));
                    }
                }
            }
        }
        let db = (self.shared.reopen.open)()?;
        let revision = {
            let txn = db.begin_read().map_err(storage)?;
            let meta = txn.open_table(META).map_err(storage)?;
            meta.get(META_REVISION).map_err(storage)?.map(|g| g.value()).unwrap_or(INITIAL_REVISION)
        };
        if revision != self.next {
            return Err(StoreError::Internal(format!("after reopening, the store is at revision {revision}, expected {}", self.next)));
        }
        *self.shared.db.write() = Some(Arc::new(db));
        self.broken = false;
        tracing::warn!(revision, "store reopened after a storage error; writes resume");
        Ok(())
    }

    fn compact(&mut self, revision: Revision) -> Result<()> {
        let current = self.next;
        if revision > current {
            return Err(StoreError::FutureRevision { requested: revision, current });
        }
        let already = self.shared.compacted.load(Ordering::Acquire);
        if revision <= already {
            return Ok(());
        }
        // Compact in bounded steps so one huge compaction does not hold the writer for long.
        const STEP: i64 = 10_000;
        let mut done = already.max(0);
        while done < revision {
            let upto = (done + STEP).min(revision);
            compact_step(&*self.shared.db()?, done, upto)?;
            self.shared.compacted.store(upto, Ordering::Release);
            done = upto;
        }
        Ok(())
    }
}

/// Apply one transaction at revision `rev` inside the batch's redb transaction. Returns whether
/// it changed anything (and so consumed the revision) and its per-op results.
fn apply_txn(
    t: &mut Tables<'_>,
    compares: &[Compare],
    ops: &[Op],
    rev: Revision,
    now: u64,
    events: &mut Vec<WatchEvent>,
) -> std::result::Result<(bool, Vec<OpResult>), ApplyError> {
    for cmp in compares {
        let actual = t.current.get(cmp.key().as_ref())?.map(|g| g.value().1).unwrap_or(0);
        let (holds, expected) = match cmp {
            Compare::ModRevision(_, want) => (actual == *want, *want),
            Compare::Exists(_) => (actual != 0, -1),
            Compare::Absent(_) => (actual == 0, 0),
        };
        if !holds {
            return Err(ApplyError::Request(StoreError::Conflict { key: lossy(cmp.key()), expected, actual }));
        }
    }
    let mut results = Vec::with_capacity(ops.len());
    let mut log_ops = Vec::new();
    for op in ops {
        let key = op.key();
        let prev = read_current(&t.current, &t.history, key)?;
        match op {
            Op::Put(_, value) => {
                let create = prev.as_ref().map(|p| p.create_revision).unwrap_or(rev);
                t.history.insert((key.as_ref(), rev), encode_put(create, value).as_slice())?;
                t.current.insert(key.as_ref(), (create, rev))?;
                log_ops.push(LogOp { deleted: false, key: key.to_vec(), prev_mod_revision: prev.as_ref().map_or(0, |p| p.mod_revision) });
                let kv = KeyValue { key: key.clone(), value: value.clone(), create_revision: create, mod_revision: rev };
                events.push(WatchEvent::Put { kv, prev: prev.clone() });
                results.push(OpResult::Put { prev });
            }
            Op::Delete(_) => match prev {
                None => results.push(OpResult::Delete { prev: None }),
                Some(p) => {
                    t.current.remove(key.as_ref())?;
                    t.history.insert((key.as_ref(), rev), encode_tombstone().as_slice())?;
                    log_ops.push(LogOp { deleted: true, key: key.to_vec(), prev_mod_revision: p.mod_revision });
                    events.push(WatchEvent::Delete { key: key.clone(), revision: rev, prev: p.clone() });
                    results.push(OpResult::Delete { prev: Some(p) });
                }
            },
        }
    }
    let changed = !log_ops.is_empty();
    if changed {
        t.log.insert(rev, LogRecord { time_ms: now, ops: log_ops }.encode().as_slice())?;
    }
    Ok((changed, results))
}

fn corrupt(what: String) -> redb::StorageError {
    redb::StorageError::Corrupted(what)
}

/// The live version of `key`, from the current-key index and the history table.
fn read_current(
    current: &impl ReadableTable<&'static [u8], (i64, i64)>,
    history: &impl ReadableTable<(&'static [u8], i64), &'static [u8]>,
    key: &Bytes,
) -> std::result::Result<Option<KeyValue>, redb::StorageError> {
    let Some((create, modrev)) = current.get(key.as_ref())?.map(|g| g.value()) else {
        return Ok(None);
    };
    read_version(history, key, create, modrev).map(Some)
}

fn read_version(
    history: &impl ReadableTable<(&'static [u8], i64), &'static [u8]>,
    key: &Bytes,
    create: Revision,
    modrev: Revision,
) -> std::result::Result<KeyValue, redb::StorageError> {
    let guard = history.get((key.as_ref(), modrev))?.ok_or_else(|| corrupt(format!("history lost version {modrev} of key {:?}", lossy(key))))?;
    match decode_version(guard.value()) {
        Some(Version::Put { value, .. }) => {
            Ok(KeyValue { key: key.clone(), value: Bytes::copy_from_slice(value), create_revision: create, mod_revision: modrev })
        }
        _ => Err(corrupt(format!("bad version record {modrev} of key {:?}", lossy(key)))),
    }
}

/// Drop history below `upto`: log entries, versions superseded before it, and tombstones.
fn compact_step(db: &Database, from: Revision, upto: Revision) -> Result<()> {
    let mut txn = db.begin_write().map_err(storage)?;
    txn.set_durability(Durability::Immediate).map_err(storage)?;
    {
        let mut log = txn.open_table(LOG).map_err(storage)?;
        let mut history = txn.open_table(HISTORY).map_err(storage)?;
        let mut drained = Vec::new();
        for entry in log.range(from..upto).map_err(storage)? {
            let (rev, raw) = entry.map_err(storage)?;
            let rev = rev.value();
            let rec = LogRecord::decode(raw.value()).ok_or_else(|| StoreError::Internal(format!("undecodable log record at revision {rev}")))?;
            drained.push((rev, rec));
        }
        for (rev, rec) in drained {
            for op in rec.ops {
                if op.prev_mod_revision != 0 {
                    history.remove((op.key.as_slice(), op.prev_mod_revision)).map_err(storage)?;
                }
                if op.deleted {
                    history.remove((op.key.as_slice(), rev)).map_err(storage)?;
                }
            }
            log.remove(rev).map_err(storage)?;
        }
        let mut meta = txn.open_table(META).map_err(storage)?;
        meta.insert(META_COMPACTED, upto).map_err(storage)?;
    }
    txn.commit().map_err(storage)
}

/// Every `interval`, compact the history that is both older than `min_age` and more than
/// `min_revisions` behind the head.
async fn auto_compact(shared: std::sync::Weak<Shared>, requests: mpsc::WeakSender<Request>, retention: RetentionConfig, interval: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        tick.tick().await;
        let Some(s) = shared.upgrade() else { return };
        let target = tokio::task::spawn_blocking({
            let retention = retention.clone();
            move || compaction_target(&s, &retention)
        })
        .await;
        let target = match target {
            Ok(Ok(Some(t))) => t,
            Ok(Ok(None)) => continue,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot compute the store compaction target");
                continue;
            }
            Err(_) => return,
        };
        let Some(tx) = requests.upgrade() else { return };
        let (reply, rx) = oneshot::channel();
        if tx.send(Request::Compact { revision: target, reply }).await.is_err() {
            return;
        }
        drop(tx);
        match rx.await {
            Ok(Ok(())) => tracing::debug!(revision = target, "store history compacted"),
            Ok(Err(e)) => tracing::warn!(error = %e, "store compaction failed"),
            Err(_) => return,
        }
    }
}

fn compaction_target(s: &Shared, retention: &RetentionConfig) -> Result<Option<Revision>> {
    let head = s.revision.load(Ordering::Acquire);
    let by_count = head - retention.min_revisions;
    let compacted = s.compacted.load(Ordering::Acquire);
    if by_count <= compacted {
        return Ok(None);
    }
    let cutoff = now_ms().saturating_sub(retention.min_age.as_millis() as u64);
    let txn = s.db()?.begin_read().map_err(storage)?;
    let log = txn.open_table(LOG).map_err(storage)?;
    // The first revision written after the cutoff bounds the compaction from above.
    let mut target = compacted;
    for entry in log.range(compacted..=by_count).map_err(storage)? {
        let (rev, raw) = entry.map_err(storage)?;
        let Some(rec) = LogRecord::decode(raw.value()) else { break };
        if rec.time_ms > cutoff {
            break;
        }
        target = rev.value() + 1;
    }
    let target = target.min(by_count);
    Ok((target > compacted).then_some(target))
}

// ---------------------------------------------------------------------------------------------
// Reads

impl Shared {
    fn db(&self) -> Result<Arc<Database>> {
        self.db.read().clone().ok_or_else(|| StoreError::Unavailable("the store is reopening its database after a storage error".into()))
    }

    fn read_txn(&self) -> Result<ReadTransaction> {
        self.db()?.begin_read().map_err(storage)
    }

    fn snapshot_revisions(&self, txn: &ReadTransaction) -> Result<(Revision, Revision)> {
        let meta = txn.open_table(META).map_err(storage)?;
        let rev = meta.get(META_REVISION).map_err(storage)?.map(|g| g.value()).unwrap_or(INITIAL_REVISION);
        let compacted = meta.get(META_COMPACTED).map_err(storage)?.map(|g| g.value()).unwrap_or(0);
        Ok((rev, compacted))
    }

    fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let txn = self.read_txn()?;
        let current = txn.open_table(CURRENT).map_err(storage)?;
        let history = txn.open_table(HISTORY).map_err(storage)?;
        read_current(&current, &history, &Bytes::copy_from_slice(key)).map_err(storage)
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse> {
        let txn = self.read_txn()?;
        let (head, compacted) = self.snapshot_revisions(&txn)?;
        let at = req.at_revision.filter(|r| *r > 0).unwrap_or(head);
        if at > head {
            return Err(StoreError::FutureRevision { requested: at, current: head });
        }
        if at < compacted {
            return Err(StoreError::Compacted { requested: at, compacted });
        }
        let start: std::ops::Bound<&[u8]> = match &req.continue_after {
            Some(k) if k.as_ref() >= req.prefix.as_ref() => std::ops::Bound::Excluded(k.as_ref()),
            _ => std::ops::Bound::Included(req.prefix.as_ref()),
        };
        let end_key = prefix_end(&req.prefix);
        let end: std::ops::Bound<&[u8]> = match &end_key {
            Some(e) => std::ops::Bound::Excluded(e.as_slice()),
            None => std::ops::Bound::Unbounded,
        };
        let history = txn.open_table(HISTORY).map_err(storage)?;
        let mut out = RangeResponse { revision: at, ..Default::default() };
        let limit = if req.limit == 0 { usize::MAX } else { req.limit };
        if at == head {
            let current = txn.open_table(CURRENT).map_err(storage)?;
            for entry in current.range::<&[u8]>((start, end)).map_err(storage)? {
                let (k, v) = entry.map_err(storage)?;
                out.count += 1;
                if out.kvs.len() >= limit {
                    out.more = true;
                    continue;
                }
                if req.count_only {
                    continue;
                }
                let (create, modrev) = v.value();
                let key = Bytes::copy_from_slice(k.value());
                out.kvs.push(read_version(&history, &key, create, modrev).map_err(storage)?);
            }
        } else {
            // A past revision: walk every kept version under the prefix and take, per key, the
            // newest one at or before `at`.
            let lower = match start {
                std::ops::Bound::Included(k) => std::ops::Bound::Included((k, i64::MIN)),
                std::ops::Bound::Excluded(k) => std::ops::Bound::Excluded((k, i64::MAX)),
                std::ops::Bound::Unbounded => std::ops::Bound::Unbounded,
            };
            let upper = match end {
                std::ops::Bound::Excluded(k) => std::ops::Bound::Excluded((k, i64::MIN)),
                _ => std::ops::Bound::Unbounded,
            };
            let mut pending: Option<(Bytes, Revision, Vec<u8>)> = None;
            let flush = |p: Option<(Bytes, Revision, Vec<u8>)>, out: &mut RangeResponse| -> Result<()> {
                if let Some((key, modrev, raw)) = p
                    && let Some(Version::Put { create_revision, value }) = decode_version(&raw)
                {
                    out.count += 1;
                    if out.kvs.len() >= limit {
                        out.more = true;
                    } else if !req.count_only {
                        out.kvs.push(KeyValue { key, value: Bytes::copy_from_slice(value), create_revision, mod_revision: modrev });
                    }
                }
                Ok(())
            };
            for entry in history.range::<(&[u8], i64)>((lower, upper)).map_err(storage)? {
                let (k, v) = entry.map_err(storage)?;
                let (key, rev) = k.value();
                if rev > at {
                    continue;
                }
                let same = pending.as_ref().is_some_and(|(pk, _, _)| pk.as_ref() == key);
                if !same {
                    flush(pending.take(), &mut out)?;
                }
                pending = Some((Bytes::copy_from_slice(key), rev, v.value().to_vec()));
            }
            flush(pending.take(), &mut out)?;
        }
        Ok(out)
    }
}

impl History for Shared {
    fn events(&self, prefix: &[u8], after: Revision, up_to: Revision, max: usize) -> Result<(Vec<WatchEvent>, Revision)> {
        let txn = self.read_txn()?;
        let (_, compacted) = self.snapshot_revisions(&txn)?;
        if after < compacted {
            return Err(StoreError::Compacted { requested: after, compacted });
        }
        let log = txn.open_table(LOG).map_err(storage)?;
        let history = txn.open_table(HISTORY).map_err(storage)?;
        let mut events = Vec::new();
        let mut last = after;
        let mut exhausted = true;
        for (n, entry) in log.range((after + 1)..=up_to).map_err(storage)?.enumerate() {
            if n >= max {
                exhausted = false;
                break;
            }
            let (rev, raw) = entry.map_err(storage)?;
            let rev = rev.value();
            let rec = LogRecord::decode(raw.value()).ok_or_else(|| StoreError::Internal(format!("undecodable log record at revision {rev}")))?;
            for op in rec.ops {
                if !op.key.starts_with(prefix) {
                    continue;
                }
                let key = Bytes::from(op.key);
                let prev = if op.prev_mod_revision == 0 {
                    None
                } else {
                    let create = prev_create_revision(&history, &key, op.prev_mod_revision)?;
                    Some(read_version(&history, &key, create, op.prev_mod_revision).map_err(storage)?)
                };
                if op.deleted {
                    let prev = prev.ok_or_else(|| StoreError::Internal(format!("delete without a previous version at {rev}")))?;
                    events.push(WatchEvent::Delete { key, revision: rev, prev });
                } else {
                    let guard = history
                        .get((key.as_ref(), rev))
                        .map_err(storage)?
                        .ok_or_else(|| StoreError::Internal(format!("history lost version {rev} of key {:?}", lossy(&key))))?;
                    let Some(Version::Put { create_revision, value }) = decode_version(guard.value()) else {
                        return Err(StoreError::Internal(format!("bad version record {rev}")));
                    };
                    let kv = KeyValue { key, value: Bytes::copy_from_slice(value), create_revision, mod_revision: rev };
                    events.push(WatchEvent::Put { kv, prev });
                }
            }
            last = rev;
        }
        if exhausted {
            last = up_to;
        }
        Ok((events, last))
    }
}

fn prev_create_revision(history: &impl ReadableTable<(&'static [u8], i64), &'static [u8]>, key: &Bytes, rev: Revision) -> Result<Revision> {
    let guard = history
        .get((key.as_ref(), rev))
        .map_err(storage)?
        .ok_or_else(|| StoreError::Internal(format!("history lost version {rev} of key {:?}", lossy(key))))?;
    match decode_version(guard.value()) {
        Some(Version::Put { create_revision, .. }) => Ok(create_revision),
        _ => Err(StoreError::Internal(format!("bad version record {rev}"))),
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let shared = self.shared.clone();
        let key = key.to_vec();
        tokio::task::spawn_blocking(move || shared.get(&key)).await.map_err(|e| StoreError::Internal(e.to_string()))?
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.range(&req)).await.map_err(|e| StoreError::Internal(e.to_string()))?
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.revision.load(Ordering::Acquire))
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.shared.compacted.load(Ordering::Acquire))
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnResponse> {
        validate_txn(&compares, &ops)?;
        let (reply, rx) = oneshot::channel();
        self.send(Request::Txn { compares, ops, reply }).await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    async fn watch(&self, prefix: &[u8], after_revision: Revision) -> Result<WatchStream> {
        let compacted = self.shared.compacted.load(Ordering::Acquire);
        if after_revision < compacted {
            return Err(StoreError::Compacted { requested: after_revision, compacted });
        }
        let head = self.shared.hub.published_revision();
        if after_revision > head {
            return Err(StoreError::FutureRevision { requested: after_revision, current: head });
        }
        let history: Arc<dyn History> = self.shared.clone();
        Ok(self.shared.hub.watch(history, Bytes::copy_from_slice(prefix), after_revision.max(0)))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Compact { revision, reply }).await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    fn backend_name(&self) -> &'static str {
        self.name
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshot and restore

/// What a snapshot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub revision: Revision,
    pub keys: u64,
    pub bytes: u64,
}

fn snapshot_db(db: &Database, dest: &Path) -> Result<SnapshotInfo> {
    if dest.exists() {
        return Err(StoreError::Io(format!("{} already exists; choose a new file", dest.display())));
    }
    let tmp = dest.with_extension("partial");
    let _ = std::fs::remove_file(&tmp);
    open::touch_private(&tmp)?;
    let out = redb::Builder::new().create(&tmp).map_err(storage)?;
    let src = db.begin_read().map_err(storage)?;
    let mut keys = 0u64;
    let mut revision = 0;
    {
        let mut w = out.begin_write().map_err(storage)?;
        w.set_durability(Durability::None).map_err(storage)?;
        {
            let meta_in = src.open_table(META).map_err(storage)?;
            let mut meta_out = w.open_table(META).map_err(storage)?;
            for e in meta_in.iter().map_err(storage)? {
                let (k, v) = e.map_err(storage)?;
                if k.value() == META_REVISION {
                    revision = v.value();
                }
                meta_out.insert(k.value(), v.value()).map_err(storage)?;
            }
            let cur_in = src.open_table(CURRENT).map_err(storage)?;
            let mut cur_out = w.open_table(CURRENT).map_err(storage)?;
            for e in cur_in.iter().map_err(storage)? {
                let (k, v) = e.map_err(storage)?;
                cur_out.insert(k.value(), v.value()).map_err(storage)?;
                keys += 1;
            }
            let hist_in = src.open_table(HISTORY).map_err(storage)?;
            let mut hist_out = w.open_table(HISTORY).map_err(storage)?;
            for e in hist_in.iter().map_err(storage)? {
                let (k, v) = e.map_err(storage)?;
                hist_out.insert(k.value(), v.value()).map_err(storage)?;
            }
            let log_in = src.open_table(LOG).map_err(storage)?;
            let mut log_out = w.open_table(LOG).map_err(storage)?;
            for e in log_in.iter().map_err(storage)? {
                let (k, v) = e.map_err(storage)?;
                log_out.insert(k.value(), v.value()).map_err(storage)?;
            }
        }
        w.commit().map_err(storage)?;
        let mut w = out.begin_write().map_err(storage)?;
        w.set_durability(Durability::Immediate).map_err(storage)?;
        w.commit().map_err(storage)?;
    }
    drop(out);
    std::fs::rename(&tmp, dest).map_err(|e| StoreError::Io(format!("cannot move the snapshot into place: {e}")))?;
    sync_parent(dest)?;
    let bytes = std::fs::metadata(dest).map(|m| m.len()).unwrap_or(0);
    Ok(SnapshotInfo { revision, keys, bytes })
}

fn sync_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| StoreError::Io(e.to_string()))?;
    }
    Ok(())
}

/// Check that `snapshot` is a store this build can open and report what it holds.
/// Up to `limit` current key-values under `prefix` of the data file at `path`, read through a
/// read-only handle (nothing is written, not even a recovery): for checks that must leave a
/// file exactly as it was when they fail (the encryption key of a data directory). A missing
/// or fresh file has none.
pub fn read_prefix(path: &Path, prefix: &[u8], limit: usize) -> Result<Vec<KeyValue>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let builder = redb::Builder::new();
    if let open::Inspection::Fresh = open::inspect(path, &builder)? {
        return Ok(Vec::new());
    }
    let db = builder.open_read_only(path).map_err(|e| open::classify_open_error(path, e))?;
    let txn = db.begin_read().map_err(storage)?;
    let current = txn.open_table(CURRENT).map_err(storage)?;
    let history = txn.open_table(HISTORY).map_err(storage)?;
    let mut out = Vec::new();
    for entry in current.range(prefix..).map_err(storage)? {
        let (key, revs) = entry.map_err(storage)?;
        if !key.value().starts_with(prefix) || out.len() >= limit {
            break;
        }
        let (create, modrev) = revs.value();
        let key = Bytes::copy_from_slice(key.value());
        out.push(read_version(&history, &key, create, modrev).map_err(storage)?);
    }
    Ok(out)
}

pub fn verify_snapshot(snapshot: &Path) -> Result<SnapshotInfo> {
    if !snapshot.exists() {
        return Err(StoreError::Io(format!("{} does not exist", snapshot.display())));
    }
    let builder = redb::Builder::new();
    match open::inspect(snapshot, &builder)? {
        open::Inspection::Fresh => {
            return Err(StoreError::BadDataFile {
                path: snapshot.display().to_string(),
                reason: "the snapshot file is empty".into(),
                kind: crate::error::BadDataKind::Corrupted,
            });
        }
        open::Inspection::Ours { .. } => {}
    }
    let db = builder.open_read_only(snapshot).map_err(|e| open::classify_open_error(snapshot, e))?;
    let txn = db.begin_read().map_err(storage)?;
    let meta = txn.open_table(META).map_err(storage)?;
    let revision = meta.get(META_REVISION).map_err(storage)?.map(|g| g.value()).unwrap_or(0);
    let keys = txn.open_table(CURRENT).map_err(storage)?.len().map_err(storage)?;
    let bytes = std::fs::metadata(snapshot).map(|m| m.len()).unwrap_or(0);
    Ok(SnapshotInfo { revision, keys, bytes })
}

/// Offline restore: verify `snapshot`, keep the current data file as `<file>.before-restore-<ms>`
/// and put a copy of the snapshot in its place. The store must not be running.
pub fn restore(snapshot: &Path, data_file: &Path) -> Result<(SnapshotInfo, Option<PathBuf>)> {
    let info = verify_snapshot(snapshot)?;
    open::prepare_dir(data_file)?;
    // Refuse while a server holds the data file.
    if data_file.exists()
        && let Err(e) = redb::Builder::new().open_read_only(data_file)
        && matches!(e, redb::DatabaseError::DatabaseAlreadyOpen)
    {
        return Err(open::classify_open_error(data_file, e));
    }
    let tmp = data_file.with_extension("restoring");
    std::fs::copy(snapshot, &tmp).map_err(|e| StoreError::Io(format!("cannot copy the snapshot: {e}")))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| StoreError::Io(e.to_string()))?;
    let backup = if data_file.exists() {
        let b = data_file.with_extension(format!("before-restore-{}", now_ms()));
        std::fs::rename(data_file, &b).map_err(|e| StoreError::Io(format!("cannot keep the old data file: {e}")))?;
        Some(b)
    } else {
        None
    };
    std::fs::rename(&tmp, data_file).map_err(|e| StoreError::Io(format!("cannot move the snapshot into place: {e}")))?;
    sync_parent(data_file)?;
    Ok((info, backup))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lone writer's waits gather nothing: after a few the writer stops waiting, tries again
    /// once every PROBE_EVERY batches, and waits again for good once a wait gathers company.
    #[test]
    fn gather_stops_waiting_when_waits_gather_nothing() {
        let mut g = Gather::new(Duration::from_millis(1));
        let mut waits = 0;
        for _ in 0..10 {
            if g.should_wait() {
                waits += 1;
                g.record(0);
            }
        }
        assert_eq!(waits, 3, "gain 1.0 decays below 0.5 after three empty waits");
        let probes = (0..Gather::PROBE_EVERY * 2).filter(|_| g.should_wait()).count();
        assert_eq!(probes, 2);
        g.record(8);
        assert!(g.should_wait() && g.should_wait(), "a wait that gathered writes makes waiting worth it again");
        assert!(!Gather::new(Duration::ZERO).should_wait(), "no window, no waiting");
    }
}
