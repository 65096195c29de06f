//! The pull agent's record of what the edge changes while its control plane is away (ADR 0032).
//!
//! The agent probes the control plane (a read of its own Cluster) every `probe_interval`; once
//! the probes have failed for `offline_after`, the member is offline. While offline, every
//! `record_interval`, each object an `AppliedWork` names is read from the member and compared
//! with what drift correction would put back — Karmada's Retain of the Work's manifest against
//! the member's object ([`flotilla_api::edge::drift`]). Each object the edge changed or deleted
//! gets an `edge.flotilla.io/v1alpha1` `EdgeChange` in `flotilla-edge`: the fields with the
//! manifest's and the member's values, the member-side field manager that made the latest change
//! (from `managedFields`), and when it was first and last seen. Nothing is reverted meanwhile
//! (drift correction needs the control plane to confirm the Work first) and nothing is removed.
//!
//! Records are never deleted here: a change the edge undid again stays recorded, and what
//! becomes of each record once the control plane is back is decided there by the sync policy.
//! Everything it reads is in the member, so an agent restarted while offline records from the
//! AppliedWorks its predecessor left. Agent only, and outside the controller set: it runs from
//! the agent's start, before the agent has reached the control plane at all.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::edge::{FieldChange, FieldPath, Segment, drift};
use flotilla_api::federation::flotilla::edge::{AppliedWork, CLUSTER_LABEL, EDGE_NAMESPACE, EdgeChange, EdgeChangeSpec, ObjectReference, change_kind};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::{WORK_PERMANENT_ID_LABEL, Work};
use flotilla_member::access::Clients;
use flotilla_member::apply::{self, ObjectRef};
use flotilla_runtime::CancellationToken;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::edge_mirror::FIELD_MANAGER;
use crate::execution::desired_object;

pub const NAME: &str = "edgeRecorder";

/// Settings of the recorder.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often the control plane is probed.
    pub probe_interval: Duration,
    /// How long the probes must fail before the member counts as offline.
    pub offline_after: Duration,
    /// How often, while offline, the member's objects are compared with their Works.
    pub record_interval: Duration,
    pub member_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            probe_interval: Duration::from_secs(5),
            offline_after: Duration::from_secs(20),
            record_interval: Duration::from_secs(5),
            member_timeout: Duration::from_secs(30),
        }
    }
}

/// The member-side errors are the mirror's.
pub use crate::edge_mirror::Error;

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The Work an AppliedWork was made from, as far as shaping its objects needs it.
fn work_of(a: &AppliedWork) -> Work {
    let mut labels = serde_json::Map::new();
    if let Some(id) = &a.spec.work_permanent_id {
        labels.insert(WORK_PERMANENT_ID_LABEL.into(), json!(id));
    }
    serde_json::from_value(json!({
        "apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
        "metadata": {"name": a.spec.work_name, "namespace": a.spec.work_namespace, "uid": a.spec.work_uid, "labels": labels},
        "spec": {},
    }))
    .unwrap_or_else(|_| Work::new(&a.spec.work_name, Default::default()))
}

/// Whether a `managedFields` entry's `fieldsV1` set holds `path` (a list element is matched by
/// any of its keys: `k:{...}`, `i:N` or `v:...`).
fn owns(fields: &Value, path: &[Segment]) -> bool {
    let Some((first, rest)) = path.split_first() else { return true };
    let Some(map) = fields.as_object() else { return false };
    match first {
        Segment::Key(k) => map.get(&format!("f:{k}")).is_some_and(|v| owns(v, rest)),
        Segment::Index(_) => map.iter().any(|(key, v)| ["k:", "i:", "v:"].iter().any(|p| key.starts_with(p)) && owns(v, rest)),
    }
}

/// Who made the edge's change: of `observed`'s `managedFields` entries that own one of `paths`,
/// the latest — leaving out the agent's own record keeping and status writes (the member's
/// controllers reporting). With no owner found, the latest such entry at all. While offline the
/// agent writes nothing else, so this is whoever changed the object at the edge (`kubectl`, a
/// controller, an operator).
pub fn latest_manager(observed: &Value, paths: &[FieldPath]) -> Option<String> {
    let entries: Vec<&Value> = observed
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .filter(|e| e["manager"].as_str().is_some_and(|m| m != FIELD_MANAGER) && e["subresource"] != "status")
        .collect();
    let latest = |candidates: Vec<&Value>| {
        candidates
            .into_iter()
            .max_by(|a, b| a["time"].as_str().unwrap_or("").cmp(b["time"].as_str().unwrap_or("")))
            .and_then(|e| e["manager"].as_str())
            .map(String::from)
    };
    let owners: Vec<&Value> = entries.iter().copied().filter(|e| paths.iter().any(|p| owns(&e["fieldsV1"], &p.0))).collect();
    if owners.is_empty() { latest(entries) } else { latest(owners) }
}

