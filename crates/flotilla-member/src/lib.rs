//! Everything about reaching a member cluster. The only crate that builds member-cluster
//! clients.
//!
//! - [`access`]: a `kube::Client` for a member from its `Cluster` object and the Secret it
//!   references (`token`, `caBundle`), as Karmada stores them.
//! - [`applied`]: what Works applied to a member, read back from its labels (a pull agent's
//!   check against tombstones after an outage).
//! - [`discovery`]: per-member discovery, cached, refreshed on a miss.
//! - [`proxy`]: forwarding a request to a member as Flotilla (the `clusters/{name}/proxy`
//!   subresource the binary installs into the API server).
//! - [`tunnel`]: the reverse tunnel a pull agent opens to the control plane, both ends — the
//!   control plane's registry of open tunnels and the agent's dialling and forwarding.
//! - [`apply`]: applying a Work's manifest to a member with Karmada's rules: refuse to take over
//!   an object Karmada does not manage unless told to overwrite, retain member-owned fields,
//!   skip writes that change nothing; deleting (or releasing) it when the Work goes.
//!
//! Invariant: errors name the step and the member (`ApplyToMember { cluster, gvk, source }`),
//! and a missing permission is reported with the verb and resource the member refused.

pub mod access;
pub mod applied;
pub mod apply;
pub mod discovery;
pub mod holds;
pub mod join;
pub mod proxy;
pub mod tunnel;

pub use access::{Clients, Connection, MemberAccess, MemberError};
