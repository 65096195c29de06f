//! The built-in gateway (issue 26, must-show 3) on two real members (a private testenv, so that
//! one member can be stopped): the Service `web` runs in member1 (pods web-a and web-b) and
//! member2 (web-c), each pod a real HTTP server in a network namespace of the test's own whose
//! address testenv's kubelet reports as the pod IP; the Service is exported from both.
//!
//! A MultiClusterIngress (`web.example.com`, TLS from the Secret it names) and a
//! FederatedIngress (`api.example.com`) route to it through `--gateway-listen` (HTTPS, asked
//! for HTTP/2) and `--gateway-http-listen` (cleartext HTTP/1.1). While two clients send GETs
//! without pause, web-a's server is killed, then member2 is stopped together with web-c's
//! server: every request is answered (the count is reported), and the answers come from the
//! backends still alive.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use support::netns::NetNs;
use support::{FAST_PROBES, Flotilla, apply_yaml, get_json, join_members, wait_cluster_ready, wait_for};

const LONG: Duration = Duration::from_secs(180);

/// A backend: answers every GET with its name and the path, over HTTP/1.1 keep-alive.
const BACKEND: &str = r#"
import sys, http.server
name, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("%s %s %s\n" % (name, self.path, self.headers.get("X-Forwarded-Proto"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((ip, port), H).serve_forever()
"#;

/// What one client saw: answers by backend, failures (with what was said), HTTP versions.
#[derive(Default, Debug)]
struct Tally {
    by_backend: BTreeMap<String, u64>,
    failures: Vec<String>,
    versions: BTreeMap<String, u64>,
}

impl Tally {
    fn answered(&self) -> u64 {
        self.by_backend.values().sum()
    }
}

/// `curl` a URL through the gateway: (backend name, HTTP version) or what went wrong.
fn curl(args: &[String]) -> Result<(String, String), String> {
    let out = Command::new("curl").args(["-sS", "--max-time", "20", "-w", "\n%{http_code} %{http_version}"]).args(args).output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').unwrap_or((&text, ""));
    let mut s = status.split_whitespace();
    match (s.next(), s.next()) {
        (Some("200"), Some(version)) => Ok((body.split_whitespace().next().unwrap_or_default().to_string(), version.to_string())),
        _ => Err(format!("{text} {}", String::from_utf8_lossy(&out.stderr))),
    }
}

/// A client sending GETs without pause until stopped.
struct Client {
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Client {
    fn start(args: Vec<String>) -> Client {
        let tally: Arc<Mutex<Tally>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (tally.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let r = curl(&args);
                let mut t = t.lock();
                match r {
                    Ok((backend, version)) => {
                        *t.by_backend.entry(backend).or_default() += 1;
                        *t.versions.entry(version).or_default() += 1;
                    }
                    Err(e) => t.failures.push(e),
                }
            }
        });
        Client { tally, stop, thread: Some(thread) }
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.tally.lock().by_backend.clone()
    }

    fn finish(mut self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.tally.lock())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The answers of both clients since `before`, by backend.
fn since(clients: &[&Client], before: &[BTreeMap<String, u64>]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (c, b) in clients.iter().zip(before) {
        for (k, v) in c.snapshot() {
            let d = v - b.get(&k).copied().unwrap_or(0);
            if d > 0 {
                *out.entry(k).or_default() += d;
            }
        }
    }
    out
}

fn pod(ns: &str, name: &str, ip: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{app: web}}, annotations: {{testenv.flotilla.io/pod-ip: \"{ip}\"}}}}\nspec: {{containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]}}\n"
    )
}

fn tls_secret(ns: &str, cert: &rcgen::CertifiedKey<rcgen::KeyPair>) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: web-tls, namespace: {ns}}}\ntype: kubernetes.io/tls\ndata: {{tls.crt: {}, tls.key: {}}}\n",
        b64(&cert.cert.pem()),
        b64(&cert.signing_key.serialize_pem())
    )
}

fn listen_addr(line: &str) -> String {
    line.trim_start_matches("flotilla: serving the gateway on ").split_whitespace().next().expect("the gateway's address").to_string()
}

