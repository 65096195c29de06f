//! The EndpointSlice controller: one slice per Service with a selector, listing the selected
//! pods that have an IP and are not finished (ready, serving and terminating conditions, node,
//! zone and target reference), with the Service's ports resolved against the pods' named
//! container ports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use crate::cache::{ObjKey, PodInfo};
use crate::kinds::{ENDPOINT_SLICES, SERVICES};
use crate::simulator::{Ctx, Reconciled};
use crate::workloads::pods;

pub const NAME: &str = "endpointslice-controller.k8s.io";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The Service's ports as the pod serves them; a named target port the pod does not have is
/// left out, as the real controller does (with no ports left, the slice has none).
fn ports_for(svc: &Service, pod: Option<&PodInfo>) -> Vec<EndpointPort> {
    svc.spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| {
            let port = match &p.target_port {
                Some(IntOrString::Int(n)) => *n,
                Some(IntOrString::String(name)) => pod?.ports.iter().find(|(n, _, _)| &**n == name.as_str()).map(|(_, port, _)| *port)?,
                None => p.port,
            };
            Some(EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect()
}

fn endpoint(ctx: &Ctx<'_>, ns: &str, name: &str, p: &PodInfo) -> Endpoint {
    let zone = p.node.as_deref().and_then(|n| ctx.cache.nodes.get(n)).and_then(|n| n.labels.get("topology.kubernetes.io/zone")).map(String::from);
    Endpoint {
        addresses: vec![p.ip.map(|ip| ip.to_string()).unwrap_or_default()],
        conditions: Some(EndpointConditions { ready: Some(p.ready && !p.terminating), serving: Some(p.ready), terminating: Some(p.terminating) }),
        hostname: p.hostname.as_deref().map(String::from),
        node_name: p.node.as_deref().map(String::from),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            name: Some(name.into()),
            namespace: Some(ns.into()),
            uid: Some(p.uid.to_string()),
            ..Default::default()
        }),
        zone,
        ..Default::default()
    }
}

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let Some(svc) = ctx.cache.services.get(key).cloned() else { return Ok(None) };
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.clone()).filter(|s| !s.is_empty()) else { return Ok(None) };
    if svc.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let mut selected: Vec<(&ObjKey, &PodInfo)> =
        ctx.cache.pods_in(ns).filter(|(_, p)| p.ip.is_some() && !p.phase.terminal() && crate::selectors::matches_map(&selector, |l| p.labels.get(l))).collect();
    selected.sort_by(|a, b| a.0.cmp(b.0));
    let endpoints: Vec<Endpoint> = selected.iter().map(|(k, p)| endpoint(ctx, ns, &k.1, p)).collect();
    let ports = ports_for(&svc, selected.first().map(|(_, p)| *p));
    let existing: Vec<_> = ctx
        .cache
        .endpoint_slices
        .range((ns.to_string(), String::new())..)
        .take_while(|(k, _)| k.0 == ns)
        .filter(|(_, s)| {
            let l = s.metadata.labels.as_ref();
            l.and_then(|l| l.get(SERVICE_NAME_LABEL)).map(String::as_str) == Some(name)
                && l.and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str) == Some(NAME)
        })
        .map(|(_, s)| s.clone())
        .collect();
    let mut labels: BTreeMap<String, String> = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name.into());
    labels.insert(MANAGED_BY_LABEL.into(), NAME.into());
    let (endpoints, ports) = if endpoints.is_empty() || ports.is_empty() { (endpoints, None) } else { (endpoints, Some(ports)) };
    let same = |s: &EndpointSlice| {
        let mut have = s.endpoints.clone().unwrap_or_default();
        have.sort_by(|a, b| a.target_ref.as_ref().and_then(|t| t.name.clone()).cmp(&b.target_ref.as_ref().and_then(|t| t.name.clone())));
        have == endpoints && s.ports == ports && s.metadata.labels.as_ref() == Some(&labels)
    };
    if let Some(first) = existing.first() {
        for extra in &existing[1..] {
            let n = extra.metadata.name.as_deref().unwrap_or("");
            match ctx.api.delete(&ENDPOINT_SLICES, ns, n, &json!({})).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        if same(first) {
            return Ok(None);
        }
        let mut slice = (**first).clone();
        let annotations = slice.metadata.annotations.get_or_insert_with(BTreeMap::new);
        // An empty slice (the real controller's placeholder) has no trigger time.
        if endpoints.is_empty() {
            annotations.remove(TRIGGER_TIME);
        } else {
            annotations.insert(TRIGGER_TIME.into(), trigger_time());
        }
        if slice.metadata.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
            slice.metadata.annotations = None;
        }
        slice.endpoints = (!endpoints.is_empty()).then_some(endpoints);
        slice.ports = ports;
        slice.metadata.labels = Some(labels);
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        ctx.api.replace(&ENDPOINT_SLICES, ns, &slice_name, &serde_json::to_value(&slice).unwrap_or_default(), false).await?;
        return Ok(None);
    }
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(ns.into()),
            labels: Some(labels),
            annotations: (!endpoints.is_empty()).then(|| [(TRIGGER_TIME.to_string(), trigger_time())].into()),
            owner_references: Some(vec![pods::owner_ref(&SERVICES, name, svc.metadata.uid.as_deref().unwrap_or(""))]),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: (!endpoints.is_empty()).then_some(endpoints),
        ports,
    };
    ctx.api.create(&ENDPOINT_SLICES, ns, &serde_json::to_value(&slice).unwrap_or_default()).await?;
    Ok(None)
}

fn trigger_time() -> String {
    serde_json::to_value(pods::now()).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}
