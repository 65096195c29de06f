//! The admin endpoint: fault knobs, node failure and capacity of running members, over HTTPS
//! on the fleet's shared listener, for the fleet admin's certificate only
//! (`<data-dir>/fleet-admin.kubeconfig`, so `kubectl get --raw` and `kubectl replace --raw`
//! work as clients).
//!
//! | request | does |
//! |---|---|
//! | `GET /sim/v1/members` | every member: server, kubeconfig, faults |
//! | `GET /sim/v1/members/<m>` | one member, with its nodes |
//! | `GET /sim/v1/members/<m>/faults` | its fault settings |
//! | `PUT`/`PATCH`/`POST /sim/v1/members/<m>/faults` | merge settings in (`{"latency": "50ms", "errorRate": 0.1, "blackhole": true, "refuse": true}`); `<m>` = `*` for all |
//! | `POST /sim/v1/members/<m>/nodes/fail`, `…/nodes/recover` | `{"nodes": ["m-node-1"]}`, or `{}` for all |
//! | `PUT`/`POST /sim/v1/members/<m>/capacity` | `{"nodes": 5, "cpu": "4", "memory": "16Gi", "pods": 50}` (any subset) |
//! | `PUT`/`POST /sim/v1/members/<m>/hidden` | `{"group": "apps", "resource": "daemonsets", "hidden": true}` |

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use flotilla_apiserver::error::ApiError;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::fleet::{Entry, FleetView, is_fleet_admin};
use crate::nodes::CapacityChange;

fn ok(v: Value) -> Response {
    let mut r = (StatusCode::OK, serde_json::to_vec(&v).unwrap_or_default()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

fn invalid(message: impl Into<String>) -> Response {
    ApiError::new(422, "Invalid", message).into_response()
}

fn describe(e: &Entry, with_nodes: bool) -> Value {
    let mut v = json!({
        "name": e.member.name(),
        "server": e.server(),
        "kubeconfig": e.kubeconfig.display().to_string(),
        "ownListener": e.has_own_listener(),
        "faults": e.member.faults().get(),
    });
    if with_nodes {
        let (keys, history) = e.member.store_sizes().unwrap_or((0, 0));
        v["store"] = json!({"keys": keys, "historyRevisions": history});
    }
    v
}

async fn body_json(req: Request<Body>) -> Result<Value, Response> {
    let bytes = req.into_body().collect().await.map(|b| b.to_bytes()).map_err(|_| ApiError::bad_request("cannot read the request body").into_response())?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")).into_response())
}

/// Apply a fault patch to one member, refusing `refuse` where it cannot work.
fn set_faults(e: &Entry, patch: &Value) -> Result<Value, String> {
    let next = e.member.faults().get().merged(patch)?;
    if next.refuse && !e.has_own_listener() {
        return Err(format!(
            "member {} shares the fleet's listener, so its connections cannot be refused alone; start members with --own-listeners",
            e.member.name()
        ));
    }
    e.member.faults().set(next.clone())?;
    serde_json::to_value(next).map_err(|e| e.to_string())
}

pub async fn handle(fleet: &FleetView<'_>, req: Request<Body>) -> Response {
    if !is_fleet_admin(&req) {
        return ApiError::new(403, "Forbidden", "the simulator's admin endpoint needs the fleet admin's certificate (fleet-admin.kubeconfig)").into_response();
    }
    let path = req.uri().path().trim_end_matches('/').to_string();
    let method = req.method().clone();
    let parts: Vec<&str> = path.trim_start_matches("/sim/v1").split('/').filter(|s| !s.is_empty()).collect();
    let entry = |name: &str| -> Result<&Arc<Entry>, Response> {
        fleet.members.get(name).ok_or_else(|| ApiError::new(404, "NotFound", format!("no simulated member named {name:?}")).into_response())
    };
    let writes = matches!(method, Method::PUT | Method::PATCH | Method::POST);
    match (parts.as_slice(), writes) {
        (["members"], false) => ok(json!({"members": fleet.members.values().map(|e| describe(e, false)).collect::<Vec<_>>()})),
        (["members", name], false) => match entry(name) {
            Ok(e) => ok(describe(e, true)),
            Err(r) => r,
        },
        (["members", name, "faults"], false) => match entry(name) {
            Ok(e) => ok(json!(e.member.faults().get())),
            Err(r) => r,
        },
        (["members", name, "faults"], true) => {
            let patch = match body_json(req).await {
                Ok(v) => v,
                Err(r) => return r,
            };
            let targets: Vec<&Arc<Entry>> = if *name == "*" {
                fleet.members.values().collect()
            } else {
                match entry(name) {
                    Ok(e) => vec![e],
                    Err(r) => return r,
                }
            };
            let mut out = Vec::new();
            for e in targets {
                match set_faults(e, &patch) {
                    Ok(v) => out.push(v),
                    Err(m) => return invalid(m),
                }
            }
            ok(if out.len() == 1 { out.remove(0) } else { json!({"members": out}) })
        }
        (["members", name, "nodes", verb @ ("fail" | "recover")], true) => {
            let e = match entry(name) {
                Ok(e) => e.clone(),
                Err(r) => return r,
            };
            let body = match body_json(req).await {
                Ok(v) => v,
                Err(r) => return r,
            };
            let nodes: Option<Vec<String>> = match body.get("nodes") {
                None | Some(Value::Null) => None,
                Some(v) => match serde_json::from_value(v.clone()) {
                    Ok(n) => Some(n),
                    Err(_) => return invalid("nodes: want a list of node names"),
                },
            };
            let r = if *verb == "fail" { e.member.fail_nodes(nodes).await } else { e.member.recover_nodes(nodes).await };
            match r {
                Ok(done) => ok(json!({"nodes": done})),
                Err(err) => invalid(err.to_string()),
            }
        }
        (["members", name, "capacity"], true) => {
            let e = match entry(name) {
                Ok(e) => e.clone(),
                Err(r) => return r,
            };
            let body = match body_json(req).await {
                Ok(v) => v,
                Err(r) => return r,
            };
            let change: CapacityChange = match serde_json::from_value(body) {
                Ok(c) => c,
                Err(err) => return invalid(format!("capacity: {err}")),
            };
            match e.member.set_capacity(change).await {
                Ok(()) => ok(json!({"status": "ok"})),
                Err(err) => invalid(err.to_string()),
            }
        }
        (["members", name, "hidden"], true) => {
            let e = match entry(name) {
                Ok(e) => e.clone(),
                Err(r) => return r,
            };
            let body = match body_json(req).await {
                Ok(v) => v,
                Err(r) => return r,
            };
            let (Some(group), Some(resource)) = (body.get("group").and_then(Value::as_str), body.get("resource").and_then(Value::as_str)) else {
                return invalid("hidden: want {\"group\": …, \"resource\": …, \"hidden\": true|false}");
            };
            let hidden = body.get("hidden").and_then(Value::as_bool).unwrap_or(true);
            e.member.set_hidden(group, resource, hidden);
            ok(json!({"group": group, "resource": resource, "hidden": hidden}))
        }
        _ => ApiError::new(404, "NotFound", format!("{method} {path}: not an admin request (see GET /sim/v1/members)")).into_response(),
    }
}
