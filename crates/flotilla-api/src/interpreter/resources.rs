//! The resources one replica requests, as Karmada computes them (`util.Resource`,
//! `AddPodTemplateRequest`): container requests defaulted from limits, summed over the app
//! containers, raised to the largest init container request resource by resource, plus the pod
//! overhead; amounts held as integers (CPU in milli-units, everything else in units, each
//! rounded up) and written back as Go writes `resource.NewMilliQuantity` /
//! `resource.NewQuantity` (`1500m`, `2`, `128Mi`, `1k`).
//!
//! Like Karmada, restartable init containers (sidecars) count as ordinary init containers.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Map, Value};

use crate::defaults::quantity::Quantity as ParsedQuantity;
use crate::selector::label_key_errors;

/// A resource total, per resource name.
#[derive(Debug, Default)]
pub(crate) struct Amounts {
    milli_cpu: i64,
    memory: i64,
    ephemeral_storage: i64,
    pods: i64,
    scalars: BTreeMap<String, i64>,
}

/// How a resource is counted, by name.
enum Slot<'a> {
    MilliCpu,
    Memory,
    EphemeralStorage,
    Pods,
    Scalar(&'a str),
    Ignored,
}

fn slot(name: &str) -> Slot<'_> {
    match name {
        "cpu" => Slot::MilliCpu,
        "memory" => Slot::Memory,
        "ephemeral-storage" => Slot::EphemeralStorage,
        "pods" => Slot::Pods,
        _ if is_scalar_resource(name) => Slot::Scalar(name),
        _ => Slot::Ignored,
    }
}

/// Kubernetes' `IsScalarResourceName`: extended resources (`example.com/gpu`), huge pages,
/// prefixed native resources (`kubernetes.io/...`) and attachable volumes.
fn is_scalar_resource(name: &str) -> bool {
    let prefixed_native = name.contains("kubernetes.io/");
    let native = !name.contains('/') || prefixed_native;
    let extended = !native && !name.starts_with("requests.") && label_key_errors(&format!("requests.{name}")).is_empty();
    extended || name.starts_with("hugepages-") || prefixed_native || name.starts_with("attachable-volumes-")
}

impl Amounts {
    fn value_mut(&mut self, slot: Slot<'_>) -> Option<&mut i64> {
        Some(match slot {
            Slot::MilliCpu => &mut self.milli_cpu,
            Slot::Memory => &mut self.memory,
            Slot::EphemeralStorage => &mut self.ephemeral_storage,
            Slot::Pods => &mut self.pods,
            Slot::Scalar(name) => self.scalars.entry(name.to_string()).or_default(),
            Slot::Ignored => return None,
        })
    }

    /// `Resource.Add`.
    pub(crate) fn add(&mut self, list: &Map<String, Value>, field: &str) -> Result<(), String> {
        for (name, quantity) in list {
            let scale = if name == "cpu" { -3 } else { 0 };
            let amount = scaled(quantity, scale).map_err(|e| format!("{field}[{name}]: {e}"))?;
            if let Some(total) = self.value_mut(slot(name)) {
                *total = total.saturating_add(amount);
            }
        }
        Ok(())
    }

    /// `Resource.SetMaxResource`.
    fn set_max(&mut self, list: &Map<String, Value>, field: &str) -> Result<(), String> {
        for (name, quantity) in list {
            let scale = if name == "cpu" { -3 } else { 0 };
            let amount = scaled(quantity, scale).map_err(|e| format!("{field}[{name}]: {e}"))?;
            if let Some(total) = self.value_mut(slot(name)) {
                *total = (*total).max(amount);
            }
        }
        Ok(())
    }

    /// `Resource.ResourceList`: the non-zero amounts; `None` when there are none.
    pub(crate) fn into_list(self) -> Option<BTreeMap<String, Quantity>> {
        let mut list = BTreeMap::new();
        let mut put = |name: &str, text: String| list.insert(name.to_string(), Quantity(text));
        if self.milli_cpu > 0 {
            put("cpu", decimal(i128::from(self.milli_cpu), -3));
        }
        if self.memory > 0 {
            put("memory", binary(self.memory));
        }
        if self.ephemeral_storage > 0 {
            put("ephemeral-storage", binary(self.ephemeral_storage));
        }
        if self.pods > 0 {
            put("pods", decimal(i128::from(self.pods), 0));
        }
        for (name, amount) in &self.scalars {
            if *amount > 0 {
                let text = if name.starts_with("hugepages-") { binary(*amount) } else { decimal(i128::from(*amount), 0) };
                put(name, text);
            }
        }
        (!list.is_empty()).then_some(list)
    }
}

