//! Member objects a pull agent holds as the edge left them (ADR 0032): an object changed while
//! the control plane was away is neither re-applied nor reverted until the control plane has
//! decided what becomes of the change — reverted, adopted into its desired state, or left for
//! someone to resolve. The agent's edge recorder keeps the set (from its records in the member,
//! before any controller starts); the execution and work-status controllers look at it before
//! they write an object.

use std::collections::BTreeSet;
use std::time::Duration;

use parking_lot::Mutex;

use crate::apply::ObjectRef;

/// An object's identity as held: group, kind, namespace, name (the version does not matter).
pub fn key_of(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}

fn key(r: &ObjectRef) -> String {
    key_of(&r.gvk.group, &r.gvk.kind, r.namespace.as_deref(), &r.name)
}

/// The held objects, and whether the set has been read from the member yet.
#[derive(Debug, Default)]
pub struct Holds {
    held: Mutex<BTreeSet<String>>,
    /// Everything is held: offline, or back but not yet caught up with what changed meanwhile.
    all: std::sync::atomic::AtomicBool,
    loaded: tokio::sync::Notify,
    is_loaded: std::sync::atomic::AtomicBool,
    /// Counts releases (objects let go, or "everything" no longer held): the controllers look at
    /// their Works again on each, instead of waiting for an event of their own.
    released: tokio::sync::watch::Sender<u64>,
}

impl Holds {
    /// Whether `r` is held.
    pub fn is_held(&self, r: &ObjectRef) -> bool {
        self.holds_all() || self.held.lock().contains(&key(r))
    }

    /// Hold every object (`true`) — while the member is offline and until what changed meanwhile
    /// is recorded and handed to the control plane — or only those recorded (`false`).
    pub fn hold_all(&self, all: bool) {
        let before = self.all.swap(all, std::sync::atomic::Ordering::SeqCst);
        if before && !all {
            self.released.send_modify(|n| *n += 1);
        }
    }

    /// Notified on every release.
    pub fn releases(&self) -> tokio::sync::watch::Receiver<u64> {
        self.released.subscribe()
    }

    pub fn holds_all(&self) -> bool {
        self.all.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The whole set (keys of [`key_of`]) as found now; the first call marks it loaded.
    pub fn replace(&self, keys: BTreeSet<String>) {
        let (changed, released) = {
            let mut held = self.held.lock();
            let changed = *held != keys;
            let released = held.iter().any(|k| !keys.contains(k));
            *held = keys;
            (changed, released)
        };
        if released {
            self.released.send_modify(|n| *n += 1);
        }
        if changed {
            tracing::debug!(held = self.held.lock().len(), "edge holds changed");
        }
        if !self.is_loaded.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.loaded.notify_waiters();
        }
    }

    /// One more held object (recorded just now).
    pub fn hold(&self, key: String) {
        self.held.lock().insert(key);
    }

    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wait until the set has been read from the member, at most `timeout`; whether it was.
    pub async fn wait_loaded(&self, timeout: Duration) -> bool {
        let loaded = self.loaded.notified();
        if self.is_loaded.load(std::sync::atomic::Ordering::SeqCst) {
            return true;
        }
        tokio::time::timeout(timeout, loaded).await.is_ok() || self.is_loaded.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn objects_are_held_by_group_kind_namespace_and_name() {
        let holds = Holds::default();
        assert!(!holds.wait_loaded(Duration::from_millis(10)).await);
        let web = ObjectRef::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}})).unwrap();
        let other = ObjectRef::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "other"}})).unwrap();
        holds.replace([key_of("apps", "Deployment", Some("shop"), "web")].into());
        assert!(holds.wait_loaded(Duration::from_millis(10)).await);
        assert!(holds.is_held(&web) && !holds.is_held(&other));
        holds.replace(Default::default());
        assert!(!holds.is_held(&web));
        holds.hold_all(true);
        assert!(holds.is_held(&web) && holds.is_held(&other));
        let mut releases = holds.releases();
        holds.hold_all(false);
        assert!(releases.has_changed().unwrap(), "letting go of everything is a release");
        releases.mark_unchanged();
        holds.replace([key_of("apps", "Deployment", Some("shop"), "web")].into());
        assert!(!releases.has_changed().unwrap(), "holding more is not");
        holds.replace(Default::default());
        assert!(releases.has_changed().unwrap());
    }
}
