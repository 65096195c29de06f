//! The gateway's routing table, computed from the control plane's objects (pure).
//!
//! Every MultiClusterIngress and FederatedIngress contributes its rules as an Ingress does:
//!
//! - a rule's `host` is matched exactly, or as a wildcard `*.example.com` that matches one
//!   label (`a.example.com`, not `a.b.example.com` nor `example.com`); a rule without a host
//!   matches any host, after the host rules have had their turn;
//! - a path is `Exact` or `Prefix` (and `ImplementationSpecific`, taken as `Prefix`); a prefix
//!   matches whole path elements (`/api` matches `/api` and `/api/v1`, not `/apis`); the
//!   longest match wins, an exact one before a prefix of the same length;
//! - a `defaultBackend` takes what no rule matched (the first ingress's, by namespace and name);
//! - rules of several ingresses for one host are merged; where two name the same host and
//!   path, the first (by kind, namespace and name) wins.
//!
//! A backend Service is reached at the ready endpoints that Flotilla collects from the clusters
//! that offer it — the member slices reported by either multi-cluster service path, a
//! ServiceExport in the member or a MultiClusterService naming it a provider (ADR 0037) — in
//! the Service's namespace. The backend port is mapped to the endpoints' port by name: the port's own name,
//! or the name the control plane's Service (or ServiceImport) gives that port number; a slice
//! with a single port needs no mapping. A cluster that is not Ready is left out unless
//! withdrawal is off.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use flotilla_api::federation::mcs::{SERVICE_NAME, ServiceImport};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{IngressBackend, IngressSpec};
use kube::ResourceExt;

/// One ingress the gateway serves.
pub struct Ingress<'a> {
    /// `MultiClusterIngress` or `FederatedIngress`.
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub spec: &'a IngressSpec,
}

/// Everything the table is made from.
pub struct Inputs<'a> {
    pub ingresses: &'a [Ingress<'a>],
    /// The control plane's Services (the templates), for their port names.
    pub services: &'a [Arc<Service>],
    pub imports: &'a [Arc<ServiceImport>],
    /// The members' own EndpointSlices as their clusters report them (the report Works of
    /// either MCS path: ServiceExport or MultiClusterService), with the cluster of each.
    pub slices: &'a [(String, Arc<EndpointSlice>)],
    /// Whether a cluster is Ready.
    pub ready: &'a dyn Fn(&str) -> bool,
}

/// How the table is built.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Leave a cluster that is not Ready out of the backends.
    pub withdraw_unready: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { withdraw_unready: true }
    }
}

/// A backend port as an ingress names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortRef {
    Number(u16),
    Name(String),
}

/// A Service port an ingress routes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
    pub port: PortRef,
}

impl std::fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.port {
            PortRef::Number(n) => write!(f, "{}/{}:{n}", self.namespace, self.name),
            PortRef::Name(n) => write!(f, "{}/{}:{n}", self.namespace, self.name),
        }
    }
}

/// One endpoint of a backend Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub cluster: String,
    pub addr: SocketAddr,
}

