//! Karmada's MultiClusterService `CrossCluster` path (`pkg/controllers/multiclusterservice`):
//! consumers reach the same-named Service's endpoints in the provider clusters under the
//! Service's own name.
//!
//! - **`multiclusterservice`** ([`run_services`]): for a `CrossCluster` MultiClusterService it
//!   puts a suspended marker Work holding the MultiClusterService in each Ready provider's
//!   execution space (the service-export controller then reports that provider's slices of the
//!   Service, [`super::export`]), removes the markers of clusters no longer providers, claims the
//!   control plane's Service (`resourcetemplate.karmada.io/claimed-by: MultiClusterService`, so
//!   that no policy takes it) and binds it to providers ∪ consumers in the ResourceBinding
//!   `<svc>-service` (conflict resolution `Overwrite`), with the `ServiceApplied` condition and
//!   Karmada's Events. Empty provider or consumer lists mean every cluster. Deleted, it releases
//!   the Service and the binding (the binding stays, as after a deleted policy, so the member
//!   Services stay) and removes its markers.
//! - **`endpointsliceDispatch`** ([`run_dispatch`]): each collected slice's Work is copied to
//!   every Ready consumer except the provider it came from, as the slice `<provider>-<slice>`
//!   labelled with the Service's own name and managed by `endpointslice-dispatch-controller.karmada.io`,
//!   in a Work of the same name annotated `endpointslice.karmada.io/provision-cluster`; copies
//!   in clusters no longer consumers go, and when the collected Work goes (or leaves this path)
//!   so do its copies, before its finalizer is released. The `EndpointSliceDispatched`
//!   condition and Events tell how it went.
//!
//! As in Karmada, a consumer that is not Ready keeps the copies it has (an outage is worse than
//! stale endpoints); the DNS server and the gateway are what withdraw a cluster.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready, serves_kind};
use flotilla_api::federation::karmada::names::{binding_name, cluster_of_execution_space, execution_space, work_name};
use flotilla_api::federation::karmada::networking::{
    BINDING_MANAGED_BY_LABEL, CLAIMED_BY_LABEL, DISPATCH_FINALIZER, ENDPOINT_SLICE_DISPATCHED, MCS_FINALIZER, MCS_NAME_LABEL, MCS_NAMESPACE_LABEL,
    MCS_PERMANENT_ID_LABEL, MULTI_CLUSTER_SERVICE, MultiClusterService, PROVISION_CLUSTER_ANNOTATION, SERVICE_APPLIED,
};
use flotilla_api::federation::karmada::policy::{
    CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, DEFAULT_SCHEDULER_NAME, PROPAGATION_POLICY_NAME_ANNOTATION,
    PROPAGATION_POLICY_NAMESPACE_ANNOTATION, PROPAGATION_POLICY_PERMANENT_ID_LABEL,
};
use flotilla_api::federation::karmada::work::{BINDING_FINALIZER, ResourceBinding, Work};
use flotilla_api::federation::mcs::{DISPATCHED_MANAGED_BY, SERVICE_NAME, SLICE_MANAGED_BY, is_report};
use flotilla_runtime::{Events, Next};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::export::{is_mcs_marker, manifest_is_current};

pub const SERVICE_NAME_CONTROLLER: &str = "multiclusterservice-controller";
pub const DISPATCH_NAME: &str = "endpointslice-dispatch-controller";

