//! The differential conformance gate: every case replayed against Flotilla's API server
//! in-process and compared with what kube-apiserver answered when it was recorded. Fails on
//! any divergence the allowlist in docs/conformance.md does not name, on stale allowlist rows,
//! and on missing or outdated recordings. No testenv needed (recordings are committed).
//!
//! `harness = false`: the report (per-area counts, every divergence) is always printed.

use std::process::ExitCode;

use flotilla_conformance::case;
use flotilla_conformance::suite::{self, Paths, Selection};

/// The floor: at least 150 cases, and a minimum per area.
const MIN_CASES: usize = 150;
const MIN_PER_AREA: usize = 8;

fn main() -> ExitCode {
    let paths = Paths::default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let outcome = match runtime.block_on(suite::replay(&paths, &Selection::default())) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("differential conformance could not run: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", outcome.render());
    let mut ok = outcome.passed();
    let cases = case::load_dir(&paths.cases).expect("cases load (replay loaded them)");
    if cases.len() < MIN_CASES {
        println!("FAIL: {} cases, want at least {MIN_CASES}", cases.len());
        ok = false;
    }
    for (area, count) in outcome.by_area() {
        if count.cases < MIN_PER_AREA {
            println!("FAIL: area {area} has {} cases, want at least {MIN_PER_AREA}", count.cases);
            ok = false;
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
