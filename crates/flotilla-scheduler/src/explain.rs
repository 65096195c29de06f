//! `flotilla explain <kind>/<name>`: a scheduling pass rendered as a table — per cluster, each
//! filter plugin's verdict, the score, the room, the weight and the replicas it got; and the
//! same as JSON ([`explain_json`]) for the bindings' `explain` subresource the dashboard reads.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::binding::BindingView;
use crate::plugins::Verdict;
use crate::schedule::{Attempt, ClusterExplanation, Explanation, Outcome, ScheduleError, ScheduleResult};

/// Renders the outcome of [`crate::schedule()`] for `binding` as text.
pub fn explain_text(binding: &BindingView<'_>, outcome: &Result<ScheduleResult, ScheduleError>) -> String {
    let mut out = String::new();
    let resource = &binding.spec.resource;
    let _ = writeln!(out, "{binding}");
    let namespace = resource.namespace.as_deref().map(|ns| format!("{ns}/")).unwrap_or_default();
    let _ = writeln!(out, "  resource:  {} {} {namespace}{}", resource.api_version, resource.kind, resource.name);
    let explanation: &Explanation = match outcome {
        Ok(result) => &result.explanation,
        Err(error) => &error.explanation,
    };
    let strategy = match explanation.strategy {
        Some(strategy) => format!("{} ({} replicas)", strategy.as_str(), explanation.replicas),
        None => "not a workload: every selected cluster gets the whole object".to_string(),
    };
    let mode = explanation.mode.map(|m| format!(", {m:?} mode")).unwrap_or_default();
    let _ = writeln!(out, "  strategy:  {strategy}{mode}");
    match outcome {
        Ok(result) => {
            let placed: Vec<String> = result
                .clusters
                .iter()
                .map(|t| match t.replicas {
                    Some(r) => format!("{}:{r}", t.name),
                    None => t.name.clone(),
                })
                .collect();
            let term = result.affinity_name.as_deref().map(|n| format!(" (clusterAffinities term {n:?})")).unwrap_or_default();
            let _ = writeln!(out, "  result:    Scheduled{term} -> {}", if placed.is_empty() { "-".into() } else { placed.join(", ") });
        }
        Err(error) => {
            let _ = writeln!(out, "  result:    {}: {}", error.failure.reason().as_str(), error.failure);
        }
    }
    for attempt in &explanation.attempts {
        out.push('\n');
        render_attempt(&mut out, attempt);
    }
    out
}

/// The outcome of [`crate::schedule()`] for `binding` as a `BindingExplanation` document: the
/// result, the strategy, and per pass and cluster each filter's verdict and the outcome, with
/// the text [`explain_text`] prints.
pub fn explain_json(binding: &BindingView<'_>, outcome: &Result<ScheduleResult, ScheduleError>) -> Value {
    let explanation: &Explanation = match outcome {
        Ok(result) => &result.explanation,
        Err(error) => &error.explanation,
    };
    let result = match outcome {
        Ok(result) => json!({
            "scheduled": true,
            "affinityName": result.affinity_name,
            "clusters": result.clusters.iter().map(|t| json!({"name": t.name, "replicas": t.replicas})).collect::<Vec<_>>(),
        }),
        Err(error) => json!({"scheduled": false, "reason": error.failure.reason().as_str(), "message": error.failure.to_string()}),
    };
    let attempts: Vec<Value> = explanation
        .attempts
        .iter()
        .map(|a| {
            let clusters: Vec<Value> = a
                .clusters
                .iter()
                .map(|c| {
                    let filters: Vec<Value> = c
                        .filters
                        .iter()
                        .map(|v| match &v.verdict {
                            Verdict::Pass => json!({"plugin": v.plugin, "passed": true}),
                            Verdict::Fail(why) => json!({"plugin": v.plugin, "passed": false, "reason": why}),
                        })
                        .collect();
                    json!({
                        "name": c.name,
                        "filters": filters,
                        "score": c.score,
                        "availableReplicas": c.available_replicas.filter(|a| *a < i64::from(i32::MAX)),
                        "weight": c.weight,
                        "replicas": c.replicas,
                        "outcome": outcome_text(&c.outcome),
                    })
                })
                .collect();
            json!({"affinityName": a.affinity_name, "error": a.error, "clusters": clusters})
        })
        .collect();
    let resource = &binding.spec.resource;
    json!({
        "kind": "BindingExplanation",
        "apiVersion": "work.karmada.io/v1alpha2",
        "binding": binding.to_string(),
        "resource": {"apiVersion": resource.api_version, "kind": resource.kind, "namespace": resource.namespace, "name": resource.name},
        "strategy": explanation.strategy.map(|s| s.as_str()),
        "replicas": explanation.replicas,
        "mode": explanation.mode.map(|m| format!("{m:?}")),
        "result": result,
        "attempts": attempts,
        "text": explain_text(binding, outcome),
    })
}

fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Deleting => "skipped: cluster is being deleted".to_string(),
        Outcome::Filtered { plugin, reason } => format!("dropped by {plugin}: {reason}"),
        Outcome::NotSelected(why) => format!("kept, not selected: {why}"),
        Outcome::Selected => "selected".to_string(),
        Outcome::Undecided => "kept".to_string(),
    }
}

fn render_attempt(out: &mut String, attempt: &Attempt) {
    let title = match &attempt.affinity_name {
        Some(name) => format!("clusterAffinities term {name:?}"),
        None => "clusterAffinity".to_string(),
    };
    let _ = writeln!(out, "{title}{}", attempt.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default());
    let plugins: Vec<&'static str> =
        attempt.clusters.iter().find(|c| !c.filters.is_empty()).map(|c| c.filters.iter().map(|v| v.plugin).collect()).unwrap_or_default();
    let mut header: Vec<String> = vec!["CLUSTER".into()];
    header.extend(plugins.iter().map(|p| p.to_string()));
    header.extend(["SCORE", "AVAILABLE", "WEIGHT", "REPLICAS", "RESULT"].map(String::from));
    let rows: Vec<Vec<String>> = attempt.clusters.iter().map(|c| row(c, &plugins)).collect();
    let mut widths: Vec<usize> = header.iter().map(String::len).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for cells in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

fn row(cluster: &ClusterExplanation, plugins: &[&'static str]) -> Vec<String> {
    let opt = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    let mut cells = vec![cluster.name.clone()];
    for plugin in plugins {
        let cell = match cluster.filters.iter().find(|v| v.plugin == *plugin).map(|v| &v.verdict) {
            Some(Verdict::Pass) => "ok",
            Some(Verdict::Fail(_)) => "FAIL",
            None => "-",
        };
        cells.push(cell.to_string());
    }
    cells.push(opt(cluster.score));
    cells.push(opt(cluster.available_replicas.filter(|a| *a < i64::from(i32::MAX))));
    cells.push(opt(cluster.weight));
    cells.push(opt(cluster.replicas.map(i64::from)));
    cells.push(outcome_text(&cluster.outcome));
    cells
}
