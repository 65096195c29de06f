//! `events.k8s.io/v1` and core `v1` Events are one stored object, as on kube-apiserver: what is
//! written through one API is read, listed, watched, selected, updated and deleted through the
//! other, with the same resourceVersion, and managedFields keep the apiVersion they were
//! written with.

use std::sync::Arc;

use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_store::Store;
use http::StatusCode;
use serde_json::{Value, json};

mod support;
use support::call;

const CORE: &str = "/api/v1/namespaces/default/events";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

async fn server() -> ApiServer {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let api = ApiServer::new(store, ApiServerConfig::default());
    api.bootstrap().await.unwrap();
    api
}

fn admin() -> Option<Identity> {
    Some(Identity::user("admin", &["system:masters"]))
}

fn rv(obj: &Value) -> &str {
    obj["metadata"]["resourceVersion"].as_str().unwrap()
}

/// The objects of a finished watch stream, by event type.
fn watched(body: &Value) -> Vec<(String, Value)> {
    let text = body.as_str().map(str::to_owned).unwrap_or_else(|| body.to_string());
    text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).map(|e| (e["type"].as_str().unwrap().to_owned(), e["object"].clone())).collect()
}

#[tokio::test]
async fn a_core_event_is_an_events_k8s_io_event() {
    let api = server().await;
    let (code, _, list) = call(&api, "GET", EVENTS, admin(), None, &[]).await;
    assert_eq!(code, StatusCode::OK, "{list}");
    let start = rv(&list).to_owned();

    // Written as a controller writes it: core v1.
    let core = json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm1", "namespace": "default"},
        "reason": "Synced", "message": "all good", "type": "Normal", "count": 3,
        "source": {"component": "flotilla-controller"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
    });
    let (code, _, created) = call(&api, "POST", &format!("{CORE}?fieldManager=creator"), admin(), Some(core), &[]).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");

    let (code, _, ev) = call(&api, "GET", &format!("{EVENTS}/e1"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::OK, "{ev}");
    assert_eq!(ev["apiVersion"], "events.k8s.io/v1");
    assert_eq!(rv(&ev), rv(&created));
    assert_eq!(ev["note"], "all good");
    assert_eq!(ev["regarding"]["name"], "cm1");
    assert_eq!(ev["deprecatedSource"]["component"], "flotilla-controller");
    assert_eq!(ev["deprecatedCount"], 3);
    assert_eq!(ev["deprecatedFirstTimestamp"], "2026-01-01T00:00:00Z");
    assert_eq!(ev["deprecatedLastTimestamp"], "2026-01-01T00:01:00Z");
    assert_eq!(ev["eventTime"], Value::Null);
    for core_only in ["message", "involvedObject", "source", "count", "firstTimestamp", "lastTimestamp", "reportingComponent"] {
        assert!(ev.get(core_only).is_none(), "{core_only} in {ev}");
    }
    // Empty core reporting fields are left out, as the events.k8s.io encoder leaves them.
    assert!(ev.get("reportingController").is_none() && ev.get("reportingInstance").is_none(), "{ev}");
    assert_eq!(ev["metadata"]["managedFields"][0]["apiVersion"], "v1");

    // Listed and selected by events.k8s.io's own field names.
    let (code, _, list) = call(&api, "GET", &format!("{EVENTS}?fieldSelector=regarding.name%3Dcm1,reason%3DSynced"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::OK, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["items"][0]["note"], "all good");
    let (_, _, none) = call(&api, "GET", &format!("{EVENTS}?fieldSelector=regarding.name%3Dother"), admin(), None, &[]).await;
    assert_eq!(none["items"].as_array().unwrap().len(), 0, "{none}");
    let (_, _, by_source) = call(&api, "GET", &format!("{EVENTS}?fieldSelector=source%3Dflotilla-controller"), admin(), None, &[]).await;
    assert_eq!(by_source["items"].as_array().unwrap().len(), 1, "{by_source}");
    let (code, _, bad) = call(&api, "GET", &format!("{EVENTS}?fieldSelector=involvedObject.name%3Dcm1"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}");
    assert_eq!(bad["message"], "field label not supported: involvedObject.name");

    // Updated through events.k8s.io: the core view sees the change at the same revision.
    let mut update = ev.clone();
    update["note"] = json!("changed");
    update["deprecatedCount"] = json!(4);
    let (code, _, updated) = call(&api, "PUT", &format!("{EVENTS}/e1?fieldManager=events-writer"), admin(), Some(update), &[]).await;
    assert_eq!(code, StatusCode::OK, "{updated}");
    assert_eq!(updated["note"], "changed");
    let (_, _, core_view) = call(&api, "GET", &format!("{CORE}/e1"), admin(), None, &[]).await;
    assert_eq!(core_view["apiVersion"], "v1");
    assert_eq!(rv(&core_view), rv(&updated));
    assert_eq!(core_view["message"], "changed");
    assert_eq!(core_view["count"], 4);
    assert_eq!(core_view["source"]["component"], "flotilla-controller");
    assert!(core_view.get("note").is_none() && core_view.get("regarding").is_none(), "{core_view}");
    let version_of =
        |manager: &str| core_view["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == manager).map(|e| e["apiVersion"].clone());
    assert_eq!(version_of("events-writer"), Some(json!("events.k8s.io/v1")), "{core_view}");
    assert_eq!(version_of("creator"), Some(json!("v1")), "{core_view}");
    // The core manager lost the fields the events.k8s.io write changed (in its own names).
    let creator = core_view["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == "creator").unwrap();
    let owned = creator["fieldsV1"].as_object().unwrap();
    assert!(owned.contains_key("f:reason") && owned.contains_key("f:involvedObject"), "{creator}");
    assert!(!owned.contains_key("f:message") && !owned.contains_key("f:count") && !owned.contains_key("f:note"), "{creator}");

    // Patched through core: the events.k8s.io view sees it.
    let patch = json!({"message": "patched"});
    let (code, _, patched) = call(&api, "PATCH", &format!("{CORE}/e1"), admin(), Some(patch), &[("content-type", "application/merge-patch+json")]).await;
    assert_eq!(code, StatusCode::OK, "{patched}");
    let (_, _, ev) = call(&api, "GET", &format!("{EVENTS}/e1"), admin(), None, &[]).await;
    assert_eq!(ev["note"], "patched");
    assert_eq!(rv(&ev), rv(&patched));

    // Deleted through events.k8s.io: gone from core.
    let (code, _, deleted) = call(&api, "DELETE", &format!("{EVENTS}/e1"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::OK, "{deleted}");
    let (code, _, _) = call(&api, "GET", &format!("{CORE}/e1"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::NOT_FOUND);

    // A watch through events.k8s.io saw every step in its own shape.
    let (code, _, stream) = call(&api, "GET", &format!("{EVENTS}?watch=true&resourceVersion={start}&timeoutSeconds=1"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::OK);
    let seen = watched(&stream);
    let kinds: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"], "{stream}");
    assert_eq!(seen[0].1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen[0].1["note"], "all good");
    assert_eq!(seen[2].1["note"], "patched");
    assert_eq!(seen[3].1["metadata"]["name"], "e1");
    assert_eq!(seen[3].1["metadata"]["uid"], deleted["details"]["uid"]);
}

#[tokio::test]
async fn an_events_k8s_io_event_is_a_core_event() {
    let api = server().await;
    let ev = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
        "action": "Testing", "reason": "Tested", "type": "Warning", "note": "hello",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "p1", "namespace": "default"},
        "related": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:05.000000Z"},
    });
    let (code, _, created) = call(&api, "POST", &format!("{EVENTS}?fieldManager=ev-creator"), admin(), Some(ev), &[]).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let (code, _, list) =
        call(&api, "GET", &format!("{CORE}?fieldSelector=involvedObject.kind%3DPod,reportingComponent%3Dexample.com%2Fctl"), admin(), None, &[]).await;
    assert_eq!(code, StatusCode::OK, "{list}");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    let core = &items[0];
    assert_eq!(rv(core), rv(&created));
    assert_eq!(core["message"], "hello");
    assert_eq!(core["involvedObject"]["name"], "p1");
    assert_eq!(core["related"]["name"], "n1");
    assert_eq!(core["reportingComponent"], "example.com/ctl");
    assert_eq!(core["reportingInstance"], "ctl-1");
    assert_eq!(core["series"]["count"], 2);
    assert_eq!(core["action"], "Testing");
    assert_eq!(core["type"], "Warning");
    assert_eq!(core["source"], json!({}));
    assert_eq!(core["firstTimestamp"], Value::Null);
    assert!(core.get("count").is_none(), "{core}");
    assert_eq!(core["metadata"]["managedFields"][0]["apiVersion"], "events.k8s.io/v1");
    // And back: the same object as created.
    let (_, _, again) = call(&api, "GET", &format!("{EVENTS}/e2"), admin(), None, &[]).await;
    assert_eq!(again, created);

    // A server-side apply through core conflicts with the events.k8s.io manager of `note`.
    let apply = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"}, "message": "mine now"});
    let (code, _, conflict) =
        call(&api, "PATCH", &format!("{CORE}/e2?fieldManager=core-applier"), admin(), Some(apply.clone()), &[("content-type", "application/apply-patch+yaml")])
            .await;
    assert_eq!(code, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["message"], "Apply failed with 1 conflict: conflict with \"ev-creator\" using events.k8s.io/v1: .message");
    let (code, _, forced) = call(
        &api,
        "PATCH",
        &format!("{CORE}/e2?fieldManager=core-applier&force=true"),
        admin(),
        Some(apply),
        &[("content-type", "application/apply-patch+yaml")],
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{forced}");
    let (_, _, ev) = call(&api, "GET", &format!("{EVENTS}/e2"), admin(), None, &[]).await;
    assert_eq!(ev["note"], "mine now");
    let entries = ev["metadata"]["managedFields"].as_array().unwrap();
    let fields_of = |m: &str| entries.iter().find(|e| e["manager"] == m).map(|e| e["fieldsV1"].clone()).unwrap_or_default();
    assert!(fields_of("core-applier").get("f:message").is_some(), "{ev}");
    assert!(fields_of("ev-creator").get("f:note").is_none() && fields_of("ev-creator").get("f:reason").is_some(), "{ev}");
}
