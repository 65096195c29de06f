//! What the benchmarks share (`sim-bench` here, `propagation-bench` and `pull-bench` in the flotilla crate):
//! percentiles, the process's CPU time, the machine's load average, an error collector, and when
//! each Deployment first arrived in each member's store ([`Arrivals`], [`follow_deployments`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_store::Store;
use flotilla_store::hub::WatchEvent;
use parking_lot::Mutex;
use serde_json::Value;

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

/// The process's resident set and its anonymous part (heap), in bytes.
pub fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) * 1024
    };
    (field("VmRSS:"), field("RssAnon:"))
}

pub fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

/// Wall time, CPU time, resident set and machine load over one phase of a benchmark.
pub struct Phase {
    wall: Instant,
    cpu: Duration,
}

impl Phase {
    pub fn start() -> Phase {
        Phase { wall: Instant::now(), cpu: cpu_time() }
    }

    /// Wall time since the start.
    pub fn elapsed(&self) -> Duration {
        self.wall.elapsed()
    }

    /// `[12.3s wall, this process 1.52 cores, RSS 210.4 MiB, load average 1.9 2.0 2.1]`
    pub fn end(&self) -> String {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = (cpu_time() - self.cpu).as_secs_f64();
        format!("[{wall:.1}s wall, this process {:.2} cores, RSS {}, load average {}]", cpu / wall.max(1e-9), mib(rss().0 as f64), loadavg())
    }
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

    /// Print the verdict — "no errors", or how many and the first — and the exit code to end
    /// the run with.
    pub fn verdict(self) -> std::process::ExitCode {
        let errors = self.into_inner();
        if errors.is_empty() {
            println!("\nno errors");
            std::process::ExitCode::SUCCESS
        } else {
            println!("\n{} errors (first: {})", errors.len(), errors[0]);
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs at error level to stderr (`FLOTILLA_LOG` overrides; kube's client logs every failed
/// member request, which the benchmarks report themselves) and ring as rustls's provider.
pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(std::env::var("FLOTILLA_LOG").unwrap_or_else(|_| "error,kube_client::client::builder=off".into()))
                .unwrap_or_else(|_| "error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// When each template's copy first appeared in each member, and its replicas there.
#[derive(Default)]
pub struct Arrivals {
    seen: Mutex<HashMap<String, Vec<(usize, Instant, i64)>>>,
}

impl Arrivals {
    pub fn known(&self, name: &str, member: usize) -> bool {
        self.seen.lock().get(name).is_some_and(|v| v.iter().any(|(m, _, _)| *m == member))
    }

    pub fn record(&self, name: &str, member: usize, at: Instant, replicas: i64) {
        let mut seen = self.seen.lock();
        let v = seen.entry(name.to_string()).or_default();
        if !v.iter().any(|(m, _, _)| *m == member) {
            v.push((member, at, replicas));
        }
    }

    pub fn count(&self, name: &str) -> usize {
        self.seen.lock().get(name).map_or(0, Vec::len)
    }

    pub fn of(&self, name: &str) -> Vec<(usize, Instant, i64)> {
        self.seen.lock().get(name).cloned().unwrap_or_default()
    }
}

/// `spec.replicas` of a stored object, -1 when it has none.
pub fn replicas_of(value: &[u8]) -> i64 {
    serde_json::from_slice::<Value>(value).ok().and_then(|v| v["spec"]["replicas"].as_i64()).unwrap_or(-1)
}

/// Follow member `idx`'s store: every Deployment in namespace `ns` is recorded when first seen
/// (runs until aborted).
pub async fn follow_deployments(idx: usize, store: Arc<dyn Store>, ns: &str, arrivals: Arc<Arrivals>) {
    let prefix = format!("/registry/apps/deployments/{ns}/");
    let mut from = store.current_revision().await.unwrap_or(0);
    let note = |key: &[u8], value: &[u8]| {
        let name = String::from_utf8_lossy(&key[prefix.len()..]).to_string();
        if !arrivals.known(&name, idx) {
            let at = Instant::now();
            arrivals.record(&name, idx, at, replicas_of(value));
        }
    };
    loop {
        let Ok(mut watch) = store.watch(prefix.as_bytes(), from).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while let Some(ev) = watch.next_event().await {
            match ev {
                Ok(WatchEvent::Put { kv, .. }) => {
                    from = kv.mod_revision;
                    note(&kv.key, &kv.value);
                }
                Ok(WatchEvent::Delete { revision, .. }) => from = revision,
                Ok(WatchEvent::Progress(r)) => from = r,
                Err(_) => break,
            }
        }
        // The watch fell behind or ended: read what is there now and resume from it.
        if let Ok(resp) = store.range(flotilla_store::RangeRequest::prefix(Bytes::from(prefix.clone()))).await {
            for kv in &resp.kvs {
                note(&kv.key, &kv.value);
            }
            from = resp.revision;
        }
    }
}
