//! Jobs: selectable by their succeeded pods.

use super::Strategy;

pub(super) struct Jobs;

impl Strategy for Jobs {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.successful"]
    }
}
