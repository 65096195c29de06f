//! Reading and writing single objects: get, create, update, patch, delete, deletecollection,
//! and the `/status`, `/scale` and `/finalize` subresources. Every write goes through the same
//! pipeline: decode → server-owned metadata → defaults → validation → admission → store.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use flotilla_api::managed;
use flotilla_store::{Revision, StoreError};
use serde_json::{Map, Value, json};

use crate::auth::Identity;
use crate::error::{ApiError, ApiResult, Cause, Subject};
use crate::meta;
use crate::negotiate::{self, BodyType, Output};
use crate::request::{FieldValidation, Query, ResourcePath};
use crate::resources::{Codec, ResourceInfo};
use crate::response::json_response;
use crate::scope::RequestScope;
use crate::state::ApiState;
use crate::storage;

impl RequestScope {
    /// Who owns the fields this write sets: `fieldManager`, else the User-Agent's product
    /// (`kubectl` of `kubectl/v1.33.0 …`), as kube-apiserver decides.
    pub fn field_manager(&self) -> String {
        field_manager(&self.query, self.user_agent.as_deref())
    }

    fn writer<'a>(&'a self, manager: &'a str, api_version: &'a str, now: &'a str) -> managed::Writer<'a> {
        managed::Writer { manager, api_version, subresource: self.path.subresource.as_deref().unwrap_or(""), now }
    }

    fn object_type(&self) -> managed::Ty<'static> {
        managed::object_type(&self.info.group, &self.info.version, &self.info.kind)
    }

    fn zero_value(&self) -> Value {
        managed::zero_value(&self.info.group, &self.info.version, &self.info.kind)
    }

    /// Record this write's field ownership in `obj` (from `old`; None for a create), starting
    /// from the managedFields the request sent (`incoming`) or else the stored ones.
    /// An update of an object that has no managedFields is not tracked: kube-apiserver takes
    /// such an object for one written before field tracking, and starts with its first apply.
    fn record_ownership(&self, old: Option<&Value>, obj: &mut Value, incoming: Option<Vec<managed::Entry>>) -> ApiResult<()> {
        let untracked = incoming.is_none() && old.is_some();
        let base = match incoming {
            Some(entries) => entries,
            None => old.map(|o| managed::decode(meta::meta(o).and_then(|m| m.get("managedFields"))).unwrap_or_default()).unwrap_or_default(),
        };
        strip_managed_fields(obj);
        if untracked && base.is_empty() {
            return Ok(());
        }
        let (manager, api_version, now) = (self.field_manager(), self.info.api_version(), meta::now());
        let reset = managed::reset_fields(self.path.subresource.as_deref().unwrap_or(""), self.info.status, obj);
        let mut old_plain = old.cloned();
        if let Some(o) = old_plain.as_mut() {
            strip_managed_fields(o);
        }
        let base = storage::managed_fields_as(&self.info, base, true);
        let entries =
            managed::record_update(old_plain.as_ref(), obj, &self.zero_value(), self.object_type(), base, &self.writer(&manager, &api_version, &now), &reset)
                .map_err(|e| ApiError::invalid(&self.info.group, &self.info.kind, meta::name(obj), vec![Cause::new("FieldValueInvalid", "", e)]))?;
        set_managed_fields(obj, &storage::managed_fields_as(&self.info, entries, false));
        Ok(())
    }
}

/// The manager of a write: `fieldManager`, else the User-Agent's product; internal writes
/// (no request, so no User-Agent) are `flotilla-apiserver`.
fn field_manager(query: &Query, user_agent: Option<&str>) -> String {
    match query.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => m.to_string(),
        None => match user_agent {
            Some(ua) => ua.split('/').next().unwrap_or("").to_string(),
            None => "flotilla-apiserver".to_string(),
        },
    }
}

/// The managedFields of a created object that is answered, not stored (a review): what its
/// request body sets, owned by the writer, as kube-apiserver's create handler records it.
pub(crate) fn created_managed_fields(query: &Query, user_agent: Option<&str>, group: &str, version: &str, kind: &str, body: &Value) -> Option<Value> {
    let manager = field_manager(query, user_agent);
    let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let now = meta::now();
    let writer = managed::Writer { manager: &manager, api_version: &api_version, subresource: "", now: &now };
    let mut plain = body.clone();
    strip_managed_fields(&mut plain);
    let zero = managed::zero_value(group, version, kind);
    let entries =
        managed::record_update(None, &plain, &zero, managed::object_type(group, version, kind), Vec::new(), &writer, &managed::FieldSet::default()).ok()?;
    managed::encode(&entries)
}

fn strip_managed_fields(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
}

fn set_managed_fields(obj: &mut Value, entries: &[managed::Entry]) {
    match managed::encode(entries) {
        Some(v) => {
            meta::meta_mut(obj).insert("managedFields".into(), v);
        }
        None => strip_managed_fields(obj),
    }
}

/// managedFields the request body sets itself (a client may rewrite them, as kubectl does when
/// it moves client-side-apply ownership to server-side apply); None when it sets none or they
/// do not parse.
fn incoming_managed_fields(body: &Value) -> Option<Vec<managed::Entry>> {
    let v = meta::meta(body)?.get("managedFields").filter(|v| !v.is_null())?;
    managed::decode(Some(v)).ok()
}

/// Parse a JSON, YAML or protobuf object body; `expected_kind` names what the handler decodes
/// it into (for the error a malformed body gets; `None` for options).
pub(crate) fn parse_object_body(content_type: Option<&str>, bytes: &[u8], expected_kind: Option<&str>) -> ApiResult<Value> {
    parse_body(content_type, bytes, true, expected_kind).map(|(v, _)| v)
}

/// Parse the body of a create or update: JSON keys given twice are refused or warned about per
/// `fieldValidation`, as kube-apiserver's strict decoder does, before anything else is looked at.
fn parse_write_body(ctx: &RequestScope, content_type: Option<&str>, bytes: &[u8], warnings: &mut Vec<String>) -> ApiResult<Value> {
    let (v, duplicates) = parse_body(content_type, bytes, !ctx.info.is_custom(), Some(&ctx.info.kind))?;
    if !duplicates.is_empty() {
        let list = duplicates.iter().map(|f| format!("duplicate field \"{f}\"")).collect::<Vec<_>>();
        match FieldValidation::from_query(&ctx.query)? {
            FieldValidation::Strict => {
                let kind = &ctx.info.kind;
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
                    ctx.info.version,
                    list.join(", ")
                )));
            }
            FieldValidation::Warn => warnings.extend(list),
            FieldValidation::Ignore => {}
        }
    }
    Ok(v)
}

