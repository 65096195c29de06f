//! The `default/kubernetes` Service, as kube-apiserver's bootstrap controller keeps it: the
//! Service (`https` 443 → the serving port, a cluster IP from `--service-cluster-ip-range`), and
//! — for an advertised address a Service may point at — its Endpoints and EndpointSlice naming
//! this server. Reconciled every `interval` through the server's own router (as kube-apiserver
//! uses a loopback client), so every write is validated like a client's; on a graceful stop
//! the endpoints are emptied, as kube-apiserver's last server leaves them.
//!
//! Deliberate difference: one Flotilla serves a store, so the endpoints name this server only
//! (kube-apiserver keeps a lease per server in etcd and lists them all).
//!
//! A loopback advertised address (the default `--listen 127.0.0.1:6443`) gets the Service only:
//! Endpoints and EndpointSlices may not name loopback addresses (kube-apiserver v1.37 refuses to
//! start with one; Flotilla serves and says so once in its log).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::auth::Identity;
use crate::inproc::InProcess;

/// What the reconciler keeps.
#[derive(Clone, Debug)]
pub struct KubernetesServiceConfig {
    /// The address and port clients reach this server at (the endpoint).
    pub advertise: SocketAddr,
    /// The Service's cluster IP (kube-apiserver: the first address of its service range).
    pub cluster_ip: IpAddr,
    /// How often the objects are checked and put back (kube-apiserver: 10 s).
    pub interval: Duration,
}

impl KubernetesServiceConfig {
    /// Kubernetes' Service port for the API server.
    pub const SERVICE_PORT: u16 = 443;

    /// Whether Endpoints may name the advertised address (not loopback, unspecified, or
    /// link-local: the API's endpoint IP rules).
    pub fn endpoints_allowed(&self) -> bool {
        endpoint_ip_problem(self.advertise.ip()).is_none()
    }
}

/// Why an IP may not be an endpoint address, in kube-apiserver's words (`ValidateEndpointIP`).
pub fn endpoint_ip_problem(ip: IpAddr) -> Option<&'static str> {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    let link_local_multicast = match ip {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] == 0xff02,
    };
    if ip.is_unspecified() {
        Some("may not be unspecified")
    } else if ip.is_loopback() {
        Some("may not be in the loopback range (127.0.0.0/8, ::1/128)")
    } else if link_local {
        Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    } else if link_local_multicast {
        Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
    } else {
        None
    }
}

/// The first address of a service range (`10.96.0.0/12` → `10.96.0.1`), as kube-apiserver picks
/// the `kubernetes` Service's cluster IP.
pub fn first_service_ip(range: &str) -> Result<IpAddr, String> {
    let (net, bits) = range.split_once('/').ok_or_else(|| format!("{range:?} is not a CIDR (address/bits)"))?;
    let net: IpAddr = net.parse().map_err(|e| format!("{range:?}: {e}"))?;
    let bits: u32 = bits.parse().map_err(|e| format!("{range:?}: prefix length: {e}"))?;
    // kube-apiserver needs room for at least 8 addresses.
    match net {
        IpAddr::V4(v4) if bits <= 29 => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            Ok(IpAddr::from(((u32::from(v4) & mask) + 1).to_be_bytes()))
        }
        IpAddr::V6(v6) if bits <= 125 => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
            Ok(IpAddr::from(((u128::from(v6) & mask) + 1).to_be_bytes()))
        }
        _ => Err(format!("{range:?}: the range must hold at least 8 addresses")),
    }
}

fn https_port(port: u16) -> Value {
    json!({"name": "https", "port": port, "protocol": "TCP"})
}

fn service(cfg: &KubernetesServiceConfig) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": cfg.cluster_ip.to_string(),
            "ipFamilyPolicy": "SingleStack",
            "sessionAffinity": "None",
            "ports": [{"name": "https", "port": KubernetesServiceConfig::SERVICE_PORT, "protocol": "TCP", "targetPort": cfg.advertise.port()}],
        },
    })
}

fn endpoints(cfg: &KubernetesServiceConfig, serving: bool) -> Value {
    let mut e = json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
    });
    if serving {
        e["subsets"] = json!([{"addresses": [{"ip": cfg.advertise.ip().to_string()}], "ports": [https_port(cfg.advertise.port())]}]);
    }
    e
}

