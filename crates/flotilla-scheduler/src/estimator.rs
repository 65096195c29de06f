//! Karmada's general estimator: how many more replicas of a binding a cluster can take, read
//! from `status.resourceSummary` (and, when present, the resource-model histogram
//! `allocatableModelings`).

use std::collections::BTreeMap;

use flotilla_api::federation::karmada::cluster::{Cluster, ResourceSummary};
use flotilla_api::federation::karmada::work::ReplicaRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::binding::BindingView;

/// Pods a virtual node of a resource-model grade holds.
const PODS_PER_MODELED_NODE: i64 = 110;

const NANO_PER_UNIT: i128 = 1_000_000_000;
const NANO_PER_MILLI: i128 = 1_000_000;

/// Replicas each candidate can still take (`calAvailableReplicas`), in candidate order.
/// Non-workloads are not estimated (`i32::MAX`); an estimate that says nothing (`i32::MAX`)
/// becomes the binding's replicas.
pub fn available_replicas(candidates: &[&Cluster], binding: &BindingView<'_>) -> Vec<i64> {
    if binding.replicas() == 0 && binding.spec.components.as_ref().is_none_or(Vec::is_empty) {
        return vec![i64::from(i32::MAX); candidates.len()];
    }
    candidates
        .iter()
        .map(|cluster| {
            let estimate = general_estimate(cluster, binding.spec.replica_requirements.as_ref());
            if estimate >= i64::from(i32::MAX) { i64::from(binding.replicas()) } else { estimate }
        })
        .collect()
}

/// The general estimator for one cluster: 0 without a resource summary; otherwise the free pod
/// slots, lowered by each requested resource's free amount divided by the per-replica request
/// (CPU in millicores). A requested resource the cluster does not report allows nothing.
pub fn general_estimate(cluster: &Cluster, requirements: Option<&ReplicaRequirements>) -> i64 {
    let Some(summary) = cluster.status.as_ref().and_then(|s| s.resource_summary.as_ref()) else {
        return 0;
    };
    let allowed_pods = allowed_pods(summary);
    if allowed_pods <= 0 {
        return 0;
    }
    let Some(requests) = requirements.and_then(|r| r.resource_request.as_ref()).filter(|r| !r.is_empty()) else {
        return allowed_pods.min(i64::from(i32::MAX));
    };
    let modeled = summary.allocatable_modelings.as_ref().filter(|m| !m.is_empty()).and_then(|modelings| by_resource_models(cluster, modelings, requests));
    let estimate = match modeled {
        Some(replicas) => replicas.min(allowed_pods),
        None => by_summary(summary, requests, allowed_pods),
    };
    estimate.clamp(0, i64::from(i32::MAX))
}

/// allocatable pods − allocated pods − allocating pods, at least 0.
fn allowed_pods(summary: &ResourceSummary) -> i64 {
    let pods = |list: &Option<BTreeMap<String, Quantity>>| list.as_ref().and_then(|l| l.get("pods")).and_then(nano_units).unwrap_or(0);
    let free = pods(&summary.allocatable) - pods(&summary.allocated) - pods(&summary.allocating);
    to_i64(ceil_div(free, NANO_PER_UNIT)).max(0)
}

fn by_summary(summary: &ResourceSummary, requests: &BTreeMap<String, Quantity>, allowed_pods: i64) -> i64 {
    let mut replicas = allowed_pods;
    for (name, quantity) in requests {
        let Some(request) = nano_units(quantity) else { continue };
        if ceil_div(request, NANO_PER_UNIT) <= 0 {
            continue;
        }
        let Some(allocatable) = summary.allocatable.as_ref().and_then(|a| a.get(name)).and_then(nano_units) else {
            return 0;
        };
        let used = |list: &Option<BTreeMap<String, Quantity>>| list.as_ref().and_then(|l| l.get(name)).and_then(nano_units).unwrap_or(0);
        let free = allocatable - used(&summary.allocated) - used(&summary.allocating);
        let unit = if name == "cpu" { NANO_PER_MILLI } else { NANO_PER_UNIT };
        let (free, request) = (ceil_div(free, unit), ceil_div(request, unit));
        let fits = if free <= 0 || request <= 0 { 0 } else { to_i64(free / request) };
        replicas = replicas.min(fits);
    }
    replicas
}

/// Replicas that fit on the virtual nodes of `allocatableModelings`: each grade's nodes have
/// the grade's lower bounds (`spec.resourceModels`) and room for 110 pods. `None` when a
/// requested resource is not modeled (then the summary decides).
fn by_resource_models(
    cluster: &Cluster,
    modelings: &[flotilla_api::federation::karmada::cluster::AllocatableModeling],
    requests: &BTreeMap<String, Quantity>,
) -> Option<i64> {
    let models = cluster.spec.resource_models.as_ref()?;
    let requested: Vec<(&str, i128)> = requests.iter().filter_map(|(name, q)| nano_units(q).map(|n| (name.as_str(), n))).filter(|(_, n)| *n > 0).collect();
    let mut total: i64 = 0;
    for modeling in modelings {
        let model = models.iter().find(|m| m.grade == modeling.grade)?;
        let mut per_node = PODS_PER_MODELED_NODE;
        for (name, request) in &requested {
            let range = model.ranges.iter().find(|r| r.name == *name)?;
            let capacity = nano_units(&range.min)?;
            per_node = per_node.min(to_i64(capacity.max(0) / request));
        }
        total = total.saturating_add(per_node.saturating_mul(i64::from(modeling.count.max(0))));
    }
    Some(total)
}

