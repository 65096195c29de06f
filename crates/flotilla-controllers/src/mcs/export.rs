//! The service-export controller (Karmada's `serviceExport`, `pkg/controllers/mcs`): in each
//! member it serves — every Push cluster on the control plane, its own cluster in a pull agent
//! — the EndpointSlices of the Services a ServiceExport offers are reported to the control
//! plane, one Work per slice in the cluster's execution space, never dispatched.
//!
//! A member is watched (its ServiceExports and its EndpointSlices labelled with a Service) from
//! the first Work of its execution space that carries a ServiceExport or a report, until its
//! Cluster goes. Each change queues the (cluster, namespace, Service) it concerns; the
//! reconcile compares the member's slices of an exported Service with the reports in the
//! execution space and writes the difference: a report is created or updated (server-side
//! apply), and one whose slice or export is gone is deleted (or, when the MultiClusterService
//! path reports the same slice, only unmarked). Slices Karmada's or Flotilla's controllers
//! wrote are never reported, which would loop. A cluster out of reach keeps its reports —
//! Karmada keeps a NotReady cluster's endpoints to avoid an outage; the DNS server and the
//! gateway are what withdraw them.
//!
//! Beyond Karmada: the report's slice carries the exported Service's cluster IPs in that member
//! (`multicluster.flotilla.io/service-cluster-ips`), which the DNS server answers for a
//! `ClusterSetIP` import (ADR 0037).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::{cluster_of_execution_space, execution_space, work_name};
use flotilla_api::federation::karmada::work::{MANAGED_LABEL, TEMPLATE_UID_ANNOTATION, WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, Work};
use flotilla_api::federation::mcs::{
    ENDPOINTSLICE_FINALIZER, MANAGED_BY_SERVICE_EXPORT, SERVICE_CLUSTER_IPS_ANNOTATION, SERVICE_NAME, SERVICE_NAME_LABEL, SERVICE_NAMESPACE_LABEL,
    SLICE_MANAGED_BY, WORK_MANAGED_BY_LABEL, is_managed_by_federation,
};
use flotilla_api::interpreter::{InterpretError, prune_for_work};
use flotilla_member::access::Clients;
use flotilla_runtime::CancellationToken;
use flotilla_runtime::Next;
use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

pub const NAME: &str = "service-export-controller";

/// What the controller reconciles: a member's watches, or one exported Service of a member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Cluster(String),
    Service { cluster: String, namespace: String, name: String },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: {source}")]
    Member { cluster: String, source: flotilla_member::MemberError },
    #[error("cluster {cluster}: reading Service {namespace}/{name}: {source}")]
    Service { cluster: String, namespace: String, name: String, source: kube::Error },
    #[error("cluster {cluster}: {source}")]
    Prune { cluster: String, source: InterpretError },
    #[error("{step} report Work {namespace}/{name}: {source}")]
    Work { step: &'static str, namespace: String, name: String, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

#[derive(Clone, Debug)]
pub struct Config {
    /// Timeout of each request to a member.
    pub member_timeout: Duration,
    /// Timeout of the member watches' connections.
    pub watch_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { member_timeout: Duration::from_secs(15), watch_timeout: Duration::from_secs(330) }
    }
}

/// The resources watched in members.
pub fn service_export_resource() -> ApiResource {
    ApiResource {
        group: "multicluster.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: flotilla_api::federation::mcs::API_VERSION.into(),
        kind: "ServiceExport".into(),
        plural: "serviceexports".into(),
    }
}

pub fn endpoint_slice_resource() -> ApiResource {
    ApiResource {
        group: "discovery.k8s.io".into(),
        version: "v1".into(),
        api_version: "discovery.k8s.io/v1".into(),
        kind: "EndpointSlice".into(),
        plural: "endpointslices".into(),
    }
}

