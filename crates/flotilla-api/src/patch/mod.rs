//! The three patch types kube-apiserver accepts besides server-side apply, applied exactly as
//! kube-apiserver 1.37 applies them (its answers are recorded in `tests/data/patch-golden/`):
//!
//! - [`json_patch`]: RFC 6902 with the real server's leniencies (Go `json-patch` v4): a `test`
//!   of `null` passes on a missing path (kube-rs's finalizer helper relies on it), `replace`
//!   of a missing object member adds it, `copy` from a missing member copies `null`, negative
//!   list indices count from the end. At most 10 000 operations.
//! - [`merge_patch`]: RFC 7386, with the server's pruning of `null` members inside arrays.
//! - [`strategic_merge_patch`]: Kubernetes' strategic merge patch for built-in kinds, driven
//!   by [`PatchSchema`] (patch metadata recorded from a real server).
//!
//! [`decode_patch`] checks a request body for its patch type first (the 400 answers), and
//! [`PatchError`] knows the HTTP status and message the real server gives each failure.

pub(crate) mod go_format;
mod json;
mod merge;
mod schema;
mod strategic;

pub use json::{MAX_JSON_PATCH_OPERATIONS, json_patch};
pub use merge::merge_patch;
pub use schema::{FieldMeta, NodeShape, PatchSchema, SchemaNode};
pub use strategic::{decode_nulls, strategic_merge_patch};

use serde_json::Value;

/// Why a patch was not applied. [`PatchError::code`], [`PatchError::reason`] and
/// [`PatchError::status_message`] give the `Status` the real server answers; `Display` gives
/// the detailed cause (which the real server keeps to itself for 422s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The body is not JSON at all (400 `invalid JSON patch`, for every patch type).
    #[error("invalid JSON patch")]
    InvalidJson,
    /// The body is JSON but not of the patch type's shape (400), e.g. a JSON patch that is
    /// not a list.
    #[error("{0}")]
    Decode(String),
    /// A JSON patch with more than [`MAX_JSON_PATCH_OPERATIONS`] operations (413).
    #[error("The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {0}")]
    TooManyOperations(usize),
    /// A JSON patch operation that does not apply: a failed `test`, a missing path (422).
    #[error("{0}")]
    Apply(String),
    /// A strategic merge patch whose directives are malformed (400), e.g.
    /// `invalid patch format of retainKeys`.
    #[error("{0}")]
    StrategicFormat(String),
    /// A strategic merge patch the server refuses as unprocessable (422): lists of lists,
    /// content that does not match `$retainKeys`.
    #[error("{0}")]
    StrategicUnprocessable(String),
    /// Any other strategic merge patch failure: unknown `$patch` values, missing merge keys,
    /// `$setElementOrder` mismatches, maps where the schema has no fields. The real server
    /// answers these with 500 and an empty reason; so does [`PatchError::code`].
    #[error("{0}")]
    Strategic(String),
    /// A strategic merge patch for a kind without patch metadata (custom resources): 415.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    StrategicUnsupported,
}

const GENERIC_422: &str = "the server rejected our request due to an error in our request";

impl PatchError {
    /// The HTTP status kube-apiserver answers.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::InvalidJson | PatchError::Decode(_) | PatchError::StrategicFormat(_) => 400,
            PatchError::TooManyOperations(_) => 413,
            PatchError::StrategicUnsupported => 415,
            PatchError::Apply(_) | PatchError::StrategicUnprocessable(_) => 422,
            PatchError::Strategic(_) => 500,
        }
    }

    /// The `Status.reason` kube-apiserver answers (empty for the 500s, as there).
    pub fn reason(&self) -> &'static str {
        match self.code() {
            400 => "BadRequest",
            413 => "RequestEntityTooLarge",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            _ => "",
        }
    }

    /// The `Status.message` kube-apiserver answers. For 422s that is a fixed sentence and the
    /// detail ([`std::fmt::Display`]) is not sent; we suggest sending it as a cause.
    pub fn status_message(&self) -> String {
        match self {
            PatchError::TooManyOperations(_) => format!("Request entity too large: {self}"),
            PatchError::Apply(_) | PatchError::StrategicUnprocessable(_) => GENERIC_422.to_string(),
            other => other.to_string(),
        }
    }
}

/// A patch type, named by its request `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    StrategicMerge,
}

impl PatchType {
    /// The patch type of a `Content-Type` value (parameters such as `;charset=utf-8` ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match media.as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// Parses a PATCH body and checks it has its type's shape, answering as the real server does
/// (with its default `fieldValidation`): not JSON → `invalid JSON patch`; a JSON patch that is
/// not a list of operations, a merge patch or strategic merge patch that is not an object → 400.
pub fn decode_patch(patch_type: PatchType, body: &[u8]) -> Result<Value, PatchError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| PatchError::InvalidJson)?;
    match patch_type {
        PatchType::Json => {
            json::check_shape(&value)?;
        }
        PatchType::Merge => match &value {
            Value::Object(_) => {}
            Value::Null => return Err(PatchError::Decode("Invalid JSON Patch".to_string())),
            other => {
                return Err(PatchError::Decode(format!(
                    "error decoding patch: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                    json_kind(other)
                )));
            }
        },
        PatchType::StrategicMerge => strategic::check_shape(&value)?,
    }
    Ok(value)
}

/// Applies a decoded patch of any of the three types. `schema` is only used by strategic merge
/// patches (`None` there means the kind has no patch metadata: 415).
pub fn apply_patch(patch_type: PatchType, doc: &Value, patch: &Value, schema: Option<SchemaNode<'_>>) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Json => json_patch(doc, patch),
        PatchType::Merge => Ok(merge_patch(doc, patch)),
        PatchType::StrategicMerge => strategic_merge_patch(doc, patch, schema),
    }
}

/// Drops `null` object members at any depth (`null` list elements stay): what the server does
/// to values a patch adds where there was nothing to merge into.
fn drop_null_members(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_null_members);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_members),
        _ => {}
    }
}

/// The word Go's JSON decoder uses for a value's type in "cannot unmarshal X into …".
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
