//! The DNS listener: hickory-server's UDP and TCP serving with a request handler over the
//! current [`Table`] (swapped whole on every change, read without waiting by each query).
//!
//! Answers are authoritative. A name the table has answers its records of the asked type
//! (following CNAMEs the table also has); a name inside the ClusterSet zone that it does not
//! have is NXDOMAIN with the zone's SOA; a name outside every zone it serves is REFUSED (it is
//! not a resolver). No TLS: DNS clients do not speak it on port 53 (ADR 0037).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Header, HeaderCounts, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::rdata::SOA;
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use parking_lot::RwLock;

use super::table::{Table, key};

/// Query counters, by outcome.
#[derive(Debug, Default)]
pub struct Counters {
    pub answered: AtomicU64,
    pub nxdomain: AtomicU64,
    pub refused: AtomicU64,
    pub failed: AtomicU64,
}

/// The table queries read, shared with whatever rebuilds it.
#[derive(Clone, Default)]
pub struct Shared {
    table: Arc<RwLock<Arc<Table>>>,
    pub counters: Arc<Counters>,
}

impl Shared {
    pub fn set(&self, table: Table) {
        *self.table.write() = Arc::new(table);
    }

    pub fn table(&self) -> Arc<Table> {
        self.table.read().clone()
    }
}

/// The request handler.
pub struct Handler {
    shared: Shared,
}

impl Handler {
    pub fn new(shared: Shared) -> Handler {
        Handler { shared }
    }
}

/// What a query finds: the records to answer and the response code.
pub fn lookup(table: &Table, name: &str, qtype: RecordType) -> (Vec<Record>, ResponseCode) {
    let mut name = key(name);
    if !table.is_authoritative_for(&name) {
        return (Vec::new(), ResponseCode::Refused);
    }
    let mut out = Vec::new();
    // A CNAME chain inside the table, at most eight links.
    for _ in 0..8 {
        let Some(records) = table.records.get(&name) else { break };
        let matching: Vec<&Record> = records.iter().filter(|r| qtype == RecordType::ANY || r.record_type() == qtype).collect();
        if !matching.is_empty() {
            out.extend(matching.into_iter().cloned());
            return (out, ResponseCode::NoError);
        }
        match records.iter().find_map(|r| match &r.data {
            RData::CNAME(c) => Some(c.0.to_ascii()),
            _ => None,
        }) {
            Some(target) => {
                out.extend(records.iter().filter(|r| r.record_type() == RecordType::CNAME).cloned());
                name = key(&target);
            }
            None => return (out, ResponseCode::NoError),
        }
    }
    let known = table.records.contains_key(&key(&name)) || !out.is_empty();
    (out, if known { ResponseCode::NoError } else { ResponseCode::NXDomain })
}

fn soa(zone: &str, ttl: u32) -> Option<Record> {
    let origin = Name::from_ascii(zone).ok()?;
    let mname = Name::from_ascii(format!("ns.{zone}")).ok()?;
    let rname = Name::from_ascii(format!("hostmaster.{zone}")).ok()?;
    Some(Record::from_rdata(origin, ttl, RData::SOA(SOA::new(mname, rname, 1, 3600, 600, 86400, ttl))))
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(&self, request: &Request, response_handle: R) -> ResponseInfo {
        let mut response = response_handle;
        let counters = &self.shared.counters;
        let builder = MessageResponseBuilder::from_message_request(request);
        let failed = |metadata: &Metadata| {
            let mut m = Metadata::response_from_request(metadata);
            m.response_code = ResponseCode::ServFail;
            ResponseInfo::from(Header { metadata: m, counts: HeaderCounts::default() })
        };
        let info = match request.request_info() {
            Ok(i) if request.metadata.op_code == OpCode::Query => i,
            _ => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                let code = if request.metadata.op_code == OpCode::Query { ResponseCode::FormErr } else { ResponseCode::NotImp };
                return response.send_response(builder.error_msg(&request.metadata, code)).await.unwrap_or_else(|_| failed(&request.metadata));
            }
        };
        let table = self.shared.table();
        let name = info.query.name().to_string();
        let (answers, code) = lookup(&table, &name, info.query.query_type());
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = code != ResponseCode::Refused;
        metadata.response_code = code;
        let negative = answers.is_empty() && code != ResponseCode::Refused;
        let zone_soa = negative.then(|| key(&name)).filter(|n| *n == table.zone || n.ends_with(&format!(".{}", table.zone))).and_then(|_| soa(&table.zone, 5));
        match code {
            ResponseCode::Refused => counters.refused.fetch_add(1, Ordering::Relaxed),
            ResponseCode::NXDomain => counters.nxdomain.fetch_add(1, Ordering::Relaxed),
            _ => counters.answered.fetch_add(1, Ordering::Relaxed),
        };
        let msg = builder.build(metadata, answers.iter(), std::iter::empty(), zone_soa.iter(), std::iter::empty());
        match response.send_response(msg).await {
            Ok(info) => info,
            Err(e) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "sending a DNS response failed");
                failed(&request.metadata)
            }
        }
    }
}

/// A running listener: UDP and TCP on one address.
pub struct Listener {
    pub addr: SocketAddr,
    server: Server<Handler>,
}

impl Listener {
    /// Bind UDP and TCP on `addr` (port 0: a free port, the same for both).
    pub async fn bind(addr: SocketAddr, shared: Shared) -> std::io::Result<Listener> {
        let mut last = None;
        for _ in 0..16 {
            let udp = tokio::net::UdpSocket::bind(addr).await?;
            let bound = udp.local_addr()?;
            match tokio::net::TcpListener::bind(bound).await {
                Ok(tcp) => {
                    let mut server = Server::new(Handler::new(shared));
                    server.register_socket(udp);
                    server.register_listener(tcp, Duration::from_secs(5), 4096);
                    return Ok(Listener { addr: bound, server });
                }
                // Port 0 gave a UDP port whose TCP twin is taken: try another.
                Err(e) if addr.port() == 0 => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no port free for both UDP and TCP")))
    }

    /// Serve until `shutdown`.
    pub async fn serve(mut self, shutdown: flotilla_runtime::CancellationToken) {
        tokio::select! {
            r = self.server.block_until_done() => if let Err(e) = r { tracing::error!(error = %e, "DNS server stopped") },
            _ = shutdown.cancelled() => { let _ = self.server.shutdown_gracefully().await; }
        }
    }
}