/// One member's watches: dropped, they stop.
struct MemberWatch {
    exports: Store<DynamicObject>,
    slices: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl Drop for MemberWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub struct Context {
    client: Client,
    config: Config,
    clients: Arc<Clients>,
    watch_clients: Arc<Clients>,
    works: Store<Work>,
    clusters: Store<Cluster>,
    queue: Arc<flotilla_runtime::WorkQueue<Key>>,
    members: Mutex<HashMap<String, MemberWatch>>,
}

/// Whether a Work reports slices (any path's).
pub fn is_report(w: &Work) -> bool {
    w.labels().contains_key(WORK_MANAGED_BY_LABEL)
}

/// Whether a Work puts a ServiceExport in its member.
fn carries_export(w: &Work) -> bool {
    w.spec.workload.iter().flat_map(|t| t.manifests.iter().flatten()).any(|m| m.get("kind").and_then(Value::as_str) == Some("ServiceExport"))
}

/// The managed-by tokens of a report Work (`ServiceExport.MultiClusterService`).
fn tokens(w: &Work) -> Vec<String> {
    w.labels().get(WORK_MANAGED_BY_LABEL).map(|v| v.split('.').filter(|t| !t.is_empty()).map(String::from).collect()).unwrap_or_default()
}

/// The report of a member slice: the slice as Karmada's `CreateOrUpdateWork` embeds it (pruned
/// as every Work manifest is, the Work's annotations and `karmada.io/managed` added), plus the
/// Service's cluster IPs.
pub fn report_manifest(slice: &DynamicObject, work_namespace: &str, work: &str, cluster_ips: &[String]) -> Result<Value, InterpretError> {
    let mut v = serde_json::to_value(slice).unwrap_or_default();
    v["apiVersion"] = json!("discovery.k8s.io/v1");
    v["kind"] = json!("EndpointSlice");
    let mut v = prune_for_work(&v)?;
    let uid = slice.metadata.uid.clone().unwrap_or_default();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        labels[MANAGED_LABEL] = json!("true");
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        annotations[TEMPLATE_UID_ANNOTATION] = json!(uid);
        annotations[WORK_NAME_ANNOTATION] = json!(work);
        annotations[WORK_NAMESPACE_ANNOTATION] = json!(work_namespace);
        if !cluster_ips.is_empty() {
            annotations[SERVICE_CLUSTER_IPS_ANNOTATION] = json!(cluster_ips.join(","));
        }
    }
    Ok(v)
}

fn report_work(cluster: &str, namespace: &str, service: &str, slice_name: &str, manifest: Value, tokens: &[String]) -> Value {
    let es = execution_space(cluster);
    json!({
        "apiVersion": "work.karmada.io/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": work_name("EndpointSlice", slice_name, Some(namespace)),
            "namespace": es,
            "labels": {
                SERVICE_NAMESPACE_LABEL: namespace,
                SERVICE_NAME_LABEL: service,
                WORK_MANAGED_BY_LABEL: tokens.join("."),
            },
            "finalizers": [ENDPOINTSLICE_FINALIZER],
        },
        "spec": {"suspendDispatching": true, "workload": {"manifests": [manifest]}},
    })
}

impl Context {
    /// The reports of `namespace/service` in `cluster`'s execution space, by Work name.
    fn reports(&self, cluster: &str, namespace: &str, service: &str) -> BTreeMap<String, Arc<Work>> {
        let es = execution_space(cluster);
        self.works
            .state()
            .into_iter()
            .filter(|w| {
                w.namespace().as_deref() == Some(es.as_str())
                    && w.labels().get(SERVICE_NAMESPACE_LABEL).map(String::as_str) == Some(namespace)
                    && w.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(service)
                    && tokens(w).iter().any(|t| t == MANAGED_BY_SERVICE_EXPORT)
            })
            .map(|w| (w.name_any(), w))
            .collect()
    }

    /// Whether `cluster`'s members should be watched: served here, not going, and its execution
    /// space holds a ServiceExport or a report.
    fn wants_watch(&self, cluster: &str) -> bool {
        let Some(c) = self.clusters.get(&reflector::ObjectRef::new(cluster)) else { return false };
        if !self.clients.reaches(&c) || c.metadata.deletion_timestamp.is_some() {
            return false;
        }
        let es = execution_space(cluster);
        self.works.state().iter().any(|w| w.namespace().as_deref() == Some(es.as_str()) && (is_report(w) || carries_export(w)))
    }
}

