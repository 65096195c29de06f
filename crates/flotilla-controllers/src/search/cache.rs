//! The global view's cache of member objects (issue 25): what the members serve of the kinds
//! ResourceRegistries select, held compactly and read with Kubernetes list semantics.
//!
//! Each object is kept as the JSON bytes it will be served as — `apiVersion` and `kind` set,
//! `metadata.managedFields` dropped (no reader of the global view writes through them), the
//! annotation `resource.karmada.io/cached-from-cluster` added — plus its labels for selectors.
//! No JSON tree is kept per object, so memory stays near the objects' stored size; a list
//! copies the bytes into the response as they are.
//!
//! The cache is split into shards, one per (kind, cluster), each with the member's own
//! resourceVersion of its last list or event. A list's resourceVersion encodes every shard's
//! as karmada-search's multi-cluster resourceVersion does (base64url of `{"<cluster>":"<rv>"}`,
//! sorted by cluster), and its `continue` the last key served. Pages are read from the cache as
//! it is when each is asked for (kube-apiserver serves every page from the first page's
//! snapshot; a cache of many members has none).
//!
//! A shard whose member is out of reach keeps its objects, marked stale: they are served with
//! the annotation `search.flotilla.io/stale-since` until the member's watch is back.
//!
//! The cache has a cap in bytes (`--search-cache-limit`): an object that would take it over is
//! not cached, the shard says so ([`Cache::refused`]) and the ResourceRegistry's `Cached`
//! condition turns False with reason `CacheFull`.
//!
//! Watches: every change is an [`Event`] numbered by the cache (`seq`) and carrying the member's
//! resourceVersion; each shard keeps its last events (`history`), so a watch resumes from a
//! multi-cluster resourceVersion — each cluster's events after its own — or says 410 Gone when
//! the shard no longer holds them, as kube-apiserver's watch cache does. A relist of a member
//! becomes the events that bring a watcher from the old state to the new one.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use base64::Engine as _;
use flotilla_api::federation::karmada::search::{CACHED_FROM_CLUSTER, STALE_SINCE};
use flotilla_api::selector::{FieldSelector, LabelSelector};
use parking_lot::RwLock;
use serde_json::{Map, Value};

/// A kind as the members serve it: group, version and plural.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindKey {
    pub group: String,
    pub version: String,
    /// The plural, as in a URL.
    pub resource: String,
}

impl KindKey {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// What a kind is called, for the objects and lists served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindNames {
    pub kind: String,
    pub namespaced: bool,
}

/// One cached object; its parts are shared with the events that carry it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The object as served.
    json: Arc<[u8]>,
    labels: Arc<[(Box<str>, Box<str>)]>,
}

/// Bytes an entry is charged beside its JSON and labels: its map slot, key and boxes.
const ENTRY_OVERHEAD: usize = 96;

impl Entry {
    fn size(&self, key: &(Box<str>, Box<str>)) -> usize {
        self.json.len() + self.labels.iter().map(|(k, v)| k.len() + v.len() + 32).sum::<usize>() + key.0.len() + key.1.len() + ENTRY_OVERHEAD
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
    }

    /// The object as served.
    pub fn json(&self) -> &[u8] {
        &self.json
    }
}

/// What happened to an object, as a watch says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one cached object.
#[derive(Debug)]
pub struct Event {
    /// The cache's own order of changes (all shards).
    pub seq: u64,
    pub kind: KindKey,
    pub cluster: Arc<str>,
    pub namespace: Box<str>,
    pub name: Box<str>,
    pub type_: EventType,
    /// The member's resourceVersion of the change (0 when it is not a number).
    pub resource_version: u64,
    /// The object after the change (before it, for a deletion).
    pub object: Entry,
}

/// Events each shard keeps for watches resuming from a resourceVersion (kube-apiserver's watch
/// cache keeps about as many per resource).
pub const DEFAULT_HISTORY: usize = 1000;
/// Events in flight to the watchers; a watcher further behind catches up from the histories.
const BROADCAST: usize = 4096;

/// What one cluster serves of one kind.
#[derive(Default)]
struct Shard {
    names: Option<KindNames>,
    /// By (namespace, name); cluster-scoped objects have an empty namespace.
    objects: BTreeMap<(Box<str>, Box<str>), Entry>,
    /// The member's resourceVersion of the last list or event seen.
    resource_version: String,
    /// When the member went out of reach; its objects are served as last seen.
    stale_since: Option<String>,
    /// A full list has been seen.
    synced: bool,
    /// Objects not cached because the cache was full.
    refused: u64,
    bytes: usize,
    /// The last events, oldest first.
    history: VecDeque<Arc<Event>>,
    /// The newest member resourceVersion and cache sequence no longer in `history`: a watch
    /// from before them cannot be resumed.
    floor_rv: u64,
    floor_seq: u64,
}

/// The state of one shard, for the ResourceRegistry's status and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardState {
    pub objects: usize,
    pub bytes: usize,
    pub synced: bool,
    pub stale_since: Option<String>,
    pub refused: u64,
}

