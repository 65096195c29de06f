//! A member object is never left behind when its Work goes (field report: a member copy that
//! stayed after its Work was deleted, and a CRD re-created in a member 30 ms after its binding
//! was deleted). Each test puts a controller in the state the race leaves it in — a cache that
//! lags the API server, or a stale discovery answer — deterministically, by handing it stores
//! and caches filled by hand, and shows the member is cleaned anyway. Real testenv members.

mod support;

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::{EXECUTION_FINALIZER, WORK_PERMANENT_ID_LABEL, Work};
use flotilla_controllers::execution::{self, WorkKey};
use flotilla_controllers::work_status;
use flotilla_member::access::Clients;
use flotilla_member::apply::{self, Deleted, Member, ObjectRef};
use flotilla_member::discovery::MemberDiscovery;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use support::{Joined, control_plane, eventually, execution_config, unique, work};

/// A store holding exactly `objects`, as a cache that has seen nothing else; keep the writer.
fn store_of<K>(objects: Vec<K>) -> (Store<K>, Writer<K>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store::<K>();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    (reader, writer)
}

/// The cluster marked Ready on the API server, as a probe would (none runs in these tests).
async fn ready_cluster(client: &Client, name: &str) -> Cluster {
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}});
    Api::<Cluster>::all(client.clone()).patch_status(name, &Default::default(), &kube::api::Patch::Merge(&status)).await.unwrap()
}

/// Runs `scenario` against member1 joined as a fresh cluster, cleaning the member afterwards
/// even when an assertion fails.
async fn with_joined<F, Fut>(prefix: &str, scenario: F)
where
    F: FnOnce(Client, Arc<Joined>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = control_plane().await;
    let id = unique();
    let joined = Arc::new(Joined::join(env.member("member1"), &cp.client, &format!("{prefix}-{id}"), &format!("{prefix}-{id}")).await);
    let namespaces: Api<Namespace> = Api::all(cp.client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("karmada-es-{}", joined.cluster)}})).unwrap())
        .await
        .unwrap();
    let outcome = std::panic::AssertUnwindSafe(scenario(cp.client.clone(), joined.clone())).catch_unwind().await;
    joined.clean().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A Work with one ConfigMap for `joined`'s namespace, created on the control plane with the
