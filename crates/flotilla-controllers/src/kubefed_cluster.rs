//! KubeFed's cluster registry on the one Cluster registry: `cluster.karmada.io` `Cluster` is the
//! single source of truth, and `KubeFedCluster` (in `kube-federation-system`) is a rendering of
//! it — or, when a user writes a KubeFedCluster themselves (kubefedctl's way of joining), an
//! input that is translated once into a Cluster.
//!
//! Per cluster name, the controller decides ([`plan`]):
//! - **Projected** — a Cluster (joined with `flotilla join`, or created directly) gets a
//!   KubeFedCluster of the same name labelled [`PROJECTED_LABEL`], owned by the Cluster, with
//!   `apiEndpoint`, `caBundle`, `proxyURL` and `disabledTLSValidations: ["*"]` (for
//!   `insecureSkipTLSVerification`) taken from the Cluster, and `secretRef` naming
//!   [`projected_secret_name`] — a Secret in the system namespace holding only `token`, copied
//!   from the Cluster's own `karmada-cluster/<secretRef>` Secret and owned by the KubeFedCluster,
//!   as kubefedctl writes its Secret.
//! - **Registered** — a KubeFedCluster without that label, with its Secret, creates a Cluster
//!   annotated [`REGISTERED_FROM_ANNOTATION`] and its credential Secret `karmada-cluster/<name>`
//!   (`token` from the KubeFedCluster's Secret, `caBundle` from its `caBundle`). Its spec keeps
//!   following the KubeFedCluster; deleting the KubeFedCluster deletes the Cluster (member
//!   workloads are left running, as `kubefedctl unjoin` leaves them).
//! - A KubeFedCluster named like a Cluster that did not come from it is left alone and gets a
//!   Warning Event: one name, one cluster.
//!
//! Status, both ways: one probe (the cluster status controller's `Ready` condition on the
//! Cluster), two renderings ([`kubefed_conditions`]), so KubeFed tools read `Ready`/`Offline`
//! exactly as KubeFed's health check writes them:
//!
//! | Cluster `Ready` (Karmada)                 | KubeFedCluster conditions (KubeFed)                          |
//! |-------------------------------------------|---------------------------------------------------------------|
//! | True `ClusterReady`                       | `Ready=True` `ClusterReady` "/healthz responded with ok"      |
//! | False `ClusterNotReady` (reachable)       | `Ready=False` `ClusterNotReady` + `Offline=False` `ClusterReachable` |
//! | False `ClusterNotReachable` (any cause)   | `Offline=True` `ClusterNotReachable`, no `Ready`              |
//! | none yet                                  | none                                                          |
//!
//! `lastProbeTime` is the time the observed state last changed (the Cluster condition's
//! `lastTransitionTime`), not every probe: one write per change instead of one per cluster per
//! period. `kubernetesVersion` is the Cluster's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSpec, ClusterSyncMode, LocalSecretReference};
use flotilla_api::federation::kubefed::core::{
    ClusterCondition, DEFAULT_SYSTEM_NAMESPACE, KubeFedCluster, KubeFedClusterSpec, KubeFedClusterStatus, LocalSecretReference as KubeFedSecretRef,
    TlsValidation,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use flotilla_runtime::{Events, condition_status};
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "kubefed-cluster";

/// On a KubeFedCluster Flotilla renders from a Cluster.
pub const PROJECTED_LABEL: &str = "kubefed.flotilla.io/projected-from-cluster";
/// On a Cluster registered from a user's KubeFedCluster: `<namespace>/<name>` of it.
pub const REGISTERED_FROM_ANNOTATION: &str = "kubefed.flotilla.io/registered-from";
/// The namespace of Karmada's member credentials.
pub const CLUSTER_SECRET_NAMESPACE: &str = "karmada-cluster";

/// The Secret in the system namespace a projected KubeFedCluster's `secretRef` names.
pub fn projected_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubefed-token")
}

#[derive(Clone, Debug)]
pub struct Config {
    /// KubeFed's system namespace.
    pub namespace: String,
    pub workers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { namespace: DEFAULT_SYSTEM_NAMESPACE.into(), workers: 1 }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cluster {name}: {step}: {source}")]
pub struct Error {
    name: String,
    step: &'static str,
    source: kube::Error,
}

/// What to do for one cluster name.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Render the Cluster as a KubeFedCluster (and its token Secret), then its status.
    Project,
    /// Create or follow the Cluster from the user's KubeFedCluster, then write its status.
    Register,
    /// Delete the projected KubeFedCluster: its Cluster is gone.
    DeleteProjection,
    /// Delete the Cluster: the KubeFedCluster it was registered from is gone.
    DeleteRegistered,
    /// A user's KubeFedCluster collides with a Cluster that did not come from it.
    Collision,
    Nothing,
}

