//! Applying a PATCH body to an object with the engine its content type names
//! (`flotilla_api::patch`), and server-side apply (for now: the applied configuration merged
//! into the live object; field ownership comes with the API-depth work).

use flotilla_api::patch::{self, PatchError, PatchSchema, PatchType};
use serde_json::Value;

use crate::error::{ApiError, ApiResult, Cause};
use crate::negotiate::BodyType;
use crate::scope::RequestScope;

/// kube-apiserver answers some strategic merge patch errors with a bare 500; bad input never
/// gets a 500 here: those become 422 Invalid with the detail (a divergence listed in
/// docs/conformance.md).
fn patch_error(e: PatchError) -> ApiError {
    let (code, reason) = if e.code() >= 500 { (422, "Invalid") } else { (e.code(), e.reason()) };
    let mut err = ApiError::new(code, reason, if e.code() >= 500 { e.to_string() } else { e.status_message() });
    if code == 422 {
        err = err.with_cause(Cause::new("FieldValueInvalid", "", e.to_string()));
    }
    err
}

impl ApiError {
    /// Replace the message (for errors whose text comes from elsewhere).
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }
}

/// Parse a PATCH body of `kind`.
pub(crate) fn decode(kind: BodyType, bytes: &[u8]) -> ApiResult<Value> {
    let t = match kind {
        BodyType::JsonPatch => PatchType::Json,
        BodyType::MergePatch => PatchType::Merge,
        BodyType::StrategicMergePatch => PatchType::StrategicMerge,
        BodyType::ApplyYaml => {
            // Checked here, before the object is read: an apply to a missing object creates
            // from this configuration and must not meet a string or a list.
            let cfg = crate::negotiate::parse_yaml(bytes)?;
            if !cfg.is_object() {
                return Err(ApiError::bad_request("error decoding apply patch: the configuration must be an object"));
            }
            return Ok(cfg);
        }
        _ => return Err(ApiError::unsupported_media_type(&["application/json-patch+json", "application/merge-patch+json"])),
    };
    patch::decode_patch(t, bytes).map_err(patch_error)
}

/// An applied configuration, checked to be of this resource's kind, with apiVersion and kind
/// filled in when it left them out.
pub(crate) fn apply_config(ctx: &RequestScope, patch_doc: &Value) -> ApiResult<Value> {
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
    Ok(cfg)
}

/// The object after `patch`, before the write pipeline checks it. JSON and strategic merge
/// patches, whose cost grows with what they ask for rather than with their size, are applied
/// on the blocking pool, a few at a time ([`crate::state::ApiState::heavy`]): one expensive patch
/// never holds up the requests the async workers serve.
pub(crate) async fn apply(ctx: &RequestScope, kind: BodyType, current: &Value, patch_doc: &Value) -> ApiResult<Value> {
    match kind {
        BodyType::JsonPatch => {
            let (current, patch_doc) = (current.clone(), patch_doc.clone());
            ctx.inner.off_the_workers(move || patch::json_patch(&current, &patch_doc).map_err(patch_error)).await
        }
        BodyType::MergePatch => Ok(patch::merge_patch(current, patch_doc)),
        BodyType::StrategicMergePatch => {
            let (group, version, kind) = match ctx.path.subresource.as_deref() {
                Some("scale") => ("autoscaling", "v1", "Scale"),
                _ => (ctx.info.group.as_str(), ctx.info.version.as_str(), ctx.info.kind.as_str()),
            };
            let (group, version, kind) = (group.to_string(), version.to_string(), kind.to_string());
            let (current, patch_doc) = (current.clone(), patch_doc.clone());
            ctx.inner
                .off_the_workers(move || {
                    let schema = PatchSchema::builtin().kind(&group, &version, &kind);
                    patch::strategic_merge_patch(&current, &patch_doc, schema).map_err(patch_error)
                })
                .await
        }
        BodyType::ApplyYaml => Ok(patch::merge_patch(current, &apply_config(ctx, patch_doc)?)),
        _ => Err(ApiError::unsupported_media_type(&["application/json-patch+json", "application/merge-patch+json"])),
    }
}
