//! What each accepted connection carries besides hyper: a count of its open requests, the
//! HTTP/2 idle close that goes with it, and the body of the 414 hyper answers by itself.
//!
//! **Idle HTTP/2 connections.** kube-apiserver gives its `http2.Server` `IdleTimeout: 90s`
//! (k8s.io/apiserver `pkg/server/secure_serving.go`). In golang.org/x/net `http2/server.go`
//! that timer starts with the connection, stops when a stream opens, restarts when the last
//! open stream closes, and when it fires the server sends GOAWAY (NO_ERROR) and closes. hyper
//! has no such timer (it only pings), so [`close_when_idle`] keeps one per connection over the
//! count [`OpenRequests`] keeps: a request is open from its headers until hyper drops its
//! response body (sent, or the stream reset). It closes through the handle axum-server puts on
//! every request: hyper's graceful shutdown sends GOAWAY and a PING and closes once the PING
//! is answered (a client that never answers is closed by the keep-alive ping timeout instead).
//! A connection that has not carried a request yet has no such handle; its reads end instead.
//! The timer runs on HTTP/1.1 connections too (a client may speak HTTP/2 without asking for it
//! in ALPN), where hyper's header read timeout, which also runs while a keep-alive connection
//! waits for its next request, normally ends them first.
//!
//! **Long URLs.** Go's server reads a request line up to `MaxHeaderBytes` (1 MiB) and
//! kube-apiserver routes whatever it read: a 70,000-byte `/api/v1/namespaces/xxx…` gets a 404
//! Status from kube-apiserver v1.37.2 over HTTP/1.1 and HTTP/2 alike. Only past 1 MiB does Go
//! answer by itself (`net/http/server.go`: 431 with the plain-text body "431 Request Header
//! Fields Too Large"); Go never answers 414. hyper cannot represent a request target over
//! 65,534 bytes (`http::Uri`'s limit) and answers 414 on its own, with no body, before any
//! service sees the request. Unable to route such a request, Flotilla refuses it as it refuses
//! every request, with a `Status` (code 414): on HTTP/1.1 that answer replaces hyper's on the
//! way out ([`Connection`]). On HTTP/2 the h2 crate resets such a stream (PROTOCOL_ERROR)
//! before hyper sees it, and nothing at this layer can answer it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum_server::ConnectionShutdown;
use axum_server::accept::Accept;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::task::AtomicWaker;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;

use crate::error::ApiError;

/// The longest request target hyper takes (`http::Uri` stores offsets as `u16`).
const MAX_URI_BYTES: usize = u16::MAX as usize - 1;

/// Wraps the TLS acceptor: every connection counts its open requests and is closed after
/// `http2_idle_timeout` with none.
#[derive(Clone)]
pub(super) struct ConnectionAcceptor<A> {
    pub(super) tls: A,
    pub(super) http2_idle_timeout: Duration,
}

impl<A, I, S> Accept<I, S> for ConnectionAcceptor<A>
where
    A: Accept<I, S, Stream = TlsStream<TcpStream>>,
    A::Future: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Connection;
    type Service = OpenRequests<A::Service>;
    type Future = BoxFuture<'static, io::Result<(Connection, OpenRequests<A::Service>)>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let handshake = self.tls.accept(stream, service);
        let idle_timeout = self.http2_idle_timeout;
        Box::pin(async move {
            let (tls, service) = handshake.await?;
            let http2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            let (open, watched) = watch::channel(0usize);
            let ending = Arc::new(Ending::default());
            tokio::spawn(close_when_idle(watched.clone(), ending.clone(), idle_timeout));
            let connection = Connection { tls, http1: !http2, open: watched, ending: ending.clone(), answer: None };
            Ok((connection, OpenRequests { inner: service, open: Arc::new(open), ending }))
        })
    }
}

/// How a connection is ended from outside hyper.
#[derive(Default)]
struct Ending {
    /// hyper's graceful shutdown of the connection, from the first request (axum-server puts
    /// it in every request's extensions).
    shutdown: OnceLock<ConnectionShutdown>,
    /// Set to end a connection that has carried no request: its reads then see end-of-file.
    reads_end: AtomicBool,
    reader: AtomicWaker,
}

/// Once `open` has stayed at zero for `timeout`, ends the connection; returns early when the
/// connection is gone (every sender dropped).
async fn close_when_idle(mut open: watch::Receiver<usize>, ending: Arc<Ending>, timeout: Duration) {
    loop {
        if open.wait_for(|n| *n == 0).await.is_err() {
            return;
        }
        tokio::select! {
            changed = open.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(timeout) => break,
        }
    }
    match ending.shutdown.get() {
        Some(shutdown) => shutdown.graceful_shutdown(),
        None => {
            ending.reads_end.store(true, Ordering::Release);
            ending.reader.wake();
        }
    }
}

