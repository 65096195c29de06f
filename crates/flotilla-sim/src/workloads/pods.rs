//! What the workload controllers share about the pods they own: owner references, template
//! hashes, pods made from templates, availability and the order pods are scaled down in.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde_json::{Value, json};

use crate::cache::{ObjKey, PodInfo};
use crate::kinds::{PODS, Res};
use crate::simulator::{Ctx, SimError};

/// An owner reference from a controller to what it made.
pub fn owner_ref(res: &Res, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: res.api_version(),
        kind: res.kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

pub fn now() -> Time {
    Time(jiff::Timestamp::now())
}

pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Zero as absent, as the real controllers' `omitempty` counters are.
pub fn nonzero(n: i32) -> Option<i32> {
    (n != 0).then_some(n)
}

/// A hash of a pod template as the controllers name things with it: FNV-1a of the template
/// (and the collision count), its decimal digits spelled in Kubernetes' safe alphabet
/// (`7bfb4bc78d`).
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string().bytes().map(|d| ALPHABET[(d as usize) % ALPHABET.len()] as char).collect()
}

/// Two templates are the same apart from the hash label a controller adds.
pub fn same_template(a: &PodTemplateSpec, b: &PodTemplateSpec, hash_label: &str) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(m) = t.metadata.as_mut()
            && let Some(l) = m.labels.as_mut()
        {
            l.remove(hash_label);
            if l.is_empty() {
                m.labels = None;
            }
        }
        t
    };
    strip(a) == strip(b)
}

/// A pod to create from a template, with extra labels and its controller's reference.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    name: Option<&str>,
    generate_name: Option<&str>,
    extra_labels: &[(&str, &str)],
    owner: OwnerReference,
) -> Value {
    let tm = template.metadata.clone().unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    for (k, v) in extra_labels {
        labels.insert((*k).to_string(), (*v).to_string());
    }
    let meta = ObjectMeta {
        name: name.map(String::from),
        generate_name: generate_name.map(String::from),
        labels: Some(labels),
        annotations: tm.annotations,
        finalizers: tm.finalizers,
        owner_references: Some(vec![owner]),
        ..Default::default()
    };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.spec})
}

/// Create a pod in `ns`.
pub async fn create(ctx: &Ctx<'_>, ns: &str, pod: &Value) -> Result<(), SimError> {
    match ctx.api.create(&PODS, ns, pod).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Delete a pod (already gone is fine).
pub async fn delete(ctx: &Ctx<'_>, key: &ObjKey) -> Result<(), SimError> {
    match ctx.api.delete(&PODS, &key.0, &key.1, &json!({})).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Ready for at least `min_ready_seconds`.
pub fn available(p: &PodInfo, min_ready_seconds: i32, now_ms: i64) -> bool {
    p.ready && (min_ready_seconds <= 0 || p.ready_since_ms.is_some_and(|t| now_ms - t >= i64::from(min_ready_seconds) * 1000))
}

/// When a ready pod that is not yet available becomes so (for requeueing).
pub fn available_in(p: &PodInfo, min_ready_seconds: i32, now_ms: i64) -> Option<std::time::Duration> {
    if !p.ready || min_ready_seconds <= 0 {
        return None;
    }
    let at = p.ready_since_ms? + i64::from(min_ready_seconds) * 1000;
    (at > now_ms).then(|| std::time::Duration::from_millis((at - now_ms) as u64 + 10))
}

/// The order pods are deleted in when scaling down: unscheduled before scheduled, pending
/// before running, not ready before ready, newest first (the ReplicaSet controller's ranks,
/// simplified).
pub fn scale_down_rank(p: &PodInfo) -> (bool, bool, bool, std::cmp::Reverse<i64>) {
    (p.node.is_some(), p.phase == crate::cache::Phase::Running, p.ready, std::cmp::Reverse(p.created_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_safe() {
        let t = PodTemplateSpec::default();
        let h = template_hash(&t, None);
        assert_eq!(h, template_hash(&t, None));
        assert_ne!(h, template_hash(&t, Some(1)));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
