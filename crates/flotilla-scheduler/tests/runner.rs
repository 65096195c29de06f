//! The runner against an in-process Flotilla API server (no sockets): clusters and bindings go
//! in through `kube::Client`, and the tests wait for the scheduler's writes — `spec.clusters`,
//! the `Scheduled` condition, the observed generation, Events. Every wait polls for an outcome
//! under a generous deadline; nothing asserts how long anything took.

mod fixtures;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fixtures::{ClusterBuilder, binding, cluster, label_affinity, names_affinity};
use flotilla_api::federation::karmada::cluster::{ApiEnablement, ApiResource, Cluster};
use flotilla_api::federation::karmada::policy::SpreadByField;
use flotilla_api::federation::karmada::work::{
    BindingSuspension, ClusterResourceBinding, ClusterResourceBindingSpec, ObjectReference, ResourceBinding, ResourceBindingSpec, TargetCluster,
};
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_runtime::{CancellationToken, Runtime};
use flotilla_scheduler::runner::metrics::Metrics;
use flotilla_scheduler::runner::{self, Config};
use flotilla_store::Store;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// An API server with the federation CRDs and a running scheduler; cancelling on drop stops it.
struct Env {
    client: kube::Client,
    metrics: Metrics,
    stop: CancellationToken,
    _api: ApiServer,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Creates `clusters` (status included), then starts the scheduler: its first list holds them
/// whole, so no test depends on how soon the scheduler's cache catches up with a write.
async fn start(clusters: impl IntoIterator<Item = ClusterBuilder>) -> Env {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    api.install_crds(flotilla_api::federation::crds()).await.unwrap();
    let client = kube::Client::new(InProcess::new(api.router(), Identity::user("system:flotilla:scheduler", &["system:masters"])), "default");
    for builder in clusters {
        create_cluster(&client, builder).await;
    }
    let config = Config {
        workers: 2,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        unschedulable_retry: Duration::from_millis(500),
        ..Config::default()
    };
    let scheduler = runner::Scheduler::new(client.clone(), config).unwrap();
    let metrics = scheduler.metrics().clone();
    let rt = Runtime::new(client.clone());
    let stop = rt.shutdown.clone();
    tokio::spawn(scheduler.run(rt));
    Env { client, metrics, stop, _api: api }
}

/// Polls `probe` until it yields a value; panics with the last observation after the deadline.
async fn eventually<T, O: Debug, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, O>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => panic!("{what}: never happened; last saw {last:?}"),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// A Ready cluster serving Deployments and Namespaces, its status written through `/status`.
async fn create_cluster(client: &kube::Client, builder: ClusterBuilder) {
    let mut wanted = builder.build();
    let status = wanted.status.get_or_insert_with(Default::default);
    status
        .api_enablements
        .get_or_insert_with(Vec::new)
        .push(ApiEnablement { group_version: "v1".into(), resources: Some(vec![ApiResource { name: "namespaces".into(), kind: "Namespace".into() }]) });
    status.conditions = Some(vec![Condition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: "ClusterReady".into(),
        message: "cluster is healthy and ready to accept workloads".into(),
        observed_generation: None,
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
    }]);
    let status = json!({ "status": wanted.status.take() });
    let api: Api<Cluster> = Api::all(client.clone());
    let name = wanted.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &wanted).await.unwrap();
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

/// m1 and m2 in eu, m3 in us, all labelled env=prod.
fn three_clusters() -> Vec<ClusterBuilder> {
    [("m1", "eu"), ("m2", "eu"), ("m3", "us")].map(|(name, region)| cluster(name).region(region).label("env", "prod")).into()
}

fn rbs(client: &kube::Client) -> Api<ResourceBinding> {
    Api::namespaced(client.clone(), "default")
}

async fn create(client: &kube::Client, rb: &ResourceBinding) {
    rbs(client).create(&PostParams::default(), rb).await.unwrap();
}

