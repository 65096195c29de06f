//! The controllers Flotilla runs, as one named set ([`set`]): `flotilla up` starts the whole
//! set on in-process clients, `flotilla controllers` the federation's part against any host
//! API server; both select with `--controllers` (`*,-execution`) and print what they start.

use std::sync::Arc;

use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, Identity};
use flotilla_runtime::Runtime;
use flotilla_runtime::set::{ControllerSet, SelectError};
use tokio::task::JoinSet;

use crate::federation_args::FederationArgs;

/// An in-process client acting as `user` in the `system:masters` group.
pub fn client(api: &ApiServer, user: &str) -> kube::Client {
    kube::Client::new(InProcess::new(api.router(), Identity::user(user, &["system:masters"])), "default")
}

/// What every controller of the set starts from.
pub struct Context {
    pub settings: FederationArgs,
    /// A client acting as the named component.
    pub client: Arc<dyn Fn(&str) -> kube::Client + Send + Sync>,
    /// Member clients shared by the controllers that reach members.
    pub members: Arc<flotilla_member::access::Clients>,
    /// The shared informers and the shutdown signal.
    pub runtime: Runtime,
    /// The CA `csrsigning` issues client certificates from (`flotilla up`: the control plane's).
    pub signing: Option<flotilla_kube_controllers::csr_signing::SigningCa>,
    /// The global view's cache of member objects, which the `search` controller fills.
    pub search_cache: Arc<flotilla_controllers::search::cache::Cache>,
    /// Clients of a member's API through this control plane's cluster proxy (`flotilla up`
    /// only: how the global view reaches Pull clusters, over their agents' tunnels).
    pub via_proxy: Option<flotilla_controllers::search::ViaProxy>,
}

impl Context {
    fn client(&self, name: &str) -> kube::Client {
        (self.client)(name)
    }
}

/// Which part of the set a process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything: kube-controller-manager's controllers for Flotilla's own API too.
    All,
    /// The federation's controllers and the scheduler only (the host has its own
    /// kube-controller-manager).
    Federation,
}