/// The cache. Shared by the controller that fills it and the handlers that read it.
pub struct Cache {
    shards: RwLock<HashMap<(KindKey, String), Shard>>,
    bytes: AtomicUsize,
    limit: usize,
    refused: AtomicU64,
    /// The last event's number; taken under the shards' write lock.
    seq: AtomicU64,
    history: usize,
    events: tokio::sync::broadcast::Sender<Arc<Event>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("bytes", &self.bytes()).field("limit", &self.limit).finish_non_exhaustive()
    }
}

/// What a list asks for.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    /// A `continue` token from an earlier page.
    pub continue_token: Option<String>,
}

/// A list that could not be served as asked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListError {
    #[error("the provided continue parameter is too old or malformed: {0}")]
    BadContinue(String),
}

/// One page of a list: the response body and how many objects it holds.
#[derive(Debug)]
pub struct ListPage {
    pub body: Vec<u8>,
    pub items: usize,
    pub continue_token: Option<String>,
}

impl Cache {
    /// A cache holding at most `limit` bytes of objects.
    pub fn new(limit: usize) -> Cache {
        Cache::with_history(limit, DEFAULT_HISTORY)
    }

    /// A cache holding at most `limit` bytes of objects, each shard keeping its last `history`
    /// events for watches.
    pub fn with_history(limit: usize, history: usize) -> Cache {
        Cache {
            shards: RwLock::new(HashMap::new()),
            bytes: AtomicUsize::new(0),
            limit,
            refused: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            history: history.max(1),
            events: tokio::sync::broadcast::channel(BROADCAST).0,
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Objects not cached since the start because the cache was full.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Objects held now.
    pub fn objects(&self) -> usize {
        self.shards.read().values().map(|s| s.objects.len()).sum()
    }

    /// Replace what `cluster` serves of `kind` with a full list at `resource_version`; the shard
    /// is then synced and fresh.
    ///
    /// Watchers see the difference: objects gone as deleted, new ones added, changed ones
    /// modified, all at the list's resourceVersion. The first list of a shard has no events:
    /// a watch that did not know the cluster gets its objects as added.
    pub fn replace(&self, kind: &KindKey, names: &KindNames, cluster: &str, objects: Vec<Value>, resource_version: &str) {
        let mut shards = self.shards.write();
        let shard = shards.entry((kind.clone(), cluster.to_string())).or_default();
        shard.names = Some(names.clone());
        let first = !shard.synced && shard.objects.is_empty() && shard.history.is_empty();
        let old = std::mem::take(&mut shard.objects);
        let freed: usize = old.iter().map(|(k, e)| e.size(k)).sum();
        shard.bytes -= freed.min(shard.bytes);
        self.bytes.fetch_sub(freed.min(self.bytes()), Ordering::Relaxed);
        let rv = parse_rv(resource_version);
        let mut changes = Vec::new();
        for o in objects {
            let key = key_of(&o);
            let member_rv = o.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(String::from);
            if let Some(entry) = self.insert(shard, kind, names, cluster, o) {
                match old.get(&key) {
                    None => changes.push((key, EventType::Added, entry)),
                    Some(before) if member_rv.is_none() || json_rv(&before.json) != member_rv => changes.push((key, EventType::Modified, entry)),
                    Some(_) => {}
                }
            }
        }
        for (key, entry) in old {
            if !shard.objects.contains_key(&key) {
                changes.push((key, EventType::Deleted, entry));
            }
        }
        shard.resource_version = resource_version.to_string();
        shard.synced = true;
        shard.stale_since = None;
        if first {
            shard.floor_rv = rv;
            shard.floor_seq = self.seq.load(Ordering::Relaxed);
            return;
        }
        for ((ns, name), type_, entry) in changes {
            self.record(shard, kind, cluster, ns, name, type_, rv, entry);
        }
    }

    /// An object added or changed in `cluster`.
    pub fn apply(&self, kind: &KindKey, names: &KindNames, cluster: &str, object: Value) {
        let mut shards = self.shards.write();
        let shard = shards.entry((kind.clone(), cluster.to_string())).or_default();
        shard.names = Some(names.clone());
        if let Some(rv) = object.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
            shard.resource_version = rv.to_string();
        }
        shard.stale_since = None;
        let rv = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).map_or(0, parse_rv);
        let key = key_of(&object);
        let existed = shard.objects.contains_key(&key);
        if let Some(entry) = self.insert(shard, kind, names, cluster, object) {
            let type_ = if existed { EventType::Modified } else { EventType::Added };
            self.record(shard, kind, cluster, key.0, key.1, type_, rv, entry);
        }
    }

