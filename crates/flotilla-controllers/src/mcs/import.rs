//! The control plane's half of the MCS path (Karmada's `endpointSlice` and `serviceImport`
//! controllers, `pkg/controllers/mcs`):
//!
//! - [`run_endpoint_slices`]: each report Work a member's export controller wrote becomes the
//!   control plane's EndpointSlice `imported-<cluster>-<slice>` in the Service's namespace,
//!   labelled `kubernetes.io/service-name: derived-<service>` and managed by
//!   `endpointslice-controller.karmada.io` (endpoints, ports and address type as reported). A
//!   report going (or no longer the ServiceExport path's) takes its slices with it, then
//!   releases its finalizer.
//! - [`run_service_imports`]: a `ClusterSetIP` ServiceImport gets the Service
//!   `derived-<name>` (type ClusterIP, its ports, no selector; `spec.ips` as the load-balancer
//!   ingress); a deleted one takes it away. A Headless import has no derived Service, as in
//!   Karmada.
//!
//! The ServiceImport's dependencies (`flotilla_api::interpreter::dependencies`: the derived
//! Service and the slices labelled with it) carry both to the clusters its policy places it
//! in; a policy selecting a ServiceImport always propagates dependencies (admission).

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::names::cluster_of_execution_space;
use flotilla_api::federation::karmada::work::{WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, WORK_PERMANENT_ID_LABEL, Work};
use flotilla_api::federation::mcs::{
    CLUSTER_SET_IP, ENDPOINTSLICE_FINALIZER, IMPORTED_MANAGED_BY, MANAGED_BY_SERVICE_EXPORT, SERVICE_CLUSTER_IPS_ANNOTATION, SERVICE_NAME, SERVICE_NAME_LABEL,
    SLICE_MANAGED_BY, SOURCE_CLUSTER_ANNOTATION, ServiceImport, WORK_MANAGED_BY_LABEL, derived_service_name, imported_slice_name,
};
use flotilla_runtime::{Events, Next};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub const ENDPOINT_SLICE_NAME: &str = "endpointslice-controller";
pub const SERVICE_IMPORT_NAME: &str = "service-import-controller";
/// Events on a ServiceImport (Karmada's).
pub const EVENT_SYNC_DERIVED_SERVICE_SUCCEED: &str = "SyncDerivedServiceSucceed";
pub const EVENT_SYNC_DERIVED_SERVICE_FAILED: &str = "SyncDerivedServiceFailed";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step} {namespace}/{name}: {source}")]
    Api { step: &'static str, namespace: String, name: String, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

fn api_err(step: &'static str, namespace: &str, name: &str) -> impl FnOnce(kube::Error) -> Error {
    let (namespace, name) = (namespace.to_string(), name.to_string());
    move |source| Error::Api { step, namespace, name, source }
}

/// Whether a Work is a report of the ServiceExport path.
fn is_export_report(w: &Work) -> bool {
    w.labels().contains_key(SERVICE_NAME_LABEL) && w.labels().get(WORK_MANAGED_BY_LABEL).is_some_and(|v| v.split('.').any(|t| t == MANAGED_BY_SERVICE_EXPORT))
}

/// The control plane's slice for one reported manifest, or None when the manifest is not a slice.
pub fn imported_slice(work: &Work, cluster: &str, service: &str, manifest: &Value) -> Option<Value> {
    if manifest.get("kind").and_then(Value::as_str) != Some("EndpointSlice") {
        return None;
    }
    let meta = manifest.get("metadata")?;
    let namespace = meta.get("namespace").and_then(Value::as_str)?;
    let name = meta.get("name").and_then(Value::as_str)?;
    let mut annotations = json!({
        WORK_NAMESPACE_ANNOTATION: work.namespace().unwrap_or_default(),
        WORK_NAME_ANNOTATION: work.name_any(),
        SOURCE_CLUSTER_ANNOTATION: cluster,
    });
    if let Some(ips) = meta.pointer(&format!("/annotations/{}", SERVICE_CLUSTER_IPS_ANNOTATION.replace('/', "~1"))) {
        annotations[SERVICE_CLUSTER_IPS_ANNOTATION] = ips.clone();
    }
    Some(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": imported_slice_name(cluster, name),
            "namespace": namespace,
            "labels": {
                WORK_PERMANENT_ID_LABEL: work.labels().get(WORK_PERMANENT_ID_LABEL).cloned().unwrap_or_default(),
                SERVICE_NAME: derived_service_name(service),
                SLICE_MANAGED_BY: IMPORTED_MANAGED_BY,
            },
            "annotations": annotations,
        },
        "addressType": manifest.get("addressType").cloned().unwrap_or(json!("IPv4")),
        "endpoints": manifest.get("endpoints").cloned().unwrap_or(json!([])),
        "ports": manifest.get("ports").cloned().unwrap_or(json!([])),
    }))
}

