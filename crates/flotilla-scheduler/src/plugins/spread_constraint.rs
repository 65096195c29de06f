//! `SpreadConstraint`: spreading by provider, region or zone needs the cluster to have that
//! field.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::SpreadByField;

use super::{FilterContext, FilterPlugin, Verdict};
use crate::placement::{cluster_provider, cluster_region, cluster_zones};

pub const NAME: &str = "SpreadConstraint";

#[derive(Debug)]
pub struct SpreadConstraint;

pub fn new() -> Arc<SpreadConstraint> {
    Arc::new(SpreadConstraint)
}

impl FilterPlugin for SpreadConstraint {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        let constraints = ctx.binding.placement().and_then(|p| p.spread_constraints.as_deref()).unwrap_or_default();
        for constraint in constraints {
            let missing = match constraint.spread_by_field {
                Some(SpreadByField::Provider) if cluster_provider(cluster).is_none() => "provider",
                Some(SpreadByField::Region) if cluster_region(cluster).is_none() => "region",
                Some(SpreadByField::Zone) if cluster_zones(cluster).is_empty() => "zones",
                _ => continue,
            };
            return Verdict::Fail(format!("cluster(s) did not have {missing} property"));
        }
        Verdict::Pass
    }
}
