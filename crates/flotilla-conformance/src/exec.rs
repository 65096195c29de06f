//! Running one case against a target: a fresh namespace, the steps in order (templating,
//! captures, watches held open across steps), normalisation, and the namespace's deletion.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, Request, header};
use serde_json::{Value, json};

use crate::case::{Action, Body, Case, Compare, Keep, Step, Until};
use crate::normalise::{self, Normaliser};
use crate::recording::{StepRecord, Transcript};
use crate::target::{BearerToken, Target, TargetError};
use crate::template::Vars;

/// How long a non-watch response may take before the step is recorded as an error.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// The User-Agent of every request (unless a case step removes it): its product,
/// `flotilla-conformance`, names the field manager of writes that do not name one. The
/// runner's own writes (the case's namespace) use it too, so they and a case's writes are one
/// managedFields entry, whose place does not depend on the clock.
pub const USER_AGENT: &str = "flotilla-conformance/v1";
/// The largest response body read.
const MAX_BODY: usize = 64 << 20;

/// Why a case could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("case {case}: creating its namespace {namespace}: HTTP {status}: {body}")]
    Namespace { case: String, namespace: String, status: u16, body: String },
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Bytes, axum::Error>> + Send>>;

/// A watch held open between its `watch` step and its `collect` step.
struct OpenWatch {
    stream: EventStream,
    buffer: Vec<u8>,
    ended: bool,
}

impl OpenWatch {
    /// Events until the stream ends, `count` arrived, or `timeout` passed.
    async fn collect(&mut self, count: Option<usize>, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = Vec::new();
        loop {
            while let Some(pos) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line).trim().to_string();
                if !text.is_empty() {
                    events.push(serde_json::from_str(&text).unwrap_or_else(|_| json!({"unparsable": text})));
                }
                if count.is_some_and(|c| events.len() >= c) {
                    return events;
                }
            }
            if self.ended {
                let rest = String::from_utf8_lossy(&std::mem::take(&mut self.buffer)).trim().to_string();
                if !rest.is_empty() {
                    events.push(json!({"unterminated": rest}));
                }
                return events;
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return events,
                Ok(Some(Ok(chunk))) => self.buffer.extend_from_slice(&chunk),
                Ok(Some(Err(_)) | None) => self.ended = true,
            }
        }
    }
}

/// The namespace a case run gets: the case id (shortened) and a random suffix.
pub fn namespace_for(case_id: &str) -> String {
    use rand::RngExt;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..6).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    let base: String = case_id.chars().take(48).collect();
    format!("{}-{suffix}", base.trim_end_matches('-'))
}

fn build_request(r: &crate::case::Request, vars: &Vars) -> Result<Request<Bytes>, String> {
    let path = vars.render(&r.path)?;
    let mut pairs = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &r.query {
        pairs.append_pair(k, &vars.render(v)?);
    }
    let query = pairs.finish();
    let uri = match (query.is_empty(), path.contains('?')) {
        (true, _) => path,
        (false, true) => format!("{path}&{query}"),
        (false, false) => format!("{path}?{query}"),
    };
    let body = match &r.body {
        None => Bytes::new(),
        Some(Body::Json(v)) => Bytes::from(serde_json::to_vec(&vars.render_value(v)?).map_err(|e| e.to_string())?),
        Some(Body::Raw(s)) => Bytes::from(vars.render(s)?),
    };
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    headers.insert("user-agent".into(), USER_AGENT.into());
    if r.body.is_some() {
        headers.insert("content-type".into(), "application/json".into());
    }
    for (k, v) in &r.headers {
        match v {
            Some(v) => headers.insert(k.clone(), vars.render(v)?),
            None => headers.remove(k),
        };
    }
    let mut b = Request::builder().method(r.method.as_str()).uri(uri.as_str());
    for (k, v) in &headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if let Some(token) = &r.token {
        b = b.extension(BearerToken(vars.render(token)?));
    }
    b.body(body).map_err(|e| format!("building request {} {uri}: {e}", r.method))
}

/// The compared headers of a response.
fn compared_headers(h: &HeaderMap, norm: &mut Normaliser) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(ct) = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        out.insert("content-type".into(), ct.trim().to_string());
    }
    let warnings: Vec<String> = h.get_all(header::WARNING).iter().filter_map(|v| v.to_str().ok()).map(|w| norm.text(w)).collect();
    if !warnings.is_empty() {
        out.insert("warning".into(), warnings.join("\n"));
    }
    out
}

