//! The execution and work-status controllers end to end: an in-process control plane (API
//! server on a memory store) and, for everything that touches a member, a real member of the
//! shared testenv joined with Flotilla's least-privilege identity.
//!
//! Tests that need the testenv skip (or, with `FLOTILLA_REQUIRE_TESTENV=1`, fail) without it.
//! Each test uses its own cluster name and member namespace and removes both afterwards.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSpec, LocalSecretReference};
use flotilla_api::federation::karmada::work::{EXECUTION_FINALIZER, ResourceHealth, WORK_PERMANENT_ID_LABEL, Work};
use flotilla_controllers::{cluster, cluster_status, execution, work_status};
use flotilla_kube_controllers::namespace;
use flotilla_member::access::Clients;
use flotilla_member::join::{JoinOptions, MemberEndpoint, prepare_member, register};
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

mod support;

use support::{condition, control_plane, eventually, execution_config, unique, work};

async fn events_for(client: &Client, namespace: &str, name: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.into_iter().filter(|e| e.involved_object.name.as_deref() == Some(name)).filter_map(|e| e.reason).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_works_are_not_dispatched_and_a_gone_cluster_releases_its_works() {
    let mut cp = control_plane().await;
    let client = cp.client.clone();
    cp.controllers.spawn(execution::run(client.clone(), cp.rt.clone(), execution_config(), Arc::new(Clients::default())));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "karmada-es-ghost"}})).unwrap()).await.unwrap();
    // A Push cluster that never becomes Ready (nothing probes it here).
    let clusters: Api<Cluster> = Api::all(client.clone());
    let spec = ClusterSpec {
        api_endpoint: Some("https://127.0.0.1:1".into()),
        secret_ref: Some(LocalSecretReference { namespace: "karmada-cluster".into(), name: "ghost".into() }),
        ..Default::default()
    };
    clusters.create(&PostParams::default(), &Cluster::new("ghost", spec)).await.unwrap();

    let works: Api<Work> = Api::namespaced(client.clone(), "karmada-es-ghost");
    let mut w = work("cm", "karmada-es-ghost", vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})]);
    w.spec.suspend_dispatching = Some(true);
    works.create(&PostParams::default(), &w).await.unwrap();
    let suspended = eventually("Dispatching=False on the suspended Work", || async {
        let w = works.get("cm").await.ok()?;
        condition(&w, "Dispatching").filter(|c| c.status == "False").cloned().map(|c| (c, w))
    })
    .await;
    assert_eq!((suspended.0.reason.as_str(), suspended.0.message.as_str()), ("SuspendDispatching", "Work dispatching is in a suspended state."));
    // Nothing of it is in the member, so nothing holds it there (a multi-cluster service
    // report is such a Work: its deletion must never touch the member's own slice).
    assert!(!suspended.1.finalizers().iter().any(|f| f == EXECUTION_FINALIZER), "a never-dispatched Work has no execution finalizer");
    assert!(condition(&suspended.1, "Applied").is_none(), "a suspended Work is never applied");
    eventually("a WorkDispatching event", || async {
        events_for(&client, "karmada-es-ghost", "cm").await.contains(&"WorkDispatching".to_string()).then_some(())
    })
    .await;

    works.patch("cm", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspendDispatching": false}}))).await.unwrap();
    let dispatching = eventually("Dispatching=True once resumed", || async {
        let w = works.get("cm").await.ok()?;
        condition(&w, "Dispatching").filter(|c| c.status == "True").cloned()
    })
    .await;
    assert_eq!((dispatching.reason.as_str(), dispatching.message.as_str()), ("Dispatching", "Work is being dispatched to member clusters."));
    eventually("the execution finalizer once dispatching", || async {
        works.get("cm").await.ok()?.finalizers().iter().any(|f| f == EXECUTION_FINALIZER).then_some(())
    })
    .await;

    // The cluster goes (no cluster controller holds it here): the Work is released without
    // anyone contacting the member.
    works.delete("cm", &DeleteParams::default()).await.unwrap();
    clusters.delete("ghost", &DeleteParams::default()).await.unwrap();
    eventually("the Work to be gone", || async { works.get_opt("cm").await.ok()?.is_none().then_some(()) }).await;
    cp.controllers.abort_all();
}

