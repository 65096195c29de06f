//! `flotilla get KIND [NAME] --clusters all|a,b`: member objects in one view.
//!
//! When a ResourceRegistry caches KIND for every cluster asked for (and says `Cached`), the
//! global view's cache answers (`search.karmada.io` `proxying/karmada/proxy`, one request, no
//! member touched). Otherwise each member is read through the cluster proxy
//! (`clusters/{name}/proxy`) as `karmadactl get --operation-scope members` does: each resolves
//! KIND with its own discovery and prints with its own Table (so every kind, custom ones
//! included, gets kubectl's columns), and a member that fails is reported on stderr while the
//! others are still printed. Either way the tables are merged under a CLUSTER column, and stderr
//! says which source answered (`--source` chooses one).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::search::{CACHED, ResourceRegistry};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::join_cmd::control_plane_config;

/// The annotation naming the member an object was read from (Karmada's mark for objects that
/// come from a member cluster).
const FROM_CLUSTER: &str = "resource.karmada.io/cached-from-cluster";
const TABLE: &str = "application/json;as=Table;g=meta.k8s.io;v=v1,application/json";
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The kind: plural, singular, short name or Kind, optionally with its group
    /// (`deploy`, `deployments.apps`, `widgets.v1.example.com`).
    kind: String,
    /// One object by name.
    name: Option<String>,
    /// Member clusters to read: `all`, or names separated by commas.
    #[arg(long, short = 'C', value_delimiter = ',', required = true)]
    clusters: Vec<String>,
    /// Namespace (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// All namespaces.
    #[arg(long, short = 'A')]
    all_namespaces: bool,
    /// Label selector, as kubectl's `-l`.
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// Output: wide, json or yaml (default: a table).
    #[arg(long, short = 'o', value_parser = ["wide", "json", "yaml"])]
    output: Option<String>,
    /// Kubeconfig of the control plane (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Seconds to wait for each member's answer.
    #[arg(long, default_value_t = 30)]
    request_timeout: u64,
    /// Where to read: `auto` (the global view's cache when a ResourceRegistry caches the kind
    /// for every cluster asked for, else the members), `cache` or `members`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "cache", "members"])]
    source: String,
}

/// The path of karmada-search's proxy, which answers from the global view's cache.
const GLOBAL_VIEW: &str = "/apis/search.karmada.io/v1alpha1/proxying/karmada/proxy";

/// A resource as a member's discovery describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespaced: bool,
    /// The Kind (empty when discovery did not say).
    pub kind: String,
}

impl Resolved {
    /// The collection path (`/apis/apps/v1/namespaces/default/deployments`).
    pub fn path(&self, namespace: Option<&str>, name: Option<&str>) -> String {
        let mut p = if self.group.is_empty() { format!("/api/{}", self.version) } else { format!("/apis/{}/{}", self.group, self.version) };
        if let (true, Some(ns)) = (self.namespaced, namespace) {
            p.push_str(&format!("/namespaces/{ns}"));
        }
        p.push('/');
        p.push_str(&self.plural);
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
        }
        p
    }
}

/// Find `spec` (`deploy`, `deployments.apps`, `deployments.v1.apps`, `Deployment`) in
/// aggregated discovery documents (`/api` first, then `/apis`): the preferred version of the
/// first group that has it.
pub fn resolve(spec: &str, discovery: &[Value]) -> Option<Resolved> {
    let (name, qualifier) = match spec.split_once('.') {
        Some((n, q)) => (n, Some(q)),
        None => (spec, None),
    };
    let name_lower = name.to_lowercase();
    for doc in discovery {
        for g in doc["items"].as_array().into_iter().flatten() {
            let group = g["metadata"]["name"].as_str().unwrap_or("");
            let versions: Vec<&Value> = g["versions"].as_array().into_iter().flatten().collect();
            // With a qualifier `v1.apps` the version is named; with `apps` the preferred one.
            let chosen: Option<&Value> = match qualifier {
                None => versions.first().copied(),
                Some(q) if q == group => versions.first().copied(),
                Some(q) => match q.split_once('.') {
                    Some((v, rest)) if rest == group => versions.iter().copied().find(|x| x["version"] == v),
                    None if group.is_empty() => versions.iter().copied().find(|x| x["version"] == q),
                    _ => None,
                },
            };
            let Some(v) = chosen else { continue };
            for r in v["resources"].as_array().into_iter().flatten() {
                let plural = r["resource"].as_str().unwrap_or("");
                let hit = plural == name
                    || r["singularResource"].as_str() == Some(name)
                    || r["shortNames"].as_array().is_some_and(|s| s.iter().any(|x| x.as_str() == Some(name)))
                    || r["responseKind"]["kind"].as_str().is_some_and(|k| k.to_lowercase() == name_lower);
                if hit && !plural.is_empty() {
                    return Some(Resolved {
                        group: group.to_string(),
                        version: v["version"].as_str().unwrap_or("").to_string(),
                        plural: plural.to_string(),
                        namespaced: r["scope"] == "Namespaced",
                        kind: r["responseKind"]["kind"].as_str().unwrap_or_default().to_string(),
                    });
                }
            }
        }
    }
    None
}

