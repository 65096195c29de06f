//! Protobuf request bodies, decoded to the JSON a Go client would have sent for the same object:
//! kubectl ≥ 1.32 sends protobuf for every request made through client-go's typed clients
//! (`create deployment|service|job|…`, `expose`, `run`, `auth can-i`, `create token`, …).
//! Responses stay JSON (those clients accept it).
//!
//! Decoding is driven by `data/protobuf-schema.json`, read off the Go types of every built-in
//! kind by `testenv/hack/proto-schema` (see `scripts/regen-protobuf-schema.sh`): per message, each
//! field's protobuf number, JSON name, element type, and the Go facts encoding/json's output
//! depends on (pointer, repeated, map, omitempty/omitzero, embedded-and-inlined). Kinds the table
//! lacks (custom resources) are a 415 naming the kind.
//!
//! Wire format: the magic `k8s\0`, then a `runtime.Unknown` {1: typeMeta {1: apiVersion,
//! 2: kind}, 2: raw (the object's message), 3: contentEncoding, 4: contentType}.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

const MAGIC: &[u8] = b"k8s\0";
const SCHEMA: &str = include_str!("../data/protobuf-schema.json");
/// Deeper nesting than any built-in kind has (embedded objects included) is refused, so a
/// crafted body cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

#[derive(Deserialize)]
struct Schema {
    /// `group/version/Kind` (`core` for the legacy group) → message name.
    kinds: HashMap<String, String>,
    types: HashMap<String, TypeDef>,
}

#[derive(Deserialize)]
struct TypeDef {
    #[serde(default)]
    fields: Vec<FieldDef>,
    /// A named Go slice the protobuf wraps in a message whose field 1 holds the items
    /// (`ExtraValue`, `Verbs`); its JSON is the array.
    #[serde(default)]
    list: Option<String>,
}

#[derive(Deserialize)]
struct FieldDef {
    /// Protobuf field number; 0 for a field the message lacks (always its zero value).
    n: u32,
    #[serde(default)]
    j: String,
    t: String,
    #[serde(default)]
    r: bool,
    #[serde(default)]
    p: bool,
    #[serde(default)]
    o: Option<Omit>,
    #[serde(default)]
    i: bool,
    #[serde(default)]
    v: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Omit {
    Empty,
    Zero,
}

fn schema() -> &'static Schema {
    static PARSED: OnceLock<Schema> = OnceLock::new();
    PARSED.get_or_init(|| serde_json::from_str(SCHEMA).expect("data/protobuf-schema.json is valid (checked by a unit test)"))
}

/// The Go type of the field a JSON path names in a built-in kind, with the struct that holds
/// it, as Go's `UnmarshalTypeError` names them: `("DeploymentSpec", "int32")` for
/// `spec.replicas` of an apps/v1 Deployment, `("ConfigMap", "map[string]string")` for `data`.
/// A path segment may carry an index (`containers[0]`); the last one then names an element.
/// `None` for types with their own JSON decoding (quantities, times, int-or-string) and paths
/// through maps, whose errors Go words differently.
pub(crate) fn go_field_type(group: &str, version: &str, kind: &str, path: &str) -> Option<(String, String)> {
    let schema = schema();
    let key = format!("{}/{version}/{kind}", if group.is_empty() { "core" } else { group });
    let mut current = schema.kinds.get(&key)?.as_str();
    let segments: Vec<&str> = path.split('.').collect();
    for (i, segment) in segments.iter().enumerate() {
        let (name, indexed) = match segment.find('[') {
            Some(at) => (&segment[..at], true),
            None => (*segment, false),
        };
        let field = find_field(schema, current, name)?;
        if i + 1 == segments.len() {
            let struct_name = current.rsplit('.').next().unwrap_or(current).to_string();
            let element = go_type_name(&field.t, field.v.as_deref())?;
            let ty = if field.r && !indexed { format!("[]{element}") } else { element };
            return Some((struct_name, ty));
        }
        if field.t == "map" || !schema.types.contains_key(&field.t) {
            return None;
        }
        current = field.t.as_str();
    }
    None
}

