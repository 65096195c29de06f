//! Store benchmark: durable write throughput, watch fan-out latency and per-object footprint of
//! the embedded backend, each beside the physical ceiling measured in the same run.
//!
//!   cargo run --release -p flotilla-store --example store-bench            # full figures
//!   cargo run -p flotilla-store --example store-bench -- --smoke           # seconds, for CI
//!
//! Options: `--dir DIR` (default: a temp dir under $TMPDIR, i.e. the real disk), `--json`.
//! The figures in docs/benchmarks/store.md come from the full run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use flotilla_store::hub::WatchConfig;
use flotilla_store::{Op, Store, WatchEvent};

const VALUE: usize = 2048;

struct Opts {
    smoke: bool,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

fn opts() -> Opts {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "store-bench [--smoke] [--dir DIR]: the full run (about 2 minutes: 5 s per write case, 10 s per watch case, 10,000 watchers, 50,000 stored objects) or a smoke run of seconds; DIR defaults to a temporary directory on the disk of $TMPDIR."
        );
        std::process::exit(0);
    }
    let smoke = args.iter().any(|a| a == "--smoke");
    let dir = args.iter().position(|a| a == "--dir").and_then(|i| args.get(i + 1)).map(PathBuf::from);
    match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).unwrap();
            Opts { smoke, dir: d, _tmp: None }
        }
        None => {
            let t = tempfile::Builder::new().prefix("store-bench-").tempdir().unwrap();
            Opts { smoke, dir: t.path().to_path_buf(), _tmp: Some(t) }
        }
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn micros(us: u64) -> String {
    if us >= 1000 { format!("{:.2} ms", us as f64 / 1000.0) } else { format!("{us} µs") }
}

// ---------------------------------------------------------------------------------------------
// Ceilings

/// Appends of 2 KiB, each followed by fdatasync: the disk's own single-writer durable rate.
fn ceiling_fdatasync(dir: &Path, dur: Duration) -> f64 {
    let path = dir.join("fsync-ceiling.bin");
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    let buf = vec![7u8; VALUE];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        f.write_all(&buf).unwrap();
        // std's sync_data is fdatasync(2) on Linux.
        f.sync_data().unwrap();
        n += 1;
    }
    let _ = std::fs::remove_file(&path);
    n as f64 / start.elapsed().as_secs_f64()
}

/// redb's own durable transactions, one 2 KiB insert each, without our layer.
fn ceiling_redb(dir: &Path, dur: Duration, per_txn: usize) -> f64 {
    let path = dir.join(format!("redb-ceiling-{per_txn}.redb"));
    let db = redb::Database::create(&path).unwrap();
    let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("t");
    let buf = vec![7u8; VALUE];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        let mut txn = db.begin_write().unwrap();
        txn.set_durability(redb::Durability::Immediate).unwrap();
        {
            let mut t = txn.open_table(table).unwrap();
            for _ in 0..per_txn {
                t.insert(n, buf.as_slice()).unwrap();
                n += 1;
            }
        }
        txn.commit().unwrap();
    }
    drop(db);
    let _ = std::fs::remove_file(&path);
    n as f64 / start.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// Writes

fn bench_config(path: PathBuf) -> EmbeddedConfig {
    let mut c = EmbeddedConfig::new(path);
    c.retention.interval = None;
    c
}

async fn durable_writes(store: Arc<dyn Store>, writers: usize, dur: Duration) -> f64 {
    let value = Bytes::from(vec![b'v'; VALUE]);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let store = store.clone();
        let value = value.clone();
        tasks.spawn(async move {
            let mut n = 0u64;
            while start.elapsed() < dur {
                let key = Bytes::from(format!("/bench/w{writers}/{w}/{}", n % 1000));
                store.txn(vec![], vec![Op::Put(key, value.clone())]).await.unwrap();
                n += 1;
            }
            n
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// Watch fan-out

struct FanOut {
    p50: u64,
    p99: u64,
    delivered: u64,
    expected: u64,
    lagged: usize,
}

/// `watchers` watches on one prefix while a pacer writes `rate` events/s for `dur`; latency is
/// measured from just before the write call to the moment each watcher reads the event.
async fn watch_fanout(store: Arc<dyn Store>, watchers: usize, rate: u64, dur: Duration) -> FanOut {
    let epoch = Instant::now();
    let prefix = format!("/fan/{watchers}/{rate}/");
    let start_rev = store.current_revision().await.unwrap();
    let events = (dur.as_secs_f64() * rate as f64) as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..watchers {
        let mut w = store.watch(prefix.as_bytes(), start_rev).await.unwrap();
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(events as usize);
            let mut lagged = false;
            while (lat.len() as u64) < events {
                match tokio::time::timeout(Duration::from_secs(10), w.next_event()).await {
                    Ok(Some(Ok(WatchEvent::Put { kv, .. }))) => {
                        let sent = u64::from_le_bytes(kv.value[..8].try_into().unwrap());
                        lat.push((epoch.elapsed().as_micros() as u64).saturating_sub(sent));
                    }
                    Ok(Some(Ok(_))) => {}
                    _ => {
                        lagged = true;
                        break;
                    }
                }
            }
            (lat, lagged)
        });
    }
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..events {
                tick.tick().await;
                let mut v = vec![0u8; 256];
                v[..8].copy_from_slice(&(epoch.elapsed().as_micros() as u64).to_le_bytes());
                let key = Bytes::from(format!("{prefix}{}", i % 100));
                let s = store.clone();
                // Each write on its own task: the pacer keeps its rate while fsyncs are in flight.
                tokio::spawn(async move { s.txn(vec![], vec![Op::Put(key, Bytes::from(v))]).await.unwrap() });
            }
        })
    };
    writer.await.unwrap();
    summarize(tasks, events * watchers as u64).await
}

