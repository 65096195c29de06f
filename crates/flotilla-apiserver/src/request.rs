//! Turning an HTTP request into what it asks for: the route (discovery, a resource, a
//! non-resource path), the verb, and the query parameters with Kubernetes' lenient rules.

use std::collections::HashMap;

use crate::error::{ApiError, ApiResult, Cause};

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`
    GroupVersion {
        group: String,
        version: String,
    },
    Resource(ResourcePath),
    /// Everything else (`/healthz`, `/version`, `/openapi/v2`, `/metrics`, …).
    NonResource(String),
}

/// A path under a group/version naming a resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Subresources of a namespace that sit where a namespaced resource's plural would.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

fn decode_segment(seg: &str) -> ApiResult<String> {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::bad_request(format!("invalid path segment {seg:?}: not UTF-8")))
}

/// Parse a request path (without the query).
pub fn parse_path(path: &str) -> ApiResult<Route> {
    let trimmed = path.trim_end_matches('/');
    let raw: Vec<&str> = trimmed.split('/').skip(1).collect();
    let parts: Vec<String> = raw.iter().map(|s| decode_segment(s)).collect::<ApiResult<_>>()?;
    let p: Vec<&str> = parts.iter().map(|s| s.as_str()).collect();
    let (group, version, rest): (String, String, &[&str]) = match p.as_slice() {
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::Groups),
        ["apis", g] => return Ok(Route::Group(g.to_string())),
        ["api", v] => return Ok(Route::GroupVersion { group: String::new(), version: v.to_string() }),
        ["apis", g, v] => return Ok(Route::GroupVersion { group: g.to_string(), version: v.to_string() }),
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return Ok(Route::NonResource(if path.is_empty() { "/".into() } else { path.to_string() })),
    };
    if rest.iter().any(|s| s.is_empty()) {
        return Err(ApiError::no_route());
    }
    let mut r = ResourcePath { group, version, ..Default::default() };
    let rest: &[&str] = if rest.len() >= 3 && rest[0] == "namespaces" && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
        r.namespace = Some(rest[1].to_string());
        &rest[2..]
    } else {
        rest
    };
    match rest {
        [res] => r.resource = res.to_string(),
        [res, name] => {
            r.resource = res.to_string();
            r.name = Some(name.to_string());
        }
        [res, name, sub] => {
            r.resource = res.to_string();
            r.name = Some(name.to_string());
            r.subresource = Some(sub.to_string());
        }
        _ => return Err(ApiError::no_route()),
    }
    if let Some(n) = &r.name {
        check_name_segment(n)?;
    }
    if let Some(ns) = &r.namespace {
        check_name_segment(ns)?;
    }
    Ok(Route::Resource(r))
}

/// Names that would escape their place in a path or a storage key are refused outright.
fn check_name_segment(name: &str) -> ApiResult<()> {
    if name == "." || name == ".." {
        return Err(ApiError::bad_request(format!("Name parameter invalid: {name:?}: may not be '{name}'")));
    }
    // kube-apiserver's router never matches a name with an (encoded) slash.
    if name.contains('/') {
        return Err(ApiError::no_route());
    }
    if name.contains('%') {
        return Err(ApiError::bad_request(format!("Name parameter invalid: {name:?}: may not contain '%'")));
    }
    if name.contains('\0') {
        return Err(ApiError::bad_request("name may not contain a NUL byte"));
    }
    Ok(())
}

/// Query parameters, parsed leniently: empty pairs (`?&watch=true`) are ignored; the last
/// value of a repeated key wins except where a list is read.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
    last: HashMap<String, String>,
    /// The options kind these parameters are decoded into (`CreateOptions` for a POST, ...),
    /// which kube-apiserver names when a parameter is invalid.
    options: &'static str,
}

impl Query {
    pub fn parse(query: Option<&str>) -> Query {
        let mut q = Query { options: "CreateOptions", ..Query::default() };
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if k.is_empty() {
                continue;
            }
            q.last.insert(k.to_string(), v.to_string());
            q.pairs.push((k.into_owned(), v.into_owned()));
        }
        q
    }

    /// Name the options kind after the request's method (see [`Query::options_kind`]).
    pub fn for_method(mut self, method: &http::Method) -> Self {
        self.options = match *method {
            http::Method::PUT => "UpdateOptions",
            http::Method::PATCH => "PatchOptions",
            http::Method::DELETE => "DeleteOptions",
            _ => "CreateOptions",
        };
        self
    }

    /// `CreateOptions`, `UpdateOptions`, `PatchOptions` or `DeleteOptions`.
    pub fn options_kind(&self) -> &'static str {
        self.options
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.last.get(key).map(|s| s.as_str())
    }

    /// Go's rule: absent, `0` or any case of `false` is false; anything else (even empty) true.
    pub fn flag(&self, key: &str) -> bool {
        match self.last.get(key) {
            None => false,
            Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
        }
    }

    pub fn all(&self, key: &str) -> impl Iterator<Item = &str> {
        self.pairs.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn int(&self, key: &str) -> ApiResult<Option<i64>> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                // Go's query decoder says only what strconv says.
                .map_err(|e| {
                    let why = if matches!(e.kind(), std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow) {
                        "value out of range"
                    } else {
                        "invalid syntax"
                    };
                    ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: {why}"))
                }),
        }
    }

    /// `dryRun=All` (any other value is refused as the real server refuses it).
    pub fn dry_run(&self) -> ApiResult<bool> {
        let values: Vec<&str> = self.all("dryRun").filter(|v| !v.is_empty()).collect();
        check_dry_run(&values, self.options)?;
        Ok(!values.is_empty())
    }
}

/// The values of `dryRun` (query or DeleteOptions body): only `All` exists. Others are a 422
/// naming the options kind, with every value given quoted as a list.
pub fn check_dry_run(values: &[&str], options: &str) -> ApiResult<()> {
    if values.iter().all(|v| *v == "All") {
        return Ok(());
    }
    let given = serde_json::to_string(values).unwrap_or_default();
    Err(ApiError::invalid(
        "meta.k8s.io",
        options,
        "",
        vec![Cause::new("FieldValueNotSupported", "dryRun", format!("Unsupported value: {given}: supported values: \"All\""))],
    ))
}

/// `fieldValidation`: what to do with unknown or duplicate fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn from_query(q: &Query) -> ApiResult<Self> {
        match q.get("fieldValidation") {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::invalid(
                "meta.k8s.io",
                q.options,
                "",
                vec![Cause::new(
                    "FieldValueNotSupported",
                    "fieldValidation",
                    format!("Unsupported value: {other:?}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""),
                )],
            )),
        }
    }
}

/// The verb of a resource request.
pub(crate) fn verb_of(method: &http::Method, p: &ResourcePath, q: &Query) -> &'static str {
    match (method.as_str(), p.name.is_some()) {
        ("GET" | "HEAD", true) => "get",
        ("GET" | "HEAD", false) if q.flag("watch") => "watch",
        ("GET" | "HEAD", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, version: &str, ns: Option<&str>, resource: &str, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Resource(ResourcePath {
            group: group.into(),
            version: version.into(),
            namespace: ns.map(Into::into),
            resource: resource.into(),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
        })
    }

    #[test]
    fn paths_parse_as_kube_apiserver_reads_them() {
        let cases = [
            ("/api", Route::CoreVersions),
            ("/api/", Route::CoreVersions),
            ("/apis", Route::Groups),
            ("/apis/apps", Route::Group("apps".into())),
            ("/api/v1", Route::GroupVersion { group: "".into(), version: "v1".into() }),
            ("/apis/apps/v1/", Route::GroupVersion { group: "apps".into(), version: "v1".into() }),
            ("/api/v1/namespaces", res("", "v1", None, "namespaces", None, None)),
            ("/api/v1/namespaces/default", res("", "v1", None, "namespaces", Some("default"), None)),
            ("/api/v1/namespaces/kube-system/status", res("", "v1", None, "namespaces", Some("kube-system"), Some("status"))),
            ("/api/v1/namespaces/x/finalize", res("", "v1", None, "namespaces", Some("x"), Some("finalize"))),
            ("/api/v1/namespaces/d/configmaps", res("", "v1", Some("d"), "configmaps", None, None)),
            ("/api/v1/namespaces/d/configmaps/c", res("", "v1", Some("d"), "configmaps", Some("c"), None)),
            ("/apis/apps/v1/namespaces/d/deployments/w/scale", res("apps", "v1", Some("d"), "deployments", Some("w"), Some("scale"))),
            ("/apis/apps/v1/deployments", res("apps", "v1", None, "deployments", None, None)),
            ("/api/v1/configmaps", res("", "v1", None, "configmaps", None, None)),
            ("/version", Route::NonResource("/version".into())),
            ("/healthz", Route::NonResource("/healthz".into())),
        ];
        for (path, want) in cases {
            assert_eq!(parse_path(path).unwrap(), want, "{path}");
        }
    }

    #[test]
    fn path_tricks_are_refused() {
        for p in [
            "/api/v1/namespaces/d/configmaps/..",
            "/api/v1/namespaces/d/configmaps/%2e%2e",
            "/api/v1/namespaces/%2E/configmaps",
            "/api/v1/namespaces/d/configmaps/a%25b",
        ] {
            let e = parse_path(p).unwrap_err();
            assert_eq!(e.code, 400, "{p}");
        }
        // An encoded slash never routes, as on kube-apiserver.
        assert_eq!(parse_path("/api/v1/namespaces/d/configmaps/a%2Fb").unwrap_err().code, 404);
        assert_eq!(parse_path("/api/v1/namespaces/d/configmaps/c/status/extra").unwrap_err().code, 404);
        assert_eq!(parse_path("/api/v1//configmaps").unwrap_err().code, 404);
    }

    #[test]
    fn queries_are_lenient() {
        let q = Query::parse(Some("&watch=true&&limit=500&x=&allowWatchBookmarks=True&f=0&g=FALSE&h"));
        assert!(q.flag("watch"));
        assert!(q.flag("allowWatchBookmarks"));
        assert!(q.flag("x"), "an empty value is true, as in Go");
        assert!(q.flag("h"));
        assert!(!q.flag("f"));
        assert!(!q.flag("g"));
        assert!(!q.flag("absent"));
        assert_eq!(q.int("limit").unwrap(), Some(500));
        assert!(Query::parse(Some("limit=abc")).int("limit").is_err());
        assert!(Query::parse(Some("dryRun=All")).dry_run().unwrap());
        assert!(Query::parse(Some("dryRun=Some")).dry_run().is_err());
    }
}
