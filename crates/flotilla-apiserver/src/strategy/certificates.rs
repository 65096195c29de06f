//! CertificateSigningRequests (`certificates.k8s.io/v1`): the requester is the caller (the
//! server fills `spec.username`, `uid`, `groups` and `extra`), the spec never changes after
//! create, `/approval` writes the conditions and `/status` the certificate and the other
//! conditions ([`flotilla_api::certificates`] holds the rules). Admission as kube-apiserver's
//! certificate plugins: approving needs `approve` on the request's `signers` and issuing `sign`,
//! and no `kubernetes.io/kube-apiserver-client` certificate may be asked for `system:masters`.
//!
//! Flotilla's additions (ADR 0028): a bootstrap token names its requests `bootstrap-<id>-…`
//! (the only ones it may read, see `rbac.rs`), and one bound to a cluster name (its extra group
//! `system:bootstrappers:flotilla:cluster:<name>`) may ask only for that cluster's agent
//! certificate.

use async_trait::async_trait;
use flotilla_api::bootstrap_token as bt;
use flotilla_api::certificates::{self as csr, Write};
use serde_json::{Value, json};

use super::Strategy;
use crate::auth::{Attributes, Decision};
use crate::error::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::resources::ResourceInfo;
use crate::scope::RequestScope;

pub(super) struct CertificateSigningRequests;

fn causes(errs: Vec<flotilla_api::validation::FieldError>) -> Vec<Cause> {
    errs.into_iter().map(|e| Cause::new(e.reason.as_str(), e.field, e.message)).collect()
}

#[async_trait]
impl Strategy for CertificateSigningRequests {
    /// The requester is whoever creates the request; a create sets no status.
    fn prepare_for_create(&self, ctx: &RequestScope, obj: &mut Value) {
        let who = &ctx.identity;
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            for k in ["username", "uid", "groups", "extra"] {
                spec.remove(k);
            }
            spec.insert("username".into(), json!(who.user));
            if !who.uid.is_empty() {
                spec.insert("uid".into(), json!(who.uid));
            }
            if !who.groups.is_empty() {
                spec.insert("groups".into(), json!(who.groups));
            }
            if !who.extra.is_empty() {
                spec.insert("extra".into(), json!(who.extra));
            }
        }
        obj["status"] = json!({});
    }

    fn tracks_managed_fields(&self) -> bool {
        false
    }

    fn prepare_for_update(&self, _info: &ResourceInfo, obj: &mut Value, old: &Value) {
        *obj = csr::prepare_update(obj, old, Write::Main, &meta::now());
    }

    fn prepare_for_status_update(&self, old: &Value, new: &Value) -> Value {
        csr::prepare_update(new, old, Write::Status, &meta::now())
    }

    fn prepare_for_approval_update(&self, old: &Value, new: &Value) -> Value {
        csr::prepare_update(new, old, Write::Approval, &meta::now())
    }

    fn validate(&self, _info: &ResourceInfo, obj: &Value, old: Option<&Value>, sub: Option<&str>) -> Vec<Cause> {
        causes(match (old, sub) {
            (None, _) => csr::validate(obj),
            (Some(old), Some("approval")) => csr::validate_update(obj, old, Write::Approval),
            (Some(old), Some("status")) => csr::validate_update(obj, old, Write::Status),
            (Some(old), _) => csr::validate_update(obj, old, Write::Main),
        })
    }

    fn admit_validated(&self, ctx: &RequestScope, obj: &Value, old: Option<&Value>, sub: Option<&str>) -> ApiResult<()> {
        let signer = csr::signer_name(obj);
        let name = meta::name(obj);
        match (old, sub) {
            (None, _) => admit_create(ctx, obj, signer, name),
            (Some(_), Some("approval")) => require_signer_verb(ctx, signer, "approve", name),
            (Some(old), Some("status")) if csr::certificate(old) != csr::certificate(obj) => require_signer_verb(ctx, signer, "sign", name),
            _ => Ok(()),
        }
    }
}

/// kube-apiserver's CertificateSubjectRestriction, then Flotilla's rule for bootstrap tokens
/// bound to a cluster.
fn admit_create(ctx: &RequestScope, obj: &Value, signer: &str, name: &str) -> ApiResult<()> {
    let subject = csr::subject(obj).unwrap_or_default();
    if signer == csr::KUBE_APISERVER_CLIENT && subject.organizations.iter().any(|o| o == "system:masters") {
        return Err(ApiError::forbidden(&ctx.subject(name), "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"));
    }
    if let Some(id) = ctx.identity.user.strip_prefix(bt::USER_PREFIX) {
        let prefix = bt::csr_name_prefix(id);
        if !name.starts_with(&prefix) {
            return Err(ApiError::forbidden(
                &ctx.subject(name),
                format!("a bootstrap token names its certificate requests {prefix}… (generateName: {prefix}), the only ones it may read"),
            ));
        }
    }
    if let Some(cluster) = bt::bound_cluster(&ctx.identity.groups) {
        let want = csr::agent_user(cluster);
        let usages = csr::usages(obj);
        let problem = if signer != csr::KUBE_APISERVER_CLIENT {
            Some(format!("the signer must be {}", csr::KUBE_APISERVER_CLIENT))
        } else if subject.common_name != want {
            Some(format!("the common name must be {want}"))
        } else {
            csr::agent_request_error(&subject, &usages)
        };
        if let Some(p) = problem {
            return Err(ApiError::forbidden(
                &ctx.subject(name),
                format!("a bootstrap token bound to cluster {cluster:?} may request only that cluster's agent certificate: {p}"),
            ));
        }
    }
    Ok(())
}

/// `approve` or `sign` on `signers/<signerName>` (or the signer's domain wildcard
/// `<domain>/*`), as kube-apiserver's CertificateApproval and CertificateSigning plugins ask.
fn require_signer_verb(ctx: &RequestScope, signer: &str, verb: &str, name: &str) -> ApiResult<()> {
    let ask = |resource_name: &str| {
        let attrs = Attributes {
            verb: verb.into(),
            group: csr::GROUP.into(),
            resource: "signers".into(),
            subresource: String::new(),
            namespace: String::new(),
            name: resource_name.into(),
            path: None,
        };
        matches!(ctx.inner.authz.authorize(&ctx.identity, &attrs), Decision::Allow(_))
    };
    let wildcard = signer.split_once('/').map(|(domain, _)| format!("{domain}/*"));
    if ask(signer) || wildcard.is_some_and(|w| ask(&w)) {
        return Ok(());
    }
    Err(ApiError::forbidden(&ctx.subject(name), format!("user not permitted to {verb} requests with signerName \"{signer}\"")))
}
