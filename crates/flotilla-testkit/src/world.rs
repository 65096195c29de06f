//! A world: one control plane (the API server on a memory store, the caller's controller set on
//! in-process clients) and simulated members (`flotilla-sim`'s fleet behind one HTTPS listener),
//! joined in Push mode and Ready, all in this process — and the verbs a test acts and looks with.

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use flotilla_apiserver::inproc::InProcess;
use flotilla_apiserver::{ApiServer, Identity};
use flotilla_sim::{Fleet, FleetConfig, Member, MemberConfig};
use flotilla_store::{Op, RangeRequest, Store};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Platform;
use crate::expect;

/// The kit's controller timings, `flotilla up`'s flags: health probes every 200 ms deciding
/// within a second, unschedulable bindings retried every second, policies reported after a
/// second. A scenario's `flags` replace those of the same name.
pub const FAST_FLAGS: &[&str] = &[
    "--cluster-status-update-frequency=200ms",
    "--cluster-probe-timeout=1s",
    "--cluster-failure-threshold=1s",
    "--cluster-success-threshold=500ms",
    "--unschedulable-retry=1s",
    "--unmatched-policy-grace=1s",
    "--gc-rediscover-interval=2s",
    "--member-request-timeout=5s",
];

/// The identity the kit acts as, on the control plane and in members.
const KIT_USER: &str = "flotilla-testkit";
const FIELD_MANAGER: &str = "flotilla-testkit";

/// `defaults` with each of `given` in place of the default of the same flag name.
pub fn merge_flags(defaults: &[&str], given: &[String]) -> Vec<String> {
    let name = |f: &str| f.split_once('=').map_or(f, |(n, _)| n).to_string();
    let mut out: Vec<String> = defaults.iter().filter(|d| !given.iter().any(|g| name(g) == name(d))).map(|d| d.to_string()).collect();
    out.extend(given.iter().cloned());
    out
}

/// Where an object lives: the control plane or a member. Scenario files write `controlPlane` or
/// the member's name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Place {
    #[default]
    ControlPlane,
    Member(String),
}

impl<'de> Deserialize<'de> for Place {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Place, D::Error> {
        let s = String::deserialize(d)?;
        Ok(if s == "controlPlane" { Place::ControlPlane } else { Place::Member(s) })
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::ControlPlane => f.write_str("the control plane"),
            Place::Member(m) => write!(f, "member {m}"),
        }
    }
}

/// One simulated member and how its Cluster looks once joined.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberSpec {
    pub name: String,
    /// Labels of its Cluster on the control plane.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `topology.kubernetes.io/region` of its nodes and the Cluster's `spec.region`
    /// (default `region-<name>`).
    pub region: Option<String>,
    /// Zones of its nodes and the Cluster's `spec.zones` (default `<region>-a`, `<region>-b`).
    #[serde(default)]
    pub zones: Vec<String>,
    /// Taints of its Cluster (`{key, value, effect}`), added once it is Ready.
    #[serde(default)]
    pub taints: Vec<Value>,
    /// Its nodes (default 2) and each node's allocatable CPU, memory and pods (8, 32Gi, 110).
    pub nodes: Option<usize>,
    pub node_cpu: Option<String>,
    pub node_memory: Option<String>,
    pub node_pods: Option<u32>,
    /// Objects created in the member before anything is applied to the control plane.
    #[serde(default)]
    pub objects: Vec<Value>,
}

impl MemberSpec {
    pub fn new(name: &str) -> MemberSpec {
        MemberSpec { name: name.into(), ..Default::default() }
    }

    fn sim_config(&self, index: usize) -> MemberConfig {
        let mut c = MemberConfig::new(&self.name);
        c.pod_cidr = flotilla_sim::config::pod_cidr_for(index);
        c.timings.pod_ready_delay = Duration::from_millis(100);
        c.timings.retry = Duration::from_millis(200);
        if let Some(region) = &self.region {
            c.nodes.zones = vec![format!("{region}-a"), format!("{region}-b")];
            c.nodes.region = region.clone();
        }
        if !self.zones.is_empty() {
            c.nodes.zones = self.zones.clone();
        }
        if let Some(n) = self.nodes {
            c.nodes.count = n;
        }
        if let Some(cpu) = &self.node_cpu {
            c.nodes.cpu = cpu.clone();
        }
        if let Some(memory) = &self.node_memory {
            c.nodes.memory = memory.clone();
        }
        if let Some(pods) = self.node_pods {
            c.nodes.pods = pods;
        }
        c
    }
}