/// execution finalizer (so deleting it leaves it terminating, as in a real deletion).
async fn create_work(client: &Client, joined: &Joined, name: &str) -> (Api<Work>, Work) {
    let es = format!("karmada-es-{}", joined.cluster);
    let works: Api<Work> = Api::namespaced(client.clone(), &es);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": joined.namespace}, "data": {"k": "v"}});
    let mut w = work(name, &es, vec![cm]);
    w.metadata.finalizers = Some(vec![EXECUTION_FINALIZER.into()]);
    let created = works.create(&PostParams::default(), &w).await.unwrap();
    (works, created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correction_from_a_lagging_cache_never_outlives_its_work() {
    with_joined("leak-ws", |client, joined| async move {
        let (works, created) = create_work(&client, &joined, "settings").await;
        // The copy the work-status controller's cache holds: applied, alive.
        let mut cached = created.clone();
        cached.status = Some(serde_json::from_value(json!({"conditions": [{"type": "Applied", "status": "True", "reason": "AppliedSuccessful", "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}]})).unwrap());
        let (works_store, _w) = store_of(vec![cached]);
        let (clusters_store, _c) = store_of(vec![ready_cluster(&client, &joined.cluster).await]);
        let config = work_status::Config { watch_retry: Duration::from_secs(1), retry_base: Duration::from_millis(100), retry_max: Duration::from_secs(1), ..Default::default() };
        let ctx = work_status::Context::new(client.clone(), config, Arc::new(Clients::default()), works_store, clusters_store);
        let key = WorkKey::of(&created);
        let cms: Api<ConfigMap> = Api::namespaced(joined.member.clone(), &joined.namespace);
        let r = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": joined.namespace}})).unwrap();

        // While the Work lives, a missing object is re-created (the correction this is about).
        eventually("the live Work's ConfigMap to be re-created", || async {
            let _ = work_status::reconcile(key.clone(), ctx.clone()).await;
            cms.get_opt("settings").await.ok()?.map(|_| ())
        })
        .await;

        // The Work is deleted and the execution controller removes its object; the cache still
        // shows the Work alive and the member watch reports the object gone.
        works.delete("settings", &DeleteParams::default()).await.unwrap();
        cms.delete("settings", &DeleteParams::default()).await.unwrap();
        eventually("the member watch to see the ConfigMap gone", || async { ctx.observed(&joined.cluster, &r).is_none().then_some(()) }).await;
        for _ in 0..3 {
            let _ = work_status::reconcile(key.clone(), ctx.clone()).await;
        }
        assert!(cms.get_opt("settings").await.unwrap().is_none(), "a correction from the stale cache re-created the object of a deleted Work");

        // Released for the clean-up.
        let patch = json!({"metadata": {"finalizers": null}});
        let _ = works.patch("settings", &Default::default(), &kube::api::Patch::Merge(&patch)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_work_whose_cluster_the_cache_has_not_seen_still_cleans_the_member() {
    with_joined("leak-ex", |client, joined| async move {
        let (works, created) = create_work(&client, &joined, "web").await;
        let clients = Arc::new(Clients::default());
        let cluster = ready_cluster(&client, &joined.cluster).await;
        let key = WorkKey::of(&created);
        let cms: Api<ConfigMap> = Api::namespaced(joined.member.clone(), &joined.namespace);

        // Applied with a cache that knows both.
        let (w, _ww) = store_of(vec![created.clone()]);
        let (c, _cw) = store_of(vec![cluster]);
        let ctx = Arc::new(execution::Context::new(client.clone(), execution_config(), clients.clone(), w, c));
        execution::reconcile(key.clone(), ctx).await.unwrap();
        assert!(cms.get_opt("web").await.unwrap().is_some(), "applied to the member");

        // Deleted while a cache (just started, or relisting) has not seen the Cluster yet.
        works.delete("web", &DeleteParams::default()).await.unwrap();
        let deleting = works.get("web").await.unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        let (w, _ww) = store_of(vec![deleting]);
        let (c, _cw) = store_of::<Cluster>(vec![]);
        let ctx = Arc::new(execution::Context::new(client.clone(), execution_config(), clients, w, c));
        execution::reconcile(key, ctx).await.unwrap();
        assert!(works.get_opt("web").await.unwrap().is_none(), "the finalizer is released");
        assert!(cms.get_opt("web").await.unwrap().is_none(), "the Work went and left its object in the member");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_not_served_answer_never_skips_a_deletion() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member2").client().await;
    let id = unique();
    let (group, kind, plural) = ("leaks.flotilla.test", format!("Leak{id}"), format!("leak{id}s"));
    let gvk = GroupVersionKind::gvk(group, "v1", &kind);
    let discovery = MemberDiscovery::default();
    // Asked before the kind exists: remembered as not served.
    assert!(discovery.resolve(&member, &gvk).await.unwrap().is_none());

    let crds: Api<CustomResourceDefinition> = Api::all(member.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced", "names": {"kind": kind, "plural": plural, "singular": format!("leak{id}"), "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let outcome = std::panic::AssertUnwindSafe(async {
        let objects: Api<DynamicObject> = Api::namespaced_with(member.clone(), "default", &ApiResource::from_gvk_with_plural(&gvk, &plural));
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": kind,
            "metadata": {"name": "w", "namespace": "default", "labels": {"karmada.io/managed": "true", WORK_PERMANENT_ID_LABEL: "id-1"}},
        }))
        .unwrap();
        // The member serves the kind once the CRD is established; the object is then ours there.
        eventually("the custom object to be created", || async { objects.create(&PostParams::default(), &object).await.ok().map(|_| ()) }).await;

        let m = Member { cluster: "member2", client: &member, discovery: &discovery };
        let r = ObjectRef::of(&serde_json::to_value(&object).unwrap()).unwrap();
        let outcome = apply::delete(m, &r, false, Some("id-1")).await.unwrap();
        assert_eq!(outcome, Deleted::Deleted, "a cached 'not served' skipped the deletion");
        eventually("the custom object to be gone", || async { objects.get_opt("w").await.ok()?.is_none().then_some(()) }).await;
    })
    .catch_unwind()
    .await;
    let _ = crds.delete(&crd.name_any(), &DeleteParams::default()).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
