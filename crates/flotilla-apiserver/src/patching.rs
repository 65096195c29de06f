//! Applying a PATCH body to an object with the engine its content type names.

use crate::interim::patch::{self, PatchError};
use serde_json::Value;

use crate::error::{ApiError, ApiResult, Cause};
use crate::negotiate::BodyType;
use crate::objects::Ctx;

fn patch_error(ctx: &Ctx, e: PatchError) -> ApiError {
    match e {
        PatchError::Decode(msg) => ApiError::bad_request(msg),
        PatchError::Apply(msg) => ApiError::invalid(&ctx.info.group, &ctx.info.kind, ctx.path.name.as_deref().unwrap_or(""), Vec::new())
            .with_message(msg),
    }
}

impl ApiError {
    /// Replace the message (for errors whose text comes from elsewhere).
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }
}

/// The object after `patch`, before the write pipeline checks it.
pub(crate) fn apply(ctx: &Ctx, kind: BodyType, current: &Value, patch_doc: &Value) -> ApiResult<Value> {
    match kind {
        BodyType::JsonPatch => patch::json_patch(current, patch_doc).map_err(|e| patch_error(ctx, e)),
        BodyType::MergePatch => {
            if !patch_doc.is_object() {
                return Err(ApiError::bad_request("error decoding merge patch: the patch must be a JSON object"));
            }
            Ok(patch::merge_patch(current, patch_doc))
        }
        BodyType::StrategicMergePatch => {
            if !patch_doc.is_object() {
                return Err(ApiError::bad_request("error decoding strategic merge patch: the patch must be a JSON object"));
            }
            let (group, version, kind) = match ctx.path.subresource.as_deref() {
                Some("scale") => ("autoscaling", "v1", "Scale"),
                _ => (ctx.info.group.as_str(), ctx.info.version.as_str(), ctx.info.kind.as_str()),
            };
            let schema = patch::schema_for(group, version, kind).ok_or_else(|| {
                ApiError::unsupported_media_type(&["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"])
            })?;
            patch::strategic_merge_patch(current, patch_doc, &schema).map_err(|e| patch_error(ctx, e))
        }
        BodyType::ApplyYaml => {
            // Server-side apply without field ownership yet: the applied configuration is merged
            // into the live object (maps recursively, lists replaced), as a merge patch would.
            if !patch_doc.is_object() {
                return Err(ApiError::bad_request("error decoding apply patch: the configuration must be an object"));
            }
            let mut cfg = patch_doc.clone();
            for (k, v) in [("apiVersion", ctx.info.api_version()), ("kind", ctx.info.kind.clone())] {
                match cfg.get(k).and_then(Value::as_str) {
                    Some(x) if x != v => {
                        return Err(ApiError::bad_request(format!("the {k} in the applied configuration ({x}) does not match the resource ({v})"))
                            .with_cause(Cause::new("FieldValueInvalid", k, x)));
                    }
                    _ => cfg[k] = Value::String(v),
                }
            }
            Ok(patch::merge_patch(current, &cfg))
        }
        _ => Err(ApiError::unsupported_media_type(&["application/json-patch+json", "application/merge-patch+json"])),
    }
}
