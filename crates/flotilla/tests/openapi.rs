//! OpenAPI v2 and v3 (issue 9): `kubectl explain` prints on Flotilla what it prints on a real
//! kube-apiserver (built-in kinds and a CRD; kubectl 1.33 reads v3, kubectl 1.20 v2), kubectl
//! 1.20's client-side validation rejects what it rejects there, `/openapi/v2` holds the real
//! server's definitions and `/openapi/v3` its CRD schemas (built-in and CRD-made), the v2
//! protobuf form is gnostic's reading of the JSON form, and `kubectl diff` shows only real
//! differences.

mod support;

use std::process::Command;

use serde_json::Value;
use support::{Flotilla, apply_yaml, kubectls, manifest_dir};

fn kubectl(version: &str) -> std::path::PathBuf {
    kubectls().into_iter().find(|(v, _)| v == version).map(|(_, p)| p).unwrap_or_else(|| panic!("kubectl {version}"))
}

/// kubectl with a discovery cache of its own: a cache left by an earlier run (the same server
/// address, a CRD since deleted) must not decide what a name means.
fn run(bin: &std::path::Path, kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String) {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(bin).arg("--kubeconfig").arg(kubeconfig).arg("--cache-dir").arg(cache.path()).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn crd(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gizmos.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        description: A gizmo.\n        properties:\n          spec:\n            type: object\n            description: What the gizmo should be.\n            properties:\n              size: {{type: integer, description: How big.}}\n              tags: {{type: array, items: {{type: string}}}}\n              inner: {{type: object, properties: {{a: {{type: string}}}}}}\n          status: {{type: object, properties: {{ok: {{type: boolean}}}}}}\n"
    )
}

/// A testenv member and a fresh Flotilla, both with the CRD `crd(group)` of a group unique to
/// this run (`g<pid>.<name>.example.com`); None without a testenv. The CRD leaves the member
/// when the returned guard is dropped, failed assertions included.
fn member_and_flotilla(name: &str, crd: fn(&str) -> String) -> Option<(std::path::PathBuf, Flotilla, String, CrdOnMember)> {
    let env = flotilla_testenv::TestEnv::connect()?;
    let member = env.member("member2").kubeconfig.clone();
    let cp = Flotilla::start();
    let group = format!("g{}.{name}.example.com", std::process::id());
    let text = crd(&group);
    for kc in [&member, &cp.kubeconfig] {
        apply_yaml(kc, &text);
    }
    let crd_name = text.split("metadata: {name: ").nth(1).and_then(|r| r.split('}').next()).expect("the CRD's name").to_string();
    Some((member.clone(), cp, group, CrdOnMember { kubeconfig: member, name: crd_name }))
}

/// Deletes a CRD from the shared member when dropped.
struct CrdOnMember {
    kubeconfig: std::path::PathBuf,
    name: String,
}

impl Drop for CrdOnMember {
    fn drop(&mut self) {
        run(&kubectl("1.33"), &self.kubeconfig, &["delete", "crd", &self.name, "--wait=false"]);
    }
}

#[test]
fn explain_prints_what_a_real_server_prints() {
    let Some((member, cp, group, _crd)) = member_and_flotilla("explain", crd) else { return };
    let bin = kubectl("1.33");
    let gizmo = format!("gizmos.{group}");
    let queries: Vec<Vec<String>> = vec![
        vec!["explain".into(), "deployment.spec.strategy.rollingUpdate.maxSurge".into()],
        vec!["explain".into(), "pods".into(), "--recursive".into()],
        vec!["explain".into(), "svc.spec.ports".into()],
        vec!["explain".into(), "configmaps".into()],
        vec!["explain".into(), format!("{gizmo}.spec"), "--recursive".into()],
        vec!["explain".into(), gizmo.clone()],
    ];
    for q in &queries {
        let args: Vec<&str> = q.iter().map(String::as_str).collect();
        let (real, ours) = both(&bin, &member, &cp.kubeconfig, &args, true);
        assert_eq!(real.0, 0, "kubectl {args:?} against the real server: {}", real.1);
        assert!(real.1.lines().count() > 3, "{}", real.1);
        assert_eq!(ours, real, "kubectl {args:?}: Flotilla (left) and kube-apiserver (right) differ");
    }
}

