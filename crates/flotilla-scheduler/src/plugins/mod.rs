//! Scheduler plugins: each is a name, a constructor and one line in [`registry`].
//!
//! Filter plugins keep or drop a cluster ([`Verdict`]); score plugins rank the kept ones
//! (0..=100 each, summed). The verdict strings are Karmada's, so the "0/N clusters are
//! available: …" message reads the same.

pub mod api_enablement;
pub mod cluster_affinity;
pub mod cluster_eviction;
pub mod cluster_locality;
pub mod spread_constraint;
pub mod taint_toleration;
pub mod workload_affinity;

use std::fmt::Debug;
use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::ClusterAffinity;

use crate::binding::BindingView;
use crate::snapshot::GroupedWorkload;

/// What a filter plugin says about one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The cluster fits.
    Pass,
    /// The cluster does not fit, with Karmada's reason (e.g. `cluster(s) had untolerated taint
    /// {key:NoSchedule}`).
    Fail(String),
}

impl Verdict {
    pub fn is_pass(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
}

/// What filters see: the binding, the cluster affinity in force for this pass (the
/// `clusterAffinity`, or the `clusterAffinities` term being tried), and the workloads of the
/// snapshot's affinity groups.
#[derive(Clone, Copy, Debug)]
pub struct FilterContext<'a> {
    pub binding: &'a BindingView<'a>,
    pub affinity: Option<&'a ClusterAffinity>,
    pub workloads: &'a [GroupedWorkload],
}

/// A plugin that keeps or drops clusters.
pub trait FilterPlugin: Debug + Send + Sync {
    fn name(&self) -> &'static str;
    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict;
}

/// A plugin that ranks the clusters that passed every filter.
pub trait ScorePlugin: Debug + Send + Sync {
    fn name(&self) -> &'static str;
    /// A score in 0..=100.
    fn score(&self, binding: &BindingView<'_>, cluster: &Cluster) -> i64;
}

/// The plugins one scheduler runs, in order. A value, not a global: build it with
/// [`registry`] and drop plugins with [`Registry::without`].
#[derive(Clone, Debug, Default)]
pub struct Registry {
    filters: Vec<Arc<dyn FilterPlugin>>,
    scores: Vec<Arc<dyn ScorePlugin>>,
}

impl Registry {
    /// Adds a filter plugin (run after the ones before it).
    pub fn filter(mut self, plugin: Arc<dyn FilterPlugin>) -> Registry {
        self.filters.push(plugin);
        self
    }

    /// Adds a score plugin.
    pub fn score(mut self, plugin: Arc<dyn ScorePlugin>) -> Registry {
        self.scores.push(plugin);
        self
    }

    /// The registry without the plugin of this name (Karmada's `--plugins=-Name`).
    pub fn without(mut self, name: &str) -> Registry {
        self.filters.retain(|p| p.name() != name);
        self.scores.retain(|p| p.name() != name);
        self
    }

    /// Whether a plugin of this name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.filters.iter().any(|p| p.name() == name) || self.scores.iter().any(|p| p.name() == name)
    }

    pub fn filters(&self) -> &[Arc<dyn FilterPlugin>] {
        &self.filters
    }

    pub fn scores(&self) -> &[Arc<dyn ScorePlugin>] {
        &self.scores
    }
}

/// The in-tree plugins with the WorkloadAffinity gate's two (Karmada registers them only then).
pub fn registry_with_workload_affinity() -> Registry {
    registry().filter(workload_affinity::anti_affinity()).filter(workload_affinity::affinity())
}

/// Every in-tree plugin, in Karmada's order (`--plugins=*`).
pub fn registry() -> Registry {
    Registry::default()
        .filter(api_enablement::new())
        .filter(taint_toleration::new())
        .filter(cluster_affinity::new())
        .filter(spread_constraint::new())
        .filter(cluster_eviction::new())
        .score(cluster_locality::new())
        .score(cluster_affinity::new())
}