fn parse_body(bytes: &[u8]) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    Some(serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned())))
}

/// Everything a step run hands back to the case loop.
struct Answer {
    status: Option<u16>,
    headers: HeaderMap,
    raw: Option<Value>,
    /// An `until` that the last answer still did not satisfy.
    unmet: Option<String>,
}

/// Send a request the runner itself needs (the case's namespace); answer status and body.
async fn send_own(target: &dyn Target, method: &str, uri: &str, body: Option<Value>) -> Result<(u16, Bytes), TargetError> {
    let mut b = Request::builder().method(method).uri(uri).header(header::USER_AGENT, USER_AGENT);
    if body.is_some() {
        b = b.header(header::CONTENT_TYPE, "application/json");
    }
    let req = b.body(body.map(|v| Bytes::from(v.to_string())).unwrap_or_default()).map_err(|e| TargetError::Send {
        method: method.into(),
        uri: uri.into(),
        message: e.to_string(),
    })?;
    let resp = target.send(req).await?;
    let status = resp.status().as_u16();
    Ok((status, axum::body::to_bytes(resp.into_body(), MAX_BODY).await.unwrap_or_default()))
}

/// Run a case. Problems the case itself causes (a capture that finds nothing, a request that
/// cannot be built) are recorded in the step's `error`; only a target that cannot be reached
/// or a namespace that cannot be created end the run with an error.
pub async fn run_case(target: &dyn Target, case: &Case, server: &str) -> Result<Transcript, ExecError> {
    let ns = namespace_for(&case.id);
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let (status, body) = send_own(target, "POST", "/api/v1/namespaces", Some(namespace)).await?;
    if status != 201 {
        return Err(ExecError::Namespace { case: case.id.clone(), namespace: ns, status, body: String::from_utf8_lossy(&body).into() });
    }
    let result = run_steps(target, case, &ns).await;
    // The namespace goes away (or starts terminating) whatever happened.
    let _ = send_own(target, "DELETE", &format!("/api/v1/namespaces/{ns}"), None).await;
    Ok(Transcript { case: case.id.clone(), area: case.area.clone(), digest: case.digest.clone(), server: server.to_string(), steps: result? })
}

