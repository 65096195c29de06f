//! Watch fan-out shared by the embedded and memory backends.
//!
//! The writer publishes each committed batch once, in revision order, into a bounded broadcast
//! channel. Every watch is a task that first replays history from storage, then follows the
//! broadcast, skipping what the replay already covered. A watcher that cannot keep up loses its
//! place in the broadcast ring and is ended with [`StoreError::Lagged`]; the writer never waits
//! for a watcher.
//!
//! Gap-freedom rests on one lock: publishing (advance the published revision, send the batch)
//! and subscribing (take a receiver, read the published revision) exclude each other, so a new
//! watcher either receives a batch or finds it in storage, never neither.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc};

use crate::{KeyValue, Result, Revision, StoreError};

/// One change, or a progress marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was created or updated; `prev` is its previous value when it existed.
    Put { kv: KeyValue, prev: Option<KeyValue> },
    /// A key was deleted at `revision`; `prev` is the value it held.
    Delete { key: Bytes, revision: Revision, prev: KeyValue },
    /// Every matching change up to this revision has been delivered.
    Progress(Revision),
}

impl WatchEvent {
    /// The revision the event carries.
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put { kv, .. } => kv.mod_revision,
            WatchEvent::Delete { revision, .. } => *revision,
            WatchEvent::Progress(r) => *r,
        }
    }

    pub fn key(&self) -> Option<&Bytes> {
        match self {
            WatchEvent::Put { kv, .. } => Some(&kv.key),
            WatchEvent::Delete { key, .. } => Some(key),
            WatchEvent::Progress(_) => None,
        }
    }
}

/// Settings of the watch fan-out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    /// Committed batches kept in the broadcast ring; a watcher further behind is `Lagged`.
    pub ring_batches: usize,
    /// Events buffered per watcher between its task and its reader.
    pub per_watcher_buffer: usize,
    /// How often an idle watch emits a `Progress` marker; `None` only on request.
    pub progress_interval: Option<Duration>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig { ring_batches: 8192, per_watcher_buffer: 1024, progress_interval: Some(Duration::from_secs(5)) }
    }
}

/// The changes of one committed write batch, all with revisions in `(first - 1, last]`.
#[derive(Debug)]
pub struct Batch {
    pub last_revision: Revision,
    pub events: Vec<WatchEvent>,
}

/// Reads history back from storage for a watcher that starts in the past.
pub trait History: Send + Sync + 'static {
    /// Events with revisions in `(after, up_to]` whose key starts with `prefix`, at most `max`
    /// revisions' worth, in order; also returns the last revision examined.
    fn events(&self, prefix: &[u8], after: Revision, up_to: Revision, max: usize) -> Result<(Vec<WatchEvent>, Revision)>;
}

struct Published {
    revision: Revision,
    sender: broadcast::Sender<Arc<Batch>>,
}

/// The fan-out point the writer publishes into.
pub struct Hub {
    published: Mutex<Published>,
    config: WatchConfig,
}

impl Hub {
    pub fn new(config: WatchConfig, current_revision: Revision) -> Arc<Hub> {
        let (sender, _) = broadcast::channel(config.ring_batches.max(16));
        Arc::new(Hub { published: Mutex::new(Published { revision: current_revision, sender }), config })
    }

    /// Publish a committed batch. Called by the single writer, in revision order.
    pub fn publish(&self, batch: Batch) {
        let mut p = self.published.lock();
        p.revision = batch.last_revision;
        if p.sender.receiver_count() > 0 {
            let _ = p.sender.send(Arc::new(batch));
        }
    }

    /// The revision of the last published batch.
    pub fn published_revision(&self) -> Revision {
        self.published.lock().revision
    }

    pub fn watcher_count(&self) -> usize {
        self.published.lock().sender.receiver_count()
    }

    fn subscribe(&self) -> (broadcast::Receiver<Arc<Batch>>, Revision) {
        let p = self.published.lock();
        (p.sender.subscribe(), p.revision)
    }

    /// Start a watch task. The caller has checked `after` against compaction.
    pub fn watch(self: &Arc<Self>, history: Arc<dyn History>, prefix: Bytes, after: Revision) -> WatchStream {
        let (rx, published) = self.subscribe();
        let (tx, events) = mpsc::channel(self.config.per_watcher_buffer.max(1));
        let (progress_tx, progress_rx) = mpsc::channel(4);
        let task = Watcher { hub: self.clone(), history, prefix, position: after, published_at_start: published, rx, tx, progress_rx: Some(progress_rx) };
        let handle = tokio::spawn(task.run());
        WatchStream { events, progress: Some(progress_tx), _task: TaskGuard(Some(handle)) }
    }
}

