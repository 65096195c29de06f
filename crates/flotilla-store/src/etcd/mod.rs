//! The etcd backend: the store contract over an etcd v3 cluster, for when one machine is not
//! enough. etcd's revision is our revision; transactions are etcd `Txn`s with compare-and-swap;
//! watches are native etcd watches with previous values and progress requests.
//!
//! All keys live under a configurable prefix so several stores (or tests) can share one etcd.
//! Revisions are etcd's and therefore global to the etcd cluster: they strictly increase, but
//! other tenants' writes leave gaps — only the embedded and memory backends promise no holes.

mod proto;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use self::proto::etcdserverpb::{
    CompactionRequest, DefragmentRequest, RangeRequest as EtcdRangeRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest,
    compare, kv_client::KvClient, maintenance_client::MaintenanceClient, request_op, response_op, watch_client::WatchClient, watch_request,
};
use self::proto::mvccpb;
use crate::hub::{WatchEvent, WatchStream};
use crate::{Compare, KeyValue, Op, OpResult, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, TxnResponse, lossy, prefix_end, validate_txn};

/// Settings of the etcd backend.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key is stored under this prefix in etcd.
    pub key_prefix: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// How often an idle watch asks etcd for a progress marker; `None` only on request.
    pub progress_interval: Option<Duration>,
    /// Events buffered per watcher.
    pub per_watcher_buffer: usize,
}

impl EtcdConfig {
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdConfig {
            endpoints,
            key_prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            progress_interval: Some(Duration::from_secs(5)),
            per_watcher_buffer: 1024,
        }
    }
}

pub struct EtcdStore {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    prefix: Vec<u8>,
    config: EtcdConfig,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").field("endpoints", &self.config.endpoints).finish()
    }
}

/// The largest response the client decodes: etcd itself sends up to `math.MaxInt32` bytes, and a
/// list of a large prefix is one response.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

fn unavailable(s: tonic::Status) -> StoreError {
    if s.message().contains("request is too large") {
        return StoreError::ValueTooLarge { key: String::new(), size: 0, max: crate::MAX_VALUE_BYTES };
    }
    if s.message().contains("too many operations in txn") {
        return StoreError::TooManyOps { ops: 0, max: crate::MAX_TXN_OPS };
    }
    StoreError::Unavailable(format!("etcd: {:?}: {}", s.code(), s.message()))
}

/// etcd reports reads below the compaction point and in the future with message text only.
fn read_error(s: tonic::Status, requested: Revision) -> StoreError {
    if s.message().contains("required revision has been compacted") {
        return StoreError::Compacted { requested, compacted: requested + 1 };
    }
    if s.message().contains("required revision is a future revision") {
        return StoreError::FutureRevision { requested, current: requested - 1 };
    }
    unavailable(s)
}

fn header_revision(header: Option<&proto::etcdserverpb::ResponseHeader>) -> Revision {
    header.map(|h| h.revision).unwrap_or(0)
}

