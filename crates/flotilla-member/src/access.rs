//! Member clients: the seam between the controllers that reach members (execution, work
//! status, cluster status) and how a member is reached. On the control plane a Push cluster is
//! reached with the credential in its Cluster's Secret; a pull agent reaches the one member it
//! runs beside with its own configuration ([`Clients::in_member`]). The controllers ask
//! [`Clients::reaches`] which clusters are theirs and [`Clients::connect`] for a connection, and
//! never learn which mode they are in.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use flotilla_api::federation::karmada::cluster::{Cluster, LocalSecretReference};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::apply::Member;
use crate::discovery::MemberDiscovery;

/// Why a member could not be reached or used.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("cluster {cluster} has no apiEndpoint")]
    NoEndpoint { cluster: String },
    #[error("cluster {cluster} has no secretRef (a Push cluster needs one)")]
    NoSecretRef { cluster: String },
    #[error("reading the credential secret {namespace}/{name} of cluster {cluster}: {source}")]
    ReadSecret { cluster: String, namespace: String, name: String, source: kube::Error },
    #[error("the credential secret {namespace}/{name} of cluster {cluster} lacks {key}")]
    SecretKey { cluster: String, namespace: String, name: String, key: &'static str },
    #[error("building a client for cluster {cluster}: {reason}")]
    Client { cluster: String, reason: String },
    #[error("member {cluster}: {step}: {source}")]
    Api { cluster: String, step: String, source: kube::Error },
    #[error("member {cluster}: {message}")]
    Other { cluster: String, message: String },
}

/// What it takes to reach a member: endpoint, CA bundle, bearer token.
#[derive(Clone)]
pub struct MemberAccess {
    pub cluster: String,
    pub endpoint: String,
    pub ca_bundle: Option<Vec<u8>>,
    pub token: String,
    pub insecure: bool,
    pub proxy_url: Option<String>,
    /// A whole client configuration given from outside (a pull agent's member kubeconfig, with
    /// whatever credential it holds): used instead of the fields above.
    pub preset: Option<kube::Config>,
}

impl std::fmt::Debug for MemberAccess {
    // The token is a secret: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberAccess").field("cluster", &self.cluster).field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

fn normalize_endpoint(e: &str) -> String {
    if e.starts_with("https://") || e.starts_with("http://") { e.trim_end_matches('/').to_string() } else { format!("https://{e}") }
}

impl MemberAccess {
    /// Read the access data of `cluster` from the control plane.
    pub async fn from_cluster(control_plane: &kube::Client, cluster: &Cluster) -> Result<MemberAccess, MemberError> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        let endpoint = cluster.spec.api_endpoint.clone().ok_or_else(|| MemberError::NoEndpoint { cluster: name.clone() })?;
        let sref = cluster.spec.secret_ref.clone().ok_or_else(|| MemberError::NoSecretRef { cluster: name.clone() })?;
        let data = secret_data(control_plane, &name, &sref).await?;
        let token = token_of(&data, &name, &sref)?;
        let ca_bundle = data.get("caBundle").map(|b| b.0.clone()).filter(|b| !b.is_empty());
        Ok(MemberAccess {
            cluster: name,
            endpoint: normalize_endpoint(&endpoint),
            ca_bundle,
            token,
            insecure: cluster.spec.insecure_skip_tls_verification.unwrap_or(false),
            proxy_url: cluster.spec.proxy_url.clone(),
            preset: None,
        })
    }

    /// The access a pull agent has to its own member: `config` as given.
    pub fn in_member(cluster: &str, config: kube::Config) -> MemberAccess {
        MemberAccess {
            cluster: cluster.to_string(),
            endpoint: config.cluster_url.to_string(),
            ca_bundle: None,
            token: String::new(),
            insecure: false,
            proxy_url: None,
            preset: Some(config),
        }
    }

