//! The garbage collector: what kube-controller-manager's garbagecollector does for a real
//! cluster, for Flotilla's own API server.
//!
//! - An object whose every owner is gone (no object of that kind and name with the owner's uid)
//!   is deleted; owners that are gone are removed from an object that still has a live one.
//! - An owner deleted with `propagationPolicy: Foreground` carries the `foregroundDeletion`
//!   finalizer: its dependents are deleted, and the finalizer is removed once no dependent with
//!   `blockOwnerDeletion: true` remains.
//! - An owner deleted with `propagationPolicy: Orphan` carries the `orphan` finalizer: the
//!   owner is removed from its dependents' `ownerReferences`, then the finalizer is removed.
//!
//! It watches every resource that can be listed, watched and deleted (Events excepted: they are
//! many and nothing owns them in practice), keeping only each object's identity, owners and
//! deletion state. Before deleting anything because an owner is missing it asks the API server
//! for the owner, so a lagging watch never causes a deletion; every delete carries the
//! dependent's uid as a precondition, so a re-created object of the same name is never touched.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, Preconditions, PropagationPolicy};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;

use flotilla_runtime::{Informers, Next, Runtime, WorkQueue, run_workers};

pub const NAME: &str = "garbage-collector";
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
pub const ORPHAN_FINALIZER: &str = "orphan";

/// Settings of the collector.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often discovery is read again, to start collecting new kinds (CRDs).
    pub rediscover: Duration,
    /// Workers deleting and patching.
    pub workers: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { rediscover: Duration::from_secs(30), workers: 2 }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// What the collector keeps of one object.
#[derive(Clone, Debug)]
struct Node {
    resource: Arc<ApiResource>,
    namespace: Option<String>,
    name: String,
    owners: Vec<OwnerReference>,
    deleting: bool,
    foreground: bool,
    orphan: bool,
}

impl Node {
    fn of(meta: &ObjectMeta, resource: &Arc<ApiResource>) -> Option<(String, Node)> {
        let uid = meta.uid.clone()?;
        let has = |f: &str| meta.finalizers.iter().flatten().any(|x| x == f);
        Some((
            uid,
            Node {
                resource: resource.clone(),
                namespace: meta.namespace.clone(),
                name: meta.name.clone().unwrap_or_default(),
                owners: meta.owner_references.clone().unwrap_or_default(),
                deleting: meta.deletion_timestamp.is_some(),
                foreground: has(FOREGROUND_FINALIZER),
                orphan: has(ORPHAN_FINALIZER),
            },
        ))
    }

    fn describe(&self) -> String {
        let r = &self.resource;
        let group = if r.group.is_empty() { String::new() } else { format!(".{}", r.group) };
        match &self.namespace {
            Some(ns) => format!("{}{group} {ns}/{}", r.plural, self.name),
            None => format!("{}{group} {}", r.plural, self.name),
        }
    }

    fn api(&self, client: &Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &*self.resource),
            None => Api::all_with(client.clone(), &*self.resource),
        }
    }
}

/// Objects by uid, and dependents by owner uid.
#[derive(Default)]
struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    /// Record `node`; returns the owner uids it no longer references.
    fn upsert(&mut self, uid: String, node: Node) -> Vec<String> {
        let before: HashSet<String> = self.nodes.get(&uid).map(|n| n.owners.iter().map(|o| o.uid.clone()).collect()).unwrap_or_default();
        let after: HashSet<String> = node.owners.iter().map(|o| o.uid.clone()).collect();
        for gone in before.difference(&after) {
            self.unlink(gone, &uid);
        }
        for owner in &after {
            self.dependents.entry(owner.clone()).or_default().insert(uid.clone());
        }
        self.nodes.insert(uid, node);
        before.difference(&after).cloned().collect()
    }

    fn remove(&mut self, uid: &str) -> Option<Node> {
        let node = self.nodes.remove(uid)?;
        for o in &node.owners {
            self.unlink(&o.uid, uid);
        }
        Some(node)
    }

    fn unlink(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }

    fn dependents_of(&self, owner: &str) -> Vec<(String, Node)> {
        self.dependents.get(owner).into_iter().flatten().filter_map(|d| self.nodes.get(d).map(|n| (d.clone(), n.clone()))).collect()
    }

    fn has_dependents(&self, uid: &str) -> bool {
        self.dependents.get(uid).is_some_and(|s| !s.is_empty())
    }
}