/// What one member answered.
struct MemberView {
    cluster: String,
    result: Result<(Resolved, Value), String>,
}

/// The path of `cluster`'s API through the cluster proxy.
pub(crate) fn proxy_base(cluster: &str) -> String {
    format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy")
}

/// The message of a failed request: the server's Status message when there is one.
pub(crate) fn describe(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => {
            let mut out = other.to_string();
            let mut cur = std::error::Error::source(&other);
            while let Some(s) = cur {
                out.push_str(&format!(": {s}"));
                cur = s.source();
            }
            out
        }
    }
}

/// GET `path`: the JSON answer, or the failure's message with the HTTP code when the server
/// answered with one.
async fn request(client: &kube::Client, path: &str, accept: &str, timeout: Duration) -> Result<Value, (Option<u16>, String)> {
    let req = http::Request::get(path).header(http::header::ACCEPT, accept).body(Vec::new()).map_err(|e| (None, e.to_string()))?;
    let text = match tokio::time::timeout(timeout, client.request_text(req)).await {
        Err(_) => return Err((None, format!("no answer within {}s", timeout.as_secs()))),
        Ok(Err(kube::Error::Api(s))) => return Err((Some(s.code), s.message)),
        Ok(r) => r.map_err(|e| (None, describe(e)))?,
    };
    serde_json::from_str(&text).map_err(|e| (None, format!("the answer to {path} is not JSON: {e}")))
}

async fn fetch(client: &kube::Client, path: String, accept: &str, timeout: Duration) -> Result<Value, String> {
    request(client, &path, accept, timeout).await.map_err(|(_, message)| message)
}

/// GET one object as JSON: `None` when the server answers 404.
pub(crate) async fn fetch_object(client: &kube::Client, path: &str, timeout: Duration) -> Result<Option<Value>, String> {
    match request(client, path, "application/json", timeout).await {
        Ok(v) => Ok(Some(v)),
        Err((Some(404), _)) => Ok(None),
        Err((_, message)) => Err(message),
    }
}

/// A member's aggregated discovery (`/api`, then `/apis`) through the cluster proxy, for
/// [`resolve`].
pub(crate) async fn member_discovery(client: &kube::Client, cluster: &str, timeout: Duration) -> Result<Vec<Value>, String> {
    let base = proxy_base(cluster);
    let core = fetch(client, format!("{base}/api"), AGGREGATED, timeout).await?;
    let groups = fetch(client, format!("{base}/apis"), AGGREGATED, timeout).await?;
    if core["kind"] != "APIGroupDiscoveryList" {
        return Err("the member does not serve aggregated discovery (Kubernetes 1.26 or later is needed)".into());
    }
    Ok(vec![core, groups])
}

/// The namespace a read is scoped to (None: all namespaces).
fn namespace_of<'a>(args: &'a GetArgs, client: &'a kube::Client) -> Option<&'a str> {
    if args.all_namespaces && args.name.is_none() { None } else { Some(args.namespace.as_deref().unwrap_or(client.default_namespace())) }
}

/// The query string of a read: Table metadata, the label selector and `extra`.
fn query_of(args: &GetArgs, table: bool, extra: Option<String>) -> String {
    let mut query = Vec::new();
    if table {
        query.push("includeObject=Metadata".to_string());
    }
    if let Some(s) = &args.selector {
        query.push(format!("labelSelector={}", form_encode(s)));
    }
    query.extend(extra);
    if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) }
}

fn wants_table(args: &GetArgs) -> bool {
    !matches!(args.output.as_deref(), Some("json" | "yaml"))
}