fn targets(clusters: Option<&Vec<TargetCluster>>) -> Vec<(String, Option<i32>)> {
    clusters.into_iter().flatten().map(|t| (t.name.clone(), t.replicas)).collect()
}

fn want(pairs: &[(&str, Option<i32>)]) -> Vec<(String, Option<i32>)> {
    pairs.iter().map(|(n, r)| (n.to_string(), *r)).collect()
}

fn scheduled_condition(rb: &ResourceBinding) -> Option<&Condition> {
    rb.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Scheduled")
}

/// Waits until binding `name` is scheduled onto `expected` and has observed its generation.
async fn scheduled_onto(client: &kube::Client, name: &str, expected: &[(&str, Option<i32>)]) -> ResourceBinding {
    let expected = want(expected);
    let api = rbs(client);
    eventually(&format!("{name} scheduled onto {expected:?}"), || {
        let api = api.clone();
        let expected = expected.clone();
        async move {
            let rb = api.get(name).await.map_err(|e| format!("{e}"))?;
            let observed = rb.status.as_ref().and_then(|s| s.scheduler_observed_generation);
            let ok = targets(rb.spec.clusters.as_ref()) == expected
                && scheduled_condition(&rb).is_some_and(|c| c.status == "True")
                && observed == rb.metadata.generation;
            if ok { Ok(rb) } else { Err(format!("clusters {:?}, status {:?}", rb.spec.clusters, rb.status)) }
        }
    })
    .await
}

/// Waits for the `Scheduled` condition of binding `name` to have `reason`.
async fn condition_reason(client: &kube::Client, name: &str, reason: &str) -> ResourceBinding {
    let api = rbs(client);
    eventually(&format!("{name} Scheduled reason {reason}"), || {
        let api = api.clone();
        async move {
            let rb = api.get(name).await.map_err(|e| format!("{e}"))?;
            if scheduled_condition(&rb).is_some_and(|c| c.reason == reason) { Ok(rb) } else { Err(format!("{:?}", rb.status)) }
        }
    })
    .await
}

/// Waits for Events with `reason` about the object `kind`/`name`, and returns them.
async fn events(client: &kube::Client, reason: &str, kind: &str, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::all(client.clone());
    eventually(&format!("{reason} on {kind} {name}"), || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await.map_err(|e| format!("{e}"))?;
            let about = |e: &Event| e.involved_object.kind.as_deref() == Some(kind) && e.involved_object.name.as_deref() == Some(name);
            let found: Vec<Event> = list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason) && about(e)).collect();
            if found.is_empty() { Err("none yet".to_string()) } else { Ok(found) }
        }
    })
    .await
}

