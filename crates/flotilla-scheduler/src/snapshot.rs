//! The clusters one scheduling pass sees: spec, status and metadata, frozen for the pass.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::Cluster;

/// The clusters known to the scheduler, in name order. Cheap to clone (shared clusters).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    clusters: Vec<Arc<Cluster>>,
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
        Snapshot { clusters }
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
