//! The scheduler: binds each waiting pod to a node that is schedulable, whose taints it
//! tolerates, that matches its nodeSelector and required node affinity, and that has room for
//! its requests (cpu, memory, pod count) — or reports it `PodScheduled=False,
//! reason=Unschedulable` with kube-scheduler's message and a FailedScheduling event.
//!
//! Among the nodes that fit it prefers the one with the fewest pods of the same controller,
//! then the least allocated (kube-scheduler's spreading and LeastAllocated, simplified).
//! Binding copies the node's region and zone labels onto the pod, as kube-apiserver's binding
//! does since 1.33.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Pod, PodCondition, Toleration};
use serde_json::json;

use crate::cache::{NodeInfo, ObjKey};
use crate::kinds::PODS;
use crate::simulator::{Ctx, Reconciled, SimError};
use crate::workloads::pods;

pub const NAME: &str = "default-scheduler";
const TOPOLOGY_LABELS: &[&str] = &["topology.kubernetes.io/region", "topology.kubernetes.io/zone"];

/// What a node has in use.
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu: i128,
    memory: i128,
    pods: i128,
}

fn tolerates(t: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    if t.effect.as_deref().is_some_and(|e| !e.is_empty() && e != effect) {
        return false;
    }
    match t.operator.as_deref() {
        Some("Exists") => t.key.as_deref().is_none_or(|k| k.is_empty() || k == key),
        _ => t.key.as_deref() == Some(key) && t.value.as_deref().unwrap_or("") == value,
    }
}

/// Why a node does not fit, in kube-scheduler's words; empty when it fits. The second value
/// says whether preemption could help (the pod would fit the empty node).
fn unfit(pod: &Pod, node_name: &str, node: &NodeInfo, used: Usage, cpu: i128, memory: i128) -> (Vec<String>, bool) {
    let spec = pod.spec.as_ref();
    if node.unschedulable {
        let tolerated =
            spec.and_then(|s| s.tolerations.as_ref()).is_some_and(|ts| ts.iter().any(|t| tolerates(t, "node.kubernetes.io/unschedulable", "", "NoSchedule")));
        if !tolerated {
            return (vec!["node(s) were unschedulable".into()], false);
        }
    }
    let tolerations: &[Toleration] = spec.and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    for (key, value, effect) in node.taints.iter() {
        if &**effect == "PreferNoSchedule" {
            continue;
        }
        if !tolerations.iter().any(|t| tolerates(t, key, value, effect)) {
            return (vec![format!("node(s) had untolerated taint {{{key}: {value}}}")], false);
        }
    }
    let labels = |k: &str| node.labels.get(k);
    let selector_ok = spec.and_then(|s| s.node_selector.as_ref()).into_iter().flatten().all(|(k, v)| labels(k) == Some(v.as_str()));
    let affinity_ok = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .is_none_or(|req| crate::selectors::node_terms_match(&req.node_selector_terms, node_name, labels));
    if !selector_ok || !affinity_ok {
        return (vec!["node(s) didn't match Pod's node affinity/selector".into()], false);
    }
    let mut reasons = Vec::new();
    if used.pods + 1 > node.pods {
        reasons.push("Too many pods".to_string());
    }
    if cpu > 0 && used.cpu + cpu > node.cpu {
        reasons.push("Insufficient cpu".to_string());
    }
    if memory > 0 && used.memory + memory > node.memory {
        reasons.push("Insufficient memory".to_string());
    }
    let would_fit_empty = cpu <= node.cpu && memory <= node.memory && node.pods >= 1;
    (reasons, would_fit_empty)
}

/// `0/N nodes are available: <histogram>.`, reasons counted and sorted as strings.
fn histogram(total: usize, reasons: &BTreeMap<String, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{total} nodes are available: {}.", parts.join(", "))
}

