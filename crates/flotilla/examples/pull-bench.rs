//! Pull-mode benchmark: the control plane served over HTTPS on loopback as `flotilla up` serves
//! it (embedded store, certificates, `kube-public/cluster-info`, the CSR approver and signer,
//! the cluster proxy and the agents' tunnels), and 2 × N simulated members in this process: N
//! joined in Push mode as `flotilla up --demo` joins them, N registered and run in Pull mode —
//! each with a bootstrap token, `flotilla register`'s code (token discovery with the CA pinned,
//! a CSR approved and signed) and `flotilla agent`'s code as a task of this process, talking to
//! the control plane over TLS with its own certificate and opening its own tunnel.
//!
//!   cargo build --release -p flotilla --example pull-bench
//!   $CARGO_TARGET_DIR/release/examples/pull-bench                  (100 + 100 members)
//!   (smoke, for CI: $CARGO_TARGET_DIR/debug/examples/pull-bench --smoke)
//!
//! It measures, in this order:
//! 1. registration: N tokens, then all N members registering at once — time until every
//!    certificate is issued and until every Cluster is Ready, per member p50/p99 and in all;
//! 2. memory: the process's resident set before the agents start and once all are Ready,
//!    divided by N (an agent's own tasks, clients and tunnel, and what the control plane holds
//!    for it: its Cluster, RBAC, watches and tunnel);
//! 3. propagation, push and pull in one run: templates Divided 1:1 over pairs of push members
//!    and over pairs of pull members, alternating, open loop at `--rate`; latency from the
//!    scheduled create to the copy in the last target member's store, p50/p99 per mode;
//! 4. request latency: `GET /api/v1/namespaces/default` of a pull member straight to its API
//!    server, through the cluster proxy and the tunnel, and (for scale) through the cluster
//!    proxy to a push member — one after another, interleaved, p50/p99 and ratios.
//!
//! The run fails (exit 1) only on errors — a registration or agent that failed, a template
//! missing in a target member or with the wrong replicas — never on its figures. Results go in
//! docs/benchmarks/pull.md.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use flotilla::federation_args::{FederationArgs, parse_duration};
use flotilla_api::bootstrap_token as bt;
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_apiserver::ApiServerConfig;
use flotilla_apiserver::pki::{self, Bundle};
use flotilla_apiserver::serve::{ServeConfig, serve_on};
use flotilla_runtime::CancellationToken;
use flotilla_sim::bench::{Arrivals, Errors, Phase, follow_deployments, loadavg, mib, pct, rss};
use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use flotilla_store::Store;
use flotilla_store::embedded::{EmbeddedConfig, EmbeddedStore};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Namespace of the templates on the control plane (and of their copies in the members).
const NS: &str = "bench";
const PAIR_LABEL: &str = "bench.flotilla.io/pair";

#[derive(Parser)]
#[command(about = "Pull mode: registration, propagation through agents vs push, tunnel latency, memory per agent")]
struct Args {
    /// CI size: 4 + 4 members, a few templates and requests; seconds in a debug build.
    #[arg(long)]
    smoke: bool,
    /// Members behind agents, and as many joined in Push mode [default: 100; smoke: 4].
    #[arg(long)]
    members: Option<usize>,
    /// Templates of the propagation run, half to push pairs and half to pull pairs
    /// [default: 1000; smoke: 16].
    #[arg(long)]
    templates: Option<usize>,
    /// Offered rate of the propagation run, templates/s over both modes [default: 20; smoke: 10].
    #[arg(long)]
    rate: Option<f64>,
    /// Requests per path in the latency comparison [default: 500; smoke: 30].
    #[arg(long)]
    requests: Option<usize>,
    /// Members registering at once [default: all].
    #[arg(long)]
    register_parallelism: Option<usize>,
    /// Give up on registration, or on templates not all arrived, this long after the last start.
    #[arg(long, default_value = "180s", value_parser = parse_duration)]
    settle_timeout: Duration,
    #[command(flatten)]
    federation: FederationArgs,
}

struct Sizes {
    members: usize,
    templates: usize,
    rate: f64,
    requests: usize,
}

