//! Cross-cluster traffic's propagation benchmark (issue 26): how long an endpoint change in an
//! exporting member takes to reach the consuming member and the ClusterSet DNS answer.
//!
//!   cargo build --release -p flotilla --bin flotilla --example traffic-bench
//!   $CARGO_TARGET_DIR/release/examples/traffic-bench                 (20 changes)
//!   (smoke, for CI: target/debug/examples/traffic-bench --smoke)
//!
//! Processes: three simulated members (`flotilla member`) pinned with this driver to
//! `--member-cpus`, the control plane (`flotilla up --dns-listen`) to `--cp-cpus`. The MCS CRDs
//! are installed in the members before they are joined. member1 and member2 run the headless
//! Service `web` (a Deployment behind it) and export it; member3 imports it.
//!
//! Each change scales member1's Deployment between 1 and 2 replicas; from the scale request,
//! three times are taken by polling every 5 ms: the member's own EndpointSlice showing the new
//! count (the ceiling: what the member itself takes), member3's imported slices showing it,
//! and the DNS server answering `web.bench.svc.clusterset.local` with it.
//!
//! Fails (exit 1) only on errors — a change never seen — never on its figures. Results go in
//! docs/benchmarks/traffic.md beside `flotilla-traffic`'s `dns-bench`.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use flotilla_sim::bench::{Errors, loadavg, pct};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[path = "support/processes.rs"]
#[allow(dead_code)]
mod processes;

use processes::{Proc, client_from, interrupt, ms, wait_ready};

const NS: &str = "bench";

#[derive(Parser)]
#[command(about = "Endpoint propagation across clusters: to the consumer and to the DNS answer")]
struct Args {
    /// CI size: 3 changes; seconds in a debug build.
    #[arg(long)]
    smoke: bool,
    /// Endpoint changes measured [default: 20; smoke: 3].
    #[arg(long)]
    changes: Option<usize>,
    #[command(flatten)]
    pinning: processes::Pinning,
    /// The `flotilla` binary [default: beside this example, `../flotilla`].
    #[arg(long)]
    flotilla_bin: Option<PathBuf>,
    /// Give up on a step that has not finished this long after it should.
    #[arg(long, default_value = "120s", value_parser = flotilla::federation_args::parse_duration)]
    settle_timeout: Duration,
    /// Keep the data directories (logs) after the run.
    #[arg(long)]
    keep: bool,
}

impl Args {
    fn flotilla_bin(&self) -> PathBuf {
        self.flotilla_bin.clone().unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap_or_default();
            exe.parent().and_then(Path::parent).map(|d| d.join("flotilla")).unwrap_or_else(|| PathBuf::from("flotilla"))
        })
    }
}

/// The number of ready addresses in `slices`.
fn ready_addresses(slices: &[EndpointSlice]) -> usize {
    slices
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        .map(|e| e.addresses.len())
        .sum()
}

async fn count(client: &kube::Client, service: &str) -> usize {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    api.list(&lp).await.map(|l| ready_addresses(&l.items)).unwrap_or(usize::MAX)
}

/// The number of A records the DNS server answers for `name`.
async fn dns_count(server: std::net::SocketAddr, name: &str) -> usize {
    use flotilla_traffic::proto::op::{Message, Query};
    use flotilla_traffic::proto::rr::{Name, RecordType};
    let Ok(sock) = tokio::net::UdpSocket::bind("127.0.0.1:0").await else { return usize::MAX };
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_str(name).unwrap(), RecordType::A));
    let _ = sock.send_to(&m.to_vec().unwrap(), server).await;
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(Duration::from_secs(1), sock.recv(&mut buf)).await {
        Ok(Ok(n)) => Message::from_vec(&buf[..n]).map(|r| r.answers.len()).unwrap_or(usize::MAX),
        _ => usize::MAX,
    }
}

/// Poll `probe` every 5 ms until it returns `want`; the time from `since`.
async fn until<F, Fut>(since: Instant, timeout: Duration, want: usize, probe: F) -> anyhow::Result<Duration>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    loop {
        if probe().await == want {
            return Ok(since.elapsed());
        }
        if since.elapsed() > timeout {
            bail!("still not {want} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn workload(replicas: i32) -> Vec<Value> {
    vec![
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
            "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}}),
    ]
}

async fn apply(client: &kube::Client, obj: &Value) -> anyhow::Result<()> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "Deployment" => "deployments".to_string(),
        "Service" => "services".to_string(),
        "Namespace" => "namespaces".to_string(),
        "CustomResourceDefinition" => "customresourcedefinitions".to_string(),
        "PropagationPolicy" => "propagationpolicies".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    let ar = kube::api::ApiResource { group: group.into(), version: version.into(), api_version: api_version.into(), kind: kind.into(), plural };
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let o: DynamicObject = serde_json::from_value(obj.clone())?;
    match api.create(&PostParams::default(), &o).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("create {kind} {name}")),
    }
}

