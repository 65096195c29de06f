//! Resource quantities (`resource.Quantity`) as kube-apiserver reads and writes them.
//!
//! The real server keeps the text a client sent when that text is already "canonical enough"
//! (`"+1"`, `"0100"`, `"1.500"`, `"1e3"` and `"1E3"` all come back verbatim) and otherwise
//! writes the canonical form: the largest SI (`k`, `M`, …, `m`, `u`, `n`), binary (`Ki`…`Ei`)
//! or `e<N>` suffix that leaves an integer mantissa, with the exponent a multiple of three.
//! Resource lists (requests, limits, quota, limit ranges) are also rounded up to milli-units.
//! Every rule here was checked against a recorded kube-apiserver v1.37.2; the table lives in
//! `tests/data/defaults-golden/expected/quantities.json`.
//!
//! Arithmetic is exact: a value is a decimal digit string times a power of ten, so neither
//! `"99999999999999999999"` nor `"1.23456789012345678901"` loses a digit before the server's
//! own rounding rules apply.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use super::FieldError;
use super::zero_values::Object;

/// What the real server says when a quantity does not parse (a 400 BadRequest while decoding).
pub const QUANTITY_SYNTAX_ERROR: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// The three ways a quantity can be written; the canonical form keeps the family it was read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `k`, `M`, `G`, … and `m`, `u`, `n`, or no suffix.
    DecimalSi,
    /// `Ki`, `Mi`, … `Ei`.
    BinarySi,
    /// `e<N>` / `E<N>`.
    DecimalExponent,
}

/// A parsed quantity: sign, exact magnitude, format, and the original text when the real server
/// would keep it.
#[derive(Clone, Debug)]
pub struct Quantity {
    negative: bool,
    magnitude: Decimal,
    format: Format,
    /// The text as sent, kept only where kube-apiserver keeps it (its fast 64-bit path and an
    /// already canonical-looking spelling).
    verbatim: Option<String>,
}

/// The text is not a quantity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantityError;

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(QUANTITY_SYNTAX_ERROR)
    }
}

impl std::error::Error for QuantityError {}

/// Nano-units: the finest precision a quantity keeps.
const NANO: i32 = -9;
/// Milli-units: resource lists are rounded up to this (see [`Quantity::round_up`]).
pub const MILLI: i32 = -3;

