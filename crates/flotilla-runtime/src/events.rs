//! Events as client-go's recorder writes them.
//!
//! A reconcile hands its Event to the recorder and goes on: the Event is written in the
//! background, as client-go's broadcaster writes it, so that advice never holds up the work it
//! describes (each write waits for the store's commit). What client-go does to keep Events from
//! swamping the API server is done here too:
//! - a repeat of the same Event on the same object bumps `count` and `lastTimestamp` of the one
//!   already written instead of making another;
//! - each (component, object, type) gets a burst of 25 Events, then one per 5 minutes (client-go's
//!   `EventSourceObjectSpamFilter`): a template fanned out to a thousand members does not get a
//!   thousand "applied to cluster X" Events;
//! - at most 1,000 Events wait to be written; more are dropped (client-go's `maxQueuedEvents`).
//!
//! Every outcome is counted in `flotilla_events_total{component, outcome}`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, Resource};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::metrics::{EventOutcome, metrics};

/// Events of one controller, written as `core/v1` Events the way client-go's recorder (and so
/// Karmada) writes them — what `kubectl get events` and `kubectl describe` read.
#[derive(Clone)]
pub struct Events {
    shared: Arc<Shared>,
    /// The writer's queue, made (and the writer started) by the first Event.
    queue: Arc<OnceLock<mpsc::Sender<Pending>>>,
}

struct Shared {
    client: Client,
    component: String,
    /// Events already written, for the count of a repeat: key → (name, count).
    seen: Mutex<HashMap<EventKey, (String, i32)>>,
    /// client-go's spam filter: one token bucket per (object, type).
    buckets: Mutex<HashMap<SpamKey, Bucket>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct EventKey {
    namespace: String,
    object: (Option<String>, Option<String>, Option<String>),
    type_: &'static str,
    reason: String,
    message: String,
}

/// client-go's `getSpamKey`: the source (one recorder here), the object and the type.
#[derive(Clone, PartialEq, Eq, Hash)]
struct SpamKey {
    object: (Option<String>, Option<String>, Option<String>, Option<String>, Option<String>),
    type_: &'static str,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// One Event waiting to be written.
struct Pending {
    reference: ObjectReference,
    namespace: String,
    type_: &'static str,
    reason: String,
    action: String,
    message: String,
    at: jiff::Timestamp,
}

/// How many distinct events each recorder remembers for aggregation, and objects for the spam
/// filter (client-go's `maxLruCacheEntries`).
const EVENT_CACHE: usize = 4096;
/// Kubernetes' limit on an Event message.
const EVENT_MESSAGE_LIMIT: usize = 1024;
/// client-go's `defaultSpamBurst` and `defaultSpamQPS` (one token per 300 s).
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);
/// client-go's `maxQueuedEvents`.
const QUEUED_EVENTS: usize = 1000;
/// Events written at once by one recorder: enough that a burst shares the store's commits.
const WRITES_IN_FLIGHT: usize = 8;

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").field("component", &self.shared.component).finish()
    }
}

impl Events {
    pub fn new(client: Client, controller: &str) -> Events {
        let shared = Shared { client, component: controller.into(), seen: Default::default(), buckets: Default::default() };
        Events { shared: Arc::new(shared), queue: Default::default() }
    }

    /// Publish an Event on `obj`. It is written in the background; failures are logged and
    /// counted, never returned (an Event is advice).
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, warning: bool, reason: &str, action: &str, note: String) {
        let reference = obj.object_ref(&());
        self.publish_ref(&reference, warning, reason, action, note).await;
    }

    pub async fn publish_ref(&self, reference: &ObjectReference, warning: bool, reason: &str, action: &str, note: String) {
        let type_ = if warning { "Warning" } else { "Normal" };
        let component = &self.shared.component;
        if !self.shared.admit(reference, type_) {
            metrics().event(component, EventOutcome::Throttled);
            tracing::debug!(component, reason, object = ?reference.name, "event dropped: this object had its burst of events");
            return;
        }
        let pending = Pending {
            reference: reference.clone(),
            namespace: reference.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into()),
            type_,
            reason: reason.into(),
            action: action.into(),
            message: note.chars().take(EVENT_MESSAGE_LIMIT).collect(),
            at: jiff::Timestamp::now(),
        };
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUED_EVENTS);
            tokio::spawn(write_all(self.shared.clone(), rx));
            tx
        });
        if queue.try_send(pending).is_err() {
            metrics().event(component, EventOutcome::Dropped);
            tracing::debug!(component, reason, "event dropped: {QUEUED_EVENTS} events are already waiting to be written");
        }
    }
}

