//! The clusters one scheduling pass sees: spec, status and metadata, frozen for the pass —
//! and, for the workload affinity filters, where the grouped workloads run.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;

/// The clusters known to the scheduler, in name order. Cheap to clone (shared clusters).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    clusters: Vec<Arc<Cluster>>,
    workloads: Vec<GroupedWorkload>,
}

/// A ResourceBinding in a workload affinity group, and the clusters it is scheduled to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupedWorkload {
    pub namespace: String,
    /// The binding's name.
    pub name: String,
    pub affinity_group: Option<String>,
    pub anti_affinity_group: Option<String>,
    pub clusters: Vec<String>,
}

impl Snapshot {
    /// A snapshot of these clusters.
    pub fn new(clusters: impl IntoIterator<Item = Cluster>) -> Snapshot {
        Snapshot::from_shared(clusters.into_iter().map(Arc::new))
    }

    /// A snapshot of shared clusters, e.g. a reflector store's state.
    pub fn from_shared(clusters: impl IntoIterator<Item = Arc<Cluster>>) -> Snapshot {
        let mut clusters: Vec<Arc<Cluster>> = clusters.into_iter().collect();
        clusters.sort_by(|a, b| cluster_name(a).cmp(cluster_name(b)));
        Snapshot { clusters, workloads: Vec::new() }
    }

    /// The snapshot with the grouped workloads the workload affinity filters look at.
    pub fn with_workloads(mut self, workloads: Vec<GroupedWorkload>) -> Snapshot {
        self.workloads = workloads;
        self
    }

    /// The grouped workloads (empty unless [`Snapshot::with_workloads`] gave some).
    pub fn workloads(&self) -> &[GroupedWorkload] {
        &self.workloads
    }

    /// Every cluster, deleting ones included, in name order.
    pub fn clusters(&self) -> &[Arc<Cluster>] {
        &self.clusters
    }

    /// The cluster of this name.
    pub fn get(&self, name: &str) -> Option<&Cluster> {
        self.clusters.binary_search_by(|c| cluster_name(c).cmp(name)).ok().map(|i| &*self.clusters[i])
    }

    /// Number of clusters (the N of "0/N clusters are available").
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Whether the snapshot has no cluster.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }
}

/// The cluster's name (empty if unset).
pub fn cluster_name(cluster: &Cluster) -> &str {
    cluster.metadata.name.as_deref().unwrap_or("")
}

/// Whether the cluster is being deleted; the scheduler never places onto such a cluster.
pub fn is_deleting(cluster: &Cluster) -> bool {
    cluster.metadata.deletion_timestamp.is_some()
}
