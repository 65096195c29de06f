//! Keeps the DNS table current: the control plane's ServiceImports, imported EndpointSlices,
//! DNSEndpoints and Clusters from the shared informers; any change rebuilds the table (changes
//! that arrive together are taken in one rebuild).

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::kubefed::dns::DNSEndpoint;
use flotilla_api::federation::mcs::{IMPORTED_MANAGED_BY, SLICE_MANAGED_BY, ServiceImport};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::server::Shared;
use super::table::{Inputs, Settings, build};

/// Rebuild `shared`'s table from `rt`'s informers until shutdown.
pub async fn run(rt: flotilla_runtime::Runtime, settings: Settings, shared: Shared) {
    let imports = rt.informers.store::<ServiceImport>();
    let slices = rt.informers.store::<EndpointSlice>();
    let endpoints = rt.informers.store::<DNSEndpoint>();
    let clusters = rt.informers.store::<Cluster>();
    let changed = Arc::new(tokio::sync::Notify::new());
    let n = changed.clone();
    rt.informers.subscribe::<ServiceImport>(move |_, _| n.notify_one());
    let n = changed.clone();
    rt.informers.subscribe::<EndpointSlice>(move |s: &EndpointSlice, _| {
        if s.labels().get(SLICE_MANAGED_BY).map(String::as_str) == Some(IMPORTED_MANAGED_BY) {
            n.notify_one();
        }
    });
    let n = changed.clone();
    rt.informers.subscribe::<DNSEndpoint>(move |_, _| n.notify_one());
    let n = changed.clone();
    rt.informers.subscribe_changes::<Cluster>(move |old: Option<&Cluster>, c: &Cluster, deleted| {
        if deleted || old.is_none_or(|o| is_cluster_ready(o) != is_cluster_ready(c)) {
            n.notify_one();
        }
    });
    let shutdown = rt.shutdown.clone();
    while crate::next_change(&changed, &shutdown).await {
        let imported: Vec<Arc<EndpointSlice>> =
            slices.state().into_iter().filter(|s| s.labels().get(SLICE_MANAGED_BY).map(String::as_str) == Some(IMPORTED_MANAGED_BY)).collect();
        let ready = |name: &str| clusters.get(&ObjectRef::new(name)).is_some_and(|c| is_cluster_ready(&c));
        let table = build(&Inputs { imports: &imports.state(), slices: &imported, dns_endpoints: &endpoints.state(), ready: &ready }, &settings);
        tracing::debug!(names = table.records.len(), "DNS table rebuilt");
        shared.set(table);
    }
}
