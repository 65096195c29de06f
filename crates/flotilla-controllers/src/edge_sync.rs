//! The control plane's decisions on what pull members changed while offline (ADR 0032).
//!
//! A pull agent back in touch copies its member's `EdgeChange` records into its execution space
//! and holds each recorded object as the edge left it. For each copy this controller takes the
//! three values in hand — the base (the manifest's value the agent last applied), the edge's
//! value and the control plane's current desired value (its Work now) — and decides every field
//! by the sync policy the annotations give ([`flotilla_api::edge::resolve`]: the resource
//! template's, then the Cluster's, then the (Cluster)PropagationPolicy's):
//!
//! - the control plane already wants the edge's value: `Converged`;
//! - `ControlPlaneWins`: `Reverted` — the agent's drift correction puts the control plane's
//!   value back once the object is released — with a Warning Event `EdgeChangeReverted` on the
//!   template;
//! - `EdgeWins` (for the listed paths): `Adopted` — the edge's value goes into the binding's
//!   [`EdgeOverride`], which the binding controller applies after the user's overrides; the
//!   record stays `Adopting` (the object held) until the cluster's Work carries every adopted
//!   value, so nothing is reverted on the way; an object deleted at the edge drops the cluster's
//!   Work. A Secret's values are never adopted (the records hold digests, not values);
//! - `Manual`: `Conflict` — condition `EdgeConflict` on the Work and its binding, a Warning
//!   Event, the object held until `flotilla edge resolve` sets [`RESOLVE_ANNOTATION`] (`edge`:
//!   adopted; `control-plane`: reverted).
//!
//! A record whose Work the control plane no longer has is decided at once: the tombstone rule
//! (ADR 0031) decides the object. An object born at the edge is `Listed` and left alone. Once
//! decided, a record's outcomes stay as they are for its generation (an adopted value is later
//! "converged" by construction); the agent's next copy of a record (a new offline period) is a
//! new generation, decided afresh.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::edge::{FieldChange, FieldPath, Outcome, SyncSettings, decide, resolve};
use flotilla_api::federation::flotilla::edge::{
    BindingReference, ClusterEdgeOverride, EdgeChange, EdgeChangeSpec, EdgeChangeStatus, EdgeOperation, EdgeOverride, EdgeOverrideSpec, FieldDecision,
    KEEP_CONTROL_PLANE, KEEP_EDGE, RESOLVE_ANNOTATION, change_kind, outcome, phase,
};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::cluster_of_execution_space;
use flotilla_api::federation::karmada::policy::{
    CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION, ClusterPropagationPolicy, PROPAGATION_POLICY_NAME_ANNOTATION, PROPAGATION_POLICY_NAMESPACE_ANNOTATION,
    PropagationPolicy,
};
use flotilla_api::federation::karmada::work::{BindingKey, ClusterResourceBinding, ResourceBinding, Work, binding_of_work};
use flotilla_member::apply::ObjectRef;
use flotilla_runtime::{Events, Next, ReconcileError, condition, condition_status, set_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::execution::{desired_object, manifests, template_reference, update_work_conditions};

pub const NAME: &str = "edgeSync";
/// Warning Event on the template: an edge change was reverted.
pub const REASON_REVERTED: &str = "EdgeChangeReverted";
/// Event on the template: an edge change became the control plane's desired state.
pub const REASON_ADOPTED: &str = "EdgeChangeAdopted";
/// Warning Event, and the condition on the Work and its binding, of an open conflict.
pub const REASON_CONFLICT: &str = "EdgeConflict";
pub const CONDITION_EDGE_CONFLICT: &str = "EdgeConflict";
/// Where a ClusterResourceBinding's EdgeOverride is kept.
pub const CLUSTER_SCOPED_OVERRIDES_NAMESPACE: &str = "karmada-cluster";

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: usize,
    /// How often a record being adopted is looked at again (besides its Work's changes).
    pub adopt_recheck: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { workers: 2, adopt_recheck: Duration::from_secs(2) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("edge change {record}: {step}: {source}")]
    Api { record: String, step: String, source: kube::Error },
    #[error("edge change {record}: {what} kept changing under our writes")]
    Conflict { record: String, what: String },
}

impl ReconcileError for Error {}

/// An EdgeChange on the control plane.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChangeKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ChangeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What the control plane makes of one record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    pub status: EdgeChangeStatus,
    /// Edge values to put into the binding's EdgeOverride for the cluster.
    pub adopt: Vec<EdgeOperation>,
    /// The edge deleted the object and the edge won: the cluster's Work goes.
    pub adopt_deletion: bool,
}

