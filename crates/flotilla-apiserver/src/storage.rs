//! How API objects sit in the store: key layout, encoding, and the continue token.
//!
//! Keys: `/registry/<group or "core">/<plural>/<namespace>/<name>` for namespaced resources and
//! `/registry/<group or "core">/<plural>/<name>` for cluster-scoped ones. The version is not in
//! the key: one object, served in every version of its resource. Values are the object's JSON
//! without `metadata.resourceVersion`, which is the store revision and is set on read.

use base64::Engine;
use bytes::Bytes;
use flotilla_store::{KeyValue, Revision};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::resources::ResourceInfo;

pub fn resource_prefix(info: &ResourceInfo) -> String {
    let group = if info.group.is_empty() { "core" } else { info.group.as_str() };
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
        let raw = base64::engine::general_purpose::URL_SAFE
            .decode(token)
            .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
            .map_err(|_| bad())?;
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
