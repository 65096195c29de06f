//! The built-in DNS server's throughput and latency beside its physical ceiling in the same run:
//! hickory-server's own authoritative server (`Catalog` + `InMemoryZoneHandler`) holding the
//! same records. Each is queried over UDP on loopback by the same clients for the same time;
//! the figures are queries per second and latency percentiles, and their ratio.
//!
//!   cargo run --release -p flotilla-traffic --example dns-bench -- [--services 1000]
//!       [--clusters 3] [--endpoints 2] [--clients 16] [--seconds 10] [--smoke]
//!
//! `--smoke` is a short run that fails only on errors (a wrong or missing answer), never on
//! speed. Both servers share this process and its cores with the clients.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{Run, print_ratio, print_table, run_clients};
use flotilla_api::federation::mcs::{
    CLUSTER_SET_IP, HEADLESS, SERVICE_CLUSTER_IPS_ANNOTATION, SERVICE_NAME, SOURCE_CLUSTER_ANNOTATION, ServiceImport, ServiceImportSpec, ServicePort,
};
use flotilla_traffic::dns::table::{Inputs, Settings, Table, build};
use flotilla_traffic::dns::{Listener, Shared};
use hickory_server::Server;
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::proto::op::{Message, Query, ResponseCode};
use hickory_server::proto::rr::rdata::SOA;
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordType};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use k8s_openapi::api::discovery::v1::EndpointSlice;

mod common;

struct Args {
    services: usize,
    clusters: usize,
    endpoints: usize,
    clients: usize,
    seconds: f64,
    smoke: bool,
}

fn args() -> Args {
    let mut a = Args { services: 1000, clusters: 3, endpoints: 2, clients: 16, seconds: 10.0, smoke: false };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--services" => a.services = value().parse().expect("--services N"),
            "--clusters" => a.clusters = value().parse().expect("--clusters N"),
            "--endpoints" => a.endpoints = value().parse().expect("--endpoints N"),
            "--clients" => a.clients = value().parse().expect("--clients N"),
            "--seconds" => a.seconds = value().parse().expect("--seconds S"),
            "--smoke" => a.smoke = true,
            other => panic!("unknown flag {other} (see the file's header)"),
        }
    }
    if a.smoke {
        (a.services, a.clients, a.seconds) = (20, 2, 0.5);
    }
    a
}

/// ServiceImports alternating ClusterSetIP and Headless, each exported by every cluster with
/// `endpoints` ready endpoints.
fn inputs(a: &Args) -> (Vec<Arc<ServiceImport>>, Vec<Arc<EndpointSlice>>) {
    let mut imports = Vec::new();
    let mut slices = Vec::new();
    for s in 0..a.services {
        let name = format!("svc{s}");
        let type_ = if s % 2 == 0 { CLUSTER_SET_IP } else { HEADLESS };
        let mut i = ServiceImport::new(
            &name,
            ServiceImportSpec {
                type_: type_.into(),
                ports: vec![ServicePort { name: Some("http".into()), port: 80, ..Default::default() }],
                ..Default::default()
            },
        );
        i.metadata.namespace = Some("bench".into());
        imports.push(Arc::new(i));
        for c in 0..a.clusters {
            let endpoints: Vec<serde_json::Value> = (0..a.endpoints)
                .map(|e| serde_json::json!({"addresses": [format!("10.{}.{}.{}", c + 1, s / 250, (s % 250) + e)], "conditions": {"ready": true}}))
                .collect();
            let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("imported-m{c}-{name}"), "namespace": "bench",
                    "labels": {SERVICE_NAME: format!("derived-{name}")},
                    "annotations": {SOURCE_CLUSTER_ANNOTATION: format!("m{c}"), SERVICE_CLUSTER_IPS_ANNOTATION: format!("10.96.{c}.{}", s % 250)}},
                "addressType": "IPv4", "endpoints": endpoints, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
            }))
            .expect("a slice");
            slices.push(Arc::new(slice));
        }
    }
    (imports, slices)
}

