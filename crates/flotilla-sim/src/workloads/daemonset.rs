//! The DaemonSet controller: one pod per eligible node (nodeSelector, required node affinity
//! and taints, with the tolerations daemon pods get automatically), placed through the
//! scheduler by a node-name affinity as the real controller does; pods on nodes that no
//! longer qualify are removed; rolling updates replace old pods `maxUnavailable` at a time.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use crate::cache::{NodeInfo, ObjKey, PodInfo};
use crate::kinds::{DAEMONSETS, PODS};
use crate::simulator::{Ctx, Reconciled};
use crate::workloads::pods::{self, nonzero};

pub const NAME: &str = "daemonset-controller";
const REVISION_LABEL: &str = "controller-revision-hash";
const GENERATION_LABEL: &str = "pod-template-generation";

/// The tolerations every daemon pod gets.
fn daemon_tolerations() -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration { key: Some(key.into()), operator: Some("Exists".into()), effect: Some(effect.into()), ..Default::default() };
    vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
}

/// The template as pods get it: the automatic tolerations added.
fn daemon_template(ds: &DaemonSet) -> PodTemplateSpec {
    let mut t = ds.spec.template.clone();
    let ps = t.spec.get_or_insert_with(Default::default);
    let tolerations = ps.tolerations.get_or_insert_with(Vec::new);
    for auto in daemon_tolerations() {
        if !tolerations.iter().any(|x| x.key == auto.key && x.effect == auto.effect) {
            tolerations.push(auto);
        }
    }
    t
}

fn tolerated(template: &PodTemplateSpec, node: &NodeInfo) -> bool {
    let ts: &[Toleration] = template.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    node.taints.iter().filter(|(_, _, e)| &**e != "PreferNoSchedule").all(|(k, v, e)| {
        ts.iter().any(|t| {
            t.effect.as_deref().is_none_or(|x| x.is_empty() || x == &**e)
                && match t.operator.as_deref() {
                    Some("Exists") => t.key.as_deref().is_none_or(|x| x.is_empty() || x == &**k),
                    _ => t.key.as_deref() == Some(&**k) && t.value.as_deref().unwrap_or("") == &**v,
                }
        })
    })
}

fn eligible(template: &PodTemplateSpec, name: &str, node: &NodeInfo) -> bool {
    let spec = template.spec.as_ref();
    let labels = |k: &str| node.labels.get(k);
    let selector_ok = spec.and_then(|s| s.node_selector.as_ref()).into_iter().flatten().all(|(k, v)| labels(k) == Some(v.as_str()));
    let affinity_ok = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
        .is_none_or(|r| crate::selectors::node_terms_match(&r.node_selector_terms, name, labels));
    selector_ok && affinity_ok && tolerated(template, node)
}

