//! kubectl against `flotilla up`: every kubectl from 1.20 to 1.33 runs the same scenario, and
//! each mutation is verified through a different client (kube-rs).

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use support::{Flotilla, kubectl, kubectls};

fn server() -> &'static Flotilla {
    static SERVER: OnceLock<Flotilla> = OnceLock::new();
    SERVER.get_or_init(Flotilla::start)
}

const MANIFEST: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg
  labels: {tier: silver}
data:
  k: v1
"#;

/// Follow `kubectl get -w` until a line satisfies `done`.
///
/// kubectl prints the object it GETs, then opens its watch (for one object, from
/// resourceVersion 0, skipping the object's first ADDED: it printed it already). A change made
/// between the two is in that skipped ADDED and never printed, so `trigger` runs only once the
/// watch request has been answered: kubectl logs it at `-v=6`.
fn watch_until(bin: &Path, kubeconfig: &Path, args: &[&str], trigger: impl FnOnce(), done: impl Fn(&str) -> bool) {
    let mut child = Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(args).arg("-v=6").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    // kubectl's stderr goes into the failure message: a watch that ended early says why there.
    let stderr = child.stderr.take().unwrap();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("watch=true") && line.contains("200 OK") {
                let _ = opened_tx.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30)).expect("kubectl get -w printed nothing");
    let opened = opened_rx.recv_timeout(Duration::from_secs(30)).is_ok();
    trigger();
    let mut seen = vec![first];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let ok = opened
        && loop {
            match rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
                Ok(l) if done(&l) => break true,
                Ok(l) => seen.push(l),
                Err(_) => break false,
            }
        };
    let _ = child.kill();
    let status = child.wait();
    let errors = errors.join().unwrap_or_default();
    assert!(ok, "kubectl {args:?} never showed the update (watch opened: {opened}); lines: {seen:?}; kubectl exited: {status:?}; its stderr: {errors}");
}

