//! RBAC's four kinds: names are path segments (`system:…`), a write of a role must not grant
//! what its writer does not hold and a binding must not bind a role its writer could not
//! (kube-apiserver's policy-based storage), and every write refreshes the authorizer.

use async_trait::async_trait;
use serde_json::Value;

use super::Strategy;
use crate::error::ApiResult;
use crate::meta::NameRule;
use crate::rbac::RbacWrite;
use crate::scope::RequestScope;

pub(super) struct Roles;
pub(super) struct ClusterRoles;
pub(super) struct RoleBindings;
pub(super) struct ClusterRoleBindings;

fn write<'a>(ctx: &'a RequestScope, obj: &'a Value, old: Option<&'a Value>) -> RbacWrite<'a> {
    RbacWrite {
        rbac: &ctx.inner.rbac,
        authz: ctx.inner.authz.as_ref(),
        who: &ctx.identity,
        resource: &ctx.info.plural,
        namespace: ctx.namespace().unwrap_or(""),
        obj,
        old,
    }
}

/// Authorize and authenticate with what was written at once.
pub(super) async fn reload(ctx: &RequestScope) {
    if let Err(e) = ctx.inner.rbac.reload(ctx.inner.store.as_ref()).await {
        tracing::warn!(error = %e, "reloading RBAC failed");
    }
}

macro_rules! rbac_strategy {
    ($kind:ty, |$w:ident| $admit:expr) => {
        #[async_trait]
        impl Strategy for $kind {
            fn name_rule(&self) -> NameRule {
                NameRule::PathSegment
            }

            fn admit(&self, ctx: &RequestScope, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
                let $w = write(ctx, obj, old);
                $admit
            }

            async fn after_write(&self, ctx: &RequestScope) {
                reload(ctx).await;
            }
        }
    };
}

rbac_strategy!(Roles, |w| w.admit_role(false));
rbac_strategy!(ClusterRoles, |w| w.admit_role(true));
rbac_strategy!(RoleBindings, |w| w.admit_binding(false));
rbac_strategy!(ClusterRoleBindings, |w| w.admit_binding(true));
