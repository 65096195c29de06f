//! `flotilla up`'s cross-cluster traffic listeners: the DNS server (`--dns-listen`, ADR 0037)
//! and the gateway (`--gateway-listen`, ADR 0038), on the controllers' shared informers.

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use flotilla_traffic::dns::{Listener, Settings, Shared};

/// The DNS server's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct DnsArgs {
    /// Serve DNS (UDP and TCP, no TLS) on this address: the MCS API's ClusterSet names and
    /// KubeFed's DNSEndpoints. Off unless given; e.g. `127.0.0.1:5353`.
    #[arg(long, env = "FLOTILLA_DNS_LISTEN", value_name = "ADDR")]
    pub dns_listen: Option<SocketAddr>,
    /// The ClusterSet zone the DNS server answers for.
    #[arg(long, default_value = "clusterset.local")]
    pub dns_zone: String,
    /// TTL of the ClusterSet answers, in seconds.
    #[arg(long, default_value_t = 5)]
    pub dns_ttl: u32,
    /// Leave a cluster that is not Ready out of the ClusterSet answers (its EndpointSlices stay
    /// in the consumer clusters either way, as in Karmada).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub dns_withdraw_unready: bool,
}

impl Default for DnsArgs {
    fn default() -> Self {
        DnsArgs { dns_listen: None, dns_zone: "clusterset.local".into(), dns_ttl: 5, dns_withdraw_unready: true }
    }
}

impl DnsArgs {
    pub fn settings(&self) -> Settings {
        Settings { zone: self.dns_zone.clone(), ttl: self.dns_ttl, withdraw_unready: self.dns_withdraw_unready }
    }
}

/// Start the DNS server when `--dns-listen` asks for it; it stops with `runtime`'s shutdown.
pub async fn start_dns(args: &DnsArgs, runtime: &flotilla_runtime::Runtime) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(addr) = args.dns_listen else { return Ok(None) };
    let shared = Shared::default();
    let listener = Listener::bind(addr, shared.clone()).await.with_context(|| format!("binding the DNS listener on {addr}"))?;
    let _ = DNS_COUNTERS.set(shared.counters.clone());
    flotilla_apiserver::metrics::add_source(render_dns_metrics);
    println!(
        "flotilla: serving DNS on {} (udp and tcp): ClusterSet names in {} and DNSEndpoints; try:\n  dig @{} -p {} web.default.svc.{}",
        listener.addr,
        flotilla_traffic::dns::table::key(&args.dns_zone),
        listener.addr.ip(),
        listener.addr.port(),
        args.dns_zone.trim_end_matches('.'),
    );
    let rt = runtime.clone();
    let settings = args.settings();
    let shutdown = runtime.shutdown.clone();
    Ok(Some(tokio::spawn(async move {
        tokio::join!(flotilla_traffic::dns::watch::run(rt, settings, shared), listener.serve(shutdown));
    })))
}

/// The gateway's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct GatewayArgs {
    /// Serve MultiClusterIngresses and FederatedIngresses on this address over TLS (HTTP/1.1
    /// and HTTP/2; each host's certificate from the Secret its ingress names, others a
    /// self-signed one). Off unless given; e.g. `0.0.0.0:8443`.
    #[arg(long, env = "FLOTILLA_GATEWAY_LISTEN", value_name = "ADDR")]
    pub gateway_listen: Option<SocketAddr>,
    /// Also serve them in cleartext on this address (HTTP/1.1, and HTTP/2 with prior
    /// knowledge). Off unless given.
    #[arg(long, env = "FLOTILLA_GATEWAY_HTTP_LISTEN", value_name = "ADDR")]
    pub gateway_http_listen: Option<SocketAddr>,
    /// Further endpoints a request is tried on after one fails (idempotent requests, or any
    /// whose endpoint could not be reached).
    #[arg(long, default_value_t = 2)]
    pub gateway_retries: u32,
    /// Time allowed to connect to an endpoint.
    #[arg(long, default_value = "2s", value_parser = crate::federation_args::parse_duration)]
    pub gateway_connect_timeout: Duration,
    /// Time allowed for an endpoint's response head.
    #[arg(long, default_value = "30s", value_parser = crate::federation_args::parse_duration)]
    pub gateway_response_timeout: Duration,
    /// Consecutive failures that eject an endpoint from its pool.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub gateway_eject_after: u32,
    /// How long an ejected endpoint is left out before it is tried again.
    #[arg(long, default_value = "10s", value_parser = crate::federation_args::parse_duration)]
    pub gateway_eject_for: Duration,
    /// Leave the endpoints of a cluster that is not Ready out of the pools.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub gateway_withdraw_unready: bool,
}

impl Default for GatewayArgs {
    fn default() -> Self {
        let p = flotilla_traffic::gateway::proxy::Settings::default();
        GatewayArgs {
            gateway_listen: None,
            gateway_http_listen: None,
            gateway_retries: p.retries,
            gateway_connect_timeout: p.connect_timeout,
            gateway_response_timeout: p.response_timeout,
            gateway_eject_after: p.eject_after,
            gateway_eject_for: p.eject_for,
            gateway_withdraw_unready: true,
        }
    }
}

