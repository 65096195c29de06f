//! Small pieces every federation controller uses: conditions with Kubernetes' transition-time
//! rule, Events, finalizer edits.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{Client, Resource};

/// Set condition `new` in `conditions`: `lastTransitionTime` changes only when the status does
/// (Kubernetes' `meta.SetStatusCondition`). Returns true when anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            let changed =
                old.status != new.status || old.reason != new.reason || old.message != new.message || old.observed_generation != new.observed_generation;
            *old = new;
            changed
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// A condition stamped now.
pub fn condition(type_: &str, status: bool, reason: &str, message: impl Into<String>, observed_generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(jiff::Timestamp::now()),
    }
}

/// The status of condition `type_`, if present.
pub fn condition_status<'a>(conditions: Option<&'a [Condition]>, type_: &str) -> Option<&'a Condition> {
    conditions?.iter().find(|c| c.type_ == type_)
}

/// Events of one controller, written as `core/v1` Events the way client-go's recorder (and so
/// Karmada) writes them — what `kubectl get events` and `kubectl describe` read. A repeat of the
/// same event on the same object within the process bumps `count` and `lastTimestamp` of the
/// Event already written instead of making another.
#[derive(Clone)]
pub struct Events {
    client: Client,
    component: String,
    seen: std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<EventKey, (String, i32)>>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct EventKey {
    namespace: String,
    object: (Option<String>, Option<String>, Option<String>),
    type_: &'static str,
    reason: String,
    message: String,
}

/// How many distinct events each recorder remembers for aggregation.
const EVENT_CACHE: usize = 4096;
/// Kubernetes' limit on an Event message.
const EVENT_MESSAGE_LIMIT: usize = 1024;

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").field("component", &self.component).finish()
    }
}

impl Events {
    pub fn new(client: Client, controller: &str) -> Events {
        Events { client, component: controller.into(), seen: Default::default() }
    }

    /// Publish an Event on `obj`; failures are logged, never returned (an Event is advice).
    pub async fn publish<K: Resource<DynamicType = ()>>(&self, obj: &K, warning: bool, reason: &str, action: &str, note: String) {
        let reference = obj.object_ref(&());
        self.publish_ref(&reference, warning, reason, action, note).await;
    }

    pub async fn publish_ref(&self, reference: &k8s_openapi::api::core::v1::ObjectReference, warning: bool, reason: &str, action: &str, note: String) {
        if let Err(e) = self.record(reference, warning, reason, action, note).await {
            tracing::debug!(reason, error = %e, "publishing an event failed");
        }
    }

    async fn record(
        &self,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::core::v1::{Event, EventSource};
        use kube::api::{Api, Patch, PatchParams, PostParams};
        let namespace = reference.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into());
        let message: String = note.chars().take(EVENT_MESSAGE_LIMIT).collect();
        let type_ = if warning { "Warning" } else { "Normal" };
        let key = EventKey {
            namespace: namespace.clone(),
            object: (reference.kind.clone(), reference.name.clone(), reference.uid.clone()),
            type_,
            reason: reason.into(),
            message: message.clone(),
        };
        let now = jiff::Timestamp::now();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let known = self.seen.lock().get(&key).cloned();
        if let Some((name, count)) = known {
            let patch = serde_json::json!({"count": count + 1, "lastTimestamp": Time(now)});
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.seen.lock().insert(key, (name, count + 1));
                    return Ok(());
                }
                // Expired or deleted: write a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!("{}.{:x}", reference.name.as_deref().unwrap_or("unknown"), now.as_nanosecond());
        let event = Event {
            metadata: kube::api::ObjectMeta { name: Some(name.clone()), namespace: Some(namespace), ..Default::default() },
            involved_object: reference.clone(),
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(type_.into()),
            action: Some(action.into()),
            source: Some(EventSource { component: Some(self.component.clone()), host: None }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.component.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event).await?;
        let mut seen = self.seen.lock();
        if seen.len() >= EVENT_CACHE {
            seen.clear();
        }
        seen.insert(key, (name, 1));
        Ok(())
    }
}

/// `finalizers` with `f` added; None when already there.
pub fn with_finalizer(finalizers: Option<&Vec<String>>, f: &str) -> Option<Vec<String>> {
    let mut list = finalizers.cloned().unwrap_or_default();
    if list.iter().any(|x| x == f) {
        return None;
    }
    list.push(f.to_string());
    Some(list)
}

/// `finalizers` without `f`; None when absent.
pub fn without_finalizer(finalizers: Option<&Vec<String>>, f: &str) -> Option<Vec<String>> {
    let list = finalizers.cloned().unwrap_or_default();
    if !list.iter().any(|x| x == f) {
        return None;
    }
    Some(list.into_iter().filter(|x| x != f).collect())
}

/// A merge patch setting `metadata.finalizers` guarded by the resourceVersion it was computed from.
pub fn finalizer_patch(finalizers: Vec<String>, resource_version: Option<&str>) -> serde_json::Value {
    serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}})
}

/// Watch `api` into a store, calling `on_event` for every object applied or deleted once the
/// store has it (objects of a (re)list when the whole list is in). The future runs until the watch ends; the store is filled as it runs.
pub fn watch_into_store<K, F>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    on_event: F,
) -> (kube::runtime::reflector::Store<K>, impl std::future::Future<Output = ()> + Send)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    F: Fn(&K, bool) + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::Event as E;
    let (store, writer) = kube::runtime::reflector::store();
    let fut = async move {
        let stream = kube::runtime::reflector(writer, kube::runtime::watcher(api, config).default_backoff());
        let mut stream = std::pin::pin!(stream);
        // The reflector fills the store with a (re)list only at InitDone: announcing the listed
        // objects earlier would send readers to a store that does not have them yet.
        let mut listed: Vec<K> = Vec::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(E::Apply(o)) => on_event(&o, false),
                Ok(E::Delete(o)) => on_event(&o, true),
                Ok(E::Init) => listed.clear(),
                Ok(E::InitApply(o)) => listed.push(o),
                Ok(E::InitDone) => {
                    for o in listed.drain(..) {
                        on_event(&o, false);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "watch error; retrying"),
            }
        }
    };
    (store, fut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut list = vec![];
        let mut first = condition("Ready", true, "ClusterReady", "ok", None);
        first.last_transition_time = Time(jiff::Timestamp::UNIX_EPOCH);
        assert!(set_condition(&mut list, first));
        assert!(!set_condition(&mut list, condition("Ready", true, "ClusterReady", "ok", None)));
        assert_eq!(list[0].last_transition_time.0, jiff::Timestamp::UNIX_EPOCH);
        assert!(set_condition(&mut list, condition("Ready", false, "ClusterNotReachable", "down", None)));
        assert_ne!(list[0].last_transition_time.0, jiff::Timestamp::UNIX_EPOCH);
    }

    #[test]
    fn finalizers_are_added_and_removed_once() {
        let have = vec!["a".to_string()];
        assert_eq!(with_finalizer(Some(&have), "a"), None);
        assert_eq!(with_finalizer(Some(&have), "b"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(without_finalizer(Some(&have), "a"), Some(vec![]));
        assert_eq!(without_finalizer(None, "a"), None);
    }
}
