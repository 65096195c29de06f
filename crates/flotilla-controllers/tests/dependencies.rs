//! The dependencies distributor against a race the propagation model test found
//! (`FLOTILLA_PROPAGATION_MODEL_SEED=106`, 5 members, 40 templates, cycle 2): a dependency's
//! attached binding loses its last requirer and is deleted — held a while by its finalizer while
//! its Works go — just as a new workload that depends on it appears. The new requirer must not be
//! written into the binding on its way out (it would go with it, and nothing brings it back); once
//! the old binding is gone, a new one carries the requirer.

use std::collections::BTreeMap;

use flotilla_api::federation::karmada::work::{BINDING_FINALIZER, RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding};
use flotilla_controllers::dependencies;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::json;

mod support;

use support::{control_plane, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_requirer_is_not_lost_with_an_attached_binding_being_deleted() {
    let mut cp = control_plane().await;
    let client = cp.client.clone();
    cp.controllers.spawn(dependencies::run(client.clone(), cp.rt.clone(), dependencies::Config { workers: 1, ..Default::default() }));
    let rbs: Api<ResourceBinding> = Api::namespaced(client.clone(), "default");

    let dep = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"mode": "a"}})).unwrap())
        .await
        .unwrap();
    // The attached binding as its last requirer left it: deleted, held by the binding finalizer
    // (no binding controller runs here to remove its Works and the finalizer).
    let attached: ResourceBinding = serde_json::from_value(json!({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": "settings-configmap", "namespace": "default", "finalizers": [BINDING_FINALIZER],
                     "labels": {RESOURCE_BINDING_PERMANENT_ID_LABEL: "old-id"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings", "uid": dep.metadata.uid, "controller": true}]},
        "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "settings"}}
    }))
    .unwrap();
    rbs.create(&PostParams::default(), &attached).await.unwrap();
    rbs.delete("settings-configmap", &DeleteParams::default()).await.unwrap();

    // A workload reading the ConfigMap, its binding propagating its dependencies to m1.
    let deployments = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "envFrom": [{"configMapRef": {"name": "settings"}}]}]}}}});
    Api::<DynamicObject>::namespaced_with(client.clone(), "default", &deployments)
        .create(&PostParams::default(), &serde_json::from_value(web).unwrap())
        .await
        .unwrap();
    let mut requirer: ResourceBinding = serde_json::from_value(json!({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": "web-deployment", "namespace": "default"},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
                 "propagateDeps": true, "clusters": [{"name": "m1", "replicas": 1}]}
    }))
    .unwrap();
    requirer.metadata.labels = Some(BTreeMap::from([(RESOURCE_BINDING_PERMANENT_ID_LABEL.to_string(), "web-id".to_string())]));
    rbs.create(&PostParams::default(), &requirer).await.unwrap();

    // The distributor has looked at the requirer (its dependencies recorded) while the old
    // binding is still there; it must not have taken the requirer.
    eventually("the requirer's dependencies recorded", || async {
        let rb = rbs.get("web-deployment").await.ok()?;
        rb.metadata.annotations.as_ref()?.get("resourcebinding.karmada.io/dependencies").map(|_| ())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let old = rbs.get("settings-configmap").await.unwrap();
    assert!(old.metadata.deletion_timestamp.is_some());
    assert!(old.spec.required_by.as_deref().unwrap_or_default().is_empty(), "a requirer written into a binding being deleted: {:?}", old.spec.required_by);

    // Its Works gone, the old binding goes; a new one carries the requirer.
    rbs.patch("settings-configmap", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    let new = eventually("a new attached binding requiring web", || async {
        let rb = rbs.get_opt("settings-configmap").await.ok()??;
        let required = rb.spec.required_by.as_deref().unwrap_or_default();
        (rb.metadata.deletion_timestamp.is_none() && required.iter().any(|r| r.name == "web-deployment")).then_some(rb)
    })
    .await;
    assert_ne!(new.metadata.labels.as_ref().and_then(|l| l.get(RESOURCE_BINDING_PERMANENT_ID_LABEL)).map(String::as_str), Some("old-id"));
    assert_eq!(new.spec.required_by.unwrap()[0].clusters.as_ref().map(|c| c[0].name.clone()), Some("m1".to_string()));
    cp.controllers.abort_all();
}