/// Karmada's Event reasons on a MultiClusterService.
pub const EVENT_SYNC_SERVICE_SUCCEED: &str = "SyncServiceSucceed";
pub const EVENT_SYNC_SERVICE_FAILED: &str = "SyncServiceFailed";
pub const EVENT_CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
pub const EVENT_API_INCOMPATIBLE: &str = "APIIncompatible";
pub const EVENT_DISPATCH_SUCCEED: &str = "DispatchEndpointSliceSucceed";
pub const EVENT_DISPATCH_FAILED: &str = "DispatchEndpointSliceFailed";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step} {what} {namespace}/{name}: {source}")]
    Api { step: &'static str, what: &'static str, namespace: String, name: String, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

fn api_err(step: &'static str, what: &'static str, namespace: &str, name: &str) -> impl FnOnce(kube::Error) -> Error {
    let (namespace, name) = (namespace.to_string(), name.to_string());
    move |source| Error::Api { step, what, namespace, name, source }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The clusters a list names, or every cluster when it names none (Karmada's
/// `GetProviderClusters`/`GetConsumerClusters`: named clusters count even when missing).
fn named_or_all(named: Option<&[flotilla_api::federation::karmada::networking::ClusterSelector]>, clusters: &Store<Cluster>) -> BTreeSet<String> {
    match named {
        Some(n) if !n.is_empty() => n.iter().map(|c| c.name.clone()).collect(),
        _ => clusters.state().iter().map(|c| c.name_any()).collect(),
    }
}

/// Karmada's `APIEnablement(...) == APIDisabled` for EndpointSlices: only a cluster whose API
/// list is complete (`CompleteAPIEnablements` True) and lacks `discovery.k8s.io/v1`
/// EndpointSlice is known not to serve them.
fn lacks_endpoint_slices(c: &Cluster) -> bool {
    let conditions = c.status.as_ref().and_then(|s| s.conditions.as_deref());
    let complete = flotilla_runtime::condition_status(conditions, "CompleteAPIEnablements").is_some_and(|c| c.status == "True");
    complete && !serves_kind(c, "discovery.k8s.io/v1", "EndpointSlice")
}

fn providers(mcs: &MultiClusterService, clusters: &Store<Cluster>) -> BTreeSet<String> {
    named_or_all(mcs.spec.provider_clusters.as_deref(), clusters)
}

fn consumers(mcs: &MultiClusterService, clusters: &Store<Cluster>) -> BTreeSet<String> {
    named_or_all(mcs.spec.consumer_clusters.as_deref(), clusters)
}

/// The marker Work telling the service-export controller to report `cluster`'s slices.
fn marker_work(mcs: &MultiClusterService, cluster: &str, id: &str) -> Value {
    let (ns, name) = (mcs.namespace().unwrap_or_default(), mcs.name_any());
    let manifest = json!({
        "apiVersion": "networking.karmada.io/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": name, "namespace": ns, "labels": {MCS_PERMANENT_ID_LABEL: id}},
        "spec": mcs.spec,
    });
    json!({
        "apiVersion": "work.karmada.io/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": work_name("MultiClusterService", &name, Some(&ns)),
            "namespace": execution_space(cluster),
            "labels": {MCS_PERMANENT_ID_LABEL: id, MCS_NAMESPACE_LABEL: ns, MCS_NAME_LABEL: name},
        },
        "spec": {"suspendDispatching": true, "workload": {"manifests": [manifest]}},
    })
}

/// The binding that carries the Service to providers ∪ consumers.
fn service_binding(svc: &Service, mcs: &MultiClusterService, id: &str, clusters: &BTreeSet<String>) -> Value {
    let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
    json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {
            "name": binding_name("Service", &name),
            "namespace": ns,
            "labels": {BINDING_MANAGED_BY_LABEL: MULTI_CLUSTER_SERVICE, MCS_PERMANENT_ID_LABEL: id},
            "annotations": {MCS_NAME_LABEL: mcs.name_any(), MCS_NAMESPACE_LABEL: ns},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": svc.uid().unwrap_or_default()}],
            "finalizers": [BINDING_FINALIZER],
        },
        "spec": {
            "resource": {"apiVersion": "v1", "kind": "Service", "namespace": ns, "name": name, "uid": svc.uid(), "resourceVersion": svc.resource_version()},
            "placement": {"clusterAffinity": {"clusterNames": clusters}},
            "schedulerName": DEFAULT_SCHEDULER_NAME,
            "conflictResolution": "Overwrite",
        },
    })
}

/// The merge patch that claims the Service for `mcs` (None when it already is), taking it from
/// any policy.
fn claim_patch(svc: &Service, mcs: &MultiClusterService, id: &str) -> Option<Value> {
    let (l, a) = (svc.labels(), svc.annotations());
    let ns = mcs.namespace().unwrap_or_default();
    let claimed = l.get(CLAIMED_BY_LABEL).map(String::as_str) == Some(MULTI_CLUSTER_SERVICE)
        && l.get(MCS_PERMANENT_ID_LABEL).map(String::as_str) == Some(id)
        && a.get(MCS_NAME_LABEL) == Some(&mcs.name_any())
        && a.get(MCS_NAMESPACE_LABEL) == Some(&ns)
        && ![PROPAGATION_POLICY_PERMANENT_ID_LABEL, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL].iter().any(|k| l.contains_key(*k))
        && ![PROPAGATION_POLICY_NAME_ANNOTATION, PROPAGATION_POLICY_NAMESPACE_ANNOTATION, CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION]
            .iter()
            .any(|k| a.contains_key(*k));
    (!claimed).then(|| {
        json!({"metadata": {
            "labels": {
                CLAIMED_BY_LABEL: MULTI_CLUSTER_SERVICE, MCS_PERMANENT_ID_LABEL: id,
                PROPAGATION_POLICY_PERMANENT_ID_LABEL: null, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL: null,
            },
            "annotations": {
                MCS_NAME_LABEL: mcs.name_any(), MCS_NAMESPACE_LABEL: ns,
                PROPAGATION_POLICY_NAME_ANNOTATION: null, PROPAGATION_POLICY_NAMESPACE_ANNOTATION: null, CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION: null,
            },
        }})
    })
}

