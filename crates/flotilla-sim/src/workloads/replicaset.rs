//! The ReplicaSet controller: keeps `spec.replicas` active pods, deletes extras in the real
//! controller's order, and reports replicas, fullyLabeledReplicas, readyReplicas,
//! availableReplicas and terminatingReplicas.

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use serde_json::json;

use crate::cache::ObjKey;
use crate::kinds::REPLICASETS;
use crate::simulator::{Ctx, Reconciled};
use crate::workloads::pods::{self, nonzero};

pub const NAME: &str = "replicaset-controller";

/// At most this many pods are created or deleted in one pass (the real controller's burst).
const BURST: usize = 500;

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(rs) = ctx.cache.replicasets.get(key).cloned() else { return Ok(None) };
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let spec = &rs.spec;
    let desired = spec.replicas.unwrap_or(1).max(0) as usize;
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let template = spec.template.clone().unwrap_or_default();
    let template_labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let mut active: Vec<_> = ctx.cache.pods_of(ns, &uid).filter(|(_, p)| p.active()).collect();
    let terminating = ctx.cache.pods_of(ns, &uid).filter(|(_, p)| p.terminating && !p.phase.terminal()).count();
    let now = pods::now_ms();
    let status = ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: nonzero(active.iter().filter(|(_, p)| template_labels.iter().all(|(k, v)| p.labels.get(k) == Some(v.as_str()))).count() as i32),
        ready_replicas: nonzero(active.iter().filter(|(_, p)| p.ready).count() as i32),
        available_replicas: nonzero(active.iter().filter(|(_, p)| pods::available(p, min_ready, now)).count() as i32),
        terminating_replicas: Some(terminating as i32),
        observed_generation: rs.metadata.generation,
        conditions: rs.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    let requeue = active.iter().filter_map(|(_, p)| pods::available_in(p, min_ready, now)).min();
    if rs.metadata.deletion_timestamp.is_none() {
        if active.len() < desired {
            let owner = pods::owner_ref(&REPLICASETS, name, &uid);
            for _ in 0..(desired - active.len()).min(BURST) {
                let pod = pods::pod_from_template(&template, None, Some(&format!("{name}-")), &[], owner.clone());
                pods::create(ctx, ns, &pod).await?;
            }
        } else if active.len() > desired {
            active.sort_by_key(|(_, p)| pods::scale_down_rank(p));
            let excess: Vec<ObjKey> = active.iter().take((active.len() - desired).min(BURST)).map(|(k, _)| (*k).clone()).collect();
            for k in excess {
                pods::delete(ctx, &k).await?;
            }
        }
    }
    if rs.status.as_ref() != Some(&status) {
        let body = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rs.metadata.resource_version},
            "status": status,
        });
        ctx.api.replace(&REPLICASETS, ns, name, &body, true).await?;
    }
    Ok(requeue)
}

/// The replicas a ReplicaSet wants.
pub fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1)
}

/// Its available replicas as last reported.
pub fn available_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0)
}
