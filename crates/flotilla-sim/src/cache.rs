//! What the simulator knows of its member: a cache fed by one watch on the member's store,
//! and the work each change calls for.
//!
//! Workload objects (few) are kept whole, typed; pods and nodes (many) as compact summaries
//! — a pod's whole object is read from the store when one is written. Objects of other kinds
//! are only indexed by their owners, for garbage collection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use flotilla_store::{KeyValue, Revision, WatchEvent};
use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;

use crate::kinds::{self, Res};
use crate::selectors::Labels;

/// Namespace and name.
pub type ObjKey = (String, String);

/// Something to reconcile.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Work {
    Deployment(ObjKey),
    ReplicaSet(ObjKey),
    StatefulSet(ObjKey),
    DaemonSet(ObjKey),
    Job(ObjKey),
    CronJob(ObjKey),
    /// A Service's EndpointSlices.
    Service(ObjKey),
    /// Every pod waiting for a node.
    Schedule,
    /// The kubelet's part in one pod's life.
    Pod(ObjKey),
    /// One node's heartbeat and lifecycle.
    Node(String),
    /// A namespace's default service account, or its termination.
    Namespace(String),
    /// Dependents of the object with this uid (at this store key): deleted, orphaned or
    /// waited for, as its deletion asks.
    Collect {
        uid: String,
        key: String,
    },
}

impl Work {
    /// Work of the workload controllers (off when `MemberConfig::simulate_workloads` is);
    /// nodes, namespaces and garbage collection are the member's own.
    pub fn is_workload(&self) -> bool {
        !matches!(self, Work::Node(_) | Work::Namespace(_) | Work::Collect { .. })
    }
}

/// The phase of a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    fn parse(s: Option<&str>) -> Phase {
        match s {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            Some("Unknown") => Phase::Unknown,
            _ => Phase::Pending,
        }
    }
    pub fn terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// A pod's controller (its ownerReference with `controller: true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub kind: Box<str>,
    pub name: Box<str>,
    pub uid: Box<str>,
}

/// What the simulator keeps of a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    pub uid: Box<str>,
    pub labels: Labels,
    pub owner: Option<Owner>,
    pub node: Option<Box<str>>,
    pub phase: Phase,
    pub ready: bool,
    /// When the Ready condition last became True (milliseconds since the epoch).
    pub ready_since_ms: Option<i64>,
    /// The scheduler reported it unschedulable.
    pub unschedulable: bool,
    pub terminating: bool,
    pub created_ms: i64,
    /// CPU and memory requests (milli-units).
    pub cpu: i128,
    pub memory: i128,
    pub ip: Option<Ipv4Addr>,
    /// Named container ports: (name, port, protocol).
    pub ports: Box<[(Box<str>, i32, Box<str>)]>,
    /// `spec.hostname` when the pod also has a `spec.subdomain` (StatefulSet pods).
    pub hostname: Option<Box<str>>,
    /// Scheduled by the default scheduler (this simulator).
    pub default_scheduler: bool,
}

impl PodInfo {
    pub fn of(pod: &Pod) -> PodInfo {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let cond = |t: &str| status.and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == t));
        let ready_cond = cond("Ready").filter(|c| c.status == "True");
        let (mut cpu, mut memory) = (0, 0);
        let mut ports = Vec::new();
        for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
            if let Some(req) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
                cpu += req.get("cpu").and_then(|q| crate::quantity::milli(&q.0)).unwrap_or(0);
                memory += req.get("memory").and_then(|q| crate::quantity::milli(&q.0)).unwrap_or(0);
            }
            for p in c.ports.iter().flatten() {
                if let Some(n) = &p.name {
                    ports.push((n.as_str().into(), p.container_port, p.protocol.as_deref().unwrap_or("TCP").into()));
                }
            }
        }
        PodInfo {
            uid: meta.uid.as_deref().unwrap_or("").into(),
            labels: Labels::from_map(meta.labels.as_ref()),
            owner: controller_of(meta).map(|o| Owner { kind: o.kind.as_str().into(), name: o.name.as_str().into(), uid: o.uid.as_str().into() }),
            node: spec.and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()).map(Into::into),
            phase: Phase::parse(status.and_then(|s| s.phase.as_deref())),
            ready: ready_cond.is_some(),
            ready_since_ms: ready_cond.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0.as_millisecond()),
            unschedulable: cond("PodScheduled").is_some_and(|c| c.status == "False"),
            terminating: meta.deletion_timestamp.is_some(),
            created_ms: meta.creation_timestamp.as_ref().map_or(0, |t| t.0.as_millisecond()),
            cpu,
            memory,
            ip: status.and_then(|s| s.pod_ip.as_deref()).and_then(|ip| ip.parse().ok()),
            ports: ports.into(),
            hostname: spec.filter(|s| s.subdomain.is_some()).and_then(|s| s.hostname.as_deref()).map(Into::into),
            default_scheduler: spec.and_then(|s| s.scheduler_name.as_deref()).is_none_or(|n| n == "default-scheduler"),
        }
    }

    /// Not terminal and not being deleted: counts towards its controller's replicas.
    pub fn active(&self) -> bool {
        !self.phase.terminal() && !self.terminating
    }

    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner.as_ref().is_some_and(|o| &*o.uid == uid)
    }
}

