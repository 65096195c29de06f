//! `WorkloadAffinity` and `WorkloadAntiAffinity` (Karmada v1.17+, the WorkloadAffinity gate):
//! hard rules between the ResourceBindings of one namespace that share a group
//! (`spec.workloadAffinityGroups`, `<labelKey>=<value>` from the template).
//!
//! - Affinity: a cluster passes only if every other scheduled binding of the affinity group
//!   targets it. The first of a group (no other scheduled one) goes anywhere.
//! - Anti-affinity: a cluster fails if another binding of the anti-affinity group targets it.
//!
//! A cluster the binding already targets always passes, so a scheduled group is never pulled
//! apart by a rescheduling. The grouped workloads come from the snapshot
//! ([`Snapshot::with_workloads`](crate::snapshot::Snapshot::with_workloads)).

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::work::WorkloadAffinityGroups;

use super::{FilterContext, FilterPlugin, Verdict};
use crate::snapshot::{GroupedWorkload, cluster_name};

pub const AFFINITY: &str = "WorkloadAffinity";
pub const ANTI_AFFINITY: &str = "WorkloadAntiAffinity";

#[derive(Debug)]
pub struct WorkloadAffinity;

#[derive(Debug)]
pub struct WorkloadAntiAffinity;

pub fn affinity() -> Arc<WorkloadAffinity> {
    Arc::new(WorkloadAffinity)
}

pub fn anti_affinity() -> Arc<WorkloadAntiAffinity> {
    Arc::new(WorkloadAntiAffinity)
}

/// The other bindings of the binding's namespace in `group` (by `which` of their groups).
fn peers<'a>(ctx: &'a FilterContext<'_>, group: &'a str, which: fn(&GroupedWorkload) -> Option<&str>) -> impl Iterator<Item = &'a GroupedWorkload> + 'a {
    let namespace = ctx.binding.namespace.unwrap_or_default();
    let name = ctx.binding.name;
    ctx.workloads.iter().filter(move |w| w.namespace == namespace && w.name != name && which(w) == Some(group))
}

/// The binding's group picked by `pick`, when the rule applies to `cluster`: the binding has
/// such a group and does not target the cluster already.
fn applies<'a>(ctx: &FilterContext<'a>, cluster: &str, pick: fn(&WorkloadAffinityGroups) -> Option<&str>) -> Option<&'a str> {
    let group = ctx.binding.spec.workload_affinity_groups.as_ref().and_then(pick).filter(|g| !g.is_empty())?;
    let targeted = ctx.binding.spec.clusters.iter().flatten().any(|c| c.name == cluster);
    (!targeted).then_some(group)
}

impl FilterPlugin for WorkloadAffinity {
    fn name(&self) -> &'static str {
        AFFINITY
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        let name = cluster_name(cluster);
        let Some(group) = applies(ctx, name, |g| g.affinity_group.as_deref()) else { return Verdict::Pass };
        let apart = peers(ctx, group, |w| w.affinity_group.as_deref()).filter(|w| !w.clusters.is_empty()).any(|w| !w.clusters.iter().any(|c| c == name));
        if apart { Verdict::Fail("ResourceBinding with the same affinity group does not target this cluster".into()) } else { Verdict::Pass }
    }
}

impl FilterPlugin for WorkloadAntiAffinity {
    fn name(&self) -> &'static str {
        ANTI_AFFINITY
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        let name = cluster_name(cluster);
        let Some(group) = applies(ctx, name, |g| g.anti_affinity_group.as_deref()) else { return Verdict::Pass };
        let taken = peers(ctx, group, |w| w.anti_affinity_group.as_deref()).any(|w| w.clusters.iter().any(|c| c == name));
        if taken { Verdict::Fail("cluster already has workload with the same anti-affinity group".into()) } else { Verdict::Pass }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::{BindingKind, BindingView};
    use flotilla_api::federation::karmada::cluster::ClusterSpec;
    use flotilla_api::federation::karmada::work::{ResourceBindingSpec, TargetCluster};

    fn workload(ns: &str, name: &str, affinity: Option<&str>, anti: Option<&str>, clusters: &[&str]) -> GroupedWorkload {
        GroupedWorkload {
            namespace: ns.into(),
            name: name.into(),
            affinity_group: affinity.map(str::to_string),
            anti_affinity_group: anti.map(str::to_string),
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn verdicts(spec: &ResourceBindingSpec, workloads: &[GroupedWorkload], plugin: &dyn FilterPlugin) -> Vec<bool> {
        let view = BindingView { kind: BindingKind::ResourceBinding, namespace: Some("ns"), name: "me", uid: "", spec, status: None };
        let ctx = FilterContext { binding: &view, affinity: None, workloads };
        ["m1", "m2", "m3"].iter().map(|c| plugin.filter(&ctx, &Cluster::new(c, ClusterSpec::default())).is_pass()).collect()
    }

    fn grouped(affinity: Option<&str>, anti: Option<&str>, clusters: &[&str]) -> ResourceBindingSpec {
        ResourceBindingSpec {
            workload_affinity_groups: Some(WorkloadAffinityGroups {
                affinity_group: affinity.map(str::to_string),
                anti_affinity_group: anti.map(str::to_string),
            }),
            clusters: Some(clusters.iter().map(|c| TargetCluster { name: c.to_string(), ..Default::default() }).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn affinity_keeps_the_clusters_every_scheduled_peer_targets() {
        let me = grouped(Some("app=shop"), None, &[]);
        // The first of its group goes anywhere; an unscheduled peer does not count.
        assert_eq!(verdicts(&me, &[workload("ns", "other", Some("app=shop"), None, &[])], &WorkloadAffinity), [true, true, true]);
        let peers = [workload("ns", "a", Some("app=shop"), None, &["m1", "m2"]), workload("ns", "b", Some("app=shop"), None, &["m2", "m3"])];
        assert_eq!(verdicts(&me, &peers, &WorkloadAffinity), [false, true, false]);
        // Other namespaces, other groups and the binding itself do not count.
        let elsewhere = [
            workload("other-ns", "a", Some("app=shop"), None, &["m1"]),
            workload("ns", "b", Some("app=blog"), None, &["m1"]),
            workload("ns", "me", Some("app=shop"), None, &["m1"]),
        ];
        assert_eq!(verdicts(&me, &elsewhere, &WorkloadAffinity), [true, true, true]);
        // A cluster it already targets stays.
        assert_eq!(verdicts(&grouped(Some("app=shop"), None, &["m3"]), &peers, &WorkloadAffinity), [false, true, true]);
    }

    #[test]
    fn anti_affinity_avoids_the_clusters_of_its_group() {
        let me = grouped(None, Some("tier=db"), &[]);
        let peers = [workload("ns", "a", None, Some("tier=db"), &["m1"]), workload("ns", "b", None, Some("tier=web"), &["m2"])];
        assert_eq!(verdicts(&me, &peers, &WorkloadAntiAffinity), [false, true, true]);
        assert_eq!(verdicts(&grouped(None, None, &[]), &peers, &WorkloadAntiAffinity), [true, true, true], "no group, no rule");
    }
}
