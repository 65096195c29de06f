//! `flotilla kubeconfig global-view`: a kubeconfig whose server is the control plane's
//! karmada-search proxy (`/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy`), so stock
//! kubectl and client libraries see every member's objects the global view caches — `kubectl
//! get pods -A` lists the pods of all clusters, `-w` watches them — with the same credentials.

use std::path::PathBuf;

use anyhow::Context as _;
use kube::config::Kubeconfig;

/// The path karmada-search serves its proxy under.
pub const PROXY_PATH: &str = "/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy";

#[derive(clap::Subcommand, Debug)]
pub enum KubeconfigCommand {
    /// Write a kubeconfig for the global view: the control plane's credentials, its server
    /// pointed at karmada-search's proxy path. Example:
    /// `flotilla kubeconfig global-view --kubeconfig admin.kubeconfig -o global.kubeconfig &&
    /// kubectl --kubeconfig global.kubeconfig get pods -A -o wide`
    GlobalView(GlobalViewArgs),
}

#[derive(clap::Args, Debug)]
pub struct GlobalViewArgs {
    /// The control plane's kubeconfig (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in that kubeconfig (default: its current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Where to write the new kubeconfig (default: standard output).
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(cmd: KubeconfigCommand) -> anyhow::Result<()> {
    match cmd {
        KubeconfigCommand::GlobalView(args) => global_view(args),
    }
}

fn global_view(args: GlobalViewArgs) -> anyhow::Result<()> {
    let path = args
        .kubeconfig
        .or_else(|| std::env::var_os("KUBECONFIG").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config")))
        .context("no --kubeconfig, no $KUBECONFIG and no $HOME")?;
    let source = Kubeconfig::read_from(&path).with_context(|| format!("read {}", path.display()))?;
    let text = serde_saphyr::to_string(&global_view_of(source, args.context.as_deref())?).map_err(|e| anyhow::anyhow!("{e}"))?;
    match &args.output {
        Some(out) => {
            flotilla_apiserver::pki::write_kubeconfig(out, &text).with_context(|| format!("write {}", out.display()))?;
            eprintln!("flotilla: wrote {} (server: the global view of {})", out.display(), path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// The kubeconfig of one context (`context`, else the current one) with its cluster's server
/// pointed at the proxy path, named `<cluster>-global-view`.
fn global_view_of(source: Kubeconfig, context: Option<&str>) -> anyhow::Result<Kubeconfig> {
    let wanted = context.map(String::from).or_else(|| source.current_context.clone()).context("the kubeconfig names no current context; pass --context")?;
    let ctx = source.contexts.iter().find(|c| c.name == wanted).with_context(|| format!("no context {wanted:?} in the kubeconfig"))?.clone();
    let body = ctx.context.clone().with_context(|| format!("context {wanted:?} is empty"))?;
    let mut cluster =
        source.clusters.iter().find(|c| c.name == body.cluster).with_context(|| format!("no cluster {:?} in the kubeconfig", body.cluster))?.clone();
    let user = source.auth_infos.iter().find(|u| Some(&u.name) == body.user.as_ref()).cloned();
    let inner = cluster.cluster.as_mut().with_context(|| format!("cluster {:?} is empty", cluster.name))?;
    let server = inner.server.clone().with_context(|| format!("cluster {:?} has no server", cluster.name))?;
    if server.trim_end_matches('/').ends_with(PROXY_PATH) {
        anyhow::bail!("{server} is already the global view");
    }
    inner.server = Some(format!("{}{PROXY_PATH}", server.trim_end_matches('/')));
    cluster.name = format!("{}-global-view", cluster.name);
    let mut new_ctx = ctx.clone();
    new_ctx.name = format!("{wanted}-global-view");
    if let Some(c) = new_ctx.context.as_mut() {
        c.cluster = cluster.name.clone();
    }
    Ok(Kubeconfig {
        current_context: Some(new_ctx.name.clone()),
        clusters: vec![cluster],
        contexts: vec![new_ctx],
        auth_infos: user.into_iter().collect(),
        ..Kubeconfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_global_view_points_the_current_context_at_the_proxy() {
        let source = Kubeconfig::from_yaml(
            r#"
apiVersion: v1
kind: Config
current-context: admin
clusters:
- {name: flotilla, cluster: {server: "https://127.0.0.1:6443/", certificate-authority-data: Q0E=}}
- {name: other, cluster: {server: "https://10.0.0.1"}}
contexts:
- {name: admin, context: {cluster: flotilla, user: admin}}
- {name: else, context: {cluster: other, user: nobody}}
users:
- {name: admin, user: {token: secret}}
- {name: nobody, user: {token: x}}
"#,
        )
        .unwrap();
        let view = global_view_of(source.clone(), None).unwrap();
        assert_eq!(view.current_context.as_deref(), Some("admin-global-view"));
        let cluster = view.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        assert_eq!((view.contexts.len(), view.auth_infos.len(), view.auth_infos[0].name.as_str()), (1, 1, "admin"));
        assert_eq!(view.contexts[0].context.as_ref().unwrap().cluster, "flotilla-global-view");
        assert!(global_view_of(source.clone(), Some("missing")).unwrap_err().to_string().contains("missing"));
        assert!(global_view_of(view, None).unwrap_err().to_string().contains("already"));
    }
}