fn registered_from(cluster: &Cluster) -> Option<&str> {
    cluster.annotations().get(REGISTERED_FROM_ANNOTATION).map(String::as_str)
}

fn is_projection(kfc: &KubeFedCluster) -> bool {
    kfc.labels().get(PROJECTED_LABEL).is_some_and(|v| v == "true")
}

/// The decision for one name, from what exists (objects being deleted count as gone).
pub fn plan(cluster: Option<&Cluster>, kfc: Option<&KubeFedCluster>, namespace: &str) -> Plan {
    let cluster = cluster.filter(|c| c.metadata.deletion_timestamp.is_none());
    let kfc = kfc.filter(|k| k.metadata.deletion_timestamp.is_none());
    match (cluster, kfc) {
        (None, None) => Plan::Nothing,
        (None, Some(k)) if is_projection(k) => Plan::DeleteProjection,
        (None, Some(_)) => Plan::Register,
        (Some(c), None) if registered_from(c).is_some() => Plan::DeleteRegistered,
        // KubeFed reaches every member itself: a cluster with no endpoint (a Pull cluster's
        // agent reaches it) has no KubeFedCluster.
        (Some(c), None) if c.spec.api_endpoint.as_deref().is_none_or(str::is_empty) => Plan::Nothing,
        (Some(_), None) => Plan::Project,
        (Some(c), Some(k)) if is_projection(k) => {
            if c.spec.api_endpoint.as_deref().is_none_or(str::is_empty) {
                Plan::DeleteProjection
            } else if registered_from(c).is_some() {
                Plan::Nothing
            } else {
                Plan::Project
            }
        }
        (Some(c), Some(k)) => {
            let from_this = registered_from(c) == Some(&format!("{namespace}/{}", k.name_any()));
            if from_this { Plan::Register } else { Plan::Collision }
        }
    }
}

fn time_of(c: &Condition) -> Time {
    c.last_transition_time.clone()
}

/// KubeFed's conditions for the Cluster's `Ready` condition (see the module's table).
pub fn kubefed_conditions(ready: Option<&Condition>) -> Vec<ClusterCondition> {
    let Some(r) = ready else { return Vec::new() };
    let t = time_of(r);
    let cond = |type_: &str, status: &str, reason: &str, message: String| ClusterCondition {
        type_: type_.into(),
        status: status.into(),
        last_probe_time: t.clone(),
        last_transition_time: Some(t.clone()),
        reason: Some(reason.into()),
        message: Some(message),
    };
    match (r.status.as_str(), r.reason.as_str()) {
        ("True", _) => vec![cond("Ready", "True", "ClusterReady", "/healthz responded with ok".into())],
        ("False", "ClusterNotReady") => vec![
            cond("Ready", "False", "ClusterNotReady", "/healthz responded without ok".into()),
            cond("Offline", "False", "ClusterReachable", "cluster is reachable".into()),
        ],
        ("False", _) => vec![cond("Offline", "True", "ClusterNotReachable", r.message.clone())],
        _ => Vec::new(),
    }
}

/// The KubeFedCluster status for a Cluster: its conditions, version, and its region and zones
/// from the Cluster's `spec.region` and `spec.zones` (or the older single `spec.zone`), where
/// KubeFed read them from the member's Nodes' topology labels.
pub fn kubefed_status(cluster: &Cluster) -> KubeFedClusterStatus {
    let ready = condition_status(cluster.status.as_ref().and_then(|s| s.conditions.as_deref()), "Ready");
    let mut zones: Vec<String> = cluster.spec.zones.clone().unwrap_or_default();
    if zones.is_empty() {
        zones.extend(cluster.spec.zone.clone());
    }
    zones.retain(|z| !z.is_empty());
    KubeFedClusterStatus {
        conditions: kubefed_conditions(ready),
        zones: (!zones.is_empty()).then_some(zones),
        region: cluster.spec.region.clone().filter(|r| !r.is_empty()),
        kubernetes_version: cluster.status.as_ref().and_then(|s| s.kubernetes_version.clone()),
    }
}

