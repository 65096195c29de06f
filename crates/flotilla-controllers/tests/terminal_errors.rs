//! The runtime's error policy on a real controller: the binding controller, whose Work for a
//! cluster cannot be rendered because an OverridePolicy's plaintext `replace` names a path the
//! template does not have. That failure is terminal — retrying renders the same Work — so the
//! binding is not retried until something it reads changes; the failure is recorded as a
//! Warning Event; and fixing the OverridePolicy (a change the controller watches) produces the
//! Work.
//!
//! Its own test binary: it reads the process's controller-runtime metrics, which other tests'
//! binding controllers would also move.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSpec};
use flotilla_api::federation::karmada::policy::OverridePolicy;
use flotilla_api::federation::karmada::work::{RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding, Work};
use flotilla_controllers::binding;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

mod support;

use support::{control_plane, eventually};

/// The sum of `name{controller="binding-controller",...}` in the process's metrics (0 when absent).
fn binding_metric(name: &str) -> f64 {
    let text = flotilla_runtime::metrics::render();
    let prefix = format!("{name}{{");
    let label = format!("controller=\"{}\"", binding::NAME);
    text.lines().filter(|l| l.starts_with(&prefix) && l.contains(&label)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_that_cannot_apply_fails_for_good_until_the_policy_is_fixed() {
    let mut cp = control_plane().await;
    let client = cp.client.clone();
    let config = binding::Config { workers: 1, ..Default::default() };
    cp.controllers.spawn(binding::run(client.clone(), cp.rt.clone(), config));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "karmada-es-m1"}})).unwrap()).await.unwrap();
    Api::<Cluster>::all(client.clone()).create(&PostParams::default(), &Cluster::new("m1", ClusterSpec::default())).await.unwrap();
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
    configmaps
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "app"}, "data": {"colour": "blue"}})).unwrap())
        .await
        .unwrap();
    // `replace` of a member the template lacks: Karmada's patch library refuses it.
    let ops: Api<OverridePolicy> = Api::namespaced(client.clone(), "default");
    let policy = |path: &str| {
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy", "metadata": {"name": "colour", "namespace": "default"},
               "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "app"}],
                        "overrideRules": [{"targetCluster": {"clusterNames": ["m1"]},
                                           "overriders": {"plaintext": [{"path": path, "operator": "replace", "value": "red"}]}}]}})
    };
    ops.create(&PostParams::default(), &serde_json::from_value(policy("/data/missing")).unwrap()).await.unwrap();

    let mut rb: ResourceBinding = serde_json::from_value(json!({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": "app-configmap", "namespace": "default"},
        "spec": {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "app"},
                 "clusters": [{"name": "m1"}]}}))
    .unwrap();
    rb.metadata.labels = Some(BTreeMap::from([(RESOURCE_BINDING_PERMANENT_ID_LABEL.to_string(), "rb-id".to_string())]));
    Api::<ResourceBinding>::namespaced(client.clone(), "default").create(&PostParams::default(), &rb).await.unwrap();

    eventually("one terminal reconcile error of the binding controller", || async {
        (binding_metric("controller_runtime_terminal_reconcile_errors_total") >= 1.0).then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let warning = eventually("a SyncWorkFailed Warning Event on the binding", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.involved_object.name.as_deref() == Some("app-configmap") && e.reason.as_deref() == Some("SyncWorkFailed") && e.type_.as_deref() == Some("Warning")
        })
    })
    .await;
    assert!(warning.message.unwrap_or_default().contains("/data/missing"), "the Event says which path failed");

    // A retryable error goes back to the queue with backoff (from 50 ms, counted in
    // workqueue_retries); a terminal one waits for a change. The binding's own status write
    // may bring it back once, and it fails for good again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let terminal = binding_metric("controller_runtime_terminal_reconcile_errors_total");
    assert_eq!(binding_metric("workqueue_retries_total"), 0.0, "a terminal error is never retried with backoff");
    assert_eq!(binding_metric("controller_runtime_reconcile_errors_total"), terminal, "every error was terminal");
    assert!((1.0..=3.0).contains(&terminal), "reconciled again only on changes: {terminal} terminal errors");
    let works: Api<Work> = Api::namespaced(client.clone(), "karmada-es-m1");
    assert!(works.list(&ListParams::default()).await.unwrap().items.is_empty(), "no Work while the override cannot apply");

    // Fixing the policy queues the binding again, and the Work carries the override.
    ops.patch("colour", &PatchParams::default(), &Patch::Merge(json!({"spec": policy("/data/colour")["spec"]}))).await.unwrap();
    let work = eventually("the Work once the policy is fixed", || async { works.list(&ListParams::default()).await.ok()?.items.into_iter().next() }).await;
    let manifest = work.spec.workload.as_ref().and_then(|w| w.manifests.as_ref()?.first().cloned()).unwrap();
    assert_eq!(manifest.pointer("/data/colour"), Some(&json!("red")), "{manifest}");
    cp.controllers.abort_all();
}
