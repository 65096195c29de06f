//! The errors Go's `encoding/json` gives for a body that is not JSON, worded as Go words them
//! (`invalid character 'n' looking for beginning of object key string`, `unexpected end of JSON
//! input`), and the messages kube-apiserver wraps them in. Clients print these verbatim
//! (`Error from server (BadRequest): ...`), so they are what a user sees of a malformed body.
//!
//! [`syntax_error`] is a small scanner with the states of Go's: it finds the first byte Go
//! would refuse. Callers use it only after `serde_json` refused the body, so its verdict on
//! valid input does not matter.

/// Go's `quoteChar`: a byte as it appears inside `invalid character '…'`.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        b'\n' => "'\\n'".to_string(),
        b'\r' => "'\\r'".to_string(),
        b'\t' => "'\\t'".to_string(),
        0x20..=0x7e => format!("'{}'", c as char),
        _ => format!("'\\x{c:02x}'"),
    }
}

/// What the scanner expects next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (top level, after `[`, after `,` in an array, after `:`).
    Value,
    /// A key string or `}` right after `{`.
    FirstKey,
    /// A key string after `,` in an object.
    Key,
    /// `:` after a key.
    Colon,
    /// `,` or `}` after a member.
    AfterMember,
    /// `,` or `]` after an element.
    AfterElement,
    /// Nothing but whitespace after the top-level value.
    End,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// Go's error for the first thing in `data` it would refuse (`unexpected end of JSON input`
/// when the data stops early).
pub fn syntax_error(data: &[u8]) -> String {
    const EOF: &str = "unexpected end of JSON input";
    let invalid = |c: u8, context: &str| format!("invalid character {} {context}", quote_char(c));
    // `true` for an object, `false` for an array.
    let mut stack: Vec<bool> = Vec::new();
    let mut expect = Expect::Value;
    let mut i = 0;
    while i < data.len() {
        let c = data[i];
        if is_space(c) {
            i += 1;
            continue;
        }
        match expect {
            Expect::End => return invalid(c, "after top-level value"),
            Expect::Colon => {
                if c != b':' {
                    return invalid(c, "after object key");
                }
                expect = Expect::Value;
                i += 1;
            }
            Expect::AfterMember | Expect::AfterElement => {
                let object = expect == Expect::AfterMember;
                match c {
                    b',' => {
                        expect = if object { Expect::Key } else { Expect::Value };
                        i += 1;
                    }
                    b'}' if object => {
                        stack.pop();
                        expect = after_value(&stack);
                        i += 1;
                    }
                    b']' if !object => {
                        stack.pop();
                        expect = after_value(&stack);
                        i += 1;
                    }
                    _ => return invalid(c, if object { "after object key:value pair" } else { "after array element" }),
                }
            }
            Expect::FirstKey | Expect::Key => {
                if c == b'}' && expect == Expect::FirstKey {
                    stack.pop();
                    expect = after_value(&stack);
                    i += 1;
                    continue;
                }
                if c != b'"' {
                    return invalid(c, "looking for beginning of object key string");
                }
                match string_end(data, i) {
                    Ok(end) => i = end,
                    Err(e) => return e.unwrap_or_else(|| EOF.to_string()),
                }
                expect = Expect::Colon;
            }
            Expect::Value => {
                // `]` right after `[` closes an empty array.
                if c == b']' && stack.last() == Some(&false) && data[..i].iter().rev().find(|b| !is_space(**b)) == Some(&b'[') {
                    stack.pop();
                    expect = after_value(&stack);
                    i += 1;
                    continue;
                }
                match c {
                    b'{' => {
                        stack.push(true);
                        expect = Expect::FirstKey;
                        i += 1;
                    }
                    b'[' => {
                        stack.push(false);
                        expect = Expect::Value;
                        i += 1;
                    }
                    b'"' => {
                        match string_end(data, i) {
                            Ok(end) => i = end,
                            Err(e) => return e.unwrap_or_else(|| EOF.to_string()),
                        }
                        expect = after_value(&stack);
                    }
                    b't' | b'f' | b'n' => {
                        let word: &[u8] = match c {
                            b't' => b"true",
                            b'f' => b"false",
                            _ => b"null",
                        };
                        for (k, want) in word.iter().enumerate() {
                            match data.get(i + k) {
                                None => return EOF.to_string(),
                                Some(got) if got == want => {}
                                Some(got) => {
                                    let name = std::str::from_utf8(word).unwrap_or("");
                                    return invalid(*got, &format!("in literal {name} (expecting {})", quote_char(*want)));
                                }
                            }
                        }
                        i += word.len();
                        expect = after_value(&stack);
                    }
                    b'-' | b'0'..=b'9' => {
                        match number_end(data, i) {
                            Ok(end) => i = end,
                            Err(e) => return e.unwrap_or_else(|| EOF.to_string()),
                        }
                        expect = after_value(&stack);
                    }
                    _ => return invalid(c, "looking for beginning of value"),
                }
            }
        }
    }
    if expect == Expect::End { "unexpected end of JSON input".to_string() } else { EOF.to_string() }
}

