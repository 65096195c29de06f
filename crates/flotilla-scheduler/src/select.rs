//! Cluster selection under spread constraints (`SelectBestClusters`): which of the feasible,
//! scored clusters the binding goes to. Only `cluster` and `region` spreading select clusters,
//! as upstream.

use std::collections::BTreeMap;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::{Placement, ReplicaSchedulingType, SpreadByField, SpreadConstraint};

use crate::binding::BindingView;
use crate::placement::{cluster_region, ignores_spread_constraints, scheduling_type};

/// Weight of one unit of replicas in a group score, so replicas outrank the average cluster
/// score (0..=100).
const GROUP_WEIGHT_UNIT: i64 = 1000;

/// A feasible cluster with its score and the replicas it can hold (estimate + what it already
/// runs of this binding).
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub cluster: &'a Cluster,
    pub name: &'a str,
    pub score: i64,
    pub available: i64,
}

/// Candidates in Karmada's order: score descending, available replicas descending, name.
pub fn sort_candidates(candidates: &mut [Candidate<'_>]) {
    candidates.sort_by(|a, b| b.score.cmp(&a.score).then(b.available.cmp(&a.available)).then(a.name.cmp(b.name)));
}

/// The chosen clusters (in the order assignment sees them) and, for the others, why not.
#[derive(Debug)]
pub struct Selection<'a> {
    pub selected: Vec<Candidate<'a>>,
    pub passed_over: BTreeMap<&'a str, String>,
}

/// Selects among sorted candidates. Without spread constraints, or when dividing by static
/// weights, every candidate is kept. Errors carry Karmada's message.
pub fn select_clusters<'a>(candidates: Vec<Candidate<'a>>, placement: &Placement, binding: &BindingView<'_>) -> Result<Selection<'a>, String> {
    let constraints = placement.spread_constraints.as_deref().unwrap_or_default();
    if constraints.is_empty() || ignores_spread_constraints(placement) {
        return Ok(Selection { selected: candidates, passed_over: BTreeMap::new() });
    }
    // Duplicated (or no replica scheduling at all) ignores capacity.
    let needed = (scheduling_type(placement) != ReplicaSchedulingType::Duplicated).then(|| i64::from(binding.replicas()));
    let by_field = |field: SpreadByField| constraints.iter().rfind(|c| c.spread_by_field == Some(field));
    let cluster_constraint = by_field(SpreadByField::Cluster).cloned().unwrap_or_default();
    let selected = if let Some(region) = by_field(SpreadByField::Region) {
        by_region(&candidates, region, &cluster_constraint, binding)?
    } else if by_field(SpreadByField::Cluster).is_some() {
        by_cluster(&candidates, &cluster_constraint, needed)?
    } else {
        return Err("just support cluster and region spread constraint".into());
    };
    let passed_over = candidates
        .iter()
        .filter(|c| !selected.iter().any(|s| s.name == c.name))
        .map(|c| (c.name, "not chosen by the spread constraints".to_string()))
        .collect();
    Ok(Selection { selected, passed_over })
}

fn groups(constraint: &SpreadConstraint) -> (usize, usize) {
    let min = constraint.min_groups.unwrap_or(0).max(0) as usize;
    let max = constraint.max_groups.unwrap_or(0).max(0) as usize;
    (min, max)
}

/// Spread by cluster: the top `min(#candidates, maxGroups)` by score; when dividing, swap the
/// lowest-ranked for the unchosen cluster with the most room until the replicas fit.
fn by_cluster<'a>(candidates: &[Candidate<'a>], constraint: &SpreadConstraint, needed: Option<i64>) -> Result<Vec<Candidate<'a>>, String> {
    let (min, max) = groups(constraint);
    if candidates.len() < min {
        return Err("the number of feasible clusters is less than spreadConstraint.MinGroups".into());
    }
    let count = max.min(candidates.len());
    let Some(needed) = needed else {
        return Ok(candidates[..count].to_vec());
    };
    let chosen = by_available_resource(candidates, count, needed);
    if chosen.is_empty() {
        return Err(format!("no enough resource when selecting {count} clusters"));
    }
    Ok(chosen)
}

