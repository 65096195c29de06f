//! `flotilla member`: simulated member clusters (`flotilla-sim`) standalone, until SIGTERM or
//! Ctrl-C. One HTTPS listener serves every member under `/clusters/<name>` (a single member
//! also at the root) and the admin endpoint under `/sim/v1/`; with `--own-listeners` each
//! member also gets a listener of its own (needed for the `refuse` fault). Each member's
//! kubeconfig is written to `<data-dir>/<name>.kubeconfig`, the fleet admin's to
//! `<data-dir>/fleet-admin.kubeconfig`; the command prints where they are.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use flotilla_sim::config::pod_cidr_for;
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};

#[derive(clap::Args, Debug)]
pub struct MemberArgs {
    /// How many members to run, named `<name>1 … <name>N` (or just `<name>` for one).
    #[arg(long, default_value_t = 1)]
    members: usize,
    /// The members' name (prefix).
    #[arg(long, default_value = "member")]
    name: String,
    /// Certificates and kubeconfigs go here.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// The shared HTTPS listener (port 0: a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Every member also on a listener of its own; its kubeconfig then points there.
    #[arg(long)]
    own_listeners: bool,
    /// Nodes per member.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// CPU of each node.
    #[arg(long, default_value = "8")]
    node_cpu: String,
    /// Memory of each node.
    #[arg(long, default_value = "32Gi")]
    node_memory: String,
    /// Pods each node takes (status.capacity.pods) [default: the simulator's, 110].
    #[arg(long)]
    node_pods: Option<u32>,
}

impl MemberArgs {
    fn fleet_config(&self) -> FleetConfig {
        let names: Vec<String> = if self.members == 1 { vec![self.name.clone()] } else { (1..=self.members).map(|i| format!("{}{i}", self.name)).collect() };
        let members = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut m = MemberConfig::new(name);
                m.nodes.count = self.nodes;
                m.nodes.cpu = self.node_cpu.clone();
                m.nodes.memory = self.node_memory.clone();
                if let Some(pods) = self.node_pods {
                    m.nodes.pods = pods;
                }
                m.pod_cidr = pod_cidr_for(i);
                m
            })
            .collect();
        let mut config = FleetConfig::new(members, self.data_dir.clone());
        config.listen = self.listen;
        config.own_listeners = self.own_listeners;
        config
    }
}

pub async fn run(args: MemberArgs) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("install the SIGTERM handler")?;
    let fleet = Fleet::start(args.fleet_config(), |done, total| {
        if done % 100 == 0 || done == total {
            tracing::info!(done, total, "simulated members started");
        }
    })
    .await
    .context("start the simulated members")?;
    let mut out = std::io::stdout().lock();
    for e in fleet.members() {
        writeln!(out, "member {} server {} kubeconfig {}", e.member.name(), e.server(), e.kubeconfig.display())?;
    }
    writeln!(out, "admin https://{}/sim/v1/members kubeconfig {}", fleet.local_addr, fleet.admin_kubeconfig.display())?;
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping the simulated members");
    fleet.shutdown().await.context("stop the simulated members")?;
    Ok(())
}
