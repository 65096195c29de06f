//! What the fuzz targets share: reading an input as `[document, patch]`, and where the real
//! server's JSON and merge patch deliberately differ from the RFCs (the same module the
//! property tests use).

#[path = "../../crates/flotilla-api/tests/patch_props/rfc.rs"]
pub mod rfc;

use serde_json::Value;

/// An input that is the JSON `[document, patch]`.
pub fn doc_and_patch(data: &[u8]) -> Option<(Value, Value)> {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return None };
    let [doc, patch] = <[Value; 2]>::try_from(pair).ok()?;
    Some((doc, patch))
}
