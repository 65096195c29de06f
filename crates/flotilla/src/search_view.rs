//! karmada-search's read API on Flotilla's API server (issue 25):
//! `/apis/search.karmada.io/v1alpha1/search/cache/{kubernetes path}` answers lists and gets of
//! member objects from the global view's cache (`flotilla_controllers::search`), every object
//! annotated with the cluster it came from.
//!
//! As karmada-search answers it, a request names a kind the way kube-apiserver's paths do
//! (`/api/v1/pods`, `/apis/apps/v1/namespaces/shop/deployments`, `.../deployments/web`) and
//! always gets a list: all clusters' objects of that kind (in that namespace, with that name).
//! Beyond Karmada's handler it takes `labelSelector`, `fieldSelector`, `limit` and `continue`
//! as kube-apiserver does. `search/opensearch` is not served (Flotilla has no OpenSearch
//! backend); a watch is not served here yet.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use flotilla_api::selector::{FieldSelector, LabelSelector};
use flotilla_apiserver::ApiServer;
use flotilla_apiserver::connect::{ANY_SUBRESOURCE, ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, ConnectTarget, Connecter};
use flotilla_controllers::search::cache::{Cache, KindKey, ListQuery};
use futures::StreamExt as _;
use futures::future::BoxFuture;

/// What a search path names.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    kind: KindKey,
    namespace: Option<String>,
    name: Option<String>,
}

/// `/api/v1/[namespaces/NS/]RESOURCE[/NAME]` or `/apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME]`.
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
    let (namespace, resource, name) = match rest {
        ["namespaces", ns, resource] => (Some(*ns), *resource, None),
        ["namespaces", ns, resource, name] => (Some(*ns), *resource, Some(*name)),
        [resource] => (None, *resource, None),
        [resource, name] => (None, *resource, Some(*name)),
        _ => return Err(format!("{path}: not a resource path (a subresource cannot be searched)")),
    };
    if resource.is_empty() || [Some(resource), namespace, name].iter().flatten().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return Err(format!("{path}: not a resource path"));
    }
    Ok(Target {
        kind: KindKey { group: group.to_string(), version: version.to_string(), resource: resource.to_string() },
        namespace: namespace.map(String::from),
        name: name.map(String::from),
    })
}

/// The list options of a query string, as kube-apiserver reads them.
fn parse_query(query: Option<&str>, target: &Target) -> Result<ListQuery, String> {
    let mut q = ListQuery { namespace: target.namespace.clone(), ..ListQuery::default() };
    let mut fields = String::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*k {
            "labelSelector" => q.labels = LabelSelector::parse(&v).map_err(|e| e.to_string())?,
            "fieldSelector" => fields = v.into_owned(),
            "limit" => q.limit = Some(v.parse().map_err(|_| format!("limit: {v:?} is not a number"))?),
            "continue" => q.continue_token = Some(v.into_owned()),
            "watch" if v == "true" || v == "1" => return Err("watch is not served by search/cache; use the proxying path or a list".into()),
            _ => {}
        }
    }
    if let Some(name) = &target.name {
        fields = if fields.is_empty() { format!("metadata.name={name}") } else { format!("{fields},metadata.name={name}") };
    }
    q.fields = FieldSelector::parse(&fields).map_err(|e| e.to_string())?;
    Ok(q)
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
            let query = parse_query(request.query.as_deref(), &target).map_err(ConnectError::BadRequest)?;
            let page = cache.list(&target.kind, None, &query).map_err(|e| ConnectError::BadRequest(e.to_string()))?;
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            let body = bytes::Bytes::from(page.body);
            Ok(ConnectResponse { status: StatusCode::OK, headers, body: futures::stream::once(async move { Ok(body) }).boxed() })
        })
    }
}

/// Serve `search.karmada.io/v1alpha1` `search/{cache}/...` on `api` from `cache`.
pub fn install(api: &ApiServer, cache: Arc<Cache>) {
    api.install_connect(ConnectSubresource {
        group: "search.karmada.io".into(),
        target: ConnectTarget::Named { version: "v1alpha1".into(), kind: "Search".into() },
        resource: "search".into(),
        subresource: ANY_SUBRESOURCE.into(),
        kind: "Search".into(),
        methods: vec![Method::GET],
        handler: Arc::new(SearchConnecter { cache }),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_paths_name_a_kind_a_namespace_and_a_name() {
        let t = parse_path("/api/v1/pods").unwrap();
        assert_eq!((t.kind.api_version(), t.kind.resource.as_str(), t.namespace, t.name), ("v1".to_string(), "pods", None, None));
        let t = parse_path("/apis/apps/v1/namespaces/shop/deployments/web").unwrap();
        assert_eq!((t.kind.group.as_str(), t.namespace.as_deref(), t.name.as_deref()), ("apps", Some("shop"), Some("web")));
        let t = parse_path("/api/v1/namespaces/shop").unwrap();
        assert_eq!((t.kind.resource.as_str(), t.name.as_deref()), ("namespaces", Some("shop")));
        assert!(parse_path("/api/v1/namespaces/shop/pods/web/log").unwrap_err().contains("subresource"));
        assert!(parse_path("/healthz").is_err());
        assert!(parse_path("/api/v1/namespaces/../pods").is_err());
    }

    #[test]
    fn query_strings_as_kube_apiserver_reads_them() {
        let t = parse_path("/api/v1/namespaces/shop/pods/web-0").unwrap();
        let q = parse_query(Some("labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&limit=5&continue=abc"), &t).unwrap();
        assert_eq!((q.namespace.as_deref(), q.limit, q.continue_token.as_deref()), (Some("shop"), Some(5), Some("abc")));
        assert_eq!(q.labels.to_string(), "app=web");
        assert_eq!(q.fields.to_string(), "metadata.name=web-0,spec.nodeName=n1");
        assert!(parse_query(Some("limit=x"), &t).unwrap_err().contains("limit"));
        assert!(parse_query(Some("labelSelector=a%20in"), &t).is_err());
        assert!(parse_query(Some("watch=true"), &t).unwrap_err().contains("watch"));
    }
}
