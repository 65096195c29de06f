//! What `propagation-bench` (in-process) and `propagation-compare` (side by side, over the API)
//! share: the templates and policies they create, and one run — templates created open loop or
//! as fast as 32 creators go, then every copy checked in its members and the latencies and
//! stages taken. Included by both with `#[path]`; not an example of its own.

#![allow(dead_code)] // each example uses part of it

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flotilla_sim::bench::{Arrivals, Errors, pct};
use kube::api::{Api, DynamicObject, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Namespace of the templates on the control plane (and of their copies in the members).
pub const NS: &str = "bench";
pub const PAIR_LABEL: &str = "bench.flotilla.io/pair";
pub const DUP_LABEL: &str = "bench.flotilla.io/duplicated";

pub fn deployment(name: &str, ns: &str, replicas: i64, labels: &[(&str, String)]) -> Value {
    let mut l = serde_json::Map::new();
    l.insert("app".into(), json!(name));
    for (k, v) in labels {
        l.insert((*k).into(), json!(v));
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": l},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

/// Pair `k` (members `a` and `b`): Divided, Weighted 1:1 — Karmada's quick-start placement.
pub fn pair_policy(k: usize, a: &str, b: &str) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": format!("pair-{k}"), "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {PAIR_LABEL: k.to_string()}}}],
            "placement": {
                "clusterAffinity": {"clusterNames": [a, b]},
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": [
                        {"targetCluster": {"clusterNames": [a]}, "weight": 1},
                        {"targetCluster": {"clusterNames": [b]}, "weight": 1}
                    ]}
                }
            }
        }
    })
}

pub fn duplicated_policy() -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "duplicated", "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {DUP_LABEL: "true"}}}],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Duplicated"}}
        }
    })
}

/// When each template passed the control plane's stages: its ResourceBinding seen, scheduled
/// (`spec.clusters` set), and its last Work seen (Works by key, and when the latest appeared).
#[derive(Default)]
pub struct Stages {
    pub binding: Mutex<HashMap<String, Instant>>,
    pub scheduled: Mutex<HashMap<String, Instant>>,
    pub works: Mutex<HashMap<String, (Vec<String>, Instant)>>,
}

