//! KubeFed's admission duties (target v0.10.0): kubefed-admission-webhook validates
//! KubeFedCluster, KubeFedConfig and FederatedTypeConfig and defaults KubeFedConfig; the
//! FederatedTypeConfig defaults (plural and group from the FTC name) run here too, at admission,
//! where upstream applied them in its controllers. `Federated<Kind>` objects and
//! ReplicaSchedulingPreferences have no admission duties upstream (their CRD schema only).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{Defaulting, FieldError, FieldPath, GroupVersionKind, Reason, decode, go_url, path};
use crate::federation::kubefed::core::{FederatedTypeConfig, KubeFedCluster, KubeFedConfig, KubeFedConfigSpec, TlsValidation};

/// Feature gates of KubeFed v0.10 and whether each is on by default.
pub const FEATURE_GATES: [(&str, bool); 3] = [("PushReconciler", true), ("RawResourceStatusCollection", false), ("SchedulerPreferences", true)];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    KubeFedCluster,
    KubeFedConfig,
    FederatedTypeConfig,
}

fn kind(gvk: &GroupVersionKind) -> Option<Kind> {
    if gvk.group != "core.kubefed.io" || gvk.version != "v1beta1" {
        return None;
    }
    Some(match gvk.kind.as_str() {
        "KubeFedCluster" => Kind::KubeFedCluster,
        "KubeFedConfig" => Kind::KubeFedConfig,
        "FederatedTypeConfig" => Kind::FederatedTypeConfig,
        _ => return None,
    })
}

/// Whether `gvk` is a KubeFed kind with admission duties.
pub fn handles(gvk: &GroupVersionKind) -> bool {
    kind(gvk).is_some()
}

/// KubeFed's mutating step. Works on the JSON so that fields the defaults fill may be missing.
pub fn default(gvk: &GroupVersionKind, obj: &mut Value, _ctx: &mut Defaulting<'_>) -> Result<(), Vec<FieldError>> {
    let Some(object) = obj.as_object_mut() else {
        return Err(vec![FieldError::invalid("", "object expected")]);
    };
    match kind(gvk) {
        Some(Kind::KubeFedConfig) => default_kubefed_config(spec_of(object)),
        Some(Kind::FederatedTypeConfig) => {
            let name = object.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("");
            let name = name.to_string();
            default_federated_type_config(&name, spec_of(object));
        }
        Some(Kind::KubeFedCluster) | None => {}
    }
    Ok(())
}

/// KubeFed's validating step.
pub fn validate(gvk: &GroupVersionKind, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let result = match kind(gvk) {
        Some(Kind::KubeFedCluster) => decode::<KubeFedCluster>(obj).map(|c| validate_kubefed_cluster(&c)),
        Some(Kind::KubeFedConfig) => decode::<KubeFedConfig>(obj).and_then(|c| {
            let old = old.map(decode::<KubeFedConfig>).transpose()?;
            Ok(validate_kubefed_config(&c.spec, old.as_ref().map(|o| &o.spec)))
        }),
        Some(Kind::FederatedTypeConfig) => decode::<FederatedTypeConfig>(obj).map(|f| validate_federated_type_config(&f)),
        None => Ok(Vec::new()),
    };
    result.unwrap_or_else(|errors| errors)
}

fn spec_of(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let spec = object.entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    spec.as_object_mut().expect("spec is an object")
}

fn child<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let value = parent.entry(key).or_insert_with(|| json!({}));
    if !value.is_object() {
        *value = json!({});
    }
    value.as_object_mut().expect("child is an object")
}

fn set_default(object: &mut Map<String, Value>, key: &str, value: Value) {
    let slot = object.entry(key).or_insert(Value::Null);
    let empty = slot.is_null() || slot.as_str() == Some("");
    if empty {
        *slot = value;
    }
}