struct ServiceContext {
    client: Client,
    events: Events,
    services: Store<MultiClusterService>,
    templates: Store<Service>,
    clusters: Store<Cluster>,
    works: Store<Work>,
}

impl ServiceContext {
    /// The marker Works of the MultiClusterService `ns/name`, in whichever execution space.
    fn markers(&self, ns: &str, name: &str) -> Vec<Arc<Work>> {
        self.works
            .state()
            .into_iter()
            .filter(|w| {
                is_mcs_marker(w)
                    && w.labels().get(MCS_NAMESPACE_LABEL).map(String::as_str) == Some(ns)
                    && w.labels().get(MCS_NAME_LABEL).map(String::as_str) == Some(name)
            })
            .collect()
    }

    async fn delete_markers(&self, ns: &str, name: &str, keep: &BTreeSet<String>) -> Result<(), Error> {
        for w in self.markers(ns, name) {
            let work_ns = w.namespace().unwrap_or_default();
            if cluster_of_execution_space(&work_ns).is_some_and(|c| keep.contains(c)) || w.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let api: Api<Work> = Api::namespaced(self.client.clone(), &work_ns);
            match api.delete(&w.name_any(), &DeleteParams::default()).await {
                Ok(_) => tracing::debug!(controller = SERVICE_NAME_CONTROLLER, work = %w.name_any(), namespace = %work_ns, "marker removed"),
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(api_err("deleting", "marker Work", &work_ns, &w.name_any())(e)),
            }
        }
        Ok(())
    }

    /// Releases the Service and its binding (the binding stays, unmarked, as after a deleted
    /// policy: the member Services stay until something else decides).
    async fn release(&self, ns: &str, name: &str) -> Result<(), Error> {
        let key = ObjectRef::new(name).within(ns);
        if let Some(svc) = self.templates.get(&key)
            && (svc.labels().contains_key(CLAIMED_BY_LABEL) || svc.labels().contains_key(MCS_PERMANENT_ID_LABEL))
        {
            let patch = json!({"metadata": {"labels": {CLAIMED_BY_LABEL: null, MCS_PERMANENT_ID_LABEL: null}}});
            let api: Api<Service> = Api::namespaced(self.client.clone(), ns);
            match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => return Err(api_err("releasing", "Service", ns, name)(e)),
            }
        }
        let rb = binding_name("Service", name);
        let api: Api<ResourceBinding> = Api::namespaced(self.client.clone(), ns);
        let patch = json!({"metadata": {
            "labels": {BINDING_MANAGED_BY_LABEL: null, MCS_PERMANENT_ID_LABEL: null},
            "annotations": {MCS_NAME_LABEL: null, MCS_NAMESPACE_LABEL: null},
        }});
        match api.get_opt(&rb).await {
            Ok(Some(b)) if b.labels().get(BINDING_MANAGED_BY_LABEL).map(String::as_str) == Some(MULTI_CLUSTER_SERVICE) => {
                match api.patch(&rb, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => Ok(()),
                    Err(e) if not_found(&e) => Ok(()),
                    Err(e) => Err(api_err("releasing", "ResourceBinding", ns, &rb)(e)),
                }
            }
            Ok(_) => Ok(()),
            Err(e) => Err(api_err("reading", "ResourceBinding", ns, &rb)(e)),
        }
    }

    async fn set_finalizer(&self, mcs: &MultiClusterService, present: bool) -> Result<(), Error> {
        let has = mcs.finalizers().iter().any(|f| f == MCS_FINALIZER);
        if has == present {
            return Ok(());
        }
        let mut finalizers: Vec<String> = mcs.finalizers().iter().filter(|f| *f != MCS_FINALIZER).cloned().collect();
        if present {
            finalizers.push(MCS_FINALIZER.into());
        }
        let (ns, name) = (mcs.namespace().unwrap_or_default(), mcs.name_any());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": mcs.resource_version()}});
        let api: Api<MultiClusterService> = Api::namespaced(self.client.clone(), &ns);
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(api_err("writing the finalizer of", "MultiClusterService", &ns, &name)(e)),
        }
    }
}

