//! The global view (issue 25), first part: a ResourceRegistry selects pods and deployments of
//! every cluster — two simulated members of `flotilla up --demo 2` and a real kube-apiserver
//! from testenv joined beside them — and `search.karmada.io/v1alpha1` `search/cache/...`
//! answers lists of them from the control plane's cache, as karmada-search does: every object
//! annotated with its cluster, label and field selectors, pages; an object created in a member
//! appears; a member that stops answering keeps its objects, marked stale, until it is back.
//!
//! Then stock kubectl through `flotilla kubeconfig global-view` (karmada-search's proxy path):
//! pods of every cluster with the cluster annotation, label and field selectors, pages, a
//! Table with a Cluster column, `get pods -A -w` seeing a pod created in a member, a delete
//! forwarded to the member holding the pod; and while a member is down the binding's
//! aggregated status says its cluster is unknown, until it is back.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::{
    FAST_PROBES, Flotilla, apply_yaml, flotilla_cmd, get_json, has_condition, join_members, kubectl_bin, kubectl_try, sim_faults, unique, wait_cluster_ready,
    wait_for,
};

const SEARCH: &str = "/apis/search.karmada.io/v1alpha1/search/cache";
const CLUSTER: &str = "resource.karmada.io/cached-from-cluster";
const STALE: &str = "search.flotilla.io/stale-since";
const LONG: Duration = Duration::from_secs(120);

fn raw(kc: &std::path::Path, path: &str) -> Result<Value, String> {
    let (ok, out) = kubectl_try(kc, &["get", "--raw", path]);
    if !ok {
        return Err(out);
    }
    serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn clusters_of(list: &Value) -> BTreeSet<String> {
    items(list).iter().filter_map(|o| o["metadata"]["annotations"][CLUSTER].as_str().map(String::from)).collect()
}

/// "cluster/name" of each item, in the order served.
fn keys(list: &Value) -> Vec<String> {
    items(list)
        .iter()
        .map(|o| format!("{}/{}", o["metadata"]["annotations"][CLUSTER].as_str().unwrap_or("?"), o["metadata"]["name"].as_str().unwrap_or("?")))
        .collect()
}

#[test]
fn the_search_cache_serves_member_objects_of_every_cluster() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let mut args = vec!["--demo", "2"];
    args.extend_from_slice(FAST_PROBES);
    let cp = Flotilla::start_with(&args);
    let kc = cp.kubeconfig.clone();
    for m in ["member1", "member2"] {
        wait_cluster_ready(&kc, m, "True");
    }
    let joined = join_members(&env, &kc, &["member3"]);
    let member3 = joined[0].1.clone();
    let all: BTreeSet<String> = ["member1", "member2", "member3"].iter().map(|s| s.to_string()).collect();

    // A Deployment on every cluster (one pod each), and a registry of pods and deployments.
    let ns = unique("gv");
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, labels: {{app: {ns}}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {ns}}}}}
  template:
    metadata: {{labels: {{app: {ns}, tier: front}}}}
    spec: {{containers: [{{name: web, image: nginx}}]}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]
  placement:
    clusterAffinity: {{clusterNames: [member1, member2, member3]}}
    replicaScheduling: {{replicaSchedulingType: Duplicated}}
---
apiVersion: search.karmada.io/v1alpha1
kind: ResourceRegistry
metadata: {{name: {ns}}}
spec:
  targetCluster: {{clusterNames: [member1, member2, member3]}}
  resourceSelectors:
  - {{apiVersion: v1, kind: Pod}}
  - {{apiVersion: apps/v1, kind: Deployment, namespace: {ns}}}
