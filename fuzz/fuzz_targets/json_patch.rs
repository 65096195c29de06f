//! Input: the JSON `[document, patch]`. Our JSON patch never panics and agrees with the
//! `json-patch` crate (RFC 6902) operation by operation, except where the real server is
//! deliberately lenient or strict (see `rfc.rs`).
#![no_main]

use flotilla_api::patch::json_patch;
use flotilla_fuzz::doc_and_patch;
use flotilla_fuzz::rfc::{Rfc6902, rfc6902_expectation};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Some((doc, patch)) = doc_and_patch(data) else { return };
    // The whole patch at once: never panics.
    let _ = json_patch(&doc, &patch);
    let (Value::Object(_), Value::Array(ops)) = (&doc, &patch) else { return };
    let mut ours = doc.clone();
    for op in ops {
        let mine = json_patch(&ours, &json!([op]));
        let mut theirs = ours.clone();
        let rfc_ok = serde_json::from_value::<json_patch::Patch>(json!([op])).is_ok_and(|p| json_patch::patch(&mut theirs, &p).is_ok());
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