/// The effective request of one replica of `pod_spec` (a PodSpec object), or `None` when it
/// requests nothing. Errors read `<field>: <reason>`, fields prefixed with `path`.
pub(crate) fn pod_request(pod_spec: &Value, path: &str) -> Result<Option<BTreeMap<String, Quantity>>, String> {
    let mut total = Amounts::default();
    for (list, max) in [("containers", false), ("initContainers", true)] {
        let Some(containers) = pod_spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, container) in containers.iter().enumerate() {
            let field = format!("{path}.{list}[{i}].resources");
            let requests = effective_requests(container.get("resources"), &field)?;
            if max { total.set_max(&requests, &field)? } else { total.add(&requests, &field)? }
        }
    }
    if let Some(overhead) = pod_spec.get("overhead") {
        let field = format!("{path}.overhead");
        total.add(resource_list(Some(overhead), &field)?, &field)?;
    }
    Ok(total.into_list())
}

/// A container's requests with every limit that has no request added as the request.
fn effective_requests(resources: Option<&Value>, field: &str) -> Result<Map<String, Value>, String> {
    let requests = resource_list(resources.and_then(|r| r.get("requests")), &format!("{field}.requests"))?;
    let mut effective = requests.clone();
    if let Some(limits) = resources.and_then(|r| r.get("limits")).filter(|l| !l.is_null()) {
        for (name, limit) in resource_list(Some(limits), &format!("{field}.limits"))? {
            effective.entry(name.clone()).or_insert_with(|| limit.clone());
        }
    }
    Ok(effective)
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

fn resource_list<'a>(value: Option<&'a Value>, field: &str) -> Result<&'a Map<String, Value>, String> {
    match value {
        None | Some(Value::Null) => Ok(&EMPTY),
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(format!("{field}: expected a resource list, got {other}")),
    }
}

/// A quantity's value in milli-units, rounded up away from zero as `MilliValue` rounds
/// (`500m` → 500, `1Gi` → 1073741824000), or why the text is not a quantity.
pub fn milli_value(text: &str) -> Result<i64, String> {
    scaled(&Value::String(text.to_string()), -3)
}

/// The quantity's value in units of `10^scale`, rounded up away from zero (`MilliValue` for
/// `scale = -3`, `Value` for `0`), saturating at the `i64` range.
fn scaled(quantity: &Value, scale: i32) -> Result<i64, String> {
    let text = match quantity {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        other => return Err(format!("not a quantity: {other}")),
    };
    ParsedQuantity::parse(&text).map_err(|e| e.to_string())?;
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text.as_str()),
    };
    let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let frac = frac.trim_end_matches('0');
    let (mut exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        exponent => (exponent[1..].parse().map_err(|_| format!("bad exponent in {text:?}"))?, 0),
    };
    exp10 -= frac.len() as i32;
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    // Keep at most 36 significant digits; what is dropped only matters for rounding up.
    let (kept, dropped) = digits.split_at(digits.len().min(36));
    let inexact_tail = dropped.bytes().any(|b| b != b'0');
    exp10 += dropped.len() as i32;
    let mantissa: u128 = kept.parse().map_err(|_| format!("bad number in {text:?}"))?;
    let mut value = mantissa.saturating_mul(1u128 << exp2);
    let shift = exp10 - scale;
    let mut round_up = inexact_tail;
    if shift >= 0 {
        value = 10u128.checked_pow(shift as u32).and_then(|p| value.checked_mul(p)).unwrap_or(u128::MAX);
    } else {
        match 10u128.checked_pow((-shift) as u32) {
            Some(divisor) => {
                round_up |= !value.is_multiple_of(divisor);
                value /= divisor;
            }
            None => {
                round_up |= value != 0;
                value = 0;
            }
        }
    }
    if round_up {
        value = value.saturating_add(1);
    }
    let magnitude = i64::try_from(value).unwrap_or(i64::MAX);
    Ok(if negative { -magnitude } else { magnitude })
}

