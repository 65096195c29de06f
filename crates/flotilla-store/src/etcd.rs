//! The etcd backend: the store contract over an etcd v3 cluster, for when one machine is not
//! enough. etcd's revision is our revision; transactions are etcd `Txn`s with compare-and-swap;
//! watches are native etcd watches with previous values and progress requests.
//!
//! All keys live under a configurable prefix so several stores (or tests) can share one etcd.
//! Revisions are etcd's and therefore global to the etcd cluster: they strictly increase, but
//! other tenants' writes leave gaps — only the embedded and memory backends promise no holes.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare as EtcdCompare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, PutOptions, TxnOp,
    TxnOpResponse, WatchOptions,
};
use tokio::sync::mpsc;

use crate::hub::{WatchEvent, WatchStream};
use crate::{
    Compare, KeyValue, Op, OpResult, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, TxnResponse,
    lossy, prefix_end, validate_txn,
};

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
    client: Client,
    prefix: Vec<u8>,
    config: EtcdConfig,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore").field("endpoints", &self.config.endpoints).finish()
    }
}

fn unavailable(e: etcd_client::Error) -> StoreError {
    match &e {
        etcd_client::Error::GRpcStatus(s) if s.message().contains("request is too large") => {
            StoreError::ValueTooLarge { key: String::new(), size: 0, max: crate::MAX_VALUE_BYTES }
        }
        etcd_client::Error::GRpcStatus(s) if s.message().contains("too many operations in txn") => {
            StoreError::TooManyOps { ops: 0, max: crate::MAX_TXN_OPS }
        }
        _ => StoreError::Unavailable(e.to_string()),
    }
}

/// etcd reports reads below the compaction point and in the future with message text only.
fn read_error(e: etcd_client::Error, requested: Revision) -> StoreError {
    if let etcd_client::Error::GRpcStatus(s) = &e {
        if s.message().contains("required revision has been compacted") {
            return StoreError::Compacted { requested, compacted: requested + 1 };
        }
        if s.message().contains("required revision is a future revision") {
            return StoreError::FutureRevision { requested, current: requested - 1 };
        }
    }
    unavailable(e)
}