/// Merge the watchers' latency samples into percentiles.
async fn summarize(mut tasks: tokio::task::JoinSet<(Vec<u64>, bool)>, expected: u64) -> FanOut {
    let mut all = Vec::new();
    let mut lagged = 0;
    while let Some(r) = tasks.join_next().await {
        let (l, lag) = r.unwrap();
        lagged += usize::from(lag);
        all.extend(l);
    }
    all.sort_unstable();
    FanOut { p50: pct(&all, 0.5), p99: pct(&all, 0.99), delivered: all.len() as u64, expected, lagged }
}

/// The same fan-out through a bare tokio broadcast channel: the in-memory ceiling.
async fn broadcast_fanout(watchers: usize, rate: u64, dur: Duration) -> FanOut {
    let epoch = Instant::now();
    let events = (dur.as_secs_f64() * rate as f64) as u64;
    let (tx, _) = tokio::sync::broadcast::channel::<Arc<(u64, Bytes)>>(8192);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..watchers {
        let mut rx = tx.subscribe();
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(events as usize);
            let mut lagged = false;
            while (lat.len() as u64) < events {
                match rx.recv().await {
                    Ok(ev) => lat.push((epoch.elapsed().as_micros() as u64).saturating_sub(ev.0)),
                    Err(_) => {
                        lagged = true;
                        break;
                    }
                }
            }
            (lat, lagged)
        });
    }
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
    for _ in 0..events {
        tick.tick().await;
        let _ = tx.send(Arc::new((epoch.elapsed().as_micros() as u64, Bytes::from_static(&[0u8; 256]))));
    }
    summarize(tasks, events * watchers as u64).await
}

