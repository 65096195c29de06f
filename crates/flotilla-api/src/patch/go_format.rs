//! Values printed as Go's `fmt` prints them (`%v` of decoded JSON, `%q` of strings), so error
//! messages read exactly as kube-apiserver's (`map[$patch:frobnicate name:web]`). Used by the
//! patch engines and the selector parser.

use serde_json::Value;

/// The Go type a decoded JSON value has in kube-apiserver (`UnmarshalCaseSensitivePreserveInts`:
/// integers that fit `int64` are `int64`, other numbers `float64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GoType {
    Nil,
    Bool,
    Int,
    Float,
    String,
    List,
    Map,
}

pub(crate) fn go_type(v: &Value) -> GoType {
    match v {
        Value::Null => GoType::Nil,
        Value::Bool(_) => GoType::Bool,
        Value::Number(n) if n.is_i64() => GoType::Int,
        Value::Number(_) => GoType::Float,
        Value::String(_) => GoType::String,
        Value::Array(_) => GoType::List,
        Value::Object(_) => GoType::Map,
    }
}

/// `reflect.TypeOf(v).String()`.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match go_type(v) {
        GoType::Nil => "<nil>",
        GoType::Bool => "bool",
        GoType::Int => "int64",
        GoType::Float => "float64",
        GoType::String => "string",
        GoType::List => "[]interface {}",
        GoType::Map => "map[string]interface {}",
    }
}

/// Go's `==` on two decoded values: same dynamic type and equal. (Go panics comparing maps or
/// slices; here they compare structurally.)
pub(crate) fn go_eq(a: &Value, b: &Value) -> bool {
    if go_type(a) != go_type(b) {
        return false;
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// `%v`.
pub(crate) fn v(value: &Value) -> String {
    let mut out = String::new();
    write_v(&mut out, value);
    out
}

/// `%v` of a list of lists (`fmt.Sprint` of `[][]interface{}`).
pub(crate) fn v_lists(lists: &[&[Value]]) -> String {
    let inner: Vec<String> = lists.iter().map(|l| v(&Value::Array(l.to_vec()))).collect();
    format!("[{}]", inner.join(" "))
}

fn write_v(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Go's fmt prints map keys sorted.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_v(out, &map[k.as_str()]);
            }
            out.push(']');
        }
    }
}

/// `%s` of a decoded value: strings as they are, anything else as Go's `%!s(type=value)`.
pub(crate) fn s(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".to_string(),
        other => format!("%!s({}={})", type_name(other), v(other)),
    }
}

/// `strconv.FormatFloat(f, 'g', -1, 64)` for JSON numbers, integers as integers.
fn number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    if f == 0.0 {
        return "0".to_string();
    }
    // Go's %v is %g with the shortest precision: exponent form below 1e-4 and from 1e6 on.
    let exp = f.abs().log10().floor() as i32;
    if (-4..6).contains(&exp) {
        return format!("{f}");
    }
    // Exponent form: d.ddde+XX with at least two exponent digits.
    let s = format!("{f:e}");
    let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// `%q` (strconv.Quote): printable characters as they are, `"` and `\` escaped, control
/// characters as `\n`, `\x01`, `\u0085`.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || c == '\u{ad}' || c == '\u{feff}' => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prints_like_go() {
        assert_eq!(v(&json!({"name": "web", "$patch": "x"})), "map[$patch:x name:web]");
        assert_eq!(v(&json!(["a", 1, 1.5, null, true])), "[a 1 1.5 <nil> true]");
        assert_eq!(v(&json!(1e21)), "1e+21");
        assert_eq!(v(&json!(100.0)), "100");
        assert_eq!(v(&json!(1e6)), "1e+06");
        assert_eq!(v(&json!(123456.5)), "123456.5");
        assert_eq!(s(&json!(1)), "%!s(int64=1)");
        assert_eq!(v_lists(&[&[json!("a")], &[json!(["x"])]]), "[[a] [[x]]]");
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("a\"b"), "\"a\\\"b\"");
        assert_eq!(quote("a\u{1}\n"), "\"a\\x01\\n\"");
        assert_eq!(quote("ä"), "\"ä\"");
    }

    #[test]
    fn go_equality_keeps_int_and_float_apart() {
        assert!(go_eq(&json!(80), &json!(80)));
        assert!(!go_eq(&json!(80), &json!(80.0)));
        assert!(go_eq(&json!(null), &json!(null)));
    }
}