/// A field by JSON name, looking into inlined structs too.
fn find_field<'a>(schema: &'a Schema, ty: &str, name: &str) -> Option<&'a FieldDef> {
    let def = schema.types.get(ty)?;
    def.fields.iter().find(|f| !f.i && f.j == name).or_else(|| def.fields.iter().filter(|f| f.i).find_map(|f| find_field(schema, &f.t, name)))
}

/// Go's spelling of a schema type (`core/v1.PodSpec` is `v1.PodSpec`).
fn go_type_name(t: &str, map_value: Option<&str>) -> Option<String> {
    Some(match t {
        "Time" | "MicroTime" | "Quantity" | "IntOrString" | "RawExtension" | "FieldsV1" => return None,
        "bytes" => "[]uint8".to_string(),
        "map" => format!("map[string]{}", go_type_name(map_value?, None)?),
        scalar if !scalar.contains('.') => scalar.to_string(),
        message => message.rsplit('/').next().unwrap_or(message).to_string(),
    })
}

fn bad(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the protobuf request body could not be decoded: {what}"))
}

/// One field occurrence on the wire.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64,
    Fixed32,
    Bytes(&'a [u8]),
}

fn varint(buf: &mut &[u8]) -> ApiResult<u64> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first().ok_or_else(|| bad("truncated varint"))?;
        *buf = rest;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err(bad("varint longer than 10 bytes"))
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> ApiResult<&'a [u8]> {
    if n > buf.len() {
        return Err(bad("a field runs past the end of its message"));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// Every field occurrence of a message, in wire order.
fn fields(mut buf: &[u8]) -> ApiResult<Vec<(u32, Wire<'_>)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let number = u32::try_from(key >> 3).map_err(|_| bad("field number out of range"))?;
        if number == 0 {
            return Err(bad("field number 0"));
        }
        let wire = match key & 7 {
            0 => Wire::Varint(varint(&mut buf)?),
            1 => {
                take(&mut buf, 8)?;
                Wire::Fixed64
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| bad("length out of range"))?;
                Wire::Bytes(take(&mut buf, len)?)
            }
            5 => {
                take(&mut buf, 4)?;
                Wire::Fixed32
            }
            w => return Err(bad(format_args!("unsupported wire type {w}"))),
        };
        out.push((number, wire));
    }
    Ok(out)
}

fn wrong_wire(what: &str) -> ApiError {
    bad(format_args!("a {what} field has the wrong wire type"))
}

fn bytes_of<'a>(w: Wire<'a>, what: &str) -> ApiResult<&'a [u8]> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(wrong_wire(what)),
    }
}

fn varint_of(w: Wire<'_>, what: &str) -> ApiResult<u64> {
    match w {
        Wire::Varint(v) => Ok(v),
        _ => Err(wrong_wire(what)),
    }
}

/// The last occurrence of a scalar field, or the concatenation of a message field's
/// occurrences (protobuf merges repeated occurrences of a message).
fn singular<'a>(occ: &[Wire<'a>], message: bool) -> ApiResult<Option<Cow<'a, [u8]>>> {
    match occ {
        [] => Ok(None),
        [Wire::Bytes(b)] => Ok(Some(Cow::Borrowed(b))),
        _ if message => {
            let mut all = Vec::new();
            for w in occ {
                all.extend_from_slice(bytes_of(*w, "message")?);
            }
            Ok(Some(Cow::Owned(all)))
        }
        [.., last] => Ok(Some(Cow::Borrowed(bytes_of(*last, "string")?))),
    }
}

fn is_scalar_number(t: &str) -> bool {
    matches!(t, "int32" | "int64" | "bool")
}

struct Decoder {
    schema: &'static Schema,
    depth: usize,
}

