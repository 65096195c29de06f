//! Multi-cluster services (issue 26), Karmada's MCS path on three real members (a private
//! testenv, so that one member can be stopped): the Services `web` (ClusterSetIP) and `db`
//! (headless) run in member1 (a Pull member: its agent reports the exports) and member2 (Push)
//! and are exported there (their ServiceExports propagated by a PropagationPolicy); their
//! ServiceImports are propagated to member3.
//!
//! - member3 gets the derived Service `derived-web` and the EndpointSlices
//!   `imported-<cluster>-<slice>` with both clusters' endpoints;
//! - the built-in DNS server (`--dns-listen`) answers, to Debian's `dig`,
//!   `web.shop.svc.clusterset.local` with each cluster's Service IP, `db.shop.svc...` with the
//!   endpoints, and `db-0.<cluster>.db.shop.svc...` per endpoint;
//! - member2 stopped: its dispatched slices stay in member3 (Karmada's default) while the DNS
//!   answers drop its addresses once the cluster is not Ready; started again, they come back.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{FAST_PROBES, Flotilla, apply_yaml, get_json, join_members, kubectl, kubectl_bin, wait_cluster_ready, wait_for};

const LONG: Duration = Duration::from_secs(180);
/// The pod IPs testenv's kubelet gives the pods (annotation `testenv.flotilla.io/pod-ip`).
const WEB_IP: [(&str, &str); 2] = [("member1", "10.201.0.11"), ("member2", "10.202.0.12")];
const DB_IP: [(&str, &str); 2] = [("member1", "10.201.0.21"), ("member2", "10.202.0.22")];

