//! CustomResourceDefinitions through kube-rs over HTTPS: establishing, serving, pruning,
//! defaulting, validation with field causes, status and scale subresources, printer columns,
//! several versions, and the deletion lifecycle.

use std::sync::Arc;
use std::time::Duration;

use flotilla_apiserver::pki::{Authority, kubeconfig};
use flotilla_apiserver::serve::{ServeConfig, serve};
use flotilla_apiserver::{ApiServer, ApiServerConfig};
use flotilla_store::Store;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;

struct Server {
    client: Client,
    _api: ApiServer,
    _serving: flotilla_apiserver::serve::Serving,
}

async fn start() -> Server {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let config = ApiServerConfig { crd_retry: Duration::from_millis(100), ..ApiServerConfig::default() };
    let api = ApiServer::new(store, config);
    api.bootstrap().await.unwrap();
    let ca = Authority::generate("test-ca").unwrap();
    let cert = ca.issue_server(&["127.0.0.1".to_string()]).unwrap();
    let admin = ca.issue_client("admin", &["system:masters"]).unwrap();
    let mut cfg = ServeConfig::new("127.0.0.1:0".parse().unwrap(), cert.cert_pem, cert.key_pem);
    cfg.client_ca_pem = Some(ca.cert_pem.clone());
    let serving = serve(api.router(), cfg).await.unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig("t", &format!("https://{}", serving.local_addr), &ca.cert_pem, &admin)).unwrap();
    let client = Client::try_from(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap()).unwrap();
    Server { client, _api: api, _serving: serving }
}

pub fn widget_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 1},
                            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                            "replicas": {"type": "integer"}
                        }},
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}, "replicas": {"type": "integer"}, "selector": {"type": "string"}}}
                    }}},
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}, {"name": "Color", "type": "string", "jsonPath": ".spec.color"}]
                },
                {
                    "name": "v2", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
                }
            ]
        }
    })
}

async fn establish(client: &Client, crd: serde_json::Value) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), await_condition(crds.clone(), &name, conditions::is_crd_established()))
        .await
        .expect("the CRD was not established in time")
        .unwrap();
    crds.get(&name).await.unwrap()
}

