//! The scheduling queue, shaped like Karmada's priority scheduling queue: bindings wait in an
//! active queue ordered by `spec.schedulePriority.priority` (higher first, then first come), a
//! failed binding waits out an exponential backoff, an unschedulable one a longer fixed wait (the
//! unschedulable pool), and a binding is scheduled by one worker at a time — added again while
//! it is being scheduled, it is scheduled once more afterwards.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How long failed keys wait: `initial`, doubling per consecutive failure, at most `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after the `failures`-th consecutive failure (counting from 1).
    pub fn delay(&self, failures: u32) -> Duration {
        self.initial.saturating_mul(1u32 << failures.saturating_sub(1).min(20)).min(self.max)
    }
}

/// A key waiting in the active queue.
#[derive(Debug)]
struct Ready<K> {
    priority: i32,
    sequence: u64,
    key: K,
}

impl<K> PartialEq for Ready<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K> Eq for Ready<K> {}

impl<K> PartialOrd for Ready<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Ready<K> {
    /// The heap's greatest is the highest priority, then the earliest added.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then(other.sequence.cmp(&self.sequence))
    }
}

#[derive(Debug)]
struct State<K> {
    active: BinaryHeap<Ready<K>>,
    /// Keys in `active`.
    queued: HashSet<K>,
    /// Keys a worker holds.
    processing: HashSet<K>,
    /// Keys added while a worker held them, with their priority: queued again by `done`.
    dirty: HashMap<K, i32>,
    /// Keys due later: (due, sequence, priority, key).
    delayed: BinaryHeap<Reverse<(Instant, u64, i32, K)>>,
    failures: HashMap<K, u32>,
    sequence: u64,
    shut_down: bool,
}

/// The queue, shared by the event handlers that add keys and the workers that take them.
#[derive(Debug)]
pub struct SchedulingQueue<K> {
    state: Mutex<State<K>>,
    wake: Notify,
    backoff: Backoff,
}

impl<K: Clone + Eq + Hash + Ord> SchedulingQueue<K> {
    pub fn new(backoff: Backoff) -> SchedulingQueue<K> {
        SchedulingQueue {
            state: Mutex::new(State {
                active: BinaryHeap::new(),
                queued: HashSet::new(),
                processing: HashSet::new(),
                dirty: HashMap::new(),
                delayed: BinaryHeap::new(),
                failures: HashMap::new(),
                sequence: 0,
                shut_down: false,
            }),
            wake: Notify::new(),
            backoff,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `key` now, unless it already waits in the active queue.
    pub fn add(&self, key: K, priority: i32) {
        let mut state = self.lock();
        if state.shut_down {
            return;
        }
        if state.processing.contains(&key) {
            let entry = state.dirty.entry(key).or_insert(priority);
            *entry = (*entry).max(priority);
            return;
        }
        if state.queued.insert(key.clone()) {
            state.sequence += 1;
            let sequence = state.sequence;
            state.active.push(Ready { priority, sequence, key });
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Queues `key` after `delay`.
    pub fn add_after(&self, key: K, priority: i32, delay: Duration) {
        let mut state = self.lock();
        if state.shut_down {
            return;
        }
        state.sequence += 1;
        let sequence = state.sequence;
        state.delayed.push(Reverse((Instant::now() + delay, sequence, priority, key)));
        drop(state);
        // A worker asleep until a later due time must look again.
        self.wake.notify_one();
    }

    /// Queues `key` after its backoff, counting one more consecutive failure.
    pub fn add_backoff(&self, key: K, priority: i32) {
        let failures = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_default();
            *failures += 1;
            *failures
        };
        self.add_after(key, priority, self.backoff.delay(failures));
    }

    /// Resets the failure count of `key` (it succeeded, or will not be retried).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// The next key, once one is due; `None` after [`SchedulingQueue::shut_down`]. The caller
    /// holds the key until [`SchedulingQueue::done`].
    pub async fn next(&self) -> Option<K> {
        loop {
            let woken = self.wake.notified();
            let due = {
                let mut state = self.lock();
                if state.shut_down {
                    return None;
                }
                promote_due(&mut state);
                if let Some(Ready { key, .. }) = state.active.pop() {
                    state.queued.remove(&key);
                    state.processing.insert(key.clone());
                    let more = !state.active.is_empty();
                    drop(state);
                    if more {
                        self.wake.notify_one();
                    }
                    return Some(key);
                }
                state.delayed.peek().map(|Reverse((due, ..))| *due)
            };
            match due {
                Some(due) => {
                    tokio::select! {
                        () = woken => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                None => woken.await,
            }
        }
    }

    /// Releases `key`; if it was added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        state.processing.remove(key);
        if let Some(priority) = state.dirty.remove(key) {
            drop(state);
            self.add(key.clone(), priority);
        }
    }

    /// Stops the queue: [`SchedulingQueue::next`] returns `None` from now on.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.wake.notify_waiters();
    }

    /// Keys waiting now or later.
    pub fn len(&self) -> usize {
        let state = self.lock();
        state.active.len() + state.delayed.len() + state.dirty.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Moves the delayed keys that are due into the active queue.
fn promote_due<K: Clone + Eq + Hash + Ord>(state: &mut State<K>) {
    let now = Instant::now();
    while state.delayed.peek().is_some_and(|Reverse((due, ..))| *due <= now) {
        let Some(Reverse((_, _, priority, key))) = state.delayed.pop() else { break };
        if state.processing.contains(&key) {
            state.dirty.entry(key).or_insert(priority);
        } else if state.queued.insert(key.clone()) {
            state.sequence += 1;
            let sequence = state.sequence;
            state.active.push(Ready { priority, sequence, key });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> SchedulingQueue<&'static str> {
        SchedulingQueue::new(Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(10) })
    }

    #[tokio::test]
    async fn higher_priority_first_then_arrival_order_and_each_key_once() {
        let q = queue();
        q.add("low", 0);
        q.add("first-high", 5);
        q.add("second-high", 5);
        q.add("low", 0);
        let mut order = Vec::new();
        while !q.is_empty() {
            let key = q.next().await.unwrap();
            q.done(&key);
            order.push(key);
        }
        assert_eq!(order, ["first-high", "second-high", "low"]);
    }

    #[tokio::test]
    async fn a_key_added_while_held_runs_again_after_done() {
        let q = queue();
        q.add("b", 0);
        let held = q.next().await.unwrap();
        q.add("b", 0);
        q.add("b", 0);
        assert_eq!(q.lock().active.len(), 0, "not handed to a second worker");
        q.done(&held);
        assert_eq!(q.next().await, Some("b"));
        q.done(&"b");
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn delayed_keys_come_due() {
        let q = queue();
        q.add_after("later", 0, Duration::from_millis(20));
        q.add("now", 0);
        assert_eq!(q.next().await, Some("now"));
        q.done(&"now");
        assert_eq!(q.next().await, Some("later"), "the worker waits for the due key");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let backoff = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(10) };
        let secs: Vec<u64> = (1..=6).map(|n| backoff.delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
    }

    #[tokio::test]
    async fn failures_are_counted_until_forgotten() {
        let q = queue();
        q.add_backoff("x", 0);
        q.add_backoff("x", 0);
        assert_eq!(q.lock().failures.get("x"), Some(&2));
        q.forget(&"x");
        assert_eq!(q.lock().failures.get("x"), None);
        q.shut_down();
        assert_eq!(q.next().await, None);
    }
}
