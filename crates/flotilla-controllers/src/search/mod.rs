//! The global view (issue 25; karmada-search's cache): the member objects of the kinds that
//! ResourceRegistries select, from the clusters they select, kept in one [`cache::Cache`] that
//! the API server's `search/cache` handler reads.
//!
//! One list and watch per (cluster, kind) however many registries select it, across all
//! namespaces (objects of namespaces no selector names are not kept). A watch that breaks
//! resumes from the last resourceVersion it saw, so a reconnect costs no relist unless the
//! member has compacted past it (410 Gone). While a cluster is out of reach — its watch failing,
//! or its Cluster not Ready — its objects stay, marked stale, and refresh when the watch is back.
//!
//! Each registry's status says what the cache holds for it: `Cached` (every selected kind of
//! every selected cluster listed; False while listing, or `CacheFull` when the cache's cap kept
//! objects out) and `Stale` (the clusters out of reach, and since when).
//!
//! Push clusters are reached with their Secret's credential, as the other controllers reach
//! them; Pull clusters through the control plane's own cluster proxy (`clusters/{name}/proxy`,
//! which rides the agent's tunnel), when the binary gives a client for it ([`ViaProxy`]).

pub mod cache;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
use flotilla_api::federation::karmada::search::{CACHED, ResourceRegistry, ResourceRegistryStatus, STALE};
use flotilla_api::overrides::cluster_matches;
use flotilla_member::access::Clients;
use flotilla_runtime::Next;
use futures::StreamExt as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::Value;

use cache::{Cache, KindKey, KindNames};

pub const NAME: &str = "search";
/// The one key the controller's queue holds: every change is looked at as a whole.
const SYNC: &str = "sync";

/// The controller's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Time allowed to reach a member (connect and discovery).
    pub member_timeout: Duration,
    /// Wait before a failed list or watch is tried again.
    pub retry: Duration,
    /// How often the registries' status is looked at again while nothing changes (a member that
    /// went out of reach is noticed by its watch failing).
    pub resync: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { member_timeout: Duration::from_secs(10), retry: Duration::from_secs(5), resync: Duration::from_secs(5) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("resourceregistry {name}: writing its status: {source}")]
    Status { name: String, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

/// A kind in one cluster, as the registries name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Selected {
    cluster: String,
    api_version: String,
    kind: String,
}

/// Which namespaces of a selected kind are kept: all, or these.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Namespaces {
    All,
    Only(BTreeSet<String>),
}

impl Namespaces {
    fn keeps(&self, object: &Value) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(set) => object.pointer("/metadata/namespace").and_then(Value::as_str).is_some_and(|ns| set.contains(ns)),
        }
    }
}

/// What the watch of one selected kind knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum WatchState {
    /// Not listed yet.
    #[default]
    Starting,
    /// Listing and watching; the cache's shard is this kind.
    Running(KindKey),
    /// The member does not serve the kind, or refuses to show it.
    Failed(String),
}

