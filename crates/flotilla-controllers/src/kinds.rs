//! Template kinds resolved through the control plane's discovery, cached per controller: a
//! binding names its template (and a template its dependencies) by apiVersion and kind only.

use std::collections::HashMap;

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use parking_lot::Mutex;

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