impl Decision {
    pub fn paths_with(&self, which: &str) -> Vec<&str> {
        self.status.fields.iter().filter(|f| f.outcome == which).map(|f| f.path.as_str()).collect()
    }
}

fn is_secret_value(spec: &EdgeChangeSpec, path: &FieldPath) -> bool {
    spec.object.kind == "Secret"
        && spec.object.api_version == "v1"
        && matches!(path.0.first(), Some(flotilla_api::edge::Segment::Key(k)) if k == "data" || k == "stringData")
}

/// The decision on `spec` (record `record`), given the object as the control plane's Work wants
/// it now (`None`: the Work, or that object in it, is gone), the settings and a resolution of
/// `flotilla edge resolve` (`edge` or `control-plane`).
pub fn decide_change(record: &str, spec: &EdgeChangeSpec, desired: Option<&Value>, settings: &SyncSettings, resolution: Option<&str>) -> Decision {
    let mut d = Decision::default();
    d.status.policy = settings.policy.to_string();
    d.status.resolution = resolution.map(String::from);
    if spec.change == change_kind::CREATED {
        d.status.phase = phase::LISTED.into();
        d.status.message = format!(
            "created at the edge from no Work: left alone; `flotilla promote {}/{}{} --cluster {}` adopts it",
            spec.object.kind.to_lowercase(),
            spec.object.name,
            spec.object.namespace.as_ref().map(|ns| format!(" -n {ns}")).unwrap_or_default(),
            spec.cluster
        );
        return d;
    }
    let Some(desired) = desired else {
        d.status.phase = phase::DECIDED.into();
        d.status.message =
            "its Work is gone from the control plane (deleted while the edge was away): the object is removed only by the Work's tombstone".into();
        return d;
    };
    let changes: Vec<FieldChange> = if spec.change == change_kind::DELETED {
        vec![FieldChange { path: FieldPath::root(), old: Some(desired.clone()), new: None }]
    } else {
        spec.fields.iter().filter_map(|f| FieldPath::parse(&f.path).ok().map(|path| FieldChange { path, old: f.old.clone(), new: f.new.clone() })).collect()
    };
    let mut notes = Vec::new();
    for change in &changes {
        let cp = change.path.get(desired);
        let mut result = decide(change, cp, settings);
        if result == Outcome::Conflict {
            match resolution {
                Some(KEEP_EDGE) => result = Outcome::Adopt { over_control_plane: cp != change.old.as_ref() },
                Some(KEEP_CONTROL_PLANE) => result = Outcome::Revert,
                _ => {}
            }
        }
        if matches!(result, Outcome::Adopt { .. }) && is_secret_value(spec, &change.path) {
            notes.push(format!("{}: a Secret's value is not brought back from the edge (only its digest is recorded)", change.path));
            result = Outcome::Revert;
        }
        let (word, over) = match result {
            Outcome::Converged => (outcome::CONVERGED, false),
            Outcome::Revert => (outcome::REVERTED, false),
            Outcome::Conflict => (outcome::CONFLICT, false),
            Outcome::Adopt { over_control_plane } => {
                if change.path.is_root() {
                    d.adopt_deletion = true;
                } else {
                    d.adopt.push(EdgeOperation {
                        path: change.path.to_string(),
                        op: if change.new.is_some() { "replace" } else { "remove" }.into(),
                        value: change.new.clone(),
                        source: record.to_string(),
                    });
                }
                (outcome::ADOPTED, over_control_plane)
            }
        };
        d.status.fields.push(FieldDecision { path: change.path.to_string(), outcome: word.into(), control_plane: cp.cloned(), over_control_plane: over });
    }
    let count = |w: &str| d.status.fields.iter().filter(|f| f.outcome == w).count();
    let (reverted, adopted, conflicts, converged) = (count(outcome::REVERTED), count(outcome::ADOPTED), count(outcome::CONFLICT), count(outcome::CONVERGED));
    d.status.phase = if conflicts > 0 { phase::CONFLICT } else { phase::DECIDED }.into();
    let what = if spec.change == change_kind::DELETED { "deletion".to_string() } else { format!("{} field change(s)", changes.len()) };
    let mut message = if changes.is_empty() {
        "the edge undid its change: nothing to decide".to_string()
    } else {
        format!("{what} under {}: {reverted} reverted, {adopted} adopted, {conflicts} in conflict, {converged} converged", settings.policy)
    };
    if conflicts > 0 {
        message.push_str(&format!(
            "; held as the edge left it until `flotilla edge resolve {}/{}{} --cluster {} --keep edge|control-plane`",
            spec.object.kind.to_lowercase(),
            spec.object.name,
            spec.object.namespace.as_ref().map(|ns| format!(" -n {ns}")).unwrap_or_default(),
            spec.cluster
        ));
    }
    for n in notes {
        message.push_str("; ");
        message.push_str(&n);
    }
    d.status.message = message;
    d
}