/// A condition of the MultiClusterService with its reasons and Events (success, failure).
struct Outcome {
    type_: &'static str,
    reasons: [&'static str; 2],
    events: [&'static str; 2],
}

const SERVICE_APPLIED_OUTCOME: Outcome = Outcome {
    type_: SERVICE_APPLIED,
    reasons: ["ServiceAppliedSucceed", "ServiceAppliedFailed"],
    events: [EVENT_SYNC_SERVICE_SUCCEED, EVENT_SYNC_SERVICE_FAILED],
};
const DISPATCHED_OUTCOME: Outcome = Outcome {
    type_: ENDPOINT_SLICE_DISPATCHED,
    reasons: ["EndpointSliceDispatchedSucceed", "EndpointSliceDispatchedFailed"],
    events: [EVENT_DISPATCH_SUCCEED, EVENT_DISPATCH_FAILED],
};

/// Sets the outcome's condition on the MultiClusterService and publishes its Event.
async fn report(client: &Client, events: &Events, mcs: &MultiClusterService, outcome: &Outcome, ok: bool, message: String) {
    let mut conditions = mcs.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let pick = |pair: [&'static str; 2]| if ok { pair[0] } else { pair[1] };
    if flotilla_runtime::set_condition(
        &mut conditions,
        flotilla_runtime::condition(outcome.type_, ok, pick(outcome.reasons), message.clone(), mcs.metadata.generation),
    ) {
        let api: Api<MultiClusterService> = Api::namespaced(client.clone(), &mcs.namespace().unwrap_or_default());
        let patch = json!({"status": {"conditions": conditions}});
        if let Err(e) = api.patch_status(&mcs.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(name = %mcs.name_any(), error = %e, "MultiClusterService status not written; the next reconcile writes it");
        }
    }
    events.publish(mcs, !ok, pick(outcome.events), "Sync", message).await;
}

async fn reconcile_service(ctx: &ServiceContext, key: ObjectRef<MultiClusterService>) -> Result<Next, Error> {
    let Some(mcs) = ctx.services.get(&key) else { return Ok(Next::Done) };
    let (ns, name) = (key.namespace.clone().unwrap_or_default(), key.name.clone());
    if mcs.metadata.deletion_timestamp.is_some() || !mcs.spec.is_cross_cluster() {
        if !mcs.finalizers().iter().any(|f| f == MCS_FINALIZER) {
            return Ok(Next::Done);
        }
        if let Err(e) = ctx.release(&ns, &name).await {
            ctx.events.publish(&*mcs, true, EVENT_SYNC_SERVICE_FAILED, "Sync", format!("failed to delete service work :{e}")).await;
            return Err(e);
        }
        if let Err(e) = ctx.delete_markers(&ns, &name, &BTreeSet::new()).await {
            ctx.events.publish(&*mcs, true, EVENT_SYNC_SERVICE_FAILED, "Sync", format!("failed to delete MultiClusterService work :{e}")).await;
            return Err(e);
        }
        ctx.set_finalizer(&mcs, false).await?;
        return Ok(Next::Done);
    }
    let Some(id) = mcs.labels().get(MCS_PERMANENT_ID_LABEL).filter(|v| !v.is_empty()).cloned() else {
        // Admission gives it its permanent id; look again shortly.
        return Ok(Next::After(Duration::from_millis(200)));
    };
    ctx.set_finalizer(&mcs, true).await?;
    let providers = providers(&mcs, &ctx.clusters);
    for p in &providers {
        let Some(cluster) = ctx.clusters.get(&ObjectRef::new(p)) else {
            ctx.events.publish(&*mcs, true, EVENT_CLUSTER_NOT_FOUND, "Sync", format!("Provider cluster {p} is not found")).await;
            continue;
        };
        if !is_cluster_ready(&cluster) {
            ctx.events
                .publish(&*mcs, true, EVENT_SYNC_SERVICE_FAILED, "Sync", format!("Provider cluster {p} is not ready, skip to propagate MultiClusterService"))
                .await;
            continue;
        }
        if lacks_endpoint_slices(&cluster) {
            ctx.events.publish(&*mcs, true, EVENT_API_INCOMPATIBLE, "Sync", format!("Provider cluster {p} does not support EndpointSlice")).await;
            continue;
        }
        let work = marker_work(&mcs, p, &id);
        let api: Api<Work> = Api::namespaced(ctx.client.clone(), &execution_space(p));
        let work_name = work["metadata"]["name"].as_str().unwrap_or_default().to_string();
        api.patch(&work_name, &PatchParams::apply(SERVICE_NAME_CONTROLLER).force(), &Patch::Apply(&work)).await.map_err(api_err(
            "writing",
            "marker Work",
            &execution_space(p),
            &work_name,
        ))?;
    }
    ctx.delete_markers(&ns, &name, &providers).await?;
    let applied = apply_service(ctx, &mcs, &id, &providers).await;
    let (ok, message) = match &applied {
        Ok(()) => (true, "Service is propagated to target clusters.".to_string()),
        Err(e) => (false, e.clone()),
    };
    report(&ctx.client, &ctx.events, &mcs, &SERVICE_APPLIED_OUTCOME, ok, message).await;
    // A missing Service comes back through its watch; anything else is tried again.
    Ok(if applied.is_ok() || ctx.templates.get(&ObjectRef::new(&name).within(&ns)).is_none() { Next::Done } else { Next::After(Duration::from_secs(5)) })
}

/// Claims the Service and writes its binding; the error is the condition's message.
async fn apply_service(ctx: &ServiceContext, mcs: &MultiClusterService, id: &str, providers: &BTreeSet<String>) -> Result<(), String> {
    let (ns, name) = (mcs.namespace().unwrap_or_default(), mcs.name_any());
    let Some(svc) = ctx.templates.get(&ObjectRef::new(&name).within(&ns)) else { return Err(format!("services {name:?} not found")) };
    if let Some(patch) = claim_patch(&svc, mcs, id) {
        let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| format!("claiming Service {ns}/{name}: {e}"))?;
    }
    let clusters: BTreeSet<String> = providers.iter().cloned().chain(consumers(mcs, &ctx.clusters)).collect();
    let rb = service_binding(&svc, mcs, id, &clusters);
    let rb_name = binding_name("Service", &name);
    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch(&rb_name, &PatchParams::apply(SERVICE_NAME_CONTROLLER).force(), &Patch::Apply(&rb))
        .await
        .map_err(|e| format!("writing ResourceBinding {ns}/{rb_name}: {e}"))?;
    Ok(())
}

/// Run the multiclusterservice controller until shutdown.
pub async fn run_services(client: Client, rt: flotilla_runtime::Runtime) {
    let services = rt.informers.store::<MultiClusterService>();
    let (for_clusters, for_works) = (services.clone(), services.clone());
    let ctx = Arc::new(ServiceContext {
        events: Events::new(client.clone(), SERVICE_NAME_CONTROLLER),
        client,
        services,
        templates: rt.informers.store::<Service>(),
        clusters: rt.informers.store::<Cluster>(),
        works: rt.informers.store::<Work>(),
    });
    rt.controller::<ObjectRef<MultiClusterService>>(SERVICE_NAME_CONTROLLER)
        .watches_changes(|old: Option<&MultiClusterService>, m: &MultiClusterService, deleted| {
            let changed = old.is_none_or(|o| o.spec != m.spec || o.metadata.deletion_timestamp != m.metadata.deletion_timestamp || o.labels() != m.labels());
            (!deleted && changed).then(|| ObjectRef::from_obj(m))
        })
        .watches(|s: &Service, _deleted| Some(ObjectRef::new(&s.name_any()).within(&s.namespace().unwrap_or_default())))
        .watches_changes(move |old: Option<&Cluster>, c: &Cluster, deleted| {
            let readiness_moved = deleted || old.is_none_or(|o| is_cluster_ready(o) != is_cluster_ready(c));
            if !readiness_moved {
                return Vec::new();
            }
            let name = c.name_any();
            let names = |l: &Option<Vec<flotilla_api::federation::karmada::networking::ClusterSelector>>| {
                l.as_ref().is_none_or(|l| l.is_empty() || l.iter().any(|s| s.name == name))
            };
            for_clusters
                .state()
                .iter()
                .filter(|m| m.spec.is_cross_cluster() && (names(&m.spec.provider_clusters) || names(&m.spec.consumer_clusters)))
                .map(|m| ObjectRef::from_obj(&**m))
                .collect()
        })
        .watches(move |w: &Work, deleted| {
            // A marker removed by someone else is put back.
            (deleted && is_mcs_marker(w))
                .then(|| Some(ObjectRef::new(w.labels().get(MCS_NAME_LABEL)?).within(w.labels().get(MCS_NAMESPACE_LABEL)?)))
                .flatten()
                .filter(|k| for_works.get(k).is_some())
        })
        .backoff(Duration::from_millis(200), Duration::from_secs(60))
        .run(move |key| {
            let ctx = ctx.clone();
            async move { reconcile_service(&ctx, key).await }
        })
        .await;
}

// ---------------------------------------------------------------------------------------------
// Dispatch

/// Whether a Work is a collected slice's report on the MultiClusterService path (or was, and
/// still holds the dispatch finalizer).
fn is_collected(w: &Work) -> bool {
    is_report(w) && (w.labels().contains_key(MCS_NAME_LABEL) || w.finalizers().iter().any(|f| f == DISPATCH_FINALIZER))
}

/// Whether a Work is a dispatched copy.
fn is_dispatched(w: &Work) -> bool {
    w.annotations().contains_key(PROVISION_CLUSTER_ANNOTATION)
}

/// The consumer's slice for a collected one: `<provider>-<slice>`, labelled with the Service's
/// own name, managed by the dispatch controller; endpoints and ports as they are.
pub fn dispatched_slice(provider: &str, service: &str, slice: &Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{provider}-{}", slice.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()),
            "namespace": slice.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
            "labels": {SERVICE_NAME: service, SLICE_MANAGED_BY: DISPATCHED_MANAGED_BY},
            "annotations": {PROVISION_CLUSTER_ANNOTATION: provider},
        },
        "addressType": slice.get("addressType").cloned().unwrap_or(json!("IPv4")),
        "endpoints": slice.get("endpoints").cloned().unwrap_or(json!([])),
        "ports": slice.get("ports").cloned().unwrap_or(json!([])),
    })
}

