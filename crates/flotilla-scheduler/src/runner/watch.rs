//! The runner's event handlers (Karmada's `event_handler.go`): reflectors over
//! ResourceBindings, ClusterResourceBindings and Clusters, and which of their events put which
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
//! During a (re)list, keys are held back until the list is complete, so a worker never looks a
//! queued binding up in a store that does not hold it yet.

use std::fmt::Debug;
use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding};
use futures::StreamExt;
use kube::Api;
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
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

/// Mirrors `api` into `writer`'s store. `observe` sees every applied (`deleted` false) or
/// deleted object next to the store's copy from before the event and may return work for it;
/// `release` gets that work once the store reflects the event — during a (re)list, once the
/// whole list is in.
async fn mirror<K, T>(
    api: Api<K>,
    mut writer: Writer<K>,
    what: &'static str,
    mut observe: impl FnMut(Option<Arc<K>>, &K, bool) -> Option<T>,
    mut release: impl FnMut(T),
) where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let reader = writer.as_reader();
    let mut held: Vec<T> = Vec::new();
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, what, "watching failed; retrying");
                continue;
            }
        };
        let seen = match &event {
            watcher::Event::Init => {
                held.clear();
                None
            }
            watcher::Event::InitApply(new) | watcher::Event::Apply(new) => Some((new, false)),
            watcher::Event::Delete(gone) => Some((gone, true)),
            watcher::Event::InitDone => None,
        };
        if let Some((object, deleted)) = seen {
            held.extend(observe(reader.get(&ObjectRef::from_obj(object)), object, deleted));
        }
        writer.apply_watcher_event(&event);
        if !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
            held.drain(..).for_each(&mut release);
        }
    }
}

/// Mirrors one binding kind into `writer`'s store and queues bindings as their events ask.
pub(super) async fn watch_bindings<K: BindingObject>(api: Api<K>, writer: Writer<K>, shared: Arc<Shared>, event_name: &'static str) {
    let observe = |old: Option<Arc<K>>, new: &K, deleted: bool| {
        let view = new.view();
        if deleted {
            shared.queue.forget(&key_of(&view));
            return None;
        }
        binding_needs_queueing(old.as_deref(), new, &shared.config.scheduler_name).then(|| (key_of(&view), priority_of(&view)))
    };
    let release = |(key, priority)| {
        shared.metrics.incoming(event_name);
        shared.queue.add(key, priority);
    };
    mirror(api, writer, event_name, observe, release).await;
}

/// A cluster event the bindings may care about: the cluster before (none when added) and after.
struct ClusterChange {
    old: Option<Arc<Cluster>>,
    new: Arc<Cluster>,
}

/// Mirrors Clusters into `writer`'s store and queues the bindings a cluster change concerns.
pub(super) async fn watch_clusters(api: Api<Cluster>, writer: Writer<Cluster>, shared: Arc<Shared>) {
    let observe = |old: Option<Arc<Cluster>>, new: &Cluster, deleted: bool| {
        let new = Arc::new(new.clone());
        if deleted {
            return Some(ClusterChange { old: Some(new.clone()), new });
        }
        old.as_deref().is_none_or(|old| cluster_changed(old, &new)).then_some(ClusterChange { old, new })
    };
    mirror(api, writer, "cluster", observe, |change| queue_concerned(&shared, &change)).await;
}

/// Queues every binding of this scheduler that `change` concerns.
fn queue_concerned(shared: &Shared, change: &ClusterChange) {
    let name = cluster_name(&change.new);
    let old = change.old.as_deref().unwrap_or(&change.new);
    let rbs = shared.bindings.state();
    let crbs = shared.cluster_bindings.state();
    let views = rbs.iter().map(|rb| (rb.view(), &rb.metadata)).chain(crbs.iter().map(|crb| (crb.view(), &crb.metadata)));
    for (view, meta) in views {
        if !is_ours(meta.labels.as_ref(), view.spec, &shared.config.scheduler_name) {
            continue;
        }
        let unobserved = view.status.and_then(|s| s.scheduler_observed_generation) != meta.generation;
        if unobserved || view.targets(name) || concerns(&view, old, &change.new) {
            shared.metrics.incoming("cluster_changed");
            shared.queue.add(key_of(&view), priority_of(&view));
        }
    }
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
