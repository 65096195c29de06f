//! What CRD validation rules may cost, as kube-apiserver bounds it: a rule whose estimated
//! cost is over the limit is refused with its CRD; at run time one evaluation may cost at most
//! 1,000,000 and one request's rules 10,000,000 together; and evaluations run off the async
//! workers, so other requests are answered meanwhile.
//!
//! Security review: a CRD with a nested `all()` over an unbounded list was accepted, and one
//! create of a 600-item object stalled the whole server for 62 s (a `/readyz` on another
//! connection took 61.6 s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_store::Store;
use http::StatusCode;
use serde_json::{Value, json};

mod support;
use support::call;

const NESTED: &str = "self.l.all(x, self.l.all(y, x == y))";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const GIZMOS: &str = "/apis/cost.example.com/v1/namespaces/default/gizmos";

async fn server() -> ApiServer {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig { crd_retry: Duration::from_millis(100), ..ApiServerConfig::default() });
    api.bootstrap().await.unwrap();
    api
}

fn admin() -> Identity {
    Identity::user("admin", &["system:masters"])
}

/// The Gizmo CRD with `spec` as given.
fn crd(spec: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.cost.example.com"},
        "spec": {
            "group": "cost.example.com",
            "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}],
        },
    })
}

/// A list of at most 1000 short strings, with `rules` on `spec`.
fn bounded_list(rules: &[&str]) -> Value {
    let rules: Vec<Value> = rules.iter().map(|r| json!({"rule": r})).collect();
    json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 10}}}, "x-kubernetes-validations": rules})
}

fn gizmo(name: &str, items: usize) -> Value {
    json!({"apiVersion": "cost.example.com/v1", "kind": "Gizmo", "metadata": {"name": name}, "spec": {"l": vec!["a"; items]}})
}

/// Create the CRD and wait until its objects are served.
async fn establish(api: &ApiServer, crd: Value) {
    let (code, _, body) = call(api, "POST", CRDS, Some(admin()), Some(crd), &[]).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while call(api, "GET", GIZMOS, Some(admin()), None, &[]).await.0 != StatusCode::OK {
        assert!(Instant::now() < deadline, "the CRD's objects were never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

#[tokio::test]
async fn the_reviews_rule_is_refused_with_its_crd_for_its_estimated_cost() {
    let api = server().await;
    let unbounded =
        json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}}, "x-kubernetes-validations": [{"rule": NESTED}]});
    let (code, _, body) = call(&api, "POST", CRDS, Some(admin()), Some(crd(unbounded)), &[]).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let rule = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    let causes = body["details"]["causes"].as_array().cloned().unwrap_or_default();
    assert!(
        causes.contains(&json!({"reason": "FieldValueForbidden", "field": rule, "message": format!("Forbidden: estimated rule cost exceeds budget by factor of more than 100x {HINT}")})),
        "{body}"
    );
    assert!(
        causes.iter().any(|c| c["field"] == "spec.validation.openAPIV3Schema"
            && c["message"].as_str().unwrap_or("").contains("estimated rule cost total for entire OpenAPIv3 schema")),
        "{body}"
    );
    // Bounded, the same rule is within the limit; a few times over it, the factor is named.
    let (code, _, body) = call(&api, "POST", &format!("{CRDS}?dryRun=All"), Some(admin()), Some(crd(bounded_list(&[NESTED]))), &[]).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
    let mut larger = bounded_list(&[NESTED]);
    larger["properties"]["l"]["maxItems"] = json!(2000);
    let (code, _, body) = call(&api, "POST", CRDS, Some(admin()), Some(crd(larger)), &[]).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["causes"][0]["message"], format!("Forbidden: estimated rule cost exceeds budget by factor of 3.6x {HINT}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_its_limit_is_refused_before_it_runs() {
    let api = server().await;
    establish(&api, crd(bounded_list(&[NESTED]))).await;
    let before = resident_bytes();
    let (code, _, body) = call(&api, "POST", GIZMOS, Some(admin()), Some(gizmo("large", 1000)), &[]).await;
    let grown = resident_bytes().saturating_sub(before);
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = format!(
        "Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {NESTED}"
    );
    assert_eq!(body["details"]["causes"], json!([{"reason": "FieldValueInvalid", "field": "spec", "message": message}]), "{body}");
    assert!(grown < 64 << 20, "the refusal cost {} MiB", grown >> 20);
    let (code, _, body) = call(&api, "POST", GIZMOS, Some(admin()), Some(gizmo("small", 10)), &[]).await;
    assert_eq!(code, StatusCode::CREATED, "{body}");
}

/// Eleven rules that each cost a little under the per-call limit over 400 items: ten fit the
/// request's budget, and while they run a `/readyz` is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_runs_out_of_budget_and_other_requests_are_answered_meanwhile() {
    let api = server().await;
    establish(&api, crd(bounded_list(&[NESTED; 11]))).await;
    let done = Arc::new(AtomicBool::new(false));
    let create = {
        let (api, done) = (api.clone(), done.clone());
        tokio::spawn(async move {
            let r = call(&api, "POST", GIZMOS, Some(admin()), Some(gizmo("costly", 400)), &[]).await;
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    // Once the server reports the validation running, a probe must be answered before it ends.
    let mut answered_during = 0;
    while !done.load(Ordering::SeqCst) {
        let (_, _, metrics) = call(&api, "GET", "/metrics", Some(admin()), None, &[]).await;
        if metrics.as_str().unwrap_or_default().lines().any(|l| l == "flotilla_apiserver_heavy_requests_in_flight 1") {
            let (code, _, _) = call(&api, "GET", "/readyz", None, None, &[]).await;
            assert_eq!(code, StatusCode::OK);
            if !done.load(Ordering::SeqCst) {
                answered_during += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (code, _, body) = create.await.unwrap();
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = "Invalid value: \"object\": validation failed due to running out of cost budget, no further validation rules will be run";
    assert_eq!(body["details"]["causes"], json!([{"reason": "FieldValueInvalid", "field": "spec", "message": message}]), "{body}");
    assert!(answered_during > 0, "no /readyz was answered while the rules ran");
}
