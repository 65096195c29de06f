//! An OpenAPI v2 document as gnostic's protobuf (`openapi.v2.Document` of
//! github.com/google/gnostic-models, `OpenAPIv2.proto`): what client-go asks `/openapi/v2` for
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) and kubectl builds its models
//! from. Encoded from the JSON document, field by field; free-form values (vendor extensions,
//! `default`, `enum`, `example`) travel as YAML text in `openapi.v2.Any.yaml`, as gnostic's
//! compiler writes them. Only what Flotilla's documents hold is encoded: `swagger`, `info`,
//! `paths` (operations with query parameters and responses), `definitions`, `security` and
//! `securityDefinitions` (API keys).
//! `testenv/hack/openapi-v2` checks the bytes against gnostic itself.

use serde_json::{Map, Value};

/// A protobuf message being written.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u64) {
        self.varint((u64::from(field) << 3) | wire);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    /// A proto3 string: absent when empty.
    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn strings(&mut self, field: u32, v: Option<&Value>) {
        for s in v.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            self.bytes(field, s.as_bytes());
        }
    }

    fn bool(&mut self, field: u32, b: bool) {
        if b {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, v: i64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v as u64);
        }
    }

    fn double(&mut self, field: u32, v: f64) {
        if v != 0.0 {
            self.key(field, 1);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// An embedded message, written even when empty (the field is present).
    fn message(&mut self, field: u32, f: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        f(&mut inner);
        self.bytes(field, &inner.0);
    }

    /// `openapi.v2.Any` with its YAML text.
    fn any(&mut self, field: u32, v: &Value) {
        self.message(field, |m| m.string(2, &yaml(v)));
    }

    /// `repeated NamedAny vendor_extension`: every `x-` key of `m`, in order.
    fn extensions(&mut self, field: u32, m: &Map<String, Value>) {
        for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
            self.message(field, |n| {
                n.string(1, k);
                n.any(2, v);
            });
        }
    }
}

/// The protobuf form of an OpenAPI v2 JSON document.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let mut pb = Pb::default();
    let Some(d) = doc.as_object() else {
        return pb.0;
    };
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
    pb.string(1, s("swagger"));
    if let Some(info) = d.get("info").and_then(Value::as_object) {
        pb.message(2, |m| {
            let s = |k: &str| info.get(k).and_then(Value::as_str).unwrap_or("");
            m.string(1, s("title"));
            m.string(2, s("version"));
            m.string(3, s("description"));
            m.extensions(7, info);
        });
    }
    if let Some(paths) = d.get("paths").and_then(Value::as_object) {
        pb.message(8, |m| {
            m.extensions(1, paths);
            for (path, item) in paths.iter().filter(|(k, _)| !k.starts_with("x-")) {
                m.message(2, |n| {
                    n.string(1, path);
                    n.message(2, |p| encode_path_item(p, item));
                });
            }
        });
    }
    if let Some(defs) = d.get("definitions").and_then(Value::as_object) {
        pb.message(9, |m| {
            for (name, schema) in defs {
                m.message(1, |n| {
                    n.string(1, name);
                    n.message(2, |s| encode_schema(s, schema));
                });
            }
        });
    }
    for req in d.get("security").and_then(Value::as_array).into_iter().flatten() {
        pb.message(12, |m| {
            for (name, scopes) in req.as_object().into_iter().flatten() {
                m.message(1, |n| {
                    n.string(1, name);
                    n.message(2, |a| a.strings(1, Some(scopes)));
                });
            }
        });
    }
    if let Some(defs) = d.get("securityDefinitions").and_then(Value::as_object) {
        pb.message(13, |m| {
            for (name, def) in defs {
                let Some(def) = def.as_object().filter(|x| x.get("type").and_then(Value::as_str) == Some("apiKey")) else {
                    continue;
                };
                m.message(1, |n| {
                    n.string(1, name);
                    // SecurityDefinitionsItem.api_key_security
                    n.message(2, |item| {
                        item.message(2, |k| {
                            let s = |f: &str| def.get(f).and_then(Value::as_str).unwrap_or("");
                            k.string(1, s("type"));
                            k.string(2, s("name"));
                            k.string(3, s("in"));
                            k.string(4, s("description"));
                            k.extensions(5, def);
                        })
                    });
                });
            }
        });
    }
    pb.extensions(16, d);
    pb.0
}

/// `openapi.v2.PathItem`: its operations.
fn encode_path_item(pb: &mut Pb, v: &Value) {
    let Some(m) = v.as_object() else { return };
    pb.string(1, m.get("$ref").and_then(Value::as_str).unwrap_or(""));
    for (field, method) in [(2, "get"), (3, "put"), (4, "post"), (5, "delete"), (6, "options"), (7, "head"), (8, "patch")] {
        if let Some(op) = m.get(method).and_then(Value::as_object) {
            pb.message(field, |o| encode_operation(o, op));
        }
    }
    pb.extensions(10, m);
}