/// A body and the paths of the JSON keys it gives twice (later values decoded over earlier
/// ones; objects merge when `merge_objects`, as into a typed object).
fn parse_body(content_type: Option<&str>, bytes: &[u8], merge_objects: bool, expected_kind: Option<&str>) -> ApiResult<(Value, Vec<String>)> {
    use crate::go_json;
    let mut duplicates = Vec::new();
    let v: Value = match negotiate::body_type(content_type) {
        BodyType::Json => {
            // kube-apiserver first reads the body's apiVersion and kind with Go's decoder; a
            // body that is not a JSON object fails there, in Go's words.
            let (v, d) = crate::duplicate_fields::parse(bytes, merge_objects)
                .map_err(|_| ApiError::bad_request(go_json::unrecognized(expected_kind, &go_json::syntax_error(bytes), bytes)))?;
            if let Some(e) = go_json::not_an_object(&v) {
                return Err(ApiError::bad_request(go_json::unrecognized(expected_kind, &e, bytes)));
            }
            duplicates = d;
            v
        }
        BodyType::Yaml | BodyType::ApplyYaml => negotiate::parse_yaml(bytes)?,
        BodyType::Protobuf => crate::protobuf::decode(bytes)?,
        _ => return Err(ApiError::unsupported_media_type(&["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"])),
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok((v, duplicates))
}

/// An object as it goes out: with apiVersion and kind.
fn with_type(info: &ResourceInfo, mut obj: Value) -> Value {
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(info.api_version()));
        o.insert("kind".into(), json!(info.kind));
    }
    obj
}

/// Render one object in the representation `Accept` asked for.
pub(crate) fn render_object(ctx: &RequestScope, headers: &HeaderMap, code: StatusCode, obj: Value, warnings: &[String]) -> ApiResult<Response> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let obj = with_type(&ctx.info, obj);
    match negotiate::output(accept)? {
        Output::Json => Ok(json_response(code, &obj, "application/json", warnings)),
        Output::PartialMetadata => {
            Ok(json_response(code, &crate::table::partial_metadata(&obj), "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", warnings))
        }
        Output::Table(v) => {
            let include = ctx.query.get("includeObject").unwrap_or("Metadata");
            let rv = meta::meta_str(&obj, "resourceVersion").unwrap_or("").to_string();
            let t = crate::table::table(&ctx.info.printer, v, &[obj], include, json!({"resourceVersion": rv}), true);
            // kube-apiserver labels a Table `application/json` (the serializer's media type).
            Ok(json_response(code, &t, "application/json", warnings))
        }
    }
}

/// Read the live object, or 404.
async fn read(ctx: &RequestScope, name: &str) -> ApiResult<(Value, Revision)> {
    match ctx.inner.store.get(&ctx.key(name)).await? {
        Some(kv) => Ok((storage::decode_for(&ctx.info, &kv)?, kv.mod_revision)),
        None => Err(ApiError::not_found(&ctx.subject(name))),
    }
}

/// The object the request names, as stored.
pub(crate) async fn read_object(ctx: &RequestScope) -> ApiResult<Value> {
    read(ctx, ctx.name()).await.map(|(v, _)| v)
}

pub(crate) async fn get(ctx: &RequestScope, headers: &HeaderMap) -> ApiResult<Response> {
    let (mut obj, _) = read(ctx, ctx.name()).await?;
    storage::default_on_read(&ctx.info, &mut obj);
    match ctx.path.subresource.as_deref() {
        Some("scale") => Ok(json_response(StatusCode::OK, &scale_of(ctx, &obj)?, "application/json", &[])),
        _ => render_object(ctx, headers, StatusCode::OK, obj, &[]),
    }
}

// ---------------------------------------------------------------------------------------------
// The write pipeline

/// Go's `json: cannot unmarshal <value> into Go struct field <Struct>.<path> of type <type>`
/// for the value at `path` (serde_path_to_error's `a.b[0].c`; Go's path drops the indices).
fn go_unmarshal_error(info: &ResourceInfo, obj: &Value, path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    let (holder, go_type) = crate::protobuf::go_field_type(&info.group, &info.version, &info.kind, path)?;
    let mut value = obj;
    for segment in path.split('.') {
        let (name, index) = match segment.find('[') {
            Some(at) => (&segment[..at], segment[at + 1..].trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        value = value.get(name)?;
        if let Some(i) = index {
            value = value.get(i)?;
        }
    }
    let what = match value {
        Value::String(_) => "string".to_string(),
        Value::Bool(_) => "bool".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
        Value::Number(n) if n.is_f64() && go_type.starts_with("int") => format!("number {n}"),
        Value::Number(_) => "number".to_string(),
        Value::Null => return None,
    };
    let go_path: Vec<&str> = path.split('.').map(|s| s.split('[').next().unwrap_or(s)).collect();
    Some(format!("json: cannot unmarshal {what} into Go struct field {holder}.{} of type {go_type}", go_path.join(".")))
}

/// A built-in kind's body names its own apiVersion and kind (or none); anything else fails
/// as kube-apiserver's scheme fails it: a kind it knows cannot be converted, one it does not
/// know is not registered.
fn typed_kind_matches(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let api_version = info.api_version();
    let data_version = obj.get("apiVersion").and_then(Value::as_str).filter(|v| !v.is_empty()).unwrap_or(&api_version);
    let data_kind = obj.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty()).unwrap_or(&info.kind);
    if data_version == api_version && data_kind == info.kind {
        return Ok(());
    }
    let (group, version) = data_version.rsplit_once('/').unwrap_or(("", data_version));
    let registered =
        crate::resources::builtin_resources().iter().any(|r| r.group == group && r.version == version && (r.kind == data_kind || r.list_kind == data_kind));
    let internal = if info.group.is_empty() { "core" } else { info.group.split('.').next().unwrap_or("") };
    let why = if registered {
        format!("converting ({version}.{data_kind}) to ({internal}.{}): unknown conversion", info.kind)
    } else {
        format!("no kind {data_kind:?} is registered for version {data_version:?} in scheme \"pkg/runtime/scheme.go:111\"")
    };
    Err(ApiError::bad_request(format!("{data_kind} in version {version:?} cannot be handled as a {}: {why}", info.kind)))
}

/// Decode a body into the kind's shape: fields the kind does not know are reported per
/// `fieldValidation` and dropped; a body that does not fit the type is a 400 naming the field.
fn decode_object(info: &ResourceInfo, mut obj: Value, fv: FieldValidation, warnings: &mut Vec<String>) -> ApiResult<Value> {
    let api_version = info.api_version();
    if !info.is_custom() {
        typed_kind_matches(info, &obj)?;
    }
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {}
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!("the API version in the data ({v}) does not match the expected API version ({api_version})")));
        }
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => {}
        Some(k) if k == info.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "{k} in version \"{}\" cannot be handled as a {}: the kind in the data does not match the resource",
                info.version, info.kind
            )));
        }
    }
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(info.kind);
    crate::strategy::for_resource(info).canonicalize(info, &mut obj)?;
    match &info.codec {
        Codec::Custom(structural) => {
            let dropped = structural.decode(&mut obj);
            if !dropped.is_empty() {
                match fv {
                    FieldValidation::Strict => {
                        let list = dropped.iter().map(|f| format!("unknown field \"{f}\"")).collect::<Vec<_>>().join(", ");
                        let kind = &info.kind;
                        return Err(ApiError::bad_request(format!(
                            "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {list}",
                            info.version
                        )));
                    }
                    FieldValidation::Warn => warnings.extend(dropped.iter().map(|f| format!("unknown field \"{f}\""))),
                    FieldValidation::Ignore => {}
                }
            }
            Ok(obj)
        }
        Codec::Typed(decode) => {
            let out = decode(obj.clone()).map_err(|e| {
                // Go's words where the field's Go type is known, else serde's with the path.
                let detail = go_unmarshal_error(info, &obj, &e.path).unwrap_or_else(|| {
                    let at = if e.path.is_empty() { String::new() } else { format!(" at {}", e.path) };
                    format!("{}{at}", e.message)
                });
                ApiError::bad_request(format!("{} in version \"{}\" cannot be handled as a {}: {detail}", info.kind, info.version, info.kind))
                    .with_cause(Cause::new("FieldValueTypeInvalid", e.path.clone(), e.message.clone()))
            })?;
            let mut unknown = Vec::new();
            unknown_fields(&obj, &out, String::new(), &mut unknown);
            if !unknown.is_empty() {
                match fv {
                    FieldValidation::Strict => {
                        let list = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect::<Vec<_>>().join(", ");
                        let kind = &info.kind;
                        return Err(ApiError::bad_request(format!(
                            "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {list}",
                            info.version
                        )));
                    }
                    FieldValidation::Warn => warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\""))),
                    FieldValidation::Ignore => {}
                }
            }
            Ok(out)
        }
    }
}

