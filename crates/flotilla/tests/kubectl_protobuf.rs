//! kubectl 1.33's typed requests, which send protobuf bodies (issue 9): every `kubectl create
//! <generator>`, `expose`, `run`, `autoscale`, `create token` and `auth` command run against a testenv
//! member's real kube-apiserver and against `flotilla up`, comparing the objects each leaves
//! (server-assigned values left out) and that the same commands succeed.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::{Flotilla, kubectls};

fn kubectl_1_33() -> Option<std::path::PathBuf> {
    kubectls().into_iter().find(|(v, _)| v == "1.33").map(|(_, p)| p)
}

/// One command and the object it leaves (`None`: only its success is compared).
struct Step {
    args: &'static [&'static str],
    object: Option<&'static str>,
}

/// `{ns}` in an argument is the test namespace (cluster-scoped names carry it to be unique).
const STEPS: &[Step] = &[
    Step { args: &["create", "deployment", "web", "--image=nginx:1.25", "--replicas=2", "--port=80"], object: Some("deployment/web") },
    Step { args: &["create", "service", "clusterip", "svc1", "--tcp=80:8080"], object: Some("service/svc1") },
    Step { args: &["create", "service", "nodeport", "svc2", "--tcp=81:8081"], object: None },
    Step { args: &["create", "job", "job1", "--image=busybox:1.36", "--", "echo", "hi"], object: Some("job/job1") },
    Step { args: &["create", "cronjob", "cj1", "--image=busybox:1.36", "--schedule=*/5 * * * *", "--", "date"], object: Some("cronjob/cj1") },
    Step { args: &["create", "role", "r1", "--verb=get,list", "--resource=pods,deployments.apps"], object: Some("role/r1") },
    Step { args: &["create", "rolebinding", "rb1", "--role=r1", "--user=alice", "--serviceaccount={ns}:sa1"], object: Some("rolebinding/rb1") },
    Step { args: &["create", "clusterrole", "{ns}-cr", "--verb=get", "--resource=namespaces"], object: Some("clusterrole/{ns}-cr") },
    Step { args: &["create", "clusterrolebinding", "{ns}-crb", "--clusterrole={ns}-cr", "--group=devs"], object: Some("clusterrolebinding/{ns}-crb") },
    Step { args: &["create", "quota", "q1", "--hard=pods=10,cpu=2,memory=1Gi", "--scopes=NotTerminating"], object: Some("resourcequota/q1") },
    Step { args: &["create", "pdb", "pdb1", "--selector=app=web", "--min-available=50%"], object: Some("pdb/pdb1") },
    Step { args: &["create", "priorityclass", "{ns}-pc", "--value=1000", "--description=protobuf test"], object: Some("priorityclass/{ns}-pc") },
    Step { args: &["create", "ingress", "ing1", "--rule=foo.example.com/bar*=svc1:8080,tls=my-cert", "--annotation=a=b"], object: Some("ingress/ing1") },
    Step { args: &["create", "serviceaccount", "sa1"], object: Some("serviceaccount/sa1") },
    Step { args: &["create", "configmap", "cm1", "--from-literal=a=1", "--from-literal=b=x y"], object: Some("configmap/cm1") },
    Step { args: &["create", "secret", "generic", "s1", "--from-literal=k=v", "--type=Opaque"], object: Some("secret/s1") },
    Step {
        args: &["create", "secret", "docker-registry", "s2", "--docker-server=r.example.com", "--docker-username=u", "--docker-password=p"],
        object: Some("secret/s2"),
    },
    Step { args: &["create", "configmap", "cm2", "--from-file=bin=/usr/bin/true"], object: Some("configmap/cm2") },
    Step { args: &["create", "job", "job2", "--from=cronjob/cj1"], object: Some("job/job2") },
    Step { args: &["autoscale", "deployment", "web", "--min=1", "--max=3", "--cpu-percent=80"], object: Some("hpa/web") },
    Step { args: &["expose", "deployment", "web", "--name=web-exposed", "--port=80", "--target-port=8000"], object: Some("service/web-exposed") },
    Step { args: &["run", "pod1", "--image=nginx:1.25", "--labels=app=x,tier=y", "--env=A=1", "--port=80", "--restart=Never"], object: Some("pod/pod1") },
    Step { args: &["expose", "pod", "pod1", "--port=444", "--name=pod-svc"], object: Some("service/pod-svc") },
    Step { args: &["create", "deployment", "multi", "--image=busybox:1.36", "--image=nginx:1.25"], object: Some("deployment/multi") },
    Step { args: &["create", "service", "externalname", "ext1", "--external-name=example.com"], object: Some("service/ext1") },
    Step { args: &["create", "service", "loadbalancer", "lb1", "--tcp=5678:8080"], object: Some("service/lb1") },
    Step { args: &["create", "clusterrole", "{ns}-agg", "--aggregation-rule=rbac.example.com/aggregate=true"], object: Some("clusterrole/{ns}-agg") },
    Step { args: &["create", "rolebinding", "rb2", "--clusterrole=view", "--group=g1"], object: Some("rolebinding/rb2") },
    Step { args: &["create", "pdb", "pdb2", "--selector=app=x", "--max-unavailable=1"], object: Some("pdb/pdb2") },
    Step { args: &["create", "ingress", "ing2", "--class=nginx", "--default-backend=svc1:http"], object: Some("ingress/ing2") },
    Step { args: &["create", "secret", "generic", "s4", "--from-file=bin=/usr/bin/true"], object: Some("secret/s4") },
    Step { args: &["create", "quota", "q2", "--hard=count/deployments.apps=2"], object: Some("resourcequota/q2") },
    Step { args: &["auth", "can-i", "create", "deployments"], object: None },
    Step { args: &["auth", "can-i", "get", "/healthz"], object: None },
    Step { args: &["auth", "whoami", "-o", "jsonpath={.kind}"], object: None },
];