struct Watch {
    namespaces: Namespaces,
    state: Arc<Mutex<WatchState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A client of one cluster's API through the control plane's cluster proxy (the binary builds
/// it: in `flotilla up` an in-process client whose paths are prefixed with
/// `/apis/cluster.karmada.io/v1alpha1/clusters/{name}/proxy`).
pub type ViaProxy = Arc<dyn Fn(&str) -> Client + Send + Sync>;

pub struct Context {
    client: Client,
    via_proxy: Option<ViaProxy>,
    /// Discovery of the clusters reached through the proxy, per cluster.
    proxied: Mutex<HashMap<String, Arc<flotilla_member::discovery::MemberDiscovery>>>,
    config: Config,
    clients: Arc<Clients>,
    pub cache: Arc<Cache>,
    registries: kube::runtime::reflector::Store<ResourceRegistry>,
    clusters: kube::runtime::reflector::Store<Cluster>,
    watches: Mutex<HashMap<Selected, Watch>>,
    /// Each cluster's Ready as last seen: a cluster Ready again has its watches started anew
    /// (a watch of a member that stopped answering may hang rather than fail).
    ready: Mutex<HashMap<String, bool>>,
}

impl Context {
    /// Whether the cache can reach `cluster`: with its credential, or through the proxy.
    fn reaches(&self, cluster: &Cluster) -> bool {
        self.clients.reaches(cluster) || (self.via_proxy.is_some() && cluster.spec.sync_mode == ClusterSyncMode::Pull)
    }

    /// A connection to `cluster`'s API: direct, or through the control plane's cluster proxy.
    async fn connect(&self, cluster: &Cluster) -> Result<flotilla_member::access::Connection, String> {
        if self.clients.reaches(cluster) {
            return self.clients.connect(&self.client, cluster, self.config.member_timeout).await.map_err(|e| e.to_string());
        }
        let via = self.via_proxy.as_ref().ok_or_else(|| format!("{} is not reachable from the control plane", cluster.name_any()))?;
        let name = cluster.name_any();
        let discovery = self
            .proxied
            .lock()
            .entry(name.clone())
            .or_insert_with(|| Arc::new(flotilla_member::discovery::MemberDiscovery::new(self.config.retry * 6)))
            .clone();
        Ok(flotilla_member::access::Connection { client: via(&name), cluster: name, discovery })
    }
}

/// Every (cluster, kind) the registries select, with the namespaces kept.
fn selection(registries: &[Arc<ResourceRegistry>], clusters: &[Arc<Cluster>], reaches: impl Fn(&Cluster) -> bool) -> BTreeMap<Selected, Namespaces> {
    let mut out: BTreeMap<Selected, Namespaces> = BTreeMap::new();
    for r in registries.iter().filter(|r| r.metadata.deletion_timestamp.is_none()) {
        for c in clusters.iter().filter(|c| c.metadata.deletion_timestamp.is_none() && reaches(c) && cluster_matches(c, &r.spec.target_cluster)) {
            for s in &r.spec.resource_selectors {
                let key = Selected { cluster: c.name_any(), api_version: s.api_version.clone(), kind: s.kind.clone() };
                let entry = out.entry(key).or_insert_with(|| Namespaces::Only(BTreeSet::new()));
                match (entry, s.namespace.as_str()) {
                    (e, "") => *e = Namespaces::All,
                    (Namespaces::Only(set), ns) => {
                        set.insert(ns.to_string());
                    }
                    (Namespaces::All, _) => {}
                }
            }
        }
    }
    out
}

/// Now, as a Kubernetes timestamp (RFC 3339, seconds).
fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// List and watch one kind in one cluster into the cache, for ever (the task is aborted when
/// the kind or the cluster is no longer selected).
async fn list_and_watch(ctx: Arc<Context>, selected: Selected, namespaces: Namespaces, state: Arc<Mutex<WatchState>>) {
    let retry = ctx.config.retry;
    let fail = |kind: Option<&KindKey>, reason: String| {
        tracing::debug!(controller = NAME, cluster = %selected.cluster, kind = %selected.kind, %reason, "member list or watch failed; retrying");
        ctx.cache.mark_stale(kind, &selected.cluster, &now());
    };
    let mut resource_version: Option<String> = None;
    loop {
        let Some(cluster) = ctx.clusters.get(&kube::runtime::reflector::ObjectRef::new(&selected.cluster)) else { return };
        let conn = match ctx.connect(&cluster).await {
            Ok(c) => c,
            Err(e) => {
                fail(None, e.to_string());
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        let gvk = crate::kinds::gvk_of(&selected.api_version, &selected.kind);
        let served = match conn.discovery.resolve(&conn.client, &gvk).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                *state.lock() = WatchState::Failed(format!("{} does not serve {} {}", selected.cluster, selected.api_version, selected.kind));
                tokio::time::sleep(retry * 6).await;
                continue;
            }
            Err(e) => {
                fail(None, e.to_string());
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        let ar: ApiResource = served.resource.clone();
        let key = KindKey { group: ar.group.clone(), version: ar.version.clone(), resource: ar.plural.clone() };
        let names = KindNames { kind: ar.kind.clone(), namespaced: served.namespaced };
        let api: Api<DynamicObject> = Api::all_with(conn.client.clone(), &ar);
        // List, unless a watch can resume where the last one stopped.
        let rv = match resource_version.take() {
            Some(rv) => rv,
            None => match api.list(&ListParams::default()).await {
                Ok(list) => {
                    let objects: Vec<Value> = list.items.iter().filter_map(|o| serde_json::to_value(o).ok()).filter(|o| namespaces.keeps(o)).collect();
                    let rv = list.metadata.resource_version.clone().unwrap_or_default();
                    ctx.cache.replace(&key, &names, &selected.cluster, objects, &rv);
                    *state.lock() = WatchState::Running(key.clone());
                    rv
                }
                Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {
                    *state.lock() = WatchState::Failed(format!("{} refuses to list {}: {}", selected.cluster, ar.plural, s.message));
                    tokio::time::sleep(retry * 6).await;
                    continue;
                }
                Err(e) => {
                    fail(Some(&key), e.to_string());
                    tokio::time::sleep(retry).await;
                    continue;
                }
            },
        };
        let params = WatchParams::default().timeout(290);
        let stream = match api.watch(&params, &rv).await {
            Ok(s) => {
                // The member answers again: what the cache holds of it is current.
                ctx.cache.mark_fresh(&key, &selected.cluster);
                s
            }
            Err(e) => {
                fail(Some(&key), e.to_string());
                resource_version = Some(rv);
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut last = rv;
        let mut relist = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    last = o.resource_version().unwrap_or(last);
                    if let Ok(v) = serde_json::to_value(&o)
                        && namespaces.keeps(&v)
                    {
                        ctx.cache.apply(&key, &names, &selected.cluster, v);
                    }
                }
                Ok(WatchEvent::Deleted(o)) => {
                    last = o.resource_version().unwrap_or(last);
                    if let Ok(v) = serde_json::to_value(&o) {
                        ctx.cache.delete(&key, &selected.cluster, &v);
                    }
                }
                Ok(WatchEvent::Bookmark(b)) => last = b.metadata.resource_version,
                Ok(WatchEvent::Error(e)) => {
                    // 410 Gone: the member compacted past our resourceVersion.
                    relist = e.code == 410;
                    if !relist {
                        fail(Some(&key), e.message);
                    }
                    break;
                }
                Err(e) => {
                    fail(Some(&key), e.to_string());
                    break;
                }
            }
        }
        // A watch that timed out is resumed at once; one that failed after a pause.
        if !relist {
            resource_version = Some(last);
        }
    }
}

/// Start and stop watches to match the registries, and write each registry's status.
async fn reconcile(ctx: Arc<Context>) -> Result<Next, Error> {
    let registries = ctx.registries.state();
    let clusters = ctx.clusters.state();
    let wanted = selection(&registries, &clusters, |c| ctx.reaches(c));
    let back: Vec<String> = {
        let mut ready = ctx.ready.lock();
        clusters
            .iter()
            .filter_map(|c| {
                let now = flotilla_api::federation::karmada::cluster::is_cluster_ready(c);
                (ready.insert(c.name_any(), now) == Some(false) && now).then(|| c.name_any())
            })
            .collect()
    };
    {
        let mut watches = ctx.watches.lock();
        if !back.is_empty() {
            let before = watches.len();
            watches.retain(|k, _| !back.contains(&k.cluster));
            if watches.len() < before {
                tracing::info!(controller = NAME, clusters = ?back, "clusters Ready again: listing their kinds anew");
            }
        }
        watches.retain(|k, w| wanted.get(k) == Some(&w.namespaces));
        for (k, ns) in &wanted {
            if watches.contains_key(k) {
                continue;
            }
            let state = Arc::new(Mutex::new(WatchState::Starting));
            let task = tokio::spawn(list_and_watch(ctx.clone(), k.clone(), ns.clone(), state.clone()));
            tracing::info!(controller = NAME, cluster = %k.cluster, kind = %k.kind, apiVersion = %k.api_version, "caching a kind of a member");
            watches.insert(k.clone(), Watch { namespaces: ns.clone(), state, task });
        }
    }
    // Shards no watch fills any more (a watch still starting may fill any of its cluster's).
    let (running, starting): (BTreeSet<(KindKey, String)>, BTreeSet<String>) = {
        let watches = ctx.watches.lock();
        let mut running = BTreeSet::new();
        let mut starting = BTreeSet::new();
        for (k, w) in watches.iter() {
            match &*w.state.lock() {
                WatchState::Running(kind) => {
                    running.insert((kind.clone(), k.cluster.clone()));
                }
                WatchState::Starting => {
                    starting.insert(k.cluster.clone());
                }
                WatchState::Failed(_) => {}
            }
        }
        (running, starting)
    };
    for shard in ctx.cache.shards() {
        if !running.contains(&shard) && !starting.contains(&shard.1) {
            ctx.cache.remove(&shard.0, &shard.1);
        }
    }
    // A cluster not Ready: its objects are served as last seen.
    for c in &clusters {
        if !flotilla_api::federation::karmada::cluster::is_cluster_ready(c) {
            ctx.cache.mark_stale(None, &c.name_any(), &now());
        }
    }
    for r in &registries {
        write_status(&ctx, r, &clusters).await?;
    }
    Ok(Next::After(ctx.config.resync))
}

/// The registry's `Cached` and `Stale` conditions from the cache's shards.
fn conditions_of(ctx: &Context, registry: &ResourceRegistry, clusters: &[Arc<Cluster>]) -> Vec<Condition> {
    let generation = registry.metadata.generation;
    let mut waiting = Vec::new();
    let mut failed = Vec::new();
    let mut stale = Vec::new();
    let mut refused = 0;
    let watches = ctx.watches.lock();
    for c in clusters.iter().filter(|c| ctx.reaches(c) && cluster_matches(c, &registry.spec.target_cluster)) {
        let cluster = c.name_any();
        for s in &registry.spec.resource_selectors {
            let key = Selected { cluster: cluster.clone(), api_version: s.api_version.clone(), kind: s.kind.clone() };
            let state = watches.get(&key).map(|w| w.state.lock().clone()).unwrap_or_default();
            match state {
                WatchState::Starting => waiting.push(format!("{cluster} {}", s.kind)),
                WatchState::Failed(why) => failed.push(why),
                WatchState::Running(kind) => match ctx.cache.state(&kind, &cluster) {
                    Some(st) => {
                        refused += st.refused;
                        if !st.synced {
                            waiting.push(format!("{cluster} {}", s.kind));
                        }
                        if let Some(since) = st.stale_since
                            && !stale.iter().any(|(c, _): &(String, String)| *c == cluster)
                        {
                            stale.push((cluster.clone(), since));
                        }
                    }
                    None => waiting.push(format!("{cluster} {}", s.kind)),
                },
            }
        }
    }
    let cached = if refused > 0 {
        flotilla_runtime::condition(
            CACHED,
            false,
            "CacheFull",
            format!("the cache reached its limit of {} bytes; {refused} objects are not cached", ctx.cache.limit()),
            generation,
        )
    } else if !failed.is_empty() {
        flotilla_runtime::condition(CACHED, false, "NotServed", failed.join("; "), generation)
    } else if !waiting.is_empty() {
        flotilla_runtime::condition(CACHED, false, "Listing", format!("not listed yet: {}", waiting.join(", ")), generation)
    } else {
        flotilla_runtime::condition(CACHED, true, "AllCached", "every selected kind of every selected cluster is cached", generation)
    };
    let stale = if stale.is_empty() {
        flotilla_runtime::condition(STALE, false, "AllReachable", "every selected cluster is watched", generation)
    } else {
        let list: Vec<String> = stale.iter().map(|(c, since)| format!("{c} (since {since})")).collect();
        flotilla_runtime::condition(STALE, true, "ClustersUnreachable", format!("served as last seen: {}", list.join(", ")), generation)
    };
    vec![cached, stale]
}

async fn write_status(ctx: &Context, registry: &ResourceRegistry, clusters: &[Arc<Cluster>]) -> Result<(), Error> {
    let mut conditions = registry.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let mut changed = false;
    for c in conditions_of(ctx, registry, clusters) {
        changed |= flotilla_runtime::set_condition(&mut conditions, c);
    }
    if !changed {
        return Ok(());
    }
    let name = registry.name_any();
    let status = ResourceRegistryStatus { conditions: Some(conditions) };
    let api: Api<ResourceRegistry> = Api::all(ctx.client.clone());
    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&serde_json::json!({"status": status}))).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Status { name, source }),
    }
}

