//! Protobuf request bodies, decoded to JSON: kubectl ≥ 1.32 sends them for typed requests
//! (`auth can-i`, `auth whoami`, `create namespace|configmap|secret`). Responses stay JSON (the
//! clients accept it). Only the messages those commands send are decoded; anything else is a
//! 415 naming the kind.
//!
//! Wire format: the magic `k8s\0`, then a `runtime.Unknown` {1: typeMeta {1: apiVersion,
//! 2: kind}, 2: raw (the object's message), 3: contentEncoding, 4: contentType}. Field numbers
//! below are those of the Kubernetes `generated.proto` files.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};

const MAGIC: &[u8] = b"k8s\0";

/// One decoded field: its number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

fn bad(what: &str) -> ApiError {
    ApiError::bad_request(format!("the protobuf request body could not be decoded: {what}"))
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> ApiResult<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or_else(|| bad("truncated varint"))?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(bad("varint too long"))
    }

    fn next(&mut self) -> ApiResult<Option<(u32, Field<'a>)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| bad("field number out of range"))?;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| bad("length out of range"))?;
                if len > self.buf.len() {
                    return Err(bad("length past the end of the body"));
                }
                let (head, rest) = self.buf.split_at(len);
                self.buf = rest;
                Field::Bytes(head)
            }
            5 => {
                self.skip(4)?;
                Field::Fixed
            }
            w => return Err(bad(&format!("unsupported wire type {w}"))),
        };
        Ok(Some((number, field)))
    }

    fn skip(&mut self, n: usize) -> ApiResult<()> {
        if n > self.buf.len() {
            return Err(bad("truncated fixed-width field"));
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

fn fields(buf: &[u8]) -> ApiResult<Vec<(u32, Field<'_>)>> {
    let mut r = Reader { buf };
    let mut out = Vec::new();
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Ok(out)
}

fn text(b: &[u8]) -> ApiResult<String> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("a string field is not UTF-8"))
}

/// `map<string, string>` entry (1: key, 2: value) → (key, value bytes).
fn map_entry(b: &[u8]) -> ApiResult<(String, Vec<u8>)> {
    let mut k = String::new();
    let mut v = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => k = text(x)?,
            (2, Field::Bytes(x)) => v = x.to_vec(),
            _ => {}
        }
    }
    Ok((k, v))
}

fn object_meta(b: &[u8]) -> ApiResult<Value> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => {
                m.insert("name".into(), json!(text(x)?));
            }
            (2, Field::Bytes(x)) => {
                m.insert("generateName".into(), json!(text(x)?));
            }
            (3, Field::Bytes(x)) => {
                m.insert("namespace".into(), json!(text(x)?));
            }
            (6, Field::Bytes(x)) => {
                m.insert("resourceVersion".into(), json!(text(x)?));
            }
            (11, Field::Bytes(x)) => {
                let (k, v) = map_entry(x)?;
                labels.insert(k, json!(text(&v)?));
            }
            (12, Field::Bytes(x)) => {
                let (k, v) = map_entry(x)?;
                annotations.insert(k, json!(text(&v)?));
            }
            (14, Field::Bytes(x)) => finalizers.push(json!(text(x)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(m))
}

fn strings(b: &[u8], names: &[(u32, &str)]) -> ApiResult<Value> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        if let (Some((_, name)), Field::Bytes(x)) = (names.iter().find(|(k, _)| *k == n), f) {
            m.insert((*name).into(), json!(text(x)?));
        }
    }
    Ok(Value::Object(m))
}

