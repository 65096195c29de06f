//! YAML written as Karmada writes the result of a YAML `fieldOverrider` (`sigs.k8s.io/yaml`
//! `JSONToYAML`, i.e. go-yaml v2): block style, two-space indentation, sequences in a mapping
//! not indented, keys in go-yaml's natural order, strings plain when they read back as the same
//! string, else single- or double-quoted, multi-line strings as literal blocks, and long
//! scalars folded past column 80.

use std::cmp::Ordering;

use serde_json::{Map, Value};

const WIDTH: usize = 80;

/// `v` as go-yaml v2 marshals it.
pub(crate) fn to_yaml(v: &Value) -> String {
    let mut out = Out::default();
    match v {
        Value::Object(m) if !m.is_empty() => out.mapping(m, 0),
        Value::Array(a) if !a.is_empty() => out.sequence(a, 0),
        scalar => {
            out.scalar(scalar, 0, false);
            out.newline();
        }
    }
    out.text
}

#[derive(Default)]
struct Out {
    text: String,
    /// Characters on the current line.
    column: usize,
}

impl Out {
    fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.column += s.chars().count();
    }

    fn newline(&mut self) {
        self.text.push('\n');
        self.column = 0;
    }

    fn indent_to(&mut self, indent: usize) {
        while self.column < indent {
            self.push(" ");
        }
    }

    /// A block mapping whose keys start at `indent`; the cursor is at `indent` already for the
    /// first key when it follows `- `.
    fn mapping(&mut self, m: &Map<String, Value>, indent: usize) {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort_by(|a, b| natural_order(a, b));
        for key in keys {
            self.indent_to(indent);
            self.scalar(&Value::String(key.clone()), indent, true);
            self.push(":");
            match &m[key] {
                Value::Object(child) if !child.is_empty() => {
                    self.newline();
                    self.mapping(child, indent + 2);
                }
                Value::Array(items) if !items.is_empty() => {
                    self.newline();
                    self.sequence(items, indent);
                }
                scalar => {
                    self.push(" ");
                    self.scalar(scalar, indent + 2, false);
                    self.newline();
                }
            }
        }
    }

    fn sequence(&mut self, items: &[Value], indent: usize) {
        for item in items {
            self.indent_to(indent);
            self.push("- ");
            match item {
                Value::Object(m) if !m.is_empty() => self.mapping(m, indent + 2),
                Value::Array(a) if !a.is_empty() => self.sequence(a, indent + 2),
                scalar => {
                    self.scalar(scalar, indent + 2, false);
                    self.newline();
                }
            }
        }
    }

    /// A scalar (or empty collection) at the cursor; `indent` is where continuation lines and
    /// literal block content go.
    fn scalar(&mut self, v: &Value, indent: usize, key: bool) {
        match v {
            Value::Null => self.push("null"),
            Value::Bool(b) => self.push(if *b { "true" } else { "false" }),
            Value::Number(n) => {
                let text = match (n.as_i64(), n.as_u64(), n.as_f64()) {
                    (Some(i), _, _) => i.to_string(),
                    (_, Some(u), _) => u.to_string(),
                    (_, _, Some(f)) => go_float(f),
                    _ => n.to_string(),
                };
                self.push(&text)
            }
            Value::Object(_) => self.push("{}"),
            Value::Array(_) => self.push("[]"),
            Value::String(s) => self.string(s, indent, key),
        }
    }

    fn string(&mut self, s: &str, indent: usize, key: bool) {
        let a = Analysis::of(s);
        // go-yaml asks for a literal block for multi-line text and double quotes for text that
        // would read back as another type; libyaml falls back from plain to single quotes and
        // from either to double quotes when the text does not allow them.
        if s.contains('\n') {
            if a.block_allowed && !key {
                return self.literal(s, indent);
            }
            return self.folded(s, indent, !key, Quote::Double);
        }
        if resolves_to_other_type(s) || is_base60_float(s) {
            return self.folded(s, indent, !key, Quote::Double);
        }
        if a.block_plain_allowed && !(key && a.line_breaks) {
            return self.folded(s, indent, !key, Quote::None);
        }
        if a.single_quoted_allowed {
            return self.folded(s, indent, !key, Quote::Single);
        }
        self.folded(s, indent, !key, Quote::Double)
    }

    /// `|` block: chomping `-` without a final newline, `+` with more than one, and an
    /// indentation indicator when the text starts with a space or a line break.
    fn literal(&mut self, s: &str, indent: usize) {
        let trailing = s.len() - s.trim_end_matches('\n').len();
        let mut header = String::from("|");
        if s.starts_with([' ', '\n']) {
            header.push('2');
        }
        match trailing {
            0 => header.push('-'),
            1 => {}
            _ => header.push('+'),
        }
        self.push(&header);
        let body = if trailing == 1 { &s[..s.len() - 1] } else { s };
        for line in body.split('\n') {
            self.newline();
            if !line.is_empty() {
                self.indent_to(indent);
                self.push(line);
            }
        }
        if trailing > 1 {
            // The last split piece was the empty line after the final break.
            self.text.pop();
        }
    }

    /// A plain or quoted scalar, folded at spaces once past the width (when `breaks`).
    fn folded(&mut self, s: &str, indent: usize, breaks: bool, quote: Quote) {
        match quote {
            Quote::Single => self.push("'"),
            Quote::Double => self.push("\""),
            Quote::None => {}
        }
        let chars: Vec<char> = s.chars().collect();
        let mut after_space = false;
        for (i, &c) in chars.iter().enumerate() {
            let next_is_space = chars.get(i + 1) == Some(&' ');
            if c == ' ' {
                let inner = i != 0 && i != chars.len() - 1;
                let fold = breaks
                    && !after_space
                    && self.column > WIDTH
                    && match quote {
                        Quote::None => !next_is_space,
                        Quote::Single => inner && !next_is_space,
                        Quote::Double => inner,
                    };
                if fold {
                    self.newline();
                    self.indent_to(indent);
                    if quote == Quote::Double && next_is_space {
                        self.push("\\");
                    }
                } else {
                    self.push(" ");
                }
                after_space = true;
                continue;
            }
            after_space = false;
            match quote {
                Quote::Single if c == '\'' => self.push("''"),
                Quote::Double => self.push(&double_quoted_char(c)),
                _ => {
                    let mut buf = [0u8; 4];
                    self.push(c.encode_utf8(&mut buf));
                }
            }
        }
        match quote {
            Quote::Single => self.push("'"),
            Quote::Double => self.push("\""),
            Quote::None => {}
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

fn double_quoted_char(c: char) -> String {
    match c {
        '"' => "\\\"".into(),
        '\\' => "\\\\".into(),
        '\0' => "\\0".into(),
        '\u{7}' => "\\a".into(),
        '\u{8}' => "\\b".into(),
        '\t' => "\\t".into(),
        '\n' => "\\n".into(),
        '\u{b}' => "\\v".into(),
        '\u{c}' => "\\f".into(),
        '\r' => "\\r".into(),
        '\u{1b}' => "\\e".into(),
        '\u{85}' => "\\N".into(),
        '\u{a0}' => "\\_".into(),
        '\u{2028}' => "\\L".into(),
        '\u{2029}' => "\\P".into(),
        c if printable(c) => c.to_string(),
        c if (c as u32) <= 0xFF => format!("\\x{:02X}", c as u32),
        c if (c as u32) <= 0xFFFF => format!("\\u{:04X}", c as u32),
        c => format!("\\U{:08X}", c as u32),
    }
}

/// libyaml's `IS_PRINTABLE` (tab is not).
fn printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || u == 0x85
        || ((0xA0..=0xD7FF).contains(&u))
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
        || (0x10000..=0x10FFFF).contains(&u)
}

/// What libyaml's scalar analysis allows for a string in block context.
struct Analysis {
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
    line_breaks: bool,
}

impl Analysis {
    fn of(s: &str) -> Analysis {
        let chars: Vec<char> = s.chars().collect();
        let is_break = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
        let blank_or_end = |i: usize| chars.get(i).is_none_or(|c| *c == ' ' || *c == '\t' || is_break(*c));
        let (mut block_indicators, mut line_breaks, mut special) = (false, false, false);
        let (mut space_break, mut break_space) = (false, false);
        if s.starts_with("---") || s.starts_with("...") {
            block_indicators = true;
        }
        for (i, &c) in chars.iter().enumerate() {
            let preceded_by_blank = i == 0 || matches!(chars[i - 1], ' ' | '\t') || is_break(chars[i - 1]);
            if i == 0 {
                match c {
                    '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%' | '@' | '`' => block_indicators = true,
                    '?' | ':' | '-' if blank_or_end(1) => block_indicators = true,
                    _ => {}
                }
            } else {
                match c {
                    ':' if blank_or_end(i + 1) => block_indicators = true,
                    '#' if preceded_by_blank => block_indicators = true,
                    _ => {}
                }
            }
            if !printable(c) && !is_break(c) {
                special = true;
            }
            if is_break(c) {
                line_breaks = true;
            }
            if c == ' ' && chars.get(i + 1).is_some_and(|n| is_break(*n)) {
                space_break = true;
            }
            if is_break(c) && chars.get(i + 1) == Some(&' ') {
                break_space = true;
            }
        }
        let leading = chars.first().is_some_and(|c| *c == ' ' || is_break(*c));
        let trailing_space = chars.last() == Some(&' ');
        let trailing_break = chars.last().is_some_and(|c| is_break(*c));
        let mut a = Analysis { block_plain_allowed: true, single_quoted_allowed: true, block_allowed: true, line_breaks };
        if leading || trailing_space || trailing_break || line_breaks || block_indicators {
            a.block_plain_allowed = false;
        }
        if trailing_space {
            a.block_allowed = false;
        }
        if break_space {
            a.block_plain_allowed = false;
            a.single_quoted_allowed = false;
        }
        if space_break || special {
            a.block_plain_allowed = false;
            a.single_quoted_allowed = false;
            a.block_allowed = false;
        }
        a
    }
}

/// Whether go-yaml v2 would read `s`, unquoted, as something other than a string (null, bool,
/// int, float, timestamp), so that it must be quoted.
fn resolves_to_other_type(s: &str) -> bool {
    const WORDS: [&str; 39] = [
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on",
        "On", "ON", "off", "Off", "OFF", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF",
    ];
    if WORDS.contains(&s) || s == "<<" {
        return true;
    }
    match s.as_bytes().first() {
        Some(b'.') => s.parse::<f64>().is_ok() && s[1..].bytes().all(|b| b.is_ascii_digit() || b"eE+-".contains(&b)),
        Some(b'0'..=b'9' | b'+' | b'-') => {
            let plain = s.replace('_', "");
            is_timestamp(s) || go_int(&plain) || yaml_float(&plain) || binary_int(&plain)
        }
        _ => false,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)` succeeding (or ParseUint): an optional sign, then
/// decimal, `0x` hex, `0o` / leading-zero octal or `0b` binary digits.
fn go_int(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (digits, radix) = if let Some(h) = unsigned.strip_prefix("0x").or_else(|| unsigned.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(o) = unsigned.strip_prefix("0o").or_else(|| unsigned.strip_prefix("0O")) {
        (o, 8)
    } else if let Some(b) = unsigned.strip_prefix("0b").or_else(|| unsigned.strip_prefix("0B")) {
        (b, 2)
    } else if unsigned.len() > 1 && unsigned.starts_with('0') {
        (&unsigned[1..], 8)
    } else {
        (unsigned, 10)
    };
    !digits.is_empty() && u64::from_str_radix(digits, radix).is_ok()
}

fn binary_int(s: &str) -> bool {
    let unsigned = s.strip_prefix('-').unwrap_or(s);
    unsigned.strip_prefix("0b").is_some_and(|b| !b.is_empty() && u64::from_str_radix(b, 2).is_ok())
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    mantissa_ok && exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)))
}

/// go-yaml's timestamp forms: `YYYY-M-D` optionally followed by a time.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let date_end = s.find(['T', 't', ' ']).unwrap_or(s.len());
    let date: Vec<&str> = s[..date_end].split('-').collect();
    date.len() == 3 && date.iter().all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|c| c.is_ascii_digit()))
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$` (YAML 1.1 sexagesimal floats).
fn is_base60_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = s.split_once('.').unwrap_or((s, ""));
    if !frac.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return false;
    }
    let mut parts = main.split(':');
    let first = parts.next().unwrap_or("");
    let first_ok = first.as_bytes().first().is_some_and(u8::is_ascii_digit) && first.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let rest: Vec<&str> = parts.collect();
    first_ok
        && !rest.is_empty()
        && rest.iter().all(|p| {
            let b = p.as_bytes();
            match b.len() {
                1 => b[0].is_ascii_digit(),
                2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
                _ => false,
            }
        })
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)` as go-yaml adjusts it (`.inf`, `-.inf`, `.nan`).
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf".into() } else { "-.inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Shortest digits and decimal exponent from Rust's `{:e}` (also shortest round-trip).
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1;
    let text = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
    };
    format!("{sign}{text}")
}

/// go-yaml v2's key order: letters after other characters, runs of digits compared as numbers.
fn natural_order(a: &str, b: &str) -> Ordering {
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl { Ordering::Less } else { Ordering::Greater };
        }
        let number = |r: &[char], mut n: i64| -> (i64, usize) {
            let mut j = i;
            while j < r.len() && r[j].is_ascii_digit() {
                n = n.saturating_mul(10).saturating_add(i64::from(r[j] as u8 - b'0'));
                j += 1;
            }
            (n, j)
        };
        // A zero after a non-zero digit run is part of a number, not padding.
        let mut seed = 0;
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    seed = 1;
                    break;
                }
            }
        }
        let ((an, ai), (bn, bi)) = (number(&ar, seed), number(&br, seed));
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_layout() {
        let v = json!({"b": {"c": [1, "two", {"d": true, "e": null}], "f": {}}, "a": [], "z": [[1, 2], "x"]});
        assert_eq!(to_yaml(&v), "a: []\nb:\n  c:\n  - 1\n  - two\n  - d: true\n    e: null\n  f: {}\nz:\n- - 1\n  - 2\n- x\n");
    }

    #[test]
    fn quoting() {
        for (s, want) in [
            ("plain", "plain"),
            ("", "\"\""),
            ("true", "\"true\""),
            ("yes", "\"yes\""),
            ("123", "\"123\""),
            ("1.5", "\"1.5\""),
            ("0x1F", "\"0x1F\""),
            ("1:20", "\"1:20\""),
            ("2024-01-02", "\"2024-01-02\""),
            ("a: b", "'a: b'"),
            ("- x", "'- x'"),
            ("it's", "it's"),
            ("#x", "'#x'"),
            ("a #b", "'a #b'"),
            (" lead", "' lead'"),
            ("tab\there", "\"tab\\there\""),
            ("x:", "'x:'"),
            ("v1.2.3", "v1.2.3"),
        ] {
            assert_eq!(to_yaml(&json!({ "k": s })), format!("k: {want}\n"), "{s:?}");
        }
    }

    #[test]
    fn literal_blocks() {
        assert_eq!(to_yaml(&json!({"k": "a\nb"})), "k: |-\n  a\n  b\n");
        assert_eq!(to_yaml(&json!({"k": "a\nb\n"})), "k: |\n  a\n  b\n");
        assert_eq!(to_yaml(&json!({"k": "a\n\nb\n"})), "k: |\n  a\n\n  b\n");
        assert_eq!(to_yaml(&json!({"k": {"j": "x\ny"}})), "k:\n  j: |-\n    x\n    y\n");
        assert_eq!(to_yaml(&json!({"k": "a \nb"})), "k: \"a \\nb\"\n");
    }

    #[test]
    fn floats_as_go_writes_them() {
        for (f, want) in [(1.5, "1.5"), (1_000_000.0, "1e+06"), (123_456.0, "123456"), (0.0001, "0.0001"), (0.00001, "1e-05"), (2.0, "2")] {
            assert_eq!(go_float(f), want, "{f}");
        }
    }

    #[test]
    fn natural_key_order() {
        let mut keys = vec!["b", "a10", "a2", "A", "_x", "a"];
        keys.sort_by(|a, b| natural_order(a, b));
        assert_eq!(keys, ["_x", "A", "a", "a2", "a10", "b"]);
    }

    #[test]
    fn long_plain_strings_fold_at_80_columns() {
        let words = vec!["word"; 30].join(" ");
        let yaml = to_yaml(&json!({ "k": words }));
        let first = yaml.lines().next().unwrap();
        assert!(first.len() > 80 && first.len() < 90, "{yaml}");
        assert!(yaml.lines().nth(1).unwrap().starts_with("  word"), "{yaml}");
    }
}