/// What the edge did to one object: `None` when it holds what its manifest wants.
pub fn change_of(manifest: &Value, desired: &Value, observed: Option<&Value>) -> Option<(&'static str, Vec<FieldChange>)> {
    let Some(observed) = observed else { return Some((change_kind::DELETED, Vec::new())) };
    let next = flotilla_api::interpreter::retain(desired, observed).unwrap_or_else(|_| manifest.clone());
    let fields = drift(&next, observed);
    (!fields.is_empty()).then_some((change_kind::MODIFIED, fields))
}

/// The record of `change` to the object of `applied`'s manifest `ordinal`, keeping `previous`'s
/// first sighting.
pub fn record_of(
    cluster: &str,
    applied: &AppliedWork,
    ordinal: usize,
    observed: Option<&Value>,
    change: (&str, &[FieldChange]),
    previous: Option<&EdgeChangeSpec>,
    at: &str,
) -> EdgeChangeSpec {
    let manifest = applied.spec.manifests.get(ordinal).unwrap_or(&Value::Null);
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    let uid = observed
        .map(|o| text(o, "/metadata/uid"))
        .filter(|u| !u.is_empty())
        .or_else(|| applied.status.as_ref().and_then(|s| s.manifests.iter().find(|m| m.ordinal as usize == ordinal)).map(|m| m.uid.clone()));
    let mut spec = EdgeChangeSpec {
        cluster: cluster.to_string(),
        object: ObjectReference {
            api_version: text(manifest, "/apiVersion"),
            kind: text(manifest, "/kind"),
            namespace: manifest.pointer("/metadata/namespace").and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from),
            name: text(manifest, "/metadata/name"),
            uid: uid.unwrap_or_default(),
        },
        work_name: Some(applied.spec.work_name.clone()),
        change: change.0.to_string(),
        fields: change.1.iter().map(Into::into).collect(),
        manager: observed.and_then(|o| latest_manager(o, &change.1.iter().map(|c| c.path.clone()).collect::<Vec<_>>())),
        first_seen: at.to_string(),
        last_seen: at.to_string(),
    };
    if let Some(p) = previous {
        spec.first_seen = p.first_seen.clone();
        // Seen again unchanged: the last sighting of this content stays.
        if p.change == spec.change && p.fields == spec.fields {
            spec.last_seen = p.last_seen.clone();
        }
        if spec.manager.is_none() {
            spec.manager = p.manager.clone();
        }
    }
    spec
}

/// The record's name: the AppliedWork's and the manifest's ordinal.
pub fn record_name(applied: &str, ordinal: usize) -> String {
    format!("{applied}-{ordinal}")
}

