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
    if found.namespaced && flotilla_controllers::kubefed_rsp::target_resource(&found.kind).is_some() {
        print!("{}", rsp_text(&client, &found.kind, &args.namespace, name).await?);
    }
    Ok(())
}

/// For a FederatedDeployment or FederatedReplicaSet scaled by a ReplicaSchedulingPreference: the
/// replicas per cluster its controller wrote (the `/spec/replicas` overrides of the placed
/// clusters); empty without one.
async fn rsp_text(client: &kube::Client, kind: &str, namespace: &str, name: &str) -> anyhow::Result<String> {
    use flotilla_api::federation::kubefed::scheduling::ReplicaSchedulingPreference;
    use flotilla_controllers::kubefed_rsp::{REPLICAS_PATH, target_resource};
    let Some(rsp) =
        Api::<ReplicaSchedulingPreference>::namespaced(client.clone(), namespace).get_opt(name).await.context("reading the ReplicaSchedulingPreference")?
    else {
        return Ok(String::new());
    };
    let head = format!("ReplicaSchedulingPreference {namespace}/{name} (totalReplicas {})", rsp.spec.total_replicas);
    if rsp.spec.target_kind != kind {
        return Ok(format!("{head}: targets {}, not {kind}\n", rsp.spec.target_kind));
    }
    let Some(ar) = target_resource(kind) else { return Ok(String::new()) };
    let fed = Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), namespace, &ar).get(name).await.context("reading the federated object")?;
    let spec = flotilla_api::federation::kubefed::render::federated_spec(&fed.data).map_err(anyhow::Error::msg)?;
    let placed = spec.placement.and_then(|p| p.clusters).unwrap_or_default();
    let overrides = spec.overrides.unwrap_or_default();
    let per_cluster: Vec<String> = placed
        .iter()
        .map(|c| {
            let replicas = overrides
                .iter()
                .filter(|o| o.cluster_name.as_deref() == Some(c.name.as_str()))
                .flat_map(|o| o.cluster_overrides.iter().flatten())
                .find(|o| o.path == REPLICAS_PATH)
                .and_then(|o| o.value.as_ref())
                .map_or_else(|| "?".to_string(), ToString::to_string);
            format!("{}:{replicas}", c.name)
        })
        .collect();
    Ok(format!("{head} -> {}\n", per_cluster.join(", ")))
}
