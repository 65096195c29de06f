//! Field ownership as kube-apiserver records it in `metadata.managedFields`, and server-side
//! apply on top of it.
//!
//! Every write names a manager (the `fieldManager` parameter, else the User-Agent's product).
//! A create, update or patch (`operation: Update`) takes the fields it changed from whoever
//! owned them; fields it removed are owned by nobody. An apply (`operation: Apply`) owns
//! exactly the fields of its configuration: changing a field another manager owns is a
//! conflict unless forced, and fields it applied before but no longer applies are removed from
//! the object when nobody else owns them.
//!
//! A create is compared with the kind's zero value as Go writes it (`data/zero-values.json`):
//! a node Go always writes (a struct, a field without `omitempty`) is not "added" by a create,
//! which decides where `".": {}` appears, exactly as on a real cluster.

pub mod fieldset;
pub mod typed;

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

pub use fieldset::{FieldSet, PathElement, path_string};
pub use typed::Ty;

use crate::patch::PatchSchema;

const ZERO_VALUES: &str = include_str!("../../data/zero-values.json");
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Entries are one per manager, operation and subresource (and API version, for updates).
    fn same_owner(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// How kube-apiserver names the manager in a conflict.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// Parse `metadata.managedFields`.
pub fn decode(managed: Option<&Value>) -> Result<Vec<Entry>, String> {
    let Some(list) = managed.filter(|v| !v.is_null()) else { return Ok(Vec::new()) };
    let list = list.as_array().ok_or("managedFields must be a list")?;
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let operation = match e.get("operation").and_then(Value::as_str) {
                Some("Apply") => Operation::Apply,
                Some("Update") => Operation::Update,
                other => return Err(format!("managedFields[{i}].operation: unsupported value {other:?}: supported values: \"Apply\", \"Update\"")),
            };
            if !matches!(e.get("fieldsType").and_then(Value::as_str), None | Some("FieldsV1")) {
                return Err(format!("managedFields[{i}].fieldsType: unsupported value: supported values: \"FieldsV1\""));
            }
            let fields = match e.get("fieldsV1") {
                Some(v) if !v.is_null() => FieldSet::from_fields_v1(v).map_err(|m| format!("managedFields[{i}].fieldsV1: {m}"))?,
                _ => FieldSet::default(),
            };
            Ok(Entry {
                manager: s("manager"),
                operation,
                api_version: s("apiVersion"),
                time: e.get("time").and_then(Value::as_str).map(String::from),
                subresource: s("subresource"),
                fields,
            })
        })
        .collect()
}

/// `metadata.managedFields` in kube-apiserver's order (applies first, then by time, manager,
/// API version, subresource); `None` when nobody owns anything.
pub fn encode(entries: &[Entry]) -> Option<Value> {
    let mut sorted: Vec<&Entry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(|a, b| {
        (a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(b.operation, &b.time, &b.manager, &b.api_version, &b.subresource))
    });
    Some(Value::Array(
        sorted
            .into_iter()
            .map(|e| {
                let mut m = Map::new();
                m.insert("manager".into(), json!(e.manager));
                m.insert("operation".into(), json!(e.operation.as_str()));
                m.insert("apiVersion".into(), json!(e.api_version));
                if let Some(t) = &e.time {
                    m.insert("time".into(), json!(t));
                }
                m.insert("fieldsType".into(), json!("FieldsV1"));
                m.insert("fieldsV1".into(), e.fields.to_fields_v1());
                if !e.subresource.is_empty() {
                    m.insert("subresource".into(), json!(e.subresource));
                }
                Value::Object(m)
            })
            .collect(),
    ))
}

/// How objects of a kind are walked: the recorded schema of a built-in kind; otherwise
/// deduced from the values, with `metadata` typed as ObjectMeta.
pub fn object_type(group: &str, version: &str, kind: &str) -> Ty<'static> {
    let schema = PatchSchema::builtin();
    match schema.kind(group, version, kind) {
        Some(node) => Ty::of(Some(node)),
        None => Ty::Object { metadata: schema.definition(OBJECT_META) },
    }
}

/// The kind's zero value as the field manager sees it (an empty object for kinds Go does not
/// know: custom resources).
pub fn zero_value(group: &str, version: &str, kind: &str) -> Value {
    static ZEROS: OnceLock<HashMap<String, Value>> = OnceLock::new();
    let zeros = ZEROS.get_or_init(|| serde_json::from_str(ZERO_VALUES).unwrap_or_else(|e| panic!("data/zero-values.json: {e}")));
    let group = if group.is_empty() { "core" } else { group };
    zeros.get(&format!("{group}/{version}/{kind}")).cloned().unwrap_or_else(|| json!({}))
}

