//! `flotilla`: the one binary. This file is wiring only: parse the command line, build each
//! component from its typed config, run it until a signal arrives.

mod certs_cmd;
mod cluster_proxy;
mod controllers_cmd;
mod get_cmd;
mod join_cmd;
mod member_cmd;
mod store_cmd;
mod up;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "flotilla", version, about = "A multi-cluster Kubernetes control plane in one binary")]
struct Cli {
    /// Log filter (RUST_LOG syntax), e.g. `info` or `flotilla_store=debug`.
    #[arg(long, global = true, env = "FLOTILLA_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane on an embedded store in a data directory.
    Up(up::UpArgs),
    /// Inspect, snapshot and restore the embedded store.
    #[command(subcommand)]
    Store(store_cmd::StoreCommand),
    /// Certificate maintenance.
    #[command(subcommand)]
    Certs(certs_cmd::CertsCommand),
    /// Print Flotilla's federation CRDs (Karmada's and KubeFed's kinds) as multi-document YAML,
    /// to install into another Kubernetes API server:
    /// `flotilla crds | kubectl apply --server-side -f -`, then run `flotilla controllers` against
    /// it. Such a host lacks Flotilla's admission chain: the controllers set the permanent ids and
    /// defaults themselves, but invalid policies are stored and only reported
    /// (docs/controllers-on-any-host.md).
    Crds,
    /// Run the federation controllers and the scheduler against any API server hosting the
    /// federation CRDs (`flotilla crds`), e.g. a plain kube-apiserver, until SIGTERM. A plain
    /// host has no admission chain: the controllers set the permanent ids and defaults themselves
    /// (docs/controllers-on-any-host.md).
    Controllers(controllers_cmd::ControllersArgs),
    /// Join a member cluster in Push mode: creates a least-privilege identity in the member and
    /// registers it (Secret karmada-cluster/NAME, Cluster NAME) on the control plane.
    Join(join_cmd::JoinArgs),
    /// Remove a member cluster. Its workloads keep running unless --delete-workloads.
    Unjoin(join_cmd::UnjoinArgs),
    /// Run simulated member clusters (nodes, workload simulator, fault knobs) behind one HTTPS
    /// listener until SIGTERM; prints each member's kubeconfig and the admin endpoint.
    Member(member_cmd::MemberArgs),
    /// Show objects of member clusters through the cluster proxy, with a CLUSTER column
    /// (`flotilla get deploy -A --clusters all`).
    Get(get_cmd::GetArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // `get` reports each member's failure itself; kube's own request errors would repeat them.
    let filter = match &cli.command {
        Command::Get(_) if !cli.log.contains("kube_client") => format!("{},kube_client=off", cli.log),
        _ => cli.log.clone(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Up(args) => up::run(args).await,
            Command::Store(cmd) => store_cmd::run(cmd).await,
            Command::Certs(cmd) => certs_cmd::run(cmd),
            Command::Controllers(args) => controllers_cmd::run(args).await,
            Command::Join(args) => join_cmd::join(args).await,
            Command::Unjoin(args) => join_cmd::unjoin(args).await,
            Command::Member(args) => member_cmd::run(args).await,
            Command::Get(args) => get_cmd::run(args).await,
            Command::Crds => {
                print!("{}", flotilla_api::federation::crds_yaml());
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
