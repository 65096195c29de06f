//! What the runner writes, as Karmada's scheduler writes it: the result (`spec.clusters` and the
//! applied-placement annotation, one merge patch), the schedule status (`Scheduled` condition,
//! `schedulerObservedGeneration`, `lastScheduledTime`, `schedulerObservingAffinityName`, a merge
//! patch on `/status`) and Events on the binding and on its resource template.
//!
//! Every patch carries the `metadata.resourceVersion` it was computed from, so the API server
//! rejects it with 409 Conflict when the binding changed meanwhile: the result is never written
//! over a spec it was not computed for, and the condition list (which a merge patch replaces
//! whole) never drops a condition another controller wrote.

use std::sync::Arc;

use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding, ResourceBindingStatus, TargetCluster};
use flotilla_runtime::{Events, set_condition};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::decision::APPLIED_PLACEMENT_ANNOTATION;
use crate::binding::{BindingKind, BindingView};

/// Type of the binding condition the scheduler owns.
pub const SCHEDULED_CONDITION: &str = "Scheduled";
/// Message of `Scheduled=True`.
pub const SCHEDULED_MESSAGE: &str = "Binding has been scheduled successfully.";
/// Event reason of a successful pass (Karmada's `pkg/events`).
pub const REASON_SCHEDULE_SUCCEED: &str = "ScheduleBindingSucceed";
/// Event reason of a failed pass.
pub const REASON_SCHEDULE_FAILED: &str = "ScheduleBindingFailed";
/// An Event note's limit in `events.k8s.io/v1`.
const NOTE_LIMIT: usize = 1024;

/// A binding of either kind, shared from a reflector store or fresh from the API server.
#[derive(Clone, Debug)]
pub enum AnyBinding {
    Namespaced(Arc<ResourceBinding>),
    Cluster(Arc<ClusterResourceBinding>),
}

impl AnyBinding {
    pub fn view(&self) -> BindingView<'_> {
        match self {
            AnyBinding::Namespaced(rb) => BindingView::from(&**rb),
            AnyBinding::Cluster(crb) => BindingView::from(&**crb),
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            AnyBinding::Namespaced(rb) => &rb.metadata,
            AnyBinding::Cluster(crb) => &crb.metadata,
        }
    }

    /// The applied-placement annotation.
    pub fn applied_placement(&self) -> Option<&str> {
        self.metadata().annotations.as_ref()?.get(APPLIED_PLACEMENT_ANNOTATION).map(String::as_str)
    }

    fn reference(&self) -> ObjectReference {
        let view = self.view();
        ObjectReference {
            api_version: Some("work.karmada.io/v1alpha2".into()),
            kind: Some(view.kind.as_str().into()),
            namespace: view.namespace.map(str::to_string),
            name: Some(view.name.to_string()),
            uid: Some(view.uid.to_string()).filter(|u| !u.is_empty()),
            resource_version: self.metadata().resource_version.clone(),
            ..Default::default()
        }
    }

    fn template_reference(&self) -> ObjectReference {
        let resource = &self.view().spec.resource;
        ObjectReference {
            api_version: Some(resource.api_version.clone()),
            kind: Some(resource.kind.clone()),
            namespace: resource.namespace.clone().filter(|n| !n.is_empty()),
            name: Some(resource.name.clone()),
            uid: resource.uid.clone().filter(|u| !u.is_empty()),
            ..Default::default()
        }
    }

    /// Merge-patches the binding (or its status) and returns it as the server stored it.
    async fn patch(&self, client: &kube::Client, patch: &Value, status: bool) -> Result<AnyBinding, kube::Error> {
        let params = PatchParams::default();
        let patch = Patch::Merge(patch);
        let name = self.view().name;
        Ok(match self {
            AnyBinding::Namespaced(rb) => {
                let api: Api<ResourceBinding> = Api::namespaced(client.clone(), rb.metadata.namespace.as_deref().unwrap_or_default());
                let stored = if status { api.patch_status(name, &params, &patch).await } else { api.patch(name, &params, &patch).await };
                AnyBinding::Namespaced(Arc::new(stored?))
            }
            AnyBinding::Cluster(_) => {
                let api: Api<ClusterResourceBinding> = Api::all(client.clone());
                let stored = if status { api.patch_status(name, &params, &patch).await } else { api.patch(name, &params, &patch).await };
                AnyBinding::Cluster(Arc::new(stored?))
            }
        })
    }

    /// The binding as the API server has it now.
    pub async fn refetch(&self, client: &kube::Client) -> Result<AnyBinding, kube::Error> {
        let name = self.view().name;
        Ok(match self {
            AnyBinding::Namespaced(rb) => {
                let api: Api<ResourceBinding> = Api::namespaced(client.clone(), rb.metadata.namespace.as_deref().unwrap_or_default());
                AnyBinding::Namespaced(Arc::new(api.get(name).await?))
            }
            AnyBinding::Cluster(_) => AnyBinding::Cluster(Arc::new(Api::<ClusterResourceBinding>::all(client.clone()).get(name).await?)),
        })
    }
}