async fn reconcile_cluster(ctx: &Arc<Context>, cluster: &str) -> Result<Next, Error> {
    if !ctx.wants_watch(cluster) {
        if ctx.clusters.get(&reflector::ObjectRef::new(cluster)).is_none() && ctx.members.lock().remove(cluster).is_some() {
            tracing::info!(controller = NAME, cluster, "stopped watching the member's exports");
        }
        return Ok(Next::Done);
    }
    if ctx.members.lock().contains_key(cluster) {
        return Ok(Next::Done);
    }
    let c = ctx.clusters.get(&reflector::ObjectRef::new(cluster)).expect("wants_watch saw it");
    let member_err = |source| Error::Member { cluster: cluster.to_string(), source };
    let access = ctx.clients.access(&ctx.client, &c).await.map_err(member_err)?;
    let conn = ctx.watch_clients.connection(&access, ctx.config.watch_timeout).map_err(member_err)?;
    let stop = CancellationToken::new();
    let synced = Arc::new(AtomicBool::new(false));
    let exports =
        spawn_watch(ctx, cluster, &conn.client, service_export_resource(), watcher::Config::default(), stop.clone(), |o| Some((o.namespace()?, o.name_any())));
    let slices = spawn_watch(ctx, cluster, &conn.client, endpoint_slice_resource(), watcher::Config::default().labels(SERVICE_NAME), stop.clone(), |o| {
        Some((o.namespace()?, o.labels().get(SERVICE_NAME)?.clone()))
    });
    // Once both have listed, every Service they or the reports name is looked at (orphans too).
    {
        let (ctx2, cluster2, synced2, stop2) = (ctx.clone(), cluster.to_string(), synced.clone(), stop.clone());
        let (e, s) = (exports.clone(), slices.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop2.cancelled() => return,
                _ = async { let _ = e.wait_until_ready().await; let _ = s.wait_until_ready().await; } => {}
            }
            synced2.store(true, Ordering::SeqCst);
            let mut keys: Vec<(String, String)> = e.state().iter().filter_map(|o| Some((o.namespace()?, o.name_any()))).collect();
            let es = execution_space(&cluster2);
            keys.extend(
                ctx2.works
                    .state()
                    .iter()
                    .filter(|w| w.namespace().as_deref() == Some(es.as_str()))
                    .filter_map(|w| Some((w.labels().get(SERVICE_NAMESPACE_LABEL)?.clone(), w.labels().get(SERVICE_NAME_LABEL)?.clone()))),
            );
            for (namespace, name) in keys {
                ctx2.queue.add(Key::Service { cluster: cluster2.to_string(), namespace, name });
            }
        });
    }
    tracing::info!(controller = NAME, cluster, "watching the member's ServiceExports and EndpointSlices");
    ctx.members.lock().insert(cluster.to_string(), MemberWatch { exports, slices, synced, stop });
    Ok(Next::Done)
}

/// A member watch whose events queue the Service `key` names; ends with `stop`.
fn spawn_watch(
    ctx: &Arc<Context>,
    cluster: &str,
    member: &Client,
    resource: ApiResource,
    config: watcher::Config,
    stop: CancellationToken,
    key: impl Fn(&DynamicObject) -> Option<(String, String)> + Send + 'static,
) -> Store<DynamicObject> {
    let api: Api<DynamicObject> = Api::all_with(member.clone(), &resource);
    let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let store = writer.as_reader();
    let (queue, cluster) = (ctx.queue.clone(), cluster.to_string());
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failing = false;
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                e = stream.next() => e,
            };
            match event {
                None => return,
                Some(Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o))) => {
                    failing = false;
                    if let Some((namespace, name)) = key(&o) {
                        queue.add(Key::Service { cluster: cluster.clone(), namespace, name });
                    }
                }
                Some(Ok(_)) => failing = false,
                Some(Err(e)) => {
                    if !failing {
                        tracing::warn!(controller = NAME, cluster = %cluster, kind = %resource.kind, error = %e, "member watch failing; retrying");
                    }
                    failing = true;
                }
            }
        }
    });
    store
}

