//! ReplicaSets: selectable by their observed replicas.

use super::Strategy;

pub(super) struct ReplicaSets;

impl Strategy for ReplicaSets {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }
}