/// What a world is made of.
#[derive(Clone, Debug, Default)]
pub struct WorldConfig {
    pub members: Vec<MemberSpec>,
    /// `flotilla up`'s federation flags beyond [`FAST_FLAGS`] (`--feature-gates=Failover=true`).
    pub flags: Vec<String>,
}

/// A reference to one object.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

impl ObjectRef {
    /// The reference of a manifest.
    pub fn of(object: &Value) -> anyhow::Result<ObjectRef> {
        let s = |k: &str| object[k].as_str().map(str::to_string);
        Ok(ObjectRef {
            api_version: s("apiVersion").ok_or_else(|| anyhow!("a manifest without apiVersion: {object}"))?,
            kind: s("kind").ok_or_else(|| anyhow!("a manifest without kind: {object}"))?,
            namespace: object["metadata"]["namespace"].as_str().map(str::to_string),
            name: object["metadata"]["name"].as_str().map(str::to_string).ok_or_else(|| anyhow!("a manifest without metadata.name: {object}"))?,
        })
    }
}

/// A running control plane with its members. [`World::stop`] ends it; dropping it stops the
/// controllers and the members as their tasks end.
pub struct World {
    pub api: ApiServer,
    /// The kit's client of the control plane (`system:masters`).
    pub cp: kube::Client,
    fleet: Option<Fleet>,
    /// Each member's simulator settings, to join it again ([`World::rejoin`]).
    configs: Vec<MemberConfig>,
    controllers: Option<Box<dyn Send>>,
    kinds: Mutex<HashMap<(Place, String, String), (ApiResource, Scope)>>,
    _dir: tempfile::TempDir,
}

fn client_of(router: axum::Router) -> kube::Client {
    kube::Client::new(InProcess::new(router, Identity::user(KIT_USER, &["system:masters"])), "default")
}

impl World {
    /// Start the control plane and its controllers, then the members; join each, label and
    /// taint its Cluster, and wait until every Cluster is Ready.
    pub async fn start<P: Platform>(platform: &P, config: WorldConfig) -> anyhow::Result<World> {
        let dir = tempfile::Builder::new().prefix("flotilla-testkit-").tempdir()?;
        let api = platform.control_plane(seeded_store(platform).await?).await.context("start the control plane")?;
        let controllers = platform.start_controllers(&api, &merge_flags(FAST_FLAGS, &config.flags)).context("start the controllers")?;
        let cp = client_of(api.router());
        let members: Vec<MemberConfig> = config.members.iter().enumerate().map(|(i, m)| m.sim_config(i)).collect();
        let fleet = Fleet::start(FleetConfig::new(members.clone(), dir.path().join("fleet")), |_, _| {}).await.context("start the simulated members")?;
        let world = World {
            api,
            cp,
            fleet: Some(fleet),
            configs: members.clone(),
            controllers: Some(Box::new(controllers)),
            kinds: Mutex::new(HashMap::new()),
            _dir: dir,
        };
        for spec in &config.members {
            let place = Place::Member(spec.name.clone());
            for object in &spec.objects {
                world
                    .apply(&place, object)
                    .await
                    .with_context(|| format!("create {} in {place}", ObjectRef::of(object).map(|r| r.to_string()).unwrap_or_default()))?;
            }
        }
        let fleet = world.fleet.as_ref().expect("started");
        let joins = members.iter().map(|m| {
            let kubeconfig = fleet.entry(&m.name).expect("a started member").kubeconfig.clone();
            let cp = world.cp.clone();
            async move { platform.join(m, &kubeconfig, &cp).await.with_context(|| format!("join {}", m.name)) }
        });
        futures::future::try_join_all(joins).await?;
        for spec in &config.members {
            world.cluster_ready(&spec.name, true).await?;
            if !spec.labels.is_empty() {
                let cluster = cluster_ref(&spec.name);
                world.patch(&Place::ControlPlane, &cluster, &Patch::Merge(json!({"metadata": {"labels": spec.labels}}))).await?;
            }
            for taint in &spec.taints {
                world.taint_cluster(&spec.name, taint).await?;
            }
        }
        Ok(world)
    }