fn dispatched_work(collected: &Work, provider: &str, consumer: &str, ns: &str, service: &str, slice: &Value) -> Value {
    json!({
        "apiVersion": "work.karmada.io/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": collected.name_any(),
            "namespace": execution_space(consumer),
            "labels": {MCS_NAME_LABEL: service, MCS_NAMESPACE_LABEL: ns},
            "annotations": {PROVISION_CLUSTER_ANNOTATION: provider},
        },
        "spec": {"workload": {"manifests": [dispatched_slice(provider, service, slice)]}},
    })
}

struct DispatchContext {
    client: Client,
    events: Events,
    services: Store<MultiClusterService>,
    clusters: Store<Cluster>,
    works: Store<Work>,
}

impl DispatchContext {
    async fn delete_work(&self, w: &Work) -> Result<(), Error> {
        let ns = w.namespace().unwrap_or_default();
        let api: Api<Work> = Api::namespaced(self.client.clone(), &ns);
        match api.delete(&w.name_any(), &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(api_err("deleting", "dispatched Work", &ns, &w.name_any())(e)),
        }
    }
}

async fn reconcile_dispatch(ctx: &DispatchContext, work: Arc<Work>) -> Result<Next, Error> {
    let work_ns = work.namespace().unwrap_or_default();
    let Some(provider) = cluster_of_execution_space(&work_ns).map(String::from) else { return Ok(Next::Done) };
    let name = work.name_any();
    let slice = work
        .spec
        .workload
        .as_ref()
        .and_then(|t| t.manifests.as_ref()?.first().cloned())
        .filter(|m| m.get("kind").and_then(Value::as_str) == Some("EndpointSlice"));
    let Some(slice) = slice else { return Ok(Next::Done) };
    let service = work.labels().get(MCS_NAME_LABEL).cloned();
    if work.metadata.deletion_timestamp.is_some() || service.is_none() {
        // Gone, or no longer on this path: its copies go, then its finalizer.
        if !work.finalizers().iter().any(|f| f == DISPATCH_FINALIZER) {
            return Ok(Next::Done);
        }
        for copy in ctx.works.state().iter().filter(|w| {
            is_dispatched(w) && w.name_any() == name && w.annotations().get(PROVISION_CLUSTER_ANNOTATION).map(String::as_str) == Some(provider.as_str())
        }) {
            ctx.delete_work(copy).await?;
        }
        let finalizers: Vec<&String> = work.finalizers().iter().filter(|f| *f != DISPATCH_FINALIZER).collect();
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": work.resource_version()}});
        let api: Api<Work> = Api::namespaced(ctx.client.clone(), &work_ns);
        return match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(e) if not_found(&e) => Ok(Next::Done),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Next::After(Duration::from_millis(100))),
            Err(e) => Err(api_err("releasing", "collected Work", &work_ns, &name)(e)),
        };
    }
    let service = service.unwrap_or_default();
    let ns = work.labels().get(MCS_NAMESPACE_LABEL).cloned().unwrap_or_default();
    let Some(mcs) = ctx.services.get(&ObjectRef::new(&service).within(&ns)) else { return Ok(Next::Done) };
    let consumers = consumers(&mcs, &ctx.clusters);
    // Copies of this path in clusters no longer consumers.
    for copy in ctx.works.state().iter().filter(|w| {
        is_dispatched(w)
            && w.labels().get(MCS_NAME_LABEL) == Some(&service)
            && w.labels().get(MCS_NAMESPACE_LABEL) == Some(&ns)
            && w.namespace().as_deref().and_then(cluster_of_execution_space).is_some_and(|c| !consumers.contains(c))
    }) {
        ctx.delete_work(copy).await?;
    }
    let mut failure = None;
    for consumer in consumers.iter().filter(|c| **c != provider) {
        let Some(cluster) = ctx.clusters.get(&ObjectRef::new(consumer)) else {
            ctx.events.publish(&*mcs, true, EVENT_CLUSTER_NOT_FOUND, "Dispatch", format!("Consumer cluster {consumer} is not found")).await;
            continue;
        };
        if !is_cluster_ready(&cluster) {
            ctx.events
                .publish(
                    &*mcs,
                    true,
                    EVENT_SYNC_SERVICE_FAILED,
                    "Dispatch",
                    format!("Consumer cluster {consumer} is not ready, skip to propagate EndpointSlice"),
                )
                .await;
            continue;
        }
        if lacks_endpoint_slices(&cluster) {
            ctx.events.publish(&*mcs, true, EVENT_API_INCOMPATIBLE, "Dispatch", format!("Consumer cluster {consumer} does not support EndpointSlice")).await;
            continue;
        }
        let copy = dispatched_work(&work, &provider, consumer, &ns, &service, &slice);
        let es = execution_space(consumer);
        let current = ctx.works.get(&ObjectRef::new(&name).within(&es));
        if current.is_some_and(|c| {
            manifest_is_current(&c, &copy["spec"]["workload"]["manifests"][0]) && c.annotations().get(PROVISION_CLUSTER_ANNOTATION) == Some(&provider)
        }) {
            continue;
        }
        let api: Api<Work> = Api::namespaced(ctx.client.clone(), &es);
        if let Err(e) = api.patch(&name, &PatchParams::apply(DISPATCH_NAME).force(), &Patch::Apply(&copy)).await {
            failure = Some(api_err("writing", "dispatched Work", &es, &name)(e));
            break;
        }
    }
    let (ok, message) = match &failure {
        None => (true, "EndpointSlice are dispatched successfully".to_string()),
        Some(e) => (false, e.to_string()),
    };
    report(&ctx.client, &ctx.events, &mcs, &DISPATCHED_OUTCOME, ok, message).await;
    failure.map_or(Ok(Next::Done), Err)
}

