//! The metrics every controller exports, under controller-runtime's names so that the
//! dashboards and alerts written for Karmada's and kubebuilder's controllers read them unchanged:
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | `controller`, `result` (`success`, `error`, `requeue_after`) | reconciles done |
//! | `controller_runtime_reconcile_errors_total` | `controller` | reconciles that failed |
//! | `controller_runtime_terminal_reconcile_errors_total` | `controller` | failures not retried |
//! | `controller_runtime_reconcile_time_seconds` | `controller` | histogram of reconcile durations |
//! | `controller_runtime_max_concurrent_reconciles` | `controller` | workers configured |
//! | `controller_runtime_active_workers` | `controller` | workers reconciling now |
//! | `workqueue_depth` | `controller`, `name` | keys waiting |
//! | `workqueue_adds_total` | `controller`, `name` | keys added |
//! | `workqueue_retries_total` | `controller`, `name` | keys re-added after a failure |
//! | `workqueue_queue_duration_seconds` | `controller`, `name` | how long a key waited before a worker took it |
//! | `workqueue_work_duration_seconds` | `controller`, `name` | how long a worker held a key |
//! | `flotilla_events_total` | `component`, `outcome` (`written`, `counted`, `throttled`, `dropped`, `failed`) | Events recorded ([`crate::events`]) |
//!
//! One registry per process, as controller-runtime has: the API server's `/metrics` appends
//! [`render`]'s text to its own.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub controller: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub component: String,
    pub outcome: String,
}

/// What became of one Event handed to a recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOutcome {
    /// Written as a new Event.
    Written,
    /// A repeat: the count of the Event already written went up.
    Counted,
    /// Dropped by the spam filter (the object had its burst).
    Throttled,
    /// Dropped: the recorder's queue was full.
    Dropped,
    /// The write failed.
    Failed,
}

impl EventOutcome {
    fn label(self) -> &'static str {
        match self {
            EventOutcome::Written => "written",
            EventOutcome::Counted => "counted",
            EventOutcome::Throttled => "throttled",
            EventOutcome::Dropped => "dropped",
            EventOutcome::Failed => "failed",
        }
    }
}

/// The outcome label of one reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    Success,
    Error,
    RequeueAfter,
}

impl ReconcileResult {
    const ALL: [ReconcileResult; 3] = [ReconcileResult::Success, ReconcileResult::Error, ReconcileResult::RequeueAfter];

    fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

/// Every controller's metrics (the families; one label set per controller).
pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram>,
    work_duration: Family<QueueLabels, Histogram>,
    events: Family<EventLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// controller-runtime's buckets for reconcile durations (seconds).
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let reconcile_total = Family::<ResultLabels, Counter>::default();
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        let terminal_errors = Family::<ControllerLabels, Counter>::default();
        let reconcile_time = Family::<ControllerLabels, Histogram>::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS));
        let max_concurrent = Family::<ControllerLabels, Gauge>::default();
        let active_workers = Family::<ControllerLabels, Gauge>::default();
        let depth = Family::<QueueLabels, Gauge>::default();
        let adds = Family::<QueueLabels, Counter>::default();
        let retries = Family::<QueueLabels, Counter>::default();
        // client-go's workqueue buckets: 10ns to 1000s by factors of 10.
        let queue_duration = Family::<QueueLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(10e-9, 10.0, 12)));
        let work_duration = Family::<QueueLabels, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(10e-9, 10.0, 12)));
        registry.register("controller_runtime_reconcile", "Total number of reconciliations per controller", reconcile_total.clone());
        registry.register("controller_runtime_reconcile_errors", "Total number of reconciliation errors per controller", reconcile_errors.clone());
        registry.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            terminal_errors.clone(),
        );
        registry.register("controller_runtime_reconcile_time_seconds", "Length of time per reconciliation per controller", reconcile_time.clone());
        registry.register("controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller", max_concurrent.clone());
        registry.register("controller_runtime_active_workers", "Number of currently used workers per controller", active_workers.clone());
        registry.register("workqueue_depth", "Current depth of workqueue", depth.clone());
        registry.register("workqueue_adds", "Total number of adds handled by workqueue", adds.clone());
        registry.register("workqueue_retries", "Total number of retries handled by workqueue", retries.clone());
        registry.register("workqueue_queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested", queue_duration.clone());
        registry.register("workqueue_work_duration_seconds", "How long in seconds processing an item from workqueue takes", work_duration.clone());
        let events = Family::<EventLabels, Counter>::default();
        registry.register("flotilla_events", "Events handed to a recorder, by what became of them", events.clone());
        Metrics {
            registry,
            reconcile_total,
            reconcile_errors,
            terminal_errors,
            reconcile_time,
            max_concurrent,
            active_workers,
            depth,
            adds,
            retries,
            queue_duration,
            work_duration,
            events,
        }
    }

    /// Count what became of one Event of `component`.
    pub fn event(&self, component: &str, outcome: EventOutcome) {
        self.events.get_or_create(&EventLabels { component: component.into(), outcome: outcome.label().into() }).inc();
    }

    /// The handles of one controller, its series present (at zero) from now on.
    pub fn controller(&self, name: &str, workers: usize) -> ControllerMetrics {
        let c = ControllerLabels { controller: name.to_string() };
        let results =
            ReconcileResult::ALL.map(|r| self.reconcile_total.get_or_create(&ResultLabels { controller: name.into(), result: r.label().into() }).clone());
        let max = self.max_concurrent.get_or_create(&c).clone();
        max.set(i64::try_from(workers).unwrap_or(i64::MAX));
        ControllerMetrics {
            results,
            errors: self.reconcile_errors.get_or_create(&c).clone(),
            terminal_errors: self.terminal_errors.get_or_create(&c).clone(),
            time: self.reconcile_time.get_or_create(&c).clone(),
            active: self.active_workers.get_or_create(&c).clone(),
        }
    }

    /// The handles of one controller's queue.
    pub fn queue(&self, controller: &str) -> QueueMetrics {
        let l = QueueLabels { controller: controller.to_string(), name: controller.to_string() };
        QueueMetrics {
            depth: self.depth.get_or_create(&l).clone(),
            adds: self.adds.get_or_create(&l).clone(),
            retries: self.retries.get_or_create(&l).clone(),
            queue_duration: self.queue_duration.get_or_create(&l).clone(),
            work_duration: self.work_duration.get_or_create(&l).clone(),
        }
    }

    /// The OpenMetrics text of every series, without the closing `# EOF` line (the caller
    /// that joins it to others ends the exposition).
    pub fn render_series(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.registry);
        out
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's controller metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// The OpenMetrics text of the process's controller metrics (no `# EOF`).
pub fn render() -> String {
    METRICS.render_series()
}

/// One controller's reconcile metrics.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    results: [Counter; 3],
    errors: Counter,
    terminal_errors: Counter,
    time: Histogram,
    active: Gauge,
}

impl ControllerMetrics {
    pub(crate) fn observe(&self, result: ReconcileResult, terminal: bool, seconds: f64) {
        let i = ReconcileResult::ALL.iter().position(|r| *r == result).unwrap_or(0);
        self.results[i].inc();
        if result == ReconcileResult::Error {
            self.errors.inc();
            if terminal {
                self.terminal_errors.inc();
            }
        }
        self.time.observe(seconds);
    }

    pub(crate) fn active(&self) -> &Gauge {
        &self.active
    }
}

/// One queue's metrics.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    pub(crate) depth: Gauge,
    pub(crate) adds: Counter,
    pub(crate) retries: Counter,
    pub(crate) queue_duration: Histogram,
    pub(crate) work_duration: Histogram,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_has_its_series_from_the_start_under_controller_runtimes_names() {
        let m = metrics();
        let c = m.controller("metrics-test", 3);
        let _q = m.queue("metrics-test");
        c.observe(ReconcileResult::Error, true, 0.02);
        let text = render();
        for line in [
            "controller_runtime_reconcile_total{controller=\"metrics-test\",result=\"success\"} 0",
            "controller_runtime_reconcile_total{controller=\"metrics-test\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"metrics-test\"} 1",
            "controller_runtime_terminal_reconcile_errors_total{controller=\"metrics-test\"} 1",
            "controller_runtime_max_concurrent_reconciles{controller=\"metrics-test\"} 3",
            "workqueue_depth{controller=\"metrics-test\",name=\"metrics-test\"} 0",
            "workqueue_adds_total{controller=\"metrics-test\",name=\"metrics-test\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(text.contains("controller_runtime_reconcile_time_seconds_bucket{le=\"0.025\",controller=\"metrics-test\"} 1"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}