    /// An object deleted in `cluster`.
    pub fn delete(&self, kind: &KindKey, cluster: &str, object: &Value) {
        let mut shards = self.shards.write();
        let Some(shard) = shards.get_mut(&(kind.clone(), cluster.to_string())) else { return };
        if let Some(rv) = object.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
            shard.resource_version = rv.to_string();
        }
        shard.stale_since = None;
        let key = key_of(object);
        if let Some(e) = shard.objects.remove(&key) {
            let size = e.size(&key);
            shard.bytes -= size.min(shard.bytes);
            self.bytes.fetch_sub(size, Ordering::Relaxed);
            let rv = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).map_or(0, parse_rv);
            // The object as it was last, at the deletion's resourceVersion.
            let names = shard.names.clone().unwrap_or(KindNames { kind: String::new(), namespaced: true });
            let last = compact(kind, &names, cluster, object.clone());
            let entry = if last.json.is_empty() { e } else { last };
            self.record(shard, kind, cluster, key.0, key.1, EventType::Deleted, rv, entry);
        }
    }

    /// `cluster`'s shards of `kind` (or of every kind) marked out of reach since `since`
    /// (RFC 3339), unless already so.
    pub fn mark_stale(&self, kind: Option<&KindKey>, cluster: &str, since: &str) {
        for ((k, c), s) in self.shards.write().iter_mut() {
            if c == cluster && kind.is_none_or(|kind| kind == k) && s.stale_since.is_none() {
                s.stale_since = Some(since.to_string());
            }
        }
    }

    /// `cluster`'s shard of `kind` fresh again: its member answers (a watch is back).
    pub fn mark_fresh(&self, kind: &KindKey, cluster: &str) {
        if let Some(s) = self.shards.write().get_mut(&(kind.clone(), cluster.to_string())) {
            s.stale_since = None;
        }
    }

    /// Forget what `cluster` serves of `kind`: no longer selected, or the cluster is gone.
    pub fn remove(&self, kind: &KindKey, cluster: &str) {
        if let Some(s) = self.shards.write().remove(&(kind.clone(), cluster.to_string())) {
            self.bytes.fetch_sub(s.bytes.min(self.bytes()), Ordering::Relaxed);
        }
    }

    /// The clusters whose cache holds `namespace/name` of `kind`, in order.
    pub fn owners(&self, kind: &KindKey, namespace: &str, name: &str) -> Vec<String> {
        let key: (Box<str>, Box<str>) = (namespace.into(), name.into());
        let mut out: Vec<String> =
            self.shards.read().iter().filter(|((k, _), s)| k == kind && s.objects.contains_key(&key)).map(|((_, c), _)| c.clone()).collect();
        out.sort();
        out
    }

    /// Whether any cluster's objects of `kind` are cached (the kind is selected somewhere).
    pub fn holds(&self, kind: &KindKey) -> bool {
        self.shards.read().keys().any(|(k, _)| k == kind)
    }

    /// The kind's names, as a member serves it.
    pub fn names(&self, kind: &KindKey) -> Option<KindNames> {
        self.shards.read().iter().filter(|((k, _), _)| k == kind).find_map(|(_, s)| s.names.clone())
    }

    /// The shards held now.
    pub fn shards(&self) -> Vec<(KindKey, String)> {
        self.shards.read().keys().cloned().collect()
    }

    pub fn state(&self, kind: &KindKey, cluster: &str) -> Option<ShardState> {
        let shards = self.shards.read();
        let s = shards.get(&(kind.clone(), cluster.to_string()))?;
        Some(ShardState { objects: s.objects.len(), bytes: s.bytes, synced: s.synced, stale_since: s.stale_since.clone(), refused: s.refused })
    }

    /// The member's resourceVersion for `kind` in `cluster` (where a watch resumes).
    pub fn resource_version(&self, kind: &KindKey, cluster: &str) -> Option<String> {
        self.shards.read().get(&(kind.clone(), cluster.to_string())).map(|s| s.resource_version.clone())
    }

    /// Cache `object`; the entry kept, or None when the cap refused it.
    fn insert(&self, shard: &mut Shard, kind: &KindKey, names: &KindNames, cluster: &str, object: Value) -> Option<Entry> {
        let key = key_of(&object);
        let entry = compact(kind, names, cluster, object);
        let size = entry.size(&key);
        let freed = shard.objects.get(&key).map_or(0, |e| e.size(&key));
        if self.bytes() + size > self.limit + freed {
            // Keep what was there (stale but bounded) rather than go over the cap.
            shard.refused += 1;
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        shard.objects.insert(key, entry.clone());
        shard.bytes = (shard.bytes + size).saturating_sub(freed);
        self.bytes.fetch_add(size, Ordering::Relaxed);
        self.bytes.fetch_sub(freed, Ordering::Relaxed);
        Some(entry)
    }

    /// Number a change, keep it in the shard's history and tell the watchers. Called with the
    /// shards' write lock held, so numbers follow the order changes are made in.
    #[allow(clippy::too_many_arguments)]
    fn record(&self, shard: &mut Shard, kind: &KindKey, cluster: &str, namespace: Box<str>, name: Box<str>, type_: EventType, rv: u64, object: Entry) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let event = Arc::new(Event { seq, kind: kind.clone(), cluster: cluster.into(), namespace, name, type_, resource_version: rv, object });
        if shard.history.len() == self.history
            && let Some(old) = shard.history.pop_front()
        {
            shard.floor_rv = old.resource_version;
            shard.floor_seq = old.seq;
        }
        shard.history.push_back(event.clone());
        // No receiver is not an error: nobody watches.
        let _ = self.events.send(event);
    }

    /// Start watching `kind`: the events a watch from `from` must see first, and the receiver
    /// of the changes after them.
    ///
    /// `from` is each cluster's member resourceVersion; a cluster it does not name (or every
    /// cluster, for None: a watch from "" or "0") starts with its objects as added, as
    /// kube-apiserver starts a watch without a resourceVersion.
    pub fn watch(&self, kind: &KindKey, clusters: Option<&[String]>, from: Option<&BTreeMap<String, String>>) -> Result<WatchStart, WatchError> {
        // Subscribe first: nothing made after the histories are read is missed.
        let receiver = self.events.subscribe();
        let shards = self.shards.read();
        let seq = self.seq.load(Ordering::Relaxed);
        let mut ours: Vec<(&String, &Shard)> =
            shards.iter().filter(|((k, c), _)| k == kind && clusters.is_none_or(|cs| cs.contains(c))).map(|((_, c), s)| (c, s)).collect();
        ours.sort_by(|a, b| a.0.cmp(b.0));
        let mut initial = Vec::new();
        let mut positions = BTreeMap::new();
        for (cluster, shard) in ours {
            positions.insert(cluster.clone(), shard.resource_version.clone());
            match from.and_then(|f| f.get(cluster)) {
                Some(rv) => {
                    let rv =
                        rv.parse::<u64>().map_err(|_| WatchError::Gone(format!("{cluster}: resourceVersion {rv:?} is not one this cache can resume from")))?;
                    if rv < shard.floor_rv {
                        return Err(WatchError::Gone(format!("too old resource version: {rv} ({cluster} is cached from {})", shard.floor_rv)));
                    }
                    initial.extend(shard.history.iter().filter(|e| e.resource_version > rv).cloned());
                }
                None => {
                    let rv = parse_rv(&shard.resource_version);
                    for ((ns, name), entry) in &shard.objects {
                        initial.push(Arc::new(Event {
                            seq,
                            kind: kind.clone(),
                            cluster: cluster.as_str().into(),
                            namespace: ns.clone(),
                            name: name.clone(),
                            type_: EventType::Added,
                            resource_version: rv,
                            object: entry.clone(),
                        }));
                    }
                }
            }
        }
        Ok(WatchStart { initial, positions, seq, receiver })
    }

    /// The events of `kind` numbered after `seq`, from the histories, for a watcher that fell
    /// behind the broadcast; 410 Gone when a history no longer reaches back that far.
    pub fn events_after(&self, kind: &KindKey, clusters: Option<&[String]>, seq: u64) -> Result<Vec<Arc<Event>>, WatchError> {
        let shards = self.shards.read();
        let mut out = Vec::new();
        for ((k, c), s) in shards.iter() {
            if k != kind || !clusters.is_none_or(|cs| cs.contains(c)) {
                continue;
            }
            if s.floor_seq > seq {
                return Err(WatchError::Gone(format!("the watch fell behind {c}'s history")));
            }
            out.extend(s.history.iter().filter(|e| e.seq > seq).cloned());
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    /// One page of `kind` over `clusters` (all the cache holds if None), as a `<Kind>List` body.
    pub fn list(&self, kind: &KindKey, clusters: Option<&[String]>, q: &ListQuery) -> Result<ListPage, ListError> {
        let after = match q.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => Some(Continue::decode(t).ok_or_else(|| ListError::BadContinue(t.to_string()))?),
            None => None,
        };
        let shards = self.shards.read();
        let mut ours: Vec<(&String, &Shard)> =
            shards.iter().filter(|((k, c), _)| k == kind && clusters.is_none_or(|cs| cs.contains(c))).map(|((_, c), s)| (c, s)).collect();
        ours.sort_by(|a, b| a.0.cmp(b.0));
        let names = ours.iter().find_map(|(_, s)| s.names.clone());
        let rv = multi_cluster_resource_version(ours.iter().map(|(c, s)| (c.as_str(), s.resource_version.as_str())));
        let limit = q.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items: Vec<std::borrow::Cow<'_, [u8]>> = Vec::new();
        let mut next = None;
        let mut last = (String::new(), String::new(), String::new());
        'shards: for (cluster, shard) in &ours {
            if let Some(a) = &after
                && cluster.as_str() < a.cluster.as_str()
            {
                continue;
            }
            let range = shard.objects.iter().filter(|((ns, _), _)| q.namespace.as_deref().is_none_or(|want| **ns == *want));
            for ((ns, name), entry) in range {
                if let Some(a) = &after
                    && (cluster.as_str(), &**ns, &**name) <= (a.cluster.as_str(), a.namespace.as_str(), a.name.as_str())
                {
                    continue;
                }
                if !q.labels.matches_with(|k| entry.label(k)) {
                    continue;
                }
                if !q.fields.is_empty() && !fields_match(&q.fields, ns, name, &entry.json) {
                    continue;
                }
                if items.len() == limit {
                    // There is at least one more: the token points after the last one served.
                    let (cluster, namespace, name) = std::mem::take(&mut last);
                    next = Some(Continue { rv: rv.clone(), cluster, namespace, name });
                    break 'shards;
                }
                items.push(match &shard.stale_since {
                    Some(since) => std::borrow::Cow::Owned(with_annotation(&entry.json, STALE_SINCE, since)),
                    None => std::borrow::Cow::Borrowed(&entry.json[..]),
                });
                last = ((*cluster).clone(), (**ns).to_string(), (**name).to_string());
            }
        }
        let kind_name = names.map_or_else(|| String::from("List"), |n| format!("{}List", n.kind));
        let continue_token = next.map(|c| c.encode());
        let mut meta = Map::new();
        meta.insert("resourceVersion".into(), Value::String(rv));
        if let Some(t) = &continue_token {
            meta.insert("continue".into(), Value::String(t.clone()));
        }
        let head = serde_json::json!({"kind": kind_name, "apiVersion": kind.api_version(), "metadata": meta});
        let mut body = serde_json::to_vec(&head).unwrap_or_default();
        // Replace the closing brace with the items.
        body.pop();
        body.extend_from_slice(b",\"items\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.extend_from_slice(b"]}");
        Ok(ListPage { body, items: items.len(), continue_token })
    }
}