/// Where an owner reference points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnerState {
    /// The owner exists and is not waiting for its dependents.
    Solid,
    /// No object of that kind and name has the owner's uid.
    Dangling,
    /// The owner is being deleted in the foreground.
    Waiting,
}

/// What to do with an object that is not being deleted, given the state of each owner.
#[derive(Clone, Debug, PartialEq)]
enum Verdict {
    Keep,
    /// Remove these owners from the object's references.
    DropOwners(Vec<String>),
    Delete(PropagationPolicy),
}

/// kube-controller-manager's rule: an object with a live owner stays (minus the owners that are
/// gone or waiting on it); otherwise it goes, in the foreground when a waiting owner needs its
/// dependents gone first, else as its own finalizers ask.
fn verdict(node: &Node, owners: &[(String, OwnerState)], has_dependents: bool) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let of = |s: OwnerState| owners.iter().filter(move |(_, st)| *st == s).map(|(u, _)| u.clone());
    if of(OwnerState::Solid).next().is_some() {
        let drop: Vec<String> = of(OwnerState::Dangling).chain(of(OwnerState::Waiting)).collect();
        return if drop.is_empty() { Verdict::Keep } else { Verdict::DropOwners(drop) };
    }
    if of(OwnerState::Waiting).next().is_some() && has_dependents {
        return Verdict::Delete(PropagationPolicy::Foreground);
    }
    Verdict::Delete(if node.orphan {
        PropagationPolicy::Orphan
    } else if node.foreground {
        PropagationPolicy::Foreground
    } else {
        PropagationPolicy::Background
    })
}

/// The resource to look an owner up in: (group, kind) → resource, from discovery.
type Kinds = HashMap<(String, String), (Arc<ApiResource>, Scope)>;

struct Context {
    client: Client,
    graph: Mutex<Graph>,
    kinds: Mutex<Kinds>,
    queue: Arc<WorkQueue<String>>,
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl Context {
    /// The state of `owner` as seen from a dependent in `namespace`; None when it cannot be
    /// told yet (an unknown kind, an error), in which case nothing is done.
    async fn owner_state(&self, owner: &OwnerReference, namespace: Option<&str>) -> Option<OwnerState> {
        // A namespaced owner must be in its dependent's namespace (a reference elsewhere points
        // at nothing, as on a real cluster).
        if let Some(n) = self.graph.lock().nodes.get(&owner.uid)
            && n.name == owner.name
            && (n.namespace.is_none() || n.namespace.as_deref() == namespace)
        {
            return Some(if n.deleting && n.foreground { OwnerState::Waiting } else { OwnerState::Solid });
        }
        // Not seen (yet): ask the API server.
        let (resource, scope) = self.kinds.lock().get(&(group_of(&owner.api_version).to_string(), owner.kind.clone())).cloned()?;
        let api: Api<DynamicObject> = match (scope, namespace) {
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &*resource),
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &*resource),
            // A cluster-scoped object naming a namespaced owner cannot be resolved; a real
            // cluster never collects it either.
            (Scope::Namespaced, None) => return Some(OwnerState::Solid),
        };
        match api.get_opt(&owner.name).await {
            Ok(None) => Some(OwnerState::Dangling),
            Ok(Some(o)) if o.metadata.uid.as_deref() != Some(owner.uid.as_str()) => Some(OwnerState::Dangling),
            Ok(Some(o)) => {
                let waiting = o.metadata.deletion_timestamp.is_some() && o.finalizers().iter().any(|f| f == FOREGROUND_FINALIZER);
                Some(if waiting { OwnerState::Waiting } else { OwnerState::Solid })
            }
            Err(e) => {
                tracing::debug!(controller = NAME, owner = %owner.name, error = %e, "looking up an owner failed");
                None
            }
        }
    }

    fn observe(&self, meta: &ObjectMeta, resource: &Arc<ApiResource>, deleted: bool) {
        let Some((uid, node)) = Node::of(meta, resource) else { return };
        let mut graph = self.graph.lock();
        if deleted {
            graph.remove(&uid);
            // Its dependents lost an owner; a foreground owner may have lost its last blocker.
            for d in graph.dependents.get(&uid).into_iter().flatten() {
                self.queue.add(d.clone());
            }
            for o in &node.owners {
                self.queue.add(o.uid.clone());
            }
            return;
        }
        let interesting = !node.owners.is_empty() || (node.deleting && (node.foreground || node.orphan));
        let dropped = graph.upsert(uid.clone(), node);
        for o in dropped {
            self.queue.add(o);
        }
        if interesting {
            self.queue.add(uid);
        }
    }
}

