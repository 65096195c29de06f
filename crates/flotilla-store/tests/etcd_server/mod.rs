//! A real etcd server for the tests: started on free loopback ports from `FLOTILLA_ETCD_BIN`,
//! the testenv build (`~/.cache/flotilla/testenv/bin/etcd`, see testenv/build.sh) or `PATH`, and
//! always stopped (on drop, and by the kernel if the test process dies). Without a binary the
//! tests skip with a message — unless `FLOTILLA_REQUIRE_ETCD=1` (set by the test command), when
//! a missing etcd fails them.

#![allow(dead_code)] // each test file uses part of it

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct EtcdServer {
    child: Child,
    pub endpoint: String,
    /// etcd's `--data-dir`.
    pub data_dir: PathBuf,
    log: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn etcd_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FLOTILLA_ETCD_BIN") {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"));
    let built = cache.join("flotilla/testenv/bin/etcd");
    if built.is_file() {
        return Some(built);
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("etcd")).find(|p| p.is_file()))
}

/// The binary, or `None` (skip) when there is none and none is required.
fn binary_or_skip() -> Option<PathBuf> {
    let bin = etcd_binary();
    if bin.is_none() {
        if std::env::var("FLOTILLA_REQUIRE_ETCD").as_deref() == Ok("1") {
            panic!("no etcd binary found (FLOTILLA_ETCD_BIN, testenv build, PATH) and FLOTILLA_REQUIRE_ETCD=1");
        }
        eprintln!("SKIPPED: no etcd binary; build one with testenv/build.sh etcd");
    }
    bin
}

impl EtcdServer {
    /// Start a private etcd with a data directory of its own, or `None` (skip) when there is no
    /// binary.
    pub fn start() -> Option<EtcdServer> {
        let bin = binary_or_skip()?;
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            if let Some(mut server) = Self::spawn(&bin, dir.path(), &[]) {
                server._dir = Some(dir);
                return Some(server);
            }
        }
        panic!("etcd failed to start five times; see the logs above");
    }

    /// Start etcd with its data in `dir/data` (kept: start again in the same `dir` to restart
    /// it) and `extra` flags, or `None` (skip) when there is no binary.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Option<EtcdServer> {
        let bin = binary_or_skip()?;
        for _attempt in 0..5 {
            if let Some(server) = Self::spawn(&bin, dir, extra) {
                return Some(server);
            }
        }
        panic!("etcd failed to start five times in {}; see the logs above", dir.display());
    }

    fn spawn(bin: &Path, dir: &Path, extra: &[&str]) -> Option<EtcdServer> {
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log_path = dir.join("etcd.log");
        let log = std::fs::File::options().create(true).append(true).open(&log_path).unwrap();
        let data_dir = dir.join("data");
        let mut cmd = Command::new(bin);
        cmd.arg("--name=default")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=default={peer_url}"))
            .arg("--unsafe-no-fsync")
            .arg("--max-request-bytes=2097152")
            .arg("--log-level=error")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("start etcd");
        let mut server = EtcdServer { child, endpoint, data_dir, log: log_path, _dir: None };
        if server.wait_ready() {
            return Some(server);
        }
        eprintln!("etcd did not start (retrying on other ports): {}", std::fs::read_to_string(&server.log).unwrap_or_default());
        None
    }

    fn wait_ready(&mut self) -> bool {
        let addr = self.endpoint.trim_start_matches("http://").to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if std::net::TcpStream::connect(&addr).is_ok() {
                // The port is picked free and then handed to etcd, so another process may take
                // it in between: etcd then exits (address in use) while the connect reached the
                // other listener. Still running a moment later means the listener is etcd's.
                std::thread::sleep(Duration::from_millis(300));
                return matches!(self.child.try_wait(), Ok(None));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// What etcd wrote to its log, and whether it is still running: for a test's failure message.
    pub fn diagnosis(&self) -> String {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let state = match stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()) {
            Some('Z') | None => "exited",
            Some(_) => "running",
        };
        format!("etcd {state}; its log: {}", std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// Stop etcd as its operator would (SIGTERM, then SIGKILL after ten seconds) and wait for it.
    pub fn stop(mut self) {
        #[allow(unsafe_code)]
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Drop kills it.
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