/// Fields nobody owns: identity and server-maintained metadata.
fn stripped() -> &'static FieldSet {
    static SET: OnceLock<FieldSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut set = FieldSet::default();
        for f in ["apiVersion", "kind"] {
            set.child_mut(PathElement::Field(f.into())).set_member();
        }
        let meta = set.child_mut(PathElement::Field("metadata".into()));
        meta.set_member();
        for f in ["name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation", "managedFields", "resourceVersion"] {
            meta.child_mut(PathElement::Field(f.into())).set_member();
        }
        set
    })
}

/// Who writes, where.
#[derive(Clone, Debug)]
pub struct Writer<'a> {
    pub manager: &'a str,
    /// The version the object is written in (`apps/v1`).
    pub api_version: &'a str,
    /// `status` for the status subresource; empty for the object itself.
    pub subresource: &'a str,
    /// The time to record (RFC 3339, seconds).
    pub now: &'a str,
}

/// What a write may not own: `status` when writing the object of a kind with a status
/// subresource; everything but metadata and status when writing that subresource.
pub fn reset_fields(subresource: &str, has_status: bool, object: &Value) -> FieldSet {
    let mut set = FieldSet::default();
    match subresource {
        // `/approval` (CertificateSigningRequests) writes conditions only: status as ownership goes.
        "status" | "approval" => {
            for k in object.as_object().into_iter().flat_map(|m| m.keys()) {
                if k != "metadata" && k != "status" {
                    set.child_mut(PathElement::Field(k.clone())).set_member();
                }
            }
        }
        "" if has_status => set.child_mut(PathElement::Field("status".into())).set_member(),
        _ => {}
    }
    set
}

fn owned_changes(c: typed::Comparison, reset: &FieldSet) -> typed::Comparison {
    let clean = |s: FieldSet| s.difference(stripped()).recursive_difference(reset);
    typed::Comparison { added: clean(c.added), modified: clean(c.modified), removed: clean(c.removed) }
}

fn entry_for<'e>(entries: &'e mut Vec<Entry>, me: &Entry) -> &'e mut Entry {
    match entries.iter().position(|e| e.same_owner(me)) {
        Some(i) => &mut entries[i],
        None => {
            entries.push(me.clone());
            entries.last_mut().expect("just pushed")
        }
    }
}

/// The managed fields after a create, update or patch from `old` (None: a create) to `new`.
/// `base` is what the object's managedFields were before this write — the request's own when
/// it sets them, else the stored ones.
pub fn record_update(old: Option<&Value>, new: &Value, zero: &Value, ty: Ty, mut base: Vec<Entry>, w: &Writer, reset: &FieldSet) -> Result<Vec<Entry>, String> {
    let old = old.unwrap_or(zero);
    let c = owned_changes(typed::compare(Some(old), Some(new), ty)?, reset);
    let changed = c.added.union(&c.modified);
    let me = Entry {
        manager: w.manager.into(),
        operation: Operation::Update,
        api_version: w.api_version.into(),
        time: None,
        subresource: w.subresource.into(),
        fields: FieldSet::default(),
    };
    for e in base.iter_mut().filter(|e| !e.same_owner(&me)) {
        e.fields = e.fields.difference(&changed).difference(&c.removed);
    }
    let mine = entry_for(&mut base, &me);
    mine.fields = mine.fields.difference(&c.removed).union(&changed);
    // The time moves when this write changed something.
    if !changed.is_empty() {
        mine.time = Some(w.now.to_string());
    }
    base.retain(|e| !e.fields.is_empty());
    Ok(base)
}

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    /// How kube-apiserver names the manager (`"kubectl-client-side-apply" using v1`).
    pub manager: String,
    /// `.data.a`
    pub field: String,
}

#[derive(Debug, PartialEq)]
pub enum ApplyError {
    /// The conflicts, and the fields they are on.
    Conflicts(Vec<Conflict>, FieldSet),
    Invalid(String),
}

