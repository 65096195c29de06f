//! `flotilla enable`, `flotilla disable` and `flotilla federate`: `kubefedctl
//! enable/disable/federate` against the control plane (the work is in [`flotilla::kubefed`]).

use flotilla::kubefed::{self, EnableOptions, FederateOptions};
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
    if let Some(note) = kubefed::member_role_gap(&plan) {
        eprintln!("note: {note}");
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

#[derive(clap::Args, Debug)]
pub struct FederateArgs {
    /// The type: kind, plural, singular, short name or plural.group (`deployment`, `cm`).
    type_name: String,
    /// The object's name.
    name: String,
    /// The object's namespace (namespaced types).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Enable the type first (`flotilla enable`) when it is not enabled yet.
    #[arg(short = 't', long)]
    enable_type: bool,
    /// For a namespace: also federate every object in it (except endpoints, events, objects a
    /// controller owns, and the control plane's own bindings and Works).
    #[arg(short = 'c', long)]
    contents: bool,
    /// With --contents: more resources to skip (short name, kind, plural, plural.group or a
    /// whole group), comma separated.
    #[arg(short = 's', long, value_delimiter = ',')]
    skip_api_resources: Vec<String>,
    /// Print the federated objects instead of creating them (`-o yaml`).
    #[arg(short = 'o', long = "output", value_parser = ["yaml"])]
    output: Option<String>,
    /// How long to retry creating each object while its type is not served yet.
    #[arg(long, default_value = "10s", value_parser = flotilla::federation_args::parse_duration)]
    create_timeout: std::time::Duration,
    /// The KubeFed system namespace.
    #[arg(long, default_value = DEFAULT_SYSTEM_NAMESPACE)]
    kubefed_namespace: String,
    #[command(flatten)]
    control_plane: ControlPlane,
}

pub async fn federate(args: FederateArgs) -> anyhow::Result<()> {
    let client = args.control_plane.client().await?;
    let options = FederateOptions {
        namespace: args.namespace,
        enable_type: args.enable_type,
        contents: args.contents,
        skip: args.skip_api_resources,
        kubefed_namespace: args.kubefed_namespace,
    };
    let print_only = args.output.is_some();
    let planned = kubefed::plan_federate(&client, &args.type_name, &args.name, &options, print_only).await?;
    if print_only {
        let docs: Vec<serde_json::Value> = planned.into_iter().map(|f| f.object).collect();
        print!("{}", serde_saphyr::to_string_multiple(&docs)?);
        return Ok(());
    }
    kubefed::create_federated(&client, &planned, args.create_timeout).await?;
    for f in &planned {
        println!("{} created", f.display);
    }
    Ok(())
}
