//! Template kinds resolved through the control plane's discovery, cached per controller: a
//! binding names its template (and a template its dependencies) by apiVersion and kind only.
//! Also how a template is read from a kind's shared cache.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Client;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// The object `namespace`/`name` (no namespace, or an empty one: cluster-scoped) in the cache of
/// `resource`'s objects.
pub fn cached(store: &Store<DynamicObject>, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
    let at = ObjectRef::new_with(name, resource.clone());
    store.get(&match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => at.within(ns),
        None => at,
    })
}

/// A cached template as JSON. Items of a LIST carry no apiVersion and kind (a real server
/// leaves them out): the cache's kind says.
pub fn template_json(obj: &DynamicObject, resource: &ApiResource) -> Result<Value, serde_json::Error> {
    let mut template = serde_json::to_value(obj)?;
    template["apiVersion"] = json!(resource.api_version);
    template["kind"] = json!(resource.kind);
    Ok(template)
}

/// The group-version-kind an object's `apiVersion` and `kind` name (`v1` is the core group).
pub fn gvk_of(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

#[derive(Default)]
pub struct Kinds {
    resolved: Mutex<HashMap<(String, String), ApiResource>>,
}

impl Kinds {
    /// The resource serving `api_version`/`kind`; `None` while the control plane does not serve it.
    pub async fn resolve(&self, client: &Client, api_version: &str, kind: &str) -> Result<Option<ApiResource>, kube::Error> {
        let cache_key = (api_version.to_string(), kind.to_string());
        if let Some(ar) = self.resolved.lock().get(&cache_key) {
            return Ok(Some(ar.clone()));
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        match kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await {
            Ok((ar, _)) => {
                self.resolved.lock().insert(cache_key, ar.clone());
                Ok(Some(ar))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