impl Decoder {
    fn type_def(&self, name: &str) -> ApiResult<&'static TypeDef> {
        self.schema.types.get(name).ok_or_else(|| bad(format_args!("no protobuf layout for {name}")))
    }

    fn is_message(&self, t: &str) -> bool {
        !matches!(t, "string" | "bytes" | "int32" | "int64" | "bool")
    }

    /// A message's JSON object.
    fn message(&mut self, name: &str, buf: &[u8]) -> ApiResult<Value> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(bad("objects nested too deeply"));
        }
        let out = self.message_inner(name, buf);
        self.depth -= 1;
        out
    }

    fn message_inner(&mut self, name: &str, buf: &[u8]) -> ApiResult<Value> {
        let def = self.type_def(name)?;
        let wire = fields(buf)?;
        if let Some(item) = &def.list {
            let mut items = Vec::new();
            for (_, w) in wire.iter().filter(|(n, _)| *n == 1) {
                self.push_items(item, *w, &mut items)?;
            }
            return Ok(Value::Array(items));
        }
        let mut obj = Map::new();
        for f in &def.fields {
            let occ: Vec<Wire<'_>> = if f.n == 0 { Vec::new() } else { wire.iter().filter(|(n, _)| *n == f.n).map(|(_, w)| *w).collect() };
            let (value, omit) = self.field(f, &occ)?;
            if omit {
                continue;
            }
            if f.i {
                if let Value::Object(inner) = value {
                    obj.extend(inner);
                }
            } else {
                obj.insert(f.j.clone(), value);
            }
        }
        Ok(Value::Object(obj))
    }

    /// A field's JSON value and whether encoding/json leaves it out.
    fn field(&mut self, f: &FieldDef, occ: &[Wire<'_>]) -> ApiResult<(Value, bool)> {
        let omitempty = f.o == Some(Omit::Empty);
        let omitzero = f.o == Some(Omit::Zero);
        if f.t == "map" {
            let value_type = f.v.as_deref().unwrap_or("string");
            let mut map = Map::new();
            for w in occ {
                let (k, v) = self.map_entry(value_type, bytes_of(*w, "map")?)?;
                map.insert(k, v);
            }
            // gogo protobuf leaves a map without entries nil.
            return Ok(if map.is_empty() { (Value::Null, f.o.is_some()) } else { (Value::Object(map), false) });
        }
        if f.r {
            let mut items = Vec::new();
            for w in occ {
                self.push_items(&f.t, *w, &mut items)?;
            }
            return Ok(if items.is_empty() { (Value::Null, f.o.is_some()) } else { (Value::Array(items), false) });
        }
        let message = self.is_message(&f.t);
        let raw = match occ.last() {
            None => None,
            Some(Wire::Bytes(_)) => singular(occ, message)?,
            Some(w) => {
                let v = self.scalar(&f.t, *w)?;
                let omit = !f.p && (omitempty || omitzero) && is_empty_scalar(&v);
                return Ok((v, omit));
            }
        };
        let Some(raw) = raw else {
            // Absent: a nil pointer, or the Go zero value.
            if f.p {
                return Ok((Value::Null, f.o.is_some()));
            }
            let zero = self.zero(&f.t)?;
            let omit = (omitempty && self.empty(&f.t, &zero)) || (omitzero && self.zero_like(&f.t, &zero));
            return Ok((zero, omit));
        };
        let value = self.value(&f.t, &raw)?;
        let omit = !f.p && ((omitempty && self.empty(&f.t, &value)) || (omitzero && self.zero_like(&f.t, &value)));
        Ok((value, omit))
    }

    /// encoding/json's omitempty: false, 0, "", and empty slices and maps (never structs).
    fn empty(&self, t: &str, v: &Value) -> bool {
        match t {
            "string" | "int32" | "int64" | "bool" => is_empty_scalar(v),
            "bytes" => v.is_null() || v.as_str() == Some(""),
            _ => self.schema.types.get(t).is_some_and(|d| d.list.is_some()) && v.as_array().is_none_or(Vec::is_empty),
        }
    }

    /// omitzero: only `Time` uses it among built-in kinds (`creationTimestamp`); its zero
    /// value is written `null`.
    fn zero_like(&self, t: &str, v: &Value) -> bool {
        match t {
            "Time" | "MicroTime" => v.is_null(),
            _ => self.empty(t, v),
        }
    }

    /// The JSON of a type's Go zero value.
    fn zero(&mut self, t: &str) -> ApiResult<Value> {
        Ok(match t {
            "string" => json!(""),
            "int32" | "int64" => json!(0),
            "bool" => json!(false),
            "bytes" | "Time" | "MicroTime" | "RawExtension" | "FieldsV1" => Value::Null,
            "Duration" => json!("0s"),
            "Quantity" => json!("0"),
            "IntOrString" => json!(0),
            name if self.type_def(name)?.list.is_some() => Value::Null,
            name => self.message(name, &[])?,
        })
    }

    /// A scalar from a varint.
    fn scalar(&self, t: &str, w: Wire<'_>) -> ApiResult<Value> {
        let v = varint_of(w, t)?;
        Ok(match t {
            "bool" => json!(v != 0),
            // Go truncates a varint to the field's width.
            "int32" => json!(v as i32),
            "int64" => json!(v as i64),
            other => return Err(wrong_wire(other)),
        })
    }

    /// A value from a length-delimited field.
    fn value(&mut self, t: &str, raw: &[u8]) -> ApiResult<Value> {
        Ok(match t {
            "string" => json!(String::from_utf8_lossy(raw)),
            "bytes" => json!(base64::engine::general_purpose::STANDARD.encode(raw)),
            "int32" | "int64" | "bool" => return Err(wrong_wire(t)),
            "Time" => time(raw, false)?,
            "MicroTime" => time(raw, true)?,
            "Duration" => {
                let mut nanos = 0i64;
                for (n, w) in fields(raw)? {
                    if n == 1 {
                        nanos = varint_of(w, "Duration")? as i64;
                    }
                }
                json!(go_duration(nanos))
            }
            "Quantity" => {
                let mut s = String::new();
                for (n, w) in fields(raw)? {
                    if n == 1 {
                        s = String::from_utf8_lossy(bytes_of(w, "Quantity")?).into_owned();
                    }
                }
                json!(s)
            }
            "IntOrString" => {
                let (mut kind, mut int, mut string) = (0u64, 0i32, String::new());
                for (n, w) in fields(raw)? {
                    match n {
                        1 => kind = varint_of(w, "IntOrString")?,
                        2 => int = varint_of(w, "IntOrString")? as i32,
                        3 => string = String::from_utf8_lossy(bytes_of(w, "IntOrString")?).into_owned(),
                        _ => {}
                    }
                }
                match kind {
                    0 => json!(int),
                    1 => json!(string),
                    other => return Err(bad(format_args!("IntOrString of unknown type {other}"))),
                }
            }
            "RawExtension" | "FieldsV1" => {
                let mut embedded: Option<&[u8]> = None;
                for (n, w) in fields(raw)? {
                    if n == 1 {
                        embedded = Some(bytes_of(w, t)?);
                    }
                }
                match embedded {
                    None | Some([]) => Value::Null,
                    Some(b) if b.starts_with(MAGIC) => self.envelope(b)?,
                    Some(b) => serde_json::from_slice(b).map_err(|e| bad(format_args!("an embedded {t} is neither JSON nor protobuf: {e}")))?,
                }
            }
            name => self.message(name, raw)?,
        })
    }

    /// Items of a repeated field from one occurrence (packed numbers hold several).
    fn push_items(&mut self, t: &str, w: Wire<'_>, out: &mut Vec<Value>) -> ApiResult<()> {
        match w {
            Wire::Bytes(mut b) if is_scalar_number(t) => {
                while !b.is_empty() {
                    out.push(self.scalar(t, Wire::Varint(varint(&mut b)?))?);
                }
            }
            Wire::Bytes(b) => out.push(self.value(t, b)?),
            other => out.push(self.scalar(t, other)?),
        }
        Ok(())
    }

    /// A map entry {1: key, 2: value}; a missing value is the zero value (`""` for bytes, as
    /// gogo protobuf allocates an empty slice).
    fn map_entry(&mut self, value_type: &str, buf: &[u8]) -> ApiResult<(String, Value)> {
        let mut key = String::new();
        let mut value: Option<Wire<'_>> = None;
        let entry = fields(buf)?;
        for (n, w) in &entry {
            match n {
                1 => key = String::from_utf8_lossy(bytes_of(*w, "map key")?).into_owned(),
                2 => value = Some(*w),
                _ => {}
            }
        }
        let value = match value {
            Some(Wire::Bytes(b)) => self.value(value_type, b)?,
            Some(w) => self.scalar(value_type, w)?,
            None if value_type == "bytes" => json!(""),
            None => self.zero(value_type)?,
        };
        Ok((key, value))
    }

    /// A `runtime.Unknown` envelope: the object with apiVersion and kind.
    fn envelope(&mut self, body: &[u8]) -> ApiResult<Value> {
        let rest = body.strip_prefix(MAGIC).ok_or_else(|| bad("missing the k8s protobuf envelope"))?;
        let (mut api_version, mut kind, mut raw, mut encoding) = (String::new(), String::new(), &[][..], String::new());
        for (n, w) in fields(rest)? {
            match n {
                1 => {
                    for (tn, tw) in fields(bytes_of(w, "typeMeta")?)? {
                        match tn {
                            1 => api_version = String::from_utf8_lossy(bytes_of(tw, "apiVersion")?).into_owned(),
                            2 => kind = String::from_utf8_lossy(bytes_of(tw, "kind")?).into_owned(),
                            _ => {}
                        }
                    }
                }
                2 => raw = bytes_of(w, "raw")?,
                3 => encoding = String::from_utf8_lossy(bytes_of(w, "contentEncoding")?).into_owned(),
                _ => {}
            }
        }
        if !encoding.is_empty() {
            return Err(bad(format_args!("content encoding {encoding:?} is not supported")));
        }
        let gvk = match api_version.split_once('/') {
            Some((group, version)) => format!("{group}/{version}/{kind}"),
            None => format!("core/{api_version}/{kind}"),
        };
        let Some(name) = self.schema.kinds.get(&gvk) else {
            return Err(ApiError::unsupported_media_type(&["application/json", "application/yaml"])
                .with_message(format!("protobuf request bodies of kind {kind:?} in {api_version:?} are not supported; send JSON")));
        };
        let mut obj = self.message(name, raw)?;
        obj["apiVersion"] = json!(api_version);
        obj["kind"] = json!(kind);
        Ok(obj)
    }
}

