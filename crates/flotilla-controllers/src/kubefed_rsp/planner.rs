//! KubeFed's replica planner (target: KubeFed v0.10.0): how a `ReplicaSchedulingPreference`
//! splits `totalReplicas` over the candidate clusters of a FederatedDeployment or
//! FederatedReplicaSet. A pure function, [`plan`]; the controller that gathers its inputs (ready
//! clusters, member replicas and capacity) and writes placement and `/spec/replicas` overrides
//! is the parent module, [`super`].
//!
//! The algorithm, as KubeFed runs it (`../shared/reference/kubefed-and-peers.md` §1.12):
//! 1. each candidate takes its own preference, else the `"*"` one, else gets 0 and takes no part
//!    (no preferences at all means `{"*": {weight: 1}}`);
//! 2. they are ordered by weight, heaviest first, ties by the 32-bit FNV-1 hash of the cluster
//!    name followed by the key (`namespace/name` of the target), so small counts do not always
//!    land on the alphabetically first cluster;
//! 3. in that order each gets its `minReplicas` (bounded by what is left and by its capacity);
//! 4. without `rebalance`, replicas already running in a cluster are kept ("preallocated"), up
//!    to its `maxReplicas` and capacity;
//! 5. the rest is handed out in passes: each pass gives every cluster still taking replicas
//!    `ceil(budget × weight / Σweights)` (budget = what was left when the pass began), served
//!    first from its preallocation; a cluster reaching `maxReplicas` or its capacity stops
//!    taking part, and what it could not take beyond capacity is recorded as overflow;
//! 6. without `rebalance`, overflow is bounded by the replicas still unplaced.
//!
//! KubeFed reports nothing when the minimums cannot all be met (the heavier clusters win);
//! Flotilla's plan says so in [`ReplicaPlan::unmet_minimums`] so the caller can report it.

use std::cmp::Ordering;
use std::collections::BTreeMap;

pub use flotilla_api::federation::kubefed::scheduling::ClusterPreferences;

/// The preference key that applies to clusters without an entry of their own.
pub const WILDCARD: &str = "*";

/// What the planner needs to know about one target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanInput<'a> {
    /// `spec.totalReplicas` of the preference.
    pub total_replicas: i64,
    /// `spec.clusters` of the preference (empty: an even spread, `{"*": {weight: 1}}`).
    pub preferences: &'a BTreeMap<String, ClusterPreferences>,
    /// The candidate clusters (KubeFed: the ready ones, optionally intersected with the
    /// target's clusterSelector).
    pub clusters: &'a [String],
    /// Replicas running now, per cluster where the member object exists.
    pub current: &'a BTreeMap<String, i64>,
    /// Estimated capacity, per cluster where pods are unschedulable.
    pub capacity: &'a BTreeMap<String, i64>,
    /// `spec.rebalance`: running replicas may move.
    pub rebalance: bool,
    /// `<namespace>/<name>` of the target; seeds the tie-break between equal weights.
    pub key: &'a str,
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaPlan {
    /// Replicas per candidate cluster; every candidate is present, those without a preference
    /// with 0.
    pub replicas: BTreeMap<String, i64>,
    /// Replicas a cluster was planned beyond its estimated capacity ("would be nice if it
    /// schedules"); only clusters with a positive overflow.
    pub overflow: BTreeMap<String, i64>,
    /// Clusters that got fewer than their `minReplicas` because `totalReplicas` ran out, in the
    /// order the minimums were served.
    pub unmet_minimums: Vec<UnmetMinimum>,
}

/// A cluster whose minimum could not be met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnmetMinimum {
    /// The cluster.
    pub cluster: String,
    /// Its `minReplicas`.
    pub min_replicas: i64,
    /// What it got.
    pub planned: i64,
}

impl ReplicaPlan {
    /// Replicas per cluster as KubeFed's scheduler writes them: the plan with the overflow
    /// added on top (so the sum can exceed `totalReplicas` while capacity is short).
    pub fn with_overflow(&self) -> BTreeMap<String, i64> {
        let mut out = self.replicas.clone();
        for (cluster, extra) in &self.overflow {
            *out.entry(cluster.clone()).or_insert(0) += extra;
        }
        out
    }

