//! Label and field selectors as kube-apiserver parses, prints and matches them.
//!
//! - [`LabelSelector`]: the `labelSelector=` query grammar (`a=b`, `a==b`, `a!=b`, `a in (x,y)`,
//!   `a notin (x)`, `a`, `!a`, `a>1`, `a<1`), and `LabelSelector` objects
//!   (`matchLabels` + `matchExpressions`) via [`LabelSelector::from_json`].
//! - [`FieldSelector`]: the `fieldSelector=` grammar (`f=v`, `f==v`, `f!=v`, values escape
//!   `\,` `\=` `\\`).
//!
//! Parsing follows the real server token for token, including its error messages (they reach
//! users as 400 BadRequest messages), which were recorded from kube-apiserver 1.37 in
//! `tests/data/selector-golden.json`. `Display` prints a canonical form that parses back to an
//! equal selector.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

// Messages quote values as Go's `%q` does; the helper lives with the patch engines' other
// Go formatting.
use crate::patch::go_format::quote as go_quote;

/// Why a selector was rejected. `Display` is the message kube-apiserver sends (HTTP 400 for the
/// query-string forms; for objects the caller prefixes the field paths and answers 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `labelSelector` query string that does not parse or holds an invalid key or value.
    #[error("{0}")]
    ParseLabel(String),
    /// A `fieldSelector` query string that does not parse.
    #[error("{0}")]
    ParseField(String),
    /// A `LabelSelector` object that decodes but fails validation. Paths are relative to the
    /// selector (`matchExpressions[0].values`).
    #[error("{}", aggregate(.0.iter().map(ToString::to_string)))]
    InvalidObject(Vec<FieldViolation>),
    /// A `LabelSelector` object of the wrong JSON shape.
    #[error("{0}")]
    DecodeObject(String),
}

/// One field error, printed as Go's `field.Error` prints (`path: Invalid value: "x": detail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Path relative to the selector, e.g. `matchExpressions[1].operator`.
    pub field: String,
    pub kind: ViolationKind,
    pub detail: String,
}

/// The `field.ErrorType`s selector validation produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViolationKind {
    /// `Invalid value: <value>`; the value is kept already formatted (`"x"` for strings).
    Invalid(String),
    Required,
    Forbidden,
}

impl fmt::Display for FieldViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ViolationKind::Invalid(value) => write!(f, "{}: Invalid value: {value}", self.field)?,
            ViolationKind::Required => write!(f, "{}: Required value", self.field)?,
            ViolationKind::Forbidden => write!(f, "{}: Forbidden", self.field)?,
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

impl FieldViolation {
    fn invalid(field: impl Into<String>, value: &str, detail: impl Into<String>) -> Self {
        FieldViolation { field: field.into(), kind: ViolationKind::Invalid(go_quote(value)), detail: detail.into() }
    }
}

/// Go's `utilerrors.NewAggregate(errs).Error()`: one message alone, several deduplicated in
/// `[a, b]`.
fn aggregate(messages: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for m in messages {
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

// ---------------------------------------------------------------------------------------------
// Label key and value rules (k8s.io/apimachinery/pkg/util/validation), messages as 1.37 prints.

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
pub(crate) const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

pub(crate) fn regex_error(msg: &str, format: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{format}')"));
    out
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && is_alnum(b[0]) && is_alnum(b[b.len() - 1]) && b.iter().all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
pub(crate) fn is_dns1123_subdomain_syntax(s: &str) -> bool {
    let label_ok = |l: &str| {
        let b = l.as_bytes();
        let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        !b.is_empty() && edge(b[0]) && edge(b[b.len() - 1]) && b.iter().all(|&c| edge(c) || c == b'-')
    };
    s.split('.').all(label_ok)
}

/// The messages of Kubernetes' label-key check (`IsQualifiedName` with the label-key wording);
/// empty when the key is valid: an optional DNS-1123 subdomain prefix (≤ 253 bytes) and `/`,
/// then a name of ≤ 63 bytes.
pub fn label_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 bytes".to_string());
                }
                if !is_dns1123_subdomain_syntax(prefix) {
                    errs.push(format!(
                        "prefix part {}",
                        regex_error(
                            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                             characters, '-' or '.', and must start and end with an alphanumeric \
                             character",
                            DNS1123_SUBDOMAIN_FMT,
                            &["example.com"],
                        )
                    ));
                }
            }
            *name
        }
        _ => {
            errs.push(format!(
                "{} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    "a valid label key must consist of alphanumeric characters, '-', '_' or '.', \
                     and must start and end with an alphanumeric character",
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"],
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 bytes".to_string());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                 with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"],
            )
        ));
    }
    errs
}

