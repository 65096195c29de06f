//! AggregateStatus: the status of a resource template, computed from the reflected statuses of
//! its member copies (`ResourceBinding.status.aggregatedStatus`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::status::{counter, put_counter};
use super::{AggregatedStatusItem, InterpretError, Native, Operation, unstructured};

/// The counters a workload aggregator sums: `(field, omitted when zero)`.
type Counters = &'static [(&'static str, bool)];

const DEPLOYMENT_SUMMED: Counters =
    &[("replicas", true), ("readyReplicas", true), ("updatedReplicas", true), ("availableReplicas", true), ("unavailableReplicas", true)];
const DAEMONSET_SUMMED: Counters = &[
    ("currentNumberScheduled", false),
    ("desiredNumberScheduled", false),
    ("numberAvailable", true),
    ("numberMisscheduled", false),
    ("numberReady", false),
    ("updatedNumberScheduled", true),
    ("numberUnavailable", true),
];
const STATEFULSET_SUMMED: Counters =
    &[("availableReplicas", false), ("currentReplicas", true), ("readyReplicas", true), ("replicas", false), ("updatedReplicas", true)];
const PDB_SUMMED: Counters = &[("currentHealthy", false), ("desiredHealthy", false), ("expectedPods", false), ("disruptionsAllowed", false)];
const HPA_SUMMED: Counters = &[("currentReplicas", true), ("desiredReplicas", false)];

/// AggregateStatus: the `.status` the template should have given the member statuses `items`
/// (`Ok(None)`: no aggregator for this kind; `Some(Value::Null)`: the template keeps having no
/// status). `now` (RFC 3339) stamps the conditions of an aggregated Job, the one place
/// Karmada reads the clock. Per kind (`apiVersion` and `kind`):
///
/// - `apps/v1` Deployment, DaemonSet, StatefulSet: the member counters summed;
///   `observedGeneration` becomes the template's `metadata.generation` only when every item
///   reports `observedGeneration ≥ generation` and `resourceTemplateGeneration ≥` the
///   template's generation (an item without a status counts against), and otherwise stays
///   what the template had;
/// - `batch/v1` Job: `active`/`succeeded`/`failed` summed, the earliest `startTime`, the latest
///   `completionTime` once every member completed, a `Failed` condition naming the failed
///   clusters or a `Complete` one when all completed; left alone once the template is finished;
/// - `batch/v1` CronJob: `active` concatenated, the latest `lastScheduleTime` and
///   `lastSuccessfulTime`;
/// - `v1` Service of type LoadBalancer, `networking.k8s.io/v1` Ingress: the load-balancer
///   ingresses of all members as they are, deduplicated and sorted as Karmada v1.18 does;
/// - `v1` Pod: phase Failed > Pending > Running > Succeeded over the members (no status yet
///   counts as Pending), with each member's container `ready`/`state`;
/// - `v1` PersistentVolume: phase Failed > Pending > Available > Bound > Released;
/// - `v1` PersistentVolumeClaim: Bound unless a member is Lost, else the last non-Bound phase;
/// - `policy/v1` PodDisruptionBudget: counters summed, `disruptedPods` keyed `cluster/pod`;
/// - `autoscaling/v2` HorizontalPodAutoscaler: `currentReplicas` and `desiredReplicas` summed.
///
/// The result is the template's status with the aggregated fields replaced, written as Go
/// writes the typed status; when nothing the aggregator compares changed it is the template's
/// status as it was.
pub fn aggregate_status(template: &Value, items: &[AggregatedStatusItem], now: &str) -> Result<Option<Value>, InterpretError> {
    let Some(native) = Native::of(template) else {
        return Ok(None);
    };
    let err = |field: String, reason: String| InterpretError::new(Operation::AggregateStatus, template, field, reason);
    let old = unstructured::nested_object(template, &["status"]).map_err(|e| err("status".into(), e))?;
    let old_value = old.map_or(Value::Null, |m| Value::Object(m.clone()));
    let old = old.cloned().unwrap_or_default();
    let generation = unstructured::get(template, &["metadata", "generation"]).and_then(Value::as_i64).unwrap_or(0);
    let members = Members::decode(items).map_err(|(field, reason)| err(field, reason))?;

    let new = match native {
        Native::Deployment => workload(&old, &members, generation, DEPLOYMENT_SUMMED),
        Native::DaemonSet => workload(&old, &members, generation, DAEMONSET_SUMMED),
        Native::StatefulSet => workload(&old, &members, generation, STATEFULSET_SUMMED),
        Native::Job => job(&old, &members, now),
        Native::CronJob => cron_job(&old, &members),
        Native::Service => {
            if unstructured::string(template, &["spec", "type"]) != Some("LoadBalancer") {
                return Ok(Some(old_value));
            }
            load_balancer(&members, true)
        }
        Native::Ingress => load_balancer(&members, false),
        Native::Pod => pod(&members),
        Native::PersistentVolume => Ok(Some(persistent_volume(&members))),
        Native::PersistentVolumeClaim => Ok(Some(persistent_volume_claim(&members))),
        Native::PodDisruptionBudget => pod_disruption_budget(&members),
        Native::HorizontalPodAutoscaler => sum_into(&old, &members, HPA_SUMMED).map(Some),
        _ => return Ok(None),
    }
    .map_err(|(field, reason)| err(field, reason))?;
    // `None` from an aggregator: the status stays as it is.
    Ok(Some(match new {
        Some(new) if Value::Object(new.clone()) != old_value && !(old_value.is_null() && new.is_empty()) => Value::Object(new),
        _ => old_value,
    }))
}

