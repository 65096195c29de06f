//! Input: one byte choosing a kind, then the JSON `[document, patch]`. Strategic merge patch
//! never panics or hangs, and its result is already in decoded form (no directive keys, no
//! `null` members), so decoding it again changes nothing; and where neither side has a list
//! nor the patch a `$` directive (nor the document a `null`), and the patch touches no field
//! whose strategy is `replace` or `retainKeys` (a PodDisruptionBudget's `spec.selector`), it
//! equals a JSON merge patch.
#![no_main]

use flotilla_api::patch::{PatchSchema, SchemaNode, decode_nulls, merge_patch, strategic_merge_patch};
use flotilla_fuzz::doc_and_patch;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const KINDS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "ServiceAccount"),
    ("policy/v1", "PodDisruptionBudget"),
    ("apps/v1", "ControllerRevision"),
    ("v1", "Node"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&which, json)) = data.split_first() else { return };
    let (api_version, kind) = KINDS[which as usize % KINDS.len()];
    let schema = PatchSchema::builtin().kind_for(api_version, kind).expect("a built-in kind");
    let Some((doc, patch)) = doc_and_patch(json) else { return };
    if let Ok(out) = strategic_merge_patch(&doc, &patch, Some(schema)) {
        assert_eq!(decode_nulls(out.clone(), schema), out, "{patch} onto {doc}");
        if patch.is_object() && no_lists_or_directives(&patch, true) && no_lists_or_directives(&doc, false) && merges_everywhere(&patch, schema) {
            assert_eq!(out, merge_patch(&doc, &patch), "a plain {patch} onto {doc}: strategic and merge patch differ");
        }
    }
});

/// No arrays and no `$`-keys anywhere below `v`; no `null`s either unless `nulls` allows them.
fn no_lists_or_directives(v: &Value, nulls: bool) -> bool {
    match v {
        Value::Array(_) => false,
        Value::Null => nulls,
        Value::Object(m) => m.iter().all(|(k, v)| !k.starts_with('$') && no_lists_or_directives(v, nulls)),
        _ => true,
    }
}

/// No key of `patch` names a field the schema replaces (`replace`) or prunes (`retainKeys`)
/// rather than merges.
fn merges_everywhere(patch: &Value, schema: SchemaNode<'_>) -> bool {
    let Value::Object(m) = patch else { return true };
    m.iter().all(|(k, v)| match schema.field(k) {
        Ok((node, meta)) => !meta.patch_strategy.contains("replace") && !meta.patch_strategy.contains("retainKeys") && merges_everywhere(v, node),
        Err(_) => schema.child(k).is_none_or(|node| merges_everywhere(v, node)),
    })
}
