//! What the scheduler reads from a ResourceBinding or ClusterResourceBinding.

use std::fmt;

use flotilla_api::federation::karmada::policy::Placement;
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding, ResourceBindingSpec, ResourceBindingStatus, TargetCluster};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Which of the two binding kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BindingKind {
    ResourceBinding,
    ClusterResourceBinding,
}

impl BindingKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            BindingKind::ResourceBinding => "ResourceBinding",
            BindingKind::ClusterResourceBinding => "ClusterResourceBinding",
        }
    }
}

/// A borrowed view of a binding: identity, spec and status. Build it from either kind with
/// `From`, or field by field in tests.
#[derive(Clone, Copy, Debug)]
pub struct BindingView<'a> {
    pub kind: BindingKind,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// `metadata.uid`; its FNV-32a parity orients the Webster tie-break.
    pub uid: &'a str,
    pub spec: &'a ResourceBindingSpec,
    pub status: Option<&'a ResourceBindingStatus>,
}

impl<'a> From<&'a ResourceBinding> for BindingView<'a> {
    fn from(rb: &'a ResourceBinding) -> Self {
        BindingView {
            kind: BindingKind::ResourceBinding,
            namespace: rb.metadata.namespace.as_deref(),
            name: rb.metadata.name.as_deref().unwrap_or(""),
            uid: rb.metadata.uid.as_deref().unwrap_or(""),
            spec: &rb.spec,
            status: rb.status.as_ref(),
        }
    }
}

impl<'a> From<&'a ClusterResourceBinding> for BindingView<'a> {
    fn from(crb: &'a ClusterResourceBinding) -> Self {
        BindingView {
            kind: BindingKind::ClusterResourceBinding,
            namespace: None,
            name: crb.metadata.name.as_deref().unwrap_or(""),
            uid: crb.metadata.uid.as_deref().unwrap_or(""),
            spec: &crb.spec.0,
            status: crb.status.as_ref(),
        }
    }
}

impl<'a> BindingView<'a> {
    /// `spec.placement`.
    pub fn placement(&self) -> Option<&'a Placement> {
        self.spec.placement.as_ref()
    }

    /// `spec.replicas` (0 when unset: not a workload).
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(0)
    }

    /// Whether the binding is a workload whose replicas the scheduler divides (replicas > 0).
    pub fn is_workload(&self) -> bool {
        self.replicas() > 0
    }

    /// The current scheduling result, `spec.clusters`.
    pub fn target_clusters(&self) -> &'a [TargetCluster] {
        self.spec.clusters.as_deref().unwrap_or_default()
    }

    /// Whether `spec.clusters` names this cluster.
    pub fn targets(&self, cluster: &str) -> bool {
        self.target_clusters().iter().any(|t| t.name == cluster)
    }

    /// Replicas currently assigned to this cluster by `spec.clusters`.
    pub fn assigned_replicas(&self, cluster: &str) -> i32 {
        self.target_clusters().iter().filter(|t| t.name == cluster).map(|t| t.replicas.unwrap_or(0)).sum()
    }

    /// `status.schedulerObservingAffinityName`, when set.
    pub fn observed_affinity_name(&self) -> Option<&'a str> {
        self.status.and_then(|s| s.scheduler_observing_affinity_name.as_deref()).filter(|n| !n.is_empty())
    }

    /// `status.lastScheduledTime`.
    pub fn last_scheduled_time(&self) -> Option<&'a Time> {
        self.status.and_then(|s| s.last_scheduled_time.as_ref())
    }

    /// `util.RescheduleRequired`: `spec.rescheduleTriggeredAt` is later than the last schedule,
    /// which asks for a fresh (not steady) reschedule.
    pub fn reschedule_required(&self) -> bool {
        match (&self.spec.reschedule_triggered_at, self.last_scheduled_time()) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(triggered), Some(last)) => triggered.0 > last.0,
        }
    }
}

impl fmt::Display for BindingView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace {
            Some(ns) if !ns.is_empty() => write!(f, "{}({ns}/{})", self.kind.as_str(), self.name),
            _ => write!(f, "{}({})", self.kind.as_str(), self.name),
        }
    }
}