impl Args {
    fn sizes(&self) -> Sizes {
        let s = self.smoke;
        Sizes {
            members: self.members.unwrap_or(if s { 4 } else { 100 }),
            templates: self.templates.unwrap_or(if s { 16 } else { 1000 }),
            rate: self.rate.unwrap_or(if s { 10.0 } else { 20.0 }),
            requests: self.requests.unwrap_or(if s { 30 } else { 500 }),
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn sorted(mut v: Vec<Duration>) -> Vec<Duration> {
    v.sort_unstable();
    v
}

// ---------------------------------------------------------------------------------------------
// The control plane, served

struct ControlPlane {
    store: Arc<dyn Store>,
    api: flotilla_apiserver::ApiServer,
    serving: flotilla_apiserver::serve::Serving,
    controllers: flotilla::controllers::Running,
    /// `HOST:PORT`, as `flotilla register` takes it.
    address: String,
    ca_pem: String,
    admin_kubeconfig: PathBuf,
}

/// The control plane as `flotilla up` serves it, on a loopback port of its own.
async fn serve_control_plane(dir: &Path, federation: &FederationArgs) -> anyhow::Result<ControlPlane> {
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(EmbeddedConfig::new(dir.join("store.redb"))).await?);
    let bundle = Bundle::ensure(dir, &["127.0.0.1".to_string(), "localhost".to_string()]).context("certificates")?;
    let listener = flotilla_apiserver::serve::bind("127.0.0.1:0".parse()?)?;
    let advertise = listener.local_addr()?;
    let (api, _) = flotilla::control_plane::start(store.clone(), ApiServerConfig { advertise, ..ApiServerConfig::default() }).await?;
    flotilla::cluster_proxy::install(&api, Default::default(), Default::default());
    let mut serve_cfg = ServeConfig::new(advertise, bundle.serving.cert_pem.clone(), bundle.serving.key_pem.clone());
    serve_cfg.client_ca_pem = Some(bundle.ca.cert_pem.clone());
    let serving = serve_on(listener, api.router(), serve_cfg).await?;
    let url = format!("https://{advertise}");
    let admin_kubeconfig = dir.join("admin.kubeconfig");
    pki::write_kubeconfig(&admin_kubeconfig, &pki::kubeconfig("flotilla", &url, &bundle.ca.cert_pem, &bundle.admin))?;
    flotilla::control_plane::seed_cluster_info(&flotilla::controllers::client(&api, "system:flotilla:cluster-info"), &url, &bundle.ca.cert_pem).await?;
    let signing = flotilla_kube_controllers::csr_signing::SigningCa {
        cert_pem: bundle.ca.cert_pem.clone(),
        key_pem: bundle.ca.key_pem(),
        max_duration: flotilla_kube_controllers::csr_signing::DEFAULT_DURATION,
    };
    let controllers = flotilla::controllers::start(&api, federation, Some(signing))?;
    Ok(ControlPlane { store, api, serving, controllers, address: advertise.to_string(), ca_pem: bundle.ca.cert_pem.clone(), admin_kubeconfig })
}

// ---------------------------------------------------------------------------------------------
// Members

fn push_name(i: usize) -> String {
    format!("push-{}", i + 1)
}

fn pull_name(i: usize) -> String {
    format!("pull-{}", i + 1)
}

fn ready(c: &Cluster) -> bool {
    c.status.as_ref().and_then(|s| s.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")).is_some_and(|c| c.status == "True")
}

/// The Clusters that are Ready now.
async fn ready_clusters(cp: &kube::Client) -> anyhow::Result<Vec<String>> {
    let list = Api::<Cluster>::all(cp.clone()).list(&Default::default()).await?;
    Ok(list.items.iter().filter(|c| ready(c)).map(|c| c.name_any()).collect())
}

/// What registering one member took.
#[derive(Clone, Copy, Default)]
struct Registration {
    started: Option<Instant>,
    /// The agent's certificate issued (`flotilla register` done).
    issued: Option<Instant>,
    ready: Option<Instant>,
}

/// Register pull member `name` with a token made for it, then run its agent until `stop`.
async fn register_and_run(
    cp: ControlPlaneRef<'_>,
    name: &str,
    member_kubeconfig: &Path,
    out: &Path,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let at = flotilla::demo::RegisterAt { client: cp.client, address: cp.address, pin: cp.pin };
    flotilla::demo::register_pull_member(at, name, out, "pull-bench").await?;
    let agent = flotilla::demo::agent_args(name, out, member_kubeconfig, &[])?;
    Ok(tokio::spawn(flotilla::agent::run_until(agent, stop)))
}

#[derive(Clone, Copy)]
struct ControlPlaneRef<'a> {
    client: &'a kube::Client,
    address: &'a str,
    pin: &'a str,
}

// ---------------------------------------------------------------------------------------------
// Propagation

fn deployment(name: &str, pair: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name, PAIR_LABEL: pair}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    })
}