/// The recorder's writer: runs until every handle of the recorder is gone.
async fn write_all(shared: Arc<Shared>, rx: mpsc::Receiver<Pending>) {
    let pending = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) });
    pending
        .for_each_concurrent(WRITES_IN_FLIGHT, |p| {
            let shared = shared.clone();
            async move {
                let outcome = match shared.record(&p).await {
                    Ok(outcome) => outcome,
                    Err(e) => {
                        tracing::debug!(component = %shared.component, reason = %p.reason, error = %e, "writing an event failed");
                        EventOutcome::Failed
                    }
                };
                metrics().event(&shared.component, outcome);
            }
        })
        .await;
}

impl Shared {
    /// client-go's spam filter: take a token of the object's bucket.
    fn admit(&self, reference: &ObjectReference, type_: &'static str) -> bool {
        let key = SpamKey {
            object: (reference.kind.clone(), reference.namespace.clone(), reference.name.clone(), reference.uid.clone(), reference.api_version.clone()),
            type_,
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        if buckets.len() >= EVENT_CACHE && !buckets.contains_key(&key) {
            buckets.clear();
        }
        let bucket = buckets.entry(key).or_insert(Bucket { tokens: SPAM_BURST, at: now });
        let refill = now.duration_since(bucket.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refill).min(SPAM_BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    async fn record(&self, p: &Pending) -> Result<EventOutcome, kube::Error> {
        use k8s_openapi::api::core::v1::{Event, EventSource};
        use kube::api::{Api, Patch, PatchParams, PostParams};
        let key = EventKey {
            namespace: p.namespace.clone(),
            object: (p.reference.kind.clone(), p.reference.name.clone(), p.reference.uid.clone()),
            type_: p.type_,
            reason: p.reason.clone(),
            message: p.message.clone(),
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &p.namespace);
        // A repeat: its count is taken now, so that repeats written side by side count up.
        let known = {
            let mut seen = self.seen.lock();
            seen.get_mut(&key).map(|(name, count)| {
                *count += 1;
                (name.clone(), *count)
            })
        };
        if let Some((name, count)) = known {
            let patch = serde_json::json!({"count": count, "lastTimestamp": Time(p.at)});
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => return Ok(EventOutcome::Counted),
                // Expired or deleted (or its first write still on its way): write a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!("{}.{:x}", p.reference.name.as_deref().unwrap_or("unknown"), p.at.as_nanosecond());
        {
            let mut seen = self.seen.lock();
            if seen.len() >= EVENT_CACHE {
                seen.clear();
            }
            seen.insert(key.clone(), (name.clone(), 1));
        }
        let event = Event {
            metadata: kube::api::ObjectMeta { name: Some(name.clone()), namespace: Some(p.namespace.clone()), ..Default::default() },
            involved_object: p.reference.clone(),
            reason: Some(p.reason.clone()),
            message: Some(p.message.clone()),
            type_: Some(p.type_.into()),
            action: Some(p.action.clone()),
            source: Some(EventSource { component: Some(self.component.clone()), host: None }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.component.clone()),
            first_timestamp: Some(Time(p.at)),
            last_timestamp: Some(Time(p.at)),
            count: Some(1),
            ..Default::default()
        };
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            let mut seen = self.seen.lock();
            if seen.get(&key).is_some_and(|(n, _)| *n == name) {
                seen.remove(&key);
            }
            return Err(e);
        }
        Ok(EventOutcome::Written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> ObjectReference {
        ObjectReference { kind: Some("Deployment".into()), namespace: Some("default".into()), name: Some(name.into()), ..Default::default() }
    }

    fn shared() -> Shared {
        // A client that is never called: `admit` reads no API.
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        Shared { client, component: "test".into(), seen: Default::default(), buckets: Default::default() }
    }

    #[tokio::test]
    async fn each_object_gets_a_burst_of_25_events_then_is_throttled() {
        let s = shared();
        let admitted = (0..40).filter(|_| s.admit(&reference("a"), "Normal")).count();
        assert_eq!(admitted, 25);
        // Another object, and another type on the same object, have buckets of their own.
        assert!(s.admit(&reference("b"), "Normal"));
        assert!(s.admit(&reference("a"), "Warning"));
    }

    #[tokio::test]
    async fn a_throttled_bucket_refills_one_event_per_five_minutes() {
        let s = shared();
        while s.admit(&reference("a"), "Normal") {}
        let key = SpamKey { object: (Some("Deployment".into()), Some("default".into()), Some("a".into()), None, None), type_: "Normal" };
        let mut buckets = s.buckets.lock();
        let bucket = buckets.get_mut(&key).expect("a bucket");
        bucket.at = bucket.at.checked_sub(SPAM_REFILL).expect("the clock is past 300 s");
        drop(buckets);
        assert!(s.admit(&reference("a"), "Normal"), "one token back after 300 s");
        assert!(!s.admit(&reference("a"), "Normal"), "and only one");
    }
}
