//! `flotilla up`: the all-in-one control plane — the API server on the embedded store over
//! HTTPS, with the control-plane controllers it needs, until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use flotilla_apiserver::pki::{self, Bundle};
use flotilla_apiserver::serve::{ServeConfig, serve_on};
use flotilla_apiserver::{ApiServerConfig, TokenFile};
use flotilla_store::embedded::EmbeddedConfig;

use crate::store_cmd::store_path;

#[derive(Args, Clone)]
pub struct UpArgs {
    /// Where the store, certificates and kubeconfig live (created with mode 0700).
    #[arg(long, env = "FLOTILLA_DATA_DIR", default_value = "./flotilla-data")]
    pub data_dir: PathBuf,
    /// Address to listen on (HTTPS).
    #[arg(long, env = "FLOTILLA_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Address clients use to reach this server: `/api`'s serverAddressByClientCIDRs, the
    /// `default/kubernetes` endpoints, the serving certificate and the kubeconfig. Defaults to
    /// the listen address; listening on 0.0.0.0 (or ::), the address of the interface that
    /// carries the default route.
    #[arg(long, env = "FLOTILLA_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<std::net::IpAddr>,
    /// kube-apiserver's EncryptionConfiguration: which resources are encrypted at rest, with
    /// which providers (aesgcm, aescbc, secretbox, identity) and keys. Default:
    /// DATA_DIR/encryption-config.yaml, written on first start with a fresh secretbox key for
    /// Secrets (keep a copy apart from the data directory). Values stored in another form are
    /// rewritten with the first provider's first key at start-up.
    #[arg(long, env = "FLOTILLA_ENCRYPTION_PROVIDER_CONFIG")]
    pub encryption_provider_config: Option<PathBuf>,
    /// The range the `default/kubernetes` Service's cluster IP comes from (its first address),
    /// as kube-apiserver's `--service-cluster-ip-range`; no other Service gets an address from
    /// it (ADR 0004).
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// How long an HTTP/1.1 client may take to send a request's headers, counted from when the
    /// connection is ready for its next request: a slow or idle connection is closed after it.
    #[arg(long, default_value = "32s", value_parser = flotilla::federation_args::parse_duration)]
    pub header_read_timeout: Duration,
    /// How long an HTTP/2 connection may stay without an open stream (counted from its start
    /// and from the end of its last stream) before it is closed with GOAWAY.
    #[arg(long, default_value = "90s", value_parser = flotilla::federation_args::parse_duration)]
    pub http2_idle_timeout: Duration,
    /// How often the `default/kubernetes` Service, Endpoints and EndpointSlice are checked and
    /// put back.
    #[arg(long, default_value = "10s", value_parser = flotilla::federation_args::parse_duration)]
    pub kubernetes_service_interval: Duration,
    /// A CSV token file (`token,user,uid,"group1,group2"`) for bearer-token authentication.
    #[arg(long, env = "FLOTILLA_TOKEN_AUTH_FILE")]
    pub token_auth_file: Option<PathBuf>,
    /// How requests are authorized: RBAC (Roles, ClusterRoles and bindings; the admin
    /// certificate's system:masters group may do everything) or AlwaysAllow (every
    /// authenticated user may do everything).
    #[arg(long, default_value = "RBAC", value_parser = ["RBAC", "AlwaysAllow"])]
    pub authorization_mode: String,
    /// Non-watch requests in flight before new ones are answered 429.
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Seconds a non-watch request may take before it is answered 504.
    #[arg(long, default_value_t = 60)]
    pub request_timeout_seconds: u64,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 3 * 1024 * 1024)]
    pub max_request_body_bytes: usize,
    /// Seconds the cluster proxy (`clusters/{name}/proxy`) waits for a member's response
    /// headers before answering 503; a proxied watch then streams as long as it lasts.
    #[arg(long, default_value_t = 30)]
    pub cluster_proxy_timeout_seconds: u64,
    /// How often an open agent tunnel is pinged (HTTP/2 PING); one not answered within
    /// `--tunnel-keepalive-timeout` is closed, and its cluster reached again once its agent
    /// dials back.
    #[arg(long, default_value = "10s", value_parser = flotilla::federation_args::parse_duration)]
    pub tunnel_keepalive_interval: Duration,
    #[arg(long, default_value = "20s", value_parser = flotilla::federation_args::parse_duration)]
    pub tunnel_keepalive_timeout: Duration,
    /// How long an open tunnel gets to answer when another agent claims its cluster: a tunnel
    /// that answers keeps it (the newcomer is refused), one that does not is replaced.
    #[arg(long, default_value = "5s", value_parser = flotilla::federation_args::parse_duration)]
    pub tunnel_probe_timeout: Duration,
    /// Admit ClusterTaintPolicies with NoExecute taints, which evict what does not tolerate
    /// them (karmada-webhook's flag of the same name; off by default, as in Karmada).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub allow_no_execute_taint_policy: bool,
    /// How long the store may hold a batch of writes open for more before its durable commit
    /// (one fsync for the lot). It waits only while waiting gathers more writes: under a
    /// steady stream from many callers; a lone writer is committed at once. `0ms` turns it off.
    #[arg(long, default_value = "1ms", value_parser = flotilla::federation_args::parse_duration)]
    pub store_commit_window: Duration,
    /// Also run N simulated member clusters in this process and join them (`--demo` alone: 3).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "3")]
    pub demo: Option<usize>,
    /// Also run M simulated members (edge1, …) that join in Pull mode: each registered with a
    /// bootstrap token and run by an agent in this process, as `flotilla register` and
    /// `flotilla agent` would on the member.
    #[arg(long, value_name = "M", default_value_t = 0)]
    pub demo_pull: usize,
    /// Serve the web dashboard at https://<listen>/dashboard/ (log in with a bearer token:
    /// `kubectl create token`, or one of `--token-auth-file`). `--dashboard=false` turns it off.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub dashboard: bool,
    #[command(flatten)]
    pub dns: flotilla::traffic::DnsArgs,
    #[command(flatten)]
    pub gateway: flotilla::traffic::GatewayArgs,
    #[command(flatten)]
    pub federation: flotilla::federation_args::FederationArgs,
}