/// The projected KubeFedCluster's spec.
pub fn projected_spec(cluster: &Cluster, ca_bundle: Option<String>) -> KubeFedClusterSpec {
    let name = cluster.name_any();
    KubeFedClusterSpec {
        api_endpoint: cluster.spec.api_endpoint.clone().unwrap_or_default(),
        ca_bundle,
        secret_ref: KubeFedSecretRef { name: projected_secret_name(&name) },
        disabled_tls_validations: cluster.spec.insecure_skip_tls_verification.unwrap_or(false).then(|| vec![TlsValidation::All]),
        proxy_url: cluster.spec.proxy_url.clone(),
    }
}

/// The Cluster spec a user's KubeFedCluster registers: Push mode, the endpoint as a URL, the
/// credential in `karmada-cluster/<name>`.
pub fn registered_spec(kfc: &KubeFedCluster, have: Option<&ClusterSpec>) -> ClusterSpec {
    let endpoint = &kfc.spec.api_endpoint;
    let endpoint = if endpoint.contains("://") { endpoint.clone() } else { format!("https://{endpoint}") };
    let mut spec = have
        .cloned()
        .unwrap_or_else(|| ClusterSpec { resource_models: Some(flotilla_api::admission::karmada::default_resource_models()), ..Default::default() });
    spec.sync_mode = ClusterSyncMode::Push;
    spec.api_endpoint = Some(endpoint);
    spec.secret_ref = Some(LocalSecretReference { namespace: CLUSTER_SECRET_NAMESPACE.into(), name: kfc.name_any() });
    // KubeFed can skip only some checks; Flotilla verifies all or none.
    let skip = kfc.spec.disabled_tls_validations.iter().flatten().any(|v| *v == TlsValidation::All);
    spec.insecure_skip_tls_verification = skip.then_some(true);
    spec.proxy_url = kfc.spec.proxy_url.clone();
    spec
}

struct Context {
    client: Client,
    config: Config,
    events: Events,
    clusters: Store<Cluster>,
    kfcs: Store<KubeFedCluster>,
}

fn apply_params() -> PatchParams {
    PatchParams::apply(NAME).force()
}

fn owner_ref<K: Resource<DynamicType = ()>>(obj: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: obj.meta().name.clone().unwrap_or_default(),
        uid: obj.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

async fn read_secret(client: &Client, namespace: &str, name: &str) -> Result<Option<BTreeMap<String, ByteString>>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(secrets.get_opt(name).await?.and_then(|s| s.data))
}

async fn project(ctx: &Context, cluster: &Cluster) -> Result<Next, Error> {
    let name = cluster.name_any();
    let err = |step: &'static str| {
        let name = name.clone();
        move |source| Error { name, step, source }
    };
    let ns = ctx.config.namespace.as_str();
    let credential = match &cluster.spec.secret_ref {
        Some(r) => read_secret(&ctx.client, &r.namespace, &r.name).await.map_err(err("reading the cluster's credential"))?,
        None => None,
    };
    let ca_bundle = credential.as_ref().and_then(|d| d.get("caBundle")).map(|b| base64_encode(&b.0));
    let kfcs: Api<KubeFedCluster> = Api::namespaced(ctx.client.clone(), ns);
    let mut kfc = KubeFedCluster::new(&name, projected_spec(cluster, ca_bundle));
    kfc.metadata.labels = Some(BTreeMap::from([(PROJECTED_LABEL.to_string(), "true".to_string())]));
    kfc.metadata.owner_references = Some(vec![owner_ref(cluster)]);
    let mut value = serde_json::to_value(&kfc).unwrap_or_default();
    value["apiVersion"] = json!(KubeFedCluster::api_version(&()));
    value["kind"] = json!("KubeFedCluster");
    value.as_object_mut().map(|o| o.remove("status"));
    let have = ctx.kfcs.get(&ObjectRef::new(&name).within(ns));
    let stored = if have.as_ref().is_some_and(|h| h.spec == kfc.spec && h.metadata.owner_references == kfc.metadata.owner_references && is_projection(h)) {
        have.unwrap()
    } else {
        Arc::new(kfcs.patch(&name, &apply_params(), &Patch::Apply(&value)).await.map_err(err("writing the KubeFedCluster"))?)
    };
    // The token, in the system namespace, as kubefedctl stores it (only `token`).
    if let Some(token) = credential.as_ref().and_then(|d| d.get("token")) {
        let secret_name = projected_secret_name(&name);
        let have = read_secret(&ctx.client, ns, &secret_name).await.map_err(err("reading the projected token"))?;
        if have.as_ref().and_then(|d| d.get("token")) != Some(token) {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(secret_name.clone()),
                    namespace: Some(ns.into()),
                    labels: Some(BTreeMap::from([(PROJECTED_LABEL.to_string(), "true".to_string())])),
                    owner_references: Some(vec![owner_ref(&*stored)]),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(BTreeMap::from([("token".to_string(), token.clone())])),
                ..Default::default()
            };
            let mut value = serde_json::to_value(&secret).unwrap_or_default();
            value["apiVersion"] = json!("v1");
            value["kind"] = json!("Secret");
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
            secrets.patch(&secret_name, &apply_params(), &Patch::Apply(&value)).await.map_err(err("writing the projected token"))?;
        }
    }
    write_status(ctx, &stored, cluster).await
}