async fn reconcile(uid: String, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(node) = ctx.graph.lock().nodes.get(&uid).cloned() else { return Ok(Next::Done) };
    if node.deleting {
        if node.orphan {
            return orphan_dependents(&ctx, &uid, &node).await;
        }
        if node.foreground {
            return delete_dependents(&ctx, &uid, &node).await;
        }
        return Ok(Next::Done);
    }
    let mut owners = Vec::with_capacity(node.owners.len());
    for o in &node.owners {
        match ctx.owner_state(o, node.namespace.as_deref()).await {
            Some(state) => owners.push((o.uid.clone(), state)),
            None => return Ok(Next::After(Duration::from_secs(10))),
        }
    }
    let has_dependents = ctx.graph.lock().has_dependents(&uid);
    match verdict(&node, &owners, has_dependents) {
        Verdict::Keep => Ok(Next::Done),
        Verdict::DropOwners(gone) => {
            drop_owner_refs(&ctx, &uid, &node, &gone).await?;
            Ok(Next::Done)
        }
        Verdict::Delete(policy) => {
            tracing::info!(controller = NAME, object = %node.describe(), ?policy, "deleting: its owners are gone");
            delete(&ctx, &uid, &node, policy).await?;
            Ok(Next::Done)
        }
    }
}

async fn delete(ctx: &Context, uid: &str, node: &Node, policy: PropagationPolicy) -> Result<(), Error> {
    let params = DeleteParams {
        propagation_policy: Some(policy),
        preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
        ..DeleteParams::default()
    };
    match node.api(&ctx.client).delete(&node.name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or a different object by now.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(api_err(format!("deleting {}", node.describe()))(e)),
    }
}

/// Patch `node` (as it is now on the server) with a change to its metadata, guarded by its
/// resourceVersion; a conflict is an error, so the key is retried on fresh data.
async fn patch_metadata(ctx: &Context, uid: &str, node: &Node, change: impl FnOnce(&DynamicObject) -> Option<serde_json::Value>) -> Result<(), Error> {
    let api = node.api(&ctx.client);
    let Some(live) = api.get_opt(&node.name).await.map_err(api_err(format!("reading {}", node.describe())))? else { return Ok(()) };
    if live.metadata.uid.as_deref() != Some(uid) {
        return Ok(());
    }
    let Some(mut metadata) = change(&live) else { return Ok(()) };
    metadata["resourceVersion"] = live.metadata.resource_version.clone().into();
    let patch = serde_json::json!({ "metadata": metadata });
    match api.patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(api_err(format!("updating {}", node.describe()))(e)),
    }
}

async fn drop_owner_refs(ctx: &Context, uid: &str, node: &Node, gone: &[String]) -> Result<(), Error> {
    tracing::info!(controller = NAME, object = %node.describe(), owners = ?gone, "removing owners that are gone");
    patch_metadata(ctx, uid, node, |live| {
        let refs = live.owner_references();
        let kept: Vec<&OwnerReference> = refs.iter().filter(|o| !gone.contains(&o.uid)).collect();
        (kept.len() != refs.len()).then(|| serde_json::json!({ "ownerReferences": kept }))
    })
    .await
}

async fn remove_finalizer(ctx: &Context, uid: &str, node: &Node, finalizer: &str) -> Result<(), Error> {
    patch_metadata(ctx, uid, node, |live| {
        flotilla_runtime::without_finalizer(live.metadata.finalizers.as_ref(), finalizer).map(|f| serde_json::json!({ "finalizers": f }))
    })
    .await
}

