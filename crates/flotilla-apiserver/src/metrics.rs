//! Prometheus metrics of the API server, named `flotilla_<component>_<what>_<unit>`.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub verb: String,
    pub resource: String,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<LatencyLabels, Histogram>,
    pub open_watches: Gauge,
    pub store_revision: Gauge<i64, AtomicI64>,
    pub store_commit: Histogram,
    pub rejected_overload: Counter,
    /// Work running on the blocking pool (expensive patches).
    pub heavy_in_flight: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<LatencyLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16)));
        let open_watches = Gauge::default();
        let store_revision = Gauge::<i64, AtomicI64>::default();
        let store_commit = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let rejected_overload = Counter::default();
        let heavy_in_flight = Gauge::default();
        registry.register("flotilla_apiserver_requests", "API requests by verb, resource and HTTP code", requests.clone());
        registry.register("flotilla_apiserver_request_duration_seconds", "API request latency (watches: until the stream opens)", latency.clone());
        registry.register("flotilla_apiserver_open_watches", "Watch streams currently open", open_watches.clone());
        registry.register("flotilla_store_revision", "The store's current revision", store_revision.clone());
        registry.register("flotilla_store_commit_duration_seconds", "Time to commit one write to the store, as the API server sees it", store_commit.clone());
        registry.register("flotilla_apiserver_rejected_overload", "Requests answered 429 because too many were in flight", rejected_overload.clone());
        registry.register(
            "flotilla_apiserver_heavy_requests_in_flight",
            "Requests whose expensive part (a JSON or strategic merge patch) runs on the blocking pool now",
            heavy_in_flight.clone(),
        );
        Metrics { registry, requests, latency, open_watches, store_revision, store_commit, rejected_overload, heavy_in_flight }
    }

    /// The exposition: the API server's series, then every other source's
    /// ([`add_source`]), then `# EOF`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.registry);
        for source in SOURCES.read().iter() {
            out.push_str(&source());
        }
        let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        out
    }
}

/// Other components of the process whose series `/metrics` also serves (the controllers').
static SOURCES: parking_lot::RwLock<Vec<fn() -> String>> = parking_lot::RwLock::new(Vec::new());

/// Serve `source`'s OpenMetrics series (without `# EOF`) on every API server's `/metrics` in
/// this process, after the server's own. Adding the same source twice changes nothing.
pub fn add_source(source: fn() -> String) {
    let mut sources = SOURCES.write();
    if !sources.iter().any(|s| std::ptr::fn_addr_eq(*s, source)) {
        sources.push(source);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
