//! The member's nodes: registration and heartbeats (a kubelet's part), failure and recovery
//! (the node lifecycle controller's part: NotReady, the unreachable taints, pods marked not
//! ready, then evicted once their toleration runs out), and capacity changes.
//!
//! Nodes are registered as testenv's fake kubelet registers them (`testenv/internal/kubelet`):
//! the same labels, capacity = allocatable, conditions, address and node info.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Pod, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::cache::Work;
use crate::kinds::{LEASES, NODES, PODS};
use crate::simulator::{Ctx, Reconciled, SimError, Simulator};

/// Labels every simulated node carries besides the well-known ones (testenv's is
/// `testenv.flotilla.io/fake-node`).
pub const SIM_NODE_LABEL: &str = "flotilla.io/simulated-node";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";

/// What the simulator tracks per node between reconciles.
#[derive(Clone, Debug, Default)]
pub struct NodeRuntime {
    /// The node's kubelet stopped at this time.
    pub failed_since: Option<Instant>,
    /// The lifecycle controller marked it unreachable at this time.
    pub unreachable_since: Option<Instant>,
    /// Lease renewals so far (the Ready heartbeat is refreshed every fourth).
    pub beats: u64,
}

/// A change of the member's capacity: node count and per-node resources.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityChange {
    pub nodes: Option<usize>,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub pods: Option<u32>,
}

pub fn node_name(member: &str, index: usize) -> String {
    format!("{member}-node-{index}")
}

/// `key[=value]:Effect`.
pub fn parse_taint(text: &str) -> Option<Taint> {
    let (kv, effect) = text.rsplit_once(':')?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return None;
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    (!key.is_empty()).then(|| Taint { key: key.into(), value, effect: effect.into(), time_added: None })
}

fn now_time() -> Time {
    Time(jiff::Timestamp::now())
}

fn node_object(ctx_config: &crate::config::MemberConfig, index: usize) -> Node {
    let shape = &ctx_config.nodes;
    let name = node_name(&ctx_config.name, index);
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    labels.insert("node.kubernetes.io/instance-type".into(), "flotilla-simulated".into());
    // The shape's labels may replace the defaults above (to look like another cluster's
    // nodes), not the node's name, topology or the simulated-node mark.
    labels.extend(shape.labels.clone());
    labels.insert("kubernetes.io/hostname".into(), name.clone());
    labels.insert(SIM_NODE_LABEL.into(), "true".into());
    if !shape.region.is_empty() {
        labels.insert("topology.kubernetes.io/region".into(), shape.region.clone());
    }
    if !shape.zones.is_empty() {
        labels.insert("topology.kubernetes.io/zone".into(), shape.zones[(index - 1) % shape.zones.len()].clone());
    }
    let taints: Vec<Taint> = shape.taints.iter().filter_map(|t| parse_taint(t)).collect();
    Node {
        metadata: ObjectMeta { name: Some(name), labels: Some(labels), ..Default::default() },
        spec: Some(NodeSpec { taints: (!taints.is_empty()).then_some(taints), ..Default::default() }),
        status: None,
    }
}

fn resources(shape: &crate::config::NodeShape) -> BTreeMap<String, Quantity> {
    [("cpu", shape.cpu.clone()), ("memory", shape.memory.clone()), ("pods", shape.pods.to_string()), ("ephemeral-storage", "100Gi".to_string())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v)))
        .collect()
}

