//! Flotilla's own wiring handed to `flotilla-testkit` (the control plane, the controller set and
//! the Push join of `flotilla up --demo`), for the tests that run a kit world in this process.

use std::path::Path;
use std::sync::Arc;

use clap::Parser;
use flotilla::federation_args::FederationArgs;
use flotilla_apiserver::ApiServer;
use flotilla_sim::MemberConfig;
use flotilla_store::Store;

pub struct Flotilla;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    federation: FederationArgs,
}

impl flotilla_testkit::Platform for Flotilla {
    type Controllers = flotilla::controllers::Running;

    async fn control_plane(&self, store: Arc<dyn Store>) -> anyhow::Result<ApiServer> {
        Ok(flotilla::control_plane::start(store, Default::default()).await?.0)
    }

    fn start_controllers(&self, api: &ApiServer, flags: &[String]) -> anyhow::Result<Self::Controllers> {
        let args = Flags::try_parse_from(std::iter::once("flotilla-up".to_string()).chain(flags.iter().cloned()))?;
        Ok(flotilla::controllers::start(api, &args.federation, None)?)
    }

    async fn join(&self, member: &MemberConfig, kubeconfig: &Path, cp: &kube::Client) -> anyhow::Result<()> {
        flotilla::demo::join_member(member, kubeconfig, cp).await
    }
}