/// Whether `desired` (the object as the cluster's Work wants it now; `None`: no Work) carries
/// every adopted value of `d`.
pub fn carried(d: &Decision, desired: Option<&Value>) -> bool {
    if d.adopt_deletion {
        return desired.is_none();
    }
    let Some(desired) = desired else { return d.adopt.is_empty() };
    d.adopt.iter().all(|op| {
        let Ok(path) = FieldPath::parse(&op.path) else { return true };
        match op.op.as_str() {
            "remove" => path.get(desired).is_none(),
            _ => path.get(desired) == op.value.as_ref(),
        }
    })
}

/// `spec` of an EdgeOverride with `cluster`'s entry merged with `d`'s adoptions (an operation
/// on the same path replaced).
pub fn merge_override(spec: &mut EdgeOverrideSpec, cluster: &str, d: &Decision) -> bool {
    let before = spec.clone();
    let entry = match spec.clusters.iter().position(|c| c.cluster == cluster) {
        Some(i) => &mut spec.clusters[i],
        None => {
            spec.clusters.push(ClusterEdgeOverride { cluster: cluster.to_string(), ..Default::default() });
            spec.clusters.last_mut().expect("just pushed")
        }
    };
    if d.adopt_deletion {
        entry.deleted = true;
    }
    for op in &d.adopt {
        match entry.operations.iter_mut().find(|o| o.path == op.path) {
            Some(o) => *o = op.clone(),
            None => entry.operations.push(op.clone()),
        }
    }
    spec.clusters.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    *spec != before
}

/// Apply `cluster`'s edge values of `spec` to a rendered manifest: `Ok(false)` when the edge
/// deleted the object (no Work for the cluster).
pub fn apply_edge_override(spec: &EdgeOverrideSpec, cluster: &str, manifest: &mut Value) -> Result<bool, String> {
    let Some(entry) = spec.clusters.iter().find(|c| c.cluster == cluster) else { return Ok(true) };
    if entry.deleted {
        return Ok(false);
    }
    for op in &entry.operations {
        let path = FieldPath::parse(&op.path).map_err(|e| format!("edge override {}: {e}", op.path))?;
        match op.op.as_str() {
            "remove" => path.remove(manifest),
            "replace" => path.set(manifest, op.value.clone().unwrap_or(Value::Null))?,
            other => return Err(format!("edge override {}: unknown op {other:?} (replace or remove)", op.path)),
        }
    }
    Ok(true)
}

/// Where a binding's EdgeOverride is kept: its namespace and name.
pub fn override_location(b: &BindingKey) -> (String, String) {
    match &b.namespace {
        Some(ns) => (ns.clone(), b.name.clone()),
        None => (CLUSTER_SCOPED_OVERRIDES_NAMESPACE.to_string(), b.name.clone()),
    }
}

struct Context {
    client: Client,
    events: Events,
    config: Config,
    changes: Store<EdgeChange>,
    works: Store<Work>,
    clusters: Store<Cluster>,
    rbs: Store<ResourceBinding>,
    crbs: Store<ClusterResourceBinding>,
    pps: Store<PropagationPolicy>,
    cpps: Store<ClusterPropagationPolicy>,
}

impl Context {
    fn err(&self, key: &ChangeKey, step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let record = key.to_string();
        let step = step.into();
        move |source| Error::Api { record, step, source }
    }

