//! JSON bodies with a key given twice in one object, decoded as kube-apiserver's decoder does:
//! the duplicates are named (`metadata.labels`, for `fieldValidation` to refuse or warn about),
//! and the value is what Go's decoder makes of them — the later occurrence decoded over the
//! earlier, so into a typed object two objects merge (`"data":{"a":"1"},"data":{"b":"2"}`
//! keeps both keys) while anything else, and every value of a custom resource (decoded into
//! plain maps), is replaced.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parse `bytes`; the value and the paths of the keys given more than once, in order.
pub fn parse(bytes: &[u8], merge_objects: bool) -> serde_json::Result<(Value, Vec<String>)> {
    let mut duplicates = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Seed { path: String::new(), duplicates: &mut duplicates, merge_objects }.deserialize(&mut de)?;
    de.end()?;
    Ok((v, duplicates))
}

struct Seed<'a> {
    path: String,
    duplicates: &'a mut Vec<String>,
    merge_objects: bool,
}

impl Seed<'_> {
    fn child(&mut self, path: String) -> Seed<'_> {
        Seed { path, duplicates: self.duplicates, merge_objects: self.merge_objects }
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// `later` decoded over `earlier`, as Go does into a struct or a map it reuses.
fn merge(earlier: &mut Value, later: Value) {
    match (earlier, later) {
        (Value::Object(e), Value::Object(l)) => {
            for (k, v) in l {
                match e.get_mut(&k) {
                    Some(old) => merge(old, v),
                    None => {
                        e.insert(k, v);
                    }
                }
            }
        }
        (e, l) => *e = l,
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child(format!("{}[{}]", self.path, out.len())))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { k.clone() } else { format!("{}.{k}", self.path) };
            let v = map.next_value_seed(self.child(path.clone()))?;
            match out.get_mut(&k) {
                Some(earlier) => {
                    self.duplicates.push(path);
                    if self.merge_objects {
                        merge(earlier, v);
                    } else {
                        *earlier = v;
                    }
                }
                None => {
                    out.insert(k, v);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::parse;
    use serde_json::json;

    #[test]
    fn duplicates_are_named_and_decoded_over_the_earlier_value() {
        let body = br#"{"metadata":{"labels":{"a":"1"},"labels":{"b":"2"}},"data":{"a":"1"},"data":{"b":"2"},"items":[{"x":1,"x":2}],"n":1,"n":2}"#;
        let (typed, dups) = parse(body, true).unwrap();
        assert_eq!(dups, ["metadata.labels", "data", "items[0].x", "n"]);
        assert_eq!(typed, json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"a": "1", "b": "2"}, "items": [{"x": 2}], "n": 2}));
        let (plain, _) = parse(body, false).unwrap();
        assert_eq!(plain["data"], json!({"b": "2"}));
        let (v, dups) = parse(br#"{"a":1.5,"b":[null,true,"s"],"c":-3}"#, true).unwrap();
        assert!(dups.is_empty());
        assert_eq!(v, json!({"a": 1.5, "b": [null, true, "s"], "c": -3}));
        assert!(parse(b"{} x", true).is_err());
    }
}
