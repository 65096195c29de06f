//! Serving the router over HTTPS: TLS 1.2+ (1.3 preferred) with rustls on ring, HTTP/1.1 and
//! HTTP/2 (with a raised concurrent-stream limit: kubectl multiplexes all its watches on one
//! connection), optional client-certificate authentication, graceful shutdown.
//!
//! Connections cannot be held open for free, as with kube-apiserver: a TLS handshake gets 10 s,
//! an HTTP/1.1 request's headers (and an idle keep-alive connection's next request) 32 s, an
//! HTTP/2 connection with no open stream is closed with GOAWAY after 90 s, and request headers
//! up to 1 MiB are read (HTTP/2's header list included: a long URL is answered, not met with
//! GOAWAY; a URL too long for hyper gets a 414 `Status` over HTTP/1.1, see `serve/connection.rs`).
//! [`raise_open_file_limit`] lifts the soft open-file limit to the hard one at start-up, as the
//! Go runtime does for kube-apiserver.

mod connection;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// How to serve.
#[derive(Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub cert_pem: String,
    pub key_pem: String,
    /// Verify client certificates against this CA (clients without one are still accepted and
    /// authenticate another way, or stay anonymous).
    pub client_ca_pem: Option<String>,
    pub max_concurrent_streams: u32,
    pub keep_alive: Duration,
    /// How long in-flight requests get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// How long an HTTP/1.1 client may take to send a request's headers, counted from when
    /// the connection is ready for the next request (so it also closes idle keep-alive
    /// connections). kube-apiserver: 32 s.
    pub header_read_timeout: Duration,
    /// How long an HTTP/2 connection may stay without an open stream before it is closed
    /// with GOAWAY (counted from its start and from the end of its last stream).
    /// kube-apiserver: 90 s.
    pub http2_idle_timeout: Duration,
    /// How long a client may take to complete the TLS handshake.
    pub tls_handshake_timeout: Duration,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig").field("listen", &self.listen).finish()
    }
}

impl ServeConfig {
    pub fn new(listen: SocketAddr, cert_pem: String, key_pem: String) -> Self {
        ServeConfig {
            listen,
            cert_pem,
            key_pem,
            client_ca_pem: None,
            max_concurrent_streams: 1000,
            keep_alive: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            http2_idle_timeout: Duration::from_secs(90),
            tls_handshake_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid TLS material: {0}")]
    Tls(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}

/// Install ring as rustls's process-wide provider (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn tls_config(cfg: &ServeConfig) -> Result<rustls::ServerConfig, ServeError> {
    install_crypto_provider();
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cfg.cert_pem.as_bytes()).collect::<Result<_, _>>().map_err(|e| ServeError::Tls(format!("serving certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(cfg.key_pem.as_bytes()).map_err(|e| ServeError::Tls(format!("serving key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    let builder = match &cfg.client_ca_pem {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(c.map_err(|e| ServeError::Tls(format!("client CA: {e}")))?).map_err(|e| ServeError::Tls(format!("client CA: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ServeError::Tls(format!("client verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| ServeError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A running HTTPS server.
pub struct Serving {
    pub local_addr: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
    grace: Duration,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").field("local_addr", &self.local_addr).finish()
    }
}

impl Serving {
    /// Stop accepting, let in-flight requests finish within the grace period, then return.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.handle.graceful_shutdown(Some(self.grace));
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(ServeError::Serve(std::io::Error::other(e.to_string()))),
        }
    }

    /// Wait until the server stops by itself (an error).
    pub async fn wait(&mut self) -> Result<(), ServeError> {
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) => Err(ServeError::Serve(std::io::Error::other(e.to_string()))),
        }
    }
}

/// Bind and start serving `router`; returns once listening.
pub async fn serve(router: axum::Router, cfg: ServeConfig) -> Result<Serving, ServeError> {
    let listener = bind(cfg.listen)?;
    serve_on(listener, router, cfg).await
}

/// The largest request head read: kube-apiserver's `MaxHeaderBytes`, 1 MiB.
const MAX_HEADER_BYTES: usize = 1 << 20;

/// Lifts the soft limit on open files to the hard one (the Go runtime does this for every Go
/// server, kube-apiserver among them): each client connection and watch holds a descriptor,
/// and the usual soft limit of 1,024 is soon reached. Returns the limit in force afterwards.
#[allow(unsafe_code)]
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = limit.rlim_max;
        }
    }
    Ok(limit.rlim_cur)
}

/// Bind `addr` (port 0: any free port) without serving yet, so the caller knows the address it
/// will serve on (`local_addr`) before it builds what it serves.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|source| ServeError::Bind { addr, source })?;
    listener.set_nonblocking(true).map_err(|source| ServeError::Bind { addr, source })?;
    Ok(listener)
}

/// Start serving `router` on a listener from [`bind`]; `cfg.listen` is only used in messages.
pub async fn serve_on(listener: std::net::TcpListener, router: axum::Router, cfg: ServeConfig) -> Result<Serving, ServeError> {
    let tls = RustlsConfig::from_config(Arc::new(tls_config(&cfg)?));
    let local_addr = listener.local_addr().map_err(|source| ServeError::Bind { addr: cfg.listen, source })?;
    let handle = axum_server::Handle::new();
    // TCP_NODELAY: small responses must not wait for Nagle's algorithm and delayed ACKs.
    let tls =
        axum_server::tls_rustls::RustlsAcceptor::new(tls).handshake_timeout(cfg.tls_handshake_timeout).acceptor(axum_server::accept::NoDelayAcceptor::new());
    let acceptor = connection::ConnectionAcceptor { tls, http2_idle_timeout: cfg.http2_idle_timeout };
    let mut server = axum_server::from_tcp(listener).map_err(|source| ServeError::Bind { addr: cfg.listen, source })?.acceptor(acceptor).handle(handle.clone());
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .max_buf_size(MAX_HEADER_BYTES + 64 * 1024);
    server
        .http_builder()
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(cfg.max_concurrent_streams)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .keep_alive_interval(Some(cfg.keep_alive))
        .keep_alive_timeout(Duration::from_secs(20));
    let task = tokio::spawn(async move { server.serve(router.into_make_service()).await.map_err(ServeError::Serve) });
    Ok(Serving { local_addr, handle, task, grace: cfg.shutdown_grace })
}
