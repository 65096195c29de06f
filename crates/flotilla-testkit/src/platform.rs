//! What the kit cannot build itself. The control plane's bootstrap, the named controller set and
//! the Push join are the binary crate's wiring (`flotilla::control_plane`, `flotilla::controllers`,
//! `flotilla::demo`), and no crate may depend on the binary (ADR 0022); so the test that uses the
//! kit — in the binary crate's `tests/` — hands them over by implementing [`Platform`].

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use flotilla_apiserver::ApiServer;
use flotilla_sim::MemberConfig;
use flotilla_store::Store;

/// The control plane the kit runs scenarios against.
pub trait Platform: Sync + 'static {
    /// The running controllers; dropping it stops them.
    type Controllers: Send + 'static;

    /// The control plane's API server on `store`, bootstrapped, with the federation CRDs
    /// installed (what `flotilla up` serves). The kit calls it once per process on an empty
    /// store and then, for each world, on a copy of what that left (as `flotilla up` restarts).
    fn control_plane(&self, store: Arc<dyn Store>) -> impl Future<Output = anyhow::Result<ApiServer>>;

    /// Start the controller set on in-process clients of `api`. `flags` are `flotilla up`'s
    /// federation flags, spelt `--name=value` or `--name`: the kit's short timings
    /// ([`crate::world::FAST_FLAGS`]) with the scenario's own in their place where it names the
    /// same flag.
    fn start_controllers(&self, api: &ApiServer, flags: &[String]) -> anyhow::Result<Self::Controllers>;

    /// Join a started simulated member, reached through `kubeconfig`, to the control plane `cp`
    /// in Push mode, as `flotilla join` joins a cluster.
    fn join(&self, member: &MemberConfig, kubeconfig: &Path, cp: &kube::Client) -> impl Future<Output = anyhow::Result<()>>;
}
