//! `pods/exec` of a simulated container over the Kubernetes WebSocket streaming protocol
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io`), the command run by the built-in [`Shell`].
//!
//! The protocol: after the WebSocket handshake every binary message starts with its channel —
//! 0 stdin (client to server), 1 stdout, 2 stderr, 3 error (the command's end as a JSON
//! `Status`: `Success`, or `Failure` with reason `NonZeroExitCode` and the exit code as the
//! message of an `ExitCode` cause), 4 terminal resize (client to server). v5 adds 255: the
//! client closes a channel (`[255, 0]`: end of stdin). As the kubelet does, the server first
//! sends an empty message on the lowest channel it writes, then the output, then the status,
//! then closes the connection.
//!
//! The session ends early when the client goes away (its connection ends: `sleep` is
//! interrupted, stdin ends) or the pod stops (asked every second).

use std::io::{BufReader, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, Connecter};
use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::shell::{Interrupt, Shell};
use super::websocket::{self, Message};
use super::{ContainerRun, Liveness, Query, choose_container, container_run, name_of, pod_of, waiting_message};
use crate::api::Writer;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5: the client closes one of its channels.
const CLOSE_CHANNEL: u8 = 255;

/// How often a running command checks that its pod still runs.
const POD_GONE_POLL: Duration = Duration::from_secs(1);
/// How long the server waits for the client's answer to its close before dropping the
/// connection (reading it first keeps the last output from being cut by a reset).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The query of a `pods/exec` request (`v1.PodExecOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    pub command: Vec<String>,
    pub container: String,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A boolean option as kube-apiserver converts one: absent, `false` or `0` is false, anything
/// else true.
fn flag(q: &Query, name: &str) -> bool {
    q.get(name).is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"))
}

impl ExecOptions {
    /// Read the query; the error is the message of a 400.
    pub fn parse(q: &Query) -> Result<ExecOptions, String> {
        let tty = flag(q, "tty");
        let o = ExecOptions {
            command: q.all("command"),
            container: q.get("container").unwrap_or("").to_string(),
            stdin: flag(q, "stdin"),
            stdout: flag(q, "stdout"),
            // A terminal has one output stream: the kubelet drops stderr with tty.
            stderr: flag(q, "stderr") && !tty,
            tty,
        };
        if o.command.is_empty() {
            return Err("you must specify at least one command for the container".into());
        }
        if !o.stdin && !o.stdout && !o.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(o)
    }

    /// The channel of the connection-established message: the lowest one the server writes.
    fn first_channel(&self) -> u8 {
        if self.stdout {
            STDOUT
        } else if self.stderr {
            STDERR
        } else {
            ERROR
        }
    }
}

