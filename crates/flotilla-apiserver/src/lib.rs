//! Flotilla's Kubernetes-compatible API server: an axum `Router` over the store.
//!
//! Start at [`server`] (the router and its routing), `filters` (authentication,
//! impersonation, authorization, max-in-flight and timeouts as tower layers), then `objects`
//! (the write pipeline for single objects), `strategy` (what is particular to each kind, one
//! file per kind) and `listwatch` (lists and watch streams). [`resources`] is the table of what is served; [`error`] the one place errors
//! become `Status` objects; [`serve`] puts the router on HTTPS; [`inproc`] lets in-process
//! controllers use it as a `kube::Client` transport; [`connect`] is the seam through which the
//! binary installs handlers for connect subresources (Karmada's `clusters/proxy`).
//!
//! The modules form layers; a module imports only from layers below its own (ADR 0020,
//! checked by `tests/module_graph.rs`), bottom first:
//!
//! 1. foundations: `error`, `meta`, `request` (paths, queries), `negotiate` (content types),
//!    `response` (JSON responses), `config` (the server's settings), the decoders (`go_json`,
//!    `duplicate_fields`, `protobuf`), `table`, `metrics`, `pki`, `serve`, `site` (static
//!    files served under a prefix: the dashboard's), …;
//! 2. the resource model: `auth` (identities, the authorizer contract), `structural` (schemas,
//!    with their CEL rules and costs), `connect` (the seam's types), `resources` (the served
//!    table), `discovery`, `storage` (keys, stored form, the CRDs as stored);
//! 3. policy and documents: `rbac`, `impersonation`, `service_account_jwt`, `openapi`,
//!    `crd_openapi`, `openapi_v2`;
//! 4. `state`: `ApiState`, what one server shares across requests;
//! 5. `scope`: `RequestScope`, one resource request, and the path's resource and body;
//! 6. `crd` (CRDs made served), then `strategy`: the registry of per-kind strategies
//!    (ADR 0023);
//! 7. the handlers: `listwatch`, `patching`, `objects`, `rbac_bootstrap`, `connect_request`;
//! 8. `filters`: the request filters as tower layers;
//! 9. [`server`]: the router over all of them ([`kubernetes_service`] and [`inproc`] only
//!    take a router, so they sit low).
//!
//! Invariants: the API server talks only to the store — never to a controller or a member
//! cluster; every failure reaches the client as a `Status` with the real server's code and
//! reason; `resourceVersion` is the store revision; nothing imports a layer above its own;
//! kind behaviour is reached only through the strategy registry (`tests/strategy_boundary.rs`).

pub mod advertise;
pub mod auth;
mod config;
pub mod connect;
mod connect_request;
mod crd;
mod crd_openapi;
mod discovery;
mod duplicate_fields;
pub mod encryption;
pub mod error;
mod filters;
mod gnostic;
mod go_json;
mod impersonation;
pub mod inproc;
pub mod kubernetes_service;
mod listwatch;
mod meta;
pub mod metrics;
pub mod negotiate;
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
mod response;
mod scope;
pub mod serve;
pub mod server;
mod service_account_jwt;
pub mod site;
mod state;
mod storage;
mod strategy;
pub mod structural;
pub mod table;
mod url_syntax;

pub use auth::{Identity, TokenFile};
pub use server::{ApiServer, ApiServerConfig, VersionInfo};

/// Namespaces that exist from the start, as on a real cluster.
pub const BOOTSTRAP_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];