/// `dig @addr -p port NAME TYPE +short`, sorted; a failed query is an error (NXDOMAIN is an
/// empty answer, which `+short` prints as nothing).
fn dig(server: &str, name: &str, qtype: &str) -> Result<Vec<String>, String> {
    let (ip, port) = server.rsplit_once(':').expect("ip:port");
    let out = Command::new("dig")
        .args([&format!("@{ip}"), "-p", port, name, qtype, "+short", "+tries=1", "+time=3"])
        .output()
        .map_err(|e| format!("running dig (Debian's bind9-dnsutils; the test command installs it): {e}"))?;
    if !out.status.success() {
        return Err(format!("dig failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect();
    lines.sort();
    Ok(lines)
}

/// dig's status line (`NOERROR`, `NXDOMAIN`, ...).
fn dig_status(server: &str, name: &str) -> String {
    let (ip, port) = server.rsplit_once(':').unwrap();
    let out = Command::new("dig").args([&format!("@{ip}"), "-p", port, name, "A", "+tries=1", "+time=3"]).output().expect("dig");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split("status: ").nth(1).and_then(|s| s.split(',').next()).unwrap_or("?").to_string()
}

fn member_yaml(ns: &str, web_ip: &str, db_ip: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}, annotations: {{testenv.flotilla.io/pod-ip: "{web_ip}"}}}}
    spec: {{containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: db-0, namespace: {ns}, labels: {{app: db}}, annotations: {{testenv.flotilla.io/pod-ip: "{db_ip}"}}}}
spec:
  hostname: db-0
  subdomain: db
  containers: [{{name: db, image: postgres, ports: [{{containerPort: 5432}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: db, namespace: {ns}}}
spec:
  clusterIP: None
  selector: {{app: db}}
  ports: [{{name: pg, port: 5432}}]
"#
    )
}

fn slices(kubeconfig: &Path, ns: &str, service: &str) -> Result<Vec<Value>, String> {
    let list = get_json(kubeconfig, &["get", "endpointslices", "-n", ns, "-l", &format!("kubernetes.io/service-name={service}")])?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

fn addresses(slices: &[Value]) -> BTreeSet<String> {
    slices
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

/// What a failed wait prints: the control plane's slices, Works and bindings, member1's slices.
fn state(kc: &Path, m1: &Path, ns: &str) -> String {
    let k = |kc: &Path, args: &[&str]| support::kubectl_try(kc, args).1;
    format!(
        "CP slices:\n{}\nworks:\n{}\nbindings:\n{}\nmember1:\n{}",
        k(kc, &["get", "endpointslices", "-A", "--show-labels"]),
        k(kc, &["get", "works", "-A", "--show-labels"]),
        k(kc, &["get", "rb", "-A", "-o", "yaml"]),
        k(m1, &["get", "endpointslices,pods", "-n", ns, "--show-labels", "-o", "wide"])
    )
}

#[test]
fn exported_services_reach_the_consumer_and_the_clusterset_dns() {
    let mut env = flotilla_testenv::TestEnv::start_private(3, &["--with-workloads"]);
    support::install_mcs_crds(&env, &["member1", "member2", "member3"]);

    let mut args = vec!["--dns-listen", "127.0.0.1:0", "--dns-ttl", "1"];
    args.extend_from_slice(FAST_PROBES);
    let mut cp = Flotilla::start_with(&args);
    let line = cp.wait_line("flotilla: serving DNS on ", Duration::from_secs(60));
    let dns = line.trim_start_matches("flotilla: serving DNS on ").split_whitespace().next().expect("the DNS address").to_string();
    let kc = cp.kubeconfig.clone();
    // member1 is a Pull member: its agent reports its exports; member2 and member3 are Push.
    let agent_kc = support::pull::register(&kc, cp.dir.path(), "member1");
    let _agent = support::pull::agent("member1", &agent_kc, &env.member("member1").kubeconfig);
    wait_cluster_ready(&kc, "member1", "True");
    let mut members = join_members(&env, &kc, &["member2", "member3"]);
    members.push(("member1", env.member("member1").kubeconfig.clone()));
    let mk = |name: &str| members.iter().find(|(n, _)| *n == name).unwrap().1.clone();

    // The namespace reaches every member from the control plane; the workloads are the members' own.
    let ns = "shop";
    apply_yaml(&kc, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    for (m, web_ip) in WEB_IP {
        wait_for(&format!("namespace {ns} in {m}"), LONG, || get_json(&mk(m), &["get", "namespace", ns]));
        let db_ip = DB_IP.iter().find(|(n, _)| *n == m).unwrap().1;
        apply_yaml(&mk(m), &member_yaml(ns, web_ip, db_ip));
    }
    let service_ips: Vec<String> = WEB_IP
        .iter()
        .map(|(m, _)| get_json(&mk(m), &["get", "service", "web", "-n", ns]).unwrap()["spec"]["clusterIP"].as_str().unwrap().to_string())
        .collect();

    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: web, namespace: {ns}}}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: db, namespace: {ns}}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: exports, namespace: {ns}}}
spec:
  resourceSelectors:
  - {{apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceExport, name: web}}
  - {{apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceExport, name: db}}
  placement: {{clusterAffinity: {{clusterNames: [member1, member2]}}}}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: web, namespace: {ns}}}
spec:
  type: ClusterSetIP
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {{name: db, namespace: {ns}}}
spec:
  type: Headless
  ports: [{{name: pg, port: 5432, protocol: TCP}}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: imports, namespace: {ns}}}
spec:
  resourceSelectors:
  - {{apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceImport, name: web}}
  - {{apiVersion: multicluster.x-k8s.io/v1alpha1, kind: ServiceImport, name: db}}
  placement: {{clusterAffinity: {{clusterNames: [member3]}}}}
