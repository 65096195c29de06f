//! The DNS listener over real UDP and TCP sockets on loopback: answers, CNAME chains, NXDOMAIN
//! inside the ClusterSet zone, REFUSED outside, and a table swapped while serving.

use std::net::SocketAddr;
use std::str::FromStr;

use flotilla_traffic::dns::server::lookup;
use flotilla_traffic::dns::{Listener, Shared, table};
use hickory_server::proto::op::{Message, Query, ResponseCode};
use hickory_server::proto::rr::rdata::{A, CNAME};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn table_with(entries: &[(&str, RData)]) -> table::Table {
    let mut t = table::Table { zone: "clusterset.local.".into(), ..Default::default() };
    for (name, data) in entries {
        let key = table::key(name);
        t.records.entry(key.clone()).or_default().push(Record::from_rdata(Name::from_str(&key).unwrap(), 5, data.clone()));
    }
    t
}

fn a(ip: &str) -> RData {
    RData::A(A(ip.parse().unwrap()))
}

fn query(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 7;
    m.add_query(Query::query(Name::from_str(name).unwrap(), qtype));
    m.to_vec().unwrap()
}

async fn ask_udp(addr: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&query(name, qtype), addr).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), sock.recv(&mut buf)).await.expect("an answer").unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn ask_tcp(addr: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let q = query(name, qtype);
    s.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(&q).await.unwrap();
    let len = s.read_u16().await.unwrap() as usize;
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

fn addresses(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m.answers.iter().filter(|r| r.record_type() == RecordType::A).map(|r| r.data.to_string()).collect();
    v.sort();
    v
}

#[test]
fn lookups_follow_cnames_and_know_their_zones() {
    let t = table_with(&[
        ("web.shop.svc.clusterset.local", a("10.96.0.1")),
        ("www.example.com", RData::CNAME(CNAME(Name::from_str("ingress.example.com.").unwrap()))),
        ("ingress.example.com", a("10.0.0.1")),
    ]);
    let (answers, code) = lookup(&t, "www.example.com.", RecordType::A);
    assert_eq!(code, ResponseCode::NoError);
    assert_eq!(answers.len(), 2, "the CNAME and its target's A: {answers:?}");
    assert_eq!(lookup(&t, "nope.shop.svc.clusterset.local.", RecordType::A).1, ResponseCode::NXDomain);
    assert_eq!(lookup(&t, "example.org.", RecordType::A).1, ResponseCode::Refused);
    let (none, code) = lookup(&t, "web.shop.svc.clusterset.local.", RecordType::AAAA);
    assert!(none.is_empty() && code == ResponseCode::NoError, "a name without that type is NODATA");
}

#[tokio::test]
async fn the_listener_answers_over_udp_and_tcp_and_sees_new_tables() {
    let shared = Shared::default();
    shared.set(table_with(&[("web.shop.svc.clusterset.local", a("10.96.0.1")), ("web.shop.svc.clusterset.local", a("10.96.0.2"))]));
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), shared.clone()).await.unwrap();
    let addr = listener.addr;
    let stop = flotilla_runtime::CancellationToken::new();
    let server = tokio::spawn(listener.serve(stop.clone()));

    let m = ask_udp(addr, "web.shop.svc.clusterset.local.", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative);
    assert_eq!(addresses(&m), ["10.96.0.1", "10.96.0.2"]);
    let m = ask_tcp(addr, "WEB.shop.svc.clusterset.local.", RecordType::A).await;
    assert_eq!(addresses(&m), ["10.96.0.1", "10.96.0.2"], "names are case-insensitive, TCP too");
    let m = ask_udp(addr, "gone.shop.svc.clusterset.local.", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities.first().map(|r| r.record_type()), Some(RecordType::SOA), "NXDOMAIN carries the zone's SOA");
    assert_eq!(ask_udp(addr, "example.org.", RecordType::A).await.metadata.response_code, ResponseCode::Refused);

    shared.set(table_with(&[("web.shop.svc.clusterset.local", a("10.96.0.1"))]));
    assert_eq!(addresses(&ask_udp(addr, "web.shop.svc.clusterset.local.", RecordType::A).await), ["10.96.0.1"]);
    stop.cancel();
    server.await.unwrap();
}
