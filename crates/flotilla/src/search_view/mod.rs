//! karmada-search's API on Flotilla's API server (issue 25), answered from the global view's
//! cache (`flotilla_controllers::search`):
//!
//! - `/apis/search.karmada.io/v1alpha1/search/cache/{kubernetes path}`: lists, gets and watches
//!   of member objects. As karmada-search answers it, a request names a kind the way
//!   kube-apiserver's paths do (`/api/v1/pods`, `/apis/apps/v1/namespaces/shop/deployments`,
//!   `.../deployments/web`) and always gets a list: all clusters' objects of that kind (in that
//!   namespace, with that name), each annotated `resource.karmada.io/cached-from-cluster`.
//!   `search/opensearch` is not served (Flotilla has no OpenSearch backend).
//! - `/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy/{kubernetes path}`: kube-apiserver's
//!   API over the cache, for stock clients through `flotilla kubeconfig global-view`
//!   ([`proxy`]).
//!
//! Both take `labelSelector`, `fieldSelector`, `limit`, `continue` and `watch` as
//! kube-apiserver does; a list's and a watch event's resourceVersion is karmada-search's
//! multi-cluster one, from which a watch resumes each cluster where it was ([`watch`]).

mod proxy;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use flotilla_api::federation::karmada::search::CACHED_FROM_CLUSTER;
use flotilla_api::selector::{FieldSelector, LabelSelector};
use flotilla_apiserver::ApiServer;
use flotilla_apiserver::connect::{ANY_SUBRESOURCE, ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, ConnectTarget, Connecter};
use flotilla_apiserver::negotiate::Output;
use flotilla_apiserver::table::Printer;
use flotilla_controllers::search::cache::{Cache, KindKey, ListQuery};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::{Value, json};

/// What a search path names.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    kind: KindKey,
    namespace: Option<String>,
    name: Option<String>,
    /// What follows the name (`log`, `status`), if anything.
    subresource: Option<String>,
}

/// `/api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]]` or
/// `/apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]]`.
fn parse_path(path: &str) -> Result<Target, String> {
    let decoded: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8().map(|s| s.into_owned()).map_err(|_| format!("{path}: not UTF-8")))
        .collect::<Result<_, _>>()?;
    let parts: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(format!("{path}: not a resource path (expected /api/v1/... or /apis/GROUP/VERSION/...)")),
    };
    let (namespace, resource, name, sub): (Option<&str>, &str, Option<&str>, &[&str]) = match rest {
        ["namespaces", ns, resource] => (Some(*ns), *resource, None, &[]),
        ["namespaces", ns, resource, name, sub @ ..] => (Some(*ns), *resource, Some(*name), sub),
        [resource] => (None, *resource, None, &[]),
        [resource, name, sub @ ..] => (None, *resource, Some(*name), sub),
        _ => return Err(format!("{path}: not a resource path")),
    };
    let mut names = vec![Some(resource), namespace, name];
    names.extend(sub.iter().map(|s| Some(*s)));
    if resource.is_empty() || names.iter().flatten().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return Err(format!("{path}: not a resource path"));
    }
    Ok(Target {
        kind: KindKey { group: group.to_string(), version: version.to_string(), resource: resource.to_string() },
        namespace: namespace.map(String::from),
        name: name.map(String::from),
        subresource: (!sub.is_empty()).then(|| sub.join("/")),
    })
}

/// A read of the cache: a list, or a watch from a resourceVersion.
#[derive(Debug, Default)]
struct Read {
    list: ListQuery,
    watch: bool,
    resource_version: String,
    timeout: Option<Duration>,
    bookmarks: bool,
    send_initial_events: bool,
    include_object: Option<String>,
}