fn after_value(stack: &[bool]) -> Expect {
    match stack.last() {
        None => Expect::End,
        Some(true) => Expect::AfterMember,
        Some(false) => Expect::AfterElement,
    }
}

/// The index after the string starting at `start` (a `"`); `Err(None)` when the data ends.
fn string_end(data: &[u8], start: usize) -> Result<usize, Option<String>> {
    let mut i = start + 1;
    while i < data.len() {
        match data[i] {
            b'"' => return Ok(i + 1),
            b'\\' => {
                let Some(&e) = data.get(i + 1) else { return Err(None) };
                match e {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' => {
                        for k in 0..4 {
                            match data.get(i + 2 + k) {
                                None => return Err(None),
                                Some(h) if h.is_ascii_hexdigit() => {}
                                Some(h) => return Err(Some(format!("invalid character {} in \\u hexadecimal character escape", quote_char(*h)))),
                            }
                        }
                        i += 6;
                    }
                    other => return Err(Some(format!("invalid character {} in string escape code", quote_char(other)))),
                }
            }
            c if c < 0x20 => return Err(Some(format!("invalid character {} in string literal", quote_char(c)))),
            _ => i += 1,
        }
    }
    Err(None)
}

/// The index after the number starting at `start`.
fn number_end(data: &[u8], start: usize) -> Result<usize, Option<String>> {
    let digit = |i: usize| data.get(i).is_some_and(u8::is_ascii_digit);
    let bad = |i: usize, what: &str| match data.get(i) {
        None => Err(None),
        Some(c) => Err(Some(format!("invalid character {} {what}", quote_char(*c)))),
    };
    let mut i = start;
    if data[i] == b'-' {
        i += 1;
        if !digit(i) {
            return bad(i, "in numeric literal");
        }
    }
    if data[i] == b'0' {
        i += 1;
    } else {
        while digit(i) {
            i += 1;
        }
    }
    if data.get(i) == Some(&b'.') {
        i += 1;
        if !digit(i) {
            return bad(i, "after decimal point in numeric literal");
        }
        while digit(i) {
            i += 1;
        }
    }
    if matches!(data.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(data.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digit(i) {
            return bad(i, "in exponent of numeric literal");
        }
        while digit(i) {
            i += 1;
        }
    }
    Ok(i)
}

/// kube-apiserver's `summarizeData`: the body as text when it looks like an object, else hex,
/// cut to 30 bytes.
pub fn summarize(data: &[u8]) -> String {
    const MAX: usize = 30;
    if data.is_empty() {
        return "<empty>".to_string();
    }
    let cut = &data[..data.len().min(MAX)];
    let text = if data[0] == b'{' { String::from_utf8_lossy(cut).into_owned() } else { cut.iter().map(|b| format!("{b:02x}")).collect() };
    if data.len() > MAX { format!("{text} ...") } else { text }
}

/// Go's error for JSON that parses but is not an object, decoded into the `TypeMeta` probe.
pub fn not_an_object(v: &serde_json::Value) -> Option<String> {
    let what = match v {
        serde_json::Value::Array(_) => "array",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::Bool(_) => "bool",
        _ => return None,
    };
    Some(format!(
        "json: cannot unmarshal {what} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}"
    ))
}

/// The message of a body whose kind could not be read: with the kind it must be when the
/// handler decodes one (`the object provided is unrecognized (must be of type ConfigMap): …`),
/// bare for options (a DeleteOptions body).
pub fn unrecognized(expected_kind: Option<&str>, error: &str, data: &[u8]) -> String {
    let base = format!("couldn't get version/kind; json parse error: {error}");
    match expected_kind {
        Some(kind) => format!("the object provided is unrecognized (must be of type {kind}): {base} ({})", summarize(data)),
        None => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_read_as_go_reads_them() {
        for (input, want) in [
            ("{not json", "invalid character 'n' looking for beginning of object key string"),
            ("{", "unexpected end of JSON input"),
            ("", "unexpected end of JSON input"),
            ("{\"a\" 1}", "invalid character '1' after object key"),
            ("{\"a\":1 \"b\":2}", "invalid character '\"' after object key:value pair"),
            ("[1 2]", "invalid character '2' after array element"),
            ("{\"a\":tru}", "invalid character '}' in literal true (expecting 'e')"),
            ("{\"a\":-x}", "invalid character 'x' in numeric literal"),
            ("{\"a\":1.}", "invalid character '}' after decimal point in numeric literal"),
            ("{\"a\":\"\\q\"}", "invalid character 'q' in string escape code"),
            ("{} x", "invalid character 'x' after top-level value"),
            ("{\"a\":}", "invalid character '}' looking for beginning of value"),
            ("{'a':1}", "invalid character '\\'' looking for beginning of object key string"),
            ("{\"a\":[1,]}", "invalid character ']' looking for beginning of value"),
        ] {
            assert_eq!(syntax_error(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn summaries_are_text_for_objects_and_hex_otherwise() {
        assert_eq!(summarize(b""), "<empty>");
        assert_eq!(summarize(b"{not json"), "{not json");
        assert_eq!(summarize(b"[]"), "5b5d");
        assert_eq!(summarize(&[b'{'; 40]), format!("{} ...", "{".repeat(30)));
    }
}
