//! The work queue, with client-go's guarantees:
//!
//! - a key waits in the queue at most once (adding it again is free);
//! - a key is processed by one worker at a time; added while processing, it runs again after;
//! - a failed key is retried with exponential backoff (`base` doubling to `max`), reset on success;
//! - keys are handed out highest priority first, then in the order they were added (all keys
//!   have priority 0 unless the queue is given a [`WorkQueue::set_priority`] function: the
//!   scheduler orders bindings by `spec.schedulePriority`, as controller-runtime's priority
//!   queue and Karmada's scheduling queue do). A key's priority is taken when it is added; a key
//!   already waiting keeps its place.
//!
//! A queue named for its controller ([`WorkQueue::export_metrics`]) exports client-go's workqueue
//! metrics ([`crate::metrics`]).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::metrics::QueueMetrics;

/// A key waiting to be handed out.
struct Waiting<K> {
    priority: i32,
    sequence: u64,
    key: K,
}

impl<K> PartialEq for Waiting<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K> Eq for Waiting<K> {}

impl<K> PartialOrd for Waiting<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Waiting<K> {
    /// The heap's greatest is the highest priority, then the earliest added.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then(other.sequence.cmp(&self.sequence))
    }
}

type Priority<K> = Arc<dyn Fn(&K) -> i32 + Send + Sync>;

struct Inner<K> {
    queue: BinaryHeap<Waiting<K>>,
    sequence: u64,
    /// Keys waiting in `queue` or added while processed, with the priority they were added at.
    dirty: HashMap<K, i32>,
    processing: HashSet<K>,
    failures: HashMap<K, u32>,
    /// When each waiting key was added, and when each key being processed was taken (for the
    /// duration metrics; kept only on an instrumented queue).
    added: HashMap<K, Instant>,
    started: HashMap<K, Instant>,
    shutdown: bool,
}

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    /// The retry backoff: base, doubling up to max.
    backoff: Mutex<(Duration, Duration)>,
    priority: OnceLock<Priority<K>>,
    metrics: OnceLock<QueueMetrics>,
}

