//! The Deployment controller: one ReplicaSet per pod template (named by the template's hash),
//! rolling updates bounded by maxSurge and maxUnavailable, Recreate, revision annotations and
//! history cleanup, and status with the Available and Progressing conditions — following
//! kube-controller-manager's `pkg/controller/deployment` step by step (without proportional
//! scaling of several active ReplicaSets and without the progress deadline).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::cache::{ObjKey, controller_of};
use crate::kinds::{DEPLOYMENTS, REPLICASETS};
use crate::simulator::{Ctx, Reconciled, SimError};
use crate::workloads::pods::{self, nonzero};
use crate::workloads::replicaset::{available_replicas, spec_replicas};

pub const NAME: &str = "deployment-controller";
pub const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
/// Deployment annotations not copied onto its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED,
    MAX,
    "deprecated.deployment.rollback.to",
];

/// A percentage or count of `total`, rounded up or down.
fn resolve(v: Option<&IntOrString>, default: &str, total: i32, round_up: bool) -> i32 {
    match v {
        Some(IntOrString::Int(n)) => *n,
        other => {
            let s = match other {
                Some(IntOrString::String(s)) => s.as_str(),
                _ => default,
            };
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            let exact = pct * f64::from(total) / 100.0;
            (if round_up { exact.ceil() } else { exact.floor() }) as i32
        }
    }
}

fn replicas(d: &Deployment) -> i32 {
    d.spec.replicas.unwrap_or(1)
}

fn rolling(d: &Deployment) -> bool {
    d.spec.strategy.as_ref().and_then(|s| s.type_.as_deref()).is_none_or(|t| t == "RollingUpdate")
}

/// (maxSurge, maxUnavailable) as the controller resolves them.
fn fenceposts(d: &Deployment) -> (i32, i32) {
    if !rolling(d) {
        return (0, 0);
    }
    let ru = d.spec.strategy.as_ref().and_then(|s| s.rolling_update.as_ref());
    let desired = replicas(d);
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), "25%", desired, true);
    let mut unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), "25%", desired, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

fn max_unavailable(d: &Deployment) -> i32 {
    let desired = replicas(d);
    if !rolling(d) || desired == 0 { 0 } else { fenceposts(d).1.min(desired) }
}