/// `openapi.v2.Operation`.
fn encode_operation(pb: &mut Pb, m: &Map<String, Value>) {
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
    pb.strings(1, m.get("tags"));
    pb.string(2, s("summary"));
    pb.string(3, s("description"));
    pb.string(5, s("operationId"));
    pb.strings(6, m.get("produces"));
    pb.strings(7, m.get("consumes"));
    for p in m.get("parameters").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object) {
        // ParametersItem: a reference, or a parameter (only query parameters are written here).
        pb.message(8, |item| match p.get("$ref").and_then(Value::as_str) {
            Some(r) => item.message(2, |j| j.string(1, r)),
            None => item.message(1, |param| param.message(2, |nb| nb.message(3, |q| encode_query_parameter(q, p)))),
        });
    }
    if let Some(responses) = m.get("responses").and_then(Value::as_object) {
        pb.message(9, |rs| {
            for (code, resp) in responses.iter().filter(|(k, _)| !k.starts_with("x-")) {
                rs.message(1, |n| {
                    n.string(1, code);
                    // ResponseValue.response
                    n.message(2, |rv| {
                        rv.message(1, |r| {
                            r.string(1, resp.get("description").and_then(Value::as_str).unwrap_or(""));
                            if let Some(schema) = resp.get("schema") {
                                r.message(2, |si| si.message(1, |sc| encode_schema(sc, schema)));
                            }
                            r.extensions(5, resp.as_object().unwrap_or(&Map::new()));
                        })
                    });
                });
            }
            rs.extensions(2, responses);
        });
    }
    pb.strings(10, m.get("schemes"));
    pb.bool(11, m.get("deprecated").and_then(Value::as_bool).unwrap_or(false));
    pb.extensions(13, m);
}

/// `openapi.v2.QueryParameterSubSchema`.
fn encode_query_parameter(pb: &mut Pb, m: &Map<String, Value>) {
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
    let b = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    pb.bool(1, b("required"));
    pb.string(2, s("in"));
    pb.string(3, s("description"));
    pb.string(4, s("name"));
    pb.bool(5, b("allowEmptyValue"));
    pb.string(6, s("type"));
    pb.string(7, s("format"));
    pb.string(9, s("collectionFormat"));
    if let Some(d) = m.get("default") {
        pb.any(10, d);
    }
    pb.bool(20, b("uniqueItems"));
    for e in m.get("enum").and_then(Value::as_array).into_iter().flatten() {
        pb.any(21, e);
    }
    pb.extensions(23, m);
}

/// `openapi.v2.Schema`.
fn encode_schema(pb: &mut Pb, v: &Value) {
    let Some(m) = v.as_object() else { return };
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
    let f = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let i = |k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0);
    let b = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    pb.string(1, s("$ref"));
    pb.string(2, s("format"));
    pb.string(3, s("title"));
    pb.string(4, s("description"));
    if let Some(d) = m.get("default") {
        pb.any(5, d);
    }
    pb.double(6, f("multipleOf"));
    pb.double(7, f("maximum"));
    pb.bool(8, b("exclusiveMaximum"));
    pb.double(9, f("minimum"));
    pb.bool(10, b("exclusiveMinimum"));
    pb.int64(11, i("maxLength"));
    pb.int64(12, i("minLength"));
    pb.string(13, s("pattern"));
    pb.int64(14, i("maxItems"));
    pb.int64(15, i("minItems"));
    pb.bool(16, b("uniqueItems"));
    pb.int64(17, i("maxProperties"));
    pb.int64(18, i("minProperties"));
    pb.strings(19, m.get("required"));
    for e in m.get("enum").and_then(Value::as_array).into_iter().flatten() {
        pb.any(20, e);
    }
    match m.get("additionalProperties") {
        // AdditionalPropertiesItem is a oneof: a false boolean is still written.
        Some(Value::Bool(x)) => pb.message(21, |a| {
            a.key(2, 0);
            a.varint(u64::from(*x));
        }),
        Some(x @ Value::Object(_)) => pb.message(21, |a| a.message(1, |s| encode_schema(s, x))),
        _ => {}
    }
    match m.get("type") {
        Some(Value::String(t)) => pb.message(22, |ti| ti.string(1, t)),
        Some(t @ Value::Array(_)) => pb.message(22, |ti| ti.strings(1, Some(t))),
        _ => {}
    }
    match m.get("items") {
        Some(x @ Value::Object(_)) => pb.message(23, |it| it.message(1, |s| encode_schema(s, x))),
        Some(Value::Array(xs)) => pb.message(23, |it| {
            for x in xs {
                it.message(1, |s| encode_schema(s, x));
            }
        }),
        _ => {}
    }
    for x in m.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        pb.message(24, |s| encode_schema(s, x));
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        pb.message(25, |p| {
            for (name, x) in props {
                p.message(1, |n| {
                    n.string(1, name);
                    n.message(2, |s| encode_schema(s, x));
                });
            }
        });
    }
    pb.string(26, s("discriminator"));
    pb.bool(27, b("readOnly"));
    if let Some(docs) = m.get("externalDocs").and_then(Value::as_object) {
        pb.message(29, |e| {
            e.string(1, docs.get("description").and_then(Value::as_str).unwrap_or(""));
            e.string(2, docs.get("url").and_then(Value::as_str).unwrap_or(""));
            e.extensions(3, docs);
        });
    }
    if let Some(x) = m.get("example") {
        pb.any(30, x);
    }
    pb.extensions(31, m);
}