fn is_empty_scalar(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Null => true,
        _ => false,
    }
}

/// `metav1.Time` (seconds) and `MicroTime` (microseconds) as their JSON: RFC 3339 in UTC, or
/// `null` for the zero time (an empty message).
fn time(raw: &[u8], micro: bool) -> ApiResult<Value> {
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    let (mut seconds, mut nanos) = (0i64, 0i64);
    for (n, w) in fields(raw)? {
        match n {
            1 => seconds = varint_of(w, "Time")? as i64,
            2 => nanos = i64::from(varint_of(w, "Time")? as i32),
            _ => {}
        }
    }
    // Go's time.Unix normalises nanoseconds outside [0, 1e9).
    let seconds = seconds.checked_add(nanos.div_euclid(1_000_000_000)).ok_or_else(|| bad("time out of range"))?;
    let nanos = nanos.rem_euclid(1_000_000_000);
    // The Go zero time (January 1, year 1) is written null.
    if seconds == -62_135_596_800 && nanos == 0 {
        return Ok(Value::Null);
    }
    let ts = jiff::Timestamp::new(seconds, nanos as i32).map_err(|_| bad("time out of range"))?;
    let dt = ts.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    if dt.year() < 0 {
        return Err(bad("time before year 0"));
    }
    let base = dt.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    Ok(if micro { json!(format!("{base}.{:06}Z", nanos / 1000)) } else { json!(format!("{base}Z")) })
}

