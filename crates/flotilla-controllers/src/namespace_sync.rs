//! Namespace auto-propagation (Karmada's `namespace` controller): every namespace on the
//! control plane reaches every member cluster as a Work of its own, so a propagated object
//! always finds its namespace, with the ClusterOverridePolicies that select it for that cluster
//! applied. Skipped: reserved namespaces, `default`, and namespaces labelled
//! `namespace.karmada.io/skip-auto-propagation: "true"`.
//!
//! Deviation, for safety: these Works carry `preserveResourcesOnDeletion: true`. Deleting a
//! namespace on the control plane (or its label asking to skip it) removes the Works but leaves
//! the member namespaces — and whatever else lives in them — running; delete them in the member
//! if that is what you want.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::admission::karmada::prepare_work_manifest;
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::{execution_space, work_name};
use flotilla_api::federation::karmada::policy::ClusterOverridePolicy;
use flotilla_api::federation::karmada::work::{
    EXECUTION_FINALIZER, MANAGED_LABEL, WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, WORK_PERMANENT_ID_LABEL, Work, WorkSpec, WorkloadTemplate,
};
use flotilla_api::overrides;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::detector::is_reserved_namespace;
use flotilla_runtime::{Next, WorkQueue, run_workers};

pub const NAME: &str = "namespace-sync";

/// Label on a namespace that keeps it on the control plane only.
pub const SKIP_AUTO_PROPAGATION_LABEL: &str = "namespace.karmada.io/skip-auto-propagation";

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 1 }
    }
}

/// Whether namespace `ns` is propagated to the members.
pub fn propagates(ns: &Namespace) -> bool {
    let name = ns.name_any();
    let skipped = ns.labels().get(SKIP_AUTO_PROPAGATION_LABEL).is_some_and(|v| v == "true");
    !(name == "default" || is_reserved_namespace(&name) || skipped || ns.metadata.deletion_timestamp.is_some())
}

/// The Work that carries namespace `ns` to `cluster` (whose execution space is `space`), with
/// the ClusterOverridePolicies among `cops` that select it there applied.
pub fn namespace_work(ns: &Namespace, cluster: &Cluster, space: &str, work_id: &str, cops: &[ClusterOverridePolicy]) -> Result<Work, String> {
    let name = work_name("Namespace", &ns.name_any(), None);
    let template = serde_json::to_value(ns).map_err(|e| e.to_string())?;
    let mut manifest = flotilla_api::interpreter::prune_for_work(&template).map_err(|e| e.to_string())?;
    let chosen = overrides::applicable(&manifest, cluster, cops, &[]);
    let applied =
        overrides::apply(&mut manifest, &chosen).map_err(|e| format!("applying cluster override policies for cluster {}: {e}", cluster.name_any()))?;
    if let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(labels) = meta.entry("labels").or_insert_with(|| json!({})).as_object_mut() {
            labels.insert(MANAGED_LABEL.into(), json!("true"));
        }
        if let Some(annotations) = meta.entry("annotations").or_insert_with(|| json!({})).as_object_mut() {
            annotations.insert(WORK_NAMESPACE_ANNOTATION.into(), json!(space));
            annotations.insert(WORK_NAME_ANNOTATION.into(), json!(name));
        }
    }
    prepare_work_manifest(&mut manifest, Some(work_id));
    let mut work = Work::new(
        &name,
        WorkSpec {
            workload: Some(WorkloadTemplate { manifests: Some(vec![manifest]) }),
            suspend_dispatching: None,
            preserve_resources_on_deletion: Some(true),
        },
    );
    work.metadata.namespace = Some(space.into());
    work.metadata.labels = Some(BTreeMap::from([(WORK_PERMANENT_ID_LABEL.to_string(), work_id.to_string())]));
    let recorded: BTreeMap<String, String> = applied.annotations().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    if !recorded.is_empty() {
        work.metadata.annotations = Some(recorded);
    }
    work.metadata.finalizers = Some(vec![EXECUTION_FINALIZER.into()]);
    Ok(work)
}

#[derive(Debug, thiserror::Error)]
#[error("namespace {namespace}: {message}")]
pub struct Error {
    namespace: String,
    message: String,
}

struct Context {
    client: Client,
    namespaces: Store<Namespace>,
    clusters: Store<Cluster>,
    works: Store<Work>,
    cops: Store<ClusterOverridePolicy>,
}