/// One pass while offline: every object of every AppliedWork compared; records written.
async fn record(cluster: &Cluster, name: &str, members: &Clients, cp: &Client, config: &Config) -> Result<usize, Error> {
    let conn = members.connect(cp, cluster, config.member_timeout).await.map_err(|source| Error::Member { cluster: name.to_string(), source })?;
    let api_err = |step: String| {
        let cluster = name.to_string();
        move |source| Error::MemberApi { cluster, step, source }
    };
    let applied: Api<AppliedWork> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    let changes: Api<EdgeChange> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    let existing: BTreeMap<String, EdgeChange> =
        changes.list(&Default::default()).await.map_err(api_err("listing EdgeChanges".into()))?.items.into_iter().map(|c| (c.name_any(), c)).collect();
    let at = now();
    let mut written = 0;
    for a in applied.list(&Default::default()).await.map_err(api_err("listing AppliedWorks".into()))?.items {
        if a.labels().get(CLUSTER_LABEL).is_some_and(|c| c != name) {
            continue;
        }
        let work = work_of(&a);
        for (i, manifest) in a.spec.manifests.iter().enumerate() {
            let Ok(r) = ObjectRef::of(manifest) else { continue };
            let observed = match apply::get(conn.member(), &r).await {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(controller = NAME, cluster = name, object = %r.display(), error = %e, "cannot read a member object; next time");
                    continue;
                }
            };
            // The record holds a Secret's values as digests: so is the member's Secret compared.
            let observed = observed.as_ref().map(flotilla_api::edge::without_secret_values);
            let desired = desired_object(&work, manifest);
            let Some((kind, fields)) = change_of(manifest, &desired, observed.as_ref()) else { continue };
            let record_name = record_name(&a.name_any(), i);
            let previous = existing.get(&record_name);
            let spec = record_of(name, &a, i, observed.as_ref(), (kind, &fields), previous.map(|p| &p.spec), &at);
            if previous.is_some_and(|p| p.spec == spec) {
                continue;
            }
            let mut object = EdgeChange::new(&record_name, spec);
            object.metadata.namespace = Some(EDGE_NAMESPACE.into());
            object.metadata.labels = Some([(CLUSTER_LABEL.to_string(), name.to_string())].into());
            let result = match previous {
                Some(p) => {
                    object.metadata.resource_version = p.resource_version();
                    changes.replace(&record_name, &PostParams::default(), &object).await
                }
                None => changes.create(&PostParams::default(), &object).await,
            };
            result.map_err(api_err(format!("writing EdgeChange {record_name}")))?;
            tracing::info!(controller = NAME, cluster = name, object = %r.display(), change = kind, fields = fields.len(), "edge change recorded");
            written += 1;
        }
    }
    Ok(written)
}

/// What a probe of the control plane found.
enum Probe {
    /// It answered (with the agent's Cluster, when it has one yet).
    Answered(Option<Cluster>),
    Unreachable,
}

/// A read of the agent's own Cluster within `timeout`: any answer of the API server, a refusal
/// included, means it is reachable.
async fn probe(cp: &Client, name: &str, timeout: Duration) -> Probe {
    match tokio::time::timeout(timeout, Api::<Cluster>::all(cp.clone()).get(name)).await {
        Ok(Ok(c)) => Probe::Answered(Some(c)),
        Ok(Err(kube::Error::Api(_))) => Probe::Answered(None),
        _ => Probe::Unreachable,
    }
}