/// Go's `time.Duration.String`: `1h2m3.5s`, `1.5ms`, `0s`.
fn go_duration(d: i64) -> String {
    fn frac(v: u64, prec: u32) -> String {
        let scale = 10u64.pow(prec);
        let (int, rest) = (v / scale, v % scale);
        if rest == 0 {
            return int.to_string();
        }
        let digits = format!("{rest:0width$}", width = prec as usize);
        format!("{int}.{}", digits.trim_end_matches('0'))
    }
    if d == 0 {
        return "0s".into();
    }
    let sign = if d < 0 { "-" } else { "" };
    let u = d.unsigned_abs();
    if u < 1_000_000_000 {
        let (prec, unit) = match u {
            0..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        return format!("{sign}{}{unit}", frac(u, prec));
    }
    let secs = u / 1_000_000_000;
    let mut out = format!("{}s", frac((secs % 60) * 1_000_000_000 + u % 1_000_000_000, 9));
    let mins = secs / 60;
    if mins > 0 {
        out = format!("{}m{out}", mins % 60);
        let hours = mins / 60;
        if hours > 0 {
            out = format!("{hours}h{out}");
        }
    }
    format!("{sign}{out}")
}

/// Decode a protobuf body to a JSON object with apiVersion and kind.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    Decoder { schema: schema(), depth: 0 }.envelope(body)
}

