//! When the runner acts, as Karmada's scheduler decides it: which bindings are its own, which
//! watch events enqueue a binding, and what a dequeued binding needs (`doScheduleBinding`).

use std::collections::BTreeMap;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::{
    CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, ClusterAffinity, DEFAULT_SCHEDULER_NAME, PROPAGATION_POLICY_PERMANENT_ID_LABEL, Placement,
    ReplicaSchedulingType,
};
use flotilla_api::federation::karmada::work::ResourceBindingSpec;

use crate::binding::BindingView;
use crate::placement::{cluster_matches, scheduling_type};
use crate::snapshot::{Snapshot, is_deleting};

/// Annotation holding the placement (JSON) the binding was last scheduled with.
pub const APPLIED_PLACEMENT_ANNOTATION: &str = "policy.karmada.io/applied-placement";
/// Label of bindings created by something other than a propagation policy (e.g. MCS).
pub const MANAGED_BY_LABEL: &str = "binding.karmada.io/managed-by";

/// Karmada's binding event filter: this scheduler's name (empty means `default-scheduler`),
/// scheduling not suspended, and claimed by a policy (or `binding.karmada.io/managed-by`).
pub fn is_ours(labels: Option<&BTreeMap<String, String>>, spec: &ResourceBindingSpec, scheduler_name: &str) -> bool {
    let name = spec.scheduler_name.as_deref().filter(|n| !n.is_empty()).unwrap_or(DEFAULT_SCHEDULER_NAME);
    let suspended = spec.suspension.as_ref().and_then(|s| s.scheduling).unwrap_or(false);
    let has = |key: &str| labels.and_then(|l| l.get(key)).is_some_and(|v| !v.is_empty());
    let claimed = has(PROPAGATION_POLICY_PERMANENT_ID_LABEL) || has(CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL) || has(MANAGED_BY_LABEL);
    name == scheduler_name && !suspended && claimed
}

/// Why a binding is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The placement differs from the applied one (or was never applied).
    PlacementChanged,
    /// `spec.replicas` no longer matches `spec.clusters`.
    ReplicasChanged,
    /// `spec.rescheduleTriggeredAt` is newer than the last schedule.
    RescheduleRequested,
    /// Duplicated and non-workload bindings are re-run on every change (new clusters join).
    AlwaysReschedule,
    /// A target cluster is being deleted (or is gone).
    TargetClusterDeleting,
}

impl Trigger {
    /// Karmada's schedule type (its metrics label).
    pub fn schedule_type(self) -> &'static str {
        match self {
            Trigger::ReplicasChanged => "ScaleSchedule",
            _ => "ReconcileSchedule",
        }
    }
}

/// What a dequeued binding needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Schedule(Trigger),
    /// Nothing to schedule; record `schedulerObservedGeneration = generation`.
    ObserveGeneration,
    Nothing,
}

/// `doScheduleBinding`'s checks, in upstream's order.
pub fn decide(binding: &BindingView<'_>, generation: Option<i64>, applied_placement: Option<&str>, snapshot: &Snapshot) -> Decision {
    let Some(placement) = binding.placement() else {
        return Decision::Schedule(Trigger::PlacementChanged);
    };
    if placement_changed(placement, applied_placement, binding.observed_affinity_name()) {
        return Decision::Schedule(Trigger::PlacementChanged);
    }
    if replicas_changed(binding.spec) {
        return Decision::Schedule(Trigger::ReplicasChanged);
    }
    if binding.reschedule_required() {
        return Decision::Schedule(Trigger::RescheduleRequested);
    }
    if binding.replicas() == 0 || scheduling_type(placement) == ReplicaSchedulingType::Duplicated {
        return Decision::Schedule(Trigger::AlwaysReschedule);
    }
    let target_going = binding.target_clusters().iter().any(|t| snapshot.get(&t.name).is_none_or(is_deleting));
    if target_going {
        return Decision::Schedule(Trigger::TargetClusterDeleting);
    }
    let observed = binding.status.and_then(|s| s.scheduler_observed_generation);
    if generation.is_some() && observed != generation { Decision::ObserveGeneration } else { Decision::Nothing }
}

