//! The built-in DNS server (`flotilla up --dns-listen`, ADR 0037): authoritative for the
//! ClusterSet names of the MCS API and for KubeFed's DNSEndpoints, on hickory-server.
//! [`table`] computes the records (pure), [`watch`] keeps them current from the control
//! plane, [`server`] answers queries.

pub mod server;
pub mod table;
pub mod watch;

pub use server::{Listener, Shared};
pub use table::Settings;
