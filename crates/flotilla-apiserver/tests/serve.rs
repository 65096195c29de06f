//! The HTTPS listener holds connections only as long as kube-apiserver's does (security review:
//! a request with unfinished headers was still open after 130 s, and idle connections piled up
//! until the open-file limit was reached): a client that never finishes its request headers,
//! and an idle keep-alive connection, are closed after the header read timeout; the open-file
//! limit is raised at start-up.

use std::sync::Arc;
use std::time::Duration;

use flotilla_apiserver::pki::Authority;
use flotilla_apiserver::serve::{ServeConfig, bind, raise_open_file_limit, serve_on};
use flotilla_apiserver::{ApiServer, ApiServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TLS connection to `addr` trusting `ca_pem`.
async fn connect(addr: std::net::SocketAddr, ca_pem: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    flotilla_apiserver::serve::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    connector.connect(rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap()
}

/// Reads until the server closes the connection (or `deadline` passes: false).
async fn closed_by_server(stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>, deadline: Duration) -> (bool, Vec<u8>) {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    let closed = tokio::time::timeout(deadline, read).await.is_ok();
    (closed, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed() {
    let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    let ca = Authority::generate("test-ca").unwrap();
    let serving = ca.issue_server(&["127.0.0.1".to_string()]).unwrap();
    let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut cfg = ServeConfig::new(addr, serving.cert_pem, serving.key_pem);
    cfg.header_read_timeout = Duration::from_millis(500);
    let server = serve_on(listener, api.router(), cfg).await.unwrap();

    // Headers that never end.
    let mut slow = connect(addr, &ca.cert_pem).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.unwrap();
    let (closed, _) = closed_by_server(&mut slow, Duration::from_secs(30)).await;
    assert!(closed, "a request whose headers never end is dropped");

    // One request answered, then the idle connection is closed.
    let mut idle = connect(addr, &ca.cert_pem).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let (closed, answer) = closed_by_server(&mut idle, Duration::from_secs(30)).await;
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    assert!(closed, "an idle keep-alive connection is closed");
    server.shutdown().await.unwrap();
}

#[test]
fn the_open_file_limit_is_lifted_to_the_hard_limit() {
    let before = std::fs::read_to_string("/proc/self/limits").unwrap();
    let hard: u64 = before
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let now = raise_open_file_limit().unwrap();
    assert_eq!(now, hard, "{before}");
}
