//! KubeFed's multi-cluster DNS (`multiclusterdns.kubefed.io/v1alpha1`, KubeFed v0.6.1, removed
//! upstream in v0.7.0 and served again here on the same engine): a `Domain` names the
//! federation's DNS zone; a `ServiceDNSRecord` or `IngressDNSRecord` collects, per Ready
//! cluster, the load-balancer addresses of the same-named member Service or Ingress; the
//! records become a `DNSEndpoint` (external-dns's CRD source, and what Flotilla's built-in DNS
//! server answers).
//!
//! [`service_endpoints`] and [`ingress_endpoints`] are KubeFed's record formation
//! (`pkg/controller/dnsendpoint/{service,ingress,common}.go`): zone, region and global names,
//! a CNAME one level up where a level has no addresses, duplicates merged (an A record beats a
//! CNAME), sorted by name. Hostname targets are resolved by the caller (`resolve`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LoadBalancerStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::federation::crd::crd_of;

pub const GROUP: &str = "multiclusterdns.kubefed.io";
pub const API_VERSION: &str = "multiclusterdns.kubefed.io/v1alpha1";
/// KubeFed's TTL when a record sets none.
pub const DEFAULT_TTL: i64 = 180;
pub const RECORD_TYPE_A: &str = "A";
pub const RECORD_TYPE_CNAME: &str = "CNAME";

/// The federation's DNS zone. KubeFed's Domain has no spec: `domain` and `nameServer` sit
/// beside `metadata`. Its name is the `<federation>` label of service record names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The DNS zone, e.g. `example.com`.
    pub domain: String,
    /// The zone's authoritative name server (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_server: Option<String>,
}

impl kube_core::Resource for Domain {
    type DynamicType = ();
    type Scope = kube_core::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Domain".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "domains".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The Domain CRD: its two fields at the root of the schema, as KubeFed's CRD has them.
pub fn domain_crd() -> Value {
    let mut crd = crd_of::<shape::Domain>();
    if let Some(schema) = crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema") {
        let fields = schema.pointer("/properties/spec/properties").cloned().unwrap_or_default();
        let props = schema["properties"].as_object_mut().expect("a CRD schema has properties");
        props.remove("spec");
        if let Value::Object(fields) = fields {
            props.extend(fields);
        }
        schema["required"] = json!(["domain"]);
    }
    crd
}

/// Only to generate [`domain_crd`]: a Domain's fields under a spec that the CRD lifts out.
mod shape {
    use kube_derive::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
    #[kube(
        group = "multiclusterdns.kubefed.io",
        version = "v1alpha1",
        kind = "Domain",
        plural = "domains",
        singular = "domain",
        namespaced,
        crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
    )]
    #[serde(rename_all = "camelCase")]
    pub struct DomainFields {
        /// The DNS zone of the federation, e.g. `example.com`.
        pub domain: String,
        /// The zone's authoritative name server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub name_server: Option<String>,
    }
}

/// DNS records for the same-named federated Service.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multiclusterdns.kubefed.io",
    version = "v1alpha1",
    kind = "ServiceDNSRecord",
    plural = "servicednsrecords",
    singular = "servicednsrecord",
    namespaced,
    status = "ServiceDNSRecordStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDNSRecordSpec {
    /// The Domain (in KubeFed's system namespace) whose zone the records are in.
    pub domain_ref: String,
    /// TTL of the records; unset or 0 means 180.
    #[serde(default, rename = "recordTTL", skip_serializing_if = "Option::is_none")]
    pub record_ttl: Option<i64>,
    /// Adds the CNAME `<dnsPrefix>.<domain>` to the global name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_prefix: Option<String>,
    /// Replaces the Service's name in the record names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_name: Option<String>,
    /// Lists a cluster's load balancer even when its Service has no ready endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_service_without_endpoints: Option<bool>,
}

/// The zone and each Ready cluster's addresses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDNSRecordStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Vec<ClusterDNS>>,
}

/// One cluster's addresses for a Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDNS {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default)]
    pub load_balancer: LoadBalancerStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// DNS records for the same-named federated Ingress.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multiclusterdns.kubefed.io",
    version = "v1alpha1",
    kind = "IngressDNSRecord",
    plural = "ingressdnsrecords",
    singular = "ingressdnsrecord",
    namespaced,
    status = "IngressDNSRecordStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct IngressDNSRecordSpec {
    /// The host names, each an A record of every cluster's ingress addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// TTL of the records; unset or 0 means 180.
    #[serde(default, rename = "recordTTL", skip_serializing_if = "Option::is_none")]
    pub record_ttl: Option<i64>,
}