async fn run_steps(target: &dyn Target, case: &Case, ns: &str) -> Result<Vec<StepRecord>, ExecError> {
    let mut vars = Vars::default();
    vars.set("ns", ns);
    let mut norm = Normaliser::new(ns);
    let mut watches: BTreeMap<String, OpenWatch> = BTreeMap::new();
    let mut records = Vec::new();
    for step in &case.steps {
        if let Some(prefix) = requested_generate_name(step, &vars) {
            norm.generate_name(&prefix);
        }
        let keep = match rendered_keep(step, &vars) {
            Ok(k) => k,
            Err(message) => {
                records.push(StepRecord { step: step.name.clone(), error: Some(message), ..Default::default() });
                continue;
            }
        };
        let record = match run_action(target, step, &vars, &keep, &mut watches).await {
            Ok(answer) => {
                let unmet = answer.unmet.clone();
                let error = capture(step, answer.raw.as_ref(), &mut vars, &mut norm);
                let error = match (unmet, error) {
                    (None, e) | (e @ Some(_), None) => e,
                    (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                };
                StepRecord { error, ..record_answer(step, &keep, answer, &mut norm) }
            }
            Err(StepFailure::Target(e)) => return Err(e.into()),
            Err(StepFailure::Case(message)) => StepRecord { step: step.name.clone(), error: Some(message), ..Default::default() },
        };
        records.push(record);
    }
    Ok(records)
}

/// Set the step's capture variables from the raw answer; what could not be captured, if any.
fn capture(step: &Step, raw: Option<&Value>, vars: &mut Vars, norm: &mut Normaliser) -> Option<String> {
    let mut missing = Vec::new();
    for (var, p) in &step.capture {
        let found = raw.and_then(|raw| crate::path::get(raw, &crate::path::parse(p).unwrap_or_default())).and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        });
        match found {
            Some(value) => {
                norm.captured(var, &value);
                vars.set(var, value);
            }
            None => {
                missing.push(format!("capture {var}: nothing at {p}"));
                vars.set(var, format!("missing-{var}"));
            }
        }
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// The step's `keep` filters with their values templated (`{{ns}}.example.com`).
fn rendered_keep(step: &Step, vars: &Vars) -> Result<Vec<Keep>, String> {
    step.keep.iter().map(|k| Ok(Keep { values: k.values.iter().map(|v| vars.render(v)).collect::<Result<_, _>>()?, ..k.clone() })).collect()
}

/// The normalised record of an answer, as much of it as the step compares.
fn record_answer(step: &Step, keep: &[Keep], answer: Answer, norm: &mut Normaliser) -> StepRecord {
    let is_collect = matches!(step.action, Action::Collect { .. });
    // Normalise even what is not compared: the normaliser's relations (resourceVersions seen,
    // uid numbering) must not depend on how much of each step a case compares.
    let headers = compared_headers(&answer.headers, norm);
    let mut raw = answer.raw;
    if let Some(r) = raw.as_mut() {
        normalise::keep(r, keep);
        normalise::unordered(r, &step.unordered);
    }
    let body = match raw {
        Some(Value::Array(events)) if is_collect => Some(norm.events(events)),
        Some(v) => Some(norm.body(v)),
        None => None,
    };
    let mut record = StepRecord { step: step.name.clone(), status: answer.status, ..Default::default() };
    match step.compare {
        Compare::Status if !is_collect => {}
        Compare::Shape => {
            record.headers = headers;
            record.body = body.as_ref().map(normalise::shape);
        }
        _ => {
            record.headers = headers;
            record.body = body;
        }
    }
    record
}

/// The `metadata.generateName` a step's request body asks for, if any.
fn requested_generate_name(step: &Step, vars: &Vars) -> Option<String> {
    let request = match &step.action {
        Action::Request { request: r, .. } | Action::Watch { request: r, .. } => r,
        _ => return None,
    };
    let Some(Body::Json(body)) = &request.body else { return None };
    let prefix = body.pointer("/metadata/generateName")?.as_str()?;
    vars.render(prefix).ok()
}

enum StepFailure {
    Target(TargetError),
    Case(String),
}

async fn read_all(resp: http::Response<axum::body::Body>) -> Result<Answer, StepFailure> {
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let bytes = match tokio::time::timeout(RESPONSE_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return Err(StepFailure::Case(format!("reading the response body: {e}"))),
        Err(_) => return Err(StepFailure::Case(format!("no complete response within {RESPONSE_TIMEOUT:?}"))),
    };
    Ok(Answer { status: Some(status), headers: parts.headers, raw: parse_body(&bytes), unmet: None })
}

/// Whether an answer satisfies `until` (its body seen through the step's `keep` filters).
fn satisfies(answer: &Answer, until: &Until, keep: &[Keep], vars: &Vars) -> Result<bool, String> {
    if until.status.is_some_and(|s| answer.status != Some(s)) {
        return Ok(false);
    }
    let Some(p) = &until.path else { return Ok(true) };
    let mut body = answer.raw.clone().unwrap_or(Value::Null);
    normalise::keep(&mut body, keep);
    let found = crate::path::get(&body, &crate::path::parse(p)?);
    Ok(match (&until.equals, found) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(want), Some(got)) => vars.render_value(want)? == *got,
    })
}

/// How often an `until` step asks again.
const UNTIL_INTERVAL: Duration = Duration::from_millis(100);

