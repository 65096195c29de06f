//! `labelsOverrider` / `annotationsOverrider`: keys added to, replaced in or removed from
//! `metadata.labels` / `metadata.annotations`.

use serde_json::{Map, Value};

use super::patch::PatchOp;
use crate::federation::karmada::policy::{LabelAnnotationOverrider, OverriderOperator};
use crate::interpreter::unstructured;

/// The operations one overrider makes on the map `metadata.<field>` of `obj`: `add` sets every
/// key (creating the map if needed, which is why it takes `obj` mutably, as Karmada does);
/// `replace` and `remove` touch only keys the map already has. Keys are escaped for the
/// pointer as Karmada escapes them (`/` only; `~` cannot occur in a valid key).
pub(crate) fn patches(obj: &mut Value, field: &str, overrider: &LabelAnnotationOverrider) -> Vec<PatchOp> {
    let path = ["metadata", field];
    let mut ops = Vec::new();
    for (key, value) in overrider.value.iter().flatten() {
        match overrider.operator {
            OverriderOperator::Remove | OverriderOperator::Replace => {
                let current = unstructured::nested_string_map(obj, &path).ok().flatten();
                if !current.is_some_and(|m| m.contains_key(key)) {
                    continue;
                }
            }
            OverriderOperator::Add => {
                let exists = unstructured::nested_string_map(obj, &path).ok().flatten().is_some();
                if !exists && unstructured::set(obj, &path, Value::Object(Map::new())).is_err() {
                    continue;
                }
            }
        }
        let pointer = format!("/metadata/{field}/{}", key.replace('/', "~1"));
        ops.push(PatchOp::new(overrider.operator, pointer, Value::from(value.as_str())));
    }
    ops
}
