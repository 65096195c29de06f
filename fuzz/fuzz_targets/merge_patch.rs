//! Input: the JSON `[document, patch]`. Our merge patch never panics and agrees with the
//! `json-patch` crate's RFC 7386 merge unless the patch has lists holding objects with `null`
//! members (where the real server prunes them).
#![no_main]

#[path = "../../crates/flotilla-api/tests/patch_props/rfc.rs"]
#[allow(dead_code)]
mod rfc;

use flotilla_api::patch::merge_patch;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return };
    let [doc, patch] = <[Value; 2]>::try_from(pair).unwrap_or([Value::Null, Value::Null]);
    let ours = merge_patch(&doc, &patch);
    if !patch.is_object() || rfc::merge_patch_prunes_lists(&patch) {
        return;
    }
    let mut theirs = doc.clone();
    json_patch::merge(&mut theirs, &patch);
    assert_eq!(ours, theirs, "{patch} onto {doc}");
});
