//! KubeFed's multi-cluster DNS (issue 26; KubeFed v0.6.1, removed upstream in v0.7.0) on three
//! real members: the documented ServiceDNSRecord `test-service` (Domain `test-domain`,
//! `domain: example.com`) for a Service with load balancers in member1 and member2 (region
//! us-west1, zone us-west1-b) and none in member3 (region europe-west1) — zone, region and
//! global A records, and the CNAME fallback for member3 — and the documented IngressDNSRecord
//! `test-ingress`; the DNSEndpoints hold exactly KubeFed's records, and the built-in DNS server
//! answers them. testenv has no cloud load balancer: the test writes the member Services' and
//! Ingresses' `status.loadBalancer` itself.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{FAST_PROBES, Flotilla, apply_yaml, get_json, join_members, kubectl, kubectl_bin, wait_for};

const LONG: Duration = Duration::from_secs(120);
const NS: &str = "test-namespace";

fn dig_short(server: &str, name: &str) -> Result<Vec<String>, String> {
    let (ip, port) = server.rsplit_once(':').expect("ip:port");
    let out = Command::new("dig").args([&format!("@{ip}"), "-p", port, name, "A", "+short", "+tries=1", "+time=3"]).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
}

fn endpoints(kc: &std::path::Path, name: &str) -> Result<Value, String> {
    let e = get_json(kc, &["get", "dnsendpoints.multiclusterdns.kubefed.io", name, "-n", NS])?;
    Ok(e["spec"]["endpoints"].clone())
}