/// Go's canonical text of the decimal quantity `mantissa × 10^exp`: trailing zeros folded into
/// the exponent, the exponent brought down to a multiple of three, then an SI suffix.
fn decimal(mantissa: i128, exp: i32) -> String {
    let (mut m, mut e) = (mantissa, exp);
    while m.abs() >= 10 && m % 10 == 0 {
        m /= 10;
        e += 1;
    }
    match e.rem_euclid(3) {
        1 => {
            m *= 10;
            e -= 1;
        }
        2 => {
            m *= 100;
            e -= 2;
        }
        _ => {}
    }
    let suffix = match e {
        -9 => "n".to_string(),
        -6 => "u".to_string(),
        -3 => "m".to_string(),
        0 => String::new(),
        3 => "k".to_string(),
        6 => "M".to_string(),
        9 => "G".to_string(),
        12 => "T".to_string(),
        15 => "P".to_string(),
        18 => "E".to_string(),
        other => format!("e{other}"),
    };
    format!("{m}{suffix}")
}

/// Go's canonical text of a whole-unit `BinarySI` quantity: values under 1024 are written as
/// decimal, others with the largest `Ki`..`Ei` suffix that divides them.
fn binary(value: i64) -> String {
    if value > -1024 && value < 1024 {
        return decimal(i128::from(value), 0);
    }
    let (mut m, mut powers) = (value, 0usize);
    while m.abs() >= 1024 && m % 1024 == 0 {
        m /= 1024;
        powers += 1;
    }
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    format!("{m}{}", SUFFIXES[powers])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scaled_values_round_up() {
        let cases: &[(Value, i32, i64)] = &[
            (json!("100m"), -3, 100),
            (json!("1"), -3, 1000),
            (json!(2), -3, 2000),
            (json!("0.5"), -3, 500),
            (json!("1.0005"), -3, 1001),
            (json!("1u"), -3, 1),
            (json!("128Mi"), 0, 134_217_728),
            (json!("1Gi"), 0, 1 << 30),
            (json!("1k"), 0, 1000),
            (json!("1500m"), 0, 2),
            (json!("1e3"), 0, 1000),
            (json!("12e-1"), 0, 2),
            (json!("0"), 0, 0),
            (json!("8Ei"), 0, i64::MAX),
        ];
        for (q, scale, want) in cases {
            assert_eq!(scaled(q, *scale), Ok(*want), "{q} at 10^{scale}");
        }
        assert!(scaled(&json!("1Kb"), 0).is_err());
    }

    #[test]
    fn canonical_forms_match_go() {
        // resource.NewMilliQuantity(v, DecimalSI).String()
        for (milli, want) in [(1500, "1500m"), (2000, "2"), (100, "100m"), (10_000, "10"), (1_000_000, "1k"), (1, "1m")] {
            assert_eq!(decimal(milli, -3), want, "{milli}m");
        }
        // resource.NewQuantity(v, BinarySI).String()
        for (v, want) in [(134_217_728, "128Mi"), (1000, "1k"), (1023, "1023"), (1500, "1500"), (1 << 30, "1Gi"), (1_610_612_736, "1536Mi")] {
            assert_eq!(binary(v), want, "{v}");
        }
        // resource.NewQuantity(v, DecimalSI).String()
        for (v, want) in [(110, "110"), (1000, "1k"), (2, "2"), (1_500_000, "1500k")] {
            assert_eq!(decimal(v, 0), want, "{v}");
        }
    }

    #[test]
    fn scalar_resource_names() {
        for name in ["nvidia.com/gpu", "hugepages-2Mi", "kubernetes.io/foo", "attachable-volumes-aws-ebs"] {
            assert!(is_scalar_resource(name), "{name}");
        }
        for name in ["foo", "requests.example.com/x", "example.com/bad name"] {
            assert!(!is_scalar_resource(name), "{name}");
        }
    }
}
