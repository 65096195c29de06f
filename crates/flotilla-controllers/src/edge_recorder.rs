//! The pull agent's record of what the edge changes while its control plane is away, and its
//! hand-over once it is back (ADR 0032).
//!
//! The agent probes the control plane (a read of its own Cluster) every `probe_interval`, each
//! probe given up to `offline_after` to be answered (a busy control plane is not an absent one);
//! once the probes have failed for `offline_after`, the member is offline. While offline, every
//! `record_interval`, each object an `AppliedWork` names is read from the member and compared
//! with what drift correction would put back — Karmada's Retain of the Work's manifest against
//! the member's object ([`flotilla_api::edge::drift`]). Each object the edge changed or deleted
//! gets an `edge.flotilla.io/v1alpha1` `EdgeChange` in `flotilla-edge`: the fields with the
//! manifest's and the member's values, the member-side field manager that made the latest change
//! (from `managedFields`), and when it was first and last seen; an object of a Work's kind made
//! in a Work's namespace from no Work after the control plane last acknowledged anything there
//! is recorded as born at the edge. A change the edge undoes stays recorded, emptied.
//!
//! Holding: from the agent's start and while offline, every object is held
//! ([`Clients::holds`]: the agent's execution and work-status controllers write nothing to the
//! member). Once the control plane answers, the agent catches up — records once more, against
//! the control plane's Works as they are now (a field the control plane now asks for anyway is
//! no edge change), and copies every record into its execution space — and from then on holds
//! only the objects whose records are not decided. A record the control plane has decided
//! (`Decided`) is removed from the member, which releases its object (drift correction then
//! puts back what was reverted); an open conflict stays held, the decision so far copied into
//! the member's record; an object born at the edge stays listed until promoted or gone. A
//! catch-up that keeps failing lets go of the unrecorded objects after `catch_up_limit`.
//!
//! Everything it reads is in the member, so an agent restarted while offline records from the
//! AppliedWorks and records its predecessor left. Agent only, and outside the controller set: it
//! runs from the agent's start, before the agent has reached the control plane at all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::edge::{FieldChange, FieldPath, Segment, drift};
use flotilla_api::federation::flotilla::edge::{
    AppliedWork, CLUSTER_LABEL, EDGE_NAMESPACE, EdgeChange, EdgeChangeSpec, ObjectReference, RESOLVE_ANNOTATION, change_kind, phase,
};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::execution_space;
use flotilla_api::federation::karmada::work::{WORK_PERMANENT_ID_LABEL, Work};
use flotilla_member::Connection;
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
    /// How long a failing catch-up (the records cannot be handed over) may hold every object
    /// before the agent lets the objects without a record go.
    pub catch_up_limit: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            probe_interval: Duration::from_secs(5),
            offline_after: Duration::from_secs(20),
            record_interval: Duration::from_secs(5),
            member_timeout: Duration::from_secs(30),
            catch_up_limit: Duration::from_secs(120),
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

/// A member list that 404s: the member does not serve the kind yet (the edge mirror installs the
/// CRDs once the agent first reaches its control plane) — nothing recorded yet.
fn absent(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The fields of `fields` the control plane does not want either: `current`'s Work (its Work as
/// the control plane holds it now, when known) may already ask for the member's value — a
/// control-plane change that reached the member, not an edge change.
fn beyond_current(fields: Vec<FieldChange>, current: Option<(&Work, &Value)>, observed: Option<&Value>) -> Vec<FieldChange> {
    let (Some((work, manifest)), Some(observed)) = (current, observed) else { return fields };
    let desired = desired_object(work, manifest);
    let Some((_, now)) = change_of(manifest, &desired, Some(observed)) else { return Vec::new() };
    fields.into_iter().filter(|f| now.iter().any(|n| n.path == f.path)).collect()
}

/// The manifest of `work` making the object `r`.
fn manifest_for<'a>(work: &'a Work, r: &ObjectRef) -> Option<&'a Value> {
    crate::execution::manifests(work)
        .iter()
        .find(|m| ObjectRef::of(m).is_ok_and(|m| m.gvk.group == r.gvk.group && m.gvk.kind == r.gvk.kind && m.namespace == r.namespace && m.name == r.name))
}