#[test]
fn diff_shows_only_real_differences() {
    let cp = Flotilla::start();
    let bin = kubectl("1.33");
    let dir = tempfile::tempdir().unwrap();
    let manifest = |image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: diffme, namespace: default}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: diffme}}}}\n  template:\n    metadata: {{labels: {{app: diffme}}}}\n    spec: {{containers: [{{name: app, image: \"{image}\"}}]}}\n"
        )
    };
    let same = dir.path().join("same.yaml");
    let changed = dir.path().join("changed.yaml");
    std::fs::write(&same, manifest("nginx:1.27")).unwrap();
    std::fs::write(&changed, manifest("nginx:1.28")).unwrap();
    let (code, out) = run(&bin, &cp.kubeconfig, &["apply", "-f", same.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    for server_side in [false, true] {
        let mode: &[&str] = if server_side { &["--server-side"] } else { &[] };
        let (code, out) = run(&bin, &cp.kubeconfig, &[&["diff", "-f", same.to_str().unwrap()], mode].concat());
        assert_eq!((code, out.as_str()), (0, ""), "no change, server-side {server_side}");
        let (code, out) = run(&bin, &cp.kubeconfig, &[&["diff", "-f", changed.to_str().unwrap()], mode].concat());
        assert_eq!(code, 1, "{out}");
        let changes: Vec<&str> = out.lines().filter(|l| (l.starts_with('-') || l.starts_with('+')) && !l.starts_with("---") && !l.starts_with("+++")).collect();
        assert_eq!(
            changes,
            ["-  generation: 1", "+  generation: 2", "-      - image: nginx:1.27", "+      - image: nginx:1.28"],
            "server-side {server_side}:\n{out}"
        );
    }
}

/// kubectl 1.20 (OpenAPI v2 only), when installed.
fn kubectl_1_20() -> Option<std::path::PathBuf> {
    kubectls().into_iter().find(|(v, _)| v == "1.20").map(|(_, p)| p)
}

/// A kubectl command against the real server and against Flotilla, repeated until both succeed
/// (`want_ok`) or both fail, or the deadline passes: a new CRD's schema is published a moment
/// after it is established.
fn both(bin: &std::path::Path, real: &std::path::Path, ours: &std::path::Path, args: &[&str], want_ok: bool) -> ((i32, String), (i32, String)) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = run(bin, real, args);
        let o = run(bin, ours, args);
        if ((r.0 == 0) == want_ok && (o.0 == 0) == want_ok) || std::time::Instant::now() > deadline {
            return (r, o);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[test]
fn kubectl_1_20_explains_validates_and_diffs_as_on_a_real_server() {
    let Some(bin) = kubectl_1_20() else { return };
    let Some((member, cp, group, _crd)) = member_and_flotilla("explainv2", crd) else { return };
    let api_version = format!("--api-version={group}/v1");
    let explains: [&[&str]; 4] = [
        &["explain", "deployment.spec.strategy.rollingUpdate.maxSurge"],
        &["explain", "pods.spec.containers", "--recursive"],
        &["explain", "gizmos.spec", "--recursive", &api_version],
        &["explain", "gizmos", &api_version],
    ];
    for args in explains {
        let (real, ours) = both(&bin, &member, &cp.kubeconfig, args, true);
        assert_eq!(real.0, 0, "kubectl 1.20 {args:?} against the real server: {}", real.1);
        assert!(real.1.lines().count() > 3, "{}", real.1);
        assert_eq!(ours, real, "kubectl 1.20 {args:?}: Flotilla (left) and kube-apiserver (right) differ");
    }
    // Client-side validation (kubectl 1.20 validates against /openapi/v2 before sending): an
    // unknown field and a wrongly typed one, in a built-in kind and in a custom resource. The
    // server never sees the objects (and would not keep them: server-side dry run).
    let dir = tempfile::tempdir().unwrap();
    let manifests = [
        ("deployment.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: v2check, namespace: default}\nspec:\n  replicas: 1\n  bogus: 3\n  selector: {matchLabels: {app: v2check}}\n  template:\n    metadata: {labels: {app: v2check}}\n    spec: {containers: [{name: app, image: nginx, ports: [{containerPort: \"eighty\"}]}]}\n".to_string()),
        ("gizmo.yaml", format!("apiVersion: {group}/v1\nkind: Gizmo\nmetadata: {{name: v2check, namespace: default}}\nspec: {{size: big, colour: red}}\n")),
    ];
    for (file, text) in manifests {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let args = ["apply", "--validate=true", "--dry-run=server", "-f", path.to_str().unwrap()];
        let (real, ours) = both(&bin, &member, &cp.kubeconfig, &args, false);
        assert!(real.1.contains("error validating data") && real.1.contains("unknown field"), "kubectl 1.20 against the real server: {}", real.1);
        assert_eq!(ours, real, "kubectl 1.20 apply {file}: Flotilla (left) and kube-apiserver (right) differ");
    }
    // diff (kubectl 1.20 diffs only where the OpenAPI v2 says patch takes dryRun): the changed
    // lines, as on the real server (managedFields times left out: they change when the clock
    // passes a second).
    let name = format!("diff{}", std::process::id());
    // A ConfigMap: no controller of the real member writes to it between kubectl's read and its
    // dry run (a Deployment's status and revision annotation would show up in the real diff).
    let manifest = |image: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\ndata:\n  image: \"{image}\"\n");
    let (same, changed) = (dir.path().join("same.yaml"), dir.path().join("changed.yaml"));
    std::fs::write(&same, manifest("nginx:1.27")).unwrap();
    std::fs::write(&changed, manifest("nginx:1.28")).unwrap();
    let changes = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| (l.starts_with('-') || l.starts_with('+')) && !l.starts_with("---") && !l.starts_with("+++") && !l[1..].trim().starts_with("time: "))
            .map(String::from)
            .collect()
    };
    let mut diffs = Vec::new();
    for kc in [&member, &cp.kubeconfig] {
        let (code, out) = run(&bin, kc, &["apply", "-f", same.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}");
        let (code, out) = run(&bin, kc, &["diff", "-f", same.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (0, ""), "no change");
        let (code, out) = run(&bin, kc, &["diff", "-f", changed.to_str().unwrap()]);
        assert_eq!(code, 1, "{out}");
        diffs.push(changes(&out));
    }
    run(&bin, &member, &["-n", "default", "delete", "configmap", &name, "--wait=false"]);
    assert!(diffs[0].contains(&"+  image: nginx:1.28".to_string()), "{:?}", diffs[0]);
    assert_eq!(diffs[1], diffs[0], "kubectl 1.20 diff: Flotilla (left) and kube-apiserver (right) differ");
}

/// kubectl from 1.27 on asks the server to validate (`fieldValidation=Strict`) when the
/// OpenAPI says patch takes that parameter, as a real server's does; it validates client-side
/// (from `/openapi/v2`) only when not. Either way an unknown field is refused, but the message
/// says which of the two did it: the server's (`Error from server (BadRequest)`) on both.
#[test]
fn kubectl_1_27_and_later_leave_validation_to_the_server() {
    let Some((member, cp, group, _crd)) = member_and_flotilla("fieldvalidation", crd) else { return };
    let dir = tempfile::tempdir().unwrap();
    let manifests = [
        ("deployment.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: fvcheck, namespace: default}\nspec:\n  replicas: 1\n  bogus: 3\n  selector: {matchLabels: {app: fvcheck}}\n  template:\n    metadata: {labels: {app: fvcheck}}\n    spec: {containers: [{name: app, image: nginx}]}\n".to_string(), "spec.bogus"),
        ("gizmo.yaml", format!("apiVersion: {group}/v1\nkind: Gizmo\nmetadata: {{name: fvcheck, namespace: default}}\nspec: {{size: 3, colour: red}}\n"), "spec.colour"),
    ];
    for (v, bin) in kubectls().into_iter().filter(|(v, _)| v != "1.20") {
        for (file, text, field) in &manifests {
            let path = dir.path().join(file);
            std::fs::write(&path, text).unwrap();
            let args = ["apply", "--dry-run=server", "-f", path.to_str().unwrap()];
            let (real, ours) = both(&bin, &member, &cp.kubeconfig, &args, false);
            for (who, out) in [("kube-apiserver", &real), ("Flotilla", &ours)] {
                assert!(
                    out.1.starts_with("Error from server (BadRequest)") && out.1.contains(&format!("unknown field \"{field}\"")),
                    "kubectl {v} apply {file} against {who}: {}",
                    out.1
                );
            }
        }
    }
}

/// A CRD with every schema construct apiextensions-apiserver rewrites for OpenAPI v2, two
/// served versions (one keeping unknown fields) and one not served.
fn widget_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields: [{{jsonPath: .spec.color}}]
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget.
        required: [spec]
        properties:
          apiVersion: {{type: string, description: replaced by TypeMeta's}}
          spec:
            type: object
            required: [color, maybe]
            x-kubernetes-validations: [{{rule: "self.size >= 0", message: size}}]
            properties:
              color: {{type: string, enum: [red, blue], default: red}}
              size: {{type: integer, minimum: 1, maximum: 10, format: int32}}
              ratio: {{type: number, multipleOf: 0.5}}
              port: {{x-kubernetes-int-or-string: true}}
              port2: {{x-kubernetes-int-or-string: true, anyOf: [{{type: integer}}, {{type: string}}]}}
              maybe: {{type: object, nullable: true, properties: {{a: {{type: string}}}}}}
              free: {{type: object, x-kubernetes-preserve-unknown-fields: true, properties: {{x: {{type: string}}}}}}
              list: {{type: array, items: {{type: string}}, x-kubernetes-list-type: set, maxItems: 5}}
              maplist: {{type: array, x-kubernetes-list-type: map, x-kubernetes-list-map-keys: [name], items: {{type: object, required: [name], properties: {{name: {{type: string}}, v: {{type: string, pattern: "^a.*$", minLength: 1}}}}}}}}
              labels: {{type: object, additionalProperties: {{type: string}}, x-kubernetes-map-type: granular}}
              nullmap: {{type: object, required: [k], additionalProperties: {{type: string, nullable: true}}}}
              template: {{type: object, x-kubernetes-embedded-resource: true, properties: {{spec: {{type: object, properties: {{x: {{type: integer}}}}}}}}}}
              templateFree: {{type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}}
              choice: {{type: object, properties: {{a: {{type: string}}, b: {{type: string}}}}, oneOf: [{{required: [a]}}, {{required: [b]}}]}}
              notme: {{type: string, not: {{enum: ["x"]}}, title: T, example: ex, externalDocs: {{url: "https://example.com"}}}}
              deflt: {{type: object, default: {{a: 1}}, properties: {{a: {{type: integer}}}}}}
          status: {{type: object, properties: {{ok: {{type: boolean}}}}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
  - name: v0
    served: false
    storage: false
    schema:
      openAPIV3Schema: {{type: object, properties: {{spec: {{type: string}}}}}}
"#
    )
}

/// `GET /openapi/v2` with an Accept header (and If-None-Match): status, headers, body.
fn fetch_v2(kubeconfig: &std::path::Path, accept: &str, if_none_match: Option<&str>) -> (u16, http::HeaderMap, Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        let mut req = http::Request::get("/openapi/v2").header(http::header::ACCEPT, accept);
        if let Some(tag) = if_none_match {
            req = req.header(http::header::IF_NONE_MATCH, tag);
        }
        let resp = client.send(req.body(kube::client::Body::empty()).unwrap()).await.unwrap();
        let (parts, body) = resp.into_parts();
        (parts.status.as_u16(), parts.headers, body.collect_bytes().await.unwrap().to_vec())
    })
}

fn definitions(kubeconfig: &std::path::Path) -> serde_json::Map<String, Value> {
    let (status, _, body) = fetch_v2(kubeconfig, "application/json", None);
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    doc["definitions"].as_object().cloned().unwrap_or_default()
}

/// The schemas named in `names` are the same on both servers (printed when not).
fn assert_same_schemas(what: &str, ours: &serde_json::Map<String, Value>, real: &serde_json::Map<String, Value>, names: &[String]) {
    let differ: Vec<&String> = names.iter().filter(|n| ours.get(n.as_str()) != real.get(n.as_str())).collect();
    for n in &differ {
        eprintln!("{what} {n}:\n  flotilla:       {:?}\n  kube-apiserver: {:?}", ours.get(n.as_str()), real.get(n.as_str()));
    }
    assert!(differ.is_empty(), "{what}: schemas differ: {differ:?}");
}

/// `components.schemas` of `/openapi/v3/apis/<group>/<version>`, once the group-version is
/// published (a real server publishes a new CRD's v3 a moment after its v2).
fn v3_schemas(kubeconfig: &std::path::Path, group: &str, version: &str) -> serde_json::Map<String, Value> {
    let bin = kubectl("1.33");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let url = loop {
        let (code, index) = run(&bin, kubeconfig, &["get", "--raw", "/openapi/v3"]);
        assert_eq!(code, 0, "{index}");
        let index: Value = serde_json::from_str(&index).unwrap();
        if let Some(url) = index["paths"][format!("apis/{group}/{version}")]["serverRelativeURL"].as_str() {
            break url.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "no {group}/{version} in {index}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let (code, doc) = run(&bin, kubeconfig, &["get", "--raw", &url]);
    assert_eq!(code, 0, "{doc}");
    let doc: Value = serde_json::from_str(&doc).unwrap();
    doc["components"]["schemas"].as_object().cloned().unwrap_or_default()
}

#[test]
fn crd_and_builtin_schemas_are_a_real_servers() {
    let Some((member, cp, group, _crd)) = member_and_flotilla("defsv2", widget_crd) else { return };
    let prefix = format!("{}.", group.split('.').rev().collect::<Vec<_>>().join("."));
    let names = ["v1.Widget", "v1.WidgetList", "v2.Widget", "v2.WidgetList"].map(|n| format!("{prefix}{n}"));
    // The CRD's definitions appear once its schema is published.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (real, ours) = loop {
        let (real, ours) = (definitions(&member), definitions(&cp.kubeconfig));
        let published = |d: &serde_json::Map<String, Value>| names.iter().all(|n| d.contains_key(n));
        if (published(&real) && published(&ours)) || std::time::Instant::now() > deadline {
            break (real, ours);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    // v3: the CRD's schemas per version (built-in ones are the recorded data itself).
    for version in ["v1", "v2"] {
        let (real3, ours3) = (v3_schemas(&member, &group, version), v3_schemas(&cp.kubeconfig, &group, version));
        let crd_names: Vec<String> = real3.keys().filter(|n| n.starts_with(&prefix)).cloned().collect();
        assert_eq!(crd_names.len(), 2, "{crd_names:?}");
        assert_same_schemas(&format!("/openapi/v3 {version}"), &ours3, &real3, &crd_names);
    }
    // kubectl explains the multi-version CRD alike (the preferred version, v2, keeps unknown
    // fields; v1 is asked for by name): 1.20 from v2, 1.33 from v3.
    let api_version = format!("--api-version={group}/v1");
    let queries: [&[&str]; 3] =
        [&["explain", "widgets"], &["explain", "widgets.spec", &api_version], &["explain", "widgets.spec.template", "--recursive", &api_version]];
    for bin in kubectl_1_20().into_iter().chain([kubectl("1.33")]) {
        for args in queries {
            let (real, ours) = both(&bin, &member, &cp.kubeconfig, args, true);
            assert_eq!(real.0, 0, "{} {args:?} against the real server: {}", bin.display(), real.1);
            assert_eq!(ours, real, "{} {args:?}: Flotilla (left) and kube-apiserver (right) differ", bin.display());
        }
    }
    // v2: every built-in definition (other tests' CRDs may come and go on the shared member),
    // and the CRD's: the same names, the same schemas.
    assert!(real.len() > 600, "{} definitions on the real server", real.len());
    let compared =
        |d: &serde_json::Map<String, Value>| -> Vec<String> { d.keys().filter(|n| n.starts_with("io.k8s.") || n.starts_with(&prefix)).cloned().collect() };
    assert_eq!(compared(&ours), compared(&real), "definition names: Flotilla (left), kube-apiserver (right)");
    assert_same_schemas("/openapi/v2", &ours, &real, &compared(&real));
    assert!(!ours.contains_key(&format!("{prefix}v0.Widget")), "an unserved version has no definitions");
    // Flotilla's own API groups are custom resources too.
    let policy = &ours["io.karmada.policy.v1alpha1.PropagationPolicy"];
    assert_eq!(policy["x-kubernetes-group-version-kind"][0]["kind"], "PropagationPolicy", "{policy}");
    assert!(ours.contains_key("io.kubefed.core.v1beta1.KubeFedCluster"));
}

#[test]
fn v2_protobuf_is_gnostics_reading_of_the_json() {
    let cp = Flotilla::start();
    let group = format!("g{}.protov2.example.com", std::process::id());
    apply_yaml(&cp.kubeconfig, &widget_crd(&group));
    let (status, json_headers, json) = fetch_v2(&cp.kubeconfig, "application/json", None);
    assert_eq!(status, 200);
    assert_eq!(json_headers[http::header::CONTENT_TYPE], "application/json");
    let doc: Value = serde_json::from_slice(&json).unwrap();
    let widget = format!("{}.v1.Widget", group.split('.').rev().collect::<Vec<_>>().join("."));
    assert!(doc["definitions"].get(&widget).is_some(), "the new CRD's definition is in the document");
    let proto_type = "application/json;q=0.9, application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let (status, headers, pb) = fetch_v2(&cp.kubeconfig, proto_type, None);
    assert_eq!(status, 200);
    assert_eq!(headers[http::header::CONTENT_TYPE], "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
    let etag = headers[http::header::ETAG].to_str().unwrap().to_string();
    assert_eq!(json_headers[http::header::ETAG], etag.as_str(), "one ETag for both forms of one document");
    let (status, _, body) = fetch_v2(&cp.kubeconfig, "application/json", Some(&etag));
    assert_eq!((status, body.len()), (304, 0), "If-None-Match with the current ETag");
    let (status, _, _) = fetch_v2(&cp.kubeconfig, "application/yaml", None);
    assert_eq!(status, 406);

    // gnostic-models decodes the bytes into what its compiler makes of the JSON, and
    // kube-openapi builds kubectl's models from them (testenv/hack/openapi-v2, Go).
    let testenv = manifest_dir().join("../../testenv");
    if Command::new("go").arg("version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("SKIPPED the gnostic check: no Go toolchain");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pb_path, json_path) = (dir.path().join("v2.pb"), dir.path().join("v2.json"));
    std::fs::write(&pb_path, &pb).unwrap();
    std::fs::write(&json_path, &json).unwrap();
    let out = Command::new("go")
        .current_dir(&testenv)
        .args(["run", "./hack/openapi-v2", "-pb", pb_path.to_str().unwrap(), "-json", json_path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let n = doc["definitions"].as_object().unwrap().len();
    assert!(text.contains(&format!("ok: {n} definitions, {n} models")), "{text}");
}
