//! kube-apiserver's part in a Service's life that Flotilla's API server leaves out (it stores
//! templates, ADR 0004): a cluster IP from the member's service network and the IP family
//! fields. The simulator writes them right after the Service is created, so for a moment a
//! new Service has none. Node ports are not allocated.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::json;

use crate::cache::ObjKey;
use crate::kinds::SERVICES;
use crate::simulator::{Ctx, Reconciled};

/// Addresses below this offset in the service network are left alone (kube-apiserver gives the
/// first to the `kubernetes` Service).
const FIRST_OFFSET: u32 = 10;

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(svc) = ctx.cache.services.get(key).cloned() else { return Ok(None) };
    let Some(spec) = svc.spec.as_ref() else { return Ok(None) };
    if svc.metadata.deletion_timestamp.is_some() || spec.type_.as_deref() == Some("ExternalName") {
        return Ok(None);
    }
    let has_ip = spec.cluster_ip.as_deref().is_some_and(|ip| !ip.is_empty());
    if has_ip && spec.ip_families.is_some() && spec.ip_family_policy.is_some() {
        return Ok(None);
    }
    let mut patch = json!({
        "metadata": {"resourceVersion": svc.metadata.resource_version},
        "spec": {"ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"},
    });
    if !has_ip {
        let Some(ip) = free_ip(ctx) else {
            tracing::warn!(service = ?key, "the member's service network is full; the Service gets no cluster IP");
            return Ok(None);
        };
        patch["spec"]["clusterIP"] = json!(ip.to_string());
        patch["spec"]["clusterIPs"] = json!([ip.to_string()]);
    }
    match ctx.api.merge_patch(&SERVICES, &key.0, &key.1, &patch, false).await {
        Ok(_) => Ok(None),
        // Gone, or changed meanwhile: the watch brings the newer version back.
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The lowest address of the service network that no Service has.
fn free_ip(ctx: &Ctx<'_>) -> Option<Ipv4Addr> {
    let (base, prefix) = ctx.config.service_cidr;
    let size = 1u32 << (32 - u32::from(prefix));
    let base = u32::from(base) & !(size - 1);
    let in_use: HashSet<Ipv4Addr> = ctx.cache.services.values().filter_map(|s| s.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()).collect();
    (FIRST_OFFSET..size - 1).map(|i| Ipv4Addr::from(base + i)).find(|ip| !in_use.contains(ip))
}