fn access_review(raw: &[u8]) -> ApiResult<Value> {
    let mut spec = Map::new();
    for (n, f) in fields(raw)? {
        if let (2, Field::Bytes(s)) = (n, f) {
            for (sn, sf) in fields(s)? {
                match (sn, sf) {
                    (1, Field::Bytes(x)) => {
                        let attrs = strings(x, &[(1, "namespace"), (2, "verb"), (3, "group"), (4, "version"), (5, "resource"), (6, "subresource"), (7, "name")])?;
                        spec.insert("resourceAttributes".into(), attrs);
                    }
                    (2, Field::Bytes(x)) => {
                        spec.insert("nonResourceAttributes".into(), strings(x, &[(1, "path"), (2, "verb")])?);
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(json!({"spec": spec}))
}

fn config_map(raw: &[u8], secret: bool) -> ApiResult<Value> {
    use base64::Engine;
    let mut obj = Map::new();
    let mut data = Map::new();
    let mut binary = Map::new();
    let mut string_data = Map::new();
    for (n, f) in fields(raw)? {
        match (secret, n, f) {
            (_, 1, Field::Bytes(x)) => {
                obj.insert("metadata".into(), object_meta(x)?);
            }
            (false, 2, Field::Bytes(x)) => {
                let (k, v) = map_entry(x)?;
                data.insert(k, json!(text(&v)?));
            }
            (false, 3, Field::Bytes(x)) | (true, 2, Field::Bytes(x)) => {
                let (k, v) = map_entry(x)?;
                let enc = json!(base64::engine::general_purpose::STANDARD.encode(v));
                if secret { data.insert(k, enc) } else { binary.insert(k, enc) };
            }
            (true, 3, Field::Bytes(x)) => {
                obj.insert("type".into(), json!(text(x)?));
            }
            (true, 4, Field::Bytes(x)) => {
                let (k, v) = map_entry(x)?;
                string_data.insert(k, json!(text(&v)?));
            }
            (false, 4, Field::Varint(v)) | (true, 5, Field::Varint(v)) => {
                obj.insert("immutable".into(), json!(v != 0));
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        obj.insert("data".into(), Value::Object(data));
    }
    if !binary.is_empty() {
        obj.insert("binaryData".into(), Value::Object(binary));
    }
    if !string_data.is_empty() {
        obj.insert("stringData".into(), Value::Object(string_data));
    }
    Ok(Value::Object(obj))
}

fn namespace(raw: &[u8]) -> ApiResult<Value> {
    let mut obj = Map::new();
    for (n, f) in fields(raw)? {
        match (n, f) {
            (1, Field::Bytes(x)) => {
                obj.insert("metadata".into(), object_meta(x)?);
            }
            (2, Field::Bytes(x)) => {
                let fins: Vec<Value> = fields(x)?
                    .into_iter()
                    .filter_map(|(n, f)| match (n, f) {
                        (1, Field::Bytes(s)) => text(s).ok().map(Value::String),
                        _ => None,
                    })
                    .collect();
                obj.insert("spec".into(), json!({"finalizers": fins}));
            }
            _ => {}
        }
    }
    Ok(Value::Object(obj))
}

/// Decode a protobuf body to a JSON object with apiVersion and kind.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| bad("missing the k8s protobuf envelope"))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, f) in fields(rest)? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm)? {
                    match (tn, tf) {
                        (1, Field::Bytes(x)) => api_version = text(x)?,
                        (2, Field::Bytes(x)) => kind = text(x)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    let mut obj = match kind.as_str() {
        "SelfSubjectAccessReview" | "SelfSubjectRulesReview" | "SelfSubjectReview" => access_review(raw)?,
        "ConfigMap" => config_map(raw, false)?,
        "Secret" => config_map(raw, true)?,
        "Namespace" => namespace(raw)?,
        other => {
            return Err(ApiError::unsupported_media_type(&["application/json", "application/yaml"])
                .with_message(format!("protobuf request bodies of kind {other:?} are not supported yet; send JSON")));
        }
    };
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ld(field: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(field << 3 | 2) as u8];
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn decodes_a_self_subject_access_review() {
        let attrs = [ld(1, b"default"), ld(2, b"list"), ld(5, b"pods")].concat();
        let spec = ld(1, &attrs);
        let raw = ld(2, &spec);
        let tm = [ld(1, b"authorization.k8s.io/v1"), ld(2, b"SelfSubjectAccessReview")].concat();
        let body = [MAGIC.to_vec(), ld(1, &tm), ld(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["kind"], "SelfSubjectAccessReview");
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list");
        assert_eq!(v["spec"]["resourceAttributes"]["resource"], "pods");
        assert_eq!(v["spec"]["resourceAttributes"]["namespace"], "default");
    }

    #[test]
    fn decodes_a_config_map_and_refuses_garbage() {
        let meta = [ld(1, b"cm1"), ld(11, &[ld(1, b"app"), ld(2, b"x")].concat())].concat();
        let raw = [ld(1, &meta), ld(2, &[ld(1, b"k"), ld(2, b"v")].concat())].concat();
        let tm = [ld(1, b"v1"), ld(2, b"ConfigMap")].concat();
        let v = decode(&[MAGIC.to_vec(), ld(1, &tm), ld(2, &raw)].concat()).unwrap();
        assert_eq!(v["metadata"]["name"], "cm1");
        assert_eq!(v["metadata"]["labels"]["app"], "x");
        assert_eq!(v["data"]["k"], "v");
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
        assert_eq!(decode(&[MAGIC, &[0x0a, 0xff]].concat()).unwrap_err().code, 400);
    }
}