fn ready_status(config: &crate::config::MemberConfig) -> NodeStatus {
    let now = now_time();
    let cond = |t: &str, s: &str, reason: &str, msg: &str| NodeCondition {
        type_: t.into(),
        status: s.into(),
        reason: Some(reason.into()),
        message: Some(msg.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    let r = resources(&config.nodes);
    NodeStatus {
        capacity: Some(r.clone()),
        allocatable: Some(r),
        phase: Some("Running".into()),
        conditions: Some(vec![
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated kubelet"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated kubelet"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated kubelet"),
            cond("Ready", "True", "KubeletReady", "simulated kubelet is posting ready status"),
        ]),
        addresses: Some(vec![k8s_openapi::api::core::v1::NodeAddress { type_: "InternalIP".into(), address: "127.0.0.1".into() }]),
        daemon_endpoints: Some(k8s_openapi::api::core::v1::NodeDaemonEndpoints {
            kubelet_endpoint: Some(k8s_openapi::api::core::v1::DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(k8s_openapi::api::core::v1::NodeSystemInfo {
            kubelet_version: config.kubelet_version.clone(),
            operating_system: "linux".into(),
            architecture: "amd64".into(),
            container_runtime_version: "flotilla-sim://simulated".into(),
            os_image: "flotilla simulated node".into(),
            kernel_version: "simulated".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// Register (or re-register after a restart) node `index`: the object, a Ready status, and
/// its Lease.
async fn register(sim: &Simulator, index: usize) -> Result<(), SimError> {
    let name = node_name(&sim.config.name, index);
    let node = node_object(&sim.config, index);
    let created = match sim.api.create(&NODES, "", &to_value(&node)).await {
        Ok(v) => v,
        Err(e) if e.code == 409 => sim.api.get(&NODES, "", &name).await?,
        Err(e) => return Err(e.into()),
    };
    let uid = created.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    sim.api.merge_patch(&NODES, "", &name, &json!({"status": to_value(&ready_status(&sim.config))}), true).await?;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("kube-node-lease".into()),
            owner_references: Some(vec![OwnerReference { api_version: "v1".into(), kind: "Node".into(), name: name.clone(), uid, ..Default::default() }]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.clone()),
            lease_duration_seconds: Some((sim.config.timings.node_lease_interval.as_secs() * 4).max(1) as i32),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..Default::default()
        }),
    };
    match sim.api.create(&LEASES, "kube-node-lease", &to_value(&lease)).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Register every configured node, retrying until each is in.
pub async fn register_all(sim: &mut Simulator) {
    for index in 1..=sim.config.nodes.count {
        loop {
            match register(sim, index).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(member = %sim.config.name, node = index, error = %e, "registering a node failed; retrying");
                    tokio::time::sleep(sim.config.timings.retry).await;
                }
            }
        }
        let name = node_name(&sim.config.name, index);
        sim.state.nodes.entry(name.clone()).or_default();
        if !sim.config.timings.node_lease_interval.is_zero() {
            sim.schedule(sim.config.timings.node_lease_interval, Work::Node(name));
        }
    }
}

fn select(sim: &Simulator, names: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let known: Vec<String> = sim.state.nodes.keys().cloned().collect();
    match names {
        None => Ok(known),
        Some(list) => {
            for n in &list {
                if !known.contains(n) {
                    return Err(format!("member {} has no node {n:?} (nodes: {})", sim.config.name, known.join(", ")));
                }
            }
            Ok(list)
        }
    }
}

/// Stop these nodes' kubelets; the lifecycle controller notices after the grace period.
pub fn fail(sim: &mut Simulator, names: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let names = select(sim, names)?;
    let now = Instant::now();
    for n in &names {
        let rt = sim.state.nodes.entry(n.clone()).or_default();
        if rt.failed_since.is_none() {
            rt.failed_since = Some(now);
        }
        sim.enqueue(Work::Node(n.clone()));
    }
    Ok(names)
}

/// Start these nodes' kubelets again.
pub fn recover(sim: &mut Simulator, names: Option<Vec<String>>) -> Result<Vec<String>, String> {
    let names = select(sim, names)?;
    for n in &names {
        let rt = sim.state.nodes.entry(n.clone()).or_default();
        rt.failed_since = None;
        sim.enqueue(Work::Node(n.clone()));
    }
    let pods: Vec<_> = sim.cache.pods.iter().filter(|(_, p)| p.node.as_deref().is_some_and(|n| names.iter().any(|x| x == n))).map(|(k, _)| k.clone()).collect();
    for k in pods {
        sim.enqueue(Work::Pod(k));
    }
    Ok(names)
}

/// Change node count and per-node resources.
pub async fn set_capacity(sim: &mut Simulator, change: CapacityChange) -> Result<(), String> {
    let mut shape = sim.config.nodes.clone();
    if let Some(c) = &change.cpu {
        shape.cpu = c.clone();
    }
    if let Some(m) = &change.memory {
        shape.memory = m.clone();
    }
    if let Some(p) = change.pods {
        shape.pods = p;
    }
    let before = shape.count;
    if let Some(n) = change.nodes {
        shape.count = n;
    }
    let mut next = sim.config.clone();
    next.nodes = shape;
    next.validate().map_err(|e| e.to_string())?;
    sim.config = next;
    let resized = change.cpu.is_some() || change.memory.is_some() || change.pods.is_some();
    if resized {
        let r = to_value(&resources(&sim.config.nodes));
        for i in 1..=before.min(sim.config.nodes.count) {
            let name = node_name(&sim.config.name, i);
            let patch = json!({"status": {"capacity": r, "allocatable": r}});
            sim.api.merge_patch(&NODES, "", &name, &patch, true).await.map_err(|e| e.to_string())?;
        }
    }
    for i in before + 1..=sim.config.nodes.count {
        register(sim, i).await.map_err(|e| e.to_string())?;
        let name = node_name(&sim.config.name, i);
        sim.state.nodes.entry(name.clone()).or_default();
        if !sim.config.timings.node_lease_interval.is_zero() {
            sim.schedule(sim.config.timings.node_lease_interval, Work::Node(name));
        }
    }
    for i in sim.config.nodes.count + 1..=before {
        let name = node_name(&sim.config.name, i);
        match sim.api.delete(&NODES, "", &name, &json!({})).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.to_string()),
        }
        sim.state.nodes.remove(&name);
        // The pod garbage collector deletes pods bound to nodes that no longer exist.
        let orphans: Vec<_> = sim.cache.pods.iter().filter(|(_, p)| p.node.as_deref() == Some(name.as_str())).map(|(k, _)| k.clone()).collect();
        for (ns, pod) in orphans {
            match sim.api.delete(&PODS, &ns, &pod, &json!({"gracePeriodSeconds": 0})).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    Ok(())
}

/// One node's heartbeat, failure and recovery.
pub async fn reconcile(name: &str, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(info) = ctx.cache.nodes.get(name) else { return Ok(None) };
    let interval = ctx.config.timings.node_lease_interval;
    let rt = ctx.state.nodes.entry(name.to_string()).or_default().clone();
    match rt.failed_since {
        None => {
            if !info.ready || info.taints.iter().any(|(k, _, _)| &**k == TAINT_UNREACHABLE) {
                recover_node(name, ctx).await?;
            } else if !interval.is_zero() {
                heartbeat(name, ctx, rt.beats).await?;
            }
            ctx.state.nodes.entry(name.to_string()).or_default().beats += 1;
            Ok((!interval.is_zero()).then_some(interval))
        }
        Some(since) => {
            let grace = ctx.config.timings.node_monitor_grace;
            let elapsed = ctx.now.saturating_duration_since(since);
            if elapsed < grace {
                return Ok(Some(grace - elapsed));
            }
            let unreachable_since = match rt.unreachable_since {
                Some(t) => t,
                None => {
                    mark_unreachable(name, ctx).await?;
                    let now = ctx.now;
                    ctx.state.nodes.entry(name.to_string()).or_default().unreachable_since = Some(now);
                    now
                }
            };
            evict(name, unreachable_since, ctx).await
        }
    }
}

async fn heartbeat(name: &str, ctx: &mut Ctx<'_>, beats: u64) -> Result<(), SimError> {
    let renew = MicroTime(jiff::Timestamp::now());
    let patch = json!({"spec": {"renewTime": to_value(&renew)}});
    match ctx.api.merge_patch(&LEASES, "kube-node-lease", name, &patch, false).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    if beats % 4 == 3 {
        let Some(node) = ctx.read::<Node>(&NODES, "", name).await? else { return Ok(()) };
        let mut conds = node.status.and_then(|s| s.conditions).unwrap_or_default();
        let now = now_time();
        for c in &mut conds {
            c.last_heartbeat_time = Some(now.clone());
        }
        ctx.api.merge_patch(&NODES, "", name, &json!({"status": {"conditions": to_value(&conds)}}), true).await?;
    }
    Ok(())
}

/// What the node lifecycle controller does when a node stops posting status: every condition
/// Unknown, the unreachable taints, and the node's pods no longer Ready.
async fn mark_unreachable(name: &str, ctx: &mut Ctx<'_>) -> Result<(), SimError> {
    let Some(node) = ctx.read::<Node>(&NODES, "", name).await? else { return Ok(()) };
    let now = now_time();
    let mut conds = node.status.and_then(|s| s.conditions).unwrap_or_default();
    for c in &mut conds {
        c.status = "Unknown".into();
        c.reason = Some("NodeStatusUnknown".into());
        c.message = Some("Kubelet stopped posting node status.".into());
        c.last_transition_time = Some(now.clone());
    }
    ctx.api.merge_patch(&NODES, "", name, &json!({"status": {"conditions": to_value(&conds)}}), true).await?;
    let mut taints: Vec<Taint> = node.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.retain(|t| t.key != TAINT_UNREACHABLE && t.key != TAINT_NOT_READY);
    for effect in ["NoSchedule", "NoExecute"] {
        taints.push(Taint { key: TAINT_UNREACHABLE.into(), value: None, effect: effect.into(), time_added: (effect == "NoExecute").then(|| now.clone()) });
    }
    ctx.api.merge_patch(&NODES, "", name, &json!({"spec": {"taints": to_value(&taints)}}), false).await?;
    let on_node: Vec<_> = ctx.cache.pods.iter().filter(|(_, p)| p.node.as_deref() == Some(name) && p.ready).map(|(k, _)| k.clone()).collect();
    for (ns, pod_name) in on_node {
        let Some(pod) = ctx.read::<Pod>(&PODS, &ns, &pod_name).await? else { continue };
        let mut conds = pod.status.and_then(|s| s.conditions).unwrap_or_default();
        for c in conds.iter_mut().filter(|c| c.type_ == "Ready" || c.type_ == "ContainersReady") {
            c.status = "False".into();
            c.last_transition_time = Some(now.clone());
        }
        match ctx.api.merge_patch(&PODS, &ns, &pod_name, &json!({"status": {"conditions": to_value(&conds)}}), true).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// How long a pod tolerates the unreachable NoExecute taint: its own toleration, or the
/// DefaultTolerationSeconds default when it has none; `None` tolerates forever.
fn toleration_seconds(pod: &Pod, default: i64) -> Option<i64> {
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
    let matching = tolerations.into_iter().flatten().find(|t| {
        let key_ok = t.key.as_deref().is_none_or(|k| k.is_empty() || k == TAINT_UNREACHABLE);
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoExecute");
        let op_ok = t.operator.as_deref() == Some("Exists") || t.key.as_deref() == Some(TAINT_UNREACHABLE);
        key_ok && effect_ok && op_ok
    });
    match matching {
        Some(t) => t.toleration_seconds,
        None => Some(default),
    }
}

/// Evict the pods of an unreachable node whose toleration has run out.
async fn evict(name: &str, since: Instant, ctx: &mut Ctx<'_>) -> Reconciled {
    let on_node: Vec<_> = ctx.cache.pods.iter().filter(|(_, p)| p.node.as_deref() == Some(name) && !p.terminating).map(|(k, _)| k.clone()).collect();
    let elapsed = ctx.now.saturating_duration_since(since);
    let mut next: Option<Duration> = None;
    for (ns, pod_name) in on_node {
        let Some(pod) = ctx.read::<Pod>(&PODS, &ns, &pod_name).await? else { continue };
        let Some(secs) = toleration_seconds(&pod, ctx.config.timings.default_toleration_seconds) else { continue };
        let due = Duration::from_secs(secs.max(0) as u64);
        if elapsed < due {
            next = Some(next.map_or(due - elapsed, |n| n.min(due - elapsed)));
            continue;
        }
        match ctx.api.delete(&PODS, &ns, &pod_name, &json!({})).await {
            Ok(_) => {
                crate::workloads::events::record(
                    ctx,
                    &PODS,
                    &ns,
                    &pod_name,
                    pod.metadata.uid.as_deref().unwrap_or(""),
                    "Normal",
                    "TaintManagerEviction",
                    &format!("Marking for deletion Pod {ns}/{pod_name}"),
                    "taint-eviction-controller",
                )
                .await;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(next)
}

/// The kubelet is back: Ready again, the unreachable taints lifted.
async fn recover_node(name: &str, ctx: &mut Ctx<'_>) -> Result<(), SimError> {
    let Some(node) = ctx.read::<Node>(&NODES, "", name).await? else { return Ok(()) };
    ctx.state.nodes.entry(name.to_string()).or_default().unreachable_since = None;
    let mut status = ready_status(ctx.config);
    status.capacity = node.status.as_ref().and_then(|s| s.capacity.clone());
    status.allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone());
    ctx.api.merge_patch(&NODES, "", name, &json!({"status": {"conditions": to_value(&status.conditions)}}), true).await?;
    let taints: Vec<Taint> =
        node.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().filter(|t| t.key != TAINT_UNREACHABLE && t.key != TAINT_NOT_READY).collect();
    let taints = if taints.is_empty() { Value::Null } else { to_value(&taints) };
    ctx.api.merge_patch(&NODES, "", name, &json!({"spec": {"taints": taints}}), false).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse() {
        let t = parse_taint("dedicated=gpu:NoSchedule").unwrap();
        assert_eq!((t.key.as_str(), t.value.as_deref(), t.effect.as_str()), ("dedicated", Some("gpu"), "NoSchedule"));
        assert!(parse_taint("x:Sometimes").is_none());
        assert!(parse_taint(":NoSchedule").is_none());
    }

    #[test]
    fn toleration_defaults() {
        let mut pod = Pod::default();
        assert_eq!(toleration_seconds(&pod, 300), Some(300));
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            tolerations: Some(vec![k8s_openapi::api::core::v1::Toleration {
                key: Some(TAINT_UNREACHABLE.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(5),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(toleration_seconds(&pod, 300), Some(5));
    }
}