/// The list and watch options of a query string, as kube-apiserver reads them.
fn parse_query(query: Option<&str>, target: &Target) -> Result<Read, String> {
    let mut read = Read { list: ListQuery { namespace: target.namespace.clone(), ..ListQuery::default() }, ..Read::default() };
    let mut fields = String::new();
    let flag = |v: &str| v == "true" || v == "1";
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "labelSelector" => read.list.labels = LabelSelector::parse(&v).map_err(|e| e.to_string())?,
            "fieldSelector" => fields = v.into_owned(),
            "limit" => read.list.limit = Some(v.parse().map_err(|_| format!("limit: {v:?} is not a number"))?),
            "continue" => read.list.continue_token = Some(v.into_owned()),
            "watch" => read.watch = flag(&v),
            "resourceVersion" => read.resource_version = v.into_owned(),
            "timeoutSeconds" => read.timeout = Some(Duration::from_secs(v.parse().map_err(|_| format!("timeoutSeconds: {v:?} is not a number"))?)),
            "allowWatchBookmarks" => read.bookmarks = flag(&v),
            "sendInitialEvents" => read.send_initial_events = flag(&v),
            "includeObject" => read.include_object = Some(v.into_owned()),
            _ => {}
        }
    }
    if let Some(name) = &target.name {
        fields = if fields.is_empty() { format!("metadata.name={name}") } else { format!("{fields},metadata.name={name}") };
    }
    read.list.fields = FieldSelector::parse(&fields).map_err(|e| e.to_string())?;
    Ok(read)
}

/// How objects of a kind are shown: the `Accept` asked for and the kind's table columns.
#[derive(Clone, Debug)]
struct Render {
    output: Output,
    printer: Printer,
    include_object: String,
}

impl Render {
    fn new(
        headers: &HeaderMap,
        registry: &flotilla_apiserver::resources::Registry,
        kind: &KindKey,
        include_object: Option<String>,
    ) -> Result<Render, ConnectError> {
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        let output = flotilla_apiserver::negotiate::output(accept).map_err(|e| ConnectError::BadRequest(e.message.clone()))?;
        let printer = registry.catalog().lookup(&kind.group, &kind.version, &kind.resource).map(|r| r.printer.clone()).unwrap_or_default();
        Ok(Render { output, printer, include_object: include_object.unwrap_or_else(|| "Metadata".into()) })
    }

    /// A list body as asked for: the cache's `<Kind>List` as is, or a Table with a Cluster column.
    fn list(&self, body: Vec<u8>) -> Vec<u8> {
        match self.output {
            Output::Json => body,
            Output::Table(version) => {
                let list: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let items = list["items"].as_array().cloned().unwrap_or_default();
                serde_json::to_vec(&self.table(version, &items, list["metadata"].clone(), true)).unwrap_or_default()
            }
            Output::PartialMetadata => {
                let mut list: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let items: Vec<Value> = list["items"].as_array().into_iter().flatten().map(flotilla_apiserver::table::partial_metadata).collect();
                list["items"] = Value::Array(items);
                list["kind"] = json!("PartialObjectMetadataList");
                list["apiVersion"] = json!("meta.k8s.io/v1");
                serde_json::to_vec(&list).unwrap_or_default()
            }
        }
    }

    /// One object as asked for (a Table of its row, for a Table).
    fn object(&self, object: Value, with_columns: bool) -> Value {
        match self.output {
            Output::Json => object,
            Output::Table(version) => {
                let rv = object["metadata"]["resourceVersion"].clone();
                self.table(version, &[object], json!({"resourceVersion": rv}), with_columns)
            }
            Output::PartialMetadata => flotilla_apiserver::table::partial_metadata(&object),
        }
    }

