//! `flotilla up`'s cross-cluster traffic listeners (ADR 0037): the DNS server
//! (`--dns-listen`), on the controllers' shared informers.

use std::net::SocketAddr;

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
