//! Processes and simulated members for the benchmark drivers that run the control plane and
//! the members as processes of their own (`propagation-compare`, `global-view-bench`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::api::{Api, DynamicObject};
use tokio::io::AsyncBufReadExt as _;

pub fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// CPU seconds (user + system, all threads) and resident set of a process, from `/proc`.
pub fn proc_usage(pid: u32) -> (Duration, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0) + f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
    // /proc counts in USER_HZ, 100 on every Linux architecture we build for.
    let hz = 100;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) * 1024
    };
    (Duration::from_millis(ticks * 1000 / hz), field("VmRSS:"), field("VmHWM:"))
}

/// A child process, stopped with SIGTERM (then SIGKILL) when the run is over, or killed with
/// every process it started when dropped on a failure.
pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    pub child: tokio::process::Child,
    /// Processes it started that must not outlive it (Karmada's, read from its pids file).
    pub others: Vec<u32>,
}

impl Proc {
    pub fn spawn(name: &str, cpus: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Proc> {
        let mut cmd = pinned(cpus, program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(log).with_context(|| format!("create {}", log.display()))?);
        let child = cmd.spawn().with_context(|| format!("start {} ({})", name, program.display()))?;
        Ok(Proc { name: name.to_string(), log: log.to_path_buf(), child, others: Vec::new() })
    }

    /// As `spawn`, with its stdout in the log too (nothing waits for a line of it), appended
    /// to what earlier runs of it wrote.
    pub fn spawn_quiet(name: &str, cpus: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Proc> {
        let mut cmd = pinned(cpus, program);
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log).with_context(|| format!("open {}", log.display()))?;
        cmd.args(args).stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
        let child = cmd.spawn().with_context(|| format!("start {} ({})", name, program.display()))?;
        Ok(Proc { name: name.to_string(), log: log.to_path_buf(), child, others: Vec::new() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Lines of its stdout until one for which `done` returns true; every line is returned.
    pub async fn wait_for(&mut self, timeout: Duration, done: impl Fn(&str) -> bool) -> anyhow::Result<Vec<String>> {
        let stdout = self.child.stdout.as_mut().context("stdout already taken")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, lines.next_line()).await {
                Err(_) => bail!("{} did not get ready within {timeout:?}; its output: {}", self.name, seen.join(" | ")),
                Ok(Err(e)) => bail!("read the output of {}: {e}", self.name),
                Ok(Ok(None)) => bail!(
                    "{} exited before it was ready ({:?}); its output: {}; its log: {}",
                    self.name,
                    self.child.try_wait().ok().flatten(),
                    seen.join(" | "),
                    self.log.display()
                ),
                Ok(Ok(Some(line))) => {
                    let stop = done(&line);
                    seen.push(line);
                    if stop {
                        // Keep draining its stdout so it never blocks on a full pipe.
                        if let Some(out) = self.child.stdout.take() {
                            tokio::spawn(async move {
                                let mut lines = tokio::io::BufReader::new(out).lines();
                                while let Ok(Some(_)) = lines.next_line().await {}
                            });
                        }
                        return Ok(seen);
                    }
                }
            }
        }
    }

    pub async fn stop(mut self) {
        let pid = self.pid();
        if pid != 0 {
            signal("TERM", pid).await;
            if tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.is_err() {
                eprintln!("{} did not stop within 30 s of SIGTERM; killing it", self.name);
                let _ = self.child.kill().await;
            }
        }
        // The launcher stops what it started on SIGTERM; whatever is left is killed.
        for p in std::mem::take(&mut self.others) {
            if Path::new(&format!("/proc/{p}")).exists() {
                signal("KILL", p).await;
            }
        }
    }
}

/// `program` under `taskset -c cpus` (not pinned when `cpus` is empty).
pub fn pinned(cpus: &str, program: &Path) -> tokio::process::Command {
    if cpus.is_empty() {
        return tokio::process::Command::new(program);
    }
    let mut c = tokio::process::Command::new("taskset");
    c.arg("-c").arg(cpus).arg(program);
    c
}

/// The first SIGINT or SIGTERM.
pub async fn interrupt() -> &'static str {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "SIGINT";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// `kill -SIG pid` (the workspace allows no `unsafe`, so no libc call).
pub async fn signal(sig: &str, pid: u32) {
    let _ = tokio::process::Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).stderr(Stdio::null()).status().await;
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        for &p in &self.others {
            let _ = std::process::Command::new("kill").arg("-KILL").arg(p.to_string()).stderr(Stdio::null()).status();
        }
    }
}

