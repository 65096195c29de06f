//! Shared informers: one watch and one cache per kind for the whole process, read by every
//! controller instead of a watch of its own (client-go's shared informer factory).
//!
//! [`Informers::store`] hands out the kind's cache (a kube-runtime reflector [`Store`]);
//! [`Informers::subscribe`] registers a handler called with every object applied or deleted,
//! after the cache has it. The first use of a kind starts its watch; every later use shares it.
//!
//! Two rules from the private watches this replaces hold here too:
//! - the objects of a (re)list are announced only once the whole list is in the cache (the
//!   reflector swaps the cache at the end of a list; a handler told earlier would find the old
//!   cache, ADR 0007);
//! - a relist announces the deletion of every object that vanished while the watch was down,
//!   so a handler never misses a delete.
//!
//! A handler added after the kind's first list is sent the cache's objects at once, as a
//! late client-go event handler is.
//!
//! Kinds known only at run time (templates of any kind, federated types, CRDs) are watched as
//! [`DynamicObject`]s, one watch per resource ([`Informers::dynamic_store`],
//! [`Informers::subscribe_dynamic`]), shared the same way. What needs only objects' metadata
//! of every resource (the garbage collector) subscribes with [`Informers::subscribe_meta`]: it
//! joins the resource's informer, typed or dynamic, whichever came first, so a kind is not
//! watched twice for it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client, Resource};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// A kind the informers can watch: a typed resource of any scope, watched across namespaces.
pub trait Kind: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static {}

impl<K> Kind for K where K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static {}

/// Called with the object as cached before the change (None when it was not cached), the
/// object applied or deleted, and whether it was deleted.
type Handler<K> = Arc<dyn Fn(Option<&K>, &K, bool) + Send + Sync>;

/// What an informer can hold: a typed kind, or dynamic objects of one resource.
trait Object: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static
where
    Self::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
}

impl<K> Object for K
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
}

struct Shared<K: Object>
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    store: Store<K>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: tokio::sync::watch::Receiver<bool>,
}

type MetaHandler = Arc<dyn Fn(Option<&ObjectMeta>, &ObjectMeta, bool) + Send + Sync>;

/// An informer seen through its objects' metadata, whatever their type.
trait MetaSource: Send + Sync {
    fn subscribe_meta(&self, handler: MetaHandler);
    fn synced(&self) -> tokio::sync::watch::Receiver<bool>;
}

impl<K: Object> MetaSource for Shared<K>
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    fn subscribe_meta(&self, handler: MetaHandler) {
        subscribe_to(self, move |old: Option<&K>, o: &K, deleted| handler(old.map(|old| old.meta()), o.meta(), deleted));
    }

    fn synced(&self) -> tokio::sync::watch::Receiver<bool> {
        self.synced.clone()
    }
}

/// What a process's shared watches may see. The control plane's controllers watch every kind
/// everywhere (the default); a pull agent, whose RBAC lets it list only its own part, narrows
/// chosen kinds to one namespace (its execution space's Works) or to one object by name (its
/// Cluster). A narrowed kind is watched as dynamic objects with the narrowed request and its
/// typed cache derived from that watch.
#[derive(Clone, Debug, Default)]
pub struct WatchScope {
    /// By `<apiVersion>/<plural>`.
    narrowed: HashMap<String, Narrow>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Narrow {
    Namespace(String),
    Name(String),
}

impl WatchScope {
    /// Watch kind `K` in `namespace` only.
    pub fn namespace_of<K: Kind>(mut self, namespace: &str) -> Self {
        self.narrowed.insert(resource_of::<K>(), Narrow::Namespace(namespace.to_string()));
        self
    }

    /// Watch only the object `name` of the cluster-scoped kind `K`.
    pub fn name_of<K: Kind>(mut self, name: &str) -> Self {
        self.narrowed.insert(resource_of::<K>(), Narrow::Name(name.to_string()));
        self
    }

    fn get(&self, resource: &str) -> Option<&Narrow> {
        self.narrowed.get(resource)
    }
}

fn resource_of<K: Kind>() -> String {
    format!("{}/{}", K::api_version(&()), K::plural(&()))
}

/// The process's informers, one per kind, all on one client. Cheap to clone.
#[derive(Clone)]
pub struct Informers {
    client: Client,
    scope: Arc<WatchScope>,
    /// By Rust type, and for dynamic objects by resource (`<apiVersion>/<plural>`); with the
    /// name [`Informers::watched`] gives.
    kinds: Arc<Mutex<HashMap<(TypeId, String), (String, Arc<dyn Any + Send + Sync>)>>>,
    /// The first informer of each resource (`<apiVersion>/<plural>`), for metadata subscribers.
    resources: Arc<Mutex<HashMap<String, Arc<dyn MetaSource>>>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Informers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informers").field("kinds", &self.watched()).finish()
    }
}

