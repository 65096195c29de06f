//! The runner's Prometheus metrics, named `flotilla_scheduler_<what>_<unit>`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Outcome of one scheduling attempt (`scheduled`, `unschedulable` or `error`) and Karmada's
/// schedule type (`ReconcileSchedule`, `ScaleSchedule`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub result: String,
    pub schedule_type: String,
}

/// Why a binding entered the queue: a `binding` or `cluster_binding` event, or `cluster_changed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IncomingLabels {
    pub event: String,
}

/// The runner's metrics; clones share their values.
#[derive(Clone, Debug)]
pub struct Metrics {
    pub attempts: Family<AttemptLabels, Counter>,
    pub e2e_duration: Histogram,
    pub algorithm_duration: Histogram,
    pub incoming: Family<IncomingLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            attempts: Family::default(),
            e2e_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            algorithm_duration: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
            incoming: Family::default(),
        }
    }
}

impl Metrics {
    /// Registers the metrics (clones share the same values).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("flotilla_scheduler_schedule_attempts", "Scheduling attempts by result and schedule type", self.attempts.clone());
        registry.register("flotilla_scheduler_e2e_scheduling_duration_seconds", "Time to schedule a binding, writes included", self.e2e_duration.clone());
        registry.register(
            "flotilla_scheduler_scheduling_algorithm_duration_seconds",
            "Time spent in the pure scheduling algorithm",
            self.algorithm_duration.clone(),
        );
        registry.register("flotilla_scheduler_queue_incoming_bindings", "Bindings added to the scheduling queue, by event", self.incoming.clone());
    }

    pub(crate) fn incoming(&self, event: &str) {
        self.incoming.get_or_create(&IncomingLabels { event: event.into() }).inc();
    }

    pub(crate) fn attempt(&self, result: &str, schedule_type: &str) {
        self.attempts.get_or_create(&AttemptLabels { result: result.into(), schedule_type: schedule_type.into() }).inc();
    }
}
