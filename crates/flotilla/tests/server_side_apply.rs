//! Server-side apply and field ownership (issue 9): the same kubectl script run against a
//! testenv member's real kube-apiserver and against `flotilla up`, comparing after every step
//! the managedFields (times left out), the object's data and labels, and what kubectl printed
//! (conflict messages included); and a kube-rs Controller applying its objects' status.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Flotilla, kubectls};

/// The kubectl `kubectl` picks for Flotilla (by the version it reports), used against both
/// servers so that the two see the same requests (its typed creates send protobuf bodies).
fn kubectl_bin() -> std::path::PathBuf {
    kubectls().into_iter().find(|(v, _)| v == "1.33").map(|(_, p)| p).expect("kubectl 1.33")
}

/// One step of the script: kubectl arguments and, for `apply -f -`, the manifest on stdin.
struct Step {
    what: &'static str,
    args: &'static [&'static str],
    stdin: Option<&'static str>,
    /// The object to look at afterwards (`configmap/s1`).
    object: &'static str,
}

const STEPS: &[Step] = &[
    Step { what: "create", args: &["create", "configmap", "s1", "--from-literal=a=1", "--from-literal=b=2"], stdin: None, object: "configmap/s1" },
    Step {
        what: "m1 applies a, c and a label",
        args: &["apply", "--server-side", "--field-manager=m1", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s1, labels: {team: x}}\ndata: {a: \"1\", c: \"3\"}\n"),
        object: "configmap/s1",
    },
    Step {
        what: "m2 applies a disjoint field",
        args: &["apply", "--server-side", "--field-manager=m2", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s1}\ndata: {d: \"4\"}\n"),
        object: "configmap/s1",
    },
    Step {
        what: "m2 changes m1's field: conflict",
        args: &["apply", "--server-side", "--field-manager=m2", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s1}\ndata: {d: \"4\", c: \"9\"}\n"),
        object: "configmap/s1",
    },
    Step {
        what: "m2 forces it",
        args: &["apply", "--server-side", "--field-manager=m2", "--force-conflicts", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s1}\ndata: {d: \"4\", c: \"9\"}\n"),
        object: "configmap/s1",
    },
    Step {
        what: "m1 stops applying its label",
        args: &["apply", "--server-side", "--field-manager=m1", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s1}\ndata: {a: \"1\"}\n"),
        object: "configmap/s1",
    },
    Step { what: "kubectl label", args: &["label", "configmap", "s1", "extra=yes"], stdin: None, object: "configmap/s1" },
    Step {
        what: "create a Deployment (defaults owned by kubectl-create)",
        args: &["create", "deployment", "dep", "--image=nginx"],
        stdin: None,
        object: "deployment/dep",
    },
    Step {
        what: "apply over kubectl create: two conflicts",
        args: &["apply", "--server-side", "--field-manager=m3", "-f", "-"],
        stdin: Some(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: dep}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: dep}}\n  template:\n    metadata: {labels: {app: dep}}\n    spec:\n      containers: [{name: nginx, image: \"nginx:1.27\", ports: [{containerPort: 80}]}]\n",
        ),
        object: "deployment/dep",
    },
    Step {
        what: "the same, forced",
        args: &["apply", "--server-side", "--field-manager=m3", "--force-conflicts", "-f", "-"],
        stdin: Some(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: dep}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: dep}}\n  template:\n    metadata: {labels: {app: dep}}\n    spec:\n      containers: [{name: nginx, image: \"nginx:1.27\", ports: [{containerPort: 80}]}]\n",
        ),
        object: "deployment/dep",
    },
    Step {
        what: "client-side apply",
        args: &["apply", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s2}\ndata: {a: \"1\"}\n"),
        object: "configmap/s2",
    },
    Step {
        what: "then server-side apply: kubectl migrates the ownership",
        args: &["apply", "--server-side", "-f", "-"],
        stdin: Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s2}\ndata: {a: \"2\"}\n"),
        object: "configmap/s2",
    },
];

