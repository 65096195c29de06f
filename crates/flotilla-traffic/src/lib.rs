//! Flotilla's cross-cluster traffic (issue 26, ADR 0037): [`dns`], the built-in DNS server for
//! ClusterSet names and KubeFed's DNSEndpoints.

pub mod dns;

/// The DNS message types (hickory's), for clients of the DNS server: tests and benchmarks.
pub use hickory_server::proto;
