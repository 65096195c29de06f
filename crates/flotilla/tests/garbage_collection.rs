//! Garbage collection by ownerReferences on `flotilla up`: Background, Foreground (with
//! `blockOwnerDeletion`) and Orphan deletes through kubectl's `--cascade`, dependents of an
//! owner that never existed, an object keeping its live owner while shedding a dead one, and a
//! custom resource of a CRD created after the collector started. The same scenario runs
//! against a real cluster (a testenv member: kube-controller-manager's garbage collector), so
//! every expectation below is one a real cluster meets.

mod support;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use support::{Flotilla, kubectl_bin};

const WAIT: Duration = Duration::from_secs(120);

fn owner_ref(owner: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap(),
        uid: owner.metadata.uid.clone().unwrap(),
        block_owner_deletion: block.then_some(true),
        ..Default::default()
    }
}

async fn config_map(api: &Api<ConfigMap>, name: &str, owners: Vec<OwnerReference>, finalizers: &[&str]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.owner_references = (!owners.is_empty()).then_some(owners);
    cm.metadata.finalizers = (!finalizers.is_empty()).then(|| finalizers.iter().map(|f| f.to_string()).collect());
    api.create(&PostParams::default(), &cm).await.unwrap()
}

/// Poll `check` until it yields `Some`, failing the test with `what` after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() > deadline => panic!("timed out waiting for {what}; last: {last}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn gone(api: &Api<ConfigMap>, name: &str) {
    eventually(&format!("{name} to be collected"), || async {
        match api.get_opt(name).await.unwrap() {
            None => Ok(()),
            Some(cm) => Err(format!("{:?}", cm.metadata)),
        }
    })
    .await
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) {
    let out = Command::new(kubectl_bin()).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

async fn client_of(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    kube::Client::try_from(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_take_their_dependents_with_them_as_asked() {
    let cp = Flotilla::start_with(&["--gc-rediscover-interval", "1s"]);
    scenario(&cp.kubeconfig, "default", "gc.example.com").await;
    drop(cp);
}

/// The scenario against a real cluster: what Flotilla is held to is what a real one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_cluster_collects_the_same_way() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let kubeconfig = env.member("member3").kubeconfig.clone();
    let ns = format!("gc-{}", std::process::id());
    kubectl(&kubeconfig, &["create", "namespace", &ns]);
    let group = format!("g{}.gc.example.com", std::process::id());
    scenario(&kubeconfig, &ns, &group).await;
    kubectl(&kubeconfig, &["delete", "namespace", &ns, "--wait=false"]);
    kubectl(&kubeconfig, &["delete", "crd", &format!("widgets.{group}"), &format!("gadgets.{group}"), "--wait=false"]);
}

async fn scenario(kubeconfig: &std::path::Path, ns: &str, group: &str) {
    let client = client_of(kubeconfig).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);

    // Background (kubectl's default): the owner goes at once, then its dependents.
    let owner = config_map(&cms, "bg-owner", vec![], &[]).await;
    config_map(&cms, "bg-dep-1", vec![owner_ref(&owner, false)], &[]).await;
    config_map(&cms, "bg-dep-2", vec![owner_ref(&owner, true)], &[]).await;
    kubectl(kubeconfig, &["-n", ns, "delete", "configmap", "bg-owner"]);
    gone(&cms, "bg-dep-1").await;
    gone(&cms, "bg-dep-2").await;

    // Foreground: the owner stays, marked, until its blocking dependent is gone; a dependent
    // held by its own finalizer holds the owner too.
    let owner = config_map(&cms, "fg-owner", vec![], &[]).await;
    config_map(&cms, "fg-held", vec![owner_ref(&owner, true)], &["example.com/hold"]).await;
    config_map(&cms, "fg-free", vec![owner_ref(&owner, false)], &[]).await;
    kubectl(kubeconfig, &["-n", ns, "delete", "configmap", "fg-owner", "--cascade=foreground", "--wait=false"]);
    gone(&cms, "fg-free").await;
    let held = eventually("fg-held marked for deletion", || async {
        let cm = cms.get("fg-held").await.unwrap();
        if cm.metadata.deletion_timestamp.is_some() { Ok(cm) } else { Err(format!("{:?}", cm.metadata)) }
    })
    .await;
    let o = cms.get("fg-owner").await.expect("the owner waits for its blocking dependent");
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(o.metadata.finalizers, Some(vec!["foregroundDeletion".to_string()]));
    let release = json!({"metadata": {"finalizers": null, "resourceVersion": held.metadata.resource_version}});
    cms.patch("fg-held", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    gone(&cms, "fg-held").await;
    gone(&cms, "fg-owner").await;

    // Orphan: the owner goes, its dependents stay without the reference.
    let owner = config_map(&cms, "or-owner", vec![], &[]).await;
    let other = config_map(&cms, "or-other-owner", vec![], &[]).await;
    config_map(&cms, "or-dep", vec![owner_ref(&owner, true), owner_ref(&other, false)], &[]).await;
    kubectl(kubeconfig, &["-n", ns, "delete", "configmap", "or-owner", "--cascade=orphan"]);
    gone(&cms, "or-owner").await;
    let dep = eventually("or-dep orphaned", || async {
        let cm = cms.get("or-dep").await.unwrap();
        let refs: Vec<String> = cm.metadata.owner_references.iter().flatten().map(|o| o.name.clone()).collect();
        if refs == ["or-other-owner"] { Ok(cm) } else { Err(format!("{refs:?}")) }
    })
    .await;
    assert!(dep.metadata.deletion_timestamp.is_none());

    // An owner that never existed: collected. A dead owner beside a live one: shed, kept.
    let ghost = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "ghost".into(),
        uid: "00000000-0000-0000-0000-000000000001".into(),
        ..Default::default()
    };
    config_map(&cms, "orphan-of-ghost", vec![ghost.clone()], &[]).await;
    let live = config_map(&cms, "live-owner", vec![], &[]).await;
    config_map(&cms, "two-owners", vec![ghost, owner_ref(&live, false)], &[]).await;
    gone(&cms, "orphan-of-ghost").await;
    eventually("the ghost owner shed from two-owners", || async {
        let cm = cms.get("two-owners").await.unwrap();
        let refs: Vec<String> = cm.metadata.owner_references.iter().flatten().map(|o| o.name.clone()).collect();
        if refs == ["live-owner"] { Ok(()) } else { Err(format!("{refs:?}")) }
    })
    .await;

    // A CRD created now (found by rediscovery), its object owned by a ConfigMap.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let crds: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::from_gvk(&GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition")));
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    let widget_ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &widget_ar);
    let owner = config_map(&cms, "widget-owner", vec![], &[]).await;
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w1", "ownerReferences": [owner_ref(&owner, false)]}
    }))
    .unwrap();
    eventually("the Widget created", || async { widgets.create(&PostParams::default(), &widget).await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    // Whether the collector's new watch lists the Widget before or after its owner is gone,
    // the Widget is collected.
    kubectl(kubeconfig, &["-n", ns, "delete", "configmap", "widget-owner"]);
    eventually("the Widget collected", || async {
        match widgets.get_opt("w1").await.unwrap() {
            None => Ok(()),
            Some(w) => Err(format!("{:?}", w.metadata)),
        }
    })
    .await;

    // A kind served only at a version that is not its group's preferred one (the group prefers
    // v1, which Gadget lacks): collected all the same.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    let gadget_ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", "Gadget"), "gadgets");
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &gadget_ar);
    let owner = config_map(&cms, "gadget-owner", vec![], &[]).await;
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1alpha1"), "kind": "Gadget",
        "metadata": {"name": "g1", "ownerReferences": [owner_ref(&owner, false)]}
    }))
    .unwrap();
    eventually("the Gadget created", || async { gadgets.create(&PostParams::default(), &gadget).await.map(|_| ()).map_err(|e| e.to_string()) }).await;
    kubectl(kubeconfig, &["-n", ns, "delete", "configmap", "gadget-owner"]);
    eventually("the Gadget collected", || async {
        match gadgets.get_opt("g1").await.unwrap() {
            None => Ok(()),
            Some(g) => Err(format!("{:?}", g.metadata)),
        }
    })
    .await;
}
