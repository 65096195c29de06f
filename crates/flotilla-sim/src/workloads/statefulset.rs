//! The StatefulSet controller: pods `<name>-<ordinal>` with stable hostnames, created in order
//! and removed in reverse (OrderedReady: one at a time, each waiting for the ones before it to
//! be Running and Ready; Parallel: all at once), PersistentVolumeClaims from the claim
//! templates (bound at once, as if a provisioner were there), rolling updates from the
//! highest ordinal down to the partition, and status with current/update revisions.
//! ControllerRevision objects are not kept: revisions are named `<name>-<template hash>`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, PodTemplateSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use crate::cache::{ObjKey, Phase, PodInfo};
use crate::kinds::{PVCS, STATEFULSETS};
use crate::simulator::{Ctx, Reconciled, SimError};
use crate::workloads::pods::{self, nonzero};

pub const NAME: &str = "statefulset-controller";
pub const REVISION_LABEL: &str = "controller-revision-hash";

fn ordinal_of(set: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

fn healthy(p: &PodInfo) -> bool {
    p.phase == Phase::Running && p.ready && !p.terminating
}

/// The pod template of ordinal `i` at a revision: hostname, subdomain and claim volumes.
fn pod_for(sts: &StatefulSet, template: &PodTemplateSpec, ordinal: i32, revision: &str) -> serde_json::Value {
    let name = sts.metadata.name.as_deref().unwrap_or("");
    let spec = &sts.spec;
    let pod_name = format!("{name}-{ordinal}");
    let mut template = template.clone();
    if let Some(ps) = template.spec.as_mut() {
        ps.hostname = Some(pod_name.clone());
        ps.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
        for claim in spec.volume_claim_templates.iter().flatten() {
            let claim_name = claim.metadata.name.clone().unwrap_or_default();
            let volumes = ps.volumes.get_or_insert_with(Vec::new);
            volumes.retain(|v| v.name != claim_name);
            volumes.push(Volume {
                name: claim_name.clone(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource { claim_name: format!("{claim_name}-{pod_name}"), read_only: None }),
                ..Default::default()
            });
        }
    }
    let owner = pods::owner_ref(&STATEFULSETS, name, sts.metadata.uid.as_deref().unwrap_or(""));
    let index = ordinal.to_string();
    let labels = [(REVISION_LABEL, revision), ("statefulset.kubernetes.io/pod-name", pod_name.as_str()), ("apps.kubernetes.io/pod-index", index.as_str())];
    // Named by ordinal, yet with the set's generateName too, as the real controller's pods are.
    pods::pod_from_template(&template, Some(&pod_name), Some(&format!("{name}-")), &labels, owner)
}

/// Create the claims of ordinal `i` that do not exist yet, and bind them.
async fn ensure_claims(ctx: &Ctx<'_>, sts: &StatefulSet, ns: &str, ordinal: i32) -> Result<(), SimError> {
    let name = sts.metadata.name.as_deref().unwrap_or("");
    let spec = &sts.spec;
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    for claim in spec.volume_claim_templates.iter().flatten() {
        let claim_name = format!("{}-{name}-{ordinal}", claim.metadata.name.as_deref().unwrap_or(""));
        if ctx.store.get(PVCS.key(ns, &claim_name).as_bytes()).await?.is_some() {
            continue;
        }
        let mut labels: BTreeMap<String, String> = claim.metadata.labels.clone().unwrap_or_default();
        labels.extend(selector_labels.clone());
        let pvc = PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some(claim_name.clone()), namespace: Some(ns.into()), labels: Some(labels), ..Default::default() },
            spec: claim.spec.clone(),
            status: None,
        };
        match ctx.api.create(&PVCS, ns, &serde_json::to_value(&pvc).unwrap_or_default()).await {
            Ok(_) => {}
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
        let requested = claim.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.clone()).unwrap_or_default();
        let access = claim.spec.as_ref().and_then(|s| s.access_modes.clone()).unwrap_or_default();
        let status = json!({"status": {"phase": "Bound", "accessModes": access, "capacity": requested}});
        ctx.api.merge_patch(&PVCS, ns, &claim_name, &status, true).await?;
    }
    Ok(())
}

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(sts) = ctx.cache.statefulsets.get(key).cloned() else { return Ok(None) };
    if sts.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let uid = sts.metadata.uid.clone().unwrap_or_default();
    let spec = &sts.spec;
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let old_status = sts.status.clone().unwrap_or_default();
    // The real controller always hashes the collision count (0 when unset), so the revision
    // does not change when the first status write sets collisionCount: 0.
    let collision = old_status.collision_count.unwrap_or(0);
    let update_revision = format!("{name}-{}", pods::template_hash(&spec.template, Some(collision)));
    let current_revision = old_status.current_revision.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| update_revision.clone());
    let rolling = spec.update_strategy.as_ref().and_then(|s| s.type_.as_deref()).is_none_or(|t| t == "RollingUpdate");
    let partition = spec.update_strategy.as_ref().and_then(|s| s.rolling_update.as_ref()).and_then(|r| r.partition).unwrap_or(0);
    let pods: BTreeMap<i32, (&ObjKey, &PodInfo)> = ctx.cache.pods_of(ns, &uid).filter_map(|(k, p)| ordinal_of(name, &k.1).map(|o| (o, (k, p)))).collect();
    let revision_of = |p: &PodInfo| p.labels.get(REVISION_LABEL).map(String::from);

    // Status from what exists now.
    let now = pods::now_ms();
    let live: Vec<&PodInfo> = pods.values().map(|(_, p)| *p).filter(|p| !p.phase.terminal()).collect();
    let mut status = StatefulSetStatus {
        observed_generation: sts.metadata.generation,
        replicas: live.len() as i32,
        ready_replicas: nonzero(live.iter().filter(|p| p.ready).count() as i32),
        available_replicas: Some(live.iter().filter(|p| pods::available(p, min_ready, now)).count() as i32),
        current_replicas: nonzero(live.iter().filter(|p| revision_of(p).as_deref() == Some(current_revision.as_str())).count() as i32),
        updated_replicas: nonzero(live.iter().filter(|p| revision_of(p).as_deref() == Some(update_revision.as_str())).count() as i32),
        current_revision: Some(current_revision.clone()),
        update_revision: Some(update_revision.clone()),
        collision_count: Some(collision),
        conditions: old_status.conditions.clone(),
    };
    if status.updated_replicas == Some(status.replicas).filter(|r| *r > 0) && status.ready_replicas == status.updated_replicas {
        status.current_revision = Some(update_revision.clone());
        status.current_replicas = status.updated_replicas;
    }
    if status.available_replicas == Some(0) {
        status.available_replicas = None;
    }
    let requeue = live.iter().filter_map(|p| pods::available_in(p, min_ready, now)).min();

    let mut acted = false;
    // Create missing pods, in order.
    for i in 0..replicas {
        match pods.get(&i) {
            None => {
                // Without ControllerRevisions the older template is not kept: a pod
                // (re)created below the partition gets the update revision too.
                ensure_claims(ctx, &sts, ns, i).await?;
                pods::create(ctx, ns, &pod_for(&sts, &spec.template, i, &update_revision)).await?;
                acted = true;
                if ordered {
                    break;
                }
            }
            Some((k, p)) if p.phase.terminal() => {
                pods::delete(ctx, k).await?;
                acted = true;
                if ordered {
                    break;
                }
            }
            Some((_, p)) if ordered && !healthy(p) => {
                acted = true;
                break;
            }
            Some(_) => {}
        }
    }
    // Remove pods beyond the replica count, highest ordinal first.
    if !acted {
        let condemned: Vec<_> = pods.range(replicas..).rev().map(|(_, (k, p))| ((*k).clone(), p.terminating)).collect();
        for (k, terminating) in condemned {
            if !terminating {
                pods::delete(ctx, &k).await?;
            }
            acted = true;
            if ordered {
                break;
            }
        }
    }
    // Roll pods of an older revision, highest ordinal first, one at a time.
    if !acted && rolling {
        let all_healthy = (0..replicas).all(|i| pods.get(&i).is_some_and(|(_, p)| healthy(p)));
        if all_healthy
            && let Some((_, (k, _))) =
                pods.range(partition.max(0)..replicas).rev().find(|(_, (_, p))| revision_of(p).as_deref() != Some(update_revision.as_str()))
        {
            pods::delete(ctx, k).await?;
        }
    }
    if sts.status.as_ref() != Some(&status) {
        let body = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": sts.metadata.resource_version},
            "status": status,
        });
        ctx.api.replace(&STATEFULSETS, ns, name, &body, true).await?;
    }
    Ok(requeue)
}