#[cfg(test)]
mod tests {

    #[test]
    fn go_field_types_are_named_as_go_names_them() {
        let t = |g: &str, v: &str, k: &str, p: &str| go_field_type(g, v, k, p);
        assert_eq!(t("apps", "v1", "Deployment", "spec.replicas"), Some(("DeploymentSpec".into(), "int32".into())));
        assert_eq!(t("", "v1", "ConfigMap", "data"), Some(("ConfigMap".into(), "map[string]string".into())));
        assert_eq!(t("", "v1", "ConfigMap", "binaryData"), Some(("ConfigMap".into(), "map[string][]uint8".into())));
        assert_eq!(t("apps", "v1", "Deployment", "spec.template.spec.containers"), Some(("PodSpec".into(), "[]v1.Container".into())));
        assert_eq!(t("apps", "v1", "Deployment", "spec.template.spec.containers[0].ports[1].containerPort"), Some(("ContainerPort".into(), "int32".into())));
        assert_eq!(t("apps", "v1", "Deployment", "spec.template.spec.containers[0].args[2]"), Some(("Container".into(), "string".into())));
        assert_eq!(t("", "v1", "ConfigMap", "metadata.name"), Some(("ObjectMeta".into(), "string".into())));
        // Own JSON decoding (quantities, times) and paths through maps are left to the caller.
        assert_eq!(t("", "v1", "ConfigMap", "metadata.creationTimestamp"), None);
        assert_eq!(t("", "v1", "ConfigMap", "data.key"), None);
        assert_eq!(t("", "v1", "ConfigMap", "nope"), None);
    }

    use super::*;

    fn ld(field: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(field << 3 | 2) as u8];
        let mut len = bytes.len();
        while len >= 0x80 {
            out.push((len as u8) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(bytes);
        out
    }

    fn envelope(api_version: &[u8], kind: &[u8], raw: &[u8]) -> Vec<u8> {
        let tm = [ld(1, api_version), ld(2, kind)].concat();
        [MAGIC.to_vec(), ld(1, &tm), ld(2, raw)].concat()
    }

    #[test]
    fn the_committed_schema_parses_and_names_the_common_kinds() {
        let s: Schema = serde_json::from_str(SCHEMA).unwrap();
        for kind in ["core/v1/Pod", "apps/v1/Deployment", "authorization.k8s.io/v1/SelfSubjectAccessReview", "authentication.k8s.io/v1/TokenRequest"] {
            let name = &s.kinds[kind];
            assert!(s.types.contains_key(name), "{kind} → {name}");
        }
    }

    #[test]
    fn decodes_a_self_subject_access_review() {
        let attrs = [ld(1, b"default"), ld(2, b"list"), ld(5, b"pods")].concat();
        let raw = ld(2, &ld(1, &attrs));
        let v = decode(&envelope(b"authorization.k8s.io/v1", b"SelfSubjectAccessReview", &raw)).unwrap();
        assert_eq!(v["kind"], "SelfSubjectAccessReview");
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
        assert_eq!(v["spec"]["resourceAttributes"]["resource"], "pods");
        assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "default");
    }

    #[test]
    fn go_durations() {
        for (nanos, s) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (3_600_000_000_000, "1h0m0s"),
            (-61_500_000_000, "-1m1.5s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(go_duration(nanos), s);
        }
    }