/// Saturated fan-out throughput (deliveries per second): writes as fast as the store takes
/// them in batches, `watchers` readers; beside the same through a bare broadcast.
async fn fanout_throughput(store: Arc<dyn Store>, watchers: usize, events: u64) -> (f64, f64) {
    let prefix = format!("/sat/{watchers}/");
    let start_rev = store.current_revision().await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..watchers {
        let mut w = store.watch(prefix.as_bytes(), start_rev).await.unwrap();
        tasks.spawn(async move {
            let mut n = 0;
            while n < events {
                match w.next_event().await {
                    Some(Ok(WatchEvent::Put { .. })) => n += 1,
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            n
        });
    }
    let start = Instant::now();
    let mut written = 0;
    while written < events {
        let ops: Vec<Op> =
            (0..64.min(events - written)).map(|i| Op::Put(Bytes::from(format!("{prefix}{}", (written + i) % 128)), Bytes::from_static(b"x"))).collect();
        written += ops.len() as u64;
        store.txn(vec![], ops).await.unwrap();
    }
    let mut delivered = 0;
    while let Some(r) = tasks.join_next().await {
        delivered += r.unwrap();
    }
    let ours = delivered as f64 / start.elapsed().as_secs_f64();

    // The ceiling: every event sent on its own through a bare broadcast channel large enough
    // that no receiver lags.
    let (tx, _) = tokio::sync::broadcast::channel::<Arc<(u64, Bytes)>>(events as usize + 1);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..watchers {
        let mut rx = tx.subscribe();
        tasks.spawn(async move {
            let mut n = 0;
            while n < events {
                match rx.recv().await {
                    Ok(_) => n += 1,
                    Err(_) => break,
                }
            }
            n
        });
    }
    let start = Instant::now();
    for i in 0..events {
        let _ = tx.send(Arc::new((i, Bytes::from_static(b"x"))));
        if i % 64 == 63 {
            tokio::task::yield_now().await;
        }
    }
    let mut delivered = 0;
    while let Some(r) = tasks.join_next().await {
        delivered += r.unwrap();
    }
    let ceiling = delivered as f64 / start.elapsed().as_secs_f64();
    (ours, ceiling)
}

// ---------------------------------------------------------------------------------------------
// Footprint

async fn footprint(dir: &Path, steps: &[usize]) -> (f64, f64) {
    let path = dir.join("footprint.redb");
    let mut config = bench_config(path.clone());
    config.cache_bytes = 64 << 20;
    let store = EmbeddedStore::open(config).await.unwrap();
    let value = Bytes::from(vec![b'f'; VALUE]);
    let mut points = Vec::new();
    let mut written = 0;
    for &target in steps {
        while written < target {
            let ops: Vec<Op> = (written..(written + 100).min(target)).map(|i| Op::Put(Bytes::from(format!("/obj/{i:08}")), value.clone())).collect();
            written += ops.len();
            store.txn(vec![], ops).await.unwrap();
        }
        let disk = std::fs::metadata(&path).unwrap().len();
        points.push((target as f64, disk as f64, rss_bytes() as f64));
    }
    let (first, last) = (points[0], points[points.len() - 1]);
    let n = last.0 - first.0;
    ((last.1 - first.1) / n, (last.2 - first.2) / n)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = opts();
    let secs = |full: u64, smoke: u64| Duration::from_millis(if o.smoke { smoke } else { full });
    println!("# store benchmark ({} run) in {}", if o.smoke { "smoke" } else { "full" }, o.dir.display());
    println!(
        "machine: {} cores, rustc build {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );

    // The footprint first: what later phases leave allocated would hide the resident-memory
    // slope (a full run measured 0 bytes/object with the footprint last).
    println!("\n## footprint per stored 2 KiB object");
    let steps: &[usize] = if o.smoke { &[1000, 3000] } else { &[10_000, 50_000] };
    let (disk, rss) = footprint(&o.dir, steps).await;
    println!("disk: {disk:.0} bytes/object; resident memory: {rss:.0} bytes/object (slope between {} and {} objects)", steps[0], steps[steps.len() - 1]);

    // The ceilings, on the same disk.
    let fsync_rate = ceiling_fdatasync(&o.dir, secs(5000, 500));
    let redb_1 = ceiling_redb(&o.dir, secs(5000, 500), 1);
    let redb_100 = ceiling_redb(&o.dir, secs(5000, 500), 100);
    println!("\n## ceilings");
    println!("fdatasync'd 2 KiB appends, 1 writer : {fsync_rate:>10.0} /s");
    println!("redb durable txns, 1 insert each     : {redb_1:>10.0} /s");
    println!("redb durable txns, 100 inserts each  : {redb_100:>10.0} /s");

    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(bench_config(o.dir.join("writes.redb"))).await.unwrap());
    println!("\n## durable writes (2 KiB values), embedded store");
    let mut rates = Vec::new();
    for writers in [1usize, 16, 128] {
        let r = durable_writes(store.clone(), writers, secs(5000, 500)).await;
        rates.push(r);
        println!("{writers:>3} writers: {r:>10.0} writes/s");
    }
    println!(
        "ratio 1 writer / raw fdatasync: {:.0}% (goal >= 50%); 128 writers / 1 writer: {:.1}x (goal >= 10x)",
        100.0 * rates[0] / fsync_rate,
        rates[2] / rates[0]
    );
    drop(store);

    println!("\n## watch delivery latency (write call -> watcher reads the event)");
    let mut wc = bench_config(o.dir.join("watch.redb"));
    wc.watch = WatchConfig { ring_batches: 8192, per_watcher_buffer: 1024, progress_interval: None };
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(wc).await.unwrap());
    let cases: &[(usize, u64)] = if o.smoke { &[(1000, 100), (100, 1000)] } else { &[(10_000, 100), (1000, 1000)] };
    for &(watchers, rate) in cases {
        let ours = watch_fanout(store.clone(), watchers, rate, secs(10_000, 1000)).await;
        let ceiling = broadcast_fanout(watchers, rate, secs(10_000, 1000)).await;
        println!(
            "{watchers:>6} watchers @ {rate:>5}/s: store p50 {} p99 {} ({}/{} delivered, {} lagged) | bare broadcast p50 {} p99 {}",
            micros(ours.p50),
            micros(ours.p99),
            ours.delivered,
            ours.expected,
            ours.lagged,
            micros(ceiling.p50),
            micros(ceiling.p99)
        );
    }
    let (watchers, events) = if o.smoke { (100, 2_000) } else { (1000, 20_000) };
    let (ours, ceiling) = fanout_throughput(store.clone(), watchers, events).await;
    println!(
        "saturated fan-out, {watchers} watchers: store {ours:.0} deliveries/s, bare broadcast {ceiling:.0}/s ({:.0}% of the ceiling; goal >= 50%)",
        100.0 * ours / ceiling
    );
    drop(store);
}