/// Each Ready cluster's ingress addresses.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressDNSRecordStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Vec<ClusterIngressDNS>>,
}

/// One cluster's addresses for an Ingress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIngressDNS {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default)]
    pub load_balancer: LoadBalancerStatus,
}

/// DNS records in external-dns's CRD-source form.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multiclusterdns.kubefed.io",
    version = "v1alpha1",
    kind = "DNSEndpoint",
    plural = "dnsendpoints",
    singular = "dnsendpoint",
    namespaced,
    status = "DNSEndpointStatus",
    derive = "PartialEq",
    crates(kube_core = "::kube_core", k8s_openapi = "::k8s_openapi", schemars = "::schemars")
)]
#[serde(rename_all = "camelCase")]
pub struct DNSEndpointSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<Endpoint>>,
}

/// What the consumer of the records has seen.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DNSEndpointStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One DNS record set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dns_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub record_type: String,
    #[serde(default, rename = "recordTTL", skip_serializing_if = "Option::is_none")]
    pub record_ttl: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// The CRDs of the four kinds.
pub fn crds() -> Vec<Value> {
    vec![domain_crd(), crd_of::<ServiceDNSRecord>(), crd_of::<IngressDNSRecord>(), crd_of::<DNSEndpoint>()]
}

/// The DNSEndpoint of a ServiceDNSRecord (`service-<name>`) or IngressDNSRecord (`ingress-<name>`).
pub fn endpoint_object_name(kind: RecordKind, record: &str) -> String {
    match kind {
        RecordKind::Service => format!("service-{record}"),
        RecordKind::Ingress => format!("ingress-{record}"),
    }
}

/// Which record kind a DNSEndpoint comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    Service,
    Ingress,
}

/// A load balancer's targets in KubeFed's order: each ingress entry's IP, then its hostname.
pub fn load_balancer_targets(lb: &LoadBalancerStatus) -> Vec<String> {
    let mut out = Vec::new();
    for i in lb.ingress.iter().flatten() {
        out.extend(i.ip.iter().filter(|s| !s.is_empty()).cloned());
        out.extend(i.hostname.iter().filter(|s| !s.is_empty()).cloned());
    }
    out
}

/// A failed lookup of a hostname target: the whole record is retried.
#[derive(Debug, thiserror::Error)]
#[error("resolving load-balancer hostname {host}: {message}")]
pub struct ResolveError {
    pub host: String,
    pub message: String,
}

/// Targets with hostnames resolved to addresses, sorted and unique (KubeFed's
/// `getResolvedTargets`).
fn resolved(targets: &[String], resolve: &dyn Fn(&str) -> Result<Vec<String>, ResolveError>) -> Result<Vec<String>, ResolveError> {
    let mut out = std::collections::BTreeSet::new();
    for t in targets {
        if t.parse::<std::net::IpAddr>().is_ok() {
            out.insert(t.clone());
        } else {
            out.extend(resolve(t)?);
        }
    }
    Ok(out.into_iter().collect())
}

fn ttl(record_ttl: Option<i64>) -> i64 {
    record_ttl.filter(|t| *t != 0).unwrap_or(DEFAULT_TTL)
}

/// The records of a ServiceDNSRecord (its status filled in): per cluster the zone names
/// `<prefix>.<zone>.<region>.<domain>`, the region name `<prefix>.<region>.<domain>` and the
/// global `<prefix>.<domain>`, with `<prefix>` = `<name|externalName>.<ns>.<domainRef>.svc`.
pub fn service_endpoints(
    name: &str,
    namespace: &str,
    spec: &ServiceDNSRecordSpec,
    status: &ServiceDNSRecordStatus,
    resolve: &dyn Fn(&str) -> Result<Vec<String>, ResolveError>,
) -> Result<Vec<Endpoint>, ResolveError> {
    let Some(dns) = status.dns.as_ref().filter(|d| !d.is_empty()) else { return Ok(Vec::new()) };
    let domain = status.domain.as_deref().unwrap_or("");
    let ttl = ttl(spec.record_ttl);
    let service = spec.external_name.as_deref().filter(|n| !n.is_empty()).unwrap_or(name);
    let prefix = format!("{service}.{namespace}.{}.svc", spec.domain_ref);
    let labels = spec.external_name.as_deref().filter(|n| !n.is_empty()).map(|_| BTreeMap::from([("serviceName".to_string(), name.to_string())]));
    let record = |dns_name: String, targets: &[String], up: String| -> Result<Endpoint, ResolveError> {
        let (record_type, targets) = if targets.is_empty() { (RECORD_TYPE_CNAME, vec![up]) } else { (RECORD_TYPE_A, resolved(targets, resolve)?) };
        Ok(Endpoint { dns_name, targets, record_type: record_type.into(), record_ttl: Some(ttl), labels: labels.clone() })
    };
    let global = format!("{prefix}.{domain}");
    let mut out = Vec::new();
    for c in dns {
        let targets = load_balancer_targets(&c.load_balancer);
        let region = c.region.as_deref().unwrap_or("");
        let region_name = format!("{prefix}.{region}.{domain}");
        for zone in c.zones.iter().flatten() {
            out.push(record(format!("{prefix}.{zone}.{region}.{domain}"), &targets, region_name.clone())?);
        }
        out.push(record(region_name, &targets, global.clone())?);
        out.push(record(global.clone(), &targets, String::new())?);
    }
    if let Some(p) = spec.dns_prefix.as_deref().filter(|p| !p.is_empty()) {
        out.push(Endpoint {
            dns_name: format!("{p}.{domain}"),
            targets: vec![global.clone()],
            record_type: RECORD_TYPE_CNAME.into(),
            record_ttl: Some(ttl),
            labels: labels.clone(),
        });
    }
    Ok(dedupe_and_merge(out))
}