    #[test]
    fn malformed_bodies_are_400_and_unknown_kinds_415() {
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
        assert_eq!(decode(&[MAGIC, &[0x0a, 0xff]].concat()).unwrap_err().code, 400);
        // A varint where ObjectMeta's name (a string) belongs.
        assert_eq!(decode(&envelope(b"v1", b"ConfigMap", &ld(1, &[0x08, 0x01]))).unwrap_err().code, 400);
        assert_eq!(decode(&envelope(b"example.com/v1", b"Widget", &[])).unwrap_err().code, 415);
        // ControllerRevision.data (a RawExtension) holding envelopes nested past the limit.
        let nest = |levels: usize| {
            let mut body = envelope(b"v1", b"ConfigMap", &[]);
            for _ in 0..levels {
                body = envelope(b"apps/v1", b"ControllerRevision", &ld(2, &ld(1, &body)));
            }
            body
        };
        assert_eq!(decode(&nest(3)).unwrap()["data"]["data"]["data"]["kind"], "ConfigMap");
        let err = decode(&nest(200)).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.contains("nested too deeply"), "{}", err.message);
    }

    /// Every truncation point and a spread of single-byte changes of real bodies: each decodes
    /// or is refused with 400 (or 415 for a kind the change made unknown), never a panic.
    #[test]
    fn damaged_bodies_are_refused_cleanly() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/protobuf-fixtures.jsonl");
        let text = std::fs::read_to_string(path).unwrap();
        for line in text.lines().step_by(7) {
            let fixture: Value = serde_json::from_str(line).unwrap();
            let body = base64::engine::general_purpose::STANDARD.decode(fixture["pb"].as_str().unwrap()).unwrap();
            let step = (body.len() / 200).max(1);
            for cut in (0..body.len()).step_by(step) {
                if let Err(e) = decode(&body[..cut]) {
                    assert!(e.code == 400 || e.code == 415, "{}: cut at {cut}: {}", fixture["kind"], e.code);
                }
                for flip in [0x80u8, 0x07, 0xff] {
                    let mut damaged = body.clone();
                    damaged[cut] ^= flip;
                    if let Err(e) = decode(&damaged) {
                        assert!(e.code == 400 || e.code == 415, "{}: byte {cut} ^ {flip:#x}: {}", fixture["kind"], e.code);
                    }
                }
            }
        }
    }

    /// The first place two JSON values differ, for a readable failure.
    fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys()).find_map(|k| {
                first_difference(&format!("{path}.{k}"), x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null))
                    .or_else(|| (x.contains_key(k) != y.contains_key(k)).then(|| format!("{path}.{k}: present in only one")))
            }),
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(&format!("{path}[{i}]"), p, q))
            }
            _ if a == b => None,
            _ => Some(format!("{path}: decoded {a}, Go wrote {b}")),
        }
    }

    /// Every fixture `testenv/hack/proto-schema` wrote (each built-in kind's zero value and a
    /// randomly filled object, encoded by apimachinery's protobuf serializer) decodes to exactly
    /// the JSON encoding/json writes for the object Go decodes from the same bytes.
    #[test]
    fn every_fixture_decodes_to_the_json_go_writes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/protobuf-fixtures.jsonl");
        let text = std::fs::read_to_string(path).unwrap();
        let mut failures = Vec::new();
        let mut count = 0;
        for line in text.lines() {
            let fixture: Value = serde_json::from_str(line).unwrap();
            let body = base64::engine::general_purpose::STANDARD.decode(fixture["pb"].as_str().unwrap()).unwrap();
            count += 1;
            match decode(&body) {
                Ok(got) => {
                    if let Some(d) = first_difference("", &got, &fixture["json"]) {
                        failures.push(format!("{}: {d}", fixture["kind"]));
                    }
                }
                Err(e) => failures.push(format!("{}: {}", fixture["kind"], e.message)),
            }
        }
        assert!(count > 300, "only {count} fixtures");
        assert!(failures.is_empty(), "{} of {count} fixtures differ:\n{}", failures.len(), failures.join("\n"));
    }
}