async fn orphan_dependents(ctx: &Context, uid: &str, node: &Node) -> Result<Next, Error> {
    let dependents = ctx.graph.lock().dependents_of(uid);
    for (dep_uid, dep) in &dependents {
        drop_owner_refs(ctx, dep_uid, dep, &[uid.to_string()]).await?;
    }
    tracing::info!(controller = NAME, object = %node.describe(), dependents = dependents.len(), "dependents orphaned");
    remove_finalizer(ctx, uid, node, ORPHAN_FINALIZER).await?;
    Ok(Next::Done)
}

async fn delete_dependents(ctx: &Context, uid: &str, node: &Node) -> Result<Next, Error> {
    let dependents = ctx.graph.lock().dependents_of(uid);
    let mut blocking = 0;
    for (dep_uid, dep) in &dependents {
        let blocks = dep.owners.iter().any(|o| o.uid == uid && o.block_owner_deletion == Some(true));
        if blocks {
            blocking += 1;
        }
        if !dep.deleting {
            let policy = if ctx.graph.lock().has_dependents(dep_uid) { PropagationPolicy::Foreground } else { PropagationPolicy::Background };
            delete(ctx, dep_uid, dep, policy).await?;
        }
    }
    if blocking == 0 {
        tracing::info!(controller = NAME, object = %node.describe(), "no blocking dependents left");
        remove_finalizer(ctx, uid, node, FOREGROUND_FINALIZER).await?;
    }
    // Each dependent's disappearance queues this owner again.
    Ok(Next::Done)
}

/// Resources the collector watches: listable, watchable and deletable, Events excepted.
fn collectable(ar: &ApiResource, caps: &kube::discovery::ApiCapabilities) -> bool {
    caps.supports_operation(verbs::LIST)
        && caps.supports_operation(verbs::WATCH)
        && caps.supports_operation(verbs::DELETE)
        && ar.plural != "events"
        && !ar.plural.contains('/')
}

/// Watch one resource into the graph, through the process's informer of the resource (typed
/// or dynamic: the collector reads only metadata). Reports its first complete list on `synced`.
fn watch_resource(ctx: &Arc<Context>, informers: &Informers, resource: Arc<ApiResource>, synced: tokio::sync::mpsc::UnboundedSender<()>) {
    let c = ctx.clone();
    let r = resource.clone();
    // The informer announces the deletion of what vanished while its watch was down.
    informers.subscribe_meta(&resource, move |_, meta, deleted| c.observe(meta, &r, deleted));
    let informers = informers.clone();
    tokio::spawn(async move {
        informers.meta_synced(&resource).await;
        let _ = synced.send(());
    });
}

/// Read discovery; start watching resources not yet watched. Returns how many were started.
async fn discover(
    ctx: &Arc<Context>,
    informers: &Informers,
    watched: &mut HashSet<(String, String)>,
    synced: &tokio::sync::mpsc::UnboundedSender<()>,
) -> Result<usize, kube::Error> {
    let discovery = Discovery::new(ctx.client.clone()).run().await?;
    let mut started = 0;
    for group in discovery.groups() {
        for (ar, caps) in served_resources(group) {
            ctx.kinds.lock().insert((ar.group.clone(), ar.kind.clone()), (Arc::new(ar.clone()), caps.scope.clone()));
            if !collectable(&ar, &caps) || !watched.insert((ar.group.clone(), ar.plural.clone())) {
                continue;
            }
            watch_resource(ctx, informers, Arc::new(ar), synced.clone());
            started += 1;
        }
    }
    Ok(started)
}

/// Every resource of a group once, at the group's preferred version when that version serves it,
/// else at the first version that does (as client-go's `ServerPreferredResources`): a kind
/// served only at a version other than the preferred one is still collected.
fn served_resources(group: &kube::discovery::ApiGroup) -> Vec<(ApiResource, kube::discovery::ApiCapabilities)> {
    let preferred = group.preferred_version_or_latest().to_string();
    let versions = std::iter::once(preferred.clone()).chain(group.versions().filter(|v| *v != preferred).map(str::to_string));
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for v in versions {
        for (ar, caps) in group.versioned_resources(&v) {
            if seen.insert(ar.plural.clone()) {
                out.push((ar, caps));
            }
        }
    }
    out
}

