//! `flotilla controllers`: the federation controllers and the scheduler, out of process,
//! against any Kubernetes API server that hosts the federation CRDs (`flotilla crds`) — a
//! Flotilla control plane reached over HTTPS, or a plain kube-apiserver. They run until SIGTERM
//! or Ctrl-C; a controller that stops on its own stops the process with an error.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(clap::Args, Debug)]
pub struct ControllersArgs {
    /// Kubeconfig of the host API server (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    #[command(flatten)]
    federation: flotilla::federation_args::FederationArgs,
}

/// The CRDs the controllers cannot start without: (group/version, plural).
const REQUIRED: [(&str, &str); 5] = [
    ("cluster.karmada.io/v1alpha1", "clusters"),
    ("policy.karmada.io/v1alpha1", "propagationpolicies"),
    ("policy.karmada.io/v1alpha1", "overridepolicies"),
    ("work.karmada.io/v1alpha2", "resourcebindings"),
    ("work.karmada.io/v1alpha1", "works"),
];

async fn host_config(args: &ControllersArgs) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions { context: args.context.clone(), ..Default::default() };
    let path = args.kubeconfig.clone().or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from));
    match path {
        Some(p) => {
            let kc = Kubeconfig::read_from(&p).with_context(|| format!("read {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await.with_context(|| format!("use {}", p.display()))
        }
        None => kube::Config::from_kubeconfig(&options).await.context("no --kubeconfig and no $KUBECONFIG; reading ~/.kube/config"),
    }
}

/// Logs the `Warning` headers of the host's responses. A plain kube-apiserver accepts an
/// unknown field in a custom resource with only a warning and drops it (structural pruning),
/// so a field the controllers write that the CRDs do not declare shows up here and nowhere else.
fn log_host_warnings<B>(response: http::Response<B>) -> http::Response<B> {
    for warning in response.headers().get_all(http::header::WARNING) {
        tracing::warn!(warning = %String::from_utf8_lossy(warning.as_bytes()), "the host API server warned");
    }
    response
}

/// A client of the host for one component. Its User-Agent `flotilla-<component>/<version>`
/// names the component in the host's audit log and, as the field manager the host derives from
/// it, in the `managedFields` of what it writes. The host's Warning headers are logged.
fn host_client(mut config: kube::Config, component: &str) -> anyhow::Result<kube::Client> {
    let agent = format!("flotilla-{component}/{}", env!("CARGO_PKG_VERSION"));
    let agent = http::HeaderValue::from_str(&agent).with_context(|| format!("user agent {agent:?}"))?;
    config.headers.push((http::header::USER_AGENT, agent));
    Ok(kube::client::ClientBuilder::try_from(config)
        .context("building the host client")?
        .with_layer(&tower::util::MapResponseLayer::new(log_host_warnings))
        .build())
}

/// The required CRDs the host does not serve.
async fn missing_crds(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let mut missing = Vec::new();
    for (group_version, plural) in REQUIRED {
        let served = match client.list_api_group_resources(group_version).await {
            Ok(list) => list.resources.iter().any(|r| r.name == plural),
            Err(kube::Error::Api(s)) if s.code == 404 => false,
            Err(e) => return Err(e).with_context(|| format!("discovering {group_version}")),
        };
        if !served {
            missing.push(format!("{plural} ({group_version})"));
        }
    }
    Ok(missing)
}

pub async fn run(args: ControllersArgs) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("install the SIGTERM handler")?;
    flotilla::controllers::set(&args.federation, flotilla::controllers::Scope::Federation).select(&args.federation.controllers)?;
    let config = host_config(&args).await?;
    let server = config.cluster_url.to_string();
    let client = host_client(config.clone(), "controllers")?;
    let version = client.apiserver_version().await.with_context(|| format!("reaching the host API server at {server}"))?;
    println!("flotilla controllers: host {server} (Kubernetes {})", version.git_version);
    let missing = missing_crds(&client).await?;
    if !missing.is_empty() {
        bail!("the host does not serve {}; install the federation CRDs first: flotilla crds | kubectl apply --server-side -f -", missing.join(", "));
    }
    let (host, first) = (config.clone(), client.clone());
    let make = move |name: &str| {
        host_client(host.clone(), name).unwrap_or_else(|e| {
            tracing::warn!(controller = name, error = %e, "building its own client failed; sharing the first one");
            first.clone()
        })
    };
    let scope = flotilla::controllers::Scope::Federation;
    let mut running = flotilla::controllers::start_selected(&args.federation, scope, std::sync::Arc::new(make), None, None)?;
    println!("flotilla controllers: {}", flotilla::controllers::describe(&args.federation, scope, &running.names));
    let outcome = tokio::select! {
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        ended = running.tasks.join_next() => Err(match ended {
            Some(Err(e)) if e.is_panic() => anyhow::anyhow!("a controller panicked: {e}"),
            _ => anyhow::anyhow!("a controller stopped unexpectedly"),
        }),
    };
    eprintln!("flotilla controllers: shutting down");
    running.shutdown(std::time::Duration::from_secs(5)).await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ControllersArgs,
    }

    #[test]
    fn takes_the_host_and_flotilla_ups_timing_flags() {
        let cli = Cli::parse_from([
            "t",
            "--kubeconfig",
            "host.kubeconfig",
            "--context",
            "admin",
            "--cluster-status-update-frequency",
            "1s",
            "--unschedulable-retry",
            "2s",
        ]);
        assert_eq!(cli.args.kubeconfig.as_deref(), Some(std::path::Path::new("host.kubeconfig")));
        assert_eq!(cli.args.context.as_deref(), Some("admin"));
        assert_eq!(cli.args.federation.cluster_status().interval, std::time::Duration::from_secs(1));
        assert_eq!(cli.args.federation.scheduler().unschedulable_retry, std::time::Duration::from_secs(2));
        let defaults = Cli::parse_from(["t"]).args;
        assert!(defaults.kubeconfig.is_none());
        assert_eq!(defaults.federation.member_request_timeout, std::time::Duration::from_secs(30));
    }

    #[test]
    fn warnings_pass_the_response_through() {
        let response = http::Response::builder().header(http::header::WARNING, "299 - \"unknown field \\\"spec.x\\\"\"").body(7).unwrap();
        assert_eq!(*log_host_warnings(response).body(), 7);
    }
}
