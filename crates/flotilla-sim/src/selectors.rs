//! Matching labels against label selectors and node selector terms (typed, as the objects
//! arrive from k8s-openapi).

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Labels as the simulator keeps them: sorted pairs, compact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    pub fn from_map(map: Option<&std::collections::BTreeMap<String, String>>) -> Labels {
        Labels(map.into_iter().flatten().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.0[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

/// Whether labels (looked up by `get`) satisfy a selector. An absent selector selects nothing;
/// an empty one everything (the workload controllers' rule).
pub fn matches<'a>(selector: Option<&LabelSelector>, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    let Some(s) = selector else { return false };
    for (k, v) in s.match_labels.iter().flatten() {
        if get(k) != Some(v.as_str()) {
            return false;
        }
    }
    for e in s.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        if !requirement(&e.operator, get(&e.key), values) {
            return false;
        }
    }
    true
}

/// A plain map selector (a Service's `spec.selector`): every pair must match; empty selects
/// nothing, as the endpoint controllers treat it.
pub fn matches_map<'a>(selector: &std::collections::BTreeMap<String, String>, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| get(k) == Some(v.as_str()))
}

fn requirement(op: &str, actual: Option<&str>, values: &[String]) -> bool {
    match op {
        "In" => actual.is_some_and(|a| values.iter().any(|v| v == a)),
        "NotIn" => actual.is_none_or(|a| !values.iter().any(|v| v == a)),
        "Exists" => actual.is_some(),
        "DoesNotExist" => actual.is_none(),
        "Gt" | "Lt" => {
            let (Some(a), Some(b)) = (actual.and_then(|a| a.parse::<i64>().ok()), values.first().and_then(|v| v.parse::<i64>().ok())) else {
                return false;
            };
            if op == "Gt" { a > b } else { a < b }
        }
        _ => false,
    }
}

/// Whether a node (its labels and name) satisfies node selector terms: terms are ORed, the
/// requirements of a term ANDed; `matchFields` knows `metadata.name`.
pub fn node_terms_match<'a>(terms: &[NodeSelectorTerm], node_name: &str, labels: impl Fn(&str) -> Option<&'a str> + Copy) -> bool {
    terms.iter().any(|t| {
        let exprs: &[NodeSelectorRequirement] = t.match_expressions.as_deref().unwrap_or_default();
        let fields: &[NodeSelectorRequirement] = t.match_fields.as_deref().unwrap_or_default();
        (!exprs.is_empty() || !fields.is_empty())
            && exprs.iter().all(|r| requirement(&r.operator, labels(&r.key), r.values.as_deref().unwrap_or_default()))
            && fields.iter().all(|r| {
                let actual = (r.key == "metadata.name").then_some(node_name);
                requirement(&r.operator, actual, r.values.as_deref().unwrap_or_default())
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors() {
        let labels = Labels::from_map(Some(&[("app".to_string(), "web".to_string()), ("tier".into(), "1".into())].into()));
        let get = |k: &str| labels.get(k);
        let mut s = LabelSelector { match_labels: Some([("app".to_string(), "web".to_string())].into()), ..Default::default() };
        assert!(matches(Some(&s), get));
        s.match_expressions = Some(vec![LabelSelectorRequirement { key: "tier".into(), operator: "NotIn".into(), values: Some(vec!["1".into()]) }]);
        assert!(!matches(Some(&s), get));
        assert!(!matches(None, get));
        assert!(matches(Some(&LabelSelector::default()), get));
        let term = NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement { key: "metadata.name".into(), operator: "In".into(), values: Some(vec!["n1".into()]) }]),
            ..Default::default()
        };
        assert!(node_terms_match(std::slice::from_ref(&term), "n1", get));
        assert!(!node_terms_match(&[term], "n2", get));
    }
}
