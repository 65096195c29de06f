//! `flotilla logs|exec --cluster NAME POD`: a member pod's logs and a command in it, through the
//! control plane's cluster proxy (`clusters/{name}/proxy`; a Pull cluster's over its agent's
//! tunnel), as `karmadactl logs|exec --cluster` do. The caller needs `clusters/proxy` on the
//! control plane; the member sees the caller impersonated.

use std::path::PathBuf;

use anyhow::Context as _;
use futures::{AsyncBufReadExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use tokio::io::AsyncWriteExt as _;

use crate::join_cmd::control_plane_config;

/// Where and as whom: the member cluster and the control plane's kubeconfig.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The member cluster the pod runs in.
    #[arg(long, short = 'C', value_name = "NAME")]
    cluster: String,
    /// The pod.
    pod: String,
    /// Namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Container (default: the pod's only or first one).
    #[arg(long, short = 'c')]
    container: Option<String>,
    /// Kubeconfig of the control plane (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
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

/// The pods API of the member, through the control plane's cluster proxy.
async fn pods(t: &Target) -> anyhow::Result<Api<Pod>> {
    let mut config = control_plane_config(t.kubeconfig.clone(), t.context.clone()).await?;
    let base = config.cluster_url.to_string();
    let url = format!("{}/apis/cluster.karmada.io/v1alpha1/clusters/{}/proxy", base.trim_end_matches('/'), t.cluster);
    config.cluster_url = url.parse().with_context(|| format!("{url} is not a URL"))?;
    let namespace = t.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("building the client")?;
    Ok(Api::namespaced(client, &namespace))
}

/// What went wrong, with the member's own message when it sent one.
fn explain(t: &Target, what: &str, e: kube::Error) -> anyhow::Error {
    anyhow::anyhow!("{what} {} in cluster {}: {}", t.pod, t.cluster, crate::get_cmd::describe(e))
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
}