/// Pin a template to one node with a required `metadata.name` affinity.
fn pinned(template: &PodTemplateSpec, node: &str) -> PodTemplateSpec {
    let mut t = template.clone();
    let ps = t.spec.get_or_insert_with(Default::default);
    let field = NodeSelectorRequirement { key: "metadata.name".into(), operator: "In".into(), values: Some(vec![node.to_string()]) };
    let affinity = ps.affinity.get_or_insert_with(Affinity::default);
    let na = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    let req = na.required_during_scheduling_ignored_during_execution.get_or_insert_with(|| NodeSelector { node_selector_terms: vec![] });
    if req.node_selector_terms.is_empty() {
        req.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for term in &mut req.node_selector_terms {
        term.match_fields = Some(vec![field.clone()]);
    }
    t
}

/// The node a pod waiting for the scheduler is pinned to.
async fn pinned_node(ctx: &Ctx<'_>, key: &ObjKey) -> Result<Option<String>, crate::simulator::SimError> {
    let Some(pod) = ctx.read::<Pod>(&PODS, &key.0, &key.1).await? else { return Ok(None) };
    let terms = pod
        .spec
        .and_then(|s| s.affinity)
        .and_then(|a| a.node_affinity)
        .and_then(|a| a.required_during_scheduling_ignored_during_execution)
        .map(|r| r.node_selector_terms)
        .unwrap_or_default();
    Ok(terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned()))
}

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(ds) = ctx.cache.daemonsets.get(key).cloned() else { return Ok(None) };
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let spec = &ds.spec;
    let template = daemon_template(&ds);
    let hash = pods::template_hash(&spec.template, ds.status.as_ref().and_then(|s| s.collision_count));
    let generation = ds.metadata.generation.unwrap_or(1).to_string();
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = pods::now_ms();
    let wanted: Vec<String> = ctx.cache.nodes.iter().filter(|(n, info)| eligible(&template, n, info)).map(|(n, _)| n.clone()).collect();
    let owned: Vec<(ObjKey, PodInfo)> = ctx.cache.pods_of(ns, &uid).filter(|(_, p)| p.active()).map(|(k, p)| (k.clone(), p.clone())).collect();
    // Pods by the node they are for: where they run, or where they are pinned while they
    // wait for the scheduler.
    let mut by_node: BTreeMap<String, Vec<&(ObjKey, PodInfo)>> = BTreeMap::new();
    let mut pending = 0usize;
    for entry in &owned {
        let node = match &entry.1.node {
            Some(n) => Some(n.to_string()),
            None => {
                pending += 1;
                pinned_node(ctx, &entry.0).await?
            }
        };
        if let Some(n) = node {
            by_node.entry(n).or_default().push(entry);
        }
    }
    let mut to_delete: Vec<ObjKey> = Vec::new();
    for (node, list) in &by_node {
        if !wanted.contains(node) {
            to_delete.extend(list.iter().map(|(k, _)| k.clone()));
        } else if list.len() > 1 {
            to_delete.extend(list.iter().skip(1).map(|(k, _)| k.clone()));
        }
    }
    let scheduled_pods: Vec<&PodInfo> =
        wanted.iter().filter_map(|n| by_node.get(n).and_then(|l| l.first())).map(|(_, p)| p).filter(|p| p.node.is_some()).collect();
    let status = DaemonSetStatus {
        desired_number_scheduled: wanted.len() as i32,
        current_number_scheduled: scheduled_pods.len() as i32,
        number_misscheduled: by_node.iter().filter(|(n, _)| !wanted.contains(n)).map(|(_, l)| l.len() as i32).sum(),
        number_ready: scheduled_pods.iter().filter(|p| p.ready).count() as i32,
        number_available: nonzero(scheduled_pods.iter().filter(|p| pods::available(p, min_ready, now)).count() as i32),
        number_unavailable: nonzero(wanted.len() as i32 - scheduled_pods.iter().filter(|p| pods::available(p, min_ready, now)).count() as i32),
        updated_number_scheduled: nonzero(scheduled_pods.iter().filter(|p| p.labels.get(REVISION_LABEL) == Some(hash.as_str())).count() as i32),
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    // Create what is missing.
    {
        let owner = pods::owner_ref(&DAEMONSETS, name, &uid);
        for node in wanted.iter().filter(|n| !by_node.contains_key(*n)) {
            let pod = pods::pod_from_template(
                &pinned(&template, node),
                None,
                Some(&format!("{name}-")),
                &[(REVISION_LABEL, &hash), (GENERATION_LABEL, &generation)],
                owner.clone(),
            );
            pods::create(ctx, ns, &pod).await?;
        }
    }
    for k in &to_delete {
        pods::delete(ctx, k).await?;
    }
    // Rolling update: replace old pods, at most maxUnavailable unavailable at a time.
    let rolling = spec.update_strategy.as_ref().and_then(|s| s.type_.as_deref()).is_none_or(|t| t == "RollingUpdate");
    if rolling && to_delete.is_empty() && pending == 0 {
        let max_unavailable = match spec.update_strategy.as_ref().and_then(|s| s.rolling_update.as_ref()).and_then(|r| r.max_unavailable.as_ref()) {
            Some(IntOrString::Int(n)) => *n,
            Some(IntOrString::String(s)) => ((s.trim_end_matches('%').parse::<f64>().unwrap_or(0.0) * wanted.len() as f64 / 100.0).ceil() as i32).max(1),
            None => 1,
        };
        let unavailable = wanted.len() as i32 - scheduled_pods.iter().filter(|p| pods::available(p, min_ready, now)).count() as i32;
        let budget = (max_unavailable - unavailable).max(0) as usize;
        let old: Vec<ObjKey> = wanted
            .iter()
            .filter_map(|n| by_node.get(n).and_then(|l| l.first()))
            .filter(|(_, p)| p.labels.get(REVISION_LABEL) != Some(hash.as_str()) && pods::available(p, min_ready, now))
            .map(|(k, _)| k.clone())
            .take(budget)
            .collect();
        for k in &old {
            pods::delete(ctx, k).await?;
        }
    }
    if ds.status.as_ref() != Some(&status) {
        let body = json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": ds.metadata.resource_version},
            "status": status,
        });
        ctx.api.replace(&DAEMONSETS, ns, name, &body, true).await?;
    }
    Ok(scheduled_pods.iter().filter_map(|p| pods::available_in(p, min_ready, now)).min())
}
