//! Events as client-go's recorder writes them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, Resource};

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
