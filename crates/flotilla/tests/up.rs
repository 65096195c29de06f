//! `flotilla up` as a process: restart keeps every object and the certificates, the data
//! directory is private, SIGTERM stops it cleanly, and certificate rotation works.

mod support;

use std::os::unix::fs::PermissionsExt;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use support::Flotilla;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_objects_and_certificates() {
    let f = Flotilla::start();
    let data = f.dir.path().join("data");
    assert_eq!(mode(&data), 0o700, "the data directory is private");
    for key in ["pki/ca.key", "pki/apiserver.key", "pki/admin.key", "admin.kubeconfig"] {
        assert_eq!(mode(&data.join(key)), 0o600, "{key}");
    }
    let ca_before = std::fs::read(data.join("pki/ca.crt")).unwrap();
    let serving_before = std::fs::read(data.join("pki/apiserver.crt")).unwrap();
    let client = f.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "keep"}, "data": {"k": "v"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let dir = f.stop();

    let f = Flotilla::start_in(dir, &[]);
    assert_eq!(std::fs::read(data_of(&f).join("pki/ca.crt")).unwrap(), ca_before, "the CA is reused");
    assert_eq!(std::fs::read(data_of(&f).join("pki/apiserver.crt")).unwrap(), serving_before, "the serving certificate is reused");
    let cms: Api<ConfigMap> = Api::namespaced(f.client().await, "default");
    let got = cms.get("keep").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.data.unwrap()["k"], "v");

    // Rotation: new serving and admin certificates from the same CA; the restarted server
    // serves them and the rewritten kubeconfig works.
    let dir = f.stop();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla")).args(["certs", "rotate", "--data-dir"]).arg(dir.path().join("data")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = Flotilla::start_in(dir, &[]);
    let data = data_of(&f);
    assert_eq!(std::fs::read(data.join("pki/ca.crt")).unwrap(), ca_before);
    assert_ne!(std::fs::read(data.join("pki/apiserver.crt")).unwrap(), serving_before, "rotation issues a new serving certificate");
    let cms: Api<ConfigMap> = Api::namespaced(f.client().await, "default");
    assert!(cms.get_opt("keep").await.unwrap().is_some());
}

fn data_of(f: &Flotilla) -> std::path::PathBuf {
    f.dir.path().join("data")
}

#[test]
fn sigterm_exits_cleanly() {
    let f = Flotilla::start();
    // Stop sends SIGTERM and waits; a clean exit releases the store so it can be inspected.
    let dir = f.stop();
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_flotilla")).args(["store", "inspect", "--data-dir"]).arg(dir.path().join("data")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("keys"));
}

