//! `flotilla explain KIND/NAME`: why a template's binding is placed where it is. Runs the
//! scheduler's pure `schedule()` on the binding and the control plane's clusters as they are now
//! and prints, per cluster, which filter plugin kept or dropped it and the replicas it gets.

use anyhow::{Context, bail};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::binding_name;
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding};
use flotilla_scheduler::binding::BindingView;
use flotilla_scheduler::explain::explain_text;
use flotilla_scheduler::schedule::{ScheduleOptions, schedule};
use flotilla_scheduler::snapshot::Snapshot;
use kube::api::{Api, ListParams};

use crate::join_cmd::ControlPlane;

#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The template: KIND/NAME, with the kind as kubectl takes it (`deployment/nginx`,
    /// `deploy/nginx`, `federateddeployment/web`).
    target: String,
    /// Namespace of a namespaced template.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    control_plane: ControlPlane,
}

pub async fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let Some((kind, name)) = args.target.split_once('/') else { bail!("expected KIND/NAME (e.g. deployment/nginx), got {:?}", args.target) };
    let client = args.control_plane.client().await?;
    let resources = flotilla::kubefed::discover(&client, None).await?;
    let found = flotilla_api::federation::kubefed::enable::resolve(kind, &resources, None).map_err(|e| anyhow::anyhow!("{kind}: {e}"))?;
    let binding = binding_name(&found.kind, name);
    let clusters: Vec<Cluster> = Api::<Cluster>::all(client.clone()).list(&ListParams::default()).await.context("listing clusters")?.items;
    let snapshot = Snapshot::new(clusters);
    let options = ScheduleOptions::default();
    let text = if found.namespaced {
        let rb = Api::<ResourceBinding>::namespaced(client.clone(), &args.namespace)
            .get_opt(&binding)
            .await
            .context("reading the binding")?
            .with_context(|| format!("no ResourceBinding {}/{binding}: is {kind}/{name} selected by a propagation policy?", args.namespace))?;
        let view = BindingView::from(&rb);
        explain_text(&view, &schedule(&view, &snapshot, &options))
    } else {
        let crb = Api::<ClusterResourceBinding>::all(client.clone())
            .get_opt(&binding)
            .await
            .context("reading the binding")?
            .with_context(|| format!("no ClusterResourceBinding {binding}: is {kind}/{name} selected by a cluster propagation policy?"))?;
        let view = BindingView::from(&crb);
        explain_text(&view, &schedule(&view, &snapshot, &options))
    };
    print!("{text}");
    Ok(())
}
