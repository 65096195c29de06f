//! The control-plane controllers `flotilla up` runs, each with an in-process client.

use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, Identity};
use tokio::task::JoinSet;

/// An in-process client acting as `user` in the `system:masters` group.
pub fn client(api: &ApiServer, user: &str) -> kube::Client {
    kube::Client::new(InProcess::new(api.router(), Identity::user(user, &["system:masters"])), "default")
}

pub fn start(api: &ApiServer, settings: &crate::federation_args::FederationArgs) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let c = client(api, "system:flotilla:namespace-controller");
    set.spawn(flotilla_kube_controllers::namespace::run(c, Default::default()));
    let c = client(api, "system:flotilla:garbage-collector");
    set.spawn(flotilla_kube_controllers::garbage_collector::run(c, settings.garbage_collector()));
    let c = client(api, "system:flotilla:clusterrole-aggregation-controller");
    set.spawn(flotilla_kube_controllers::clusterrole_aggregation::run(c));
    start_federation(&mut set, settings, |name| client(api, &format!("system:flotilla:{name}")));
    set
}

/// The federation controllers (Karmada's controller manager), each with its own client.
pub fn start_federation(set: &mut JoinSet<()>, settings: &crate::federation_args::FederationArgs, client: impl Fn(&str) -> kube::Client) {
    use flotilla_controllers as c;
    let members = std::sync::Arc::new(flotilla_member::access::Clients::default());
    set.spawn(c::cluster::run(client(c::cluster::NAME), Default::default()));
    set.spawn(c::cluster_status::run(client(c::cluster_status::NAME), settings.cluster_status(), members.clone()));
    set.spawn(c::detector::run(client(c::detector::NAME), settings.detector()));
    set.spawn(c::binding::run(client(c::binding::NAME), settings.binding()));
    if settings.feature_gates.propagate_deps {
        set.spawn(c::dependencies::run(client(c::dependencies::NAME), settings.dependencies()));
    }
    if let Some(config) = settings.taint_manager() {
        set.spawn(c::taint_manager::run(client(c::taint_manager::NAME), config));
    }
    // Karmada starts it ungated; it acts only on bindings whose policy sets failover.application.
    set.spawn(c::application_failover::run(client(c::application_failover::NAME), Default::default()));
    if let Some(config) = settings.graceful_eviction() {
        set.spawn(c::graceful_eviction::run(client(c::graceful_eviction::NAME), config));
    }
    set.spawn(c::execution::run(client(c::execution::NAME), settings.execution(), members.clone()));
    set.spawn(c::work_status::run(client(c::work_status::NAME), settings.work_status(), members.clone()));
    set.spawn(c::namespace_sync::run(client(c::namespace_sync::NAME), Default::default()));
    set.spawn(c::policy_report::run(client(c::policy_report::NAME), settings.policy_report()));
    set.spawn(c::kubefed_sync::run(client(c::kubefed_sync::NAME), Default::default()));
    set.spawn(c::kubefed_cluster::run(client(c::kubefed_cluster::NAME), Default::default()));
    set.spawn(flotilla_scheduler::runner::run(client("scheduler"), settings.scheduler()));
    set.spawn(c::kubefed_rsp::run(client(c::kubefed_rsp::NAME), Default::default()));
}