/// Every controller, in start order, under the names `--controllers` takes: Karmada's for
/// Karmada's controllers, kube-controller-manager's for its own, and Flotilla's for the rest.
/// What a feature gate or flag turns off is off by default and may still be named.
pub fn set(settings: &FederationArgs, scope: Scope) -> ControllerSet<Context> {
    use flotilla_controllers as c;
    let mut s = ControllerSet::default();
    if scope == Scope::All {
        s.add(flotilla_kube_controllers::namespace::NAME, true, |cx: &Context| {
            Box::pin(flotilla_kube_controllers::namespace::run(cx.client(flotilla_kube_controllers::namespace::NAME), cx.runtime.clone(), Default::default()))
        });
        s.add("garbage-collector-controller", true, |cx: &Context| {
            Box::pin(flotilla_kube_controllers::garbage_collector::run(cx.client("garbage-collector"), cx.runtime.clone(), cx.settings.garbage_collector()))
        });
        s.add(flotilla_kube_controllers::clusterrole_aggregation::NAME, true, |cx: &Context| {
            Box::pin(flotilla_kube_controllers::clusterrole_aggregation::run(
                cx.client(flotilla_kube_controllers::clusterrole_aggregation::NAME),
                cx.runtime.clone(),
            ))
        });
        s.add(flotilla_kube_controllers::bootstrap_tokens::SIGNER, true, |cx: &Context| {
            Box::pin(flotilla_kube_controllers::bootstrap_tokens::run_signer(cx.client("system:controller:bootstrap-signer"), cx.runtime.clone()))
        });
        s.add(flotilla_kube_controllers::bootstrap_tokens::CLEANER, true, |cx: &Context| {
            Box::pin(flotilla_kube_controllers::bootstrap_tokens::run_cleaner(cx.client("system:controller:token-cleaner"), cx.runtime.clone()))
        });
        s.add(flotilla_kube_controllers::csr_signing::NAME, true, |cx: &Context| match cx.signing.clone() {
            Some(ca) => Box::pin(flotilla_kube_controllers::csr_signing::run(cx.client("system:controller:certificate-controller"), cx.runtime.clone(), ca)),
            None => Box::pin(async { tracing::warn!("csrsigning: no signing CA given; certificate requests stay unsigned") }),
        });
    }
    s.add("agentcsrapproving", true, |cx: &Context| Box::pin(c::agent_csr_approving::run(cx.client(c::agent_csr_approving::NAME), cx.runtime.clone())));
    s.add("cluster", true, |cx: &Context| Box::pin(c::cluster::run(cx.client(c::cluster::NAME), cx.runtime.clone(), Default::default())));
    s.add("clusterStatus", true, |cx: &Context| {
        Box::pin(c::cluster_status::run(cx.client(c::cluster_status::NAME), cx.runtime.clone(), cx.settings.cluster_status(), cx.members.clone()))
    });
    // Karmada starts it with the Failover gate.
    s.add(c::cluster_taint_policy::NAME, settings.feature_gates.failover, |cx: &Context| {
        Box::pin(c::cluster_taint_policy::run(cx.client(c::cluster_taint_policy::NAME), cx.runtime.clone()))
    });
    s.add(c::remedy::NAME, true, |cx: &Context| Box::pin(c::remedy::run(cx.client(c::remedy::COMPONENT), cx.runtime.clone())));
    s.add("detector", true, |cx: &Context| Box::pin(c::detector::run(cx.client(c::detector::NAME), cx.runtime.clone(), cx.settings.detector())));
    s.add("binding", true, |cx: &Context| Box::pin(c::binding::run(cx.client(c::binding::NAME), cx.runtime.clone(), cx.settings.binding())));
    s.add("dependenciesDistributor", settings.feature_gates.propagate_deps, |cx: &Context| {
        Box::pin(c::dependencies::run(cx.client(c::dependencies::NAME), cx.runtime.clone(), cx.settings.dependencies()))
    });
    s.add("taintManager", settings.taint_manager().is_some(), |cx: &Context| {
        Box::pin(c::taint_manager::run(cx.client(c::taint_manager::NAME), cx.runtime.clone(), cx.settings.taint_manager_settings()))
    });
    // Karmada starts it ungated; it acts only on bindings whose policy sets failover.application.
    s.add("applicationFailover", true, |cx: &Context| {
        Box::pin(c::application_failover::run(cx.client(c::application_failover::NAME), cx.runtime.clone(), cx.settings.application_failover()))
    });
    s.add("gracefulEviction", settings.graceful_eviction().is_some(), |cx: &Context| {
        Box::pin(c::graceful_eviction::run(cx.client(c::graceful_eviction::NAME), cx.runtime.clone(), cx.settings.graceful_eviction_settings()))
    });
    s.add("execution", true, |cx: &Context| {
        Box::pin(c::execution::run(cx.client(c::execution::NAME), cx.runtime.clone(), cx.settings.execution(), cx.members.clone()))
    });
    s.add("workStatus", true, |cx: &Context| {
        Box::pin(c::work_status::run(cx.client(c::work_status::NAME), cx.runtime.clone(), cx.settings.work_status(), cx.members.clone()))
    });
    s.add(c::work_tombstones::RECORDER, true, |cx: &Context| {
        Box::pin(c::work_tombstones::run_recorder(cx.client(c::work_tombstones::RECORDER), cx.runtime.clone()))
    });
    // A pull agent's alone: its one member swept against the tombstones of its execution space.
    s.add(c::work_tombstones::SWEEPER, false, |cx: &Context| {
        Box::pin(c::work_tombstones::run_sweeper(cx.client(c::work_tombstones::SWEEPER), cx.runtime.clone(), cx.settings.tombstone_sweep(), cx.members.clone()))
    });
    // A pull agent's alone: what it applied, recorded in its member (ADR 0032).
    s.add(c::edge_mirror::NAME, false, |cx: &Context| {
        Box::pin(c::edge_mirror::run(cx.client(c::edge_mirror::NAME), cx.runtime.clone(), cx.settings.edge_mirror(), cx.members.clone()))
    });
    // The control plane's decisions on what pull members changed while offline (ADR 0032).
    s.add(c::edge_sync::NAME, true, |cx: &Context| Box::pin(c::edge_sync::run(cx.client(c::edge_sync::NAME), cx.runtime.clone(), Default::default())));
    // Per Pull cluster, its connectivity and what became of its edge's changes (ADR 0032).
    s.add(c::edge_report::NAME, true, |cx: &Context| {
        Box::pin(c::edge_report::run(cx.client(c::edge_report::NAME), cx.runtime.clone(), cx.settings.edge_report()))
    });
    // Multi-cluster services, Karmada's MCS path (ADR 0037): reports of exported slices (in a
    // pull agent too), their control-plane copies, and the ServiceImports' derived Services.
    s.add("serviceExport", true, |cx: &Context| {
        Box::pin(c::mcs::export::run(cx.client(c::mcs::export::NAME), cx.runtime.clone(), Default::default(), cx.members.clone()))
    });
    s.add("endpointSlice", true, |cx: &Context| {
        Box::pin(c::mcs::import::run_endpoint_slices(cx.client(c::mcs::import::ENDPOINT_SLICE_NAME), cx.runtime.clone()))
    });
    s.add("serviceImport", true, |cx: &Context| {
        Box::pin(c::mcs::import::run_service_imports(cx.client(c::mcs::import::SERVICE_IMPORT_NAME), cx.runtime.clone()))
    });
    // MultiClusterService's CrossCluster path (Karmada gates it Alpha, off; Flotilla: on). Its
    // collection is the serviceExport controller's (Karmada's endpointsliceCollect), which
    // reports a provider's slices once this puts the marker in its execution space.
    s.add("multiclusterservice", settings.feature_gates.multi_cluster_service, |cx: &Context| {
        Box::pin(c::mcs::cross_cluster::run_services(cx.client(c::mcs::cross_cluster::SERVICE_NAME_CONTROLLER), cx.runtime.clone()))
    });
    s.add("endpointsliceDispatch", settings.feature_gates.multi_cluster_service, |cx: &Context| {
        Box::pin(c::mcs::cross_cluster::run_dispatch(cx.client(c::mcs::cross_cluster::DISPATCH_NAME), cx.runtime.clone()))
    });
    s.add("namespace", true, |cx: &Context| Box::pin(c::namespace_sync::run(cx.client(c::namespace_sync::NAME), cx.runtime.clone(), Default::default())));
    s.add("policyReport", true, |cx: &Context| {
        Box::pin(c::policy_report::run(cx.client(c::policy_report::NAME), cx.runtime.clone(), cx.settings.policy_report()))
    });
    if scope == Scope::All {
        // karmada-search's cache; its reader is this API server's `search/cache` handler.
        s.add(c::search::NAME, true, |cx: &Context| {
            Box::pin(c::search::start(
                cx.client(c::search::NAME),
                &cx.runtime,
                cx.settings.search(),
                cx.members.clone(),
                cx.search_cache.clone(),
                cx.via_proxy.clone(),
            ))
        });
    }
    s.add("kubefedSync", true, |cx: &Context| Box::pin(c::kubefed_sync::run(cx.client(c::kubefed_sync::NAME), cx.runtime.clone(), Default::default())));
    s.add("kubefedCluster", true, |cx: &Context| {
        Box::pin(c::kubefed_cluster::run(cx.client(c::kubefed_cluster::NAME), cx.runtime.clone(), Default::default()))
    });
    s.add(flotilla_scheduler::runner::NAME, true, |cx: &Context| {
        Box::pin(flotilla_scheduler::runner::run(cx.client(flotilla_scheduler::runner::NAME), cx.runtime.clone(), cx.settings.scheduler()))
    });
    // KubeFed v0.6.1's multi-cluster DNS: record statuses and their DNSEndpoints (ADR 0037).
    s.add("kubefedDns", true, |cx: &Context| {
        Box::pin(c::kubefed_dns::run(cx.client(c::kubefed_dns::NAME), cx.runtime.clone(), cx.settings.kubefed_dns(), cx.members.clone()))
    });
    s.add("replicaSchedulingPreference", true, |cx: &Context| {
        Box::pin(c::kubefed_rsp::run(cx.client(c::kubefed_rsp::NAME), cx.runtime.clone(), Default::default()))
    });
    s
}