"#
        ),
    );

    // The consumer: the derived Service and both clusters' endpoints, under Karmada's names.
    let m3 = mk("member3");
    let derived = wait_for("derived-web in member3", LONG, || get_json(&m3, &["get", "service", "derived-web", "-n", ns]));
    assert_eq!(derived["spec"]["ports"][0]["port"], 80);
    assert!(derived["spec"].get("selector").is_none(), "the derived Service selects nothing: {}", derived["spec"]);
    let want_web: BTreeSet<String> = WEB_IP.iter().map(|(_, ip)| ip.to_string()).collect();
    let imported = wait_for("both clusters' web endpoints in member3", LONG, || {
        let s = slices(&m3, ns, "derived-web")?;
        if addresses(&s) == want_web { Ok(s) } else { Err(format!("{:?}\n{}", addresses(&s), state(&kc, &mk("member1"), ns))) }
    });
    let names: BTreeSet<String> = imported.iter().map(|s| s["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert!(names.iter().any(|n| n.starts_with("imported-member1-web-")) && names.iter().any(|n| n.starts_with("imported-member2-web-")), "{names:?}");
    for s in &imported {
        assert_eq!(s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"], "endpointslice-controller.karmada.io");
    }
    let want_db: BTreeSet<String> = DB_IP.iter().map(|(_, ip)| ip.to_string()).collect();
    wait_for("both clusters' db endpoints in member3", LONG, || {
        let s = slices(&m3, ns, "derived-db")?;
        if addresses(&s) == want_db { Ok(()) } else { Err(format!("{:?}\n{}", addresses(&s), state(&kc, &mk("member1"), ns))) }
    });

    // The ClusterSet names.
    let mut both_service_ips = service_ips.clone();
    both_service_ips.sort();
    wait_for("web.shop.svc.clusterset.local: both clusters' Service IPs", LONG, || {
        let got = dig(&dns, "web.shop.svc.clusterset.local", "A")?;
        if got == both_service_ips { Ok(()) } else { Err(format!("{got:?}")) }
    });
    let db_both: Vec<String> = want_db.iter().cloned().collect();
    wait_for("db.shop.svc.clusterset.local: both clusters' endpoints", LONG, || {
        let got = dig(&dns, "db.shop.svc.clusterset.local", "A")?;
        if got == db_both { Ok(()) } else { Err(format!("{got:?}")) }
    });
    assert_eq!(dig(&dns, "db-0.member1.db.shop.svc.clusterset.local", "A").unwrap(), [DB_IP[0].1]);
    assert_eq!(dig(&dns, "db-0.member2.db.shop.svc.clusterset.local", "A").unwrap(), [DB_IP[1].1]);
    let srv = dig(&dns, "_pg._tcp.db.shop.svc.clusterset.local", "SRV").unwrap();
    assert_eq!(srv, ["0 0 5432 db-0.member1.db.shop.svc.clusterset.local.", "0 0 5432 db-0.member2.db.shop.svc.clusterset.local."]);
    assert_eq!(dig_status(&dns, "nothing.shop.svc.clusterset.local"), "NXDOMAIN");
    assert_eq!(dig_status(&dns, "example.org"), "REFUSED");
    let metrics = kubectl(&kubectl_bin(), &kc, &["get", "--raw", "/metrics"]);
    for outcome in ["answered", "nxdomain", "refused"] {
        let series = format!("flotilla_dns_queries_total{{outcome=\"{outcome}\"}} ");
        let n: u64 = metrics.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
        assert!(n > 0, "{series}on /metrics counts the queries above");
    }

    // member2 stops: Karmada keeps its slices in the consumer; the DNS answers drop it.
    env.lifecycle("stop", "member2");
    wait_cluster_ready(&kc, "member2", "False");
    wait_for("web answered by member1 alone", LONG, || {
        let got = dig(&dns, "web.shop.svc.clusterset.local", "A")?;
        if got == [service_ips[0].clone()] { Ok(()) } else { Err(format!("{got:?}")) }
    });
    assert_eq!(dig(&dns, "db.shop.svc.clusterset.local", "A").unwrap(), [DB_IP[0].1]);
    assert_eq!(dig_status(&dns, "db-0.member2.db.shop.svc.clusterset.local"), "NXDOMAIN");
    assert_eq!(addresses(&slices(&m3, ns, "derived-web").unwrap()), want_web, "the dispatched slices stay (Karmada's default)");

    // Back: answered again.
    env.lifecycle("start", "member2");
    wait_cluster_ready(&kc, "member2", "True");
    wait_for("web answered by both clusters again", LONG, || {
        let got = dig(&dns, "web.shop.svc.clusterset.local", "A")?;
        if got == both_service_ips { Ok(()) } else { Err(format!("{got:?}")) }
    });
    wait_for("db-0.member2 answered again", LONG, || {
        let got = dig(&dns, "db-0.member2.db.shop.svc.clusterset.local", "A")?;
        if got == [DB_IP[1].1] { Ok(()) } else { Err(format!("{got:?}")) }
    });

    // An export withdrawn in member1: its report goes, and so do its slices in member3.
    kubectl(
        &kubectl_bin(),
        &kc,
        &[
            "patch",
            "propagationpolicy",
            "exports",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"placement":{"clusterAffinity":{"clusterNames":["member2"]}}}}"#,
        ],
    );
    wait_for("member1's web endpoints gone from member3", LONG, || {
        let got = addresses(&slices(&m3, ns, "derived-web")?);
        if got == [WEB_IP[1].1.to_string()].into_iter().collect() { Ok(()) } else { Err(format!("{got:?}")) }
    });
    wait_for("web answered by member2 alone", LONG, || {
        let got = dig(&dns, "web.shop.svc.clusterset.local", "A")?;
        if got == [service_ips[1].clone()] { Ok(()) } else { Err(format!("{got:?}")) }
    });
}