/// What a watch starts with.
#[derive(Debug)]
pub struct WatchStart {
    /// The events to send first, in order.
    pub initial: Vec<Arc<Event>>,
    /// Each cluster's resourceVersion as of the start.
    pub positions: BTreeMap<String, String>,
    /// Events numbered up to this are in `initial` or were before the watch; the receiver's
    /// later ones are new.
    pub seq: u64,
    pub receiver: tokio::sync::broadcast::Receiver<Arc<Event>>,
}

/// A watch that cannot start or go on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WatchError {
    /// 410 Gone: the events after the resourceVersion are no longer held.
    #[error("{0}")]
    Gone(String),
}

/// The caches of this process, for `/metrics` ([`render_metrics`]).
static CACHES: parking_lot::Mutex<Vec<std::sync::Weak<Cache>>> = parking_lot::Mutex::new(Vec::new());

impl Cache {
    /// Count this cache in `/metrics`.
    pub fn register_metrics(self: &Arc<Self>) {
        let mut all = CACHES.lock();
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(self));
    }
}

/// The global view's cache in Prometheus' text format: objects, bytes held (each object's
/// served JSON, its labels and a fixed overhead), the cap, and objects refused at the cap.
pub fn render_metrics() -> String {
    let caches: Vec<Arc<Cache>> = CACHES.lock().iter().filter_map(std::sync::Weak::upgrade).collect();
    if caches.is_empty() {
        return String::new();
    }
    let sum = |f: &dyn Fn(&Cache) -> u64| caches.iter().map(|c| f(c)).sum::<u64>();
    let mut out = String::new();
    for (name, kind, help, value) in [
        ("flotilla_search_cache_objects", "gauge", "Member objects held by the global view's cache.", sum(&|c| c.objects() as u64)),
        ("flotilla_search_cache_bytes", "gauge", "Bytes the global view's cache holds (served JSON, labels, per-object overhead).", sum(&|c| c.bytes() as u64)),
        ("flotilla_search_cache_limit_bytes", "gauge", "The global view cache's cap (--search-cache-limit).", sum(&|c| c.limit() as u64)),
        ("flotilla_search_cache_refused_total", "counter", "Member objects not cached because the cache was at its cap.", sum(&|c| c.refused())),
    ] {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"));
    }
    out
}