/// Paths present (and not null) in `input` but gone from `decoded`.
fn unknown_fields(input: &Value, decoded: &Value, path: String, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match b.get(k) {
                    None if !v.is_null() => out.push(p),
                    Some(d) => unknown_fields(v, d, p, out),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                unknown_fields(x, y, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn random_suffix() -> String {
    use rand::RngExt;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// The kind's validation beyond metadata ([`crate::strategy::Strategy::validate`]), on the
/// blocking pool for a custom resource with validation rules: their cost is bounded
/// (kube-apiserver's budgets), not small, and other requests must not wait.
async fn validate_kind_off(ctx: &RequestScope, info: &ResourceInfo, obj: &Value, old: Option<&Value>, sub: Option<&str>) -> ApiResult<Vec<Cause>> {
    let strategy = ctx.strategy();
    if !matches!(&info.codec, Codec::Custom(s) if s.has_rules()) {
        return Ok(strategy.validate(info, obj, old, sub));
    }
    let (info, obj, old, sub) = (info.clone(), obj.clone(), old.cloned(), sub.map(String::from));
    ctx.inner.off_the_workers(move || Ok(strategy.validate(&info, &obj, old.as_ref(), sub.as_deref()))).await
}

/// The built-in admission chain (`flotilla_api::admission`) for custom resources: the
/// mutating step runs after schema defaulting, the validating step after schema validation.
mod admission_chain {
    use super::*;
    use flotilla_api::admission::{self, Defaulting, FieldError, GroupVersionKind, Operation};

    fn gvk(info: &ResourceInfo) -> GroupVersionKind {
        GroupVersionKind::gvk(&info.group, &info.version, &info.kind)
    }

    fn causes(errs: Vec<FieldError>) -> Vec<Cause> {
        errs.into_iter().map(|e| Cause::new(e.reason.as_str(), e.path, e.message)).collect()
    }

    pub fn mutate(info: &ResourceInfo, obj: &mut Value, create: bool, namespace: Option<&str>) -> ApiResult<()> {
        if !info.is_custom() || !admission::handles(&gvk(info)) {
            return Ok(());
        }
        let now = meta::now();
        let mut uuid = || uuid::Uuid::new_v4().to_string();
        let mut ctx = Defaulting { operation: if create { Operation::Create } else { Operation::Update }, namespace, now: &now, new_uuid: &mut uuid };
        admission::default(&gvk(info), obj, &mut ctx).map_err(|errs| ApiError::invalid(&info.group, &info.kind, meta::name(obj), causes(errs)))
    }

    pub fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>, settings: &admission::Settings) -> Vec<Cause> {
        if !info.is_custom() || !admission::handles(&gvk(info)) {
            return Vec::new();
        }
        causes(admission::validate(&gvk(info), obj, old, settings))
    }

    /// What the requester may not write (a pull agent: anything but its own Pull Cluster).
    pub fn admit_requester(ctx: &RequestScope, obj: &Value) -> ApiResult<()> {
        let info = &ctx.info;
        if !info.is_custom() {
            return Ok(());
        }
        match admission::refuse_for_requester(&gvk(info), &ctx.identity.user, obj) {
            Some(why) => Err(ApiError::forbidden(&ctx.subject(meta::name(obj)), why)),
            None => Ok(()),
        }
    }
}

/// Custom objects are stored in their CRD's storage version.
fn to_storage_version(info: &ResourceInfo, obj: &mut Value) {
    if let Codec::Custom(s) = &info.codec
        && !s.storage_version.is_empty()
    {
        obj["apiVersion"] = json!(format!("{}/{}", info.group, s.storage_version));
    }
}

/// Fail with 422 when there are causes.
fn check(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> ApiResult<()> {
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(&info.group, &info.kind, name, causes)) }
}

/// Namespace lifecycle admission: a namespaced object can only be created in a namespace that
/// exists and is not being deleted.
async fn admit_namespace(inner: &ApiState, info: &ResourceInfo, namespace: &str) -> ApiResult<()> {
    if !info.namespaced {
        return Ok(());
    }
    let key = Bytes::from(format!("/registry/core/namespaces/{namespace}"));
    match inner.store.get(&key).await? {
        None => Err(ApiError::not_found(&Subject { group: "", resource: "namespaces", name: namespace })),
        Some(kv) => {
            let ns = storage::decode(&kv)?;
            if meta::is_terminating(&ns) || ns.pointer("/status/phase").and_then(Value::as_str) == Some("Terminating") {
                Err(ApiError::forbidden(
                    &Subject { group: &info.group, resource: &info.plural, name: "" },
                    format!("unable to create new content in namespace {namespace} because it is being terminated"),
                )
                .with_cause(Cause::new("NamespaceTerminating", "", format!("namespace {namespace} is being terminated"))))
            } else {
                Ok(())
            }
        }
    }
}

/// A string list as Go's `%#v` prints it: `[]string{"a", "b"}`.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Create with the namespace and name from the URL (internal callers: bootstrap).
pub(crate) async fn create_internal(inner: &Arc<ApiState>, group: &str, version: &str, plural: &str, namespace: Option<&str>, body: Value) -> ApiResult<Value> {
    let info = inner.registry.catalog().lookup(group, version, plural).ok_or_else(ApiError::no_route)?;
    let ctx = RequestScope {
        inner: inner.clone(),
        info,
        path: ResourcePath {
            group: group.into(),
            version: version.into(),
            namespace: namespace.map(Into::into),
            resource: plural.into(),
            ..Default::default()
        },
        query: Query::default(),
        identity: Identity::user("system:apiserver", &["system:masters"]),
        user_agent: None,
    };
    let mut warnings = Vec::new();
    create_object(&ctx, body, &mut warnings, None).await
}

/// Replace an object's spec with `desired`'s if it differs (internal callers: installing CRDs).
/// Returns whether it changed.
pub(crate) async fn update_spec_internal(inner: &Arc<ApiState>, group: &str, version: &str, plural: &str, name: &str, desired: &Value) -> ApiResult<bool> {
    let spec = desired.get("spec").cloned().unwrap_or(Value::Null);
    update_internal(inner, (group, version, plural), None, name, |obj| obj["spec"] = spec.clone()).await
}

/// The object `name` as stored, or None (internal callers: the bootstrap policy).
pub(crate) async fn get_internal(
    inner: &Arc<ApiState>,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
    name: &str,
) -> ApiResult<Option<Value>> {
    let ctx = internal_ctx(inner, (group, version, plural), namespace, name)?;
    match read(&ctx, name).await {
        Ok((v, _)) => Ok(Some(v)),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

fn internal_ctx(inner: &Arc<ApiState>, (group, version, plural): (&str, &str, &str), namespace: Option<&str>, name: &str) -> ApiResult<RequestScope> {
    let info = inner.registry.catalog().lookup(group, version, plural).ok_or_else(ApiError::no_route)?;
    Ok(RequestScope {
        inner: inner.clone(),
        info,
        path: ResourcePath {
            group: group.into(),
            version: version.into(),
            namespace: namespace.map(Into::into),
            resource: plural.into(),
            name: Some(name.into()),
            ..Default::default()
        },
        query: Query::default(),
        identity: Identity::user("system:apiserver", &["system:masters"]),
        user_agent: None,
    })
}

/// Change the stored object `name` with `change` through the update pipeline, retrying on
/// conflicts (internal callers). Returns whether anything changed.
pub(crate) async fn update_internal(
    inner: &Arc<ApiState>,
    resource: (&str, &str, &str),
    namespace: Option<&str>,
    name: &str,
    change: impl Fn(&mut Value),
) -> ApiResult<bool> {
    let ctx = internal_ctx(inner, resource, namespace, name)?;
    for _ in 0..8 {
        let (old, rev) = read(&ctx, name).await?;
        let mut new = old.clone();
        change(&mut new);
        let mut warnings = Vec::new();
        let prepared = prepare_update(&ctx, &old, new, &mut warnings, None).await?;
        if prepared.noop {
            return Ok(false);
        }
        match commit_update(&ctx, name, rev, prepared).await {
            Ok(_) => return Ok(true),
            Err(e) if e.reason == "Conflict" => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(&ctx.subject(name)))
}

pub(crate) async fn create(ctx: &RequestScope, headers: &HeaderMap, (ct, bytes): (Option<String>, Bytes)) -> ApiResult<Response> {
    if ctx.path.name.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let mut warnings = Vec::new();
    let body = parse_write_body(ctx, ct.as_deref(), &bytes, &mut warnings)?;
    let obj = create_object(ctx, body, &mut warnings, None).await?;
    render_object(ctx, headers, StatusCode::CREATED, obj, &warnings)
}

/// Create `body`. `owned`: the managed fields a server-side apply worked out; otherwise this
/// create is recorded as an Update by its field manager.
async fn create_object(ctx: &RequestScope, body: Value, warnings: &mut Vec<String>, owned: Option<Vec<managed::Entry>>) -> ApiResult<Value> {
    let info = &ctx.info;
    let incoming = incoming_managed_fields(&body);
    let fv = FieldValidation::from_query(&ctx.query)?;
    let dry_run = ctx.query.dry_run()?;
    if let Codec::Custom(s) = &info.codec
        && s.terminating
    {
        let name = meta::name(&body).to_string();
        return Err(ApiError::forbidden(&ctx.subject(&name), "create not allowed while custom resource definition is terminating"));
    }
    let strategy = ctx.strategy();
    let mut obj = decode_object(info, body, fv, warnings)?;
    // Namespace: from the URL; a different one in the body is an error.
    let url_ns = ctx.namespace().map(String::from);
    {
        let m = meta::meta_mut(&mut obj);
        match (info.namespaced, url_ns.as_deref(), m.get("namespace").and_then(Value::as_str).filter(|s| !s.is_empty())) {
            (true, Some(u), Some(b)) if u != b => {
                return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
            }
            (true, Some(u), _) => {
                m.insert("namespace".into(), json!(u));
            }
            (true, None, _) => return Err(ApiError::no_route()),
            (false, _, _) => {
                m.remove("namespace");
            }
        }
        if m.get("resourceVersion").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(meta::now()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("managedFields");
        // Kinds without a generation keep whatever the client sent, as kube-apiserver does.
        if info.generation {
            m.insert("generation".into(), json!(1));
        }
    }
    strategy.prepare_for_create(ctx, &mut obj);
    let generate = meta::meta_str(&obj, "name").is_none_or(str::is_empty) && meta::meta_str(&obj, "generateName").is_some_and(|s| !s.is_empty());
    if generate {
        let base: String = meta::meta_str(&obj, "generateName").unwrap_or("").chars().take(58).collect();
        meta::meta_mut(&mut obj).insert("name".into(), json!(format!("{base}{}", random_suffix())));
    }
    // Ownership is of what the request sets (with its defaults), not of what the server adds
    // for a create (a namespace's finalizer, a Job's selector and labels, a Pod's priority and
    // tolerations): kube-apiserver records it before its strategy and admission run. A
    // kind's strategy may say otherwise (a DaemonSet's template-generation annotation).
    let requested = (matches!(info.codec, Codec::Typed(_)) && !strategy.owns_create_defaults()).then(|| obj.clone());
    strategy.default_on_create(info, &mut obj)?;
    admission_chain::mutate(info, &mut obj, true, url_ns.as_deref())?;
    strategy.admit(ctx, &obj, None)?;
    let name = meta::name(&obj).to_string();
    let mut causes = meta::validate_object_meta(&obj, strategy.name_rule(), info.namespaced);
    causes.extend(validate_kind_off(ctx, info, &obj, None, None).await?);
    if causes.is_empty() {
        causes.extend(admission_chain::validate(info, &obj, None, &ctx.inner.config.admission));
    }
    check(info, &name, causes)?;
    strategy.admit_validated(ctx, &obj, None, None)?;
    admission_chain::admit_requester(ctx, &obj)?;
    if let Some(ns) = url_ns.as_deref() {
        admit_namespace(&ctx.inner, info, ns).await?;
    }
    match (owned, requested) {
        (Some(entries), _) => set_managed_fields(&mut obj, &entries),
        (None, Some(mut requested)) => {
            ctx.record_ownership(None, &mut requested, incoming)?;
            let entries = managed::decode(meta::meta(&requested).and_then(|m| m.get("managedFields"))).unwrap_or_default();
            set_managed_fields(&mut obj, &entries);
        }
        (None, None) => ctx.record_ownership(None, &mut obj, incoming)?,
    }
    if !strategy.tracks_managed_fields() {
        strip_managed_fields(&mut obj);
    }
    if dry_run {
        // A dry run still meets the name taken (generated names are not checked: a real
        // create would retry with another).
        let key = storage::object_key(info, url_ns.as_deref(), meta::name(&obj));
        if ctx.inner.store.get(&key).await?.is_some() {
            return Err(ApiError::already_exists(&ctx.subject(meta::name(&obj))));
        }
        return Ok(obj);
    }
    strategy.complete_create(ctx, &mut obj).await?;
    let mut stored = obj.clone();
    to_storage_version(info, &mut stored);
    // generateName retries on a collision, as the real server does.
    for attempt in 0..8 {
        let key = storage::object_key(info, url_ns.as_deref(), meta::name(&obj));
        let started = std::time::Instant::now();
        let res = ctx.inner.store.create(key, storage::encode_for(info, &stored)?).await;
        ctx.inner.metrics.store_commit.observe(started.elapsed().as_secs_f64());
        match res {
            Ok(rev) => {
                meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rev.to_string()));
                ctx.strategy().after_write(ctx).await;
                return Ok(obj);
            }
            Err(StoreError::AlreadyExists { .. }) if generate && attempt < 7 => {
                let base: String = meta::meta_str(&obj, "generateName").unwrap_or("").chars().take(58).collect();
                let n = json!(format!("{base}{}", random_suffix()));
                meta::meta_mut(&mut obj).insert("name".into(), n.clone());
                meta::meta_mut(&mut stored).insert("name".into(), n);
            }
            Err(StoreError::AlreadyExists { .. }) => return Err(ApiError::already_exists(&ctx.subject(meta::name(&obj)))),
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::already_exists(&ctx.subject(meta::name(&obj))))
}

/// What an update changes, worked out from the old object and the requested new one.
struct Prepared {
    obj: Value,
    /// Nothing changed: answer with the old object and write nothing.
    noop: bool,
    /// The object should go away (terminating, last finalizer removed).
    remove: bool,
}

/// Carry server-owned fields over from `old`, apply the subresource's rules, defaults and
/// validation.
async fn prepare_update(
    ctx: &RequestScope,
    old: &Value,
    mut new: Value,
    warnings: &mut Vec<String>,
    owned: Option<Vec<managed::Entry>>,
) -> ApiResult<Prepared> {
    let info = &ctx.info;
    let incoming = incoming_managed_fields(&new);
    let fv = FieldValidation::from_query(&ctx.query)?;
    let name = ctx.name().to_string();
    let sub = ctx.path.subresource.as_deref();
    let strategy = ctx.strategy();
    new = decode_object(info, new, fv, warnings)?;
    // The object in the body must be the one in the URL.
    if let Some(n) = meta::meta_str(&new, "name").filter(|s| !s.is_empty())
        && n != name
    {
        return Err(ApiError::bad_request(format!("the name of the object ({n}) does not match the name on the URL ({name})")));
    }
    if info.namespaced
        && let (Some(b), Some(u)) = (meta::namespace(&new), ctx.namespace())
        && b != u
    {
        return Err(ApiError::bad_request("the namespace of the provided object does not match the namespace sent on the request"));
    }
    let old_meta = meta::meta(old).cloned().unwrap_or_default();
    let mut obj = match sub {
        Some("status") => strategy.prepare_for_status_update(old, &new),
        Some("approval") => strategy.prepare_for_approval_update(old, &new),
        // `/finalize` (served where the resource says so: namespaces) changes only spec.finalizers.
        Some("finalize") => {
            let mut o = old.clone();
            o["spec"]["finalizers"] = new.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
            o
        }
        _ => {
            let mut o = new;
            strategy.prepare_for_update(info, &mut o, old);
            o
        }
    };
    {
        let m = meta::meta_mut(&mut obj);
        for field in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name"] {
            match old_meta.get(field) {
                Some(v) => {
                    m.insert(field.into(), v.clone());
                }
                None => {
                    m.remove(field);
                }
            }
        }
        m.remove("managedFields");
        m.remove("generateName");
        if let Some(og) = old_meta.get("generateName") {
            m.insert("generateName".into(), og.clone());
        }
    }
    strategy.default_on_update(info, &mut obj)?;
    // Generation: +1 when the desired state changes.
    if info.generation {
        let old_gen = meta::generation(old).max(1);
        let bump = strategy.desired_state(info, old) != strategy.desired_state(info, &obj);
        meta::meta_mut(&mut obj).insert("generation".into(), json!(if bump { old_gen + 1 } else { old_gen }));
    }
    // Finalizers cannot be added to an object that is being deleted.
    let terminating = meta::is_terminating(old);
    if terminating {
        let before = meta::finalizers(old);
        let added: Vec<String> = meta::finalizers(&obj).into_iter().filter(|f| !before.contains(f)).collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                &info.group,
                &info.kind,
                &name,
                vec![Cause::new(
                    "FieldValueForbidden",
                    "metadata.finalizers",
                    format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {}", go_string_slice(&added)),
                )],
            ));
        }
    }
    if sub.is_none() {
        admission_chain::mutate(info, &mut obj, false, ctx.namespace())?;
        strategy.admit(ctx, &obj, Some(old))?;
    }
    let mut causes = meta::validate_object_meta(&obj, strategy.name_rule(), info.namespaced);
    causes.extend(validate_kind_off(ctx, info, &obj, Some(old), sub).await?);
    if causes.is_empty() && sub.is_none() {
        causes.extend(admission_chain::validate(info, &obj, Some(old), &ctx.inner.config.admission));
    }
    check(info, &name, causes)?;
    strategy.admit_validated(ctx, &obj, Some(old), sub)?;
    if sub.is_none() {
        admission_chain::admit_requester(ctx, &obj)?;
    }
    match owned {
        Some(entries) => set_managed_fields(&mut obj, &entries),
        None => ctx.record_ownership(Some(old), &mut obj, incoming)?,
    }
    if !strategy.tracks_managed_fields() {
        strip_managed_fields(&mut obj);
    }
    let mut cmp_old = old.clone();
    let mut cmp_new = obj.clone();
    for o in [&mut cmp_old, &mut cmp_new] {
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
    }
    let noop = cmp_old == cmp_new;
    let remove = terminating && meta::finalizers(&obj).is_empty() && !strategy.holds_spec_finalizers(&obj);
    Ok(Prepared { obj, noop, remove })
}

/// Store a prepared update (or the deletion it implies), with a compare on `rev`.
async fn commit_update(ctx: &RequestScope, name: &str, rev: Revision, p: Prepared) -> ApiResult<Value> {
    let key = ctx.key(name);
    let started = std::time::Instant::now();
    let mut stored = p.obj.clone();
    to_storage_version(&ctx.info, &mut stored);
    let result = if p.remove {
        ctx.inner.store.delete_if(key, Some(rev)).await.map(|(r, _)| r)
    } else {
        ctx.inner.store.update_if(key, storage::encode_for(&ctx.info, &stored)?, rev).await
    };
    ctx.inner.metrics.store_commit.observe(started.elapsed().as_secs_f64());
    match result {
        Ok(new_rev) => {
            let mut obj = p.obj;
            meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(new_rev.to_string()));
            ctx.strategy().after_write(ctx).await;
            Ok(obj)
        }
        Err(StoreError::Conflict { .. }) => Err(ApiError::conflict(&ctx.subject(name))),
        Err(StoreError::NotFound { .. }) => Err(ApiError::not_found(&ctx.subject(name))),
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn update(ctx: &RequestScope, headers: &HeaderMap, (ct, bytes): (Option<String>, Bytes)) -> ApiResult<Response> {
    let name = ctx.name().to_string();
    let mut warnings = Vec::new();
    let body = parse_write_body(ctx, ct.as_deref(), &bytes, &mut warnings)?;
    let dry_run = ctx.query.dry_run()?;
    if ctx.path.subresource.as_deref() == Some("scale") {
        return update_scale(ctx, &name, body, dry_run).await;
    }
    let (old, rev) = read(ctx, &name).await?;
    // A resourceVersion in the body is a precondition.
    let precondition = meta::meta_str(&body, "resourceVersion").filter(|s| !s.is_empty()).map(String::from);
    if let Some(want) = &precondition {
        if want.parse::<Revision>().ok() != Some(rev) {
            return Err(ApiError::conflict(&ctx.subject(&name)));
        }
    } else if ctx.info.is_custom() {
        // kube-apiserver names the resource (not the kind) here, and prints the revision as 0.
        return Err(ApiError::invalid(
            &ctx.info.group,
            &ctx.info.plural,
            &name,
            vec![Cause::new("FieldValueInvalid", "metadata.resourceVersion", "Invalid value: 0: must be specified for an update")],
        ));
    }
    let prepared = prepare_update(ctx, &old, body, &mut warnings, None).await?;
    let obj = if prepared.noop || dry_run {
        if dry_run {
            // A dry run answers with the revision the object has now.
            let mut obj = prepared.obj;
            meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(rev.to_string()));
            obj
        } else {
            old
        }
    } else {
        commit_update(ctx, &name, rev, prepared).await?
    };
    render_object(ctx, headers, StatusCode::OK, obj, &warnings)
}

// ---------------------------------------------------------------------------------------------
// Patch

const PATCH_TYPES_BUILTIN: &[&str] =
    &["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml", "application/strategic-merge-patch+json"];
const PATCH_TYPES_CUSTOM: &[&str] = &["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];

pub(crate) async fn patch(ctx: &RequestScope, headers: &HeaderMap, (ct, bytes): (Option<String>, Bytes)) -> ApiResult<Response> {
    let name = ctx.name().to_string();
    let kind = negotiate::body_type(ct.as_deref());
    let accepted = if ctx.info.strategic_patch { PATCH_TYPES_BUILTIN } else { PATCH_TYPES_CUSTOM };
    match kind {
        BodyType::JsonPatch | BodyType::MergePatch | BodyType::ApplyYaml => {}
        BodyType::StrategicMergePatch if ctx.info.strategic_patch => {}
        // A custom resource's strategic merge patch reaches the handler, which names what it takes.
        BodyType::StrategicMergePatch => return Err(ApiError::unsupported_media_type(accepted)),
        _ => return Err(ApiError::unsupported_patch_type()),
    }
    let patch_doc = crate::patching::decode(kind, &bytes)?;
    let dry_run = ctx.query.dry_run()?;
    if kind == BodyType::ApplyYaml && ctx.query.get("fieldManager").is_none_or(str::is_empty) {
        // The options are what is invalid (PatchOptions, no name), as on kube-apiserver.
        let mut e = ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause::new("FieldValueRequired", "fieldManager", "Required value: is required for apply patch")],
        );
        e.name = None;
        return Err(e);
    }
    // Retry when the object changes between our read and our write.
    for _ in 0..16 {
        let existing = match ctx.inner.store.get(&ctx.key(&name)).await? {
            Some(kv) => Some((storage::decode_for(&ctx.info, &kv)?, kv.mod_revision)),
            None => None,
        };
        let Some((old, rev)) = existing else {
            if kind == BodyType::ApplyYaml && ctx.path.subresource.is_none() {
                // Server-side apply creates.
                let config = crate::patching::apply_config(ctx, &patch_doc)?;
                let (mut body, owned) = server_side_apply(ctx, None, &config)?;
                if ctx.info.namespaced
                    && let Some(ns) = ctx.namespace()
                {
                    meta::meta_mut(&mut body).entry("namespace").or_insert(json!(ns));
                }
                let mut warnings = Vec::new();
                match create_object(ctx, body, &mut warnings, Some(owned)).await {
                    // Created by someone else since the read: apply to that object instead, as
                    // kube-apiserver's GuaranteedUpdate retries (concurrent `join`s apply the
                    // same namespace).
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    Err(e) => return Err(e),
                    Ok(obj) => return render_object(ctx, headers, StatusCode::CREATED, obj, &warnings),
                }
            }
            return Err(ApiError::not_found(&ctx.subject(&name)));
        };
        let base = if ctx.path.subresource.as_deref() == Some("scale") { scale_of(ctx, &old)? } else { old.clone() };
        let (patched, owned) = if kind == BodyType::ApplyYaml && ctx.path.subresource.as_deref() != Some("scale") {
            let config = crate::patching::apply_config(ctx, &patch_doc)?;
            let (obj, owned) = server_side_apply(ctx, Some(&old), &config)?;
            (obj, Some(owned))
        } else {
            (crate::patching::apply(ctx, kind, &base, &patch_doc).await?, None)
        };
        if let Some(want) = meta::meta_str(&patched, "resourceVersion").filter(|s| !s.is_empty())
            && meta::meta_str(&base, "resourceVersion") != Some(want)
        {
            return Err(ApiError::conflict(&ctx.subject(&name)));
        }
        if ctx.path.subresource.as_deref() == Some("scale") {
            let obj = set_scale(ctx, &old, &patched)?;
            let mut warnings = Vec::new();
            let prepared = prepare_update_main(ctx, &old, obj, &mut warnings).await?;
            if dry_run || prepared.noop {
                return Ok(json_response(StatusCode::OK, &scale_of(ctx, if dry_run { &prepared.obj } else { &old })?, "application/json", &[]));
            }
            match commit_update(ctx, &name, rev, prepared).await {
                Err(e) if e.reason == "Conflict" => continue,
                Err(e) => return Err(e),
                Ok(obj) => return Ok(json_response(StatusCode::OK, &scale_of(ctx, &obj)?, "application/json", &[])),
            }
        }
        let mut warnings = Vec::new();
        let prepared = prepare_update(ctx, &old, patched, &mut warnings, owned).await?;
        if prepared.noop {
            return render_object(ctx, headers, StatusCode::OK, old, &warnings);
        }
        if dry_run {
            return render_object(ctx, headers, StatusCode::OK, prepared.obj, &warnings);
        }
        match commit_update(ctx, &name, rev, prepared).await {
            Err(e) if e.reason == "Conflict" => continue,
            Err(e) => return Err(e),
            Ok(obj) => return render_object(ctx, headers, StatusCode::OK, obj, &warnings),
        }
    }
    Err(ApiError::conflict(&ctx.subject(&name)))
}