fn revision_of(rs: &ReplicaSet) -> i64 {
    rs.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// How many replicas the new ReplicaSet should have now.
fn new_rs_replicas(d: &Deployment, all: &[Arc<ReplicaSet>], new_current: i32) -> i32 {
    if !rolling(d) {
        return replicas(d);
    }
    let (surge, _) = fenceposts(d);
    let current: i32 = all.iter().map(|r| spec_replicas(r)).sum();
    let max_total = replicas(d) + surge;
    if current >= max_total {
        return new_current;
    }
    new_current + (max_total - current).min(replicas(d) - new_current)
}

fn condition(type_: &str, status: &str, reason: &str, message: String) -> DeploymentCondition {
    let now = pods::now();
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// `SetDeploymentCondition`: unchanged status and reason keep the old condition; otherwise the
/// new one goes last, keeping the transition time when only the reason changed.
fn set_condition(conds: &mut Vec<DeploymentCondition>, mut c: DeploymentCondition) {
    if let Some(cur) = conds.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conds.retain(|x| x.type_ != c.type_);
    conds.push(c);
}

/// Conditions compared without their times.
fn same_status(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    let strip = |s: &DeploymentStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_update_time = None;
            c.last_transition_time = None;
        }
        s
    };
    strip(a) == strip(b)
}

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(d) = ctx.cache.deployments.get(key).cloned() else { return Ok(None) };
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let spec = &d.spec;
    let mut all: Vec<Arc<ReplicaSet>> = ctx
        .cache
        .replicasets
        .range((ns.to_string(), String::new())..)
        .take_while(|(k, _)| k.0 == ns)
        .filter(|(_, rs)| controller_of(&rs.metadata).is_some_and(|o| o.uid == uid))
        .map(|(_, rs)| rs.clone())
        .collect();
    all.sort_by_key(|rs| (rs.metadata.creation_timestamp.as_ref().map(|t| t.0), rs.metadata.name.clone()));
    let new_rs = all.iter().find(|rs| rs.spec.template.as_ref().is_some_and(|t| pods::same_template(t, &spec.template, HASH_LABEL))).cloned();
    let old: Vec<Arc<ReplicaSet>> = all.iter().filter(|rs| Some(rs.metadata.uid.clone()) != new_rs.as_ref().map(|n| n.metadata.uid.clone())).cloned().collect();
    let max_revision = old.iter().map(|r| revision_of(r)).max().unwrap_or(0);
    let paused = spec.paused.unwrap_or(false);

    let Some(new_rs) = new_rs else {
        if paused {
            return sync_status(ctx, &d, &all, None).await;
        }
        // Recreate makes the new ReplicaSet only once the old pods are gone.
        if !rolling(&d) && (scale_down_all(ctx, &old, &d).await? || old_pods_running(ctx, ns, &old)) {
            return sync_status(ctx, &d, &all, None).await;
        }
        create_new_rs(ctx, &d, &all, max_revision + 1).await?;
        return Ok(None);
    };
    let new_revision = revision_of(&new_rs);
    if new_revision <= max_revision && !old.is_empty() {
        // The template went back to an older ReplicaSet: it becomes the newest revision.
        let patch = json!({"metadata": {"annotations": {REVISION: (max_revision + 1).to_string()}}});
        ctx.api.merge_patch(&REPLICASETS, ns, name_of(&new_rs), &patch, false).await?;
        return Ok(None);
    }
    let d_revision = d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).cloned();
    if d_revision.as_deref() != Some(new_revision.to_string().as_str()) {
        let patch = json!({"metadata": {"annotations": {REVISION: new_revision.to_string()}}});
        ctx.api.merge_patch(&DEPLOYMENTS, ns, name, &patch, false).await?;
        return Ok(None);
    }
    if paused {
        return sync_status(ctx, &d, &all, Some(&new_rs)).await;
    }
    if rolling(&d) {
        if reconcile_new(ctx, &d, &all, &new_rs).await? || reconcile_old(ctx, &d, &all, &old, &new_rs).await? {
            return sync_status(ctx, &d, &all, Some(&new_rs)).await;
        }
    } else {
        let active_old: Vec<_> = old.iter().filter(|r| spec_replicas(r) > 0).cloned().collect();
        if scale_down_all(ctx, &active_old, &d).await? || old_pods_running(ctx, ns, &old) {
            return sync_status(ctx, &d, &all, Some(&new_rs)).await;
        }
        if spec_replicas(&new_rs) != replicas(&d) {
            scale(ctx, &d, &new_rs, replicas(&d)).await?;
            return sync_status(ctx, &d, &all, Some(&new_rs)).await;
        }
    }
    if complete(&d, &calculate_status(&d, &all, Some(&new_rs))) {
        cleanup(ctx, &d, &old).await?;
    }
    sync_status(ctx, &d, &all, Some(&new_rs)).await
}

fn name_of(rs: &ReplicaSet) -> &str {
    rs.metadata.name.as_deref().unwrap_or("")
}

