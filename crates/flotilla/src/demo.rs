//! `flotilla up --demo N`: N simulated member clusters (flotilla-sim) in the same process,
//! served over HTTPS and joined in Push mode exactly as `flotilla join` joins a real cluster —
//! least-privilege identity, token, Secret and Cluster — so everything after that is the real
//! federation path.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_member::join::{self, JoinOptions, MemberEndpoint};
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Member names of a demo of `n` members: member1, member2, ...
pub fn member_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("member{i}")).collect()
}

/// Start the simulated members under `dir` and join each to the control plane `cp`.
pub async fn start(n: usize, dir: &Path, cp: &kube::Client) -> anyhow::Result<Fleet> {
    let members: Vec<MemberConfig> = member_names(n).iter().map(|name| MemberConfig::new(name)).collect();
    let config = FleetConfig::new(members.clone(), dir.to_path_buf());
    println!("demo: starting {n} simulated member clusters");
    let fleet = Fleet::start(config, |done, total| println!("demo:   {done}/{total} members started")).await.context("start the simulated members")?;
    for m in &members {
        let entry = fleet.entry(&m.name).context("a started member is missing")?;
        let kc = Kubeconfig::read_from(&entry.kubeconfig).with_context(|| format!("read {}", entry.kubeconfig.display()))?;
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
        let (token, id) = join::prepare_member(&member, &opts, &mut |_| {}).await.with_context(|| format!("prepare member {}", m.name))?;
        join::register(cp, &opts, &endpoint, &token, id).await.with_context(|| format!("register member {}", m.name))?;
        println!("demo:   joined {} ({}, region {})", m.name, entry.server(), m.nodes.region);
    }
    Ok(fleet)
}