impl EtcdStore {
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        let client = Client::connect(&config.endpoints, Some(options)).await.map_err(unavailable)?;
        let store = EtcdStore { client, prefix: config.key_prefix.clone().into_bytes(), config };
        // Fail at start-up, not on the first request, when etcd cannot be reached.
        store.current_revision().await?;
        Ok(store)
    }

    fn full(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }

    fn strip(&self, key: &[u8]) -> Bytes {
        Bytes::copy_from_slice(key.strip_prefix(self.prefix.as_slice()).unwrap_or(key))
    }

    fn kv(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        KeyValue {
            key: self.strip(kv.key()),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        }
    }

    /// The range end covering every key under our prefix plus `prefix`.
    fn end_of(&self, prefix: &[u8]) -> Vec<u8> {
        // An empty overall prefix with an empty key prefix means "every key": etcd spells that
        // range end as a single zero byte.
        prefix_end(&self.full(prefix)).unwrap_or_else(|| vec![0])
    }

    /// Ask etcd for its compaction point: a watch from revision 1 on a key that never exists is
    /// cancelled with the compacted revision, or created when nothing was compacted.
    async fn probe_compacted(&self) -> Result<Revision> {
        let mut client = self.client.clone();
        let probe = self.full(b"\x00flotilla-compaction-probe");
        let mut stream = client
            .watch(probe, Some(WatchOptions::new().with_start_revision(1)))
            .await
            .map_err(unavailable)?;
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
            let msg = match tokio::time::timeout(std::time::Duration::from_millis(50), stream.message()).await {
                Err(_) => {
                    if created {
                        stream.request_progress().await.map_err(unavailable)?;
                    }
                    continue;
                }
                Ok(m) => m.map_err(unavailable)?,
            };
            let Some(resp) = msg else { break };
            if resp.canceled() {
                compacted = resp.compact_revision();
                break;
            }
            if resp.created() {
                created = true;
                stream.request_progress().await.map_err(unavailable)?;
                continue;
            }
            if resp.events().is_empty() {
                let _ = stream.cancel(resp.watch_id().max(0)).await;
                break;
            }
        }
        Ok(compacted)
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        let mut kv = self.client.kv_client();
        let resp = kv.get(self.full(key), None).await.map_err(unavailable)?;
        Ok(resp.kvs().first().map(|k| self.kv(k)))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let start = match &req.continue_after {
            Some(k) if k.as_ref() >= req.prefix.as_ref() => {
                let mut s = self.full(k);
                s.push(0);
                s
            }
            _ => self.full(&req.prefix),
        };
        let mut opts = GetOptions::new().with_range(self.end_of(&req.prefix));
        if req.limit > 0 {
            opts = opts.with_limit(req.limit as i64);
        }
        if let Some(r) = req.at_revision.filter(|r| *r > 0) {
            opts = opts.with_revision(r);
        }
        if req.count_only {
            opts = opts.with_count_only();
        }
        let mut kv = self.client.kv_client();
        let resp = kv.get(start, Some(opts)).await.map_err(|e| read_error(e, req.at_revision.unwrap_or(0)))?;
        let header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok(RangeResponse {
            kvs: resp.kvs().iter().map(|k| self.kv(k)).collect(),
            revision: req.at_revision.filter(|r| *r > 0).unwrap_or(header_rev),
            more: resp.more(),
            count: resp.count() as usize,
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        let mut kv = self.client.kv_client();
        let resp = kv
            .get(self.full(b"\x00flotilla-revision-probe"), Some(GetOptions::new().with_count_only()))
            .await
            .map_err(unavailable)?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.probe_compacted().await
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnResponse> {
        validate_txn(&compares, &ops)?;
        let cmps: Vec<EtcdCompare> = compares
            .iter()
            .map(|c| match c {
                Compare::ModRevision(k, r) => EtcdCompare::mod_revision(self.full(k), CompareOp::Equal, *r),
                Compare::Exists(k) => EtcdCompare::create_revision(self.full(k), CompareOp::Greater, 0),
                Compare::Absent(k) => EtcdCompare::create_revision(self.full(k), CompareOp::Equal, 0),
            })
            .collect();
        let then: Vec<TxnOp> = ops
            .iter()
            .map(|op| match op {
                Op::Put(k, v) => TxnOp::put(self.full(k), v.to_vec(), Some(PutOptions::new().with_prev_key())),
                Op::Delete(k) => TxnOp::delete(self.full(k), Some(DeleteOptions::new().with_prev_key())),
            })
            .collect();
        // On failure, read every compared key so the error can say which compare failed.
        let otherwise: Vec<TxnOp> = compares.iter().map(|c| TxnOp::get(self.full(c.key()), None)).collect();
        let txn = etcd_client::Txn::new().when(cmps).and_then(then).or_else(otherwise);
        let mut kv = self.client.kv_client();
        let resp = kv.txn(txn).await.map_err(unavailable)?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let responses = resp.op_responses();
        if !resp.succeeded() {
            for (cmp, r) in compares.iter().zip(responses) {
                let actual = match r {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|k| k.mod_revision()).unwrap_or(0),
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
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Put(p) => OpResult::Put { prev: p.prev_key().map(|k| self.kv(k)) },
                TxnOpResponse::Delete(d) => OpResult::Delete { prev: d.prev_kvs().first().map(|k| self.kv(k)) },
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
        let opts = WatchOptions::new()
            .with_range(self.end_of(prefix))
            // Start AT `after` and drop its events: etcd then refuses exactly the watches our
            // contract refuses (after < compacted), and answers progress requests at once (it
            // ignores them while a watcher's start revision is in the future).
            .with_start_revision(after_revision.max(1))
            .with_prev_key()
            .with_progress_notify();
        let mut client = self.client.clone();
        let stream = client.watch(self.full(prefix), Some(opts)).await.map_err(unavailable)?;
        let (tx, rx) = mpsc::channel(self.config.per_watcher_buffer.max(1));
        let (progress_tx, mut progress_rx) = mpsc::channel::<()>(4);
        // The watch counts as established once etcd has answered a progress request or sent an
        // event without cancelling it: a compacted start revision is cancelled before that, and
        // then `watch` itself fails with `Compacted`, as on the other backends.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let prefix_len = self.prefix.clone();
        let interval = self.config.progress_interval;
        let task = tokio::spawn(async move {
            let (mut requests, mut responses) = stream.split();
            let mut ready = Some(ready_tx);
            let strip = |k: &[u8]| Bytes::copy_from_slice(k.strip_prefix(prefix_len.as_slice()).unwrap_or(k));
            let conv = |kv: &etcd_client::KeyValue| KeyValue {
                key: strip(kv.key()),
                value: Bytes::copy_from_slice(kv.value()),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
            };
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
                let asked = async {
                    if progress_open { progress_rx.recv().await } else { std::future::pending().await }
                };
                // etcd ignores progress requests while a watcher is still catching up, so keep
                // asking until the handshake completes.
                let handshake = async {
                    if ready.is_some() {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    } else {
                        std::future::pending().await
                    }
                };
                tokio::select! {
                    _ = tx.closed(), if ready.is_none() => return,
                    _ = handshake => { let _ = requests.request_progress().await; }
                    _ = due => { let _ = requests.request_progress().await; }
                    r = asked => match r {
                        Some(()) => { let _ = requests.request_progress().await; }
                        None => progress_open = false,
                    },
                    msg = futures::StreamExt::next(&mut responses) => {
                        let resp = match msg {
                            Some(Ok(r)) => r,
                            Some(Err(e)) => {
                                if let Some(e) = fail(&mut ready, unavailable(e)) { let _ = tx.send(Err(e)).await; }
                                return;
                            }
                            None => {
                                let e = StoreError::Unavailable("etcd closed the watch stream".into());
                                if let Some(e) = fail(&mut ready, e) { let _ = tx.send(Err(e)).await; }
                                return;
                            }
                        };
                        if resp.canceled() {
                            let err = if resp.compact_revision() > 0 {
                                StoreError::Compacted { requested: position, compacted: resp.compact_revision() }
                            } else {
                                StoreError::Unavailable(format!("etcd cancelled the watch: {}", resp.cancel_reason()))
                            };
                            if let Some(e) = fail(&mut ready, err) { let _ = tx.send(Err(e)).await; }
                            return;
                        }
                        if resp.created() {
                            // Ask at once: the answer (or a cancellation) settles the handshake.
                            let _ = requests.request_progress().await;
                            continue;
                        }
                        if let Some(r) = ready.take() {
                            let _ = r.send(Ok(()));
                        }
                        let header_rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                        if resp.events().is_empty() {
                            if header_rev > position {
                                position = header_rev;
                            }
                            if tx.send(Ok(WatchEvent::Progress(position))).await.is_err() { return; }
                            continue;
                        }
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            if kv.mod_revision() <= after_revision {
                                continue;
                            }
                            let out = match ev.event_type() {
                                EventType::Put => WatchEvent::Put { kv: conv(kv), prev: ev.prev_kv().map(conv) },
                                EventType::Delete => {
                                    let Some(prev) = ev.prev_kv().map(conv) else {
                                        // The previous value was compacted away before delivery.
                                        let _ = tx.send(Err(StoreError::Compacted { requested: kv.mod_revision(), compacted: kv.mod_revision() })).await;
                                        return;
                                    };
                                    WatchEvent::Delete { key: strip(kv.key()), revision: kv.mod_revision(), prev }
                                }
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
        let mut kv = self.client.kv_client();
        match kv.compact(revision, None).await {
            Ok(_) => Ok(()),
            Err(etcd_client::Error::GRpcStatus(s)) if s.message().contains("required revision has been compacted") => Ok(()),
            Err(etcd_client::Error::GRpcStatus(s)) if s.message().contains("required revision is a future revision") => {
                Err(StoreError::FutureRevision { requested: revision, current: self.current_revision().await? })
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    fn backend_name(&self) -> &'static str {
        "etcd"
    }
}
