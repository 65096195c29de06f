//! Resource strategies: what is particular to one kind on the write and read paths, as
//! kube-apiserver's generic registry stages a request through a kind's `RESTCreateStrategy`,
//! `RESTUpdateStrategy` and `RESTDeleteStrategy` (ADR 0023).
//!
//! The handlers (`objects`, `listwatch`, `server`) run the same pipeline for every resource and
//! ask [`for_resource`] for the kind's [`Strategy`] at each stage: canonicalize on decode,
//! prepare for create or update (what the server owns, what `/status` may change), defaults,
//! the name rule and validation, admission of its own (RBAC's escalation checks), the write's
//! side effects, graceful deletion, selectable fields. The trait's provided methods are a
//! built-in kind's behaviour (the rules `flotilla_api` ports from kube-apiserver); a kind's file
//! overrides only what differs. Custom resources all share [`custom::CustomResources`].
//!
//! Invariant: no module outside `strategy/` tests a resource's name to choose behaviour
//! (`tests/strategy_boundary.rs`); a new kind-specific rule is a method here and a line in
//! [`BUILTIN`].

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Cause};
use crate::meta::{self, NameRule};
use crate::resources::ResourceInfo;
use crate::scope::RequestScope;

mod certificates;
mod crds;
mod custom;
mod daemonsets;
mod endpoints;
mod events;
mod jobs;
mod namespaces;
mod pods;
mod rbac;
mod replicasets;
mod reviews;
mod secrets;
mod serviceaccounts;
mod services;

pub(crate) use reviews::{Virtual, virtual_resource};
pub(crate) use serviceaccounts::token_request;

/// The hooks of one kind, called by the handlers in this order: [`Strategy::canonicalize`]
/// (decode), [`Strategy::prepare_for_create`] / [`Strategy::prepare_for_update`],
/// defaults, [`Strategy::admit`], [`Strategy::name_rule`] and [`Strategy::validate`],
/// [`Strategy::complete_create`], the store, [`Strategy::after_write`].
#[async_trait]
pub(crate) trait Strategy: Send + Sync {
    /// What decoding does to a body (kube-apiserver's defaulting on decode and
    /// `Canonicalize`): canonical quantities and the kind's defaults.
    fn canonicalize(&self, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
        flotilla_api::defaults::apply_defaults(&info.group, &info.version, &info.kind, obj).map_err(|e| defaults_error(info, e))
    }

    /// `PrepareForCreate`: after decode and before the server-owned metadata is judged (a
    /// CRD's defaults and initial status; a custom resource's status reset; a
    /// CertificateSigningRequest's requester).
    fn prepare_for_create(&self, _ctx: &RequestScope, _obj: &mut Value) {}

    /// Defaults that need the created object's name, namespace, uid and creation time.
    fn default_on_create(&self, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
        flotilla_api::defaults::apply_create_defaults(&info.group, &info.version, &info.kind, obj).map_err(|e| defaults_error(info, e))
    }

    /// Whether the creating manager owns what [`Strategy::default_on_create`] adds (false:
    /// ownership is of the request as sent, as kube-apiserver records it before its strategy).
    fn owns_create_defaults(&self) -> bool {
        false
    }

    /// Whether writes record `metadata.managedFields` (kube-apiserver keeps none for
    /// CertificateSigningRequests).
    fn tracks_managed_fields(&self) -> bool {
        true
    }

    /// `PrepareForUpdate` of the main resource: `obj` is the request's object, `old` the
    /// stored one. With a `/status` subresource, status is the server's (ResetFields).
    fn prepare_for_update(&self, info: &ResourceInfo, obj: &mut Value, old: &Value) {
        if info.status {
            keep_old_status(obj, old);
        }
    }

    /// What a `/status` write may change: the stored object with the request's status.
    fn prepare_for_status_update(&self, old: &Value, new: &Value) -> Value {
        let mut o = old.clone();
        o["status"] = new.get("status").cloned().unwrap_or(Value::Null);
        if o["status"].is_null()
            && let Some(m) = o.as_object_mut()
        {
            m.remove("status");
        }
        o
    }

    /// What an `/approval` write may change (served where the resource says so:
    /// CertificateSigningRequests).
    fn prepare_for_approval_update(&self, old: &Value, _new: &Value) -> Value {
        old.clone()
    }

    /// Defaults for an update or a patch result.
    fn default_on_update(&self, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
        self.canonicalize(info, obj)
    }

    /// The desired state whose change bumps `metadata.generation`: everything but metadata
    /// and status.
    fn desired_state(&self, _info: &ResourceInfo, obj: &Value) -> Value {
        without(obj, &["metadata", "status", "apiVersion", "kind"])
    }

    /// What the object's name must look like.
    fn name_rule(&self) -> NameRule {
        NameRule::Dns1123Subdomain
    }

    /// Admission of the kind's own, before validation (RBAC's escalation prevention).
    fn admit(&self, _ctx: &RequestScope, _obj: &Value, _old: Option<&Value>) -> ApiResult<()> {
        Ok(())
    }

    /// `Validate` (no `old`), `ValidateUpdate`, or a `/status` write's validation (`sub`).
    fn validate(&self, info: &ResourceInfo, obj: &Value, old: Option<&Value>, sub: Option<&str>) -> Vec<Cause> {
        use flotilla_api::validation;
        let errs = match (old, sub) {
            (_, Some("status")) => validation::validate_status(&info.group, &info.kind, obj),
            (Some(old), _) => validation::validate_update(&info.group, &info.kind, obj, old),
            (None, _) => validation::validate(&info.group, &info.kind, obj),
        };
        errs.into_iter().map(|e| Cause::new(e.reason.as_str(), e.field, e.message)).collect()
    }

