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

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
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

type Handler<K> = Arc<dyn Fn(&K, bool) + Send + Sync>;

struct Shared<K: Kind> {
    store: Store<K>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: tokio::sync::watch::Receiver<bool>,
}

/// The process's informers, one per kind, all on one client. Cheap to clone.
#[derive(Clone)]
pub struct Informers {
    client: Client,
    kinds: Arc<Mutex<HashMap<TypeId, (&'static str, Arc<dyn Any + Send + Sync>)>>>,
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
        Informers { client, kinds: Default::default(), shutdown }
    }

    /// The kinds watched so far (one watch each), by Rust type name.
    pub fn watched(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.kinds.lock().values().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names
    }

    fn shared<K: Kind>(&self) -> Arc<Shared<K>> {
        let mut kinds = self.kinds.lock();
        if let Some((_, any)) = kinds.get(&TypeId::of::<K>())
            && let Ok(shared) = any.clone().downcast::<Shared<K>>()
        {
            return shared;
        }
        let (store, writer) = reflector::store();
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared { store, handlers: RwLock::new(Vec::new()), synced });
        kinds.insert(TypeId::of::<K>(), (std::any::type_name::<K>(), shared.clone()));
        let api: Api<K> = Api::all(self.client.clone());
        tokio::spawn(run(api, writer, shared.clone(), synced_tx, self.shutdown.clone()));
        shared
    }

    /// The cache of kind `K` (filled once its first list is in; see [`Informers::synced`]).
    pub fn store<K: Kind>(&self) -> Store<K> {
        self.shared::<K>().store.clone()
    }

    /// Call `handler(object, deleted)` for every object of kind `K` applied or deleted from now
    /// on, and for every object already cached.
    pub fn subscribe<K: Kind>(&self, handler: impl Fn(&K, bool) + Send + Sync + 'static) {
        let shared = self.shared::<K>();
        let handler: Handler<K> = Arc::new(handler);
        // Registered before the replay: an event between the two is seen twice, never missed.
        shared.handlers.write().push(handler.clone());
        if *shared.synced.borrow() {
            for o in shared.store.state() {
                handler(&o, false);
            }
        }
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

/// One kind's watch: the reflector fills the cache, then the handlers hear of each change.
async fn run<K: Kind>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    shared: Arc<Shared<K>>,
    synced: tokio::sync::watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let stream = reflector(writer, watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut stream = std::pin::pin!(stream);
    let announce = |o: &K, deleted: bool| {
        for h in shared.handlers.read().iter() {
            h(o, deleted);
        }
    };
    let mut listed: Vec<K> = Vec::new();
    let mut before: HashMap<ObjectRef<K>, Arc<K>> = HashMap::new();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = shutdown.cancelled() => return,
        };
        let Some(event) = event else { return };
        match event {
            Ok(Event::Apply(o)) => announce(&o, false),
            Ok(Event::Delete(o)) => announce(&o, true),
            // The cache still holds what the last list and watch left: remember it, to tell
            // which objects the new list no longer has.
            Ok(Event::Init) => {
                listed.clear();
                before = shared.store.state().into_iter().map(|o| (ObjectRef::from_obj(&*o), o)).collect();
            }
            Ok(Event::InitApply(o)) => listed.push(o),
            Ok(Event::InitDone) => {
                let _ = synced.send(true);
                for o in &listed {
                    before.remove(&ObjectRef::from_obj(o));
                }
                for gone in std::mem::take(&mut before).into_values() {
                    announce(&gone, true);
                }
                for o in listed.drain(..) {
                    announce(&o, false);
                }
            }
            Err(e) => tracing::debug!(kind = std::any::type_name::<K>(), error = %e, "shared watch error; retrying"),
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