/// The decoded member statuses, in item order; `None` for an item without a status.
struct Members<'a> {
    items: Vec<(&'a str, Option<&'a Map<String, Value>>)>,
}

type AggregateResult<T> = Result<T, (String, String)>;

impl<'a> Members<'a> {
    fn decode(items: &'a [AggregatedStatusItem]) -> AggregateResult<Members<'a>> {
        let mut decoded = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let status = match &item.status {
                None | Some(Value::Null) => None,
                Some(Value::Object(m)) => Some(m),
                Some(other) => return Err((format!("items[{i}].status"), format!("expected an object, got {other}"))),
            };
            decoded.push((item.cluster_name.as_str(), status));
        }
        Ok(Members { items: decoded })
    }

    /// Items that have a status, with their index.
    fn reported(&self) -> impl Iterator<Item = (usize, &'a str, &'a Map<String, Value>)> + '_ {
        self.items.iter().enumerate().filter_map(|(i, (cluster, s))| s.map(|s| (i, *cluster, s)))
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

fn field_err(i: usize, field: &str, e: String) -> (String, String) {
    (format!("items[{i}].status.{field}"), e)
}

/// The sum of `field` over the members.
fn sum(members: &Members<'_>, field: &str) -> AggregateResult<i64> {
    members.reported().try_fold(0i64, |acc, (i, _, s)| Ok(acc.saturating_add(counter(s, field).map_err(|e| field_err(i, field, e))?)))
}

/// `old` with each of `counters` replaced by its sum over the members.
fn sum_into(old: &Map<String, Value>, members: &Members<'_>, counters: Counters) -> AggregateResult<Map<String, Value>> {
    let mut new = old.clone();
    for (field, omit_zero) in counters {
        put_counter(&mut new, field, sum(members, field)?, *omit_zero);
    }
    Ok(new)
}

/// Deployment / DaemonSet / StatefulSet: counters summed; `observedGeneration` set to the
/// template's generation once every member has caught up with it.
fn workload(old: &Map<String, Value>, members: &Members<'_>, generation: i64, counters: Counters) -> AggregateResult<Option<Map<String, Value>>> {
    let mut caught_up = 0;
    for (i, _, s) in members.reported() {
        let int = |f: &str| counter(s, f).map_err(|e| field_err(i, f, e));
        if int("observedGeneration")? >= int("generation")? && int("resourceTemplateGeneration")? >= generation {
            caught_up += 1;
        }
    }
    let mut new = sum_into(old, members, counters)?;
    let old_observed = counter(old, "observedGeneration").unwrap_or(0);
    let observed = if caught_up == members.len() { generation } else { old_observed };
    put_counter(&mut new, "observedGeneration", observed, true);
    Ok(Some(new))
}

/// The member's Job condition of type Complete or Failed with status True, if any.
fn finished(status: &Map<String, Value>) -> Option<&str> {
    status.get("conditions")?.as_array()?.iter().find_map(|c| {
        let ty = c.get("type")?.as_str()?;
        ((ty == "Complete" || ty == "Failed") && c.get("status")?.as_str()? == "True").then_some(ty)
    })
}

fn job(old: &Map<String, Value>, members: &Members<'_>, now: &str) -> AggregateResult<Option<Map<String, Value>>> {
    // A finished Job template is never updated again.
    if finished(old).is_some() {
        return Ok(None);
    }
    let mut new = Map::new();
    for field in ["active", "succeeded", "failed"] {
        put_counter(&mut new, field, sum(members, field)?, true);
    }
    let (mut succeeded, mut failed_in) = (0usize, Vec::new());
    let (mut start, mut completion, mut completed): (Option<&str>, Option<&str>, usize) = (None, None, 0);
    for (_, cluster, s) in members.reported() {
        match finished(s) {
            Some("Complete") => succeeded += 1,
            Some(_) => failed_in.push(cluster),
            None => {}
        }
        if let Some(t) = s.get("startTime").and_then(Value::as_str) {
            start = Some(start.map_or(t, |s| earlier(s, t)));
        }
        if let Some(t) = s.get("completionTime").and_then(Value::as_str) {
            completed += 1;
            completion = Some(completion.map_or(t, |c| later(c, t)));
        }
    }
    let mut conditions = Vec::new();
    if !failed_in.is_empty() {
        conditions.push(job_condition("Failed", "JobFailed", &format!("Job executed failed in member clusters {}", failed_in.join(",")), now));
    }
    if succeeded > 0 && succeeded == members.len() {
        conditions.push(job_condition("Complete", "Completed", "Job completed", now));
    }
    if !conditions.is_empty() {
        new.insert("conditions".into(), Value::Array(conditions));
    }
    if let Some(start) = start {
        new.insert("startTime".into(), Value::from(start));
    }
    if let Some(completion) = completion.filter(|_| completed == members.len()) {
        new.insert("completionTime".into(), Value::from(completion));
    }
    Ok(Some(new))
}

fn job_condition(ty: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": ty,
        "status": "True",
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    })
}