fn address_type(cfg: &KubernetesServiceConfig) -> &'static str {
    if cfg.advertise.is_ipv6() { "IPv6" } else { "IPv4" }
}

fn endpoint_slice(cfg: &KubernetesServiceConfig, serving: bool) -> Value {
    let mut slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": address_type(cfg),
        "endpoints": [],
    });
    if serving {
        slice["endpoints"] = json!([{"addresses": [cfg.advertise.ip().to_string()], "conditions": {"ready": true}}]);
        slice["ports"] = json!([https_port(cfg.advertise.port())]);
    }
    slice
}

const SERVICE: &str = "/api/v1/namespaces/default/services";
const ENDPOINTS: &str = "/api/v1/namespaces/default/endpoints";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";

/// Requests to the server's own router as `system:apiserver`.
struct Loopback {
    service: InProcess,
}

impl Loopback {
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<(StatusCode, Value), String> {
        let mut req = Request::builder().method(method.clone()).uri(path).header(http::header::ACCEPT, "application/json");
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let body = match body {
            Some(b) => Body::from(serde_json::to_vec(b).map_err(|e| e.to_string())?),
            None => Body::empty(),
        };
        let req = req.body(body).map_err(|e| e.to_string())?;
        let resp = match tower::ServiceExt::oneshot(self.service.clone(), req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 64 << 20).await.map_err(|e| e.to_string())?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    async fn get(&self, collection: &str) -> Result<Option<Value>, String> {
        match self.call(Method::GET, &format!("{collection}/kubernetes"), None).await? {
            (StatusCode::OK, v) => Ok(Some(v)),
            (StatusCode::NOT_FOUND, _) => Ok(None),
            (code, v) => Err(failure("reading", collection, code, &v)),
        }
    }

    async fn create(&self, collection: &str, body: &Value) -> Result<(), String> {
        match self.call(Method::POST, collection, Some(body)).await? {
            (code, _) if code.is_success() || code == StatusCode::CONFLICT => Ok(()),
            (code, v) => Err(failure("creating", collection, code, &v)),
        }
    }

    async fn replace(&self, collection: &str, current: &Value, mut desired: Value) -> Result<(), String> {
        desired["metadata"]["resourceVersion"] = current.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
        match self.call(Method::PUT, &format!("{collection}/kubernetes"), Some(&desired)).await? {
            // A conflict: someone else wrote it; the next round looks again.
            (code, _) if code.is_success() || code == StatusCode::CONFLICT => Ok(()),
            (code, v) => Err(failure("updating", collection, code, &v)),
        }
    }

    async fn delete(&self, collection: &str) -> Result<(), String> {
        match self.call(Method::DELETE, &format!("{collection}/kubernetes"), None).await? {
            (code, _) if code.is_success() || code == StatusCode::NOT_FOUND => Ok(()),
            (code, v) => Err(failure("deleting", collection, code, &v)),
        }
    }
}

fn failure(step: &str, collection: &str, code: StatusCode, v: &Value) -> String {
    let what = collection.rsplit('/').next().unwrap_or(collection);
    format!("{step} {what}/kubernetes: {code}: {}", v.get("message").and_then(Value::as_str).unwrap_or_default())
}

/// The fields of `current` that `desired` sets differ (what the reconciler owns).
fn differs(current: &Value, desired: &Value, fields: &[&str]) -> bool {
    fields.iter().any(|f| current.pointer(f).unwrap_or(&Value::Null) != desired.pointer(f).unwrap_or(&Value::Null))
}

/// One round: the Service exists; the Endpoints and the EndpointSlice say `serving`.
async fn reconcile(lb: &Loopback, cfg: &KubernetesServiceConfig, serving: bool) -> Result<(), String> {
    // An existing Service is left as it is (kube-apiserver no longer reconciles it), only
    // re-created when deleted.
    if serving && lb.get(SERVICE).await?.is_none() {
        lb.create(SERVICE, &service(cfg)).await?;
    }
    if !cfg.endpoints_allowed() {
        return Ok(());
    }
    let want = endpoints(cfg, serving);
    match lb.get(ENDPOINTS).await? {
        None if serving => lb.create(ENDPOINTS, &want).await?,
        None => {}
        Some(cur) if differs(&cur, &want, &["/subsets", "/metadata/labels"]) => lb.replace(ENDPOINTS, &cur, want).await?,
        Some(_) => {}
    }
    let want = endpoint_slice(cfg, serving);
    match lb.get(SLICES).await? {
        None if serving => lb.create(SLICES, &want).await?,
        None => {}
        // The address type is immutable: a slice of the other family is replaced.
        Some(cur) if cur.get("addressType") != want.get("addressType") => {
            lb.delete(SLICES).await?;
            lb.create(SLICES, &want).await?;
        }
        Some(cur) if differs(&cur, &want, &["/endpoints", "/ports", "/metadata/labels"]) => lb.replace(SLICES, &cur, want).await?,
        Some(_) => {}
    }
    Ok(())
}

/// The running reconciler; [`KubernetesService::stop`] empties the endpoints.
#[derive(Debug)]
pub struct KubernetesService {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl KubernetesService {
    pub(crate) fn start(router: axum::Router, cfg: KubernetesServiceConfig) -> KubernetesService {
        let lb = Loopback { service: InProcess::new(router, Identity::user("system:apiserver", &["system:masters"])) };
        if let Some(problem) = endpoint_ip_problem(cfg.advertise.ip()) {
            tracing::info!(
                advertise = %cfg.advertise,
                "the default/kubernetes Service has no Endpoints or EndpointSlice: an endpoint address {problem} (set --advertise-address to an address clients can reach)"
            );
        }
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = reconcile(&lb, &cfg, true).await {
                    tracing::warn!(error = %e, "keeping the default/kubernetes Service");
                }
                tokio::select! {
                    _ = tokio::time::sleep(cfg.interval) => {}
                    _ = stopped.changed() => break,
                }
            }
            // As kube-apiserver's last server leaves them: no subsets, no slice endpoints.
            if let Err(e) = reconcile(&lb, &cfg, false).await {
                tracing::warn!(error = %e, "removing this server from the default/kubernetes endpoints");
            }
        });
        KubernetesService { stop, task }
    }

    /// Stop reconciling and remove this server from the endpoints (kube-apiserver's
    /// `RemoveEndpoints`); waits for that write.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_ip_is_the_first_of_the_range() {
        assert_eq!(first_service_ip("10.96.0.0/12").unwrap().to_string(), "10.96.0.1");
        assert_eq!(first_service_ip("10.0.0.0/24").unwrap().to_string(), "10.0.0.1");
        assert_eq!(first_service_ip("10.96.7.9/16").unwrap().to_string(), "10.96.0.1");
        assert_eq!(first_service_ip("fd00:10:96::/112").unwrap().to_string(), "fd00:10:96::1");
        assert!(first_service_ip("10.0.0.0/30").unwrap_err().contains("at least 8"));
        assert!(first_service_ip("10.0.0.0").is_err());
    }

    #[test]
    fn endpoint_addresses_follow_the_apis_rules() {
        let problem = |s: &str| endpoint_ip_problem(s.parse().unwrap());
        assert_eq!(problem("127.0.0.1"), Some("may not be in the loopback range (127.0.0.0/8, ::1/128)"));
        assert_eq!(problem("::1"), Some("may not be in the loopback range (127.0.0.0/8, ::1/128)"));
        assert_eq!(problem("0.0.0.0"), Some("may not be unspecified"));
        assert_eq!(problem("169.254.1.2"), Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)"));
        assert_eq!(problem("224.0.0.5"), Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"));
        assert_eq!(problem("10.1.2.3"), None);
        assert_eq!(problem("2001:db8::1"), None);
    }

    #[test]
    fn a_stopped_server_leaves_no_endpoints() {
        let cfg = KubernetesServiceConfig {
            advertise: "10.1.2.3:6443".parse().unwrap(),
            cluster_ip: "10.96.0.1".parse().unwrap(),
            interval: Duration::from_secs(10),
        };
        assert_eq!(endpoints(&cfg, true)["subsets"][0]["ports"][0], json!({"name": "https", "port": 6443, "protocol": "TCP"}));
        assert!(endpoints(&cfg, false).get("subsets").is_none());
        let stopped = endpoint_slice(&cfg, false);
        assert_eq!((stopped["endpoints"].clone(), stopped.get("ports")), (json!([]), None));
        assert_eq!(service(&cfg)["spec"]["ports"][0]["targetPort"], 6443);
    }
}