/// Run the collector on `rt`'s informers until it shuts down.
pub async fn run(client: Client, rt: Runtime, config: Config) {
    let ctx = Arc::new(Context {
        client,
        graph: Mutex::new(Graph::default()),
        kinds: Mutex::new(HashMap::new()),
        queue: WorkQueue::new(Duration::from_millis(200), Duration::from_secs(60)),
    });
    let (synced_tx, mut synced_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watched = HashSet::new();
    let first = loop {
        match discover(&ctx, &rt.informers, &mut watched, &synced_tx).await {
            Ok(n) => break n,
            Err(e) => {
                tracing::warn!(controller = NAME, error = %e, "discovery failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(2)) => {}
                    () = rt.shutdown.cancelled() => return,
                }
            }
        }
    };
    // Deciding that a foreground owner has no dependents left needs every resource listed once.
    for _ in 0..first {
        tokio::select! {
            _ = synced_rx.recv() => {}
            () = rt.shutdown.cancelled() => return,
        }
    }
    tracing::info!(controller = NAME, resources = first, objects = ctx.graph.lock().nodes.len(), "collecting");
    let rediscover = {
        let (ctx, informers) = (ctx.clone(), rt.informers.clone());
        async move {
            loop {
                tokio::time::sleep(config.rediscover).await;
                if let Err(e) = discover(&ctx, &informers, &mut watched, &synced_tx).await {
                    tracing::debug!(controller = NAME, error = %e, "discovery failed");
                }
            }
        }
    };
    let queue = ctx.queue.clone();
    let shutdown = rt.shutdown.clone();
    let stop = queue.clone();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        stop.shutdown();
    });
    tokio::select! {
        () = run_workers(queue, config.workers, NAME, move |uid| reconcile(uid, ctx.clone())) => {}
        () = rediscover => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(orphan: bool, foreground: bool) -> Node {
        Node {
            resource: Arc::new(ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())),
            namespace: Some("default".into()),
            name: "x".into(),
            owners: vec![],
            deleting: false,
            foreground,
            orphan,
        }
    }

    #[test]
    fn a_live_owner_keeps_its_dependent_and_sheds_the_dead_ones() {
        let n = node(false, false);
        assert_eq!(verdict(&n, &[("a".into(), OwnerState::Solid)], false), Verdict::Keep);
        assert_eq!(
            verdict(&n, &[("a".into(), OwnerState::Solid), ("b".into(), OwnerState::Dangling), ("c".into(), OwnerState::Waiting)], false),
            Verdict::DropOwners(vec!["b".into(), "c".into()])
        );
    }

    #[test]
    fn without_a_live_owner_the_object_goes_as_its_finalizers_ask() {
        let dangling = [("a".to_string(), OwnerState::Dangling)];
        assert_eq!(verdict(&node(false, false), &dangling, true), Verdict::Delete(PropagationPolicy::Background));
        assert_eq!(verdict(&node(true, false), &dangling, true), Verdict::Delete(PropagationPolicy::Orphan));
        assert_eq!(verdict(&node(false, true), &dangling, false), Verdict::Delete(PropagationPolicy::Foreground));
        assert_eq!(verdict(&node(false, false), &[], false), Verdict::Keep);
    }

    #[test]
    fn a_waiting_owner_deletes_dependents_with_dependents_in_the_foreground() {
        let waiting = [("a".to_string(), OwnerState::Waiting)];
        assert_eq!(verdict(&node(false, false), &waiting, true), Verdict::Delete(PropagationPolicy::Foreground));
        assert_eq!(verdict(&node(false, false), &waiting, false), Verdict::Delete(PropagationPolicy::Background));
    }

    #[test]
    fn the_graph_tracks_dependents_as_owner_references_change() {
        let mut g = Graph::default();
        let owned_by = |uids: &[&str]| {
            let mut n = node(false, false);
            n.owners = uids.iter().map(|u| OwnerReference { uid: u.to_string(), ..Default::default() }).collect();
            n
        };
        assert!(g.upsert("d".into(), owned_by(&["a", "b"])).is_empty());
        assert!(g.has_dependents("a") && g.has_dependents("b"));
        assert_eq!(g.upsert("d".into(), owned_by(&["b"])), vec!["a".to_string()]);
        assert!(!g.has_dependents("a"));
        g.remove("d");
        assert!(!g.has_dependents("b"));
        assert!(g.dependents.is_empty());
    }

    #[test]
    fn groups_come_from_api_versions() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("work.karmada.io/v1alpha2"), "work.karmada.io");
    }
}