    /// A sentence for an Event or a status message when minimums were not met, else `None`.
    pub fn unmet_minimums_message(&self, total_replicas: i64) -> Option<String> {
        if self.unmet_minimums.is_empty() {
            return None;
        }
        let clusters: Vec<String> = self.unmet_minimums.iter().map(|u| format!("{} got {} of minReplicas {}", u.cluster, u.planned, u.min_replicas)).collect();
        Some(format!("totalReplicas {total_replicas} cannot meet every minReplicas: {}", clusters.join(", ")))
    }
}

/// 32-bit FNV-1 (multiply, then xor; Go's `hash/fnv.New32`).
pub fn fnv32(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(*b);
    }
    hash
}

/// One cluster's part in the plan.
#[derive(Debug)]
struct Candidate<'a> {
    name: &'a str,
    min: i64,
    max: Option<i64>,
    weight: i64,
    hash: u32,
}

/// Step 1 and 2: the clusters with a preference, in serving order.
fn candidates<'a>(input: &PlanInput<'a>, even: &'a ClusterPreferences) -> Vec<Candidate<'a>> {
    let mut out: Vec<Candidate<'a>> = input
        .clusters
        .iter()
        .filter_map(|name| {
            let pref = if input.preferences.is_empty() { even } else { input.preferences.get(name).or_else(|| input.preferences.get(WILDCARD))? };
            let mut hashed = name.as_bytes().to_vec();
            hashed.extend_from_slice(input.key.as_bytes());
            Some(Candidate {
                name,
                min: pref.min_replicas.unwrap_or(0).max(0),
                max: pref.max_replicas.map(|m| m.max(0)),
                weight: pref.weight.unwrap_or(0).max(0),
                hash: fnv32(&hashed),
            })
        })
        .collect();
    out.sort_by(|a, b| match b.weight.cmp(&a.weight) {
        Ordering::Equal => a.hash.cmp(&b.hash),
        other => other,
    });
    out
}