/// The annotation `kubectl apply` (client-side) keeps its last configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Fields a server-side apply may take over without `force` because a client-side apply set
/// them: those of the object's last-applied configuration whose live value is still the one
/// it applied (kube-apiserver lets `kubectl apply --server-side` succeed over `kubectl
/// apply` this way). None without the annotation.
pub fn allowed_from_last_applied(live: &Value, ty: Ty) -> Option<FieldSet> {
    let text = live.pointer("/metadata/annotations")?.get(LAST_APPLIED_ANNOTATION)?.as_str()?;
    let last: Value = serde_json::from_str(text).ok()?;
    let set = typed::to_set(&last, ty).ok()?;
    let merged = typed::merge(live, &last, ty).ok()?;
    let drifted = typed::compare(Some(live), Some(&merged), ty).ok()?;
    Some(set.difference(&drifted.modified).difference(&drifted.added))
}

impl From<String> for ApplyError {
    fn from(s: String) -> Self {
        ApplyError::Invalid(s)
    }
}

/// kube-apiserver's message for a refused apply.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", c.manager, c.field);
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        lines.extend(conflicts.iter().filter(|c| c.manager == m).map(|c| format!("- {}", c.field)));
    }
    format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
}

/// Server-side apply of `config` by `w` to `live` (None: the object does not exist yet).
/// Returns the object to store (managedFields not yet set) and the new managed fields.
#[allow(clippy::too_many_arguments)] // the inputs of one apply, each used once
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    zero: &Value,
    ty: Ty,
    mut entries: Vec<Entry>,
    w: &Writer,
    force: bool,
    reset: &FieldSet,
) -> Result<(Value, Vec<Entry>), ApplyError> {
    let base = live.unwrap_or(zero);
    let config_set = typed::to_set(config, ty)?.difference(stripped()).recursive_difference(reset);
    let mut merged = typed::merge(base, config, ty)?;
    let c = owned_changes(typed::compare(Some(base), Some(&merged), ty)?, reset);
    let changed = c.added.union(&c.modified);
    let me = Entry {
        manager: w.manager.into(),
        operation: Operation::Apply,
        api_version: w.api_version.into(),
        time: Some(w.now.into()),
        subresource: w.subresource.into(),
        fields: config_set.clone(),
    };
    let mut conflicts = Vec::new();
    let mut conflicting = FieldSet::default();
    for e in entries.iter().filter(|e| !e.same_owner(&me)) {
        let shared = e.fields.intersection(&changed);
        for p in shared.paths() {
            conflicts.push(Conflict { manager: e.describe(), field: path_string(&p) });
        }
        conflicting = conflicting.union(&shared);
    }
    if !conflicts.is_empty() && !force {
        return Err(ApplyError::Conflicts(conflicts, conflicting));
    }
    for e in entries.iter_mut().filter(|e| !e.same_owner(&me)) {
        e.fields = e.fields.difference(&changed);
    }
    // What this manager applied before and applies no more goes, unless someone else owns it.
    let last = entries.iter().find(|e| e.same_owner(&me)).map(|e| e.fields.clone()).unwrap_or_default();
    let keep = entries.iter().filter(|e| !e.same_owner(&me)).fold(config_set.clone(), |acc, e| acc.union(&e.fields));
    let gone = last.difference(&config_set).difference(&keep);
    typed::remove(&mut merged, &gone, &keep, ty)?;
    let removed = owned_changes(typed::compare(Some(base), Some(&merged), ty)?, reset).removed;
    for e in entries.iter_mut() {
        e.fields = e.fields.difference(&removed);
    }
    // The time moves when the apply changed the object.
    let previous = entries.iter().position(|e| e.same_owner(&me));
    let mut me = me;
    if live.is_some() && merged == *base {
        me.time = previous.and_then(|i| entries[i].time.clone());
    }
    match previous {
        Some(i) => entries[i] = me,
        None => entries.push(me),
    }
    entries.retain(|e| !e.fields.is_empty());
    Ok((merged, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer<'a>(manager: &'a str) -> Writer<'a> {
        Writer { manager, api_version: "v1", subresource: "", now: "2026-11-30T12:00:00Z" }
    }

    fn cm_type() -> Ty<'static> {
        object_type("", "v1", "ConfigMap")
    }

    fn fields(entries: &[Entry], manager: &str) -> Value {
        entries.iter().find(|e| e.manager == manager).map(|e| e.fields.to_fields_v1()).unwrap_or(Value::Null)
    }

    #[test]
    fn a_create_owns_what_it_wrote_and_a_later_update_takes_what_it_changes() {
        let zero = zero_value("", "v1", "ConfigMap");
        let created = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d", "uid": "u"}, "data": {"a": "1", "b": "2"}});
        let e = record_update(None, &created, &zero, cm_type(), vec![], &writer("kubectl-create"), &FieldSet::default()).unwrap();
        assert_eq!(fields(&e, "kubectl-create"), json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}}));
        let mut patched = created.clone();
        patched["data"] = json!({"b": "3"});
        patched["metadata"]["labels"] = json!({"x": "y"});
        let e = record_update(Some(&created), &patched, &zero, cm_type(), e, &writer("kubectl-patch"), &FieldSet::default()).unwrap();
        assert_eq!(fields(&e, "kubectl-create"), json!({"f:data": {}}));
        assert_eq!(fields(&e, "kubectl-patch"), json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}}));
    }

    #[test]
    fn applies_conflict_unless_forced_and_prune_what_they_stop_applying() {
        let zero = zero_value("", "v1", "ConfigMap");
        let cfg = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
        let (obj, e) = apply(None, &cfg(json!({"a": "1", "b": "2"})), &zero, cm_type(), vec![], &writer("m1"), false, &FieldSet::default()).unwrap();
        assert_eq!(fields(&e, "m1"), json!({"f:data": {"f:a": {}, "f:b": {}}}));
        // Another manager: a disjoint field is fine, a shared one with another value is not.
        let (obj, e) = apply(Some(&obj), &cfg(json!({"c": "3"})), &zero, cm_type(), e, &writer("m2"), false, &FieldSet::default()).unwrap();
        let err = apply(Some(&obj), &cfg(json!({"a": "9"})), &zero, cm_type(), e.clone(), &writer("m2"), false, &FieldSet::default()).unwrap_err();
        let ApplyError::Conflicts(c, _) = err else { panic!("{err:?}") };
        assert_eq!(conflict_message(&c), r#"Apply failed with 1 conflict: conflict with "m1": .data.a"#);
        // The same value is shared ownership, not a conflict.
        let (obj, e) = apply(Some(&obj), &cfg(json!({"a": "1", "c": "3"})), &zero, cm_type(), e, &writer("m2"), false, &FieldSet::default()).unwrap();
        assert_eq!(fields(&e, "m1"), json!({"f:data": {"f:a": {}, "f:b": {}}}));
        // Forced: m2 takes b; m1 then stops applying a (m2 still owns it: it stays) and b.
        let (obj, e) = apply(Some(&obj), &cfg(json!({"a": "1", "b": "7", "c": "3"})), &zero, cm_type(), e, &writer("m2"), true, &FieldSet::default()).unwrap();
        assert_eq!(fields(&e, "m1"), json!({"f:data": {"f:a": {}}}));
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let (obj, e) = apply(Some(&obj), &bare, &zero, cm_type(), e, &writer("m1"), false, &FieldSet::default()).unwrap();
        assert_eq!(obj["data"], json!({"a": "1", "b": "7", "c": "3"}));
        assert!(e.iter().all(|x| x.manager == "m2"));
        // m2 stops applying c: it goes from the object.
        let (obj, _) = apply(Some(&obj), &cfg(json!({"a": "1", "b": "7"})), &zero, cm_type(), e, &writer("m2"), false, &FieldSet::default()).unwrap();
        assert_eq!(obj["data"], json!({"a": "1", "b": "7"}));
    }

    #[test]
    fn a_client_side_apply_can_be_taken_over_where_it_still_holds() {
        let live = json!({"metadata": {"annotations": {LAST_APPLIED_ANNOTATION: r#"{"data":{"a":"1","b":"2"}}"#}}, "data": {"a": "1", "b": "changed"}});
        let allowed = allowed_from_last_applied(&live, cm_type()).unwrap();
        assert_eq!(allowed.to_fields_v1(), json!({"f:data": {"f:a": {}}}));
        assert!(allowed_from_last_applied(&json!({"data": {}}), cm_type()).is_none());
    }

    #[test]
    fn managed_fields_round_trip_in_kube_apiservers_order() {
        let wire = json!([
            {"manager": "m1", "operation": "Apply", "apiVersion": "v1", "time": "2026-11-30T12:00:01Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T12:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}, "f:b": {}}}},
            {"manager": "kcm", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T12:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:x": {}}}, "subresource": "status"}
        ]);
        let entries = decode(Some(&wire)).unwrap();
        let mut shuffled = entries.clone();
        shuffled.reverse();
        let expected = json!([wire[0], wire[2], wire[1]]);
        assert_eq!(encode(&shuffled), Some(expected));
        assert!(decode(Some(&json!([{"operation": "Merge"}]))).is_err());
    }
}
