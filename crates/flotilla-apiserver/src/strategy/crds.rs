//! CustomResourceDefinitions: defaulted and validated as apiextensions does, served (or no
//! longer served) as soon as they are written, deleted through the cleanup finalizer.

use async_trait::async_trait;
use serde_json::Value;

use super::Strategy;
use crate::error::{ApiResult, Cause};
use crate::resources::ResourceInfo;
use crate::scope::RequestScope;

pub(super) struct CustomResourceDefinitions;

#[async_trait]
impl Strategy for CustomResourceDefinitions {
    fn prepare_for_create(&self, _ctx: &RequestScope, obj: &mut Value) {
        crate::crd::default_crd(obj);
        crate::crd::initial_status(obj);
    }

    /// A CRD is defaulted before its generation is judged, as kube-apiserver defaults on
    /// decode: an update that only omits defaulted fields (listKind, conversion) changes nothing.
    fn default_on_update(&self, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
        self.canonicalize(info, obj)?;
        crate::crd::default_crd(obj);
        Ok(())
    }

    fn validate(&self, _info: &ResourceInfo, obj: &Value, old: Option<&Value>, sub: Option<&str>) -> Vec<Cause> {
        let mut causes = crate::crd::validate_crd(obj, old);
        if let (Some(old), None) = (old, sub) {
            causes.extend(crate::crd::validate_crd_update(obj, old));
        }
        causes
    }

    /// Serve its resources (or stop) at once.
    async fn after_write(&self, ctx: &RequestScope) {
        if let Err(e) = crate::crd::sync(&ctx.inner).await {
            tracing::warn!(error = %e, "refreshing the served custom resources failed");
        }
    }

    fn deletion_finalizer(&self) -> Option<&'static str> {
        Some(crate::crd::CLEANUP_FINALIZER)
    }

    /// kube-apiserver's CRD delete writes deletionTimestamp, the finalizer and a Terminating
    /// condition itself (no grace period, no new generation).
    fn mark_deleting(&self, _info: &ResourceInfo, obj: &mut Value, _grace: i64) {
        crate::crd::mark_deletion_pending(obj);
    }
}