impl<K> std::fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").field("len", &self.inner.lock().queue.len()).finish()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    pub fn new(base: Duration, max: Duration) -> Arc<WorkQueue<K>> {
        Arc::new(WorkQueue {
            inner: Mutex::new(Inner {
                queue: BinaryHeap::new(),
                sequence: 0,
                dirty: HashMap::new(),
                processing: HashSet::new(),
                failures: HashMap::new(),
                added: HashMap::new(),
                started: HashMap::new(),
                shutdown: false,
            }),
            notify: Notify::new(),
            backoff: Mutex::new((base, max)),
            priority: OnceLock::new(),
            metrics: OnceLock::new(),
        })
    }

    /// Order keys by `priority(key)`, higher first (once; later calls change nothing). It is
    /// called as a key is added, outside the queue's lock, so it may read a cache.
    pub fn set_priority(&self, priority: impl Fn(&K) -> i32 + Send + Sync + 'static) {
        let _ = self.priority.set(Arc::new(priority));
    }

    fn push(inner: &mut Inner<K>, key: K, priority: i32) {
        inner.sequence += 1;
        let sequence = inner.sequence;
        inner.queue.push(Waiting { priority, sequence, key });
    }

    /// Change the retry backoff (keys already waiting keep their delay).
    pub fn set_backoff(&self, base: Duration, max: Duration) {
        *self.backoff.lock() = (base, max);
    }

    /// Export this queue's metrics as `controller`'s (once; later calls change nothing).
    pub fn export_metrics(&self, controller: &str) {
        if self.metrics.get().is_some() {
            return;
        }
        let m = crate::metrics::metrics().queue(controller);
        let inner = self.inner.lock();
        m.depth.set(i64::try_from(inner.queue.len()).unwrap_or(i64::MAX));
        let _ = self.metrics.set(m);
    }

    fn depth_changed(&self, inner: &Inner<K>) {
        if let Some(m) = self.metrics.get() {
            m.depth.set(i64::try_from(inner.queue.len()).unwrap_or(i64::MAX));
        }
    }

    pub fn add(&self, key: K) {
        let priority = self.priority.get().map_or(0, |p| p(&key));
        let mut inner = self.inner.lock();
        if inner.shutdown || inner.dirty.contains_key(&key) {
            return;
        }
        inner.dirty.insert(key.clone(), priority);
        if let Some(m) = self.metrics.get() {
            m.adds.inc();
            inner.added.insert(key.clone(), Instant::now());
        }
        if !inner.processing.contains(&key) {
            Self::push(&mut inner, key, priority);
            self.depth_changed(&inner);
            drop(inner);
            self.notify.notify_one();
        }
    }

    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            me.add(key);
        });
    }

    /// Retry `key` after its backoff.
    pub fn add_rate_limited(self: &Arc<Self>, key: K) {
        let n = {
            let mut inner = self.inner.lock();
            let n = inner.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        if let Some(m) = self.metrics.get() {
            m.retries.inc();
        }
        let (base, max) = *self.backoff.lock();
        let delay = base.saturating_mul(1u32 << (n - 1).min(20)).min(max);
        self.add_after(key, delay);
    }

    pub fn forget(&self, key: &K) {
        self.inner.lock().failures.remove(key);
    }

    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key; `None` after [`WorkQueue::shutdown`].
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.inner.lock();
                if inner.shutdown {
                    return None;
                }
                if let Some(Waiting { key, .. }) = inner.queue.pop() {
                    inner.dirty.remove(&key);
                    inner.processing.insert(key.clone());
                    if let Some(m) = self.metrics.get() {
                        let now = Instant::now();
                        if let Some(at) = inner.added.remove(&key) {
                            m.queue_duration.observe(now.duration_since(at).as_secs_f64());
                        }
                        inner.started.insert(key.clone(), now);
                        self.depth_changed(&inner);
                    }
                    if !inner.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
            }
            notified.await;
        }
    }

    pub fn done(&self, key: &K) {
        let mut inner = self.inner.lock();
        inner.processing.remove(key);
        if let Some(m) = self.metrics.get()
            && let Some(at) = inner.started.remove(key)
        {
            m.work_duration.observe(at.elapsed().as_secs_f64());
        }
        if let Some(&priority) = inner.dirty.get(key) {
            Self::push(&mut inner, key.clone(), priority);
            self.depth_changed(&inner);
            drop(inner);
            self.notify.notify_one();
        }
    }

    pub fn shutdown(&self) {
        self.inner.lock().shutdown = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_waits_once_and_reruns_when_added_while_processing() {
        let q = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let k = q.get().await.unwrap();
        assert_eq!(k, "a");
        q.add("a"); // while processing: not queued twice, but after done
        assert_eq!(q.len(), 1);
        q.done(&"a");
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.get().await, Some("a"));
        q.shutdown();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn higher_priority_first_then_arrival_order() {
        let q: Arc<WorkQueue<&'static str>> = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(10));
        q.set_priority(|k: &&str| if k.starts_with("high") { 5 } else { 0 });
        for k in ["low-1", "high-1", "low-2", "high-2", "low-1"] {
            q.add(k);
        }
        let mut order = Vec::new();
        while !q.is_empty() {
            let k = q.get().await.unwrap();
            q.done(&k);
            order.push(k);
        }
        assert_eq!(order, ["high-1", "high-2", "low-1", "low-2"]);
    }

    #[tokio::test]
    async fn failures_back_off_then_succeed() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(5));
        let attempts = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let a = attempts.clone();
        let qq = q.clone();
        let runner = tokio::spawn(crate::run_workers(q.clone(), 2, "test", move |_k: u32| {
            let a = a.clone();
            let qq = qq.clone();
            async move {
                let n = a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if n < 3 {
                    Err("not yet")
                } else {
                    qq.shutdown();
                    Ok(crate::Next::Done)
                }
            }
        }));
        q.add(7);
        tokio::time::timeout(Duration::from_secs(30), runner).await.unwrap().unwrap();
        assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 4);
    }
}
