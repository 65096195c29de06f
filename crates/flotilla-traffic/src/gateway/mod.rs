//! The built-in L7 gateway (`flotilla up --gateway-listen`, ADR 0038): one entry point for
//! Karmada's MultiClusterIngress and KubeFed's FederatedIngress, routing each request by host
//! and path to the ready endpoints of the backend Service in the healthy clusters.
//! [`routes`] computes the table (pure), [`watch`] keeps it and the TLS certificates current
//! from the control plane, [`proxy`] forwards requests (load balancing, retries, passive
//! health), [`server`] serves HTTP/1.1 and HTTP/2, over TLS with the ingresses' Secrets.

pub mod proxy;
pub mod routes;
pub mod server;
pub mod tls;
pub mod watch;

use std::sync::Arc;

use parking_lot::RwLock;
use rustls::sign::CertifiedKey;

pub use proxy::{Counters, Gateway};
pub use routes::Routes;
pub use server::Listener;

/// The routing table and certificates requests read, shared with whatever rebuilds them.
#[derive(Clone, Default)]
pub struct Shared {
    routes: Arc<RwLock<Arc<Routes>>>,
    certs: Arc<RwLock<Arc<tls::Certs>>>,
    pub counters: Arc<Counters>,
}

impl Shared {
    pub fn set_routes(&self, routes: Routes) {
        *self.routes.write() = Arc::new(routes);
    }

    pub fn routes(&self) -> Arc<Routes> {
        self.routes.read().clone()
    }

    pub fn set_certs(&self, certs: tls::Certs) {
        *self.certs.write() = Arc::new(certs);
    }

    /// The certificate for a TLS server name, if an ingress has one for it.
    pub fn cert(&self, server_name: &str) -> Option<Arc<CertifiedKey>> {
        self.certs.read().get(server_name)
    }
}
