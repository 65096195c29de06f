//! Kubernetes Events for the decisions a user needs to see (a pod that cannot be scheduled,
//! an eviction), as the real components record them. Routine events (every pod created,
//! scheduled, started) are not recorded: they would cost a simulated member more than its pods.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};

use crate::kinds::{EVENTS, Res};
use crate::simulator::Ctx;

/// Record an event about an object; failures are logged, never fatal.
#[allow(clippy::too_many_arguments)]
pub async fn record(ctx: &Ctx<'_>, res: &Res, ns: &str, name: &str, uid: &str, type_: &str, reason: &str, message: &str, component: &str) {
    let now = jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta { name: Some(format!("{name}.{:x}", now.as_nanosecond())), namespace: Some(ns.to_string()), ..Default::default() },
        involved_object: ObjectReference {
            api_version: Some(res.api_version()),
            kind: Some(res.kind.into()),
            name: Some(name.into()),
            namespace: res.namespaced.then(|| ns.to_string()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some(component.into()), host: None }),
        reporting_component: Some(component.into()),
        reporting_instance: Some(component.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: None::<MicroTime>,
        count: Some(1),
        ..Default::default()
    };
    let body = serde_json::to_value(&event).unwrap_or_default();
    if let Err(e) = ctx.api.create(&EVENTS, ns, &body).await {
        tracing::debug!(error = %e, reason, "recording an event failed");
    }
}