impl Informers {
    /// Informers on `client` (the identity every shared watch is made as); their watches end
    /// when `shutdown` is cancelled.
    pub fn new(client: Client, shutdown: CancellationToken) -> Informers {
        Informers::scoped(client, shutdown, WatchScope::default())
    }

    /// Informers whose watches see only `scope`'s part of the narrowed kinds.
    pub fn scoped(client: Client, shutdown: CancellationToken, scope: WatchScope) -> Informers {
        Informers { client, scope: Arc::new(scope), kinds: Default::default(), resources: Default::default(), shutdown }
    }

    /// The kinds watched so far (one watch each): typed kinds by Rust type name, dynamic ones
    /// by `<apiVersion>/<plural>`.
    pub fn watched(&self) -> Vec<String> {
        let mut names: Vec<String> = self.kinds.lock().values().map(|(n, _)| n.clone()).collect();
        names.sort_unstable();
        names
    }

    fn shared<K: Kind>(&self) -> Arc<Shared<K>> {
        let resource = resource_of::<K>();
        let key = (TypeId::of::<K>(), String::new());
        if self.scope.get(&resource).is_some() {
            // Make sure the narrowed dynamic watch exists; the typed cache is derived from it below.
            let ar = ApiResource::erase::<K>(&());
            let _ = self.shared_dynamic(&ar);
        }
        {
            let mut kinds = self.kinds.lock();
            if let Some((_, any)) = kinds.get(&key)
                && let Ok(shared) = any.clone().downcast::<Shared<K>>()
            {
                return shared;
            }
            // The resource is already watched as dynamic objects (for the garbage collector,
            // say): the typed informer is read from that watch instead of a second one.
            if let Some((_, any)) = kinds.get(&(TypeId::of::<DynamicObject>(), resource.clone()))
                && let Ok(dynamic) = any.clone().downcast::<Shared<DynamicObject>>()
            {
                let shared = derive::<K>(&dynamic);
                kinds.insert(key, (format!("{} (from {resource})", std::any::type_name::<K>()), shared.clone()));
                return shared;
            }
        }
        self.shared_with(key, std::any::type_name::<K>().to_string(), resource, (), || (Api::all(self.client.clone()), watcher::Config::default()))
    }

    fn shared_dynamic(&self, resource: &ApiResource) -> Arc<Shared<DynamicObject>> {
        let name = format!("{}/{}", resource.api_version, resource.plural);
        let narrow = self.scope.get(&name).cloned();
        let api = || match narrow {
            Some(Narrow::Namespace(ns)) => (Api::namespaced_with(self.client.clone(), &ns, resource), watcher::Config::default()),
            Some(Narrow::Name(n)) => (Api::all_with(self.client.clone(), resource), watcher::Config::default().fields(&format!("metadata.name={n}"))),
            None => (Api::all_with(self.client.clone(), resource), watcher::Config::default()),
        };
        self.shared_with((TypeId::of::<DynamicObject>(), name.clone()), name.clone(), name, resource.clone(), api)
    }