/// The earlier / later of two RFC 3339 times as Kubernetes writes them (UTC, `Z`), which
/// compare as text.
fn earlier<'a>(a: &'a str, b: &'a str) -> &'a str {
    if b < a { b } else { a }
}

fn later<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a < b { b } else { a }
}

fn cron_job(old: &Map<String, Value>, members: &Members<'_>) -> AggregateResult<Option<Map<String, Value>>> {
    let mut active = Vec::new();
    let (mut scheduled, mut succeeded): (Option<&str>, Option<&str>) = (None, None);
    for (_, _, s) in members.reported() {
        active.extend(s.get("active").and_then(Value::as_array).into_iter().flatten().cloned());
        if let Some(t) = s.get("lastScheduleTime").and_then(Value::as_str) {
            scheduled = Some(scheduled.map_or(t, |x| later(x, t)));
        }
        if let Some(t) = s.get("lastSuccessfulTime").and_then(Value::as_str) {
            succeeded = Some(succeeded.map_or(t, |x| later(x, t)));
        }
    }
    let mut new = old.clone();
    for (field, value) in [
        ("active", (!active.is_empty()).then_some(Value::Array(active))),
        ("lastScheduleTime", scheduled.map(Value::from)),
        ("lastSuccessfulTime", succeeded.map(Value::from)),
    ] {
        match value {
            Some(v) => new.insert(field.into(), v),
            None => new.remove(field),
        };
    }
    Ok(Some(new))
}

/// Service (LoadBalancer) and Ingress: every member's load-balancer ingresses, unchanged, as
/// Karmada v1.18's `DedupeAndSort{Service,Ingress}LoadBalancerIngress` combine them: entries with
/// the same hostname and IP (and, for a Service, `ipMode`) become one whose ports are the union
/// of theirs (by port, then protocol, then error, none first); the entries sorted by hostname
/// (empty last), then IP, then `ipMode` (none last).
fn load_balancer(members: &Members<'_>, with_ip_mode: bool) -> AggregateResult<Option<Map<String, Value>>> {
    type PortKey = (i64, String, Option<String>);
    let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
    let mut entries: BTreeMap<(bool, String, String, bool, String), (Value, BTreeMap<PortKey, Value>)> = BTreeMap::new();
    for (i, _, s) in members.reported() {
        let status = Value::Object(s.clone());
        let list = unstructured::nested_array(&status, &["loadBalancer", "ingress"]).map_err(|e| field_err(i, "loadBalancer.ingress", e))?;
        for ingress in list.into_iter().flatten() {
            let hostname = text(ingress, "hostname").unwrap_or_default();
            let ip_mode = if with_ip_mode { text(ingress, "ipMode") } else { None };
            let key = (hostname.is_empty(), hostname, text(ingress, "ip").unwrap_or_default(), ip_mode.is_none(), ip_mode.unwrap_or_default());
            let (_, ports) = entries.entry(key).or_insert_with(|| (ingress.clone(), BTreeMap::new()));
            for port in ingress.get("ports").and_then(Value::as_array).into_iter().flatten() {
                let key = (port.get("port").and_then(Value::as_i64).unwrap_or(0), text(port, "protocol").unwrap_or_default(), text(port, "error"));
                ports.entry(key).or_insert_with(|| port.clone());
            }
        }
    }
    let ingresses: Vec<Value> = entries
        .into_values()
        .map(|(mut ingress, ports)| {
            if let Some(m) = ingress.as_object_mut() {
                if ports.is_empty() {
                    m.remove("ports");
                } else {
                    m.insert("ports".into(), Value::Array(ports.into_values().collect()));
                }
            }
            ingress
        })
        .collect();
    let lb = if ingresses.is_empty() { json!({}) } else { json!({ "ingress": ingresses }) };
    Ok(Some(Map::from_iter([("loadBalancer".to_string(), lb)])))
}

