//! Flotilla's cross-cluster traffic (issue 26, ADR 0037): [`dns`], the built-in DNS server for
//! ClusterSet names and KubeFed's DNSEndpoints, and [`gateway`], the L7 gateway for
//! MultiClusterIngress and FederatedIngress.

pub mod dns;
pub mod gateway;

/// The DNS message types (hickory's), for clients of the DNS server: tests and benchmarks.
pub use hickory_server::proto;

/// Waits for the next change (false at shutdown), then lets a burst of changes land so that
/// they are taken in one rebuild: the loop of every table kept from the informers.
pub(crate) async fn next_change(changed: &tokio::sync::Notify, shutdown: &flotilla_runtime::CancellationToken) -> bool {
    tokio::select! {
        _ = changed.notified() => {}
        _ = shutdown.cancelled() => return false,
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    true
}