/// The names of `slices` in `kubeconfig`'s namespace that the dispatch controller wrote for
/// `service`, with their addresses.
fn dispatched(kubeconfig: &Path, ns: &str, service: &str) -> Result<(BTreeSet<String>, BTreeSet<String>), String> {
    let s = slices(kubeconfig, ns, service)?;
    let mine: Vec<Value> =
        s.into_iter().filter(|s| s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "endpointslice-dispatch-controller.karmada.io").collect();
    let names = mine.iter().map(|s| s["metadata"]["name"].as_str().unwrap_or_default().to_string()).collect();
    Ok((names, addresses(&mine)))
}

/// Karmada's MultiClusterService `CrossCluster` path on the shared testenv: the Service `web`
/// runs (a Deployment propagated by a policy) in member1 (a Pull member, its agent reporting)
/// and member2, the providers; member3 consumes. member3 gets the Service (through the binding `web-service`) and each provider's
/// slices as `<provider>-<slice>` labelled with the Service's own name; a provider that becomes
/// a consumer too gets the others' slices, not its own; deleting the MultiClusterService takes
/// the copies away and releases the Service, whose binding stays.
#[test]
fn a_cross_cluster_multi_cluster_service_dispatches_provider_slices_to_consumers() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let cp = Flotilla::start_with(FAST_PROBES);
    let kc = cp.kubeconfig.clone();
    // member1, a provider, is a Pull member: its agent reports its slices.
    let agent_kc = support::pull::register(&kc, cp.dir.path(), "member1");
    let _agent = support::pull::agent("member1", &agent_kc, &env.member("member1").kubeconfig);
    wait_cluster_ready(&kc, "member1", "True");
    let mut members = join_members(&env, &kc, &["member2", "member3"]);
    members.push(("member1", env.member("member1").kubeconfig.clone()));
    let mk = |name: &str| members.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    let ns = support::unique("mcsx");
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]
  placement: {{clusterAffinity: {{clusterNames: [member1, member2]}}}}
---
apiVersion: networking.karmada.io/v1alpha1
kind: MultiClusterService
metadata: {{name: web, namespace: {ns}}}
spec:
  types: [CrossCluster]
  providerClusters: [{{name: member1}}, {{name: member2}}]
  consumerClusters: [{{name: member3}}]