/// `SetDefaultKubeFedConfig`. Durations are written as Go prints them (`1m0s`).
pub(crate) fn default_kubefed_config(spec: &mut Map<String, Value>) {
    let durations = child(spec, "controllerDuration");
    set_default(durations, "availableDelay", json!("20s"));
    set_default(durations, "unavailableDelay", json!("1m0s"));
    set_default(durations, "cacheSyncTimeout", json!("5m0s"));
    let election = child(spec, "leaderElect");
    set_default(election, "leaseDuration", json!("15s"));
    set_default(election, "renewDeadline", json!("10s"));
    set_default(election, "retryPeriod", json!("5s"));
    set_default(election, "resourceLock", json!("configmaps"));
    let gates = spec.entry("featureGates").or_insert_with(|| json!([]));
    if let Some(gates) = gates.as_array_mut() {
        let present: BTreeSet<String> = gates.iter().filter_map(|g| g.get("name").and_then(Value::as_str)).map(str::to_string).collect();
        for (name, on) in FEATURE_GATES {
            if !present.contains(name) {
                let configuration = if on { "Enabled" } else { "Disabled" };
                gates.push(json!({"name": name, "configuration": configuration}));
            }
        }
    }
    let health = child(spec, "clusterHealthCheck");
    set_default(health, "period", json!("10s"));
    set_default(health, "failureThreshold", json!(3));
    set_default(health, "successThreshold", json!(1));
    set_default(health, "timeout", json!("3s"));
    let sync = child(spec, "syncController");
    set_default(sync, "maxConcurrentReconciles", json!(1));
    set_default(sync, "adoptResources", json!("Enabled"));
    set_default(child(spec, "statusController"), "maxConcurrentReconciles", json!(1));
}

/// `SetFederatedTypeConfigDefaults`: the FTC name `<plural>[.<group>]` gives the target's plural
/// and group; federated (and status) plurals come from their kinds; the status type's group and
/// version default to the federated type's.
fn default_federated_type_config(name: &str, spec: &mut Map<String, Value>) {
    let (plural, group) = match name.split_once('.') {
        Some((plural, group)) => (plural, Some(group)),
        None => (name, None),
    };
    let target = child(spec, "targetType");
    set_default(target, "pluralName", json!(plural));
    if let Some(group) = group {
        set_default(target, "group", json!(group));
    }
    let federated = child(spec, "federatedType");
    if let Some(kind) = federated.get("kind").and_then(Value::as_str).map(plural_name) {
        set_default(federated, "pluralName", json!(kind));
    }
    let (group, version) = (federated.get("group").cloned(), federated.get("version").cloned());
    if let Some(status) = spec.get_mut("statusType").and_then(Value::as_object_mut) {
        if let Some(kind) = status.get("kind").and_then(Value::as_str).map(plural_name) {
            set_default(status, "pluralName", json!(kind));
        }
        if let Some(group) = group {
            set_default(status, "group", group);
        }
        if let Some(version) = version {
            set_default(status, "version", version);
        }
    }
}

/// KubeFed's `PluralName`: lower-cased kind plus `es` after s, x, ch, sh, z or o, `ies` for a
/// trailing y, else `s`.
pub fn plural_name(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if let Some(stem) = lower.strip_suffix('y') {
        return format!("{stem}ies");
    }
    if ["s", "x", "ch", "sh", "z", "o"].iter().any(|end| lower.ends_with(end)) {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

fn validate_kubefed_cluster(cluster: &KubeFedCluster) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let at = path("spec");
    let endpoint = &cluster.spec.api_endpoint;
    if endpoint.is_empty() {
        errs.push(FieldError::required(at.child("apiEndpoint"), ""));
    } else {
        match go_url::parse(endpoint) {
            Err(e) => errs.push(FieldError::invalid(at.child("apiEndpoint"), e)),
            Ok(url) => {
                let port = url.port();
                if !port.is_empty() && !port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p)) {
                    errs.push(FieldError::invalid(at.child("apiEndpoint"), "port must be between 1 and 65535"));
                }
            }
        }
    }
    if cluster.spec.secret_ref.name.is_empty() {
        errs.push(FieldError::required(at.child("secretRef").child("name"), ""));
    }
    let validations = cluster.spec.disabled_tls_validations.as_deref().unwrap_or_default();
    if validations.contains(&TlsValidation::All) && validations.len() > 1 {
        errs.push(FieldError::invalid(at.child("disabledTLSValidations"), "when * is specified, it is expected to be the only option in list"));
    }
    errs
}