#[test]
fn the_gateway_routes_both_ingress_kinds_and_loses_no_request_when_backends_and_a_cluster_fail() {
    if !support::netns::available("the gateway test's backends in network namespaces") {
        return;
    }
    let mut env = flotilla_testenv::TestEnv::start_private(2, &["--with-workloads"]);
    support::install_mcs_crds(&env, &["member1", "member2"]);
    // The backends: web-a and web-b for member1, web-c for member2.
    let script_dir = tempfile::tempdir().unwrap();
    let script = script_dir.path().join("backend.py");
    std::fs::write(&script, BACKEND).unwrap();
    let mut backends: Vec<(&str, &str, NetNs)> = Vec::new();
    for (i, (name, cluster)) in [("web-a", "member1"), ("web-b", "member1"), ("web-c", "member2")].into_iter().enumerate() {
        let mut ns = NetNs::new("fgw", 214, i as u32);
        let ip = ns.ip.clone();
        ns.spawn("python3", &[script.to_str().unwrap(), name, &ip, "8080"]);
        backends.push((name, cluster, ns));
    }

    let mut args = vec!["--gateway-listen", "127.0.0.1:0", "--gateway-http-listen", "127.0.0.1:0", "--gateway-eject-for", "2s"];
    args.extend_from_slice(FAST_PROBES);
    let mut cp = Flotilla::start_with(&args);
    let tls_line = cp.wait_line("flotilla: serving the gateway on ", Duration::from_secs(60));
    let plain_line = cp.wait_line("flotilla: serving the gateway on ", Duration::from_secs(60));
    assert!(tls_line.contains("https") && plain_line.contains("cleartext"), "{tls_line} / {plain_line}");
    let (tls_addr, plain_addr) = (listen_addr(&tls_line), listen_addr(&plain_line));
    let kc = cp.kubeconfig.clone();
    let members = join_members(&env, &kc, &["member1", "member2"]);
    let mk = |name: &str| -> PathBuf { members.iter().find(|(n, _)| *n == name).unwrap().1.clone() };

    let ns = "shop";
    apply_yaml(&kc, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    for m in ["member1", "member2"] {
        wait_for(&format!("namespace {ns} in {m}"), LONG, || get_json(&mk(m), &["get", "namespace", ns]));
        let mut yaml = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\nspec: {{selector: {{app: web}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n"
        );
        for (name, _, netns) in backends.iter().filter(|(_, c, _)| *c == m) {
            yaml.push_str(&pod(ns, name, &netns.ip));
        }
        apply_yaml(&mk(m), &yaml);
    }
    let cert = rcgen::generate_simple_self_signed(vec!["web.example.com".to_string()]).unwrap();
    let ca = script_dir.path().join("web-ca.pem");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: web, namespace: {ns}}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web-export, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceExport, name: web}}]
  placement: {{clusterAffinity: {{clusterNames: [member1, member2]}}}}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: web, namespace: {ns}}}