"#
        ),
    );

    // Pods of all three clusters, each annotated with its cluster.
    let pods = wait_for("the pods of all three clusters in the cache", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods"))?;
        if clusters_of(&list) == all { Ok(list) } else { Err(list.to_string()) }
    });
    assert_eq!((pods["kind"].as_str(), pods["apiVersion"].as_str()), (Some("PodList"), Some("v1")));
    for p in items(&pods) {
        assert_eq!((p["kind"].as_str(), p["apiVersion"].as_str(), p["metadata"]["namespace"].as_str()), (Some("Pod"), Some("v1"), Some(ns.as_str())));
        assert_eq!(p["metadata"]["labels"]["app"], ns.as_str(), "{p}");
        assert!(p["metadata"].get("managedFields").is_none());
    }
    let rv = pods["metadata"]["resourceVersion"].as_str().expect("a multi-cluster resourceVersion");
    assert!(!rv.is_empty());

    // Deployments, and one by name (karmada-search answers a name with a list too).
    let deployments = raw(&kc, &format!("{SEARCH}/apis/apps/v1/namespaces/{ns}/deployments")).unwrap();
    assert_eq!((deployments["kind"].as_str(), clusters_of(&deployments)), (Some("DeploymentList"), all.clone()));
    let named = raw(&kc, &format!("{SEARCH}/apis/apps/v1/namespaces/{ns}/deployments/web")).unwrap();
    assert_eq!(items(&named).len(), 3);
    assert_eq!(raw(&kc, &format!("{SEARCH}/apis/apps/v1/namespaces/{ns}/deployments/nothing")).unwrap()["items"], serde_json::json!([]));

    // Label and field selectors over all namespaces, as kube-apiserver reads them.
    let by_label = raw(&kc, &format!("{SEARCH}/api/v1/pods?labelSelector=app%3D{ns}%2Ctier%3Dfront")).unwrap();
    assert_eq!(keys(&by_label), keys(&pods), "the label picks our pods and nothing else");
    let by_field = raw(&kc, &format!("{SEARCH}/api/v1/pods?fieldSelector=metadata.namespace%3D{ns}")).unwrap();
    assert_eq!(keys(&by_field), keys(&pods));
    let none = raw(&kc, &format!("{SEARCH}/api/v1/pods?fieldSelector=metadata.namespace%3D{ns}&labelSelector=tier%21%3Dfront")).unwrap();
    assert_eq!(items(&none).len(), 0, "{none}");

    // Pages of one, followed with `continue`, give the whole list in its order.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let sep = if token.is_empty() { String::new() } else { format!("&continue={token}") };
        let page = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?limit=1{sep}")).unwrap();
        assert!(items(&page).len() <= 1);
        paged.extend(keys(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    assert_eq!(paged, keys(&pods));

    // The registry says what it holds.
    wait_for("the registry Cached", LONG, || {
        let r = get_json(&kc, &["get", "resourceregistry", &ns])?;
        if has_condition(&r, "Cached", "True") && has_condition(&r, "Stale", "False") { Ok(()) } else { Err(r["status"].to_string()) }
    });

    // The cache counts itself in /metrics.
    let (ok, metrics) = kubectl_try(&kc, &["get", "--raw", "/metrics"]);
    let objects: f64 = metrics.lines().find_map(|l| l.strip_prefix("flotilla_search_cache_objects ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0);
    assert!(ok && objects >= 6.0, "three pods and three deployments at least: {objects}");
    assert!(metrics.contains("flotilla_search_cache_limit_bytes 1073741824"), "the default cap");

    // `flotilla get` reads the cache when a registry covers the kind, and says so.
    let kcs = kc.to_str().unwrap();
    let (ok, cached) = flotilla_cmd(&["get", "pods", "-n", &ns, "--clusters", "all", "--kubeconfig", kcs]);
    assert!(ok && cached.contains("from the global view's cache"), "{cached}");
    for m in &all {
        assert!(cached.lines().any(|l| l.starts_with(m.as_str()) && l.contains("web-")), "{m} in {cached}");
    }
    let (ok, fanned) = flotilla_cmd(&["get", "pods", "-n", &ns, "--clusters", "all", "--source", "members", "--kubeconfig", kcs]);
    assert!(ok && fanned.contains("through the cluster proxy"), "{fanned}");
    let rows = |out: &str| {
        let mut v: Vec<String> = out.lines().filter(|l| l.starts_with("member")).map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).collect();
        v.sort();
        v
    };
    assert_eq!(rows(&cached), rows(&fanned), "the same pods either way");
    let (ok, out) = flotilla_cmd(&["get", "services", "-n", &ns, "--clusters", "all", "--source", "cache", "--kubeconfig", kcs]);
    assert!(!ok && out.contains("no ResourceRegistry caches v1 Service"), "{out}");

    // A pod made in the real member itself appears.
    let (ok, out) = kubectl_try(&member3, &["-n", &ns, "run", "solo", "--image=nginx", "--labels", &format!("app={ns},tier=back")]);
    assert!(ok, "{out}");
    wait_for("member3's own pod in the cache", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?labelSelector=tier%3Dback"))?;
        if keys(&list) == ["member3/solo"] { Ok(()) } else { Err(list.to_string()) }
    });

    // Stock kubectl through the global-view kubeconfig.
    let gv = cp.dir.path().join("global-view.kubeconfig");
    let (ok, out) = flotilla_cmd(&["kubeconfig", "global-view", "--kubeconfig", kc.to_str().unwrap(), "-o", gv.to_str().unwrap()]);
    assert!(ok, "{out}");
    let by_label = get_json(&gv, &["get", "pods", "-A", "-l", &format!("app={ns},tier=front")]).unwrap();
    assert_eq!(clusters_of(&by_label), all, "{by_label}");
    assert_eq!(keys(&by_label), keys(&pods));
    let by_field = get_json(&gv, &["get", "pods", "-A", "--field-selector", &format!("metadata.namespace={ns}")]).unwrap();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let mut expected = keys(&pods);
    expected.push("member3/solo".into());
    let expected = sorted(expected);
    assert_eq!(sorted(keys(&by_field)), expected, "the field selector picks our namespace: {by_field}");
    let chunked = get_json(&gv, &["get", "pods", "-n", &ns, "--chunk-size=1"]).unwrap();
    assert_eq!(sorted(keys(&chunked)), expected, "pages of one, followed by kubectl");
    let one = get_json(&gv, &["get", "pod", "solo", "-n", &ns]).unwrap();
    assert_eq!(one["metadata"]["annotations"][CLUSTER], "member3", "{one}");
    let (ok, wide) = kubectl_try(&gv, &["get", "pods", "-n", &ns, "-o", "wide"]);
    assert!(ok && wide.lines().next().is_some_and(|h| h.contains("CLUSTER") && h.contains("STATUS")), "{wide}");
    assert!(wide.lines().any(|l| l.starts_with("solo") && l.contains("member3")), "{wide}");
    // Discovery and kinds the cache does not hold are the control plane's own.
    let (ok, out) = kubectl_try(&gv, &["get", "propagationpolicy", "web", "-n", &ns, "-o", "name"]);
    assert!(ok && out.trim() == "propagationpolicy.policy.karmada.io/web", "{out}");

    // `kubectl get pods -A -w` sees a pod created in a member.
    let watch = Watch::start(&gv, &["get", "pods", "-A", "-w"]);
    let (ok, out) = kubectl_try(&member3, &["-n", &ns, "run", "watched", "--image=nginx"]);
    assert!(ok, "{out}");
    wait_for("kubectl -w to print the new pod", LONG, || {
        let seen = watch.output();
        if seen.lines().any(|l| l.contains(&ns) && l.contains("watched")) { Ok(()) } else { Err(seen) }
    });
    drop(watch);

    // A delete through the global view reaches the member holding the pod.
    let (ok, out) = kubectl_try(&gv, &["delete", "pod", "watched", "-n", &ns, "--wait=false"]);
    assert!(ok, "{out}");
    wait_for("the pod deleted in member3", LONG, || match kubectl_try(&member3, &["get", "pod", "watched", "-n", &ns]) {
        (false, out) if out.contains("NotFound") => Ok(()),
        (_, out) => Err(out),
    });

    // The Deployment's status counts every cluster while all are Ready.
    let binding = "web-deployment".to_string();
    wait_for("the template's status from three clusters", LONG, || {
        let d = get_json(&kc, &["get", "deployment", "web", "-n", &ns])?;
        if d["status"]["replicas"] == 3 { Ok(()) } else { Err(d["status"].to_string()) }
    });

    // member2 stops answering: its pods stay, marked stale, and the registry names it.
    sim_faults(&cp, "member2", r#"{"blackhole": true}"#);
    wait_cluster_ready(&kc, "member2", "False");
    let stale = wait_for("member2's pods marked stale", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?labelSelector=tier%3Dfront"))?;
        let marked: Vec<String> = items(&list)
            .iter()
            .filter(|p| p["metadata"]["annotations"].get(STALE).is_some())
            .map(|p| p["metadata"]["annotations"][CLUSTER].as_str().unwrap_or("?").to_string())
            .collect();
        if marked == ["member2"] && clusters_of(&list) == all { Ok(list) } else { Err(list.to_string()) }
    });
    assert_eq!(items(&stale).len(), 3, "member2's pod is still listed");
    wait_for("the registry Stale naming member2", LONG, || {
        let r = get_json(&kc, &["get", "resourceregistry", &ns])?;
        let stale = r["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Stale").cloned().unwrap_or_default();
        if stale["status"] == "True" && stale["message"].as_str().is_some_and(|m| m.contains("member2")) { Ok(()) } else { Err(r["status"].to_string()) }
    });

    // The binding says member2's status is unknown, and the template no longer counts it.
    wait_for("member2 unknown in the binding's aggregated status", LONG, || {
        let b = get_json(&kc, &["get", "resourcebinding", &binding, "-n", &ns])?;
        let item = b["status"]["aggregatedStatus"].as_array().into_iter().flatten().find(|i| i["clusterName"] == "member2").cloned().unwrap_or_default();
        let current = b["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "MemberStatusCurrent").cloned().unwrap_or_default();
        let named = current["status"] == "False" && current["message"].as_str().is_some_and(|m| m.contains("member2"));
        if item["health"] == "Unknown" && named { Ok(()) } else { Err(b["status"].to_string()) }
    });
    wait_for("the template's status without member2", LONG, || {
        let d = get_json(&kc, &["get", "deployment", "web", "-n", &ns])?;
        if d["status"]["replicas"] == 2 { Ok(()) } else { Err(d["status"].to_string()) }
    });

    // Back: fresh again.
    sim_faults(&cp, "member2", r#"{"blackhole": false}"#);
    wait_cluster_ready(&kc, "member2", "True");
    wait_for("member2's pods fresh again", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?labelSelector=tier%3Dfront"))?;
        let fresh = items(&list).iter().all(|p| p["metadata"]["annotations"].get(STALE).is_none());
        if fresh && clusters_of(&list) == all { Ok(()) } else { Err(list.to_string()) }
    });
    wait_for("the registry no longer Stale", LONG, || {
        let r = get_json(&kc, &["get", "resourceregistry", &ns])?;
        if has_condition(&r, "Stale", "False") { Ok(()) } else { Err(r["status"].to_string()) }
    });
    wait_for("the binding current again", LONG, || {
        let b = get_json(&kc, &["get", "resourcebinding", &binding, "-n", &ns])?;
        let item = b["status"]["aggregatedStatus"].as_array().into_iter().flatten().find(|i| i["clusterName"] == "member2").cloned().unwrap_or_default();
        if has_condition(&b, "MemberStatusCurrent", "True") && item["health"] != "Unknown" { Ok(()) } else { Err(b["status"].to_string()) }
    });
    wait_for("the template's status from three clusters again", LONG, || {
        let d = get_json(&kc, &["get", "deployment", "web", "-n", &ns])?;
        if d["status"]["replicas"] == 3 { Ok(()) } else { Err(d["status"].to_string()) }
    });

    // Bad requests get a Status that says what is wrong.
    for (path, says) in [
        (format!("{SEARCH}/api/v1/pods?limit=x"), "limit"),
        (format!("{SEARCH}/api/v1/pods?labelSelector=a%20in"), "unable to parse requirement"),
        (format!("{SEARCH}/api/v1/pods?continue=garbage"), "continue"),
        (format!("{SEARCH}/api/v1/namespaces/{ns}/pods/solo/log"), "subresource"),
        ("/apis/search.karmada.io/v1alpha1/search/opensearch/api/v1/pods".to_string(), "OpenSearch"),
    ] {
        let (ok, out) = kubectl_try(&kc, &["get", "--raw", &path]);
        assert!(!ok && out.contains("BadRequest") && out.contains(says), "{path}: {out}");
    }

    // The real member is shared with other tests: leave nothing behind in it.
    let (ok, out) = kubectl_try(&member3, &["delete", "namespace", &ns, "--wait=false"]);
    assert!(ok, "{out}");
}

/// A long-running command (`kubectl get -w`, `flotilla port-forward`) whose output is collected;
/// killed when dropped, even when the test fails.
struct Watch {
    child: std::process::Child,
    out: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Watch {
    fn start(kubeconfig: &std::path::Path, args: &[&str]) -> Watch {
        let mut all = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        Watch::spawn(&kubectl_bin(), &all)
    }

    fn spawn(program: &std::path::Path, args: &[&str]) -> Watch {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(program)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run kubectl");
        let out = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        for reader in [Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>, Box::new(child.stderr.take().unwrap())] {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(reader).lines().map_while(Result::ok) {
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        Watch { child, out }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reaching a member's application (issue 25, must-show 2): a real member's Service answered
/// through the cluster proxy's service path and through `flotilla port-forward` by a server that
/// is the pod's IP — in a network namespace of the test's own, since Kubernetes refuses loopback
/// endpoints, which a Service whose pod says 127.0.0.1 shows.
#[test]
fn a_members_service_answers_through_the_cluster_proxy() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let token = unique("answer");
    if !support::netns::available("the service proxy test through a network namespace") {
        return;
    }
    let mut netns = support::netns::NetNs::new("fgv", 213, 0);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), format!("<p>{token}</p>\n")).unwrap();
    let ip = netns.ip.clone();
    netns.spawn("python3", &["-m", "http.server", "8080", "--bind", &ip, "--directory", dir.path().to_str().unwrap()]);
    let cp = Flotilla::start_with(FAST_PROBES);
    let kc = cp.kubeconfig.clone();
    let joined = join_members(&env, &kc, &["member3"]);
    let member3 = joined[0].1.clone();
    let ns = unique("svc");
    let app = |name: &str, ip: &str| {
        format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: {name}}}, annotations: {{testenv.flotilla.io/pod-ip: "{ip}"}}}}
spec: {{containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec: {{selector: {{app: {name}}}, ports: [{{port: 80, targetPort: 8080}}]}}
"#
        )
    };
    apply_yaml(&member3, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n{}{}", app("web", &netns.ip), app("local", "127.0.0.1")));
    let proxy = |svc: &str| format!("/apis/cluster.karmada.io/v1alpha1/clusters/member3/proxy/api/v1/namespaces/{ns}/services/{svc}:80/proxy/");
    let answer = wait_for("the namespace's server through the member's service proxy", LONG, || {
        let (ok, out) = kubectl_try(&kc, &["get", "--raw", &proxy("web")]);
        if ok && out.contains(&token) { Ok(out) } else { Err(out) }
    });
    assert!(answer.contains(&token), "{answer}");
    // `flotilla port-forward` to the Service: its pod's target port, from a free local port.
    let forward = Watch::spawn(
        std::path::Path::new(env!("CARGO_BIN_EXE_flotilla")),
        &["port-forward", "--cluster", "member3", "-n", &ns, "svc/web", ":80", "--kubeconfig", kc.to_str().unwrap()],
    );
    let port: u16 = wait_for("port-forward listening", LONG, || {
        let out = forward.output();
        out.lines().find_map(|l| l.strip_prefix("Forwarding from 127.0.0.1:")).and_then(|r| r.split_whitespace().next()).and_then(|p| p.parse().ok()).ok_or(out)
    });
    assert!(forward.output().contains("-> 8080"), "the Service's port 80 is the pod's 8080: {}", forward.output());
    let page = wait_for("the namespace's server through flotilla port-forward", LONG, || {
        use std::io::{Read as _, Write as _};
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        conn.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n").map_err(|e| e.to_string())?;
        let mut page = String::new();
        let _ = conn.read_to_string(&mut page);
        if page.contains(&token) { Ok(page) } else { Err(format!("{page} / {}", forward.output())) }
    });
    assert!(page.starts_with("HTTP/1.0 200"), "{page}");
    drop(forward);

    // A pod that says 127.0.0.1: Kubernetes refuses a loopback endpoint, so its Service has
    // none and the service proxy has nowhere to go.
    wait_for("the loopback pod Running with its address", LONG, || {
        let p = get_json(&member3, &["-n", &ns, "get", "pod", "local"])?;
        if p["status"]["podIP"] == "127.0.0.1" && p["status"]["phase"] == "Running" { Ok(()) } else { Err(p["status"].to_string()) }
    });
    let (ok, out) = kubectl_try(&kc, &["get", "--raw", &proxy("local")]);
    assert!(!ok && out.contains("no endpoints available"), "a loopback endpoint is never served: {out}");
    let (ok, out) = kubectl_try(
        &member3,
        &["-n", &ns, "get", "endpointslices", "-l", "kubernetes.io/service-name=local", "-o", "jsonpath={.items[*].endpoints[*].addresses}"],
    );
    assert!(ok && !out.contains("127.0.0.1"), "no slice holds the loopback address: {out}");
    let (ok, out) = kubectl_try(&member3, &["delete", "namespace", &ns, "--wait=false"]);
    assert!(ok, "{out}");
}
