//! The runtime's shared informers against an in-process API server: a resource watched first
//! for its metadata (the garbage collector does, for every resource) and then asked for as a
//! typed kind is still one watch, and the typed cache and its handlers see every object.
//!
//! Its own test binary: it counts the watch requests of the process's API server.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, PostParams};
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use serde_json::json;

mod support;

use support::{control_plane, eventually};

/// WATCH requests for `resource` the API server has answered, from its metrics.
async fn watch_requests(client: &kube::Client, resource: &str) -> f64 {
    let text = client.request_text(http::Request::get("/metrics").body(Vec::new()).unwrap()).await.unwrap();
    let label = format!("resource=\"{resource}\"");
    text.lines()
        .filter(|l| l.starts_with("flotilla_apiserver_requests_total{") && l.to_lowercase().contains("verb=\"watch\"") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_watched_for_metadata_then_typed_is_watched_once() {
    let cp = control_plane().await;
    let client = cp.client.clone();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    configmaps.create(&PostParams::default(), &configmap("before")).await.unwrap();

    let informers = &cp.rt.informers;
    let resource = ApiResource::erase::<ConfigMap>(&());
    let seen_meta: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen_meta.clone();
    informers.subscribe_meta(&resource, move |_, meta, deleted| {
        if !deleted {
            s.lock().push(meta.name.clone().unwrap_or_default());
        }
    });
    informers.meta_synced(&resource).await;

    // Asked for typed now: read from the same watch.
    let seen_typed: Arc<Mutex<Vec<(Option<String>, String)>>> = Arc::default();
    let s = seen_typed.clone();
    informers.subscribe_changes::<ConfigMap>(move |old, cm, deleted| {
        if !deleted {
            s.lock().push((old.and_then(|o| o.metadata.resource_version.clone()), cm.metadata.name.clone().unwrap_or_default()));
        }
    });
    informers.synced::<ConfigMap>().await;
    let store = informers.store::<ConfigMap>();
    assert!(store.get(&ObjectRef::new("before").within("default")).is_some(), "the typed cache starts with what the watch holds");

    configmaps.create(&PostParams::default(), &configmap("after")).await.unwrap();
    eventually("the new ConfigMap in the typed cache, its handler and the metadata handler", || async {
        let typed = store.get(&ObjectRef::new("after").within("default")).is_some();
        let announced = seen_typed.lock().iter().any(|(_, n)| n == "after");
        let meta = seen_meta.lock().iter().any(|n| n == "after");
        (typed && announced && meta).then_some(())
    })
    .await;
    assert!(seen_typed.lock().iter().any(|(_, n)| n == "before"), "the typed handler was told of the listed object");
    assert_eq!(watch_requests(&client, "configmaps").await, 1.0, "one watch of configmaps");
    let watched = informers.watched();
    assert!(watched.iter().any(|w| w.contains("ConfigMap (from v1/configmaps)")), "{watched:?}");
}