/// hickory-server's own authoritative server over the same records.
async fn ceiling(table: &Table) -> (SocketAddr, Server<Catalog>) {
    let origin = Name::from_str(&table.zone).unwrap();
    let mut zone = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(origin.clone(), ZoneType::Primary, AxfrPolicy::Deny);
    let soa = SOA::new(
        Name::from_str(&format!("ns.{}", table.zone)).unwrap(),
        Name::from_str(&format!("hostmaster.{}", table.zone)).unwrap(),
        1,
        3600,
        600,
        86400,
        5,
    );
    zone.upsert_mut(Record::from_rdata(origin.clone(), 5, RData::SOA(soa)), 1);
    for records in table.records.values() {
        for r in records {
            zone.upsert_mut(r.clone(), 1);
        }
    }
    let mut catalog = Catalog::new();
    catalog.upsert(LowerName::new(&origin), vec![Arc::new(zone)]);
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = udp.local_addr().unwrap();
    let mut server = Server::new(catalog);
    server.register_socket(udp);
    (addr, server)
}

/// `clients` tasks querying `names` round-robin (A records) for `seconds`.
async fn load(addr: SocketAddr, names: Arc<Vec<(String, usize)>>, clients: usize, seconds: f64) -> Run {
    run_clients(clients, seconds, move |c, stop| {
        let names = names.clone();
        async move {
            let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            sock.connect(addr).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let (mut queries, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
            let mut i = c;
            while !stop.load(Ordering::Relaxed) {
                let (name, want) = &names[i % names.len()];
                i += clients;
                let mut m = Message::query();
                m.metadata.id = (i % 65536) as u16;
                m.add_query(Query::query(Name::from_str(name).unwrap(), RecordType::A));
                let bytes = m.to_vec().unwrap();
                let t = Instant::now();
                sock.send(&bytes).await.unwrap();
                match tokio::time::timeout(Duration::from_secs(1), sock.recv(&mut buf)).await {
                    Ok(Ok(n)) => {
                        latencies.push(t.elapsed());
                        queries += 1;
                        let ok = Message::from_vec(&buf[..n])
                            .map(|r| r.metadata.response_code == ResponseCode::NoError && r.answers.len() == *want)
                            .unwrap_or(false);
                        if !ok {
                            errors += 1;
                        }
                    }
                    _ => errors += 1,
                }
            }
            (queries, errors, latencies)
        }
    })
    .await
}

#[tokio::main]
async fn main() {
    let a = args();
    let (imports, slices) = inputs(&a);
    let ready = |_: &str| true;
    let t = Instant::now();
    let table = build(&Inputs { imports: &imports, slices: &slices, dns_endpoints: &[], ready: &ready }, &Settings::default());
    let build_time = t.elapsed();
    let names: Vec<(String, usize)> =
        table.records.iter().filter(|(_, r)| r.iter().all(|r| r.record_type() == RecordType::A)).map(|(n, r)| (n.clone(), r.len())).collect();
    let names = Arc::new(names);

    let shared = Shared::default();
    shared.set(table.clone());
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), shared).await.expect("bind");
    let flotilla_addr = listener.addr;
    let stop = flotilla_runtime::CancellationToken::new();
    let serving = tokio::spawn(listener.serve(stop.clone()));
    let (ceiling_addr, mut ceiling_server) = ceiling(&table).await;

    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "# dns-bench: {} services x {} clusters ({} names, {} records; table built in {:.1} ms), {} clients, {:.1} s per run, {} cores",
        a.services,
        a.clusters,
        table.records.len(),
        table.records.values().map(Vec::len).sum::<usize>(),
        build_time.as_secs_f64() * 1e3,
        a.clients,
        a.seconds,
        cores
    );
    // Warm both, then measure each twice, alternating.
    let _ = load(flotilla_addr, names.clone(), a.clients, a.seconds.min(0.5)).await;
    let _ = load(ceiling_addr, names.clone(), a.clients, a.seconds.min(0.5)).await;
    let mut results = Vec::new();
    for round in 0..2 {
        for (label, addr) in [("flotilla", flotilla_addr), ("hickory bare", ceiling_addr)] {
            let r = load(addr, names.clone(), a.clients, a.seconds).await;
            results.push((label, round, r));
        }
    }
    let (errors, best) = print_table("server", "queries/s", &results);
    print_ratio(&best, "flotilla", "hickory bare", "flotilla / bare", "queries/s");
    stop.cancel();
    let _ = serving.await;
    let _ = ceiling_server.shutdown_gracefully().await;
    if errors > 0 {
        eprintln!("dns-bench: {errors} wrong or missing answers");
        std::process::exit(1);
    }
    println!("no errors");
}
