//! Pods: deleted gracefully while a node runs them, selectable by node, phase and the like.

use serde_json::Value;

use super::Strategy;

pub(super) struct Pods;

impl Strategy for Pods {
    /// How long a pod being deleted is given to stop, as kube-apiserver decides it: none for a
    /// pod no node runs (unscheduled, or finished), else the request's grace period or the
    /// pod's `terminationGracePeriodSeconds` (30). With a grace period the pod is only marked
    /// (deletionTimestamp in the future) and its kubelet deletes it once its containers stopped.
    fn deletion_grace(&self, pod: &Value, requested: Option<i64>) -> Option<i64> {
        let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let finished = matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
        if !bound || finished {
            return Some(0);
        }
        Some(requested.or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64)).unwrap_or(30).max(0))
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }
}
