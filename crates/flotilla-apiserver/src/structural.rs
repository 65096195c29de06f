//! Structural schemas of custom resources: checking a CRD's schema is structural, and pruning,
//! defaulting and validating objects with it, as kube-apiserver does for custom resources.
//!
//! Pruning drops fields the schema does not describe (except under
//! `x-kubernetes-preserve-unknown-fields`; embedded resources keep apiVersion/kind/metadata);
//! defaulting fills `default`s of missing properties; validation reports every violation as a
//! cause with its field path (`spec.replicas`), which the server answers with 422 Invalid.

mod cel_cost;
pub(crate) mod cel_rules;

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use crate::error::Cause;

/// A parsed schema node.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    pub type_: Option<String>,
    pub format: Option<String>,
    pub properties: BTreeMap<String, Schema>,
    pub additional_properties: Option<Box<Schema>>,
    /// `additionalProperties: false` (only allowed together with no properties).
    pub additional_false: bool,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enum_: Vec<Value>,
    pub pattern: Option<regex::Regex>,
    pub pattern_src: Option<String>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub nullable: bool,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub int_or_string: bool,
    pub embedded_resource: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    /// Value validations under allOf/anyOf/oneOf/not.
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-validations`, compiled.
    pub rules: Vec<cel_rules::Rule>,
}

/// Why a schema is not structural or is invalid: a field path and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    pub path: String,
    pub reason: &'static str,
    pub message: String,
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

const ALLOWED_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "properties",
    "additionalProperties",
    "items",
    "required",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "nullable",
    "default",
    "example",
    "externalDocs",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

impl Schema {
    /// Whether this node or any below it has validation rules.
    pub fn has_rules(&self) -> bool {
        !self.rules.is_empty()
            || self.properties.values().any(Schema::has_rules)
            || self.items.as_deref().is_some_and(Schema::has_rules)
            || self.additional_properties.as_deref().is_some_and(Schema::has_rules)
    }

    /// Parse a JSONSchemaProps object and check the structural rules; every problem is
    /// reported with the path under `base` (e.g. `spec.versions[0].schema.openAPIV3Schema`).
    pub fn parse(v: &Value, base: &str, errors: &mut Vec<SchemaError>) -> Schema {
        let mut s = Self::parse_node(v, base, true, false, errors);
        cel_rules::check_costs(&mut s, base, errors);
        s
    }

    /// Parse a node below the root (its structural errors are reported by [`Schema::parse`]).
    pub fn parse_node_at(v: &Value, path: &str) -> Schema {
        Self::parse_node(v, path, false, false, &mut Vec::new())
    }

    fn parse_node(v: &Value, path: &str, root: bool, in_logic: bool, errors: &mut Vec<SchemaError>) -> Schema {
        let node_errors = errors.len();
        let mut s = Schema::default();
        let Some(o) = v.as_object() else {
            errors.push(SchemaError { path: path.into(), reason: "FieldValueInvalid", message: "must be an object".into() });
            return s;
        };
        for k in o.keys() {
            if !ALLOWED_KEYS.contains(&k.as_str()) {
                errors.push(SchemaError {
                    path: format!("{path}.{k}"),
                    reason: "FieldValueForbidden",
                    message: "Forbidden: unknown or unsupported schema keyword".into(),
                });
            }
        }
        let get_str = |k: &str| o.get(k).and_then(Value::as_str).map(String::from);
        s.type_ = get_str("type");
        s.format = get_str("format");
        s.nullable = o.get("nullable").and_then(Value::as_bool).unwrap_or(false);
        s.preserve_unknown = o.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool).unwrap_or(false);
        s.int_or_string = o.get("x-kubernetes-int-or-string").and_then(Value::as_bool).unwrap_or(false);
        s.embedded_resource = o.get("x-kubernetes-embedded-resource").and_then(Value::as_bool).unwrap_or(false);
        s.list_type = get_str("x-kubernetes-list-type");
        s.list_map_keys = o
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect())
            .unwrap_or_default();
        s.required = o.get("required").and_then(Value::as_array).map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect()).unwrap_or_default();
        s.enum_ = o.get("enum").and_then(Value::as_array).cloned().unwrap_or_default();
        s.default = o.get("default").cloned();
        s.minimum = o.get("minimum").and_then(num);
        s.maximum = o.get("maximum").and_then(num);
        s.exclusive_minimum = o.get("exclusiveMinimum").and_then(Value::as_bool).unwrap_or(false);
        s.exclusive_maximum = o.get("exclusiveMaximum").and_then(Value::as_bool).unwrap_or(false);
        s.multiple_of = o.get("multipleOf").and_then(num);
        let u = |k: &str| o.get(k).and_then(Value::as_u64);
        s.min_length = u("minLength");
        s.max_length = u("maxLength");
        s.min_items = u("minItems");
        s.max_items = u("maxItems");
        s.min_properties = u("minProperties");
        s.max_properties = u("maxProperties");
        if let Some(p) = get_str("pattern") {
            match regex::Regex::new(&p) {
                Ok(r) => {
                    s.pattern = Some(r);
                    s.pattern_src = Some(p);
                }
                Err(e) => {
                    errors.push(SchemaError { path: format!("{path}.pattern"), reason: "FieldValueInvalid", message: format!("Invalid value: {p:?}: {e}") })
                }
            }
        }
        if o.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
            errors.push(SchemaError {
                path: format!("{path}.uniqueItems"),
                reason: "FieldValueForbidden",
                message: "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic".into(),
            });
        }
        if let Some(props) = o.get("properties").and_then(Value::as_object) {
            for (k, pv) in props {
                s.properties.insert(k.clone(), Self::parse_node(pv, &format!("{path}.properties[{k}]"), false, in_logic, errors));
            }
        }
        match o.get("additionalProperties") {
            Some(Value::Bool(false)) => s.additional_false = true,
            Some(Value::Bool(true)) | None => {}
            Some(ap) => s.additional_properties = Some(Box::new(Self::parse_node(ap, &format!("{path}.additionalProperties"), false, in_logic, errors))),
        }
        if s.additional_properties.is_some() && !s.properties.is_empty() {
            errors.push(SchemaError {
                path: format!("{path}.additionalProperties"),
                reason: "FieldValueForbidden",
                message: "Forbidden: additionalProperties and properties are mutual exclusive".into(),
            });
        }
        if let Some(items) = o.get("items") {
            if items.is_array() {
                errors.push(SchemaError {
                    path: format!("{path}.items"),
                    reason: "FieldValueForbidden",
                    message: "Forbidden: items must be a schema object and not an array".into(),
                });
            } else {
                s.items = Some(Box::new(Self::parse_node(items, &format!("{path}.items"), false, in_logic, errors)));
            }
        }
        // An int-or-string node may spell out its two types in `anyOf` (or in the first
        // `allOf`'s `anyOf`), types being otherwise forbidden there, as apiextensions allows.
        let int_or_string = serde_json::json!([{"type": "integer"}, {"type": "string"}]);
        let exempt = match (s.int_or_string, o.get("anyOf"), o.get("allOf").and_then(|a| a.get(0))) {
            (true, Some(any), _) if *any == int_or_string => Some(format!("{path}.anyOf[")),
            (true, _, Some(first)) if first.as_object().is_some_and(|f| f.len() == 1 && f.get("anyOf") == Some(&int_or_string)) => {
                Some(format!("{path}.allOf[0].anyOf["))
            }
            _ => None,
        };
        for (key, dst) in [("allOf", 0), ("anyOf", 1), ("oneOf", 2)] {
            if let Some(arr) = o.get(key).and_then(Value::as_array) {
                let before = errors.len();
                let parsed: Vec<Schema> =
                    arr.iter().enumerate().map(|(i, x)| Self::parse_node(x, &format!("{path}.{key}[{i}]"), false, true, errors)).collect();
                if let Some(prefix) = &exempt {
                    let found = errors.split_off(before);
                    errors.extend(found.into_iter().filter(|e| !e.path.starts_with(prefix.as_str())));
                }
                match dst {
                    0 => s.all_of = parsed,
                    1 => s.any_of = parsed,
                    _ => s.one_of = parsed,
                }
            }
        }
        if let Some(n) = o.get("not") {
            s.not = Some(Box::new(Self::parse_node(n, &format!("{path}.not"), false, true, errors)));
        }
        // Structural rules: every node outside value validations names its type.
        if !in_logic && s.type_.is_none() && !s.int_or_string && !s.preserve_unknown {
            errors.push(SchemaError {
                path: format!("{path}.type"),
                reason: "FieldValueRequired",
                message: "Required value: must not be empty for specified object fields".into(),
            });
        }
        if in_logic && (s.type_.is_some() || s.default.is_some() || s.nullable) {
            errors.push(SchemaError {
                path: path.into(),
                reason: "FieldValueForbidden",
                message: "Forbidden: must not set type, default or nullable under allOf, anyOf, oneOf or not".into(),
            });
        }
        if root {
            if s.type_.as_deref() != Some("object") {
                let t = s.type_.as_deref().unwrap_or("");
                errors.push(SchemaError {
                    path: format!("{path}.type"),
                    reason: "FieldValueInvalid",
                    message: format!("Invalid value: {t:?}: must be object at the root"),
                });
            }
            if s.nullable {
                errors.push(SchemaError {
                    path: format!("{path}.nullable"),
                    reason: "FieldValueForbidden",
                    message: "Forbidden: must be false at the root".into(),
                });
            }
        }
        if let Some(t) = &s.type_ {
            if !matches!(t.as_str(), "object" | "array" | "string" | "integer" | "number" | "boolean") {
                errors.push(SchemaError {
                    path: format!("{path}.type"),
                    reason: "FieldValueNotSupported",
                    message: format!("Unsupported value: {t:?}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""),
                });
            }
            if t == "array" && s.items.is_none() && !in_logic {
                errors.push(SchemaError { path: format!("{path}.items"), reason: "FieldValueRequired", message: "Required value: must be specified".into() });
            }
        }
        // Rules last: their fieldPaths name fields of this node, and they are compiled only
        // over a schema without problems here or below.
        if let Some(rules) = o.get("x-kubernetes-validations") {
            s.rules = cel_rules::compile(rules, &s, path, errors, node_errors);
        }
        s
    }

    fn type_matches(&self, v: &Value) -> bool {
        if self.int_or_string {
            return v.is_string() || v.is_i64() || v.is_u64();
        }
        match self.type_.as_deref() {
            None => true,
            Some("object") => v.is_object(),
            Some("array") => v.is_array(),
            Some("string") => v.is_string(),
            Some("integer") => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
            Some("number") => v.is_number(),
            Some("boolean") => v.is_boolean(),
            Some(_) => true,
        }
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

/// Drop fields the schema does not describe; returns the paths dropped. `metadata` at the root
/// and of embedded resources is kept whole (the server validates it separately).
pub fn prune(v: &mut Value, s: &Schema, path: &str, root: bool, dropped: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if s.preserve_unknown && s.properties.is_empty() && s.additional_properties.is_none() {
                return;
            }
            let keep_meta = root || s.embedded_resource;
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(ps) = s.properties.get(&k) {
                    if let Some(x) = m.get_mut(&k) {
                        prune(x, ps, &child(path, &k), false, dropped);
                    }
                } else if let Some(ap) = &s.additional_properties {
                    if let Some(x) = m.get_mut(&k) {
                        prune(x, ap, &child(path, &k), false, dropped);
                    }
                } else if !s.preserve_unknown {
                    m.remove(&k);
                    dropped.push(child(path, &k));
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &s.items {
                for (i, x) in a.iter_mut().enumerate() {
                    prune(x, items, &format!("{path}[{i}]"), false, dropped);
                }
            }
        }
        _ => {}
    }
}

/// Fill `default`s of missing properties (and replace nulls where the schema is not nullable).
pub fn apply_defaults(v: &mut Value, s: &Schema) {
    match v {
        Value::Object(m) => {
            for (k, ps) in &s.properties {
                match m.get(k) {
                    None => {
                        if let Some(d) = &ps.default {
                            m.insert(k.clone(), d.clone());
                        }
                    }
                    Some(Value::Null) if !ps.nullable => match &ps.default {
                        Some(d) => {
                            m.insert(k.clone(), d.clone());
                        }
                        None => {
                            m.remove(k);
                        }
                    },
                    _ => {}
                }
                if let Some(x) = m.get_mut(k) {
                    apply_defaults(x, ps);
                }
            }
            if let Some(ap) = &s.additional_properties {
                for x in m.values_mut() {
                    apply_defaults(x, ap);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &s.items {
                for x in a.iter_mut() {
                    apply_defaults(x, items);
                }
            }
        }
        _ => {}
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Validate `v` against `s`; every violation becomes a cause naming its field.
pub fn validate(v: &Value, s: &Schema, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() {
        if !s.nullable && !path.is_empty() {
            causes.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!("Invalid value: \"null\": {path} in body must be of type {}: \"null\"", s.type_.as_deref().unwrap_or("object")),
            ));
        }
        return;
    }
    if !s.type_matches(v) {
        let want = if s.int_or_string { "integer,string" } else { s.type_.as_deref().unwrap_or("") };
        causes.push(Cause::new(
            "FieldValueTypeInvalid",
            path,
            format!("Invalid value: \"{}\": {path} in body must be of type {want}: \"{}\"", type_name(v), type_name(v)),
        ));
        return;
    }
    if !s.enum_.is_empty() && !s.enum_.contains(v) {
        let supported = s.enum_.iter().map(short).collect::<Vec<_>>().join(", ");
        causes.push(Cause::new("FieldValueNotSupported", path, format!("Unsupported value: {}: supported values: {supported}", short(v))));
    }
    match v {
        Value::String(st) => {
            let n = st.chars().count() as u64;
            if let Some(min) = s.min_length.filter(|m| n < *m) {
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {}: {path} in body should be at least {min} chars long", short(v))));
            }
            if let Some(max) = s.max_length.filter(|m| n > *m) {
                causes.push(Cause::new("FieldValueTooLong", path, format!("Too long: may not be more than {max} bytes")));
            }
            if let (Some(re), Some(src)) = (&s.pattern, &s.pattern_src)
                && !re.is_match(st)
            {
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {}: {path} in body should match '{src}'", short(v))));
            }
            if let Some(f) = &s.format
                && !format_ok(f, st)
            {
                causes.push(Cause::new(
                    "FieldValueTypeInvalid",
                    path,
                    format!("Invalid value: {}: {path} in body must be of type {f}: {}", short(v), short(v)),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s.minimum
                && (x < min || (s.exclusive_minimum && x == min))
            {
                let rel = if s.exclusive_minimum { "greater than" } else { "greater than or equal to" };
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {x}: {path} in body should be {rel} {min}")));
            }
            if let Some(max) = s.maximum
                && (x > max || (s.exclusive_maximum && x == max))
            {
                let rel = if s.exclusive_maximum { "less than" } else { "less than or equal to" };
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {x}: {path} in body should be {rel} {max}")));
            }
            if let Some(m) = s.multiple_of.filter(|m| *m != 0.0)
                && (x / m).fract() != 0.0
            {
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {x}: {path} in body should be a multiple of {m}")));
            }
        }
        Value::Array(a) => {
            let n = a.len() as u64;
            if let Some(min) = s.min_items.filter(|m| n < *m) {
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {n}: {path} in body should have at least {min} items")));
            }
            if let Some(max) = s.max_items.filter(|m| n > *m) {
                causes.push(Cause::new("FieldValueTooMany", path, format!("Too many: {n}: must have at most {max} items")));
            }
            if let Some(items) = &s.items {
                for (i, x) in a.iter().enumerate() {
                    validate(x, items, &format!("{path}[{i}]"), causes);
                }
            }
            match s.list_type.as_deref() {
                Some("set") => {
                    let mut seen = HashSet::new();
                    for (i, x) in a.iter().enumerate() {
                        if !seen.insert(x.to_string()) {
                            causes.push(Cause::new("FieldValueDuplicate", format!("{path}[{i}]"), format!("Duplicate value: {x}")));
                        }
                    }
                }
                Some("map") => {
                    let mut seen = HashSet::new();
                    for (i, x) in a.iter().enumerate() {
                        let key: Vec<String> = s.list_map_keys.iter().map(|k| x.get(k).map(|v| v.to_string()).unwrap_or_default()).collect();
                        if !seen.insert(key.clone()) {
                            let shown = s.list_map_keys.iter().zip(&key).map(|(k, v)| format!("\"{k}\":{v}")).collect::<Vec<_>>().join(",");
                            causes.push(Cause::new("FieldValueDuplicate", format!("{path}[{i}]"), format!("Duplicate value: {{{shown}}}")));
                        }
                    }
                }
                _ => {}
            }
        }
        Value::Object(m) => {
            if s.embedded_resource {
                // An embedded resource names its type.
                for k in ["apiVersion", "kind"] {
                    if m.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
                        causes.push(Cause::new("FieldValueRequired", child(path, k), "Required value"));
                    }
                }
            }
            for r in &s.required {
                if !m.contains_key(r) {
                    causes.push(Cause::new("FieldValueRequired", child(path, r), "Required value"));
                }
            }
            let n = m.len() as u64;
            if let Some(min) = s.min_properties.filter(|x| n < *x) {
                causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {n}: {path} in body should have at least {min} properties")));
            }
            if let Some(max) = s.max_properties.filter(|x| n > *x) {
                causes.push(Cause::new("FieldValueTooMany", path, format!("Too many: {n}: must have at most {max} items")));
            }
            for (k, x) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(ps) = s.properties.get(k) {
                    validate(x, ps, &child(path, k), causes);
                } else if let Some(ap) = &s.additional_properties {
                    validate(x, ap, &child(path, k), causes);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
    for sub in &s.all_of {
        validate(v, sub, path, causes);
    }
    if !s.any_of.is_empty() {
        let ok = s.any_of.iter().any(|sub| {
            let mut c = Vec::new();
            validate(v, sub, path, &mut c);
            c.is_empty()
        });
        if !ok {
            causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {}: {path} in body must match at least one schema (anyOf)", short(v))));
        }
    }
    if !s.one_of.is_empty() {
        let matched = s
            .one_of
            .iter()
            .filter(|sub| {
                let mut c = Vec::new();
                validate(v, sub, path, &mut c);
                c.is_empty()
            })
            .count();
        if matched != 1 {
            causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {}: {path} in body must match exactly one schema (oneOf)", short(v))));
        }
    }
    if let Some(not) = &s.not {
        let mut c = Vec::new();
        validate(v, not, path, &mut c);
        if c.is_empty() {
            causes.push(Cause::new("FieldValueInvalid", path, format!("Invalid value: {}: {path} in body must not match the schema (not)", short(v))));
        }
    }
}

/// The string formats kube-apiserver checks.
fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "int32" | "int64" | "float" | "double" | "password" | "byte" if format != "byte" => true,
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "date" => jiff::civil::Date::strptime("%Y-%m-%d", s).is_ok(),
        "date-time" => s.parse::<jiff::Timestamp>().is_ok(),
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()),
        "hostname" => crate::meta::is_dns1123_subdomain(s),
        "uri" => crate::url_syntax::is_request_uri(s),
        "mac" => is_mac(s),
        _ => true,
    }
}

/// Go's `net.ParseMAC`: 6, 8 or 20 bytes as hex pairs separated by `:` or `-`, or as groups
/// of four hex digits separated by `.`.
fn is_mac(s: &str) -> bool {
    let hex = |g: &str, n: usize| g.len() == n && g.bytes().all(|c| c.is_ascii_hexdigit());
    let groups = |sep: char, n: usize| {
        let parts: Vec<&str> = s.split(sep).collect();
        parts.iter().all(|g| hex(g, n)) && [6, 8, 20].contains(&(parts.len() * n / 2))
    };
    s.len() >= 14 && (groups(':', 2) || groups('-', 2) || groups('.', 4))
}

/// Everything a custom resource's version needs to decode objects.
#[derive(Clone, Debug, Default)]
pub struct Structural {
    pub schema: Schema,
    /// The version objects are stored in (None conversion: only `apiVersion` changes).
    pub storage_version: String,
    /// The CRD is being deleted: no new objects.
    pub terminating: bool,
}

impl Structural {
    /// Whether any node has validation rules (whose evaluation may be costly).
    pub fn has_rules(&self) -> bool {
        self.schema.has_rules()
    }

    /// Prune and default `obj` (a whole custom resource). Returns the dropped paths.
    pub fn decode(&self, obj: &mut Value) -> Vec<String> {
        let mut dropped = Vec::new();
        prune(obj, &self.schema, "", true, &mut dropped);
        apply_defaults(obj, &self.schema);
        // Defaults may add fields the schema prunes (as upstream, defaults are pruned too).
        let mut again = Vec::new();
        prune(obj, &self.schema, "", true, &mut again);
        dropped
    }

    /// Every schema violation of `obj`.
    pub fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        validate(obj, &self.schema, "", &mut causes);
        causes
    }

    /// Every violation of `obj`'s status against the status schema: fields are named from the
    /// object (`status.replicas`), messages from the status (`replicas in body ...`), as
    /// kube-apiserver validates a /status write.
    pub fn validate_status(&self, obj: &Value) -> Vec<Cause> {
        let (Some(status), Some(schema)) = (obj.get("status"), self.schema.properties.get("status")) else { return Vec::new() };
        let mut causes = Vec::new();
        validate(status, schema, "", &mut causes);
        for c in &mut causes {
            c.field = if c.field.is_empty() { "status".into() } else { format!("status.{}", c.field) };
        }
        causes
    }

    /// Every failed validation rule of `obj` (`old`: the object before an update); a /status
    /// write is judged on its status alone.
    pub fn validate_rules(&self, obj: &Value, old: Option<&Value>, status_write: bool) -> Vec<Cause> {
        let mut causes = Vec::new();
        let mut budget = cel_rules::Budget::default();
        if status_write {
            if let (Some(status), Some(schema)) = (obj.get("status"), self.schema.properties.get("status")) {
                cel_rules::check(status, old.and_then(|o| o.get("status")), schema, "status", &mut causes, &mut budget);
            }
        } else {
            cel_rules::check(obj, old, &self.schema, "", &mut causes, &mut budget);
        }
        causes
    }

    /// Prune, default and validate (tests).
    pub fn admit(&self, obj: &mut Value) -> (Vec<String>, Vec<Cause>) {
        let dropped = self.decode(obj);
        (dropped, self.validate(obj))
    }
}

/// An object with no schema-described fields: `{}` (for building test schemas).
#[allow(dead_code)]
pub fn empty_object() -> Map<String, Value> {
    Map::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        let mut errs = Vec::new();
        let s = Schema::parse(&v, "schema", &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        s
    }

    #[test]
    fn non_structural_schemas_are_reported() {
        let mut errs = Vec::new();
        Schema::parse(&json!({"type": "object", "properties": {"a": {"description": "no type"}, "b": {"type": "array"}}}), "s", &mut errs);
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"s.properties[a].type"), "{errs:?}");
        assert!(paths.contains(&"s.properties[b].items"), "{errs:?}");
        let mut errs = Vec::new();
        Schema::parse(&json!({"type": "string"}), "s", &mut errs);
        assert!(!errs.is_empty(), "the root must be an object");
    }

    #[test]
    fn int_or_string_may_spell_out_its_types() {
        for node in [
            json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
            json!({"x-kubernetes-int-or-string": true, "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"maxLength": 3}]}),
        ] {
            schema(json!({"type": "object", "properties": {"port": node}}));
        }
        // Anywhere else, a type under anyOf is still forbidden.
        for node in [
            json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "string"}, {"type": "integer"}]}),
            json!({"type": "string", "anyOf": [{"type": "integer"}, {"type": "string"}]}),
        ] {
            let mut errs = Vec::new();
            Schema::parse(&json!({"type": "object", "properties": {"port": node}}), "s", &mut errs);
            assert!(errs.iter().any(|e| e.message.contains("must not set type")), "{node}: {errs:?}");
        }
    }

    #[test]
    fn prune_default_validate() {
        let s = Structural {
            storage_version: "v1".into(),
            terminating: false,
            schema: schema(json!({
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "name": {"type": "string", "pattern": "^[a-z]+$"},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"x-kubernetes-int-or-string": true}
                    }}
                }
            })),
        };
        let mut obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
            "spec": {"size": 3, "extra": 1, "free": {"anything": {"goes": true}}, "port": "http", "tags": ["x", "y"]}, "junk": 1});
        let (dropped, causes) = s.admit(&mut obj);
        assert_eq!(dropped, vec!["junk".to_string(), "spec.extra".to_string()]);
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(obj["spec"]["mode"], "a");
        assert_eq!(obj["spec"]["free"]["anything"]["goes"], true);
        let mut bad = json!({"spec": {"size": "three", "mode": "c", "name": "A1", "tags": ["x", "x"], "port": 1.5}});
        let (_, causes) = s.admit(&mut bad);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        for f in ["spec.size", "spec.mode", "spec.name", "spec.tags[1]", "spec.port"] {
            assert!(fields.contains(&f), "missing {f} in {causes:?}");
        }
        let mut missing = json!({"spec": {}});
        let (_, causes) = s.admit(&mut missing);
        assert_eq!(causes[0].field, "spec.size");
        assert_eq!(causes[0].reason, "FieldValueRequired");
    }

    #[test]
    fn uri_and_mac_formats_are_checked_as_kube_apiserver_checks_them() {
        for (format, ok, bad) in [
            ("uri", &["https://example.com/a", "/p", "mailto:a"][..], &["not a uri", "example.com", "http://x y", "http://[::1"][..]),
            (
                "mac",
                &["01:23:45:67:89:ab", "01-23-45-67-89-AB", "0123.4567.89ab", "01:23:45:67:89:ab:cd:ef"][..],
                &["nope", "01:23:45:67:89", "01:23-45:67:89:ab", "0123.4567.89a"][..],
            ),
        ] {
            for v in ok {
                assert!(format_ok(format, v), "{format} {v}");
            }
            for v in bad {
                assert!(!format_ok(format, v), "{format} {v}");
            }
        }
    }
}