impl Quantity {
    /// Parses `text` exactly as kube-apiserver's decoder does (no trimming: see
    /// [`Quantity::parse_json_text`]).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError);
        }
        if text == "0" {
            return Ok(Quantity { negative: false, magnitude: Decimal::zero(), format: Format::DecimalSi, verbatim: Some("0".to_owned()) });
        }
        let parts = Parts::split(text)?;
        let (base, exponent, format) = interpret_suffix(parts.suffix)?;

        // The fast path: the whole number fits a signed 64-bit integer at a scale of nano or
        // coarser. Only here does the server keep the original text.
        let precision = match format {
            Format::DecimalSi | Format::DecimalExponent => 18 - (parts.num.len() + parts.denom.len()) as i64,
            Format::BinarySi if exponent >= 0 && parts.denom.is_empty() => 15 - parts.num.len() as i64 - (i64::from(exponent) * 3 / 10) - 1,
            Format::BinarySi => -1,
        };
        if precision >= 0 {
            let scale = (if base == 10 { exponent } else { 0 }) - parts.denom.len() as i32;
            if scale >= NANO {
                let shifted = format!("{}{}", parts.num, parts.denom);
                let value: i64 = shifted.parse().map_err(|_| QuantityError)?;
                let mantissa: i64 = if base == 2 { 1i64 << exponent } else { 1 };
                if let Some(product) = value.checked_mul(mantissa) {
                    let keeps_text = match format {
                        Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
                        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                    };
                    return Ok(Quantity {
                        negative: !parts.positive,
                        magnitude: Decimal::from_u64(product.unsigned_abs(), scale),
                        format,
                        verbatim: keeps_text.then(|| text.to_owned()),
                    });
                }
            }
        }

        // The exact path: arbitrary size, rounded up to nano-units, binary capped at 2^63-1.
        let mut magnitude = Decimal::from_digits(parts.num, parts.denom);
        if base == 10 {
            magnitude.exp += exponent;
        } else {
            for _ in 0..exponent {
                magnitude.mul_small(2);
            }
        }
        if !magnitude.is_zero() {
            magnitude.round_up_to(NANO);
        }
        let mut format = format;
        if format == Format::BinarySi {
            let max = Decimal::from_u64(i64::MAX as u64, 0);
            if magnitude.cmp_value(&max) == Ordering::Greater {
                magnitude = max;
            }
            if !magnitude.is_zero() && magnitude.cmp_value(&Decimal::from_u64(1, 0)) == Ordering::Less {
                format = Format::DecimalSi;
            }
        }
        Ok(Quantity { negative: !parts.positive, magnitude, format, verbatim: None })
    }

    /// Parses the text of a JSON string or number the way the server's JSON decoder does
    /// (surrounding white space is ignored).
    pub fn parse_json_text(text: &str) -> Result<Quantity, QuantityError> {
        Quantity::parse(text.trim())
    }

    /// Rounds away from zero to a multiple of `10^scale` (what the server does to resource
    /// lists with `scale = -3`).
    pub fn round_up(&mut self, scale: i32) {
        if self.magnitude.exp >= scale {
            return;
        }
        self.verbatim = None;
        self.magnitude.round_up_to(scale);
    }

    /// The value as a signed comparison key (for equality of requests and limits).
    pub fn cmp_value(&self, other: &Quantity) -> Ordering {
        if self.is_zero() && other.is_zero() {
            return Ordering::Equal;
        }
        match (self.negative && !self.is_zero(), other.negative && !other.is_zero()) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.magnitude.cmp_value(&other.magnitude),
            (true, true) => other.magnitude.cmp_value(&self.magnitude),
        }
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.magnitude.is_zero()
    }

    /// The text the server writes for this quantity.
    pub fn to_text(&self) -> String {
        if let Some(text) = &self.verbatim {
            return text.clone();
        }
        if self.is_zero() {
            return "0".to_owned();
        }
        let mut format = self.format;
        if format == Format::BinarySi {
            let small = self.magnitude.cmp_value(&Decimal::from_u64(1024, 0)) == Ordering::Less;
            if small || !self.magnitude.is_integer() {
                format = Format::DecimalSi;
            }
        }
        let sign = if self.negative { "-" } else { "" };
        if format == Format::BinarySi {
            let (number, powers) = self.magnitude.integer_digits().strip_factors_of_1024();
            let suffix = BINARY_SUFFIXES.get(powers).copied().unwrap_or("");
            return format!("{sign}{}{suffix}", digits_to_string(&number));
        }
        let mut mantissa = self.magnitude.clone();
        mantissa.strip_trailing_zeros();
        match mantissa.exp % 3 {
            1 | -2 => {
                mantissa.mul_small(10);
                mantissa.exp -= 1;
            }
            2 | -1 => {
                mantissa.mul_small(100);
                mantissa.exp -= 2;
            }
            _ => {}
        }
        let suffix = match format {
            Format::DecimalExponent if mantissa.exp == 0 => String::new(),
            Format::DecimalExponent => format!("e{}", mantissa.exp),
            // An exponent without an SI name (above exa) gets no suffix at all: the real server
            // writes "1000E" as "1".
            _ => decimal_suffix(mantissa.exp).unwrap_or("").to_owned(),
        };
        format!("{sign}{}{suffix}", digits_to_string(&mantissa.digits))
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

fn decimal_suffix(exp: i32) -> Option<&'static str> {
    Some(match exp {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

/// `(base, exponent, format)` for a suffix.
fn interpret_suffix(suffix: &str) -> Result<(u32, i32, Format), QuantityError> {
    let decimal = |exp| Ok((10, exp, Format::DecimalSi));
    let binary = |exp| Ok((2, exp, Format::BinarySi));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            let exponent: i64 = suffix[1..].parse().map_err(|_| QuantityError)?;
            let exponent = i32::try_from(exponent).map_err(|_| QuantityError)?;
            Ok((10, exponent, Format::DecimalExponent))
        }
        _ => Err(QuantityError),
    }
}

/// A quantity's text cut into sign, integer digits (leading zeros removed, `"0"` if none),
/// fraction digits and suffix, following the server's scanner (which accepts `"1."` and `".5"`).
struct Parts<'a> {
    positive: bool,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

impl<'a> Parts<'a> {
    fn split(text: &'a str) -> Result<Parts<'a>, QuantityError> {
        let bytes = text.as_bytes();
        let end = bytes.len();
        let mut pos = 0;
        let mut positive = true;
        match bytes.first() {
            Some(b'-') => {
                positive = false;
                pos += 1;
            }
            Some(b'+') => pos += 1,
            _ => {}
        }
        while pos < end && bytes[pos] == b'0' {
            pos += 1;
        }
        if pos >= end {
            return Ok(Parts { positive, num: "0", denom: "", suffix: "" });
        }
        let num_start = pos;
        while pos < end && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let num = if pos == num_start { "0" } else { &text[num_start..pos] };
        let mut denom = "";
        if pos < end && bytes[pos] == b'.' {
            pos += 1;
            let denom_start = pos;
            while pos < end && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            denom = &text[denom_start..pos];
        }
        let suffix_start = pos;
        while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
            pos += 1;
        }
        if pos < end && (bytes[pos] == b'-' || bytes[pos] == b'+') {
            pos += 1;
        }
        while pos < end && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < end {
            return Err(QuantityError);
        }
        Ok(Parts { positive, num, denom, suffix: &text[suffix_start..] })
    }
}

/// An exact non-negative decimal: `digits × 10^exp`, digits most significant first, no leading
/// zeros (empty means zero).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decimal {
    digits: Vec<u8>,
    exp: i32,
}

