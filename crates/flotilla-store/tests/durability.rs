//! Durability of the embedded backend: power loss through a simulated disk, SIGKILL of a real
//! writer process, bad data files, injected I/O faults, and space reuse after compaction.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_store::embedded::backends::{Faults, SimulatedDisk};
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use flotilla_store::{BadDataKind, Op, RangeRequest, Store, StoreError};
use rand::{RngExt, SeedableRng};

fn seed(test: &str) -> u64 {
    let seed = std::env::var("FLOTILLA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64);
    eprintln!("{test}: seed {seed} (replay with FLOTILLA_TEST_SEED={seed})");
    seed
}

fn config(path: &Path) -> EmbeddedConfig {
    let mut c = EmbeddedConfig::new(path);
    c.retention.interval = None;
    c.cache_bytes = 16 << 20;
    c
}

fn sim_config() -> EmbeddedConfig {
    config(Path::new("<simulated>"))
}

fn value(writer: usize, seq: usize) -> Bytes {
    Bytes::from(format!("writer {writer} write {seq} {}", "x".repeat(seq % 300)))
}

async fn dump(s: &dyn Store) -> BTreeMap<Bytes, Bytes> {
    s.range(RangeRequest::default()).await.unwrap().kvs.into_iter().map(|kv| (kv.key, kv.value)).collect()
}

/// Concurrent writers until `stop`; returns every acknowledged (key, value).
async fn write_until_failure(store: Arc<dyn Store>, writers: usize, round: usize) -> Vec<(Bytes, Bytes)> {
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let store = store.clone();
        tasks.spawn(async move {
            let mut acked = Vec::new();
            for seq in 0..100_000 {
                let key = Bytes::from(format!("/r{round}/w{w}/{seq:06}"));
                let v = value(w, seq);
                match store.txn(vec![], vec![Op::Put(key.clone(), v.clone())]).await {
                    Ok(_) => acked.push((key, v)),
                    Err(StoreError::Io(_)) => break,
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            acked
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.unwrap());
    }
    all
}

/// (a) Power loss: the simulated disk keeps unsynced writes apart; at a random point we cut the
/// power (every later write and sync fails), drop the store and keep only what was synced.
/// After reopening, every acknowledged write must be there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_keeps_every_acknowledged_write() {
    let seed = seed("power_loss");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let disk = SimulatedDisk::new();
    let mut acked_all: Vec<(Bytes, Bytes)> = Vec::new();
    for round in 0..12 {
        let store: Arc<dyn Store> = Arc::new(
            EmbeddedStore::open_with_backend(
                {
                    let d = disk.clone();
                    move || d.backend()
                },
                sim_config(),
                "sim",
            )
            .unwrap(),
        );
        let before = dump(store.as_ref()).await;
        for (k, v) in &acked_all {
            assert_eq!(before.get(k), Some(v), "round {round}: an acknowledged write was lost");
        }
        // Cut the power after a random number of storage operations: anywhere inside a commit.
        let cut_after = rng.random_range(5..400);
        disk.set_faults(Faults { cut_after_ops: Some(cut_after), ..Default::default() });
        let acked = write_until_failure(store.clone(), 8, round).await;
        drop(store);
        disk.crash();
        disk.set_faults(Faults::default());
        eprintln!("round {round}: power cut after {cut_after} storage operations, {} writes acknowledged", acked.len());
        acked_all.extend(acked);
    }
    let store = EmbeddedStore::open_with_backend(
        {
            let d = disk.clone();
            move || d.backend()
        },
        sim_config(),
        "sim",
    )
    .unwrap();
    let after = dump(&store).await;
    for (k, v) in &acked_all {
        assert_eq!(after.get(k), Some(v), "an acknowledged write was lost");
    }
    assert!(!acked_all.is_empty());
}

/// (b) SIGKILL rounds: a child process (this test binary, re-run as `crash_child`) writes with
/// 16 concurrent writers and prints each acknowledgement; we kill it at a random moment and
/// check that the database reopens with every acknowledged write.
#[test]
fn sigkill_rounds_keep_every_acknowledged_write() {
    let seed = seed("sigkill_rounds");
    let rounds: usize = std::env::var("FLOTILLA_SIGKILL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.redb");
    let exe = std::env::current_exe().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut acked_all: BTreeMap<String, String> = BTreeMap::new();
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("FLOTILLA_CRASH_CHILD_DB", &db)
            .env("FLOTILLA_CRASH_CHILD_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = Duration::from_millis(rng.random_range(150..900));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            let mut started = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.ends_with("READY") {
                    started = true;
                    let _ = ready_tx.send(());
                }
                if let Some(rest) = line.strip_prefix("ACK ")
                    && let Some((k, v)) = rest.split_once(' ')
                {
                    acks.push((k.to_string(), v.to_string()));
                }
            }
            (started, acks)
        });
        // The kill moment counts from the store being open (a loaded machine may take a while
        // to start the child); a child that never opens is a failure below.
        let _ = ready_rx.recv_timeout(Duration::from_secs(60));
        std::thread::sleep(kill_after);
        // SIGKILL: no destructor, no flush, no close.
        let _ = child.kill();
        let status = child.wait().unwrap();
        let (started, acks) = reader.join().unwrap();
        assert!(started, "round {round}: the child never opened the store (status {status:?})");
        eprintln!("round {round}: killed after {kill_after:?}, {} writes acknowledged", acks.len());
        acked_all.extend(acks);
        // The database must reopen cleanly with everything acknowledged so far.
        rt.block_on(async {
            let store = EmbeddedStore::open(config(&db)).await.unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
            let all = dump(&store).await;
            for (k, v) in &acked_all {
                let got = all.get(k.as_bytes());
                assert_eq!(got, Some(&Bytes::from(v.clone())), "round {round}: lost acknowledged key {k}");
            }
        });
    }
    assert!(acked_all.len() > rounds, "the children acknowledged too little to prove anything");
}

