//! kube-rs against the API server over HTTPS: typed and dynamic CRUD, discovery, the watcher and
//! reflector recovering across a compaction, the finalizer helper and a Controller.

use std::sync::Arc;
use std::time::Duration;

use flotilla_apiserver::pki::{Authority, kubeconfig};
use flotilla_apiserver::serve::{ServeConfig, serve};
use flotilla_apiserver::{ApiServer, ApiServerConfig};
use flotilla_store::Store;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use kube::runtime::{Controller, WatchStreamExt, controller::Action, finalizer, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

struct Server {
    api: ApiServer,
    store: Arc<dyn Store>,
    client: Client,
    _serving: flotilla_apiserver::serve::Serving,
}

async fn start() -> Server {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store.clone(), ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    let ca = Authority::generate("test-ca").unwrap();
    let serving_cert = ca.issue_server(&["127.0.0.1".to_string()]).unwrap();
    let admin = ca.issue_client("admin", &["system:masters"]).unwrap();
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), serving_cert.cert_pem, serving_cert.key_pem);
    cfg.client_ca_pem = Some(ca.cert_pem.clone());
    let serving = serve(api.router(), cfg).await.unwrap();
    let text = kubeconfig("t", &format!("https://{}", serving.local_addr), &ca.cert_pem, &admin);
    let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    let client = Client::try_from(config).unwrap();
    Server { api, store, client, _serving: serving }
}

async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()).await.unwrap();
}

fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_crud_and_errors() {
    let s = start().await;
    namespace(&s.client, "typed").await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), "typed");
    let created = cms.create(&PostParams::default(), &cm("a", json!({"k": "v"}))).await.unwrap();
    let rv1: i64 = created.resource_version().unwrap().parse().unwrap();
    assert!(created.uid().is_some());
    // Conflict on a stale resourceVersion.
    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "w".to_string())].into());
    let updated = cms.replace("a", &PostParams::default(), &stale).await.unwrap();
    assert!(updated.resource_version().unwrap().parse::<i64>().unwrap() > rv1);
    let err = cms.replace("a", &PostParams::default(), &stale).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"), "{err:?}");
    // Each patch type.
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"m": "1"}}))).await.unwrap();
    cms.patch("a", &PatchParams::default(), &Patch::Strategic(json!({"data": {"s": "2"}}))).await.unwrap();
    let jp: json_patch::Patch = serde_json::from_value(json!([{"op": "add", "path": "/data/j", "value": "3"}])).unwrap();
    cms.patch("a", &PatchParams::default(), &Patch::<()>::Json(jp)).await.unwrap();
    let applied = cms
        .patch(
            "a",
            &PatchParams::apply("kube-rs-test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"a": "4"}})),
        )
        .await
        .unwrap();
    let data = applied.data.unwrap();
    for (k, v) in [("k", "w"), ("m", "1"), ("s", "2"), ("j", "3"), ("a", "4")] {
        assert_eq!(data.get(k).map(String::as_str), Some(v), "{k}");
    }
    // NotFound handling as kube-rs expects it.
    assert!(cms.get_opt("missing").await.unwrap().is_none());
    // Delete returns a Status for kinds that do not return the object.
    let deleted = cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_right(), "ConfigMap deletion answers with a Status");
    assert!(cms.get_opt("a").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_crud_and_discovery() {
    let s = start().await;
    namespace(&s.client, "dynamic").await;
    for aggregated in [false, true] {
        let discovery =
            if aggregated { Discovery::new(s.client.clone()).run_aggregated().await.unwrap() } else { Discovery::new(s.client.clone()).run().await.unwrap() };
        let (ar, caps) = discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment")).expect("apps/v1 Deployment discovered");
        assert_eq!(ar.plural, "deployments");
        assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
        assert!(discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "ConfigMap")).is_some(), "aggregated={aggregated}");
    }
    let discovery = Discovery::new(s.client.clone()).run().await.unwrap();
    let (ar, _) = discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk("apps", "v1", "Deployment")).unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(s.client.clone(), "dynamic", &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let typed: Api<Deployment> = Api::namespaced(s.client.clone(), "dynamic");
    assert_eq!(typed.get("d").await.unwrap().spec.template.spec.unwrap().containers[0].image.as_deref(), Some("busybox"));
    api.delete("d", &DeleteParams::default()).await.unwrap();
}