impl UpArgs {
    /// Arguments carrying only what the certificate names depend on.
    pub fn for_names(data_dir: PathBuf, advertise_address: Option<std::net::IpAddr>) -> UpArgs {
        UpArgs {
            data_dir,
            listen: "127.0.0.1:6443".parse().expect("a valid address"),
            advertise_address,
            service_cluster_ip_range: "10.96.0.0/12".into(),
            encryption_provider_config: None,
            kubernetes_service_interval: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            http2_idle_timeout: Duration::from_secs(90),
            token_auth_file: None,
            authorization_mode: "RBAC".into(),
            max_requests_inflight: 400,
            request_timeout_seconds: 60,
            max_request_body_bytes: 3 * 1024 * 1024,
            cluster_proxy_timeout_seconds: 30,
            tunnel_keepalive_interval: Duration::from_secs(10),
            tunnel_keepalive_timeout: Duration::from_secs(20),
            tunnel_probe_timeout: Duration::from_secs(5),
            allow_no_execute_taint_policy: false,
            store_commit_window: flotilla_store::embedded::DEFAULT_COMMIT_WINDOW,
            demo: None,
            demo_pull: 0,
            dashboard: true,
            dns: Default::default(),
            gateway: Default::default(),
            federation: Default::default(),
        }
    }
}

/// The address to advertise (see `--advertise-address`); with none to be found listening on
/// every address, loopback, with a warning.
fn advertise_ip(args: &UpArgs) -> anyhow::Result<std::net::IpAddr> {
    use flotilla_apiserver::advertise::{AdvertiseError, advertise_ip};
    match advertise_ip(args.advertise_address, args.listen.ip()) {
        Ok(ip) => Ok(ip),
        Err(e @ AdvertiseError::NoDefaultRoute { .. }) => {
            eprintln!("flotilla: {e}; advertising 127.0.0.1");
            Ok(std::net::IpAddr::from([127, 0, 0, 1]))
        }
        Err(e) => Err(e.into()),
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The serving certificate's names: 127.0.0.1, localhost, the host name, the advertise address.
pub fn serving_names(args: &UpArgs) -> anyhow::Result<Vec<String>> {
    let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    if let Some(h) = hostname() {
        names.push(h);
    }
    let adv = advertise_ip(args)?.to_string();
    if !names.contains(&adv) {
        names.push(adv);
    }
    Ok(names)
}

fn prepare_data_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).with_context(|| format!("restrict {}", dir.display()))?;
    Ok(())
}