/// What a run creates and where it must arrive.
pub struct RunSpec {
    pub label: &'static str,
    pub count: usize,
    /// Open loop at this many templates/s (latency from the scheduled time); `None`: 32
    /// creators as fast as they go (latency from the create call).
    pub rate: Option<f64>,
    pub replicas: i64,
    pub targets: Arc<dyn Fn(usize) -> Vec<usize> + Send + Sync>,
    pub labels: Arc<dyn Fn(usize) -> Vec<(&'static str, String)> + Send + Sync>,
    /// Replicas each target must hold, given how many targets there are.
    pub per_member: fn(i64, usize) -> i64,
}

/// What one run measured.
pub struct Driven {
    pub latencies: Vec<Duration>,
    /// p50/p99 of each stage's share: create → binding, → scheduled, → last Work, → last member.
    pub stages: Vec<(&'static str, Duration, Duration)>,
    /// From the first create to the last arrival.
    pub wall: Duration,
    /// From the first create to the last create call's end.
    pub created_span: Duration,
    /// Member copies expected in all.
    pub total_targets: usize,
}

/// Create the run's templates through `api` (Deployments in [`NS`]), wait until each is in
/// every target member (or `settle` after the last create), and check every copy: in its
/// targets only, with the replicas it must hold. Errors are prefixed with `prefix`; members are
/// named by `member`.
#[allow(clippy::too_many_arguments)]
pub async fn drive(
    api: Api<DynamicObject>,
    spec: &RunSpec,
    arrivals: &Arrivals,
    stages: &Stages,
    settle: Duration,
    errors: &Errors,
    prefix: &str,
    member: &dyn Fn(usize) -> String,
) -> Driven {
    let names: Vec<String> = (0..spec.count).map(|i| format!("{}-{i}", spec.label)).collect();
    let starts: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; spec.count]));
    let create_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let begin = Instant::now() + Duration::from_millis(20);
    let mut creators = tokio::task::JoinSet::new();
    let create = {
        let (labels, replicas, create_errors) = (spec.labels.clone(), spec.replicas, create_errors.clone());
        move |i: usize, name: String| {
            let (api, create_errors) = (api.clone(), create_errors.clone());
            let body = deployment(&name, NS, replicas, &labels(i));
            async move {
                let obj: DynamicObject = serde_json::from_value(body).expect("a valid Deployment");
                if let Err(e) = api.create(&PostParams::default(), &obj).await {
                    create_errors.lock().push(format!("create {NS}/{name}: {e}"));
                }
            }
        }
    };
    match spec.rate {
        Some(rate) => {
            for (i, name) in names.iter().cloned().enumerate() {
                let due = begin + Duration::from_secs_f64(i as f64 / rate);
                let (create, starts) = (create.clone(), starts.clone());
                creators.spawn(async move {
                    tokio::time::sleep_until(due.into()).await;
                    starts.lock()[i] = Some(due);
                    create(i, name).await;
                });
            }
        }
        None => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..32 {
                let (next, names, create, starts) = (next.clone(), names.clone(), create.clone(), starts.clone());
                creators.spawn(async move {
                    tokio::time::sleep_until(begin.into()).await;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= names.len() {
                            break;
                        }
                        starts.lock()[i] = Some(Instant::now());
                        create(i, names[i].clone()).await;
                    }
                });
            }
        }
    }
    // Progress while creating and settling.
    let expected: Vec<usize> = (0..spec.count).map(|i| (spec.targets)(i).len()).collect();
    let complete = |a: &Arrivals| names.iter().zip(&expected).filter(|(n, e)| a.count(n) >= **e).count();
    let mut last_report = Instant::now();
    let mut created_at = None;
    let mut deadline = None;
    loop {
        if deadline.is_none() {
            tokio::select! {
                r = creators.join_next() => if r.is_none() {
                    created_at = Some(Instant::now());
                    deadline = Some(Instant::now() + settle);
                } else {
                    continue
                },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let done = complete(arrivals);
        if last_report.elapsed() >= Duration::from_secs(5) {
            let created = starts.lock().iter().filter(|s| s.is_some()).count();
            println!("    … {}: {created}/{} created, {done} in every target member ({:.0}s)", spec.label, spec.count, begin.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        if deadline.is_some_and(|d| done == spec.count || Instant::now() > d) {
            break;
        }
    }
    for e in create_errors.lock().iter() {
        errors.add(format!("{prefix}{}: {e}", spec.label));
    }
    let starts = starts.lock().clone();
    let mut latencies = Vec::new();
    let mut parts: [Vec<Duration>; 4] = Default::default();
    let mut last_arrival = begin;
    for (i, name) in names.iter().enumerate() {
        let got = arrivals.of(name);
        let targets = (spec.targets)(i);
        let want = (spec.per_member)(spec.replicas, targets.len());
        let missing: Vec<String> = targets.iter().filter(|t| !got.iter().any(|(m, _, _)| m == *t)).map(|t| member(*t)).collect();
        if !missing.is_empty() {
            errors.add(format!("{prefix}{}: {NS}/{name} never arrived in {}", spec.label, missing.join(", ")));
            continue;
        }
        for (m, _, r) in &got {
            if !targets.contains(m) {
                errors.add(format!("{prefix}{}: {NS}/{name} arrived in {}, which is not a target", spec.label, member(*m)));
            } else if *r != want {
                errors.add(format!("{prefix}{}: {NS}/{name} has {r} replicas in {}, want {want}", spec.label, member(*m)));
            }
        }
        let last = got.iter().map(|(_, at, _)| *at).max().unwrap_or(begin);
        last_arrival = last_arrival.max(last);
        if let Some(s) = starts[i] {
            latencies.push(last.saturating_duration_since(s));
            let b = stages.binding.lock().get(name).copied();
            let sc = stages.scheduled.lock().get(name).copied();
            let w = stages.works.lock().get(name).map(|(_, at)| *at);
            if let (Some(b), Some(sc), Some(w)) = (b, sc, w) {
                parts[0].push(b.saturating_duration_since(s));
                parts[1].push(sc.saturating_duration_since(b));
                parts[2].push(w.saturating_duration_since(sc));
                parts[3].push(last.saturating_duration_since(w));
            }
        }
    }
    latencies.sort_unstable();
    let stage_names = ["create → binding", "binding → scheduled", "scheduled → last Work", "last Work → last member"];
    let stages = stage_names
        .into_iter()
        .zip(parts.iter_mut())
        .map(|(n, v)| {
            v.sort_unstable();
            (n, pct(v, 0.5), pct(v, 0.99))
        })
        .collect();
    Driven {
        latencies,
        stages,
        wall: last_arrival.saturating_duration_since(begin),
        created_span: created_at.map(|c| c.saturating_duration_since(begin)).unwrap_or_default(),
        total_targets: expected.iter().sum(),
    }
}