    /// The kind's table with the cluster each row comes from, after the name.
    fn table(&self, version: &str, objects: &[Value], meta: Value, with_columns: bool) -> Value {
        let mut t = flotilla_apiserver::table::table(&self.printer, version, objects, &self.include_object, meta, with_columns);
        if let Some(columns) = t["columnDefinitions"].as_array_mut() {
            let at = columns.len().min(1);
            columns.insert(
                at,
                json!({"name": "Cluster", "type": "string", "format": "", "priority": 0,
                       "description": "The member cluster the object is cached from (resource.karmada.io/cached-from-cluster)."}),
            );
        }
        if let Some(rows) = t["rows"].as_array_mut() {
            for (row, object) in rows.iter_mut().zip(objects) {
                if let Some(cells) = row["cells"].as_array_mut() {
                    let at = cells.len().min(1);
                    cells.insert(at, object["metadata"]["annotations"][CACHED_FROM_CLUSTER].clone());
                }
            }
        }
        t
    }
}

/// A JSON answer.
fn respond(status: StatusCode, body: Vec<u8>) -> ConnectResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body = bytes::Bytes::from(body);
    ConnectResponse { status, headers, body: futures::stream::once(async move { Ok(body) }).boxed() }
}

/// A `Status` answer, for the outcomes [`ConnectError`] has no variant for (404, 410).
fn status(code: u16, reason: &str, message: String, details: Value) -> ConnectResponse {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                      "reason": reason, "details": details, "code": code});
    respond(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), serde_json::to_vec(&body).unwrap_or_default())
}

/// Serve a read of `target` from the cache: a watch, a list, or (`single`) the one object a
/// name names, as kube-apiserver's get answers (the first cluster's, in cluster order).
fn read(cache: &Arc<Cache>, target: &Target, read: Read, render: Render, single: bool) -> Result<ConnectResponse, ConnectError> {
    if read.watch {
        return Ok(watch::serve(cache.clone(), target.kind.clone(), read, render));
    }
    let page = cache.list(&target.kind, None, &read.list).map_err(|e| ConnectError::BadRequest(e.to_string()))?;
    if !single {
        return Ok(respond(StatusCode::OK, render.list(page.body)));
    }
    let list: Value = serde_json::from_slice(&page.body).unwrap_or(Value::Null);
    let name = target.name.clone().unwrap_or_default();
    match list["items"].as_array().and_then(|items| items.first()) {
        Some(object) => Ok(respond(StatusCode::OK, serde_json::to_vec(&render.object(object.clone(), true)).unwrap_or_default())),
        None => {
            let what = if target.kind.group.is_empty() { target.kind.resource.clone() } else { format!("{}.{}", target.kind.resource, target.kind.group) };
            Ok(status(404, "NotFound", format!("{what} \"{name}\" not found"), json!({"name": name, "group": target.kind.group, "kind": target.kind.resource})))
        }
    }
}

struct SearchConnecter {
    cache: Arc<Cache>,
}

impl Connecter for SearchConnecter {
    fn connect(&self, request: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let cache = self.cache.clone();
        Box::pin(async move {
            let category = request.object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            match category.as_str() {
                "cache" => {}
                "opensearch" => return Err(ConnectError::Unsupported("search/opensearch: Flotilla has no OpenSearch backend; use search/cache".into())),
                other => return Err(ConnectError::BadRequest(format!("search/{other}: unknown search category (expected cache)"))),
            }
            let target = parse_path(&request.path).map_err(ConnectError::BadRequest)?;
            if target.subresource.is_some() {
                return Err(ConnectError::BadRequest(format!("{}: not a resource path (a subresource cannot be searched)", request.path)));
            }
            let query = parse_query(request.query.as_deref(), &target).map_err(ConnectError::BadRequest)?;
            // karmada-search answers with the kind's list, JSON only.
            let render = Render { output: Output::Json, printer: Printer::Default, include_object: "Object".into() };
            read(&cache, &target, query, render, false)
        })
    }
}