/// The controllers a process runs. Dropping it stops them (and their shared watches).
pub struct Running {
    pub tasks: JoinSet<()>,
    /// What was started, in order.
    pub names: Vec<&'static str>,
    pub runtime: Runtime,
    /// The global view's cache (empty unless the `search` controller runs).
    pub search_cache: Arc<flotilla_controllers::search::cache::Cache>,
}

impl Running {
    /// Signal shutdown, let reconciles in flight finish (at most `grace`), then stop the rest.
    pub async fn shutdown(mut self, grace: std::time::Duration) {
        self.runtime.shutdown.cancel();
        let _ = tokio::time::timeout(grace, async { while self.tasks.join_next().await.is_some() {} }).await;
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.runtime.shutdown.cancel();
    }
}

/// The controllers `settings.controllers` selects from `scope`'s set, started on `client`'s
/// clients (the shared watches as the component `informers`).
pub fn start_selected(
    settings: &FederationArgs,
    scope: Scope,
    client: Arc<dyn Fn(&str) -> kube::Client + Send + Sync>,
    signing: Option<flotilla_kube_controllers::csr_signing::SigningCa>,
    via_proxy: Option<flotilla_controllers::search::ViaProxy>,
) -> Result<Running, SelectError> {
    flotilla_apiserver::metrics::add_source(flotilla_runtime::metrics::render);
    let all = set(settings, scope);
    let chosen = all.select(&settings.controllers)?;
    let runtime = Runtime::new(client("informers"));
    let search_cache = Arc::new(flotilla_controllers::search::cache::Cache::new(settings.search_cache_limit));
    if scope == Scope::All {
        search_cache.register_metrics();
        flotilla_apiserver::metrics::add_source(flotilla_controllers::search::cache::render_metrics);
    }
    let cx = Context {
        settings: settings.clone(),
        client,
        members: Arc::new(flotilla_member::access::Clients::default()),
        runtime,
        signing,
        search_cache,
        via_proxy,
    };
    Ok(spawn(&chosen, &cx))
}