impl Decimal {
    fn zero() -> Decimal {
        Decimal { digits: Vec::new(), exp: 0 }
    }

    fn from_u64(value: u64, exp: i32) -> Decimal {
        let digits = if value == 0 { Vec::new() } else { value.to_string().bytes().map(|b| b - b'0').collect() };
        Decimal { digits, exp }
    }

    /// `int.frac` from the scanner's digit strings.
    fn from_digits(int: &str, frac: &str) -> Decimal {
        let mut d = Decimal { digits: int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect(), exp: -(frac.len() as i32) };
        d.trim_leading_zeros();
        d
    }

    fn trim_leading_zeros(&mut self) {
        let first = self.digits.iter().position(|&d| d != 0).unwrap_or(self.digits.len());
        self.digits.drain(..first);
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    fn mul_small(&mut self, factor: u32) {
        let mut carry = 0u32;
        for digit in self.digits.iter_mut().rev() {
            let v = u32::from(*digit) * factor + carry;
            *digit = (v % 10) as u8;
            carry = v / 10;
        }
        while carry > 0 {
            self.digits.insert(0, (carry % 10) as u8);
            carry /= 10;
        }
    }

    fn strip_trailing_zeros(&mut self) {
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exp += 1;
        }
    }

    /// Rounds away from zero so that `exp >= scale`.
    fn round_up_to(&mut self, scale: i32) {
        if self.exp >= scale || self.is_zero() {
            return;
        }
        let drop = (scale - self.exp) as usize;
        let keep = self.digits.len().saturating_sub(drop);
        let inexact = self.digits[keep..].iter().any(|&d| d != 0);
        self.digits.truncate(keep);
        self.exp = scale;
        if inexact {
            self.add_one();
        }
        self.trim_leading_zeros();
    }