/// `placementChanged`: never applied; or a part other than `clusterAffinities` differs; or the
/// observed `clusterAffinities` term changed or disappeared. An annotation that does not parse
/// counts as unchanged, as upstream.
pub fn placement_changed(placement: &Placement, applied: Option<&str>, observed_affinity: Option<&str>) -> bool {
    let Some(applied) = applied.filter(|a| !a.is_empty()) else {
        return true;
    };
    let Ok(applied) = serde_json::from_str::<Placement>(applied) else {
        return false;
    };
    if *placement == applied {
        return false;
    }
    if placement.cluster_affinity != applied.cluster_affinity
        || placement.cluster_tolerations != applied.cluster_tolerations
        || placement.spread_constraints != applied.spread_constraints
        || placement.replica_scheduling != applied.replica_scheduling
    {
        return true;
    }
    let Some(observed) = observed_affinity else {
        return true;
    };
    let term = |p: &Placement| p.cluster_affinities.iter().flatten().find(|t| t.affinity_name == observed).cloned();
    match (term(placement), term(&applied)) {
        (Some(now), Some(before)) => now != before,
        _ => true,
    }
}

/// `IsBindingReplicasChanged`: Duplicated and some cluster's replicas differ from
/// `spec.replicas`, or Divided and their sum does.
pub fn replicas_changed(spec: &ResourceBindingSpec) -> bool {
    let Some(placement) = spec.placement.as_ref().filter(|p| p.replica_scheduling.is_some()) else {
        return false;
    };
    let replicas = spec.replicas.unwrap_or(0);
    let clusters = spec.clusters.as_deref().unwrap_or_default();
    match scheduling_type(placement) {
        ReplicaSchedulingType::Duplicated => clusters.iter().any(|t| t.replicas.unwrap_or(0) != replicas),
        ReplicaSchedulingType::Divided => clusters.iter().map(|t| t.replicas.unwrap_or(0)).sum::<i32>() != replicas,
    }
}

/// Whether a cluster changed in a way that can change placement: deletion started, labels
/// changed, the spec changed (generation; taints, region, …), or the served APIs changed.
pub fn cluster_changed(old: &Cluster, new: &Cluster) -> bool {
    (old.metadata.deletion_timestamp.is_none() && new.metadata.deletion_timestamp.is_some())
        || old.metadata.labels != new.metadata.labels
        || old.metadata.generation != new.metadata.generation
        || old.spec != new.spec
        // A kind the member starts (or stops) serving: a binding waiting for a CRD to reach it
        // fits now (Karmada's APIEnablement filter reads this status).
        || old.status.as_ref().and_then(|s| s.api_enablements.as_ref()) != new.status.as_ref().and_then(|s| s.api_enablements.as_ref())
}