/// A member resourceVersion as a number (0 when it is not one).
fn parse_rv(rv: &str) -> u64 {
    rv.parse().unwrap_or(0)
}

/// The `metadata.resourceVersion` of a served object.
fn json_rv(json: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Obj {
        metadata: Option<Meta>,
    }
    serde_json::from_slice::<Obj>(json).ok()?.metadata?.resource_version
}

/// Whether an object matches a query's namespace and selectors.
pub fn matches(q: &ListQuery, namespace: &str, name: &str, object: &Entry) -> bool {
    q.namespace.as_deref().is_none_or(|want| namespace == want)
        && q.labels.matches_with(|k| object.label(k))
        && (q.fields.is_empty() || fields_match(&q.fields, namespace, name, &object.json))
}

/// An object's (namespace, name).
fn key_of(object: &Value) -> (Box<str>, Box<str>) {
    let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().into();
    (s("/metadata/namespace"), s("/metadata/name"))
}

/// The object as it will be served, and its labels.
fn compact(kind: &KindKey, names: &KindNames, cluster: &str, mut object: Value) -> Entry {
    let labels: Box<[(Box<str>, Box<str>)]> = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or_default().into())).collect())
        .unwrap_or_default();
    if let Some(o) = object.as_object_mut() {
        o.insert("apiVersion".into(), Value::String(kind.api_version()));
        o.insert("kind".into(), Value::String(names.kind.clone()));
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
            let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Map::new()));
            if let Some(a) = annotations.as_object_mut() {
                a.insert(CACHED_FROM_CLUSTER.into(), Value::String(cluster.to_string()));
            }
        }
    }
    let json: Arc<[u8]> = serde_json::to_vec(&object).unwrap_or_default().into();
    Entry { json, labels: labels.into() }
}