/// `selectClustersByAvailableResource`: empty when even the swaps cannot make room.
fn by_available_resource<'a>(candidates: &[Candidate<'a>], count: usize, needed: i64) -> Vec<Candidate<'a>> {
    let mut chosen = candidates[..count].to_vec();
    let mut rest = candidates[count..].to_vec();
    let fits = |c: &[Candidate<'_>]| c.iter().map(|c| c.available).sum::<i64>() >= needed;
    let mut slot = count;
    while !fits(&chosen) && slot > 0 {
        slot -= 1;
        let mut best: Option<usize> = None;
        let mut most = chosen[slot].available;
        for (i, c) in rest.iter().enumerate() {
            if c.available > most {
                most = c.available;
                best = Some(i);
            }
        }
        if let Some(i) = best {
            std::mem::swap(&mut chosen[slot], &mut rest[i]);
        }
    }
    if fits(&chosen) { chosen } else { Vec::new() }
}

struct Region<'a> {
    name: &'a str,
    score: i64,
    clusters: Vec<Candidate<'a>>,
}

/// Spread by region: choose regions (between the region min and max groups) that together
/// hold at least the cluster constraint's minimum of clusters, preferring high group scores;
/// take the best cluster of each, then fill up to the cluster maximum from the rest.
fn by_region<'a>(
    candidates: &[Candidate<'a>],
    region_constraint: &SpreadConstraint,
    cluster_constraint: &SpreadConstraint,
    binding: &BindingView<'_>,
) -> Result<Vec<Candidate<'a>>, String> {
    let (region_min, region_max) = groups(region_constraint);
    let (cluster_min, cluster_max) = groups(cluster_constraint);
    let mut regions: Vec<Region<'a>> = Vec::new();
    for candidate in candidates {
        let Some(name) = cluster_region(candidate.cluster) else { continue };
        match regions.iter_mut().find(|r| r.name == name) {
            Some(region) => region.clusters.push(*candidate),
            None => regions.push(Region { name, score: 0, clusters: vec![*candidate] }),
        }
    }
    for region in &mut regions {
        region.score = group_score(&region.clusters, binding, region_min, cluster_min);
    }
    if regions.len() < region_min {
        return Err("the number of feasible region is less than spreadConstraint.MinGroups".into());
    }
    let groups: Vec<Group<'a>> = regions.iter().map(|r| Group { name: r.name, value: r.clusters.len(), weight: r.score }).collect();
    let chosen = select_groups(groups, region_min, region_max, cluster_min);
    if chosen.is_empty() {
        return Err("the number of clusters is less than the cluster spreadConstraint.MinGroups".into());
    }
    let mut selected = Vec::new();
    let mut rest = Vec::new();
    for name in chosen {
        let region = regions.iter().find(|r| r.name == name).expect("chosen regions exist");
        selected.push(region.clusters[0]);
        rest.extend_from_slice(&region.clusters[1..]);
    }
    let wanted = (selected.len() + rest.len()).min(cluster_max);
    if wanted > selected.len() {
        sort_candidates(&mut rest);
        let more = wanted - selected.len();
        selected.extend(rest.into_iter().take(more));
    }
    Ok(selected)
}

/// A group's score (`calcGroupScore`). Duplicated: 1000 × clusters that can hold every replica
/// plus their average score. Divided: walk the group's clusters until there are enough of them
/// and they hold ⌈replicas / min groups⌉; 1000 × that target plus the walked clusters' average
/// score, or 1000 × what they hold plus the group's average score when short.
fn group_score(clusters: &[Candidate<'_>], binding: &BindingView<'_>, min_groups: usize, cluster_min: usize) -> i64 {
    let replicas = i64::from(binding.replicas());
    let duplicated = binding.placement().is_none_or(|p| scheduling_type(p) == ReplicaSchedulingType::Duplicated);
    if duplicated {
        let fitting: Vec<&Candidate<'_>> = clusters.iter().filter(|c| c.available >= replicas).collect();
        if fitting.is_empty() {
            return 0;
        }
        let n = fitting.len() as i64;
        return n * GROUP_WEIGHT_UNIT + fitting.iter().map(|c| c.score).sum::<i64>() / n;
    }
    let min_groups = min_groups.max(1) as i64;
    let target = (replicas + min_groups - 1) / min_groups;
    let needed_clusters = cluster_min.max(min_groups as usize);
    let (mut sum_available, mut sum_score, mut walked) = (0i64, 0i64, 0usize);
    for cluster in clusters {
        sum_available = sum_available.saturating_add(cluster.available);
        sum_score += cluster.score;
        walked += 1;
        if walked >= needed_clusters && sum_available >= target {
            break;
        }
    }
    if sum_available < target {
        sum_available.saturating_mul(GROUP_WEIGHT_UNIT) + sum_score / clusters.len().max(1) as i64
    } else {
        target.saturating_mul(GROUP_WEIGHT_UNIT) + sum_score / walked.max(1) as i64
    }
}

#[derive(Clone, Copy, Debug)]
struct Group<'a> {
    name: &'a str,
    /// Clusters in the group.
    value: usize,
    /// Group score.
    weight: i64,
}

