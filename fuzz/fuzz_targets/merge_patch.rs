//! Input: the JSON `[document, patch]`. Our merge patch never panics and agrees with the
//! `json-patch` crate's RFC 7386 merge unless the patch has lists holding objects with `null`
//! members (where the real server prunes them).
#![no_main]

use flotilla_api::patch::merge_patch;
use flotilla_fuzz::{doc_and_patch, rfc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((doc, patch)) = doc_and_patch(data) else { return };
    let ours = merge_patch(&doc, &patch);
    if !patch.is_object() || rfc::merge_patch_prunes_lists(&patch) {
        return;
    }
    let mut theirs = doc.clone();
    json_patch::merge(&mut theirs, &patch);
    assert_eq!(ours, theirs, "{patch} onto {doc}");
});