/// One pass: every object of every AppliedWork compared; records written. While offline,
/// against the last acknowledged manifests; back online (`current`: the control plane's Works
/// by name), a field the control plane now asks for anyway is no edge change. A recorded
/// object found as its Work wants it again keeps its record, emptied (the edge undid its
/// change): the control plane decides that too, and says so.
async fn record(
    cluster: &Cluster,
    name: &str,
    members: &Clients,
    cp: &Client,
    config: &Config,
    current: Option<&BTreeMap<String, Work>>,
) -> Result<usize, Error> {
    let conn = members.connect(cp, cluster, config.member_timeout).await.map_err(|source| Error::Member { cluster: name.to_string(), source })?;
    let api_err = |step: String| {
        let cluster = name.to_string();
        move |source| Error::MemberApi { cluster, step, source }
    };
    let applied: Api<AppliedWork> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    let changes: Api<EdgeChange> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    let existing: BTreeMap<String, EdgeChange> = match changes.list(&Default::default()).await {
        Ok(l) => l.items.into_iter().map(|c| (c.name_any(), c)).collect(),
        Err(e) if absent(&e) => return Ok(0),
        Err(e) => return Err(api_err("listing EdgeChanges".into())(e)),
    };
    let at = now();
    let mut written = 0;
    let applied_works = match applied.list(&Default::default()).await {
        Ok(l) => l.items,
        Err(e) if absent(&e) => return Ok(0),
        Err(e) => return Err(api_err("listing AppliedWorks".into())(e)),
    };
    for a in &applied_works {
        if a.labels().get(CLUSTER_LABEL).is_some_and(|c| c != name) {
            continue;
        }
        let work = work_of(a);
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
            let record_name = record_name(&a.name_any(), i);
            let previous = existing.get(&record_name);
            let now_wanted = current.and_then(|c| c.get(&a.spec.work_name)).and_then(|w| manifest_for(w, &r).map(|m| (w, m)));
            let found = change_of(manifest, &desired, observed.as_ref()).and_then(|(kind, fields)| {
                let fields = if kind == change_kind::MODIFIED { beyond_current(fields, now_wanted, observed.as_ref()) } else { fields };
                (kind != change_kind::MODIFIED || !fields.is_empty()).then_some((kind, fields))
            });
            let (kind, fields) = match (found, previous) {
                (Some(f), _) => f,
                // Undone at the edge since it was recorded: recorded as undone.
                (None, Some(p)) if p.spec.change == change_kind::MODIFIED && !p.spec.fields.is_empty() => (change_kind::MODIFIED, Vec::new()),
                (None, _) => continue,
            };
            let spec = record_of(name, a, i, observed.as_ref(), (kind, &fields), previous.map(|p| &p.spec), &at);
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
    if current.is_none() {
        written += record_born(name, &conn, &applied_works, &existing, &at).await?;
    }
    Ok(written)
}

/// Where objects born at the edge are looked for: per namespace of the AppliedWorks' namespaced
/// manifests, each kind found there and the latest acknowledgement of the AppliedWorks there.
pub fn born_scope(applied: &[AppliedWork]) -> BTreeMap<(String, String, String), String> {
    let mut scope: BTreeMap<(String, String, String), String> = BTreeMap::new();
    for a in applied {
        let acked = a.status.as_ref().and_then(|s| s.acknowledged_at.clone()).unwrap_or_default();
        for m in &a.spec.manifests {
            let (Some(ns), Some(api_version), Some(kind)) =
                (m.pointer("/metadata/namespace").and_then(Value::as_str), m["apiVersion"].as_str(), m["kind"].as_str())
            else {
                continue;
            };
            let latest = scope.entry((ns.to_string(), api_version.to_string(), kind.to_string())).or_default();
            if acked > *latest {
                *latest = acked.clone();
            }
        }
    }
    scope
}

/// Whether `obj` was born at the edge: made by no Work (no permanent-id label, not owned by
/// another object) after `since` (the latest acknowledgement there: the control plane last
/// knew the namespace then).
pub fn born_at_edge(obj: &Value, since: &str) -> bool {
    let made_by_work = obj.pointer("/metadata/labels").and_then(|l| l.get(WORK_PERMANENT_ID_LABEL)).is_some();
    let owned = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|o| !o.is_empty());
    let created = obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or_default();
    !made_by_work && !owned && !since.is_empty() && created > since
}

/// The record name of an object born at the edge.
pub fn born_record_name(kind: &str, namespace: &str, name: &str) -> String {
    let full = format!("born-{}-{namespace}-{name}", kind.to_lowercase());
    if full.len() <= 253 { full } else { full[..253].trim_end_matches(['-', '.']).to_string() }
}

