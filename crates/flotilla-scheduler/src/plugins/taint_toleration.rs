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
        let tolerations: &[Toleration] =
            ctx.binding.placement().and_then(|p| p.cluster_tolerations.as_deref()).unwrap_or_default();
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

/// `Toleration.ToleratesTaint`: matching effect (empty = any), key (empty = any), and value
/// (`Equal`, the default) or any value (`Exists`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// `Taint.ToString`: `key=value:Effect`, or `key:Effect` without a value.
pub fn taint_string(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(value) if !value.is_empty() => format!("{}={}:{}", taint.key, value, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}