/// The messages of Kubernetes' label-value check; empty when valid (≤ 63 bytes, empty or
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`).
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 bytes".to_string());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Label selectors

/// A requirement's operator. `Equals` and `DoubleEquals` match alike but print as they were
/// written, as the real server keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One `key op values` term of a label selector. Values are sorted and deduplicated.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement with the checks `labels.NewRequirement` makes: a valid key, the
    /// number of values the operator takes, integers for `>`/`<`, valid label values.
    pub fn new(key: impl Into<String>, operator: Operator, values: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, SelectorError> {
        let key = key.into();
        let mut values: Vec<String> = values.into_iter().map(Into::into).collect();
        values.sort();
        values.dedup();
        let mut errs: Vec<String> = Vec::new();
        let key_errs = label_key_errors(&key);
        if !key_errs.is_empty() {
            errs.push(format!("key: Invalid value: {}: {}", go_quote(&key), key_errs.join("; ")));
        }
        let values_debug = || {
            let quoted: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
            format!("[]string{{{}}}", quoted.join(", "))
        };
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                errs.push(format!("values: Invalid value: {}: for 'in', 'notin' operators, values set can't be empty", values_debug()))
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => {
                errs.push(format!("values: Invalid value: {}: exact-match compatibility requires one single value", values_debug()))
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                errs.push(format!("values: Invalid value: {}: values set must be empty for exists and does not exist", values_debug()))
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!("values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required", values_debug()));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!("values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer", go_quote(v)));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = label_value_errors(v);
            if !value_errs.is_empty() {
                errs.push(format!("values[{i}][{key}]: Invalid value: {}: {}", go_quote(v), value_errs.join("; ")));
            }
        }
        if errs.is_empty() { Ok(Requirement { key, operator, values }) } else { Err(SelectorError::ParseLabel(aggregate(errs.into_iter()))) }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// Sorted, deduplicated.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether labels (looked up through `get`) satisfy this requirement. `!=` and `notin`
    /// match objects without the key; `>`/`<` compare integers and fail on non-integers.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match (self.operator, get(&self.key)) {
            (Operator::In | Operator::Equals | Operator::DoubleEquals, Some(v)) => has(v),
            (Operator::In | Operator::Equals | Operator::DoubleEquals, None) => false,
            (Operator::NotIn | Operator::NotEquals, Some(v)) => !has(v),
            (Operator::NotIn | Operator::NotEquals, None) => true,
            (Operator::Exists, found) => found.is_some(),
            (Operator::DoesNotExist, found) => found.is_none(),
            (Operator::GreaterThan | Operator::LessThan, None) => false,
            (op @ (Operator::GreaterThan | Operator::LessThan), Some(v)) => {
                let (Ok(have), [want]) = (v.parse::<i64>(), self.values.as_slice()) else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else { return false };
                if op == Operator::GreaterThan { have > want } else { have < want }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: requirements ANDed, sorted by key (stable). Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// A selector of these requirements (sorted by key, stable, as the real server sorts).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements }
    }

    /// Parses the `labelSelector` query grammar exactly as kube-apiserver does.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let requirements = LabelParser::new(input).parse()?;
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// Builds a selector from a `LabelSelector` object (`{matchLabels, matchExpressions}`)
    /// with the checks object validation makes: valid keys and values, `In`/`NotIn` with
    /// values, `Exists`/`DoesNotExist` without. `null` and `{}` select everything; whether a
    /// missing selector means everything or nothing is the caller's rule.
    pub fn from_json(object: &Value) -> Result<Self, SelectorError> {
        let decode = |m: String| SelectorError::DecodeObject(m);
        let obj = match object {
            Value::Null => return Ok(LabelSelector::everything()),
            Value::Object(o) => o,
            other => return Err(decode(format!("LabelSelector: expected an object, got {}", json_type(other)))),
        };
        let mut violations = Vec::new();
        let mut requirements = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let Value::String(v) = v else {
                        return Err(decode(format!("matchLabels.{k}: expected a string, got {}", json_type(v))));
                    };
                    for msg in label_key_errors(k) {
                        violations.push(FieldViolation::invalid("matchLabels", k, msg));
                    }
                    for msg in label_value_errors(v) {
                        violations.push(FieldViolation::invalid("matchLabels", v, msg));
                    }
                    requirements.push(Requirement { key: k.clone(), operator: Operator::Equals, values: vec![v.clone()] });
                }
            }
            Some(other) => return Err(decode(format!("matchLabels: expected an object, got {}", json_type(other)))),
        }
        let expressions = match obj.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(other) => {
                return Err(decode(format!("matchExpressions: expected an array, got {}", json_type(other))));
            }
        };
        for (i, expr) in expressions.iter().enumerate() {
            let path = format!("matchExpressions[{i}]");
            let Value::Object(expr) = expr else {
                return Err(decode(format!("{path}: expected an object, got {}", json_type(expr))));
            };
            let string_field = |name: &str| -> Result<String, SelectorError> {
                match expr.get(name) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(other) => Err(decode(format!("{path}.{name}: expected a string, got {}", json_type(other)))),
                }
            };
            let key = string_field("key")?;
            let op_name = string_field("operator")?;
            let mut values = Vec::new();
            match expr.get("values") {
                None | Some(Value::Null) => {}
                Some(Value::Array(vs)) => {
                    for v in vs {
                        match v {
                            Value::String(s) => values.push(s.clone()),
                            other => {
                                return Err(decode(format!("{path}.values: expected strings, got {}", json_type(other))));
                            }
                        }
                    }
                }
                Some(other) => {
                    return Err(decode(format!("{path}.values: expected an array, got {}", json_type(other))));
                }
            }
            let operator = match op_name.as_str() {
                "In" => Some(Operator::In),
                "NotIn" => Some(Operator::NotIn),
                "Exists" => Some(Operator::Exists),
                "DoesNotExist" => Some(Operator::DoesNotExist),
                _ => None,
            };
            match operator {
                Some(Operator::In | Operator::NotIn) if values.is_empty() => violations.push(FieldViolation {
                    field: format!("{path}.values"),
                    kind: ViolationKind::Required,
                    detail: "must be specified when `operator` is 'In' or 'NotIn'".to_string(),
                }),
                Some(Operator::Exists | Operator::DoesNotExist) if !values.is_empty() => violations.push(FieldViolation {
                    field: format!("{path}.values"),
                    kind: ViolationKind::Forbidden,
                    detail: "may not be specified when `operator` is 'Exists' or 'DoesNotExist'".to_string(),
                }),
                Some(_) => {}
                None => violations.push(FieldViolation::invalid(format!("{path}.operator"), &op_name, "not a valid selector operator")),
            }
            for msg in label_key_errors(&key) {
                violations.push(FieldViolation::invalid(format!("{path}.key"), &key, msg));
            }
            for (j, v) in values.iter().enumerate() {
                for msg in label_value_errors(v) {
                    violations.push(FieldViolation::invalid(format!("{path}.values[{j}]"), v, msg));
                }
            }
            if let Some(operator) = operator {
                values.sort();
                values.dedup();
                requirements.push(Requirement { key, operator, values });
            }
        }
        if !violations.is_empty() {
            return Err(SelectorError::InvalidObject(violations));
        }
        Ok(LabelSelector::from_requirements(requirements))
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// [`LabelSelector::matches`] over any label lookup, e.g. straight from a JSON object's
    /// `metadata.labels`.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches_with(&get))
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_comma_separated(f, &self.requirements)
    }
}

/// Requirements joined by commas: the printed form of both selector kinds.
fn write_comma_separated(f: &mut fmt::Formatter<'_>, items: &[impl fmt::Display]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// The lexer and parser mirror the real server's: bytes, not characters; a NUL byte reads as
// the end of input; in value positions `in` and `notin` are plain identifiers.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    End,
    Identifier,
    In,
    NotIn,
    OpenPar,
    ClosedPar,
    Comma,
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
}

fn symbol_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"(" => Token::OpenPar,
        b"," => Token::Comma,
        b"!" => Token::Bang,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b"!=" => Token::NotEquals,
        b">" => Token::GreaterThan,
        b"<" => Token::LessThan,
        _ => return None,
    })
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    /// The next byte, or 0 past the end (a NUL byte inside the input reads the same).
    fn read(&mut self) -> u8 {
        if self.pos < self.s.len() {
            self.pos += 1;
            self.s[self.pos - 1]
        } else {
            0
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_space(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::End, String::new());
        }
        self.unread();
        if is_special(ch) {
            // Longest run of symbol bytes that is still a token.
            let start = self.pos;
            let mut best = None;
            loop {
                let c = self.read();
                if c == 0 {
                    break;
                }
                if !is_special(c) {
                    self.unread();
                    break;
                }
                match symbol_token(&self.s[start..self.pos]) {
                    Some(t) => best = Some((t, self.pos)),
                    None if best.is_some() => {
                        self.unread();
                        break;
                    }
                    None => {}
                }
            }
            // Every single symbol byte is a token, so `best` is always set.
            let (tok, end) = best.unwrap_or((Token::Comma, self.pos));
            return (tok, String::from_utf8_lossy(&self.s[start..end]).into_owned());
        }
        let start = self.pos;
        let mut end;
        loop {
            end = self.pos;
            let c = self.read();
            if c == 0 {
                break;
            }
            if is_special(c) || is_space(c) {
                self.unread();
                end = self.pos;
                break;
            }
        }
        let lit = String::from_utf8_lossy(&self.s[start..end]).into_owned();
        match lit.as_str() {
            "in" => (Token::In, lit),
            "notin" => (Token::NotIn, lit),
            _ => (Token::Identifier, lit),
        }
    }
}

struct LabelParser {
    items: Vec<(Token, String)>,
    position: usize,
}

/// In value positions `in`/`notin` are identifiers; as operators they are keywords.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    Values,
    Operator,
}

impl LabelParser {
    fn new(input: &str) -> Self {
        let mut lexer = Lexer { s: input.as_bytes(), pos: 0 };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::End;
            items.push(item);
            if end {
                break;
            }
        }
        LabelParser { items, position: 0 }
    }

    fn lookahead(&self, ctx: Context) -> (Token, &str) {
        let (tok, lit) = &self.items[self.position.min(self.items.len() - 1)];
        let tok = match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            (_, t) => *t,
        };
        (tok, lit)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let (tok, lit) = self.lookahead(ctx);
        let lit = lit.to_string();
        if self.position < self.items.len() - 1 {
            self.position += 1;
        }
        (tok, lit)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let err = |m: String| SelectorError::ParseLabel(m);
        let mut out = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::Bang => {
                    let r = self.parse_requirement().map_err(|e| match e {
                        SelectorError::ParseLabel(m) => err(format!("unable to parse requirement: {m}")),
                        other => other,
                    })?;
                    out.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::End => return Ok(out),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::Bang {
                                return Err(err(format!("found '{l2}', expected: identifier after ','")));
                            }
                        }
                        _ => return Err(err(format!("found '{l}', expected: ',' or 'end of string'"))),
                    }
                }
                Token::End => return Ok(out),
                _ => return Err(err(format!("found '{lit}', expected: !, identifier, or 'end of string'"))),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorError> {
        let err = |m: String| SelectorError::ParseLabel(m);
        // Key, with `!` in front or an end/comma after making it a unary requirement.
        let (mut tok, mut lit) = self.consume(Context::Values);
        let mut unary = None;
        if tok == Token::Bang {
            unary = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(err(format!("found '{lit}', expected: identifier")));
        }
        let key_errs = label_key_errors(&lit);
        if !key_errs.is_empty() {
            return Err(err(format!("<nil>: Invalid value: {}: {}", go_quote(&lit), key_errs.join("; "))));
        }
        let key = lit;
        if unary.is_none() && matches!(self.lookahead(Context::Values).0, Token::End | Token::Comma) {
            unary = Some(Operator::Exists);
        }
        if let Some(op) = unary {
            return Requirement::new(key, op, Vec::<String>::new());
        }
        let (tok, lit) = self.consume(Context::Operator);
        let operator = match tok {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            _ => return Err(err(format!("found '{lit}', expected: in, notin, =, ==, !=, gt, lt"))),
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_set()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(key, operator, values)
    }

    fn parse_set(&mut self) -> Result<Vec<String>, SelectorError> {
        let err = |m: String| SelectorError::ParseLabel(m);
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(err(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let lit = lit.to_string();
                let values = self.parse_identifiers()?;
                if self.consume(Context::Values).0 != Token::ClosedPar {
                    return Err(err(format!("found '{lit}', expected: ')'")));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(err(format!("found '{lit}', expected: ',', ')' or identifier"))),
        }
    }

    /// The inside of `( … )`; stops before the `)`. Empty places (`(,a)`, `(a,)`, `(a,,b)`)
    /// are the empty value.
    fn parse_identifiers(&mut self) -> Result<Vec<String>, SelectorError> {
        let err = |m: String| SelectorError::ParseLabel(m);
        let mut values: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    values.push(lit);
                    let (t2, l2) = self.lookahead(Context::Values);
                    match t2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(err(format!("found '{l2}', expected: ',' or ')'"))),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.lookahead(Context::Values).0 {
                        Token::ClosedPar => {
                            values.push(String::new());
                            return Ok(values);
                        }
                        Token::Comma => {
                            self.consume(Context::Values);
                            values.push(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(err(format!("found '{lit}', expected: ',', or identifier"))),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, SelectorError> {
        if matches!(self.lookahead(Context::Values).0, Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier { Ok(vec![lit]) } else { Err(SelectorError::ParseLabel(format!("found '{lit}', expected: identifier"))) }
    }
}

// ---------------------------------------------------------------------------------------------
// Field selectors

/// A field selector term's operator. `==` parses as `Equals` (the real server prints it `=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    NotEquals,
}

