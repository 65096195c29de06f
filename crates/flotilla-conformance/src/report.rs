//! The outcome of a replay: per-area counts, every divergence with the allowlist row that
//! covers it (or none), stale rows, and whether the run passes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::allowlist::{Allowlist, Row};
use crate::diff::Divergence;

/// One replayed case.
#[derive(Clone, Debug)]
pub struct CaseResult {
    pub case: String,
    pub area: String,
    /// Each divergence with the index of the allowlist row that covers it.
    pub divergences: Vec<(Divergence, Option<usize>)>,
}

impl CaseResult {
    pub fn failing(&self) -> bool {
        self.divergences.iter().any(|(_, row)| row.is_none())
    }
}

/// Everything a replay found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub server: String,
    pub results: Vec<CaseResult>,
    pub allowlist: Allowlist,
    /// Rows that matched nothing (only judged on a full run).
    pub stale_rows: Vec<Row>,
    /// Things wrong with the suite itself: missing or outdated recordings, cases that could not run.
    pub problems: Vec<String>,
}

/// Counts for one area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AreaCount {
    pub cases: usize,
    /// No divergence at all.
    pub matching: usize,
    /// Only allowlisted divergences.
    pub allowlisted: usize,
    /// At least one divergence the allowlist does not name.
    pub failing: usize,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && self.stale_rows.is_empty() && !self.results.iter().any(CaseResult::failing)
    }

    pub fn by_area(&self) -> BTreeMap<String, AreaCount> {
        let mut out: BTreeMap<String, AreaCount> = BTreeMap::new();
        for r in &self.results {
            let c = out.entry(r.area.clone()).or_default();
            c.cases += 1;
            if r.divergences.is_empty() {
                c.matching += 1;
            } else if r.failing() {
                c.failing += 1;
            } else {
                c.allowlisted += 1;
            }
        }
        out
    }

    /// The human-readable report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ =
            writeln!(s, "Differential API conformance: {} cases replayed against Flotilla, compared with kube-apiserver {}", self.results.len(), self.server);
        let _ = writeln!(s);
        let _ = writeln!(s, "{:<16} {:>6} {:>9} {:>12} {:>8}", "area", "cases", "matching", "allowlisted", "failing");
        let mut total = AreaCount::default();
        for (area, c) in self.by_area() {
            let _ = writeln!(s, "{:<16} {:>6} {:>9} {:>12} {:>8}", area, c.cases, c.matching, c.allowlisted, c.failing);
            total.cases += c.cases;
            total.matching += c.matching;
            total.allowlisted += c.allowlisted;
            total.failing += c.failing;
        }
        let _ = writeln!(s, "{:<16} {:>6} {:>9} {:>12} {:>8}", "total", total.cases, total.matching, total.allowlisted, total.failing);
        let all: Vec<&(Divergence, Option<usize>)> = self.results.iter().flat_map(|r| r.divergences.iter()).collect();
        if !all.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(s, "Divergences ({}; case / step / path: recorded → flotilla):", all.len());
            for (d, row) in all {
                let tag = if row.is_some() { "allowed" } else { "FAILING" };
                let _ = write!(s, "  {tag} {} / {} / {}: {} → {}", d.case, d.step, d.path, show(&d.recorded), show(&d.flotilla));
                if let Some(r) = row.and_then(|i| self.allowlist.rows.get(i)) {
                    let _ = write!(s, "  [docs/conformance.md:{}: {}]", r.line, r.reason);
                }
                let _ = writeln!(s);
            }
        }
        if !self.stale_rows.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(s, "Stale allowlist rows (they match no divergence any more; delete them):");
            for r in &self.stale_rows {
                let _ = writeln!(s, "  docs/conformance.md:{}: | {} | {} | {} | {} |", r.line, r.case, r.step, r.path, r.reason);
            }
        }
        if !self.problems.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(s, "Problems:");
            for p in &self.problems {
                let _ = writeln!(s, "  {p}");
            }
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "RESULT: {}", if self.passed() { "PASS" } else { "FAIL" });
        s
    }
}

fn show(v: &Option<Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => {
            let text = serde_json::to_string(v).unwrap_or_default();
            if text.chars().count() > 200 { format!("{}…", text.chars().take(200).collect::<String>()) } else { text }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allowlist::Row;

    fn divergence(case: &str) -> Divergence {
        Divergence { case: case.into(), area: "a".into(), step: "1".into(), path: "status".into(), recorded: None, flotilla: None }
    }

    #[test]
    fn passes_only_without_failures_stale_rows_or_problems() {
        let allowed = CaseResult { case: "x".into(), area: "a".into(), divergences: vec![(divergence("x"), Some(0))] };
        let clean = CaseResult { case: "y".into(), area: "a".into(), divergences: vec![] };
        let row = Row { line: 7, case: "x".into(), step: "*".into(), path: "*".into(), reason: "known".into() };
        let mut o = Outcome { results: vec![allowed, clean], allowlist: crate::allowlist::Allowlist { rows: vec![row] }, ..Default::default() };
        assert!(o.passed());
        assert!(o.render().contains("allowed x / 1 / status: (absent) → (absent)  [docs/conformance.md:7: known]"));
        assert_eq!(o.by_area()["a"], AreaCount { cases: 2, matching: 1, allowlisted: 1, failing: 0 });
        o.stale_rows.push(Row { line: 1, case: "z".into(), step: "*".into(), path: "*".into(), reason: "r".into() });
        assert!(!o.passed());
        o.stale_rows.clear();
        o.results.push(CaseResult { case: "w".into(), area: "b".into(), divergences: vec![(divergence("w"), None)] });
        assert!(!o.passed());
        assert!(o.render().contains("FAILING w / 1 / status"));
    }
}