async fn write_status(ctx: &Context, kfc: &KubeFedCluster, cluster: &Cluster) -> Result<Next, Error> {
    let status = kubefed_status(cluster);
    if kfc.status.as_ref() == Some(&status) {
        return Ok(Next::Done);
    }
    let kfcs: Api<KubeFedCluster> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let patch = json!({"status": status});
    match kfcs.patch_status(&kfc.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(source) => Err(Error { name: kfc.name_any(), step: "writing the KubeFedCluster status", source }),
    }
}

async fn register(ctx: &Context, kfc: &KubeFedCluster, cluster: Option<&Cluster>) -> Result<Next, Error> {
    let name = kfc.name_any();
    let err = |step: &'static str| {
        let name = name.clone();
        move |source| Error { name, step, source }
    };
    let ns = ctx.config.namespace.as_str();
    let Some(token) = read_secret(&ctx.client, ns, &kfc.spec.secret_ref.name)
        .await
        .map_err(err("reading the KubeFedCluster's secret"))?
        .and_then(|d| d.get("token").cloned())
    else {
        let note = format!("Secret {ns}/{} has no `token`; the cluster is registered once it does", kfc.spec.secret_ref.name);
        ctx.events.publish(kfc, true, "SecretMissing", "Register", note).await;
        return Ok(Next::After(Duration::from_secs(10)));
    };
    let mut data = BTreeMap::from([("token".to_string(), token)]);
    if let Some(ca) = kfc.spec.ca_bundle.as_deref().and_then(base64_decode) {
        data.insert("caBundle".to_string(), ByteString(ca));
    }
    let have = read_secret(&ctx.client, CLUSTER_SECRET_NAMESPACE, &name).await.map_err(err("reading the cluster credential"))?;
    if have.as_ref() != Some(&data) {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.client.clone());
        let ns_obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CLUSTER_SECRET_NAMESPACE}});
        namespaces.patch(CLUSTER_SECRET_NAMESPACE, &apply_params(), &Patch::Apply(&ns_obj)).await.map_err(err("creating namespace karmada-cluster"))?;
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": CLUSTER_SECRET_NAMESPACE},
            "data": data,
        });
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), CLUSTER_SECRET_NAMESPACE);
        secrets.patch(&name, &apply_params(), &Patch::Apply(&secret)).await.map_err(err("storing the cluster credential"))?;
    }
    let spec = registered_spec(kfc, cluster.map(|c| &c.spec));
    let from = format!("{ns}/{name}");
    let stored = match cluster {
        Some(c) if c.spec == spec && registered_from(c) == Some(from.as_str()) => Arc::new(c.clone()),
        _ => {
            let mut value = json!({
                "apiVersion": Cluster::api_version(&()), "kind": "Cluster",
                "metadata": {"name": name, "annotations": {REGISTERED_FROM_ANNOTATION: from}},
                "spec": spec,
            });
            if cluster.is_none() {
                ctx.events.publish(kfc, false, "ClusterRegistered", "Register", format!("registered as Cluster {name} (cluster.karmada.io/v1alpha1)")).await;
            } else {
                value["metadata"]["resourceVersion"] = json!(cluster.and_then(|c| c.metadata.resource_version.clone()));
            }
            let clusters: Api<Cluster> = Api::all(ctx.client.clone());
            Arc::new(clusters.patch(&name, &apply_params(), &Patch::Apply(&value)).await.map_err(err("writing the Cluster"))?)
        }
    };
    write_status(ctx, kfc, &stored).await
}

