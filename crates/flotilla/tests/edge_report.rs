//! The edge report and the edge commands (ADR 0032), on a control plane in this process (memory
//! store, the whole controller set) served on loopback so that the real binary's `flotilla edge
//! status` and `flotilla edge resolve` reach it with an admin kubeconfig. The test stands in for
//! the agent (a Pull Cluster, its Ready condition) and for the edgeSync controller (the
//! EdgeChanges in the execution space with their decisions): the report follows them — counts,
//! entries newest first, offline since —, the commands print it, refuse what cannot be resolved
//! and annotate what can, and the report goes with its Cluster.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flotilla::federation_args::FederationArgs;
use flotilla_api::federation::flotilla::edge::{
    EdgeChange, EdgeChangeSpec, EdgeChangeStatus, EdgeReport, FieldChangeRecord, FieldDecision, ObjectReference, RESOLVE_ANNOTATION, change_kind, outcome,
    phase,
};
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSpec, ClusterSyncMode};
use flotilla_apiserver::ApiServerConfig;
use flotilla_apiserver::pki::{self, Bundle};
use flotilla_apiserver::serve::{ServeConfig, Serving, serve_on};
use flotilla_store::Store;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const CLUSTER: &str = "edge-1";
const SPACE: &str = "karmada-es-edge-1";
const PATIENCE: Duration = Duration::from_secs(60);

struct ControlPlane {
    serving: Serving,
    controllers: flotilla::controllers::Running,
    client: kube::Client,
    kubeconfig: PathBuf,
}

/// The control plane as `flotilla up` assembles it, on a memory store and a loopback port.
async fn control_plane(dir: &Path) -> ControlPlane {
    let store: Arc<dyn Store> = Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
    let bundle = Bundle::ensure(dir, &["127.0.0.1".to_string()]).unwrap();
    let listener = flotilla_apiserver::serve::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let advertise = listener.local_addr().unwrap();
    let (api, _) = flotilla::control_plane::start(store, ApiServerConfig { advertise, ..ApiServerConfig::default() }).await.unwrap();
    let mut serve = ServeConfig::new(advertise, bundle.serving.cert_pem.clone(), bundle.serving.key_pem.clone());
    serve.client_ca_pem = Some(bundle.ca.cert_pem.clone());
    let serving = serve_on(listener, api.router(), serve).await.unwrap();
    let kubeconfig = dir.join("admin.kubeconfig");
    pki::write_kubeconfig(&kubeconfig, &pki::kubeconfig("flotilla", &format!("https://{advertise}"), &bundle.ca.cert_pem, &bundle.admin)).unwrap();
    // The test plays edgeSync (it writes the decisions itself).
    let settings = FederationArgs { controllers: "*,-edgeSync".into(), ..FederationArgs::default() };
    let controllers = flotilla::controllers::start(&api, &settings, None).unwrap();
    ControlPlane { serving, controllers, client: flotilla::controllers::client(&api, "edge-report-test"), kubeconfig }
}

/// Poll `check` until it gives a value; panic with `what` and its last complaint after
/// [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    flotilla_testkit::expect::eventually(PATIENCE, check).await.unwrap_or_else(|last| panic!("{what}: still {last}"))
}

/// `flotilla ARGS --control-plane-kubeconfig KC`: whether it succeeded, stdout, stderr.
async fn flotilla(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .arg("--control-plane-kubeconfig")
        .arg(kubeconfig)
        .env("FLOTILLA_LOG", "warn")
        .output()
        .await
        .expect("run flotilla");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The Ready condition an agent posts.
async fn set_ready(clusters: &Api<Cluster>, status: &str, since: &str) {
    let ready = json!({"type": "Ready", "status": status, "reason": "R", "message": "", "lastTransitionTime": since});
    clusters.patch_status(CLUSTER, &PatchParams::default(), &Patch::Merge(&json!({"status": {"conditions": [ready]}}))).await.unwrap();
}

/// The agent's copy of its record of `kind shop/name`, and the decision on it (none: not yet).
async fn record(api: &Api<EdgeChange>, name: &str, kind: &str, change: &str, seen: &str, decision: Option<(&str, &str)>) {
    let api_version = if kind == "Deployment" { "apps/v1" } else { "v1" };
    let spec = EdgeChangeSpec {
        cluster: CLUSTER.into(),
        object: ObjectReference { api_version: api_version.into(), kind: kind.into(), namespace: Some("shop".into()), name: name.into(), uid: String::new() },
        work_name: None,
        change: change.into(),
        fields: vec![FieldChangeRecord { path: "spec.replicas".into(), old: Some(json!(2)), new: Some(json!(5)) }],
        manager: Some("kubectl-scale".into()),
        first_seen: seen.into(),
        last_seen: seen.into(),
    };
    api.create(&PostParams::default(), &EdgeChange::new(name, spec)).await.unwrap();
    if let Some((phase, outcome)) = decision {
        let status = EdgeChangeStatus {
            phase: phase.into(),
            fields: vec![FieldDecision { path: "spec.replicas".into(), outcome: outcome.into(), ..Default::default() }],
            message: format!("{name}: {outcome}"),
            decided_at: Some("2026-12-05T10:00:00Z".into()),
            ..Default::default()
        };
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status }))).await.unwrap();
    }
}

