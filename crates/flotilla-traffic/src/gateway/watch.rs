//! Keeps the gateway's routing table and certificates current from the control plane: its
//! MultiClusterIngresses, the FederatedIngresses of the FederatedTypeConfig whose target is
//! Ingress, the Services and ServiceImports (for port names), the member slices the report
//! Works of either multi-cluster service path carry, the ingresses' TLS Secrets and the
//! Clusters' readiness. Changes that arrive together are taken
//! in one rebuild.

use std::collections::HashMap;
use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::karmada::names::cluster_of_execution_space;
use flotilla_api::federation::karmada::networking::MultiClusterIngress;
use flotilla_api::federation::karmada::work::Work;
use flotilla_api::federation::kubefed::core::FederatedTypeConfig;
use flotilla_api::federation::mcs::{ServiceImport, is_report};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressSpec;
use kube::ResourceExt;
use kube::api::ApiResource;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;

use super::Shared;
use super::routes::{Ingress, Inputs, Settings, build};

/// The Federated<Kind> resource of a FederatedTypeConfig whose target is an Ingress.
fn federated_ingress(ftc: &FederatedTypeConfig) -> Option<ApiResource> {
    let target = &ftc.spec.target_type;
    let target_group = target.group.as_deref().unwrap_or_default();
    if target.kind != "Ingress" || !matches!(target_group, "networking.k8s.io" | "extensions") {
        return None;
    }
    let f = &ftc.spec.federated_type;
    let group = f.group.clone().unwrap_or_default();
    let api_version = if group.is_empty() { f.version.clone() } else { format!("{group}/{}", f.version) };
    Some(ApiResource { group, version: f.version.clone(), api_version, kind: f.kind.clone(), plural: f.plural_name.clone() })
}

/// Rebuild `shared`'s table and certificates from `rt`'s informers until shutdown.
pub async fn run(rt: flotilla_runtime::Runtime, settings: Settings, shared: Shared) {
    let changed = Arc::new(tokio::sync::Notify::new());
    let notify = |c: &Arc<tokio::sync::Notify>| {
        let c = c.clone();
        move || c.notify_one()
    };
    let n = notify(&changed);
    rt.informers.subscribe::<MultiClusterIngress>(move |_, _| n());
    let n = notify(&changed);
    rt.informers.subscribe::<Service>(move |_, _| n());
    let n = notify(&changed);
    rt.informers.subscribe::<ServiceImport>(move |_, _| n());
    let n = notify(&changed);
    rt.informers.subscribe::<Secret>(move |s: &Secret, _| {
        if s.type_.as_deref() == Some("kubernetes.io/tls") {
            n()
        }
    });
    let n = notify(&changed);
    rt.informers.subscribe_changes::<Work>(move |old: Option<&Work>, w: &Work, deleted| {
        // A report's slice or labels, not its status.
        if is_report(w) && (deleted || old.is_none_or(|o| o.spec != w.spec || o.labels() != w.labels())) {
            n()
        }
    });
    let n = notify(&changed);
    rt.informers.subscribe_changes::<Cluster>(move |old: Option<&Cluster>, c: &Cluster, deleted| {
        if deleted || old.is_none_or(|o| is_cluster_ready(o) != is_cluster_ready(c)) {
            n()
        }
    });
    // A FederatedIngress type is watched once its FederatedTypeConfig names it.
    let federated: Arc<Mutex<Vec<ApiResource>>> = Arc::default();
    {
        let federated = federated.clone();
        let informers = rt.informers.clone();
        let changed = changed.clone();
        rt.informers.subscribe::<FederatedTypeConfig>(move |ftc: &FederatedTypeConfig, deleted| {
            let Some(ar) = federated_ingress(ftc).filter(|_| !deleted) else { return };
            let mut known = federated.lock();
            if known.iter().any(|k| k.api_version == ar.api_version && k.plural == ar.plural) {
                return;
            }
            known.push(ar.clone());
            let n = notify(&changed);
            informers.subscribe_dynamic(&ar, move |_, _, _| n());
        });
    }
    let mcis = rt.informers.store::<MultiClusterIngress>();
    let services = rt.informers.store::<Service>();
    let imports = rt.informers.store::<ServiceImport>();
    let works = rt.informers.store::<Work>();
    // Each report's slice, parsed once per version of its Work.
    let mut parsed: HashMap<(String, String), (String, Arc<EndpointSlice>)> = HashMap::new();
    let secrets = rt.informers.store::<Secret>();
    let clusters = rt.informers.store::<Cluster>();
    let mut reported: Vec<String> = Vec::new();
    let shutdown = rt.shutdown.clone();
    while crate::next_change(&changed, &shutdown).await {
        let mci_list = mcis.state();
        let mut specs: Vec<(&'static str, String, String, IngressSpec)> =
            mci_list.iter().map(|m| ("MultiClusterIngress", m.namespace().unwrap_or_default(), m.name_any(), m.spec.0.clone())).collect();
        let resources = federated.lock().clone();
        for ar in &resources {
            for f in rt.informers.dynamic_store(ar).state() {
                let spec = f.data.pointer("/spec/template/spec").cloned().map(serde_json::from_value::<IngressSpec>);
                match spec {
                    Some(Ok(spec)) => specs.push(("FederatedIngress", f.namespace().unwrap_or_default(), f.name_any(), spec)),
                    Some(Err(e)) => tracing::debug!(name = %f.name_any(), error = %e, "gateway: a FederatedIngress template is not an Ingress spec; skipped"),
                    None => {}
                }
            }
        }
        let ingresses: Vec<Ingress<'_>> = specs.iter().map(|(kind, ns, name, spec)| Ingress { kind, namespace: ns, name, spec }).collect();
        let mut member_slices: Vec<(String, Arc<EndpointSlice>)> = Vec::new();
        let mut seen = HashMap::new();
        for w in works.state().iter().filter(|w| is_report(w)) {
            let Some(cluster) = w.namespace().as_deref().and_then(cluster_of_execution_space).map(String::from) else { continue };
            let key = (w.namespace().unwrap_or_default(), w.name_any());
            let version = w.resource_version().unwrap_or_default();
            let slice = match parsed.get(&key) {
                Some((v, s)) if *v == version => Some(s.clone()),
                _ => w
                    .spec
                    .workload
                    .as_ref()
                    .and_then(|t| t.manifests.as_ref()?.first().cloned())
                    .and_then(|m| serde_json::from_value::<EndpointSlice>(m).ok())
                    .map(Arc::new),
            };
            if let Some(slice) = slice {
                seen.insert(key, (version, slice.clone()));
                member_slices.push((cluster, slice));
            }
        }
        parsed = seen;

        let ready = |name: &str| clusters.get(&ObjectRef::new(name)).is_some_and(|c| is_cluster_ready(&c));
        let inputs = Inputs { ingresses: &ingresses, services: &services.state(), imports: &imports.state(), slices: &member_slices, ready: &ready };
        let routes = build(&inputs, &settings, Some(&shared.routes()));
        let (certs, problems) = super::tls::load(&routes.tls, &|ns, name| secrets.get(&ObjectRef::new(name).within(ns)));
        if problems != reported {
            for p in &problems {
                tracing::warn!("gateway: {p}; the gateway's own certificate is served instead");
            }
            reported = problems;
        }
        tracing::debug!(hosts = routes.hosts().len(), certificates = certs.len(), reported_slices = member_slices.len(), "gateway routes rebuilt");
        shared.set_routes(routes);
        shared.set_certs(certs);
    }
}