/// Split `input.total_replicas` over `input.clusters` as KubeFed's planner does.
pub fn plan(input: &PlanInput<'_>) -> ReplicaPlan {
    let even = ClusterPreferences { weight: Some(1), ..Default::default() };
    let order = candidates(input, &even);
    let mut planned: BTreeMap<&str, i64> = input.clusters.iter().map(|c| (c.as_str(), 0)).collect();
    let mut overflow: BTreeMap<String, i64> = BTreeMap::new();
    let mut unmet_minimums = Vec::new();
    let mut remaining = input.total_replicas.max(0);
    let capacity = |name: &str| input.capacity.get(name).copied();

    // 3. Minimums, heaviest first.
    for c in &order {
        let mut give = c.min.min(remaining);
        if let Some(cap) = capacity(c.name) {
            give = give.min(cap.max(0));
        }
        if remaining < c.min {
            unmet_minimums.push(UnmetMinimum { cluster: c.name.to_string(), min_replicas: c.min, planned: give });
        }
        remaining -= give;
        planned.insert(c.name, give);
    }

    // 4. Without rebalance, keep what already runs.
    let mut preallocated: BTreeMap<&str, i64> = BTreeMap::new();
    if !input.rebalance {
        for c in &order {
            let Some(&current) = input.current.get(c.name) else {
                continue;
            };
            let have = planned[c.name];
            let mut keep = current;
            if let Some(max) = c.max {
                keep = keep.min(max);
            }
            if let Some(cap) = capacity(c.name) {
                keep = keep.min(cap);
            }
            let extra = (keep - have).clamp(0, remaining);
            if extra > 0 {
                planned.insert(c.name, have + extra);
                preallocated.insert(c.name, extra);
                remaining -= extra;
            }
        }
    }

    // 5. Hand out the rest by weight, pass after pass.
    let mut taking: Vec<&Candidate<'_>> = order.iter().collect();
    let mut changed = true;
    while remaining > 0 && changed {
        changed = false;
        let weight_sum: i64 = taking.iter().map(|c| c.weight).sum();
        if weight_sum == 0 {
            break;
        }
        let budget = remaining;
        let mut still_taking = Vec::with_capacity(taking.len());
        for c in taking {
            let have = planned[c.name];
            let share = i128::from(budget) * i128::from(c.weight);
            let mut extra = i64::try_from((share + i128::from(weight_sum) - 1) / i128::from(weight_sum)).unwrap_or(i64::MAX).min(remaining);
            if let Some(pre) = preallocated.get_mut(c.name)
                && *pre > 0
            {
                let used = extra.min(*pre);
                *pre -= used;
                extra -= used;
                if used > 0 {
                    changed = true;
                }
            }
            if extra > 0 {
                changed = true;
            }
            let mut total = have + extra;
            let mut full = false;
            if let Some(max) = c.max
                && total > max
            {
                total = max;
                full = true;
            }
            if let Some(cap) = capacity(c.name)
                && total > cap
            {
                overflow.insert(c.name.to_string(), total - cap);
                total = cap;
                full = true;
            }
            if !full {
                still_taking.push(c);
            }
            remaining -= total - have;
            planned.insert(c.name, total);
        }
        taking = still_taking;
    }

    // 6. Without rebalance, overflow never exceeds what is still unplaced.
    if !input.rebalance {
        for extra in overflow.values_mut() {
            *extra = (*extra).min(remaining);
        }
    }
    overflow.retain(|_, extra| *extra > 0);
    ReplicaPlan { replicas: planned.into_iter().map(|(c, n)| (c.to_string(), n)).collect(), overflow, unmet_minimums }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pref(min: i64, max: Option<i64>, weight: i64) -> ClusterPreferences {
        ClusterPreferences { min_replicas: Some(min), max_replicas: max, weight: Some(weight) }
    }

    fn w(weight: i64) -> ClusterPreferences {
        pref(0, None, weight)
    }

    fn prefs(list: &[(&str, ClusterPreferences)]) -> BTreeMap<String, ClusterPreferences> {
        list.iter().map(|(k, p)| (k.to_string(), p.clone())).collect()
    }

    fn counts(list: &[(&str, i64)]) -> BTreeMap<String, i64> {
        list.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// One row of KubeFed's planner tests: preferences, total, candidates, current replicas,
    /// capacity, rebalance → expected plan and overflow. The key is empty, as upstream's.
    struct Row {
        prefs: BTreeMap<String, ClusterPreferences>,
        total: i64,
        clusters: &'static [&'static str],
        current: BTreeMap<String, i64>,
        capacity: BTreeMap<String, i64>,
        rebalance: bool,
        plan: &'static [(&'static str, i64)],
        overflow: &'static [(&'static str, i64)],
    }

    fn row(prefs: BTreeMap<String, ClusterPreferences>, total: i64, clusters: &'static [&'static str], plan: &'static [(&'static str, i64)]) -> Row {
        Row { prefs, total, clusters, current: BTreeMap::new(), capacity: BTreeMap::new(), rebalance: false, plan, overflow: &[] }
    }

    fn run(r: &Row) -> ReplicaPlan {
        let clusters = names(r.clusters);
        plan(&PlanInput {
            total_replicas: r.total,
            preferences: &r.prefs,
            clusters: &clusters,
            current: &r.current,
            capacity: &r.capacity,
            rebalance: r.rebalance,
            key: "",
        })
    }

    fn check(rows: Vec<Row>) {
        for (i, r) in rows.iter().enumerate() {
            let got = run(r);
            assert_eq!(got.replicas, counts(r.plan), "row {i}: plan");
            assert_eq!(got.overflow, counts(r.overflow), "row {i}: overflow");
        }
    }

    #[test]
    fn fnv1_is_go_fnv32_not_fnv32a() {
        // Go: fnv.New32().Write([]byte("a")).Sum32() == 0x050c5d7e; FNV-1a gives 0xe40c292c.
        assert_eq!(fnv32(b"a"), 0x050c_5d7e);
        assert_eq!(fnv32(b""), 0x811c_9dc5);
    }

    /// The hash-dependent rows: equal weights, the order comes from FNV-1 of the names.
    #[test]
    fn equal_weights_are_ordered_by_hash() {
        check(vec![
            row(prefs(&[("*", w(1))]), 50, &["A", "B", "C"], &[("A", 16), ("B", 17), ("C", 17)]),
            row(prefs(&[("*", w(1))]), 1, &["A", "B", "C", "D"], &[("A", 0), ("B", 0), ("C", 0), ("D", 1)]),
            row(prefs(&[("*", pref(20, None, 0))]), 50, &["A", "B", "C"], &[("A", 10), ("B", 20), ("C", 20)]),
        ]);
    }

    #[test]
    fn weights_min_and_max() {
        check(vec![
            row(prefs(&[("A", w(1)), ("B", w(2))]), 60, &["A", "B", "C"], &[("A", 20), ("B", 40), ("C", 0)]),
            row(prefs(&[("A", pref(0, Some(10), 10000)), ("B", w(1)), ("C", w(1))]), 50, &["A", "B", "C"], &[("A", 10), ("B", 20), ("C", 20)]),
            row(
                prefs(&[("A", pref(0, Some(10), 10000)), ("B", w(1)), ("C", pref(0, Some(21), 1)), ("D", pref(0, Some(10), 1))]),
                71,
                &["A", "B", "C", "D"],
                &[("A", 10), ("B", 30), ("C", 21), ("D", 10)],
            ),
            row(prefs(&[("*", pref(10, Some(12), 1))]), 50, &["A", "B", "C"], &[("A", 12), ("B", 12), ("C", 12)]),
            row(prefs(&[("A", pref(4, Some(6), 1)), ("B", pref(4, Some(8), 2))]), 9, &["A", "B", "C"], &[("A", 4), ("B", 5), ("C", 0)]),
        ]);
    }

    /// KubeFed's end-to-end vectors over two clusters.
    #[test]
    fn two_cluster_vectors() {
        check(vec![
            row(BTreeMap::new(), 4, &["cluster1", "cluster2"], &[("cluster1", 2), ("cluster2", 2)]),
            row(prefs(&[("cluster1", w(2)), ("cluster2", w(1))]), 6, &["cluster1", "cluster2"], &[("cluster1", 4), ("cluster2", 2)]),
            row(prefs(&[("cluster1", pref(3, None, 2)), ("cluster2", pref(3, None, 1))]), 6, &["cluster1", "cluster2"], &[("cluster1", 3), ("cluster2", 3)]),
            // intersectWithClusterSelector leaving only cluster1 as a candidate.
            row(prefs(&[("cluster1", w(2)), ("cluster2", w(1))]), 6, &["cluster1"], &[("cluster1", 6)]),
        ]);
    }

    #[test]
    fn running_replicas_stay_without_rebalance() {
        let mut known_bad = row(prefs(&[("*", w(1))]), 50, &["A", "B"], &[("A", 0), ("B", 50)]);
        // Upstream marks this row as a known flaw ("should be 10:40"): B, first by hash, keeps
        // everything it runs and A's 10 running replicas are not kept.
        known_bad.current = counts(&[("A", 10), ("B", 70)]);
        let mut kept = row(prefs(&[("*", w(1))]), 15, &["A", "B"], &[("A", 7), ("B", 8)]);
        kept.current = counts(&[("A", 1), ("B", 8)]);
        check(vec![known_bad, kept]);
    }

    #[test]
    fn running_replicas_move_with_rebalance() {
        let mut r = row(prefs(&[("*", w(1))]), 15, &["A", "B"], &[("A", 7), ("B", 8)]);
        r.current = counts(&[("A", 1), ("B", 14)]);
        r.rebalance = true;
        r.plan = &[("A", 7), ("B", 8)];
        let mut kept = row(prefs(&[("*", w(1))]), 15, &["A", "B"], &[("A", 1), ("B", 14)]);
        kept.current = counts(&[("A", 1), ("B", 14)]);
        check(vec![r, kept]);
    }

    #[test]
    fn capacity_and_overflow() {
        let mut rebalancing = row(prefs(&[("*", w(1))]), 50, &["A", "B", "C"], &[("A", 20), ("B", 20), ("C", 10)]);
        rebalancing.capacity = counts(&[("C", 10)]);
        rebalancing.rebalance = true;
        rebalancing.overflow = &[("C", 7)];
        let mut bounded = row(prefs(&[("A", w(1)), ("B", w(5))]), 60, &["A", "B", "C"], &[("A", 50), ("B", 10), ("C", 0)]);
        bounded.capacity = counts(&[("B", 10)]);
        check(vec![rebalancing, bounded]);
    }

    #[test]
    fn overflow_is_added_on_top() {
        let mut r = row(prefs(&[("*", w(1))]), 50, &["A", "B", "C"], &[]);
        r.capacity = counts(&[("C", 10)]);
        r.rebalance = true;
        assert_eq!(run(&r).with_overflow(), counts(&[("A", 20), ("B", 20), ("C", 17)]));
    }

    #[test]
    fn the_key_changes_the_order_of_equal_weights() {
        let p = prefs(&[("*", w(1))]);
        let clusters = names(&["A", "B", "C", "D"]);
        let empty = BTreeMap::new();
        let winner = |key: &str| {
            let out = plan(&PlanInput { total_replicas: 1, preferences: &p, clusters: &clusters, current: &empty, capacity: &empty, rebalance: false, key });
            out.replicas.into_iter().find(|(_, n)| *n == 1).map(|(c, _)| c).unwrap()
        };
        // With the empty key D wins (upstream's row); other targets pick other clusters.
        assert_eq!(winner(""), "D");
        assert_eq!(winner("default/web"), "B");
        assert_eq!(winner("prod/api"), "C");
    }

    #[test]
    fn clusters_without_preference_get_nothing() {
        check(vec![row(prefs(&[("A", w(1))]), 5, &["A", "B"], &[("A", 5), ("B", 0)])]);
    }

    #[test]
    fn unmet_minimums_are_reported() {
        let r = row(prefs(&[("A", pref(5, None, 1)), ("B", pref(6, None, 2))]), 9, &["A", "B"], &[("A", 3), ("B", 6)]);
        let got = run(&r);
        assert_eq!(got.replicas, counts(r.plan));
        assert_eq!(got.unmet_minimums, vec![UnmetMinimum { cluster: "A".into(), min_replicas: 5, planned: 3 }]);
        assert_eq!(got.unmet_minimums_message(9).unwrap(), "totalReplicas 9 cannot meet every minReplicas: A got 3 of minReplicas 5");
        let met = row(prefs(&[("A", pref(3, None, 1)), ("B", pref(6, None, 2))]), 9, &["A", "B"], &[]);
        assert_eq!(run(&met).unmet_minimums_message(9), None);
    }

    #[test]
    fn capacity_short_of_a_minimum_is_not_a_total_shortfall() {
        let mut r = row(prefs(&[("A", pref(5, None, 1))]), 9, &["A"], &[("A", 2)]);
        r.capacity = counts(&[("A", 2)]);
        r.rebalance = true;
        let got = run(&r);
        assert_eq!(got.replicas, counts(r.plan));
        assert_eq!(got.overflow, counts(&[("A", 7)]));
        assert!(got.unmet_minimums.is_empty());
    }

    #[test]
    fn zero_and_negative_totals_place_nothing() {
        check(vec![
            row(prefs(&[("*", w(1))]), 0, &["A", "B"], &[("A", 0), ("B", 0)]),
            row(prefs(&[("*", pref(2, None, 1))]), -3, &["A", "B"], &[("A", 0), ("B", 0)]),
        ]);
    }
}
