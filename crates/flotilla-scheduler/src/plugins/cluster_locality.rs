//! `ClusterLocality`: 100 for a cluster already in `spec.clusters`, else 0 — stickiness, so a
//! reschedule prefers where the workload runs.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;

use super::ScorePlugin;
use crate::binding::BindingView;
use crate::snapshot::cluster_name;

pub const NAME: &str = "ClusterLocality";

/// The highest score a plugin gives.
pub const MAX_SCORE: i64 = 100;

#[derive(Debug)]
pub struct ClusterLocality;

pub fn new() -> Arc<ClusterLocality> {
    Arc::new(ClusterLocality)
}

impl ScorePlugin for ClusterLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, binding: &BindingView<'_>, cluster: &Cluster) -> i64 {
        if binding.targets(cluster_name(cluster)) { MAX_SCORE } else { 0 }
    }
}