/// What the simulator keeps of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub uid: Box<str>,
    pub labels: Labels,
    /// (key, value, effect)
    pub taints: Box<[(Box<str>, Box<str>, Box<str>)]>,
    pub unschedulable: bool,
    pub ready: bool,
    pub cpu: i128,
    pub memory: i128,
    pub pods: i128,
}

impl NodeInfo {
    pub fn of(node: &Node) -> NodeInfo {
        let alloc = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let q = |k: &str| alloc.and_then(|a| a.get(k)).and_then(|v| crate::quantity::milli(&v.0)).unwrap_or(0);
        let spec = node.spec.as_ref();
        NodeInfo {
            uid: node.metadata.uid.as_deref().unwrap_or("").into(),
            labels: Labels::from_map(node.metadata.labels.as_ref()),
            taints: spec
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .map(|t| (t.key.as_str().into(), t.value.as_deref().unwrap_or("").into(), t.effect.as_str().into()))
                .collect(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready: node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True"),
            cpu: q("cpu"),
            memory: q("memory"),
            pods: q("pods") / 1000,
        }
    }
}

/// What the simulator keeps of a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub terminating: bool,
}

/// Only the metadata of an object of any kind.
#[derive(Deserialize)]
struct MetaOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|o| o.controller == Some(true))
}

/// The cache.
#[derive(Default)]
pub struct Cache {
    /// The revision of the last change applied.
    pub revision: Revision,
    pub pods: BTreeMap<ObjKey, PodInfo>,
    pub nodes: BTreeMap<String, NodeInfo>,
    pub deployments: BTreeMap<ObjKey, Arc<Deployment>>,
    pub replicasets: BTreeMap<ObjKey, Arc<ReplicaSet>>,
    pub statefulsets: BTreeMap<ObjKey, Arc<StatefulSet>>,
    pub daemonsets: BTreeMap<ObjKey, Arc<DaemonSet>>,
    pub jobs: BTreeMap<ObjKey, Arc<Job>>,
    pub cronjobs: BTreeMap<ObjKey, Arc<CronJob>>,
    pub services: BTreeMap<ObjKey, Arc<Service>>,
    pub endpoint_slices: BTreeMap<ObjKey, Arc<EndpointSlice>>,
    pub namespaces: BTreeMap<String, NamespaceInfo>,
    pub service_accounts: BTreeSet<ObjKey>,
    /// Owner uid → store keys of its dependents (pods excepted: they carry their owner).
    pub dependents: HashMap<Box<str>, BTreeSet<Box<str>>>,
}

fn key(ns: &str, name: &str) -> ObjKey {
    (ns.to_string(), name.to_string())
}

/// Decode a typed object with its resourceVersion, or `None` when it does not fit (never
/// expected: the API server decoded it before storing it).
fn decode<T: serde::de::DeserializeOwned + Metadata<Ty = ObjectMeta>>(kv: &KeyValue) -> Option<T> {
    match serde_json::from_slice::<T>(&kv.value) {
        Ok(mut v) => {
            v.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
            Some(v)
        }
        Err(e) => {
            tracing::warn!(key = %String::from_utf8_lossy(&kv.key), error = %e, "the simulator cannot decode a stored object; ignoring it");
            None
        }
    }
}

/// Put or remove a typed object; returns the previous one.
fn upsert<T: serde::de::DeserializeOwned + Metadata<Ty = ObjectMeta>>(map: &mut BTreeMap<ObjKey, Arc<T>>, k: ObjKey, kv: Option<&KeyValue>) -> Option<Arc<T>> {
    match kv.and_then(decode::<T>) {
        Some(v) => map.insert(k, Arc::new(v)),
        None => map.remove(&k),
    }
}

