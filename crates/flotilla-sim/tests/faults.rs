//! Each fault knob as a client sees it, over the fleet's real HTTPS listener with a kube-rs
//! client built from the member's kubeconfig (its retries off, so an injected error reaches the
//! caller as the member sent it): set at start (`MemberConfig::faults`, the node shape) and
//! changed at run time through the admin endpoint (`/sim/v1/…`, as the fleet admin). Plus RBAC:
//! a least-privilege token is refused what its role does not allow.
//!
//! Timings are never bounded from above: latency is checked as a lower bound only (a timer
//! never fires early), everything else waits for a state with a generous deadline.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use flotilla_sim::{Fleet, FleetConfig, MemberConfig};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use support::{eventually, fast};
use tempfile::TempDir;

/// A running fleet, its data directory and the fleet admin's client.
struct TestFleet {
    fleet: Fleet,
    admin: Client,
    _dir: TempDir,
}

async fn config_from(path: &Path) -> kube::Config {
    let kc = Kubeconfig::read_from(path).expect("a readable kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("a usable kubeconfig");
    config.default_retry = false;
    config
}

async fn start_fleet(members: Vec<MemberConfig>, own_listeners: bool) -> TestFleet {
    let dir = tempfile::tempdir().unwrap();
    let mut config = FleetConfig::new(members, dir.path().to_path_buf());
    config.own_listeners = own_listeners;
    let fleet = Fleet::start(config, |_, _| {}).await.expect("the fleet starts");
    let admin = Client::try_from(config_from(&fleet.admin_kubeconfig).await).unwrap();
    TestFleet { fleet, admin, _dir: dir }
}

/// A fleet of one member, and a client of it.
async fn one_member(m: MemberConfig) -> (TestFleet, Client) {
    let name = m.name.clone();
    let f = start_fleet(vec![m], false).await;
    let client = f.client(&name).await;
    (f, client)
}

impl TestFleet {
    /// A fresh client of `member`, from its kubeconfig (a new client opens new connections).
    async fn client(&self, member: &str) -> Client {
        Client::try_from(self.config(member).await).unwrap()
    }

    async fn config(&self, member: &str) -> kube::Config {
        config_from(&self.fleet.entry(member).expect("a member of the fleet").kubeconfig).await
    }

    /// A request to the admin endpoint.
    async fn try_admin(&self, method: &str, path: &str, body: Value) -> Result<Value, kube::Error> {
        let req =
            http::Request::builder().method(method).uri(path).header("content-type", "application/json").body(serde_json::to_vec(&body).unwrap()).unwrap();
        let text = self.admin.request_text(req).await?;
        Ok(serde_json::from_str(&text).unwrap())
    }

    /// A request to the admin endpoint that must succeed.
    async fn admin(&self, method: &str, path: &str, body: Value) -> Value {
        self.try_admin(method, path, body).await.unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// A fault patch the admin endpoint must refuse as invalid.
    async fn refused_faults(&self, member: &str, patch: Value) {
        match self.try_admin("PATCH", &format!("/sim/v1/members/{member}/faults"), patch.clone()).await {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{patch}"),
            other => panic!("want 422 Invalid for {patch}, got {other:?}"),
        }
    }

    /// Merge fault settings into a member's; returns them as now in force.
    async fn set_faults(&self, member: &str, patch: Value) -> Value {
        self.admin("PATCH", &format!("/sim/v1/members/{member}/faults"), patch).await
    }
}

/// One ordinary read.
async fn probe(client: &Client) -> Result<Namespace, kube::Error> {
    Api::<Namespace>::all(client.clone()).get("default").await
}

fn api_status(r: Result<Namespace, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
        other => panic!("want a Kubernetes Status error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_delays_every_request_by_at_least_its_setting() {
    let mut m = fast("lat");
    m.faults.latency = Duration::from_millis(300);
    let (f, client) = one_member(m).await;

    let at_least = |latency: Duration| {
        let client = client.clone();
        async move {
            for _ in 0..3 {
                let t = Instant::now();
                probe(&client).await.expect("a slow request still succeeds");
                let took = t.elapsed();
                assert!(took >= latency, "a request took {took:?}, less than the latency {latency:?}");
            }
        }
    };
    at_least(Duration::from_millis(300)).await;

    let now = f.set_faults("lat", json!({"latency": "700ms", "latencyJitter": "100ms"})).await;
    assert_eq!((now["latency"].as_str(), now["latencyJitter"].as_str()), (Some("700ms"), Some("100ms")));
    at_least(Duration::from_millis(700)).await;

    let now = f.set_faults("lat", json!({"latency": null, "latencyJitter": null})).await;
    assert_eq!(now["latency"], "0ms");
    probe(&client).await.expect("answers without the latency");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_one_answers_each_error_code_and_zero_restores_service() {
    let mut m = fast("err");
    m.faults.error_rate = 1.0;
    m.faults.error_code = 503;
    let (f, client) = one_member(m).await;

    // Set at start.
    assert_eq!(api_status(probe(&client).await), (503, "ServiceUnavailable".into()));

    // Changed at run time, each code with the reason kube-apiserver gives it.
    for (code, reason) in [(500, "InternalError"), (503, "ServiceUnavailable"), (429, "TooManyRequests"), (504, "Timeout")] {
        f.set_faults("err", json!({"errorRate": 1.0, "errorCode": code})).await;
        for _ in 0..3 {
            assert_eq!(api_status(probe(&client).await), (code, reason.to_string()), "errorCode {code}");
        }
        // Writes fail the same way, and change nothing.
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{code}")}})).unwrap();
        match cms.create(&PostParams::default(), &cm).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, code),
            other => panic!("want error {code} on create, got {other:?}"),
        }
    }

    // Back to normal.
    f.set_faults("err", json!({"errorRate": 0.0})).await;
    for _ in 0..10 {
        probe(&client).await.expect("errorRate 0 fails nothing");
    }
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    assert!(cms.get_opt("cm-500").await.unwrap().is_none(), "a failed create wrote nothing");
    // An invalid setting is refused and changes nothing.
    f.refused_faults("err", json!({"errorCode": 418})).await;
    probe(&client).await.expect("still answering");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_repeats_the_error_sequence_at_a_fractional_rate() {
    let mut m = fast("seed");
    m.faults.error_rate = 0.5;
    m.faults.seed = 42;
    let (f, client) = one_member(m).await;

    let pattern = || {
        let client = client.clone();
        async move {
            let mut out = String::new();
            for _ in 0..40 {
                out.push(match probe(&client).await {
                    Ok(_) => '.',
                    Err(kube::Error::Api(s)) if s.code == 500 => 'x',
                    Err(e) => panic!("want success or the injected 500, got {e:?}"),
                });
            }
            out
        }
    };
    // Set at start.
    let first = pattern().await;
    assert!(first.contains('x') && first.contains('.'), "a rate of 0.5 fails some and not all: {first}");

    // Another seed, then the first again: the sequence restarts from the seed.
    f.set_faults("seed", json!({"seed": 7})).await;
    let other = pattern().await;
    assert_ne!(other, first, "another seed, another sequence");
    f.set_faults("seed", json!({"seed": 42})).await;
    assert_eq!(pattern().await, first, "seed 42 again repeats its sequence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_never_answers_until_it_is_lifted() {
    let short = Duration::from_secs(1);
    let mut m = fast("bh");
    m.faults.blackhole = true;
    let f = start_fleet(vec![m], false).await;

    // Set at start: a request with a short client timeout times out.
    let client = f.client("bh").await;
    assert!(tokio::time::timeout(short, probe(&client)).await.is_err(), "a blackholed request is never answered");

    f.set_faults("bh", json!({"blackhole": false})).await;
    let client = f.client("bh").await;
    eventually("an answer once the blackhole is lifted", || async { probe(&client).await.ok() }).await;

    // At run time.
    f.set_faults("bh", json!({"blackhole": true})).await;
    let client = f.client("bh").await;
    assert!(tokio::time::timeout(short, probe(&client)).await.is_err(), "a blackholed request is never answered");
    // A request waiting in the blackhole is answered once it is lifted, as TCP retransmission
    // delivers it after a partition heals.
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { probe(&client).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished());
    f.set_faults("bh", json!({"blackhole": false})).await;
    waiting.await.unwrap().expect("the waiting request is answered");
    probe(&client).await.expect("answers again");
}

fn is_refused(e: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        source = s.source();
    }
    format!("{e:?}").contains("ConnectionRefused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_closes_the_members_own_listener_until_lifted() {
    let mut a = fast("ra");
    a.faults.refuse = true;
    let b = fast("rb");
    let f = start_fleet(vec![a, b], true).await;
    let port = |m: &str| {
        let server = f.fleet.entry(m).unwrap().server().to_string();
        server.rsplit(':').next().unwrap().parse::<u16>().unwrap()
    };
    let connect = |port: u16| async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map(|_| ()).map_err(|e| e.kind()) };

    // Set at start: the member's own listener refuses; its neighbour answers.
    eventually("ra's listener refusing connections", || async { (connect(port("ra")).await == Err(std::io::ErrorKind::ConnectionRefused)).then_some(()) })
        .await;
    let err = probe(&f.client("ra").await).await.expect_err("a refused member does not answer");
    assert!(is_refused(&err), "want connection refused, got {err:?}");
    probe(&f.client("rb").await).await.expect("the other member answers");

    // Lifted at run time: the same address accepts again.
    f.set_faults("ra", json!({"refuse": false})).await;
    eventually("ra answering on its own listener again", || async { probe(&f.client("ra").await).await.ok() }).await;

    // Set at run time.
    f.set_faults("ra", json!({"refuse": true})).await;
    eventually("ra's listener refusing connections", || async { (connect(port("ra")).await == Err(std::io::ErrorKind::ConnectionRefused)).then_some(()) })
        .await;
    let err = probe(&f.client("ra").await).await.expect_err("a refused member does not answer");
    assert!(is_refused(&err), "want connection refused, got {err:?}");
    f.set_faults("ra", json!({"refuse": false})).await;
    eventually("ra answering again", || async { probe(&f.client("ra").await).await.ok() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_needs_an_own_listener() {
    let f = start_fleet(vec![fast("shared")], false).await;
    f.refused_faults("shared", json!({"refuse": true})).await;
    let dir = tempfile::tempdir().unwrap();
    let mut m = fast("shared");
    m.faults.refuse = true;
    let err = Fleet::start(FleetConfig::new(vec![m], dir.path().to_path_buf()), |_, _| {}).await.expect_err("refuse at start needs own listeners");
    assert!(err.to_string().contains("own"), "{err}");
}

fn pod(name: &str, value: Value) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}
    });
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), value.as_object()) {
        for (k, x) in extra {
            spec.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).unwrap()
}

fn with_cpu(name: &str, cpu: &str) -> Pod {
    pod(name, json!({"containers": [{"name": "c", "image": "nginx:1.25", "resources": {"requests": {"cpu": cpu}}}]}))
}

fn ready_status(n: &Node) -> Option<String> {
    n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

fn taints(n: &Node) -> Vec<(String, String)> {
    n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default().into_iter().map(|t| (t.key, t.effect)).collect()
}

fn running_on(p: &Pod) -> Option<(String, String)> {
    let node = p.spec.as_ref()?.node_name.clone()?;
    let phase = p.status.as_ref()?.phase.clone()?;
    Some((node, phase))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_goes_not_ready_tainted_and_its_pods_are_evicted_after_their_toleration() {
    let m = fast("nf");
    let (f, client) = one_member(m).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    eventually("nf-node-1 Ready", || async { (ready_status(&nodes.get("nf-node-1").await.ok()?)? == "True").then_some(()) }).await;

    // The API gives every pod 300 s tolerations of not-ready and unreachable nodes
    // (DefaultTolerationSeconds); a pod's own toleration takes their place.
    let on_node_1 = |seconds: Value| {
        let mut toleration = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"});
        if !seconds.is_null() {
            toleration["tolerationSeconds"] = seconds;
        }
        json!({"nodeSelector": {"kubernetes.io/hostname": "nf-node-1"}, "tolerations": [toleration]})
    };
    pods.create(&PostParams::default(), &pod("brief", on_node_1(json!(1)))).await.unwrap();
    pods.create(&PostParams::default(), &pod("tolerant", on_node_1(Value::Null))).await.unwrap();
    for name in ["brief", "tolerant"] {
        eventually("the pod Running on nf-node-1", || async {
            (running_on(&pods.get(name).await.ok()?)? == ("nf-node-1".into(), "Running".into())).then_some(())
        })
        .await;
    }

    let failed = f.admin("POST", "/sim/v1/members/nf/nodes/fail", json!({"nodes": ["nf-node-1"]})).await;
    assert_eq!(failed, json!({"nodes": ["nf-node-1"]}));

    // NotReady (the kubelet stopped posting status: Ready Unknown, as kube-controller-manager
    // marks it) with the unreachable taints.
    let node = eventually("nf-node-1 NotReady", || async {
        let n = nodes.get("nf-node-1").await.ok()?;
        (ready_status(&n)? == "Unknown").then_some(n)
    })
    .await;
    let t = taints(&node);
    for effect in ["NoSchedule", "NoExecute"] {
        assert!(t.contains(&("node.kubernetes.io/unreachable".into(), effect.into())), "taints {t:?}");
    }
    assert_eq!(ready_status(&nodes.get("nf-node-2").await.unwrap()).as_deref(), Some("True"), "only the failed node");

    // The pod tolerating the taint for a second is evicted once that runs out: deleted, and
    // (its kubelet being gone) possibly left Terminating, as on a real cluster. The one
    // tolerating the taint forever stays.
    let terminating = |p: Option<Pod>| p.is_none_or(|p| p.metadata.deletion_timestamp.is_some());
    eventually("brief evicted", || async { terminating(pods.get_opt("brief").await.ok()?).then_some(()) }).await;
    let tolerant = pods.get_opt("tolerant").await.unwrap();
    assert!(!terminating(tolerant), "a pod tolerating forever is not evicted");

    // Recovery: Ready again, the taints lifted.
    f.admin("POST", "/sim/v1/members/nf/nodes/recover", json!({})).await;
    eventually("nf-node-1 Ready again, untainted", || async {
        let n = nodes.get("nf-node-1").await.ok()?;
        (ready_status(&n)? == "True" && taints(&n).is_empty()).then_some(())
    })
    .await;
}

fn allocatable_cpu(n: &Node) -> Option<String> {
    Some(n.status.as_ref()?.allocatable.as_ref()?.get("cpu")?.0.clone())
}

fn unschedulable(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_change_changes_allocatable_and_what_schedules() {
    let mut m = fast("cap");
    m.nodes.count = 1;
    m.nodes.cpu = "2".into();
    let (f, client) = one_member(m).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    // Set at start: 2 CPUs, so a pod asking for 3 is Pending, Unschedulable.
    // A node is registered first and its status written next: wait for the status.
    let n = eventually("cap-node-1 with its status", || async { nodes.get("cap-node-1").await.ok().filter(|n| allocatable_cpu(n).is_some()) }).await;
    assert_eq!(allocatable_cpu(&n).as_deref(), Some("2"));
    pods.create(&PostParams::default(), &with_cpu("big", "3")).await.unwrap();
    let p = eventually("big Unschedulable", || async { pods.get("big").await.ok().filter(unschedulable) }).await;
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));

    // Grown at run time: the pending pod schedules.
    f.admin("POST", "/sim/v1/members/cap/capacity", json!({"cpu": "4"})).await;
    eventually("4 allocatable CPUs", || async { (allocatable_cpu(&nodes.get("cap-node-1").await.ok()?)? == "4").then_some(()) }).await;
    eventually("big Running on cap-node-1", || async { (running_on(&pods.get("big").await.ok()?)? == ("cap-node-1".into(), "Running".into())).then_some(()) })
        .await;

    // Shrunk: a pod that fitted beside it (half a CPU of the one left) no longer does.
    f.admin("POST", "/sim/v1/members/cap/capacity", json!({"cpu": "1"})).await;
    eventually("1 allocatable CPU", || async { (allocatable_cpu(&nodes.get("cap-node-1").await.ok()?)? == "1").then_some(()) }).await;
    pods.create(&PostParams::default(), &with_cpu("half", "500m")).await.unwrap();
    eventually("half Unschedulable", || async { pods.get("half").await.ok().filter(unschedulable) }).await;

    // Another node: it schedules there.
    f.admin("POST", "/sim/v1/members/cap/capacity", json!({"nodes": 2})).await;
    eventually("half Running on cap-node-2", || async {
        (running_on(&pods.get("half").await.ok()?)? == ("cap-node-2".into(), "Running".into())).then_some(())
    })
    .await;
    assert_eq!(allocatable_cpu(&nodes.get("cap-node-2").await.unwrap()).as_deref(), Some("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_token_is_refused_what_its_role_does_not_allow() {
    // Two members behind one listener: the token goes through `/clusters/<name>`.
    let f = start_fleet(vec![fast("rbac"), fast("other")], false).await;
    let admin = f.client("rbac").await;
    let pp = PostParams::default();
    Api::<ServiceAccount>::default_namespaced(admin.clone())
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap())
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    }))
    .unwrap();
    Api::<Role>::default_namespaced(admin.clone()).create(&pp, &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "reader-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]
    }))
    .unwrap();
    Api::<RoleBinding>::default_namespaced(admin.clone()).create(&pp, &binding).await.unwrap();
    Api::<Pod>::default_namespaced(admin.clone()).create(&pp, &pod("p", json!({}))).await.unwrap();

    let tr: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}})).unwrap();
    let issued = Api::<ServiceAccount>::default_namespaced(admin.clone()).create_token_request("reader", &pp, &tr).await.unwrap();
    let token = issued.status.expect("a TokenRequest status").token.expect("a token");

    let mut config = f.config("rbac").await;
    config.auth_info = serde_json::from_value(json!({"token": token})).unwrap();
    assert!(config.cluster_url.path().ends_with("/clusters/rbac"), "{}", config.cluster_url);
    let reader = Client::try_from(config).unwrap();

    // Inside the role.
    let pods: Api<Pod> = Api::default_namespaced(reader.clone());
    assert_eq!(pods.get("p").await.unwrap().metadata.name.as_deref(), Some("p"));
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 1);

    // Outside it: another verb, another resource, another namespace.
    let forbidden = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{what}"),
        other => panic!("{what}: want 403 Forbidden, got {other:?}"),
    };
    forbidden(pods.delete("p", &DeleteParams::default()).await.map(|_| ()), "delete pods");
    forbidden(pods.create(&pp, &pod("q", json!({}))).await.map(|_| ()), "create pods");
    forbidden(Api::<ConfigMap>::default_namespaced(reader.clone()).list(&Default::default()).await.map(|_| ()), "list configmaps");
    forbidden(Api::<Pod>::namespaced(reader.clone(), "kube-system").list(&Default::default()).await.map(|_| ()), "list pods in kube-system");
    forbidden(Api::<Node>::all(reader.clone()).list(&Default::default()).await.map(|_| ()), "list nodes");
    assert!(Api::<Pod>::default_namespaced(admin).get_opt("p").await.unwrap().is_some(), "the refused delete changed nothing");

    // The token is this member's: the other member does not know it.
    let mut config = f.config("other").await;
    config.auth_info = serde_json::from_value(json!({"token": issued_token_again(&f).await})).unwrap();
    let stranger = Client::try_from(config).unwrap();
    match Api::<Pod>::default_namespaced(stranger).list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert!(s.code == 401 || s.code == 403, "{s:?}"),
        other => panic!("want the other member to refuse rbac's token, got {other:?}"),
    }
}

/// A second token of `reader` in member `rbac`.
async fn issued_token_again(f: &TestFleet) -> String {
    let admin = f.client("rbac").await;
    let tr: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    Api::<ServiceAccount>::default_namespaced(admin)
        .create_token_request("reader", &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .expect("a token")
}
