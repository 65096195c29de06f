//! The service-export controller (Karmada's `serviceExport`, `pkg/controllers/mcs`, and the
//! `endpointsliceCollect` of the MultiClusterService path): in each member it serves — every
//! Push cluster on the control plane, its own cluster in a pull agent — the EndpointSlices of a
//! Service are reported to the control plane, one Work per slice in the cluster's execution
//! space, never dispatched, when a ServiceExport in the member offers the Service or a
//! MultiClusterService names the cluster a provider (its marker Work in the execution space).
//!
//! One Work serves both paths, as in Karmada: its `endpointslice.karmada.io/managed-by` label is
//! the dot-joined set of the paths that want it (`MultiClusterService.ServiceExport`), each
//! path adds its labels (`endpointslice.karmada.io/{namespace,name}` for the export path,
//! `multiclusterservice.karmada.io/{namespace,name}` for the other) and its finalizer, which its
//! consumer (`endpointSlice`, `endpointsliceDispatch`) removes once it has cleaned up after a
//! path that left. A report no path wants is deleted.
//!
//! A member is watched (its ServiceExports and its EndpointSlices labelled with a Service) from
//! the first Work of its execution space that carries a ServiceExport, a MultiClusterService or
//! a report, until its Cluster goes. Each change queues the (cluster, namespace, Service) it
//! concerns; the reconcile compares the member's slices with the reports and writes the
//! difference (server-side apply). Slices Karmada's or Flotilla's controllers wrote are never
//! reported, which would loop. A cluster out of reach keeps its reports — Karmada keeps a
//! NotReady cluster's endpoints to avoid an outage; the DNS server and the gateway are what
//! withdraw them.
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
use flotilla_api::federation::karmada::networking::{DISPATCH_FINALIZER, MCS_NAME_LABEL, MCS_NAMESPACE_LABEL};
use flotilla_api::federation::karmada::work::{
    MANAGED_LABEL, TEMPLATE_UID_ANNOTATION, WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, WORK_PERMANENT_ID_LABEL, Work,
};
use flotilla_api::federation::mcs::{
    ENDPOINTSLICE_FINALIZER, MANAGED_BY_MULTI_CLUSTER_SERVICE, MANAGED_BY_SERVICE_EXPORT, SERVICE_CLUSTER_IPS_ANNOTATION, SERVICE_NAME, SERVICE_NAME_LABEL,
    SERVICE_NAMESPACE_LABEL, SLICE_MANAGED_BY, WORK_MANAGED_BY_LABEL, is_managed_by_federation, is_report,
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

/// A member watch's cache, marked once its first list is in and every Service it names queued.
struct Watched {
    store: Store<DynamicObject>,
    synced: Arc<AtomicBool>,
}

impl Watched {
    fn ready(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
}

/// One member's watches: dropped, they stop. Its ServiceExports are watched only once the
/// export path is used there (a member with MultiClusterService providers alone needs neither
/// the MCS CRDs nor the right to read them).
struct MemberWatch {
    client: Client,
    slices: Watched,
    exports: Option<Watched>,
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

fn carries_kind(w: &Work, kind: &str) -> bool {
    w.spec.workload.iter().flat_map(|t| t.manifests.iter().flatten()).any(|m| m.get("kind").and_then(Value::as_str) == Some(kind))
}

/// Whether a Work puts a ServiceExport in its member.
fn carries_export(w: &Work) -> bool {
    carries_kind(w, "ServiceExport")
}

/// Whether a Work is a MultiClusterService's marker in a provider's execution space.
pub fn is_mcs_marker(w: &Work) -> bool {
    w.labels().contains_key(MCS_NAME_LABEL) && carries_kind(w, "MultiClusterService")
}

/// Which paths want a Service's slices reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Paths {
    /// A ServiceExport in the member offers it.
    pub export: bool,
    /// A MultiClusterService names the member a provider.
    pub mcs: bool,
}

impl Paths {
    fn any(self) -> bool {
        self.export || self.mcs
    }

    fn tokens(self) -> String {
        let mut t = Vec::new();
        if self.mcs {
            t.push(MANAGED_BY_MULTI_CLUSTER_SERVICE);
        }
        if self.export {
            t.push(MANAGED_BY_SERVICE_EXPORT);
        }
        t.join(".")
    }
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

/// The report Work of one slice for `paths`; `kept` are finalizers of paths that left, which
/// their consumers remove once they have cleaned up.
fn report_work(cluster: &str, namespace: &str, service: &str, slice_name: &str, manifest: Value, paths: Paths, kept: &[String]) -> Value {
    let es = execution_space(cluster);
    let mut labels = serde_json::Map::new();
    labels.insert(WORK_MANAGED_BY_LABEL.into(), json!(paths.tokens()));
    let mut finalizers: Vec<String> = kept.to_vec();
    if paths.export {
        labels.insert(SERVICE_NAMESPACE_LABEL.into(), json!(namespace));
        labels.insert(SERVICE_NAME_LABEL.into(), json!(service));
        finalizers.push(ENDPOINTSLICE_FINALIZER.into());
    }
    if paths.mcs {
        labels.insert(MCS_NAMESPACE_LABEL.into(), json!(namespace));
        labels.insert(MCS_NAME_LABEL.into(), json!(service));
        finalizers.push(DISPATCH_FINALIZER.into());
    }
    finalizers.sort();
    finalizers.dedup();
    json!({
        "apiVersion": "work.karmada.io/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": work_name("EndpointSlice", slice_name, Some(namespace)),
            "namespace": es,
            "labels": labels,
            "finalizers": finalizers,
        },
        "spec": {"suspendDispatching": true, "workload": {"manifests": [manifest]}},
    })
}

/// Whether `w`'s one manifest is `manifest` as admission stores it (pruned, the Work's
/// permanent id and the managed keys recorded): comparing the raw manifest would find every
/// report changed and write it again, which would wake this controller again.
pub fn manifest_is_current(w: &Work, manifest: &Value) -> bool {
    let Some(stored) = w.spec.workload.as_ref().and_then(|t| t.manifests.as_ref()?.first()) else { return false };
    if stored == manifest || !manifest.is_object() {
        return stored == manifest;
    }
    let mut prepared = manifest.clone();
    flotilla_api::admission::karmada::prepare_work_manifest(&mut prepared, w.labels().get(WORK_PERMANENT_ID_LABEL).map(String::as_str));
    *stored == prepared
}

/// Whether `w` (a report) already is what [`report_work`] would write.
fn report_is_current(w: &Work, manifest: &Value, paths: Paths, namespace: &str, service: &str) -> bool {
    let l = w.labels();
    // The label is `value` when its path wants the slice, absent when not.
    let label_is = |key: &str, value: &str, wanted: bool| l.get(key).map(String::as_str) == wanted.then_some(value);
    let has = |f: &str| w.finalizers().iter().any(|x| x == f);
    manifest_is_current(w, manifest)
        && l.get(WORK_MANAGED_BY_LABEL).map(String::as_str) == Some(paths.tokens().as_str())
        && label_is(SERVICE_NAMESPACE_LABEL, namespace, paths.export)
        && label_is(SERVICE_NAME_LABEL, service, paths.export)
        && label_is(MCS_NAMESPACE_LABEL, namespace, paths.mcs)
        && label_is(MCS_NAME_LABEL, service, paths.mcs)
        && (!paths.export || has(ENDPOINTSLICE_FINALIZER))
        && (!paths.mcs || has(DISPATCH_FINALIZER))
}

/// Whether `w` names `namespace/service` with the labels `ns_label` and `name_label`.
fn names(w: &Work, ns_label: &str, name_label: &str, namespace: &str, service: &str) -> bool {
    w.labels().get(ns_label).map(String::as_str) == Some(namespace) && w.labels().get(name_label).map(String::as_str) == Some(service)
}

/// The reports of `namespace/service` among an execution space's Works (either path's), by
/// Work name.
fn reports(space: &[Arc<Work>], namespace: &str, service: &str) -> BTreeMap<String, Arc<Work>> {
    space
        .iter()
        .filter(|w| {
            is_report(w)
                && (names(w, SERVICE_NAMESPACE_LABEL, SERVICE_NAME_LABEL, namespace, service)
                    || names(w, MCS_NAMESPACE_LABEL, MCS_NAME_LABEL, namespace, service))
        })
        .map(|w| (w.name_any(), w.clone()))
        .collect()
}

/// Whether an execution space's Works hold a MultiClusterService marker naming its cluster a
/// provider of `namespace/service`.
fn mcs_wants(space: &[Arc<Work>], namespace: &str, service: &str) -> bool {
    space.iter().any(|w| w.metadata.deletion_timestamp.is_none() && is_mcs_marker(w) && names(w, MCS_NAMESPACE_LABEL, MCS_NAME_LABEL, namespace, service))
}

/// Whether the export path is used in an execution space: a ServiceExport propagated there, or
/// a report of that path.
fn wants_exports(space: &[Arc<Work>]) -> bool {
    space.iter().any(|w| carries_export(w) || (is_report(w) && w.labels().contains_key(SERVICE_NAME_LABEL)))
}

impl Context {
    /// The Works of `cluster`'s execution space (one pass over the cache).
    fn space(&self, cluster: &str) -> Vec<Arc<Work>> {
        let es = execution_space(cluster);
        self.works.state().into_iter().filter(|w| w.namespace().as_deref() == Some(es.as_str())).collect()
    }

    /// Whether `cluster`'s members should be watched: served here, not going, and its execution
    /// space holds a ServiceExport, a MultiClusterService marker or a report.
    fn wants_watch(&self, cluster: &str, space: &[Arc<Work>]) -> bool {
        let Some(c) = self.clusters.get(&reflector::ObjectRef::new(cluster)) else { return false };
        if !self.clients.reaches(&c) || c.metadata.deletion_timestamp.is_some() {
            return false;
        }
        space.iter().any(|w| is_report(w) || carries_export(w) || is_mcs_marker(w))
    }
}

async fn reconcile_cluster(ctx: &Arc<Context>, cluster: &str) -> Result<Next, Error> {
    let space = ctx.space(cluster);
    if !ctx.wants_watch(cluster, &space) {
        if ctx.clusters.get(&reflector::ObjectRef::new(cluster)).is_none() && ctx.members.lock().remove(cluster).is_some() {
            tracing::info!(controller = NAME, cluster, "stopped watching the member's exports");
        }
        return Ok(Next::Done);
    }
    let wants_exports = wants_exports(&space);
    {
        let mut members = ctx.members.lock();
        if let Some(m) = members.get_mut(cluster) {
            if wants_exports && m.exports.is_none() {
                m.exports = Some(watch_exports(ctx, cluster, &m.client, m.stop.clone()));
                tracing::info!(controller = NAME, cluster, "watching the member's ServiceExports");
            }
            return Ok(Next::Done);
        }
    }
    let c = ctx.clusters.get(&reflector::ObjectRef::new(cluster)).expect("wants_watch saw it");
    let member_err = |source| Error::Member { cluster: cluster.to_string(), source };
    let access = ctx.clients.access(&ctx.client, &c).await.map_err(member_err)?;
    let conn = ctx.watch_clients.connection(&access, ctx.config.watch_timeout).map_err(member_err)?;
    let stop = CancellationToken::new();
    let slices = spawn_watch(ctx, cluster, &conn.client, endpoint_slice_resource(), watcher::Config::default().labels(SERVICE_NAME), stop.clone(), |o| {
        Some((o.namespace()?, o.labels().get(SERVICE_NAME)?.clone()))
    });
    let exports = wants_exports.then(|| watch_exports(ctx, cluster, &conn.client, stop.clone()));
    tracing::info!(controller = NAME, cluster, exports = wants_exports, "watching the member's EndpointSlices");
    ctx.members.lock().insert(cluster.to_string(), MemberWatch { client: conn.client.clone(), slices, exports, stop });
    Ok(Next::Done)
}

fn watch_exports(ctx: &Arc<Context>, cluster: &str, member: &Client, stop: CancellationToken) -> Watched {
    spawn_watch(ctx, cluster, member, service_export_resource(), watcher::Config::default(), stop, |o| Some((o.namespace()?, o.name_any())))
}

/// A member watch whose events queue the Service `key` names; ends with `stop`. Once its first
/// list is in, every Service its objects or the cluster's reports name is queued (orphans too).
fn spawn_watch(
    ctx: &Arc<Context>,
    cluster: &str,
    member: &Client,
    resource: ApiResource,
    config: watcher::Config,
    stop: CancellationToken,
    key: impl Fn(&DynamicObject) -> Option<(String, String)> + Send + Sync + 'static,
) -> Watched {
    let api: Api<DynamicObject> = Api::all_with(member.clone(), &resource);
    let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let store = writer.as_reader();
    let synced = Arc::new(AtomicBool::new(false));
    let key = Arc::new(key);
    {
        let (ctx, cluster, synced, stop, store, key) = (ctx.clone(), cluster.to_string(), synced.clone(), stop.clone(), store.clone(), key.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = store.wait_until_ready() => {}
            }
            synced.store(true, Ordering::SeqCst);
            let es = execution_space(&cluster);
            let mut keys: Vec<(String, String)> = store.state().iter().filter_map(|o| key(o)).collect();
            keys.extend(ctx.works.state().iter().filter(|w| w.namespace().as_deref() == Some(es.as_str())).filter_map(|w| service_of(w)));
            for (namespace, name) in keys {
                ctx.queue.add(Key::Service { cluster: cluster.clone(), namespace, name });
            }
        });
    }
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
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    if !failing {
                        tracing::warn!(controller = NAME, cluster = %cluster, kind = %resource.kind, error = %e, "member watch failing; retrying");
                    }
                    failing = true;
                }
            }
        }
    });
    Watched { store, synced }
}