/// The error channel's message when the command has ended with `code`.
pub fn exit_status(code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: command terminated with exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// `pods/exec`.
pub(super) struct PodExec(pub(super) Arc<Writer>);

impl Connecter for PodExec {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let pods = self.0.clone();
        Box::pin(async move {
            let pod = pod_of(r.object)?;
            let opts = ExecOptions::parse(&Query::parse(r.query.as_deref())).map_err(ConnectError::BadRequest)?;
            let container = choose_container(&pod, &opts.container, true).map_err(ConnectError::BadRequest)?;
            let name = name_of(&pod).to_string();
            let spec = pod.spec.clone().unwrap_or_default();
            if spec.node_name.as_deref().is_none_or(str::is_empty) {
                return Err(ConnectError::BadRequest(format!("pod {name} does not have a host assigned")));
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
            if phase == "Succeeded" || phase == "Failed" {
                return Err(ConnectError::BadRequest(format!("cannot exec into a container in a completed pod; current phase is {phase}")));
            }
            match container_run(&pod, &container) {
                ContainerRun::Running => {}
                ContainerRun::Waiting(reason) => return Err(ConnectError::BadRequest(waiting_message(&container, &name, &reason))),
                ContainerRun::Terminated => return Err(ConnectError::BadRequest(format!("container {container:?} in pod {name:?} is not running"))),
            }
            let upgrade = match r.upgrade {
                Some(u) if u.protocol.eq_ignore_ascii_case("websocket") => u,
                Some(u) if u.protocol.to_ascii_uppercase().starts_with("SPDY/") => {
                    return Err(ConnectError::BadRequest(format!(
                        "the simulated member serves exec over WebSocket only ({V5}, {V4}), not {}: use kubectl 1.30 or later",
                        u.protocol
                    )));
                }
                _ => {
                    return Err(ConnectError::BadRequest(format!(
                        "unable to upgrade: exec needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket, subprotocol {V5} or {V4})"
                    )));
                }
            };
            let hs = websocket::handshake(&r.headers, &[V5, V4]).map_err(ConnectError::BadRequest)?;
            let env: Vec<(String, String)> = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find(|c| c.name == container)
                .and_then(|c| c.env.clone())
                .into_iter()
                .flatten()
                .filter(|e| e.value_from.is_none())
                .map(|e| (e.name, e.value.unwrap_or_default()))
                .collect();
            let session = Session { opts, v5: hs.protocol == V5, hostname: name, env, liveness: Liveness::of(pods, &pod) };
            tokio::spawn(async move {
                match upgrade.on_upgrade.await {
                    Ok(conn) => session.run(TokioIo::new(conn)).await,
                    Err(e) => tracing::debug!(error = %e, "exec: the connection was not handed over"),
                }
            });
            let mut headers = HeaderMap::new();
            headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            let accept = HeaderValue::from_str(&hs.accept).map_err(|e| ConnectError::BadRequest(e.to_string()))?;
            headers.insert("sec-websocket-accept", accept);
            headers.insert("sec-websocket-protocol", HeaderValue::from_static(if hs.protocol == V5 { V5 } else { V4 }));
            Ok(ConnectResponse { status: StatusCode::SWITCHING_PROTOCOLS, headers, body: Box::pin(futures::stream::empty()) })
        })
    }
}

/// What the writer task sends: a frame, or the close frame after which it stops.
enum Out {
    Frame(Vec<u8>),
    Close(Vec<u8>),
}

/// One exec command on its upgraded connection.
struct Session {
    opts: ExecOptions,
    v5: bool,
    hostname: String,
    env: Vec<(String, String)>,
    liveness: Liveness,
}

fn data_frame(channel: u8, data: &[u8]) -> Out {
    let mut payload = Vec::with_capacity(data.len() + 1);
    payload.push(channel);
    payload.extend_from_slice(data);
    Out::Frame(websocket::frame(websocket::OP_BINARY, &payload))
}

impl Session {
    async fn run<IO>(self, io: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let (rd, mut wr) = tokio::io::split(io);
        let (out, mut out_rx) = mpsc::channel::<Out>(64);
        let writer = tokio::spawn(async move {
            while let Some(o) = out_rx.recv().await {
                let (bytes, last) = match o {
                    Out::Frame(b) => (b, false),
                    Out::Close(b) => (b, true),
                };
                if wr.write_all(&bytes).await.is_err() || wr.flush().await.is_err() || last {
                    break;
                }
            }
        });
        let _ = out.send(data_frame(self.opts.first_channel(), &[])).await;

        // The client's messages: stdin to the shell, pings answered; its going away ends stdin
        // and interrupts the command.
        let interrupt = Interrupt::default();
        let (stdin_tx, stdin_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let mut stdin_tx = self.opts.stdin.then_some(stdin_tx);
        let (pongs, i, v5) = (out.clone(), interrupt.clone(), self.v5);
        let mut reader = tokio::spawn(async move {
            let mut r = websocket::Reader::new(rd);
            loop {
                match r.next().await {
                    Ok(Some(Message::Binary(data))) => match data.split_first() {
                        // Kept while the shell still reads it.
                        Some((&STDIN, rest)) => stdin_tx = stdin_tx.take().filter(|tx| tx.send(rest.to_vec()).is_ok()),
                        Some((&CLOSE_CHANNEL, [STDIN])) if v5 => stdin_tx = None,
                        // Resizes, and anything else, mean nothing to the shell.
                        _ => {}
                    },
                    Ok(Some(Message::Ping(p))) => {
                        let _ = pongs.send(Out::Frame(websocket::frame(websocket::OP_PONG, &p))).await;
                    }
                    Ok(Some(Message::Text(_) | Message::Pong)) => {}
                    Ok(Some(Message::Close) | None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "exec: reading the client's frames");
                        let _ = pongs.send(Out::Close(websocket::close_frame(websocket::CLOSE_PROTOCOL_ERROR))).await;
                        break;
                    }
                }
            }
            i.interrupt();
        });

        let stdout = self.output(STDOUT, self.opts.stdout, &out);
        let stderr = if self.opts.tty { self.output(STDOUT, self.opts.stdout, &out) } else { self.output(STDERR, self.opts.stderr, &out) };
        let stdin: Box<dyn std::io::BufRead + Send> = Box::new(BufReader::new(StdinPipe { rx: stdin_rx, chunk: Vec::new(), at: 0 }));
        let mut shell = Shell::new(&self.hostname, &self.env, stdin, stdout, stderr, interrupt.clone());
        let command = self.opts.command.clone();
        let mut run = tokio::task::spawn_blocking(move || shell.run(&command));
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + POD_GONE_POLL, POD_GONE_POLL);
        let status = loop {
            tokio::select! {
                done = &mut run => break match done {
                    Ok(code) => exit_status(code),
                    Err(e) => json!({"metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
                        "message": format!("error executing command in container: {e}")}),
                },
                _ = poll.tick() => {
                    if !self.liveness.alive().await {
                        // The pod stopped: stdin ends and the command is interrupted.
                        interrupt.interrupt();
                        reader.abort();
                    }
                }
            }
        };
        let _ = out.send(data_frame(ERROR, status.to_string().as_bytes())).await;
        let _ = out.send(Out::Close(websocket::close_frame(websocket::CLOSE_NORMAL))).await;
        drop(out);
        let _ = writer.await;
        if tokio::time::timeout(CLOSE_GRACE, &mut reader).await.is_err() {
            reader.abort();
        }
    }

    /// The shell's writer for `channel`: frames to the client when it asked for the stream,
    /// else nowhere. A terminal turns \n into \r\n.
    fn output(&self, channel: u8, wanted: bool, out: &mpsc::Sender<Out>) -> Box<dyn Write + Send> {
        if !wanted {
            return Box::new(std::io::sink());
        }
        Box::new(ChannelWriter { channel, crlf: self.opts.tty, out: out.clone() })
    }
}