/// Server-side apply of `config` to `live` (None: create): the object to write and its
/// managed fields, or a 409 naming every field another manager owns.
fn server_side_apply(ctx: &RequestScope, live: Option<&Value>, config: &Value) -> ApiResult<(Value, Vec<managed::Entry>)> {
    let entries = live.map(|o| managed::decode(meta::meta(o).and_then(|m| m.get("managedFields"))).unwrap_or_default()).unwrap_or_default();
    let entries = storage::managed_fields_as(&ctx.info, entries, true);
    let mut live_plain = live.cloned();
    if let Some(o) = live_plain.as_mut() {
        strip_managed_fields(o);
    }
    let mut config = config.clone();
    strip_managed_fields(&mut config);
    let (manager, api_version, now) = (ctx.field_manager(), ctx.info.api_version(), meta::now());
    let force = ctx.query.get("force") == Some("true");
    let reset = managed::reset_fields(ctx.path.subresource.as_deref().unwrap_or(""), ctx.info.status, &config);
    let name = meta::name(&config).to_string();
    let writer = ctx.writer(&manager, &api_version, &now);
    let (zero, ty) = (ctx.zero_value(), ctx.object_type());
    // An object nobody owns anything of (written before field tracking, or by updates only
    // since it was created empty) is owned by `before-first-apply` when first applied to, as
    // kube-apiserver does: the apply then conflicts with its values rather than dropping them.
    let entries = match live_plain.as_ref() {
        Some(live) if entries.is_empty() => {
            let w = managed::Writer { manager: "before-first-apply", ..writer.clone() };
            managed::record_update(None, live, &zero, ty, Vec::new(), &w, &managed::FieldSet::default())
                .map_err(|e| ApiError::invalid(&ctx.info.group, &ctx.info.kind, &name, vec![Cause::new("FieldValueInvalid", "", e)]))?
        }
        _ => entries,
    };
    let mut result = managed::apply(live_plain.as_ref(), &config, &zero, ty, entries.clone(), &writer, force, &reset);
    // Over a client-side apply's fields that still hold its values, the apply goes through.
    if let (Err(managed::ApplyError::Conflicts(_, on)), Some(live)) = (&result, live_plain.as_ref())
        && managed::allowed_from_last_applied(live, ty).is_some_and(|allowed| on.difference(&allowed).is_empty())
    {
        result = managed::apply(Some(live), &config, &zero, ty, entries, &writer, true, &reset);
    }
    match result {
        Ok((obj, entries)) => Ok((obj, storage::managed_fields_as(&ctx.info, entries, false))),
        Err(managed::ApplyError::Conflicts(conflicts, _)) => {
            let mut err = ApiError::new(409, "Conflict", managed::conflict_message(&conflicts));
            for c in &conflicts {
                err = err.with_cause(Cause::new("FieldManagerConflict", c.field.clone(), format!("conflict with {}", c.manager)));
            }
            Err(err)
        }
        Err(managed::ApplyError::Invalid(m)) => Err(ApiError::invalid(&ctx.info.group, &ctx.info.kind, &name, vec![Cause::new("FieldValueInvalid", "", m)])),
    }
}