async fn read_member(client: &kube::Client, cluster: &str, args: &GetArgs, timeout: Duration) -> Result<(Resolved, Value), String> {
    let base = proxy_base(cluster);
    let discovery = member_discovery(client, cluster, timeout).await?;
    let r = resolve(&args.kind, &discovery).ok_or_else(|| format!("the server doesn't have a resource type \"{}\"", args.kind))?;
    let table = wants_table(args);
    let path = format!("{base}{}{}", r.path(namespace_of(args, client), args.name.as_deref()), query_of(args, table, None));
    let body = fetch(client, path, if table { TABLE } else { "application/json" }, timeout).await?;
    Ok((r, body))
}

/// The ResourceRegistry that caches `kind` of every one of `clusters` in `namespace` and says
/// it has listed them (`Cached`), if there is one.
fn covering<'a>(
    registries: &'a [ResourceRegistry],
    all: &[Cluster],
    clusters: &[String],
    r: &Resolved,
    namespace: Option<&str>,
) -> Option<&'a ResourceRegistry> {
    let api_version = if r.group.is_empty() { r.version.clone() } else { format!("{}/{}", r.group, r.version) };
    registries.iter().find(|reg| {
        let cached = reg.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == CACHED && c.status == "True"));
        let selects = reg
            .spec
            .resource_selectors
            .iter()
            .any(|s| s.api_version == api_version && s.kind == r.kind && (s.namespace.is_empty() || namespace == Some(s.namespace.as_str())));
        let targets = clusters.iter().all(|name| {
            all.iter().find(|c| c.metadata.name.as_deref() == Some(name)).is_some_and(|c| flotilla_api::overrides::cluster_matches(c, &reg.spec.target_cluster))
        });
        reg.metadata.deletion_timestamp.is_none() && cached && selects && targets
    })
}

/// The global view's answer split per cluster, as the members would have answered: a Table's
/// rows by its Cluster column (which goes), a list's items by their cluster annotation.
fn split_by_cluster(body: &Value, clusters: &[String]) -> Vec<(String, Value)> {
    let table = body["kind"] == "Table";
    let defs = body["columnDefinitions"].as_array().cloned().unwrap_or_default();
    let at = defs.iter().position(|d| d["name"] == "Cluster");
    let mut kept = defs;
    if let Some(i) = at {
        kept.remove(i);
    }
    // One pass over the answer: rows or items grouped by their cluster.
    let mut groups: std::collections::HashMap<&str, Vec<Value>> = clusters.iter().map(|c| (c.as_str(), Vec::new())).collect();
    let entries = if table { body["rows"].as_array() } else { body["items"].as_array() };
    for entry in entries.into_iter().flatten() {
        let cluster = if table { at.and_then(|i| entry["cells"][i].as_str()) } else { entry["metadata"]["annotations"][FROM_CLUSTER].as_str() };
        let Some(group) = cluster.and_then(|c| groups.get_mut(c)) else { continue };
        let mut entry = entry.clone();
        if let (true, Some(i), Some(cells)) = (table, at, entry["cells"].as_array_mut()) {
            cells.remove(i);
        }
        group.push(entry);
    }
    clusters
        .iter()
        .map(|c| {
            let entries = groups.remove(c.as_str()).unwrap_or_default();
            let answer = if table {
                json!({"kind": "Table", "apiVersion": body["apiVersion"], "columnDefinitions": kept, "rows": entries})
            } else {
                json!({"kind": body["kind"], "apiVersion": body["apiVersion"], "items": entries})
            };
            (c.clone(), answer)
        })
        .collect()
}