/// A value as YAML text, block style as gnostic's compiler writes it (`atomic\n`,
/// `- group: apps\n  kind: Deployment\n  version: v1\n`); strings that would not read back as
/// the same string are double-quoted (JSON's escapes are YAML's).
pub fn yaml(v: &Value) -> String {
    let mut out = String::new();
    yaml_block(v, 0, &mut out);
    out
}

fn yaml_block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                out.push_str(&pad);
                out.push_str(&yaml_scalar(&Value::String(k.clone())));
                out.push(':');
                match x {
                    Value::Object(n) if !n.is_empty() => {
                        out.push('\n');
                        yaml_block(x, indent + 2, out);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        out.push('\n');
                        yaml_block(x, indent + 2, out);
                    }
                    _ => {
                        out.push(' ');
                        out.push_str(&yaml_scalar(x));
                        out.push('\n');
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for x in a {
                out.push_str(&pad);
                out.push_str("- ");
                match x {
                    Value::Object(n) if !n.is_empty() => {
                        // The map's first key goes on the dash's line.
                        let mut inner = String::new();
                        yaml_block(x, indent + 2, &mut inner);
                        out.push_str(&inner[indent + 2..]);
                    }
                    // A list in a list: flow style (JSON is YAML).
                    Value::Array(_) => {
                        out.push_str(&x.to_string());
                        out.push('\n');
                    }
                    _ => {
                        out.push_str(&yaml_scalar(x));
                        out.push('\n');
                    }
                }
            }
        }
        _ => {
            out.push_str(&pad);
            out.push_str(&yaml_scalar(v));
            out.push('\n');
        }
    }
}

/// A scalar (or an empty list or map) on one line.
fn yaml_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
                && !s.ends_with(' ')
                && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-' | ' '))
                && !matches!(s.to_ascii_lowercase().as_str(), "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n");
            if plain { s.clone() } else { v.to_string() }
        }
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_reads_back_as_the_value() {
        assert_eq!(yaml(&json!("atomic")), "atomic\n");
        assert_eq!(yaml(&json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])), "- group: apps\n  kind: Deployment\n  version: v1\n");
        assert_eq!(yaml(&json!({"a": {"b": [1, "true", "x: y"]}, "c": []})), "a:\n  b:\n    - 1\n    - \"true\"\n    - \"x: y\"\nc: []\n");
        assert_eq!(yaml(&json!([[1, 2], {}])), "- [1,2]\n- {}\n");
        assert_eq!(yaml(&json!("")), "\"\"\n");
    }

    #[test]
    fn schema_fields_have_gnostic_numbers() {
        let doc = json!({"swagger": "2.0", "definitions": {"A": {"type": "object", "additionalProperties": false, "x-k": "v"}}});
        let pb = encode_document(&doc);
        // swagger (1) "2.0", then definitions (9) → NamedSchema (1) {name (1) "A", value (2)
        // Schema {additional_properties (21) {boolean (2) false}, type (22) {value (1)
        // "object"}, vendor_extension (31) {name "x-k", value {yaml (2) "v\n"}}}}.
        let schema: Vec<u8> = [
            &[0xaa, 0x01, 0x02, 0x10, 0x00][..],
            &[0xb2, 0x01, 0x08, 0x0a, 0x06][..],
            b"object",
            &[0xfa, 0x01, 0x0b, 0x0a, 0x03][..],
            b"x-k",
            &[0x12, 0x04, 0x12, 0x02][..],
            b"v\n",
        ]
        .concat();
        let named: Vec<u8> = [&[0x0a, 0x01, b'A', 0x12, schema.len() as u8][..], &schema].concat();
        let defs: Vec<u8> = [&[0x0a, named.len() as u8][..], &named].concat();
        let want: Vec<u8> = [&[0x0a, 0x03][..], b"2.0", &[0x4a, defs.len() as u8], &defs].concat();
        assert_eq!(pb, want);
    }
}
