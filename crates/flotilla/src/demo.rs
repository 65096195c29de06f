//! `flotilla up --demo N`: N simulated member clusters (flotilla-sim) in the same process,
//! served over HTTPS and joined in Push mode exactly as `flotilla join` joins a real cluster —
//! least-privilege identity, token, Secret and Cluster — so everything after that is the real
//! federation path. With `--demo-pull M`, M more members (`edge1`, …) join in Pull mode as
//! `flotilla token create` and `flotilla register` make them join, each run by an agent task of
//! this process ([`register_pull_member`], [`agent_args`]). The benchmarks start their fleets
//! with [`start_fleet`] and their agents with the same two functions.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use flotilla_member::join::{self, JoinOptions, MemberEndpoint};
use flotilla_runtime::CancellationToken;
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use futures::StreamExt as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Members joined at once by [`start_fleet`].
const JOIN_PARALLELISM: usize = 16;

/// Member names of a demo of `n` members: member1, member2, ...
pub fn member_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("member{i}")).collect()
}

/// Names of a demo's `n` pull members: edge1, edge2, ...
pub fn pull_member_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("edge{i}")).collect()
}

/// A running demo: its simulated members and the agents of its pull members.
pub struct Demo {
    pub fleet: Fleet,
    agents: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for Demo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demo").field("fleet", &self.fleet).field("agents", &self.agents.len()).finish()
    }
}

impl Demo {
    /// Stop the agents, then the members.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop.cancel();
        for agent in self.agents {
            match agent.await {
                Ok(Err(e)) => eprintln!("demo: an agent ended with an error: {e:#}"),
                Err(e) => eprintln!("demo: an agent task failed: {e}"),
                Ok(Ok(())) => {}
            }
        }
        self.fleet.shutdown().await.map_err(anyhow::Error::from)
    }
}

/// Where pull members register: the control plane (a client allowed to create bootstrap
/// tokens), its address as `host:port`, and the pin of its CA (`sha256:…`).
#[derive(Clone, Copy)]
pub struct RegisterAt<'a> {
    pub client: &'a kube::Client,
    pub address: &'a str,
    pub pin: &'a str,
}

/// Parse a command line of `T` (the flags' defaults for everything not given), as the
/// command would take it.
pub fn parse_args<T: clap::Args>(argv: &[&str]) -> anyhow::Result<T> {
    #[derive(clap::Parser)]
    struct Wrap<T: clap::Args> {
        #[command(flatten)]
        inner: T,
    }
    Ok(<Wrap<T> as clap::Parser>::try_parse_from(argv)?.inner)
}

/// Register pull member `name` as an operator would: a bootstrap token made for it (an hour's
/// life, `purpose` as its description), then `flotilla register`, which writes the agent's
/// kubeconfig (its own certificate) to `out`.
pub async fn register_pull_member(cp: RegisterAt<'_>, name: &str, out: &Path, purpose: &str) -> anyhow::Result<()> {
    use flotilla_api::bootstrap_token::{self as bt, Token};
    let token = Token::from_random(&rand::random());
    let secret = crate::register::token_secret(&token, Some(name), Duration::from_secs(3600), Some(purpose.into()), jiff::Timestamp::now())?;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(cp.client.clone(), bt::NAMESPACE);
    secrets.create(&kube::api::PostParams::default(), &serde_json::from_value(secret)?).await.context("create the bootstrap token")?;
    let exposed = token.expose();
    let out_s = out.display().to_string();
    let register: crate::register::RegisterArgs = parse_args(&[
        "register",
        cp.address,
        "--token",
        &exposed,
        "--discovery-token-ca-cert-hash",
        cp.pin,
        "--cluster-name",
        name,
        "--out",
        &out_s,
        "--quiet",
    ])?;
    crate::register::register(&register).await.with_context(|| format!("register {name}"))?;
    Ok(())
}

/// The agent of pull member `name` (quiet), on its registered kubeconfig and its member's,
/// with `extra` flags of `flotilla agent`.
pub fn agent_args(name: &str, control_plane_kubeconfig: &Path, member_kubeconfig: &Path, extra: &[&str]) -> anyhow::Result<crate::agent::AgentArgs> {
    let (cp, member) = (control_plane_kubeconfig.display().to_string(), member_kubeconfig.display().to_string());
    let mut argv = vec!["agent", "--cluster-name", name, "--control-plane-kubeconfig", &cp, "--kubeconfig", &member, "--cluster-provider", "flotilla-sim"];
    argv.extend(extra);
    let mut agent: crate::agent::AgentArgs = parse_args(&argv)?;
    agent.quiet = true;
    Ok(agent)
}

/// A step of [`start_fleet`], for progress output.
#[derive(Clone, Debug)]
pub enum Progress {
    Started { done: usize, total: usize },
    Joined { name: String, server: String, region: String },
}

/// Start the simulated members under `dir`: `push` joined to the control plane `cp` in Push
/// mode, then `pull` registered at `pull_at` and run by agents in this process; printing
/// progress as `flotilla up --demo` does.
pub async fn start(push: usize, pull: usize, dir: &Path, cp: &kube::Client, pull_at: RegisterAt<'_>) -> anyhow::Result<Demo> {
    let pull_names = pull_member_names(pull);
    let mut members: Vec<MemberConfig> = member_names(push).iter().map(|name| MemberConfig::new(name)).collect();
    members.extend(pull_names.iter().map(|name| MemberConfig::new(name)));
    println!("demo: starting {} simulated member clusters", push + pull);
    let fleet = Fleet::start(FleetConfig::new(members.clone(), dir.to_path_buf()), |done, total| println!("demo:   {done}/{total} members started"))
        .await
        .context("start the simulated members")?;
    let pushed: Vec<MemberConfig> = members.iter().filter(|m| !pull_names.contains(&m.name)).cloned().collect();
    join_all(&fleet, pushed, cp, |p| {
        if let Progress::Joined { name, server, region } = p {
            println!("demo:   joined {name} ({server}, region {region})");
        }
    })
    .await?;
    let stop = CancellationToken::new();
    let mut agents = Vec::new();
    for name in &pull_names {
        let entry = fleet.entry(name).context("a started member is missing")?;
        let out = dir.join(format!("{name}-agent.kubeconfig"));
        register_pull_member(pull_at, name, &out, "flotilla up --demo-pull").await?;
        let nodes = &members.iter().find(|m| &m.name == name).context("a pull member's configuration")?.nodes;
        let zones = nodes.zones.join(",");
        let agent = agent_args(name, &out, &entry.kubeconfig, &["--cluster-region", &nodes.region, "--cluster-zones", &zones])?;
        agents.push(tokio::spawn(crate::agent::run_until(agent, stop.clone())));
        println!("demo:   registered {name} in Pull mode (its agent runs in this process; kubeconfig {})", out.display());
    }
    Ok(Demo { fleet, agents, stop })
}

/// Start the fleet `config` describes and join every member to `cp` in Push mode, a few at a
/// time.
pub async fn start_fleet(config: FleetConfig, cp: &kube::Client, progress: impl Fn(Progress)) -> anyhow::Result<Fleet> {
    let members = config.members.clone();
    let fleet = Fleet::start(config, |done, total| progress(Progress::Started { done, total })).await.context("start the simulated members")?;
    join_all(&fleet, members, cp, progress).await?;
    Ok(fleet)
}

/// Join `members` of the running `fleet` to `cp` in Push mode, a few at a time.
async fn join_all(fleet: &Fleet, members: Vec<MemberConfig>, cp: &kube::Client, progress: impl Fn(Progress)) -> anyhow::Result<()> {
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
    Ok(())
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