    /// The settings for an object of `work` (`manifest` its copy of the template) on `cluster`.
    fn settings(&self, work: &Work, manifest: &Value, cluster: &str) -> Result<SyncSettings, String> {
        let template: Option<BTreeMap<String, String>> = manifest.pointer("/metadata/annotations").and_then(|a| serde_json::from_value(a.clone()).ok());
        let cluster = self.clusters.get(&StoreRef::new(cluster));
        let binding = binding_of_work(work);
        let binding_annotations = binding.as_ref().and_then(|b| match &b.namespace {
            Some(ns) => self.rbs.get(&StoreRef::new(&b.name).within(ns)).map(|rb| rb.annotations().clone()),
            None => self.crbs.get(&StoreRef::new(&b.name)).map(|crb| crb.annotations().clone()),
        });
        let policy = binding_annotations.and_then(|a| {
            if let (Some(ns), Some(name)) = (a.get(PROPAGATION_POLICY_NAMESPACE_ANNOTATION), a.get(PROPAGATION_POLICY_NAME_ANNOTATION)) {
                return self.pps.get(&StoreRef::new(name).within(ns)).map(|p| p.annotations().clone());
            }
            a.get(CLUSTER_PROPAGATION_POLICY_NAME_ANNOTATION).and_then(|name| self.cpps.get(&StoreRef::new(name)).map(|p| p.annotations().clone()))
        });
        resolve([template.as_ref(), cluster.as_ref().map(|c| c.annotations()), policy.as_ref()]).map_err(|e| e.to_string())
    }
}

/// The Work's manifest making `spec`'s object, and the object as the Work wants it.
fn wanted(work: &Work, spec: &EdgeChangeSpec) -> Option<(Value, Value)> {
    let group = spec.object.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let m = manifests(work).iter().find(|m| {
        ObjectRef::of(m)
            .is_ok_and(|r| r.gvk.group == group && r.gvk.kind == spec.object.kind && r.namespace == spec.object.namespace && r.name == spec.object.name)
    })?;
    Some((m.clone(), desired_object(work, m)))
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn reconcile(key: ChangeKey, ctx: Arc<Context>) -> Result<Next, Error> {
    let Some(record) = ctx.changes.get(&StoreRef::new(&key.name).within(&key.namespace)) else { return Ok(Next::Done) };
    let Some(cluster) = cluster_of_execution_space(&key.namespace).map(str::to_string) else { return Ok(Next::Done) };
    let generation = record.metadata.generation;
    let previous = record.status.clone().unwrap_or_default();
    let resolution = record.annotations().get(RESOLVE_ANNOTATION).map(String::as_str).filter(|r| *r == KEEP_EDGE || *r == KEEP_CONTROL_PLANE);
    let same_generation = generation.is_some() && previous.observed_generation == generation;
    let work = record
        .spec
        .work_name
        .as_ref()
        .and_then(|w| ctx.works.get(&StoreRef::new(w).within(&key.namespace)))
        .filter(|w| w.metadata.deletion_timestamp.is_none());
    let found = work.as_ref().and_then(|w| wanted(w, &record.spec));
    if same_generation {
        match previous.phase.as_str() {
            phase::DECIDED | phase::LISTED => return Ok(Next::Done),
            phase::CONFLICT if resolution.is_none() || previous.resolution.as_deref() == resolution => return Ok(Next::Done),
            phase::ADOPTING => {
                // Decided already; waiting for the Work to carry the adopted values.
                let d =
                    Decision { status: previous.clone(), adopt: adopted_ops(&key.name, &record.spec, &previous), adopt_deletion: adopted_deletion(&previous) };
                if carried(&d, found.as_ref().map(|(_, desired)| desired)) {
                    let mut status = previous.clone();
                    status.phase = phase::DECIDED.into();
                    status.message = format!("{}; the control plane's desired state now holds the edge's values", previous.message);
                    write_status(&ctx, &key, &record, status).await?;
                    return Ok(Next::Done);
                }
                return Ok(Next::After(ctx.config.adopt_recheck));
            }
            _ => {}
        }
    }
    let settings = match (&work, &found) {
        (Some(w), Some((m, _))) => match ctx.settings(w, m, &cluster) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(controller = NAME, record = %key, error = %e, "bad sync annotations; deciding as ControlPlaneWins");
                SyncSettings::default()
            }
        },
        _ => SyncSettings::default(),
    };
    let mut d = decide_change(&key.name, &record.spec, found.as_ref().map(|(_, desired)| desired), &settings, resolution);
    let binding = work.as_ref().and_then(|w| binding_of_work(w));
    if (!d.adopt.is_empty() || d.adopt_deletion) && binding.is_none() {
        // Nowhere to keep the edge's values: the control plane's stand.
        for f in d.status.fields.iter_mut().filter(|f| f.outcome == outcome::ADOPTED) {
            f.outcome = outcome::REVERTED.into();
        }
        d.adopt.clear();
        d.adopt_deletion = false;
        d.status.message.push_str("; the Work names no binding to keep the edge's values in: reverted");
    }
    if let Some(b) = &binding
        && (!d.adopt.is_empty() || d.adopt_deletion)
    {
        write_override(&ctx, &key, b, &cluster, &d).await?;
        if !carried(&d, found.as_ref().map(|(_, desired)| desired)) {
            d.status.phase = phase::ADOPTING.into();
        }
    }
    // What people hear of it: once per decision.
    let template = found.as_ref().and_then(|(m, _)| template_reference(m));
    let object = format!(
        "{} {}",
        record.spec.object.kind,
        record.spec.object.namespace.as_ref().map_or(record.spec.object.name.clone(), |ns| format!("{ns}/{}", record.spec.object.name))
    );
    let by = record.spec.manager.as_deref().map(|m| format!(" by {m}")).unwrap_or_default();
    let announce = |warning: bool, reason: &'static str, paths: Vec<&str>, verb: &str| {
        let note = if record.spec.change == change_kind::DELETED {
            format!("{object} deleted in cluster {cluster}{by} while offline: {verb} ({})", settings.policy)
        } else {
            format!("{object} changed in cluster {cluster}{by} while offline: {} {verb} ({})", paths.join(", "), settings.policy)
        };
        (warning, reason, note)
    };
    let mut notes = Vec::new();
    let reverted = d.paths_with(outcome::REVERTED);
    if !reverted.is_empty() {
        notes.push(announce(true, REASON_REVERTED, reverted, "reverted to the control plane's value"));
    }
    let adopted = d.paths_with(outcome::ADOPTED);
    if !adopted.is_empty() {
        notes.push(announce(false, REASON_ADOPTED, adopted, "kept: now the control plane's desired value"));
    }
    let conflicts = d.paths_with(outcome::CONFLICT);
    if !conflicts.is_empty() {
        notes.push(announce(true, REASON_CONFLICT, conflicts, "in conflict, held as the edge left it until resolved"));
    }
    for (warning, reason, note) in notes {
        match (&template, &work) {
            (Some(t), _) => ctx.events.publish_ref(t, warning, reason, "EdgeSync", note).await,
            (None, Some(w)) => ctx.events.publish(&**w, warning, reason, "EdgeSync", note).await,
            (None, None) => ctx.events.publish(&*record, warning, reason, "EdgeSync", note).await,
        }
    }
    // The conflict condition, set or cleared.
    let in_conflict = d.status.phase == phase::CONFLICT;
    if (in_conflict || previous.phase == phase::CONFLICT)
        && let Some(w) = &work
    {
        set_conflict_conditions(&ctx, &key, w, binding.as_ref(), in_conflict, &d.status.message).await?;
    }
    d.status.observed_generation = generation;
    d.status.decided_at = Some(now());
    tracing::info!(controller = NAME, record = %key, phase = %d.status.phase, policy = %settings.policy, "edge change decided: {}", d.status.message);
    write_status(&ctx, &key, &record, d.status.clone()).await?;
    Ok(if d.status.phase == phase::ADOPTING { Next::After(ctx.config.adopt_recheck) } else { Next::Done })
}

