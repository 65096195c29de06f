//! ResourceBindings and ClusterResourceBindings as one: the watched stores of both scopes, a
//! binding by key, a merge patch and an Event on either — for the controllers that treat both
//! scopes alike (taint manager, application failover, graceful eviction) — and Karmada's
//! `GracefulEvictCluster` and `BuildPreservedLabelState`.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_api::federation::karmada::policy::StatePreservation;
use flotilla_api::federation::karmada::work::{
    AggregatedStatusItem, BindingKey, ClusterResourceBinding, GracefulEvictionTask, ResourceBinding, ResourceBindingSpec,
};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

use crate::binding::Binding;
use flotilla_runtime::Events;
use flotilla_runtime::WorkQueue;

#[derive(Clone)]
pub struct Bindings {
    rbs: Store<ResourceBinding>,
    crbs: Store<ClusterResourceBinding>,
}

impl Bindings {
    /// Watch both kinds; a binding applied whose spec `wants` is queued. The future runs until
    /// either watch ends.
    pub fn watch<F>(
        informers: &flotilla_runtime::Informers,
        wants: F,
        queue: Arc<WorkQueue<BindingKey>>,
    ) -> (Bindings, impl Future<Output = ()> + Send + use<F>)
    where
        F: Fn(&ResourceBindingSpec) -> bool + Clone + Send + Sync + 'static,
    {
        let (q, w) = (queue.clone(), wants.clone());
        let (rbs, rb_task) = informers.watch::<ResourceBinding>(move |b: &ResourceBinding, deleted| {
            if !deleted && w(&b.spec) {
                q.add(BindingKey { namespace: b.metadata.namespace.clone(), name: b.name_any() });
            }
        });
        let (crbs, crb_task) = informers.watch::<ClusterResourceBinding>(move |b: &ClusterResourceBinding, deleted| {
            if !deleted && wants(&b.spec.0) {
                queue.add(BindingKey { namespace: None, name: b.name_any() });
            }
        });
        let run = async move {
            tokio::select! {
                _ = rb_task => tracing::warn!("binding watch ended"),
                _ = crb_task => tracing::warn!("cluster binding watch ended"),
            }
        };
        (Bindings { rbs, crbs }, run)
    }

    pub fn get(&self, key: &BindingKey) -> Option<Binding> {
        match &key.namespace {
            Some(ns) => self.rbs.get(&ObjectRef::new(&key.name).within(ns)).map(|b| Binding::of_rb(&b)),
            None => self.crbs.get(&ObjectRef::new(&key.name)).map(|b| Binding::of_crb(&b)),
        }
    }

    /// The keys of the bindings whose spec satisfies `f`.
    pub fn keys_where(&self, f: impl Fn(&ResourceBindingSpec) -> bool) -> Vec<BindingKey> {
        let rbs = self.rbs.state().into_iter().filter(|b| f(&b.spec)).map(|b| BindingKey { namespace: b.metadata.namespace.clone(), name: b.name_any() });
        let crbs = self.crbs.state().into_iter().filter(|b| f(&b.spec.0)).map(|b| BindingKey { namespace: None, name: b.name_any() });
        rbs.chain(crbs).collect()
    }

    /// A JSON merge patch of the binding.
    pub async fn patch(client: &Client, key: &BindingKey, patch: &serde_json::Value) -> Result<(), kube::Error> {
        match &key.namespace {
            Some(ns) => {
                Api::<ResourceBinding>::namespaced(client.clone(), ns).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ())
            }
            None => Api::<ClusterResourceBinding>::all(client.clone()).patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ()),
        }
    }

    /// An Event on the binding, when it is still there.
    pub async fn publish(&self, events: &Events, key: &BindingKey, warning: bool, reason: &str, action: &str, note: String) {
        match &key.namespace {
            Some(ns) => {
                if let Some(rb) = self.rbs.get(&ObjectRef::new(&key.name).within(ns)) {
                    events.publish(&*rb, warning, reason, action, note).await;
                }
            }
            None => {
                if let Some(crb) = self.crbs.get(&ObjectRef::new(&key.name)) {
                    events.publish(&*crb, warning, reason, action, note).await;
                }
            }
        }
    }

    /// Karmada's `EmitClusterEvictionEvent`: `EvictWorkloadFromClusterSucceed` on the binding and
    /// on its template, when the binding is still there.
    pub async fn publish_eviction(&self, events: &Events, key: &BindingKey, cluster: &str) {
        let Some(b) = self.get(key) else { return };
        let note = format!("Evict from cluster {cluster} succeed.");
        self.publish(events, key, false, REASON_EVICT_WORKLOAD_FROM_CLUSTER_SUCCEED, "Evict", note.clone()).await;
        let r = &b.spec.resource;
        let template = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(r.api_version.clone()),
            kind: Some(r.kind.clone()),
            namespace: r.namespace.clone().filter(|ns| !ns.is_empty()),
            name: Some(r.name.clone()),
            uid: r.uid.clone(),
            resource_version: None,
            field_path: None,
        };
        events.publish_ref(&template, false, REASON_EVICT_WORKLOAD_FROM_CLUSTER_SUCCEED, "Evict", note).await;
    }
}

/// The Event reason of a workload evicted from a cluster (Karmada's).
pub const REASON_EVICT_WORKLOAD_FROM_CLUSTER_SUCCEED: &str = "EvictWorkloadFromClusterSucceed";

/// Karmada's `GracefulEvictCluster`: `task.from_cluster` leaves `spec.clusters` and `task` (with
/// the replicas the cluster had) joins `spec.gracefulEvictionTasks` — unless a task for that
/// cluster is already there.
pub fn graceful_evict_cluster(spec: &ResourceBindingSpec, mut task: GracefulEvictionTask) -> ResourceBindingSpec {
    let mut next = spec.clone();
    let clusters = next.clusters.take().unwrap_or_default();
    task.replicas = clusters.iter().find(|c| c.name == task.from_cluster).and_then(|c| c.replicas);
    next.clusters = Some(clusters.into_iter().filter(|c| c.name != task.from_cluster).collect());
    let tasks = next.graceful_eviction_tasks.get_or_insert_default();
    if !tasks.iter().any(|t| t.from_cluster == task.from_cluster) {
        tasks.push(task);
    }
    next
}

/// Karmada's `BuildPreservedLabelState` for a failover away from `cluster`: each rule's
/// `jsonPath` (a kubectl-style template, relative to the object's status) read from the status
/// collected from that cluster, under the rule's `aliasLabelName`. `None` when there are no
/// rules; an error when that cluster's status is not collected yet or a path finds nothing, so
/// the eviction waits (as Karmada's does) rather than moving without the state.
pub fn preserved_label_state(
    preservation: Option<&StatePreservation>,
    observed: &[AggregatedStatusItem],
    cluster: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let Some(rules) = preservation.map(|p| &p.rules).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let Some(status) = observed.iter().find(|i| i.cluster_name == cluster).and_then(|i| i.status.as_ref()) else {
        return Err(format!("the application status has not yet been collected from Cluster({cluster})"));
    };
    let mut state = BTreeMap::new();
    for rule in rules {
        let value = flotilla_api::jsonpath::template(status, &rule.json_path).map_err(|e| format!("failed to execute jsonpath {:?}: {e}", rule.json_path))?;
        state.insert(rule.alias_label_name.clone(), value);
    }
    Ok(Some(state))
}