/// `prepare_update` as for the main resource (scale writes go to the main object), with the
/// scale subresource's ownership: an entry of its own (subresource `scale`), which
/// kube-apiserver records without a time (so it sorts before the manager's other entries).
async fn prepare_update_main(ctx: &RequestScope, old: &Value, mut new: Value, warnings: &mut Vec<String>) -> ApiResult<Prepared> {
    ctx.record_ownership(Some(old), &mut new, None)?;
    let mut owned = managed::decode(meta::meta(&new).and_then(|m| m.get("managedFields"))).unwrap_or_default();
    for e in owned.iter_mut().filter(|e| e.subresource == "scale") {
        e.time = None;
    }
    let main = RequestScope {
        inner: ctx.inner.clone(),
        info: ctx.info.clone(),
        path: ResourcePath { subresource: None, ..ctx.path.clone() },
        query: ctx.query.clone(),
        identity: ctx.identity.clone(),
        user_agent: ctx.user_agent.clone(),
    };
    prepare_update(&main, old, new, warnings, Some(owned)).await
}

// ---------------------------------------------------------------------------------------------
// Scale

fn scale_of(ctx: &RequestScope, obj: &Value) -> ApiResult<Value> {
    let spec = ctx.info.scale.as_ref().ok_or_else(ApiError::no_route)?;
    let replicas = obj.pointer(&spec.spec_replicas).and_then(Value::as_i64).unwrap_or(0);
    let status_replicas = obj.pointer(&spec.status_replicas).and_then(Value::as_i64).unwrap_or(0);
    let selector = spec.selector.as_ref().and_then(|p| obj.pointer(p)).map(|s| match s {
        Value::String(s) => s.clone(),
        other => label_selector_string(other),
    });
    let m = meta::meta(obj).cloned().unwrap_or_default();
    let mut scale_meta = Map::new();
    for f in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = m.get(f) {
            scale_meta.insert(f.into(), v.clone());
        }
    }
    let mut status = json!({"replicas": status_replicas});
    if let Some(s) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = json!(s);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        // ScaleSpec.replicas is omitempty: a Scale of 0 has an empty spec.
        "spec": if replicas == 0 { json!({}) } else { json!({"replicas": replicas}) },
        "status": status,
    }))
}

