//! Namespaces: the service account controller's `default` ServiceAccount in every namespace,
//! and, for a namespace being deleted, Flotilla's own namespace controller
//! (`flotilla_kube_controllers::namespace`), called with an in-process client when there is work.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use serde_json::json;

use crate::kinds::{NAMESPACES, SERVICE_ACCOUNTS};
use crate::simulator::{Ctx, Reconciled};

pub const NAME: &str = "serviceaccount-controller";

pub async fn reconcile(name: &str, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(info) = ctx.cache.namespaces.get(name) else { return Ok(None) };
    if info.terminating {
        let Some(ns) = ctx.read::<Namespace>(&NAMESPACES, "", name).await? else { return Ok(None) };
        let c = Arc::new(flotilla_kube_controllers::namespace::Context { client: ctx.api.kube_client(), config: Default::default() });
        if let Err(e) = flotilla_kube_controllers::namespace::reconcile(Arc::new(ns), c).await {
            tracing::debug!(namespace = name, error = %e, "emptying a terminating namespace failed; retrying");
        }
        // Until the namespace is gone: its content disappears without touching the namespace.
        return Ok(Some(ctx.config.timings.retry));
    }
    if ctx.cache.service_accounts.contains(&(name.to_string(), "default".to_string())) {
        return Ok(None);
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}});
    match ctx.api.create(&SERVICE_ACCOUNTS, name, &sa).await {
        Ok(_) => Ok(None),
        Err(e) if e.code == 409 || e.is_not_found() => Ok(None),
        // A namespace being deleted refuses new objects; the next change brings us back.
        Err(e) if e.code == 403 => Ok(None),
        Err(e) => Err(e.into()),
    }
}
