//! `flotilla join` and `flotilla unjoin`: register a member cluster in Push mode with a
//! least-privilege identity, and remove it again.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_controllers::cluster::UNJOIN_ANNOTATION;
use flotilla_member::join::{self, JoinOptions, MemberEndpoint};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Which control plane: `--control-plane-kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ControlPlane {
    /// Kubeconfig of the Flotilla control plane (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    control_plane_kubeconfig: Option<PathBuf>,
    /// Context in the control-plane kubeconfig.
    #[arg(long, value_name = "NAME")]
    control_plane_context: Option<String>,
}

impl ControlPlane {
    pub(crate) async fn client(&self) -> anyhow::Result<kube::Client> {
        control_plane_client(self.control_plane_kubeconfig.clone(), self.control_plane_context.clone()).await
    }

    /// The client configuration, for a caller that changes it before building the client.
    pub(crate) async fn config(&self) -> anyhow::Result<kube::Config> {
        control_plane_config(self.control_plane_kubeconfig.clone(), self.control_plane_context.clone()).await
    }
}

/// A client for the control plane from `kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`.
pub async fn control_plane_client(kubeconfig: Option<PathBuf>, context: Option<String>) -> anyhow::Result<kube::Client> {
    let config = control_plane_config(kubeconfig, context).await?;
    kube::Client::try_from(config).context("building the control-plane client")
}

/// The control plane's client configuration (see [`control_plane_client`]).
pub async fn control_plane_config(kubeconfig: Option<PathBuf>, context: Option<String>) -> anyhow::Result<kube::Config> {
    let path = kubeconfig.or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from));
    match path {
        Some(p) => load(&p, context).await.context("the control plane's kubeconfig"),
        None => kube::Config::from_kubeconfig(&KubeConfigOptions { context, ..Default::default() })
            .await
            .context("no kubeconfig given and no $KUBECONFIG; reading ~/.kube/config"),
    }
}

async fn load(path: &Path, context: Option<String>) -> anyhow::Result<kube::Config> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("read {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions { context, ..Default::default() }).await.with_context(|| format!("use {}", path.display()))
}

#[derive(clap::Args, Debug)]
pub struct JoinArgs {
    /// Name of the member cluster (a DNS label of at most 48 characters).
    name: String,
    /// Kubeconfig of the member cluster (an administrator's: join creates Flotilla's own
    /// least-privilege identity there and never stores this one).
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// Context in the member kubeconfig.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    #[command(flatten)]
    control_plane: ControlPlane,
    /// Cloud provider recorded on the Cluster (spec.provider).
    #[arg(long)]
    provider: Option<String>,
    /// Region recorded on the Cluster (spec.region).
    #[arg(long)]
    region: Option<String>,
    /// Zone(s) recorded on the Cluster (spec.zones); repeat or separate with commas.
    #[arg(long = "zone", value_delimiter = ',')]
    zones: Vec<String>,
    /// Labels on the Cluster: key=value, repeat or separate with commas.
    #[arg(long = "labels", value_delimiter = ',')]
    labels: Vec<String>,
    /// More kinds Flotilla may manage in the member, beyond those the default role derives
    /// from what the member serves (`plural.group` or `plural` for the core group, e.g.
    /// `virtualservices.networking.istio.io`, or a kind whose CRD is not installed yet).
    #[arg(long = "allow-kinds", value_delimiter = ',')]
    allow_kinds: Vec<String>,
    /// What Flotilla may do in the member: `default` (every kind the member serves, with its
    /// status, except RBAC and admission kinds; nodes read only) or `full` (Karmada's `*` on
    /// `*`, needed to propagate Roles, RoleBindings, ClusterRoles and ClusterRoleBindings).
    /// With --update, the level recorded at join unless given.
    #[arg(long, value_name = "LEVEL", value_parser = parse_access)]
    access: Option<join::Access>,
    /// Only derive the member role again (kinds served since join, such as new CRDs; a new
    /// --access or --allow-kinds), keeping the identity, its tokens and the Cluster. Needs only
    /// the member's kubeconfig.
    #[arg(long)]
    update: bool,
    /// Seconds to wait for the member's token controller before using a TokenRequest.
    #[arg(long, default_value_t = 15)]
    token_wait_seconds: u64,
    /// Lifetime in seconds of a TokenRequest token (used only when the member has no token controller).
    #[arg(long, default_value_t = 365 * 24 * 3600)]
    token_lifetime_seconds: u64,
}

/// A cluster name as Karmada accepts it.
pub fn check_cluster_name(name: &str) -> anyhow::Result<()> {
    let label_ok =
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !name.starts_with('-') && !name.ends_with('-');
    if !label_ok {
        bail!(
            "invalid cluster name {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
        );
    }
    if name.len() > 48 {
        bail!("invalid cluster name {name:?}: must be no more than 48 characters");
    }
    Ok(())
}

fn parse_access(s: &str) -> Result<join::Access, String> {
    s.parse()
}

fn parse_labels(items: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    items
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("invalid label {s:?}: expected key=value"),
        })
        .collect()
}

pub async fn join(args: JoinArgs) -> anyhow::Result<()> {
    check_cluster_name(&args.name)?;
    let labels = parse_labels(&args.labels)?;
    let extra_kinds =
        args.allow_kinds.iter().filter(|s| !s.is_empty()).map(|s| join::parse_kind(s).map_err(anyhow::Error::msg)).collect::<anyhow::Result<Vec<_>>>()?;
    let member_config = load(&args.kubeconfig, args.context.clone()).await.context("the member's kubeconfig")?;
    let endpoint = MemberEndpoint::from_config(&member_config);
    let member = kube::Client::try_from(member_config).context("building the member client")?;
    if args.update {
        return update(&args.name, &member, &args.control_plane, args.access, extra_kinds).await;
    }
    let control_plane = args.control_plane.client().await?;
    let opts = JoinOptions {
        cluster: args.name.clone(),
        provider: args.provider,
        region: args.region,
        zones: args.zones,
        labels,
        extra_kinds,
        access: args.access.unwrap_or_default(),
        token_wait: Duration::from_secs(args.token_wait_seconds),
        token_lifetime: Duration::from_secs(args.token_lifetime_seconds),
    };
    refuse_the_control_plane(&member, &control_plane, &args.name).await?;
    println!("joining {} ({})", args.name, endpoint.server);
    let creds = join::prepare_member(&member, &opts, &mut |line| println!("  {line}")).await?;
    join::register(&control_plane, &opts, &endpoint, &creds).await?;
    println!("  control plane: Secrets karmada-cluster/{0} and karmada-cluster/{0}-impersonator, Cluster {0} written", args.name);
    println!("cluster {} joined; watch it become Ready with: kubectl get clusters", args.name);
    Ok(())
}

/// The control plane is never its own member (ADR 0025): its API holds the templates and
/// federated objects, and a member copy written into it would be one of them. Both sides are
/// identified as Karmada identifies clusters, by the UID of their `kube-system` namespace.
async fn refuse_the_control_plane(member: &kube::Client, control_plane: &kube::Client, name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let uid = |c: &kube::Client| {
        let api: kube::Api<Namespace> = kube::Api::all(c.clone());
        async move { api.get_opt("kube-system").await.ok().flatten().and_then(|n| n.metadata.uid) }
    };
    if let (Some(m), Some(cp)) = (uid(member).await, uid(control_plane).await)
        && m == cp
    {
        anyhow::bail!(
            "refusing to join {name}: its kubeconfig reaches the control plane itself (namespace kube-system has uid {m} on both). \
             Flotilla's control plane cannot be its own member: every object in its API is a template or a federated object, so a \
             member copy written there would be propagated again. Join the clusters that run workloads instead; KubeFed's \
             `kubefedctl join host --host-cluster-context host` has no counterpart (docs/adr/0025-control-plane-is-not-a-member.md)"
        );
    }
    Ok(())
}

/// `flotilla join NAME --update`: the member role derived again, at the recorded access level
/// and kinds unless new ones are given.
async fn update(
    name: &str,
    member: &kube::Client,
    control_plane: &ControlPlane,
    access: Option<join::Access>,
    mut extra_kinds: Vec<(String, String)>,
) -> anyhow::Result<()> {
    let Some((recorded, kinds)) = join::recorded_access(member, name).await? else {
        bail!(
            "the member has no role {}: cluster {name} was not joined with this kubeconfig; run `flotilla join {name}` without --update",
            join::role_name(name)
        );
    };
    for k in kinds {
        if !extra_kinds.contains(&k) {
            extra_kinds.push(k);
        }
    }
    let opts = JoinOptions { cluster: name.to_string(), extra_kinds, access: access.unwrap_or(recorded), ..Default::default() };
    println!("updating the member role of {name} (access {})", opts.access.as_str());
    let (rules, version) = join::update_member_role(member, &opts).await?;
    println!("  member: cluster role {} ({rules} rules)", join::role_name(name));
    // Telling the control plane makes it retry the cluster's Works now rather than at their
    // next backoff; without it they still are, within minutes.
    let recorded = match (control_plane.client().await, version) {
        (Ok(cp), Some(v)) => join::record_member_role(&cp, name, &v).await.map_err(anyhow::Error::from),
        (Err(e), _) => Err(e),
        (_, None) => Ok(()),
    };
    match recorded {
        Ok(()) => println!("cluster {name} updated; Works refused for a missing right are retried now"),
        Err(e) => println!("cluster {name} updated in the member; the control plane was not told ({e:#}): refused Works are retried at their next backoff"),
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct UnjoinArgs {
    /// Name of the member cluster.
    name: String,
    #[command(flatten)]
    control_plane: ControlPlane,
    /// Delete the workloads Flotilla propagated to the member (asks for confirmation unless --yes).
    /// Without it they keep running, no longer managed.
    #[arg(long)]
    delete_workloads: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    yes: bool,
    /// The member will never come back: remove it without contacting it.
    #[arg(long)]
    force: bool,
    /// Kubeconfig of the member: also remove Flotilla's identity (service account, role, token) there.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in the member kubeconfig.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// How long to wait for the cluster to be removed.
    #[arg(long, default_value_t = 300)]
    wait_seconds: u64,
}

fn confirm(question: &str) -> anyhow::Result<bool> {
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

/// What unjoin does with the member's workloads, as the annotation the controllers read.
pub fn unjoin_mode(delete_workloads: bool, force: bool) -> &'static str {
    match (force, delete_workloads) {
        (true, _) => "abandon",
        (false, true) => "delete",
        (false, false) => "keep",
    }
}

pub async fn unjoin(args: UnjoinArgs) -> anyhow::Result<()> {
    let control_plane = args.control_plane.client().await?;
    let clusters: Api<Cluster> = Api::all(control_plane.clone());
    if clusters.get_opt(&args.name).await?.is_none() {
        bail!("cluster {:?} is not joined (kubectl get clusters lists the joined ones)", args.name);
    }
    if args.delete_workloads && !args.force && !args.yes && !confirm(&format!("delete every workload Flotilla propagated to {}?", args.name))? {
        bail!("not confirmed; nothing changed");
    }
    let mode = unjoin_mode(args.delete_workloads, args.force);
    let patch = serde_json::json!({"metadata": {"annotations": {UNJOIN_ANNOTATION: mode}}});
    clusters.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch)).await.context("marking the cluster for unjoin")?;
    clusters.delete(&args.name, &DeleteParams::default()).await.context("deleting the cluster")?;
    println!("unjoining {} (workloads: {mode})", args.name);
    let deadline = Instant::now() + Duration::from_secs(args.wait_seconds);
    let mut last = Instant::now();
    while clusters.get_opt(&args.name).await?.is_some() {
        if Instant::now() > deadline {
            bail!(
                "cluster {} is still being removed after {}s; its Works are waiting on the member (re-run with --force if it will never come back)",
                args.name,
                args.wait_seconds
            );
        }
        if last.elapsed() > Duration::from_secs(5) {
            println!("  waiting for the cluster's works to be removed ...");
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if let Some(path) = &args.kubeconfig {
        let member = kube::Client::try_from(load(path, args.context.clone()).await.context("the member's kubeconfig")?)?;
        join::clean_member(&member, &args.name).await?;
        println!("  member: Flotilla's service account, role and token removed");
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(control_plane, join::CLUSTER_NAMESPACE);
    match secrets.delete(&args.name, &DeleteParams::default()).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => return Err(e).context("deleting the stored member credential"),
    }
    println!("cluster {} unjoined", args.name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names() {
        assert!(check_cluster_name("member-1").is_ok());
        assert!(check_cluster_name("Member").is_err());
        assert!(check_cluster_name("-a").is_err());
        assert!(check_cluster_name(&"a".repeat(49)).unwrap_err().to_string().contains("48"));
    }

    #[test]
    fn labels_and_modes() {
        assert_eq!(parse_labels(&["a=b".into(), "c=".into()]).unwrap().len(), 2);
        assert!(parse_labels(&["nope".into()]).is_err());
        assert_eq!(unjoin_mode(false, false), "keep");
        assert_eq!(unjoin_mode(true, false), "delete");
        assert_eq!(unjoin_mode(true, true), "abandon");
    }
}