fn label_selector_string(sel: &Value) -> String {
    match flotilla_api::selector::LabelSelector::from_json(sel) {
        Ok(s) => s.to_string(),
        Err(_) => String::new(),
    }
}

fn set_scale(ctx: &RequestScope, obj: &Value, scale: &Value) -> ApiResult<Value> {
    let spec = ctx.info.scale.as_ref().ok_or_else(ApiError::no_route)?;
    let replicas = scale.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
    // A custom object's Scale is not validated itself: the replicas land in the object, whose
    // schema and scale checks answer (as kube-apiserver's do).
    if replicas < 0 && !ctx.info.is_custom() {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            ctx.name(),
            vec![Cause::new("FieldValueInvalid", "spec.replicas", format!("Invalid value: {replicas}: must be greater than or equal to 0"))],
        ));
    }
    let mut out = obj.clone();
    set_pointer(&mut out, &spec.spec_replicas, json!(replicas));
    Ok(out)
}

fn set_pointer(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            if let Some(m) = cur.as_object_mut() {
                m.insert(p.to_string(), value);
            }
            return;
        }
        if !cur.get(*p).is_some_and(Value::is_object) {
            cur[*p] = json!({});
        }
        cur = cur.get_mut(*p).expect("just inserted");
    }
}

async fn update_scale(ctx: &RequestScope, name: &str, body: Value, dry_run: bool) -> ApiResult<Response> {
    let (old, rev) = read(ctx, name).await?;
    if let Some(want) = meta::meta_str(&body, "resourceVersion").filter(|s| !s.is_empty())
        && want.parse::<Revision>().ok() != Some(rev)
    {
        return Err(ApiError::conflict(&ctx.subject(name)));
    }
    let obj = set_scale(ctx, &old, &body)?;
    let mut warnings = Vec::new();
    let prepared = prepare_update_main(ctx, &old, obj, &mut warnings).await?;
    let obj = if prepared.noop || dry_run { prepared.obj } else { commit_update(ctx, name, rev, prepared).await? };
    Ok(json_response(StatusCode::OK, &scale_of(ctx, &obj)?, "application/json", &[]))
}

