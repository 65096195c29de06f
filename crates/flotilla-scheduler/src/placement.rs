//! Reading a `Placement` the way Karmada does: its replica scheduling type and strategy, whether
//! it divides by static weights, and whether a cluster matches a `ClusterAffinity`
//! (`util.ClusterMatches`).

use std::collections::BTreeMap;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::{ClusterAffinity, Placement, ReplicaDivisionPreference, ReplicaSchedulingType};
use flotilla_api::selector::{LabelSelector, Operator, Requirement};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

/// How replicas are assigned, named as Karmada names its strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Every selected cluster gets all replicas.
    Duplicated,
    /// Divided by `staticWeightList` (or equally) with the Webster method.
    StaticWeight,
    /// Divided by the clusters' available replicas.
    DynamicWeight,
    /// Divided over as few clusters as their available replicas allow.
    Aggregated,
}

impl Strategy {
    /// Karmada's name of the strategy.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Duplicated => "Duplicated",
            Strategy::StaticWeight => "StaticWeight",
            Strategy::DynamicWeight => "DynamicWeight",
            Strategy::Aggregated => "Aggregated",
        }
    }
}

/// `Placement.ReplicaSchedulingType()`: nil `replicaScheduling` means Duplicated; a present one
/// without a type has the CRD default, Divided.
pub fn scheduling_type(placement: &Placement) -> ReplicaSchedulingType {
    match &placement.replica_scheduling {
        None => ReplicaSchedulingType::Duplicated,
        Some(strategy) => strategy.replica_scheduling_type.unwrap_or(ReplicaSchedulingType::Divided),
    }
}

/// The assignment strategy (`newAssignState`). A Divided placement without a division
/// preference is Weighted, as admission defaults it.
pub fn strategy(placement: &Placement) -> Strategy {
    let Some(scheduling) = &placement.replica_scheduling else {
        return Strategy::Duplicated;
    };
    if scheduling_type(placement) == ReplicaSchedulingType::Duplicated {
        return Strategy::Duplicated;
    }
    match scheduling.replica_division_preference.unwrap_or(ReplicaDivisionPreference::Weighted) {
        ReplicaDivisionPreference::Aggregated => Strategy::Aggregated,
        ReplicaDivisionPreference::Weighted => {
            let dynamic = scheduling.weight_preference.as_ref().is_some_and(|w| w.dynamic_weight.is_some());
            if dynamic { Strategy::DynamicWeight } else { Strategy::StaticWeight }
        }
    }
}

/// Whether the placement divides by static weights in the sense of cluster selection
/// (`shouldIgnoreSpreadConstraint`): Divided, Weighted, and either no weight preference or a
/// non-empty static list without a dynamic weight. Such placements keep every feasible cluster.
pub fn ignores_spread_constraints(placement: &Placement) -> bool {
    let Some(scheduling) = &placement.replica_scheduling else {
        return false;
    };
    if scheduling_type(placement) != ReplicaSchedulingType::Divided
        || scheduling.replica_division_preference.unwrap_or(ReplicaDivisionPreference::Weighted) != ReplicaDivisionPreference::Weighted
    {
        return false;
    }
    match &scheduling.weight_preference {
        None => true,
        Some(weights) => weights.static_weight_list.as_ref().is_some_and(|l| !l.is_empty()) && weights.dynamic_weight.is_none(),
    }
}

/// The zones of a cluster: `spec.zones`, or the deprecated `spec.zone` the API server migrates
/// into it.
pub fn cluster_zones(cluster: &Cluster) -> Vec<&str> {
    match (&cluster.spec.zones, &cluster.spec.zone) {
        (Some(zones), _) if !zones.is_empty() => zones.iter().map(String::as_str).collect(),
        (_, Some(zone)) if !zone.is_empty() => vec![zone.as_str()],
        _ => Vec::new(),
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// The cluster's provider, when set.
pub fn cluster_provider(cluster: &Cluster) -> Option<&str> {
    non_empty(&cluster.spec.provider)
}

/// The cluster's region, when set.
pub fn cluster_region(cluster: &Cluster) -> Option<&str> {
    non_empty(&cluster.spec.region)
}

/// `util.ClusterMatches`: excluded clusters never match; each non-empty part (label selector,
/// field selector over provider/region/zone, cluster names) must match; all empty matches
/// everything. A selector that does not parse matches nothing.
pub fn cluster_matches(cluster: &Cluster, affinity: &ClusterAffinity) -> bool {
    let name = cluster.metadata.name.as_deref().unwrap_or("");
    if affinity.exclude.iter().flatten().any(|n| n == name) {
        return false;
    }
    if let Some(selector) = &affinity.label_selector {
        let parsed = serde_json::to_value(selector).ok().and_then(|v| LabelSelector::from_json(&v).ok());
        let Some(parsed) = parsed else { return false };
        let empty = BTreeMap::new();
        if !parsed.matches(cluster.metadata.labels.as_ref().unwrap_or(&empty)) {
            return false;
        }
    }
    if let Some(fields) = &affinity.field_selector {
        for expression in fields.match_expressions.iter().flatten() {
            let matched = if expression.key == "zone" { zones_match(expression, &cluster_zones(cluster)) } else { field_matches(expression, cluster) };
            if !matched {
                return false;
            }
        }
    }
    match &affinity.cluster_names {
        Some(names) if !names.is_empty() => names.iter().any(|n| n == name),
        _ => true,
    }
}

/// A provider/region requirement, with node-selector semantics over the cluster's non-empty
/// fields.
fn field_matches(expression: &NodeSelectorRequirement, cluster: &Cluster) -> bool {
    let operator = match expression.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::GreaterThan,
        "Lt" => Operator::LessThan,
        _ => return false,
    };
    let values = expression.values.clone().unwrap_or_default();
    let Ok(requirement) = Requirement::new(expression.key.clone(), operator, values) else {
        return false;
    };
    requirement.matches_with(|key| match key {
        "provider" => cluster_provider(cluster),
        "region" => cluster_region(cluster),
        _ => None,
    })
}

/// Zone requirements: `In` needs every zone of the cluster listed, `NotIn` none of them,
/// `Exists` some zone, `DoesNotExist` none.
fn zones_match(expression: &NodeSelectorRequirement, zones: &[&str]) -> bool {
    let values = expression.values.as_deref().unwrap_or_default();
    let listed = |zone: &&str| values.iter().any(|v| v == zone);
    match expression.operator.as_str() {
        "In" => !zones.is_empty() && zones.iter().all(listed),
        "NotIn" => !zones.iter().any(listed),
        "Exists" => !zones.is_empty(),
        "DoesNotExist" => zones.is_empty(),
        _ => false,
    }
}