/// The adoptions a decided status stands for (the record's edge values of its adopted fields).
fn adopted_ops(record: &str, spec: &EdgeChangeSpec, status: &EdgeChangeStatus) -> Vec<EdgeOperation> {
    status
        .fields
        .iter()
        .filter(|f| f.outcome == outcome::ADOPTED && !f.path.is_empty())
        .filter_map(|f| {
            let change = spec.fields.iter().find(|c| c.path == f.path)?;
            Some(EdgeOperation {
                path: f.path.clone(),
                op: if change.new.is_some() { "replace" } else { "remove" }.into(),
                value: change.new.clone(),
                source: record.to_string(),
            })
        })
        .collect()
}

fn adopted_deletion(status: &EdgeChangeStatus) -> bool {
    status.fields.iter().any(|f| f.outcome == outcome::ADOPTED && f.path.is_empty())
}

async fn write_status(ctx: &Context, key: &ChangeKey, record: &EdgeChange, status: EdgeChangeStatus) -> Result<(), Error> {
    let api: Api<EdgeChange> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let mut body = serde_json::to_value(&status).unwrap_or_default();
    if status.resolution.is_none() {
        // A merge patch keeps what it omits: a new generation decided without a resolution must
        // clear the previous one's, or the same resolution given again is taken as seen.
        body["resolution"] = Value::Null;
    }
    let patch = json!({"metadata": {"resourceVersion": record.resource_version()}, "status": body});
    match api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        // The agent copied a newer record meanwhile: its watch event brings it back.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(ctx.err(key, "writing the decision")(e)),
    }
}