fn pod(members: &Members<'_>) -> AggregateResult<Option<Map<String, Value>>> {
    if members.len() == 0 {
        return Ok(None);
    }
    let mut phases = BTreeSet::new();
    let mut containers = Vec::new();
    for (cluster_index, (_, status)) in members.items.iter().enumerate() {
        let Some(s) = status else {
            // No status collected yet: assume it is still pending.
            phases.insert("Pending");
            continue;
        };
        phases.insert(s.get("phase").and_then(Value::as_str).unwrap_or(""));
        let statuses = s.get("containerStatuses").and_then(Value::as_array);
        for (j, c) in statuses.into_iter().flatten().enumerate() {
            let ready = match c.get("ready") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(field_err(cluster_index, &format!("containerStatuses[{j}].ready"), format!("expected a bool, got {other}")));
                }
            };
            // Go writes the typed ContainerStatus{Ready, State}: its required fields empty.
            containers.push(json!({
                "name": "",
                "state": c.get("state").filter(|s| !s.is_null()).cloned().unwrap_or_else(|| json!({})),
                "lastState": {},
                "ready": ready,
                "restartCount": 0,
                "image": "",
                "imageID": "",
            }));
        }
    }
    let phase = ["Failed", "Pending", "Running", "Succeeded"].into_iter().find(|p| phases.contains(p));
    let mut new = Map::new();
    if let Some(phase) = phase {
        new.insert("phase".into(), Value::from(phase));
    }
    if !containers.is_empty() {
        new.insert("containerStatuses".into(), Value::Array(containers));
    }
    Ok(Some(new))
}

fn persistent_volume(members: &Members<'_>) -> Map<String, Value> {
    let phases: BTreeSet<&str> = members.items.iter().map(|(_, s)| s.map_or("Pending", |s| s.get("phase").and_then(Value::as_str).unwrap_or(""))).collect();
    let phase = ["Failed", "Pending", "Available", "Bound", "Released"].into_iter().find(|p| phases.contains(p));
    phase.map(|p| Map::from_iter([("phase".to_string(), Value::from(p))])).unwrap_or_default()
}

fn persistent_volume_claim(members: &Members<'_>) -> Map<String, Value> {
    let mut phase = "Bound";
    for (_, _, s) in members.reported() {
        let member = s.get("phase").and_then(Value::as_str).unwrap_or("");
        if member == "Lost" {
            phase = "Lost";
            break;
        }
        if member != "Bound" {
            phase = member;
        }
    }
    let mut new = Map::new();
    if !phase.is_empty() {
        new.insert("phase".into(), Value::from(phase));
    }
    new
}

fn pod_disruption_budget(members: &Members<'_>) -> AggregateResult<Option<Map<String, Value>>> {
    let mut new = Map::new();
    for (field, omit_zero) in PDB_SUMMED {
        put_counter(&mut new, field, sum(members, field)?, *omit_zero);
    }
    let mut disrupted = Map::new();
    for (_, cluster, s) in members.reported() {
        for (pod, time) in s.get("disruptedPods").and_then(Value::as_object).into_iter().flatten() {
            disrupted.insert(format!("{cluster}/{pod}"), time.clone());
        }
    }
    if !disrupted.is_empty() {
        new.insert("disruptedPods".into(), Value::Object(disrupted));
    }
    Ok(Some(new))
}
