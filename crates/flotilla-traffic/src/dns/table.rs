//! The records the DNS server answers, computed from the control plane's objects (pure).
//!
//! ClusterSet names, as the MCS API names them in the zone (`clusterset.local.` by default):
//!
//! - `<svc>.<ns>.svc.<zone>`: for a `ClusterSetIP` ServiceImport its `spec.ips` when set (the
//!   MCS API's one virtual IP), else — as Submariner's Lighthouse answers — the exported
//!   Service's cluster IPs in each cluster that has a ready endpoint; for a `Headless` one
//!   the ready endpoints' addresses of every cluster.
//! - `<host>.<cluster>.<svc>.<ns>.svc.<zone>` (headless): each ready endpoint, `<host>` its
//!   hostname or, without one, its address with dashes.
//! - `_<port>._<proto>.<svc>.<ns>.svc.<zone>` SRV: each named port, pointing at the service
//!   name (ClusterSetIP) or at each endpoint's name (headless).
//!
//! A cluster is left out while it is not Ready (unless withdrawal is off): Karmada keeps its
//! EndpointSlices so traffic inside the member keeps flowing, and the DNS answers are what
//! move clients away. KubeFed's DNSEndpoints are served as they are (A, AAAA, CNAME).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use flotilla_api::federation::kubefed::dns::DNSEndpoint;
use flotilla_api::federation::mcs::{
    CLUSTER_SET_IP, SERVICE_CLUSTER_IPS_ANNOTATION, SERVICE_NAME, SOURCE_CLUSTER_ANNOTATION, ServiceImport, derived_service_name,
};
use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, SRV};
use hickory_server::proto::rr::{Name, RData, Record};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

/// How the ClusterSet names are answered.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The ClusterSet zone, e.g. `clusterset.local.` (with or without the final dot).
    pub zone: String,
    /// TTL of the ClusterSet records, seconds.
    pub ttl: u32,
    /// Leave a cluster that is not Ready out of the answers.
    pub withdraw_unready: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { zone: "clusterset.local.".into(), ttl: 5, withdraw_unready: true }
    }
}

/// Everything the answers are made from.
pub struct Inputs<'a> {
    pub imports: &'a [std::sync::Arc<ServiceImport>],
    /// The control plane's imported slices (others are skipped).
    pub slices: &'a [std::sync::Arc<EndpointSlice>],
    pub dns_endpoints: &'a [std::sync::Arc<DNSEndpoint>],
    /// Whether a cluster is Ready.
    pub ready: &'a dyn Fn(&str) -> bool,
}

/// The answers: records by lower-case absolute name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub zone: String,
    pub records: BTreeMap<String, Vec<Record>>,
}

/// A name in the table's form: lower case, with the final dot.
pub fn key(name: &str) -> String {
    let mut k = name.trim().to_ascii_lowercase();
    if !k.ends_with('.') {
        k.push('.');
    }
    k
}

impl Table {
    fn add(&mut self, name: &str, ttl: u32, data: RData) {
        let k = key(name);
        let Ok(n) = Name::from_ascii(&k) else {
            tracing::debug!(name = %k, "not a DNS name; skipped");
            return;
        };
        let list = self.records.entry(k).or_default();
        let record = Record::from_rdata(n, ttl, data);
        if !list.contains(&record) {
            list.push(record);
        }
    }

    /// Whether `name` is in a zone this table speaks for: the ClusterSet zone, or a name it has.
    pub fn is_authoritative_for(&self, name: &str) -> bool {
        let k = key(name);
        k == self.zone || k.ends_with(&format!(".{}", self.zone)) || self.records.contains_key(&k)
    }
}

fn ip_data(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    }
}

/// One cluster's share of an imported Service.
#[derive(Default)]
struct ClusterPart {
    cluster_ips: BTreeSet<IpAddr>,
    /// Ready endpoints: (name label, addresses).
    endpoints: Vec<(String, Vec<IpAddr>)>,
    /// Named ports: (name, protocol, port).
    ports: BTreeSet<(String, String, u16)>,
}