/// The per-connection service: counts each request as open until its response body is
/// dropped.
#[derive(Clone)]
pub(super) struct OpenRequests<S> {
    inner: S,
    open: Arc<watch::Sender<usize>>,
    ending: Arc<Ending>,
}

impl<S, B> tower::Service<Request<B>> for OpenRequests<S>
where
    S: tower::Service<Request<B>, Response = Response<axum::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<Counted>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<Counted>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if self.ending.shutdown.get().is_none()
            && let Some(shutdown) = req.extensions().get::<ConnectionShutdown>()
        {
            let _ = self.ending.shutdown.set(shutdown.clone());
        }
        let open = OpenRequest::new(self.open.clone());
        let response = self.inner.call(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Counted { body, _open: open }))
        })
    }
}

/// One open request: counted while it lives.
struct OpenRequest(Arc<watch::Sender<usize>>);

impl OpenRequest {
    fn new(open: Arc<watch::Sender<usize>>) -> Self {
        open.send_modify(|n| *n += 1);
        OpenRequest(open)
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// A response body that keeps its request open until hyper drops it.
pub(super) struct Counted {
    body: axum::body::Body,
    _open: OpenRequest,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The TLS stream hyper serves: its reads can be ended (see [`Ending`]), and on HTTP/1.1
/// hyper's bodiless 414 goes out as a `Status`.
pub(super) struct Connection {
    tls: TlsStream<TcpStream>,
    /// Not HTTP/2 by ALPN.
    http1: bool,
    open: watch::Receiver<usize>,
    ending: Arc<Ending>,
    /// The 414 answer being written in place of hyper's, and how much of it is written.
    answer: Option<(Vec<u8>, usize)>,
}

impl Connection {
    /// Writes what is left of the replacement answer.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((answer, written)) = &mut self.answer {
            if *written == answer.len() {
                self.answer = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.tls).poll_write(cx, &answer[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// What to write in place of `head` if it may be hyper's own answer to a request it could
    /// not parse: HTTP/1.1, and no request of ours open (hyper writes such an answer where it
    /// would have read the next request).
    fn replaces(&self, head: &[u8]) -> Option<Vec<u8>> {
        if !self.http1 || *self.open.borrow() != 0 {
            return None;
        }
        uri_too_long_answer(head)
    }
}

/// hyper's answer to an over-long request target is exactly a status line, `connection:
/// close`, `content-length: 0` and `date`; returns the same answer with a `Status` body, or
/// `None` for anything else.
fn uri_too_long_answer(head: &[u8]) -> Option<Vec<u8>> {
    if !head.starts_with(b"HTTP/1.1 414 ") || !head.ends_with(b"\r\n\r\n") || head.len() > 512 {
        return None;
    }
    let head = std::str::from_utf8(head).ok()?;
    let mut date = None;
    for line in head.lines().skip(1).filter(|l| !l.is_empty()) {
        match line.split_once(':').map(|(name, value)| (name.to_ascii_lowercase(), value.trim())) {
            Some((name, "0")) if name == "content-length" => {}
            Some((name, "close")) if name == "connection" => {}
            Some((name, value)) if name == "date" => date = Some(value),
            _ => return None,
        }
    }
    let body = serde_json::to_vec(&ApiError::uri_too_long(MAX_URI_BYTES).status()).ok()?;
    let mut answer = format!("HTTP/1.1 414 URI Too Long\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    if let Some(date) = date {
        answer.push_str(&format!("date: {date}\r\n"));
    }
    answer.push_str("\r\n");
    let mut answer = answer.into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.ending.reader.register(cx.waker());
        if this.ending.reads_end.load(Ordering::Acquire) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        if let Some(answer) = this.replaces(buf) {
            this.answer = Some((answer, 0));
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.tls).poll_write(cx, buf)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        if let [buf] = bufs
            && let Some(answer) = this.replaces(buf)
        {
            this.answer = Some((answer, 0));
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        Pin::new(&mut this.tls).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_answer(cx))?;
        Pin::new(&mut this.tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::uri_too_long_answer;

    #[test]
    fn only_hypers_bodiless_414_is_replaced() {
        let hyper = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 00:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(uri_too_long_answer(hyper).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("\r\ndate: Wed, 02 Dec 2026 00:00:00 GMT"), "{head}");
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())), "{head}");
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!((status["kind"].as_str(), status["code"].as_u64()), (Some("Status"), Some(414)), "{body}");

        for other in [
            &b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 12\r\n\r\n"[..],
            b"HTTP/1.1 414 URI Too Long\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n",
        ] {
            assert!(uri_too_long_answer(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