/// Pin this process (the driver), every thread of it, to `cpus`, a `taskset -c` list.
pub fn pin_self(cpus: &str) -> anyhow::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let out = std::process::Command::new("taskset").args(["-a", "-p", "-c", cpus, &std::process::id().to_string()]).output().context("run taskset")?;
    if !out.status.success() {
        bail!("taskset -a -p -c {cpus}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

pub struct Member {
    pub name: String,
    /// Its admin kubeconfig, as `flotilla member` wrote it.
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
}

pub async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path).with_context(|| format!("read {}", path.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.with_context(|| format!("load {}", path.display()))?;
    // The benchmark's own traffic must never be the bottleneck.
    config.read_timeout = Some(Duration::from_secs(300));
    Ok(kube::Client::try_from(config)?)
}

/// `n` simulated members of `flotilla member` (`flotilla`), pinned to `cpus`, with `extra`
/// arguments; their data and log under `dir`.
pub async fn start_members(flotilla: &Path, cpus: &str, n: usize, dir: &Path, extra: &[&str]) -> anyhow::Result<(Proc, Vec<Member>)> {
    let data = dir.join("members");
    let mut margs: Vec<String> =
        ["member", "--members", &n.to_string(), "--data-dir", &data.to_string_lossy(), "--listen", "127.0.0.1:0", "--node-pods", "5000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    margs.extend(extra.iter().map(|s| s.to_string()));
    let mut p = Proc::spawn("members", cpus, flotilla, &margs, &dir.join("members.log"))?;
    let lines = p.wait_for(Duration::from_secs(300), |l| l == "ready").await?;
    let mut members = Vec::new();
    for l in lines.iter().filter(|l| l.starts_with("member ")) {
        // member NAME server URL kubeconfig PATH
        let f: Vec<&str> = l.split_whitespace().collect();
        let (name, path) = (f[1].to_string(), PathBuf::from(f[5]));
        members.push(Member { name, client: client_from(&path).await?, kubeconfig: path });
    }
    // member1 … memberN in order, whatever order they were printed in.
    members.sort_by_key(|m| m.name.trim_start_matches("member").parse::<usize>().unwrap_or(usize::MAX));
    if members.len() != n {
        bail!("{} members reported, {n} asked for", members.len());
    }
    Ok((p, members))
}

/// Join every member in Push mode with `flotilla join` (a least-privilege identity in the
/// member, its token in `karmada-cluster/<member>`, the Cluster), eight at a time, each pinned
/// to `cpus`; `admin` is the control plane's kubeconfig, the logs go under `dir`.
pub async fn join_flotilla(flotilla: &Path, cpus: &str, admin: &Path, members: &[Member], dir: &Path) -> anyhow::Result<()> {
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(8));
    let mut set = tokio::task::JoinSet::new();
    for m in members {
        let a: Vec<String> = vec![
            "join".into(),
            m.name.clone(),
            "--kubeconfig".into(),
            m.kubeconfig.to_string_lossy().into(),
            "--control-plane-kubeconfig".into(),
            admin.to_string_lossy().into(),
        ];
        let (sem, bin, cpus, log, name) = (sem.clone(), flotilla.to_path_buf(), cpus.to_string(), dir.join(format!("join-{}.log", m.name)), m.name.clone());
        set.spawn(async move {
            let _permit = sem.acquire().await;
            let mut p = Proc::spawn(&format!("flotilla join {name}"), &cpus, &bin, &a, &log)?;
            let status = p.child.wait().await?;
            if !status.success() {
                bail!("flotilla join {name}: {status} (see {})", log.display());
            }
            Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

/// Wait until `n` Clusters are Ready on the control plane.
pub async fn wait_ready(cp: &kube::Client, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::all_with(
        cp.clone(),
        &kube::api::ApiResource {
            group: "cluster.karmada.io".into(),
            version: "v1alpha1".into(),
            api_version: "cluster.karmada.io/v1alpha1".into(),
            kind: "Cluster".into(),
            plural: "clusters".into(),
        },
    );
    let deadline = Instant::now() + timeout;
    loop {
        let ready = match api.list(&Default::default()).await {
            Ok(l) => l
                .items
                .iter()
                .filter(|c| c.data["status"]["conditions"].as_array().is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")))
                .count(),
            Err(_) => 0,
        };
        if ready == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{ready} of {n} Clusters Ready after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Where the control plane, and the members with the driver, run.
#[derive(clap::Args, Debug)]
pub struct Pinning {
    /// CPUs the control plane's processes run on (a `taskset -c` list; empty: not pinned).
    #[arg(long, default_value = "0")]
    pub cp_cpus: String,
    /// CPUs the members and this driver run on (a `taskset -c` list; empty: not pinned).
    #[arg(long, default_value = "1")]
    pub member_cpus: String,
}

impl Pinning {
    /// Pin this driver beside the members; on a one-CPU machine nothing is pinned. The number
    /// of CPUs, counted before the driver pins itself.
    pub fn pin_driver(&mut self) -> anyhow::Result<usize> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 && (!self.cp_cpus.is_empty() || !self.member_cpus.is_empty()) {
            println!("only {cpus} CPU: nothing is pinned (the figures then share one core)");
            self.cp_cpus.clear();
            self.member_cpus.clear();
        }
        pin_self(&self.member_cpus).with_context(|| format!("pin the driver to CPUs {:?}", self.member_cpus))?;
        Ok(cpus)
    }
}