    /// The same access with the token of the Cluster's `impersonatorSecretRef`, if it has one
    /// (Karmada's cluster proxy authenticates as this identity and impersonates the caller).
    pub async fn impersonator(&self, control_plane: &kube::Client, cluster: &Cluster) -> Result<Option<MemberAccess>, MemberError> {
        let Some(sref) = &cluster.spec.impersonator_secret_ref else { return Ok(None) };
        let data = secret_data(control_plane, &self.cluster, sref).await?;
        Ok(Some(MemberAccess { token: token_of(&data, &self.cluster, sref)?, ..self.clone() }))
    }

    /// A client with a request timeout.
    pub fn client(&self, timeout: Duration) -> Result<kube::Client, MemberError> {
        let mut config = self.config()?;
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        config.connect_timeout = Some(timeout);
        self.build(config)
    }

    /// A client for long-lived streams (proxied watches): only connecting is bounded; the
    /// caller bounds the wait for an answer.
    pub fn streaming_client(&self, connect_timeout: Duration) -> Result<kube::Client, MemberError> {
        let mut config = self.config()?;
        config.read_timeout = None;
        config.write_timeout = None;
        config.connect_timeout = Some(connect_timeout);
        // A proxy hands back what the member answered: kube's client would retry a 503 (a
        // Service with no endpoints) for half a minute before the caller saw it.
        config.default_retry = false;
        self.build(config)
    }

    fn config(&self) -> Result<kube::Config, MemberError> {
        if let Some(c) = &self.preset {
            return Ok(c.clone());
        }
        let url: http::Uri = self
            .endpoint
            .parse()
            .map_err(|e| MemberError::Client { cluster: self.cluster.clone(), reason: format!("invalid endpoint {}: {e}", self.endpoint) })?;
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.accept_invalid_certs = self.insecure;
        if let Some(ca) = &self.ca_bundle {
            config.root_cert = Some(pem_to_der(ca).map_err(|reason| MemberError::Client { cluster: self.cluster.clone(), reason })?);
        }
        config.auth_info.token = Some(self.token.clone().into());
        if let Some(p) = &self.proxy_url {
            config.proxy_url = p.parse().ok();
        }
        Ok(config)
    }

    fn build(&self, config: kube::Config) -> Result<kube::Client, MemberError> {
        kube::Client::try_from(config).map_err(|e| MemberError::Client { cluster: self.cluster.clone(), reason: e.to_string() })
    }
}

async fn secret_data(control_plane: &kube::Client, cluster: &str, sref: &LocalSecretReference) -> Result<BTreeMap<String, ByteString>, MemberError> {
    let secrets: Api<Secret> = Api::namespaced(control_plane.clone(), &sref.namespace);
    let secret = secrets.get(&sref.name).await.map_err(|source| MemberError::ReadSecret {
        cluster: cluster.to_string(),
        namespace: sref.namespace.clone(),
        name: sref.name.clone(),
        source,
    })?;
    Ok(secret.data.unwrap_or_default())
}

fn token_of(data: &BTreeMap<String, ByteString>, cluster: &str, sref: &LocalSecretReference) -> Result<String, MemberError> {
    data.get("token").map(|b| String::from_utf8_lossy(&b.0).trim().to_string()).filter(|t| !t.is_empty()).ok_or_else(|| MemberError::SecretKey {
        cluster: cluster.to_string(),
        namespace: sref.namespace.clone(),
        name: sref.name.clone(),
        key: "token",
    })
}

/// Certificates of a PEM bundle (or DER) as DER blobs, for `kube::Config::root_cert`.
fn pem_to_der(bundle: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    use rustls_pki_types::pem::PemObject;
    let text = String::from_utf8_lossy(bundle);
    if !text.contains("-----BEGIN") {
        // Some tools store the bundle base64-encoded once more.
        if let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(text.trim())
            && decoded != bundle
        {
            return pem_to_der(&decoded);
        }
        return Ok(vec![bundle.to_vec()]);
    }
    rustls_pki_types::CertificateDer::pem_slice_iter(bundle).map(|c| c.map(|c| c.as_ref().to_vec()).map_err(|e| format!("invalid caBundle: {e}"))).collect()
}