fn validate_kubefed_config(spec: &KubeFedConfigSpec, old: Option<&KubeFedConfigSpec>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let at = path("spec");
    if old.is_some_and(|old| old.scope != spec.scope) {
        errs.push(FieldError::invalid(at.child("scope"), "field is immutable"));
    }
    let mut positive_duration = |value: &Option<String>, at: FieldPath| -> Option<f64> {
        let text = value.as_deref()?;
        match go_duration_seconds(text) {
            Some(seconds) if seconds > 0.0 => Some(seconds),
            Some(_) => {
                errs.push(FieldError::invalid(at, "should be positive"));
                None
            }
            None => {
                errs.push(FieldError::invalid(at, format!("invalid duration {text:?}")));
                None
            }
        }
    };
    if let Some(d) = &spec.controller_duration {
        let at = at.child("controllerDuration");
        positive_duration(&d.available_delay, at.child("availableDelay"));
        positive_duration(&d.unavailable_delay, at.child("unavailableDelay"));
        positive_duration(&d.cache_sync_timeout, at.child("cacheSyncTimeout"));
    }
    let mut leader_errors = Vec::new();
    if let Some(l) = &spec.leader_elect {
        let at = at.child("leaderElect");
        let lease = positive_duration(&l.lease_duration, at.child("leaseDuration"));
        let renew = positive_duration(&l.renew_deadline, at.child("renewDeadline"));
        let retry = positive_duration(&l.retry_period, at.child("retryPeriod"));
        if let (Some(lease), Some(renew)) = (lease, renew)
            && lease <= renew
        {
            leader_errors.push(FieldError::invalid(at.child("leaseDuration"), "leaseDuration must be greater than renewDeadline"));
        }
        if let (Some(renew), Some(retry)) = (renew, retry)
            && renew <= retry * 1.2
        {
            leader_errors.push(FieldError::invalid(at.child("renewDeadline"), "renewDeadline must be greater than retryPeriod*JitterFactor(1.2)"));
        }
    }
    if let Some(h) = &spec.cluster_health_check {
        let at = at.child("clusterHealthCheck");
        positive_duration(&h.period, at.child("period"));
        positive_duration(&h.timeout, at.child("timeout"));
        for (value, name) in [(h.failure_threshold, "failureThreshold"), (h.success_threshold, "successThreshold")] {
            if value.is_some_and(|v| v <= 0) {
                errs.push(FieldError::invalid(at.child(name), "should be positive"));
            }
        }
    }
    errs.extend(leader_errors);
    let mut names = BTreeSet::new();
    for (i, gate) in spec.feature_gates.iter().flatten().enumerate() {
        let here = at.child("featureGates").index(i).child("name");
        if !FEATURE_GATES.iter().any(|(name, _)| *name == gate.name) {
            errs.push(FieldError::new(
                &here,
                Reason::NotSupported,
                "supported values: \"PushReconciler\", \"RawResourceStatusCollection\", \"SchedulerPreferences\"",
            ));
        }
        if !names.insert(gate.name.as_str()) {
            errs.push(FieldError::new(here, Reason::Duplicate, format!("{:?}", gate.name)));
        }
    }
    let workers = [
        (spec.sync_controller.as_ref().and_then(|s| s.max_concurrent_reconciles), "syncController"),
        (spec.status_controller.as_ref().and_then(|s| s.max_concurrent_reconciles), "statusController"),
    ];
    for (value, controller) in workers {
        if value.is_some_and(|v| v <= 0) {
            errs.push(FieldError::invalid(at.child(controller).child("maxConcurrentReconciles"), "should be positive"));
        }
    }
    errs
}

fn validate_federated_type_config(ftc: &FederatedTypeConfig) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &ftc.spec;
    let at = path("spec");
    let target = &spec.target_type;
    let expected = match target.group.as_deref().filter(|g| !g.is_empty()) {
        Some(group) => format!("{}.{group}", target.plural_name),
        None => target.plural_name.clone(),
    };
    if ftc.metadata.name.as_deref() != Some(expected.as_str()) {
        errs.push(FieldError::invalid("metadata.name", format!("name must be {expected:?}")));
    }
    for (field, resource) in [("targetType", target), ("federatedType", &spec.federated_type)] {
        let here = at.child(field);
        for (name, value) in [("version", &resource.version), ("kind", &resource.kind), ("pluralName", &resource.plural_name)] {
            if value.is_empty() {
                errs.push(FieldError::required(here.child(name), ""));
            }
        }
    }
    if !spec.federated_type.group.as_deref().unwrap_or("").contains('.') {
        errs.push(FieldError::invalid(at.child("federatedType").child("group"), "should be a domain with at least one dot"));
    }
    errs
}

/// Go's `time.ParseDuration`, in seconds; `None` when the text is not a duration.
/// A Go duration string (`1m30s`, `500ms`, `-2h`) in seconds; `None` when malformed.
pub fn go_duration_seconds(text: &str) -> Option<f64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0.0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    Some(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration_seconds("1m0s"), Some(60.0));
        assert_eq!(go_duration_seconds("1.5h"), Some(5400.0));
        assert_eq!(go_duration_seconds("300ms"), Some(0.3));
        assert_eq!(go_duration_seconds("10"), None);
        assert_eq!(go_duration_seconds("-5s"), Some(-5.0));
    }

    #[test]
    fn plurals() {
        assert_eq!(plural_name("FederatedDeployment"), "federateddeployments");
        assert_eq!(plural_name("FederatedIngress"), "federatedingresses");
        assert_eq!(plural_name("FederatedNetworkPolicy"), "federatednetworkpolicies");
    }
}
