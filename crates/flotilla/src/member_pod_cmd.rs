//! `flotilla logs|exec --cluster NAME POD` and `flotilla port-forward --cluster NAME svc/NAME
//! LOCAL:REMOTE`: a member pod's logs, a command in it, and a local port connected to it, through
//! the control plane's cluster proxy (`clusters/{name}/proxy`; a Pull cluster's over its agent's
//! tunnel), as `karmadactl logs|exec --cluster` and `kubectl port-forward` do. The caller needs
//! `clusters/proxy` on the control plane; the member sees the caller impersonated.

use std::path::PathBuf;

use anyhow::Context as _;
use futures::{AsyncBufReadExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, AttachParams, LogParams};
use tokio::io::AsyncWriteExt as _;

use crate::join_cmd::control_plane_config;

/// Where and as whom: the member cluster, its namespace and the control plane's kubeconfig.
#[derive(clap::Args, Debug)]
pub struct Member {
    /// The member cluster the pod runs in.
    #[arg(long, short = 'C', value_name = "NAME")]
    cluster: String,
    /// Namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Kubeconfig of the control plane (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
}

/// A pod of a member, and one of its containers.
#[derive(clap::Args, Debug)]
pub struct Target {
    #[command(flatten)]
    member: Member,
    /// The pod.
    pod: String,
    /// Container (default: the pod's only or first one).
    #[arg(long, short = 'c')]
    container: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    #[command(flatten)]
    target: Target,
    /// Follow the log.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Lines from the end to show (default: all).
    #[arg(long)]
    tail: Option<i64>,
    /// Prefix each line with its timestamp.
    #[arg(long)]
    timestamps: bool,
}

#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    target: Target,
    /// Pass this process's stdin to the command.
    #[arg(long, short = 'i')]
    stdin: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// A client of the member's API through the control plane's cluster proxy, and the namespace.
async fn member_client(m: &Member) -> anyhow::Result<(kube::Client, String)> {
    let mut config = control_plane_config(m.kubeconfig.clone(), m.context.clone()).await?;
    let base = config.cluster_url.to_string();
    let url = format!("{}/apis/cluster.karmada.io/v1alpha1/clusters/{}/proxy", base.trim_end_matches('/'), m.cluster);
    config.cluster_url = url.parse().with_context(|| format!("{url} is not a URL"))?;
    let namespace = m.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    Ok((kube::Client::try_from(config).context("building the client")?, namespace))
}

/// The pods API of the member, through the control plane's cluster proxy.
async fn pods(t: &Target) -> anyhow::Result<Api<Pod>> {
    let (client, namespace) = member_client(&t.member).await?;
    Ok(Api::namespaced(client, &namespace))
}

/// What went wrong, with the member's own message when it sent one.
fn explain(t: &Target, what: &str, e: kube::Error) -> anyhow::Error {
    anyhow::anyhow!("{what} {} in cluster {}: {}", t.pod, t.member.cluster, crate::get_cmd::describe(e))
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<()> {
    let api = pods(&args.target).await?;
    let params =
        LogParams { container: args.target.container.clone(), follow: args.follow, tail_lines: args.tail, timestamps: args.timestamps, ..LogParams::default() };
    let stream = api.log_stream(&args.target.pod, &params).await.map_err(|e| explain(&args.target, "logs of", e))?;
    let mut lines = std::pin::pin!(stream.lines());
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.next().await {
        let line = line.context("reading the log")?;
        out.write_all(line.as_bytes()).await?;
        out.write_all(b"\n").await?;
        out.flush().await?;
    }
    Ok(())
}

/// A command run by `flotilla exec` that exited with this non-zero code.
#[derive(Debug, thiserror::Error)]
#[error("the command exited with code {0}")]
pub struct Exited(pub u8);

/// Run the command; its exit code (0 when the member reported success).
pub async fn exec(args: ExecArgs) -> anyhow::Result<u8> {
    let api = pods(&args.target).await?;
    let mut params = AttachParams::default().stdin(args.stdin).stdout(true).stderr(true);
    if let Some(c) = &args.target.container {
        params = params.container(c.clone());
    }
    let mut process = api.exec(&args.target.pod, args.command.clone(), &params).await.map_err(|e| explain(&args.target, "exec in", e))?;
    let status = process.take_status();
    let mut copies = tokio::task::JoinSet::new();
    if let Some(mut out) = process.stdout() {
        copies.spawn(async move { tokio::io::copy(&mut out, &mut tokio::io::stdout()).await.map(|_| ()) });
    }
    if let Some(mut err) = process.stderr() {
        copies.spawn(async move { tokio::io::copy(&mut err, &mut tokio::io::stderr()).await.map(|_| ()) });
    }
    if let Some(mut input) = process.stdin() {
        // Detached: the command may end before stdin does.
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut input).await;
            let _ = input.shutdown().await;
        });
    }
    while copies.join_next().await.is_some() {}
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    process.join().await.context("the exec stream")?;
    Ok(exit_code(status.as_ref()))
}

#[derive(clap::Args, Debug)]
pub struct PortForwardArgs {
    #[command(flatten)]
    member: Member,
    /// What to connect to: `svc/NAME` (one of its Running pods, on the target port of the
    /// Service's port REMOTE), `pod/NAME` or a pod's name.
    target: String,
    /// `[LOCAL:]REMOTE`, one or more (LOCAL 0 or left out: REMOTE, `:REMOTE`: a free port).
    #[arg(required = true)]
    ports: Vec<String>,
    /// The local address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    address: std::net::IpAddr,
}