/// Serve `search.karmada.io/v1alpha1` `search/{cache}/...` and `proxying/karmada/proxy/...` on
/// `api` from `cache`.
pub fn install(api: &ApiServer, cache: Arc<Cache>) {
    api.install_connect(ConnectSubresource {
        group: "search.karmada.io".into(),
        target: ConnectTarget::Named { version: "v1alpha1".into(), kind: "Search".into() },
        resource: "search".into(),
        subresource: ANY_SUBRESOURCE.into(),
        kind: "Search".into(),
        methods: vec![Method::GET],
        handler: Arc::new(SearchConnecter { cache: cache.clone() }),
    });
    api.install_connect(ConnectSubresource {
        group: "search.karmada.io".into(),
        target: ConnectTarget::Named { version: "v1alpha1".into(), kind: "Proxying".into() },
        resource: "proxying".into(),
        subresource: "proxy".into(),
        kind: "ProxyingOptions".into(),
        methods: vec![Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE],
        handler: Arc::new(proxy::ProxyConnecter::new(api, cache)),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_paths_name_a_kind_a_namespace_a_name_and_a_subresource() {
        let t = parse_path("/api/v1/pods").unwrap();
        assert_eq!((t.kind.api_version(), t.kind.resource.as_str(), t.namespace, t.name), ("v1".to_string(), "pods", None, None));
        let t = parse_path("/apis/apps/v1/namespaces/shop/deployments/web").unwrap();
        assert_eq!((t.kind.group.as_str(), t.namespace.as_deref(), t.name.as_deref()), ("apps", Some("shop"), Some("web")));
        let t = parse_path("/api/v1/namespaces/shop").unwrap();
        assert_eq!((t.kind.resource.as_str(), t.name.as_deref()), ("namespaces", Some("shop")));
        let t = parse_path("/api/v1/namespaces/shop/pods/web/log").unwrap();
        assert_eq!((t.name.as_deref(), t.subresource.as_deref()), (Some("web"), Some("log")));
        assert!(parse_path("/healthz").is_err());
        assert!(parse_path("/api/v1/namespaces/../pods").is_err());
        assert!(parse_path("/api/v1/namespaces/shop/pods/web/..").is_err());
    }

    #[test]
    fn query_strings_as_kube_apiserver_reads_them() {
        let t = parse_path("/api/v1/namespaces/shop/pods/web-0").unwrap();
        let q = parse_query(Some("labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&limit=5&continue=abc"), &t).unwrap();
        assert_eq!((q.list.namespace.as_deref(), q.list.limit, q.list.continue_token.as_deref()), (Some("shop"), Some(5), Some("abc")));
        assert_eq!(q.list.labels.to_string(), "app=web");
        assert_eq!(q.list.fields.to_string(), "metadata.name=web-0,spec.nodeName=n1");
        assert!(parse_query(Some("limit=x"), &t).unwrap_err().contains("limit"));
        assert!(parse_query(Some("labelSelector=a%20in"), &t).is_err());
        let w = parse_query(Some("watch=true&resourceVersion=abc&timeoutSeconds=30&allowWatchBookmarks=true"), &t).unwrap();
        assert_eq!((w.watch, w.resource_version.as_str(), w.timeout, w.bookmarks), (true, "abc", Some(Duration::from_secs(30)), true));
        assert!(parse_query(Some("timeoutSeconds=soon"), &t).unwrap_err().contains("timeoutSeconds"));
    }

    #[test]
    fn tables_name_the_cluster_of_each_row() {
        let render = Render { output: Output::Table("v1"), printer: Printer::Default, include_object: "None".into() };
        let pod = json!({"metadata": {"name": "web-0", "namespace": "shop", "annotations": {CACHED_FROM_CLUSTER: "member2"}}});
        let list = serde_json::to_vec(&json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "x"}, "items": [pod]})).unwrap();
        let table: Value = serde_json::from_slice(&render.list(list)).unwrap();
        let columns: Vec<&str> = table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(columns, ["Name", "Cluster", "Age"]);
        assert_eq!(table["rows"][0]["cells"][0], "web-0");
        assert_eq!(table["rows"][0]["cells"][1], "member2");
        assert_eq!(table["metadata"]["resourceVersion"], "x");
    }
}
