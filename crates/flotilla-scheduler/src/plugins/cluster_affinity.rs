//! `ClusterAffinity`: the cluster must match the affinity in force — `placement.clusterAffinity`,
//! or the `clusterAffinities` term being tried. Also a score plugin that scores 0 (as
//! upstream), so it shows in the explanation.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;

use super::{FilterContext, FilterPlugin, ScorePlugin, Verdict};
use crate::binding::BindingView;
use crate::placement::cluster_matches;

pub const NAME: &str = "ClusterAffinity";

#[derive(Debug)]
pub struct ClusterAffinity;

pub fn new() -> Arc<ClusterAffinity> {
    Arc::new(ClusterAffinity)
}

impl FilterPlugin for ClusterAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        match ctx.affinity {
            Some(affinity) if !cluster_matches(cluster, affinity) => Verdict::Fail("cluster(s) did not match the placement cluster affinity constraint".into()),
            _ => Verdict::Pass,
        }
    }
}

impl ScorePlugin for ClusterAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, _binding: &BindingView<'_>, _cluster: &Cluster) -> i64 {
        0
    }
}