impl Cache {
    pub fn pods_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = (&'a ObjKey, &'a PodInfo)> + 'a {
        self.pods.range((ns.to_string(), String::new())..).take_while(move |(k, _)| k.0 == ns)
    }

    /// Pods whose controller has this uid.
    pub fn pods_of<'a>(&'a self, ns: &'a str, uid: &'a str) -> impl Iterator<Item = (&'a ObjKey, &'a PodInfo)> + 'a {
        self.pods_in(ns).filter(move |(_, p)| p.owned_by(uid))
    }

    pub fn services_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<Service>)> + 'a {
        self.services.range((ns.to_string(), String::new())..).take_while(move |(k, _)| k.0 == ns)
    }

    /// Apply one change from the store's watch and report the work it calls for.
    pub fn apply(&mut self, ev: &WatchEvent, work: &mut impl FnMut(Work)) {
        let (key_bytes, kv, prev) = match ev {
            WatchEvent::Put { kv, prev } => (&kv.key, Some(kv), prev.as_ref()),
            WatchEvent::Delete { key, prev, .. } => (key, None, Some(prev)),
            WatchEvent::Progress(r) => {
                self.revision = self.revision.max(*r);
                return;
            }
        };
        self.revision = self.revision.max(ev.revision());
        let Some(parts) = kinds::parse_key(key_bytes) else { return };
        let (ns, name) = (parts.namespace, parts.name);
        let store_key: &str = std::str::from_utf8(key_bytes).unwrap_or("");
        if let Some(r) = kinds::res_of(&parts) {
            self.apply_watched(r, ns, name, kv, work)
        }
        if parts.plural != "events" {
            self.index_owners(store_key, ns, kv, prev, work);
        }
    }

    fn apply_watched(&mut self, r: Res, ns: &str, name: &str, kv: Option<&KeyValue>, work: &mut impl FnMut(Work)) {
        let k = key(ns, name);
        match r {
            kinds::PODS => {
                let new = kv.and_then(decode::<Pod>).map(|p| PodInfo::of(&p));
                let old = match &new {
                    Some(n) => self.pods.insert(k.clone(), n.clone()),
                    None => self.pods.remove(&k),
                };
                self.pod_changed(&k, old.as_ref(), new.as_ref(), work);
            }
            kinds::NODES => {
                let new = kv.and_then(decode::<Node>).map(|n| NodeInfo::of(&n));
                let old = match new {
                    Some(n) => self.nodes.insert(name.to_string(), n),
                    None => self.nodes.remove(name),
                };
                let now = self.nodes.get(name);
                if old.as_ref() != now {
                    work(Work::Node(name.to_string()));
                    work(Work::Schedule);
                    for k in self.daemonsets.keys() {
                        work(Work::DaemonSet(k.clone()));
                    }
                }
            }
            kinds::DEPLOYMENTS => {
                upsert(&mut self.deployments, k.clone(), kv);
                work(Work::Deployment(k));
            }
            kinds::REPLICASETS => {
                let old = upsert(&mut self.replicasets, k.clone(), kv);
                let now = self.replicasets.get(&k).cloned();
                for rs in old.iter().chain(now.iter()) {
                    if let Some(o) = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") {
                        work(Work::Deployment(key(ns, &o.name)));
                    }
                }
                work(Work::ReplicaSet(k));
            }
            kinds::STATEFULSETS => {
                upsert(&mut self.statefulsets, k.clone(), kv);
                work(Work::StatefulSet(k));
            }
            kinds::DAEMONSETS => {
                upsert(&mut self.daemonsets, k.clone(), kv);
                work(Work::DaemonSet(k));
            }
            kinds::JOBS => {
                let old = upsert(&mut self.jobs, k.clone(), kv);
                let now = self.jobs.get(&k).cloned();
                for j in old.iter().chain(now.iter()) {
                    if let Some(o) = controller_of(&j.metadata).filter(|o| o.kind == "CronJob") {
                        work(Work::CronJob(key(ns, &o.name)));
                    }
                }
                work(Work::Job(k));
            }
            kinds::CRONJOBS => {
                upsert(&mut self.cronjobs, k.clone(), kv);
                work(Work::CronJob(k));
            }
            kinds::SERVICES => {
                upsert(&mut self.services, k.clone(), kv);
                work(Work::Service(k));
            }
            kinds::ENDPOINT_SLICES => {
                let old = upsert(&mut self.endpoint_slices, k.clone(), kv);
                let now = self.endpoint_slices.get(&k).cloned();
                for s in old.iter().chain(now.iter()) {
                    if let Some(svc) = s.metadata.labels.as_ref().and_then(|l| l.get(crate::workloads::endpointslice::SERVICE_NAME_LABEL)) {
                        work(Work::Service(key(ns, svc)));
                    }
                }
            }
            kinds::NAMESPACES => {
                let new = kv
                    .and_then(|kv| serde_json::from_slice::<MetaOnly>(&kv.value).ok())
                    .map(|m| NamespaceInfo { terminating: m.metadata.deletion_timestamp.is_some() });
                match new {
                    Some(n) => self.namespaces.insert(name.to_string(), n),
                    None => self.namespaces.remove(name),
                };
                work(Work::Namespace(name.to_string()));
            }
            kinds::SERVICE_ACCOUNTS => {
                if kv.is_some() {
                    self.service_accounts.insert(k);
                } else {
                    self.service_accounts.remove(&k);
                    work(Work::Namespace(ns.to_string()));
                }
            }
            _ => {}
        }
    }

    fn pod_changed(&self, k: &ObjKey, old: Option<&PodInfo>, new: Option<&PodInfo>, work: &mut impl FnMut(Work)) {
        if old == new {
            return;
        }
        let ns = k.0.as_str();
        for p in old.iter().chain(new.iter()) {
            if let Some(o) = &p.owner {
                let ok = key(ns, &o.name);
                match &*o.kind {
                    "ReplicaSet" => work(Work::ReplicaSet(ok)),
                    "StatefulSet" => work(Work::StatefulSet(ok)),
                    "DaemonSet" => work(Work::DaemonSet(ok)),
                    "Job" => work(Work::Job(ok)),
                    _ => {}
                }
            }
        }
        match new {
            Some(n) if n.node.is_none() && !n.terminating => work(Work::Schedule),
            Some(n) if n.node.is_some() => work(Work::Pod(k.clone())),
            _ => {}
        }
        if new.is_none() || new.is_some_and(|n| n.terminating || n.phase.terminal()) {
            // Resources freed: waiting pods may fit now.
            work(Work::Schedule);
        }
        if new.is_none()
            && let Some(o) = old
        {
            work(Work::Collect { uid: o.uid.to_string(), key: kinds::PODS.key(&k.0, &k.1) });
        }
        let endpoints_differ = match (old, new) {
            (Some(a), Some(b)) => {
                a.ip != b.ip || a.ready != b.ready || a.labels != b.labels || a.terminating != b.terminating || a.phase != b.phase || a.node != b.node
            }
            _ => true,
        };
        if endpoints_differ {
            for (sk, svc) in self.services_in(ns) {
                let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else { continue };
                if old.iter().chain(new.iter()).any(|p| crate::selectors::matches_map(sel, |l| p.labels.get(l))) {
                    work(Work::Service(sk.clone()));
                }
            }
        }
    }

    /// Keep the owner → dependents index, and ask for collection when an owner goes away or
    /// is being deleted with `foregroundDeletion` or `orphan`.
    fn index_owners(&mut self, store_key: &str, ns: &str, kv: Option<&KeyValue>, prev: Option<&KeyValue>, work: &mut impl FnMut(Work)) {
        let is_pod = store_key.starts_with("/registry/core/pods/");
        let meta = |kv: Option<&KeyValue>| kv.and_then(|kv| serde_json::from_slice::<MetaOnly>(&kv.value).ok()).map(|m| m.metadata);
        let new = meta(kv);
        let old = meta(prev);
        if !is_pod {
            let owners =
                |m: &Option<ObjectMeta>| -> BTreeSet<String> { m.iter().flat_map(|m| m.owner_references.iter().flatten()).map(|o| o.uid.clone()).collect() };
            let (before, after) = (owners(&old), owners(&new));
            for gone in before.difference(&after) {
                if let Some(set) = self.dependents.get_mut(gone.as_str()) {
                    set.remove(store_key);
                    if set.is_empty() {
                        self.dependents.remove(gone.as_str());
                    }
                }
            }
            for added in after.difference(&before) {
                self.dependents.entry(added.as_str().into()).or_default().insert(store_key.into());
            }
        }
        match (&old, &new) {
            (Some(o), None) => {
                let uid = o.uid.clone().unwrap_or_default();
                if !is_pod && (self.dependents.contains_key(uid.as_str()) || self.pods.values().any(|p| p.owned_by(&uid))) {
                    work(Work::Collect { uid, key: store_key.to_string() });
                }
            }
            (_, Some(n)) => {
                let collecting = n.deletion_timestamp.is_some() && n.finalizers.iter().flatten().any(|f| f == "foregroundDeletion" || f == "orphan");
                if collecting {
                    work(Work::Collect { uid: n.uid.clone().unwrap_or_default(), key: store_key.to_string() });
                }
                // A dependent created after its owner was deleted is collected too.
                if old.is_none() {
                    for o in n.owner_references.iter().flatten() {
                        if let Some(r) = Res::of_owner(&o.api_version, &o.kind) {
                            work(Work::Collect { uid: o.uid.clone(), key: r.key(ns, &o.name) });
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
