//! Kubernetes API logic with no I/O, shared by the API server and the controllers.
//!
//! - [`selector`]: label and field selectors (the query-string grammar and `LabelSelector`
//!   objects), parse → print → parse round-trips.
//! - [`patch`]: JSON patch (RFC 6902, with Kubernetes' null-`test` rule), JSON merge patch
//!   (RFC 7386) and strategic merge patch driven by patch metadata recorded from a real
//!   kube-apiserver.
//! - [`jsonpath`]: the JSONPath subset of printer columns and kubectl-style templates.
//! - [`defaults`]: defaulting of built-in kinds as kube-apiserver defaults them, and canonical
//!   quantities.
//!
//! Invariant: pure functions over `serde_json::Value`; nothing here touches a network, a disk
//! or a clock.

pub mod admission;
pub mod bootstrap_token;
pub mod certificates;
pub mod defaults;
pub mod edge;
pub mod federation;
pub mod interpreter;
pub mod jsonpath;
pub mod managed;
pub mod overrides;
pub mod patch;
pub mod selector;
pub mod validation;
