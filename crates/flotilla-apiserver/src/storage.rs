//! How API objects sit in the store: key layout, encoding, and the continue token.
//!
//! Keys: `/registry/<group or "core">/<plural>/<namespace>/<name>` for namespaced resources and
//! `/registry/<group or "core">/<plural>/<name>` for cluster-scoped ones. The version is not in
//! the key: one object, served in every version of its resource. Values are the object's JSON
//! without `metadata.resourceVersion`, which is the store revision and is set on read.
//!
//! One resource is a view of another's storage, as on kube-apiserver: `events.k8s.io/v1`
//! Events are stored as core `v1` Events (under the core key, in core shape) and converted on
//! the way in and out ([`encode_for`], [`decode_for`]), so both APIs see the same objects with
//! the same resourceVersions.

use base64::Engine;
use bytes::Bytes;
use flotilla_store::{KeyValue, RangeRequest, Revision, Store, StoreError};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::resources::{Codec, ResourceInfo};

pub fn resource_prefix(info: &ResourceInfo) -> String {
    let group = if info.group.is_empty() || is_event_view(info) { "core" } else { info.group.as_str() };
    format!("/registry/{group}/{}/", info.plural)
}

pub fn list_prefix(info: &ResourceInfo, namespace: Option<&str>) -> String {
    match (info.namespaced, namespace) {
        (true, Some(ns)) => format!("{}{ns}/", resource_prefix(info)),
        _ => resource_prefix(info),
    }
}

pub fn object_key(info: &ResourceInfo, namespace: Option<&str>, name: &str) -> Bytes {
    match (info.namespaced, namespace) {
        (true, Some(ns)) => Bytes::from(format!("{}{ns}/{name}", resource_prefix(info))),
        _ => Bytes::from(format!("{}{name}", resource_prefix(info))),
    }
}

/// The object stored at a key, with its resourceVersion set from the revision.
pub fn decode(kv: &KeyValue) -> ApiResult<Value> {
    decode_at(&kv.value, kv.mod_revision)
}

pub fn decode_at(bytes: &[u8], revision: Revision) -> ApiResult<Value> {
    let mut obj: Value = serde_json::from_slice(bytes).map_err(|e| ApiError::internal(format!("stored object is not JSON: {e}")))?;
    meta::meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(revision.to_string()));
    Ok(obj)
}

/// The bytes to store: the object without its resourceVersion.
pub fn encode(obj: &Value) -> ApiResult<Bytes> {
    let mut obj = obj.clone();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    // Exactly the object's size: `Bytes::from(Vec)` keeps the Vec's spare capacity (the buffer
    // grows by doubling: up to twice the object) for as long as the store holds the value.
    serde_json::to_vec(&obj).map(|v| Bytes::from(v.into_boxed_slice())).map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))
}

/// An object of a served resource as stored at a key: [`decode`], then in the resource's own
/// shape when its storage is another resource's.
pub fn decode_for(info: &ResourceInfo, kv: &KeyValue) -> ApiResult<Value> {
    decode_at_for(info, &kv.value, kv.mod_revision)
}

pub fn decode_at_for(info: &ResourceInfo, bytes: &[u8], revision: Revision) -> ApiResult<Value> {
    let mut obj = decode_at(bytes, revision)?;
    if is_event_view(info) {
        event::core_to_events(&mut obj)?;
    }
    Ok(obj)
}

/// The bytes to store for an object of a served resource: in its storage resource's shape.
pub fn encode_for(info: &ResourceInfo, obj: &Value) -> ApiResult<Bytes> {
    if is_event_view(info) {
        let mut core = obj.clone();
        event::events_to_core(&mut core)?;
        return encode(&core);
    }
    encode(obj)
}