use support::Joined;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_reach_a_joined_member_report_status_and_come_back_when_tampered_with() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let m = env.member("member1");
    let member = m.client().await;
    let id = unique();
    let joined = Joined { member: member.clone(), cluster: format!("exec-{id}"), namespace: format!("exec-{id}") };
    let outcome = std::panic::AssertUnwindSafe(scenario(m, &joined)).catch_unwind().await;
    joined.clean().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn scenario(m: &flotilla_testenv::Member, joined: &Joined) {
    let mut cp = control_plane().await;
    let client = cp.client.clone();
    let member = joined.member.clone();
    let name = joined.cluster.as_str();
    let ns = joined.namespace.as_str();

    // Join with the least-privilege identity.
    let opts = JoinOptions { cluster: name.into(), token_wait: Duration::from_secs(10), token_lifetime: Duration::from_secs(3600), ..Default::default() };
    let creds = prepare_member(&member, &opts, &mut |_| {}).await.unwrap();
    let token = creds.token.clone();
    let kubeconfig = kube::config::Kubeconfig::read_from(&m.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    register(&client, &opts, &MemberEndpoint::from_config(&config), &creds).await.unwrap();

    let clients = Arc::new(Clients::default());
    cp.controllers.spawn(cluster::run(client.clone(), cp.rt.clone(), cluster::Config { requeue: Duration::from_millis(200) }));
    cp.controllers.spawn(namespace::run(client.clone(), cp.rt.clone(), namespace::Config { requeue: Duration::from_millis(200) }));
    let status_config =
        cluster_status::Config { interval: Duration::from_secs(1), failure_threshold: Duration::ZERO, success_threshold: Duration::ZERO, ..Default::default() };
    cp.controllers.spawn(cluster_status::run(client.clone(), cp.rt.clone(), status_config, clients.clone()));
    cp.controllers.spawn(execution::run(client.clone(), cp.rt.clone(), execution_config(), clients.clone()));
    let ws_config = work_status::Config {
        watch_retry: Duration::from_secs(2),
        retry_base: Duration::from_millis(200),
        retry_max: Duration::from_secs(5),
        ..Default::default()
    };
    let (ws, ws_run) = work_status::start(client.clone(), &cp.rt, ws_config, clients.clone());
    cp.controllers.spawn(ws_run);

    let clusters: Api<Cluster> = Api::all(client.clone());
    eventually("the cluster to be Ready", || async {
        let c = clusters.get(name).await.ok()?;
        c.status?.conditions?.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
    let es = format!("karmada-es-{name}");
    let cp_namespaces: Api<Namespace> = Api::all(client.clone());
    eventually("the execution space", || async { cp_namespaces.get_opt(&es).await.ok()?.map(|_| ()) }).await;
    let member_namespaces: Api<Namespace> = Api::all(member.clone());
    member_namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap()).await.unwrap();

    // A Work with a ConfigMap and a Deployment, as the binding controller would write it.
    let works: Api<Work> = Api::namespaced(client.clone(), &es);
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": ns}, "data": {"mode": "blue"}});
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "annotations": {"resourcetemplate.karmada.io/generation": "1"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}});
    works.create(&PostParams::default(), &work("web", &es, vec![config_map, deployment])).await.unwrap();

    let applied = eventually("Applied=True", || async {
        let w = works.get("web").await.ok()?;
        condition(&w, "Applied").filter(|c| c.status == "True").cloned().map(|c| (c, w))
    })
    .await;
    assert_eq!((applied.0.reason.as_str(), applied.0.message.as_str()), ("AppliedSuccessful", "Manifest has been successfully applied"));
    let w = applied.1;
    assert!(w.finalizers().iter().any(|f| f == EXECUTION_FINALIZER), "{:?}", w.finalizers());
    let work_id = w.labels().get(WORK_PERMANENT_ID_LABEL).cloned().expect("admission gives the Work its permanent id");

    // Both objects are in the member with Karmada's labels and annotations.
    let cms: Api<ConfigMap> = Api::namespaced(member.clone(), ns);
    let deployments: Api<Deployment> = Api::namespaced(member.clone(), ns);
    let cm = cms.get("settings").await.unwrap();
    let d = deployments.get("web").await.unwrap();
    for (labels, annotations) in [(cm.labels(), cm.annotations()), (d.labels(), d.annotations())] {
        assert_eq!(labels.get("karmada.io/managed").map(String::as_str), Some("true"));
        assert_eq!(labels.get(WORK_PERMANENT_ID_LABEL), Some(&work_id));
        assert_eq!(annotations.get("work.karmada.io/namespace"), Some(&es));
        assert_eq!(annotations.get("work.karmada.io/name").map(String::as_str), Some("web"));
    }
    eventually("a SyncSucceed event on the Work", || async { events_for(&client, &es, "web").await.contains(&"SyncSucceed".to_string()).then_some(()) }).await;

    // The Deployment's status comes back, healthy once its pods run on the fake kubelet.
    let statuses = eventually("a healthy Deployment in manifestStatuses", || async {
        let w = works.get("web").await.ok()?;
        let statuses = w.status?.manifest_statuses?;
        let d = statuses.iter().find(|s| s.identifier.kind == "Deployment")?;
        // Both manifests reported: each one's status arrives on its own member watch.
        (statuses.len() == 2 && d.health == Some(ResourceHealth::Healthy) && d.status.as_ref()?.get("readyReplicas") == Some(&json!(2))).then_some(statuses)
    })
    .await;
    let d = &statuses[1].identifier;
    assert_eq!((d.ordinal, d.group.as_deref(), d.version.as_str(), d.namespace.as_deref(), d.name.as_str()), (1, Some("apps"), "v1", Some(ns), "web"));
    let c = &statuses[0];
    assert_eq!((c.identifier.ordinal, c.identifier.kind.as_str(), c.health), (0, "ConfigMap", Some(ResourceHealth::Healthy)));
    let watched = ws.watched();
    assert!(watched.get(name).is_some_and(|k| k.contains(&"apps/v1/Deployment".to_string()) && k.contains(&"/v1/ConfigMap".to_string())), "{watched:?}");

    // Deleted in the member: re-created.
    let old_uid = cms.get("settings").await.unwrap().uid();
    cms.delete("settings", &DeleteParams::default()).await.unwrap();
    eventually("the ConfigMap to come back", || async { cms.get_opt("settings").await.ok()?.filter(|c| c.uid() != old_uid).map(|_| ()) }).await;
    // Changed in the member: changed back; what the member adds is kept.
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"member.example/note": "kept"}}, "data": {"mode": "green"}})),
    )
    .await
    .unwrap();
    let reverted = eventually("the ConfigMap's data to be reverted", || async {
        cms.get("settings").await.ok().filter(|c| c.data.as_ref().and_then(|d| d.get("mode")).map(String::as_str) == Some("blue"))
    })
    .await;
    assert_eq!(reverted.annotations().get("member.example/note").map(String::as_str), Some("kept"));
    let applied = condition(&works.get("web").await.unwrap(), "Applied").cloned().unwrap();
    assert_eq!(applied.status, "True", "{applied:?}");

    // A kind outside the member role: Applied=False naming the verb and resource refused.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    works.create(&PostParams::default(), &work("reader", &es, vec![role])).await.unwrap();
    let failed = eventually("Applied=False for the Role", || async {
        let w = works.get("reader").await.ok()?;
        condition(&w, "Applied").filter(|c| c.status == "False").cloned()
    })
    .await;
    assert_eq!(failed.reason, "AppliedFailed");
    assert!(failed.message.starts_with("Failed to apply all manifests (0/1): "), "{}", failed.message);
    assert!(failed.message.contains("roles.rbac.authorization.k8s.io"), "{}", failed.message);
    assert!(
        failed.message.contains(&format!("the cluster {name} refused to get ")) || failed.message.contains(&format!("the cluster {name} refused to create ")),
        "{}",
        failed.message
    );
    eventually("a SyncFailed event", || async { events_for(&client, &es, "reader").await.contains(&"SyncFailed".to_string()).then_some(()) }).await;
    works.delete("reader", &DeleteParams::default()).await.unwrap();
    eventually("the Role Work to be gone", || async { works.get_opt("reader").await.ok()?.is_none().then_some(()) }).await;

    // An object the member already has and Karmada does not manage: refused, until the
    // manifest says overwrite.
    cms.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "taken"}, "data": {"owner": "someone"}})).unwrap()).await.unwrap();
    let taken = |annotations: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken", "namespace": ns, "annotations": annotations}, "data": {"owner": "flotilla"}});
    works.create(&PostParams::default(), &work("taken", &es, vec![taken(json!({}))])).await.unwrap();
    let refused = eventually("Applied=False for the taken ConfigMap", || async {
        let w = works.get("taken").await.ok()?;
        condition(&w, "Applied").filter(|c| c.status == "False").cloned()
    })
    .await;
    assert!(
        refused.message.contains(&format!(
            "already exists in the cluster {name} and the work.karmada.io/conflict-resolution strategy value is empty, Karmada will not manage this resource"
        )),
        "{}",
        refused.message
    );
    let overwrite = json!({"spec": {"workload": {"manifests": [taken(json!({"work.karmada.io/conflict-resolution": "overwrite"}))]}}});
    works.patch("taken", &PatchParams::default(), &Patch::Merge(overwrite)).await.unwrap();
    eventually("the taken ConfigMap to be adopted", || async {
        let c = cms.get("taken").await.ok()?;
        (c.labels().get("karmada.io/managed").map(String::as_str) == Some("true") && c.data?.get("owner").map(String::as_str) == Some("flotilla")).then_some(())
    })
    .await;

    // preserveResourcesOnDeletion: the Work goes, the object stays, released.
    let mut kept = work("kept", &es, vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept", "namespace": ns}, "data": {"a": "b"}})]);
    kept.spec.preserve_resources_on_deletion = Some(true);
    works.create(&PostParams::default(), &kept).await.unwrap();
    eventually("the kept ConfigMap", || async { cms.get_opt("kept").await.ok()?.map(|_| ()) }).await;
    works.delete("kept", &DeleteParams::default()).await.unwrap();
    eventually("the preserving Work to be gone", || async { works.get_opt("kept").await.ok()?.is_none().then_some(()) }).await;
    let released = cms.get("kept").await.unwrap();
    assert!(!released.labels().contains_key("karmada.io/managed") && !released.annotations().contains_key("work.karmada.io/name"), "{:?}", released.metadata);

    // Re-joined with a new credential (the old token revoked): corrections go on with it.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(member.clone(), "karmada-cluster");
    accounts.delete(&format!("karmada-{name}"), &DeleteParams::default()).await.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(member.clone(), "karmada-cluster");
    eventually("the old token to be revoked", || async { secrets.get_opt(&format!("karmada-{name}-token")).await.ok()?.is_none().then_some(()) }).await;
    let new_creds = prepare_member(&member, &opts, &mut |_| {}).await.unwrap();
    let new_token = new_creds.token.clone();
    assert_ne!(new_token, token);
    register(&client, &opts, &MemberEndpoint::from_config(&config), &new_creds).await.unwrap();
    let old_uid = cms.get("settings").await.unwrap().uid();
    cms.delete("settings", &DeleteParams::default()).await.unwrap();
    eventually("the ConfigMap to come back after the re-join", || async { cms.get_opt("settings").await.ok()?.filter(|c| c.uid() != old_uid).map(|_| ()) })
        .await;
    eventually("the watches to run again", || async { ws.watched().get(name).is_some_and(|k| k.contains(&"/v1/ConfigMap".to_string())).then_some(()) }).await;

    // Deleting the Work deletes its objects, then the Work.
    works.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("the Work to be gone", || async { works.get_opt("web").await.ok()?.is_none().then_some(()) }).await;
    assert!(cms.get_opt("settings").await.unwrap().is_none());
    eventually("the Deployment to be gone", || async { deployments.get_opt("web").await.ok()?.is_none().then_some(()) }).await;

    // Unjoin keeping the workloads: the execution space and its Works go, the objects stay
    // (released), the Cluster goes, and so do its watches.
    works
        .create(
            &PostParams::default(),
            &work("left", &es, vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "left", "namespace": ns}})]),
        )
        .await
        .unwrap();
    eventually("the left ConfigMap", || async { cms.get_opt("left").await.ok()?.map(|_| ()) }).await;
    clusters.patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {cluster::UNJOIN_ANNOTATION: "keep"}}}))).await.unwrap();
    clusters.delete(name, &DeleteParams::default()).await.unwrap();
    eventually("the Cluster to be gone", || async { clusters.get_opt(name).await.ok()?.is_none().then_some(()) }).await;
    let left = cms.get("left").await.unwrap();
    assert!(!left.labels().contains_key("karmada.io/managed"), "{:?}", left.metadata);
    eventually("the member's watches to stop", || async { (!ws.watched().contains_key(name)).then_some(()) }).await;
    cp.controllers.abort_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_execution_space_deletes_its_works() {
    // work.karmada.io prefers v1alpha2 (bindings) and serves Work only in v1alpha1.
    let mut cp = control_plane().await;
    let client = cp.client.clone();
    cp.controllers.spawn(namespace::run(client.clone(), cp.rt.clone(), namespace::Config { requeue: Duration::from_millis(200) }));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "karmada-es-gone"}})).unwrap()).await.unwrap();
    let works: Api<Work> = Api::namespaced(client.clone(), "karmada-es-gone");
    works.create(&PostParams::default(), &work("w", "karmada-es-gone", vec![])).await.unwrap();
    namespaces.delete("karmada-es-gone", &DeleteParams::default()).await.unwrap();
    eventually("the namespace to be gone", || async { namespaces.get_opt("karmada-es-gone").await.ok()?.is_none().then_some(()) }).await;
    assert!(works.get_opt("w").await.unwrap().is_none(), "a Work outlived its namespace");
    cp.controllers.abort_all();
}