/// The endpoints of one Service port, with the round-robin position shared by its requests
/// (and kept across rebuilds of the table, which may come more often than requests).
#[derive(Debug, Default)]
pub struct Pool {
    pub endpoints: Vec<Endpoint>,
    pub next: Arc<AtomicUsize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PathMatch {
    Exact(String),
    Prefix(String),
}

impl PathMatch {
    fn len(&self) -> usize {
        match self {
            PathMatch::Exact(p) | PathMatch::Prefix(p) => p.len(),
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == p,
            PathMatch::Prefix(p) => {
                let p = p.trim_end_matches('/');
                p.is_empty() || path == p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/'))
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Rule {
    path: PathMatch,
    backend: ServiceKey,
}

/// Where a request goes.
#[derive(Clone, Debug)]
pub struct Target {
    pub service: ServiceKey,
    pub pool: Arc<Pool>,
}

/// The routing table.
#[derive(Debug, Default)]
pub struct Routes {
    exact: HashMap<String, Vec<Rule>>,
    /// `*.example.com` by its suffix `.example.com`.
    wildcard: HashMap<String, Vec<Rule>>,
    any_host: Vec<Rule>,
    default_backend: Option<ServiceKey>,
    pools: HashMap<ServiceKey, Arc<Pool>>,
    /// The TLS Secret (namespace, name) of each host an ingress lists under `tls`.
    pub tls: BTreeMap<String, (String, String)>,
}

/// The host of a request, lower case, without a port.
pub fn normalize_host(host: &str) -> String {
    let host = host.trim();
    // Without its port: `[::1]:443` or `name:443` (a bare IPv6 address has several colons).
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or(v6)
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or(host)
    } else {
        host
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl Routes {
    /// Where a request for `host` and `path` goes: None when no rule and no default backend
    /// takes it.
    pub fn route(&self, host: &str, path: &str) -> Option<Target> {
        let host = normalize_host(host);
        let wildcard = host.split_once('.').and_then(|(_, parent)| self.wildcard.get(&format!(".{parent}")));
        let key = [self.exact.get(&host), wildcard, Some(&self.any_host)]
            .into_iter()
            .flatten()
            .find_map(|rules| rules.iter().find(|r| r.path.matches(path)).map(|r| &r.backend))
            .or(self.default_backend.as_ref())?;
        let pool = self.pools.get(key).cloned().unwrap_or_default();
        Some(Target { service: key.clone(), pool })
    }

    /// The TLS Secret for a server name (exact, then the wildcard one label up).
    pub fn tls_secret(&self, server_name: &str) -> Option<&(String, String)> {
        let host = normalize_host(server_name);
        self.tls.get(&host).or_else(|| host.split_once('.').and_then(|(_, parent)| self.tls.get(&format!("*.{parent}"))))
    }

    /// The hosts the table has rules for (for messages and status).
    pub fn hosts(&self) -> Vec<String> {
        let mut h: Vec<String> = self.exact.keys().cloned().chain(self.wildcard.keys().map(|s| format!("*{s}"))).collect();
        h.sort();
        h
    }
}

fn service_key(namespace: &str, backend: &IngressBackend) -> Option<ServiceKey> {
    let s = backend.service.as_ref()?;
    let port = s.port.as_ref()?;
    let port = match (&port.name, port.number) {
        (Some(n), _) if !n.is_empty() => PortRef::Name(n.clone()),
        (_, Some(n)) => PortRef::Number(u16::try_from(n).ok()?),
        _ => return None,
    };
    Some(ServiceKey { namespace: namespace.to_string(), name: s.name.clone(), port })
}

/// Builds the table; the pools of `previous` hand their round-robin positions on.
pub fn build(inputs: &Inputs<'_>, settings: &Settings, previous: Option<&Routes>) -> Routes {
    let mut ingresses: Vec<&Ingress<'_>> = inputs.ingresses.iter().collect();
    ingresses.sort_by_key(|i| (i.kind, i.namespace, i.name));
    let mut t = Routes::default();
    for ing in &ingresses {
        if t.default_backend.is_none() {
            t.default_backend = ing.spec.default_backend.as_ref().and_then(|b| service_key(ing.namespace, b));
        }
        for rule in ing.spec.rules.iter().flatten() {
            let host = rule.host.as_deref().map(normalize_host).unwrap_or_default();
            let list = if host.is_empty() {
                &mut t.any_host
            } else if let Some(suffix) = host.strip_prefix('*') {
                t.wildcard.entry(suffix.to_string()).or_default()
            } else {
                t.exact.entry(host).or_default()
            };
            for p in rule.http.iter().flat_map(|h| &h.paths) {
                let Some(backend) = service_key(ing.namespace, &p.backend) else { continue };
                let path = p.path.clone().unwrap_or_else(|| "/".into());
                let path = if p.path_type == "Exact" { PathMatch::Exact(path) } else { PathMatch::Prefix(path) };
                if !list.iter().any(|r| r.path == path) {
                    list.push(Rule { path, backend });
                }
            }
        }
        for tls in ing.spec.tls.iter().flatten() {
            let Some(secret) = tls.secret_name.as_ref().filter(|s| !s.is_empty()) else { continue };
            for host in tls.hosts.iter().flatten() {
                t.tls.entry(normalize_host(host)).or_insert_with(|| (ing.namespace.to_string(), secret.clone()));
            }
        }
    }
    // Longest first; an exact path before a prefix of the same length.
    for list in t.exact.values_mut().chain(t.wildcard.values_mut()).chain(std::iter::once(&mut t.any_host)) {
        list.sort_by_key(|r| (std::cmp::Reverse(r.path.len()), matches!(r.path, PathMatch::Prefix(_))));
    }
    let keys: Vec<ServiceKey> = t
        .exact
        .values()
        .chain(t.wildcard.values())
        .chain(std::iter::once(&t.any_host))
        .flatten()
        .map(|r| r.backend.clone())
        .chain(t.default_backend.clone())
        .collect();
    for key in keys {
        if let std::collections::hash_map::Entry::Vacant(slot) = t.pools.entry(key) {
            let endpoints = endpoints(inputs, settings, slot.key());
            let next = previous.and_then(|p| p.pools.get(slot.key())).map(|p| p.next.clone()).unwrap_or_default();
            slot.insert(Arc::new(Pool { endpoints, next }));
        }
    }
    t
}

/// The name of the Service port `number` of `namespace/name`, from the control plane's Service
/// or ServiceImport.
fn port_name(inputs: &Inputs<'_>, namespace: &str, name: &str, number: u16) -> Option<String> {
    let n = i32::from(number);
    let from_service = inputs
        .services
        .iter()
        .find(|s| s.namespace().as_deref() == Some(namespace) && s.name_any() == name)
        .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.iter().find(|p| p.port == n).map(|p| p.name.clone().unwrap_or_default()));
    from_service.or_else(|| {
        inputs
            .imports
            .iter()
            .find(|i| i.namespace().as_deref() == Some(namespace) && i.name_any() == name)
            .and_then(|i| i.spec.ports.iter().find(|p| p.port == n).map(|p| p.name.clone().unwrap_or_default()))
    })
}

fn endpoints(inputs: &Inputs<'_>, settings: &Settings, key: &ServiceKey) -> Vec<Endpoint> {
    let wanted_name = match &key.port {
        PortRef::Name(n) => Some(n.clone()),
        PortRef::Number(n) => port_name(inputs, &key.namespace, &key.name, *n),
    };
    let mut out = Vec::new();
    for (cluster, s) in inputs.slices {
        if s.namespace().as_deref() != Some(key.namespace.as_str()) || s.labels().get(SERVICE_NAME) != Some(&key.name) {
            continue;
        }
        if settings.withdraw_unready && !(inputs.ready)(cluster) {
            continue;
        }
        let ports = s.ports.as_deref().unwrap_or_default();
        let port = match &wanted_name {
            Some(name) => ports.iter().find(|p| p.name.as_deref().unwrap_or_default() == name),
            None if ports.len() == 1 => ports.first(),
            None => None,
        };
        let Some(port) = port.and_then(|p| p.port).and_then(|p| u16::try_from(p).ok()) else { continue };
        for e in s.endpoints.iter().flatten() {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &e.addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    let ep = Endpoint { cluster: cluster.clone(), addr: SocketAddr::new(ip, port) };
                    if !out.contains(&ep) {
                        out.push(ep);
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| (&a.cluster, a.addr).cmp(&(&b.cluster, b.addr)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress_spec(v: serde_json::Value) -> IngressSpec {
        serde_json::from_value(v).unwrap()
    }

    fn slice(ns: &str, svc: &str, cluster: &str, port_name: &str, port: i32, ips: &[(&str, bool)]) -> (String, Arc<EndpointSlice>) {
        let slice = serde_json::from_value(json!({
            "metadata": {"name": format!("{svc}-{cluster}"), "namespace": ns, "labels": {SERVICE_NAME: svc}},
            "addressType": "IPv4",
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": ips.iter().map(|(ip, ready)| json!({"addresses": [ip], "conditions": {"ready": ready}})).collect::<Vec<_>>(),
        }))
        .unwrap();
        (cluster.to_string(), Arc::new(slice))
    }

    fn service(ns: &str, name: &str, ports: serde_json::Value) -> Arc<Service> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": {"ports": ports}})).unwrap())
    }

    #[test]
    fn paths_hosts_and_defaults_route_as_an_ingress_does() {
        let a = ingress_spec(json!({
            "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
            "rules": [
                {"host": "shop.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                    {"path": "/api", "pathType": "Prefix", "backend": {"service": {"name": "api", "port": {"name": "http"}}}},
                    {"path": "/api/health", "pathType": "Exact", "backend": {"service": {"name": "health", "port": {"number": 80}}}}]}},
                {"host": "*.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "wild", "port": {"number": 80}}}}]}},
                {"http": {"paths": [
                    {"path": "/any", "pathType": "ImplementationSpecific", "backend": {"service": {"name": "any", "port": {"number": 80}}}}]}}
            ]
        }));
        let ingresses = [Ingress { kind: "MultiClusterIngress", namespace: "shop", name: "a", spec: &a }];
        let t = build(&Inputs { ingresses: &ingresses, services: &[], imports: &[], slices: &[], ready: &|_| true }, &Settings::default(), None);
        let to = |host: &str, path: &str| t.route(host, path).map(|r| r.service.name);
        assert_eq!(to("shop.example.com", "/").as_deref(), Some("web"));
        assert_eq!(to("SHOP.example.com:443", "/cart").as_deref(), Some("web"));
        assert_eq!(to("shop.example.com", "/api").as_deref(), Some("api"));
        assert_eq!(to("shop.example.com", "/api/v1").as_deref(), Some("api"));
        assert_eq!(to("shop.example.com", "/apis").as_deref(), Some("web"), "a prefix matches whole path elements");
        assert_eq!(to("shop.example.com", "/api/health").as_deref(), Some("health"));
        assert_eq!(to("shop.example.com", "/api/health/x").as_deref(), Some("api"));
        assert_eq!(to("blog.example.com", "/x").as_deref(), Some("wild"));
        assert_eq!(to("a.blog.example.com", "/any/1").as_deref(), Some("any"), "a wildcard matches one label");
        assert_eq!(to("example.com", "/x").as_deref(), Some("fallback"));
        assert_eq!(t.route("shop.example.com", "/api").unwrap().service.port, PortRef::Name("http".into()));
    }

    #[test]
    fn backends_are_the_ready_endpoints_of_ready_clusters_on_the_mapped_port() {
        let spec = ingress_spec(json!({"rules": [{"host": "web.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}));
        let ingresses = [Ingress { kind: "FederatedIngress", namespace: "shop", name: "web", spec: &spec }];
        let services = [service("shop", "web", json!([{"name": "metrics", "port": 9090}, {"name": "http", "port": 80}]))];
        let slices = [
            slice("shop", "web", "member1", "http", 8080, &[("10.0.0.1", true), ("10.0.0.2", false)]),
            slice("shop", "web", "member2", "http", 8080, &[("10.0.1.1", true)]),
            slice("shop", "web", "member3", "metrics", 9090, &[("10.0.2.1", true)]),
            slice("other", "web", "member1", "http", 8080, &[("10.9.9.9", true)]),
        ];
        let build_with = |ready: &dyn Fn(&str) -> bool, withdraw_unready: bool| {
            let t = build(&Inputs { ingresses: &ingresses, services: &services, imports: &[], slices: &slices, ready }, &Settings { withdraw_unready }, None);
            let pool = t.route("web.example.com", "/").unwrap().pool;
            pool.endpoints.iter().map(|e| format!("{}={}", e.cluster, e.addr)).collect::<Vec<_>>()
        };
        assert_eq!(build_with(&|_| true, true), ["member1=10.0.0.1:8080", "member2=10.0.1.1:8080"]);
        assert_eq!(build_with(&|c| c != "member2", true), ["member1=10.0.0.1:8080"]);
        assert_eq!(build_with(&|c| c != "member2", false), ["member1=10.0.0.1:8080", "member2=10.0.1.1:8080"]);
    }

    #[test]
    fn a_rebuilt_table_keeps_each_pools_round_robin_position() {
        let spec = ingress_spec(json!({"defaultBackend": {"service": {"name": "web", "port": {"name": "http"}}}}));
        let ingresses = [Ingress { kind: "MultiClusterIngress", namespace: "shop", name: "web", spec: &spec }];
        let slices = [slice("shop", "web", "member1", "http", 80, &[("10.0.0.1", true), ("10.0.0.2", true)])];
        let inputs = Inputs { ingresses: &ingresses, services: &[], imports: &[], slices: &slices, ready: &|_| true };
        let first = build(&inputs, &Settings::default(), None);
        first.route("x", "/").unwrap().pool.next.fetch_add(5, std::sync::atomic::Ordering::Relaxed);
        let second = build(&inputs, &Settings::default(), Some(&first));
        assert_eq!(second.route("x", "/").unwrap().pool.next.load(std::sync::atomic::Ordering::Relaxed), 5);
    }

    #[test]
    fn tls_secrets_are_found_by_server_name() {
        let spec = ingress_spec(json!({"tls": [{"hosts": ["web.example.com", "*.shop.example.com"], "secretName": "web-tls"}]}));
        let ingresses = [Ingress { kind: "MultiClusterIngress", namespace: "shop", name: "web", spec: &spec }];
        let t = build(&Inputs { ingresses: &ingresses, services: &[], imports: &[], slices: &[], ready: &|_| true }, &Settings::default(), None);
        assert_eq!(t.tls_secret("web.example.com"), Some(&("shop".to_string(), "web-tls".to_string())));
        assert_eq!(t.tls_secret("a.shop.example.com").map(|s| s.1.as_str()), Some("web-tls"));
        assert_eq!(t.tls_secret("other.example.com"), None);
        assert!(t.route("web.example.com", "/").is_none(), "no rules, no default: nothing routes");
    }
}