async fn reconcile(namespace: String, ctx: Arc<Context>) -> Result<Next, Error> {
    let err = |message: String| Error { namespace: namespace.clone(), message };
    let ns = ctx.namespaces.get(&ObjectRef::new(&namespace));
    let wanted = ns.as_deref().is_some_and(propagates);
    let name = work_name("Namespace", &namespace, None);
    for cluster in ctx.clusters.state() {
        let space = execution_space(&cluster.name_any());
        // Built only to write: most rounds find every Work as wanted.
        let works = || Api::<Work>::namespaced(ctx.client.clone(), &space);
        let existing = ctx.works.get(&ObjectRef::new(&name).within(&space));
        if !wanted || cluster.metadata.deletion_timestamp.is_some() {
            if existing.is_some_and(|w| w.metadata.deletion_timestamp.is_none()) {
                match works().delete(&name, &DeleteParams::default()).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(e) => return Err(err(e.to_string())),
                }
            }
            continue;
        }
        let Some(ns) = ns.as_deref() else { continue };
        let work_id = existing
            .as_ref()
            .and_then(|w| w.metadata.labels.as_ref()?.get(WORK_PERMANENT_ID_LABEL).cloned())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let cops: Vec<ClusterOverridePolicy> = ctx.cops.state().iter().map(|p| (**p).clone()).collect();
        let want = namespace_work(ns, &cluster, &space, &work_id, &cops).map_err(err)?;
        let result = match existing {
            None => works().create(&PostParams::default(), &want).await.map(|_| ()),
            Some(have) if have.spec == want.spec && have.metadata.annotations == want.metadata.annotations => Ok(()),
            Some(have) => {
                let mut next = (*have).clone();
                next.spec = want.spec;
                next.metadata.annotations = want.metadata.annotations;
                works().replace(&name, &PostParams::default(), &next).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => {}
            // The execution space is being made, or someone wrote first: next round.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(Next::After(Duration::from_secs(1))),
            Err(e) => return Err(err(format!("writing the work for cluster {}: {e}", cluster.name_any()))),
        }
    }
    Ok(Next::Done)
}

/// Queue every namespace that propagates (once the namespace store exists). The others — the
/// execution spaces above all, one per cluster — have nothing a cluster or a policy change could
/// add; their own changes queue them.
fn requeue_propagated(all: &Mutex<Option<Store<Namespace>>>, queue: &WorkQueue<String>) {
    if let Some(store) = all.lock().as_ref() {
        for n in store.state().iter().filter(|n| propagates(n)) {
            queue.add(n.name_any());
        }
    }
}