/// Start each of `chosen` on `cx`.
fn spawn(chosen: &[&flotilla_runtime::set::Entry<Context>], cx: &Context) -> Running {
    let mut tasks = JoinSet::new();
    let mut names = Vec::new();
    for entry in chosen {
        tasks.spawn(entry.start(cx));
        names.push(entry.name);
    }
    Running { tasks, names, runtime: cx.runtime.clone(), search_cache: cx.search_cache.clone() }
}

/// The controllers a pull agent runs for its own cluster — the control plane's own cluster
/// status, execution and work status controllers, on `members` (the agent's in-member clients)
/// and a runtime whose watches see only the agent's part (`scope`) — and the agent's own check
/// of its member against tombstones after an outage and its record in the member of what it
/// applied (ADR 0032; the agent runs the edge recorder itself, from its start).
pub const AGENT_CONTROLLERS: &str = "clusterStatus,execution,workStatus,tombstoneSweep,edgeMirror,serviceExport";

/// Start a pull agent's controllers: [`AGENT_CONTROLLERS`] of `settings`' set, every client
/// `client` (the agent's identity), member access through `members`.
pub fn start_agent(
    settings: &FederationArgs,
    client: kube::Client,
    members: flotilla_member::access::Clients,
    scope: flotilla_runtime::WatchScope,
) -> Result<Running, SelectError> {
    let all = set(settings, Scope::Federation);
    let chosen = all.select(AGENT_CONTROLLERS)?;
    let runtime = Runtime::scoped(client.clone(), scope);
    let search_cache = Arc::new(flotilla_controllers::search::cache::Cache::new(0));
    let cx = Context {
        settings: settings.clone(),
        client: Arc::new(move |_: &str| client.clone()),
        members: Arc::new(members),
        runtime,
        signing: None,
        search_cache,
        via_proxy: None,
    };
    Ok(spawn(&chosen, &cx))
}