    /// Stop the controllers, then the members.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        drop(self.controllers.take());
        if let Some(fleet) = self.fleet.take() {
            fleet.shutdown().await?;
        }
        Ok(())
    }

    /// Join member `name` again once its Cluster is gone (an unjoin deleted it), as
    /// [`World::start`] joined it, and wait until its Cluster is Ready. Labels and taints the
    /// world gave it at the start are not restored.
    pub async fn rejoin<P: Platform>(&self, platform: &P, name: &str) -> anyhow::Result<()> {
        let config = self.configs.iter().find(|c| c.name == name).ok_or_else(|| anyhow!("no member {name:?} in this world"))?;
        let kubeconfig = self.fleet.as_ref().and_then(|f| f.entry(name)).ok_or_else(|| anyhow!("no member {name:?} in this world"))?.kubeconfig.clone();
        platform.join(config, &kubeconfig, &self.cp).await.with_context(|| format!("join {name} again"))?;
        self.cluster_ready(name, true).await
    }

    fn member(&self, name: &str) -> anyhow::Result<&Member> {
        self.fleet.as_ref().and_then(|f| f.member(name)).ok_or_else(|| anyhow!("no member {name:?} in this world"))
    }

    /// A client of `place` as the kit; for a member, straight to its API server (no faults).
    pub fn client(&self, place: &Place) -> anyhow::Result<kube::Client> {
        match place {
            Place::ControlPlane => Ok(self.cp.clone()),
            Place::Member(m) => Ok(client_of(self.member(m)?.api_server().router())),
        }
    }

    async fn resource(&self, place: &Place, api_version: &str, kind: &str) -> anyhow::Result<(ApiResource, Scope)> {
        let key = (place.clone(), api_version.to_string(), kind.to_string());
        if let Some(found) = self.kinds.lock().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) =
            kube::discovery::pinned_kind(&self.client(place)?, &gvk).await.with_context(|| format!("{place} does not serve {api_version} {kind}"))?;
        self.kinds.lock().insert(key, (ar.clone(), caps.scope.clone()));
        Ok((ar, caps.scope))
    }

    /// The API of `api_version`/`kind` in `place`, in `namespace` when namespaced (all
    /// namespaces when `None`).
    pub async fn api(&self, place: &Place, api_version: &str, kind: &str, namespace: Option<&str>) -> anyhow::Result<Api<DynamicObject>> {
        let (ar, scope) = self.resource(place, api_version, kind).await?;
        let client = self.client(place)?;
        Ok(match (scope, namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client, ns, &ar),
            _ => Api::all_with(client, &ar),
        })
    }

    /// Create or update `object` in `place` (server-side apply, forced, as the kit).
    pub async fn apply(&self, place: &Place, object: &Value) -> anyhow::Result<()> {
        let r = ObjectRef::of(object)?;
        let api = self.api(place, &r.api_version, &r.kind, r.namespace.as_deref()).await?;
        api.patch(&r.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(object)).await.with_context(|| format!("apply {r} in {place}"))?;
        Ok(())
    }

    pub async fn delete(&self, place: &Place, r: &ObjectRef) -> anyhow::Result<()> {
        let api = self.api(place, &r.api_version, &r.kind, r.namespace.as_deref()).await?;
        api.delete(&r.name, &DeleteParams::default()).await.with_context(|| format!("delete {r} in {place}"))?;
        Ok(())
    }

    pub async fn patch(&self, place: &Place, r: &ObjectRef, patch: &Patch<Value>) -> anyhow::Result<()> {
        let api = self.api(place, &r.api_version, &r.kind, r.namespace.as_deref()).await?;
        api.patch(&r.name, &PatchParams::default(), patch).await.with_context(|| format!("patch {r} in {place}"))?;
        Ok(())
    }

    pub async fn patch_status(&self, place: &Place, r: &ObjectRef, patch: &Patch<Value>) -> anyhow::Result<()> {
        let api = self.api(place, &r.api_version, &r.kind, r.namespace.as_deref()).await?;
        api.patch_status(&r.name, &PatchParams::default(), patch).await.with_context(|| format!("patch the status of {r} in {place}"))?;
        Ok(())
    }

    /// The object, or `None` when `place` has none of that name.
    pub async fn get(&self, place: &Place, r: &ObjectRef) -> anyhow::Result<Option<Value>> {
        let api = self.api(place, &r.api_version, &r.kind, r.namespace.as_deref()).await?;
        let found = api.get_opt(&r.name).await.with_context(|| format!("get {r} in {place}"))?;
        Ok(found.map(|o| serde_json::to_value(o).expect("an object serializes")))
    }

    /// Every object of the kind in `namespace` (every namespace when `None`).
    pub async fn list(&self, place: &Place, api_version: &str, kind: &str, namespace: Option<&str>) -> anyhow::Result<Vec<Value>> {
        let api = self.api(place, api_version, kind, namespace).await?;
        let list = api.list(&ListParams::default()).await.with_context(|| format!("list {kind} in {place}"))?;
        Ok(list.items.into_iter().map(|o| serde_json::to_value(o).expect("an object serializes")).collect())
    }

    /// Wait until member `name`'s Cluster is Ready (`ready`) or not.
    pub async fn cluster_ready(&self, name: &str, ready: bool) -> anyhow::Result<()> {
        let want = if ready { "True" } else { "False" };
        let cluster = cluster_ref(name);
        expect::eventually(expect::DEADLINE, || async {
            let c = self.get(&Place::ControlPlane, &cluster).await.map_err(|e| format!("{e:#}"))?.unwrap_or_default();
            expect::conditions([(&"Ready".to_string(), &want.to_string())], &c)
        })
        .await
        .map_err(|last| anyhow!("Cluster {name} never turned Ready={want}: {last}"))
    }

    /// Add `taint` to member `cluster`'s Cluster (read, append, write with its resourceVersion).
    pub async fn taint_cluster(&self, cluster: &str, taint: &Value) -> anyhow::Result<()> {
        let r = cluster_ref(cluster);
        for _ in 0..20 {
            let c = self.get(&Place::ControlPlane, &r).await?.ok_or_else(|| anyhow!("no Cluster {cluster}"))?;
            let mut taints = c["spec"]["taints"].as_array().cloned().unwrap_or_default();
            taints.push(taint.clone());
            let patch = json!({"metadata": {"resourceVersion": c["metadata"]["resourceVersion"]}, "spec": {"taints": taints}});
            match self.patch(&Place::ControlPlane, &r, &Patch::Merge(patch)).await {
                Ok(()) => return Ok(()),
                Err(e) if format!("{e:#}").contains("Conflict") || format!("{e:#}").contains("modified") => continue,
                Err(e) => return Err(e),
            }
        }
        bail!("the Cluster {cluster} kept changing; taint not added")
    }

    /// Merge `settings` (`{blackhole: true}`, `{errorRate: 1}`) into member `name`'s faults.
    pub fn set_faults(&self, name: &str, settings: &Value) -> anyhow::Result<()> {
        let faults = self.member(name)?.faults();
        let merged = faults.get().merged(settings).map_err(|e| anyhow!("faults of {name}: {e}"))?;
        faults.set(merged).map_err(|e| anyhow!("faults of {name}: {e}"))
    }

    /// Stop (or bring back) every node's kubelet of member `name`.
    pub async fn set_nodes_failed(&self, name: &str, failed: bool) -> anyhow::Result<()> {
        let m = self.member(name)?;
        if failed {
            m.fail_nodes(None).await?
        } else {
            m.recover_nodes(None).await?
        };
        Ok(())
    }
}