    fn add_one(&mut self) {
        for digit in self.digits.iter_mut().rev() {
            if *digit == 9 {
                *digit = 0;
            } else {
                *digit += 1;
                return;
            }
        }
        self.digits.insert(0, 1);
    }

    fn is_integer(&self) -> bool {
        if self.exp >= 0 {
            return true;
        }
        let fraction = (-self.exp) as usize;
        let start = self.digits.len().saturating_sub(fraction);
        self.digits[start..].iter().all(|&d| d == 0)
    }

    /// The integer part's digits (the value must be an integer).
    fn integer_digits(&self) -> IntegerDigits {
        let mut digits = self.digits.clone();
        if self.exp >= 0 {
            digits.extend(std::iter::repeat_n(0, self.exp as usize));
        } else {
            digits.truncate(digits.len().saturating_sub((-self.exp) as usize));
        }
        IntegerDigits(digits)
    }

    fn cmp_value(&self, other: &Decimal) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        // Magnitude of the leading digit first, then digit by digit.
        let top = |d: &Decimal| d.digits.len() as i64 + i64::from(d.exp);
        match top(self).cmp(&top(other)) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
        let len = self.digits.len().max(other.digits.len());
        for i in 0..len {
            let a = self.digits.get(i).copied().unwrap_or(0);
            let b = other.digits.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => {}
                unequal => return unequal,
            }
        }
        Ordering::Equal
    }
}

/// The decimal digits of a non-negative integer.
struct IntegerDigits(Vec<u8>);

impl IntegerDigits {
    /// Divides by 1024 while the division is exact and the value is at least 1024; returns the
    /// quotient and how many times it divided.
    fn strip_factors_of_1024(mut self) -> (Vec<u8>, usize) {
        let mut times = 0;
        loop {
            let (quotient, remainder) = self.div_small(1024);
            if remainder != 0 || quotient.is_empty() {
                return (self.0, times);
            }
            self.0 = quotient;
            times += 1;
        }
    }

    fn div_small(&self, divisor: u32) -> (Vec<u8>, u32) {
        let mut quotient = Vec::with_capacity(self.0.len());
        let mut remainder = 0u32;
        for &digit in &self.0 {
            let v = remainder * 10 + u32::from(digit);
            quotient.push((v / divisor) as u8);
            remainder = v % divisor;
        }
        let first = quotient.iter().position(|&d| d != 0).unwrap_or(quotient.len());
        quotient.drain(..first);
        (quotient, remainder)
    }
}

fn digits_to_string(digits: &[u8]) -> String {
    if digits.is_empty() {
        return "0".to_owned();
    }
    digits.iter().map(|&d| char::from(b'0' + d)).collect()
}

/// Rewrites the quantity in `value` as the server would write it; `resource_list` rounds up to
/// milli-units as the server does for requests, limits, quota and limit ranges.
pub(crate) fn canonicalize_value(value: &mut Value, path: &str, resource_list: bool) -> Result<(), FieldError> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(FieldError::undecodable(path, QUANTITY_SYNTAX_ERROR)),
    };
    let mut quantity = Quantity::parse_json_text(&text).map_err(|_| FieldError::undecodable(path, QUANTITY_SYNTAX_ERROR))?;
    if resource_list {
        quantity.round_up(MILLI);
    }
    *value = Value::String(quantity.to_text());
    Ok(())
}

/// A `*Quantity` field at `key` (absent stays absent).
pub(crate) fn canonicalize_field(o: &mut Object, key: &str, path: &str) -> Result<(), FieldError> {
    match o.get_mut(key) {
        None | Some(Value::Null) => Ok(()),
        Some(value) => canonicalize_value(value, &format!("{path}.{key}"), false),
    }
}

