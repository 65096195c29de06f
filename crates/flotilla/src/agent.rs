//! `flotilla agent --cluster-name NAME --control-plane-kubeconfig AGENT.kubeconfig
//! [--kubeconfig MEMBER]`: a member in Pull mode, as karmada-agent runs one. It holds the only
//! credential to its member; the control plane holds none.
//!
//! - Registers its Cluster with `syncMode: Pull` (the member's `kube-system` UID as `spec.id`,
//!   provider, region and zones from the flags), refusing a Cluster joined in Push mode.
//! - Renews the Lease `karmada-cluster/<cluster>` every lease duration × fraction (40s × 0.25),
//!   owned by the Cluster; the control plane marks the cluster Ready=Unknown when it lapses.
//! - Runs the control plane's own cluster status, execution and work status controllers
//!   ([`crate::controllers::AGENT_CONTROLLERS`]) for this one cluster: the same code as for
//!   Push members, reaching the member through [`flotilla_member::access::Clients::in_member`]
//!   and watching only its execution space and its Cluster (all its RBAC allows).
//! - While the control plane is unreachable it retries with backoff and says so once, and again
//!   when it is back. Once unreachable for `--edge-offline-after`, the member is offline: what
//!   changes in it is recorded as EdgeChanges in its `flotilla-edge` namespace, against the
//!   AppliedWorks the agent keeps there (ADR 0032) — from the agent's start, so an agent
//!   restarted while offline records too. Offline, and back until it has caught up (recorded
//!   once more and handed the records to its execution space), the agent writes nothing to the
//!   member; after that, only the objects with a record the control plane has not decided yet
//!   stay held as the edge left them ([`flotilla_member::holds`]).
//! - Renews its certificate once `--certificate-rotation-fraction` (0.8) of its lifetime has
//!   passed: a new key and a request made with the current certificate, which the control plane
//!   approves for the agent itself (`selfclusteragent`); the kubeconfig is replaced atomically and
//!   the controllers restart on the new identity.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use flotilla_api::certificates as csr;
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
use flotilla_api::federation::karmada::names::execution_space;
use flotilla_api::federation::karmada::work::Work;
use flotilla_controllers::cluster_status::LEASE_NAMESPACE;
use flotilla_runtime::CancellationToken;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::federation_args::{FederationArgs, parse_duration};

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// The member cluster's name (the one `flotilla register` registered).
    #[arg(long, value_name = "NAME")]
    pub cluster_name: String,
    /// The agent's control-plane kubeconfig (what `flotilla register` wrote).
    #[arg(long, value_name = "FILE")]
    pub control_plane_kubeconfig: PathBuf,
    /// The member's kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service
    /// account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The member's API endpoint, recorded in the Cluster for tools that read it.
    #[arg(long, value_name = "URL")]
    pub cluster_api_endpoint: Option<String>,
    #[arg(long)]
    pub cluster_provider: Option<String>,
    #[arg(long)]
    pub cluster_region: Option<String>,
    /// Comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub cluster_zones: Vec<String>,
    /// How long the agent's Lease holds (Karmada's --cluster-lease-duration).
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub cluster_lease_duration: Duration,
    /// The Lease is renewed every duration × this fraction.
    #[arg(long, default_value_t = 0.25)]
    pub cluster_lease_renew_interval_fraction: f64,
    /// How often the member's status is posted (Karmada's --cluster-status-update-frequency).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub cluster_status_update_frequency: Duration,
    /// Timeout of each request to the member.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub member_request_timeout: Duration,
    /// Works applied at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_work_syncs: u16,
    /// Renew the agent's certificate once this fraction of its lifetime has passed (a new key,
    /// a request the control plane approves for the agent itself, the kubeconfig rewritten).
    #[arg(long, default_value_t = 0.8)]
    pub certificate_rotation_fraction: f64,
    /// How long the renewed certificate is asked to last (the signer caps it at one year).
    #[arg(long, default_value_t = 31_536_000)]
    pub cert_expiration_seconds: u32,
    /// Keep a reverse tunnel open to the control plane, through which it reaches this member's
    /// API server as its callers (cluster proxy, `flotilla get --clusters`, logs, exec).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub tunnel: bool,
    /// HTTP/2 PING on the tunnel every this long; unanswered within --tunnel-keepalive-timeout,
    /// the tunnel is dialled again.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub tunnel_keepalive_interval: Duration,
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub tunnel_keepalive_timeout: Duration,
    /// How often the member is checked against the control plane's tombstones (also once at
    /// start): an object whose Work vanished is removed only when a tombstone of that Work says
    /// it was deleted on purpose, otherwise kept and reported (ADR 0031).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub tombstone_sweep_interval: Duration,
    /// How long the control plane must stay unreachable before the member counts as offline:
    /// from then on, changes made in the member are recorded (EdgeChanges in namespace
    /// flotilla-edge) instead of reverted (ADR 0032).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub edge_offline_after: Duration,
    /// How often the control plane is probed, and, while offline, the member's objects are
    /// compared with what the agent applied.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub edge_record_interval: Duration,
    /// Back in touch, how long the agent keeps holding every object while it cannot hand the
    /// member's records over to the control plane, before it lets go of those without a
    /// record (an error is logged; recorded objects stay held).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub edge_catch_up_limit: Duration,
    /// Requests the tunnel carries at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub tunnel_max_streams: u32,
    /// The longest wait between two dials of the tunnel (backoff starts at 0.5s and doubles).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub tunnel_max_backoff: Duration,
    /// Print nothing but errors (agents run as tasks of one process, as the benchmark runs them).
    #[arg(skip)]
    pub quiet: bool,
}

