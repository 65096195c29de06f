//! Connect subresources through the in-process router, with an echoing handler installed on
//! `namespaces/proxy`: what reaches the handler (and what does not), authorization on the
//! subresource, 404 for an absent object, 405 for a method not served, long-running streams,
//! handler errors as Statuses, and discovery.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, Connecter};
use flotilla_apiserver::{ApiServer, ApiServerConfig, Identity};
use flotilla_store::Store;
use futures::StreamExt;
use futures::future::BoxFuture;
use http::{HeaderMap, Method, StatusCode};
use serde_json::json;

mod support;

/// Answers with what it was given; `/stream` sends three chunks 100 ms apart; `/down` fails.
struct Echo;

impl Connecter for Echo {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        Box::pin(async move {
            match r.path.as_str() {
                "/down" => Err(ConnectError::Unavailable("error trying to reach the target: connection refused".into())),
                "/stream" => {
                    let chunks = futures::stream::iter(0..3).then(|i| async move {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Bytes::from(format!("chunk{i};")))
                    });
                    Ok(ConnectResponse { status: StatusCode::OK, headers: HeaderMap::new(), body: chunks.boxed() })
                }
                _ => {
                    let headers: Vec<&str> = r.headers.keys().map(|k| k.as_str()).collect();
                    let echo = json!({
                        "method": r.method.as_str(),
                        "object": r.object["metadata"]["name"],
                        "path": r.path,
                        "query": r.query,
                        "headers": headers,
                        "body": String::from_utf8_lossy(&r.body),
                        "user": r.user.user,
                    });
                    let mut h = HeaderMap::new();
                    h.insert("content-type", "application/json".parse().unwrap());
                    h.insert("x-echo", "yes".parse().unwrap());
                    let body = futures::stream::once(async move { Ok(Bytes::from(echo.to_string())) });
                    Ok(ConnectResponse { status: StatusCode::ACCEPTED, headers: h, body: body.boxed() })
                }
            }
        })
    }
}

async fn server() -> ApiServer {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let config = ApiServerConfig { request_timeout: Duration::from_millis(150), ..ApiServerConfig::default() };
    let api = ApiServer::new(store, config);
    api.bootstrap().await.unwrap();
    api.install_connect(ConnectSubresource {
        group: String::new(),
        resource: "namespaces".into(),
        subresource: "proxy".into(),
        kind: "NamespaceProxyOptions".into(),
        methods: vec![Method::GET, Method::POST],
        handler: Arc::new(Echo),
    });
    api
}

fn admin() -> Identity {
    Identity::user("admin", &["system:masters"])
}