/// The records of an IngressDNSRecord: per host an A record of every cluster's ingress
/// addresses; a host without any is left out.
pub fn ingress_endpoints(
    spec: &IngressDNSRecordSpec,
    status: &IngressDNSRecordStatus,
    resolve: &dyn Fn(&str) -> Result<Vec<String>, ResolveError>,
) -> Result<Vec<Endpoint>, ResolveError> {
    let targets: Vec<String> = status.dns.iter().flatten().flat_map(|c| load_balancer_targets(&c.load_balancer)).collect();
    let mut out = Vec::new();
    if !targets.is_empty() {
        let targets = resolved(&targets, resolve)?;
        for host in spec.hosts.iter().flatten() {
            out.push(Endpoint {
                dns_name: host.clone(),
                targets: targets.clone(),
                record_type: RECORD_TYPE_A.into(),
                record_ttl: Some(ttl(spec.record_ttl)),
                labels: None,
            });
        }
    }
    Ok(dedupe_and_merge(out))
}

/// KubeFed's `DedupeAndMergeEndpoints`: sorted by name, empty targets dropped (and records left
/// with none), same names merged — an A record beats a CNAME, same types union their targets.
pub fn dedupe_and_merge(mut endpoints: Vec<Endpoint>) -> Vec<Endpoint> {
    endpoints.sort_by(|a, b| a.dns_name.cmp(&b.dns_name));
    let mut out: Vec<Endpoint> = Vec::new();
    for mut e in endpoints {
        e.targets.retain(|t| !t.is_empty());
        if e.targets.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.dns_name == e.dns_name => {
                if last.record_type == e.record_type {
                    last.targets.extend(e.targets);
                    last.targets.sort();
                    last.targets.dedup();
                } else if e.record_type == RECORD_TYPE_A {
                    *last = e;
                }
            }
            _ => out.push(e),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::LoadBalancerIngress;

    fn lb(ips: &[&str]) -> LoadBalancerStatus {
        LoadBalancerStatus { ingress: Some(ips.iter().map(|ip| LoadBalancerIngress { ip: Some(ip.to_string()), ..Default::default() }).collect()) }
    }

    fn cluster(name: &str, region: &str, zone: &str, ips: &[&str]) -> ClusterDNS {
        ClusterDNS { cluster: Some(name.into()), load_balancer: lb(ips), zones: Some(vec![zone.into()]), region: Some(region.into()) }
    }

    fn no_lookup(host: &str) -> Result<Vec<String>, ResolveError> {
        Err(ResolveError { host: host.into(), message: "no resolver in this test".into() })
    }

    fn names(e: &[Endpoint]) -> Vec<(&str, &str, Vec<&str>)> {
        e.iter().map(|e| (e.dns_name.as_str(), e.record_type.as_str(), e.targets.iter().map(String::as_str).collect())).collect()
    }

    #[test]
    fn service_records_have_zone_region_and_global_names() {
        let spec = ServiceDNSRecordSpec { domain_ref: "galactic".into(), ..Default::default() };
        let status = ServiceDNSRecordStatus {
            domain: Some("example.com".into()),
            dns: Some(vec![cluster("c1", "us", "us1", &["10.20.30.1"]), cluster("c2", "eu", "eu1", &["10.20.30.2"])]),
        };
        let got = service_endpoints("nginx", "test", &spec, &status, &no_lookup).unwrap();
        assert_eq!(
            names(&got),
            [
                ("nginx.test.galactic.svc.eu.example.com", "A", vec!["10.20.30.2"]),
                ("nginx.test.galactic.svc.eu1.eu.example.com", "A", vec!["10.20.30.2"]),
                ("nginx.test.galactic.svc.example.com", "A", vec!["10.20.30.1", "10.20.30.2"]),
                ("nginx.test.galactic.svc.us.example.com", "A", vec!["10.20.30.1"]),
                ("nginx.test.galactic.svc.us1.us.example.com", "A", vec!["10.20.30.1"]),
            ]
        );
        assert!(got.iter().all(|e| e.record_ttl == Some(DEFAULT_TTL) && e.labels.is_none()));
    }

    #[test]
    fn a_cluster_without_addresses_gets_cnames_one_level_up() {
        let spec = ServiceDNSRecordSpec { domain_ref: "galactic".into(), record_ttl: Some(300), dns_prefix: Some("foo".into()), ..Default::default() };
        let status = ServiceDNSRecordStatus {
            domain: Some("example.com".into()),
            dns: Some(vec![cluster("c1", "us", "us1", &["10.20.30.1"]), cluster("c2", "eu", "eu1", &[])]),
        };
        let got = service_endpoints("nginx", "test", &spec, &status, &no_lookup).unwrap();
        assert_eq!(
            names(&got),
            [
                ("foo.example.com", "CNAME", vec!["nginx.test.galactic.svc.example.com"]),
                ("nginx.test.galactic.svc.eu.example.com", "CNAME", vec!["nginx.test.galactic.svc.example.com"]),
                ("nginx.test.galactic.svc.eu1.eu.example.com", "CNAME", vec!["nginx.test.galactic.svc.eu.example.com"]),
                ("nginx.test.galactic.svc.example.com", "A", vec!["10.20.30.1"]),
                ("nginx.test.galactic.svc.us.example.com", "A", vec!["10.20.30.1"]),
                ("nginx.test.galactic.svc.us1.us.example.com", "A", vec!["10.20.30.1"]),
            ]
        );
        assert!(got.iter().all(|e| e.record_ttl == Some(300)));
    }

    #[test]
    fn external_name_renames_and_labels_and_hostnames_are_resolved() {
        let spec = ServiceDNSRecordSpec { domain_ref: "galactic".into(), external_name: Some("foo".into()), ..Default::default() };
        let mut c1 = cluster("c1", "us", "us1", &[]);
        c1.load_balancer.ingress = Some(vec![LoadBalancerIngress { hostname: Some("lb.test".into()), ..Default::default() }]);
        let status = ServiceDNSRecordStatus { domain: Some("example.com".into()), dns: Some(vec![c1]) };
        let lookup = |h: &str| if h == "lb.test" { Ok(vec!["10.20.30.3".to_string()]) } else { no_lookup(h) };
        let got = service_endpoints("nginx", "test", &spec, &status, &lookup).unwrap();
        assert_eq!(got[0].dns_name, "foo.test.galactic.svc.example.com");
        assert_eq!(got[0].targets, ["10.20.30.3"]);
        assert_eq!(got[0].labels.as_ref().unwrap()["serviceName"], "nginx");
        assert!(service_endpoints("nginx", "test", &spec, &status, &no_lookup).is_err());
    }

    #[test]
    fn ingress_records_pool_every_cluster() {
        let spec = IngressDNSRecordSpec { hosts: Some(vec!["ingress.example.com".into()]), record_ttl: Some(300) };
        let status = IngressDNSRecordStatus {
            dns: Some(vec![
                ClusterIngressDNS { cluster: Some("c2".into()), load_balancer: lb(&["10.0.0.2"]) },
                ClusterIngressDNS { cluster: Some("c1".into()), load_balancer: lb(&["10.0.0.1", "10.0.0.2"]) },
            ]),
        };
        let got = ingress_endpoints(&spec, &status, &no_lookup).unwrap();
        assert_eq!(names(&got), [("ingress.example.com", "A", vec!["10.0.0.1", "10.0.0.2"])]);
        assert!(ingress_endpoints(&spec, &IngressDNSRecordStatus::default(), &no_lookup).unwrap().is_empty());
    }

    #[test]
    fn the_domain_crd_has_its_fields_at_the_root() {
        let crd = domain_crd();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert!(schema["properties"]["domain"].is_object() && schema["properties"]["nameServer"].is_object());
        assert!(schema["properties"].get("spec").is_none());
        assert_eq!(schema["required"], json!(["domain"]));
        let d: Domain = serde_json::from_value(json!({"metadata": {"name": "test-domain"}, "domain": "example.com"})).unwrap();
        assert_eq!(d.domain, "example.com");
    }
}
