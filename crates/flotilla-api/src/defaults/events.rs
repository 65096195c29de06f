//! Events, `events.k8s.io/v1` and core `v1` (and `coordination.k8s.io/v1` Leases, which have no
//! defaults).

use serde_json::{Value, json};

use super::zero_values::{Object, always_written};

/// An Event always writes the fields it keeps for the core `v1` Event's sake.
pub(crate) fn default_event(event: &mut Object) {
    always_written(event, "deprecatedSource", json!({}));
    always_written(event, "deprecatedFirstTimestamp", Value::Null);
    always_written(event, "deprecatedLastTimestamp", Value::Null);
}

/// A core `v1` Event always writes its time stamps (`null` when unset), its reporting fields and
/// its source and involvedObject (structs, which the encoder never leaves out).
pub(crate) fn default_core_event(event: &mut Object) {
    always_written(event, "involvedObject", json!({}));
    always_written(event, "source", json!({}));
    always_written(event, "firstTimestamp", Value::Null);
    always_written(event, "lastTimestamp", Value::Null);
    always_written(event, "eventTime", Value::Null);
    always_written(event, "reportingComponent", json!(""));
    always_written(event, "reportingInstance", json!(""));
}