/// A shared cache of member clients by cluster name and request timeout (rebuilt when the
/// access data changes), each with its discovery cache. Callers that need different timeouts (a
/// health probe, applies, long-running watches) get different clients.
///
/// [`Clients::connect`] also keeps what it read from each Cluster's Secret for
/// [`ACCESS_REUSE`], so applying many Works to a member costs one Secret read, not one per
/// Work; a changed Cluster spec (endpoint, secretRef, TLS, proxy) reads it again at once.
#[derive(Default)]
pub struct Clients {
    inner: parking_lot::Mutex<std::collections::HashMap<(String, Duration), Cached>>,
    accesses: parking_lot::Mutex<std::collections::HashMap<String, ReadAccess>>,
    /// A pull agent's one member (its name and access); None on the control plane.
    in_member: Option<MemberAccess>,
    /// Member objects held as the edge left them (a pull agent's, shared by its clients).
    holds: Arc<crate::holds::Holds>,
}

/// How long access data read from a Cluster's Secret is reused by [`Clients::connect`]: a
/// rotated token is picked up within this long.
pub const ACCESS_REUSE: Duration = Duration::from_secs(10);

/// Access data as read for a Cluster whose access-relevant spec was `spec`.
struct ReadAccess {
    spec: String,
    at: std::time::Instant,
    access: MemberAccess,
}

/// The parts of a Cluster's spec [`MemberAccess::from_cluster`] reads.
fn access_spec(cluster: &Cluster) -> String {
    let s = &cluster.spec;
    serde_json::json!([s.api_endpoint, s.secret_ref.as_ref().map(|r| (&r.namespace, &r.name)), s.insecure_skip_tls_verification, s.proxy_url]).to_string()
}

struct Cached {
    key: Arc<MemberAccessKey>,
    client: kube::Client,
    discovery: Arc<MemberDiscovery>,
}

#[derive(PartialEq, Eq)]
struct MemberAccessKey {
    endpoint: String,
    token: String,
    ca: Option<Vec<u8>>,
    insecure: bool,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clients")
    }
}

/// A member client with its discovery cache: what [`crate::apply`] needs.
#[derive(Clone)]
pub struct Connection {
    pub cluster: String,
    pub client: kube::Client,
    pub discovery: Arc<MemberDiscovery>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("cluster", &self.cluster).finish_non_exhaustive()
    }
}

impl Connection {
    pub fn member(&self) -> Member<'_> {
        Member { cluster: &self.cluster, client: &self.client, discovery: &self.discovery }
    }
}

impl Clients {
    /// A pull agent's clients: the member `cluster`, reached with `config`, and no other.
    pub fn in_member(cluster: &str, config: kube::Config) -> Clients {
        Clients { in_member: Some(MemberAccess::in_member(cluster, config)), ..Clients::default() }
    }

    /// A new, empty cache reaching members the same way (for a controller that keeps its
    /// long-lived watch clients apart).
    pub fn same_mode(&self) -> Clients {
        Clients { in_member: self.in_member.clone(), holds: self.holds.clone(), ..Clients::default() }
    }

    /// These clients sharing `holds` (a pull agent's recorder and its controllers share one).
    pub fn with_holds(mut self, holds: Arc<crate::holds::Holds>) -> Clients {
        self.holds = holds;
        self
    }

    /// The member objects that must not be written now: held as the edge left them until the
    /// control plane decides what becomes of the changes made there while offline (ADR 0032).
    pub fn holds(&self) -> &crate::holds::Holds {
        &self.holds
    }

    /// A pull agent's own cluster; None on the control plane.
    pub fn own_cluster(&self) -> Option<&str> {
        self.in_member.as_ref().map(|m| m.cluster.as_str())
    }

    /// Whether `cluster`'s Works are these clients' to carry out: on the control plane every
    /// cluster but a Pull one (its agent's); in a pull agent its own cluster only.
    pub fn serves(&self, cluster: &Cluster) -> bool {
        use flotilla_api::federation::karmada::cluster::ClusterSyncMode;
        match &self.in_member {
            Some(m) => cluster.metadata.name.as_deref() == Some(m.cluster.as_str()),
            None => cluster.spec.sync_mode != ClusterSyncMode::Pull,
        }
    }