async fn create_new_rs(ctx: &Ctx<'_>, d: &Deployment, all: &[Arc<ReplicaSet>], revision: i64) -> Result<(), SimError> {
    let spec = &d.spec;
    let (ns, name) = (d.metadata.namespace.as_deref().unwrap_or(""), d.metadata.name.as_deref().unwrap_or(""));
    let collision = d.status.as_ref().and_then(|s| s.collision_count);
    let hash = pods::template_hash(&spec.template, collision);
    let mut template = spec.template.clone();
    let tm = template.metadata.get_or_insert_with(Default::default);
    tm.labels.get_or_insert_with(BTreeMap::new).insert(HASH_LABEL.into(), hash.clone());
    let labels = tm.labels.clone();
    let mut selector = spec.selector.clone();
    selector.match_labels.get_or_insert_with(BTreeMap::new).insert(HASH_LABEL.into(), hash.clone());
    let rs_name = format!("{name}-{hash}");
    let mut candidate = ReplicaSet {
        metadata: ObjectMeta { name: Some(rs_name.clone()), ..Default::default() },
        spec: ReplicaSetSpec { replicas: Some(0), ..Default::default() },
        status: None,
    };
    let mut with_new: Vec<Arc<ReplicaSet>> = all.to_vec();
    with_new.push(Arc::new(candidate.clone()));
    let count = new_rs_replicas(d, &with_new, 0);
    let (surge, _) = fenceposts(d);
    let mut annotations: BTreeMap<String, String> =
        d.metadata.annotations.iter().flatten().filter(|(k, _)| !NOT_COPIED.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect();
    annotations.insert(REVISION.into(), revision.to_string());
    annotations.insert(DESIRED.into(), replicas(d).to_string());
    annotations.insert(MAX.into(), (replicas(d) + surge).to_string());
    candidate.metadata = ObjectMeta {
        name: Some(rs_name.clone()),
        namespace: Some(ns.into()),
        labels,
        annotations: Some(annotations),
        owner_references: Some(vec![pods::owner_ref(&DEPLOYMENTS, name, d.metadata.uid.as_deref().unwrap_or(""))]),
        ..Default::default()
    };
    candidate.spec = ReplicaSetSpec { replicas: Some(count), min_ready_seconds: spec.min_ready_seconds, selector, template: Some(template) };
    match ctx.api.create(&REPLICASETS, ns, &serde_json::to_value(&candidate).unwrap_or_default()).await {
        Ok(_) => {}
        Err(e) if e.code == 409 => {
            // A ReplicaSet of that name exists but is not ours or has another template: a hash
            // collision. Count it, so the next hash differs.
            let mut status = d.status.clone().unwrap_or_default();
            status.collision_count = Some(collision.unwrap_or(0) + 1);
            return write_status(ctx, d, status).await;
        }
        Err(e) => return Err(e.into()),
    }
    let mut status = d.status.clone().unwrap_or_default();
    let mut conds = status.conditions.take().unwrap_or_default();
    set_condition(&mut conds, condition("Progressing", "True", "NewReplicaSetCreated", format!("Created new replica set {rs_name:?}")));
    status.conditions = Some(conds);
    write_status(ctx, d, status).await?;
    let patch = json!({"metadata": {"annotations": {REVISION: revision.to_string()}}});
    ctx.api.merge_patch(&DEPLOYMENTS, ns, name, &patch, false).await?;
    Ok(())
}

/// Scale a ReplicaSet, refreshing its desired/max annotations.
async fn scale(ctx: &Ctx<'_>, d: &Deployment, rs: &ReplicaSet, to: i32) -> Result<(), SimError> {
    let (surge, _) = fenceposts(d);
    let patch = json!({
        "metadata": {"annotations": {DESIRED: replicas(d).to_string(), MAX: (replicas(d) + surge).to_string()}},
        "spec": {"replicas": to},
    });
    ctx.api.merge_patch(&REPLICASETS, rs.metadata.namespace.as_deref().unwrap_or(""), name_of(rs), &patch, false).await?;
    Ok(())
}

async fn reconcile_new(ctx: &Ctx<'_>, d: &Deployment, all: &[Arc<ReplicaSet>], new_rs: &ReplicaSet) -> Result<bool, SimError> {
    let current = spec_replicas(new_rs);
    let desired = replicas(d);
    if current == desired {
        return Ok(false);
    }
    let to = if current > desired { desired } else { new_rs_replicas(d, all, current) };
    if to == current {
        return Ok(false);
    }
    scale(ctx, d, new_rs, to).await?;
    Ok(true)
}

async fn reconcile_old(ctx: &Ctx<'_>, d: &Deployment, all: &[Arc<ReplicaSet>], old: &[Arc<ReplicaSet>], new_rs: &ReplicaSet) -> Result<bool, SimError> {
    let old_count: i32 = old.iter().map(|r| spec_replicas(r)).sum();
    if old_count == 0 {
        return Ok(false);
    }
    let all_count: i32 = all.iter().map(|r| spec_replicas(r)).sum();
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = spec_replicas(new_rs) - available_replicas(new_rs);
    let max_scaled_down = all_count - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Ok(false);
    }
    // First the old replicas that are not available anyway, oldest ReplicaSet first.
    let mut targets: Vec<(Arc<ReplicaSet>, i32)> = old.iter().map(|r| (r.clone(), spec_replicas(r))).collect();
    let mut cleaned = 0;
    for (rs, count) in targets.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let unavailable = *count - available_replicas(rs);
        if *count == 0 || unavailable <= 0 {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(unavailable);
        *count -= down;
        cleaned += down;
        scale(ctx, d, rs, *count).await?;
    }
    // Then available ones, down to the minimum availability.
    let available: i32 = all.iter().map(|r| available_replicas(r)).sum();
    let mut scaled = 0;
    if available > min_available {
        let total = available - min_available;
        for (rs, count) in targets.iter_mut() {
            if scaled >= total {
                break;
            }
            if *count == 0 {
                continue;
            }
            let down = (*count).min(total - scaled);
            *count -= down;
            scaled += down;
            scale(ctx, d, rs, *count).await?;
        }
    }
    Ok(cleaned + scaled > 0)
}

