//! Flotilla's Kubernetes-compatible API server: an axum `Router` over the store.
//!
//! Start at [`server`] (routing, identity, authorization, overload protection), then
//! [`objects`] (the write pipeline for single objects) and [`listwatch`] (lists and watch
//! streams). [`resources`] is the table of what is served; [`error`] the one place errors
//! become `Status` objects; [`serve`] puts the router on HTTPS; [`inproc`] lets in-process
//! controllers use it as a `kube::Client` transport; [`connect`] is the seam through which the
//! binary installs handlers for connect subresources (Karmada's `clusters/proxy`).
//!
//! Invariants: the API server talks only to the store — never to a controller or a member
//! cluster; every failure reaches the client as a `Status` with the real server's code and
//! reason; `resourceVersion` is the store revision.

pub mod advertise;
pub mod auth;
mod cel_cost;
mod cel_rules;
pub mod connect;
mod crd;
mod crd_openapi;
mod discovery;
mod duplicate_fields;
pub mod encryption;
pub mod error;
mod gnostic;
mod go_json;
mod impersonation;
pub mod inproc;
pub mod kubernetes_service;
mod listwatch;
mod meta;
pub mod metrics;
mod negotiate;
mod objects;
mod openapi;
mod openapi_v2;
mod patching;
pub mod pki;
mod protobuf;
pub mod rbac;
mod rbac_bootstrap;
pub mod request;
pub mod resources;
pub mod serve;
pub mod server;
mod service_account_jwt;
mod storage;
pub mod structural;
pub mod table;
mod url_syntax;

pub use auth::{Identity, TokenFile};
pub use server::{ApiServer, ApiServerConfig, VersionInfo};

/// Namespaces that exist from the start, as on a real cluster.
pub const BOOTSTRAP_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];
