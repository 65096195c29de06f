//! Serving the `Node` kind, which Flotilla's API server does not serve (a control plane has no
//! nodes). A member needs it, so the member registers `nodes` (core/v1, cluster-scoped, with a
//! status subresource) as an extra resource of its API server's registry.
//!
//! The registry's extra resources are the ones CRDs add, and the API server's CRD worker
//! replaces that list whenever it syncs (on CRD changes and every minute). So the member puts
//! `nodes` back before every request it handles ([`ensure`]): a cheap pointer check when
//! nothing changed. The narrow race (a sync landing between the check and the lookup) is
//! retried by clients as any 404 during a rollout would be. This goes away once the API server
//! serves Node itself (requested in the report).

use std::sync::Arc;

use flotilla_apiserver::resources::{Codec, DecodeError, Registry, ResourceInfo};
use flotilla_apiserver::table::Printer;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

fn decode_node(v: Value) -> Result<Value, DecodeError> {
    let node: Node = serde_json::from_value(v).map_err(|e| DecodeError { path: String::new(), message: e.to_string() })?;
    serde_json::to_value(&node).map_err(|e| DecodeError { path: String::new(), message: e.to_string() })
}

fn node_info() -> ResourceInfo {
    ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        kind: "Node".into(),
        plural: "nodes".into(),
        singular: "node".into(),
        list_kind: "NodeList".into(),
        namespaced: false,
        short_names: vec!["no".into()],
        categories: Vec::new(),
        verbs: ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"].iter().map(|s| s.to_string()).collect(),
        status: true,
        finalize: false,
        approval: false,
        scale: None,
        generation: false,
        returns_deleted: false,
        codec: Codec::Typed(decode_node),
        strategic_patch: true,
        printer: Printer::Default,
    }
}

/// Make sure the registry serves `nodes`.
pub fn ensure(registry: &Arc<Registry>) {
    let catalog = registry.catalog();
    if catalog.lookup("", "v1", "nodes").is_some() {
        return;
    }
    let mut extra: Vec<ResourceInfo> = catalog.all().filter(|r| r.is_custom()).map(|r| (**r).clone()).collect();
    extra.push(node_info());
    registry.set_custom(extra);
}