/// One `field=value` / `field!=value` term, value unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

impl FieldRequirement {
    /// A missing field reads as the empty string, as in the real server (`f=` matches objects
    /// without `f`).
    pub fn matches(&self, actual: Option<&str>) -> bool {
        let equal = actual.unwrap_or("") == self.value;
        match self.operator {
            FieldOperator::Equals => equal,
            FieldOperator::NotEquals => !equal,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_field_value(&self.value))
    }
}

/// A field selector: terms ANDed. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` grammar as kube-apiserver does: terms split on unescaped
    /// commas (empty terms skipped), each split at its first `!=`, `==` or `=`; the field is
    /// taken verbatim (spaces included), the value unescaped (`\\`, `\,`, `\=`).
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let err = |m: String| SelectorError::ParseField(m);
        let mut requirements = Vec::new();
        // Terms are checked in sorted order, so the first bad one is the one the server names.
        let mut terms = split_field_terms(input);
        terms.sort_unstable();
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let Some((field, operator, raw)) = split_field_term(term) else {
                return Err(err(format!("invalid selector: '{input}'; can't understand '{term}'")));
            };
            let value = unescape_field_value(raw).map_err(err)?;
            requirements.push(FieldRequirement { field: field.to_string(), operator, value });
        }
        // Canonical order: by printed term, so print → parse gives the same list back.
        requirements.sort_by_cached_key(ToString::to_string);
        Ok(FieldSelector { requirements })
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object matches, reading its fields through `get` (field path → value as the
    /// server renders it: `metadata.name`, `status.phase`, `spec.unschedulable` as "true").
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| r.matches(get(&r.field).as_deref()))
    }

    /// The name if the selector is exactly `metadata.name=<name>` (what `kubectl get NAME -w`,
    /// `kubectl wait` and kube-rs `watch_object` send), so a list can become a get.
    pub fn single_name(&self) -> Option<&str> {
        match self.requirements.as_slice() {
            [r] if r.field == "metadata.name" && r.operator == FieldOperator::Equals => Some(&r.value),
            _ => None,
        }
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_comma_separated(f, &self.requirements)
    }
}

/// Splits on commas that are not escaped by a backslash (the backslash stays in the term).
fn split_field_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, operator) in [("!=", FieldOperator::NotEquals), ("==", FieldOperator::Equals), ("=", FieldOperator::Equals)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], operator, value));
            }
        }
    }
    None
}

fn unescape_field_value(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(format!("invalid field selector: invalid escape sequence: \\{c}")),
            }
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            // The real server prints the rune as a number here.
            ',' | '=' => return Err(format!("invalid field selector: unescaped character in value: {}", c as u32)),
            c => out.push(c),
        }
    }
    if escaped {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

/// Escapes a field selector value: `\` → `\\`, `,` → `\,`, `=` → `\=`.
pub fn escape_field_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexer_takes_longest_symbol_run() {
        let mut l = Lexer { s: b"a!=b==c=!(", pos: 0 };
        let toks: Vec<Token> = std::iter::from_fn(|| {
            let (t, _) = l.lex();
            (t != Token::End).then_some(t)
        })
        .collect();
        use Token::*;
        assert_eq!(toks, vec![Identifier, NotEquals, Identifier, DoubleEquals, Identifier, Equals, Bang, OpenPar]);
    }
}