pub async fn reconcile(ctx: &mut Ctx<'_>) -> Reconciled {
    let mut waiting: Vec<(ObjKey, i64)> = ctx
        .cache
        .pods
        .iter()
        .filter(|(_, p)| p.node.is_none() && !p.terminating && p.default_scheduler && !p.phase.terminal())
        .map(|(k, p)| (k.clone(), p.created_ms))
        .collect();
    if waiting.is_empty() {
        return Ok(None);
    }
    waiting.sort_by_key(|(k, created)| (*created, k.clone()));
    let mut usage: HashMap<String, Usage> = HashMap::new();
    let mut spread: HashMap<(String, String), usize> = HashMap::new();
    for p in ctx.cache.pods.values().filter(|p| !p.phase.terminal()) {
        if let Some(n) = &p.node {
            let u = usage.entry(n.to_string()).or_default();
            u.cpu += p.cpu;
            u.memory += p.memory;
            u.pods += 1;
            if let Some(o) = &p.owner {
                *spread.entry((n.to_string(), o.uid.to_string())).or_default() += 1;
            }
        }
    }
    let mut failed = None;
    for ((ns, name), _) in waiting {
        if let Err(e) = schedule_one(ctx, &ns, &name, &mut usage, &mut spread).await {
            failed = Some(e);
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

async fn schedule_one(
    ctx: &mut Ctx<'_>,
    ns: &str,
    name: &str,
    usage: &mut HashMap<String, Usage>,
    spread: &mut HashMap<(String, String), usize>,
) -> Result<(), SimError> {
    let Some(pod) = ctx.read::<Pod>(&PODS, ns, name).await? else { return Ok(()) };
    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()) {
        return Ok(());
    }
    let info = crate::cache::PodInfo::of(&pod);
    let owner = info.owner.as_ref().map(|o| o.uid.to_string()).unwrap_or_default();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut preemption: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<((usize, i128, i128, String), String)> = None;
    for (node_name, node) in &ctx.cache.nodes {
        let used = usage.get(node_name).copied().unwrap_or_default();
        let (why, helps) = unfit(&pod, node_name, node, used, info.cpu, info.memory);
        if why.is_empty() {
            let same = spread.get(&(node_name.clone(), owner.clone())).copied().unwrap_or(0);
            let share = |u: i128, cap: i128| if cap > 0 { u * 1000 / cap } else { 0 };
            let load = share(used.cpu + info.cpu, node.cpu) + share(used.memory + info.memory, node.memory);
            let score = (same, load, used.pods, node_name.clone());
            if best.as_ref().is_none_or(|(b, _)| score < *b) {
                best = Some((score, node_name.clone()));
            }
        } else {
            for r in why {
                *reasons.entry(r).or_default() += 1;
            }
            let p = if helps { "No preemption victims found for incoming pod" } else { "Preemption is not helpful for scheduling" };
            *preemption.entry(p.to_string()).or_default() += 1;
        }
    }
    let Some((_, node_name)) = best else {
        let total = ctx.cache.nodes.len();
        let message = if total == 0 {
            "no nodes available to schedule pods".to_string()
        } else {
            format!("{} preemption: {}", histogram(total, &reasons), histogram(total, &preemption))
        };
        return report_unschedulable(ctx, &pod, ns, name, &message).await;
    };
    let node = &ctx.cache.nodes[&node_name];
    let mut labels = serde_json::Map::new();
    for l in TOPOLOGY_LABELS {
        if let Some(v) = node.labels.get(l) {
            labels.insert((*l).to_string(), json!(v));
        }
    }
    let patch = json!({"metadata": {"labels": labels}, "spec": {"nodeName": node_name}});
    match ctx.api.merge_patch(&PODS, ns, name, &patch, false).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let u = usage.entry(node_name.clone()).or_default();
    u.cpu += info.cpu;
    u.memory += info.memory;
    u.pods += 1;
    *spread.entry((node_name, owner)).or_default() += 1;
    let mut conds: Vec<PodCondition> = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conds.retain(|c| c.type_ != "PodScheduled");
    conds.insert(0, PodCondition { type_: "PodScheduled".into(), status: "True".into(), last_transition_time: Some(pods::now()), ..Default::default() });
    match ctx.api.merge_patch(&PODS, ns, name, &json!({"status": {"conditions": conds}}), true).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn report_unschedulable(ctx: &Ctx<'_>, pod: &Pod, ns: &str, name: &str, message: &str) -> Result<(), SimError> {
    let current = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if current.is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(message)) {
        return Ok(());
    }
    let mut conds: Vec<PodCondition> = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conds.retain(|c| c.type_ != "PodScheduled");
    conds.push(PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some(message.into()),
        last_transition_time: Some(pods::now()),
        observed_generation: pod.metadata.generation,
        ..Default::default()
    });
    match ctx.api.merge_patch(&PODS, ns, name, &json!({"status": {"phase": "Pending", "conditions": conds}}), true).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    crate::workloads::events::record(ctx, &PODS, ns, name, uid, "Warning", "FailedScheduling", message, NAME).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_follow_kube_scheduler() {
        let reasons: BTreeMap<String, usize> = [("Insufficient cpu".to_string(), 2)].into();
        assert_eq!(histogram(2, &reasons), "0/2 nodes are available: 2 Insufficient cpu.");
        let t = Toleration { key: Some("k".into()), operator: Some("Exists".into()), ..Default::default() };
        assert!(tolerates(&t, "k", "v", "NoSchedule"));
        assert!(!tolerates(&t, "other", "v", "NoSchedule"));
        let eq = Toleration { key: Some("k".into()), value: Some("v".into()), effect: Some("NoExecute".into()), ..Default::default() };
        assert!(!tolerates(&eq, "k", "v", "NoSchedule"));
    }
}
