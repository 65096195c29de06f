//! `ClusterEviction`: a cluster the binding is being evicted from
//! (`spec.gracefulEvictionTasks`) is not scheduled back onto.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;

use super::{FilterContext, FilterPlugin, Verdict};
use crate::snapshot::cluster_name;

pub const NAME: &str = "ClusterEviction";

#[derive(Debug)]
pub struct ClusterEviction;

pub fn new() -> Arc<ClusterEviction> {
    Arc::new(ClusterEviction)
}

impl FilterPlugin for ClusterEviction {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        let name = cluster_name(cluster);
        let evicting = ctx.binding.spec.graceful_eviction_tasks.iter().flatten().any(|t| t.from_cluster == name);
        if evicting { Verdict::Fail("cluster(s) is in the process of eviction".into()) } else { Verdict::Pass }
    }
}
