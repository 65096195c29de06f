//! How the simulator writes: HTTP requests handed to the member's router in-process, as the
//! simulator's own identity. Every write takes the API server's whole pipeline (decoding,
//! defaulting, validation, generation, admission) and produces the watch events a client's
//! write would, so the simulator never writes what a real client could not.
//!
//! Reads do not come this way: the simulator follows the member's store with one watch
//! (`cache`), which is what keeps a thousand members in one process cheap (see
//! `docs/benchmarks/sim.md`).

use std::sync::Arc;

use axum::body::Body;
use flotilla_apiserver::Identity;
use flotilla_apiserver::resources::Registry;
use flotilla_store::{Revision, Store};
use http::{Method, Request, header};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::kinds::Res;

/// A write the API server refused.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path}: {code} {reason}: {message}")]
pub struct WriteError {
    pub method: &'static str,
    pub path: String,
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl WriteError {
    pub fn is_not_found(&self) -> bool {
        self.code == 404
    }
    pub fn is_conflict(&self) -> bool {
        self.code == 409
    }
}

/// The simulator's connection to its member's API.
#[derive(Clone)]
pub struct Writer {
    router: axum::Router,
    registry: Arc<Registry>,
    store: Arc<dyn Store>,
    identity: Identity,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("identity", &self.identity.user).finish()
    }
}

/// The simulator acts as kube-controller-manager, kube-scheduler and the kubelets at once, so
/// it writes as a super-user.
pub const SIMULATOR_USER: &str = "system:flotilla-simulator";

impl Writer {
    pub fn new(router: axum::Router, registry: Arc<Registry>, store: Arc<dyn Store>) -> Writer {
        Writer { router, registry, store, identity: Identity::user(SIMULATOR_USER, &["system:masters"]) }
    }

    /// A `kube::Client` over the same router and identity, for code written against kube-rs
    /// (Flotilla's own controllers).
    pub fn kube_client(&self) -> kube::Client {
        kube::Client::new(flotilla_apiserver::inproc::InProcess::new(self.router.clone(), self.identity.clone()), "default")
    }

    /// The store's revision: after a write returns, at least the write's revision.
    pub async fn revision(&self) -> Revision {
        self.store.current_revision().await.unwrap_or(0)
    }

    async fn send(&self, method: Method, path: String, content_type: &str, body: Option<&Value>) -> Result<Value, WriteError> {
        crate::node_kind::ensure(&self.registry);
        let name: &'static str = match method {
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            _ => "GET",
        };
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap_or_default()).unwrap_or_default();
        let mut req = Request::builder()
            .method(method)
            .uri(&path)
            .header(header::CONTENT_TYPE, content_type)
            .header(header::ACCEPT, "application/json")
            .body(Body::from(bytes))
            .map_err(|e| WriteError { method: name, path: path.clone(), code: 0, reason: "BadRequest".into(), message: e.to_string() })?;
        req.extensions_mut().insert(self.identity.clone());
        let resp = match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if (200..300).contains(&code) {
            Ok(v)
        } else {
            Err(WriteError {
                method: name,
                path,
                code,
                reason: v.get("reason").and_then(Value::as_str).unwrap_or("").to_string(),
                message: v.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
            })
        }
    }

    pub async fn get(&self, res: &Res, ns: &str, name: &str) -> Result<Value, WriteError> {
        self.send(Method::GET, res.path(Some(ns), Some(name), None), "application/json", None).await
    }

    pub async fn create(&self, res: &Res, ns: &str, obj: &Value) -> Result<Value, WriteError> {
        self.send(Method::POST, res.path(Some(ns), None, None), "application/json", Some(obj)).await
    }

    /// A JSON merge patch of the object (`status: false`) or of its status.
    pub async fn merge_patch(&self, res: &Res, ns: &str, name: &str, patch: &Value, status: bool) -> Result<Value, WriteError> {
        let sub = status.then_some("status");
        self.send(Method::PATCH, res.path(Some(ns), Some(name), sub), "application/merge-patch+json", Some(patch)).await
    }

    /// Replace the object or its status; `obj` carries the resourceVersion it was read at.
    pub async fn replace(&self, res: &Res, ns: &str, name: &str, obj: &Value, status: bool) -> Result<Value, WriteError> {
        let sub = status.then_some("status");
        self.send(Method::PUT, res.path(Some(ns), Some(name), sub), "application/json", Some(obj)).await
    }

    /// Delete with these DeleteOptions (`{}` for the defaults).
    pub async fn delete(&self, res: &Res, ns: &str, name: &str, options: &Value) -> Result<Value, WriteError> {
        self.send(Method::DELETE, res.path(Some(ns), Some(name), None), "application/json", Some(options)).await
    }

    /// The API path of the object at a store key, for objects of any served kind.
    fn path_of_key(&self, key: &str) -> Option<String> {
        let parts = crate::kinds::parse_key(key.as_bytes())?;
        let catalog = self.registry.catalog();
        let info = catalog.all().find(|r| r.group == parts.group && r.plural == parts.plural)?;
        let base = if info.group.is_empty() { format!("/api/{}", info.version) } else { format!("/apis/{}/{}", info.group, info.version) };
        Some(if info.namespaced {
            format!("{base}/namespaces/{}/{}/{}", parts.namespace, info.plural, parts.name)
        } else {
            format!("{base}/{}/{}", info.plural, parts.name)
        })
    }

    /// Delete the object at a store key (any kind).
    pub async fn delete_key(&self, key: &str, options: &Value) -> Result<Value, WriteError> {
        let Some(path) = self.path_of_key(key) else { return Err(unknown_key(key)) };
        self.send(Method::DELETE, path, "application/json", Some(options)).await
    }

    /// JSON merge patch of the object at a store key (any kind).
    pub async fn merge_patch_key(&self, key: &str, patch: &Value) -> Result<Value, WriteError> {
        let Some(path) = self.path_of_key(key) else { return Err(unknown_key(key)) };
        self.send(Method::PATCH, path, "application/merge-patch+json", Some(patch)).await
    }
}

fn unknown_key(key: &str) -> WriteError {
    WriteError {
        method: "PATCH",
        path: key.to_string(),
        code: 404,
        reason: "NotFound".into(),
        message: "no served resource stores objects under this key".into(),
    }
}