impl EtcdStore {
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        if config.endpoints.is_empty() {
            return Err(StoreError::Unavailable("no etcd endpoint given".into()));
        }
        let mut endpoints = Vec::with_capacity(config.endpoints.len());
        for url in &config.endpoints {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| StoreError::Unavailable(format!("etcd endpoint {url:?}: {e}")))?
                .connect_timeout(config.connect_timeout)
                .timeout(config.request_timeout)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(5))
                .keep_alive_while_idle(true);
            endpoints.push(endpoint);
        }
        let channel = Channel::balance_list(endpoints.into_iter());
        let store = EtcdStore {
            kv: KvClient::new(channel.clone()).max_decoding_message_size(MAX_RESPONSE_BYTES),
            watch: WatchClient::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES),
            prefix: config.key_prefix.clone().into_bytes(),
            config,
        };
        // Fail at start-up, not on the first request, when etcd cannot be reached.
        store.current_revision().await?;
        Ok(store)
    }

    /// Defragments every endpoint's backend database, one member at a time (etcd defragments
    /// only the member a request reaches). Compaction frees the pages of the revisions it drops
    /// but leaves their bytes in the database file; a defragment writes the live data into a new
    /// file, so values compacted away are gone from `member/snap/db` afterwards. etcd's WAL still
    /// holds every entry written since its current segment began (see ADR 0018).
    pub async fn defragment(&self) -> Result<()> {
        for url in &self.config.endpoints {
            // A defragment blocks the member's writes and can take minutes on a large database.
            let channel = Endpoint::from_shared(url.clone())
                .map_err(|e| StoreError::Unavailable(format!("etcd endpoint {url:?}: {e}")))?
                .connect_timeout(self.config.connect_timeout)
                .timeout(self.config.request_timeout.max(Duration::from_secs(300)))
                .connect()
                .await
                .map_err(|e| StoreError::Unavailable(format!("etcd endpoint {url:?}: {e}")))?;
            MaintenanceClient::new(channel)
                .defragment(DefragmentRequest {})
                .await
                .map_err(|s| StoreError::Unavailable(format!("etcd {url}: defragment: {:?}: {}", s.code(), s.message())))?;
        }
        Ok(())
    }

    fn full(&self, key: &[u8]) -> Bytes {
        let mut k = Vec::with_capacity(self.prefix.len() + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k.into()
    }

    fn kv(&self, kv: mvccpb::KeyValue) -> KeyValue {
        convert(&self.prefix, kv)
    }

    /// The range end covering every key under our prefix plus `prefix`.
    fn end_of(&self, prefix: &[u8]) -> Bytes {
        // An empty overall prefix with an empty key prefix means "every key": etcd spells that
        // range end as a single zero byte.
        prefix_end(&self.full(prefix)).unwrap_or_else(|| vec![0]).into()
    }

    /// Opens one watch stream with `create` as its first request, returning the sender for
    /// further requests (progress, cancel) and etcd's responses.
    async fn open_watch(&self, create: WatchCreateRequest) -> Result<(mpsc::Sender<WatchRequest>, tonic::Streaming<proto::etcdserverpb::WatchResponse>)> {
        let (requests, rx) = mpsc::channel(8);
        // etcd answers (and sends its headers) only after it has read the create request.
        requests
            .try_send(WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) })
            .map_err(|_| StoreError::Unavailable("etcd watch request queue closed".into()))?;
        let responses = self.watch.clone().watch(ReceiverStream::new(rx)).await.map_err(unavailable)?.into_inner();
        Ok((requests, responses))
    }

    /// Ask etcd for its compaction point: a watch from revision 1 on a key that never exists is
    /// cancelled with the compacted revision, or created when nothing was compacted.
    async fn probe_compacted(&self) -> Result<Revision> {
        let probe = self.full(b"\x00flotilla-compaction-probe");
        let (requests, mut stream) = self.open_watch(WatchCreateRequest { key: probe, start_revision: 1, ..Default::default() }).await?;
        // etcd first confirms the watch, then cancels it if the start revision was compacted; a
        // progress request answered before any cancellation means nothing was compacted.
        let mut compacted = 0;
        let mut created = false;
        let deadline = tokio::time::Instant::now() + self.config.request_timeout;
        loop {
            if tokio::time::Instant::now() > deadline {
                return Err(StoreError::Unavailable("etcd did not answer the compaction probe".into()));
            }
            // etcd answers progress requests only once the watcher has caught up: ask again
            // until it does.
            let msg = match tokio::time::timeout(Duration::from_millis(50), stream.message()).await {
                Err(_) => {
                    if created {
                        request_progress(&requests).await?;
                    }
                    continue;
                }
                Ok(m) => m.map_err(unavailable)?,
            };
            let Some(resp) = msg else { break };
            if resp.canceled {
                compacted = resp.compact_revision;
                break;
            }
            if resp.created {
                created = true;
                request_progress(&requests).await?;
                continue;
            }
            if resp.events.is_empty() {
                // Dropping the request stream ends the watch.
                break;
            }
        }
        Ok(compacted)
    }
}

