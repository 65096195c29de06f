//! Input: the JSON `[document, patch]`. Our JSON patch never panics and agrees with the
//! `json-patch` crate (RFC 6902) operation by operation, except where the real server is
//! deliberately lenient or strict (see `rfc.rs`).
#![no_main]

#[path = "../../crates/flotilla-api/tests/patch_props/rfc.rs"]
#[allow(dead_code)]
mod rfc;

use flotilla_api::patch::json_patch;
use libfuzzer_sys::fuzz_target;
use rfc::{Rfc6902, rfc6902_expectation};
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Array(pair)) = serde_json::from_slice::<Value>(data) else { return };
    let [doc, patch] = <[Value; 2]>::try_from(pair).unwrap_or([Value::Null, Value::Null]);
    // The whole patch at once: never panics.
    let _ = json_patch(&doc, &patch);
    let (Value::Object(_), Value::Array(ops)) = (&doc, &patch) else { return };
    let mut ours = doc.clone();
    for op in ops {
        let mine = json_patch(&ours, &json!([op]));
        let mut theirs = ours.clone();
        let rfc_ok = serde_json::from_value::<json_patch::Patch>(json!([op]))
            .is_ok_and(|p| json_patch::patch(&mut theirs, &p).is_ok());
        match (mine, rfc_ok) {
            (Ok(next), true) => {
                assert_eq!(next, theirs, "op {op} on {ours}");
                ours = next;
            }
            (Err(_), false) => return,
            (Ok(_), false) if rfc6902_expectation(&ours, op) == Rfc6902::ServerLenient => return,
            (Err(_), true) if rfc6902_expectation(&ours, op) == Rfc6902::ServerStricter => return,
            (mine, _) => panic!("op {op} on {ours}: ours {mine:?}, RFC ok={rfc_ok}"),
        }
    }
});