async fn set_replicas(client: &kube::Client, name: &str, replicas: i32) {
    let patch = json!({ "spec": { "replicas": replicas } });
    rbs(client).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_binding_goes_to_every_cluster_with_status_and_events() {
    let env = start(three_clusters()).await;
    let rb = binding().name("web-deployment").replicas(2).duplicated().build();
    create(&env.client, &rb).await;

    let rb = scheduled_onto(&env.client, "web-deployment", &[("m1", Some(2)), ("m2", Some(2)), ("m3", Some(2))]).await;
    let condition = scheduled_condition(&rb).unwrap();
    assert_eq!((condition.reason.as_str(), condition.message.as_str()), ("Success", "Binding has been scheduled successfully."));
    assert!(rb.status.as_ref().unwrap().last_scheduled_time.is_some());
    let applied = rb.metadata.annotations.as_ref().unwrap().get("policy.karmada.io/applied-placement").unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(applied).unwrap(), serde_json::to_value(rb.spec.placement.as_ref().unwrap()).unwrap());

    let on_binding = events(&env.client, "ScheduleBindingSucceed", "ResourceBinding", "web-deployment").await;
    assert_eq!(on_binding[0].message.as_deref(), Some("Binding has been scheduled successfully. Result: {m1:2, m2:2, m3:2}"));
    assert_eq!(on_binding[0].type_.as_deref(), Some("Normal"));

    let mut registry = prometheus_client::registry::Registry::default();
    env.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains(r#"flotilla_scheduler_schedule_attempts_total{result="scheduled",schedule_type="ReconcileSchedule"}"#), "{text}");
    events(&env.client, "ScheduleBindingSucceed", "Deployment", "nginx").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divided_by_static_weights_and_rescheduled_on_scale() {
    let env = start(three_clusters()).await;
    let rb = binding().name("api-deployment").replicas(12).static_weights(&[("m1", 3), ("m2", 2), ("m3", 1)]).build();
    create(&env.client, &rb).await;
    scheduled_onto(&env.client, "api-deployment", &[("m1", Some(6)), ("m2", Some(4)), ("m3", Some(2))]).await;

    set_replicas(&env.client, "api-deployment", 14).await;
    scheduled_onto(&env.client, "api-deployment", &[("m1", Some(7)), ("m2", Some(5)), ("m3", Some(2))]).await;

    set_replicas(&env.client, "api-deployment", 6).await;
    scheduled_onto(&env.client, "api-deployment", &[("m1", Some(3)), ("m2", Some(2)), ("m3", Some(1))]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cluster_fits_sets_no_cluster_fit_and_a_warning() {
    let env = start(three_clusters()).await;
    let rb = binding().name("lost-deployment").replicas(3).divided().affinity(names_affinity(&["nowhere"])).build();
    create(&env.client, &rb).await;

    let rb = condition_reason(&env.client, "lost-deployment", "NoClusterFit").await;
    let condition = scheduled_condition(&rb).unwrap();
    assert_eq!(condition.status, "False");
    assert_eq!(condition.message, "0/3 clusters are available: 3 cluster(s) did not match the placement cluster affinity constraint.");
    assert_eq!(rb.spec.clusters, None, "nothing scheduled");
    let warnings = events(&env.client, "ScheduleBindingFailed", "ResourceBinding", "lost-deployment").await;
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(warnings[0].message.as_deref(), Some(condition.message.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placement_that_stops_fitting_withdraws_the_result_as_karmada_does() {
    let env = start(three_clusters()).await;
    let rb = binding().name("moving-deployment").replicas(2).duplicated().affinity(names_affinity(&["m1"])).build();
    create(&env.client, &rb).await;
    scheduled_onto(&env.client, "moving-deployment", &[("m1", Some(2))]).await;

    let patch = json!({ "spec": { "placement": { "clusterAffinity": { "clusterNames": ["nowhere"] } } } });
    rbs(&env.client).patch("moving-deployment", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let rb = eventually("result withdrawn", || async {
        let rb = rbs(&env.client).get("moving-deployment").await.map_err(|e| format!("{e}"))?;
        let unfit = scheduled_condition(&rb).is_some_and(|c| c.reason == "NoClusterFit");
        if unfit && rb.spec.clusters.as_deref().unwrap_or_default().is_empty() { Ok(rb) } else { Err(format!("{:?} {:?}", rb.spec.clusters, rb.status)) }
    })
    .await;
    assert_eq!(scheduled_condition(&rb).unwrap().status, "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_label_changes_reschedule_matching_bindings() {
    let env = start([cluster("m1").label("env", "prod"), cluster("m2").label("env", "prod"), cluster("m3").label("env", "dev")]).await;
    let rb = binding().name("prod-deployment").replicas(1).duplicated().affinity(label_affinity("env", "prod")).build();
    create(&env.client, &rb).await;
    scheduled_onto(&env.client, "prod-deployment", &[("m1", Some(1)), ("m2", Some(1))]).await;

    let relabel = json!({ "metadata": { "labels": { "env": "prod" } } });
    Api::<Cluster>::all(env.client.clone()).patch("m3", &PatchParams::default(), &Patch::Merge(&relabel)).await.unwrap();
    scheduled_onto(&env.client, "prod-deployment", &[("m1", Some(1)), ("m2", Some(1)), ("m3", Some(1))]).await;

    // A cluster joins as Karmada's cluster controller has it join: tainted not-ready until its
    // status is in, then untainted — a spec change, which reschedules.
    create_cluster(&env.client, cluster("m4").label("env", "prod").taint("cluster.karmada.io/not-ready", "NoSchedule")).await;
    let untaint = json!({ "spec": { "taints": [] } });
    Api::<Cluster>::all(env.client.clone()).patch("m4", &PatchParams::default(), &Patch::Merge(&untaint)).await.unwrap();
    scheduled_onto(&env.client, "prod-deployment", &[("m1", Some(1)), ("m2", Some(1)), ("m3", Some(1)), ("m4", Some(1))]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_schedulers_and_suspended_bindings_are_left_alone_until_resumed() {
    let env = start(three_clusters()).await;
    let mut foreign = binding().name("foreign-deployment").replicas(1).duplicated().build();
    foreign.spec.scheduler_name = Some("other-scheduler".into());
    let mut suspended = binding().name("suspended-deployment").replicas(1).duplicated().build();
    suspended.spec.suspension = Some(BindingSuspension { scheduling: Some(true), ..Default::default() });
    let ours = binding().name("ours-deployment").replicas(1).duplicated().build();
    for rb in [&foreign, &suspended, &ours] {
        create(&env.client, rb).await;
    }
    scheduled_onto(&env.client, "ours-deployment", &[("m1", Some(1)), ("m2", Some(1)), ("m3", Some(1))]).await;
    for name in ["foreign-deployment", "suspended-deployment"] {
        let rb = rbs(&env.client).get(name).await.unwrap();
        assert_eq!((rb.spec.clusters.as_ref(), scheduled_condition(&rb)), (None, None), "{name} untouched");
    }

    let resume = json!({ "spec": { "suspension": { "scheduling": false } } });
    rbs(&env.client).patch("suspended-deployment", &PatchParams::default(), &Patch::Merge(&resume)).await.unwrap();
    scheduled_onto(&env.client, "suspended-deployment", &[("m1", Some(1)), ("m2", Some(1)), ("m3", Some(1))]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_resource_binding_for_a_non_workload() {
    let env = start(three_clusters()).await;
    let mut crb = ClusterResourceBinding::new(
        "team-a-namespace",
        ClusterResourceBindingSpec(ResourceBindingSpec {
            resource: ObjectReference { api_version: "v1".into(), kind: "Namespace".into(), name: "team-a".into(), ..Default::default() },
            placement: Some(Default::default()),
            ..Default::default()
        }),
    );
    crb.metadata.labels = Some([("clusterpropagationpolicy.karmada.io/permanent-id".to_string(), "cpp-id".to_string())].into());
    let api: Api<ClusterResourceBinding> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &crb).await.unwrap();

    let crb = eventually("CRB scheduled onto every cluster", || async {
        let crb = api.get("team-a-namespace").await.map_err(|e| format!("{e}"))?;
        let names = targets(crb.spec.0.clusters.as_ref());
        let scheduled = crb.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == "Scheduled" && c.status == "True");
        if scheduled && names == want(&[("m1", None), ("m2", None), ("m3", None)]) { Ok(crb) } else { Err(format!("{:?}", crb.spec.0.clusters)) }
    })
    .await;
    assert!(crb.status.unwrap().last_scheduled_time.is_some());
    let events = events(&env.client, "ScheduleBindingSucceed", "ClusterResourceBinding", "team-a-namespace").await;
    assert_eq!(events[0].message.as_deref(), Some("Binding has been scheduled successfully. Result {m1:0, m2:0, m3:0}"));
}

async fn set_room(client: &kube::Client, cluster: &str, pods: i64) {
    let patch = json!({ "status": { "resourceSummary": { "allocatable": { "pods": pods.to_string() } } } });
    Api::<Cluster>::all(client.clone()).patch_status(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_replicas_wait_in_the_pool_and_are_retried() {
    let env = start(["m1", "m2", "m3"].map(|name| cluster(name).room(1))).await;
    let rb = binding().name("big-deployment").replicas(12).dynamic().build();
    create(&env.client, &rb).await;
    let rb = condition_reason(&env.client, "big-deployment", "Unschedulable").await;
    assert_eq!(
        scheduled_condition(&rb).unwrap().message,
        "failed to assign replicas: failed to scale up: Clusters available replicas 3 are not enough to schedule."
    );
    assert_eq!(rb.spec.clusters, None);

    // Room is status: no event queues the binding, the unschedulable pool's retry does.
    set_room(&env.client, "m1", 100).await;
    scheduled_onto(&env.client, "big-deployment", &[("m1", Some(12))]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_triggered_at_divides_afresh() {
    let env = start([("m1", 0), ("m2", 8), ("m3", 10)].map(|(name, room)| cluster(name).room(room))).await;
    // Scheduled onto m1 before its room ran out: steady scheduling keeps it there.
    let rb = binding().name("steady-deployment").replicas(12).dynamic().scheduled(&[("m1", 12)]).build();
    create(&env.client, &rb).await;
    scheduled_onto(&env.client, "steady-deployment", &[("m1", Some(12))]).await;

    // A rebalance asked for after the last schedule (what a WorkloadRebalancer writes).
    let last = json!({ "status": { "lastScheduledTime": "2025-01-01T00:00:00Z" } });
    rbs(&env.client).patch_status("steady-deployment", &PatchParams::default(), &Patch::Merge(&last)).await.unwrap();
    let trigger = json!({ "spec": { "rescheduleTriggeredAt": "2025-01-02T00:00:00Z" } });
    rbs(&env.client).patch("steady-deployment", &PatchParams::default(), &Patch::Merge(&trigger)).await.unwrap();
    let rb = scheduled_onto(&env.client, "steady-deployment", &[("m1", Some(5)), ("m2", Some(3)), ("m3", Some(4))]).await;
    let last = rb.status.unwrap().last_scheduled_time.unwrap();
    assert!(last.0 > "2025-01-02T00:00:00Z".parse().unwrap(), "lastScheduledTime moves past the trigger");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_affinities_fall_through_and_record_the_term() {
    let env = start(three_clusters()).await;
    let rb = binding()
        .name("failover-deployment")
        .replicas(2)
        .duplicated()
        .affinity_terms(&[("primary", names_affinity(&["nowhere"])), ("backup", names_affinity(&["m2"]))])
        .build();
    create(&env.client, &rb).await;
    let rb = scheduled_onto(&env.client, "failover-deployment", &[("m2", Some(2))]).await;
    assert_eq!(rb.status.unwrap().scheduler_observing_affinity_name.as_deref(), Some("backup"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmeetable_spread_constraint_is_a_scheduler_error() {
    let env = start(three_clusters()).await;
    let rb = binding().name("spread-deployment").replicas(3).dynamic().spread(SpreadByField::Cluster, 4, 4).build();
    create(&env.client, &rb).await;
    let rb = condition_reason(&env.client, "spread-deployment", "SchedulerError").await;
    let condition = scheduled_condition(&rb).unwrap();
    assert_eq!(condition.status, "False");
    assert_eq!(condition.message, "failed to select clusters: the number of feasible clusters is less than spreadConstraint.MinGroups");
    assert_eq!(rb.spec.clusters, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_target_cluster_hands_its_replicas_to_the_rest() {
    let env = start(three_clusters()).await;
    let rb = binding().name("shared-deployment").replicas(12).static_weights(&[("m1", 3), ("m2", 2), ("m3", 1)]).build();
    create(&env.client, &rb).await;
    scheduled_onto(&env.client, "shared-deployment", &[("m1", Some(6)), ("m2", Some(4)), ("m3", Some(2))]).await;

    Api::<Cluster>::all(env.client.clone()).delete("m3", &Default::default()).await.unwrap();
    scheduled_onto(&env.client, "shared-deployment", &[("m1", Some(7)), ("m2", Some(5))]).await;
}