async fn write_override(ctx: &Context, key: &ChangeKey, b: &BindingKey, cluster: &str, d: &Decision) -> Result<(), Error> {
    let (namespace, name) = override_location(b);
    let api: Api<EdgeOverride> = Api::namespaced(ctx.client.clone(), &namespace);
    let owner = match &b.namespace {
        Some(ns) => ctx.rbs.get(&StoreRef::new(&b.name).within(ns)).map(|rb| owner_of(&*rb)),
        None => ctx.crbs.get(&StoreRef::new(&b.name)).map(|crb| owner_of(&*crb)),
    };
    for _ in 0..5 {
        match api.get_opt(&name).await.map_err(ctx.err(key, "reading the EdgeOverride"))? {
            None => {
                let mut spec = EdgeOverrideSpec { binding: BindingReference { namespace: b.namespace.clone(), name: b.name.clone() }, clusters: Vec::new() };
                merge_override(&mut spec, cluster, d);
                let mut o = EdgeOverride::new(&name, spec);
                o.metadata.namespace = Some(namespace.clone());
                o.metadata.owner_references = owner.clone().map(|o| vec![o]);
                match api.create(&PostParams::default(), &o).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(ctx.err(key, "creating the EdgeOverride")(e)),
                }
            }
            Some(mut o) => {
                if !merge_override(&mut o.spec, cluster, d) {
                    return Ok(());
                }
                match api.replace(&name, &PostParams::default(), &o).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(ctx.err(key, "updating the EdgeOverride")(e)),
                }
            }
        }
    }
    // Five writes lost to others in a row: the queue's backoff tries again.
    Err(Error::Conflict { record: key.to_string(), what: format!("EdgeOverride {namespace}/{name}") })
}

fn owner_of<K: Resource<DynamicType = ()>>(obj: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: obj.meta().name.clone().unwrap_or_default(),
        uid: obj.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

async fn set_conflict_conditions(ctx: &Context, key: &ChangeKey, work: &Work, binding: Option<&BindingKey>, open: bool, message: &str) -> Result<(), Error> {
    let reason = if open { REASON_CONFLICT } else { "Resolved" };
    let c = condition(CONDITION_EDGE_CONFLICT, open, reason, message, None);
    let works: Api<Work> = Api::namespaced(ctx.client.clone(), &key.namespace);
    update_work_conditions(&works, &work.name_any(), None, |conds| {
        if !open && condition_status(Some(conds), CONDITION_EDGE_CONFLICT).is_none() {
            return false;
        }
        set_condition(conds, c.clone())
    })
    .await
    .map_err(ctx.err(key, "setting the EdgeConflict condition on the Work"))?;
    let Some(b) = binding else { return Ok(()) };
    let api: Api<kube::api::DynamicObject> = match &b.namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &kube::core::ApiResource::erase::<ResourceBinding>(&())),
        None => Api::all_with(ctx.client.clone(), &kube::core::ApiResource::erase::<ClusterResourceBinding>(&())),
    };
    for _ in 0..5 {
        let Some(current) = api.get_opt(&b.name).await.map_err(ctx.err(key, "reading the binding"))? else { return Ok(()) };
        let mut conds: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> =
            current.data.pointer("/status/conditions").and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default();
        if !open && condition_status(Some(&conds), CONDITION_EDGE_CONFLICT).is_none() {
            return Ok(());
        }
        if !set_condition(&mut conds, c.clone()) {
            return Ok(());
        }
        let patch = json!({"metadata": {"resourceVersion": current.resource_version()}, "status": {"conditions": conds}});
        match api.patch_status(&b.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(ctx.err(key, "setting the EdgeConflict condition on the binding")(e)),
        }
    }
    Ok(())
}

pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let changes = rt.informers.store::<EdgeChange>();
    let by_work = changes.clone();
    let controller = rt
        .controller::<ChangeKey>(NAME)
        .workers(config.workers)
        .backoff(Duration::from_millis(200), Duration::from_secs(30))
        .watches(|c: &EdgeChange, deleted| (!deleted).then(|| ChangeKey { namespace: c.namespace().unwrap_or_default(), name: c.name_any() }))
        // A Work changed (carrying adopted values, or gone): its records looked at again.
        .watches(move |w: &Work, _| {
            let (ns, name) = (w.namespace().unwrap_or_default(), w.name_any());
            by_work
                .state()
                .iter()
                .filter(|c| c.namespace().as_deref() == Some(ns.as_str()) && c.spec.work_name.as_deref() == Some(name.as_str()))
                .map(|c| ChangeKey { namespace: ns.clone(), name: c.name_any() })
                .collect::<Vec<_>>()
        });
    let ctx = Arc::new(Context {
        events: Events::new(client.clone(), NAME),
        client,
        config,
        changes,
        works: rt.informers.store::<Work>(),
        clusters: rt.informers.store::<Cluster>(),
        rbs: rt.informers.store::<ResourceBinding>(),
        crbs: rt.informers.store::<ClusterResourceBinding>(),
        pps: rt.informers.store::<PropagationPolicy>(),
        cpps: rt.informers.store::<ClusterPropagationPolicy>(),
    });
    controller.run(move |key| reconcile(key, ctx.clone())).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::edge::{FieldPattern, SyncPolicy};
    use flotilla_api::federation::flotilla::edge::{FieldChangeRecord, ObjectReference};

    fn spec(change: &str, fields: &[(&str, Option<Value>, Option<Value>)]) -> EdgeChangeSpec {
        EdgeChangeSpec {
            cluster: "edge-1".into(),
            object: ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
                uid: "u".into(),
            },
            work_name: Some("web-deployment".into()),
            change: change.into(),
            fields: fields.iter().map(|(p, o, n)| FieldChangeRecord { path: p.to_string(), old: o.clone(), new: n.clone() }).collect(),
            manager: Some("kubectl".into()),
            first_seen: "t1".into(),
            last_seen: "t1".into(),
        }
    }

    fn desired(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "labels": {"v": "1"}},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
    }

    fn settings(policy: SyncPolicy, fields: Option<&[&str]>) -> SyncSettings {
        SyncSettings { policy, edge_wins: fields.map(|f| f.iter().map(|p| FieldPattern::parse(p).unwrap()).collect()) }
    }

    const IMAGE: &str = "spec.template.spec.containers[0].image";

    fn edits() -> EdgeChangeSpec {
        spec(change_kind::MODIFIED, &[("spec.replicas", Some(json!(2)), Some(json!(5))), (IMAGE, Some(json!("nginx:1.27")), Some(json!("nginx:1.28")))])
    }

    #[test]
    fn control_plane_wins_reverts_every_field_it_does_not_already_want() {
        // The control plane moved to the edge's image meanwhile: converged.
        let d = decide_change("r", &edits(), Some(&desired(2, "nginx:1.28")), &settings(SyncPolicy::ControlPlaneWins, None), None);
        assert_eq!(d.status.phase, phase::DECIDED);
        assert_eq!(d.paths_with(outcome::REVERTED), ["spec.replicas"]);
        assert_eq!(d.paths_with(outcome::CONVERGED), [IMAGE]);
        assert!(d.adopt.is_empty() && !d.adopt_deletion);
        assert!(d.status.message.contains("1 reverted"), "{}", d.status.message);
    }

    #[test]
    fn edge_wins_adopts_the_listed_fields_and_reverts_the_rest() {
        let s = settings(SyncPolicy::EdgeWins, Some(&["spec.replicas"]));
        // The control plane changed the image meanwhile (three-way: another field, both kept).
        let d =
            decide_change("r", &spec(change_kind::MODIFIED, &[("spec.replicas", Some(json!(2)), Some(json!(5)))]), Some(&desired(2, "nginx:1.29")), &s, None);
        assert_eq!(d.paths_with(outcome::ADOPTED), ["spec.replicas"]);
        assert_eq!(d.adopt, vec![EdgeOperation { path: "spec.replicas".into(), op: "replace".into(), value: Some(json!(5)), source: "r".into() }]);
        let d = decide_change("r", &edits(), Some(&desired(3, "nginx:1.27")), &s, None);
        assert_eq!(d.paths_with(outcome::REVERTED), [IMAGE]);
        assert!(d.status.fields[0].over_control_plane, "the control plane changed replicas too, and lost");
        // Carried once the Work holds 5 replicas.
        assert!(!carried(&d, Some(&desired(3, "nginx:1.27"))));
        assert!(carried(&d, Some(&desired(5, "nginx:1.27"))));
    }

    #[test]
    fn manual_holds_until_resolved_either_way() {
        let s = settings(SyncPolicy::Manual, None);
        let d = decide_change("r", &edits(), Some(&desired(2, "nginx:1.27")), &s, None);
        assert_eq!(d.status.phase, phase::CONFLICT);
        assert_eq!(d.paths_with(outcome::CONFLICT).len(), 2);
        assert!(d.status.message.contains("flotilla edge resolve deployment/web -n shop --cluster edge-1"), "{}", d.status.message);
        let keep_edge = decide_change("r", &edits(), Some(&desired(2, "nginx:1.27")), &s, Some(KEEP_EDGE));
        assert_eq!((keep_edge.status.phase.as_str(), keep_edge.adopt.len()), (phase::DECIDED, 2));
        let keep_cp = decide_change("r", &edits(), Some(&desired(2, "nginx:1.27")), &s, Some(KEEP_CONTROL_PLANE));
        assert_eq!(keep_cp.paths_with(outcome::REVERTED).len(), 2);
    }

    #[test]
    fn deletions_are_recreated_dropped_or_held_and_born_objects_listed() {
        let deleted = spec(change_kind::DELETED, &[]);
        let cp = decide_change("r", &deleted, Some(&desired(2, "a")), &SyncSettings::default(), None);
        assert_eq!(cp.paths_with(outcome::REVERTED), [""]);
        let edge = decide_change("r", &deleted, Some(&desired(2, "a")), &settings(SyncPolicy::EdgeWins, None), None);
        assert!(edge.adopt_deletion && carried(&edge, None) && !carried(&edge, Some(&desired(2, "a"))));
        // A list of fields does not cover the whole object: the deletion is reverted.
        let listed = decide_change("r", &deleted, Some(&desired(2, "a")), &settings(SyncPolicy::EdgeWins, Some(&["spec.replicas"])), None);
        assert!(!listed.adopt_deletion);
        assert_eq!(decide_change("r", &deleted, Some(&desired(2, "a")), &settings(SyncPolicy::Manual, None), None).status.phase, phase::CONFLICT);
        let born = decide_change("r", &spec(change_kind::CREATED, &[]), None, &SyncSettings::default(), None);
        assert_eq!(born.status.phase, phase::LISTED);
        assert!(born.status.message.contains("flotilla promote deployment/web -n shop --cluster edge-1"), "{}", born.status.message);
        let orphan = decide_change("r", &edits(), None, &settings(SyncPolicy::EdgeWins, None), None);
        assert_eq!(orphan.status.phase, phase::DECIDED);
        assert!(orphan.status.message.contains("tombstone"));
    }

    #[test]
    fn secret_values_are_never_adopted() {
        let mut s = spec(change_kind::MODIFIED, &[("data.password", Some(json!("sha256:aa")), Some(json!("sha256:bb")))]);
        s.object = ObjectReference { api_version: "v1".into(), kind: "Secret".into(), namespace: Some("shop".into()), name: "db".into(), uid: String::new() };
        let d = decide_change("r", &s, Some(&json!({"data": {"password": "sha256:aa"}})), &settings(SyncPolicy::EdgeWins, None), None);
        assert_eq!(d.paths_with(outcome::REVERTED), ["data.password"]);
        assert!(d.adopt.is_empty());
    }

    #[test]
    fn edge_overrides_merge_by_path_and_apply_after_everything_else() {
        let s = settings(SyncPolicy::EdgeWins, None);
        let d = decide_change("r1", &edits(), Some(&desired(2, "nginx:1.27")), &s, None);
        let mut spec = EdgeOverrideSpec::default();
        assert!(merge_override(&mut spec, "edge-1", &d));
        assert!(!merge_override(&mut spec, "edge-1", &d), "the same again changes nothing");
        let later = decide_change("r2", &spec_with_replicas(7), Some(&desired(5, "nginx:1.28")), &s, None);
        assert!(merge_override(&mut spec, "edge-1", &later));
        assert_eq!(spec.clusters[0].operations.len(), 2);
        let mut manifest = desired(2, "nginx:1.27");
        assert_eq!(apply_edge_override(&spec, "edge-1", &mut manifest), Ok(true));
        assert_eq!(manifest["spec"]["replicas"], 7);
        assert_eq!(manifest["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28");
        let mut other = desired(2, "nginx:1.27");
        assert_eq!(apply_edge_override(&spec, "edge-2", &mut other), Ok(true));
        assert_eq!(other, desired(2, "nginx:1.27"));
        let gone = decide_change("r3", &spec_deleted(), Some(&desired(2, "a")), &s, None);
        merge_override(&mut spec, "edge-2", &gone);
        assert_eq!(apply_edge_override(&spec, "edge-2", &mut other), Ok(false));
    }

    fn spec_with_replicas(n: i64) -> EdgeChangeSpec {
        spec(change_kind::MODIFIED, &[("spec.replicas", Some(json!(5)), Some(json!(n)))])
    }

    fn spec_deleted() -> EdgeChangeSpec {
        spec(change_kind::DELETED, &[])
    }
}
