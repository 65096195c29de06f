//! Watches of the global view's cache, as kube-apiserver's watch cache serves them.
//!
//! A watch starts from karmada-search's multi-cluster resourceVersion (each cluster's own
//! member resourceVersion): each cluster's events after its own, from the cache's history; a
//! cluster the resourceVersion does not name, or every cluster for `""`/`"0"`, starts with its
//! objects as `ADDED`. Each event's object carries the multi-cluster resourceVersion of the
//! watch after it, so a client that resumes from its last event (client-go's reflector,
//! kube-rs's watcher) misses nothing and repeats nothing. A resourceVersion the history no longer
//! reaches gets an `ERROR` event with a 410 Gone Status, as kube-apiserver sends it; the client
//! lists again.
//!
//! Events are filtered by the object as it is after the change (an object that stops matching
//! a label selector is not sent as deleted, unlike kube-apiserver's watch cache).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use flotilla_apiserver::connect::ConnectResponse;
use flotilla_apiserver::negotiate::Output;
use flotilla_controllers::search::cache::{Cache, Event, KindKey, WatchError, matches, multi_cluster_resource_version, parse_multi_cluster_resource_version};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::{Read, Render};

/// How long a watch lasts when the client does not say: kube-apiserver picks 30–60 minutes.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How often a watch that allows bookmarks gets one while nothing happens.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

struct Watcher {
    cache: Arc<Cache>,
    kind: KindKey,
    read: Read,
    render: Render,
    /// Events to send, in order.
    pending: VecDeque<Arc<Event>>,
    /// The highest event number queued: the broadcast's older ones were in the start or before.
    queued: u64,
    receiver: Option<tokio::sync::broadcast::Receiver<Arc<Event>>>,
    /// Each cluster's member resourceVersion as of the last event sent.
    positions: BTreeMap<String, String>,
    columns_sent: bool,
    /// The `initial-events-end` bookmark of `sendInitialEvents` is still to come.
    initial_end: bool,
    /// An error to send as the last event.
    gone: Option<String>,
    done: bool,
    deadline: tokio::time::Instant,
}

/// A watch of `kind` from `read.resource_version`, as a streamed response.
pub(super) fn serve(cache: Arc<Cache>, kind: KindKey, read: Read, render: Render) -> ConnectResponse {
    let from = match read.resource_version.as_str() {
        "" | "0" => Ok(None),
        rv => parse_multi_cluster_resource_version(rv)
            .map(Some)
            .ok_or_else(|| format!("too old resource version: {rv} is not a resourceVersion of this cache (list again)")),
    };
    let start = from.and_then(|from| cache.watch(&kind, None, from.as_ref()).map_err(|WatchError::Gone(m)| m));
    let deadline = tokio::time::Instant::now() + read.timeout.filter(|t| !t.is_zero()).unwrap_or(DEFAULT_TIMEOUT);
    let initial_end = read.send_initial_events && read.bookmarks;
    let mut w = Watcher {
        cache,
        kind,
        read,
        render,
        pending: VecDeque::new(),
        queued: 0,
        receiver: None,
        positions: BTreeMap::new(),
        columns_sent: false,
        initial_end,
        gone: None,
        done: false,
        deadline,
    };
    match start {
        Ok(s) => {
            w.pending.extend(s.initial);
            w.queued = s.seq;
            w.positions = s.positions;
            w.receiver = Some(s.receiver);
        }
        Err(message) => w.gone = Some(message),
    }
    let body = futures::stream::unfold(w, |mut w| async move {
        let line = w.next_line().await?;
        Some((Ok::<_, Box<dyn std::error::Error + Send + Sync>>(line), w))
    });
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    ConnectResponse { status: StatusCode::OK, headers, body: body.boxed() }
}

