//! The two whole-suite operations: record every case against a real kube-apiserver, and replay
//! every case against Flotilla in-process and judge the result against the recordings and the
//! allowlist.

use std::path::PathBuf;

use futures::StreamExt;

use crate::allowlist::{Allowlist, glob};
use crate::case::{self, Case};
use crate::diff::{self, Divergence};
use crate::exec;
use crate::recording::{self, Transcript};
use crate::report::{CaseResult, Outcome};
use crate::target::{InProcess, Target};

/// Why the suite could not run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error(transparent)]
    Cases(#[from] case::CaseError),
    #[error("{path}: {message}")]
    Allowlist { path: String, message: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    Exec(#[from] exec::ExecError),
    #[error(transparent)]
    Target(#[from] crate::target::TargetError),
    #[error("recording: {0}")]
    Record(String),
}

/// Where the suite's files are.
#[derive(Clone, Debug)]
pub struct Paths {
    pub cases: PathBuf,
    pub recorded: PathBuf,
    pub doc: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        let root = crate::repo_root();
        Paths { cases: root.join("conformance/cases"), recorded: root.join("conformance/recorded"), doc: root.join("docs/conformance.md") }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Glob over case ids; `None` runs everything (and judges stale allowlist rows).
    pub only: Option<String>,
    /// Cases run at once (cases that compact storage always run alone).
    pub concurrency: usize,
}

impl Default for Selection {
    fn default() -> Self {
        Selection { only: None, concurrency: 8 }
    }
}

fn selected(cases: Vec<Case>, sel: &Selection) -> Vec<Case> {
    cases.into_iter().filter(|c| sel.only.as_deref().is_none_or(|g| glob(g, &c.id))).collect()
}

/// Run cases against one target: concurrently, except those that compact storage, which run
/// one at a time after the rest. Results come back in case order.
async fn run_all(target: &dyn Target, cases: &[Case], server: &str, concurrency: usize) -> Vec<Result<Transcript, exec::ExecError>> {
    let (alone, together): (Vec<_>, Vec<_>) = cases.iter().enumerate().partition(|(_, c)| c.compacts());
    let mut out: Vec<(usize, Result<Transcript, exec::ExecError>)> = futures::stream::iter(together)
        .map(|(i, c)| async move { (i, exec::run_case(target, c, server).await) })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for (i, c) in alone {
        out.push((i, exec::run_case(target, c, server).await));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// `gitVersion` from `/version`.
async fn server_version(target: &dyn Target) -> Result<String, SuiteError> {
    let req = http::Request::builder().uri("/version").body(bytes::Bytes::new()).map_err(|e| SuiteError::Record(e.to_string()))?;
    let resp = target.send(req).await?;
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.map_err(|e| SuiteError::Record(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| SuiteError::Record(format!("/version: {e}")))?;
    Ok(v["gitVersion"].as_str().unwrap_or("unknown").to_string())
}

/// Replay the cases against Flotilla in-process and judge them.
pub async fn replay(paths: &Paths, sel: &Selection) -> Result<Outcome, SuiteError> {
    let cases = selected(case::load_dir(&paths.cases)?, sel);
    let doc = std::fs::read_to_string(&paths.doc).map_err(|source| SuiteError::Io { path: paths.doc.display().to_string(), source })?;
    let allowlist = Allowlist::parse(&doc).map_err(|message| SuiteError::Allowlist { path: paths.doc.display().to_string(), message })?;
    let target = InProcess::start().await?;
    let flotilla_version = server_version(&target).await?;
    let mut outcome = Outcome { allowlist, ..Default::default() };
    let mut servers = std::collections::BTreeSet::new();
    let replays = run_all(&target, &cases, &flotilla_version, sel.concurrency).await;
    let mut used = vec![false; outcome.allowlist.rows.len()];
    for (c, replay) in cases.iter().zip(replays) {
        let recorded = match recording::read(&paths.recorded, &c.id) {
            Ok(Some(t)) => t,
            Ok(None) => {
                outcome.problems.push(format!("{}: no recording; run scripts/regen-conformance.sh --only {}", c.id, c.id));
                continue;
            }
            Err(e) => {
                outcome.problems.push(format!("{}: unreadable recording: {e}", c.id));
                continue;
            }
        };
        if recorded.digest != c.digest {
            outcome.problems.push(format!("{}: the case changed since it was recorded; run scripts/regen-conformance.sh --only {}", c.id, c.id));
            continue;
        }
        servers.insert(recorded.server.clone());
        let replay = match replay {
            Ok(t) => t,
            Err(e) => {
                outcome.problems.push(format!("{}: could not run against Flotilla: {e}", c.id));
                continue;
            }
        };
        let divergences: Vec<(Divergence, Option<usize>)> = diff::transcripts(&recorded, &replay)
            .into_iter()
            .map(|d| {
                let row = outcome.allowlist.find(&d);
                if let Some(i) = row {
                    used[i] = true;
                }
                (d, row)
            })
            .collect();
        outcome.results.push(CaseResult { case: c.id.clone(), area: c.area.clone(), divergences });
    }
    outcome.server = servers.into_iter().collect::<Vec<_>>().join(", ");
    if sel.only.is_none() {
        outcome.stale_rows = outcome.allowlist.rows.iter().zip(&used).filter(|(_, u)| !**u).map(|(r, _)| r.clone()).collect();
        let ids: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.id.as_str()).collect();
        if let Ok(recorded) = recording::recorded_ids(&paths.recorded) {
            for r in recorded.iter().filter(|r| !ids.contains(r.as_str())) {
                outcome.problems.push(format!("conformance/recorded/{r}.json has no case; delete it"));
            }
        }
    }
    Ok(outcome)
}

/// What a recording run did.
#[derive(Clone, Debug, Default)]
pub struct RecordSummary {
    pub written: usize,
    /// With `check`: cases whose fresh answer differs from the committed recording.
    pub changed: Vec<(String, Vec<Divergence>)>,
}

/// Record the cases against a real kube-apiserver. A step error (a capture that found nothing,
/// a request that could not be built) means the case is wrong, and fails the recording. With
/// `check`, nothing is written: fresh answers are compared with the committed recordings
/// (a determinism check).
pub async fn record(paths: &Paths, target: &dyn Target, sel: &Selection, check: bool) -> Result<RecordSummary, SuiteError> {
    let cases = selected(case::load_dir(&paths.cases)?, sel);
    let server = server_version(target).await?;
    let mut summary = RecordSummary::default();
    let results = run_all(target, &cases, &server, sel.concurrency).await;
    let mut errors = Vec::new();
    for (c, t) in cases.iter().zip(results) {
        let t = t?;
        let case_errors: Vec<String> = t.steps.iter().filter_map(|s| s.error.as_ref().map(|e| format!("{} / {}: {e}", c.id, s.step))).collect();
        if check {
            let old = recording::read(&paths.recorded, &c.id).map_err(|source| SuiteError::Io { path: c.id.clone(), source })?;
            let diffs = match &old {
                Some(old) => diff::transcripts(old, &t),
                None => vec![],
            };
            if !diffs.is_empty() || old.is_none() {
                summary.changed.push((c.id.clone(), diffs));
            }
        } else if case_errors.is_empty() {
            recording::write(&paths.recorded, &t).map_err(|source| SuiteError::Io { path: paths.recorded.display().to_string(), source })?;
            summary.written += 1;
        }
        errors.extend(case_errors);
    }
    if !errors.is_empty() {
        return Err(SuiteError::Record(format!("steps failed against the real server (fix the cases):\n  {}", errors.join("\n  "))));
    }
    Ok(summary)
}