spec:
  type: ClusterSetIP
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterIngress
metadata: {{name: web, namespace: {ns}}}
spec:
  tls: [{{hosts: [web.example.com], secretName: web-tls}}]
  rules:
  - host: web.example.com
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedIngress
metadata: {{name: api, namespace: {ns}}}
spec:
  template:
    spec:
      rules:
      - host: api.example.com
        http:
          paths:
          - {{path: /api, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}
  placement:
    clusters: [{{name: member1}}, {{name: member2}}]
{}"#,
            tls_secret(ns, &cert)
        ),
    );

    let tls_port = tls_addr.rsplit(':').next().unwrap().to_string();
    let https = vec![
        "--http2".to_string(),
        "--cacert".into(),
        ca.to_str().unwrap().to_string(),
        "--resolve".into(),
        format!("web.example.com:{tls_port}:127.0.0.1"),
        format!("https://web.example.com:{tls_port}/cart"),
    ];
    let http = vec!["--http1.1".to_string(), "-H".into(), "Host: api.example.com".into(), format!("http://{plain_addr}/api/items")];
    // Every backend answers through each ingress: the Secret's certificate is served (curl
    // checks it against its own CA), HTTP/2 over TLS, the path and the scheme reach the pod.
    for (what, args) in [("the MultiClusterIngress over TLS", &https), ("the FederatedIngress in cleartext", &http)] {
        let mut seen = std::collections::BTreeSet::new();
        wait_for(&format!("all three backends through {what}"), LONG, || {
            let (backend, _) = curl(args)?;
            seen.insert(backend);
            if seen.len() == 3 { Ok(()) } else { Err(format!("{seen:?}")) }
        });
    }
    let out = Command::new("curl")
        .args(["-sS", "--http2", "--cacert", ca.to_str().unwrap(), "--resolve", &format!("web.example.com:{tls_port}:127.0.0.1")])
        .arg(format!("https://web.example.com:{tls_port}/cart"))
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.ends_with(" /cart https\n"), "the path and X-Forwarded-Proto reach the pod: {body:?}");
    let unrouted = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: nothing.example.com", &format!("http://{plain_addr}/")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&unrouted.stdout), "404", "a host no ingress names");

    let a = Client::start(https);
    let b = Client::start(http);
    let clients = [&a, &b];
    let mark = || clients.iter().map(|c| c.snapshot()).collect::<Vec<_>>();
    let settle = |what: &str, before: &[BTreeMap<String, u64>], want: &[&str]| {
        wait_for(what, LONG, || {
            let got = since(&clients, before);
            let ok = want.iter().all(|w| got.get(*w).is_some_and(|n| *n >= 20)) && got.keys().all(|k| want.contains(&k.as_str()));
            if ok { Ok(()) } else { Err(format!("{got:?}")) }
        })
    };
    settle("answers from every backend under load", &mark(), &["web-a", "web-b", "web-c"]);

    // One backend dies: the gateway ejects it and retries its requests elsewhere.
    backends[0].2.stop_server();
    // Requests web-a answered just before it died may still be counted: look after them.
    std::thread::sleep(Duration::from_secs(2));
    let after_kill = mark();
    settle("answers from web-b and web-c alone", &after_kill, &["web-b", "web-c"]);

    // member2 stops, its backend with it: retried until the cluster is withdrawn, then left out.
    backends[2].2.stop_server();
    env.lifecycle("stop", "member2");
    wait_cluster_ready(&kc, "member2", "False");
    let after_stop = mark();
    settle("answers from web-b alone once member2 is not Ready", &after_stop, &["web-b"]);

    let (ta, tb) = (a.finish(), b.finish());
    eprintln!(
        "gateway: MultiClusterIngress over TLS: {} answered {:?} versions {:?}; FederatedIngress in cleartext: {} answered {:?}",
        ta.answered(),
        ta.by_backend,
        ta.versions,
        tb.answered(),
        tb.by_backend
    );
    assert!(ta.failures.is_empty(), "requests lost through the MultiClusterIngress: {:?}", ta.failures);
    assert!(tb.failures.is_empty(), "requests lost through the FederatedIngress: {:?}", tb.failures);
    assert_eq!(ta.versions.keys().collect::<Vec<_>>(), ["2"], "HTTP/2 over TLS");
    assert_eq!(tb.versions.keys().collect::<Vec<_>>(), ["1.1"]);
    // The retries and ejections that kept every request answered, on /metrics.
    let metrics = support::kubectl(&support::kubectl_bin(), &kc, &["get", "--raw", "/metrics"]);
    let counter = |series: &str| -> u64 {
        metrics.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("{series} on /metrics"))
    };
    eprintln!(
        "gateway: forwarded {}, retries {}, ejections {}",
        counter("flotilla_gateway_requests_total{outcome=\"forwarded\"} "),
        counter("flotilla_gateway_retries_total "),
        counter("flotilla_gateway_ejections_total ")
    );
    assert!(counter("flotilla_gateway_retries_total ") > 0, "the killed backends' requests were retried");
    assert!(counter("flotilla_gateway_ejections_total ") > 0, "the killed backends were ejected");
    assert!(counter("flotilla_gateway_requests_total{outcome=\"unrouted\"} ") >= 1, "the 404 above");
    drop(cp);
}