    fn shared_with<K: Object>(
        &self,
        key: (TypeId, String),
        name: String,
        resource: String,
        dt: K::DynamicType,
        api: impl FnOnce() -> (Api<K>, watcher::Config),
    ) -> Arc<Shared<K>>
    where
        K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    {
        let mut kinds = self.kinds.lock();
        if let Some((_, any)) = kinds.get(&key)
            && let Ok(shared) = any.clone().downcast::<Shared<K>>()
        {
            return shared;
        }
        let writer = reflector::store::Writer::new(dt.clone());
        let store = writer.as_reader();
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared { store, handlers: RwLock::new(Vec::new()), synced });
        kinds.insert(key, (name, shared.clone()));
        self.resources.lock().entry(resource).or_insert_with(|| shared.clone());
        let (api, config) = api();
        tokio::spawn(run(api, config, writer, dt, shared.clone(), synced_tx, self.shutdown.clone()));
        shared
    }

    /// The metadata informer of `resource`: the resource's first informer, or a new dynamic one.
    fn meta_source(&self, resource: &ApiResource) -> Arc<dyn MetaSource> {
        let name = format!("{}/{}", resource.api_version, resource.plural);
        if let Some(source) = self.resources.lock().get(&name) {
            return source.clone();
        }
        self.shared_dynamic(resource)
    }

    /// Call `handler(old, object, deleted)` with the metadata of every object of `resource`
    /// applied or deleted, as [`Informers::subscribe_changes`] does, on the resource's informer
    /// whether typed or dynamic.
    pub fn subscribe_meta(&self, resource: &ApiResource, handler: impl Fn(Option<&ObjectMeta>, &ObjectMeta, bool) + Send + Sync + 'static) {
        self.meta_source(resource).subscribe_meta(Arc::new(handler));
    }

    /// Wait until the first list of `resource` is in (the informer [`Informers::subscribe_meta`]
    /// joins).
    pub async fn meta_synced(&self, resource: &ApiResource) {
        let mut rx = self.meta_source(resource).synced();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The cache of the dynamic objects of `resource` (a kind known at run time).
    pub fn dynamic_store(&self, resource: &ApiResource) -> Store<DynamicObject> {
        self.shared_dynamic(resource).store.clone()
    }

    /// As [`Informers::subscribe_changes`], for the dynamic objects of `resource`.
    pub fn subscribe_dynamic(&self, resource: &ApiResource, handler: impl Fn(Option<&DynamicObject>, &DynamicObject, bool) + Send + Sync + 'static) {
        subscribe_to(&self.shared_dynamic(resource), handler);
    }

    /// Wait until the first list of `resource` is in its cache.
    pub async fn dynamic_synced(&self, resource: &ApiResource) {
        let mut rx = self.shared_dynamic(resource).synced.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The cache of kind `K` (filled once its first list is in; see [`Informers::synced`]).
    pub fn store<K: Kind>(&self) -> Store<K> {
        self.shared::<K>().store.clone()
    }

    /// Call `handler(object, deleted)` for every object of kind `K` applied or deleted from now
    /// on, and for every object already cached.
    pub fn subscribe<K: Kind>(&self, handler: impl Fn(&K, bool) + Send + Sync + 'static) {
        self.subscribe_changes::<K>(move |_old, o, deleted| handler(o, deleted));
    }

    /// As [`Informers::subscribe`], with the object as cached before each change too (None for
    /// an object new to the cache, and for the replay to a late handler): for handlers that
    /// react only to some changes (a generation that moved, a label that changed).
    pub fn subscribe_changes<K: Kind>(&self, handler: impl Fn(Option<&K>, &K, bool) + Send + Sync + 'static) {
        subscribe_to(&self.shared::<K>(), handler);
    }

    /// The cache of kind `K` and `handler` subscribed to it (see [`Informers::subscribe`]), with
    /// a future that ends at shutdown: the shared counterpart of [`watch_into_store`].
    pub fn watch<K: Kind>(&self, handler: impl Fn(&K, bool) + Send + Sync + 'static) -> (Store<K>, futures::future::BoxFuture<'static, ()>) {
        self.subscribe::<K>(handler);
        let shutdown = self.shutdown.clone();
        (self.store::<K>(), Box::pin(async move { shutdown.cancelled().await }))
    }

    /// The token whose cancellation ends the watches (and the controllers that share it).
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Wait until kind `K`'s first list is in its cache.
    pub async fn synced<K: Kind>(&self) {
        let mut rx = self.shared::<K>().synced.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}

fn announce<K: Object>(shared: &Shared<K>, old: Option<&K>, o: &K, deleted: bool)
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    for h in shared.handlers.read().iter() {
        h(old, o, deleted);
    }
}

/// A typed informer read from the dynamic informer of the same resource: each dynamic object
/// converted, into a cache of its own. Synced once the dynamic informer is, with the objects it
/// then holds; a change is announced once the typed cache has it.
fn derive<K: Kind>(dynamic: &Arc<Shared<DynamicObject>>) -> Arc<Shared<K>> {
    let writer = reflector::store::Writer::<K>::new(());
    let store = writer.as_reader();
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared { store, handlers: RwLock::new(Vec::new()), synced });
    let writer = Arc::new(Mutex::new(writer));
    let typed = |o: &DynamicObject| -> Option<K> {
        let converted = serde_json::to_value(o).and_then(serde_json::from_value::<K>);
        match converted {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(kind = std::any::type_name::<K>(), object = ?o.metadata.name, error = %e, "an object does not decode as its kind; left out of the typed cache");
                None
            }
        }
    };
    let (s, w) = (shared.clone(), writer.clone());
    subscribe_to(dynamic, move |_, o, deleted| {
        let Some(k) = typed(o) else { return };
        let (old, synced) = {
            let mut w = w.lock();
            let old = s.store.get(&ObjectRef::from_obj(&k));
            w.apply_watcher_event(&if deleted { Event::Delete(k.clone()) } else { Event::Apply(k.clone()) });
            (old, *s.synced.borrow())
        };
        // Before the typed cache is synced, its first list announces what it holds.
        if synced {
            announce(&s, old.as_deref(), &k, deleted);
        }
    });
    let (s, dynamic) = (shared.clone(), dynamic.clone());
    tokio::spawn(async move {
        let _ = dynamic.synced.clone().wait_for(|synced| *synced).await;
        let listed: Vec<K> = {
            let mut w = writer.lock();
            let listed: Vec<K> = dynamic.store.state().iter().filter_map(|o| typed(o)).collect();
            w.apply_watcher_event(&Event::Init);
            for o in &listed {
                w.apply_watcher_event(&Event::InitApply(o.clone()));
            }
            w.apply_watcher_event(&Event::InitDone);
            let _ = synced_tx.send(true);
            listed
        };
        for o in &listed {
            announce(&s, None, o, false);
        }
    });
    shared
}

