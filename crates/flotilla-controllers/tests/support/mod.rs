//! What the controllers' integration tests share: an in-process control plane (API server on a
//! memory store with the federation CRDs), a member of the shared testenv joined with Flotilla's
//! least-privilege identity, Work fixtures, and a poll with a generous deadline.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::federation::karmada::work::{Work, WorkSpec, WorkloadTemplate};
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_member::join::{JoinOptions, MemberEndpoint, clean_member, prepare_member, register};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio::task::JoinSet;

pub const DEADLINE: Duration = Duration::from_secs(60);

/// An in-process control plane with the federation CRDs. Keep the value alive: the router
/// lives in it.
pub struct ControlPlane {
    pub _api: ApiServer,
    pub client: Client,
    pub controllers: JoinSet<()>,
    /// The controllers' shared informers; cancelled when the control plane is dropped.
    pub rt: flotilla_runtime::Runtime,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.rt.shutdown.cancel();
    }
}

pub async fn control_plane() -> ControlPlane {
    // RUST_LOG=flotilla_controllers=debug shows what the controllers did.
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    api.install_crds(flotilla_api::federation::crds()).await.unwrap();
    let client = Client::new(InProcess::new(api.router(), Identity::user("flotilla-test", &["system:masters"])), "default");
    let rt = flotilla_runtime::Runtime::new(client.clone());
    ControlPlane { _api: api, client, controllers: JoinSet::new(), rt }
}

/// The execution controller with short retries.
pub fn execution_config() -> flotilla_controllers::execution::Config {
    flotilla_controllers::execution::Config {
        not_ready_requeue: Duration::from_secs(1),
        retry_base: Duration::from_millis(200),
        retry_max: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Poll `check` until it returns Some, failing with `what` after the deadline.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn condition<'a>(work: &'a Work, type_: &str) -> Option<&'a Condition> {
    work.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

pub fn work(name: &str, namespace: &str, manifests: Vec<Value>) -> Work {
    let mut w = Work::new(name, WorkSpec { workload: Some(WorkloadTemplate { manifests: Some(manifests) }), ..Default::default() });
    w.metadata.namespace = Some(namespace.into());
    w
}

pub fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// A testenv member joined to `client`'s control plane as `cluster`, with a namespace of its
/// own in the member; [`Joined::clean`] removes both.
pub struct Joined {
    pub member: Client,
    pub cluster: String,
    pub namespace: String,
}

impl Joined {
    /// Join `m` with the least-privilege identity and create the member namespace.
    pub async fn join(m: &flotilla_testenv::Member, client: &Client, cluster: &str, namespace: &str) -> Joined {
        let member = m.client().await;
        let joined = Joined { member: member.clone(), cluster: cluster.into(), namespace: namespace.into() };
        let opts =
            JoinOptions { cluster: cluster.into(), token_wait: Duration::from_secs(10), token_lifetime: Duration::from_secs(3600), ..Default::default() };
        let creds = prepare_member(&member, &opts, &mut |_| {}).await.unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&m.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        register(client, &opts, &MemberEndpoint::from_config(&config), &creds).await.unwrap();
        let namespaces: Api<Namespace> = Api::all(member);
        namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap()).await.unwrap();
        joined
    }

    pub async fn clean(&self) {
        let namespaces: Api<Namespace> = Api::all(self.member.clone());
        let _ = namespaces.delete(&self.namespace, &DeleteParams::background()).await;
        let _ = clean_member(&self.member, &self.cluster).await;
    }
}