/// The watcher relists after its resourceVersion is compacted away, and the reflector ends up
/// with exactly the live objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_recovers_across_a_compaction() {
    let s = start().await;
    namespace(&s.client, "refl").await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), "refl");
    let mut watched = cm("watched-0", json!({"v": "0"}));
    watched.metadata.labels = Some([("watch".to_string(), "yes".to_string())].into());
    cms.create(&PostParams::default(), &watched).await.unwrap();
    let (reader, writer) = reflector::store::<ConfigMap>();
    // Short server-side timeouts make the watcher re-watch from its last resourceVersion often;
    // the selector keeps unrelated writes from advancing it.
    let cfg = watcher::Config::default().labels("watch=yes").timeout(1);
    let inits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inits2 = inits.clone();
    let stream = watcher(cms.clone(), cfg).default_backoff().reflect(writer).inspect_ok(move |e| {
        if matches!(e, watcher::Event::Init) {
            inits2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 1);
    // Unrelated writes move the revision on; then compact everything before now.
    for i in 0..20 {
        cms.create(&PostParams::default(), &cm(&format!("other-{i}"), json!({}))).await.unwrap();
    }
    let head = s.store.current_revision().await.unwrap();
    s.store.compact(head).await.unwrap();
    // The watcher's next re-watch is below the compaction point: it must relist, not loop.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while inits.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the watcher never relisted after the compaction");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut w1 = cm("watched-1", json!({"v": "1"}));
    w1.metadata.labels = Some([("watch".to_string(), "yes".to_string())].into());
    cms.create(&PostParams::default(), &w1).await.unwrap();
    cms.delete("watched-0", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
        if names == vec!["watched-1".to_string()] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "reflector did not converge: {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    task.abort();
}

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error("kube: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[from] Box<finalizer::Error<kube::Error>>),
}

/// The finalizer helper adds its finalizer (JSON patch with a null `test`), runs cleanup on
/// deletion and removes it, after which the object is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_helper_round_trip() {
    let s = start().await;
    namespace(&s.client, "fin").await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), "fin");
    cms.create(&PostParams::default(), &cm("f", json!({}))).await.unwrap();
    let cleaned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let run = |obj: Arc<ConfigMap>, cleaned: Arc<std::sync::atomic::AtomicBool>| {
        let cms = cms.clone();
        async move {
            finalizer(&cms, "flotilla.test/cleanup", obj, |ev| async move {
                if let finalizer::Event::Cleanup(_) = ev {
                    cleaned.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Ok::<_, kube::Error>(Action::await_change())
            })
            .await
            .map_err(|e| TestError::Finalizer(Box::new(e)))
        }
    };
    run(Arc::new(cms.get("f").await.unwrap()), cleaned.clone()).await.unwrap();
    assert_eq!(cms.get("f").await.unwrap().finalizers(), &["flotilla.test/cleanup".to_string()]);
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let terminating = cms.get("f").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    run(Arc::new(terminating), cleaned.clone()).await.unwrap();
    assert!(cleaned.load(std::sync::atomic::Ordering::SeqCst));
    assert!(cms.get_opt("f").await.unwrap().is_none(), "removing the last finalizer deletes the object");
}

/// A Controller reconciling ConfigMaps: each gets an annotation with its data size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_reconciles_configmaps() {
    let s = start().await;
    namespace(&s.client, "ctl").await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client.clone(), "ctl");
    async fn reconcile(obj: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, kube::Error> {
        let n = obj.data.as_ref().map_or(0, |d| d.len()).to_string();
        if obj.annotations().get("flotilla.test/keys") != Some(&n) {
            api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"flotilla.test/keys": n}}}))).await?;
        }
        Ok(Action::await_change())
    }
    let ctx = Arc::new(cms.clone());
    let task = tokio::spawn(
        Controller::new(cms.clone(), watcher::Config::default())
            .run(reconcile, |_, _, _| Action::requeue(Duration::from_millis(200)), ctx)
            .for_each(|_| async {}),
    );
    cms.create(&PostParams::default(), &cm("one", json!({"a": "1", "b": "2"}))).await.unwrap();
    cms.create(&PostParams::default(), &cm("two", json!({"a": "1"}))).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let one = cms.get("one").await.unwrap();
        let two = cms.get("two").await.unwrap();
        if one.annotations().get("flotilla.test/keys").map(String::as_str) == Some("2")
            && two.annotations().get("flotilla.test/keys").map(String::as_str) == Some("1")
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the controller did not reconcile");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    task.abort();
    drop(s.api);
}

/// Server-side applies racing to create the same object all succeed: the losers apply to the
/// object the winner created (kube-apiserver retries the same way), as concurrent `flotilla
/// join`s do with the `karmada-cluster` namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_applies_creating_one_object_all_succeed() {
    let s = start().await;
    for round in 0..20 {
        let name = format!("raced-{round}");
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16 {
            let api: Api<Namespace> = Api::all(s.client.clone());
            let name = name.clone();
            set.spawn(async move {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {format!("joined-{i}"): "true"}}});
                api.patch(&name, &PatchParams::apply(&format!("joiner-{i}")), &Patch::Apply(ns)).await
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
        let api: Api<Namespace> = Api::all(s.client.clone());
        let labels = api.get(&name).await.unwrap().metadata.labels.unwrap_or_default();
        assert_eq!(labels.keys().filter(|k| k.starts_with("joined-")).count(), 16, "{labels:?}");
    }
}