fn subscribe_to<K: Object>(shared: &Shared<K>, handler: impl Fn(Option<&K>, &K, bool) + Send + Sync + 'static)
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let handler: Handler<K> = Arc::new(handler);
    // Registered before the replay: an event between the two is seen twice, never missed.
    shared.handlers.write().push(handler.clone());
    if *shared.synced.borrow() {
        for o in shared.store.state() {
            handler(None, &o, false);
        }
    }
}

/// One kind's watch: each event is applied to the cache, then the handlers hear of it with the
/// object as cached before.
async fn run<K: Object>(
    api: Api<K>,
    config: watcher::Config,
    mut writer: reflector::store::Writer<K>,
    dt: K::DynamicType,
    shared: Arc<Shared<K>>,
    synced: tokio::sync::watch::Sender<bool>,
    shutdown: CancellationToken,
) where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let reference = |o: &K| ObjectRef::from_obj_with(o, dt.clone());
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut listed: Vec<K> = Vec::new();
    let mut before: HashMap<ObjectRef<K>, Arc<K>> = HashMap::new();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = shutdown.cancelled() => return,
        };
        let Some(event) = event else { return };
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(kind = std::any::type_name::<K>(), error = %e, "shared watch error; retrying");
                continue;
            }
        };
        let old = match &event {
            Event::Apply(o) | Event::Delete(o) => shared.store.get(&reference(o)),
            _ => None,
        };
        writer.apply_watcher_event(&event);
        match event {
            Event::Apply(o) => announce(&shared, old.as_deref(), &o, false),
            Event::Delete(o) => announce(&shared, old.as_deref(), &o, true),
            // The cache still holds what the last list and watch left: remember it, to tell
            // which objects the new list no longer has (the cache is swapped at InitDone).
            Event::Init => {
                listed.clear();
                before = shared.store.state().into_iter().map(|o| (reference(&o), o)).collect();
            }
            Event::InitApply(o) => listed.push(o),
            Event::InitDone => {
                let _ = synced.send(true);
                let listed: Vec<(Option<Arc<K>>, K)> = listed.drain(..).map(|o| (before.remove(&reference(&o)), o)).collect();
                for gone in std::mem::take(&mut before).into_values() {
                    announce(&shared, Some(&gone), &gone, true);
                }
                for (old, o) in listed {
                    announce(&shared, old.as_deref(), &o, false);
                }
            }
        }
    }
}

/// A private watch (for what is not the control plane's, e.g. a member's objects): `api` into a
/// store of its own, calling `on_event` for every object applied or deleted once the
/// store has it (objects of a (re)list when the whole list is in). The future runs until the watch ends; the store is filled as it runs.
pub fn watch_into_store<K, F>(
    api: kube::Api<K>,
    config: kube::runtime::watcher::Config,
    on_event: F,
) -> (kube::runtime::reflector::Store<K>, impl std::future::Future<Output = ()> + Send)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    F: Fn(&K, bool) + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::Event as E;
    let (store, writer) = kube::runtime::reflector::store();
    let fut = async move {
        let stream = kube::runtime::reflector(writer, kube::runtime::watcher(api, config).default_backoff());
        let mut stream = std::pin::pin!(stream);
        // The reflector fills the store with a (re)list only at InitDone: announcing the listed
        // objects earlier would send readers to a store that does not have them yet.
        let mut listed: Vec<K> = Vec::new();
        while let Some(event) = stream.next().await {
            match event {
                Ok(E::Apply(o)) => on_event(&o, false),
                Ok(E::Delete(o)) => on_event(&o, true),
                Ok(E::Init) => listed.clear(),
                Ok(E::InitApply(o)) => listed.push(o),
                Ok(E::InitDone) => {
                    for o in listed.drain(..) {
                        on_event(&o, false);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "watch error; retrying"),
            }
        }
    };
    (store, fut)
}