fn to_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Division rounding toward +∞ (`b > 0`), as `Quantity.Value()` rounds.
fn ceil_div(a: i128, b: i128) -> i128 {
    if a >= 0 { (a + b - 1) / b } else { a / b }
}

/// A quantity in nano-units (10⁻⁹), rounded up; `None` if it does not parse. Large values
/// saturate.
pub(crate) fn nano_units(quantity: &Quantity) -> Option<i128> {
    let text = quantity.0.trim();
    let (negative, text) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let (binary_power, mut decimal_power): (u32, i32) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        exponent if exponent.starts_with(['e', 'E']) => (0, exponent[1..].parse().ok()?),
        _ => return None,
    };
    const SATURATED: i128 = i128::MAX / 4;
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let mut value: i128 = if digits.len() > 30 { SATURATED } else { digits.parse().unwrap_or(0) };
    decimal_power += 9 - fraction.len() as i32;
    value = value.checked_mul(1i128 << binary_power).unwrap_or(SATURATED);
    if decimal_power >= 0 {
        for _ in 0..decimal_power {
            value = value.checked_mul(10).unwrap_or(SATURATED).min(SATURATED);
        }
    } else {
        let divisor = 10i128.checked_pow(decimal_power.unsigned_abs())?;
        value = ceil_div(value, divisor);
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::cluster::{ClusterSpec, ClusterStatus};

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    #[test]
    fn quantities_in_nano_units() {
        let cases: &[(&str, Option<i128>)] = &[
            ("1", Some(1_000_000_000)),
            ("100m", Some(100_000_000)),
            ("1.5", Some(1_500_000_000)),
            ("2Ki", Some(2048 * 1_000_000_000)),
            ("1Gi", Some((1 << 30) * 1_000_000_000)),
            ("1k", Some(1_000_000_000_000)),
            ("1e3", Some(1_000_000_000_000)),
            ("5n", Some(5)),
            ("0.5n", Some(1)),
            ("-1", Some(-1_000_000_000)),
            ("x", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(nano_units(&q(text)), *want, "{text}");
        }
    }

    fn list(items: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(items.iter().map(|(k, v)| (k.to_string(), q(v))).collect())
    }

    fn cluster(summary: Option<ResourceSummary>) -> Cluster {
        let mut c = Cluster::new("m1", ClusterSpec::default());
        c.status = Some(ClusterStatus { resource_summary: summary, ..Default::default() });
        c
    }

    fn requests(items: &[(&str, &str)]) -> ReplicaRequirements {
        ReplicaRequirements { resource_request: list(items), ..Default::default() }
    }

    #[test]
    fn general_estimator_table() {
        let summary = ResourceSummary {
            allocatable: list(&[("cpu", "10"), ("memory", "16Gi"), ("pods", "110")]),
            allocated: list(&[("cpu", "2500m"), ("memory", "4Gi"), ("pods", "10")]),
            allocating: list(&[("cpu", "500m"), ("pods", "5")]),
            allocatable_modelings: None,
        };
        let cases: &[(&str, Option<ResourceSummary>, Option<ReplicaRequirements>, i64)] = &[
            ("no summary", None, None, 0),
            ("no requirements: free pods", Some(summary.clone()), None, 95),
            ("cpu bound: 7000m / 1000m", Some(summary.clone()), Some(requests(&[("cpu", "1")])), 7),
            ("cpu bound in millicores", Some(summary.clone()), Some(requests(&[("cpu", "300m")])), 23),
            ("memory bound: 12Gi / 5Gi", Some(summary.clone()), Some(requests(&[("memory", "5Gi")])), 2),
            ("pods bound", Some(summary.clone()), Some(requests(&[("cpu", "10m")])), 95),
            ("unknown resource", Some(summary.clone()), Some(requests(&[("nvidia.com/gpu", "1")])), 0),
        ];
        for (name, summary, reqs, want) in cases {
            assert_eq!(general_estimate(&cluster(summary.clone()), reqs.as_ref()), *want, "{name}");
        }
    }

    #[test]
    fn resource_models_bound_the_estimate() {
        use flotilla_api::federation::karmada::cluster::{AllocatableModeling, ResourceModel, ResourceModelRange};
        let range = |name: &str, min: &str, max: &str| ResourceModelRange { name: name.into(), min: q(min), max: q(max) };
        let mut c = cluster(Some(ResourceSummary {
            allocatable: list(&[("cpu", "100"), ("memory", "400Gi"), ("pods", "1000")]),
            allocatable_modelings: Some(vec![
                AllocatableModeling { grade: 0, count: 5 },
                AllocatableModeling { grade: 1, count: 2 },
                AllocatableModeling { grade: 2, count: 3 },
            ]),
            ..Default::default()
        }));
        c.spec.resource_models = Some(vec![
            ResourceModel { grade: 0, ranges: vec![range("cpu", "0", "1"), range("memory", "0", "4Gi")] },
            ResourceModel { grade: 1, ranges: vec![range("cpu", "1", "2"), range("memory", "4Gi", "16Gi")] },
            ResourceModel { grade: 2, ranges: vec![range("cpu", "2", "4"), range("memory", "16Gi", "32Gi")] },
        ]);
        // 1 CPU per replica: grade 1 nodes take 1 each, grade 2 nodes 2 each → 2 + 6.
        assert_eq!(general_estimate(&c, Some(&requests(&[("cpu", "1")]))), 8);
        // A resource the models do not cover: the summary decides, and it reports no storage.
        assert_eq!(general_estimate(&c, Some(&requests(&[("cpu", "2"), ("storage", "1")]))), 0);
    }
}
