//! Which templates a resource selector picks and which clusters a `ClusterAffinity` picks
//! (Karmada's `util.ResourceSelectorPriority` and `util.ClusterMatches`).

use serde_json::Value;

use crate::federation::karmada::cluster::Cluster;
use crate::federation::karmada::policy::{ClusterAffinity, ResourceSelector};
use crate::interpreter::unstructured;
use crate::selector::{LabelSelector, Operator, Requirement};

/// How specifically a resource selector picks a template; higher is more specific. Policies
/// of the same scope are applied from the least to the most specific.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ImplicitPriority {
    MisMatch,
    MatchAll,
    MatchLabelSelector,
    MatchName,
}

/// How `selector` picks `template`: apiVersion and kind must be equal and the namespace (when
/// the selector has one); then a name decides alone, else a label selector, else it matches all.
pub fn selector_priority(template: &Value, selector: &ResourceSelector) -> ImplicitPriority {
    let field = |path: &[&str]| unstructured::string(template, path).unwrap_or("");
    if field(&["apiVersion"]) != selector.api_version
        || field(&["kind"]) != selector.kind
        || selector.namespace.as_deref().is_some_and(|ns| !ns.is_empty() && ns != field(&["metadata", "namespace"]))
    {
        return ImplicitPriority::MisMatch;
    }
    if let Some(name) = selector.name.as_deref().filter(|n| !n.is_empty()) {
        return if name == field(&["metadata", "name"]) { ImplicitPriority::MatchName } else { ImplicitPriority::MisMatch };
    }
    let Some(label_selector) = &selector.label_selector else {
        return ImplicitPriority::MatchAll;
    };
    let labels = unstructured::string_map(template, &["metadata", "labels"]);
    if label_selector_matches(label_selector, |k| labels.get(k).and_then(Value::as_str)) {
        ImplicitPriority::MatchLabelSelector
    } else {
        ImplicitPriority::MisMatch
    }
}

/// The highest priority among `selectors`; a policy without selectors matches all.
pub fn selectors_priority(template: &Value, selectors: Option<&[ResourceSelector]>) -> ImplicitPriority {
    match selectors {
        None | Some([]) => ImplicitPriority::MatchAll,
        Some(selectors) => selectors.iter().map(|s| selector_priority(template, s)).max().unwrap_or(ImplicitPriority::MisMatch),
    }
}

/// A `metav1.LabelSelector` over labels looked up through `get`; one that does not convert to
/// a selector matches nothing.
fn label_selector_matches<'a>(selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    let Ok(json) = serde_json::to_value(selector) else {
        return false;
    };
    LabelSelector::from_json(&json).is_ok_and(|s| s.matches_with(get))
}

/// Whether `affinity` picks `cluster`: not excluded, the label selector matches, the field
/// selector matches (`zone` against all the cluster's zones; `provider` and `region` as
/// labels), and the cluster is named if names are given.
pub fn cluster_matches(cluster: &Cluster, affinity: &ClusterAffinity) -> bool {
    let name = cluster.metadata.name.as_deref().unwrap_or("");
    if affinity.exclude.iter().flatten().any(|n| n == name) {
        return false;
    }
    if let Some(selector) = &affinity.label_selector {
        let labels = cluster.metadata.labels.clone().unwrap_or_default();
        if !label_selector_matches(selector, |k| labels.get(k).map(String::as_str)) {
            return false;
        }
    }
    if let Some(expressions) = affinity.field_selector.as_ref().and_then(|f| f.match_expressions.as_ref()) {
        let zones: Vec<&str> = cluster.spec.zones.iter().flatten().map(String::as_str).collect();
        let mut field_requirements = Vec::new();
        for expr in expressions {
            let values: Vec<&str> = expr.values.iter().flatten().map(String::as_str).collect();
            if expr.key == "zone" {
                if !zones_match(&expr.operator, &values, &zones) {
                    return false;
                }
                continue;
            }
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                "Gt" => Operator::GreaterThan,
                "Lt" => Operator::LessThan,
                _ => return false,
            };
            match Requirement::new(expr.key.as_str(), operator, values) {
                Ok(r) => field_requirements.push(r),
                Err(_) => return false,
            }
        }
        let field = |key: &str| -> Option<&str> {
            match key {
                "provider" => cluster.spec.provider.as_deref(),
                "region" => cluster.spec.region.as_deref(),
                _ => None,
            }
            .filter(|v| !v.is_empty())
        };
        if !field_requirements.iter().all(|r| r.matches_with(field)) {
            return false;
        }
    }
    affinity.cluster_names.as_ref().is_none_or(|names| names.is_empty() || names.iter().any(|n| n == name))
}

/// Karmada's `matchZones`: `In` needs every zone of the cluster listed, `NotIn` none of them.
fn zones_match(operator: &str, values: &[&str], zones: &[&str]) -> bool {
    match operator {
        "In" => !zones.is_empty() && zones.iter().all(|z| values.contains(z)),
        "NotIn" => zones.iter().all(|z| !values.contains(z)),
        "Exists" => !zones.is_empty(),
        "DoesNotExist" => zones.is_empty(),
        _ => false,
    }
}