/// Run the endpointsliceDispatch controller until shutdown.
pub async fn run_dispatch(client: Client, rt: flotilla_runtime::Runtime) {
    let works = rt.informers.store::<Work>();
    let services = rt.informers.store::<MultiClusterService>();
    let (by_mcs, by_cluster) = (works.clone(), (works.clone(), services.clone()));
    let ctx =
        Arc::new(DispatchContext { events: Events::new(client.clone(), DISPATCH_NAME), client, services, clusters: rt.informers.store::<Cluster>(), works });
    let collected_of = |works: &Store<Work>, ns: &str, name: &str| -> Vec<ObjectRef<Work>> {
        works
            .state()
            .iter()
            .filter(|w| {
                is_collected(w)
                    && w.labels().get(MCS_NAMESPACE_LABEL).map(String::as_str) == Some(ns)
                    && w.labels().get(MCS_NAME_LABEL).map(String::as_str) == Some(name)
            })
            .map(|w| ObjectRef::from_obj(&**w))
            .collect()
    };
    rt.controller::<ObjectRef<Work>>(DISPATCH_NAME)
        .watches(|w: &Work, deleted| (!deleted && is_collected(w)).then(|| ObjectRef::from_obj(w)))
        .watches_changes(move |old: Option<&MultiClusterService>, m: &MultiClusterService, _deleted| {
            if old.is_some_and(|o| o.spec == m.spec) {
                return Vec::new();
            }
            collected_of(&by_mcs, &m.namespace().unwrap_or_default(), &m.name_any())
        })
        .watches_changes(move |old: Option<&Cluster>, c: &Cluster, deleted| {
            if !deleted && old.is_some_and(|o| is_cluster_ready(o) == is_cluster_ready(c)) {
                return Vec::new();
            }
            let (works, services) = &by_cluster;
            services
                .state()
                .iter()
                .filter(|m| m.spec.is_cross_cluster())
                .flat_map(|m| collected_of(works, &m.namespace().unwrap_or_default(), &m.name_any()))
                .collect()
        })
        .backoff(Duration::from_millis(100), Duration::from_secs(60))
        .run_objects(move |w| {
            let ctx = ctx.clone();
            async move { reconcile_dispatch(&ctx, w).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatched_slice_is_named_for_its_provider_and_labelled_for_the_service() {
        let collected = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-x7k2p", "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io", "karmada.io/managed": "true"},
                "annotations": {"work.karmada.io/name": "web-x7k2p-abc"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true}, "nodeName": "n1"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        });
        let d = dispatched_slice("member1", "web", &collected);
        assert_eq!(d["metadata"]["name"], "member1-web-x7k2p");
        assert_eq!(d["metadata"]["namespace"], "shop");
        assert_eq!(d["metadata"]["labels"], json!({SERVICE_NAME: "web", SLICE_MANAGED_BY: DISPATCHED_MANAGED_BY}), "labels replaced entirely");
        assert_eq!(d["metadata"]["annotations"], json!({PROVISION_CLUSTER_ANNOTATION: "member1"}), "annotations replaced entirely");
        assert_eq!(d["endpoints"], collected["endpoints"]);
        assert_eq!(d["ports"], collected["ports"]);
    }

    #[test]
    fn only_a_complete_api_list_without_endpoint_slices_is_incompatible() {
        let cluster =
            |status: Value| -> Cluster { serde_json::from_value(json!({"metadata": {"name": "m1"}, "spec": {"syncMode": "Push"}, "status": status})).unwrap() };
        let complete = json!([{"type": "CompleteAPIEnablements", "status": "True", "reason": "", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        let with = json!([{"groupVersion": "discovery.k8s.io/v1", "resources": [{"name": "endpointslices", "kind": "EndpointSlice"}]}]);
        assert!(!lacks_endpoint_slices(&cluster(json!({}))), "unknown is fine");
        assert!(!lacks_endpoint_slices(&cluster(json!({"conditions": complete, "apiEnablements": with}))));
        assert!(lacks_endpoint_slices(&cluster(json!({"conditions": complete, "apiEnablements": [{"groupVersion": "v1", "resources": []}]}))));
        assert!(!lacks_endpoint_slices(&cluster(json!({"apiEnablements": [{"groupVersion": "v1", "resources": []}]}))), "an incomplete list proves nothing");
    }

    #[test]
    fn the_service_is_claimed_from_any_policy_once() {
        let mcs: MultiClusterService =
            serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"types": ["CrossCluster"]}})).unwrap();
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop",
            "labels": {PROPAGATION_POLICY_PERMANENT_ID_LABEL: "pp-1"}, "annotations": {PROPAGATION_POLICY_NAME_ANNOTATION: "pp"}}}))
        .unwrap();
        let patch = claim_patch(&svc, &mcs, "id-1").expect("not claimed yet");
        assert_eq!(patch["metadata"]["labels"][CLAIMED_BY_LABEL], MULTI_CLUSTER_SERVICE);
        assert_eq!(patch["metadata"]["labels"][PROPAGATION_POLICY_PERMANENT_ID_LABEL], Value::Null);
        assert_eq!(patch["metadata"]["annotations"][MCS_NAME_LABEL], "web");
        let claimed: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "shop",
            "labels": {CLAIMED_BY_LABEL: MULTI_CLUSTER_SERVICE, MCS_PERMANENT_ID_LABEL: "id-1"},
            "annotations": {MCS_NAME_LABEL: "web", MCS_NAMESPACE_LABEL: "shop"}}}))
        .unwrap();
        assert!(claim_patch(&claimed, &mcs, "id-1").is_none(), "claimed once");
        let b = service_binding(&claimed, &mcs, "id-1", &["m1".to_string(), "m3".to_string()].into());
        assert_eq!(b["metadata"]["name"], "web-service");
        assert_eq!(b["metadata"]["labels"][BINDING_MANAGED_BY_LABEL], MULTI_CLUSTER_SERVICE);
        assert_eq!(b["spec"]["placement"]["clusterAffinity"]["clusterNames"], json!(["m1", "m3"]));
        assert_eq!(b["spec"]["conflictResolution"], "Overwrite");
    }
}
