//! LIST and WATCH: selectors, pagination on one snapshot, resourceVersion semantics, and watch
//! streams of newline-delimited JSON events (bookmarks, in-stream 410s, selector transitions,
//! streaming lists).

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flotilla_api::selector::{FieldSelector, LabelSelector};
use flotilla_store::{RangeRequest, Revision, StoreError, WatchEvent};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::negotiate::{self, Output};
use crate::resources::ResourceInfo;
use crate::response::json_response;
use crate::scope::RequestScope;
use crate::storage::{self, Continue};

/// Label and field selectors of a request, validated against what the resource supports.
pub(crate) struct Selectors {
    label: LabelSelector,
    field: FieldSelector,
}

fn field_value(obj: &Value, field: &str) -> Option<String> {
    let v = match field {
        "metadata.name" => return Some(meta::name(obj).to_string()),
        "metadata.namespace" => return Some(meta::namespace(obj).unwrap_or("").to_string()),
        // A core Event's `source`; an events.k8s.io Event's `deprecatedSource`.
        "source" => obj.pointer("/source/component").or_else(|| obj.pointer("/deprecatedSource/component")),
        f => obj.pointer(&format!("/{}", f.replace('.', "/"))),
    };
    Some(match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    })
}

impl Selectors {
    pub fn from_query(ctx: &RequestScope) -> ApiResult<Selectors> {
        let label = LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or("")).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let field = FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or("")).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let extra = ctx.strategy().selectable_fields();
        for r in field.requirements() {
            let f = r.field.as_str();
            if f != "metadata.name" && f != "metadata.namespace" && !extra.contains(&f) {
                // Resources with their own field selectors answer as their strategy does;
                // the rest with the generic message.
                return Err(ApiError::bad_request(if extra.is_empty() {
                    format!("\"{f}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
                } else {
                    format!("field label not supported: {f}")
                }));
            }
        }
        Ok(Selectors { label, field })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        (self.label.is_empty() || self.label.matches(&meta::labels(obj))) && (self.field.is_empty() || self.field.matches(|f| field_value(obj, f)))
    }

    fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }
}

