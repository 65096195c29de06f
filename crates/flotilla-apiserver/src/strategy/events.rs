//! Events, core `v1` and `events.k8s.io/v1` (one stored object for both APIs, see
//! `storage`): selectable by the object they are about, reason, source and type.

use super::Strategy;

pub(super) struct CoreEvents;

impl Strategy for CoreEvents {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }
}

pub(super) struct Events;

impl Strategy for Events {
    /// kube-apiserver converts these to the core Event's fields (`regarding.name` is
    /// `involvedObject.name`); here they are read from the object in this API's shape.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "source",
            "type",
        ]
    }
}
