//! What the benchmarks share (`sim-bench` here, `propagation-bench` in the flotilla crate):
//! percentiles, the process's CPU time, the machine's load average, and an error collector.

use std::time::Duration;

use parking_lot::Mutex;

/// The `p` quantile (0..=1) of `sorted`, nearest rank; zero when empty.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The process's CPU time so far (user + system).
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The 1, 5 and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").ok().map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")).unwrap_or_default()
}

/// Errors seen during a run; a benchmark fails on any, never on its figures.
#[derive(Default)]
pub struct Errors(Mutex<Vec<String>>);

impl Errors {
    /// Record an error; the first 20 are printed as they happen.
    pub fn add(&self, e: String) {
        let mut all = self.0.lock();
        if all.len() < 20 {
            eprintln!("ERROR: {e}");
        }
        all.push(e);
    }

    pub fn count(&self) -> usize {
        self.0.lock().len()
    }

    pub fn into_inner(self) -> Vec<String> {
        self.0.into_inner()
    }
}
