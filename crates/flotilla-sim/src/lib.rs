//! Simulated member clusters: Flotilla's API server in member mode plus a workload simulator
//! doing in-process what kube-controller-manager, kube-scheduler and the kubelets do, with
//! fault knobs — for demos, system tests and scale benchmarks (`flotilla member`).
//!
//! Start reading at [`member`] (one member: store, API server, simulator, faults), then
//! [`simulator`] (the loop: one store watch feeding [`cache`], work dispatched to the
//! controllers in [`workloads`] and [`nodes`]) and [`fleet`] (many members behind one HTTPS
//! listener, routed by `/clusters/<name>`, with the admin endpoint). [`containers`] serves the
//! simulated containers' `pods/log` and `pods/exec` (WebSocket) through the API server's
//! connect seam.
//!
//! Invariants: the simulator writes only through its member's API (`api::Writer`), so every
//! object it makes passed the API server's validation and admission; it reads from the
//! member's store with one watch. Faults apply to requests from outside the member only.

pub mod admin;
pub mod api;
pub mod bench;
pub mod cache;
pub mod config;
pub mod containers;
pub mod cron;
pub mod faults;
pub mod fleet;
pub mod kinds;
pub mod member;
pub mod node_kind;
pub mod nodes;
pub mod quantity;
pub mod selectors;
pub mod simulator;
pub mod workloads;

pub use config::{MemberConfig, NodeShape, Timings};
pub use faults::FaultSettings;
pub use fleet::{Fleet, FleetConfig};
pub use member::{Member, MemberError};
pub use nodes::CapacityChange;
