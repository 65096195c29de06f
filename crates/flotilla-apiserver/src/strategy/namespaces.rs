//! Namespaces: names are DNS labels, spec and status are the server's (`spec.finalizers`
//! change only through `/finalize`), deletion moves them to `Terminating` until their
//! finalizers are done, and the server's own namespaces cannot be deleted.

use serde_json::{Value, json};

use super::Strategy;
use crate::error::{ApiError, ApiResult};
use crate::meta::NameRule;
use crate::resources::ResourceInfo;
use crate::scope::RequestScope;

/// Names that the real server refuses to delete.
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

pub(super) struct Namespaces;

impl Strategy for Namespaces {
    fn prepare_for_update(&self, _info: &ResourceInfo, obj: &mut Value, old: &Value) {
        obj["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
        obj["status"] = old.get("status").cloned().unwrap_or(json!({}));
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Dns1123Label
    }

    fn check_delete(&self, ctx: &RequestScope, name: &str) -> ApiResult<()> {
        if IMMORTAL_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(&ctx.subject(name), "this namespace may not be deleted"));
        }
        Ok(())
    }

    fn holds_spec_finalizers(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
    }

    /// kube-apiserver's namespace delete sets no grace period; the phase says it is going.
    fn mark_deleting(&self, _info: &ResourceInfo, obj: &mut Value, _grace: i64) {
        obj["status"]["phase"] = json!("Terminating");
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }
}