/// Records of objects created at the edge from no Work while offline (kinds and namespaces the
/// control plane's Works use).
async fn record_born(name: &str, conn: &Connection, applied: &[AppliedWork], existing: &BTreeMap<String, EdgeChange>, at: &str) -> Result<usize, Error> {
    let changes: Api<EdgeChange> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    let mut written = 0;
    for ((namespace, api_version, kind), since) in born_scope(applied) {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "-", "namespace": namespace}});
        let Ok(r) = ObjectRef::of(&probe) else { continue };
        let objects = match apply::list(conn.member(), &r).await {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(controller = NAME, cluster = name, kind = %kind, namespace = %namespace, error = %e, "cannot list the member's objects; next time");
                continue;
            }
        };
        for obj in objects.iter().filter(|o| born_at_edge(o, &since)) {
            let object_name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            let record_name = born_record_name(&kind, &namespace, object_name);
            if existing.contains_key(&record_name) {
                continue;
            }
            let spec = EdgeChangeSpec {
                cluster: name.to_string(),
                object: ObjectReference {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    namespace: Some(namespace.clone()),
                    name: object_name.to_string(),
                    uid: obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string(),
                },
                work_name: None,
                change: change_kind::CREATED.into(),
                fields: Vec::new(),
                manager: latest_manager(obj, &[]),
                first_seen: at.to_string(),
                last_seen: at.to_string(),
            };
            let mut record = EdgeChange::new(&record_name, spec);
            record.metadata.namespace = Some(EDGE_NAMESPACE.into());
            record.metadata.labels = Some([(CLUSTER_LABEL.to_string(), name.to_string())].into());
            match changes.create(&PostParams::default(), &record).await {
                Ok(_) => {
                    tracing::info!(controller = NAME, cluster = name, kind = %kind, namespace = %namespace, object = object_name, "object born at the edge recorded");
                    written += 1;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(source) => return Err(Error::MemberApi { cluster: name.to_string(), step: format!("writing EdgeChange {record_name}"), source }),
            }
        }
    }
    Ok(written)
}

/// The object of a record as the agent's holds name it.
pub fn held_key(spec: &EdgeChangeSpec) -> String {
    let group = spec.object.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    flotilla_member::holds::key_of(group, &spec.object.kind, spec.object.namespace.as_deref(), &spec.object.name)
}

/// The objects `records` hold: every recorded object but one born at the edge (nothing of the
/// control plane's writes it).
pub fn held_keys<'a>(records: impl IntoIterator<Item = &'a EdgeChange>) -> BTreeSet<String> {
    records.into_iter().filter(|r| r.spec.change != change_kind::CREATED).map(|r| held_key(&r.spec)).collect()
}

/// The member's records of this cluster.
async fn member_records(name: &str, conn: &Connection) -> Result<Vec<EdgeChange>, Error> {
    let changes: Api<EdgeChange> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    match changes.list(&Default::default()).await {
        Ok(l) => Ok(l.items.into_iter().filter(|c| c.labels().get(CLUSTER_LABEL).is_none_or(|c| c == name)).collect()),
        Err(e) if absent(&e) => Ok(Vec::new()),
        Err(source) => Err(Error::MemberApi { cluster: name.to_string(), step: "listing EdgeChanges".into(), source }),
    }
}

/// What one hand-over did.
#[derive(Debug, Default)]
pub struct HandOver {
    pub uploaded: usize,
    pub released: usize,
    /// The records still in the member (held, or open conflicts).
    pub remaining: Vec<EdgeChange>,
    /// Whether the control plane answered during the pass (a pass with no record asks it nothing).
    pub answered: bool,
}

