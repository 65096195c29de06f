//! The native resource interpreter, one case file per operation under
//! `tests/data/interpreter/` (provenance of each case in its `source`; the README there).
//!
//! Every case names its input and either `want` (the expected answer, `null` meaning "no hook
//! for this kind") or `error` (a substring of the expected error).

use flotilla_api::federation::karmada::work::AggregatedStatusItem;
use flotilla_api::interpreter::{
    self, Features, aggregate_status, get_dependencies, get_replicas, interpret_health, job_completions, prune_for_work, reflect_status, retain,
    revise_job_completions, revise_replicas,
};
use serde_json::{Value, json};

fn cases(file: &str) -> Vec<Value> {
    let path = manifest_dir().join(format!("tests/data/interpreter/{file}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    cases.as_array().unwrap_or_else(|| panic!("{}: a list of cases", path.display())).clone()
}

/// Runs `run` on every case of `file` and compares with `want` / `error`; reports all
/// mismatches at once.
fn check(file: &str, run: impl Fn(&Value) -> Result<Value, String>) {
    let cases = cases(file);
    assert!(!cases.is_empty(), "{file}: no cases");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("(unnamed)");
        match (run(case), case.get("error").and_then(Value::as_str)) {
            (Ok(got), None) => {
                let want = case.get("want").cloned().unwrap_or(Value::Null);
                if got != want {
                    failures.push(format!("{name}:\n  want {}\n  got  {}", serde_json::to_string(&want).unwrap(), serde_json::to_string(&got).unwrap()));
                }
            }
            (Ok(got), Some(error)) => failures.push(format!("{name}: want an error containing {error:?}, got {got}")),
            (Err(e), Some(error)) if e.contains(error) => {}
            (Err(e), _) => failures.push(format!("{name}: unexpected error {e}")),
        }
    }
    assert!(failures.is_empty(), "{file}: {} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).expect("serialises")
}

#[test]
fn get_replicas_cases() {
    check("replicas.yaml", |case| {
        let features = Features { resource_quota_estimate: case["resourceQuotaEstimate"].as_bool().unwrap_or(false) };
        let got = interpreter::get_replicas_with(&case["object"], features).map_err(|e| e.to_string())?;
        Ok(got.map_or(Value::Null, |r| json!({ "replicas": r.replicas, "requirements": to_value(&r.requirements) })))
    });
}

#[test]
fn get_replicas_uses_v116_default_gates() {
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a", "namespace": "ns"},
        "spec": {"replicas": 1, "template": {"spec": {"priorityClassName": "high",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}
    });
    let requirements = get_replicas(&deployment).unwrap().unwrap().requirements.unwrap();
    assert_eq!((requirements.namespace, requirements.priority_class_name), (None, None));
}

#[test]
fn revise_cases() {
    check("revise.yaml", |case| {
        let obj = &case["object"];
        let got = match case["operation"].as_str() {
            Some("reviseReplicas") => revise_replicas(obj, case["replicas"].as_i64().unwrap()),
            Some("reviseJobCompletions") => revise_job_completions(obj, case["completions"].as_i64().unwrap()),
            Some("jobCompletions") => job_completions(obj).map(|c| c.map(Value::from)),
            other => panic!("unknown operation {other:?}"),
        };
        got.map(|v| v.unwrap_or(Value::Null)).map_err(|e| e.to_string())
    });
}

#[test]
fn prune_cases() {
    check("prune.yaml", |case| prune_for_work(&case["object"]).map_err(|e| e.to_string()));
}

#[test]
fn retain_cases() {
    check("retain.yaml", |case| retain(&case["desired"], &case["observed"]).map_err(|e| e.to_string()));
}

#[test]
fn reflect_status_cases() {
    check("reflect-status.yaml", |case| reflect_status(&case["object"]).map(|s| s.unwrap_or(Value::Null)).map_err(|e| e.to_string()));
}

#[test]
fn interpret_health_cases() {
    check("health.yaml", |case| Ok(to_value(interpret_health(&case["object"]))));
}

#[test]
fn aggregate_status_cases() {
    check("aggregate-status.yaml", |case| {
        let items: Vec<AggregatedStatusItem> = serde_json::from_value(case["items"].clone()).expect("items decode");
        let now = case["now"].as_str().unwrap_or("2026-01-01T00:00:00Z");
        match aggregate_status(&case["template"], &items, now).map_err(|e| e.to_string())? {
            None => Ok(json!({ "noAggregator": true })),
            Some(status) => Ok(status),
        }
    });
}

#[test]
fn dependencies_cases() {
    check("dependencies.yaml", |case| get_dependencies(&case["object"]).map(|d| d.map_or(Value::Null, to_value)).map_err(|e| e.to_string()));
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
