//! Multi-cluster services as Karmada's MCS path runs them (ADR 0037): [`export`] reports the
//! EndpointSlices of exported member Services as Works (in each member the process serves:
//! Push clusters on the control plane, its own cluster in a pull agent); [`import`] turns the
//! reports into the control plane's `imported-<cluster>-<slice>` EndpointSlices and a
//! ClusterSetIP ServiceImport into its `derived-<name>` Service, which the ServiceImport's
//! dependencies carry to the consumer clusters; [`cross_cluster`] is the MultiClusterService
//! path: a `CrossCluster` MultiClusterService's providers report their slices (through
//! [`export`]) and each is dispatched to the consumers as `<provider>-<slice>`.

pub mod cross_cluster;
pub mod export;
pub mod import;