/// Whether a cluster change concerns a binding: its affinity in force (the `clusterAffinity`,
/// or the observed `clusterAffinities` term) is absent or matches the cluster before or after.
/// Bindings not yet observing a term are always concerned.
pub fn concerns(binding: &BindingView<'_>, old: &Cluster, new: &Cluster) -> bool {
    let Some(placement) = binding.placement() else { return true };
    let affinity: Option<&ClusterAffinity> = match placement.cluster_affinities.as_deref().filter(|t| !t.is_empty()) {
        Some(terms) => {
            let observed = binding.observed_affinity_name();
            match terms.iter().find(|t| Some(t.affinity_name.as_str()) == observed) {
                Some(term) => Some(&term.affinity),
                None => return true,
            }
        }
        None => placement.cluster_affinity.as_ref(),
    };
    affinity.is_none_or(|a| cluster_matches(old, a) || cluster_matches(new, a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::cluster::ClusterSpec;
    use flotilla_api::federation::karmada::policy::{ClusterAffinityTerm, ReplicaSchedulingStrategy};
    use flotilla_api::federation::karmada::work::{ResourceBinding, ResourceBindingStatus, TargetCluster};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn names(list: &[&str]) -> ClusterAffinity {
        ClusterAffinity { cluster_names: Some(list.iter().map(|s| s.to_string()).collect()), ..Default::default() }
    }

    fn divided() -> Option<ReplicaSchedulingStrategy> {
        Some(ReplicaSchedulingStrategy { replica_scheduling_type: Some(ReplicaSchedulingType::Divided), ..Default::default() })
    }

    fn duplicated() -> Option<ReplicaSchedulingStrategy> {
        Some(ReplicaSchedulingStrategy { replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated), ..Default::default() })
    }

    fn rb(placement: Placement, replicas: i32, clusters: &[(&str, i32)]) -> ResourceBinding {
        let mut rb = ResourceBinding::new(
            "b",
            ResourceBindingSpec {
                placement: Some(placement),
                replicas: Some(replicas),
                clusters: Some(clusters.iter().map(|(n, r)| TargetCluster { name: n.to_string(), replicas: Some(*r), start_ordinal: None }).collect()),
                ..Default::default()
            },
        );
        rb.metadata.generation = Some(2);
        rb.status = Some(ResourceBindingStatus { scheduler_observed_generation: Some(1), ..Default::default() });
        rb
    }

    #[test]
    fn decisions_in_upstream_order() {
        let snapshot = Snapshot::new([Cluster::new("m1", ClusterSpec::default()), {
            let mut c = Cluster::new("gone", ClusterSpec::default());
            c.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
            c
        }]);
        let weighted = Placement { cluster_affinity: Some(names(&["m1"])), replica_scheduling: divided(), ..Default::default() };
        let applied = serde_json::to_string(&weighted).unwrap();
        let mut rescheduled = rb(weighted.clone(), 2, &[("m1", 2)]);
        rescheduled.spec.reschedule_triggered_at = Some(Time("2025-01-02T00:00:00Z".parse().unwrap()));
        let cases: Vec<(&str, ResourceBinding, Option<&str>, Decision)> = vec![
            ("never applied", rb(weighted.clone(), 2, &[("m1", 2)]), None, Decision::Schedule(Trigger::PlacementChanged)),
            (
                "placement changed",
                rb(Placement { cluster_affinity: Some(names(&["m2"])), ..weighted.clone() }, 2, &[("m1", 2)]),
                Some(&applied),
                Decision::Schedule(Trigger::PlacementChanged),
            ),
            ("scaled", rb(weighted.clone(), 3, &[("m1", 2)]), Some(&applied), Decision::Schedule(Trigger::ReplicasChanged)),
            ("rebalance asked", rescheduled, Some(&applied), Decision::Schedule(Trigger::RescheduleRequested)),
            ("non-workload", rb(weighted.clone(), 0, &[]), Some(&applied), Decision::Schedule(Trigger::AlwaysReschedule)),
            ("target deleting", rb(weighted.clone(), 2, &[("gone", 2)]), Some(&applied), Decision::Schedule(Trigger::TargetClusterDeleting)),
            ("target gone", rb(weighted.clone(), 2, &[("nowhere", 2)]), Some(&applied), Decision::Schedule(Trigger::TargetClusterDeleting)),
            ("nothing but a new generation", rb(weighted.clone(), 2, &[("m1", 2)]), Some(&applied), Decision::ObserveGeneration),
        ];
        for (name, rb, applied, want) in cases {
            assert_eq!(decide(&BindingView::from(&rb), rb.metadata.generation, applied, &snapshot), want, "{name}");
        }
        let dup = Placement { replica_scheduling: duplicated(), ..Default::default() };
        let dup_applied = serde_json::to_string(&dup).unwrap();
        let rb_dup = rb(dup, 2, &[("m1", 2)]);
        assert_eq!(decide(&BindingView::from(&rb_dup), Some(2), Some(&dup_applied), &snapshot), Decision::Schedule(Trigger::AlwaysReschedule));
        let mut observed = rb(weighted, 2, &[("m1", 2)]);
        observed.status.as_mut().unwrap().scheduler_observed_generation = Some(2);
        assert_eq!(decide(&BindingView::from(&observed), Some(2), Some(&applied), &snapshot), Decision::Nothing);
    }

    #[test]
    fn placement_changes_with_cluster_affinities() {
        let term = |name: &str, clusters: &[&str]| ClusterAffinityTerm { affinity_name: name.into(), affinity: names(clusters) };
        let placement = |terms: Vec<ClusterAffinityTerm>| Placement { cluster_affinities: Some(terms), ..Default::default() };
        let applied = serde_json::to_string(&placement(vec![term("a", &["m1"]), term("b", &["m2"])])).unwrap();
        let cases: &[(&str, Placement, Option<&str>, bool)] = &[
            ("same", placement(vec![term("a", &["m1"]), term("b", &["m2"])]), Some("a"), false),
            ("another term changed", placement(vec![term("a", &["m1"]), term("b", &["m3"])]), Some("a"), false),
            ("observed term changed", placement(vec![term("a", &["m9"]), term("b", &["m2"])]), Some("a"), true),
            ("observed term removed", placement(vec![term("b", &["m3"])]), Some("a"), true),
            ("nothing observed", placement(vec![term("a", &["m1"])]), None, true),
        ];
        for (name, now, observed, want) in cases {
            assert_eq!(placement_changed(now, Some(&applied), *observed), *want, "{name}");
        }
        assert!(!placement_changed(&Placement::default(), Some("not json"), None), "unparsable counts as unchanged");
    }

    #[test]
    fn filter_and_cluster_triggers() {
        let claimed = BTreeMap::from([(PROPAGATION_POLICY_PERMANENT_ID_LABEL.to_string(), "id".to_string())]);
        let spec = ResourceBindingSpec::default();
        assert!(is_ours(Some(&claimed), &spec, "default-scheduler"));
        assert!(!is_ours(None, &spec, "default-scheduler"), "unclaimed");
        assert!(!is_ours(Some(&claimed), &spec, "other-scheduler"));
        let custom = ResourceBindingSpec { scheduler_name: Some("other-scheduler".into()), ..Default::default() };
        assert!(is_ours(Some(&claimed), &custom, "other-scheduler"));

        let old = Cluster::new("m1", ClusterSpec::default());
        let mut labelled = old.clone();
        labelled.metadata.labels = Some(BTreeMap::from([("env".to_string(), "prod".to_string())]));
        assert!(cluster_changed(&old, &labelled));
        let mut status_only = old.clone();
        status_only.status = Some(Default::default());
        assert!(!cluster_changed(&old, &status_only), "status changes do not reschedule");
        let mut serving = old.clone();
        serving.status = Some(
            serde_json::from_value(
                serde_json::json!({"apiEnablements": [{"groupVersion": "example.com/v1", "resources": [{"name": "gadgets", "kind": "Gadget"}]}]}),
            )
            .unwrap(),
        );
        assert!(cluster_changed(&status_only, &serving), "a newly served kind reschedules");

        let elsewhere = rb(Placement { cluster_affinity: Some(names(&["m2"])), ..Default::default() }, 1, &[]);
        let here = rb(Placement { cluster_affinity: Some(names(&["m1"])), ..Default::default() }, 1, &[]);
        let anywhere = rb(Placement::default(), 1, &[]);
        assert!(!concerns(&BindingView::from(&elsewhere), &old, &labelled));
        assert!(concerns(&BindingView::from(&here), &old, &labelled));
        assert!(concerns(&BindingView::from(&anywhere), &old, &labelled));
    }
}
