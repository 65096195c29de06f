//! The workload simulator against its own member, in-process: each controller's settled state.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::{eventually, fast, start};

fn deployment(name: &str, replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": image}]}}
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_registered_and_a_deployment_becomes_available() {
    let m = start(fast("w1")).await;
    let client = m.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let list = eventually("two ready nodes", || async {
        let l = nodes.list(&ListParams::default()).await.ok()?;
        (l.items.len() == 2).then_some(l)
    })
    .await;
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("w1-node-1"));
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deploys.create(&PostParams::default(), &deployment("web", 3, "nginx:1.25")).await.unwrap();
    let d = eventually("3 available replicas", || async {
        let d = deploys.get("web").await.ok()?;
        (d.status.as_ref()?.available_replicas == Some(3)).then_some(d)
    })
    .await;
    let st = d.status.unwrap();
    assert_eq!(st.observed_generation, d.metadata.generation);
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = pods.list(&ListParams::default().labels("app=web")).await.unwrap();
    assert_eq!(p.items.len(), 3);
    for pod in &p.items {
        let s = pod.status.as_ref().unwrap();
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert!(s.pod_ip.as_deref().unwrap().starts_with("10.128."));
    }
}

/// With workload simulation off the member stores what it is sent and nothing more: nodes
/// still register, a Deployment gets no ReplicaSet, pods or status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_simulation_off_leaves_a_deployment_alone() {
    let mut config = fast("w-off");
    config.simulate_workloads = false;
    let m = start(config).await;
    let client = m.client();
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("two nodes", || async { (nodes.list(&ListParams::default()).await.ok()?.items.len() == 2).then_some(()) }).await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deploys.create(&PostParams::default(), &deployment("web", 3, "nginx:1.25")).await.unwrap();
    m.idle().await.unwrap();
    let d = deploys.get("web").await.unwrap();
    assert_eq!(d.status.and_then(|s| s.observed_generation), None);
    let pods: Api<Pod> = Api::namespaced(client, "default");
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty());
}