/// The writer process of the SIGKILL test. Does nothing unless run by it.
#[test]
fn crash_child() {
    let Ok(db) = std::env::var("FLOTILLA_CRASH_CHILD_DB") else { return };
    let round: usize = std::env::var("FLOTILLA_CRASH_CHILD_ROUND").unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(config(Path::new(&db))).await.unwrap());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        for w in 0..16 {
            let store = store.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                for seq in 0.. {
                    let key = format!("/r{round}/w{w}/{seq}");
                    let v = format!("v{round}.{w}.{seq}");
                    store.txn(vec![], vec![Op::Put(Bytes::from(key.clone()), Bytes::from(v.clone()))]).await.unwrap();
                    if tx.send(format!("ACK {key} {v}")).is_err() {
                        return;
                    }
                }
            });
        }
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "READY").unwrap();
        out.flush().unwrap();
        while let Some(line) = rx.recv().await {
            writeln!(out, "{line}").unwrap();
            out.flush().unwrap();
        }
    });
}

fn sha(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

async fn expect_refused(path: &Path, kind: BadDataKind) -> String {
    let before = sha(path);
    let err = EmbeddedStore::open(config(path)).await.expect_err("a bad data file must be refused");
    let StoreError::BadDataFile { kind: got, reason, .. } = &err else { panic!("expected BadDataFile, got {err:?}") };
    assert_eq!(*got, kind, "{reason}");
    assert_eq!(sha(path), before, "a refused file must be left untouched");
    reason.clone()
}

async fn valid_store(path: &Path, keys: usize) {
    let s = EmbeddedStore::open(config(path)).await.unwrap();
    for i in 0..keys {
        s.create(Bytes::from(format!("/k/{i}")), Bytes::from(vec![b'v'; 2048])).await.unwrap();
    }
}

#[tokio::test]
async fn bad_data_files_are_refused_distinctly_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();

    let random = dir.path().join("random.redb");
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let bytes: Vec<u8> = (0..65536).map(|_| rng.random()).collect();
    std::fs::write(&random, bytes).unwrap();
    let msg = expect_refused(&random, BadDataKind::NotADatabase).await;
    assert!(msg.contains("not a Flotilla store"), "{msg}");

    let truncated = dir.path().join("truncated.redb");
    valid_store(&truncated, 300).await;
    let full = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &full[..full.len() / 3]).unwrap();
    let msg = expect_refused(&truncated, BadDataKind::Corrupted).await;
    assert!(msg.contains("truncated") || msg.contains("damaged"), "{msg}");

    let foreign = dir.path().join("foreign.redb");
    {
        let db = redb::Database::create(&foreign).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(redb::TableDefinition::<&str, &str>::new("someone_elses")).unwrap();
            t.insert("hello", "world").unwrap();
        }
        txn.commit().unwrap();
    }
    let msg = expect_refused(&foreign, BadDataKind::Foreign).await;
    assert!(msg.contains("did not write"), "{msg}");

    let newer = dir.path().join("newer.redb");
    valid_store(&newer, 3).await;
    {
        let db = redb::Database::open(&newer).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(redb::TableDefinition::<&str, i64>::new("flotilla_meta")).unwrap();
            t.insert("format_version", 99).unwrap();
        }
        txn.commit().unwrap();
    }
    let msg = expect_refused(&newer, BadDataKind::NewerFormat).await;
    assert!(msg.contains("newer Flotilla"), "{msg}");

    // A second process (here: a second open) on a live store is told it is in use.
    let live = dir.path().join("live.redb");
    let _open = EmbeddedStore::open(config(&live)).await.unwrap();
    let err = EmbeddedStore::open(config(&live)).await.unwrap_err();
    assert!(matches!(err, StoreError::BadDataFile { kind: BadDataKind::Locked, .. }), "{err:?}");
}

