//! A work queue with client-go's guarantees, for controllers whose keys are not one static kind
//! (the detector's templates of any kind, the execution controller's member objects):
//!
//! - a key waits in the queue at most once (adding it again is free);
//! - a key is processed by one worker at a time; added while processing, it runs again after;
//! - a failed key is retried with exponential backoff (`base` doubling to `max`), reset on success.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

struct Inner<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    failures: HashMap<K, u32>,
    shutdown: bool,
}

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    base: Duration,
    max: Duration,
}

impl<K> std::fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").field("len", &self.inner.lock().queue.len()).finish()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    pub fn new(base: Duration, max: Duration) -> Arc<WorkQueue<K>> {
        Arc::new(WorkQueue {
            inner: Mutex::new(Inner { queue: VecDeque::new(), dirty: HashSet::new(), processing: HashSet::new(), failures: HashMap::new(), shutdown: false }),
            notify: Notify::new(),
            base,
            max,
        })
    }

    pub fn add(&self, key: K) {
        let mut inner = self.inner.lock();
        if inner.shutdown || !inner.dirty.insert(key.clone()) {
            return;
        }
        if !inner.processing.contains(&key) {
            inner.queue.push_back(key);
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
        let delay = self.base.saturating_mul(1u32 << (n - 1).min(20)).min(self.max);
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
                if let Some(key) = inner.queue.pop_front() {
                    inner.dirty.remove(&key);
                    inner.processing.insert(key.clone());
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
        if inner.dirty.contains(key) {
            inner.queue.push_back(key.clone());
            drop(inner);
            self.notify.notify_one();
        }
    }

    pub fn shutdown(&self) {
        self.inner.lock().shutdown = true;
        self.notify.notify_waiters();
    }
}

/// What a reconcile asks of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Done until something changes.
    Done,
    /// Look again after this long (not a failure: the backoff is reset).
    After(Duration),
}

/// Run `workers` workers over `queue` until it shuts down. A reconcile error is logged and the
/// key retried with backoff.
pub async fn run_workers<K, F, Fut, E>(queue: Arc<WorkQueue<K>>, workers: usize, name: &'static str, reconcile: F)
where
    K: Clone + Eq + Hash + Send + Sync + std::fmt::Debug + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Next, E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let reconcile = Arc::new(reconcile);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let queue = queue.clone();
        let reconcile = reconcile.clone();
        set.spawn(async move {
            while let Some(key) = queue.get().await {
                let result = reconcile(key.clone()).await;
                tracing::trace!(controller = name, key = ?key, ok = result.is_ok(), "reconciled");
                match result {
                    Ok(next) => {
                        queue.forget(&key);
                        if let Next::After(d) = next {
                            queue.add_after(key.clone(), d);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(controller = name, key = ?key, error = %e, "reconcile failed; retrying with backoff");
                        queue.add_rate_limited(key.clone());
                    }
                }
                queue.done(&key);
            }
        });
    }
    while set.join_next().await.is_some() {}
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
    async fn failures_back_off_then_succeed() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new(Duration::from_millis(1), Duration::from_millis(5));
        let attempts = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let a = attempts.clone();
        let qq = q.clone();
        let runner = tokio::spawn(run_workers(q.clone(), 2, "test", move |_k: u32| {
            let a = a.clone();
            let qq = qq.clone();
            async move {
                let n = a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if n < 3 {
                    Err("not yet")
                } else {
                    qq.shutdown();
                    Ok(Next::Done)
                }
            }
        }));
        q.add(7);
        tokio::time::timeout(Duration::from_secs(30), runner).await.unwrap().unwrap();
        assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 4);
    }
}