async fn reconcile_report(client: &Client, work: Arc<Work>) -> Result<Next, Error> {
    let Some(cluster) = work.namespace().as_deref().and_then(cluster_of_execution_space).map(String::from) else { return Ok(Next::Done) };
    let holds_finalizer = work.finalizers().iter().any(|f| f == ENDPOINTSLICE_FINALIZER);
    let id = work.labels().get(WORK_PERMANENT_ID_LABEL).cloned().unwrap_or_default();
    if work.metadata.deletion_timestamp.is_some() || !is_export_report(&work) {
        if !holds_finalizer {
            return Ok(Next::Done);
        }
        // Its slices first, found by the report's permanent id (in whichever namespace).
        if !id.is_empty() {
            let all: Api<EndpointSlice> = Api::all(client.clone());
            let lp = ListParams::default().labels(&format!("{WORK_PERMANENT_ID_LABEL}={id},{SLICE_MANAGED_BY}={IMPORTED_MANAGED_BY}"));
            for s in all.list(&lp).await.map_err(api_err("listing the imported slices of", &work.namespace().unwrap_or_default(), &work.name_any()))? {
                let ns = s.namespace().unwrap_or_default();
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
                match api.delete(&s.name_any(), &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(st)) if st.code == 404 => {}
                    Err(e) => return Err(api_err("deleting imported slice", &ns, &s.name_any())(e)),
                }
            }
        }
        let finalizers: Vec<&String> = work.finalizers().iter().filter(|f| *f != ENDPOINTSLICE_FINALIZER).collect();
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": work.resource_version()}});
        let api: Api<Work> = Api::namespaced(client.clone(), &work.namespace().unwrap_or_default());
        return match api.patch(&work.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(Next::Done),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Next::After(Duration::from_millis(100))),
            Err(e) => Err(api_err("releasing report", &work.namespace().unwrap_or_default(), &work.name_any())(e)),
        };
    }
    if id.is_empty() {
        // Admission gives every Work its permanent id; a report without one is not ours to copy.
        return Ok(Next::Done);
    }
    let service = work.labels().get(SERVICE_NAME_LABEL).cloned().unwrap_or_default();
    for manifest in work.spec.workload.iter().flat_map(|t| t.manifests.iter().flatten()) {
        let Some(slice) = imported_slice(&work, &cluster, &service, manifest) else { continue };
        let (ns, name) =
            (slice["metadata"]["namespace"].as_str().unwrap_or_default().to_string(), slice["metadata"]["name"].as_str().unwrap_or_default().to_string());
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        api.patch(&name, &PatchParams::apply(ENDPOINT_SLICE_NAME).force(), &Patch::Apply(&slice)).await.map_err(api_err(
            "writing imported slice",
            &ns,
            &name,
        ))?;
    }
    Ok(Next::Done)
}

/// Run the endpointSlice controller until shutdown.
pub async fn run_endpoint_slices(client: Client, rt: flotilla_runtime::Runtime) {
    rt.controller::<ObjectRef<Work>>(ENDPOINT_SLICE_NAME)
        .watches_changes(|old: Option<&Work>, w: &Work, deleted| {
            let relevant = |w: &Work| w.labels().contains_key(SERVICE_NAME_LABEL) || w.finalizers().iter().any(|f| f == ENDPOINTSLICE_FINALIZER);
            (!deleted && (relevant(w) || old.is_some_and(relevant))).then(|| ObjectRef::from_obj(w))
        })
        .backoff(Duration::from_millis(100), Duration::from_secs(60))
        .run_objects(move |w| {
            let client = client.clone();
            async move { reconcile_report(&client, w).await }
        })
        .await;
}

