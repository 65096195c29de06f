//! Connect subresources through the in-process router, with an echoing handler installed on
//! `namespaces/proxy`: what reaches the handler (and what does not), authorization on the
//! subresource, 404 for an absent object, 405 for a method not served, long-running streams,
//! handler errors as Statuses, and discovery; over HTTPS, an upgrade handed to the handler, whose
//! connection it then is. A namespaced core-group subresource (`pods/log`) goes the same way.

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
            if let Some(up) = r.upgrade {
                // Switch, then answer each chunk upper-cased until the caller closes.
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut io = hyper_util::rt::TokioIo::new(up.on_upgrade.await.unwrap());
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = io.read(&mut buf).await {
                        if io.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                            return;
                        }
                    }
                });
                let mut h = HeaderMap::new();
                h.insert("x-protocol-seen", up.protocol.parse().unwrap());
                return Ok(ConnectResponse { status: StatusCode::SWITCHING_PROTOCOLS, headers: h, body: futures::stream::empty().boxed() });
            }
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
        target: flotilla_apiserver::connect::ConnectTarget::Stored,
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

#[tokio::test]
async fn an_upgrade_hands_the_connection_to_the_handler() {
    use flotilla_apiserver::pki::{Authority, kubeconfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let api = server().await;
    let ca = Authority::generate("test-ca").unwrap();
    let serving_cert = ca.issue_server(&["127.0.0.1".to_string()]).unwrap();
    let admin = ca.issue_client("admin", &["system:masters"]).unwrap();
    let mut cfg = flotilla_apiserver::serve::ServeConfig::new("127.0.0.1:0".parse().unwrap(), serving_cert.cert_pem, serving_cert.key_pem);
    cfg.client_ca_pem = Some(ca.cert_pem.clone());
    let serving = flotilla_apiserver::serve::serve(api.router(), cfg).await.unwrap();
    let text = kubeconfig("t", &format!("https://{}", serving.local_addr), &ca.cert_pem, &admin);
    let config = kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::from_yaml(&text).unwrap(), &Default::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();

    let req = http::Request::get("/api/v1/namespaces/default/proxy/exec")
        .header("connection", "Upgrade")
        .header("upgrade", "echo/1")
        .body(kube::client::Body::empty())
        .unwrap();
    let mut resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(resp.headers()["upgrade"], "echo/1");
    assert_eq!(resp.headers()["connection"], "Upgrade");
    assert_eq!(resp.headers()["x-protocol-seen"], "echo/1");
    let mut io = hyper_util::rt::TokioIo::new(hyper::upgrade::on(&mut resp).await.unwrap());
    io.write_all(b"hello").await.unwrap();
    let mut got = [0u8; 5];
    io.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"HELLO");

    // Without `Connection: Upgrade` it is an ordinary request.
    let req = http::Request::get("/api/v1/namespaces/default/proxy/x").header("upgrade", "echo/1").body(kube::client::Body::empty()).unwrap();
    assert_eq!(client.send(req).await.unwrap().status(), StatusCode::ACCEPTED);
    drop(io);
    serving.shutdown().await.unwrap();
}

/// Answers with the pod it was handed; a `container=bad` query is refused as a bad request.
struct PodLog;

impl Connecter for PodLog {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        Box::pin(async move {
            if r.query.as_deref() == Some("container=bad") {
                return Err(ConnectError::BadRequest("container bad is not valid for pod web".into()));
            }
            let who =
                format!("{}/{} {}", r.object["metadata"]["namespace"].as_str().unwrap_or("?"), r.object["metadata"]["name"].as_str().unwrap_or("?"), r.path);
            let mut h = HeaderMap::new();
            h.insert("content-type", "text/plain".parse().unwrap());
            Ok(ConnectResponse { status: StatusCode::OK, headers: h, body: futures::stream::once(async move { Ok(Bytes::from(who)) }).boxed() })
        })
    }
}

#[tokio::test]
async fn a_namespaced_core_subresource_gets_its_object() {
    let api = server().await;
    api.install_connect(ConnectSubresource {
        group: String::new(),
        target: flotilla_apiserver::connect::ConnectTarget::Stored,
        resource: "pods".into(),
        subresource: "log".into(),
        kind: "Pod".into(),
        methods: vec![Method::GET],
        handler: Arc::new(PodLog),
    });
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let (code, _, s) = support::call(&api, "POST", "/api/v1/namespaces/default/pods", Some(admin()), Some(pod), &[("content-type", "application/json")]).await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    let (code, h, body) = support::call(&api, "GET", "/api/v1/namespaces/default/pods/web/log", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(h["content-type"], "text/plain");
    assert_eq!(body, "default/web /");
    let (code, _, s) = support::call(&api, "GET", "/api/v1/namespaces/default/pods/web/log?container=bad", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!((s["reason"].as_str(), s["message"].as_str()), (Some("BadRequest"), Some("container bad is not valid for pod web")));
    let (code, _, s) = support::call(&api, "GET", "/api/v1/namespaces/default/pods/absent/log", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(s["message"], "pods \"absent\" not found");
    let (code, _, s) = support::call(&api, "GET", "/api/v1/namespaces/other/pods/web/log", Some(admin()), None, &[]).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "the namespace is part of the name: {s}");
    let (code, _, s) = support::call(&api, "GET", "/api/v1/namespaces/default/pods/web/log", Some(Identity::user("carol", &[])), None, &[]).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(s["message"].as_str().unwrap().contains("cannot get resource \"pods/log\""), "{s}");
    let (_, _, list) = support::call(&api, "GET", "/api/v1", Some(admin()), None, &[]).await;
    assert!(list["resources"].as_array().unwrap().iter().any(|r| r["name"] == "pods/log"), "discovery lists pods/log");
}