// ---------------------------------------------------------------------------------------------
// Delete

/// DeleteOptions from the body and the query.
#[derive(Debug, Default)]
struct DeleteOptions {
    propagation: Option<String>,
    precondition_uid: Option<String>,
    precondition_rv: Option<String>,
    /// `gracePeriodSeconds`: only graceful kinds (pods) have one ([`crate::strategy::Strategy::deletion_grace`]).
    grace_period: Option<i64>,
    dry_run: bool,
}

fn delete_options(ctx: &RequestScope, ct: Option<&str>, bytes: &[u8]) -> ApiResult<DeleteOptions> {
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) { json!({}) } else { parse_object_body(ct, bytes, None)? };
    let mut o = DeleteOptions {
        propagation: body.get("propagationPolicy").and_then(Value::as_str).map(String::from),
        precondition_uid: body.pointer("/preconditions/uid").and_then(Value::as_str).map(String::from),
        precondition_rv: body.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(String::from),
        grace_period: body.get("gracePeriodSeconds").and_then(Value::as_i64),
        dry_run: ctx.query.dry_run()?,
    };
    if let Some(g) = ctx.query.get("gracePeriodSeconds").filter(|s| !s.is_empty()) {
        o.grace_period = Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}")))?);
    }
    if let Some(p) = ctx.query.get("propagationPolicy").filter(|s| !s.is_empty()) {
        o.propagation = Some(p.to_string());
    }
    if o.propagation.is_none() {
        match body.get("orphanDependents").and_then(Value::as_bool).or_else(|| ctx.query.get("orphanDependents").map(|v| v == "true")) {
            Some(true) => o.propagation = Some("Orphan".into()),
            Some(false) => o.propagation = Some("Background".into()),
            None => {}
        }
    }
    if let Some(dr) = body.get("dryRun").and_then(Value::as_array) {
        let Some(values) = dr.iter().map(Value::as_str).collect::<Option<Vec<&str>>>() else {
            return Err(ApiError::bad_request("DeleteOptions.dryRun: expected a list of strings"));
        };
        let values: Vec<&str> = values.into_iter().filter(|v| !v.is_empty()).collect();
        crate::request::check_dry_run(&values, "DeleteOptions")?;
        o.dry_run |= !values.is_empty();
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![Cause::new(
                "FieldValueNotSupported",
                "propagationPolicy",
                format!("Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""),
            )],
        ));
    }
    Ok(o)
}