async fn scenario(version: &str, bin: &Path) {
    let srv = server();
    let kc = srv.kubeconfig.as_path();
    let client = srv.client().await;
    let ns = format!("kubectl-{}", version.replace('.', "-"));
    // The namespace comes from another client.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap()).await.unwrap();

    // apply -f, twice (create, then unchanged).
    let manifest = srv.dir.path().join(format!("app-{version}.yaml"));
    std::fs::write(&manifest, MANIFEST).unwrap();
    let out = kubectl(bin, kc, &["apply", "-n", &ns, "-f", manifest.to_str().unwrap()]);
    assert!(out.contains("deployment.apps/web created") && out.contains("service/web created") && out.contains("configmap/cfg created"), "{out}");
    let out = kubectl(bin, kc, &["apply", "-n", &ns, "-f", manifest.to_str().unwrap()]);
    assert!(out.contains("configmap/cfg unchanged"), "{out}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let d = deployments.get("web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(2));
    assert_eq!(d.metadata.generation, Some(1));

    // get -o yaml and -o json.
    let yaml = kubectl(bin, kc, &["get", "-n", &ns, "deploy", "web", "-o", "yaml"]);
    assert!(yaml.contains("name: web") && yaml.contains("image: nginx:1.25"), "{yaml}");
    let json: serde_json::Value = serde_json::from_str(&kubectl(bin, kc, &["get", "-n", &ns, "cm", "cfg", "-o", "json"])).unwrap();
    assert_eq!(json["data"]["k"], "v1");
    let rv_before: i64 = json["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();

    // get -w sees an update made by kube-rs.
    let cms2 = cms.clone();
    let rt = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        watch_until(
            bin,
            kc,
            &["get", "-n", &ns, "cm", "cfg", "-w", "-o", "jsonpath={.data.k}{\"\\n\"}"],
            || {
                rt.block_on(cms2.patch("cfg", &PatchParams::default(), &Patch::Merge(serde_json::json!({"data": {"k": "from-kube-rs"}})))).unwrap();
            },
            |line| line.trim() == "from-kube-rs",
        )
    });

    // patch: exact fields, resourceVersion bump; generation moves only on spec changes.
    kubectl(bin, kc, &["patch", "-n", &ns, "cm", "cfg", "-p", r#"{"data":{"k":"patched","extra":"x"}}"#]);
    let cm = cms.get("cfg").await.unwrap();
    let data = cm.data.unwrap();
    assert_eq!((data["k"].as_str(), data["extra"].as_str()), ("patched", "x"));
    let rv_after: i64 = cm.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv_after > rv_before, "a patch must bump the resourceVersion ({rv_before} -> {rv_after})");
    kubectl(bin, kc, &["patch", "-n", &ns, "deploy", "web", "--type=merge", "-p", r#"{"spec":{"minReadySeconds":5}}"#]);
    assert_eq!(deployments.get("web").await.unwrap().metadata.generation, Some(2), "a spec change bumps generation");
    kubectl(bin, kc, &["label", "-n", &ns, "deploy", "web", "touched=yes"]);
    assert_eq!(deployments.get("web").await.unwrap().metadata.generation, Some(2), "a label does not bump generation");

    // scale.
    kubectl(bin, kc, &["scale", "-n", &ns, "deploy", "web", "--replicas=4"]);
    assert_eq!(deployments.get("web").await.unwrap().spec.replicas, Some(4));

    // label and selectors.
    kubectl(bin, kc, &["create", "configmap", "other", "-n", &ns, "--from-literal=a=b"]);
    kubectl(bin, kc, &["label", "-n", &ns, "cm", "cfg", "tier=gold", "--overwrite"]);
    let labels = cms.get("cfg").await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels["tier"], "gold");
    let names = kubectl(bin, kc, &["get", "-n", &ns, "cm", "-l", "tier=gold", "-o", "name"]);
    assert_eq!(names.trim(), "configmap/cfg");
    let names = kubectl(bin, kc, &["get", "-n", &ns, "cm", "-l", "tier notin (gold)", "-o", "name"]);
    assert_eq!(names.trim(), "configmap/other");
    let names = kubectl(bin, kc, &["get", "-n", &ns, "cm", "--field-selector", "metadata.name=other", "-o", "name"]);
    assert_eq!(names.trim(), "configmap/other");

    // delete --wait.
    kubectl(bin, kc, &["delete", "-n", &ns, "cm", "cfg", "--wait=true", "--timeout=60s"]);
    assert!(cms.get_opt("cfg").await.unwrap().is_none());

    // auth can-i.
    assert_eq!(kubectl(bin, kc, &["auth", "can-i", "list", "pods"]).trim(), "yes");

    // Table output of the server: the columns kubectl shows for Deployments.
    let table = kubectl(bin, kc, &["get", "-n", &ns, "deploy"]);
    assert!(table.contains("READY") && table.contains("UP-TO-DATE") && table.contains("web"), "{table}");
}

macro_rules! kubectl_versions {
    ($($name:ident => $v:expr),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            match kubectls().into_iter().find(|(v, _)| v == $v) {
                Some((v, bin)) => scenario(&v, &bin).await,
                None => eprintln!("SKIPPED kubectl {} (not installed)", $v),
            }
        }
    )*};
}

kubectl_versions!(
    kubectl_1_20 => "1.20",
    kubectl_1_27 => "1.27",
    kubectl_1_28 => "1.28",
    kubectl_1_29 => "1.29",
    kubectl_1_30 => "1.30",
    kubectl_1_31 => "1.31",
    kubectl_1_32 => "1.32",
    kubectl_1_33 => "1.33",
);

/// The machine's `kubectl` dispatcher picks the binary matching the server's /version.
#[test]
fn dispatcher_picks_the_version_the_server_reports() {
    let dispatcher = Path::new("/usr/bin/kubectl");
    if !dispatcher.is_file() {
        eprintln!("SKIPPED: no kubectl dispatcher");
        return;
    }
    let out = kubectl(dispatcher, &server().kubeconfig, &["version", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["serverVersion"]["minor"], "33");
    assert_eq!(v["serverVersion"]["emulationMinor"], "33");
    assert_eq!(v["clientVersion"]["minor"], "33", "the dispatcher should run kubectl 1.33 for a 1.33 server");
}
