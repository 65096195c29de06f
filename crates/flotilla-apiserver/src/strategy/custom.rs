//! Custom resources (every kind a CRD defines): decoded, defaulted and validated with the
//! CRD's structural schema, its validation rules and its scale subresource's replicas.

use serde_json::Value;

use super::Strategy;
use crate::error::{ApiResult, Cause};
use crate::resources::{Codec, ResourceInfo};
use crate::scope::RequestScope;

pub(super) struct CustomResources;

impl Strategy for CustomResources {
    /// Pruning and schema defaults happen in the codec's decode.
    fn canonicalize(&self, _info: &ResourceInfo, _obj: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    /// With a status subresource, a create sets no status.
    fn prepare_for_create(&self, ctx: &RequestScope, obj: &mut Value) {
        if ctx.info.status
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
    }

    fn default_on_create(&self, _info: &ResourceInfo, _obj: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    fn default_on_update(&self, _info: &ResourceInfo, _obj: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    /// Without a status subresource, status is desired state like any other field.
    fn desired_state(&self, info: &ResourceInfo, obj: &Value) -> Value {
        if info.status { super::without(obj, &["metadata", "status", "apiVersion", "kind"]) } else { super::without(obj, &["metadata", "apiVersion", "kind"]) }
    }

    /// A `/status` write is validated against the status schema alone (kube-apiserver's
    /// messages then name fields relative to status); both check the scale replicas.
    fn validate(&self, info: &ResourceInfo, obj: &Value, old: Option<&Value>, sub: Option<&str>) -> Vec<Cause> {
        let Codec::Custom(structural) = &info.codec else { return Vec::new() };
        let status_write = sub == Some("status");
        let mut causes = if status_write { structural.validate_status(obj) } else { structural.validate(obj) };
        // Validation rules run on what the schema accepts.
        if causes.is_empty() {
            causes.extend(structural.validate_rules(obj, old, status_write));
        }
        if let Some(scale) = &info.scale {
            let pointer = if status_write { &scale.status_replicas } else { &scale.spec_replicas };
            if let Some(n) = obj.pointer(pointer).and_then(Value::as_i64).filter(|n| *n < 0) {
                causes.push(Cause::new("FieldValueInvalid", pointer.replace('/', "."), format!("Invalid value: {n}: should be a non-negative integer")));
            }
        }
        causes
    }
}