async fn run_action(target: &dyn Target, step: &Step, vars: &Vars, keep: &[Keep], watches: &mut BTreeMap<String, OpenWatch>) -> Result<Answer, StepFailure> {
    match &step.action {
        Action::Request { request, until, timeout } => {
            let deadline = tokio::time::Instant::now() + *timeout;
            loop {
                let req = build_request(request, vars).map_err(StepFailure::Case)?;
                let mut answer = read_all(target.send(req).await.map_err(StepFailure::Target)?).await?;
                let Some(until) = until else { return Ok(answer) };
                if satisfies(&answer, until, keep, vars).map_err(StepFailure::Case)? {
                    return Ok(answer);
                }
                if tokio::time::Instant::now() >= deadline {
                    answer.unmet = Some(format!("until not satisfied within {timeout:?}"));
                    return Ok(answer);
                }
                tokio::time::sleep(UNTIL_INTERVAL).await;
            }
        }
        Action::Watch { id, request } => {
            let req = build_request(request, vars).map_err(StepFailure::Case)?;
            let resp = target.send(req).await.map_err(StepFailure::Target)?;
            if resp.status().as_u16() != 200 {
                return read_all(resp).await;
            }
            let status = resp.status().as_u16();
            let (parts, body) = resp.into_parts();
            watches.insert(id.clone(), OpenWatch { stream: Box::pin(body.into_data_stream()), buffer: Vec::new(), ended: false });
            Ok(Answer { status: Some(status), headers: parts.headers, raw: None, unmet: None })
        }
        Action::Collect { id, count, timeout } => {
            let Some(w) = watches.get_mut(id) else {
                return Err(StepFailure::Case(format!("watch {id} is not open")));
            };
            let events = w.collect(*count, *timeout).await;
            Ok(Answer { status: None, headers: HeaderMap::new(), raw: Some(Value::Array(events)), unmet: None })
        }
        Action::Compact => {
            target.compact().await.map_err(StepFailure::Target)?;
            Ok(Answer { status: None, headers: HeaderMap::new(), raw: None, unmet: None })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(chunks: &[&'static str]) -> OpenWatch {
        let items: Vec<Result<Bytes, axum::Error>> = chunks.iter().map(|c| Ok(Bytes::from_static(c.as_bytes()))).collect();
        OpenWatch { stream: Box::pin(futures::stream::iter(items)), buffer: Vec::new(), ended: false }
    }

    #[tokio::test]
    async fn collects_lines_split_across_chunks() {
        let mut w = stream(&["{\"type\":\"ADDED\",", "\"object\":{}}\n{\"type\":\"DEL", "ETED\",\"object\":{}}\nnot json\n{\"tail\":1}"]);
        let events = w.collect(None, Duration::from_secs(1)).await;
        assert_eq!(
            events,
            vec![
                json!({"type": "ADDED", "object": {}}),
                json!({"type": "DELETED", "object": {}}),
                json!({"unparsable": "not json"}),
                json!({"unterminated": "{\"tail\":1}"}),
            ]
        );
    }

    #[tokio::test]
    async fn count_stops_early_and_the_rest_stays_readable() {
        let mut w = stream(&["{\"a\":1}\n{\"a\":2}\n"]);
        assert_eq!(w.collect(Some(1), Duration::from_secs(1)).await, vec![json!({"a": 1})]);
        assert_eq!(w.collect(None, Duration::from_secs(1)).await, vec![json!({"a": 2})]);
    }

    #[test]
    fn requests_carry_query_headers_and_bodies() {
        let mut vars = Vars::default();
        vars.set("ns", "n1");
        let r = crate::case::Request {
            method: "PATCH".into(),
            path: "/api/v1/namespaces/{{ns}}/configmaps/c?&x=1".into(),
            query: vec![("labelSelector".into(), "a in (b, c)".into())],
            headers: vec![("content-type".into(), Some("application/merge-patch+json".into()))],
            token: None,
            body: Some(Body::Json(json!({"metadata": {"namespace": "{{ns}}"}}))),
        };
        let req = build_request(&r, &vars).unwrap();
        assert_eq!(req.uri(), "/api/v1/namespaces/n1/configmaps/c?&x=1&labelSelector=a+in+%28b%2C+c%29");
        assert_eq!(req.headers()[header::CONTENT_TYPE], "application/merge-patch+json");
        assert_eq!(req.body(), &Bytes::from(r#"{"metadata":{"namespace":"n1"}}"#));
        assert!(req.extensions().get::<BearerToken>().is_none(), "the runner's own credential by default");
        let bare = crate::case::Request { headers: vec![("content-type".into(), None)], ..r.clone() };
        assert!(build_request(&bare, &vars).unwrap().headers().get(header::CONTENT_TYPE).is_none());
        vars.set("tok", "dG9rZW4tMQ==");
        let as_token = crate::case::Request { token: Some("{{tok|base64-decode}}".into()), ..r };
        let req = build_request(&as_token, &vars).unwrap();
        assert_eq!(req.extensions().get::<BearerToken>().map(|t| t.0.as_str()), Some("token-1"));
    }
}