/// The durable commits of this process's store, for `/metrics`.
static STORE_COMMITS: std::sync::OnceLock<std::sync::Arc<flotilla_store::embedded::CommitStats>> = std::sync::OnceLock::new();

/// `flotilla_store_durable_commits_total` and `flotilla_store_committed_writes_total`: their
/// ratio is how many writes each fsync carried.
fn render_store_commits() -> String {
    let Some(stats) = STORE_COMMITS.get() else { return String::new() };
    format!(
        "# HELP flotilla_store_durable_commits_total Durable commits of the store (one fsync each).\n\
         # TYPE flotilla_store_durable_commits counter\n\
         flotilla_store_durable_commits_total {}\n\
         # HELP flotilla_store_committed_writes_total Write requests the store's durable commits answered.\n\
         # TYPE flotilla_store_committed_writes counter\n\
         flotilla_store_committed_writes_total {}\n",
        stats.commits(),
        stats.writes()
    )
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    // Handle SIGTERM from the start: a stop that arrives during start-up still shuts down
    // cleanly instead of killing the process mid-write.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("install the SIGTERM handler")?;
    // A misspelt --controllers is refused before anything is opened or written.
    flotilla::controllers::set(&args.federation, flotilla::controllers::Scope::All).select(&args.federation.controllers)?;
    // Every connection and watch holds a descriptor: lift the soft limit as Go servers do.
    match flotilla_apiserver::serve::raise_open_file_limit() {
        Ok(limit) => tracing::debug!(limit, "open files"),
        Err(e) => eprintln!("flotilla: could not raise the open-file limit ({e}); many connections may exhaust it"),
    }
    prepare_data_dir(&args.data_dir)?;
    let path = store_path(&args.data_dir);
    let (encryption_path, encryption) = crate::store_cmd::encryption_config(&args.data_dir, args.encryption_provider_config.as_deref())?;
    let mut store_config = EmbeddedConfig::new(&path);
    store_config.commit_window = args.store_commit_window;
    store_config.commit_stats = Some(STORE_COMMITS.get_or_init(Default::default).clone());
    flotilla_apiserver::metrics::add_source(render_store_commits);
    let store = crate::store_cmd::open_encrypted(store_config, encryption, &encryption_path)
        .await
        .with_context(|| format!("open the store in {}", args.data_dir.display()))?;
    let names = serving_names(&args)?;
    let bundle = Bundle::ensure(&args.data_dir, &names).context("prepare certificates")?;
    let cluster_ip = flotilla_apiserver::kubernetes_service::first_service_ip(&args.service_cluster_ip_range)
        .map_err(|e| anyhow::anyhow!("--service-cluster-ip-range: {e}"))?;
    // Bound before the API server is built: with `--listen …:0` the port is known only now, and
    // the server advertises it.
    let listener = flotilla_apiserver::serve::bind(args.listen)?;
    let port = listener.local_addr().context("read the listening address")?.port();
    let advertise = SocketAddr::new(advertise_ip(&args)?, port);
    let config = ApiServerConfig {
        advertise,
        authorization: if args.authorization_mode == "AlwaysAllow" {
            flotilla_apiserver::server::AuthorizationMode::AlwaysAllowAuthenticated
        } else {
            flotilla_apiserver::server::AuthorizationMode::Rbac
        },
        max_in_flight: args.max_requests_inflight,
        request_timeout: Duration::from_secs(args.request_timeout_seconds),
        max_body_bytes: args.max_request_body_bytes,
        admission: flotilla_api::admission::Settings { allow_no_execute_taint_policy: args.allow_no_execute_taint_policy },
        ..ApiServerConfig::default()
    };
    let tokens = match &args.token_auth_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("read the token file {}", f.display()))?;
            Some(TokenFile::parse(&text).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    let (api, installed) = flotilla::control_plane::start(store.clone(), config).await?;
    if let Some(t) = tokens {
        api.set_tokens(t);
    }
    tracing::info!(installed, "federation CRDs registered");
    let proxy = flotilla_member::proxy::ProxyConfig { response_timeout: Duration::from_secs(args.cluster_proxy_timeout_seconds.max(1)), ..Default::default() };
    let tunnel = flotilla_member::tunnel::TunnelConfig {
        keep_alive_interval: args.tunnel_keepalive_interval,
        keep_alive_timeout: args.tunnel_keepalive_timeout,
        probe_timeout: args.tunnel_probe_timeout,
    };
    flotilla::cluster_proxy::install(&api, proxy, tunnel);
    if args.dashboard {
        flotilla::dashboard::install(&api);
    }
    let mut serve_cfg = ServeConfig::new(args.listen, bundle.serving.cert_pem.clone(), bundle.serving.key_pem.clone());
    serve_cfg.client_ca_pem = Some(bundle.ca.cert_pem.clone());
    serve_cfg.header_read_timeout = args.header_read_timeout;
    serve_cfg.http2_idle_timeout = args.http2_idle_timeout;
    let serving = serve_on(listener, api.router(), serve_cfg).await?;
    let kubernetes_service = api.start_kubernetes_service(flotilla_apiserver::kubernetes_service::KubernetesServiceConfig {
        advertise,
        cluster_ip,
        interval: args.kubernetes_service_interval,
    });
    let server_url = format!("https://{advertise}");
    let kubeconfig_path = args.data_dir.join("admin.kubeconfig");
    pki::write_kubeconfig(&kubeconfig_path, &pki::kubeconfig("flotilla", &server_url, &bundle.ca.cert_pem, &bundle.admin))?;
    let seeder = flotilla::controllers::client(&api, "system:flotilla:cluster-info");
    flotilla::control_plane::seed_cluster_info(&seeder, &server_url, &bundle.ca.cert_pem).await?;
    let rev = store.current_revision().await?;
    println!("flotilla: serving the Kubernetes API on {server_url} (store {} at revision {rev})", path.display());
    println!("flotilla: admin kubeconfig: {}", kubeconfig_path.display());
    println!("  kubectl --kubeconfig {} get namespaces", kubeconfig_path.display());
    if args.dashboard {
        println!("flotilla: dashboard: {server_url}/dashboard/ (log in with a token: `kubectl --kubeconfig {} create token NAME`)", kubeconfig_path.display());
    }
    let signing = flotilla_kube_controllers::csr_signing::SigningCa {
        cert_pem: bundle.ca.cert_pem.clone(),
        key_pem: bundle.ca.key_pem(),
        max_duration: flotilla_kube_controllers::csr_signing::DEFAULT_DURATION,
    };
    let controllers = flotilla::controllers::start(&api, &args.federation, Some(signing))?;
    flotilla::search_view::install(&api, controllers.search_cache.clone());
    println!("flotilla: {}", flotilla::controllers::describe(&args.federation, flotilla::controllers::Scope::All, &controllers.names));
    let dns = flotilla::traffic::start_dns(&args.dns, &controllers.runtime).await?;
    let gateway = flotilla::traffic::start_gateway(&args.gateway, &controllers.runtime).await?;
    let push = args.demo.unwrap_or(0);
    let demo = if push + args.demo_pull > 0 {
        let cp = flotilla::controllers::client(&api, "system:flotilla:demo");
        let address = advertise.to_string();
        let pin = flotilla_api::bootstrap_token::ca_cert_hash(&bundle.ca.cert_pem).map_err(anyhow::Error::msg)?;
        let at = flotilla::demo::RegisterAt { client: &cp, address: &address, pin: &pin };
        let demo = flotilla::demo::start(push, args.demo_pull, &args.data_dir.join("demo"), &cp, at).await?;
        match args.demo_pull {
            0 => println!("demo: {push} members joined; try:"),
            pull => println!("demo: {push} members joined in Push mode and {pull} in Pull mode; try:"),
        }
        println!("  kubectl --kubeconfig {} get clusters", kubeconfig_path.display());
        println!("  kubectl --kubeconfig {} apply -f examples/karmada/nginx.yaml", kubeconfig_path.display());
        Some(demo)
    } else {
        None
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("flotilla: shutting down");
    controllers.shutdown(std::time::Duration::from_secs(5)).await;
    for task in [dns, gateway].into_iter().flatten() {
        let _ = task.await;
    }
    if let Some(demo) = demo
        && let Err(e) = demo.shutdown().await
    {
        eprintln!("flotilla: stopping the demo members: {e}");
    }
    kubernetes_service.stop().await;
    serving.shutdown().await?;
    drop(api);
    drop(store);
    Ok(())
}