/// Online: every record of the member copied to the control plane (the cluster's execution
/// space, same name); a record the control plane has decided for good ([`phase::is_final`], for
/// the copy's current spec) is released — removed from the member, its copy staying on the
/// control plane as the history — and the decision so far is copied into the member's record,
/// so that an agent restarted offline knows which conflicts are open.
async fn hand_over(name: &str, conn: &Connection, cp: &Client) -> Result<HandOver, Error> {
    let records = member_records(name, conn).await?;
    let mut out = HandOver::default();
    if records.is_empty() {
        return Ok(out);
    }
    let cp_err = |step: String| {
        let cluster = name.to_string();
        move |source| Error::ControlPlane { cluster, step, source }
    };
    let member_err = |step: String| {
        let cluster = name.to_string();
        move |source| Error::MemberApi { cluster, step, source }
    };
    let copies: Api<EdgeChange> = Api::namespaced(cp.clone(), &execution_space(name));
    let local: Api<EdgeChange> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    // One list of the control plane's copies per pass, not a read per record.
    let mut on_cp: BTreeMap<String, EdgeChange> =
        copies.list(&Default::default()).await.map_err(cp_err("listing EdgeChanges".into()))?.items.into_iter().map(|c| (c.name_any(), c)).collect();
    out.answered = true;
    for record in records {
        let record_name = record.name_any();
        if record.spec.change == change_kind::CREATED && born_is_settled(conn, &record.spec).await {
            // Promoted (a Work's object now) or gone: nothing left to list.
            for result in [copies.delete(&record_name, &Default::default()).await, local.delete(&record_name, &Default::default()).await] {
                match result {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(member_err(format!("removing EdgeChange {record_name}"))(e)),
                }
            }
            tracing::info!(controller = NAME, cluster = name, record = %record_name, "an object born at the edge was promoted or removed; its record goes");
            continue;
        }
        match on_cp.remove(&record_name) {
            None => {
                let mut c = EdgeChange::new(&record_name, record.spec.clone());
                c.metadata.labels = Some([(CLUSTER_LABEL.to_string(), name.to_string())].into());
                copies.create(&PostParams::default(), &c).await.map_err(cp_err(format!("creating EdgeChange {record_name}")))?;
                tracing::info!(controller = NAME, cluster = name, record = %record_name, "edge change handed to the control plane");
                out.uploaded += 1;
                out.remaining.push(record);
            }
            Some(mut c) if c.spec != record.spec => {
                c.spec = record.spec.clone();
                // A new change (another offline period): a resolution given for the previous one
                // must not decide it — edgeSync would read the annotation as this one's.
                if let Some(a) = c.metadata.annotations.as_mut() {
                    a.remove(RESOLVE_ANNOTATION);
                }
                copies.replace(&record_name, &PostParams::default(), &c).await.map_err(cp_err(format!("updating EdgeChange {record_name}")))?;
                out.uploaded += 1;
                out.remaining.push(record);
            }
            Some(c) => {
                let status = c.status.clone().unwrap_or_default();
                let current = status.observed_generation.is_some() && status.observed_generation == c.metadata.generation;
                // An object born at the edge stays listed (its record kept, so that it is not
                // found "new" again) until it is promoted.
                if current && phase::is_final(&status.phase) && status.phase != phase::LISTED {
                    match local.delete(&record_name, &Default::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(member_err(format!("removing EdgeChange {record_name}"))(e)),
                    }
                    tracing::info!(controller = NAME, cluster = name, record = %record_name, phase = %status.phase, "edge change decided; the object is released");
                    out.released += 1;
                    continue;
                }
                if current && record.status.as_ref() != Some(&status) {
                    let mut mine = record.clone();
                    mine.status = Some(status);
                    match local.replace_status(&record_name, &PostParams::default(), &mine).await {
                        Ok(updated) => {
                            out.remaining.push(updated);
                            continue;
                        }
                        // Changed meanwhile (the recorder): next time.
                        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                        Err(e) => return Err(member_err(format!("writing the decision on EdgeChange {record_name}"))(e)),
                    }
                }
                out.remaining.push(record);
            }
        }
    }
    Ok(out)
}

/// Whether an object born at the edge is now a Work's (promoted) or gone.
async fn born_is_settled(conn: &Connection, spec: &EdgeChangeSpec) -> bool {
    let probe =
        json!({"apiVersion": spec.object.api_version, "kind": spec.object.kind, "metadata": {"name": spec.object.name, "namespace": spec.object.namespace}});
    let Ok(r) = ObjectRef::of(&probe) else { return false };
    match apply::get(conn.member(), &r).await {
        Ok(None) => true,
        Ok(Some(o)) => o.pointer("/metadata/labels").and_then(|l| l.get(WORK_PERMANENT_ID_LABEL)).is_some(),
        Err(_) => false,
    }
}