/// The report's status once `ok` holds for it.
async fn report_where(reports: &Api<EdgeReport>, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let ok = &ok;
    eventually(what, move || async move {
        let r = reports.get_opt(CLUSTER).await.map_err(|e| e.to_string())?.ok_or("no report")?;
        let s = serde_json::to_value(r.status).unwrap();
        if ok(&s) { Ok(s) } else { Err(s.to_string()) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_report_follows_the_records_and_the_commands_read_and_resolve_them() {
    let dir = tempfile::tempdir().unwrap();
    let cp = control_plane(dir.path()).await;
    let kc = &cp.kubeconfig;
    let clusters: Api<Cluster> = Api::all(cp.client.clone());
    let reports: Api<EdgeReport> = Api::all(cp.client.clone());

    // A Pull cluster as its agent registers it, Ready as its agent posts it; and a Push cluster.
    clusters.create(&PostParams::default(), &Cluster::new(CLUSTER, ClusterSpec { sync_mode: ClusterSyncMode::Pull, ..Default::default() })).await.unwrap();
    set_ready(&clusters, "True", "2026-12-05T06:00:00Z").await;
    clusters.create(&PostParams::default(), &Cluster::new("push-1", ClusterSpec::default())).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(cp.client.clone());
    let namespaces = &namespaces;
    eventually(
        "the execution space",
        move || async move { namespaces.get_opt(SPACE).await.map_err(|e| e.to_string())?.map(|_| ()).ok_or("none yet".to_string()) },
    )
    .await;

    // The agent's records as the edgeSync controller left them.
    let changes: Api<EdgeChange> = Api::namespaced(cp.client.clone(), SPACE);
    record(&changes, "web", "Deployment", change_kind::MODIFIED, "2026-12-05T09:00:00Z", Some((phase::CONFLICT, outcome::CONFLICT))).await;
    record(&changes, "settings", "ConfigMap", change_kind::MODIFIED, "2026-12-05T08:00:00Z", Some((phase::DECIDED, outcome::REVERTED))).await;
    record(&changes, "fresh", "ConfigMap", change_kind::MODIFIED, "2026-12-05T09:30:00Z", None).await;
    record(&changes, "scratch", "ConfigMap", change_kind::CREATED, "2026-12-05T07:00:00Z", Some((phase::LISTED, outcome::CONVERGED))).await;

    // (Each decision is written after its record: the report is complete once the last is in.)
    let s = report_where(&reports, "the report of four records, three decided", |s| {
        s["entries"].as_array().is_some_and(|e| e.len() == 4 && e.iter().filter(|e| e["phase"] != "Pending").count() == 3)
    })
    .await;
    assert_eq!(
        (s["online"].clone(), s["pending"].clone(), s["conflicts"].clone(), s["bornAtEdge"].clone()),
        (json!(true), json!(1), json!(1), json!(1)),
        "{s}"
    );
    assert!(s.get("offlineSince").is_none(), "{s}");
    let order: Vec<&str> = s["entries"].as_array().unwrap().iter().map(|e| e["record"].as_str().unwrap()).collect();
    assert_eq!(order, ["fresh", "web", "settings", "scratch"], "newest first");
    assert_eq!(s["entries"][0]["phase"], "Pending", "{s}");
    assert_eq!(s["entries"][1]["fields"][0], json!({"path": "spec.replicas", "outcome": "Conflict"}));
    assert_eq!(s["entries"][1]["decidedAt"], "2026-12-05T10:00:00Z");
    let report = reports.get(CLUSTER).await.unwrap();
    let owner = &report.owner_references()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Cluster", CLUSTER));
    assert!(reports.get_opt("push-1").await.unwrap().is_none(), "a Push cluster has no report");

    // `edge status`: connectivity, counts, the table and what waits for a decision.
    let (ok, out, err) = flotilla(kc, &["edge", "status", "--cluster", CLUSTER]).await;
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("Cluster edge-1: online\nChanges made at the edge: 1 pending, 1 conflict, 1 born at the edge\n"), "{out}");
    let rows: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("NAMESPACE")).collect();
    assert!(rows[0].split_whitespace().eq(["NAMESPACE", "OBJECT", "CHANGE", "FIELDS", "BY", "LAST-SEEN", "DECISION"]), "{out}");
    assert!(
        rows[1].starts_with("shop") && rows[1].contains("configmap/fresh") && rows[1].contains("spec.replicas: Pending") && rows[1].ends_with("Pending"),
        "{out}"
    );
    assert!(rows[2].contains("deployment/web") && rows[2].contains("spec.replicas: Conflict") && rows[2].contains("kubectl-scale"), "{out}");
    assert!(rows[2].contains("2026-12-05T09:00:00Z") && rows[2].ends_with("Conflict"), "{out}");
    assert!(out.contains("  flotilla edge resolve deployment/web -n shop --cluster edge-1 --keep edge|control-plane\n    web: Conflict\n"), "{out}");
    let (ok, out, err) = flotilla(kc, &["edge", "status", "-o", "json"]).await;
    assert!(ok, "{out}{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "one Pull cluster: {out}");
    assert_eq!(list["items"][0]["status"]["conflicts"], 1);
    let (ok, out, _) = flotilla(kc, &["edge", "status", "--cluster", CLUSTER, "-o", "yaml"]).await;
    assert!(ok && out.contains("kind: EdgeReport") && out.contains("bornAtEdge: 1"), "{out}");

    // No report: said why.
    let (ok, _, err) = flotilla(kc, &["edge", "status", "--cluster", "push-1"]).await;
    assert!(!ok && err.contains("it is a Push cluster"), "{err}");
    let (ok, _, err) = flotilla(kc, &["edge", "status", "--cluster", "nowhere"]).await;
    assert!(!ok && err.contains("there is no cluster nowhere"), "{err}");

    // `edge resolve` refuses what is not in conflict, or not recorded, and says why.
    let (ok, _, err) = flotilla(kc, &["edge", "resolve", "configmap/settings", "--cluster", CLUSTER, "--keep", "edge"]).await;
    assert!(!ok && err.contains("not in conflict") && err.contains("settings is Decided"), "{err}");
    let (ok, _, err) = flotilla(kc, &["edge", "resolve", "cm/fresh", "--cluster", CLUSTER, "--keep", "edge"]).await;
    assert!(!ok && err.contains("fresh is Pending"), "a short name, resolved through discovery: {err}");
    let (ok, _, err) = flotilla(kc, &["edge", "resolve", "deployment/api", "--cluster", CLUSTER, "--keep", "edge"]).await;
    assert!(!ok && err.contains("no recorded edge change of deployment/api") && err.contains("deployment/web in shop"), "{err}");
    let (ok, _, err) = flotilla(kc, &["edge", "resolve", "deployment/web", "--cluster", CLUSTER, "--keep", "mine"]).await;
    assert!(!ok && err.contains("edge") && err.contains("control-plane"), "{err}");
    assert!(changes.get("web").await.unwrap().annotations().get(RESOLVE_ANNOTATION).is_none());

    // ... and annotates a conflict, the kind as kubectl takes it.
    let (ok, out, err) = flotilla(kc, &["edge", "resolve", "deploy/web", "-n", "shop", "--cluster", CLUSTER, "--keep", "control-plane"]).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("edgechange karmada-es-edge-1/web annotated edge.flotilla.io/resolve=control-plane"), "{out}");
    assert_eq!(changes.get("web").await.unwrap().annotations().get(RESOLVE_ANNOTATION).map(String::as_str), Some("control-plane"));
    let (ok, out, err) = flotilla(kc, &["edge", "resolve", "deployments/web", "--cluster", CLUSTER, "--keep", "edge"]).await;
    assert!(ok && out.contains("(replacing control-plane)"), "{out}{err}");
    assert_eq!(changes.get("web").await.unwrap().annotations().get(RESOLVE_ANNOTATION).map(String::as_str), Some("edge"));

    // The agent goes away; a record is dropped: the report follows.
    set_ready(&clusters, "Unknown", "2026-12-05T11:00:00Z").await;
    changes.delete("scratch", &DeleteParams::default()).await.unwrap();
    let s = report_where(&reports, "offline, three records", |s| s["online"] == false && s["entries"].as_array().is_some_and(|e| e.len() == 3)).await;
    assert_eq!((s["offlineSince"].clone(), s["bornAtEdge"].clone()), (json!("2026-12-05T11:00:00Z"), json!(0)), "{s}");
    let (ok, out, _) = flotilla(kc, &["edge", "status"]).await;
    assert!(ok && out.starts_with("Cluster edge-1: offline since 2026-12-05T11:00:00Z\n"), "{out}");
    set_ready(&clusters, "True", "2026-12-05T12:00:00Z").await;
    let s = report_where(&reports, "online again", |s| s["online"] == true).await;
    assert!(s.get("offlineSince").is_none(), "{s}");

    // The report goes with its Cluster.
    clusters.delete(CLUSTER, &DeleteParams::default()).await.unwrap();
    let reports = &reports;
    eventually("the report gone", move || async move {
        match reports.get_opt(CLUSTER).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(r) => Err(format!("still there: {:?}", r.metadata)),
        }
    })
    .await;
    let (ok, _, err) = flotilla(kc, &["edge", "status", "--cluster", CLUSTER]).await;
    assert!(!ok && err.contains("no edge report for cluster edge-1"), "{err}");

    cp.controllers.shutdown(Duration::from_secs(5)).await;
    cp.serving.shutdown().await.unwrap();
}