/// Everything `settings` selects, on in-process clients of `api` (`system:flotilla:<name>`),
/// `csrsigning` issuing from `signing` (none: requests stay unsigned).
pub fn start(api: &ApiServer, settings: &FederationArgs, signing: Option<flotilla_kube_controllers::csr_signing::SigningCa>) -> Result<Running, SelectError> {
    let via_proxy = {
        let api = api.clone();
        let via: flotilla_controllers::search::ViaProxy = Arc::new(move |cluster: &str| through_proxy(&api, cluster));
        Some(via)
    };
    let api = api.clone();
    start_selected(settings, Scope::All, Arc::new(move |name: &str| client(&api, &format!("system:flotilla:{name}"))), signing, via_proxy)
}

/// An in-process client of `cluster`'s API through this server's cluster proxy
/// (`clusters/{cluster}/proxy`, over the agent's tunnel for a Pull cluster), as the global
/// view's controller. The router is held weakly: the server holds the controllers.
fn through_proxy(api: &ApiServer, cluster: &str) -> kube::Client {
    let prefix = format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy");
    let inner = InProcess::new(api.detached_router(), Identity::user("system:flotilla:search", &["system:masters"]));
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            if let Ok(uri) = format!("{prefix}{path}").parse() {
                *req.uri_mut() = uri;
            }
            req
        })
        .service(inner);
    kube::Client::new(service, "default")
}

/// `controllers: a, b, c` and, when any is off, `(off: x, y)`.
pub fn describe(settings: &FederationArgs, scope: Scope, started: &[&str]) -> String {
    let off: Vec<&str> = set(settings, scope).names().into_iter().filter(|n| !started.contains(n)).collect();
    let mut line = format!("{} controllers running: {}", started.len(), started.join(", "));
    if !off.is_empty() {
        line.push_str(&format!(" (off: {})", off.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_has_karmadas_and_kube_controller_managers_names_and_gates() {
        let settings = FederationArgs::default();
        let names = set(&settings, Scope::All).names();
        for n in
            ["namespace-controller", "garbage-collector-controller", "cluster", "clusterStatus", "binding", "execution", "workStatus", "namespace", "scheduler"]
        {
            assert!(names.contains(&n), "{n} in {names:?}");
        }
        let fed = set(&settings, Scope::Federation).names();
        assert!(!fed.contains(&"namespace-controller") && fed.contains(&"execution"));
        let on: Vec<&str> = set(&settings, Scope::All).select("*,-execution").unwrap().iter().map(|e| e.name).collect();
        assert!(!on.contains(&"execution") && on.contains(&"workStatus"));
        assert!(!on.contains(&"taintManager") && !on.contains(&"clusterTaintPolicy"), "the Failover gate is off by default");
        assert!(on.contains(&"gracefulEviction") && on.contains(&"dependenciesDistributor"));
        assert_eq!(describe(&settings, Scope::Federation, &["cluster"]).split(" (off: ").count(), 2);
    }
}