/// Divided, Weighted 1:1 over members `a` and `b`, for the templates labelled `pair`.
fn pair_policy(pair: &str, a: &str, b: &str) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": pair, "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {PAIR_LABEL: pair}}}],
            "placement": {
                "clusterAffinity": {"clusterNames": [a, b]},
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
                    "weightPreference": {"staticWeightList": [
                        {"targetCluster": {"clusterNames": [a]}, "weight": 1},
                        {"targetCluster": {"clusterNames": [b]}, "weight": 1}
                    ]}
                }
            }
        }
    })
}

/// One template of the run: its name, which mode, and its two target members (indices into
/// the fleet order: push members 0..N, pull members N..2N).
struct Template {
    name: String,
    pull: bool,
    pair: String,
    targets: [usize; 2],
}

fn templates(count: usize, members: usize) -> Vec<Template> {
    let pairs = members / 2;
    (0..count)
        .map(|j| {
            let pull = j % 2 == 1;
            let k = (j / 2) % pairs;
            let base = if pull { members } else { 0 };
            let mode = if pull { "pull" } else { "push" };
            Template { name: format!("{mode}-{j}"), pull, pair: format!("{mode}-pair-{k}"), targets: [base + 2 * k, base + 2 * k + 1] }
        })
        .collect()
}

/// Create the templates open loop at `rate`; return, per template, its latency to the last
/// target member (push and pull apart).
async fn propagate(
    cp: &kube::Client,
    arrivals: &Arc<Arrivals>,
    list: &[Template],
    rate: f64,
    settle: Duration,
    errors: &Errors,
) -> (Vec<Duration>, Vec<Duration>) {
    let api: Api<DynamicObject> = Api::namespaced_with(cp.clone(), NS, &ApiResource::erase::<Deployment>(&()));
    let begin = Instant::now() + Duration::from_millis(20);
    let create_errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut creators = tokio::task::JoinSet::new();
    for (i, t) in list.iter().enumerate() {
        let due = begin + Duration::from_secs_f64(i as f64 / rate);
        let (api, body, name, create_errors) = (api.clone(), deployment(&t.name, &t.pair), t.name.clone(), create_errors.clone());
        creators.spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            let obj: DynamicObject = serde_json::from_value(body).expect("a valid Deployment");
            if let Err(e) = api.create(&PostParams::default(), &obj).await {
                create_errors.lock().push(format!("create {NS}/{name}: {e}"));
            }
        });
    }
    let complete = || list.iter().filter(|t| arrivals.count(&t.name) >= 2).count();
    let mut last_report = Instant::now();
    while creators.join_next().await.is_some() {
        if last_report.elapsed() >= Duration::from_secs(10) {
            println!(
                "    … {} of {} created, {} in both target members ({:.0}s)",
                (begin.elapsed().as_secs_f64() * rate) as usize,
                list.len(),
                complete(),
                begin.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
    }
    let deadline = Instant::now() + settle;
    while complete() < list.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for e in create_errors.lock().iter() {
        errors.add(e.clone());
    }
    let (mut push, mut pull) = (Vec::new(), Vec::new());
    for (i, t) in list.iter().enumerate() {
        let got = arrivals.of(&t.name);
        let mut last = None;
        for target in t.targets {
            match got.iter().find(|(m, _, _)| *m == target) {
                None => errors.add(format!("{NS}/{} never arrived in member #{target}", t.name)),
                Some((_, _, r)) if *r != 1 => errors.add(format!("{NS}/{} has {r} replicas in member #{target}, want 1", t.name)),
                Some((_, at, _)) => last = last.max(Some(*at)),
            }
        }
        if let Some(o) = got.iter().find(|(m, _, _)| !t.targets.contains(m)) {
            errors.add(format!("{NS}/{} arrived in member #{}, which is not a target", t.name, o.0));
        }
        if let Some(last) = last {
            let due = begin + Duration::from_secs_f64(i as f64 / rate);
            if t.pull { &mut pull } else { &mut push }.push(last.saturating_duration_since(due));
        }
    }
    (sorted(push), sorted(pull))
}

// ---------------------------------------------------------------------------------------------
// Request latency

/// Sequential GETs of each path with its client, interleaved; latencies per path, sorted.
async fn request_latencies(paths: &[(&str, &kube::Client, String)], n: usize, errors: &Errors) -> Vec<Vec<Duration>> {
    let mut out = vec![Vec::with_capacity(n); paths.len()];
    for round in 0..n + 10 {
        for (i, (what, client, path)) in paths.iter().enumerate() {
            let req = http::Request::get(path.as_str()).body(Vec::new()).expect("a request");
            let t = Instant::now();
            match client.request_text(req).await {
                // The first ten rounds warm connections up.
                Ok(_) if round >= 10 => out[i].push(t.elapsed()),
                Ok(_) => {}
                Err(e) => errors.add(format!("GET {path} ({what}): {e}")),
            }
        }
    }
    out.into_iter().map(sorted).collect()
}

async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(flotilla::agent::load(path).await?)?)
}