fn invalid_list_options(message: &str, field: &str) -> ApiError {
    ApiError::invalid("meta.k8s.io", "ListOptions", "", vec![Cause::new("FieldValueForbidden", field, format!("Forbidden: {message}"))])
        .with_message(format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: Forbidden: {message}"))
}

/// Wait until the store has reached `want`, or answer 504 as the real server does.
async fn await_revision(ctx: &RequestScope, want: Revision) -> ApiResult<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let current = ctx.inner.store.current_revision().await?;
        if current >= want {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::timeout(format!("Timeout: Too large resource version: {want}, current: {current}")).with_cause(Cause::new(
                "ResourceVersionTooLarge",
                "",
                "Too large resource version",
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One page of a list.
pub(crate) struct Page {
    pub items: Vec<Value>,
    pub revision: Revision,
    pub next: Option<Continue>,
    pub remaining: Option<i64>,
}

/// Read a page of matching objects at one snapshot.
async fn read_page(ctx: &RequestScope, sel: &Selectors, limit: Option<usize>, at: Option<Revision>, after: Option<String>) -> ApiResult<Page> {
    let prefix = storage::list_prefix(&ctx.info, ctx.path.namespace.as_deref().filter(|_| ctx.info.namespaced));
    let mut items = Vec::new();
    let mut revision = at;
    let mut after_key = after;
    let mut remaining = None;
    loop {
        let want = limit.map(|l| l - items.len());
        let batch = match want {
            Some(w) if sel.is_empty() => w,
            Some(w) => (w * 2).clamp(16, 1000),
            None => 0,
        };
        let mut req = RangeRequest::prefix(Bytes::from(prefix.clone())).limit(batch);
        req.continue_after = after_key.clone().map(Bytes::from);
        req.at_revision = revision;
        let resp = ctx.inner.store.range(req).await.map_err(|e| match e {
            StoreError::Compacted { .. } if after_key.is_some() => ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            ),
            StoreError::Compacted { .. } => ApiError::expired("The resourceVersion for the provided list is too old."),
            StoreError::FutureRevision { requested, current } => ApiError::timeout(format!("Too large resource version: {requested}, current: {current}")),
            other => other.into(),
        })?;
        revision = Some(resp.revision);
        if sel.is_empty() && limit.is_some() {
            remaining = Some(resp.count as i64 - resp.kvs.len() as i64);
        }
        let n = resp.kvs.len();
        for (i, kv) in resp.kvs.iter().enumerate() {
            let obj = storage::decode_for(&ctx.info, kv)?;
            after_key = Some(String::from_utf8_lossy(&kv.key).into_owned());
            if sel.matches(&obj) {
                items.push(obj);
            }
            if limit.is_some_and(|l| items.len() >= l) {
                let more = i + 1 < n || resp.more;
                let next = more.then(|| Continue { revision: resp.revision, after_key: after_key.clone().unwrap_or_default() });
                return Ok(Page { items, revision: resp.revision, next, remaining: remaining.filter(|r| *r > 0 && more) });
            }
        }
        if !resp.more || batch == 0 {
            return Ok(Page { items, revision: resp.revision, next: None, remaining: None });
        }
    }
}

/// Every matching object at the current revision (for deletecollection and initial events).
pub(crate) async fn list_all(ctx: &RequestScope) -> ApiResult<(Vec<Value>, Revision)> {
    let sel = Selectors::from_query(ctx)?;
    let page = read_page(ctx, &sel, None, None, None).await?;
    Ok((page.items, page.revision))
}

fn list_item(info: &ResourceInfo, mut obj: Value) -> Value {
    // Built-in lists carry no per-item type; custom resources do, as upstream.
    if info.is_custom() {
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
    } else if let Some(o) = obj.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
    }
    obj
}

pub(crate) async fn list(ctx: &RequestScope, headers: &HeaderMap) -> ApiResult<Response> {
    let sel = Selectors::from_query(ctx)?;
    let q = &ctx.query;
    let limit = q.int("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let cont = q.get("continue").filter(|s| !s.is_empty());
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let rvm = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    if rvm.is_some() && rv.is_none() {
        return Err(invalid_list_options("resourceVersionMatch is forbidden unless resourceVersion is provided", "resourceVersionMatch"));
    }
    if cont.is_some() && rv.is_some_and(|r| r != "0") {
        return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
    }
    if let Some(m) = rvm
        && !matches!(m, "Exact" | "NotOlderThan")
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![Cause::new(
                "FieldValueNotSupported",
                "resourceVersionMatch",
                format!("Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""),
            )],
        ));
    }
    let parsed_rv = match rv {
        None | Some("0") => None,
        Some(r) => Some(r.parse::<Revision>().map_err(|_| {
            ApiError::bad_request(format!("invalid resource version: resourceVersion: Invalid value: {r:?}: strconv.ParseUint: parsing {r:?}: invalid syntax"))
        })?),
    };
    if rvm == Some("Exact") && parsed_rv.is_none() {
        return Err(invalid_list_options("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"", "resourceVersionMatch"));
    }
    let prefix = storage::list_prefix(&ctx.info, ctx.path.namespace.as_deref().filter(|_| ctx.info.namespaced));
    let (at, after) = if let Some(token) = cont {
        let c = Continue::decode(token, &prefix)?;
        (Some(c.revision), Some(c.after_key))
    } else if rvm == Some("Exact") {
        (parsed_rv, None)
    } else {
        if let Some(n) = parsed_rv {
            await_revision(ctx, n).await?;
        }
        (None, None)
    };
    let mut page = read_page(ctx, &sel, limit, at, after).await?;
    for item in &mut page.items {
        storage::default_on_read(&ctx.info, item);
    }
    let mut list_meta = json!({"resourceVersion": page.revision.to_string()});
    if let Some(next) = &page.next {
        list_meta["continue"] = json!(next.encode());
    }
    if let Some(r) = page.remaining {
        list_meta["remainingItemCount"] = json!(r);
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match negotiate::output(accept)? {
        Output::Table(v) => {
            let include = q.get("includeObject").unwrap_or("Metadata");
            let t = crate::table::table(&ctx.info.printer, v, &page.items, include, list_meta, true);
            // kube-apiserver labels a Table `application/json` (the serializer's media type).
            Ok(json_response(StatusCode::OK, &t, "application/json", &[]))
        }
        Output::PartialMetadata => {
            let items: Vec<Value> = page.items.iter().map(crate::table::partial_metadata).collect();
            let body = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "items": items});
            Ok(json_response(StatusCode::OK, &body, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", &[]))
        }
        Output::Json => {
            if ctx.info.is_custom() && list_meta.get("continue").is_none() {
                // Custom objects are listed as unstructured lists, which always carry `continue`.
                list_meta["continue"] = json!("");
            }
            let items: Vec<Value> = page.items.into_iter().map(|o| list_item(&ctx.info, o)).collect();
            let body = json!({"kind": ctx.info.list_kind, "apiVersion": ctx.info.api_version(), "metadata": list_meta, "items": items});
            Ok(json_response(StatusCode::OK, &body, "application/json", &[]))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Watch

/// How a watch renders objects.
#[derive(Clone)]
struct Render {
    info: std::sync::Arc<ResourceInfo>,
    output: Output,
    columns_sent: bool,
}

impl Render {
    fn object(&mut self, obj: Value) -> Value {
        let mut obj = obj;
        obj["apiVersion"] = json!(self.info.api_version());
        obj["kind"] = json!(self.info.kind);
        match self.output {
            Output::Json => obj,
            Output::PartialMetadata => crate::table::partial_metadata(&obj),
            Output::Table(v) => {
                let rv = meta::meta_str(&obj, "resourceVersion").unwrap_or("").to_string();
                let with_columns = !self.columns_sent;
                self.columns_sent = true;
                crate::table::table(&self.info.printer, v, &[obj], "Metadata", json!({"resourceVersion": rv}), with_columns)
            }
        }
    }

    fn bookmark(&self, revision: Revision, initial_end: bool) -> Value {
        let mut m = json!({"resourceVersion": revision.to_string()});
        if initial_end {
            m["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"kind": self.info.kind, "apiVersion": self.info.api_version(), "metadata": m})
    }
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn error_line(e: &ApiError) -> Bytes {
    line("ERROR", e.status())
}

/// A watch stream whose only event is an ERROR (the real server answers 200, then the error).
fn error_stream(e: ApiError) -> Response {
    stream_response(Body::from(error_line(&e)))
}

fn stream_response(body: Body) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    resp
}

/// Decrements the open-watch gauge when the stream task ends.
struct WatchGauge(prometheus_client::metrics::gauge::Gauge);

impl Drop for WatchGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub(crate) async fn watch(ctx: &RequestScope, headers: &HeaderMap) -> ApiResult<Response> {
    let sel = Selectors::from_query(ctx)?;
    let q = &ctx.query;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let output = negotiate::output(accept)?;
    let bookmarks = q.flag("allowWatchBookmarks");
    let send_initial = q.get("sendInitialEvents").map(|_| q.flag("sendInitialEvents"));
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let rvm = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    if send_initial.is_some() && (rvm != Some("NotOlderThan") || !bookmarks) {
        let mut causes = Vec::new();
        if rvm != Some("NotOlderThan") {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            causes.push(Cause::new("FieldValueForbidden", "allowWatchBookmarks", "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true"));
        }
        return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
    }
    if send_initial.is_none() && rvm.is_some() {
        return Err(invalid_list_options("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided", "resourceVersionMatch"));
    }
    let timeout = match q.int("timeoutSeconds")? {
        Some(s) if s > 0 => Duration::from_secs(s as u64),
        _ => {
            use rand::RngExt;
            let min = ctx.inner.config.min_watch_timeout.as_secs().max(1);
            Duration::from_secs(rand::rng().random_range(min..=min * 2))
        }
    };
    let parsed_rv = match rv {
        None | Some("0") => None,
        Some(r) => Some(r.parse::<Revision>().map_err(|_| ApiError::bad_request(format!("invalid resource version: {r}")))?),
    };
    // What the client sees first: synthetic ADDED events for the current state (rv unset or
    // "0", or an explicit streaming list), then changes after that snapshot.
    let initial = send_initial.unwrap_or(parsed_rv.is_none());
    let (initial_items, start) = if initial {
        if let Some(n) = parsed_rv {
            await_revision(ctx, n).await?;
        }
        let page = read_page(ctx, &sel, None, None, None).await?;
        (page.items, page.revision)
    } else {
        (Vec::new(), parsed_rv.unwrap_or(0))
    };
    let prefix = storage::list_prefix(&ctx.info, ctx.path.namespace.as_deref().filter(|_| ctx.info.namespaced));
    let stream = match ctx.inner.store.watch(prefix.as_bytes(), start).await {
        Ok(s) => s,
        Err(StoreError::Compacted { compacted, .. }) => {
            return Ok(error_stream(ApiError::expired(format!("too old resource version: {start} ({compacted})"))));
        }
        Err(StoreError::FutureRevision { requested, current }) => {
            await_revision(ctx, requested).await?;
            return Err(ApiError::timeout(format!("Too large resource version: {requested}, current: {current}")));
        }
        Err(e) => return Err(e.into()),
    };
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let mut render = Render { info: ctx.info.clone(), output, columns_sent: false };
    let bookmark_interval = ctx.inner.config.bookmark_interval;
    ctx.inner.metrics.open_watches.inc();
    let gauge = WatchGauge(ctx.inner.metrics.open_watches.clone());
    tokio::spawn(async move {
        let _gauge = gauge;
        let mut stream = stream;
        for obj in initial_items {
            let o = render.object(obj);
            if tx.send(Ok(line("ADDED", o))).await.is_err() {
                return;
            }
        }
        if send_initial == Some(true) {
            let b = render.bookmark(start, true);
            if tx.send(Ok(line("BOOKMARK", b))).await.is_err() {
                return;
            }
        }
        let end = tokio::time::Instant::now() + timeout;
        let deadline = tokio::time::sleep_until(end);
        tokio::pin!(deadline);
        let mut next_bookmark = bookmarks.then(|| next_bookmark_time(tokio::time::Instant::now(), end, bookmark_interval)).flatten();
        let bookmark_timer = tokio::time::sleep_until(next_bookmark.unwrap_or(end));
        tokio::pin!(bookmark_timer);
        let mut want_bookmark = false;
        let mut last = start;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                _ = &mut bookmark_timer, if next_bookmark.is_some() => {
                    want_bookmark = true;
                    stream.request_progress();
                    let now = tokio::time::Instant::now();
                    next_bookmark = next_bookmark_time(now, end, bookmark_interval);
                    if let Some(at) = next_bookmark {
                        bookmark_timer.as_mut().reset(at);
                    }
                }
                ev = stream.next_event() => {
                    let Some(ev) = ev else { return };
                    let out = match ev {
                        Err(StoreError::Compacted { compacted, .. }) => {
                            let _ = tx.send(Ok(error_line(&ApiError::expired(format!("too old resource version: {last} ({compacted})"))))).await;
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Ok(error_line(&ApiError::expired(format!("watch ended: {e}; restart the watch"))))).await;
                            return;
                        }
                        Ok(WatchEvent::Progress(r)) => {
                            if bookmarks && want_bookmark && r >= last {
                                want_bookmark = false;
                                last = r;
                                Some(line("BOOKMARK", render.bookmark(r, false)))
                            } else {
                                None
                            }
                        }
                        Ok(WatchEvent::Put { kv, prev }) => {
                            last = kv.mod_revision;
                            let Ok(obj) = storage::decode_for(&render.info, &kv) else { continue };
                            let now = sel.matches(&obj);
                            let previous = prev.as_ref().and_then(|p| storage::decode_for(&render.info, p).ok());
                            let before = previous.as_ref().is_some_and(|o| sel.matches(o));
                            match (previous, before, now) {
                                (_, true, true) => Some(line("MODIFIED", render.object(obj))),
                                (_, false, true) => Some(line("ADDED", render.object(obj))),
                                // An object leaving the selector goes as it last matched, at the
                                // revision of the change (kube-apiserver's cacher does the same).
                                (Some(mut old), true, false) => {
                                    crate::meta::meta_mut(&mut old).insert("resourceVersion".into(), serde_json::json!(kv.mod_revision.to_string()));
                                    Some(line("DELETED", render.object(old)))
                                }
                                _ => None,
                            }
                        }
                        Ok(WatchEvent::Delete { revision, prev, .. }) => {
                            last = revision;
                            match storage::decode_at_for(&render.info, &prev.value, revision) {
                                Ok(obj) if sel.matches(&obj) => Some(line("DELETED", render.object(obj))),
                                _ => None,
                            }
                        }
                    };
                    if let Some(bytes) = out
                        && tx.send(Ok(bytes)).await.is_err() {
                            return;
                        }
                }
            }
        }
    });
    let body = Body::from_stream(tokio_stream_from(rx));
    Ok(stream_response(body))
}

/// When a watch that allows bookmarks sends its next one, as kube-apiserver's cacher schedules
/// them: every bookmark interval, but never later than two seconds before the watch's timeout
/// ends it (so a client resumes from a recent revision); none once that moment has passed.
fn next_bookmark_time(now: tokio::time::Instant, end: tokio::time::Instant, interval: Duration) -> Option<tokio::time::Instant> {
    let heartbeat = now + interval;
    let at = match end.checked_sub(Duration::from_secs(2)) {
        Some(pre_timeout) => heartbeat.min(pre_timeout),
        None => heartbeat,
    };
    (at > now).then_some(at)
}

/// An mpsc receiver as a `Stream`.
fn tokio_stream_from(mut rx: mpsc::Receiver<Result<Bytes, Infallible>>) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookmarks_come_every_interval_and_two_seconds_before_the_timeout() {
        let now = tokio::time::Instant::now();
        let minute = Duration::from_secs(60);
        // A short watch: one bookmark two seconds before it ends, then none.
        let end = now + Duration::from_secs(4);
        assert_eq!(next_bookmark_time(now, end, minute), Some(now + Duration::from_secs(2)));
        assert_eq!(next_bookmark_time(now + Duration::from_millis(2001), end, minute), None);
        // A long one: every interval until the last, which comes two seconds before the end.
        let end = now + Duration::from_secs(90);
        assert_eq!(next_bookmark_time(now, end, minute), Some(now + minute));
        assert_eq!(next_bookmark_time(now + minute, end, minute), Some(now + Duration::from_secs(88)));
        // Too short for one.
        assert_eq!(next_bookmark_time(now, now + Duration::from_secs(1), minute), None);
    }
}