/// A client for the server at 127.0.0.1 on `f`'s port, whatever address the kubeconfig names
/// (an advertised address need not be reachable from the test).
async fn loopback_client(f: &Flotilla) -> kube::Client {
    let port = f.server.rsplit(':').next().unwrap();
    let kc = kube::config::Kubeconfig::read_from(&f.kubeconfig).unwrap();
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    cfg.cluster_url = format!("https://127.0.0.1:{port}").parse().unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// Polls `get` until it finds the object (generous deadline; the order is what is asserted).
async fn eventually<T, F, Fut>(what: &str, get: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, kube::Error>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok(Some(v)) = get().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn server_address(client: &kube::Client) -> String {
    let req = http::Request::get("/api").body(Vec::new()).unwrap();
    let api: serde_json::Value = client.request(req).await.unwrap();
    api["serverAddressByClientCIDRs"][0]["serverAddress"].as_str().unwrap().to_string()
}

/// Field report: `/api` advertised 127.0.0.1:6443 whatever `--listen` or `--advertise-address`
/// said, and there was no `default/kubernetes` Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listen_address_is_advertised_and_the_kubernetes_service_exists() {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    let f = Flotilla::start();
    let port: u16 = f.server.rsplit(':').next().unwrap().parse().unwrap();
    assert_ne!(port, 6443, "the test listens on a free port");
    let client = f.client().await;
    assert_eq!(server_address(&client).await, format!("127.0.0.1:{port}"));
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = eventually("the kubernetes Service", || services.get_opt("kubernetes")).await;
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let p = &spec.ports.unwrap()[0];
    assert_eq!(
        (p.name.as_deref(), p.port, p.target_port.clone()),
        (Some("https"), 443, Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port as i32)))
    );
    assert_eq!(svc.metadata.labels.unwrap().get("component").map(String::as_str), Some("apiserver"));
    // A loopback address may not be an endpoint: the Service only.
    let endpoints: Api<Endpoints> = Api::namespaced(client, "default");
    assert!(endpoints.get_opt("kubernetes").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advertise_address_is_advertised_with_endpoints_kept_as_kube_apiserver_keeps_them() {
    use k8s_openapi::api::core::v1::Endpoints;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    // A documentation address: routable in form, reached by no one; the test talks to 127.0.0.1.
    let f = Flotilla::start_with(&["--advertise-address", "192.0.2.123", "--kubernetes-service-interval", "200ms"]);
    let port: u16 = f.server.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(f.server, format!("https://192.0.2.123:{port}"), "the kubeconfig names the advertised address");
    let client = loopback_client(&f).await;
    assert_eq!(server_address(&client).await, format!("192.0.2.123:{port}"));
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let want_subsets = serde_json::json!([{"addresses": [{"ip": "192.0.2.123"}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]);
    for round in ["first", "after the Endpoints were deleted"] {
        let e = eventually(&format!("the kubernetes Endpoints ({round})"), || endpoints.get_opt("kubernetes")).await;
        assert_eq!(serde_json::to_value(&e.subsets).unwrap(), want_subsets, "{round}");
        assert_eq!(e.metadata.labels.unwrap().get("endpointslice.kubernetes.io/skip-mirror").map(String::as_str), Some("true"));
        endpoints.delete("kubernetes", &Default::default()).await.unwrap();
    }
    let slice = slices.get("kubernetes").await.unwrap();
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.metadata.labels.unwrap().get("kubernetes.io/service-name").map(String::as_str), Some("kubernetes"));
    let endpoint = &slice.endpoints.as_ref().unwrap()[0];
    assert_eq!(endpoint.addresses, vec!["192.0.2.123".to_string()]);
    assert_eq!(endpoint.conditions.as_ref().and_then(|c| c.ready), Some(true));
    assert_eq!(slice.ports.unwrap()[0].port, Some(port as i32));
}

/// curl over HTTP/2 with the admin's certificate: (HTTP code, body).
fn curl_h2(f: &Flotilla, args: &[&str]) -> (String, String) {
    let pki = f.dir.path().join("data/pki");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http2", "-o", "-", "-w", "\n%{http_code}"])
        .arg("--cacert")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().to_string(), format!("{body}{}", String::from_utf8_lossy(&out.stderr)))
}

/// Security review: over HTTP/2 a body over the limit reset the stream instead of answering 413,
/// and a long URL (over HTTP/2's default 16 KiB header list) ended the whole connection with
/// GOAWAY. kube-apiserver answers both (413 with a Status; a URL within its 1 MiB of headers is
/// served).
#[test]
fn http2_clients_get_answers_for_large_bodies_and_long_urls() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no curl");
        return;
    }
    let f = Flotilla::start();
    let big = f.dir.path().join("big.json");
    std::fs::write(
        &big,
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "x".repeat(4 << 20)}}).to_string(),
    )
    .unwrap();
    let url = format!("{}/api/v1/namespaces/default/configmaps", f.server);
    let (code, body) = curl_h2(&f, &["-H", "Content-Type: application/json", "--data-binary", &format!("@{}", big.display()), &url]);
    assert_eq!(code, "413", "{body}");
    let status: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("RequestEntityTooLarge")), "{body}");
    let long = format!("{}/api/v1/namespaces/{}", f.server, "x".repeat(20_000));
    let (code, body) = curl_h2(&f, &[&long]);
    assert_eq!(code, "404", "a long URL is answered: {body}");
}

/// `--http2-idle-timeout` reaches the listener: with 1s, an HTTP/2 connection answered and then
/// left idle gets GOAWAY and is closed (by default after kube-apiserver's 90 s).
#[test]
fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    use rustls_pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let f = Flotilla::start_with(&["--http2-idle-timeout", "1s"]);
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(f.dir.path().join("data/pki/ca.crt")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let port = f.server.rsplit(':').next().unwrap();
    let tcp = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
    let mut stream = rustls::StreamOwned::new(tls, tcp);

    // The preface, an empty SETTINGS frame, and GET /healthz as stream 1 (HPACK literals).
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0".to_vec();
    let headers = b"\x82\x87\x04\x08/healthz\x01\x09127.0.0.1";
    out.extend([0, 0, headers.len() as u8, 0x1, 0x5, 0, 0, 0, 1]);
    out.extend(headers);
    stream.write_all(&out).unwrap();
    // Read frames until the server closes, answering its PINGs as any client does (hyper's
    // graceful shutdown waits for one before its final GOAWAY).
    let (mut read, mut kinds) = (Vec::new(), Vec::new());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let closed = loop {
        while let Some(end) = whole_frame(&read) {
            let frame: Vec<u8> = read.drain(..end).collect();
            kinds.push(frame[3]);
            if frame[3] == 0x6 && frame[4] & 0x1 == 0 {
                let mut pong = frame.clone();
                pong[4] = 0x1;
                stream.write_all(&pong).unwrap();
            }
        }
        let mut buf = [0u8; 4096];
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => read.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
    };
    assert!(closed, "the idle connection is closed within 30 s; frame types: {kinds:?}");
    assert!(kinds.contains(&0x7), "GOAWAY before the close; frame types: {kinds:?}");
}

/// The length of the HTTP/2 frame at the start of `read`, once all of it has been read.
fn whole_frame(read: &[u8]) -> Option<usize> {
    let end = 9 + u32::from_be_bytes([0, *read.first()?, *read.get(1)?, *read.get(2)?]) as usize;
    (read.len() >= end).then_some(end)
}