/// Run namespace auto-propagation until its watches end.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let queue: Arc<WorkQueue<String>> = WorkQueue::new(Duration::from_millis(50), Duration::from_secs(60));
    let q = queue.clone();
    let (namespaces, ns_task) = rt.informers.watch::<Namespace>(move |n: &Namespace, _| q.add(n.name_any()));
    // A cluster joining or leaving needs every namespace, found through the namespace store
    // once it exists; so does a change of what the Works read of it (its labels and spec, for
    // ClusterOverridePolicies). Its status changes do not: at 1,000 members those are ~100 a
    // second, and each would have looked at every namespace for every cluster.
    let all: Arc<Mutex<Option<Store<Namespace>>>> = Arc::new(Mutex::new(None));
    let (q, a) = (queue.clone(), all.clone());
    let (clusters, cluster_task) = rt.informers.watch::<Cluster>(|_: &Cluster, _| {});
    rt.informers.subscribe_changes::<Cluster>(move |old: Option<&Cluster>, c: &Cluster, deleted| {
        let read = |c: &Cluster| (c.metadata.labels.clone(), c.spec.clone(), c.metadata.deletion_timestamp.is_some());
        if !deleted && old.is_some_and(|o| read(o) == read(c)) {
            return;
        }
        requeue_propagated(&a, &q);
    });
    let q = queue.clone();
    let (works, work_task) = rt.informers.watch::<Work>(move |w: &Work, deleted| {
        // A namespace Work deleted by hand comes back.
        if deleted
            && let Some(ns) = w.spec.workload.as_ref().and_then(|wl| wl.manifests.as_ref()).and_then(|m| m.first()).filter(|m| m["kind"] == "Namespace")
            && let Some(n) = ns.pointer("/metadata/name").and_then(Value::as_str)
        {
            q.add(n.to_string());
        }
    });
    // A ClusterOverridePolicy may select any namespace: all are looked at again.
    let (q, a) = (queue.clone(), all.clone());
    let (cops, cop_task) = rt.informers.watch::<ClusterOverridePolicy>(move |_: &ClusterOverridePolicy, _| requeue_propagated(&a, &q));
    *all.lock() = Some(namespaces.clone());
    let ctx = Arc::new(Context { client, namespaces, clusters, works, cops });
    let workers = run_workers(queue, config.workers, NAME, move |ns| reconcile(ns, ctx.clone()));
    tokio::select! {
        _ = ns_task => tracing::warn!(controller = NAME, "namespace watch ended"),
        _ = cluster_task => tracing::warn!(controller = NAME, "cluster watch ended"),
        _ = work_task => tracing::warn!(controller = NAME, "work watch ended"),
        _ = cop_task => tracing::warn!(controller = NAME, "cluster override policy watch ended"),
        _ = workers => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, labels: Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels, "uid": "u", "resourceVersion": "3"}})).unwrap()
    }

    #[test]
    fn which_namespaces_propagate() {
        assert!(propagates(&ns("shop", json!({}))));
        assert!(!propagates(&ns("default", json!({}))));
        assert!(!propagates(&ns("kube-system", json!({}))));
        assert!(!propagates(&ns("kube-federation-system", json!({}))));
        assert!(!propagates(&ns("karmada-es-member1", json!({}))));
        assert!(!propagates(&ns("quiet", json!({SKIP_AUTO_PROPAGATION_LABEL: "true"}))));
    }

    #[test]
    fn namespace_work_is_pruned_labelled_and_preserving() {
        let w = namespace_work(&ns("shop", json!({"team": "a"})), &cluster("m1", json!({})), "karmada-es-m1", "id-1", &[]).unwrap();
        assert_eq!(w.metadata.name.as_deref(), Some(work_name("Namespace", "shop", None).as_str()));
        assert_eq!(w.spec.preserve_resources_on_deletion, Some(true));
        let m = &w.spec.workload.as_ref().unwrap().manifests.as_ref().unwrap()[0];
        assert_eq!(m["kind"], "Namespace");
        assert!(m["metadata"].get("uid").is_none() && m["metadata"].get("resourceVersion").is_none());
        assert_eq!(m["metadata"]["labels"][MANAGED_LABEL], "true");
        assert_eq!(m["metadata"]["labels"][WORK_PERMANENT_ID_LABEL], "id-1");
        assert_eq!(m["metadata"]["labels"]["team"], "a");
        assert!(w.metadata.annotations.is_none(), "no override applied, none recorded");
    }

    fn cluster(name: &str, labels: Value) -> Cluster {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": {"syncMode": "Push"}})).unwrap()
    }

    /// Karmada's namespace controller applies the ClusterOverridePolicies that select the
    /// namespace for the cluster (and only those) to the namespace it sends there.
    #[test]
    fn cluster_override_policies_reach_the_namespace() {
        let cop: ClusterOverridePolicy = serde_json::from_value(json!({
            "apiVersion": "policy.karmada.io/v1alpha1", "kind": "ClusterOverridePolicy", "metadata": {"name": "ns-labels"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Namespace", "name": "shop"}],
                "overrideRules": [{
                    "targetCluster": {"labelSelector": {"matchLabels": {"env": "prod"}}},
                    "overriders": {"plaintext": [{"path": "/metadata/labels/tier", "operator": "add", "value": "gold"}]}
                }]
            }
        }))
        .unwrap();
        let prod = cluster("m1", json!({"env": "prod"}));
        let w = namespace_work(&ns("shop", json!({})), &prod, "karmada-es-m1", "id-1", std::slice::from_ref(&cop)).unwrap();
        let m = &w.spec.workload.as_ref().unwrap().manifests.as_ref().unwrap()[0];
        assert_eq!(m["metadata"]["labels"]["tier"], "gold");
        assert_eq!(m["metadata"]["labels"][MANAGED_LABEL], "true");
        let recorded = w.metadata.annotations.as_ref().and_then(|a| a.get(overrides::APPLIED_CLUSTER_OVERRIDES_ANNOTATION)).expect("recorded");
        assert!(recorded.contains("ns-labels"), "{recorded}");

        let dev = cluster("m2", json!({"env": "dev"}));
        let w = namespace_work(&ns("shop", json!({})), &dev, "karmada-es-m2", "id-2", std::slice::from_ref(&cop)).unwrap();
        assert!(w.spec.workload.as_ref().unwrap().manifests.as_ref().unwrap()[0]["metadata"]["labels"].get("tier").is_none());
        let other = namespace_work(&ns("depot", json!({})), &prod, "karmada-es-m1", "id-3", std::slice::from_ref(&cop)).unwrap();
        assert!(other.spec.workload.as_ref().unwrap().manifests.as_ref().unwrap()[0]["metadata"]["labels"].get("tier").is_none());
    }
}
