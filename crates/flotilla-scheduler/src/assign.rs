//! Replica assignment over the selected clusters (`AssignReplicas`): Duplicated, static weights,
//! and the dynamic strategies (DynamicWeight, Aggregated) in Steady or Fresh mode. Every
//! division is Webster's ([`crate::webster`]).

use std::collections::BTreeMap;

use flotilla_api::federation::karmada::work::TargetCluster;

use crate::binding::BindingView;
use crate::estimator::available_replicas;
use crate::placement::{Strategy, cluster_matches, strategy};
use crate::select::Candidate;
use crate::webster::{NameOrder, Party, apportion};

/// How the dynamic strategies treat the previous result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignmentMode {
    /// Keep what is placed; scale up by dividing only the new replicas, scale down in
    /// proportion to what each cluster has.
    Steady,
    /// Divide everything anew (after `spec.rescheduleTriggeredAt`, e.g. a WorkloadRebalancer).
    Fresh,
}

/// Not enough room in the candidate clusters (Karmada's `UnschedulableError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Clusters available replicas {available} are not enough to schedule.")]
pub struct NotEnoughReplicas {
    /// What the clusters can take in total.
    pub available: i64,
}

/// Why assignment failed; the messages are upstream's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    #[error("no clusters available to schedule")]
    NoClusters,
    #[error("failed to scale up: {0}")]
    ScaleUp(NotEnoughReplicas),
    #[error("failed to scale down: {0}")]
    ScaleDown(NotEnoughReplicas),
    #[error("failed to do fresh scale: {0}")]
    FreshScale(NotEnoughReplicas),
}

impl AssignError {
    /// Whether the failure is for lack of capacity (condition reason `Unschedulable`).
    pub fn is_unschedulable(&self) -> bool {
        !matches!(self, AssignError::NoClusters)
    }
}

/// The assignment and what drove it.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    /// `spec.clusters`, without zero-replica entries.
    pub clusters: Vec<TargetCluster>,
    /// The Webster votes per cluster: static weights, or available replicas.
    pub votes: BTreeMap<String, i64>,
    /// The dynamic strategies' mode.
    pub mode: Option<AssignmentMode>,
}