fn run(bin: &Path, kubeconfig: &Path, ns: &str, args: &[String]) -> (bool, String, String) {
    let out = Command::new(bin).arg("--kubeconfig").arg(kubeconfig).args(["-n", ns]).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Remove what the server assigns or its controllers and admission write (both servers fill
/// these in, with different values): identities, times, versions, status, allocated IPs and
/// IP families and node ports, the token volume and tolerations pods get at admission, the
/// Job's controller uid, owners' uids, the topology labels testenv's members add to pods.
fn normalise(mut obj: Value) -> Value {
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    for e in obj.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut).into_iter().flatten() {
        owner_uid_keys(&mut e["fieldsV1"]);
    }
    strip_topology(&mut obj);
    for owner in obj.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut).into_iter().flatten() {
        owner["uid"] = json!("<uid>");
    }
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for k in ["uid", "resourceVersion", "creationTimestamp", "selfLink"] {
            meta.remove(k);
        }
        if let Some(Value::Array(managed)) = meta.get_mut("managedFields") {
            managed.retain(|e| e["manager"].as_str().is_some_and(|m| m.starts_with("kubectl-")));
            for e in managed.iter_mut() {
                e.as_object_mut().unwrap().remove("time");
            }
        }
        if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
            annotations.remove("deployment.kubernetes.io/revision");
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    let spec = &mut obj["spec"];
    if let Some(s) = spec.as_object_mut() {
        for k in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort"] {
            s.remove(k);
        }
        for port in s.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
            if kind == "Service" {
                port.as_object_mut().unwrap().remove("nodePort");
            }
        }
        if kind == "Pod" {
            for k in ["volumes", "tolerations", "nodeName", "serviceAccountName", "serviceAccount"] {
                s.remove(k);
            }
            for c in s.get_mut("containers").and_then(Value::as_array_mut).into_iter().flatten() {
                c.as_object_mut().unwrap().remove("volumeMounts");
            }
        }
    }
    // The Job controller's uid label (selector, template and the Job's own labels).
    if kind == "Job" {
        for ptr in ["/metadata/labels", "/spec/selector/matchLabels", "/spec/template/metadata/labels"] {
            if let Some(Value::Object(labels)) = obj.pointer_mut(ptr) {
                for (k, v) in labels.iter_mut() {
                    if k.ends_with("controller-uid") {
                        *v = json!("<uid>");
                    }
                }
            }
        }
    }
    obj
}

/// testenv's members label pods with their topology (and `expose pod` copies pod labels into
/// the Service's labels, selector and owned fields): every key naming it goes.
fn strip_topology(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.contains("topology.kubernetes.io/"));
            m.values_mut().for_each(strip_topology);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_topology),
        _ => {}
    }
}

