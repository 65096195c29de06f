//! The garbage collector: when an owner is gone its dependents are deleted (or, when another
//! owner remains, the reference to it dropped); an owner deleted with `propagationPolicy:
//! Foreground` waits (`foregroundDeletion` finalizer) until its dependents are gone, and one
//! deleted with `Orphan` has its dependents' references removed first (`orphan` finalizer).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::kinds::{PODS, Res};
use crate::simulator::{Ctx, Reconciled, SimError};

pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";

#[derive(Deserialize)]
struct MetaOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// What became of an owner.
#[derive(Debug, PartialEq, Eq)]
enum OwnerState {
    Alive,
    Gone,
    Foreground(String),
    Orphan(String),
}

async fn meta_at(ctx: &Ctx<'_>, key: &str) -> Result<Option<(ObjectMeta, i64)>, SimError> {
    if key.is_empty() {
        return Ok(None);
    }
    let Some(kv) = ctx.store.get(key.as_bytes()).await? else { return Ok(None) };
    let m: MetaOnly = serde_json::from_slice(&kv.value).map_err(|source| SimError::Decode { what: key.to_string(), source })?;
    Ok(Some((m.metadata, kv.mod_revision)))
}

async fn owner_state(ctx: &Ctx<'_>, uid: &str, key: &str) -> Result<OwnerState, SimError> {
    let Some((meta, rev)) = meta_at(ctx, key).await? else { return Ok(OwnerState::Gone) };
    if meta.uid.as_deref() != Some(uid) {
        return Ok(OwnerState::Gone);
    }
    if meta.deletion_timestamp.is_none() {
        return Ok(OwnerState::Alive);
    }
    let finalizers = meta.finalizers.unwrap_or_default();
    Ok(if finalizers.iter().any(|f| f == ORPHAN) {
        OwnerState::Orphan(rev.to_string())
    } else if finalizers.iter().any(|f| f == FOREGROUND) {
        OwnerState::Foreground(rev.to_string())
    } else {
        OwnerState::Alive
    })
}

/// Whether the owner a reference names still exists.
async fn reference_alive(ctx: &Ctx<'_>, ns: &str, api_version: &str, kind: &str, name: &str, uid: &str) -> Result<bool, SimError> {
    let Some(res) = Res::of_owner(api_version, kind) else { return Ok(true) };
    Ok(meta_at(ctx, &res.key(ns, name)).await?.is_some_and(|(m, _)| m.uid.as_deref() == Some(uid)))
}

pub async fn reconcile(uid: &str, owner_key: &str, ctx: &mut Ctx<'_>) -> Reconciled {
    let state = owner_state(ctx, uid, owner_key).await?;
    if state == OwnerState::Alive {
        return Ok(None);
    }
    let mut dependents: Vec<String> = ctx.cache.pods.iter().filter(|(_, p)| p.owned_by(uid)).map(|(k, _)| PODS.key(&k.0, &k.1)).collect();
    dependents.extend(ctx.cache.dependents.get(uid).into_iter().flatten().map(|k| k.to_string()));
    let mut remaining = 0;
    for dep in &dependents {
        let Some((meta, rev)) = meta_at(ctx, dep).await? else { continue };
        let ns = meta.namespace.clone().unwrap_or_default();
        let refs = meta.owner_references.clone().unwrap_or_default();
        if !refs.iter().any(|r| r.uid == uid) {
            continue;
        }
        let others: Vec<_> = refs.iter().filter(|r| r.uid != uid).cloned().collect();
        let mut other_alive = false;
        for r in &others {
            if reference_alive(ctx, &ns, &r.api_version, &r.kind, &r.name, &r.uid).await? {
                other_alive = true;
            }
        }
        let result = match &state {
            OwnerState::Orphan(_) => {
                let refs = if others.is_empty() { Value::Null } else { json!(others) };
                ctx.api.merge_patch_key(dep, &json!({"metadata": {"ownerReferences": refs, "resourceVersion": rev.to_string()}})).await
            }
            _ if other_alive => ctx.api.merge_patch_key(dep, &json!({"metadata": {"ownerReferences": others, "resourceVersion": rev.to_string()}})).await,
            OwnerState::Foreground(_) => {
                remaining += 1;
                if meta.deletion_timestamp.is_some() {
                    continue;
                }
                ctx.api.delete_key(dep, &json!({"propagationPolicy": "Foreground"})).await
            }
            _ => ctx.api.delete_key(dep, &json!({"propagationPolicy": "Background"})).await,
        };
        match result {
            Ok(_) => {}
            Err(e) if e.is_not_found() || e.is_conflict() => {}
            Err(e) => return Err(e.into()),
        }
    }
    match state {
        OwnerState::Foreground(_) if remaining > 0 => Ok(Some(ctx.config.timings.retry)),
        OwnerState::Foreground(rev) => drop_finalizer(ctx, owner_key, FOREGROUND, &rev).await,
        OwnerState::Orphan(rev) => drop_finalizer(ctx, owner_key, ORPHAN, &rev).await,
        _ => Ok(None),
    }
}

async fn drop_finalizer(ctx: &Ctx<'_>, key: &str, finalizer: &str, rev: &str) -> Reconciled {
    let Some((meta, _)) = meta_at(ctx, key).await? else { return Ok(None) };
    let left: Vec<String> = meta.finalizers.unwrap_or_default().into_iter().filter(|f| f != finalizer).collect();
    let finalizers = if left.is_empty() { Value::Null } else { json!(left) };
    match ctx.api.merge_patch_key(key, &json!({"metadata": {"finalizers": finalizers, "resourceVersion": rev}})).await {
        Ok(_) => Ok(None),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}