/// Writes to one channel of the connection, from the shell's blocking thread.
struct ChannelWriter {
    channel: u8,
    crlf: bool,
    out: mpsc::Sender<Out>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let frame = if self.crlf {
            let mut b = Vec::with_capacity(buf.len() + 8);
            for &c in buf {
                if c == b'\n' {
                    b.push(b'\r');
                }
                b.push(c);
            }
            data_frame(self.channel, &b)
        } else {
            data_frame(self.channel, buf)
        };
        self.out.blocking_send(frame).map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The shell's stdin: what the client sends on channel 0, until it closes the channel or goes
/// away (EOF).
struct StdinPipe {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for StdinPipe {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(c) => (self.chunk, self.at) = (c, 0),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &str) -> Result<ExecOptions, String> {
        ExecOptions::parse(&Query::parse(Some(q)))
    }

    #[test]
    fn options_come_from_the_query() {
        let o = parse("command=sh&command=-c&command=echo%20a%3B%20exit%203&container=c&stdin=true&stdout=1&stderr=true").unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo a; exit 3"]);
        assert_eq!(o.container, "c");
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
        let t = parse("command=sh&stdout=true&stderr=true&tty=true").unwrap();
        assert!(t.tty && !t.stderr, "a terminal has no stderr");
        assert!(!parse("command=x&stdout=false&stdin=0&stderr=yes").unwrap().stdout);
        assert_eq!(parse("stdout=true").unwrap_err(), "you must specify at least one command for the container");
        assert_eq!(parse("command=ls").unwrap_err(), "you must specify at least 1 of stdin, stdout, stderr");
        assert_eq!(parse("command=ls&stdin=true").unwrap().first_channel(), ERROR);
        assert_eq!(parse("command=ls&stderr=true").unwrap().first_channel(), STDERR);
    }

    #[test]
    fn the_status_carries_the_exit_code() {
        assert_eq!(exit_status(0), json!({"metadata": {}, "status": "Success"}));
        let s = exit_status(3);
        assert_eq!((s["status"].as_str(), s["reason"].as_str()), (Some("Failure"), Some("NonZeroExitCode")));
        assert_eq!(s["details"]["causes"], json!([{"reason": "ExitCode", "message": "3"}]));
    }

    #[test]
    fn a_terminal_writes_crlf_and_stdin_ends_when_its_sender_goes() {
        let (tx, mut rx) = mpsc::channel(4);
        let mut w = ChannelWriter { channel: STDOUT, crlf: true, out: tx };
        std::thread::spawn(move || w.write_all(b"a\nb")).join().unwrap().unwrap();
        let Some(Out::Frame(f)) = rx.blocking_recv() else { panic!("a frame") };
        assert_eq!(f, websocket::frame(websocket::OP_BINARY, b"\x01a\r\nb"));

        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(b"he".to_vec()).unwrap();
        tx.send(Vec::new()).unwrap();
        tx.send(b"llo".to_vec()).unwrap();
        drop(tx);
        let mut s = String::new();
        StdinPipe { rx, chunk: Vec::new(), at: 0 }.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
    }
}