fn kubectl(kubeconfig: &std::path::Path, ns: &str, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", ns])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// What a step left: managedFields without times (sorted: their order follows the clock),
/// data, labels and (for Deployments) the replicas and image, and kubectl's first line.
fn observe(kubeconfig: &std::path::Path, ns: &str, step: &Step, printed: &str) -> Value {
    let (ok, out) = kubectl(kubeconfig, ns, &["get", step.object, "-o", "json", "--show-managed-fields"], None);
    assert!(ok, "{out}");
    let obj: Value = serde_json::from_str(&out).unwrap();
    let mut managed: Vec<Value> = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    // The real member's controllers write Deployment status; nothing does on Flotilla's host.
    managed.retain(|e| e["manager"] != "kube-controller-manager");
    for e in &mut managed {
        e.as_object_mut().unwrap().remove("time");
    }
    managed.sort_by_key(|e| e.to_string());
    json!({
        "printed": printed.lines().next().unwrap_or(""),
        "managedFields": managed,
        "data": obj["data"],
        "labels": obj["metadata"]["labels"],
        "replicas": obj["spec"]["replicas"],
        "image": obj.pointer("/spec/template/spec/containers/0/image"),
    })
}

fn run_script(kubeconfig: &std::path::Path, ns: &str) -> Vec<Value> {
    let (ok, out) = kubectl(kubeconfig, "default", &["create", "namespace", ns], None);
    assert!(ok, "{out}");
    let seen = STEPS
        .iter()
        .map(|step| {
            let (_, printed) = kubectl(kubeconfig, ns, step.args, step.stdin);
            json!({"step": step.what, "after": observe(kubeconfig, ns, step, &printed)})
        })
        .collect();
    kubectl(kubeconfig, "default", &["delete", "namespace", ns, "--wait=false"], None);
    seen
}

#[test]
fn managed_fields_match_a_real_kube_apiserver_step_by_step() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let ns = format!("ssa-{}", std::process::id());
    let real = run_script(&env.member("member1").kubeconfig, &ns);
    let cp = Flotilla::start();
    let ours = run_script(&cp.kubeconfig, &ns);
    // The script does what it says on a real server (so the comparison below means something).
    assert!(real[3]["after"]["printed"].as_str().unwrap().contains(r#"Apply failed with 1 conflict: conflict with "m1": .data.c"#), "{}", real[3]);
    assert!(real[8]["after"]["printed"].as_str().unwrap().contains("Apply failed with 2 conflicts"), "{}", real[8]);
    for (r, o) in real.iter().zip(&ours) {
        assert_eq!(o, r, "after step {:?}: Flotilla (left) differs from kube-apiserver (right)", r["step"]);
    }
}

/// A kube-rs Controller applying status with server-side apply: the status is written, its
/// fields are owned by the controller on the status subresource, and spec ownership is left
/// as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_rs_controller_applies_its_status() {
    use futures::StreamExt;
    use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::watcher;
    use std::sync::Arc;

    let cp = Flotilla::start();
    let client = cp.client().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.ssa.example.com"},
        "spec": {"group": "ssa.example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"seenSize": {"type": "integer"}}}}}}}]}
    });
    let crds: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::from_gvk(&GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition")));
    crds.create(&PostParams::default(), &serde_json::from_value(crd).unwrap()).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ssa.example.com", "v1", "Widget"), "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let w: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "ssa.example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}})).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Err(e) = widgets.create(&PostParams { field_manager: Some("creator".into()), ..Default::default() }, &w).await {
        assert!(std::time::Instant::now() < deadline, "creating the Widget: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let reconcile = |obj: Arc<DynamicObject>, api: Arc<Api<DynamicObject>>| async move {
        let size = obj.data["spec"]["size"].as_i64().unwrap_or(0);
        let status = json!({"apiVersion": "ssa.example.com/v1", "kind": "Widget", "status": {"seenSize": size}});
        api.patch_status(&obj.metadata.name.clone().unwrap(), &PatchParams::apply("widget-controller").force(), &Patch::Apply(&status)).await?;
        Ok::<_, kube::Error>(Action::await_change())
    };
    let api = Arc::new(widgets.clone());
    let controller = Controller::new_with(widgets.clone(), watcher::Config::default(), ar.clone())
        .run(reconcile, |_, _: &kube::Error, _| Action::requeue(Duration::from_secs(1)), api)
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let w = loop {
        let w = widgets.get("w1").await.unwrap();
        if w.data["status"]["seenSize"] == 3 {
            break w;
        }
        assert!(std::time::Instant::now() < deadline, "status never applied: {:?}", w.data);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    handle.abort();
    let entries = w.metadata.managed_fields.clone().unwrap_or_default();
    let by = |m: &str| entries.iter().find(|e| e.manager.as_deref() == Some(m)).unwrap_or_else(|| panic!("no entry for {m}: {entries:?}"));
    let status = by("widget-controller");
    assert_eq!(status.operation.as_deref(), Some("Apply"));
    assert_eq!(status.subresource.as_deref(), Some("status"));
    assert_eq!(status.fields_v1.as_ref().unwrap().0, json!({"f:status": {"f:seenSize": {}}}));
    let creator = by("creator");
    assert_eq!(creator.fields_v1.as_ref().unwrap().0, json!({"f:spec": {".": {}, "f:size": {}}}));
    drop(cp);
}
