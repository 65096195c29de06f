//! Endpoints: served, and deprecated in favour of EndpointSlices.

use super::Strategy;

pub(super) struct Endpoints;

impl Strategy for Endpoints {
    fn deprecation(&self) -> Option<&'static str> {
        Some("299 - \"v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice\"")
    }
}