    /// Whether these clients can reach `cluster` now: a served Push cluster with a credential
    /// Secret on the control plane; its own cluster in a pull agent.
    pub fn reaches(&self, cluster: &Cluster) -> bool {
        self.serves(cluster) && (self.in_member.is_some() || cluster.spec.secret_ref.is_some())
    }

    pub fn get(&self, access: &MemberAccess, timeout: Duration) -> Result<kube::Client, MemberError> {
        self.connection(access, timeout).map(|c| c.client)
    }

    /// The cached connection for `access` with `timeout`, built on first use or when the access
    /// data changed.
    pub fn connection(&self, access: &MemberAccess, timeout: Duration) -> Result<Connection, MemberError> {
        let key = Arc::new(MemberAccessKey {
            endpoint: access.endpoint.clone(),
            token: access.token.clone(),
            ca: access.ca_bundle.clone(),
            insecure: access.insecure,
        });
        let mut map = self.inner.lock();
        let slot = (access.cluster.clone(), timeout);
        if let Some(c) = map.get(&slot)
            && *c.key == *key
        {
            return Ok(Connection { cluster: access.cluster.clone(), client: c.client.clone(), discovery: c.discovery.clone() });
        }
        let client = access.client(timeout)?;
        let discovery = Arc::new(MemberDiscovery::default());
        map.insert(slot, Cached { key, client: client.clone(), discovery: discovery.clone() });
        Ok(Connection { cluster: access.cluster.clone(), client, discovery })
    }

    /// Read `cluster`'s access data from the control plane (or reuse what was read less than
    /// [`ACCESS_REUSE`] ago for the same spec) and connect.
    pub async fn connect(&self, control_plane: &kube::Client, cluster: &Cluster, timeout: Duration) -> Result<Connection, MemberError> {
        let access = self.access(control_plane, cluster).await?;
        self.connection(&access, timeout)
    }

    /// How `cluster` is reached: its Secret's credential read from the control plane (or
    /// reused, see [`ACCESS_REUSE`]), or a pull agent's own access to its member.
    pub async fn access(&self, control_plane: &kube::Client, cluster: &Cluster) -> Result<MemberAccess, MemberError> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        if let Some(m) = &self.in_member {
            if m.cluster == name {
                return Ok(m.clone());
            }
            return Err(MemberError::Other { cluster: name, message: format!("this agent reaches only cluster {}", m.cluster) });
        }
        let spec = access_spec(cluster);
        if let Some(read) = self.accesses.lock().get(&name)
            && read.spec == spec
            && read.at.elapsed() < ACCESS_REUSE
        {
            return Ok(read.access.clone());
        }
        let access = MemberAccess::from_cluster(control_plane, cluster).await?;
        self.accesses.lock().insert(name, ReadAccess { spec, at: std::time::Instant::now(), access: access.clone() });
        Ok(access)
    }

    /// A client this cache did not configure (e.g. the cluster proxy's streaming client without
    /// a request timeout): built by `build` on first use or when the access data changed, and
    /// cached for the cluster apart from the timeout-keyed clients.
    pub fn get_or_build(
        &self,
        access: &MemberAccess,
        build: impl FnOnce(&MemberAccess) -> Result<kube::Client, MemberError>,
    ) -> Result<kube::Client, MemberError> {
        let key = Arc::new(MemberAccessKey {
            endpoint: access.endpoint.clone(),
            token: access.token.clone(),
            ca: access.ca_bundle.clone(),
            insecure: access.insecure,
        });
        let slot = (access.cluster.clone(), Duration::ZERO);
        let mut map = self.inner.lock();
        if let Some(c) = map.get(&slot)
            && *c.key == *key
        {
            return Ok(c.client.clone());
        }
        let client = build(access)?;
        map.insert(slot, Cached { key, client: client.clone(), discovery: Arc::new(MemberDiscovery::default()) });
        Ok(client)
    }

    pub fn forget(&self, cluster: &str) {
        self.inner.lock().retain(|(c, _), _| c != cluster);
        self.accesses.lock().remove(cluster);
    }
}