/// Start the controller: the cache it fills (for the API server's handlers) and the future
/// that runs it until shutdown.
pub fn start(
    client: Client,
    rt: &flotilla_runtime::Runtime,
    config: Config,
    clients: Arc<Clients>,
    cache: Arc<Cache>,
    via_proxy: Option<ViaProxy>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let ctx = Arc::new(Context {
        client,
        via_proxy,
        proxied: Mutex::default(),
        config,
        // Long-lived watch clients apart from the applying controllers'.
        clients: Arc::new(clients.same_mode()),
        cache,
        registries: rt.informers.store::<ResourceRegistry>(),
        clusters: rt.informers.store::<Cluster>(),
        watches: Mutex::default(),
        ready: Mutex::default(),
    });
    let controller = rt
        .controller::<String>(NAME)
        .watches_changes(|old: Option<&ResourceRegistry>, r: &ResourceRegistry, deleted| {
            (deleted || old.is_none_or(|o| o.spec != r.spec)).then(|| SYNC.to_string())
        })
        .watches_changes(|old: Option<&Cluster>, c: &Cluster, deleted| {
            let print = |c: &Cluster| (c.metadata.labels.clone(), c.spec.clone(), flotilla_api::federation::karmada::cluster::is_cluster_ready(c));
            (deleted || old.is_none_or(|o| print(o) != print(c))).then(|| SYNC.to_string())
        })
        .backoff(Duration::from_millis(200), Duration::from_secs(30));
    async move {
        controller.run(move |_key: String| reconcile(ctx.clone())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::cluster::ClusterSpec;
    use flotilla_api::federation::karmada::policy::ClusterAffinity;
    use flotilla_api::federation::karmada::search::{ResourceRegistrySpec, ResourceSelector};

    fn registry(name: &str, clusters: &[&str], selectors: &[(&str, &str, &str)]) -> Arc<ResourceRegistry> {
        Arc::new(ResourceRegistry::new(
            name,
            ResourceRegistrySpec {
                target_cluster: ClusterAffinity { cluster_names: Some(clusters.iter().map(|c| c.to_string()).collect()), ..Default::default() },
                resource_selectors: selectors
                    .iter()
                    .map(|(v, k, ns)| ResourceSelector { api_version: v.to_string(), kind: k.to_string(), namespace: ns.to_string() })
                    .collect(),
                backend_store: None,
            },
        ))
    }

    #[test]
    fn registries_select_each_kind_of_each_cluster_once_with_the_namespaces_they_name() {
        let clusters: Vec<Arc<Cluster>> = ["m1", "m2", "m3"].iter().map(|n| Arc::new(Cluster::new(n, ClusterSpec::default()))).collect();
        let registries = vec![
            registry("pods", &["m1", "m2"], &[("v1", "Pod", "")]),
            registry("shop", &["m2", "m3"], &[("apps/v1", "Deployment", "shop"), ("v1", "Pod", "shop")]),
            registry("web", &["m3"], &[("apps/v1", "Deployment", "web")]),
        ];
        let sel = selection(&registries, &clusters, |_| true);
        let get = |c: &str, v: &str, k: &str| sel.get(&Selected { cluster: c.into(), api_version: v.into(), kind: k.into() }).cloned();
        assert_eq!(sel.len(), 5, "{sel:?}");
        assert_eq!(get("m2", "v1", "Pod"), Some(Namespaces::All), "all namespaces wins over one");
        assert_eq!(get("m3", "v1", "Pod"), Some(Namespaces::Only(["shop".to_string()].into())));
        assert_eq!(get("m3", "apps/v1", "Deployment"), Some(Namespaces::Only(["shop".to_string(), "web".to_string()].into())));
        assert_eq!(get("m1", "apps/v1", "Deployment"), None);
        // A cluster these clients cannot reach (a Pull one) is not selected.
        let sel = selection(&registries, &clusters, |c| c.name_any() != "m1");
        assert!(sel.keys().all(|k| k.cluster != "m1"));
        let ns = Namespaces::Only(["shop".to_string()].into());
        assert!(ns.keeps(&serde_json::json!({"metadata": {"namespace": "shop"}})));
        assert!(!ns.keeps(&serde_json::json!({"metadata": {"namespace": "web"}})));
        assert!(!ns.keeps(&serde_json::json!({"metadata": {}})));
    }
}