fn widgets(client: &Client, version: &str, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", version, "Widget"), "widgets");
    Api::namespaced_with(client.clone(), ns, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_lifecycle_and_custom_objects() {
    let s = start().await;
    let crd = establish(&s.client, widget_crd()).await;
    let status = crd.status.unwrap();
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    assert_eq!(status.accepted_names.unwrap().kind, "Widget");
    let conds = status.conditions.unwrap();
    assert!(conds.iter().any(|c| c.type_ == "NamesAccepted" && c.status == "True"));

    // Discovery shows the new resource with its short name and category.
    let discovery = kube::discovery::Discovery::new(s.client.clone()).run().await.unwrap();
    let (ar, caps) = discovery.resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget")).expect("discovered");
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);

    let api = widgets(&s.client, "v1", "default");
    let obj: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3, "unknown": true}, "status": {"ready": true}}),
    )
    .unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.data["spec"]["color"], "red", "defaulted");
    assert!(created.data["spec"].get("unknown").is_none(), "pruned");
    assert!(created.data.get("status").is_none(), "status is dropped on create with the status subresource");
    assert_eq!(created.metadata.generation, Some(1));

    // Validation: a 422 naming each field.
    let bad: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {"size": 0, "color": "green"}}))
            .unwrap();
    let err = api.create(&PostParams::default(), &bad).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("{err:?}") };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let fields: Vec<String> = status.details.unwrap().causes.into_iter().map(|c| c.field).collect();
    assert!(fields.contains(&"spec.size".to_string()) && fields.contains(&"spec.color".to_string()), "{fields:?}");

    // Status subresource: status writes do not touch spec or generation; spec writes ignore status.
    api.patch_status("w1", &PatchParams::default(), &Patch::Merge(json!({"status": {"ready": true, "replicas": 2, "selector": "app=w"}, "spec": {"size": 9}})))
        .await
        .unwrap();
    let w = api.get("w1").await.unwrap();
    assert_eq!(w.data["status"]["ready"], true);
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(w.metadata.generation, Some(1));
    api.patch("w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 4}, "status": {"ready": false}}))).await.unwrap();
    let w = api.get("w1").await.unwrap();
    assert_eq!((w.data["spec"]["size"].as_i64(), w.data["status"]["ready"].as_bool()), (Some(4), Some(true)));
    assert_eq!(w.metadata.generation, Some(2));

    // Scale subresource.
    let scale: serde_json::Value = api.get_subresource("scale", "w1").await.map(|o| serde_json::to_value(o).unwrap()).unwrap();
    assert_eq!(scale["status"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=w");
    api.patch_subresource("scale", "w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    assert_eq!(api.get("w1").await.unwrap().data["spec"]["replicas"], 5);

    // A second served version: the same object, other apiVersion.
    let v2 = widgets(&s.client, "v2", "default");
    let w2 = v2.get("w1").await.unwrap();
    assert_eq!(w2.types.unwrap().api_version, "example.com/v2");

    // Strategic merge patch is refused for custom resources.
    let err = api.patch("w1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"size": 5}}))).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref st) if st.code == 415), "{err:?}");

    // Deleting the CRD deletes its objects, then the CRD, then its routes.
    let crds: Api<CustomResourceDefinition> = Api::all(s.client.clone());
    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while crds.get_opt("widgets.example.com").await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the CRD was not deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = api.get("w1").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref st) if st.code == 404), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_crds_are_refused_with_causes() {
    let s = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(s.client.clone());
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("wrong.example.com");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = json!({"description": "no type"});
    let err = crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap_err();
    let kube::Error::Api(status) = err else { panic!("{err:?}") };
    assert_eq!(status.code, 422);
    let fields: Vec<String> = status.details.unwrap().causes.into_iter().map(|c| c.field).collect();
    assert!(fields.contains(&"metadata.name".to_string()), "{fields:?}");
    assert!(fields.iter().any(|f| f.contains("properties[size].type")), "{fields:?}");
}

/// The federation CRDs the binary installs at start-up pass the same validation as users' CRDs
/// (schemas, defaults against their own schema, names, columns): `flotilla up` would not start
/// otherwise; installing again (every restart) passes the update validation too.
#[tokio::test]
async fn federation_crds_install_and_reinstall_unchanged() {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    let mut crds = flotilla_api::federation::crds();
    crds.extend(flotilla_api::federation::kubefed::default_federated_type_crds());
    let n = crds.len();
    assert_eq!(api.install_crds(crds.clone()).await.unwrap(), n);
    api.install_crds(crds).await.unwrap();
}

/// While a CRD is being deleted (an object with a finalizer holds it), new objects of its kind
/// are refused with 403 Forbidden, as the real server refuses them (recorded in the differential
/// case crd-delete-terminating); once the finalizer goes, the CRD goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_a_terminating_crd_are_refused() {
    let s = start().await;
    establish(&s.client, widget_crd()).await;
    let api = widgets(&s.client, "v1", "default");
    let held: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "spec": {"size": 1}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &held).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(s.client.clone());
    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let crd = crds.get("widgets.example.com").await.unwrap();
        let terminating = crd.status.and_then(|s| s.conditions).unwrap_or_default().iter().any(|c| c.type_ == "Terminating" && c.status == "True");
        if terminating {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no Terminating condition");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fresh: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "late"}, "spec": {"size": 1}})).unwrap();
    let err = api.create(&PostParams::default(), &fresh).await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref st) if st.code == 403 && st.reason == "Forbidden" && st.message.contains("terminating")), "{err:?}");
    // The held object is being deleted; releasing it lets the CRD go.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while api.get("held").await.unwrap().metadata.deletion_timestamp.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the CRD clean-up never marked the object for deletion");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    api.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while crds.get_opt("widgets.example.com").await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the CRD was not deleted after its last object");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