/// The least time between two renewals (a certificate already past its rotation point when it
/// is issued is not renewed again at once).
const MIN_ROTATION_INTERVAL: Duration = Duration::from_secs(60);

/// The agent's certificate, server and CA, read from its kubeconfig.
struct Identity {
    cert_pem: String,
    server: String,
    ca_pem: String,
}

fn read_identity(path: &Path) -> anyhow::Result<Identity> {
    use base64::Engine;
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    // The same shape as cluster-info's kubeconfig: its first cluster's server and CA.
    let endpoint = flotilla_api::bootstrap_token::cluster_info_endpoint(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let doc: serde_json::Value = serde_saphyr::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    let cert = doc
        .pointer("/users/0/user/client-certificate-data")
        .and_then(serde_json::Value::as_str)
        .with_context(|| format!("{} has no client-certificate-data", path.display()))?;
    let cert = base64::engine::general_purpose::STANDARD.decode(cert.trim()).with_context(|| format!("client-certificate-data in {}", path.display()))?;
    let cert_pem = String::from_utf8(cert).with_context(|| format!("the certificate in {} is not PEM", path.display()))?;
    Ok(Identity { cert_pem, server: endpoint.server, ca_pem: endpoint.ca_pem })
}

/// How long until the certificate in `path` is due for renewal.
fn rotation_due(path: &Path, fraction: f64, last: Option<std::time::Instant>) -> anyhow::Result<Duration> {
    let id = read_identity(path)?;
    let (not_before, not_after) = csr::validity(id.cert_pem.as_bytes()).context("the agent's certificate does not parse")?;
    let due = not_before as f64 + fraction * (not_after - not_before) as f64;
    let now = jiff::Timestamp::now().as_second() as f64;
    let wait = Duration::from_secs_f64((due - now).max(0.0));
    let floor = last.map_or(Duration::ZERO, |l| MIN_ROTATION_INTERVAL.saturating_sub(l.elapsed()));
    Ok(wait.max(floor))
}

/// Obtain a new certificate for the agent with its current one and rewrite its kubeconfig.
async fn renew_certificate(cp: &Client, args: &AgentArgs) -> anyhow::Result<()> {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let id = read_identity(&args.control_plane_kubeconfig)?;
    let api: Api<CertificateSigningRequest> = Api::all(cp.clone());
    let prefix = format!("agent-{}-", args.cluster_name);
    let (key, cert) =
        crate::register::request_agent_certificate(&api, &args.cluster_name, &prefix, args.cert_expiration_seconds, Duration::from_secs(300), true).await?;
    let issued = flotilla_apiserver::pki::Issued { cert_pem: cert, key_pem: key.serialize_pem() };
    let text = flotilla_apiserver::pki::kubeconfig("flotilla", &id.server, &id.ca_pem, &issued);
    let tmp = args.control_plane_kubeconfig.with_extension("renewing");
    flotilla_apiserver::pki::write_kubeconfig(&tmp, &text).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, &args.control_plane_kubeconfig).with_context(|| format!("replace {}", args.control_plane_kubeconfig.display()))?;
    tracing::info!(kubeconfig = %args.control_plane_kubeconfig.display(), "agent certificate renewed");
    Ok(())
}

