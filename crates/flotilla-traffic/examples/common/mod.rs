//! What the traffic benchmarks share: client tasks run for a while against one server, their
//! results summed, and the table of rounds with the ratio of the best ones.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the clients of one run counted.
pub struct Run {
    /// Requests (or queries) answered, right or wrong.
    pub count: u64,
    /// Wrong or missing answers.
    pub errors: u64,
    /// Every answer's latency, sorted.
    pub latencies: Vec<Duration>,
    pub wall: Duration,
}

/// Runs `clients` tasks, `client(i, stop)` each returning (answers, errors, latencies), for
/// `seconds`, then raises `stop` and sums what they counted.
pub async fn run_clients<F, Fut>(clients: usize, seconds: f64, client: F) -> Run
where
    F: Fn(usize, Arc<AtomicBool>) -> Fut,
    Fut: Future<Output = (u64, u64, Vec<Duration>)> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients).map(|i| tokio::spawn(client(i, stop.clone()))).collect();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut run = Run { count: 0, errors: 0, latencies: Vec::new(), wall: Duration::ZERO };
    for t in tasks {
        let (count, errors, latencies) = t.await.expect("a client task");
        run.count += count;
        run.errors += errors;
        run.latencies.extend(latencies);
    }
    run.wall = start.elapsed();
    run.latencies.sort();
    run
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted.get(((sorted.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or_default()
}

/// Prints `results` (label, round, run) as a table whose first column is `what` and whose rate
/// is `unit`; returns the errors and each label's best rate and p99.
pub fn print_table(what: &str, unit: &str, results: &[(&'static str, usize, Run)]) -> (u64, BTreeMap<&'static str, (f64, Duration)>) {
    println!("| {what} | round | {unit} | p50 | p99 | errors |");
    println!("|---|---|---|---|---|---|");
    let mut errors = 0;
    let mut best = BTreeMap::new();
    for (label, round, r) in results {
        let rate = r.count as f64 / r.wall.as_secs_f64();
        let (p50, p99) = (percentile(&r.latencies, 0.5), percentile(&r.latencies, 0.99));
        println!("| {label} | {round} | {rate:.0} | {:.0} µs | {:.0} µs | {} |", p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6, r.errors);
        errors += r.errors;
        let e = best.entry(*label).or_insert((0.0f64, Duration::MAX));
        e.0 = e.0.max(rate);
        e.1 = e.1.min(p99);
    }
    (errors, best)
}

/// Prints the ratio of `a`'s best round to `b`'s.
pub fn print_ratio(best: &BTreeMap<&'static str, (f64, Duration)>, a: &str, b: &str, name: &str, unit: &str) {
    let (x, y) = (best[a], best[b]);
    println!("ratio ({name}, best round): {unit} {:.2}x, p99 {:.2}x", x.0 / y.0, x.1.as_secs_f64() / y.1.as_secs_f64());
}