/// The agent's part, from its start (before it has registered, so that an agent restarted while
/// offline records too) until `shutdown`: probe the control plane, and record the edge's
/// changes while it is away.
pub async fn run(client: Client, shutdown: CancellationToken, config: Config, members: Arc<Clients>) {
    let Some(name) = members.own_cluster().map(str::to_string) else {
        tracing::warn!(controller = NAME, "the edge recorder runs in a pull agent only");
        return;
    };
    // The Cluster as last read: enough to reach the member through the agent's own access.
    let mut cluster = Cluster::new(&name, Default::default());
    let mut last_answer = Instant::now();
    let mut offline = false;
    let mut next_record = Instant::now();
    loop {
        match probe(&client, &name, config.probe_interval.max(Duration::from_secs(1))).await {
            Probe::Answered(c) => {
                if offline {
                    tracing::info!(controller = NAME, cluster = %name, "the control plane answers again: edge changes are no longer recorded");
                }
                if let Some(c) = c {
                    cluster = c;
                }
                last_answer = Instant::now();
                offline = false;
            }
            Probe::Unreachable if !offline && last_answer.elapsed() >= config.offline_after => {
                tracing::warn!(controller = NAME, cluster = %name, after = ?config.offline_after, "the control plane is unreachable: the member runs on its own, and changes made in it are recorded");
                offline = true;
                next_record = Instant::now();
            }
            Probe::Unreachable => {}
        }
        if offline && Instant::now() >= next_record {
            if let Err(e) = record(&cluster, &name, &members, &client, &config).await {
                tracing::warn!(controller = NAME, cluster = %name, error = %e, "recording edge changes failed; trying again");
            }
            next_record = Instant::now() + config.record_interval;
        }
        tokio::select! {
            () = tokio::time::sleep(config.probe_interval.min(config.record_interval)) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::flotilla::edge::AppliedWorkSpec;

    fn manifest() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}})
    }

    fn applied() -> AppliedWork {
        let mut a = AppliedWork::new(
            "web-1",
            AppliedWorkSpec {
                work_namespace: "karmada-es-edge".into(),
                work_name: "web-1".into(),
                work_uid: "w".into(),
                work_permanent_id: Some("p1".into()),
                work_generation: 1,
                manifests: vec![manifest()],
            },
        );
        a.metadata.namespace = Some(EDGE_NAMESPACE.into());
        a
    }

    #[test]
    fn a_scaled_and_relabelled_object_is_recorded_field_by_field_with_who_did_it() {
        let a = applied();
        let desired = desired_object(&work_of(&a), &a.spec.manifests[0]);
        assert_eq!(desired["metadata"]["labels"][WORK_PERMANENT_ID_LABEL], "p1");
        assert_eq!(desired["metadata"]["annotations"]["work.karmada.io/name"], "web-1");
        // The member as the agent left it: no change.
        let mut observed = desired.clone();
        observed["metadata"]["uid"] = json!("m-uid");
        observed["metadata"]["resourceVersion"] = json!("7");
        observed["status"] = json!({"replicas": 2});
        assert!(change_of(&a.spec.manifests[0], &desired, Some(&observed)).is_none());
        // Scaled and re-imaged at the edge with kubectl, after the agent's own write.
        observed["spec"]["replicas"] = json!(5);
        observed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        observed["metadata"]["managedFields"] = json!([
            {"manager": FIELD_MANAGER, "operation": "Apply", "time": "2026-12-05T10:00:00Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl-scale", "operation": "Update", "subresource": "scale", "time": "2026-12-05T10:04:00Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl-set", "operation": "Update", "time": "2026-12-05T10:05:00Z",
                "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}}}}}}}},
            // Later, but owning none of the changed fields (the revision annotation).
            {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-12-05T10:06:00Z",
                "fieldsV1": {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-12-05T10:07:00Z", "fieldsV1": {"f:status": {}}},
        ]);
        let (kind, fields) = change_of(&a.spec.manifests[0], &desired, Some(&observed)).unwrap();
        assert_eq!(kind, change_kind::MODIFIED);
        let paths: Vec<String> = fields.iter().map(|f| f.path.to_string()).collect();
        assert_eq!(paths, ["spec.replicas", "spec.template.spec.containers[0].image"]);
        let spec = record_of("edge", &a, 0, Some(&observed), (kind, &fields), None, "t1");
        assert_eq!(spec.manager.as_deref(), Some("kubectl-set"), "the latest owner of a changed field");
        let replicas_only = [FieldPath::parse("spec.replicas").unwrap()];
        assert_eq!(latest_manager(&observed, &replicas_only).as_deref(), Some("kubectl-scale"));
        assert_eq!(
            latest_manager(&observed, &[FieldPath::parse("data.x").unwrap()]).as_deref(),
            Some("kube-controller-manager"),
            "no owner: the latest writer"
        );
        assert_eq!((spec.object.kind.as_str(), spec.object.name.as_str(), spec.object.uid.as_str()), ("Deployment", "web", "m-uid"));
        assert_eq!(spec.fields[0].old, Some(json!(2)));
        assert_eq!(spec.fields[0].new, Some(json!(5)));
        // Seen again later, unchanged: first and last sighting kept.
        let again = record_of("edge", &a, 0, Some(&observed), (kind, &fields), Some(&spec), "t2");
        assert_eq!(again, spec);
        // Changed further: the last sighting moves, the first stays.
        observed["spec"]["replicas"] = json!(6);
        let (kind, fields) = change_of(&a.spec.manifests[0], &desired, Some(&observed)).unwrap();
        let moved = record_of("edge", &a, 0, Some(&observed), (kind, &fields), Some(&spec), "t3");
        assert_eq!((moved.first_seen.as_str(), moved.last_seen.as_str()), ("t1", "t3"));
    }

    #[test]
    fn a_deleted_object_is_recorded_with_the_uid_it_had() {
        let mut a = applied();
        a.status = Some(flotilla_api::federation::flotilla::edge::AppliedWorkStatus {
            acknowledged_at: Some("t0".into()),
            manifests: vec![flotilla_api::federation::flotilla::edge::AppliedManifest { ordinal: 0, uid: "gone-uid".into(), ..Default::default() }],
        });
        let desired = desired_object(&work_of(&a), &a.spec.manifests[0]);
        let (kind, fields) = change_of(&a.spec.manifests[0], &desired, None).unwrap();
        assert_eq!(kind, change_kind::DELETED);
        let spec = record_of("edge", &a, 0, None, (kind, &fields), None, "t1");
        assert_eq!(spec.object.uid, "gone-uid");
        assert!(spec.fields.is_empty() && spec.manager.is_none());
        assert_eq!(record_name("web-1", 0), "web-1-0");
    }
}
