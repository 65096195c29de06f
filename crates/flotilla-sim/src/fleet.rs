//! Many simulated members in one process, served over HTTPS: one listener routes
//! `/clusters/<name>/…` to member `<name>` (kubectl and kube-rs keep a path prefix in a
//! server URL), a single member is also served at the root, and with `own_listeners` each
//! member has a listener of its own as well (which the `refuse` fault closes). The admin
//! endpoint (`admin`) lives on the shared listener under `/sim/v1/`.
//!
//! Certificates: one CA in `<data_dir>/pki` signs the serving certificate and every client
//! certificate. A member's kubeconfig carries a certificate of the user
//! `flotilla.io/member:<name>` in `system:masters`; the fleet admin's is in the group
//! `flotilla.io/fleet-admin`. A request
//! reaches a member only with a certificate of that member (or of the fleet admin): the
//! members share a CA but not their credentials.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use flotilla_apiserver::error::ApiError;
use flotilla_apiserver::pki::{self, Authority, Bundle};
use flotilla_apiserver::serve::{ServeConfig, Serving, serve};
use flotilla_apiserver::{ApiServerConfig, Identity};
use http::{Request, Uri};
use parking_lot::Mutex;

use crate::config::MemberConfig;
use crate::member::{Member, MemberError};

/// A member's administrator certificate names the member in its user (`flotilla.io/member:<name>`,
/// in the group `system:masters`).
pub const MEMBER_USER_PREFIX: &str = "flotilla.io/member:";
pub const FLEET_ADMIN_GROUP: &str = "flotilla.io/fleet-admin";

/// How to run a fleet.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    pub members: Vec<MemberConfig>,
    /// The shared listener.
    pub listen: SocketAddr,
    /// Certificates and kubeconfigs go here; with `persistent`, each member's store too
    /// (`<data_dir>/<name>/store.redb`).
    pub data_dir: PathBuf,
    pub persistent: bool,
    /// Every member also on a listener of its own (127.0.0.1, a free port); its kubeconfig
    /// then points there.
    pub own_listeners: bool,
    /// The address written into kubeconfigs and certificates (default: the listen address,
    /// 127.0.0.1 for 0.0.0.0).
    pub advertise: Option<IpAddr>,
    /// Members started at once.
    pub start_parallelism: usize,
}

impl FleetConfig {
    pub fn new(members: Vec<MemberConfig>, data_dir: PathBuf) -> FleetConfig {
        FleetConfig {
            members,
            listen: "127.0.0.1:0".parse().expect("a valid address"),
            data_dir,
            persistent: false,
            own_listeners: false,
            advertise: None,
            start_parallelism: 16,
        }
    }