/// An I/O error or a full disk during a batch fails every write of the batch, acknowledges
/// none, and reads keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_faults_fail_the_whole_batch_and_reads_continue() {
    for (name, faults) in [
        ("write error", Faults { fail_writes: true, ..Default::default() }),
        ("sync error", Faults { fail_syncs: true, ..Default::default() }),
        ("disk full", Faults { disk_full: true, ..Default::default() }),
    ] {
        let disk = SimulatedDisk::new();
        let (d1, d2) = (disk.clone(), disk.clone());
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open_with_backend_checked(move || d1.backend(), move || d2.healthy(), sim_config(), "sim").unwrap());
        let keep = Bytes::from_static(b"/kept");
        let r0 = store.create(keep.clone(), Bytes::from_static(b"before the fault")).await.unwrap();
        disk.set_faults(faults);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..32 {
            let s = store.clone();
            // Large values so even a "disk full" must grow the file.
            tasks.spawn(async move { s.create(Bytes::from(format!("/new/{i}")), Bytes::from(vec![1u8; 64 * 1024])).await });
        }
        while let Some(r) = tasks.join_next().await {
            let err = r.unwrap().expect_err(&format!("{name}: a write was acknowledged although storage failed"));
            assert!(matches!(err, StoreError::Io(_)), "{name}: {err:?}");
        }
        // Reads keep being served.
        assert_eq!(store.get(&keep).await.unwrap().unwrap().value.as_ref(), b"before the fault", "{name}");
        assert_eq!(store.current_revision().await.unwrap(), r0, "{name}: failed writes consumed revisions");
        let listed = store.range(RangeRequest::prefix(Bytes::from_static(b"/new/"))).await.unwrap();
        assert!(listed.kvs.is_empty(), "{name}: a failed write became visible");
        // Once storage recovers, writes work again and revisions continue without a hole.
        disk.set_faults(Faults::default());
        let r1 = store.create(Bytes::from_static(b"/after"), Bytes::from_static(b"ok")).await;
        match r1 {
            Ok(r1) => assert_eq!(r1, r0 + 1, "{name}: a hole in the revisions after recovery"),
            Err(e) => panic!("{name}: writes did not recover after the fault cleared: {e}"),
        }
    }
}

/// History dropped by compaction frees pages that later writes reuse: the file stops growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_frees_space_for_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = EmbeddedStore::open(config(&path)).await.unwrap();
    let v = Bytes::from(vec![b'x'; 2048]);
    let mut sizes = Vec::new();
    for round in 0..4 {
        // Rewrite the same 500 keys 4 times (2,000 versions of 2 KiB), then compact the history.
        for _pass in 0..4 {
            for chunk in 0..10 {
                let ops: Vec<Op> = (0..50).map(|i| Op::Put(Bytes::from(format!("/k/{}", chunk * 50 + i)), v.clone())).collect();
                store.txn(vec![], ops).await.unwrap();
            }
        }
        let head = store.current_revision().await.unwrap();
        store.compact(head).await.unwrap();
        sizes.push(std::fs::metadata(&path).unwrap().len());
        eprintln!("round {round}: file {} bytes", sizes.last().unwrap());
    }
    // Rounds after the first reuse the freed pages instead of growing the file.
    assert!(sizes[3] <= sizes[1] + sizes[1] / 4, "file kept growing after compaction: {sizes:?}");
}
