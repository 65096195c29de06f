//! A member's resource summary (`Cluster.status.resourceSummary`) from its nodes and pods, as
//! Karmada's cluster status controller computes it: `allocatable` is the sum of the nodes'
//! allocatable; `allocating` the requests of pods not yet bound to a node, `allocated` those of
//! bound pods that have not finished (Succeeded/Failed), each with the pod count as `pods`.

use serde_json::{Map, Value, json};

use super::resources::{Amounts, pod_request};
use crate::federation::karmada::cluster::ResourceSummary;

/// Summarise `nodes` and `pods` (core/v1 objects as JSON).
pub fn resource_summary(nodes: &[Value], pods: &[Value]) -> Result<ResourceSummary, String> {
    let mut allocatable = Amounts::default();
    for node in nodes {
        if let Some(list) = node.pointer("/status/allocatable").and_then(Value::as_object) {
            allocatable.add(list, "status.allocatable")?;
        }
    }
    let mut allocating = Amounts::default();
    let mut allocated = Amounts::default();
    let one_pod: Map<String, Value> = json!({"pods": "1"}).as_object().cloned().unwrap_or_default();
    for pod in pods {
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
        if phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let target = if bound { &mut allocated } else { &mut allocating };
        if let Some(spec) = pod.get("spec")
            && let Some(request) = pod_request(spec, "spec")?
        {
            let list: Map<String, Value> = request.into_iter().map(|(k, q)| (k, Value::String(q.0))).collect();
            target.add(&list, "spec")?;
        }
        target.add(&one_pod, "pods")?;
    }
    Ok(ResourceSummary {
        allocatable: allocatable.into_list(),
        allocating: allocating.into_list(),
        allocated: allocated.into_list(),
        allocatable_modelings: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_nodes_and_splits_pods_by_binding_and_phase() {
        let nodes = vec![
            json!({"status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}),
            json!({"status": {"allocatable": {"cpu": "1500m", "memory": "1Gi", "pods": "110"}}}),
        ];
        let pod = |node: Option<&str>, phase: &str, cpu: &str| json!({"spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}, "status": {"phase": phase}});
        let pods = vec![pod(Some("n1"), "Running", "250m"), pod(Some("n1"), "Running", "250m"), pod(None, "Pending", "1"), pod(Some("n2"), "Succeeded", "8")];
        let s = resource_summary(&nodes, &pods).unwrap();
        let get =
            |l: &Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>, k: &str| l.as_ref().unwrap()[k].0.clone();
        assert_eq!(get(&s.allocatable, "cpu"), "3500m");
        assert_eq!(get(&s.allocatable, "memory"), "5Gi");
        assert_eq!(get(&s.allocatable, "pods"), "220");
        assert_eq!(get(&s.allocated, "cpu"), "500m");
        assert_eq!(get(&s.allocated, "memory"), "128Mi");
        assert_eq!(get(&s.allocated, "pods"), "2");
        assert_eq!(get(&s.allocating, "cpu"), "1");
        assert_eq!(get(&s.allocating, "pods"), "1");
        assert!(resource_summary(&[json!({"status": {"allocatable": {"cpu": "lots"}}})], &[]).is_err());
    }
}
