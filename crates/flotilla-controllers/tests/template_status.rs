//! The binding controller's template-status write against an in-process API server: for any
//! sequence of member statuses, the template's status after each write is the aggregate of the
//! latest member statuses — a counter no member reports any more is gone, never left over from
//! an earlier state (field report: `unavailableReplicas: 1` stayed on a Deployment template
//! long after both members were ready, because the status was merge-patched).
//!
//! A property test with a printed seed and case count: `FLOTILLA_TEST_SEED` replays a run,
//! `FLOTILLA_PROPTEST_CASES` sets the number of cases (default 48).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;

use flotilla_api::federation::karmada::work::AggregatedStatusItem;
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_controllers::binding::{TemplateStatus, write_template_status};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

/// A Deployment status's counters that the aggregate sums; Go omits each when zero.
const COUNTERS: [&str; 5] = ["replicas", "readyReplicas", "updatedReplicas", "availableReplicas", "unavailableReplicas"];

fn seed() -> u64 {
    std::env::var("FLOTILLA_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random)
}

fn cases() -> u32 {
    std::env::var("FLOTILLA_PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)
}

/// One member's reported Deployment status, consistent as a real member's is (updated, ready and
/// available within replicas, available within ready) and, as Go writes it, without zeros.
fn member_status() -> impl Strategy<Value = Map<String, Value>> {
    (0i64..4)
        .prop_flat_map(|replicas| (Just(replicas), 0..=replicas, 0..=replicas, 0i64..4))
        .prop_flat_map(|(replicas, updated, ready, unavailable)| (Just((replicas, updated, ready, unavailable)), 0..=ready))
        .prop_map(|((replicas, updated, ready, unavailable), available)| {
            let mut m = Map::new();
            for (field, v) in COUNTERS.iter().zip([replicas, ready, updated, available, unavailable]) {
                if v != 0 {
                    m.insert((*field).into(), json!(v));
                }
            }
            m.insert("observedGeneration".into(), json!(1));
            m.insert("generation".into(), json!(1));
            m.insert("resourceTemplateGeneration".into(), json!(1));
            m
        })
}

/// A sequence of rounds; each round is every member's latest status (one to three members).
fn rounds() -> impl Strategy<Value = Vec<Vec<Map<String, Value>>>> {
    (1usize..=3).prop_flat_map(|members| proptest::collection::vec(proptest::collection::vec(member_status(), members), 1..6))
}

/// What the template's status must be: each counter summed over the latest statuses and present
/// only when not zero, and the template's generation observed (every member caught up).
fn expected(latest: &[Map<String, Value>]) -> Value {
    let mut out = BTreeMap::new();
    for field in COUNTERS {
        let sum: i64 = latest.iter().filter_map(|s| s.get(field).and_then(Value::as_i64)).sum();
        if sum != 0 {
            out.insert(field.to_string(), json!(sum));
        }
    }
    out.insert("observedGeneration".into(), json!(1));
    serde_json::to_value(out).unwrap()
}

fn items(latest: &[Map<String, Value>]) -> Vec<AggregatedStatusItem> {
    latest
        .iter()
        .enumerate()
        .map(|(i, s)| AggregatedStatusItem {
            cluster_name: format!("member{}", i + 1),
            status: Some(Value::Object(s.clone())),
            applied: Some(true),
            ..Default::default()
        })
        .collect()
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
        },
    })
}

#[test]
fn the_template_status_is_the_aggregate_of_the_latest_member_statuses() {
    let (seed, cases) = (seed(), cases());
    // Written past the test harness's capture, so the test command's log shows them.
    let _ = writeln!(std::io::stderr(), "template_status: seed {seed}, {cases} cases (replay with FLOTILLA_TEST_SEED={seed} FLOTILLA_PROPTEST_CASES={cases})");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (api, _server) = rt.block_on(async {
        let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
        let server = ApiServer::new(store, ApiServerConfig::default());
        server.bootstrap().await.unwrap();
        let client = Client::new(InProcess::new(server.router(), Identity::user("flotilla-test", &["system:masters"])), "default");
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
        (Api::<DynamicObject>::namespaced_with(client, "default", &ar), server)
    });
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));
    let case = std::sync::atomic::AtomicU32::new(0);
    let result = runner.run(&rounds(), |rounds| {
        let name = format!("web-{}", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        rt.block_on(async {
            let body: DynamicObject = serde_json::from_value(deployment(&name)).unwrap();
            api.create(&PostParams::default(), &body).await.unwrap();
            for (round, latest) in rounds.iter().enumerate() {
                let template = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
                let outcome = write_template_status(&api, &template, &items(latest)).await.unwrap();
                prop_assert!(matches!(outcome, TemplateStatus::Written | TemplateStatus::Unchanged), "round {round}: {outcome:?}");
                let stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
                prop_assert_eq!(stored.get("status").cloned().unwrap_or(json!({})), expected(latest), "round {}: member statuses {:?}", round, latest);
            }
            api.delete(&name, &Default::default()).await.unwrap();
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}\nreplay with FLOTILLA_TEST_SEED={seed} FLOTILLA_PROPTEST_CASES={cases}");
    }
}

/// The same for a kind whose aggregate drops fields rather than zeroing counters: a CronJob's
/// `active` list and `lastScheduleTime` leave the template once no member reports them.
#[tokio::test]
async fn a_cron_job_template_loses_what_no_member_reports_any_more() {
    let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let server = ApiServer::new(store, ApiServerConfig::default());
    server.bootstrap().await.unwrap();
    let client = Client::new(InProcess::new(server.router(), Identity::user("flotilla-test", &["system:masters"])), "default");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("batch", "v1", "CronJob"));
    let api = Api::<DynamicObject>::namespaced_with(client, "default", &ar);
    let cron: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "default"},
        "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &cron).await.unwrap();
    let running = json!({"active": [{"kind": "Job", "namespace": "default", "name": "nightly-1", "apiVersion": "batch/v1"}],
                         "lastScheduleTime": "2026-12-01T00:00:00Z"});
    for (member_status, want) in [(running.clone(), running), (json!({}), json!({}))] {
        let template = serde_json::to_value(api.get("nightly").await.unwrap()).unwrap();
        let item = AggregatedStatusItem { cluster_name: "member1".into(), status: Some(member_status), applied: Some(true), ..Default::default() };
        write_template_status(&api, &template, &[item]).await.unwrap();
        let stored = serde_json::to_value(api.get("nightly").await.unwrap()).unwrap();
        assert_eq!(stored.get("status").cloned().unwrap_or(json!({})), want);
    }
}