#[test]
fn kubefeds_dns_records_become_dnsendpoints_and_answers() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let mut args = vec!["--dns-listen", "127.0.0.1:0", "--kubefed-dns-resync", "1s"];
    args.extend_from_slice(FAST_PROBES);
    let mut cp = Flotilla::start_with(&args);
    let line = cp.wait_line("flotilla: serving DNS on ", Duration::from_secs(60));
    let dns = line.trim_start_matches("flotilla: serving DNS on ").split_whitespace().next().unwrap().to_string();
    let kc = cp.kubeconfig.clone();
    let members = join_members(&env, &kc, &["member1", "member2", "member3"]);
    for (m, region, zone) in [("member1", "us-west1", "us-west1-b"), ("member2", "us-west1", "us-west1-b"), ("member3", "europe-west1", "europe-west1-c")] {
        let patch = json!({"spec": {"region": region, "zones": [zone]}}).to_string();
        kubectl(&kubectl_bin(), &kc, &["patch", "cluster", m, "--type=merge", "-p", &patch]);
    }

    // The Service (with a ready pod behind it) and the Ingress in member1 and member2 only.
    for (i, (m, mk)) in members.iter().take(2).enumerate() {
        let n = i + 1;
        apply_yaml(
            mk,
            &format!(
                r#"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: test-service, namespace: {NS}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: test-service}}}}
  template:
    metadata: {{labels: {{app: test-service}}}}
    spec: {{containers: [{{name: web, image: nginx}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: test-service, namespace: {NS}}}
spec:
  type: LoadBalancer
  selector: {{app: test-service}}
  ports: [{{port: 80}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: test-ingress, namespace: {NS}}}
spec:
  defaultBackend: {{service: {{name: test-service, port: {{number: 80}}}}}}
"#
            ),
        );
        wait_for(&format!("test-service's endpoints in {m}"), LONG, || {
            let e = get_json(mk, &["get", "endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=test-service"])?;
            if e["items"][0]["endpoints"].as_array().is_some_and(|a| !a.is_empty()) { Ok(()) } else { Err(e.to_string()) }
        });
        let svc_lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": format!("10.0.{n}.1")}]}}}).to_string();
        kubectl(&kubectl_bin(), mk, &["patch", "service", "test-service", "-n", NS, "--subresource=status", "--type=merge", "-p", &svc_lb]);
        let ing_lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": format!("10.0.{n}.2")}]}}}).to_string();
        kubectl(&kubectl_bin(), mk, &["patch", "ingress", "test-ingress", "-n", NS, "--subresource=status", "--type=merge", "-p", &ing_lb]);
    }

    // KubeFed's documented objects, as they are.
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: multiclusterdns.kubefed.io/v1alpha1
kind: Domain
metadata: {{name: test-domain, namespace: kube-federation-system}}
domain: example.com
---
apiVersion: multiclusterdns.kubefed.io/v1alpha1
kind: ServiceDNSRecord
metadata: {{name: test-service, namespace: {NS}}}
spec: {{domainRef: test-domain, recordTTL: 300}}
---
apiVersion: multiclusterdns.kubefed.io/v1alpha1
kind: IngressDNSRecord
metadata: {{name: test-ingress, namespace: {NS}}}
spec: {{hosts: [ingress.example.com], recordTTL: 300}}
"#
        ),
    );

    let p = "test-service.test-namespace.test-domain.svc";
    let both = json!(["10.0.1.1", "10.0.2.1"]);
    let want_service = json!([
        {"dnsName": format!("{p}.europe-west1-c.europe-west1.example.com"), "recordTTL": 300, "recordType": "CNAME", "targets": [format!("{p}.europe-west1.example.com")]},
        {"dnsName": format!("{p}.europe-west1.example.com"), "recordTTL": 300, "recordType": "CNAME", "targets": [format!("{p}.example.com")]},
        {"dnsName": format!("{p}.example.com"), "recordTTL": 300, "recordType": "A", "targets": both},
        {"dnsName": format!("{p}.us-west1-b.us-west1.example.com"), "recordTTL": 300, "recordType": "A", "targets": both},
        {"dnsName": format!("{p}.us-west1.example.com"), "recordTTL": 300, "recordType": "A", "targets": both},
    ]);
    wait_for("DNSEndpoint service-test-service with KubeFed's records", LONG, || {
        let got = endpoints(&kc, "service-test-service")?;
        if got == want_service { Ok(()) } else { Err(got.to_string()) }
    });
    let record = get_json(&kc, &["get", "servicednsrecord", "test-service", "-n", NS]).unwrap();
    assert_eq!(record["status"]["domain"], "example.com");
    let clusters: Vec<&str> = record["status"]["dns"].as_array().unwrap().iter().map(|c| c["cluster"].as_str().unwrap()).collect();
    assert_eq!(clusters, ["member1", "member2", "member3"]);
    assert_eq!(record["status"]["dns"][0]["region"], "us-west1");
    assert_eq!(record["status"]["dns"][0]["loadBalancer"]["ingress"][0]["ip"], "10.0.1.1");

    let want_ingress = json!([{"dnsName": "ingress.example.com", "recordTTL": 300, "recordType": "A", "targets": ["10.0.1.2", "10.0.2.2"]}]);
    wait_for("DNSEndpoint ingress-test-ingress with KubeFed's record", LONG, || {
        let got = endpoints(&kc, "ingress-test-ingress")?;
        if got == want_ingress { Ok(()) } else { Err(got.to_string()) }
    });

    // Served by the built-in DNS server, CNAME fallback included.
    wait_for("ingress.example.com answered", LONG, || {
        let got = dig_short(&dns, "ingress.example.com")?;
        if got == ["10.0.1.2", "10.0.2.2"] { Ok(()) } else { Err(format!("{got:?}")) }
    });
    let mut global = dig_short(&dns, &format!("{p}.example.com")).unwrap();
    global.sort();
    assert_eq!(global, ["10.0.1.1", "10.0.2.1"]);
    let chain = dig_short(&dns, &format!("{p}.europe-west1-c.europe-west1.example.com")).unwrap();
    assert_eq!(
        chain,
        [format!("{p}.europe-west1.example.com."), format!("{p}.example.com."), "10.0.1.1".into(), "10.0.2.1".into()],
        "member3's zone name: a CNAME to its region, a CNAME to the global name, and its addresses"
    );

    // A record deleted takes its DNSEndpoint along.
    kubectl(&kubectl_bin(), &kc, &["delete", "ingressdnsrecord", "test-ingress", "-n", NS]);
    wait_for("ingress-test-ingress deleted", LONG, || match endpoints(&kc, "ingress-test-ingress") {
        Err(e) if e.contains("NotFound") || e.contains("not found") => Ok(()),
        other => Err(format!("{other:?}")),
    });
}