// ---------------------------------------------------------------------------------------------

async fn run(args: &Args, sizes: &Sizes, errors: &Errors) -> anyhow::Result<()> {
    let n = sizes.members;
    anyhow::ensure!(n >= 2 && n.is_multiple_of(2), "--members must be even and at least 2 (members are paired)");
    let dir = tempfile::Builder::new().prefix("pull-bench-").tempdir()?;
    let phase = Phase::start();
    let cp = serve_control_plane(dir.path(), &args.federation).await?;
    let client = flotilla::controllers::client(&cp.api, "bench");
    println!("control plane serving on https://{} {}", cp.address, phase.end());

    // The members: push-1..N joined in Push mode, pull-1..N started only.
    let phase = Phase::start();
    let configs: Vec<MemberConfig> = (0..2 * n)
        .map(|i| {
            let mut c = MemberConfig::new(&if i < n { push_name(i) } else { pull_name(i - n) });
            c.pod_cidr = flotilla_sim::config::pod_cidr_for(i);
            c.nodes.pods = 20_000;
            c
        })
        .collect();
    let fleet = Fleet::start(FleetConfig::new(configs.clone(), dir.path().join("fleet")), |done, total| {
        if done == total || done % 50 == 0 {
            println!("    … {done}/{total} members started");
        }
    })
    .await?;
    {
        let joins = configs[..n].iter().map(|m| {
            let kubeconfig = fleet.entry(&m.name).expect("a started member").kubeconfig.clone();
            let client = client.clone();
            async move { flotilla::demo::join_member(m, &kubeconfig, &client).await }
        });
        let mut joined = futures::stream::iter(joins).buffer_unordered(16);
        while let Some(r) = joined.next().await {
            r?;
        }
    }
    let deadline = Instant::now() + args.settle_timeout;
    while ready_clusters(&client).await?.len() < n {
        anyhow::ensure!(Instant::now() < deadline, "the push members did not all turn Ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("members: {} started, {n} joined in Push mode and Ready {}", 2 * n, phase.end());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = rss().0;

    // 1. Registration.
    println!("\n## registration: {n} members at once (token, discovery, CSR, agent, Ready)");
    let pin = bt::ca_cert_hash(&cp.ca_pem).map_err(anyhow::Error::msg)?;
    let stop = CancellationToken::new();
    let times: Arc<Mutex<Vec<Registration>>> = Arc::new(Mutex::new(vec![Registration::default(); n]));
    let phase = Phase::start();
    let start = Instant::now();
    let agents: Arc<Mutex<Vec<tokio::task::JoinHandle<anyhow::Result<()>>>>> = Arc::default();
    let registrations = (0..n).map(|i| {
        let (name, times, agents, stop, client, pin) = (pull_name(i), times.clone(), agents.clone(), stop.clone(), client.clone(), pin.clone());
        let member = fleet.entry(&name).expect("a started member").kubeconfig.clone();
        let out = dir.path().join(format!("{name}-agent.kubeconfig"));
        let address = cp.address.clone();
        async move {
            times.lock()[i].started = Some(Instant::now());
            let cpr = ControlPlaneRef { client: &client, address: &address, pin: &pin };
            let agent = register_and_run(cpr, &name, &member, &out, stop).await?;
            times.lock()[i].issued = Some(Instant::now());
            agents.lock().push(agent);
            Ok::<_, anyhow::Error>(())
        }
    });
    let parallelism = args.register_parallelism.unwrap_or(n).max(1);
    let mut registering = futures::stream::iter(registrations).buffer_unordered(parallelism);
    let watcher = {
        let (client, times) = (client.clone(), times.clone());
        async move {
            let deadline = Instant::now() + args.settle_timeout;
            loop {
                let now = Instant::now();
                let ready = ready_clusters(&client).await.unwrap_or_default();
                let done = {
                    let mut t = times.lock();
                    for (i, r) in t.iter_mut().enumerate() {
                        if r.ready.is_none() && ready.contains(&pull_name(i)) {
                            r.ready = Some(now);
                        }
                    }
                    t.iter().all(|r| r.ready.is_some())
                };
                if done || now > deadline {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let registered = async {
        while let Some(r) = registering.next().await {
            if let Err(e) = r {
                errors.add(format!("{e:#}"));
            }
        }
    };
    tokio::join!(registered, watcher);
    drop(registering);
    let t = times.lock().clone();
    let issued = sorted(t.iter().filter_map(|r| Some(r.issued?.saturating_duration_since(r.started?))).collect());
    let to_ready = sorted(t.iter().filter_map(|r| Some(r.ready?.saturating_duration_since(r.started?))).collect());
    let all_ready = t.iter().filter_map(|r| r.ready).max().map(|r| r.saturating_duration_since(start));
    for (i, r) in t.iter().enumerate() {
        if r.ready.is_none() {
            errors.add(format!("{} never turned Ready", pull_name(i)));
        }
    }
    println!(
        "  certificate issued: p50 {} p99 {}; Cluster Ready: p50 {} p99 {}; all {} Ready after {}",
        secs(pct(&issued, 0.5)),
        secs(pct(&issued, 0.99)),
        secs(pct(&to_ready, 0.5)),
        secs(pct(&to_ready, 0.99)),
        to_ready.len(),
        all_ready.map_or("—".into(), secs)
    );
    println!("  {}", phase.end());

    // 2. Memory.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_after = rss().0;
    let per_agent = rss_after.saturating_sub(rss_before) as f64 / n as f64;
    println!("\n## memory");
    println!(
        "  resident set: {} with {} members and {n} push clusters; {} with {n} agents too → {} per agent (agent and control-plane side together)",
        mib(rss_before as f64),
        2 * n,
        mib(rss_after as f64),
        mib(per_agent)
    );

    // 3. Propagation, push and pull in one run.
    println!("\n## propagation: {} templates, Divided 1:1 over pairs, push and pull alternating, open loop at {}/s", sizes.templates, sizes.rate);
    let phase = Phase::start();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": NS}}))?).await?;
    let ns_key = format!("/registry/core/namespaces/{NS}");
    let deadline = Instant::now() + args.settle_timeout;
    for e in fleet.members() {
        let store = e.member.store();
        while store.get(ns_key.as_bytes()).await?.is_none() {
            anyhow::ensure!(Instant::now() < deadline, "namespace {NS} never reached {}", e.member.name());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let policies: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource {
            group: "policy.karmada.io".into(),
            version: "v1alpha1".into(),
            api_version: "policy.karmada.io/v1alpha1".into(),
            kind: "PropagationPolicy".into(),
            plural: "propagationpolicies".into(),
        },
    );
    for k in 0..n / 2 {
        for (mode, name) in [("push", push_name as fn(usize) -> String), ("pull", pull_name)] {
            let policy = pair_policy(&format!("{mode}-pair-{k}"), &name(2 * k), &name(2 * k + 1));
            policies.create(&PostParams::default(), &serde_json::from_value(policy)?).await?;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let arrivals = Arc::new(Arrivals::default());
    let followers: Vec<_> = (0..2 * n)
        .map(|i| {
            let name = if i < n { push_name(i) } else { pull_name(i - n) };
            tokio::spawn(follow_deployments(i, fleet.member(&name).expect("a started member").store(), NS, arrivals.clone()))
        })
        .collect();
    let list = templates(sizes.templates, n);
    let (push, pull) = propagate(&client, &arrivals, &list, sizes.rate, args.settle_timeout, errors).await;
    for f in followers {
        f.abort();
    }
    let (push50, push99, pull50, pull99) = (pct(&push, 0.5), pct(&push, 0.99), pct(&pull, 0.5), pct(&pull, 0.99));
    println!("  push: {} templates, p50 {} p99 {}", push.len(), ms(push50), ms(push99));
    println!(
        "  pull: {} templates, p50 {} p99 {}  (pull/push: p50 {:.2}×, p99 {:.2}×)",
        pull.len(),
        ms(pull50),
        ms(pull99),
        pull50.as_secs_f64() / push50.as_secs_f64().max(1e-9),
        pull99.as_secs_f64() / push99.as_secs_f64().max(1e-9)
    );
    println!("  {}", phase.end());

    // 4. Request latency, once the members have simulated every pod of the run.
    for m in fleet.members() {
        let _ = m.member.idle().await;
    }
    println!("\n## request latency: GET /api/v1/namespaces/default, {} each, sequential and interleaved", sizes.requests);
    let phase = Phase::start();
    let admin = client_from(&cp.admin_kubeconfig).await?;
    let direct = client_from(&fleet.entry(&pull_name(0)).expect("a started member").kubeconfig).await?;
    let proxy = |cluster: &str| format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy/api/v1/namespaces/default");
    let paths = [
        ("direct to the member", &direct, "/api/v1/namespaces/default".to_string()),
        ("proxy → tunnel → pull member", &admin, proxy(&pull_name(0))),
        ("proxy → push member", &admin, proxy(&push_name(0))),
    ];
    let lat = request_latencies(&paths, sizes.requests, errors).await;
    for ((what, _, _), l) in paths.iter().zip(&lat) {
        println!("  {what:<30} p50 {:>9} p99 {:>9}", ms(pct(l, 0.5)), ms(pct(l, 0.99)));
    }
    let ratio = |a: &[Duration], b: &[Duration], p: f64| pct(a, p).as_secs_f64() / pct(b, p).as_secs_f64().max(1e-9);
    println!(
        "  tunnel vs direct: p50 {:.2}×, p99 {:.2}×; tunnel vs push proxy: p50 {:.2}×, p99 {:.2}×",
        ratio(&lat[1], &lat[0], 0.5),
        ratio(&lat[1], &lat[0], 0.99),
        ratio(&lat[1], &lat[2], 0.5),
        ratio(&lat[1], &lat[2], 0.99)
    );
    println!("  {}", phase.end());

    // Stop everything; an agent that ended with an error is one.
    stop.cancel();
    let handles: Vec<_> = std::mem::take(&mut *agents.lock());
    for h in handles {
        match tokio::time::timeout(Duration::from_secs(30), h).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => errors.add(format!("an agent failed: {e:#}")),
            Ok(Err(e)) => errors.add(format!("an agent panicked: {e}")),
            Err(_) => errors.add("an agent did not stop within 30s".into()),
        }
    }
    println!(
        "\n## summary\n  {n} pull members registered and Ready in {}; propagation p99 pull {} vs push {}; tunnel p50 {:.2}× direct; {} per agent",
        all_ready.map_or("—".into(), secs),
        ms(pull99),
        ms(push99),
        ratio(&lat[1], &lat[0], 0.5),
        mib(per_agent)
    );
    cp.controllers.shutdown(Duration::from_secs(5)).await;
    fleet.shutdown().await?;
    cp.serving.shutdown().await?;
    drop(cp.api);
    drop(cp.store);
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    flotilla_sim::bench::init();
    let sizes = args.sizes();
    println!(
        "# pull benchmark ({} run, {} build, {} CPUs, load average {})",
        if args.smoke { "smoke" } else { "full" },
        if cfg!(debug_assertions) { "debug" } else { "release" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    println!(
        "{} members behind agents and {} in Push mode; {} templates at {}/s; {} requests per path",
        sizes.members, sizes.members, sizes.templates, sizes.rate, sizes.requests
    );
    let errors = Errors::default();
    if let Err(e) = run(&args, &sizes, &errors).await {
        errors.add(format!("{e:#}"));
    }
    errors.verdict()
}