/// Builds the table.
pub fn build(inputs: &Inputs<'_>, settings: &Settings) -> Table {
    let zone = key(&settings.zone);
    let mut t = Table { zone: zone.clone(), records: BTreeMap::new() };
    let ttl = settings.ttl;
    // Imported slices by (namespace, derived Service), then by source cluster.
    let mut by_service: BTreeMap<(String, String), BTreeMap<String, ClusterPart>> = BTreeMap::new();
    for s in inputs.slices {
        let (Some(service), Some(cluster)) = (s.labels().get(SERVICE_NAME), s.annotations().get(SOURCE_CLUSTER_ANNOTATION)) else { continue };
        if settings.withdraw_unready && !(inputs.ready)(cluster) {
            continue;
        }
        let part = by_service.entry((s.namespace().unwrap_or_default(), service.clone())).or_default().entry(cluster.clone()).or_default();
        if let Some(ips) = s.annotations().get(SERVICE_CLUSTER_IPS_ANNOTATION) {
            part.cluster_ips.extend(ips.split(',').filter_map(|ip| ip.trim().parse::<IpAddr>().ok()));
        }
        for e in s.endpoints.iter().flatten() {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            let addrs: Vec<IpAddr> = e.addresses.iter().filter_map(|a| a.parse().ok()).collect();
            if addrs.is_empty() {
                continue;
            }
            let label = e.hostname.clone().unwrap_or_else(|| addrs[0].to_string().replace(['.', ':'], "-"));
            part.endpoints.push((label, addrs));
        }
        for p in s.ports.iter().flatten() {
            if let (Some(name), Some(port)) = (p.name.as_ref().filter(|n| !n.is_empty()), p.port) {
                part.ports.insert((name.clone(), p.protocol.clone().unwrap_or_else(|| "TCP".into()), port as u16));
            }
        }
    }
    for import in inputs.imports {
        let (ns, name) = (import.namespace().unwrap_or_default(), import.name_any());
        let service_name = format!("{name}.{ns}.svc.{zone}");
        let empty = BTreeMap::new();
        let parts = by_service.get(&(ns.clone(), derived_service_name(&name))).unwrap_or(&empty);
        if import.spec.type_ == CLUSTER_SET_IP {
            let vip: Vec<IpAddr> = import.spec.ips.iter().flatten().filter_map(|ip| ip.parse().ok()).collect();
            if !vip.is_empty() {
                for ip in vip {
                    t.add(&service_name, ttl, ip_data(ip));
                }
            } else {
                for part in parts.values().filter(|p| !p.endpoints.is_empty()) {
                    for ip in &part.cluster_ips {
                        t.add(&service_name, ttl, ip_data(*ip));
                    }
                }
            }
            for p in &import.spec.ports {
                if let Some(port_name) = p.name.as_ref().filter(|n| !n.is_empty()) {
                    let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into()).to_ascii_lowercase();
                    if let Ok(target) = Name::from_ascii(&service_name) {
                        t.add(&format!("_{port_name}._{proto}.{service_name}"), ttl, RData::SRV(SRV::new(0, 0, p.port as u16, target)));
                    }
                }
            }
        } else {
            for (cluster, part) in parts {
                for (label, addrs) in &part.endpoints {
                    let host = format!("{label}.{cluster}.{service_name}");
                    for ip in addrs {
                        t.add(&service_name, ttl, ip_data(*ip));
                        t.add(&host, ttl, ip_data(*ip));
                    }
                    for (port_name, proto, port) in &part.ports {
                        if let Ok(target) = Name::from_ascii(key(&host)) {
                            t.add(&format!("_{port_name}._{}.{service_name}", proto.to_ascii_lowercase()), ttl, RData::SRV(SRV::new(0, 0, *port, target)));
                        }
                    }
                }
            }
        }
    }
    for e in inputs.dns_endpoints {
        for ep in e.spec.endpoints.iter().flatten() {
            let ttl = ep.record_ttl.and_then(|t| u32::try_from(t).ok()).unwrap_or(flotilla_api::federation::kubefed::dns::DEFAULT_TTL as u32);
            for target in &ep.targets {
                let data = match ep.record_type.as_str() {
                    "A" | "AAAA" => target.parse::<IpAddr>().ok().map(ip_data),
                    "CNAME" => Name::from_ascii(key(target)).ok().map(|n| RData::CNAME(CNAME(n))),
                    _ => None,
                };
                match data {
                    Some(d) => t.add(&ep.dns_name, ttl, d),
                    None => tracing::debug!(name = %ep.dns_name, record_type = %ep.record_type, target, "DNSEndpoint record not served"),
                }
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::mcs::{HEADLESS, ServiceImportSpec, ServicePort};
    use std::sync::Arc;

    fn import(name: &str, type_: &str) -> Arc<ServiceImport> {
        let mut i = ServiceImport::new(
            name,
            ServiceImportSpec {
                type_: type_.into(),
                ports: vec![ServicePort { name: Some("http".into()), port: 80, ..Default::default() }],
                ..Default::default()
            },
        );
        i.metadata.namespace = Some("shop".into());
        Arc::new(i)
    }

    fn slice(cluster: &str, service: &str, ips: &str, endpoints: serde_json::Value) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("imported-{cluster}-x"), "namespace": "shop",
                    "labels": {SERVICE_NAME: derived_service_name(service)},
                    "annotations": {SOURCE_CLUSTER_ANNOTATION: cluster, SERVICE_CLUSTER_IPS_ANNOTATION: ips}},
                "addressType": "IPv4", "endpoints": endpoints, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }))
            .unwrap(),
        )
    }

    fn answers(t: &Table, name: &str) -> Vec<String> {
        let mut v: Vec<String> = t.records.get(&key(name)).into_iter().flatten().map(|r| r.data.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn clusterset_ip_answers_each_ready_clusters_service_ip() {
        let imports = [import("web", CLUSTER_SET_IP)];
        let slices = [
            slice("m1", "web", "10.96.0.1", serde_json::json!([{"addresses": ["10.1.0.1"], "conditions": {"ready": true}}])),
            slice("m2", "web", "10.96.0.2", serde_json::json!([{"addresses": ["10.2.0.1"]}])),
            slice("m3", "web", "10.96.0.3", serde_json::json!([{"addresses": ["10.3.0.1"], "conditions": {"ready": false}}])),
        ];
        let all_ready = |_: &str| true;
        let inputs = Inputs { imports: &imports, slices: &slices, dns_endpoints: &[], ready: &all_ready };
        let t = build(&inputs, &Settings::default());
        assert_eq!(answers(&t, "web.shop.svc.clusterset.local"), ["10.96.0.1", "10.96.0.2"], "m3 has no ready endpoint");
        assert_eq!(answers(&t, "_http._tcp.web.shop.svc.clusterset.local"), ["0 0 80 web.shop.svc.clusterset.local."]);
        let m2_down = |c: &str| c != "m2";
        let t = build(&Inputs { ready: &m2_down, ..inputs }, &Settings::default());
        assert_eq!(answers(&t, "web.shop.svc.clusterset.local"), ["10.96.0.1"]);
        let keep = Settings { withdraw_unready: false, ..Settings::default() };
        let t = build(&Inputs { ready: &m2_down, ..inputs }, &keep);
        assert_eq!(answers(&t, "web.shop.svc.clusterset.local").len(), 2, "withdrawal off keeps m2");
    }

    #[test]
    fn headless_answers_endpoints_and_per_endpoint_names() {
        let imports = [import("db", HEADLESS)];
        let slices = [
            slice("m1", "db", "", serde_json::json!([{"addresses": ["10.1.0.7"], "hostname": "db-0"}])),
            slice("m2", "db", "", serde_json::json!([{"addresses": ["10.2.0.8"]}])),
        ];
        let ready = |_: &str| true;
        let t = build(&Inputs { imports: &imports, slices: &slices, dns_endpoints: &[], ready: &ready }, &Settings::default());
        assert_eq!(answers(&t, "db.shop.svc.clusterset.local"), ["10.1.0.7", "10.2.0.8"]);
        assert_eq!(answers(&t, "db-0.m1.db.shop.svc.clusterset.local"), ["10.1.0.7"]);
        assert_eq!(answers(&t, "10-2-0-8.m2.db.shop.svc.clusterset.local"), ["10.2.0.8"]);
        assert_eq!(
            answers(&t, "_http._tcp.db.shop.svc.clusterset.local"),
            ["0 0 8080 10-2-0-8.m2.db.shop.svc.clusterset.local.", "0 0 8080 db-0.m1.db.shop.svc.clusterset.local."]
        );
        assert!(t.is_authoritative_for("nothing.shop.svc.clusterset.local") && !t.is_authoritative_for("example.org"));
    }

    #[test]
    fn dns_endpoints_are_served_as_they_are() {
        let e: DNSEndpoint = serde_json::from_value(serde_json::json!({
            "apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "DNSEndpoint",
            "metadata": {"name": "ingress-test-ingress", "namespace": "test-namespace"},
            "spec": {"endpoints": [
                {"dnsName": "ingress.example.com", "recordTTL": 300, "recordType": "A", "targets": ["10.0.0.1", "10.0.0.2"]},
                {"dnsName": "www.example.com", "recordTTL": 300, "recordType": "CNAME", "targets": ["ingress.example.com"]}]}
        }))
        .unwrap();
        let ready = |_: &str| true;
        let t = build(&Inputs { imports: &[], slices: &[], dns_endpoints: &[Arc::new(e)], ready: &ready }, &Settings::default());
        assert_eq!(answers(&t, "ingress.example.com"), ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(t.records[&key("ingress.example.com")][0].ttl, 300);
        assert_eq!(answers(&t, "WWW.example.com"), ["ingress.example.com."]);
    }
}
