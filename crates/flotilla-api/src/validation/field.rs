//! One rejected field, worded as Kubernetes' `field.Error` words it: `Invalid value: 70000: must
//! be between 1 and 65535, inclusive`, `Required value`, `Unsupported value: "x": supported
//! values: "a", "b"`. The API server turns these into `Status` causes unchanged.

use serde_json::Value;

use crate::patch::go_format::quote;

/// The `StatusCause.reason` of a field error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Invalid,
    Required,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Duplicate,
    NotFound,
}

impl Reason {
    /// The cause's `reason` string (`FieldValueInvalid`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Invalid => "FieldValueInvalid",
            Reason::Required => "FieldValueRequired",
            Reason::NotSupported => "FieldValueNotSupported",
            Reason::Forbidden => "FieldValueForbidden",
            Reason::TooLong => "FieldValueTooLong",
            Reason::TooMany => "FieldValueTooMany",
            Reason::Duplicate => "FieldValueDuplicate",
            Reason::NotFound => "FieldValueNotFound",
        }
    }

    /// How the message starts (`field.ErrorType.String()`).
    fn label(self) -> &'static str {
        match self {
            Reason::Invalid => "Invalid value",
            Reason::Required => "Required value",
            Reason::NotSupported => "Unsupported value",
            Reason::Forbidden => "Forbidden",
            Reason::TooLong => "Too long",
            Reason::TooMany => "Too many",
            Reason::Duplicate => "Duplicate value",
            Reason::NotFound => "Not found",
        }
    }
}

/// One cause: `field` is the path (`spec.template.spec.containers[0].image`), `message` the
/// whole text after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub reason: Reason,
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() { head } else { format!("{head}: {detail}") }
}

impl FieldError {
    fn without_value(reason: Reason, field: impl Into<String>, detail: &str) -> Self {
        FieldError { reason, field: field.into(), message: with_detail(reason.label().to_string(), detail) }
    }

    fn with_value(reason: Reason, field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let head = format!("{}: {}", reason.label(), go_value(value));
        FieldError { reason, field: field.into(), message: with_detail(head, detail) }
    }

    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self::with_value(Reason::Invalid, field, value, detail)
    }

    /// `Invalid value: <printed>: <detail>` for a value the caller has printed already (a Go
    /// struct, whose JSON keeps the struct's field order).
    pub fn invalid_printed(field: impl Into<String>, printed: &str, detail: &str) -> Self {
        let head = format!("{}: {printed}", Reason::Invalid.label());
        FieldError { reason: Reason::Invalid, field: field.into(), message: with_detail(head, detail) }
    }

    /// `Required value[: <detail>]`.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        Self::without_value(Reason::Required, field, detail)
    }

    /// `Forbidden[: <detail>]`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self::without_value(Reason::Forbidden, field, detail)
    }

    /// `Too long: may not be more than <max> bytes`.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::without_value(Reason::TooLong, field, &format!("may not be more than {max} bytes"))
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self::with_value(Reason::Duplicate, field, value, "")
    }

    /// `Not found: <value>`.
    pub fn not_found(field: impl Into<String>, value: &Value) -> Self {
        Self::with_value(Reason::NotFound, field, value, "")
    }

    /// `Unsupported value: <value>: supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list = supported.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ");
        Self::with_value(Reason::NotSupported, field, value, &format!("supported values: {list}"))
    }
}

/// A value as `field.Error` prints it: numbers and booleans bare, strings quoted (`%q`),
/// `null` for nil, anything else as JSON (Go's `json.Marshal`: map keys sorted, `<`, `>`, `&`
/// escaped).
pub fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        other => go_json(other),
    }
}

/// Go's `json.Marshal` of a decoded value (map keys sorted).
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(x, out);
            }
            out.push(']');
        }
        Value::String(s) => write_go_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

/// A JSON string with Go's HTML-safe escaping (`encoding/json` since Go 1.22: `\b` and `\f`
/// by name, other control characters as `\u00XX`).
pub(crate) fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_read_as_kube_apiserver_writes_them() {
        let cases = [
            (FieldError::invalid("spec.replicas", &json!(-1), "must be greater than or equal to 0"), "Invalid value: -1: must be greater than or equal to 0"),
            (FieldError::invalid("t", &json!({"b": "2", "a": "<1>"}), "x"), "Invalid value: {\"a\":\"\\u003c1\\u003e\",\"b\":\"2\"}: x"),
            (FieldError::invalid("t", &Value::Null, "x"), "Invalid value: null: x"),
            (FieldError::invalid("t", &json!("a\"b"), ""), "Invalid value: \"a\\\"b\""),
            (FieldError::required("spec.containers", ""), "Required value"),
            (FieldError::required("m", "must not be empty"), "Required value: must not be empty"),
            (FieldError::forbidden("data", "field is immutable when `immutable` is set"), "Forbidden: field is immutable when `immutable` is set"),
            (
                FieldError::not_supported("p", &json!("UDPX"), &["SCTP", "TCP", "UDP"]),
                "Unsupported value: \"UDPX\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ),
            (FieldError::duplicate("n", &json!("a")), "Duplicate value: \"a\""),
            (FieldError::too_long("", 1048576), "Too long: may not be more than 1048576 bytes"),
        ];
        for (err, want) in cases {
            assert_eq!(err.message, want);
        }
    }
}
