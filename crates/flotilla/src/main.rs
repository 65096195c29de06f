//! `flotilla`: the one binary. This file is wiring only: parse the command line, build each
//! component from its typed config, run it until a signal arrives.

mod certs_cmd;
mod cluster_cmd;
mod controllers_cmd;
mod edge_cmd;
mod enable_cmd;
mod explain_cmd;
mod get_cmd;
mod join_cmd;
mod kubeconfig_cmd;
mod member_cmd;
mod member_pod_cmd;
mod promote_cmd;
mod store_cmd;
mod token_cmd;
mod up;

use clap::{Parser, Subcommand};

/// mimalloc, not glibc's malloc: under the control plane's load of short-lived objects glibc's
/// allocator took a third of the CPU (ADR 0034).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Crds {
        /// Print instead KubeFed's objects of a fresh control plane (namespace
        /// kube-federation-system, the KubeFedConfig `kubefed`, the default
        /// FederatedTypeConfigs), to apply once the CRDs are established.
        #[arg(long)]
        kubefed_objects: bool,
    },
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
    /// Bootstrap tokens for pull registration, as `kubeadm token` and `karmadactl token` keep
    /// them (`kube-system/bootstrap-token-<id>`; `kube-public/cluster-info` is signed with each).
    #[command(subcommand)]
    Token(token_cmd::TokenCommand),
    /// Register a member in Pull mode with a bootstrap token, as `karmadactl register`: token
    /// discovery of the control plane with its CA pinned, then TLS bootstrap of the agent's
    /// certificate (CN system:karmada:agent:<cluster>); writes the agent's kubeconfig.
    Register(flotilla::register::RegisterArgs),
    /// Run a member in Pull mode beside it, as karmada-agent: registers its Cluster (syncMode
    /// Pull), renews its Lease, posts its status and applies the Works of its execution space
    /// with the control plane's own controllers, holding the only credential to the member.
    Agent(flotilla::agent::AgentArgs),
    /// Remove a pull cluster: deletes its Cluster (its agent removes what its Works made in the
    /// member) and waits until it is gone; the agent's credential then authorizes nothing.
    Unregister(flotilla::register::UnregisterArgs),
    /// Run simulated member clusters (nodes, workload simulator, fault knobs) behind one HTTPS
    /// listener until SIGTERM; prints each member's kubeconfig and the admin endpoint.
    Member(member_cmd::MemberArgs),
    /// Federate a type, as `kubefedctl enable`: resolve NAME (kind, plural, short name or
    /// plural.group) through discovery and create its FederatedTypeConfig and the
    /// Federated<Kind> CRD in types.kubefed.io (`-o yaml` prints them instead).
    Enable(enable_cmd::EnableArgs),
    /// Stop federating a type, as `kubefedctl disable`: delete its FederatedTypeConfig (and,
    /// with --delete-crd, its Federated<Kind> CRD once no such objects remain).
    Disable(enable_cmd::DisableArgs),
    /// Turn an existing object into its Federated<Kind>, as `kubefedctl federate`: its spec as
    /// the template, placed on every cluster (`--contents`: a namespace and what it holds).
    Federate(enable_cmd::FederateArgs),
    /// Why a template is placed where it is: runs the scheduler on its binding and the clusters
    /// as they are now and prints, per cluster, each filter plugin's verdict and the replicas.
    Explain(explain_cmd::ExplainArgs),
    /// Show objects of member clusters through the cluster proxy, with a CLUSTER column
    /// (`flotilla get deploy -A --clusters all`).
    Get(get_cmd::GetArgs),
    /// Changes made at the edge while a pull cluster was away: `status` prints each pull
    /// cluster's edge report, `resolve` decides a change held in conflict (ADR 0032).
    #[command(subcommand)]
    Edge(edge_cmd::EdgeCommand),
    /// Adopt an object running in a member, as `karmadactl promote`: read it through the cluster
    /// proxy (push or pull member), create it on the control plane as a resource template with a
    /// PropagationPolicy placing it on that cluster with `conflictResolution: Overwrite`, so the
    /// member's object is taken over where it is (same UID, pods untouched), not re-created.
    Promote(promote_cmd::PromoteArgs),
    /// A member pod's logs through the cluster proxy, as `karmadactl logs --cluster`:
    /// `flotilla logs --cluster member1 -n shop web-0 -f`.
    Logs(member_pod_cmd::LogsArgs),
    /// Run a command in a member pod through the cluster proxy (WebSocket), as `karmadactl
    /// exec --cluster`: `flotilla exec --cluster member1 -n shop web-0 -- ls /`. Exits with the
    /// command's exit code.
    Exec(member_pod_cmd::ExecArgs),
    /// Connect local ports to a member pod or Service through the cluster proxy, as `kubectl
    /// port-forward`: `flotilla port-forward --cluster member1 -n shop svc/web 8080:80`.
    PortForward(member_pod_cmd::PortForwardArgs),
    /// Mark a cluster unschedulable, as `karmadactl cordon`: adds the taint
    /// `cluster.karmada.io/unschedulable:NoSchedule`; nothing new is placed there, what runs stays.
    Cordon(cluster_cmd::CordonArgs),
    /// Make a cordoned cluster schedulable again, as `karmadactl uncordon`.
    Uncordon(cluster_cmd::CordonArgs),
    /// Add, change or remove a cluster's taints, as `karmadactl taint`:
    /// `flotilla taint clusters member1 dedicated=gpu:NoSchedule`, `dedicated:NoSchedule-`,
    /// `dedicated-`; `--overwrite` replaces a value.
    Taint(cluster_cmd::TaintArgs),
    /// Kubeconfigs derived from the control plane's: `global-view` points stock kubectl at
    /// karmada-search's proxy, where every member's cached objects are listed and watched.
    #[command(subcommand)]
    Kubeconfig(kubeconfig_cmd::KubeconfigCommand),
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
            Command::Token(cmd) => token_cmd::run(cmd).await,
            Command::Register(args) => flotilla::register::run(args).await,
            Command::Agent(args) => flotilla::agent::run(args).await,
            Command::Unregister(args) => flotilla::register::unregister(args).await,
            Command::Member(args) => member_cmd::run(args).await,
            Command::Get(args) => get_cmd::run(args).await,
            Command::Crds { kubefed_objects: false } => {
                print!("{}", flotilla_api::federation::crds_yaml());
                Ok(())
            }
            Command::Crds { kubefed_objects: true } => {
                print!("{}", flotilla_api::federation::kubefed_objects_yaml());
                Ok(())
            }
            Command::Enable(args) => enable_cmd::enable(args).await,
            Command::Disable(args) => enable_cmd::disable(args).await,
            Command::Federate(args) => enable_cmd::federate(args).await,
            Command::Explain(args) => explain_cmd::explain(args).await,
            Command::Cordon(args) => cluster_cmd::cordon(args).await,
            Command::Uncordon(args) => cluster_cmd::uncordon(args).await,
            Command::Taint(args) => cluster_cmd::taint_clusters(args).await,
            Command::Edge(cmd) => edge_cmd::run(cmd).await,
            Command::Promote(args) => promote_cmd::promote(args).await,
            Command::Kubeconfig(cmd) => kubeconfig_cmd::run(cmd),
            Command::Logs(args) => member_pod_cmd::logs(args).await,
            Command::PortForward(args) => member_pod_cmd::port_forward(args).await,
            Command::Exec(args) => match member_pod_cmd::exec(args).await? {
                0 => Ok(()),
                code => Err(member_pod_cmd::Exited(code).into()),
            },
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The command `flotilla exec` ran said how it ended; nothing to add.
        Err(e) if e.downcast_ref::<member_pod_cmd::Exited>().is_some() => {
            std::process::ExitCode::from(e.downcast_ref::<member_pod_cmd::Exited>().map_or(1, |x| x.0))
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