    pub fn validate(&self) -> Result<(), FleetError> {
        if self.members.is_empty() {
            return Err(FleetError::Config("no members to run".into()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for m in &self.members {
            m.validate().map_err(|e| FleetError::Config(e.to_string()))?;
            if !seen.insert(&m.name) {
                return Err(FleetError::Config(format!("two members are named {:?}", m.name)));
            }
            if m.faults.refuse && !self.own_listeners {
                return Err(FleetError::Config(format!(
                    "member {}: refuse needs the member on a listener of its own (own_listeners); the shared one cannot refuse one member's connections",
                    m.name
                )));
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("preparing certificates in {dir}: {source}")]
    Pki { dir: String, source: pki::PkiError },
    #[error("writing {path}: {source}")]
    Write { path: String, source: std::io::Error },
    #[error(transparent)]
    Member(#[from] MemberError),
    #[error("serving: {0}")]
    Serve(#[from] flotilla_apiserver::serve::ServeError),
    #[error("member {0:?} does not exist")]
    NoMember(String),
    #[error("{0}")]
    Refused(String),
}

/// A member's own listener, if it has one.
struct OwnListener {
    port: u16,
    serving: Option<Serving>,
}

/// One member of the fleet and how it is reached.
pub struct Entry {
    pub member: Member,
    /// The server URL in its kubeconfig.
    server: std::sync::OnceLock<String>,
    pub kubeconfig: PathBuf,
    own: Mutex<Option<OwnListener>>,
    refuse_watch: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Entry {
    pub fn server(&self) -> &str {
        self.server.get().map(String::as_str).unwrap_or("")
    }

    pub fn has_own_listener(&self) -> bool {
        self.own.lock().is_some()
    }
}

struct Shared {
    members: BTreeMap<String, Arc<Entry>>,
    /// Serve the only member at the root of the shared listener too.
    root_member: Option<String>,
    serving_cert: (String, String),
    ca_pem: String,
}

/// A running fleet.
pub struct Fleet {
    shared: Arc<Shared>,
    serving: Option<Serving>,
    pub local_addr: SocketAddr,
    pub admin_kubeconfig: PathBuf,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("local_addr", &self.local_addr).field("members", &self.shared.members.len()).finish()
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn write_kubeconfig(path: &Path, name: &str, server: &str, ca: &str, cert: &pki::Issued) -> Result<(), FleetError> {
    pki::write_kubeconfig(path, &pki::kubeconfig(name, server, ca, cert))
        .map_err(|e| FleetError::Write { path: path.display().to_string(), source: std::io::Error::other(e.to_string()) })
}

/// The groups of the client certificate a request came with, if any.
fn cert_identity(req: &Request<Body>) -> Option<Identity> {
    let tls = req.extensions().get::<Arc<axum_server::tls::TlsInfo>>()?;
    let der = tls.peer_certificates.first()?;
    flotilla_apiserver::auth::identity_from_cert(der)
}

/// Whether a request may reach `member`: a client certificate of that member or of the fleet
/// admin, or no certificate at all (a bearer token or an in-process identity decides then).
fn may_reach(req: &Request<Body>, member: &str) -> bool {
    match cert_identity(req) {
        None => true,
        Some(id) => id.groups.iter().any(|g| g == FLEET_ADMIN_GROUP) || id.user.strip_prefix(MEMBER_USER_PREFIX) == Some(member),
    }
}

/// Whether a request is the fleet admin's.
pub fn is_fleet_admin(req: &Request<Body>) -> bool {
    if let Some(id) = req.extensions().get::<Identity>() {
        return id.groups.iter().any(|g| g == FLEET_ADMIN_GROUP);
    }
    cert_identity(req).is_some_and(|id| id.groups.iter().any(|x| x == FLEET_ADMIN_GROUP))
}

/// Hand a request to a member: refuse a certificate of another member (the request goes on
/// as anonymous), strip the path prefix.
async fn to_member(entry: &Entry, mut req: Request<Body>, prefix_len: usize) -> Response {
    if !may_reach(&req, entry.member.name()) {
        req.extensions_mut().remove::<Arc<axum_server::tls::TlsInfo>>();
    }
    if prefix_len > 0 {
        let pq = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
        let rest = &pq[prefix_len..];
        let rest = if rest.is_empty() || rest.starts_with('?') { format!("/{rest}") } else { rest.to_string() };
        match rest.parse::<Uri>() {
            Ok(u) => *req.uri_mut() = u,
            Err(_) => return ApiError::bad_request("invalid request path").into_response(),
        }
    }
    entry.member.handle(req).await
}

async fn route(shared: Arc<Shared>, req: Request<Body>) -> Response {
    let path = req.uri().path().to_string();
    if path == "/sim/v1" || path.starts_with("/sim/v1/") {
        return crate::admin::handle(&shared_view(&shared), req).await;
    }
    if let Some(rest) = path.strip_prefix("/clusters/") {
        let name = rest.split('/').next().unwrap_or("");
        return match shared.members.get(name) {
            Some(entry) => to_member(entry, req, "/clusters/".len() + name.len()).await,
            None => ApiError::new(404, "NotFound", format!("no simulated member named {name:?} here")).into_response(),
        };
    }
    match shared.root_member.as_ref().and_then(|n| shared.members.get(n)) {
        Some(entry) => to_member(entry, req, 0).await,
        None => ApiError::new(404, "NotFound", format!("{path}: members are served under /clusters/<name>")).into_response(),
    }
}

/// What the admin endpoint sees of the fleet.
pub struct FleetView<'a> {
    pub members: &'a BTreeMap<String, Arc<Entry>>,
}

fn shared_view(shared: &Shared) -> FleetView<'_> {
    FleetView { members: &shared.members }
}

async fn serve_member(entry: Arc<Entry>, listen: SocketAddr, cert: (String, String), ca: String) -> Result<Serving, FleetError> {
    let mut cfg = ServeConfig::new(listen, cert.0, cert.1);
    cfg.client_ca_pem = Some(ca);
    cfg.shutdown_grace = Duration::ZERO;
    let router = axum::Router::new().fallback(move |req: Request<Body>| {
        let entry = entry.clone();
        async move { to_member(&entry, req, 0).await }
    });
    Ok(serve(router, cfg).await?)
}

/// Close or reopen a member's own listener as its `refuse` fault says.
async fn follow_refuse(entry: Arc<Entry>, cert: (String, String), ca: String) {
    let mut rx = entry.member.faults().subscribe();
    loop {
        let refuse = rx.borrow_and_update().refuse;
        let (port, serving) = {
            let mut own = entry.own.lock();
            let Some(o) = own.as_mut() else { return };
            (o.port, if refuse { o.serving.take() } else { None })
        };
        if let Some(s) = serving {
            let _ = s.shutdown().await;
        }
        let reopen = !refuse && entry.own.lock().as_ref().is_some_and(|o| o.serving.is_none());
        if reopen {
            match serve_member(entry.clone(), SocketAddr::from(([127, 0, 0, 1], port)), cert.clone(), ca.clone()).await {
                Ok(s) => {
                    if let Some(o) = entry.own.lock().as_mut() {
                        o.serving = Some(s);
                    }
                }
                Err(e) => tracing::warn!(member = entry.member.name(), error = %e, "reopening the member's listener failed"),
            }
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

impl Fleet {
    /// Start every member, serve them, and write their kubeconfigs. `progress` is called with
    /// (members started, total).
    pub async fn start(config: FleetConfig, progress: impl Fn(usize, usize)) -> Result<Fleet, FleetError> {
        config.validate()?;
        let adv = config.advertise.unwrap_or_else(|| {
            let ip = config.listen.ip();
            if ip.is_unspecified() { IpAddr::from([127, 0, 0, 1]) } else { ip }
        });
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        names.extend(hostname());
        if !names.contains(&adv.to_string()) {
            names.push(adv.to_string());
        }
        std::fs::create_dir_all(&config.data_dir).map_err(|source| FleetError::Write { path: config.data_dir.display().to_string(), source })?;
        let bundle = Bundle::ensure(&config.data_dir, &names).map_err(|source| FleetError::Pki { dir: config.data_dir.display().to_string(), source })?;
        let ca: &Authority = &bundle.ca;

        // Start the members, a few at a time.
        let total = config.members.len();
        let mut started: BTreeMap<String, Member> = BTreeMap::new();
        let mut pending = config.members.clone().into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < config.start_parallelism.max(1) {
                let Some(m) = pending.next() else { break };
                let dir = config.persistent.then(|| config.data_dir.join(&m.name));
                running.spawn(async move {
                    if let Some(d) = &dir {
                        std::fs::create_dir_all(d).map_err(|source| FleetError::Write { path: d.display().to_string(), source })?;
                    }
                    let api_config = ApiServerConfig { max_in_flight: 100, bootstrap_rbac: false, ..ApiServerConfig::default() };
                    Ok::<Member, FleetError>(Member::start(m, dir.as_deref(), api_config).await?)
                });
            }
            let Some(done) = running.join_next().await else { break };
            let member = done.map_err(|e| FleetError::Config(format!("a member's start-up task failed: {e}")))??;
            started.insert(member.name().to_string(), member);
            progress(started.len(), total);
        }

        // The shared listener.
        let root_member = (total == 1).then(|| config.members[0].name.clone());
        let serving_cert = (bundle.serving.cert_pem.clone(), bundle.serving.key_pem.clone());
        let shared_slot: Arc<Mutex<Option<Arc<Shared>>>> = Arc::new(Mutex::new(None));
        let slot = shared_slot.clone();
        let router = axum::Router::new().fallback(move |req: Request<Body>| {
            let shared = slot.lock().clone();
            async move {
                match shared {
                    Some(s) => route(s, req).await,
                    None => ApiError::unavailable("the simulated members are still starting").into_response(),
                }
            }
        });
        let mut cfg = ServeConfig::new(config.listen, serving_cert.0.clone(), serving_cert.1.clone());
        cfg.client_ca_pem = Some(ca.cert_pem.clone());
        // As for each member's own listener: a fleet that stops drops its connections at once
        // (its clients' watches would otherwise hold the shutdown for the whole grace period).
        cfg.shutdown_grace = Duration::ZERO;
        let serving = serve(router, cfg).await?;
        let local_addr = serving.local_addr;
        let base = format!("https://{}", SocketAddr::new(adv, local_addr.port()));

        // Kubeconfigs and own listeners.
        let mut members = BTreeMap::new();
        for (name, member) in started {
            let cert = ca
                .issue_client(&format!("{MEMBER_USER_PREFIX}{name}"), &["system:masters"])
                .map_err(|source| FleetError::Pki { dir: config.data_dir.display().to_string(), source })?;
            let kubeconfig = config.data_dir.join(format!("{name}.kubeconfig"));
            let entry = Arc::new(Entry {
                member,
                server: std::sync::OnceLock::new(),
                kubeconfig: kubeconfig.clone(),
                own: Mutex::new(None),
                refuse_watch: Mutex::new(None),
            });
            let server = if config.own_listeners {
                let s = serve_member(entry.clone(), SocketAddr::new(config.listen.ip(), 0), serving_cert.clone(), ca.cert_pem.clone()).await?;
                let port = s.local_addr.port();
                *entry.own.lock() = Some(OwnListener { port, serving: Some(s) });
                let watch = tokio::spawn(follow_refuse(entry.clone(), serving_cert.clone(), ca.cert_pem.clone()));
                *entry.refuse_watch.lock() = Some(watch);
                format!("https://{}", SocketAddr::new(adv, port))
            } else if root_member.as_deref() == Some(name.as_str()) {
                base.clone()
            } else {
                format!("{base}/clusters/{name}")
            };
            write_kubeconfig(&kubeconfig, &name, &server, &ca.cert_pem, &cert)?;
            let _ = entry.server.set(server);
            members.insert(name, entry);
        }
        let admin_cert = ca
            .issue_client("flotilla-fleet-admin", &[FLEET_ADMIN_GROUP])
            .map_err(|source| FleetError::Pki { dir: config.data_dir.display().to_string(), source })?;
        let admin_kubeconfig = config.data_dir.join("fleet-admin.kubeconfig");
        write_kubeconfig(&admin_kubeconfig, "flotilla-sim", &base, &ca.cert_pem, &admin_cert)?;
        let shared = Arc::new(Shared { members, root_member, serving_cert, ca_pem: ca.cert_pem.clone() });
        *shared_slot.lock() = Some(shared.clone());
        Ok(Fleet { shared, serving: Some(serving), local_addr, admin_kubeconfig })
    }

    pub fn members(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.shared.members.values()
    }

    pub fn entry(&self, name: &str) -> Option<&Arc<Entry>> {
        self.shared.members.get(name)
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.entry(name).map(|e| &e.member)
    }

    /// The CA that signed the serving certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.shared.ca_pem
    }

    /// Stop serving and stop every member.
    pub async fn shutdown(mut self) -> Result<(), FleetError> {
        if let Some(s) = self.serving.take() {
            s.shutdown().await?;
        }
        for e in self.shared.members.values() {
            if let Some(w) = e.refuse_watch.lock().take() {
                w.abort();
            }
            let own = e.own.lock().as_mut().and_then(|o| o.serving.take());
            if let Some(s) = own {
                let _ = s.shutdown().await;
            }
        }
        let _ = &self.shared.serving_cert;
        Ok(())
    }
}
