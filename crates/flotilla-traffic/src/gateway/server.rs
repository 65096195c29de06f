//! The gateway's listeners: HTTP/1.1 and HTTP/2 on each, over TLS (ALPN `h2`, `http/1.1`;
//! the certificate chosen by server name, [`super::tls`]) or, on the plain listener that
//! must be asked for, cleartext (HTTP/2 with prior knowledge).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::{Gateway, Shared};

/// Picks the certificate for a client's server name.
struct Resolver {
    shared: Shared,
    fallback: Arc<CertifiedKey>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("gateway certificate resolver")
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(hello.server_name().and_then(|n| self.shared.cert(n)).unwrap_or_else(|| self.fallback.clone()))
    }
}

/// A bound gateway listener.
pub struct Listener {
    pub addr: SocketAddr,
    tcp: TcpListener,
    tls: Option<TlsAcceptor>,
}

impl Listener {
    /// The TLS listener: certificates from `shared` by server name, else a self-signed one.
    pub async fn bind_tls(addr: SocketAddr, shared: Shared) -> Result<Listener, String> {
        let fallback = Arc::new(super::tls::self_signed()?);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver { shared, fallback }));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let tcp = TcpListener::bind(addr).await.map_err(|e| e.to_string())?;
        Ok(Listener { addr: tcp.local_addr().map_err(|e| e.to_string())?, tcp, tls: Some(TlsAcceptor::from(Arc::new(config))) })
    }

    /// The cleartext listener.
    pub async fn bind_plain(addr: SocketAddr) -> Result<Listener, String> {
        let tcp = TcpListener::bind(addr).await.map_err(|e| e.to_string())?;
        Ok(Listener { addr: tcp.local_addr().map_err(|e| e.to_string())?, tcp, tls: None })
    }

    /// Serve connections until `shutdown`.
    pub async fn serve(self, gateway: Arc<Gateway>, shutdown: flotilla_runtime::CancellationToken) {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        loop {
            let (stream, remote) = tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: wait rather than spin.
                        tracing::warn!(error = %e, "gateway: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.cancelled() => return,
            };
            let _ = stream.set_nodelay(true);
            let gateway = gateway.clone();
            let tls = self.tls.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let gateway = gateway.clone();
                    async move { gateway.handle(req, remote, scheme).await }
                });
                let builder = auto::Builder::new(TokioExecutor::new());
                let served = match tls {
                    Some(acceptor) => match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let conn = builder.serve_connection(TokioIo::new(tls), service);
                            tokio::select! { r = conn => r, _ = shutdown.cancelled() => Ok(()) }
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%remote, error = %e, "gateway: TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    },
                    None => {
                        let conn = builder.serve_connection(TokioIo::new(stream), service);
                        tokio::select! { r = conn => r, _ = shutdown.cancelled() => Ok(()) }
                    }
                };
                if let Err(e) = served {
                    tracing::debug!(%remote, error = %e, "gateway: connection ended with an error");
                }
            });
        }
    }
}