/// The (namespace, Service) a Work of either path concerns.
fn service_of(w: &Work) -> Option<(String, String)> {
    let l = w.labels();
    let pair = |ns: &str, name: &str| Some((l.get(ns)?.clone(), l.get(name)?.clone()));
    pair(SERVICE_NAMESPACE_LABEL, SERVICE_NAME_LABEL).or_else(|| pair(MCS_NAMESPACE_LABEL, MCS_NAME_LABEL))
}

async fn reconcile_service(ctx: &Arc<Context>, cluster: &str, namespace: &str, service: &str) -> Result<Next, Error> {
    let (exported, slices) = {
        let members = ctx.members.lock();
        let Some(m) = members.get(cluster).filter(|m| m.slices.ready()) else { return Ok(Next::Done) };
        let exported = match &m.exports {
            // Its first list decides; the reconcile comes again once it is in.
            Some(e) if !e.ready() => return Ok(Next::Done),
            Some(e) => e.store.get(&reflector::ObjectRef::new_with(service, service_export_resource()).within(namespace)).is_some(),
            None => false,
        };
        let slices: Vec<Arc<DynamicObject>> = m
            .slices
            .store
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
    let space = ctx.space(cluster);
    let paths = Paths { export: exported, mcs: mcs_wants(&space, namespace, service) };
    let es = execution_space(cluster);
    let existing = reports(&space, namespace, service);
    let api: Api<Work> = Api::namespaced(ctx.client.clone(), &es);
    let mut wanted = BTreeMap::new();
    if paths.any() && !slices.is_empty() {
        let ips = if paths.export { cluster_ips(ctx, cluster, namespace, service).await? } else { Vec::new() };
        for slice in &slices {
            let name = work_name("EndpointSlice", &slice.name_any(), Some(namespace));
            let manifest = report_manifest(slice, &es, &name, &ips).map_err(|source| Error::Prune { cluster: cluster.to_string(), source })?;
            wanted.insert(name.clone(), ());
            let current = existing.get(&name);
            if current.is_some_and(|w| report_is_current(w, &manifest, paths, namespace, service)) {
                continue;
            }
            // A path that left keeps its finalizer until its consumer has cleaned up after it.
            let kept: Vec<String> = current
                .map(|w| w.finalizers().iter().filter(|f| *f == ENDPOINTSLICE_FINALIZER || *f == DISPATCH_FINALIZER).cloned().collect())
                .unwrap_or_default();
            let work = report_work(cluster, namespace, service, &slice.name_any(), manifest, paths, &kept);
            api.patch(&name, &PatchParams::apply(NAME).force(), &Patch::Apply(&work)).await.map_err(|source| Error::Work {
                step: "writing",
                namespace: es.clone(),
                name: name.clone(),
                source,
            })?;
            tracing::debug!(controller = NAME, cluster, work = %name, paths = %paths.tokens(), "slice reported");
        }
    }
    for (name, work) in existing {
        if wanted.contains_key(&name) || work.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::debug!(controller = NAME, cluster, work = %name, "report withdrawn"),
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
                if is_report(w) || carries_export(w) || is_mcs_marker(w) {
                    keys.push(Key::Cluster(cluster.clone()));
                }
                if let Some((namespace, name)) = service_of(w) {
                    keys.push(Key::Service { cluster, namespace, name });
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
        let w = report_work("m1", "shop", "web", "web-abc", m.clone(), Paths { export: true, mcs: false }, &[]);
        assert_eq!(w["metadata"]["namespace"], "karmada-es-m1");
        assert_eq!(w["metadata"]["name"], work_name("EndpointSlice", "web-abc", Some("shop")));
        assert_eq!(w["metadata"]["labels"][WORK_MANAGED_BY_LABEL], "ServiceExport");
        assert_eq!(w["spec"]["suspendDispatching"], true);
        assert_eq!(w["metadata"]["finalizers"], json!([ENDPOINTSLICE_FINALIZER]));
        // Both paths: one Work, both marks; a path that left keeps its finalizer for its consumer.
        let both = report_work("m1", "shop", "web", "web-abc", m.clone(), Paths { export: true, mcs: true }, &[]);
        assert_eq!(both["metadata"]["labels"][WORK_MANAGED_BY_LABEL], "MultiClusterService.ServiceExport");
        assert_eq!(both["metadata"]["labels"][MCS_NAME_LABEL], "web");
        assert_eq!(both["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
        let mcs_only = report_work("m1", "shop", "web", "web-abc", m.clone(), Paths { export: false, mcs: true }, &[ENDPOINTSLICE_FINALIZER.into()]);
        assert_eq!(mcs_only["metadata"]["labels"][WORK_MANAGED_BY_LABEL], "MultiClusterService");
        assert!(mcs_only["metadata"]["labels"].get(SERVICE_NAME_LABEL).is_none());
        assert_eq!(mcs_only["metadata"]["finalizers"], json!([ENDPOINTSLICE_FINALIZER, DISPATCH_FINALIZER]));
        let mut work: Work = serde_json::from_value(mcs_only).unwrap();
        assert!(report_is_current(&work, &m, Paths { export: false, mcs: true }, "shop", "web"));
        // As admission stores it: the Work's permanent id and the managed keys in the manifest.
        work.metadata.labels.get_or_insert_default().insert(WORK_PERMANENT_ID_LABEL.into(), "id-1".into());
        let mut stored = m.clone();
        flotilla_api::admission::karmada::prepare_work_manifest(&mut stored, Some("id-1"));
        assert_ne!(stored, m);
        work.spec.workload.as_mut().unwrap().manifests = Some(vec![stored]);
        assert!(report_is_current(&work, &m, Paths { export: false, mcs: true }, "shop", "web"), "what admission added is not a change");
        assert!(!report_is_current(&work, &m, Paths { export: true, mcs: true }, "shop", "web"));
    }
}