/// Read from the global view's cache, when a registry covers the read (or `--source cache`
/// asks for it): the answers per cluster, or None to fan out.
async fn read_cache(
    client: &kube::Client,
    args: &GetArgs,
    clusters: &[String],
    all: &[Cluster],
    timeout: Duration,
) -> anyhow::Result<Option<(Resolved, Vec<(String, Value)>)>> {
    if args.source == "members" {
        return Ok(None);
    }
    let core = fetch(client, "/api".into(), AGGREGATED, timeout).await.map_err(|e| anyhow::anyhow!("the control plane's discovery: {e}"))?;
    let groups = fetch(client, "/apis".into(), AGGREGATED, timeout).await.map_err(|e| anyhow::anyhow!("the control plane's discovery: {e}"))?;
    let resolved = resolve(&args.kind, &[core, groups]);
    let registries = Api::<ResourceRegistry>::all(client.clone()).list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let namespace = namespace_of(args, client);
    let registry = resolved.as_ref().and_then(|r| covering(&registries, all, clusters, r, namespace));
    let (r, registry) = match (resolved, registry) {
        (Some(r), Some(reg)) => (r, reg),
        (r, _) => {
            if args.source == "cache" {
                let what = r.map_or_else(
                    || args.kind.clone(),
                    |r| format!("{} {}", if r.group.is_empty() { r.version.clone() } else { format!("{}/{}", r.group, r.version) }, r.kind),
                );
                bail!("no ResourceRegistry caches {what} for {} (and says Cached): read with --source members", clusters.join(", "));
            }
            return Ok(None);
        }
    };
    let table = wants_table(args);
    let by_name = args.name.as_ref().map(|n| format!("fieldSelector=metadata.name%3D{}", form_encode(n)));
    let path = format!("{GLOBAL_VIEW}{}{}", r.path(namespace, None), query_of(args, table, by_name));
    let body = fetch(client, path, if table { TABLE } else { "application/json" }, timeout).await.map_err(|e| anyhow::anyhow!("the global view: {e}"))?;
    let stale = body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(body["rows"].as_array().into_iter().flatten().map(|r| &r["object"]))
        .any(|o| o["metadata"]["annotations"].get(flotilla_api::federation::karmada::search::STALE_SINCE).is_some());
    eprintln!(
        "flotilla: read from the global view's cache (ResourceRegistry {}){}",
        registry.metadata.name.as_deref().unwrap_or_default(),
        if stale { "; some clusters are out of reach and show their objects as last seen" } else { "" }
    );
    Ok(Some((r, split_by_cluster(&body, clusters))))
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Table cell as kubectl prints it.
fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => "<none>".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Merge members' Tables under a CLUSTER column (and NAMESPACE when listing all namespaces):
/// the header is the union of their columns (priority 0 only unless `wide`), in order.
pub fn merge_tables(tables: &[(String, Value)], with_namespace: bool, wide: bool) -> Vec<Vec<String>> {
    let mut columns: Vec<String> = Vec::new();
    for (_, t) in tables {
        for c in t["columnDefinitions"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("").to_string();
            if (wide || c["priority"].as_i64().unwrap_or(0) == 0) && !columns.contains(&name) {
                columns.push(name);
            }
        }
    }
    let mut header = vec!["CLUSTER".to_string()];
    if with_namespace {
        header.push("NAMESPACE".into());
    }
    header.extend(columns.iter().map(|c| c.to_uppercase()));
    let mut out = vec![header];
    for (cluster, t) in tables {
        let defs: Vec<String> = t["columnDefinitions"].as_array().into_iter().flatten().map(|c| c["name"].as_str().unwrap_or("").to_string()).collect();
        for row in t["rows"].as_array().into_iter().flatten() {
            let cells = row["cells"].as_array().cloned().unwrap_or_default();
            let mut line = vec![cluster.clone()];
            if with_namespace {
                line.push(row["object"]["metadata"]["namespace"].as_str().unwrap_or("").to_string());
            }
            for c in &columns {
                let text = defs.iter().position(|d| d == c).and_then(|i| cells.get(i)).map(cell_text).unwrap_or_else(|| "<none>".into());
                line.push(text);
            }
            out.push(line);
        }
    }
    out
}

/// Columns padded as kubectl's tab writer pads them (three spaces between columns).
pub fn render(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 < r.len() {
                line.push_str(&format!("{cell:<w$}   ", w = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Member objects as one `v1 List`, each marked with the member it came from.
fn merge_objects(views: &[(String, Value)]) -> Value {
    let mut items = Vec::new();
    for (cluster, body) in views {
        let objects: Vec<Value> = match body["items"].as_array() {
            Some(list) => {
                // Items of a list carry no apiVersion/kind; restore them from the list's.
                let kind = body["kind"].as_str().unwrap_or("").trim_end_matches("List").to_string();
                let api_version = body["apiVersion"].clone();
                list.iter()
                    .map(|i| {
                        let mut o = i.clone();
                        if o.get("kind").is_none() {
                            o["kind"] = json!(kind);
                            o["apiVersion"] = api_version.clone();
                        }
                        o
                    })
                    .collect()
            }
            None => vec![body.clone()],
        };
        for mut o in objects {
            o["metadata"]["annotations"][FROM_CLUSTER] = json!(cluster);
            items.push(o);
        }
    }
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
}

pub async fn run(args: GetArgs) -> anyhow::Result<()> {
    if args.all_namespaces && args.namespace.is_some() {
        bail!("--all-namespaces and --namespace exclude each other");
    }
    let mut config = control_plane_config(args.kubeconfig.clone(), args.context.clone()).await?;
    // A member the proxy cannot reach answers 503: report it now rather than retry it.
    config.default_retry = false;
    let client = kube::Client::try_from(config).context("building the control-plane client")?;
    let mut clusters: Vec<String> = args.clusters.iter().filter(|c| !c.is_empty()).cloned().collect();
    // Listed once: for `all`, and for whether a registry covers the clusters asked for.
    let everything = clusters.iter().any(|c| c == "all");
    let known: Vec<Cluster> = if everything || args.source != "members" {
        Api::<Cluster>::all(client.clone()).list(&ListParams::default()).await.context("listing the member clusters")?.items
    } else {
        Vec::new()
    };
    if everything {
        clusters = known.iter().filter_map(|c| c.metadata.name.clone()).collect();
        clusters.sort();
    }
    if clusters.is_empty() {
        bail!("no member clusters to read");
    }
    let timeout = Duration::from_secs(args.request_timeout.max(1));
    let views: Vec<MemberView> = match read_cache(&client, &args, &clusters, &known, timeout).await? {
        Some((r, answers)) => answers.into_iter().map(|(cluster, body)| MemberView { cluster, result: Ok((r.clone(), body)) }).collect(),
        None => {
            eprintln!("flotilla: read from {} member clusters through the cluster proxy", clusters.len());
            futures::future::join_all(clusters.iter().map(|c| {
                let client = client.clone();
                let args = &args;
                async move { MemberView { cluster: c.clone(), result: read_member(&client, c, args, timeout).await } }
            }))
            .await
        }
    };
    let mut failed = 0;
    let mut answers: Vec<(String, Value)> = Vec::new();
    let mut namespaced = false;
    for v in views {
        match v.result {
            Ok((r, body)) => {
                namespaced |= r.namespaced;
                answers.push((v.cluster, body));
            }
            Err(e) => {
                failed += 1;
                eprintln!("error: cluster {}: {e}", v.cluster);
            }
        }
    }
    match args.output.as_deref() {
        Some("json") => println!("{}", serde_json::to_string_pretty(&merge_objects(&answers))?),
        Some("yaml") => print!("{}", serde_saphyr::to_string(&merge_objects(&answers)).map_err(|e| anyhow::anyhow!("{e}"))?),
        other => {
            let rows = merge_tables(&answers, namespaced && args.all_namespaces && args.name.is_none(), other == Some("wide"));
            if rows.len() > 1 {
                print!("{}", render(&rows));
            } else if !answers.is_empty() {
                if args.all_namespaces || !namespaced {
                    eprintln!("No resources found");
                } else {
                    eprintln!("No resources found in {} namespace.", args.namespace.as_deref().unwrap_or(client.default_namespace()));
                }
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} member clusters could not be read", clusters.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery() -> Vec<Value> {
        let core = json!({"kind": "APIGroupDiscoveryList", "items": [{"metadata": {"name": ""}, "versions": [{"version": "v1", "resources": [
            {"resource": "pods", "singularResource": "pod", "shortNames": ["po"], "scope": "Namespaced", "responseKind": {"kind": "Pod"}},
            {"resource": "nodes", "singularResource": "node", "shortNames": ["no"], "scope": "Cluster", "responseKind": {"kind": "Node"}},
        ]}]}]});
        let groups = json!({"kind": "APIGroupDiscoveryList", "items": [
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1", "resources": [
                {"resource": "deployments", "singularResource": "deployment", "shortNames": ["deploy"], "scope": "Namespaced", "responseKind": {"kind": "Deployment"}}]}]},
            {"metadata": {"name": "example.com"}, "versions": [
                {"version": "v2", "resources": [{"resource": "widgets", "singularResource": "widget", "scope": "Namespaced", "responseKind": {"kind": "Widget"}}]},
                {"version": "v1", "resources": [{"resource": "widgets", "singularResource": "widget", "scope": "Namespaced", "responseKind": {"kind": "Widget"}}]}]},
        ]});
        vec![core, groups]
    }

    #[test]
    fn kinds_resolve_as_kubectl_resolves_them() {
        let d = discovery();
        assert_eq!(resolve("deploy", &d).unwrap().kind, "Deployment");
        let r = |s: &str| resolve(s, &d).map(|r| (r.group, r.version, r.plural, r.namespaced));
        let deploy = Some(("apps".into(), "v1".into(), "deployments".into(), true));
        for spec in ["deploy", "deployment", "deployments", "Deployment", "deployments.apps", "deployments.v1.apps"] {
            assert_eq!(r(spec), deploy, "{spec}");
        }
        assert_eq!(r("no"), Some(("".into(), "v1".into(), "nodes".into(), false)));
        assert_eq!(r("widgets"), Some(("example.com".into(), "v2".into(), "widgets".into(), true)), "the preferred version");
        assert_eq!(r("widgets.v1.example.com"), Some(("example.com".into(), "v1".into(), "widgets".into(), true)));
        assert_eq!(r("deployments.example.com"), None);
        assert_eq!(r("gadgets"), None);
    }

    #[test]
    fn paths_follow_scope() {
        let d = Resolved { group: "apps".into(), version: "v1".into(), plural: "deployments".into(), namespaced: true, kind: "Deployment".into() };
        assert_eq!(d.path(Some("web"), None), "/apis/apps/v1/namespaces/web/deployments");
        assert_eq!(d.path(None, None), "/apis/apps/v1/deployments");
        let n = Resolved { group: "".into(), version: "v1".into(), plural: "nodes".into(), namespaced: false, kind: "Node".into() };
        assert_eq!(n.path(Some("web"), Some("n1")), "/api/v1/nodes/n1");
    }

    fn table(rows: &[(&str, &str, &str)]) -> Value {
        json!({
            "kind": "Table",
            "columnDefinitions": [
                {"name": "Name", "priority": 0}, {"name": "Ready", "priority": 0}, {"name": "Images", "priority": 1},
            ],
            "rows": rows.iter().map(|(ns, name, ready)| json!({"cells": [name, ready, "nginx"], "object": {"metadata": {"namespace": ns, "name": name}}})).collect::<Vec<_>>(),
        })
    }

    #[test]
    fn tables_merge_under_a_cluster_column() {
        let tables = vec![("member1".to_string(), table(&[("default", "web", "1/1")])), ("member2".to_string(), table(&[("shop", "cart", "0/2")]))];
        let out = render(&merge_tables(&tables, true, false));
        assert_eq!(out, "CLUSTER   NAMESPACE   NAME   READY\nmember1   default     web    1/1\nmember2   shop        cart   0/2\n");
        let wide = render(&merge_tables(&tables[..1], false, true));
        assert_eq!(wide, "CLUSTER   NAME   READY   IMAGES\nmember1   web    1/1     nginx\n");
    }

    #[test]
    fn selectors_are_query_encoded_and_cells_print_as_kubectl_prints_them() {
        assert_eq!(form_encode("app=web,tier in (a,b)"), "app%3Dweb%2Ctier%20in%20%28a%2Cb%29");
        assert_eq!(cell_text(&json!(null)), "<none>");
        assert_eq!(cell_text(&json!(3)), "3");
        assert_eq!(cell_text(&json!(["a", "b"])), "a,b");
    }

    #[test]
    fn objects_merge_into_a_list_marked_with_their_cluster() {
        let list = json!({"kind": "DeploymentList", "apiVersion": "apps/v1", "items": [{"metadata": {"name": "web"}}]});
        let merged = merge_objects(&[("member1".into(), list)]);
        assert_eq!(merged["items"][0]["kind"], "Deployment");
        assert_eq!(merged["items"][0]["metadata"]["annotations"][FROM_CLUSTER], "member1");
    }

    #[test]
    fn the_global_view_answer_splits_per_cluster() {
        let table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "columnDefinitions": [{"name": "Name"}, {"name": "Cluster"}, {"name": "Age"}],
            "rows": [{"cells": ["a", "m1", "1m"]}, {"cells": ["b", "m2", "2m"]}, {"cells": ["c", "m1", "3m"]}]});
        let split = split_by_cluster(&table, &["m1".to_string(), "m2".to_string()]);
        assert_eq!(split[0].1["rows"], json!([{"cells": ["a", "1m"]}, {"cells": ["c", "3m"]}]));
        assert_eq!(split[1].1["columnDefinitions"], json!([{"name": "Name"}, {"name": "Age"}]));
        let list = json!({"kind": "PodList", "apiVersion": "v1", "items": [
            {"metadata": {"name": "a", "annotations": {FROM_CLUSTER: "m2"}}}, {"metadata": {"name": "b", "annotations": {FROM_CLUSTER: "m3"}}}]});
        let split = split_by_cluster(&list, &["m2".to_string()]);
        assert_eq!(split.len(), 1);
        assert_eq!(split[0].1["items"][0]["metadata"]["name"], "a");
    }
}