async fn reconcile(name: String, ctx: Arc<Context>) -> Result<Next, Error> {
    let ns = ctx.config.namespace.clone();
    let cluster = ctx.clusters.get(&ObjectRef::new(&name));
    let kfc = ctx.kfcs.get(&ObjectRef::new(&name).within(&ns));
    let err = |step: &'static str| {
        let name = name.clone();
        move |source| Error { name, step, source }
    };
    match plan(cluster.as_deref(), kfc.as_deref(), &ns) {
        Plan::Nothing => Ok(Next::Done),
        Plan::Project => project(&ctx, cluster.as_deref().unwrap()).await,
        Plan::Register => register(&ctx, kfc.as_deref().unwrap(), cluster.as_deref()).await,
        Plan::DeleteProjection => {
            let kfcs: Api<KubeFedCluster> = Api::namespaced(ctx.client.clone(), &ns);
            match kfcs.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(err("deleting the projected KubeFedCluster")(e)),
            }
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            match secrets.delete(&projected_secret_name(&name), &DeleteParams::background()).await {
                Ok(_) => Ok(Next::Done),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
                Err(e) => Err(err("deleting the projected token")(e)),
            }
        }
        Plan::DeleteRegistered => {
            let clusters: Api<Cluster> = Api::all(ctx.client.clone());
            match clusters.delete(&name, &DeleteParams::background()).await {
                Ok(_) => Ok(Next::Done),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
                Err(e) => Err(err("deleting the Cluster registered from a deleted KubeFedCluster")(e)),
            }
        }
        Plan::Collision => {
            let kfc = kfc.unwrap();
            let note = format!("Cluster {name} already exists and was not registered from this KubeFedCluster; rename one of them");
            ctx.events.publish(&*kfc, true, "ClusterNameTaken", "Register", note).await;
            Ok(Next::Done)
        }
    }
}

/// What a reconcile reads of a Cluster: its spec, annotations, deletion, `Ready` condition
/// and Kubernetes version.
fn cluster_fingerprint(c: &Cluster) -> String {
    let ready = condition_status(c.status.as_ref().and_then(|s| s.conditions.as_deref()), "Ready");
    json!([c.spec, c.metadata.annotations, c.metadata.deletion_timestamp, ready, c.status.as_ref().and_then(|s| s.kubernetes_version.as_ref())]).to_string()
}

/// Base64, as `[]byte` fields are written in JSON.
fn base64_encode(bytes: &[u8]) -> String {
    serde_json::to_value(ByteString(bytes.to_vec())).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    serde_json::from_value::<ByteString>(json!(s.trim())).ok().map(|b| b.0)
}