/// `events.k8s.io` Events: stored as core `v1` Events.
fn is_event_view(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

/// managedFields entries written through the other API of a shared storage, with their fields
/// named as this resource names them (`into_this`) or back as their own API names them.
/// kube-apiserver compares a write with each manager's fields in that manager's version, so a
/// change of `note` through events.k8s.io takes `message` from a core manager.
pub fn managed_fields_as(info: &ResourceInfo, mut entries: Vec<flotilla_api::managed::Entry>, into_this: bool) -> Vec<flotilla_api::managed::Entry> {
    let other = match (info.group.as_str(), info.plural.as_str()) {
        ("events.k8s.io", "events") => "v1",
        ("", "events") => "events.k8s.io/v1",
        _ => return entries,
    };
    // (this resource's name, the other's name) of each renamed field.
    let this_is_events = is_event_view(info);
    for e in entries.iter_mut().filter(|e| e.api_version == other) {
        e.fields = event::rename_fields(&e.fields, |name| {
            event::RENAMED.iter().find_map(|(events, core)| {
                let (this, theirs) = if this_is_events { (*events, *core) } else { (*core, *events) };
                if into_this { (name == theirs).then_some(this) } else { (name == this).then_some(theirs) }
            })
        });
    }
    entries
}
/// Where CRDs are stored.
pub const CRD_PREFIX: &str = "/registry/apiextensions.k8s.io/customresourcedefinitions/";

/// Every CRD in the store, oldest first, with its revision.
pub(crate) async fn load_crds(store: &dyn Store) -> Result<Vec<(Value, i64)>, StoreError> {
    let resp = store.range(RangeRequest::prefix(Bytes::from_static(CRD_PREFIX.as_bytes()))).await?;
    let mut out: Vec<(Value, i64)> = resp.kvs.iter().filter_map(|kv| decode(kv).ok().map(|v| (v, kv.mod_revision))).collect();
    // CRDs whose names were accepted keep them: they come first, then the oldest.
    let fresh = |v: &Value| {
        !v.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| cs.iter().any(|c| c["type"] == "NamesAccepted" && c["status"] == "True"))
    };
    out.sort_by(|a, b| {
        let ca = meta::meta_str(&a.0, "creationTimestamp").unwrap_or("");
        let cb = meta::meta_str(&b.0, "creationTimestamp").unwrap_or("");
        fresh(&a.0).cmp(&fresh(&b.0)).then_with(|| ca.cmp(cb)).then_with(|| meta::name(&a.0).cmp(meta::name(&b.0)))
    });
    Ok(out)
}

/// A custom object as read from storage: defaulted (and pruned) with its CRD's current schema,
/// so defaults added to the schema later show on objects stored before.
pub(crate) fn default_on_read(info: &ResourceInfo, obj: &mut Value) {
    if let Codec::Custom(s) = &info.codec {
        s.decode(obj);
    }
}

/// kube-apiserver's conversion between an `events.k8s.io/v1` Event and a core `v1` Event, on
/// their JSON: fields renamed, then each side's always-written fields as its encoder writes them.
mod event {
    use flotilla_api::managed::{FieldSet, PathElement};
    use serde_json::{Map, Value, json};

    use crate::error::{ApiError, ApiResult};