/// Delete one object; returns the HTTP code and body (the object or a Status).
async fn delete_one(ctx: &RequestScope, name: &str, opts: &DeleteOptions) -> ApiResult<(StatusCode, Value)> {
    let info = &ctx.info;
    let strategy = ctx.strategy();
    strategy.check_delete(ctx, name)?;
    for _ in 0..16 {
        let (old, rev) = read(ctx, name).await?;
        if let Some(uid) = &opts.precondition_uid
            && meta::meta_str(&old, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::conflict_with(
                &Subject { group: &info.group, resource: &info.kind, name },
                format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta::meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(want) = &opts.precondition_rv
            && want.parse::<Revision>().ok() != Some(rev)
        {
            return Err(ApiError::conflict_with(
                &Subject { group: &info.group, resource: &info.kind, name },
                format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rev}). The object might have been modified"
                ),
            ));
        }
        // Validating admission of the delete (Karmada's deletion protection), dry run or not.
        if let Some(message) = flotilla_api::admission::refuse_delete(&old) {
            return Err(ApiError::new(403, "Forbidden", message));
        }
        let policy_finalizer = strategy.deletion_finalizer().or(match opts.propagation.as_deref() {
            Some("Foreground") => Some("foregroundDeletion"),
            Some("Orphan") => Some("orphan"),
            _ => None,
        });
        let mut finalizers = meta::finalizers(&old);
        let spec_finalizers = strategy.holds_spec_finalizers(&old);
        let kind_grace = strategy.deletion_grace(&old, opts.grace_period);
        let grace = kind_grace.unwrap_or(0);
        let graceful = !finalizers.is_empty() || policy_finalizer.is_some() || spec_finalizers || grace > 0;
        // An object of a graceful kind (a pod) already being deleted is deleted now when asked
        // with no grace period (its kubelet does so once the containers stopped) and nothing
        // else holds it.
        let finish_now = kind_grace.is_some() && opts.grace_period == Some(0) && finalizers.is_empty() && policy_finalizer.is_none();
        if meta::is_terminating(&old) && !finish_now {
            // Already being deleted: nothing more to do.
            return Ok((StatusCode::OK, with_type(info, old)));
        }
        if graceful {
            let mut obj = old.clone();
            if let Some(f) = policy_finalizer {
                if !finalizers.iter().any(|x| x == f) {
                    finalizers.push(f.to_string());
                }
                meta::meta_mut(&mut obj).insert("finalizers".into(), json!(finalizers));
            }
            meta::meta_mut(&mut obj).insert("deletionTimestamp".into(), json!(meta::now_plus(grace)));
            strategy.mark_deleting(info, &mut obj, grace);
            if opts.dry_run {
                return Ok((StatusCode::OK, with_type(info, obj)));
            }
            let key = ctx.key(name);
            match ctx.inner.store.update_if(key, storage::encode_for(info, &obj)?, rev).await {
                Ok(new_rev) => {
                    meta::meta_mut(&mut obj).insert("resourceVersion".into(), json!(new_rev.to_string()));
                    ctx.strategy().after_write(ctx).await;
                    return Ok((StatusCode::OK, with_type(info, obj)));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound { .. }) => return Err(ApiError::not_found(&ctx.subject(name))),
                Err(e) => return Err(e.into()),
            }
        }
        let deleted = if opts.dry_run {
            old.clone()
        } else {
            match ctx.inner.store.delete_if(ctx.key(name), Some(rev)).await {
                Ok((r, _)) => {
                    let mut o = old.clone();
                    meta::meta_mut(&mut o).insert("resourceVersion".into(), json!(r.to_string()));
                    ctx.strategy().after_write(ctx).await;
                    o
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound { .. }) => return Err(ApiError::not_found(&ctx.subject(name))),
                Err(e) => return Err(e.into()),
            }
        };
        if info.returns_deleted {
            return Ok((StatusCode::OK, with_type(info, deleted)));
        }
        let mut details = json!({"name": name, "kind": info.plural, "uid": meta::meta_str(&old, "uid").unwrap_or("")});
        if !info.group.is_empty() {
            details["group"] = json!(info.group);
        }
        return Ok((StatusCode::OK, json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})));
    }
    Err(ApiError::conflict(&ctx.subject(name)))
}

pub(crate) async fn delete(ctx: &RequestScope, headers: &HeaderMap, (ct, bytes): (Option<String>, Bytes)) -> ApiResult<Response> {
    if ctx.path.subresource.is_some() {
        return Err(ApiError::method_not_allowed());
    }
    let opts = delete_options(ctx, ct.as_deref(), &bytes)?;
    let (code, body) = delete_one(ctx, ctx.name(), &opts).await?;
    if body.get("kind").and_then(Value::as_str) == Some("Status") {
        return Ok(json_response(code, &body, "application/json", &[]));
    }
    render_object(ctx, headers, code, body, &[])
}

pub(crate) async fn delete_collection(ctx: &RequestScope, _headers: &HeaderMap, (ct, bytes): (Option<String>, Bytes)) -> ApiResult<Response> {
    let opts = delete_options(ctx, ct.as_deref(), &bytes)?;
    let (items, _) = crate::listwatch::list_all(ctx).await?;
    let mut deleted = Vec::new();
    for obj in items {
        let name = meta::name(&obj).to_string();
        match delete_one(ctx, &name, &opts).await {
            Ok((_, body)) => {
                let mut item = if body.get("kind").and_then(Value::as_str) != Some("Status") { body } else { with_type(&ctx.info, obj) };
                // A typed list's items carry no kind or apiVersion; an unstructured one's do.
                if !ctx.info.is_custom()
                    && let Some(m) = item.as_object_mut()
                {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                deleted.push(item);
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = ctx.inner.store.current_revision().await?;
    let mut list_meta = json!({"resourceVersion": rv.to_string()});
    if ctx.info.is_custom() {
        // Custom objects are listed as unstructured lists, which always carry `continue`.
        list_meta["continue"] = json!("");
    }
    let list = json!({
        "kind": ctx.info.list_kind,
        "apiVersion": ctx.info.api_version(),
        "metadata": list_meta,
        "items": deleted,
    });
    Ok(json_response(StatusCode::OK, &list, "application/json", &[]))
}