"#
        ),
    );
    let m3 = mk("member3");
    let provider_addresses = |m: &str| -> Result<BTreeSet<String>, String> {
        let own: Vec<Value> = slices(&mk(m), &ns, "web")?
            .into_iter()
            .filter(|s| s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io")
            .collect();
        let a = addresses(&own);
        if a.len() == 2 { Ok(a) } else { Err(format!("{m}: {a:?}")) }
    };
    let a1 = wait_for("member1's own web endpoints", LONG, || provider_addresses("member1"));
    let a2 = wait_for("member2's own web endpoints", LONG, || provider_addresses("member2"));
    let both: BTreeSet<String> = a1.union(&a2).cloned().collect();
    let (names, _) = wait_for("both providers' slices in member3", LONG, || {
        let (names, got) = dispatched(&m3, &ns, "web")?;
        if got == both {
            Ok((names, got))
        } else {
            Err(format!("{names:?} {got:?}\n{}", support::kubectl_try(&kc, &["get", "works", "-A", "--show-labels"]).1))
        }
    });
    assert!(names.iter().any(|n| n.starts_with("member1-web-")) && names.iter().any(|n| n.starts_with("member2-web-")), "{names:?}");
    wait_for("the Service in member3", LONG, || get_json(&m3, &["get", "service", "web", "-n", &ns]));
    assert!(dispatched(&mk("member1"), &ns, "web").unwrap().0.is_empty(), "a provider that is no consumer gets nothing");

    // The control plane: the Service claimed, its binding to providers and consumers, the conditions.
    let svc = get_json(&kc, &["get", "service", "web", "-n", &ns]).unwrap();
    assert_eq!(svc["metadata"]["labels"]["resourcetemplate.karmada.io/claimed-by"], "MultiClusterService");
    let rb = get_json(&kc, &["get", "resourcebinding", "web-service", "-n", &ns]).unwrap();
    assert_eq!(rb["metadata"]["labels"]["binding.karmada.io/managed-by"], "MultiClusterService");
    assert_eq!(rb["spec"]["placement"]["clusterAffinity"]["clusterNames"], serde_json::json!(["member1", "member2", "member3"]));
    assert_eq!(rb["spec"]["conflictResolution"], "Overwrite");
    let mcs = wait_for("both conditions True", LONG, || {
        let m = get_json(&kc, &["get", "multiclusterservice", "web", "-n", &ns])?;
        let status = |t: &str| m["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == t).map(|c| c["status"].clone());
        if status("ServiceApplied") == Some("True".into()) && status("EndpointSliceDispatched") == Some("True".into()) {
            Ok(m)
        } else {
            Err(m["status"].to_string())
        }
    });
    assert_eq!(mcs["metadata"]["finalizers"], serde_json::json!(["karmada.io/multiclusterservice-controller"]));
    assert!(!mcs["metadata"]["labels"]["multiclusterservice.karmada.io/permanent-id"].as_str().unwrap_or_default().is_empty());
    wait_for("SyncServiceSucceed and DispatchEndpointSliceSucceed Events", LONG, || {
        let (_, out) = support::kubectl_try(
            &kc,
            &["get", "events", "-n", &ns, "--field-selector", "involvedObject.kind=MultiClusterService", "-o", "jsonpath={.items[*].reason}"],
        );
        if out.contains("SyncServiceSucceed") && out.contains("DispatchEndpointSliceSucceed") { Ok(()) } else { Err(out) }
    });

    // Scaled, the providers' new endpoints reach the consumer.
    kubectl(&kubectl_bin(), &kc, &["scale", "deployment", "web", "-n", &ns, "--replicas=3"]);
    wait_for("six endpoints in member3", LONG, || {
        let (_, got) = dispatched(&m3, &ns, "web")?;
        if got.len() == 6 { Ok(()) } else { Err(format!("{got:?}")) }
    });

    // member2 consumes too: member1's slices reach it, its own do not come back.
    kubectl(
        &kubectl_bin(),
        &kc,
        &["patch", "multiclusterservice", "web", "-n", &ns, "--type=merge", "-p", r#"{"spec":{"consumerClusters":[{"name":"member2"},{"name":"member3"}]}}"#],
    );
    wait_for("member1's slices in member2", LONG, || {
        let (names, _) = dispatched(&mk("member2"), &ns, "web")?;
        if !names.is_empty() && names.iter().all(|n| n.starts_with("member1-")) { Ok(()) } else { Err(format!("{names:?}")) }
    });

    // Deleted: the copies go, the Service is released, its binding stays (unmarked).
    kubectl(&kubectl_bin(), &kc, &["delete", "multiclusterservice", "web", "-n", &ns, "--wait=true", "--timeout=120s"]);
    for m in ["member2", "member3"] {
        wait_for(&format!("no dispatched slices left in {m}"), LONG, || {
            let (names, _) = dispatched(&mk(m), &ns, "web")?;
            if names.is_empty() { Ok(()) } else { Err(format!("{names:?}")) }
        });
    }
    let svc = get_json(&kc, &["get", "service", "web", "-n", &ns]).unwrap();
    assert!(svc["metadata"]["labels"].get("resourcetemplate.karmada.io/claimed-by").is_none(), "{}", svc["metadata"]);
    let rb = get_json(&kc, &["get", "resourcebinding", "web-service", "-n", &ns]).unwrap();
    assert!(rb["metadata"]["labels"].get("binding.karmada.io/managed-by").is_none(), "{}", rb["metadata"]);
    assert!(get_json(&m3, &["get", "service", "web", "-n", &ns]).is_ok(), "the member Service stays with the binding");
}
