//! The control-plane controllers `flotilla up` runs, each with an in-process client.

use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, Identity};
use tokio::task::JoinSet;

/// An in-process client acting as `user` in the `system:masters` group.
pub fn client(api: &ApiServer, user: &str) -> kube::Client {
    kube::Client::new(InProcess::new(api.router(), Identity::user(user, &["system:masters"])), "default")
}

pub fn start(api: &ApiServer) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let c = client(api, "system:flotilla:namespace-controller");
    set.spawn(flotilla_controllers::namespace::run(c, Default::default()));
    set
}