/// The derived Service of a ClusterSetIP import.
pub fn derived_service(import: &ServiceImport) -> Value {
    let ports: Vec<Value> = import
        .spec
        .ports
        .iter()
        .map(|p| {
            let mut port = json!({"port": p.port, "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into())});
            if let Some(n) = &p.name {
                port["name"] = json!(n);
            }
            if let Some(a) = &p.app_protocol {
                port["appProtocol"] = json!(a);
            }
            port
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": derived_service_name(&import.name_any()), "namespace": import.namespace().unwrap_or_default()},
        "spec": {"type": "ClusterIP", "ports": ports},
    })
}

async fn reconcile_import(
    client: &Client,
    events: &Events,
    key: ObjectRef<ServiceImport>,
    imports: &kube::runtime::reflector::Store<ServiceImport>,
) -> Result<Next, Error> {
    let namespace = key.namespace.clone().unwrap_or_default();
    let derived = derived_service_name(&key.name);
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let import = imports.get(&key).filter(|i| i.metadata.deletion_timestamp.is_none() && i.spec.type_ == CLUSTER_SET_IP);
    let Some(import) = import else {
        // Gone, going or headless: no derived Service (Karmada deletes it only when the import is gone).
        if imports.get(&key).is_none() {
            match services.delete(&derived, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(st)) if st.code == 404 => {}
                Err(e) => return Err(api_err("deleting derived Service", &namespace, &derived)(e)),
            }
        }
        return Ok(Next::Done);
    };
    let svc = derived_service(&import);
    let written = services.patch(&derived, &PatchParams::apply(SERVICE_IMPORT_NAME).force(), &Patch::Apply(&svc)).await;
    let written = match written {
        Ok(s) => s,
        Err(e) => {
            events
                .publish(
                    &*import,
                    true,
                    EVENT_SYNC_DERIVED_SERVICE_FAILED,
                    "SyncDerivedService",
                    format!("Sync derived service for serviceImport({}) failed: {e}", key.name),
                )
                .await;
            return Err(api_err("writing derived Service", &namespace, &derived)(e));
        }
    };
    let ingress: Vec<Value> = import.spec.ips.iter().flatten().map(|ip| json!({"ip": ip})).collect();
    let current = written.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref()).map(|i| i.len()).unwrap_or(0);
    if !ingress.is_empty() || current > 0 {
        let status = json!({"status": {"loadBalancer": {"ingress": ingress}}});
        services.patch_status(&derived, &PatchParams::default(), &Patch::Merge(&status)).await.map_err(api_err(
            "writing derived Service status",
            &namespace,
            &derived,
        ))?;
    }
    events
        .publish(
            &*import,
            false,
            EVENT_SYNC_DERIVED_SERVICE_SUCCEED,
            "SyncDerivedService",
            format!("Sync derived service for serviceImport({}) succeed.", key.name),
        )
        .await;
    Ok(Next::Done)
}

/// Run the serviceImport controller until shutdown.
pub async fn run_service_imports(client: Client, rt: flotilla_runtime::Runtime) {
    let imports = rt.informers.store::<ServiceImport>();
    let events = Events::new(client.clone(), SERVICE_IMPORT_NAME);
    rt.controller::<ObjectRef<ServiceImport>>(SERVICE_IMPORT_NAME)
        .watches_changes(|old: Option<&ServiceImport>, i: &ServiceImport, deleted| {
            (deleted || old.is_none_or(|o| o.spec != i.spec || o.metadata.deletion_timestamp != i.metadata.deletion_timestamp)).then(|| ObjectRef::from_obj(i))
        })
        .backoff(Duration::from_millis(100), Duration::from_secs(60))
        .run(move |key| {
            let (client, events, imports) = (client.clone(), events.clone(), imports.clone());
            async move { reconcile_import(&client, &events, key, &imports).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::mcs::{ServiceImportSpec, ServicePort};

    #[test]
    fn an_imported_slice_has_karmadas_name_and_labels() {
        let mut work = Work::new("web-abc-123", Default::default());
        work.metadata.namespace = Some("karmada-es-member-1".into());
        work.metadata.labels = Some([(WORK_PERMANENT_ID_LABEL.to_string(), "id-1".to_string())].into());
        let manifest = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abc", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"},
                "annotations": {SERVICE_CLUSTER_IPS_ANNOTATION: "10.96.0.9"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.5"]}], "ports": [{"port": 80}]});
        let s = imported_slice(&work, "member-1", "web", &manifest).unwrap();
        assert_eq!(s["metadata"]["name"], "imported-member-1-web-abc");
        assert_eq!(s["metadata"]["namespace"], "shop");
        assert_eq!(s["metadata"]["labels"][SERVICE_NAME], "derived-web");
        assert_eq!(s["metadata"]["labels"][SLICE_MANAGED_BY], IMPORTED_MANAGED_BY);
        assert_eq!(s["metadata"]["labels"][WORK_PERMANENT_ID_LABEL], "id-1");
        assert_eq!(s["metadata"]["annotations"][SOURCE_CLUSTER_ANNOTATION], "member-1");
        assert_eq!(s["metadata"]["annotations"][SERVICE_CLUSTER_IPS_ANNOTATION], "10.96.0.9");
        assert_eq!(s["endpoints"][0]["addresses"][0], "10.1.0.5");
        assert!(imported_slice(&work, "member-1", "web", &json!({"kind": "ConfigMap"})).is_none());
    }

    #[test]
    fn a_derived_service_has_the_imports_ports_and_no_selector() {
        let mut import = ServiceImport::new(
            "web",
            ServiceImportSpec {
                type_: CLUSTER_SET_IP.into(),
                ports: vec![ServicePort { name: Some("http".into()), port: 80, ..Default::default() }],
                ..Default::default()
            },
        );
        import.metadata.namespace = Some("shop".into());
        let s = derived_service(&import);
        assert_eq!(s["metadata"]["name"], "derived-web");
        assert_eq!(s["spec"]["ports"], json!([{"name": "http", "port": 80, "protocol": "TCP"}]));
        assert!(s["spec"].get("selector").is_none());
    }
}
