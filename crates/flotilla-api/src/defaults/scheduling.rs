//! `scheduling.k8s.io/v1` PriorityClasses.

use super::zero_values::{Object, default_value, omit_empty};

pub(crate) fn default_priority_class(class: &mut Object) {
    default_value(class, "preemptionPolicy", "PreemptLowerPriority");
    omit_empty(class, &["globalDefault", "description"]);
}