#[tokio::test]
async fn the_handler_gets_the_object_the_rest_of_the_path_and_no_credentials() {
    let api = server().await;
    let headers = [
        ("accept", "application/json;as=Table;g=meta.k8s.io;v=v1"),
        ("authorization", "Bearer caller"),
        ("impersonate-user", "mallory"),
        ("impersonate-group", "system:masters"),
        ("x-custom", "1"),
    ];
    let (code, h, echo) = support::call(&api, "GET", "/api/v1/namespaces/default/proxy/api/v1/pods%2Fx?watch=1&limit=5", Some(admin()), None, &headers).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{echo}");
    assert_eq!(h["x-echo"], "yes", "the handler's headers come back");
    assert_eq!(echo["object"], "default");
    assert_eq!(echo["path"], "/api/v1/pods%2Fx", "the path stays encoded");
    assert_eq!(echo["query"], "watch=1&limit=5");
    assert_eq!(echo["user"], "mallory", "the admin may impersonate: the handler gets the impersonated user");
    let sent: Vec<&str> = echo["headers"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(sent.contains(&"accept") && sent.contains(&"x-custom"), "{sent:?}");
    assert!(!sent.contains(&"authorization") && !sent.iter().any(|h| h.starts_with("impersonate-")), "credentials stay here: {sent:?}");

    let (code, _, echo) =
        support::call(&api, "POST", "/api/v1/namespaces/default/proxy/apis", Some(admin()), Some(json!({"a": 1})), &[("content-type", "application/json")])
            .await;
    assert_eq!(code, StatusCode::ACCEPTED);
    assert_eq!((echo["method"].as_str(), echo["body"].as_str(), echo["path"].as_str()), (Some("POST"), Some("{\"a\":1}"), Some("/apis")));
    let (_, _, echo) = support::call(&api, "GET", "/api/v1/namespaces/default/proxy", Some(admin()), None, &[]).await;
    assert_eq!(echo["path"], "/");
}

#[tokio::test]
async fn absent_objects_methods_not_served_and_handler_errors_are_statuses() {
    let api = server().await;
    let (code, _, s) = support::call(&api, "GET", "/api/v1/namespaces/nope/proxy/api", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(s["message"], "namespaces \"nope\" not found");
    let (code, _, s) = support::call(&api, "DELETE", "/api/v1/namespaces/default/proxy/api", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{s}");
    let (code, h, s) = support::call(&api, "GET", "/api/v1/namespaces/default/proxy/down", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!((s["kind"].as_str(), s["reason"].as_str()), (Some("Status"), Some("ServiceUnavailable")));
    assert!(s["message"].as_str().unwrap().contains("connection refused"), "{s}");
    assert!(h.get("retry-after").is_none(), "client-go would retry a dead target for minutes");
    let (code, _, _) =
        support::call(&api, "GET", "/api/v1/namespaces/default/proxy/upgrade", Some(admin()), None, &[("upgrade", "websocket"), ("connection", "Upgrade")])
            .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn connect_requests_are_long_running() {
    // The deadline is 150 ms; the stream takes 300 ms and still arrives whole.
    let api = server().await;
    let (code, _, body) = support::call(&api, "GET", "/api/v1/namespaces/default/proxy/stream", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body, "chunk0;chunk1;chunk2;");
}

#[tokio::test]
async fn only_callers_allowed_the_subresource_get_through() {
    let api = server().await;
    let carol = Identity::user("carol", &[]);
    let (code, _, s) = support::call(&api, "GET", "/api/v1/namespaces/default/proxy/api", Some(carol.clone()), None, &[]).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        s["message"],
        "namespaces \"default\" is forbidden: User \"carol\" cannot get resource \"namespaces/proxy\" in API group \"\" at the cluster scope"
    );
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "ns-proxy"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces/proxy"], "verbs": ["get"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "carol-ns-proxy"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-proxy"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}]});
    for (path, body) in [("/apis/rbac.authorization.k8s.io/v1/clusterroles", role), ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)] {
        let (code, _, s) = support::call(&api, "POST", path, Some(admin()), Some(body), &[("content-type", "application/json")]).await;
        assert_eq!(code, StatusCode::CREATED, "{s}");
    }
    let mut code = StatusCode::FORBIDDEN;
    for _ in 0..50 {
        code = support::call(&api, "GET", "/api/v1/namespaces/default/proxy/api", Some(carol.clone()), None, &[]).await.0;
        if code != StatusCode::FORBIDDEN {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code, StatusCode::ACCEPTED);
    // `get` on the subresource is not `create` on it, nor `get` on the namespace.
    assert_eq!(support::call(&api, "POST", "/api/v1/namespaces/default/proxy/api", Some(carol.clone()), None, &[]).await.0, StatusCode::FORBIDDEN);
    assert_eq!(support::call(&api, "GET", "/api/v1/namespaces/default", Some(carol.clone()), None, &[]).await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn discovery_lists_the_subresource() {
    let api = server().await;
    let (_, _, list) = support::call(&api, "GET", "/api/v1", Some(admin()), None, &[]).await;
    let entry = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == "namespaces/proxy").expect("namespaces/proxy listed").clone();
    assert_eq!(
        entry,
        json!({"name": "namespaces/proxy", "singularName": "", "namespaced": false, "kind": "NamespaceProxyOptions", "verbs": ["create", "get"]})
    );
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let (_, _, agg) = support::call(&api, "GET", "/api", Some(admin()), None, &[("accept", accept)]).await;
    let ns = agg["items"][0]["versions"][0]["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "namespaces").unwrap().clone();
    let sub = ns["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "proxy").expect("proxy subresource").clone();
    assert_eq!(sub["responseKind"]["kind"], "NamespaceProxyOptions");
    assert_eq!(sub["verbs"], json!(["create", "get"]));
}
