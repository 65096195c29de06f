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

use std::collections::{BTreeMap, HashMap};
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

/// One cached object.
struct Entry {
    /// The object as served.
    json: Box<[u8]>,
    labels: Box<[(Box<str>, Box<str>)]>,
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
}

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
        Cache { shards: RwLock::new(HashMap::new()), bytes: AtomicUsize::new(0), limit, refused: AtomicU64::new(0) }
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
    pub fn replace(&self, kind: &KindKey, names: &KindNames, cluster: &str, objects: Vec<Value>, resource_version: &str) {
        let mut shards = self.shards.write();
        let shard = shards.entry((kind.clone(), cluster.to_string())).or_default();
        shard.names = Some(names.clone());
        let old = std::mem::take(&mut shard.objects);
        let freed: usize = old.iter().map(|(k, e)| e.size(k)).sum();
        shard.bytes -= freed.min(shard.bytes);
        self.bytes.fetch_sub(freed.min(self.bytes()), Ordering::Relaxed);
        drop(old);
        for o in objects {
            self.insert(shard, kind, names, cluster, o);
        }
        shard.resource_version = resource_version.to_string();
        shard.synced = true;
        shard.stale_since = None;
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
        self.insert(shard, kind, names, cluster, object);
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

    /// Forget what `cluster` serves of `kind`: no longer selected, or the cluster is gone.
    pub fn remove(&self, kind: &KindKey, cluster: &str) {
        if let Some(s) = self.shards.write().remove(&(kind.clone(), cluster.to_string())) {
            self.bytes.fetch_sub(s.bytes.min(self.bytes()), Ordering::Relaxed);
        }
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

    fn insert(&self, shard: &mut Shard, kind: &KindKey, names: &KindNames, cluster: &str, object: Value) {
        let key = key_of(&object);
        let entry = compact(kind, names, cluster, object);
        let size = entry.size(&key);
        let freed = shard.objects.get(&key).map_or(0, |e| e.size(&key));
        if self.bytes() + size > self.limit + freed {
            // Keep what was there (stale but bounded) rather than go over the cap.
            shard.refused += 1;
            self.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        shard.objects.insert(key, entry);
        shard.bytes = (shard.bytes + size).saturating_sub(freed);
        self.bytes.fetch_add(size, Ordering::Relaxed);
        self.bytes.fetch_sub(freed, Ordering::Relaxed);
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
                    None => std::borrow::Cow::Borrowed(&entry.json),
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
    let json = serde_json::to_vec(&object).unwrap_or_default().into_boxed_slice();
    Entry { json, labels }
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
}
