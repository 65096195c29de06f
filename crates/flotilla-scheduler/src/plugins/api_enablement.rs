//! `APIEnablement`: the cluster must serve the binding's apiVersion and kind
//! (`status.apiEnablements`). A cluster already in `spec.clusters` always passes, so a member
//! whose API list is briefly incomplete never loses what it runs.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;

use super::{FilterContext, FilterPlugin, Verdict};
use crate::snapshot::cluster_name;

pub const NAME: &str = "APIEnablement";

#[derive(Debug)]
pub struct ApiEnablement;

pub fn new() -> Arc<ApiEnablement> {
    Arc::new(ApiEnablement)
}

impl FilterPlugin for ApiEnablement {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        if ctx.binding.targets(cluster_name(cluster)) {
            return Verdict::Pass;
        }
        let resource = &ctx.binding.spec.resource;
        let enabled = cluster
            .status
            .as_ref()
            .and_then(|s| s.api_enablements.as_ref())
            .into_iter()
            .flatten()
            .filter(|e| e.group_version == resource.api_version)
            .flat_map(|e| e.resources.iter().flatten())
            .any(|r| r.kind == resource.kind);
        if enabled { Verdict::Pass } else { Verdict::Fail("cluster(s) did not have the API resource".into()) }
    }
}