#[derive(Clone, Debug)]
struct Path<'a> {
    id: usize,
    groups: Vec<Group<'a>>,
    weight: i64,
    value: usize,
}

/// `selectGroups`: every combination of `min..=max` groups whose clusters reach `target`,
/// found depth-first over groups sorted by size, then the best by total score, total size and
/// discovery order — except that a best path's prefix which is itself feasible wins, so no more
/// groups are used than needed. Returns the chosen group names, best first.
fn select_groups<'a>(mut groups: Vec<Group<'a>>, min: usize, max: usize, target: usize) -> Vec<&'a str> {
    if groups.is_empty() {
        return Vec::new();
    }
    groups.sort_by(|a, b| a.value.cmp(&b.value).then(b.weight.cmp(&a.weight)).then(a.name.cmp(b.name)));
    let mut paths = Vec::new();
    let mut stack = Vec::new();
    feasible_paths(&groups, min, max, target, 0, 0, &mut stack, &mut paths);
    if paths.is_empty() {
        return Vec::new();
    }
    paths.sort_by(|a, b| b.weight.cmp(&a.weight).then(b.value.cmp(&a.value)).then(a.id.cmp(&b.id)));
    let mut best = 0;
    for i in 1..paths.len() {
        if is_prefix(&paths[i], &paths[best]) {
            best = i;
        }
    }
    paths.swap_remove(best).groups.into_iter().map(|g| g.name).collect()
}

/// Whether `sub` is shorter than `path` and names its first groups.
fn is_prefix(sub: &Path<'_>, path: &Path<'_>) -> bool {
    sub.groups.len() < path.groups.len() && sub.groups.iter().zip(&path.groups).all(|(a, b)| a.name == b.name)
}

#[allow(clippy::too_many_arguments)]
fn feasible_paths<'a>(
    groups: &[Group<'a>],
    min: usize,
    max: usize,
    target: usize,
    sum: usize,
    begin: usize,
    stack: &mut Vec<Group<'a>>,
    paths: &mut Vec<Path<'a>>,
) {
    if sum >= target && stack.len() >= min && stack.len() <= max {
        let mut chosen = stack.clone();
        chosen.sort_by(|a, b| b.weight.cmp(&a.weight).then(a.name.cmp(b.name)));
        paths.push(Path { id: paths.len() + 1, weight: chosen.iter().map(|g| g.weight).sum(), value: chosen.iter().map(|g| g.value).sum(), groups: chosen });
        return;
    }
    if stack.len() >= max {
        return;
    }
    for i in begin..groups.len() {
        stack.push(groups[i]);
        feasible_paths(groups, min, max, target, sum + groups[i].value, i + 1, stack, paths);
        stack.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(name: &'static str, value: usize, weight: i64) -> Group<'static> {
        Group { name, value, weight }
    }

    #[test]
    fn group_selection_table() {
        let cases: &[(&str, Vec<Group<'static>>, usize, usize, usize, &[&str])] = &[
            ("one group is enough", vec![g("r1", 3, 100), g("r2", 1, 50)], 1, 2, 2, &["r1"]),
            ("two groups needed for clusters", vec![g("r1", 1, 100), g("r2", 1, 50), g("r3", 1, 10)], 1, 3, 2, &["r1", "r2"]),
            ("min two groups", vec![g("r1", 3, 100), g("r2", 1, 50), g("r3", 1, 60)], 2, 2, 1, &["r1", "r3"]),
            ("max too small", vec![g("r1", 1, 100), g("r2", 1, 50)], 1, 1, 2, &[]),
            ("no groups", vec![], 1, 1, 1, &[]),
        ];
        for (name, groups, min, max, target, want) in cases {
            assert_eq!(select_groups(groups.clone(), *min, *max, *target), *want, "{name}");
        }
    }
}