/// A `ResourceList` (map of resource name to quantity) at `key`: every value canonical and
/// rounded up to milli-units. A `null` value decodes as a zero quantity.
pub(crate) fn canonicalize_resource_list(o: &mut Object, key: &str, path: &str) -> Result<(), FieldError> {
    let Some(list) = o.get_mut(key).and_then(Value::as_object_mut) else {
        return Ok(());
    };
    for (name, value) in list.iter_mut() {
        if value.is_null() {
            *value = Value::from("0");
        }
        canonicalize_value(value, &format!("{path}.{key}[{name}]"), true)?;
    }
    Ok(())
}

/// The quantity at `key` in a resource list, if it parses.
pub(crate) fn resource_quantity(list: Option<&Object>, name: &str) -> Option<Quantity> {
    let value = list?.get(name)?;
    match value {
        Value::String(s) => Quantity::parse_json_text(s).ok(),
        Value::Number(n) => Quantity::parse_json_text(&n.to_string()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse_json_text(text).expect(text).to_text()
    }

    fn in_resource_list(text: &str) -> String {
        let mut q = Quantity::parse_json_text(text).expect(text);
        q.round_up(MILLI);
        q.to_text()
    }

    /// `(sent, as a plain quantity, inside a resource list)`, recorded from kube-apiserver
    /// v1.37.2 (the full recording is `tests/data/defaults-golden/expected/quantities.json`).
    const RECORDED: &[(&str, &str, &str)] = &[
        ("0", "0", "0"),
        ("0.0", "0", "0"),
        ("0Gi", "0", "0"),
        ("+1", "+1", "+1"),
        ("0100", "0100", "0100"),
        ("1.", "1.", "1."),
        ("1000", "1k", "1k"),
        ("1500", "1500", "1500"),
        ("1.500", "1.500", "1.500"),
        ("1.000", "1", "1"),
        (".5", "500m", "500m"),
        ("1000m", "1", "1"),
        ("100u", "100u", "1m"),
        ("0.0000000001", "1n", "1m"),
        ("1.0000000001", "1000000001n", "1001m"),
        ("1000k", "1M", "1M"),
        ("1000E", "1", "1"),
        ("1e3", "1e3", "1e3"),
        ("1E3", "1E3", "1E3"),
        ("12e-4", "1200e-6", "2e-3"),
        ("1.5e3", "1500", "1500"),
        ("1024Mi", "1Gi", "1Gi"),
        ("1.5Gi", "1536Mi", "1536Mi"),
        ("0.5Ki", "512", "512"),
        ("1.1Ki", "1126400m", "1126400m"),
        ("8Ei", "9223372036854775807", "9223372036854775807"),
        (" 1 ", "1", "1"),
        ("99999999999999999999", "99999999999999999999", "99999999999999999999"),
        ("1.23456789012345678901", "1234567891n", "1235m"),
    ];

    #[test]
    fn recorded_forms() {
        for (sent, plain, listed) in RECORDED {
            assert_eq!(canonical(sent), *plain, "plain quantity {sent:?}");
            assert_eq!(in_resource_list(sent), *listed, "resource list {sent:?}");
        }
    }

    #[test]
    fn rejects_what_the_server_rejects() {
        for text in ["", "abc", "1.5.5", "10 GB", "1Kb", "1K", "1e", "1i", "1m5", "--1", "1Ee3"] {
            assert_eq!(Quantity::parse_json_text(text).map(|q| q.to_text()), Err(QuantityError), "{text:?}");
        }
    }

    #[test]
    fn compares_values_not_spellings() {
        let q = |t| Quantity::parse(t).unwrap();
        assert_eq!(q("1").cmp_value(&q("1000m")), Ordering::Equal);
        assert_eq!(q("1Gi").cmp_value(&q("1024Mi")), Ordering::Equal);
        assert_eq!(q("1G").cmp_value(&q("1Gi")), Ordering::Less);
        assert_eq!(q("-1").cmp_value(&q("0")), Ordering::Less);
        assert_eq!(q("0").cmp_value(&q("-0")), Ordering::Equal);
    }
}
