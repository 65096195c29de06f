//! `TaintToleration`: a NoSchedule or NoExecute taint not tolerated by
//! `placement.clusterTolerations` drops the cluster. A cluster already in `spec.clusters`
//! passes: taints stop new placement, they do not move what runs (eviction is the taint
//! manager's job).

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;
use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::{FilterContext, FilterPlugin, Verdict};
use crate::snapshot::cluster_name;

pub const NAME: &str = "TaintToleration";

#[derive(Debug)]
pub struct TaintToleration;

pub fn new() -> Arc<TaintToleration> {
    Arc::new(TaintToleration)
}

impl FilterPlugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        if ctx.binding.targets(cluster_name(cluster)) {
            return Verdict::Pass;
        }
        let tolerations: &[Toleration] = ctx.binding.placement().and_then(|p| p.cluster_tolerations.as_deref()).unwrap_or_default();
        let untolerated = cluster
            .spec
            .taints
            .iter()
            .flatten()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)));
        match untolerated {
            None => Verdict::Pass,
            Some(taint) => Verdict::Fail(format!("cluster(s) had untolerated taint {{{}}}", taint_string(taint))),
        }
    }
}

pub use flotilla_api::federation::karmada::cluster::tolerates;

/// `Taint.ToString`: `key=value:Effect`, or `key:Effect` without a value.
pub fn taint_string(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(value) if !value.is_empty() => format!("{}={}:{}", taint.key, value, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}