    /// (`events.k8s.io/v1` field, core `v1` field) where the names differ; `eventTime`,
    /// `series`, `related`, `action`, `reason`, `type` and `reportingInstance` keep theirs.
    pub const RENAMED: &[(&str, &str)] = &[
        ("note", "message"),
        ("regarding", "involvedObject"),
        ("reportingController", "reportingComponent"),
        ("deprecatedSource", "source"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
    ];

    /// `events.k8s.io/v1` fields its encoder leaves out when empty (core `v1` writes its
    /// reporting fields always, and `count` when not zero).
    const OMIT_EMPTY: &[&str] = &["note", "reportingController", "reportingInstance", "action", "reason", "type", "series", "related", "deprecatedCount"];

    fn object(obj: &mut Value) -> ApiResult<&mut Map<String, Value>> {
        obj.as_object_mut().ok_or_else(|| ApiError::internal("a stored Event is not an object"))
    }

    /// Move `from` to `to` (and drop a stale `to` when there is no `from`).
    fn rename(o: &mut Map<String, Value>, from: &str, to: &str) {
        match o.remove(from) {
            Some(v) => o.insert(to.to_owned(), v),
            None => o.remove(to),
        };
    }

    fn defaults(obj: &mut Value, group: &str) -> ApiResult<()> {
        flotilla_api::defaults::apply_defaults(group, "v1", "Event", obj).map_err(|e| ApiError::internal(format!("cannot convert an Event: {}", e.detail)))
    }

    /// A field set with its top-level fields renamed where `rename` names them anew.
    pub fn rename_fields(fields: &FieldSet, rename: impl Fn(&str) -> Option<&'static str>) -> FieldSet {
        let mut out = FieldSet::default();
        if fields.is_member() {
            out.set_member();
        }
        for (pe, sub) in fields.children() {
            let pe = match pe {
                PathElement::Field(name) => rename(name).map(|n| PathElement::Field(n.to_owned())).unwrap_or_else(|| pe.clone()),
                other => other.clone(),
            };
            out.attach(pe, sub.clone());
        }
        out
    }

    pub fn events_to_core(obj: &mut Value) -> ApiResult<()> {
        let o = object(obj)?;
        for (events, core) in RENAMED {
            rename(o, events, core);
        }
        o.insert("apiVersion".into(), json!("v1"));
        defaults(obj, "")
    }

    pub fn core_to_events(obj: &mut Value) -> ApiResult<()> {
        let o = object(obj)?;
        for (events, core) in RENAMED {
            rename(o, core, events);
        }
        for field in OMIT_EMPTY {
            if o.get(*field).is_some_and(|v| v.is_null() || v == "" || v == 0) {
                o.remove(*field);
            }
        }
        // A struct (corev1.ObjectReference), written even when empty.
        o.entry("regarding").or_insert_with(|| json!({}));
        o.insert("apiVersion".into(), json!("events.k8s.io/v1"));
        defaults(obj, "events.k8s.io")
    }
}

/// A list's continuation: the snapshot revision and the last key returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continue {
    pub revision: Revision,
    pub after_key: String,
}

impl Continue {
    pub fn encode(&self) -> String {
        let json = serde_json::json!({"v": "meta.k8s.io/v1", "rv": self.revision, "start": self.after_key});
        base64::engine::general_purpose::URL_SAFE.encode(json.to_string())
    }

    pub fn decode(token: &str, prefix: &str) -> ApiResult<Continue> {
        let bad = || ApiError::bad_request("continue key is not valid: the continue token could not be decoded");
        let raw =
            base64::engine::general_purpose::URL_SAFE.decode(token).or_else(|_| base64::engine::general_purpose::STANDARD.decode(token)).map_err(|_| bad())?;
        let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
        if v["v"] != "meta.k8s.io/v1" {
            return Err(bad());
        }
        let revision = v["rv"].as_i64().filter(|r| *r > 0).ok_or_else(bad)?;
        let after_key = v["start"].as_str().ok_or_else(bad)?.to_string();
        // A token must stay within the collection it was issued for.
        if !after_key.starts_with(prefix) || after_key.contains("/../") {
            return Err(ApiError::bad_request("continue key is not valid: the token does not belong to this collection"));
        }
        Ok(Continue { revision, after_key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_stay_in_their_collection() {
        let c = Continue { revision: 42, after_key: "/registry/core/configmaps/default/a".into() };
        let t = c.encode();
        assert_eq!(Continue::decode(&t, "/registry/core/configmaps/").unwrap(), c);
        assert!(Continue::decode(&t, "/registry/core/secrets/").is_err());
        assert!(Continue::decode("not-base64!", "/registry/").is_err());
        assert!(Continue::decode(&base64::engine::general_purpose::URL_SAFE.encode("{}"), "/").is_err());
    }
}
