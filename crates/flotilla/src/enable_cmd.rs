//! `flotilla enable` and `flotilla disable`: `kubefedctl enable/disable` against the control
//! plane (the work is in [`flotilla::kubefed`]).

use flotilla::kubefed::{self, EnableOptions};
use flotilla_api::federation::kubefed::core::DEFAULT_SYSTEM_NAMESPACE;
use flotilla_api::federation::kubefed::types::{DEFAULT_FEDERATED_GROUP, DEFAULT_FEDERATED_VERSION};

use crate::join_cmd::ControlPlane;

#[derive(clap::Args, Debug)]
pub struct EnableArgs {
    /// The type: kind, plural, singular, short name or plural.group (`deployments.apps`,
    /// `VirtualService`, `vs`), as served by the control plane's discovery.
    name: String,
    /// Group of the generated federated type.
    #[arg(long, default_value = DEFAULT_FEDERATED_GROUP)]
    federated_group: String,
    /// Version of the generated federated type.
    #[arg(long, default_value = DEFAULT_FEDERATED_VERSION)]
    federated_version: String,
    /// Version of the target type (default: its group's preferred version).
    #[arg(long = "version", value_name = "VERSION")]
    target_version: Option<String>,
    /// Print the FederatedTypeConfig and CRD instead of creating them (`-o yaml`).
    #[arg(short = 'o', long = "output", value_parser = ["yaml"])]
    output: Option<String>,
    /// The KubeFed system namespace.
    #[arg(long, default_value = DEFAULT_SYSTEM_NAMESPACE)]
    kubefed_namespace: String,
    #[command(flatten)]
    control_plane: ControlPlane,
}

#[derive(clap::Args, Debug)]
pub struct DisableArgs {
    /// The FederatedTypeConfig's name (`deployments.apps`) or any name `enable` accepts.
    name: String,
    /// Also delete the federated type's CRD (refused while objects of that type exist).
    #[arg(long)]
    delete_crd: bool,
    /// The KubeFed system namespace.
    #[arg(long, default_value = DEFAULT_SYSTEM_NAMESPACE)]
    kubefed_namespace: String,
    #[command(flatten)]
    control_plane: ControlPlane,
}

pub async fn enable(args: EnableArgs) -> anyhow::Result<()> {
    let client = args.control_plane.client().await?;
    let options = EnableOptions {
        federated_group: args.federated_group,
        federated_version: args.federated_version,
        target_version: args.target_version,
        namespace: args.kubefed_namespace,
    };
    let plan = kubefed::plan_enable(&client, &args.name, &options).await?;
    if args.output.is_some() {
        print!("{}", plan.to_yaml()?);
        return Ok(());
    }
    let done = kubefed::apply_enable(&client, &plan).await?;
    let ftc = plan.ftc.metadata.name.as_deref().unwrap_or_default();
    println!("customresourcedefinition.apiextensions.k8s.io/{} {}", plan.crd_name(), done.crd.as_str());
    println!("federatedtypeconfig.core.kubefed.io/{ftc} {} in namespace {}", done.ftc.as_str(), options.namespace);
    // TODO(issue 8): widen the joined members' roles for the target kind (Flotilla's member
    // identity cannot grant itself more; until then, say what is missing and how to add it).
    if let Some(kind) = kubefed::member_role_gap(&plan) {
        eprintln!(
            "note: the member role `flotilla join` creates does not cover {kind}; for each member run `flotilla join NAME --kubeconfig MEMBER.kubeconfig --allow-kinds {kind}` (with the kinds it already allows) before objects of this type can reach it"
        );
    }
    Ok(())
}

pub async fn disable(args: DisableArgs) -> anyhow::Result<()> {
    let client = args.control_plane.client().await?;
    let done = kubefed::disable(&client, &args.name, &args.kubefed_namespace, args.delete_crd).await?;
    println!("federatedtypeconfig.core.kubefed.io/{} deleted from namespace {}", done.ftc, args.kubefed_namespace);
    if let Some(crd) = done.crd {
        println!("customresourcedefinition.apiextensions.k8s.io/{crd} deleted");
    }
    Ok(())
}