/// `[LOCAL:]REMOTE` as (local, remote); `:REMOTE` asks for a free local port (0).
fn port_pair(spec: &str) -> anyhow::Result<(u16, u16)> {
    let parse = |p: &str| p.parse::<u16>().with_context(|| format!("{spec}: {p:?} is not a port"));
    match spec.split_once(':') {
        Some(("", remote)) => Ok((0, parse(remote)?)),
        Some((local, remote)) => Ok((parse(local)?, parse(remote)?)),
        None => {
            let p = parse(spec)?;
            Ok((p, p))
        }
    }
}

/// The pod and its port that `target`'s port `remote` reaches: for a Service, a Running pod it
/// selects (the first by name) and the target port of its port `remote`.
async fn resolve_target(client: &kube::Client, namespace: &str, target: &str, remote: u16) -> anyhow::Result<(String, u16)> {
    let (kind, name) = target.split_once('/').unwrap_or(("pod", target));
    match kind {
        "pod" | "pods" | "po" => Ok((name.to_string(), remote)),
        "svc" | "service" | "services" => {
            let svc = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .map_err(|e| anyhow::anyhow!("service {namespace}/{name}: {}", crate::get_cmd::describe(e)))?;
            let spec = svc.spec.unwrap_or_default();
            let selector = spec.selector.filter(|s| !s.is_empty()).with_context(|| format!("service {name} has no selector: no pod to connect to"))?;
            let port = spec
                .ports
                .unwrap_or_default()
                .into_iter()
                .find(|p| p.port == i32::from(remote))
                .with_context(|| format!("service {name} has no port {remote}"))?;
            let labels = selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
            let mut pods = Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&kube::api::ListParams::default().labels(&labels))
                .await
                .map_err(|e| anyhow::anyhow!("pods of service {name}: {}", crate::get_cmd::describe(e)))?
                .items;
            pods.retain(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            let pod = pods.into_iter().next().with_context(|| format!("service {name} selects no Running pod"))?;
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let target_port = match port.target_port {
                None => remote,
                Some(IntOrString::Int(n)) => u16::try_from(n).with_context(|| format!("service {name}: target port {n}"))?,
                Some(IntOrString::String(named)) => pod
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|p| p.name.as_deref() == Some(named.as_str()))
                    .and_then(|p| u16::try_from(p.container_port).ok())
                    .with_context(|| format!("pod {pod_name} has no port named {named}"))?,
            };
            Ok((pod_name, target_port))
        }
        other => anyhow::bail!("{target}: port-forward reaches pods and services, not {other}"),
    }
}

/// Listen on each local port and connect every connection to the pod's port, until SIGINT.
pub async fn port_forward(args: PortForwardArgs) -> anyhow::Result<()> {
    let (client, namespace) = member_client(&args.member).await?;
    let mut serving = tokio::task::JoinSet::new();
    for spec in &args.ports {
        let (local, remote) = port_pair(spec)?;
        let (pod, port) = resolve_target(&client, &namespace, &args.target, remote).await?;
        let listener = tokio::net::TcpListener::bind((args.address, local)).await.with_context(|| format!("listen on {}:{local}", args.address))?;
        let addr = listener.local_addr()?;
        println!("Forwarding from {addr} -> {port} (pod {namespace}/{pod} in cluster {})", args.member.cluster);
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        serving.spawn(async move {
            loop {
                let (mut conn, _) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("error: accept on {addr}: {e}");
                        continue;
                    }
                };
                println!("Handling connection for {}", addr.port());
                let (api, pod) = (api.clone(), pod.clone());
                tokio::spawn(async move {
                    let mut forwarder = match api.portforward(&pod, &[port]).await {
                        Ok(f) => f,
                        Err(e) => {
                            eprintln!("error: port-forward to pod {pod} port {port}: {}", crate::get_cmd::describe(e));
                            return;
                        }
                    };
                    if let Some(mut upstream) = forwarder.take_stream(port) {
                        let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                    }
                    if let Err(e) = forwarder.join().await {
                        eprintln!("error: port-forward to pod {pod} port {port}: {e}");
                    }
                });
            }
        });
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = serving.join_next() => anyhow::bail!("a listener stopped"),
    }
}

/// The command's exit code from the member's final Status, as kubectl reports it.
fn exit_code(status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>) -> u8 {
    let Some(s) = status else { return 0 };
    if s.status.as_deref() == Some("Success") {
        return 0;
    }
    s.details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.parse::<u8>().ok())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};

    #[test]
    fn exit_codes_come_from_the_members_status() {
        assert_eq!(exit_code(None), 0);
        assert_eq!(exit_code(Some(&Status { status: Some("Success".into()), ..Status::default() })), 0);
        let failed = |code: &str| Status {
            status: Some("Failure".into()),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause { reason: Some("ExitCode".into()), message: Some(code.into()), field: None }]),
                ..StatusDetails::default()
            }),
            ..Status::default()
        };
        assert_eq!(exit_code(Some(&failed("3"))), 3);
        assert_eq!(exit_code(Some(&failed("x"))), 1);
    }

    #[test]
    fn port_pairs_as_kubectl_reads_them() {
        assert_eq!(port_pair("8080:80").unwrap(), (8080, 80));
        assert_eq!(port_pair("80").unwrap(), (80, 80));
        assert_eq!(port_pair(":80").unwrap(), (0, 80));
        assert!(port_pair("x:80").unwrap_err().to_string().contains("not a port"));
        assert!(port_pair("80:99999").is_err());
    }
}