/// Adds the `metadata.resourceVersion` precondition of `binding` to a merge patch.
fn with_precondition(binding: &AnyBinding, mut patch: Value) -> Value {
    if let (Some(rv), Some(object)) = (binding.metadata().resource_version.as_deref(), patch.as_object_mut()) {
        let metadata = object.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("resourceVersion".into(), json!(rv));
        }
    }
    patch
}

/// The merge patch writing a result, or `None` when nothing changes. An empty result removes
/// `spec.clusters`.
pub fn result_patch(binding: &AnyBinding, placement_json: &str, clusters: &[TargetCluster]) -> Option<Value> {
    let mut patch = serde_json::Map::new();
    if binding.applied_placement() != Some(placement_json) {
        patch.insert("metadata".into(), json!({ "annotations": { APPLIED_PLACEMENT_ANNOTATION: placement_json } }));
    }
    let current = binding.view().spec.clusters.as_deref().unwrap_or_default();
    if current != clusters {
        let value = if clusters.is_empty() { Value::Null } else { serde_json::to_value(clusters).ok()? };
        patch.insert("spec".into(), json!({ "clusters": value }));
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// What a pass leaves in the binding's status.
#[derive(Clone, Debug)]
pub struct StatusUpdate {
    /// Reason and message of the `Scheduled` condition; `success` sets it True.
    pub reason: &'static str,
    pub message: String,
    pub success: bool,
    /// The term that fitted, when scheduling with `clusterAffinities`.
    pub affinity_name: Option<String>,
}

/// The merge patch on `/status` writing `update` onto a binding at `generation` with `current`
/// status, or `None` when nothing changes. Success records the generation and
/// `lastScheduledTime = now`; a failure leaves both (Karmada postpones the observed generation
/// until a pass succeeds). The condition follows `meta.SetStatusCondition`: its transition time
/// moves only when its status does.
pub fn status_patch(current: Option<&ResourceBindingStatus>, generation: Option<i64>, update: &StatusUpdate, now: Timestamp) -> Option<Value> {
    let empty = ResourceBindingStatus::default();
    let current = current.unwrap_or(&empty);
    let mut conditions = current.conditions.clone().unwrap_or_default();
    set_condition(
        &mut conditions,
        Condition {
            type_: SCHEDULED_CONDITION.into(),
            status: if update.success { "True" } else { "False" }.into(),
            reason: update.reason.into(),
            message: update.message.clone(),
            observed_generation: None,
            last_transition_time: Time(now),
        },
    );
    let mut status = serde_json::Map::new();
    if current.conditions.as_ref() != Some(&conditions) {
        status.insert("conditions".into(), serde_json::to_value(&conditions).ok()?);
    }
    if let Some(name) = &update.affinity_name
        && current.scheduler_observing_affinity_name.as_ref() != Some(name)
    {
        status.insert("schedulerObservingAffinityName".into(), json!(name));
    }
    if update.success {
        if let Some(generation) = generation
            && current.scheduler_observed_generation != Some(generation)
        {
            status.insert("schedulerObservedGeneration".into(), json!(generation));
        }
        status.insert("lastScheduledTime".into(), serde_json::to_value(Time(now)).ok()?);
    }
    (!status.is_empty()).then(|| json!({ "status": status }))
}

/// `targetClustersToString`: `member1:2, member2:1`.
pub fn clusters_text(clusters: &[TargetCluster]) -> String {
    clusters.iter().map(|t| format!("{}:{}", t.name, t.replicas.unwrap_or(0))).collect::<Vec<_>>().join(", ")
}

/// The success event's message (upstream writes `Result:` for ResourceBindings and `Result`
/// for ClusterResourceBindings).
pub fn success_message(kind: BindingKind, clusters: &[TargetCluster]) -> String {
    let label = match kind {
        BindingKind::ResourceBinding => "Result:",
        BindingKind::ClusterResourceBinding => "Result",
    };
    format!("{SCHEDULED_MESSAGE} {label} {{{}}}", clusters_text(clusters))
}

/// How many times a status write is recomputed on a fresh binding after a conflict.
const STATUS_ATTEMPTS: usize = 5;

/// Writes through one client and records Events as the scheduler.
pub struct Writer {
    client: kube::Client,
    events: Events,
}

impl Writer {
    pub fn new(client: kube::Client, scheduler_name: &str) -> Writer {
        Writer { events: Events::new(client.clone(), scheduler_name), client }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Writes a result computed from `binding`; a 409 means the binding changed since.
    /// Returns the stored binding (or `binding` when nothing needed writing).
    pub async fn write_result(&self, binding: &AnyBinding, placement_json: &str, clusters: &[TargetCluster]) -> Result<AnyBinding, kube::Error> {
        match result_patch(binding, placement_json, clusters) {
            None => Ok(binding.clone()),
            Some(patch) => binding.patch(&self.client, &with_precondition(binding, patch), false).await,
        }
    }

    /// Writes `update` into the status of `binding`, recomputing on the binding as stored when
    /// another writer got there first (`retry.RetryOnConflict`).
    pub async fn write_status(&self, binding: &AnyBinding, update: &StatusUpdate) -> Result<(), kube::Error> {
        let mut binding = binding.clone();
        for attempt in 1..=STATUS_ATTEMPTS {
            let generation = binding.metadata().generation;
            let Some(patch) = status_patch(binding.view().status, generation, update, Timestamp::now()) else {
                return Ok(());
            };
            match binding.patch(&self.client, &with_precondition(&binding, patch), true).await {
                Ok(_) => return Ok(()),
                Err(error) if is_conflict(&error) && attempt < STATUS_ATTEMPTS => binding = binding.refetch(&self.client).await?,
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Records the pass as an Event on the binding and on its resource template, as upstream
    /// does. Failures are logged, never fatal: an Event is advice.
    pub async fn event(&self, binding: &AnyBinding, success: bool, message: &str) {
        let reason = if success { REASON_SCHEDULE_SUCCEED } else { REASON_SCHEDULE_FAILED };
        for reference in [binding.reference(), binding.template_reference()] {
            self.events.publish_ref(&reference, !success, reason, "Schedule", truncate(message, NOTE_LIMIT)).await;
        }
    }
}

/// Whether the API server refused a write because the object changed (409).
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Whether the object is gone (404).
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use flotilla_api::federation::karmada::work::ResourceBindingSpec;

    fn target(name: &str, replicas: i32) -> TargetCluster {
        TargetCluster { name: name.into(), replicas: Some(replicas), start_ordinal: None }
    }

    #[test]
    fn result_patch_writes_only_what_changed() {
        let mut rb = ResourceBinding::new("b", ResourceBindingSpec::default());
        let fresh = AnyBinding::Namespaced(Arc::new(rb.clone()));
        assert_eq!(
            result_patch(&fresh, "{}", &[target("m1", 2)]),
            Some(json!({
                "metadata": { "annotations": { "policy.karmada.io/applied-placement": "{}" } },
                "spec": { "clusters": [{ "name": "m1", "replicas": 2 }] }
            }))
        );
        rb.metadata.annotations = Some(BTreeMap::from([(APPLIED_PLACEMENT_ANNOTATION.to_string(), "{}".to_string())]));
        rb.metadata.resource_version = Some("7".into());
        rb.spec.clusters = Some(vec![target("m1", 2)]);
        let done = AnyBinding::Namespaced(Arc::new(rb));
        assert_eq!(result_patch(&done, "{}", &[target("m1", 2)]), None);
        let cleanup = result_patch(&done, "{}", &[]).unwrap();
        assert_eq!(cleanup, json!({ "spec": { "clusters": null } }));
        assert_eq!(with_precondition(&done, cleanup), json!({ "metadata": { "resourceVersion": "7" }, "spec": { "clusters": null } }));
    }

    #[test]
    fn status_patch_follows_set_status_condition() {
        let t0: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2025-01-01T00:01:00Z".parse().unwrap();
        let failed =
            StatusUpdate { reason: "NoClusterFit", message: "0/1 clusters are available: no cluster exists.".into(), success: false, affinity_name: None };
        let patch = status_patch(None, Some(3), &failed, t0).unwrap();
        assert_eq!(
            patch,
            json!({ "status": { "conditions": [{
                "type": "Scheduled", "status": "False", "reason": "NoClusterFit",
                "message": "0/1 clusters are available: no cluster exists.",
                "lastTransitionTime": "2025-01-01T00:00:00Z"
            }] } })
        );
        let status: ResourceBindingStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(status_patch(Some(&status), Some(3), &failed, t1), None, "same condition: nothing to write");

        let ok = StatusUpdate { reason: "Success", message: SCHEDULED_MESSAGE.into(), success: true, affinity_name: Some("primary".into()) };
        let patch = status_patch(Some(&status), Some(3), &ok, t1).unwrap();
        assert_eq!(patch["status"]["conditions"][0]["status"], "True");
        assert_eq!(patch["status"]["conditions"][0]["lastTransitionTime"], "2025-01-01T00:01:00Z");
        assert_eq!(patch["status"]["schedulerObservedGeneration"], 3);
        assert_eq!(patch["status"]["schedulerObservingAffinityName"], "primary");
        assert_eq!(patch["status"]["lastScheduledTime"], "2025-01-01T00:01:00Z");
    }

    #[test]
    fn event_messages() {
        let clusters = [target("member1", 2), target("member2", 1)];
        assert_eq!(success_message(BindingKind::ResourceBinding, &clusters), "Binding has been scheduled successfully. Result: {member1:2, member2:1}");
        assert_eq!(success_message(BindingKind::ClusterResourceBinding, &clusters), "Binding has been scheduled successfully. Result {member1:2, member2:1}");
        assert_eq!(truncate("ééé", 3), "é");
    }
}
