//! `events.k8s.io/v1` Events (and `coordination.k8s.io/v1` Leases, which have no defaults).

use serde_json::{Value, json};

use super::zero_values::{Object, always_written};

/// An Event always writes the fields it keeps for the core `v1` Event's sake.
pub(crate) fn default_event(event: &mut Object) {
    always_written(event, "deprecatedSource", json!({}));
    always_written(event, "deprecatedFirstTimestamp", Value::Null);
    always_written(event, "deprecatedLastTimestamp", Value::Null);
}