/// A client configuration from the kubeconfig at `path`.
pub async fn load(path: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(path).with_context(|| format!("read {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.with_context(|| format!("use {}", path.display()))
}

/// The Cluster as the agent registers it (Pull, and what the flags say).
fn cluster_spec(args: &AgentArgs, id: &str) -> serde_json::Value {
    let mut spec = json!({"syncMode": "Pull", "id": id});
    if let Some(e) = &args.cluster_api_endpoint {
        spec["apiEndpoint"] = json!(e);
    }
    if let Some(p) = &args.cluster_provider {
        spec["provider"] = json!(p);
    }
    if let Some(r) = &args.cluster_region {
        spec["region"] = json!(r);
    }
    if !args.cluster_zones.is_empty() {
        spec["zones"] = json!(args.cluster_zones);
    }
    spec
}

/// Create or update the agent's Cluster; refuse one joined in Push mode.
async fn register_cluster(cp: &Client, member: &Client, args: &AgentArgs) -> anyhow::Result<Cluster> {
    let name = &args.cluster_name;
    let id =
        Api::<Namespace>::all(member.clone()).get("kube-system").await.context("read the member's kube-system namespace (its id)")?.uid().unwrap_or_default();
    let api: Api<Cluster> = Api::all(cp.clone());
    let spec = cluster_spec(args, &id);
    match api.get_opt(name).await.with_context(|| format!("read Cluster {name}"))? {
        Some(c) if c.spec.sync_mode == ClusterSyncMode::Push => {
            bail!("cluster {name} is joined in Push mode; unjoin it first (flotilla unjoin {name}) to run it with an agent")
        }
        Some(_) => api.patch(name, &PatchParams::default(), &Patch::Merge(&json!({"spec": spec}))).await.with_context(|| format!("update Cluster {name}")),
        None => {
            let cluster: Cluster =
                serde_json::from_value(json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": spec}))
                    .context("the Cluster")?;
            api.create(&PostParams::default(), &cluster).await.with_context(|| format!("create Cluster {name}"))
        }
    }
}

fn micro_time_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

async fn renew_once(api: &Api<Lease>, cluster: &Cluster, duration: Duration) -> Result<(), kube::Error> {
    let name = cluster.name_any();
    let seconds = duration.as_secs().max(1);
    match api.get_opt(&name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = serde_json::from_value(json!(micro_time_now())).ok();
            spec.lease_duration_seconds = i32::try_from(seconds).ok();
            spec.holder_identity = Some(name.clone());
            api.replace(&name, &PostParams::default(), &lease).await.map(|_| ())
        }
        None => {
            let lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [{
                    "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "name": name, "uid": cluster.uid().unwrap_or_default()}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": seconds, "renewTime": micro_time_now()},
            }))
            .unwrap_or_default();
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
    }
}

/// Renew the Lease until `stop`, backing off (up to the lease duration) while it fails.
async fn renew_lease(cp: Client, cluster: Cluster, duration: Duration, every: Duration, stop: CancellationToken) {
    let api: Api<Lease> = Api::namespaced(cp, LEASE_NAMESPACE);
    let mut failing = false;
    let mut wait = every;
    loop {
        match renew_once(&api, &cluster, duration).await {
            Ok(()) => {
                if failing {
                    tracing::info!(cluster = %cluster.name_any(), "the control plane is reachable again; lease renewed");
                }
                failing = false;
                wait = every;
            }
            Err(e) => {
                if failing {
                    tracing::debug!(error = %e, "renewing the lease failed again");
                } else {
                    tracing::warn!(cluster = %cluster.name_any(), error = %e, "cannot renew the lease (is the control plane reachable?); retrying with backoff");
                }
                failing = true;
                wait = (wait * 2).min(duration);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// The tunnel task: clients for both ends without read timeouts (the tunnel idles between
/// requests, and watches and exec streams through it last).
async fn run_tunnel(args: &AgentArgs, member: kube::Config, stop: CancellationToken) -> anyhow::Result<impl std::future::Future<Output = ()> + use<>> {
    let mut cp = load(&args.control_plane_kubeconfig).await?;
    cp.read_timeout = None;
    cp.write_timeout = None;
    let cp = Client::try_from(cp).context("a control-plane client for the tunnel")?;
    let member = flotilla_member::MemberAccess::in_member(&args.cluster_name, member)
        .streaming_client(args.member_request_timeout)
        .context("a member client for the tunnel")?;
    let config = flotilla_member::tunnel::agent::AgentTunnelConfig {
        keep_alive_interval: args.tunnel_keepalive_interval,
        keep_alive_timeout: args.tunnel_keepalive_timeout,
        max_streams: args.tunnel_max_streams,
        max_backoff: args.tunnel_max_backoff,
        ..Default::default()
    };
    Ok(flotilla_member::tunnel::agent::run(cp, args.cluster_name.clone(), member, config, stop))
}

/// `flotilla agent`: run until SIGTERM or Ctrl-C.
pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("install the SIGTERM handler")?;
    let stop = CancellationToken::new();
    let signalled = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        eprintln!("agent: shutting down");
        signalled.cancel();
    });
    run_until(args, stop).await
}

/// Run the agent until `stop` is cancelled.
pub async fn run_until(args: AgentArgs, stop: CancellationToken) -> anyhow::Result<()> {
    let say = |line: String| {
        if !args.quiet {
            println!("{line}");
        }
    };
    let errors = flotilla_api::admission::karmada::cluster_name_errors(&args.cluster_name);
    if !errors.is_empty() {
        bail!("--cluster-name {:?}: {}", args.cluster_name, errors.join("; "));
    }
    if !(args.cluster_lease_renew_interval_fraction > 0.0 && args.cluster_lease_renew_interval_fraction < 1.0) {
        bail!("--cluster-lease-renew-interval-fraction must be between 0 and 1");
    }
    if !(args.certificate_rotation_fraction > 0.0 && args.certificate_rotation_fraction < 1.0) {
        bail!("--certificate-rotation-fraction must be between 0 and 1");
    }
    let cp_config = load(&args.control_plane_kubeconfig).await?;
    let cp = Client::try_from(cp_config).context("a control-plane client")?;
    let member_config = match &args.kubeconfig {
        Some(p) => load(p).await?,
        None => kube::Config::infer().await.context("find the member's kubeconfig (give --kubeconfig)")?,
    };
    let member = Client::try_from(member_config.clone()).context("a member client")?;

    // The edge recorder runs from the start: an agent restarted while the control plane is away
    // records what changes in the member from the AppliedWorks it finds there (ADR 0032).
    // One set of holds for the recorder and every round of controllers: an object changed at the
    // edge stays as it is until the control plane decides.
    let holds = Arc::new(flotilla_member::holds::Holds::default());
    let recorder_members = Arc::new(flotilla_member::access::Clients::in_member(&args.cluster_name, member_config.clone()).with_holds(holds.clone()));
    let recorder_config = flotilla_controllers::edge_recorder::Config {
        probe_interval: args.edge_record_interval,
        offline_after: args.edge_offline_after,
        record_interval: args.edge_record_interval,
        member_timeout: args.member_request_timeout,
        catch_up_limit: args.edge_catch_up_limit,
    };
    let start_recorder = |cp: &Client| {
        let token = stop.child_token();
        let task = tokio::spawn(flotilla_controllers::edge_recorder::run(cp.clone(), token.clone(), recorder_config.clone(), recorder_members.clone()));
        (task, token)
    };
    let mut recorder = start_recorder(&cp);

    // Register, retrying while the control plane is unreachable.
    let mut wait = Duration::from_millis(500);
    let cluster = loop {
        match register_cluster(&cp, &member, &args).await {
            Ok(c) => break c,
            Err(e) => {
                let text = format!("{e:#}");
                if text.contains("Push mode") || text.contains("403") || text.contains("forbidden") {
                    return Err(e.context(format!("this credential may act only as {}", csr::agent_user(&args.cluster_name))));
                }
                eprintln!("agent: {text}; retrying in {wait:?}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return Ok(()),
                }
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    };
    let name = args.cluster_name.clone();
    say(format!("agent: cluster {name} registered in Pull mode (id {})", cluster.spec.id.as_deref().unwrap_or("")));

    let every = args.cluster_lease_duration.mul_f64(args.cluster_lease_renew_interval_fraction);
    let settings = FederationArgs {
        cluster_status_update_frequency: Some(args.cluster_status_update_frequency),
        member_request_timeout: args.member_request_timeout,
        concurrent_work_syncs: args.concurrent_work_syncs,
        tombstone_sweep_interval: args.tombstone_sweep_interval,
        ..FederationArgs::default()
    };
    let mut cp = cp;
    let mut last_rotation = None;
    loop {
        let round = stop.child_token();
        let lease = tokio::spawn(renew_lease(cp.clone(), cluster.clone(), args.cluster_lease_duration, every, round.clone()));
        let scope = flotilla_runtime::WatchScope::default().namespace_of::<Work>(&execution_space(&name)).name_of::<Cluster>(&name);
        let members = flotilla_member::access::Clients::in_member(&name, member_config.clone()).with_holds(holds.clone());
        let controllers = crate::controllers::start_agent(&settings, cp.clone(), members, scope)?;
        let tunnel = if args.tunnel { Some(tokio::spawn(run_tunnel(&args, member_config.clone(), round.clone()).await?)) } else { None };
        say(format!("agent: cluster {name}: {} controllers running: {}", controllers.names.len(), controllers.names.join(", ")));
        let due = rotation_due(&args.control_plane_kubeconfig, args.certificate_rotation_fraction, last_rotation)?;
        let renewed = tokio::select! {
            _ = stop.cancelled() => false,
            _ = tokio::time::sleep(due) => true,
        };
        if renewed {
            if let Err(e) = renew_certificate(&cp, &args).await {
                // Keep running on the current certificate; try again after the least interval.
                tracing::warn!(error = %format!("{e:#}"), "renewing the agent certificate failed; retrying later");
            }
            last_rotation = Some(std::time::Instant::now());
        }
        round.cancel();
        let _ = lease.await;
        if let Some(t) = tunnel {
            let _ = t.await;
        }
        controllers.shutdown(Duration::from_secs(5)).await;
        if !renewed {
            break;
        }
        cp = Client::try_from(load(&args.control_plane_kubeconfig).await?).context("a control-plane client")?;
        recorder.1.cancel();
        let _ = recorder.0.await;
        recorder = start_recorder(&cp);
        say("agent: restarting with the renewed certificate".to_string());
    }
    recorder.1.cancel();
    let _ = recorder.0.await;
    Ok(())
}