struct Watcher {
    hub: Arc<Hub>,
    history: Arc<dyn History>,
    prefix: Bytes,
    position: Revision,
    published_at_start: Revision,
    rx: broadcast::Receiver<Arc<Batch>>,
    tx: mpsc::Sender<Result<WatchEvent>>,
    progress_rx: Option<mpsc::Receiver<()>>,
}

/// How many revisions a replay reads from storage at a time.
const REPLAY_CHUNK: usize = 1000;

impl Watcher {
    async fn run(mut self) {
        if let Err(e) = self.replay().await {
            let _ = self.tx.send(Err(e)).await;
            return;
        }
        let mut tick = self.hub.config.progress_interval.map(|d| {
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        });
        loop {
            let progress_due = async {
                match tick.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.tx.closed() => return,
                got = self.rx.recv() => match got {
                    Ok(batch) => {
                        if self.deliver(&batch).await.is_err() {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = self.tx.send(Err(StoreError::Lagged)).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        let _ = self.tx.send(Err(StoreError::Closed)).await;
                        return;
                    }
                },
                req = recv_or_pending(&mut self.progress_rx) => {
                    if req.is_none() {
                        self.progress_rx = None;
                    } else if self.progress().await.is_err() {
                        return;
                    }
                }
                _ = progress_due => {
                    if self.progress().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Read from storage everything between the start revision and the revision published when
    /// the watch subscribed.
    async fn replay(&mut self) -> Result<()> {
        while self.position < self.published_at_start {
            let history = self.history.clone();
            let prefix = self.prefix.clone();
            let (after, up_to) = (self.position, self.published_at_start);
            let (events, last) = tokio::task::spawn_blocking(move || history.events(&prefix, after, up_to, REPLAY_CHUNK))
                .await
                .map_err(|e| StoreError::Internal(format!("watch replay task failed: {e}")))??;
            for ev in events {
                self.tx.send(Ok(ev)).await.map_err(|_| StoreError::Closed)?;
            }
            if last <= self.position {
                return Err(StoreError::Internal(format!("watch replay made no progress after revision {}", self.position)));
            }
            self.position = last;
        }
        Ok(())
    }

    async fn deliver(&mut self, batch: &Batch) -> std::result::Result<(), ()> {
        if batch.last_revision <= self.position {
            return Ok(());
        }
        for ev in &batch.events {
            if ev.revision() > self.position && ev.key().is_some_and(|k| k.starts_with(&self.prefix)) {
                self.tx.send(Ok(ev.clone())).await.map_err(|_| ())?;
            }
        }
        self.position = batch.last_revision;
        Ok(())
    }

    /// Drain what is already published, then report the position.
    async fn progress(&mut self) -> std::result::Result<(), ()> {
        let published = self.hub.published_revision();
        loop {
            match self.rx.try_recv() {
                Ok(batch) => self.deliver(&batch).await?,
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    let _ = self.tx.send(Err(StoreError::Lagged)).await;
                    return Err(());
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    let _ = self.tx.send(Err(StoreError::Closed)).await;
                    return Err(());
                }
            }
        }
        self.position = self.position.max(published);
        self.tx.send(Ok(WatchEvent::Progress(self.position))).await.map_err(|_| ())
    }
}

async fn recv_or_pending(rx: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match rx {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Aborts a watch task when its stream is dropped.
struct TaskGuard(Option<tokio::task::JoinHandle<()>>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// A running watch: a stream of events that ends after an error.
pub struct WatchStream {
    events: mpsc::Receiver<Result<WatchEvent>>,
    progress: Option<mpsc::Sender<()>>,
    _task: TaskGuard,
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchStream")
    }
}

impl WatchStream {
    /// Build a stream fed by a backend-specific task (etcd).
    pub(crate) fn from_parts(events: mpsc::Receiver<Result<WatchEvent>>, progress: Option<mpsc::Sender<()>>, task: tokio::task::JoinHandle<()>) -> WatchStream {
        WatchStream { events, progress, _task: TaskGuard(Some(task)) }
    }

    /// Ask for a `Progress` marker as soon as everything published so far has been delivered.
    pub fn request_progress(&self) {
        if let Some(p) = &self.progress {
            let _ = p.try_send(());
        }
    }

    /// The next event; `None` once the watch has ended.
    pub async fn next_event(&mut self) -> Option<Result<WatchEvent>> {
        self.events.recv().await
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchEvent>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}