/// A key-value as the store hands it out, with the tenant prefix taken off its key.
fn convert(prefix: &[u8], kv: mvccpb::KeyValue) -> KeyValue {
    let key = match kv.key.strip_prefix(prefix) {
        Some(_) => kv.key.slice(prefix.len()..),
        None => kv.key,
    };
    KeyValue { key, value: kv.value, create_revision: kv.create_revision, mod_revision: kv.mod_revision }
}

async fn request_progress(requests: &mpsc::Sender<WatchRequest>) -> Result<()> {
    let progress = WatchRequest { request_union: Some(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {})) };
    requests.send(progress).await.map_err(|_| StoreError::Unavailable("etcd closed the watch stream".into()))
}

fn compare_op(c: &Compare, key: Bytes) -> proto::etcdserverpb::Compare {
    use compare::{CompareResult, CompareTarget, TargetUnion};
    let (result, target, value) = match c {
        Compare::ModRevision(_, r) => (CompareResult::Equal, CompareTarget::Mod, TargetUnion::ModRevision(*r)),
        Compare::Exists(_) => (CompareResult::Greater, CompareTarget::Create, TargetUnion::CreateRevision(0)),
        Compare::Absent(_) => (CompareResult::Equal, CompareTarget::Create, TargetUnion::CreateRevision(0)),
    };
    proto::etcdserverpb::Compare { result: result as i32, target: target as i32, key, range_end: Bytes::new(), target_union: Some(value) }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let req = EtcdRangeRequest { key: self.full(key), ..Default::default() };
        let resp = self.kv.clone().range(req).await.map_err(unavailable)?.into_inner();
        Ok(resp.kvs.into_iter().next().map(|k| self.kv(k)))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let start = match &req.continue_after {
            Some(k) if k.as_ref() >= req.prefix.as_ref() => {
                let mut s = self.full(k).to_vec();
                s.push(0);
                s.into()
            }
            _ => self.full(&req.prefix),
        };
        let at_revision = req.at_revision.filter(|r| *r > 0);
        let etcd_req = EtcdRangeRequest {
            key: start,
            range_end: self.end_of(&req.prefix),
            limit: if req.limit > 0 { req.limit as i64 } else { 0 },
            revision: at_revision.unwrap_or(0),
            count_only: req.count_only,
            ..Default::default()
        };
        let resp = self.kv.clone().range(etcd_req).await.map_err(|e| read_error(e, req.at_revision.unwrap_or(0)))?.into_inner();
        let header_rev = header_revision(resp.header.as_ref());
        Ok(RangeResponse {
            kvs: resp.kvs.into_iter().map(|k| self.kv(k)).collect(),
            revision: at_revision.unwrap_or(header_rev),
            more: resp.more,
            count: resp.count as usize,
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        let req = EtcdRangeRequest { key: self.full(b"\x00flotilla-revision-probe"), count_only: true, ..Default::default() };
        let resp = self.kv.clone().range(req).await.map_err(unavailable)?.into_inner();
        Ok(header_revision(resp.header.as_ref()))
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.probe_compacted().await
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnResponse> {
        use proto::etcdserverpb::{DeleteRangeRequest, PutRequest};
        validate_txn(&compares, &ops)?;
        let compare = compares.iter().map(|c| compare_op(c, self.full(c.key()))).collect();
        let success = ops
            .iter()
            .map(|op| RequestOp {
                request: Some(match op {
                    Op::Put(k, v) => request_op::Request::RequestPut(PutRequest { key: self.full(k), value: v.clone(), prev_kv: true, ..Default::default() }),
                    Op::Delete(k) => request_op::Request::RequestDeleteRange(DeleteRangeRequest { key: self.full(k), prev_kv: true, ..Default::default() }),
                }),
            })
            .collect();
        // On failure, read every compared key so the error can say which compare failed.
        let failure = compares
            .iter()
            .map(|c| RequestOp { request: Some(request_op::Request::RequestRange(EtcdRangeRequest { key: self.full(c.key()), ..Default::default() })) })
            .collect();
        let resp = self.kv.clone().txn(TxnRequest { compare, success, failure }).await.map_err(unavailable)?.into_inner();
        let revision = header_revision(resp.header.as_ref());
        let responses = resp.responses.into_iter().map(|r| r.response);
        if !resp.succeeded {
            for (cmp, r) in compares.iter().zip(responses) {
                let actual = match r {
                    Some(response_op::Response::ResponseRange(g)) => g.kvs.first().map(|k| k.mod_revision).unwrap_or(0),
                    _ => 0,
                };
                let (holds, expected) = match cmp {
                    Compare::ModRevision(_, want) => (actual == *want, *want),
                    Compare::Exists(_) => (actual != 0, -1),
                    Compare::Absent(_) => (actual == 0, 0),
                };
                if !holds {
                    return Err(StoreError::Conflict { key: lossy(cmp.key()), expected, actual });
                }
            }
            // The compare failed and then changed back before the reads: report it as a conflict.
            let key = compares.first().map(|c| lossy(c.key())).unwrap_or_default();
            return Err(StoreError::Conflict { key, expected: -1, actual: -1 });
        }
        let results = responses
            .map(|r| match r {
                Some(response_op::Response::ResponsePut(p)) => OpResult::Put { prev: p.prev_kv.map(|k| self.kv(k)) },
                Some(response_op::Response::ResponseDeleteRange(d)) => OpResult::Delete { prev: d.prev_kvs.into_iter().next().map(|k| self.kv(k)) },
                _ => OpResult::Delete { prev: None },
            })
            .collect();
        Ok(TxnResponse { revision, results })
    }

    async fn watch(&self, prefix: &[u8], after_revision: Revision) -> Result<WatchStream> {
        let head = self.current_revision().await?;
        if after_revision > head {
            return Err(StoreError::FutureRevision { requested: after_revision, current: head });
        }
        let create = WatchCreateRequest {
            key: self.full(prefix),
            range_end: self.end_of(prefix),
            // Start AT `after` and drop its events: etcd then refuses exactly the watches our
            // contract refuses (after < compacted), and answers progress requests at once (it
            // ignores them while a watcher's start revision is in the future).
            start_revision: after_revision.max(1),
            prev_kv: true,
            progress_notify: true,
            ..Default::default()
        };
        let (requests, mut responses) = self.open_watch(create).await?;
        let (tx, rx) = mpsc::channel(self.config.per_watcher_buffer.max(1));
        let (progress_tx, mut progress_rx) = mpsc::channel::<()>(4);
        // The watch counts as established once etcd has answered a progress request or sent an
        // event without cancelling it: a compacted start revision is cancelled before that, and
        // then `watch` itself fails with `Compacted`, as on the other backends.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let prefix_len = self.prefix.clone();
        let interval = self.config.progress_interval;
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let conv = |kv: mvccpb::KeyValue| convert(&prefix_len, kv);
            let fail = |ready: &mut Option<tokio::sync::oneshot::Sender<Result<()>>>, e: StoreError| match ready.take() {
                Some(r) => {
                    let _ = r.send(Err(e));
                    None
                }
                None => Some(e),
            };
            let mut tick = interval.map(|d| tokio::time::interval_at(tokio::time::Instant::now() + d, d));
            let mut position = after_revision;
            let mut progress_open = true;
            loop {
                let due = async {
                    match tick.as_mut() {
                        Some(t) => {
                            t.tick().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                let asked = async { if progress_open { progress_rx.recv().await } else { std::future::pending().await } };
                // etcd ignores progress requests while a watcher is still catching up, so keep
                // asking until the handshake completes.
                let handshake = async { if ready.is_some() { tokio::time::sleep(Duration::from_millis(10)).await } else { std::future::pending().await } };
                tokio::select! {
                    _ = tx.closed(), if ready.is_none() => return,
                    _ = handshake => { let _ = request_progress(&requests).await; }
                    _ = due => { let _ = request_progress(&requests).await; }
                    r = asked => match r {
                        Some(()) => { let _ = request_progress(&requests).await; }
                        None => progress_open = false,
                    },
                    msg = responses.message() => {
                        let resp = match msg {
                            Ok(Some(r)) => r,
                            Err(e) => {
                                if let Some(e) = fail(&mut ready, unavailable(e)) { let _ = tx.send(Err(e)).await; }
                                return;
                            }
                            Ok(None) => {
                                let e = StoreError::Unavailable("etcd closed the watch stream".into());
                                if let Some(e) = fail(&mut ready, e) { let _ = tx.send(Err(e)).await; }
                                return;
                            }
                        };
                        if resp.canceled {
                            let err = if resp.compact_revision > 0 {
                                StoreError::Compacted { requested: position, compacted: resp.compact_revision }
                            } else {
                                StoreError::Unavailable(format!("etcd cancelled the watch: {}", resp.cancel_reason))
                            };
                            if let Some(e) = fail(&mut ready, err) { let _ = tx.send(Err(e)).await; }
                            return;
                        }
                        if resp.created {
                            // Ask at once: the answer (or a cancellation) settles the handshake.
                            let _ = request_progress(&requests).await;
                            continue;
                        }
                        if let Some(r) = ready.take() {
                            let _ = r.send(Ok(()));
                        }
                        let header_rev = header_revision(resp.header.as_ref());
                        if resp.events.is_empty() {
                            if header_rev > position {
                                position = header_rev;
                            }
                            if tx.send(Ok(WatchEvent::Progress(position))).await.is_err() { return; }
                            continue;
                        }
                        for ev in resp.events {
                            let Some(kv) = ev.kv else { continue };
                            if kv.mod_revision <= after_revision {
                                continue;
                            }
                            let out = if ev.r#type == mvccpb::event::EventType::Delete as i32 {
                                let revision = kv.mod_revision;
                                let Some(prev) = ev.prev_kv.map(conv) else {
                                    // The previous value was compacted away before delivery.
                                    let _ = tx.send(Err(StoreError::Compacted { requested: revision, compacted: revision })).await;
                                    return;
                                };
                                WatchEvent::Delete { key: conv(kv).key, revision, prev }
                            } else {
                                WatchEvent::Put { kv: conv(kv), prev: ev.prev_kv.map(conv) }
                            };
                            position = position.max(out.revision());
                            if tx.send(Ok(out)).await.is_err() { return; }
                        }
                    }
                }
            }
        });
        match tokio::time::timeout(self.config.request_timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => return Err(StoreError::Unavailable("etcd watch ended before it was established".into())),
            Err(_) => {
                task.abort();
                return Err(StoreError::Unavailable("etcd did not confirm the watch in time".into()));
            }
        }
        Ok(WatchStream::from_parts(rx, Some(progress_tx), task))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        // Physical: etcd answers once the compaction has reached its backend, so the history it
        // dropped is gone when we return.
        match self.kv.clone().compact(CompactionRequest { revision, physical: true }).await {
            Ok(_) => Ok(()),
            Err(s) if s.message().contains("required revision has been compacted") => Ok(()),
            Err(s) if s.message().contains("required revision is a future revision") => {
                Err(StoreError::FutureRevision { requested: revision, current: self.current_revision().await? })
            }
            Err(s) => Err(unavailable(s)),
        }
    }

    fn backend_name(&self) -> &'static str {
        "etcd"
    }
}
