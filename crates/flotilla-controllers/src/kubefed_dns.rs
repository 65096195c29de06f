//! KubeFed's multi-cluster DNS controllers (v0.6.1's `servicedns`, `ingressdns` and
//! `dnsendpoint`, removed upstream in v0.7.0), on the same engine:
//!
//! - a ServiceDNSRecord's `status` is its Domain's zone and, per Ready cluster (sorted by name),
//!   the cluster's region and zones and the same-named member Service's load-balancer status —
//!   left empty while the member has no ready endpoint for that Service (EndpointSlices, or
//!   KubeFed's Endpoints), unless
//!   `allowServiceWithoutEndpoints`. As in KubeFed, a Ready cluster without a region or zones
//!   makes the whole record wait (an error, retried), and a record whose Domain (in KubeFed's
//!   system namespace) is missing is left alone;
//! - an IngressDNSRecord's `status` is, per Ready cluster, the same-named member Ingress's
//!   load-balancer status;
//! - each record's records ([`flotilla_api::federation::kubefed::dns`]) are written to the
//!   DNSEndpoint `service-<name>` or `ingress-<name>` beside it, deleted with the record.
//!
//! A cluster's region and zones are its Cluster's `spec.region` and `spec.zones` (KubeFed read
//! them from node labels into the KubeFedCluster, which renders the Cluster here). Member
//! objects are read from the members this process reaches, whoever propagated them (KubeFed
//! required its own `kubefed.io/managed` label); a member whose objects cannot be read (a Pull
//! cluster: its agent does not report them yet) is listed with an empty load balancer, which
//! becomes KubeFed's CNAME fallback. Members are read again every `resync`, as KubeFed's
//! member informers would notice a new load-balancer address.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, is_cluster_ready};
use flotilla_api::federation::kubefed::core::DEFAULT_SYSTEM_NAMESPACE;
use flotilla_api::federation::kubefed::dns::{
    ClusterDNS, ClusterIngressDNS, DNSEndpoint, Domain, IngressDNSRecord, IngressDNSRecordStatus, RecordKind, ResolveError, ServiceDNSRecord,
    ServiceDNSRecordStatus, endpoint_object_name, ingress_endpoints, service_endpoints,
};
use flotilla_member::access::Clients;
use flotilla_runtime::Next;
use k8s_openapi::api::core::v1::{Endpoints, LoadBalancerIngress, LoadBalancerStatus, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

pub const NAME: &str = "kubefed-dns";

#[derive(Clone, Debug)]
pub struct Config {
    /// How often member load balancers are read again.
    pub resync: Duration,
    /// Timeout of each request to a member.
    pub member_timeout: Duration,
    /// KubeFed's system namespace (where Domains live).
    pub system_namespace: String,
}

impl Default for Config {
    fn default() -> Self {
        Config { resync: Duration::from_secs(10), member_timeout: Duration::from_secs(10), system_namespace: DEFAULT_SYSTEM_NAMESPACE.into() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    Service { namespace: String, name: String },
    Ingress { namespace: String, name: String },
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{namespace}/{name}: cluster {cluster} has no region or zones (set the Cluster's spec.region and spec.zones)")]
    NoTopology { namespace: String, name: String, cluster: String },
    #[error("{namespace}/{name}: {source}")]
    Resolve { namespace: String, name: String, source: ResolveError },
    #[error("{namespace}/{name}: {step}: {source}")]
    Api { namespace: String, name: String, step: &'static str, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

struct Context {
    client: Client,
    config: Config,
    clients: Arc<Clients>,
    clusters: Store<Cluster>,
    domains: Store<Domain>,
    services: Store<ServiceDNSRecord>,
    ingresses: Store<IngressDNSRecord>,
}

/// Load-balancer ingress sorted by IP, then hostname (KubeFed's order).
fn sorted(lb: Option<LoadBalancerStatus>) -> LoadBalancerStatus {
    let mut ingress: Vec<LoadBalancerIngress> = lb.and_then(|l| l.ingress).unwrap_or_default();
    ingress.sort_by(|a, b| (a.ip.as_deref(), a.hostname.as_deref()).cmp(&(b.ip.as_deref(), b.hostname.as_deref())));
    LoadBalancerStatus { ingress: (!ingress.is_empty()).then_some(ingress) }
}

fn ready_clusters(ctx: &Context) -> Vec<Arc<Cluster>> {
    let mut clusters: Vec<Arc<Cluster>> = ctx.clusters.state().into_iter().filter(|c| c.metadata.deletion_timestamp.is_none() && is_cluster_ready(c)).collect();
    clusters.sort_by_key(|c| c.name_any());
    clusters
}

async fn member(ctx: &Context, cluster: &Cluster) -> Option<Client> {
    if !ctx.clients.reaches(cluster) {
        return None;
    }
    match ctx.clients.connect(&ctx.client, cluster, ctx.config.member_timeout).await {
        Ok(conn) => Some(conn.client),
        Err(e) => {
            tracing::debug!(controller = NAME, cluster = %cluster.name_any(), error = %e, "member not reached");
            None
        }
    }
}

async fn resolve_all(hosts: Vec<String>) -> BTreeMap<String, Result<Vec<String>, String>> {
    let mut out = BTreeMap::new();
    for h in hosts {
        let r = tokio::net::lookup_host((h.as_str(), 0)).await.map(|addrs| addrs.map(|a| a.ip().to_string()).collect()).map_err(|e| e.to_string());
        out.insert(h, r);
    }
    out
}

/// The hostnames among load-balancer targets, resolved beforehand so the pure record formation
/// can look them up.
async fn resolver(statuses: impl Iterator<Item = &LoadBalancerStatus>) -> impl Fn(&str) -> Result<Vec<String>, ResolveError> {
    let hosts: Vec<String> = statuses.flat_map(|lb| lb.ingress.iter().flatten().filter_map(|i| i.hostname.clone())).collect();
    let resolved = resolve_all(hosts).await;
    move |host: &str| match resolved.get(host) {
        Some(Ok(ips)) => Ok(ips.clone()),
        Some(Err(e)) => Err(ResolveError { host: host.into(), message: e.clone() }),
        None => Err(ResolveError { host: host.into(), message: "not looked up".into() }),
    }
}

async fn write_endpoint(
    ctx: &Context,
    namespace: &str,
    kind: RecordKind,
    record: &str,
    endpoints: Vec<flotilla_api::federation::kubefed::dns::Endpoint>,
) -> Result<(), Error> {
    let name = endpoint_object_name(kind, record);
    let api: Api<DNSEndpoint> = Api::namespaced(ctx.client.clone(), namespace);
    let current =
        api.get_opt(&name).await.map_err(|source| Error::Api { namespace: namespace.into(), name: record.into(), step: "reading the DNSEndpoint", source })?;
    let want = (!endpoints.is_empty()).then_some(endpoints);
    if current.as_ref().is_some_and(|c| c.spec.endpoints == want) {
        return Ok(());
    }
    let obj = json!({"apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "DNSEndpoint", "metadata": {"name": name, "namespace": namespace}, "spec": {"endpoints": want}});
    api.patch(&name, &PatchParams::apply(NAME).force(), &Patch::Apply(&obj)).await.map_err(|source| Error::Api {
        namespace: namespace.into(),
        name: record.into(),
        step: "writing the DNSEndpoint",
        source,
    })?;
    tracing::info!(controller = NAME, namespace, dnsendpoint = %name, "DNSEndpoint written");
    Ok(())
}

/// Merge-patch a record's status.
async fn write_status<K>(ctx: &Context, namespace: &str, name: &str, status: &impl serde::Serialize) -> Result<(), Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await.map(|_| ()).map_err(|source| Error::Api {
        namespace: namespace.into(),
        name: name.into(),
        step: "writing the status",
        source,
    })
}

async fn delete_endpoint(ctx: &Context, namespace: &str, kind: RecordKind, record: &str) -> Result<Next, Error> {
    let name = endpoint_object_name(kind, record);
    let api: Api<DNSEndpoint> = Api::namespaced(ctx.client.clone(), namespace);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(source) => Err(Error::Api { namespace: namespace.into(), name: record.into(), step: "deleting the DNSEndpoint", source }),
    }
}

/// Whether the member's Service has an address to send traffic to: a ready endpoint in one of
/// its EndpointSlices, or (KubeFed's test, for members still writing them) an address in its
/// Endpoints — Kubernetes 1.33 deprecates Endpoints and a cluster may not write them at all.
async fn has_endpoints(member: &Client, namespace: &str, name: &str) -> bool {
    let lp = kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    let slices = Api::<EndpointSlice>::namespaced(member.clone(), namespace).list(&lp).await.map(|l| l.items).unwrap_or_default();
    let ready =
        slices.iter().flat_map(|s| s.endpoints.iter().flatten()).any(|e| !e.addresses.is_empty() && e.conditions.as_ref().and_then(|c| c.ready) != Some(false));
    if ready {
        return true;
    }
    let e = Api::<Endpoints>::namespaced(member.clone(), namespace).get_opt(name).await.ok().flatten();
    e.and_then(|e| e.subsets).into_iter().flatten().any(|s| s.addresses.is_some_and(|a| !a.is_empty()))
}

async fn reconcile_service(ctx: &Context, namespace: &str, name: &str) -> Result<Next, Error> {
    let Some(record) = ctx.services.get(&ObjectRef::new(name).within(namespace)) else {
        return delete_endpoint(ctx, namespace, RecordKind::Service, name).await;
    };
    let Some(domain) = ctx.domains.get(&ObjectRef::new(&record.spec.domain_ref).within(&ctx.config.system_namespace)) else {
        tracing::debug!(controller = NAME, namespace, name, domain = %record.spec.domain_ref, "Domain not found; record left alone");
        return Ok(Next::After(ctx.config.resync));
    };
    let mut dns = Vec::new();
    for cluster in ready_clusters(ctx) {
        let cname = cluster.name_any();
        let region = cluster.spec.region.clone().filter(|r| !r.is_empty());
        let zones = cluster.spec.zones.clone().unwrap_or_default();
        let (Some(region), false) = (region, zones.is_empty()) else {
            return Err(Error::NoTopology { namespace: namespace.into(), name: name.into(), cluster: cname });
        };
        let mut lb = LoadBalancerStatus::default();
        if let Some(m) = member(ctx, &cluster).await {
            let svc = Api::<Service>::namespaced(m.clone(), namespace).get_opt(name).await.ok().flatten();
            let endpoints_exist = record.spec.allow_service_without_endpoints == Some(true) || has_endpoints(&m, namespace, name).await;
            if endpoints_exist {
                lb = sorted(svc.and_then(|s| s.status).and_then(|s| s.load_balancer));
            }
        }
        dns.push(ClusterDNS { cluster: Some(cname), load_balancer: lb, zones: Some(zones), region: Some(region) });
    }
    let status = ServiceDNSRecordStatus { domain: Some(domain.domain.clone()), dns: Some(dns) };
    if record.status.as_ref() != Some(&status) {
        write_status::<ServiceDNSRecord>(ctx, namespace, name, &status).await?;
    }
    let resolve = resolver(status.dns.iter().flatten().map(|c| &c.load_balancer)).await;
    let endpoints = service_endpoints(name, namespace, &record.spec, &status, &resolve).map_err(|source| Error::Resolve {
        namespace: namespace.into(),
        name: name.into(),
        source,
    })?;
    write_endpoint(ctx, namespace, RecordKind::Service, name, endpoints).await?;
    Ok(Next::After(ctx.config.resync))
}

async fn reconcile_ingress(ctx: &Context, namespace: &str, name: &str) -> Result<Next, Error> {
    let Some(record) = ctx.ingresses.get(&ObjectRef::new(name).within(namespace)) else {
        return delete_endpoint(ctx, namespace, RecordKind::Ingress, name).await;
    };
    let mut dns = Vec::new();
    for cluster in ready_clusters(ctx) {
        let mut lb = LoadBalancerStatus::default();
        if let Some(m) = member(ctx, &cluster).await {
            let ing = Api::<Ingress>::namespaced(m, namespace).get_opt(name).await.ok().flatten();
            let ingress_lb = ing.and_then(|i| i.status).and_then(|s| s.load_balancer);
            // An Ingress's load-balancer entries carry the same ip/hostname as a Service's.
            let converted = ingress_lb.map(|l| LoadBalancerStatus {
                ingress: l.ingress.map(|v| v.into_iter().map(|i| LoadBalancerIngress { ip: i.ip, hostname: i.hostname, ..Default::default() }).collect()),
            });
            lb = sorted(converted);
        }
        dns.push(ClusterIngressDNS { cluster: Some(cluster.name_any()), load_balancer: lb });
    }
    let status = IngressDNSRecordStatus { dns: Some(dns) };
    if record.status.as_ref() != Some(&status) {
        write_status::<IngressDNSRecord>(ctx, namespace, name, &status).await?;
    }
    let resolve = resolver(status.dns.iter().flatten().map(|c| &c.load_balancer)).await;
    let endpoints =
        ingress_endpoints(&record.spec, &status, &resolve).map_err(|source| Error::Resolve { namespace: namespace.into(), name: name.into(), source })?;
    write_endpoint(ctx, namespace, RecordKind::Ingress, name, endpoints).await?;
    Ok(Next::After(ctx.config.resync))
}

fn service_key(r: &ServiceDNSRecord) -> Key {
    Key::Service { namespace: r.namespace().unwrap_or_default(), name: r.name_any() }
}

fn ingress_key(r: &IngressDNSRecord) -> Key {
    Key::Ingress { namespace: r.namespace().unwrap_or_default(), name: r.name_any() }
}

/// Run the controllers until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config, clients: Arc<Clients>) {
    let services = rt.informers.store::<ServiceDNSRecord>();
    let ingresses = rt.informers.store::<IngressDNSRecord>();
    let (all_services, all_ingresses) = (services.clone(), ingresses.clone());
    let every =
        move || -> Vec<Key> { all_services.state().iter().map(|r| service_key(r)).chain(all_ingresses.state().iter().map(|r| ingress_key(r))).collect() };
    let every2 = every.clone();
    let ctx =
        Arc::new(Context { client, config, clients, clusters: rt.informers.store::<Cluster>(), domains: rt.informers.store::<Domain>(), services, ingresses });
    rt.controller::<Key>(NAME)
        .watches_changes(|old: Option<&ServiceDNSRecord>, r: &ServiceDNSRecord, deleted| {
            (deleted || old.is_none_or(|o| o.spec != r.spec)).then(|| service_key(r))
        })
        .watches_changes(|old: Option<&IngressDNSRecord>, r: &IngressDNSRecord, deleted| {
            (deleted || old.is_none_or(|o| o.spec != r.spec)).then(|| ingress_key(r))
        })
        .watches(move |_d: &Domain, _deleted| every())
        .watches_changes(move |old: Option<&Cluster>, c: &Cluster, deleted| {
            let moved =
                deleted || old.is_none_or(|o| is_cluster_ready(o) != is_cluster_ready(c) || o.spec.region != c.spec.region || o.spec.zones != c.spec.zones);
            if moved { every2() } else { Vec::new() }
        })
        .backoff(Duration::from_millis(500), Duration::from_secs(60))
        .run(move |key: Key| {
            let ctx = ctx.clone();
            async move {
                match key {
                    Key::Service { namespace, name } => reconcile_service(&ctx, &namespace, &name).await,
                    Key::Ingress { namespace, name } => reconcile_ingress(&ctx, &namespace, &name).await,
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_balancers_are_sorted_by_ip_then_hostname() {
        let i = |ip: Option<&str>, host: Option<&str>| LoadBalancerIngress { ip: ip.map(String::from), hostname: host.map(String::from), ..Default::default() };
        let lb = sorted(Some(LoadBalancerStatus { ingress: Some(vec![i(Some("10.0.0.2"), None), i(None, Some("b.test")), i(Some("10.0.0.1"), None)]) }));
        let order: Vec<(Option<String>, Option<String>)> = lb.ingress.unwrap().into_iter().map(|i| (i.ip, i.hostname)).collect();
        assert_eq!(order, [(None, Some("b.test".into())), (Some("10.0.0.1".into()), None), (Some("10.0.0.2".into()), None)]);
        assert_eq!(sorted(None), LoadBalancerStatus::default());
    }
}
