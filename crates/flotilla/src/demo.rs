//! `flotilla up --demo N`: N simulated member clusters (flotilla-sim) in the same process,
//! served over HTTPS and joined in Push mode exactly as `flotilla join` joins a real cluster —
//! least-privilege identity, token, Secret and Cluster — so everything after that is the real
//! federation path. The benchmarks start their fleets with [`start_fleet`].

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_member::join::{self, JoinOptions, MemberEndpoint};
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use futures::StreamExt as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Members joined at once by [`start_fleet`].
const JOIN_PARALLELISM: usize = 16;

/// Member names of a demo of `n` members: member1, member2, ...
pub fn member_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("member{i}")).collect()
}

/// A step of [`start_fleet`], for progress output.
#[derive(Clone, Debug)]
pub enum Progress {
    Started { done: usize, total: usize },
    Joined { name: String, server: String, region: String },
}

/// Start the simulated members under `dir` and join each to the control plane `cp`,
/// printing progress as `flotilla up --demo` does.
pub async fn start(n: usize, dir: &Path, cp: &kube::Client) -> anyhow::Result<Fleet> {
    let members: Vec<MemberConfig> = member_names(n).iter().map(|name| MemberConfig::new(name)).collect();
    println!("demo: starting {n} simulated member clusters");
    start_fleet(FleetConfig::new(members, dir.to_path_buf()), cp, |p| match p {
        Progress::Started { done, total } => println!("demo:   {done}/{total} members started"),
        Progress::Joined { name, server, region } => println!("demo:   joined {name} ({server}, region {region})"),
    })
    .await
}

/// Start the fleet `config` describes and join every member to `cp` in Push mode, a few at a
/// time.
pub async fn start_fleet(config: FleetConfig, cp: &kube::Client, progress: impl Fn(Progress)) -> anyhow::Result<Fleet> {
    let members = config.members.clone();
    let fleet = Fleet::start(config, |done, total| progress(Progress::Started { done, total })).await.context("start the simulated members")?;
    let mut joins = Vec::new();
    for m in members {
        let entry = fleet.entry(&m.name).context("a started member is missing")?;
        let (kubeconfig, server) = (entry.kubeconfig.clone(), entry.server().to_string());
        joins.push(async move {
            join_member(&m, &kubeconfig, cp).await?;
            Ok::<_, anyhow::Error>(Progress::Joined { name: m.name.clone(), server, region: m.nodes.region.clone() })
        });
    }
    let mut joined = futures::stream::iter(joins).buffer_unordered(JOIN_PARALLELISM);
    while let Some(done) = joined.next().await {
        progress(done?);
    }
    Ok(fleet)
}

/// Join one simulated member, reached through its kubeconfig, to the control plane `cp`.
pub async fn join_member(m: &MemberConfig, kubeconfig: &Path, cp: &kube::Client) -> anyhow::Result<()> {
    let kc = Kubeconfig::read_from(kubeconfig).with_context(|| format!("read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let endpoint = MemberEndpoint::from_config(&config);
    let member = kube::Client::try_from(config)?;
    let opts = JoinOptions {
        cluster: m.name.clone(),
        region: Some(m.nodes.region.clone()),
        zones: m.nodes.zones.clone(),
        provider: Some("flotilla-sim".into()),
        token_wait: Duration::from_secs(2),
        token_lifetime: Duration::from_secs(365 * 24 * 3600),
        ..Default::default()
    };
    let creds = join::prepare_member(&member, &opts, &mut |_| {}).await.with_context(|| format!("prepare member {}", m.name))?;
    join::register(cp, &opts, &endpoint, &creds).await.with_context(|| format!("register member {}", m.name))?;
    Ok(())
}