/// Run every step against one server: per step whether it succeeded, what it printed (when
/// stable) and the object it left.
fn run_steps(bin: &Path, kubeconfig: &Path, ns: &str) -> Vec<Value> {
    let (ok, _, err) = run(bin, kubeconfig, "default", &["create".into(), "namespace".into(), ns.into()]);
    assert!(ok, "create namespace: {err}");
    let (ok, out, err) = run(bin, kubeconfig, "default", &["get".into(), "namespace".into(), ns.into(), "-o".into(), "json".into()]);
    assert!(ok, "{err}");
    let mut seen = vec![json!({"step": "create namespace", "object": normalise(serde_json::from_str(&out).unwrap())})];
    for step in STEPS {
        let args: Vec<String> = step.args.iter().map(|a| a.replace("{ns}", ns)).collect();
        let (ok, out, err) = run(bin, kubeconfig, ns, &args);
        let err = err.replace(ns, "{ns}");
        let object = step.object.map(|o| {
            let (ok, out, err) = run(bin, kubeconfig, ns, &["get".into(), o.replace("{ns}", ns), "-o".into(), "json".into(), "--show-managed-fields".into()]);
            if ok { normalise(serde_json::from_str(&out).unwrap()) } else { json!({"get failed": err.trim()}) }
        });
        // `create token` prints a token (different on every server); the rest print what
        // they did, the same on both.
        let printed = if args[0] == "auth" && args[1] == "whoami" { out.trim().to_string() } else { out.replace(ns, "{ns}") };
        seen.push(json!({"step": args.join(" ").replace(ns, "{ns}"), "ok": ok, "printed": printed, "error": if ok { Value::Null } else { json!(err.lines().last()) }, "object": object}));
    }
    let (ok, out, _) = run(bin, kubeconfig, ns, &["create".into(), "token".into(), "sa1".into(), "--duration=10m".into()]);
    seen.push(json!({"step": "create token", "ok": ok, "printed a token": !out.trim().is_empty()}));
    for o in ["clusterrolebinding/{ns}-crb", "clusterrole/{ns}-cr", "clusterrole/{ns}-agg", "priorityclass/{ns}-pc"] {
        run(bin, kubeconfig, "default", &["delete".into(), o.replace("{ns}", ns), "--ignore-not-found".into()]);
    }
    run(bin, kubeconfig, "default", &["delete".into(), "namespace".into(), ns.into(), "--wait=false".into()]);
    seen
}

#[test]
fn typed_creates_from_kubectl_1_33_match_a_real_kube_apiserver() {
    let Some(bin) = kubectl_1_33() else {
        eprintln!("SKIPPED: kubectl 1.33 is not installed");
        return;
    };
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let ns = format!("pb-{}", std::process::id());
    let real = run_steps(&bin, &env.member("member1").kubeconfig, &ns);
    let cp = Flotilla::start();

    // kubectl 1.33 does send protobuf bodies (so this test exercises the decoder).
    let (ok, _, trace) = run(&bin, &cp.kubeconfig, "default", &["create".into(), "configmap".into(), "pb-probe".into(), "-v=8".into()]);
    assert!(ok, "{trace}");
    assert!(trace.contains("Content-Type: application/vnd.kubernetes.protobuf"), "kubectl 1.33 sent no protobuf body:\n{trace}");

    let ours = run_steps(&bin, &cp.kubeconfig, &ns);
    // The script does what it says on the real server.
    assert!(real.iter().all(|s| s["ok"] != false), "a step failed on the real kube-apiserver: {real:#?}");
    assert_eq!(real.last().unwrap()["printed a token"], true);
    let mut differ = Vec::new();
    for (r, o) in real.iter().zip(&ours) {
        if r != o {
            differ.push(format!("{}:\n  flotilla:       {o}\n  kube-apiserver: {r}", r["step"]));
        }
    }
    assert!(differ.is_empty(), "{} of {} steps differ:\n{}", differ.len(), real.len(), differ.join("\n"));
}

/// In field sets, an owner reference is keyed by its uid (`k:{"uid":"…"}`), which differs
/// between the two servers.
fn owner_uid_keys(fields: &mut Value) {
    if let Value::Object(m) = fields {
        let keys: Vec<String> = m.keys().cloned().collect();
        for k in keys {
            let mut v = m.remove(&k).unwrap_or_default();
            owner_uid_keys(&mut v);
            let k = if k.starts_with("k:{\"uid\":") { "k:{\"uid\":\"<uid>\"}".to_string() } else { k };
            m.insert(k, v);
        }
    }
}
