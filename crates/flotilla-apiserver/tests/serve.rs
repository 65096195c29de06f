//! The HTTPS listener holds connections only as long as kube-apiserver's does (security review:
//! a request with unfinished headers was still open after 130 s, and idle connections piled up
//! until the open-file limit was reached): a client that never finishes its request headers,
//! and an idle keep-alive connection, are closed after the header read timeout; an HTTP/2
//! connection without open streams is closed with GOAWAY after the idle timeout, but not while
//! a watch is open; the open-file limit is raised at start-up. A URL too long for hyper gets a
//! 414 with a `Status` over HTTP/1.1 (the review: an empty body).

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
    let hard: u64 =
        before.lines().find(|l| l.starts_with("Max open files")).and_then(|l| l.split_whitespace().nth(4)).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
    let now = raise_open_file_limit().unwrap();
    assert_eq!(now, hard, "{before}");
}

/// A server on loopback with `cfg` adjusted by `tune`, its CA and an admin client certificate.
async fn server_with(
    tune: impl FnOnce(&mut ServeConfig),
) -> (flotilla_apiserver::serve::Serving, std::net::SocketAddr, Authority, flotilla_apiserver::pki::Issued) {
    let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    let ca = Authority::generate("test-ca").unwrap();
    let serving = ca.issue_server(&["127.0.0.1".to_string()]).unwrap();
    let admin = ca.issue_client("admin", &["system:masters"]).unwrap();
    let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut cfg = ServeConfig::new(addr, serving.cert_pem, serving.key_pem);
    cfg.client_ca_pem = Some(ca.cert_pem.clone());
    tune(&mut cfg);
    let server = serve_on(listener, api.router(), cfg).await.unwrap();
    (server, addr, ca, admin)
}

/// HTTP/2 frame types and flags the tests use (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's error code.
    fn error_code(&self) -> u32 {
        u32::from_be_bytes(self.payload[4..8].try_into().unwrap())
    }
}

/// A bare HTTP/2 client: it opens and cancels streams and shows every frame the server sends
/// (hyper's client would not tell a GOAWAY from a dropped connection).
struct H2 {
    tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    read: Vec<u8>,
}

impl H2 {
    async fn connect(addr: std::net::SocketAddr, ca_pem: &str, client: &flotilla_apiserver::pki::Issued) -> H2 {
        use rustls_pki_types::pem::PemObject;
        flotilla_apiserver::serve::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(client.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).unwrap();
        let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_client_auth_cert(certs, key).unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = connector.connect(rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap(), tcp).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let mut h2 = H2 { tls, read: Vec::new() };
        h2.tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
        h2.send(SETTINGS, 0, 0, &[]).await;
        h2
    }

    async fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        frame.extend([kind, flags]);
        frame.extend(stream.to_be_bytes());
        frame.extend(payload);
        self.tls.write_all(&frame).await.unwrap();
    }

    /// Opens `stream` with a GET of `path` (HPACK without the dynamic table or Huffman),
    /// in frames of at most 16 KiB.
    async fn get(&mut self, stream: u32, path: &str) {
        let mut block = vec![0x82, 0x87]; // :method GET, :scheme https
        for (name, value) in [(4u8, path), (1, "127.0.0.1")] {
            // A literal not indexed, the name from the static table (:path, :authority).
            block.push(name);
            hpack_integer(&mut block, value.len());
            block.extend(value.as_bytes());
        }
        let chunks: Vec<&[u8]> = block.chunks(16 * 1024).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let mut flags = if i == 0 { END_STREAM } else { 0 };
            if i == chunks.len() - 1 {
                flags |= END_HEADERS;
            }
            self.send(kind, flags, stream, chunk).await;
        }
    }

    /// The next frame from the server other than SETTINGS and PING (answered here) and
    /// WINDOW_UPDATE, or `None` once the connection has ended. Cancelled while it waits for
    /// bytes (as under a timeout), it loses nothing already read.
    async fn frame(&mut self) -> Option<Frame> {
        loop {
            if self.read.len() >= 9 {
                let len = u32::from_be_bytes([0, self.read[0], self.read[1], self.read[2]]) as usize;
                if self.read.len() >= 9 + len {
                    let frame = Frame {
                        kind: self.read[3],
                        flags: self.read[4],
                        stream: u32::from_be_bytes(self.read[5..9].try_into().unwrap()) & 0x7fff_ffff,
                        payload: self.read[9..9 + len].to_vec(),
                    };
                    self.read.drain(..9 + len);
                    match frame.kind {
                        SETTINGS if frame.flags & ACK == 0 => self.send(SETTINGS, ACK, 0, &[]).await,
                        SETTINGS | WINDOW_UPDATE => {}
                        PING if frame.flags & ACK == 0 => self.send(PING, ACK, 0, &frame.payload).await,
                        _ => return Some(frame),
                    }
                    continue;
                }
            }
            let mut buf = [0u8; 16 * 1024];
            match self.tls.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.read.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Every frame until the connection ends (`None` if it has not ended by `deadline`).
    async fn until_closed(&mut self, deadline: Duration) -> Option<Vec<Frame>> {
        let mut frames = Vec::new();
        let read = async {
            while let Some(frame) = self.frame().await {
                frames.push(frame);
            }
        };
        tokio::time::timeout(deadline, read).await.ok()?;
        Some(frames)
    }

    /// Frames until `stream` ends (END_STREAM or RST_STREAM).
    async fn until_stream_ends(&mut self, stream: u32) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.frame()).await.expect("the stream ends").expect("the connection stays");
            let ends = frame.stream == stream && (frame.kind == RST_STREAM || (matches!(frame.kind, HEADERS | DATA) && frame.flags & END_STREAM != 0));
            frames.push(frame);
            if ends {
                return frames;
            }
        }
    }
}