async fn reconcile_service(ctx: &Arc<Context>, cluster: &str, namespace: &str, service: &str) -> Result<Next, Error> {
    let (exported, slices) = {
        let members = ctx.members.lock();
        let Some(m) = members.get(cluster).filter(|m| m.synced.load(Ordering::SeqCst)) else { return Ok(Next::Done) };
        let exported = m.exports.get(&reflector::ObjectRef::new_with(service, service_export_resource()).within(namespace)).is_some();
        let slices: Vec<Arc<DynamicObject>> = m
            .slices
            .state()
            .into_iter()
            .filter(|s| {
                s.namespace().as_deref() == Some(namespace)
                    && s.labels().get(SERVICE_NAME).map(String::as_str) == Some(service)
                    && !is_managed_by_federation(s.labels().get(SLICE_MANAGED_BY).map(String::as_str))
            })
            .collect();
        (exported, slices)
    };
    let es = execution_space(cluster);
    let existing = ctx.reports(cluster, namespace, service);
    let api: Api<Work> = Api::namespaced(ctx.client.clone(), &es);
    let mut wanted = BTreeMap::new();
    if exported && !slices.is_empty() {
        let ips = cluster_ips(ctx, cluster, namespace, service).await?;
        for slice in &slices {
            let name = work_name("EndpointSlice", &slice.name_any(), Some(namespace));
            let manifest = report_manifest(slice, &es, &name, &ips).map_err(|source| Error::Prune { cluster: cluster.to_string(), source })?;
            let mut toks = existing.get(&name).map(|w| tokens(w)).unwrap_or_default();
            if !toks.iter().any(|t| t == MANAGED_BY_SERVICE_EXPORT) {
                toks.push(MANAGED_BY_SERVICE_EXPORT.into());
                toks.sort();
            }
            let current = existing.get(&name).and_then(|w| w.spec.workload.as_ref()?.manifests.as_ref()?.first().cloned());
            wanted.insert(name.clone(), ());
            if current.as_ref() == Some(&manifest) && existing.get(&name).is_some_and(|w| w.finalizers().iter().any(|f| f == ENDPOINTSLICE_FINALIZER)) {
                continue;
            }
            let work = report_work(cluster, namespace, service, &slice.name_any(), manifest, &toks);
            api.patch(&name, &PatchParams::apply(NAME).force(), &Patch::Apply(&work)).await.map_err(|source| Error::Work {
                step: "writing",
                namespace: es.clone(),
                name: name.clone(),
                source,
            })?;
            tracing::debug!(controller = NAME, cluster, work = %name, "slice reported");
        }
    }
    for (name, work) in existing {
        if wanted.contains_key(&name) || work.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let others: Vec<String> = tokens(&work).into_iter().filter(|t| t != MANAGED_BY_SERVICE_EXPORT).collect();
        let result = if others.is_empty() {
            api.delete(&name, &DeleteParams::default()).await.map(|_| ())
        } else {
            // The MultiClusterService path still reports the slice: only this path's marks go.
            let patch = json!({"metadata": {"labels": {WORK_MANAGED_BY_LABEL: others.join("."), SERVICE_NAME_LABEL: null, SERVICE_NAMESPACE_LABEL: null}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
        };
        match result {
            Ok(()) => tracing::debug!(controller = NAME, cluster, work = %name, "report withdrawn"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Work { step: "withdrawing", namespace: es.clone(), name, source }),
        }
    }
    Ok(Next::Done)
}

/// The exported Service's cluster IPs in the member (none for a headless Service or one not
/// there yet).
async fn cluster_ips(ctx: &Context, cluster: &str, namespace: &str, service: &str) -> Result<Vec<String>, Error> {
    let Some(c) = ctx.clusters.get(&reflector::ObjectRef::new(cluster)) else { return Ok(Vec::new()) };
    let member_err = |source| Error::Member { cluster: cluster.to_string(), source };
    let conn = ctx.clients.connect(&ctx.client, &c, ctx.config.member_timeout).await.map_err(member_err)?;
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(conn.client.clone(), namespace);
    let svc = api.get_opt(service).await.map_err(|source| Error::Service {
        cluster: cluster.to_string(),
        namespace: namespace.to_string(),
        name: service.to_string(),
        source,
    })?;
    let spec = svc.and_then(|s| s.spec).unwrap_or_default();
    let mut ips = spec.cluster_ips.unwrap_or_default();
    if ips.is_empty() {
        ips.extend(spec.cluster_ip);
    }
    ips.retain(|ip| !ip.is_empty() && ip != "None");
    Ok(ips)
}

/// Run the controller until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config, clients: Arc<Clients>) {
    let works = rt.informers.store::<Work>();
    let clusters = rt.informers.store::<Cluster>();
    let controller = rt
        .controller::<Key>(NAME)
        .watches(|w: &Work, _deleted| {
            let cluster = w.namespace().as_deref().and_then(cluster_of_execution_space).map(String::from);
            let mut keys = Vec::new();
            if let Some(cluster) = cluster {
                if is_report(w) || carries_export(w) {
                    keys.push(Key::Cluster(cluster.clone()));
                }
                if let (Some(ns), Some(name)) = (w.labels().get(SERVICE_NAMESPACE_LABEL), w.labels().get(SERVICE_NAME_LABEL)) {
                    keys.push(Key::Service { cluster, namespace: ns.clone(), name: name.clone() });
                }
            }
            keys
        })
        .watches(|c: &Cluster, _deleted| Some(Key::Cluster(c.name_any())))
        .backoff(Duration::from_millis(200), Duration::from_secs(60));
    let ctx = Arc::new(Context {
        client,
        config,
        watch_clients: Arc::new(clients.same_mode()),
        clients,
        works,
        clusters,
        queue: controller.queue(),
        members: Mutex::default(),
    });
    controller
        .run(move |key: Key| {
            let ctx = ctx.clone();
            async move {
                match key {
                    Key::Cluster(c) => reconcile_cluster(&ctx, &c).await,
                    Key::Service { cluster, namespace, name } => reconcile_service(&ctx, &cluster, &namespace, &name).await,
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_the_slice_without_server_fields_plus_the_service_ips() {
        let slice: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abc", "namespace": "shop", "uid": "u1", "resourceVersion": "7", "generation": 1,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web", "uid": "s1"}],
                "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }))
        .unwrap();
        let m = report_manifest(&slice, "karmada-es-m1", "web-abc-123", &["10.96.0.10".into()]).unwrap();
        let meta = &m["metadata"];
        assert!(meta.get("uid").is_none() && meta.get("resourceVersion").is_none() && meta.get("ownerReferences").is_none());
        assert_eq!(meta["labels"][MANAGED_LABEL], "true");
        assert_eq!(meta["labels"][SERVICE_NAME], "web");
        assert_eq!(meta["annotations"][TEMPLATE_UID_ANNOTATION], "u1");
        assert_eq!(meta["annotations"][SERVICE_CLUSTER_IPS_ANNOTATION], "10.96.0.10");
        assert_eq!(m["endpoints"][0]["addresses"][0], "10.1.0.5");
        let w = report_work("m1", "shop", "web", "web-abc", m, &[MANAGED_BY_SERVICE_EXPORT.into()]);
        assert_eq!(w["metadata"]["namespace"], "karmada-es-m1");
        assert_eq!(w["metadata"]["name"], work_name("EndpointSlice", "web-abc", Some("shop")));
        assert_eq!(w["metadata"]["labels"][WORK_MANAGED_BY_LABEL], "ServiceExport");
        assert_eq!(w["spec"]["suspendDispatching"], true);
    }
}