/// Run the controller until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<String>> = WorkQueue::new(Duration::from_millis(200), Duration::from_secs(60));
    let q = queue.clone();
    // Queue a Cluster only when what a reconcile reads changed (not on every status write).
    let seen: parking_lot::Mutex<std::collections::HashMap<String, String>> = Default::default();
    let (clusters, clusters_task) = rt.informers.watch::<Cluster>(move |c: &Cluster, deleted| {
        let name = c.name_any();
        if deleted {
            seen.lock().remove(&name);
            q.add(name);
            return;
        }
        let print = cluster_fingerprint(c);
        if seen.lock().insert(name.clone(), print.clone()).as_ref() != Some(&print) {
            q.add(name);
        }
    });
    let q = queue.clone();
    let namespace = config.namespace.clone();
    let (kfcs, kfcs_task) = rt.informers.watch::<KubeFedCluster>(move |k: &KubeFedCluster, _| {
        if k.metadata.namespace.as_deref() == Some(namespace.as_str()) {
            q.add(k.name_any())
        }
    });
    let ctx = Arc::new(Context { events: Events::new(client.clone(), NAME), client, config: config.clone(), clusters, kfcs });
    let workers = run_workers(queue, config.workers, NAME, move |name| reconcile(name, ctx.clone()));
    tokio::select! {
        _ = clusters_task => tracing::warn!(controller = NAME, "cluster watch ended"),
        _ = kfcs_task => tracing::warn!(controller = NAME, "KubeFedCluster watch ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str, annotations: &[(&str, &str)]) -> Cluster {
        let mut c = Cluster::new(name, ClusterSpec { api_endpoint: Some("https://127.0.0.1:6443".into()), ..Default::default() });
        c.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        c
    }

    fn kfc(name: &str, projected: bool) -> KubeFedCluster {
        let mut k = KubeFedCluster::new(
            name,
            KubeFedClusterSpec { api_endpoint: "127.0.0.1:6443".into(), secret_ref: KubeFedSecretRef { name: format!("{name}-x") }, ..Default::default() },
        );
        if projected {
            k.metadata.labels = Some(BTreeMap::from([(PROJECTED_LABEL.to_string(), "true".to_string())]));
        }
        k
    }

    #[test]
    fn one_name_one_cluster_translated_once() {
        let ns = DEFAULT_SYSTEM_NAMESPACE;
        let joined = cluster("a", &[]);
        let registered = cluster("a", &[(REGISTERED_FROM_ANNOTATION, "kube-federation-system/a")]);
        assert_eq!(plan(Some(&joined), None, ns), Plan::Project);
        assert_eq!(plan(Some(&joined), Some(&kfc("a", true)), ns), Plan::Project);
        assert_eq!(plan(None, Some(&kfc("a", true)), ns), Plan::DeleteProjection);
        assert_eq!(plan(None, Some(&kfc("a", false)), ns), Plan::Register);
        assert_eq!(plan(Some(&registered), Some(&kfc("a", false)), ns), Plan::Register);
        assert_eq!(plan(Some(&registered), None, ns), Plan::DeleteRegistered);
        // A registered Cluster is never projected back over its source.
        assert_eq!(plan(Some(&registered), Some(&kfc("a", true)), ns), Plan::Nothing);
        assert_eq!(plan(Some(&joined), Some(&kfc("a", false)), ns), Plan::Collision);
        assert_eq!(plan(None, None, ns), Plan::Nothing);
    }

    fn ready(status: &str, reason: &str) -> Condition {
        flotilla_runtime::condition("Ready", status == "True", reason, "why", None)
    }

    #[test]
    fn one_probe_two_renderings() {
        let render = |c: Option<Condition>| {
            kubefed_conditions(c.as_ref()).into_iter().map(|c| format!("{}={} {}", c.type_, c.status, c.reason.unwrap_or_default())).collect::<Vec<_>>()
        };
        assert_eq!(render(Some(ready("True", "ClusterReady"))), ["Ready=True ClusterReady"]);
        assert_eq!(render(Some(ready("False", "ClusterNotReady"))), ["Ready=False ClusterNotReady", "Offline=False ClusterReachable"]);
        assert_eq!(render(Some(ready("False", "ClusterNotReachable"))), ["Offline=True ClusterNotReachable"]);
        assert!(render(None).is_empty());
        let ok = kubefed_conditions(Some(&ready("True", "ClusterReady")));
        assert_eq!(ok[0].message.as_deref(), Some("/healthz responded with ok"));
    }

    #[test]
    fn region_and_zones_come_from_the_cluster() {
        let mut c = cluster("a", &[]);
        assert_eq!((kubefed_status(&c).region, kubefed_status(&c).zones), (None, None));
        c.spec.region = Some("us-west1".into());
        c.spec.zone = Some("us-west1-a".into());
        assert_eq!(kubefed_status(&c).region.as_deref(), Some("us-west1"));
        assert_eq!(kubefed_status(&c).zones, Some(vec!["us-west1-a".to_string()]), "the single zone when zones is unset");
        c.spec.zones = Some(vec!["us-west1-b".into(), "us-west1-c".into()]);
        assert_eq!(kubefed_status(&c).zones, Some(vec!["us-west1-b".to_string(), "us-west1-c".to_string()]));
    }

    #[test]
    fn specs_map_both_ways() {
        let mut c = cluster("a", &[]);
        c.spec.insecure_skip_tls_verification = Some(true);
        c.spec.proxy_url = Some("socks5://p:1080".into());
        let s = projected_spec(&c, Some("Q0E=".into()));
        assert_eq!(s.api_endpoint, "https://127.0.0.1:6443");
        assert_eq!(s.secret_ref.name, "a-kubefed-token");
        assert_eq!(s.disabled_tls_validations, Some(vec![TlsValidation::All]));
        assert_eq!(s.ca_bundle.as_deref(), Some("Q0E="));
        let mut k = kfc("b", false);
        k.spec.disabled_tls_validations = Some(vec![TlsValidation::SubjectName]);
        let r = registered_spec(&k, None);
        assert_eq!(r.api_endpoint.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(r.secret_ref, Some(LocalSecretReference { namespace: "karmada-cluster".into(), name: "b".into() }));
        assert_eq!(r.insecure_skip_tls_verification, None, "only `*` skips verification");
        assert_eq!(r.sync_mode, ClusterSyncMode::Push);
    }
}
