//! The runner's triggers (Karmada's `event_handler.go`): which changes of ResourceBindings,
//! ClusterResourceBindings and Clusters, as the shared informers announce them, put which
//! bindings into the queue.
//!
//! - A binding is queued when it is added, and on update only when `metadata.generation`
//!   changed (status-only writes, the scheduler's own included, are ignored) — if it passes the
//!   scheduler's filter ([`is_ours`]).
//! - A cluster that is added, deleted, starts deleting, or changes labels or spec queues every
//!   binding of this scheduler that has not observed its generation yet, targets the cluster,
//!   or whose affinity in force matches the cluster before or after ([`concerns`]). Karmada
//!   reacts to cluster updates only; a Karmada cluster always arrives tainted `not-ready` and its
//!   first Ready bumps its generation, so reacting to the add reaches the same state sooner.
//!   Of status changes only the served APIs (`apiEnablements`) count; resources and Ready
//!   queue nothing (readiness reaches the spec as taints).
//!
//! The informers announce the objects of a (re)list once the whole list is cached, so a worker
//! never looks a queued binding up in a cache that does not hold it yet.

use std::fmt::Debug;
use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding};
use serde::de::DeserializeOwned;

use super::decision::{cluster_changed, concerns, is_ours};
use super::{BindingKey, Shared};
use crate::binding::BindingView;
use crate::snapshot::cluster_name;

/// A binding kind the runner watches.
pub(super) trait BindingObject: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    fn view(&self) -> BindingView<'_>;
}

impl BindingObject for ResourceBinding {
    fn view(&self) -> BindingView<'_> {
        BindingView::from(self)
    }
}

impl BindingObject for ClusterResourceBinding {
    fn view(&self) -> BindingView<'_> {
        BindingView::from(self)
    }
}

/// The queue key of a binding.
pub(super) fn key_of(view: &BindingView<'_>) -> BindingKey {
    BindingKey { kind: view.kind, namespace: view.namespace.map(str::to_string), name: view.name.to_string() }
}

/// `spec.schedulePriority.priority` (0 when unset).
pub(super) fn priority_of(view: &BindingView<'_>) -> i32 {
    view.spec.schedule_priority.as_ref().and_then(|p| p.priority).unwrap_or(0)
}

/// Whether a binding event queues the binding: it is this scheduler's, and it is new or its
/// generation moved.
fn binding_needs_queueing<K: BindingObject>(old: Option<&K>, new: &K, scheduler_name: &str) -> bool {
    let meta = new.meta();
    is_ours(meta.labels.as_ref(), new.view().spec, scheduler_name) && old.is_none_or(|old| old.meta().generation != meta.generation)
}

/// The trigger of one binding kind: a binding of this scheduler that is new or whose
/// generation moved is queued (`event_name` counts it in the incoming metric).
pub(super) fn on_binding<K: BindingObject>(shared: Arc<Shared>, event_name: &'static str) -> impl Fn(Option<&K>, &K, bool) -> Option<BindingKey> + Send + Sync {
    move |old, new, deleted| {
        if deleted || !binding_needs_queueing(old, new, &shared.config.scheduler_name) {
            return None;
        }
        shared.metrics.incoming(event_name);
        Some(key_of(&new.view()))
    }
}

/// The trigger of Clusters: a cluster added, deleted or changed in what placement reads queues
/// every binding of this scheduler the change concerns.
pub(super) fn on_cluster(shared: Arc<Shared>) -> impl Fn(Option<&Cluster>, &Cluster, bool) -> Vec<BindingKey> + Send + Sync {
    move |old, new, deleted| {
        if deleted {
            return concerned(&shared, new, new);
        }
        match old {
            Some(old) if !cluster_changed(old, new) => Vec::new(),
            Some(old) => concerned(&shared, old, new),
            None => concerned(&shared, new, new),
        }
    }
}

/// Every binding of this scheduler that the change of a cluster from `old` to `new` concerns.
fn concerned(shared: &Shared, old: &Cluster, new: &Cluster) -> Vec<BindingKey> {
    let name = cluster_name(new);
    let rbs = shared.bindings.state();
    let crbs = shared.cluster_bindings.state();
    let views = rbs.iter().map(|rb| (rb.view(), &rb.metadata)).chain(crbs.iter().map(|crb| (crb.view(), &crb.metadata)));
    let mut keys = Vec::new();
    for (view, meta) in views {
        if !is_ours(meta.labels.as_ref(), view.spec, &shared.config.scheduler_name) {
            continue;
        }
        let unobserved = view.status.and_then(|s| s.scheduler_observed_generation) != meta.generation;
        if unobserved || view.targets(name) || concerns(&view, old, new) {
            shared.metrics.incoming("cluster_changed");
            keys.push(key_of(&view));
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::policy::PROPAGATION_POLICY_PERMANENT_ID_LABEL;
    use flotilla_api::federation::karmada::work::{ResourceBindingSpec, ResourceBindingStatus};

    fn rb(generation: i64, observed: Option<i64>) -> ResourceBinding {
        let mut rb = ResourceBinding::new("b", ResourceBindingSpec::default());
        rb.metadata.labels = Some([(PROPAGATION_POLICY_PERMANENT_ID_LABEL.to_string(), "id".to_string())].into());
        rb.metadata.generation = Some(generation);
        rb.status = observed.map(|g| ResourceBindingStatus { scheduler_observed_generation: Some(g), ..Default::default() });
        rb
    }

    #[test]
    fn bindings_are_queued_when_new_or_their_generation_moves() {
        let ours = "default-scheduler";
        assert!(binding_needs_queueing(None, &rb(1, None), ours), "added");
        assert!(binding_needs_queueing(Some(&rb(1, None)), &rb(2, None), ours), "spec changed");
        assert!(!binding_needs_queueing(Some(&rb(2, None)), &rb(2, Some(2)), ours), "status only");
        assert!(!binding_needs_queueing(None, &rb(1, None), "other-scheduler"), "not ours");
        let mut unclaimed = rb(1, None);
        unclaimed.metadata.labels = None;
        assert!(!binding_needs_queueing(None, &unclaimed, ours), "claimed by no policy");
    }
}