impl GatewayArgs {
    pub fn proxy_settings(&self) -> flotilla_traffic::gateway::proxy::Settings {
        flotilla_traffic::gateway::proxy::Settings {
            retries: self.gateway_retries,
            connect_timeout: self.gateway_connect_timeout,
            response_timeout: self.gateway_response_timeout,
            eject_after: self.gateway_eject_after,
            eject_for: self.gateway_eject_for,
            ..Default::default()
        }
    }
}

/// Start the gateway when `--gateway-listen` or `--gateway-http-listen` asks for it; it stops
/// with `runtime`'s shutdown.
pub async fn start_gateway(args: &GatewayArgs, runtime: &flotilla_runtime::Runtime) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    use flotilla_traffic::gateway::{Gateway, Listener, Shared};
    if args.gateway_listen.is_none() && args.gateway_http_listen.is_none() {
        return Ok(None);
    }
    let shared = Shared::default();
    let mut listeners = Vec::new();
    if let Some(addr) = args.gateway_listen {
        let l = Listener::bind_tls(addr, shared.clone()).await.map_err(|e| anyhow::anyhow!("binding the gateway's TLS listener on {addr}: {e}"))?;
        println!("flotilla: serving the gateway on {} (https, h2 and http/1.1): MultiClusterIngresses and FederatedIngresses", l.addr);
        listeners.push(l);
    }
    if let Some(addr) = args.gateway_http_listen {
        let l = Listener::bind_plain(addr).await.map_err(|e| anyhow::anyhow!("binding the gateway's cleartext listener on {addr}: {e}"))?;
        println!("flotilla: serving the gateway on {} (http, cleartext): MultiClusterIngresses and FederatedIngresses", l.addr);
        listeners.push(l);
    }
    let gateway = Arc::new(Gateway::new(shared.clone(), args.proxy_settings()));
    let _ = GATEWAY_COUNTERS.set(shared.counters.clone());
    flotilla_apiserver::metrics::add_source(render_gateway_metrics);
    let rt = runtime.clone();
    let settings = flotilla_traffic::gateway::routes::Settings { withdraw_unready: args.gateway_withdraw_unready };
    let shutdown = runtime.shutdown.clone();
    Ok(Some(tokio::spawn(async move {
        let serving = futures::future::join_all(listeners.into_iter().map(|l| l.serve(gateway.clone(), shutdown.clone())));
        tokio::join!(flotilla_traffic::gateway::watch::run(rt, settings, shared), serving);
    })))
}

static DNS_COUNTERS: OnceLock<Arc<flotilla_traffic::dns::server::Counters>> = OnceLock::new();
static GATEWAY_COUNTERS: OnceLock<Arc<flotilla_traffic::gateway::Counters>> = OnceLock::new();

/// One counter family in OpenMetrics text, with its `outcome` (or no) label per value.
fn counter_family(name: &str, help: &str, values: &[(&str, u64)]) -> String {
    let mut out = format!("# HELP {name} {help}\n# TYPE {name} counter\n");
    for (outcome, v) in values {
        if outcome.is_empty() {
            out.push_str(&format!("{name}_total {v}\n"));
        } else {
            out.push_str(&format!("{name}_total{{outcome=\"{outcome}\"}} {v}\n"));
        }
    }
    out
}

/// `flotilla_dns_queries_total{outcome}` on `/metrics`.
fn render_dns_metrics() -> String {
    let Some(c) = DNS_COUNTERS.get() else { return String::new() };
    counter_family(
        "flotilla_dns_queries",
        "DNS queries answered by the built-in DNS server, by outcome.",
        &[
            ("answered", c.answered.load(Relaxed)),
            ("nxdomain", c.nxdomain.load(Relaxed)),
            ("refused", c.refused.load(Relaxed)),
            ("failed", c.failed.load(Relaxed)),
        ],
    )
}

/// The gateway's requests (by outcome), retries and ejections on `/metrics`.
fn render_gateway_metrics() -> String {
    let Some(c) = GATEWAY_COUNTERS.get() else { return String::new() };
    let mut out = counter_family(
        "flotilla_gateway_requests",
        "Requests the gateway took: forwarded (an endpoint answered), unrouted (404), failed (502, 503).",
        &[("forwarded", c.forwarded.load(Relaxed)), ("unrouted", c.unrouted.load(Relaxed)), ("failed", c.failed.load(Relaxed))],
    );
    out.push_str(&counter_family("flotilla_gateway_retries", "Attempts sent to another endpoint after one failed.", &[("", c.retries.load(Relaxed))]));
    out.push_str(&counter_family("flotilla_gateway_ejections", "Endpoints ejected after consecutive failures.", &[("", c.ejections.load(Relaxed))]));
    out
}