async fn scale_down_all(ctx: &Ctx<'_>, rses: &[Arc<ReplicaSet>], d: &Deployment) -> Result<bool, SimError> {
    let mut scaled = false;
    for rs in rses.iter().filter(|r| spec_replicas(r) > 0) {
        scale(ctx, d, rs, 0).await?;
        scaled = true;
    }
    Ok(scaled)
}

fn old_pods_running(ctx: &Ctx<'_>, ns: &str, old: &[Arc<ReplicaSet>]) -> bool {
    old.iter().any(|rs| {
        let uid = rs.metadata.uid.as_deref().unwrap_or("");
        ctx.cache.pods_of(ns, uid).any(|(_, p)| !p.phase.terminal())
    })
}

/// Delete old, empty ReplicaSets beyond `revisionHistoryLimit` (oldest first).
async fn cleanup(ctx: &Ctx<'_>, d: &Deployment, old: &[Arc<ReplicaSet>]) -> Result<(), SimError> {
    let limit = d.spec.revision_history_limit.unwrap_or(10).max(0) as usize;
    let empty: Vec<_> =
        old.iter().filter(|r| spec_replicas(r) == 0 && r.status.as_ref().is_none_or(|s| s.replicas == 0) && r.metadata.deletion_timestamp.is_none()).collect();
    if empty.len() <= limit {
        return Ok(());
    }
    for rs in &empty[..empty.len() - limit] {
        match ctx.api.delete(&REPLICASETS, rs.metadata.namespace.as_deref().unwrap_or(""), name_of(rs), &json!({})).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn calculate_status(d: &Deployment, all: &[Arc<ReplicaSet>], new_rs: Option<&Arc<ReplicaSet>>) -> DeploymentStatus {
    let st = |r: &ReplicaSet| r.status.clone().unwrap_or_default();
    let available: i32 = all.iter().map(|r| st(r).available_replicas.unwrap_or(0)).sum();
    let total: i32 = all.iter().map(|r| spec_replicas(r)).sum();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: nonzero(all.iter().map(|r| st(r).replicas).sum()),
        updated_replicas: nonzero(new_rs.map_or(0, |r| st(r).replicas)),
        ready_replicas: nonzero(all.iter().map(|r| st(r).ready_replicas.unwrap_or(0)).sum()),
        available_replicas: nonzero(available),
        unavailable_replicas: nonzero((total - available).max(0)),
        terminating_replicas: Some(all.iter().map(|r| st(r).terminating_replicas.unwrap_or(0)).sum()),
        collision_count: d.status.as_ref().and_then(|s| s.collision_count),
        conditions: d.status.as_ref().and_then(|s| s.conditions.clone()),
    };
    let mut conds = status.conditions.take().unwrap_or_default();
    if available >= replicas(d) - max_unavailable(d) {
        set_condition(&mut conds, condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.".into()));
    } else {
        set_condition(&mut conds, condition("Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.".into()));
    }
    status.conditions = Some(conds);
    status
}

fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let want = Some(replicas(d)).filter(|n| *n != 0);
    s.updated_replicas == want && s.replicas == want && s.available_replicas == want && s.observed_generation >= d.metadata.generation
}

async fn sync_status(ctx: &Ctx<'_>, d: &Deployment, all: &[Arc<ReplicaSet>], new_rs: Option<&Arc<ReplicaSet>>) -> Reconciled {
    let mut status = calculate_status(d, all, new_rs);
    let old = d.status.clone().unwrap_or_default();
    let current = old.conditions.iter().flatten().find(|c| c.type_.as_deref() == Some("Progressing")).cloned();
    let done = status.replicas == status.updated_replicas && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"));
    if let (Some(new_rs), false) = (new_rs, done) {
        let mut conds = status.conditions.take().unwrap_or_default();
        let rs_name = name_of(new_rs);
        let progressing = status.updated_replicas > old.updated_replicas
            || status.replicas.unwrap_or(0) - status.updated_replicas.unwrap_or(0) < old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0)
            || status.ready_replicas > old.ready_replicas
            || status.available_replicas > old.available_replicas;
        if complete(d, &status) {
            set_condition(
                &mut conds,
                condition("Progressing", "True", "NewReplicaSetAvailable", format!("ReplicaSet {rs_name:?} has successfully progressed.")),
            );
        } else if progressing {
            let mut c = condition("Progressing", "True", "ReplicaSetUpdated", format!("ReplicaSet {rs_name:?} is progressing."));
            if let Some(cur) = &current {
                if cur.status.as_deref() == Some("True") {
                    c.last_transition_time = cur.last_transition_time.clone();
                }
                conds.retain(|x| x.type_.as_deref() != Some("Progressing"));
            }
            set_condition(&mut conds, c);
        }
        status.conditions = Some(conds);
    }
    if !same_status(&old, &status) || d.status.is_none() {
        write_status(ctx, d, status).await?;
    }
    Ok(None)
}

async fn write_status(ctx: &Ctx<'_>, d: &Deployment, status: DeploymentStatus) -> Result<(), SimError> {
    let (ns, name) = (d.metadata.namespace.as_deref().unwrap_or(""), d.metadata.name.as_deref().unwrap_or(""));
    let body: Value = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": d.metadata.resource_version},
        "status": status,
    });
    ctx.api.replace(&DEPLOYMENTS, ns, name, &body, true).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};

    fn deployment(replicas: i32, surge: Option<IntOrString>, unavailable: Option<IntOrString>) -> Deployment {
        Deployment {
            spec: DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment { max_surge: surge, max_unavailable: unavailable }),
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn fenceposts_round_like_the_controller() {
        assert_eq!(fenceposts(&deployment(3, None, None)), (1, 0));
        assert_eq!(max_unavailable(&deployment(3, None, None)), 0);
        assert_eq!(max_unavailable(&deployment(4, None, None)), 1);
        assert_eq!(fenceposts(&deployment(10, Some(IntOrString::String("30%".into())), Some(IntOrString::Int(2)))), (3, 2));
        assert_eq!(max_unavailable(&deployment(4, Some(IntOrString::Int(0)), Some(IntOrString::Int(0)))), 1);
    }
}