impl Watcher {
    /// The next line of the stream, or None when the watch is over.
    async fn next_line(&mut self) -> Option<bytes::Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some(message) = self.gone.take() {
                self.done = true;
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                    "message": message, "reason": "Expired", "code": 410});
                return Some(line("ERROR", status));
            }
            if let Some(event) = self.pending.pop_front() {
                if let Some(l) = self.render_event(&event) {
                    return Some(l);
                }
                continue;
            }
            if self.initial_end {
                self.initial_end = false;
                return Some(self.bookmark(true));
            }
            let receiver = self.receiver.as_mut()?;
            let idle = tokio::time::Instant::now() + BOOKMARK_EVERY;
            let wake = if self.read.bookmarks { idle.min(self.deadline) } else { self.deadline };
            match tokio::time::timeout_at(wake, receiver.recv()).await {
                Err(_) if tokio::time::Instant::now() >= self.deadline => return None,
                Err(_) => return Some(self.bookmark(false)),
                Ok(Ok(event)) => {
                    if event.kind == self.kind && event.seq > self.queued {
                        self.queued = event.seq;
                        self.pending.push_back(event);
                    }
                }
                Ok(Err(RecvError::Lagged(_))) => match self.cache.events_after(&self.kind, None, self.queued) {
                    Ok(events) => {
                        for e in events {
                            self.queued = self.queued.max(e.seq);
                            self.pending.push_back(e);
                        }
                    }
                    Err(WatchError::Gone(m)) => self.gone = Some(m),
                },
                Ok(Err(RecvError::Closed)) => return None,
            }
        }
    }

    /// The event as a line, if the watch's selectors take it.
    fn render_event(&mut self, event: &Event) -> Option<bytes::Bytes> {
        self.positions.insert(event.cluster.to_string(), event.resource_version.to_string());
        if !matches(&self.read.list, &event.namespace, &event.name, &event.object) {
            return None;
        }
        let mut object: Value = serde_json::from_slice(event.object.json()).ok()?;
        object["metadata"]["resourceVersion"] = Value::String(self.resource_version());
        let with_columns = !self.columns_sent;
        if matches!(self.render.output, Output::Table(_)) {
            self.columns_sent = true;
        }
        Some(line(event.type_.as_str(), self.render.object(object, with_columns)))
    }

    fn resource_version(&self) -> String {
        multi_cluster_resource_version(self.positions.iter().map(|(c, rv)| (c.as_str(), rv.as_str())))
    }

    fn bookmark(&self, initial_end: bool) -> bytes::Bytes {
        let names = self.cache.names(&self.kind);
        let mut metadata = json!({"resourceVersion": self.resource_version()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let kind = names.map(|n| n.kind).unwrap_or_default();
        line("BOOKMARK", json!({"kind": kind, "apiVersion": self.kind.api_version(), "metadata": metadata}))
    }
}

fn line(type_: &str, object: Value) -> bytes::Bytes {
    let mut v = serde_json::to_vec(&json!({"type": type_, "object": object})).unwrap_or_default();
    v.push(b'\n');
    bytes::Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_apiserver::table::Printer;
    use flotilla_controllers::search::cache::{KindNames, ListQuery};

    fn pods() -> (KindKey, KindNames) {
        (KindKey { group: String::new(), version: "v1".into(), resource: "pods".into() }, KindNames { kind: "Pod".into(), namespaced: true })
    }

    fn pod(name: &str, app: &str, rv: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "shop", "resourceVersion": rv, "labels": {"app": app}}})
    }

    async fn lines(response: ConnectResponse, n: usize) -> Vec<Value> {
        let mut body = response.body;
        let mut out = Vec::new();
        while out.len() < n {
            let chunk = tokio::time::timeout(Duration::from_secs(10), body.next()).await.expect("an event in time").expect("the stream goes on").unwrap();
            out.push(serde_json::from_slice(&chunk).unwrap());
        }
        out
    }

    fn json_render() -> Render {
        Render { output: Output::Json, printer: Printer::Default, include_object: "Metadata".into() }
    }

    #[tokio::test]
    async fn a_watch_from_a_list_sees_later_changes_with_resumable_resource_versions() {
        let (k, n) = pods();
        let cache = Arc::new(Cache::new(1 << 20));
        cache.replace(&k, &n, "m1", vec![pod("a", "web", "5")], "5");
        cache.replace(&k, &n, "m2", vec![pod("b", "web", "7")], "7");
        let listed: Value = serde_json::from_slice(&cache.list(&k, None, &ListQuery::default()).unwrap().body).unwrap();
        let rv = listed["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let mut read = Read { watch: true, resource_version: rv, ..Read::default() };
        read.list.labels = flotilla_api::selector::LabelSelector::parse("app=web").unwrap();
        let response = serve(cache.clone(), k.clone(), read, json_render());
        cache.apply(&k, &n, "m2", pod("c", "db", "8"));
        cache.apply(&k, &n, "m1", pod("d", "web", "6"));
        let events = lines(response, 1).await;
        assert_eq!((events[0]["type"].as_str(), events[0]["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("d")), "c is not app=web");
        let resumed = parse_multi_cluster_resource_version(events[0]["object"]["metadata"]["resourceVersion"].as_str().unwrap()).unwrap();
        assert_eq!(resumed, BTreeMap::from([("m1".to_string(), "6".to_string()), ("m2".to_string(), "8".to_string())]));
    }

    #[tokio::test]
    async fn a_watch_from_nothing_starts_with_the_objects_and_a_bad_version_is_gone() {
        let (k, n) = pods();
        let cache = Arc::new(Cache::new(1 << 20));
        cache.replace(&k, &n, "m1", vec![pod("a", "web", "5"), pod("b", "web", "6")], "6");
        let read = Read { watch: true, send_initial_events: true, bookmarks: true, ..Read::default() };
        let events = lines(serve(cache.clone(), k.clone(), read, json_render()), 3).await;
        let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"]);
        assert_eq!(events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        let gone = lines(serve(cache, k, Read { watch: true, resource_version: "12345".into(), ..Read::default() }, json_render()), 1).await;
        assert_eq!((gone[0]["type"].as_str(), gone[0]["object"]["code"].as_u64()), (Some("ERROR"), Some(410)));
    }
}