/// `json` with one more annotation (a stale shard's objects).
fn with_annotation(json: &[u8], key: &str, value: &str) -> Vec<u8> {
    let Ok(mut o) = serde_json::from_slice::<Value>(json) else { return json.to_vec() };
    if let Some(a) = o.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        a.insert(key.into(), Value::String(value.into()));
    }
    serde_json::to_vec(&o).unwrap_or_else(|_| json.to_vec())
}

/// Whether an object matches a field selector: `metadata.name` and `metadata.namespace` from
/// its key, any other field path read from the object (a string as is, a number or boolean as
/// Go prints it, anything else or nothing as empty).
fn fields_match(fields: &FieldSelector, namespace: &str, name: &str, json: &[u8]) -> bool {
    let object = std::cell::OnceCell::new();
    fields.matches(|path| match path {
        "metadata.name" => Some(name.to_string()),
        "metadata.namespace" => Some(namespace.to_string()),
        _ => {
            let o: &Value = object.get_or_init(|| serde_json::from_slice(json).unwrap_or(Value::Null));
            let pointer = format!("/{}", path.replace('~', "~0").replace('/', "~1").replace('.', "/"));
            match o.pointer(&pointer)? {
                Value::String(s) => Some(s.clone()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        }
    })
}

/// karmada-search's multi-cluster resourceVersion: base64url (no padding) of a JSON object of
/// each cluster's own resourceVersion, in cluster order; empty for no cluster.
pub fn multi_cluster_resource_version<'a>(rvs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let map: BTreeMap<&str, &str> = rvs.into_iter().collect();
    if map.is_empty() {
        return String::new();
    }
    let json = serde_json::to_vec(&map).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// Each cluster's resourceVersion from a multi-cluster one; None if it is not one.
pub fn parse_multi_cluster_resource_version(rv: &str) -> Option<BTreeMap<String, String>> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(rv).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Where the next page starts: after (cluster, namespace, name) of the list at `rv`.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Eq)]
struct Continue {
    rv: String,
    cluster: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    namespace: String,
    name: String,
}