/// An HPACK integer with a 7-bit prefix (RFC 7541 §5.1), the string-length form.
fn hpack_integer(out: &mut Vec<u8>, mut n: usize) {
    if n < 127 {
        out.push(n as u8);
        return;
    }
    out.push(127);
    n -= 127;
    while n >= 128 {
        out.push((n % 128 + 128) as u8);
        n /= 128;
    }
    out.push(n as u8);
}

/// kube-apiserver's http2.Server closes a connection with GOAWAY once it has had no open
/// stream for its IdleTimeout (90 s); hyper only pinged such connections, forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connections_without_open_streams_are_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(500);
    let (server, addr, ca, admin) = server_with(|cfg| cfg.http2_idle_timeout = idle).await;

    // A request answered, then nothing: GOAWAY (NO_ERROR), and the connection ends.
    let mut h2 = H2::connect(addr, &ca.cert_pem, &admin).await;
    h2.get(1, "/healthz").await;
    let answer = h2.until_stream_ends(1).await;
    assert!(answer.iter().any(|f| f.kind == HEADERS && f.stream == 1), "{answer:?}");
    let frames = h2.until_closed(Duration::from_secs(30)).await.expect("an idle HTTP/2 connection is closed");
    let goaway = frames.iter().find(|f| f.kind == GOAWAY).unwrap_or_else(|| panic!("GOAWAY before the close: {frames:?}"));
    assert_eq!(goaway.error_code(), 0, "NO_ERROR");

    // A watch is an open stream: the connection stays for several idle timeouts, and is
    // closed once the watch is cancelled.
    let mut h2 = H2::connect(addr, &ca.cert_pem, &admin).await;
    h2.get(1, "/api/v1/namespaces/default/configmaps?watch=true").await;
    let headers = tokio::time::timeout(Duration::from_secs(30), h2.frame()).await.unwrap().unwrap();
    assert_eq!((headers.kind, headers.stream, headers.flags & END_STREAM), (HEADERS, 1, 0), "the watch is open: {headers:?}");
    let early = h2.until_closed(4 * idle).await;
    assert!(early.is_none(), "closed while a watch was open: {early:?}");
    h2.send(RST_STREAM, 0, 1, &8u32.to_be_bytes()).await; // CANCEL
    let frames = h2.until_closed(Duration::from_secs(30)).await.expect("closed once the watch is cancelled");
    assert!(frames.iter().any(|f| f.kind == GOAWAY), "{frames:?}");

    // A connection that never opens a stream is closed too.
    let mut h2 = H2::connect(addr, &ca.cert_pem, &admin).await;
    assert!(h2.until_closed(Duration::from_secs(30)).await.is_some(), "a connection without any stream is closed");
    server.shutdown().await.unwrap();
}

/// Security review: a URL longer than hyper takes (65,534 bytes) got hyper's 414 with an empty
/// body. kube-apiserver routes such a URL (Go reads request lines up to 1 MiB); Flotilla
/// cannot, and refuses it as it refuses any request: with a Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_too_long_to_route_gets_a_414_status() {
    let (server, addr, ca, admin) = server_with(|_| {}).await;
    let path = format!("/api/v1/namespaces/{}", "x".repeat(70_000));

    let mut h1 = connect(addr, &ca.cert_pem).await;
    h1.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.unwrap();
    let (closed, answer) = closed_by_server(&mut h1, Duration::from_secs(30)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(closed, "{answer}");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(head.starts_with("HTTP/1.1 414 "), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    let status: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    assert_eq!((status["kind"].as_str(), status["code"].as_u64()), (Some("Status"), Some(414)), "{answer}");

    // HTTP/2: the h2 crate resets such a stream (PROTOCOL_ERROR) before hyper sees it; the
    // connection goes on serving.
    let mut h2 = H2::connect(addr, &ca.cert_pem, &admin).await;
    h2.get(1, &path).await;
    let reset = h2.until_stream_ends(1).await;
    assert!(reset.iter().any(|f| f.kind == RST_STREAM && f.stream == 1), "{reset:?}");
    h2.get(3, "/healthz").await;
    let answer = h2.until_stream_ends(3).await;
    assert!(answer.iter().any(|f| f.kind == HEADERS && f.stream == 3), "{answer:?}");
    drop(h2);
    server.shutdown().await.unwrap();
}