/// Back in touch (or just started with the control plane answering): what changed in the
/// member meanwhile recorded — against the control plane's Works as they are now — and every
/// record handed over, before the agent's controllers may write to the member again.
async fn catch_up(cluster: &Cluster, name: &str, members: &Clients, cp: &Client, config: &Config) -> Result<HandOver, Error> {
    let works: Api<Work> = Api::namespaced(cp.clone(), &execution_space(name));
    let current: BTreeMap<String, Work> = works
        .list(&Default::default())
        .await
        .map_err(|source| Error::ControlPlane { cluster: name.to_string(), step: "listing Works".into(), source })?
        .items
        .into_iter()
        .map(|w| (w.name_any(), w))
        .collect();
    record(cluster, name, members, cp, config, Some(&current)).await?;
    let conn = members.connect(cp, cluster, config.member_timeout).await.map_err(|source| Error::Member { cluster: name.to_string(), source })?;
    let mut h = hand_over(name, &conn, cp).await?;
    // The Works were listed on the control plane.
    h.answered = true;
    Ok(h)
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
/// offline records too) until `shutdown`: probe the control plane; record the edge's changes
/// while it is away; once it answers, catch up and hand the records over, and keep the
/// member's holds ([`Clients::holds`]) as the records say. Until the first catch-up, and
/// while offline, every object is held: the agent's controllers write nothing to the member.
pub async fn run(client: Client, shutdown: CancellationToken, config: Config, members: Arc<Clients>) {
    let Some(name) = members.own_cluster().map(str::to_string) else {
        tracing::warn!(controller = NAME, "the edge recorder runs in a pull agent only");
        return;
    };
    let holds = members.holds();
    holds.hold_all(true);
    // The Cluster as last read: enough to reach the member through the agent's own access.
    let mut cluster = Cluster::new(&name, Default::default());
    let mut last_answer = Instant::now();
    let mut offline = false;
    // Whether what changed while nobody handed it over is handed over.
    let mut caught_up = false;
    let mut catching_up_since = Instant::now();
    let mut next_record = Instant::now();
    loop {
        // A slow answer is an answer: a control plane busy with many members reconnecting at
        // once is given the whole `offline_after` to reply before the member counts as offline
        // (with a timeout of one probe interval, agents flapped offline and back under load and
        // began their catch-up again and again).
        match probe(&client, &name, config.offline_after.max(config.probe_interval).max(Duration::from_secs(1))).await {
            Probe::Answered(c) => {
                if offline {
                    tracing::info!(controller = NAME, cluster = %name, "the control plane answers again: recording stops; catching up");
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
                caught_up = false;
                catching_up_since = Instant::now();
                holds.hold_all(true);
                next_record = Instant::now();
            }
            Probe::Unreachable => {}
        }
        if offline {
            if Instant::now() >= next_record {
                if let Err(e) = record(&cluster, &name, &members, &client, &config, None).await {
                    tracing::warn!(controller = NAME, cluster = %name, error = %e, "recording edge changes failed; trying again");
                }
                next_record = Instant::now() + config.record_interval;
            }
            refresh_holds(&cluster, &name, &members, &client, &config).await;
        } else if last_answer.elapsed() < config.offline_after {
            let handed = if caught_up {
                match members.connect(&client, &cluster, config.member_timeout).await {
                    Ok(conn) => hand_over(&name, &conn, &client).await,
                    Err(source) => Err(Error::Member { cluster: name.clone(), source }),
                }
            } else {
                catch_up(&cluster, &name, &members, &client, &config).await
            };
            match handed {
                Ok(h) => {
                    if h.answered {
                        last_answer = Instant::now();
                    }
                    holds.replace(held_keys(&h.remaining));
                    if !caught_up {
                        tracing::info!(controller = NAME, cluster = %name, held = holds.len(), "caught up with the member: only objects with undecided edge changes stay held");
                        caught_up = true;
                        holds.hold_all(false);
                    }
                }
                Err(e) if !caught_up && catching_up_since.elapsed() >= config.catch_up_limit => {
                    tracing::error!(controller = NAME, cluster = %name, error = %e, limit = ?config.catch_up_limit, "cannot hand the member's changes over to the control plane; no longer holding every object (changes recorded in flotilla-edge stay held)");
                    refresh_holds(&cluster, &name, &members, &client, &config).await;
                    caught_up = true;
                    holds.hold_all(false);
                }
                Err(e) => tracing::warn!(controller = NAME, cluster = %name, error = %e, "handing edge changes over failed; trying again"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(config.probe_interval.min(config.record_interval)) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// The holds as the member's records say (kept as they are when the member cannot be read).
async fn refresh_holds(cluster: &Cluster, name: &str, members: &Clients, cp: &Client, config: &Config) {
    let Ok(conn) = members.connect(cp, cluster, config.member_timeout).await else { return };
    match member_records(name, &conn).await {
        Ok(records) => members.holds().replace(held_keys(&records)),
        Err(e) => tracing::debug!(controller = NAME, cluster = %name, error = %e, "cannot read the member's records"),
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

    #[test]
    fn a_field_the_control_plane_now_asks_for_is_no_edge_change() {
        let a = applied();
        let desired = desired_object(&work_of(&a), &a.spec.manifests[0]);
        let mut observed = desired.clone();
        observed["spec"]["replicas"] = json!(3);
        observed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        let (_, fields) = change_of(&a.spec.manifests[0], &desired, Some(&observed)).unwrap();
        assert_eq!(fields.len(), 2);
        // The control plane scaled to 3 meanwhile (and the member got it before the cut): only
        // the image is the edge's.
        let mut now = work_of(&a);
        let mut manifest = a.spec.manifests[0].clone();
        manifest["spec"]["replicas"] = json!(3);
        now.spec.workload = Some(serde_json::from_value(json!({"manifests": [manifest.clone()]})).unwrap());
        let r = ObjectRef::of(&manifest).unwrap();
        let m = manifest_for(&now, &r).expect("the Work's manifest for the object");
        let left = beyond_current(fields.clone(), Some((&now, m)), Some(&observed));
        assert_eq!(left.iter().map(|f| f.path.to_string()).collect::<Vec<_>>(), ["spec.template.spec.containers[0].image"]);
        assert_eq!(beyond_current(fields, None, Some(&observed)).len(), 2, "no current Work: everything counts");
    }

    #[test]
    fn objects_born_at_the_edge_are_those_no_work_made_after_the_last_acknowledgement() {
        let mut a = applied();
        a.status =
            Some(flotilla_api::federation::flotilla::edge::AppliedWorkStatus { acknowledged_at: Some("2026-12-05T10:00:00Z".into()), manifests: vec![] });
        let scope = born_scope(&[a]);
        assert_eq!(scope.get(&("shop".to_string(), "apps/v1".to_string(), "Deployment".to_string())).map(String::as_str), Some("2026-12-05T10:00:00Z"));
        let since = "2026-12-05T10:00:00Z";
        let obj = |created: &str, extra: Value| {
            let mut o = json!({"metadata": {"name": "x", "creationTimestamp": created}});
            if let (Some(m), Some(e)) = (o["metadata"].as_object_mut(), extra.as_object()) {
                m.extend(e.clone());
            }
            o
        };
        assert!(born_at_edge(&obj("2026-12-05T10:05:00Z", json!({})), since));
        assert!(!born_at_edge(&obj("2026-12-05T09:05:00Z", json!({})), since), "older than what the control plane saw");
        assert!(!born_at_edge(&obj("2026-12-05T10:05:00Z", json!({"labels": {WORK_PERMANENT_ID_LABEL: "p"}})), since), "a Work's");
        assert!(!born_at_edge(&obj("2026-12-05T10:05:00Z", json!({"ownerReferences": [{"kind": "ReplicaSet"}]})), since), "made by a controller");
        assert!(!born_at_edge(&obj("2026-12-05T10:05:00Z", json!({})), ""), "nothing acknowledged there yet");
        assert_eq!(born_record_name("Deployment", "shop", "web"), "born-deployment-shop-web");
    }

    #[test]
    fn every_record_holds_its_object_but_one_born_at_the_edge() {
        let record = |change: &str, kind: &str, api_version: &str| {
            let mut spec = EdgeChangeSpec { change: change.into(), ..Default::default() };
            spec.object =
                ObjectReference { api_version: api_version.into(), kind: kind.into(), namespace: Some("shop".into()), name: "web".into(), uid: String::new() };
            EdgeChange::new("r", spec)
        };
        let records = [
            record(change_kind::MODIFIED, "Deployment", "apps/v1"),
            record(change_kind::DELETED, "ConfigMap", "v1"),
            record(change_kind::CREATED, "Service", "v1"),
        ];
        let keys = held_keys(&records);
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["/ConfigMap/shop/web", "apps/Deployment/shop/web"]);
    }
}