async fn run(args: &Args, changes: usize, errors: Arc<Errors>) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("traffic-bench-").tempdir()?;
    let dir_path = dir.path().to_path_buf();
    if args.keep {
        println!("  data and logs: {} (kept)", dir_path.display());
        std::mem::forget(dir);
    }
    let bin = args.flotilla_bin();
    let (members_proc, members) = processes::start_members(&bin, &args.pinning.member_cpus, 3, &dir_path, &[]).await?;
    let crds: Vec<Value> = flotilla_api::federation::crds().into_iter().filter(|c| c["spec"]["group"] == "multicluster.x-k8s.io").collect();
    for m in &members {
        for crd in &crds {
            apply(&m.client, crd).await?;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let data = dir_path.join("flotilla");
    let up: Vec<String> = ["up", "--data-dir", &data.to_string_lossy(), "--listen", "127.0.0.1:0", "--dns-listen", "127.0.0.1:0", "--dns-ttl", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut cp_proc = Proc::spawn("flotilla up", &args.pinning.cp_cpus, &bin, &up, &dir_path.join("flotilla.log"))?;
    let lines = cp_proc.wait_for(args.settle_timeout, |l| l.starts_with("flotilla: serving DNS on ")).await?;
    let dns: std::net::SocketAddr =
        lines.iter().find_map(|l| l.strip_prefix("flotilla: serving DNS on ")?.split_whitespace().next()?.parse().ok()).context("the DNS address")?;
    let admin = data.join("admin.kubeconfig");
    let cp = client_from(&admin).await?;
    processes::join_flotilla(&bin, &args.pinning.member_cpus, &admin, &members, &dir_path).await?;
    wait_ready(&cp, 3, args.settle_timeout).await?;
    println!("  3 members joined and Ready; DNS on {dns}");

    apply(&cp, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await?;
    for m in &members[..2] {
        apply(&m.client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await?;
        for o in workload(1) {
            apply(&m.client, &o).await?;
        }
    }
    for o in [
        json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport", "metadata": {"name": "web", "namespace": NS}}),
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "export", "namespace": NS},
            "spec": {"resourceSelectors": [{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport", "name": "web"}],
                "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]}}}}),
        json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport", "metadata": {"name": "web", "namespace": NS},
            "spec": {"type": "Headless", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
        json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy", "metadata": {"name": "import", "namespace": NS},
            "spec": {"resourceSelectors": [{"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport", "name": "web"}],
                "placement": {"clusterAffinity": {"clusterNames": ["member3"]}}}}),
    ] {
        apply(&cp, &o).await?;
    }
    let name = format!("web.{NS}.svc.clusterset.local.");
    let (m1, m3) = (members[0].client.clone(), members[2].client.clone());
    let t = Instant::now();
    until(t, args.settle_timeout, 2, || count(&m3, "derived-web")).await.context("member3 seeing both clusters' endpoints")?;
    until(t, args.settle_timeout, 2, || dns_count(dns, &name)).await.context("the DNS answering both clusters' endpoints")?;
    println!("  exported, imported and answered in {}", ms(t.elapsed()));

    let deployments: Api<DynamicObject> = Api::namespaced_with(m1.clone(), NS, &kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()));
    let (mut member, mut consumer, mut answer) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..changes {
        let replicas = if i % 2 == 0 { 2 } else { 1 };
        let total = replicas + 1;
        let t = Instant::now();
        deployments.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}}))).await?;
        let r = tokio::join!(
            until(t, args.settle_timeout, replicas as usize, || count(&m1, "web")),
            until(t, args.settle_timeout, total as usize, || count(&m3, "derived-web")),
            until(t, args.settle_timeout, total as usize, || dns_count(dns, &name)),
        );
        match r {
            (Ok(a), Ok(b), Ok(c)) => {
                member.push(a);
                consumer.push(b);
                answer.push(c);
            }
            (a, b, c) => errors.add(format!("change {i} to {replicas} replicas: member {a:?}, consumer {b:?}, DNS {c:?}")),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for v in [&mut member, &mut consumer, &mut answer] {
        v.sort();
    }
    println!("| from member1's scale request to | p50 | p99 | max |");
    println!("|---|---|---|---|");
    for (what, v) in [("member1's own EndpointSlice (ceiling)", &member), ("member3's imported slices", &consumer), ("the DNS answer", &answer)] {
        if let Some(max) = v.last() {
            println!("| {what} | {} | {} | {} |", ms(pct(v, 0.5)), ms(pct(v, 0.99)), ms(*max));
        }
    }
    cp_proc.stop().await;
    members_proc.stop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = Args::parse();
    flotilla_sim::bench::init();
    let cpus = match args.pinning.pin_driver() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let changes = args.changes.unwrap_or(if args.smoke { 3 } else { 20 });
    println!(
        "# traffic propagation ({} run, {} build, {} CPUs, load average {}); control plane on CPUs {:?}, members and driver on {:?}; {changes} changes",
        if args.smoke { "smoke" } else { "full" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        cpus,
        loadavg(),
        args.pinning.cp_cpus,
        args.pinning.member_cpus,
    );
    let errors = Arc::new(Errors::default());
    let outcome = tokio::select! {
        r = run(&args, changes, errors.clone()) => r,
        signal = interrupt() => Err(anyhow::anyhow!("interrupted ({signal})")),
    };
    if let Err(e) = outcome {
        errors.add(format!("{e:#}"));
    }
    println!("load average at the end: {}", loadavg());
    match Arc::try_unwrap(errors) {
        Ok(errors) => errors.verdict(),
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