    /// Validating admission of the kind's own, after validation, for every create and update
    /// including subresources (`sub`): kube-apiserver's certificate plugins.
    fn admit_validated(&self, _ctx: &RequestScope, _obj: &Value, _old: Option<&Value>, _sub: Option<&str>) -> ApiResult<()> {
        Ok(())
    }

    /// The last step of a create that will be stored (not a dry run): what the server fills in
    /// from other objects (a service account token Secret's token).
    async fn complete_create(&self, _ctx: &RequestScope, _obj: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    /// After an object of this kind was written or deleted (`AfterCreate`, `AfterUpdate`,
    /// `AfterDelete`): what the server derives from it is refreshed at once.
    async fn after_write(&self, _ctx: &RequestScope) {}

    /// Delete refused outright (a namespace the server keeps).
    fn check_delete(&self, _ctx: &RequestScope, _name: &str) -> ApiResult<()> {
        Ok(())
    }

    /// A finalizer every delete of this kind adds, whatever the propagation policy.
    fn deletion_finalizer(&self) -> Option<&'static str> {
        None
    }

    /// Finalizers outside `metadata.finalizers` that hold the object (a namespace's
    /// `spec.finalizers`): it is deleted gracefully and removed only once they are gone.
    fn holds_spec_finalizers(&self, _obj: &Value) -> bool {
        false
    }

    /// `CheckGracefulDelete`: the grace period of a kind deleted gracefully (None: deleted at
    /// once unless finalizers hold it).
    fn deletion_grace(&self, _obj: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }

    /// Marks an object whose deletion is pending (deletionTimestamp already set): its grace
    /// period, and a new generation for kinds that keep one.
    fn mark_deleting(&self, info: &ResourceInfo, obj: &mut Value, grace: i64) {
        meta::meta_mut(obj).insert("deletionGracePeriodSeconds".into(), json!(grace));
        if info.generation {
            let g = meta::generation(obj);
            meta::meta_mut(obj).insert("generation".into(), json!(g + 1));
        }
    }

    /// Fields a list or watch may select by, beyond `metadata.name` and `metadata.namespace`
    /// (the strategy's `GetAttrs`).
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// The `Warning` header every request to a deprecated resource gets.
    fn deprecation(&self) -> Option<&'static str> {
        None
    }
}

/// A built-in kind with nothing of its own.
struct Builtin;
impl Strategy for Builtin {}

/// The strategies of built-in resources with behaviour of their own, by (group, resource).
/// Every other built-in resource is [`Builtin`]; every custom resource
/// [`custom::CustomResources`].
const BUILTIN: &[(&str, &str, &dyn Strategy)] = &[
    ("", "namespaces", &namespaces::Namespaces),
    ("", "services", &services::Services),
    ("", "secrets", &secrets::Secrets),
    ("", "serviceaccounts", &serviceaccounts::ServiceAccounts),
    ("", "pods", &pods::Pods),
    ("", "endpoints", &endpoints::Endpoints),
    ("", "events", &events::CoreEvents),
    ("events.k8s.io", "events", &events::Events),
    ("apps", "daemonsets", &daemonsets::DaemonSets),
    ("apps", "replicasets", &replicasets::ReplicaSets),
    ("batch", "jobs", &jobs::Jobs),
    ("certificates.k8s.io", "certificatesigningrequests", &certificates::CertificateSigningRequests),
    ("rbac.authorization.k8s.io", "roles", &rbac::Roles),
    ("rbac.authorization.k8s.io", "clusterroles", &rbac::ClusterRoles),
    ("rbac.authorization.k8s.io", "rolebindings", &rbac::RoleBindings),
    ("rbac.authorization.k8s.io", "clusterrolebindings", &rbac::ClusterRoleBindings),
    ("apiextensions.k8s.io", "customresourcedefinitions", &crds::CustomResourceDefinitions),
];

/// The strategy of a served resource.
pub(crate) fn for_resource(info: &ResourceInfo) -> &'static dyn Strategy {
    if info.is_custom() {
        return &custom::CustomResources;
    }
    BUILTIN.iter().find(|(g, r, _)| *g == info.group && *r == info.plural).map_or(&Builtin, |(_, _, s)| *s)
}

impl RequestScope {
    /// The strategy of the resource this request is for.
    pub(crate) fn strategy(&self) -> &'static dyn Strategy {
        for_resource(&self.info)
    }
}

fn defaults_error(info: &ResourceInfo, e: flotilla_api::defaults::FieldError) -> ApiError {
    ApiError::bad_request(e.status_message(&info.kind, &info.version)).with_cause(Cause::new("FieldValueInvalid", e.path.clone(), e.detail.clone()))
}

/// `obj`'s status replaced by `old`'s (removed when `old` has none).
fn keep_old_status(obj: &mut Value, old: &Value) {
    match old.get("status") {
        Some(s) => obj["status"] = s.clone(),
        None => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
    }
}

/// `obj` without the top-level `fields`.
fn without(obj: &Value, fields: &[&str]) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        for f in fields {
            m.remove(*f);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row names a resource the server serves, once.
    #[test]
    fn every_strategy_row_is_a_served_resource() {
        let served = crate::resources::builtin_resources();
        for (i, (g, r, _)) in BUILTIN.iter().enumerate() {
            assert!(served.iter().any(|s| s.group == *g && s.plural == *r), "{g}/{r} is not served");
            assert!(!BUILTIN[..i].iter().any(|(g2, r2, _)| g2 == g && r2 == r), "{g}/{r} twice");
        }
    }
}