/// The control plane's store as the platform leaves it once bootstrapped, kept once per process
/// and platform: every world's store starts as a copy, so the bootstrap (RBAC defaults, the
/// federation CRDs, KubeFed's seed: over a second in a debug build) runs once, and each world's
/// control plane starts as `flotilla up` restarts on its data directory, finding it all there.
type Seed = Arc<tokio::sync::OnceCell<Vec<(Bytes, Bytes)>>>;
static SEEDS: std::sync::Mutex<Vec<(TypeId, Seed)>> = std::sync::Mutex::new(Vec::new());

async fn seeded_store<P: Platform>(platform: &P) -> anyhow::Result<Arc<dyn Store>> {
    let seed = {
        let mut seeds = SEEDS.lock().unwrap_or_else(|e| e.into_inner());
        let id = TypeId::of::<P>();
        match seeds.iter().find(|(t, _)| *t == id) {
            Some((_, s)) => s.clone(),
            None => {
                let s = Seed::default();
                seeds.push((id, s.clone()));
                s
            }
        }
    };
    let kvs = seed
        .get_or_try_init(|| async {
            let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default())?);
            drop(platform.control_plane(store.clone()).await.context("bootstrap the control plane")?);
            let all = store.range(RangeRequest::prefix(Bytes::new())).await?;
            Ok::<_, anyhow::Error>(all.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect())
        })
        .await?;
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default())?);
    for chunk in kvs.chunks(100) {
        store.txn(Vec::new(), chunk.iter().map(|(k, v)| Op::Put(k.clone(), v.clone())).collect()).await?;
    }
    Ok(store)
}

fn cluster_ref(name: &str) -> ObjectRef {
    ObjectRef { api_version: "cluster.karmada.io/v1alpha1".into(), kind: "Cluster".into(), namespace: None, name: name.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_flag_replaces_the_default_of_its_name() {
        let given = vec!["--cluster-failure-threshold=3s".to_string(), "--enable-no-execute-taint-eviction".to_string()];
        let flags = merge_flags(FAST_FLAGS, &given);
        assert!(!flags.iter().any(|f| f == "--cluster-failure-threshold=1s"));
        assert!(flags.iter().any(|f| f == "--cluster-probe-timeout=1s"));
        assert_eq!(&flags[flags.len() - 2..], &given[..]);
    }
}