/// Assigns the binding's replicas to `selected` (in selection order). Non-workloads get every
/// selected cluster without replicas.
pub fn assign(selected: &[Candidate<'_>], binding: &BindingView<'_>) -> Result<Assignment, AssignError> {
    if selected.is_empty() {
        return Err(AssignError::NoClusters);
    }
    let placement = binding.placement().cloned().unwrap_or_default();
    if !binding.is_workload() {
        let clusters = selected.iter().map(|c| target(c.name, None)).collect();
        return Ok(Assignment { clusters, votes: BTreeMap::new(), mode: None });
    }
    let order = NameOrder::for_uid(binding.uid);
    let mut assignment = match strategy(&placement) {
        Strategy::Duplicated => {
            let clusters = selected.iter().map(|c| target(c.name, Some(binding.replicas()))).collect();
            Assignment { clusters, votes: BTreeMap::new(), mode: None }
        }
        Strategy::StaticWeight => static_weight(selected, binding, order),
        dynamic => dynamic_weight(selected, binding, dynamic == Strategy::Aggregated, order)?,
    };
    assignment.clusters.retain(|c| c.replicas.unwrap_or(0) > 0);
    Ok(assignment)
}

fn target(name: &str, replicas: Option<i32>) -> TargetCluster {
    TargetCluster { name: name.to_string(), replicas, start_ordinal: None }
}

/// Static weights: a cluster's weight is the largest of the `staticWeightList` entries that
/// select it; clusters of weight 0 get nothing; all zero (or no weight preference) means equal
/// weights. The previous result plays no part.
fn static_weight(selected: &[Candidate<'_>], binding: &BindingView<'_>, order: NameOrder) -> Assignment {
    let preference = binding.placement().and_then(|p| p.replica_scheduling.as_ref()?.weight_preference.as_ref());
    let mut parties: Vec<Party> = match preference {
        None => Vec::new(),
        Some(preference) => selected
            .iter()
            .filter_map(|c| {
                let weight = preference
                    .static_weight_list
                    .iter()
                    .flatten()
                    .filter(|rule| cluster_matches(c.cluster, &rule.target_cluster))
                    .map(|rule| rule.weight)
                    .max()
                    .unwrap_or(0);
                (weight > 0).then(|| Party::new(c.name, weight))
            })
            .collect(),
    };
    if parties.iter().map(|p| p.votes).sum::<i64>() == 0 {
        parties = selected.iter().map(|c| Party::new(c.name, 1)).collect();
    }
    let seats = apportion(binding.replicas(), &parties, order);
    Assignment {
        clusters: parties.iter().zip(seats).map(|(p, s)| target(&p.name, Some(s))).collect(),
        votes: parties.into_iter().map(|p| (p.name, p.votes)).collect(),
        mode: None,
    }
}

/// DynamicWeight and Aggregated.
fn dynamic_weight(selected: &[Candidate<'_>], binding: &BindingView<'_>, aggregated: bool, order: NameOrder) -> Result<Assignment, AssignError> {
    let replicas = binding.replicas();
    // The previous result on clusters that are still candidates; replicas on the others count
    // as missing and are scaled up elsewhere.
    let scheduled: Vec<TargetCluster> = binding.target_clusters().iter().filter(|t| selected.iter().any(|c| c.name == t.name)).cloned().collect();
    let assigned: i32 = scheduled.iter().map(|t| t.replicas.unwrap_or(0)).sum();
    let estimates = || {
        let clusters: Vec<_> = selected.iter().map(|c| c.cluster).collect();
        let room = available_replicas(&clusters, binding);
        selected.iter().zip(room).map(|(c, r)| (c.name.to_string(), r)).collect::<Vec<_>>()
    };
    let divider = Divider { aggregated, order };
    if binding.reschedule_required() {
        let mut available = estimates();
        for (name, room) in &mut available {
            *room += scheduled.iter().filter(|t| &t.name == name).map(|t| i64::from(t.replicas.unwrap_or(0))).sum::<i64>();
        }
        let mut assignment = divider.divide(replicas, available, &[]).map_err(AssignError::FreshScale)?;
        assignment.mode = Some(AssignmentMode::Fresh);
        return Ok(assignment);
    }
    let mut assignment = match assigned.cmp(&replicas) {
        std::cmp::Ordering::Greater => {
            // Scale down in proportion to the previous result. Upstream weighs all of
            // `spec.clusters`, which can hand replicas back to a cluster that no longer passes
            // the filters (e.g. one being deleted); only the candidates are weighed here.
            let previous = scheduled.iter().map(|t| (t.name.clone(), i64::from(t.replicas.unwrap_or(0)))).collect();
            divider.divide(replicas, previous, &[]).map_err(AssignError::ScaleDown)?
        }
        std::cmp::Ordering::Less => divider.divide(replicas - assigned, estimates(), &scheduled).map_err(AssignError::ScaleUp)?,
        std::cmp::Ordering::Equal => Assignment { clusters: scheduled, votes: BTreeMap::new(), mode: None },
    };
    assignment.mode = Some(AssignmentMode::Steady);
    Ok(assignment)
}

struct Divider {
    aggregated: bool,
    order: NameOrder,
}

impl Divider {
    /// Divides `wanted` replicas with the clusters' room as Webster votes, on top of `previous`.
    /// Aggregated first puts clusters that already run replicas in front, then keeps the shortest
    /// prefix with enough room.
    fn divide(&self, wanted: i32, mut available: Vec<(String, i64)>, previous: &[TargetCluster]) -> Result<Assignment, NotEnoughReplicas> {
        // Most room first; a stable sort keeps the selection order among equals.
        available.sort_by_key(|a| std::cmp::Reverse(a.1));
        let total: i64 = available.iter().map(|(_, room)| *room).sum();
        if total < i64::from(wanted) {
            return Err(NotEnoughReplicas { available: total });
        }
        if self.aggregated {
            let runs = |name: &str| previous.iter().any(|t| t.name == name && t.replicas.unwrap_or(0) > 0);
            let (mut first, rest): (Vec<_>, Vec<_>) = available.into_iter().partition(|(name, _)| runs(name));
            first.extend(rest);
            let mut sum = 0;
            let keep = first
                .iter()
                .position(|(_, room)| {
                    sum += room;
                    sum >= i64::from(wanted)
                })
                .map_or(first.len(), |i| i + 1);
            first.truncate(keep);
            available = first;
        }
        let parties: Vec<Party> = available.iter().map(|(name, room)| Party::new(name.clone(), *room)).collect();
        let seats = apportion(wanted, &parties, self.order);
        let mut clusters = previous.to_vec();
        for (party, seats) in parties.iter().zip(seats) {
            match clusters.iter_mut().find(|t| t.name == party.name) {
                Some(existing) => existing.replicas = Some(existing.replicas.unwrap_or(0) + seats),
                None => clusters.push(target(&party.name, Some(seats))),
            }
        }
        Ok(Assignment { clusters, votes: available.into_iter().collect(), mode: None })
    }
}