impl Continue {
    fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    fn decode(token: &str) -> Option<Continue> {
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> (KindKey, KindNames) {
        (KindKey { group: String::new(), version: "v1".into(), resource: "pods".into() }, KindNames { kind: "Pod".into(), namespaced: true })
    }

    fn pod(ns: &str, name: &str, app: &str, node: &str, rv: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": {"app": app},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"nodeName": node, "hostNetwork": false}, "status": {"phase": "Running"}})
    }

    fn items(page: &ListPage) -> Vec<Value> {
        let v: Value = serde_json::from_slice(&page.body).unwrap();
        v["items"].as_array().unwrap().clone()
    }

    fn names(page: &ListPage) -> Vec<String> {
        items(page)
            .iter()
            .map(|o| {
                format!(
                    "{}:{}/{}",
                    o["metadata"]["annotations"][CACHED_FROM_CLUSTER].as_str().unwrap(),
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    }

    fn filled() -> Cache {
        let (k, n) = pods();
        let cache = Cache::new(1 << 20);
        cache.replace(&k, &n, "member2", vec![pod("shop", "web-1", "web", "node-a", "20"), pod("shop", "db-0", "db", "node-b", "21")], "21");
        cache.replace(&k, &n, "member1", vec![pod("shop", "web-0", "web", "node-a", "10"), pod("kube-system", "dns", "dns", "node-a", "11")], "11");
        cache
    }

    #[test]
    fn a_list_serves_every_cluster_annotated_in_order_with_a_multi_cluster_resource_version() {
        let (k, _) = pods();
        let page = filled().list(&k, None, &ListQuery::default()).unwrap();
        assert_eq!(names(&page), ["member1:kube-system/dns", "member1:shop/web-0", "member2:shop/db-0", "member2:shop/web-1"]);
        let v: Value = serde_json::from_slice(&page.body).unwrap();
        assert_eq!((v["kind"].as_str(), v["apiVersion"].as_str()), (Some("PodList"), Some("v1")));
        let rv = parse_multi_cluster_resource_version(v["metadata"]["resourceVersion"].as_str().unwrap()).unwrap();
        assert_eq!(rv, BTreeMap::from([("member1".to_string(), "11".to_string()), ("member2".to_string(), "21".to_string())]));
        let first = &items(&page)[0];
        assert_eq!((first["apiVersion"].as_str(), first["kind"].as_str()), (Some("v1"), Some("Pod")));
        assert!(first["metadata"].get("managedFields").is_none(), "managedFields are not kept: {first}");
        assert!(v["metadata"].get("continue").is_none());
    }

    #[test]
    fn label_field_and_namespace_selectors() {
        let (k, _) = pods();
        let cache = filled();
        let q = |labels: &str, fields: &str, ns: Option<&str>| ListQuery {
            labels: LabelSelector::parse(labels).unwrap(),
            fields: FieldSelector::parse(fields).unwrap(),
            namespace: ns.map(String::from),
            ..ListQuery::default()
        };
        assert_eq!(names(&cache.list(&k, None, &q("app=web", "", None)).unwrap()), ["member1:shop/web-0", "member2:shop/web-1"]);
        assert_eq!(names(&cache.list(&k, None, &q("app in (db,dns)", "spec.nodeName=node-b", None)).unwrap()), ["member2:shop/db-0"]);
        assert_eq!(names(&cache.list(&k, None, &q("", "status.phase=Running,metadata.namespace!=shop", None)).unwrap()), ["member1:kube-system/dns"]);
        assert_eq!(names(&cache.list(&k, None, &q("", "spec.hostNetwork=false", Some("kube-system"))).unwrap()), ["member1:kube-system/dns"]);
        assert_eq!(names(&cache.list(&k, Some(&["member2".to_string()]), &q("", "", None)).unwrap()), ["member2:shop/db-0", "member2:shop/web-1"]);
        assert_eq!(cache.list(&k, None, &q("app=none", "", None)).unwrap().items, 0);
    }

    #[test]
    fn pages_follow_one_another_across_clusters_and_a_bad_token_is_refused() {
        let (k, _) = pods();
        let cache = filled();
        let mut seen = Vec::new();
        let mut token = None;
        loop {
            let page = cache.list(&k, None, &ListQuery { limit: Some(3), continue_token: token.clone(), ..ListQuery::default() }).unwrap();
            seen.extend(names(&page));
            token = page.continue_token;
            if token.is_none() {
                break;
            }
        }
        assert_eq!(seen, ["member1:kube-system/dns", "member1:shop/web-0", "member2:shop/db-0", "member2:shop/web-1"]);
        let two = cache.list(&k, None, &ListQuery { limit: Some(2), ..ListQuery::default() }).unwrap();
        assert!(two.continue_token.is_some(), "a full page with more behind it has a token");
        let bad = cache.list(&k, None, &ListQuery { continue_token: Some("not-a-token".into()), ..ListQuery::default() });
        assert_eq!(bad.unwrap_err(), ListError::BadContinue("not-a-token".into()));
    }

    #[test]
    fn events_update_the_shard_and_stale_shards_say_so() {
        let (k, n) = pods();
        let cache = filled();
        cache.apply(&k, &n, "member1", pod("shop", "web-2", "web", "node-a", "12"));
        cache.delete(&k, "member2", &json!({"metadata": {"name": "db-0", "namespace": "shop", "resourceVersion": "22"}}));
        assert_eq!(cache.resource_version(&k, "member2").as_deref(), Some("22"));
        cache.mark_stale(None, "member2", "2026-12-06T03:00:00Z");
        let page = cache.list(&k, None, &ListQuery::default()).unwrap();
        assert_eq!(names(&page), ["member1:kube-system/dns", "member1:shop/web-0", "member1:shop/web-2", "member2:shop/web-1"]);
        let all = items(&page);
        assert_eq!(all[3]["metadata"]["annotations"][STALE_SINCE], "2026-12-06T03:00:00Z");
        assert!(all[0]["metadata"]["annotations"].get(STALE_SINCE).is_none());
        assert_eq!(cache.state(&k, "member2").unwrap().stale_since.as_deref(), Some("2026-12-06T03:00:00Z"));
        // The watch back: an event makes the shard fresh.
        cache.apply(&k, &n, "member2", pod("shop", "web-3", "web", "node-b", "23"));
        assert_eq!(cache.state(&k, "member2").unwrap().stale_since, None);
    }

    #[test]
    fn the_cap_holds_and_the_bytes_add_up() {
        let (k, n) = pods();
        let one = {
            let c = Cache::new(usize::MAX);
            c.apply(&k, &n, "m", pod("shop", "p-0", "web", "node-a", "1"));
            c.bytes()
        };
        let cache = Cache::new(one * 3 + one / 2);
        for i in 0..5 {
            cache.apply(&k, &n, "m", pod("shop", &format!("p-{i}"), "web", "node-a", &i.to_string()));
        }
        assert_eq!((cache.objects(), cache.refused()), (3, 2), "the fourth and fifth do not fit");
        assert_eq!(cache.state(&k, "m").unwrap().refused, 2);
        assert!(cache.bytes() <= cache.limit());
        // Updating a cached object in place fits; deleting frees its bytes.
        cache.apply(&k, &n, "m", pod("shop", "p-0", "web", "node-a", "9"));
        assert_eq!(cache.objects(), 3);
        cache.delete(&k, "m", &json!({"metadata": {"name": "p-0", "namespace": "shop"}}));
        cache.delete(&k, "m", &json!({"metadata": {"name": "p-1", "namespace": "shop"}}));
        cache.delete(&k, "m", &json!({"metadata": {"name": "p-2", "namespace": "shop"}}));
        assert_eq!((cache.objects(), cache.bytes()), (0, 0));
        cache.remove(&k, "m");
        assert!(cache.shards().is_empty());
    }

    fn drain(start: &mut WatchStart) -> Vec<String> {
        let mut out: Vec<String> = std::mem::take(&mut start.initial).iter().map(|e| format!("{} {}:{}", e.type_.as_str(), e.cluster, e.name)).collect();
        while let Ok(e) = start.receiver.try_recv() {
            if e.seq > start.seq {
                out.push(format!("{} {}:{}", e.type_.as_str(), e.cluster, e.name));
            }
        }
        out
    }

    #[test]
    fn a_watch_resumes_each_cluster_from_its_own_resource_version() {
        let (k, n) = pods();
        let cache = filled();
        // A list, then changes in both clusters.
        let listed = cache.list(&k, None, &ListQuery::default()).unwrap();
        let v: Value = serde_json::from_slice(&listed.body).unwrap();
        let from = parse_multi_cluster_resource_version(v["metadata"]["resourceVersion"].as_str().unwrap()).unwrap();
        cache.apply(&k, &n, "member1", pod("shop", "web-2", "web", "node-a", "12"));
        cache.apply(&k, &n, "member2", pod("shop", "web-1", "web", "node-c", "22"));
        cache.delete(&k, "member1", &json!({"metadata": {"name": "dns", "namespace": "kube-system", "resourceVersion": "13"}}));
        // A watch from the list's resourceVersion sees exactly those, in each cluster's order.
        let mut w = cache.watch(&k, None, Some(&from)).unwrap();
        assert_eq!(drain(&mut w), ["ADDED member1:web-2", "DELETED member1:dns", "MODIFIED member2:web-1"]);
        // Later changes come through the receiver.
        cache.apply(&k, &n, "member2", pod("shop", "web-4", "web", "node-c", "23"));
        assert_eq!(drain(&mut w), ["ADDED member2:web-4"]);
        // From a later point in one cluster, only what came after it there.
        let mut from2 = from.clone();
        from2.insert("member1".into(), "12".into());
        assert_eq!(drain(&mut cache.watch(&k, None, Some(&from2)).unwrap()), ["DELETED member1:dns", "MODIFIED member2:web-1", "ADDED member2:web-4"]);
        // No resourceVersion, or a cluster it does not name: the objects as added.
        let mut w = cache.watch(&k, Some(&["member2".to_string()]), None).unwrap();
        assert_eq!(drain(&mut w), ["ADDED member2:db-0", "ADDED member2:web-1", "ADDED member2:web-4"]);
        let only1 = BTreeMap::from([("member1".to_string(), "13".to_string())]);
        assert_eq!(drain(&mut cache.watch(&k, None, Some(&only1)).unwrap()), ["ADDED member2:db-0", "ADDED member2:web-1", "ADDED member2:web-4"]);
    }

    #[test]
    fn a_relist_is_seen_as_its_differences_and_old_versions_are_gone() {
        let (k, n) = pods();
        let cache = Cache::with_history(1 << 20, 3);
        cache.replace(&k, &n, "m", vec![pod("shop", "a", "web", "n", "1"), pod("shop", "b", "web", "n", "2")], "2");
        let from = BTreeMap::from([("m".to_string(), "2".to_string())]);
        // The member came back after compaction: relisted with a gone, b changed, c new.
        cache.replace(&k, &n, "m", vec![pod("shop", "b", "web", "n", "7"), pod("shop", "c", "web", "n", "8")], "9");
        let mut w = cache.watch(&k, None, Some(&from)).unwrap();
        let mut seen = drain(&mut w);
        seen.sort();
        assert_eq!(seen, ["ADDED m:c", "DELETED m:a", "MODIFIED m:b"]);
        // The history keeps three: a fourth change leaves the watch from 2 too old.
        cache.apply(&k, &n, "m", pod("shop", "d", "web", "n", "10"));
        assert!(matches!(cache.watch(&k, None, Some(&from)), Err(WatchError::Gone(m)) if m.contains("too old")));
        let from9 = BTreeMap::from([("m".to_string(), "9".to_string())]);
        assert_eq!(drain(&mut cache.watch(&k, None, Some(&from9)).unwrap()), ["ADDED m:d"]);
        assert!(matches!(cache.watch(&k, None, Some(&BTreeMap::from([("m".to_string(), "x".to_string())]))), Err(WatchError::Gone(_))));
        // A watcher behind the broadcast catches up from the histories, or is told it is gone.
        assert_eq!(cache.events_after(&k, None, 0).map(|e| e.len()), Err(WatchError::Gone("the watch fell behind m's history".into())));
        let last = cache.events_after(&k, None, cache.seq.load(Ordering::Relaxed) - 1).unwrap();
        assert_eq!(last.iter().map(|e| &*e.name).collect::<Vec<_>>(), ["d"]);
        assert_eq!(cache.owners(&k, "shop", "d"), ["m"]);
        assert!(cache.owners(&k, "shop", "a").is_empty());
    }
}
