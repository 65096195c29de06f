//! The case format. `conformance/cases/<area>.yaml` holds one area:
//!
//! ```yaml
//! area: crud
//! fixtures:                 # free-form; a place for YAML anchors the cases reuse
//!   cm: &cm {apiVersion: v1, kind: ConfigMap, metadata: {name: cm1}, data: {a: "1"}}
//! cases:
//!   - id: crud-configmap-create-get
//!     description: create a ConfigMap and read it back
//!     steps:
//!       - name: create
//!         method: POST
//!         path: /api/v1/namespaces/{{ns}}/configmaps
//!         body: *cm
//!         capture: {rv: metadata.resourceVersion}
//!       - name: get
//!         path: /api/v1/namespaces/{{ns}}/configmaps/cm1
//! ```
//!
//! `docs/conformance.md` describes every field. A case's digest (of its parsed definition) is
//! stored with its recording, so an edited case cannot be compared with a stale recording.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// Why the cases could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: not valid YAML: {message}")]
    Yaml { path: String, message: String },
    #[error("{path}: case {case}: {message}")]
    Invalid { path: String, case: String, message: String },
}

/// How much of a step's response is compared.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compare {
    /// Status code, headers and the normalised body.
    #[default]
    Full,
    /// Only the status code (set-up steps whose body another case compares).
    Status,
    /// Status code, headers, and the body's keys and value types but not its values.
    Shape,
}

/// Keep only the elements of the array(s) at `path` whose `key` is one of `values`, sorted by
/// `key` (used to restrict discovery documents to what Flotilla serves).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Keep {
    pub path: String,
    pub key: String,
    pub values: Vec<String>,
}

/// Repeat a request step until its answer satisfies this (for what the real server does a moment
/// after a write: a new CRD's resources are served and discovered once its controllers have
/// run). The condition is checked after `keep`; only the last answer is recorded.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Until {
    /// The status code to wait for.
    pub status: Option<u16>,
    /// A path into the body that must be present (and equal `equals`, when given).
    pub path: Option<String>,
    /// The value at `path` (templated).
    pub equals: Option<Value>,
}

/// A request body.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// Serialised as JSON (the default Content-Type is `application/json`).
    Json(Value),
    /// Sent byte for byte (malformed bodies, YAML).
    Raw(String),
}

/// One HTTP request, before templating.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    /// `None` removes a header the runner would otherwise add (Content-Type for bodies).
    pub headers: Vec<(String, Option<String>)>,
    pub body: Option<Body>,
    /// Sent as this bearer token alone (templated), without the runner's own credential: a
    /// caller that is not the admin.
    pub token: Option<String>,
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send a request and read the whole response; with `until`, again every 100 ms until the
    /// answer satisfies it or `timeout` passed.
    Request { request: Request, until: Option<Until>, timeout: Duration },
    /// Open a watch and keep its stream for a later `collect` step; only the response head
    /// (or the whole response when it is not a 200) is recorded here.
    Watch { id: String, request: Request },
    /// Read a watch's events until the stream ends, `count` events arrived, or `timeout`.
    Collect { id: String, count: Option<usize>, timeout: Duration },
    /// Compact the storage (etcd, or Flotilla's store) up to its current revision.
    Compact,
}

/// One step of a case.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Unique within the case; defaults to the 1-based index.
    pub name: String,
    pub action: Action,
    /// Variable name → path into the response body (or the event list of a `collect`).
    pub capture: Vec<(String, String)>,
    pub compare: Compare,
    pub keep: Vec<Keep>,
    /// Paths of arrays whose order the server does not define (sorted before comparing).
    pub unordered: Vec<String>,
}

/// A request script.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub id: String,
    pub area: String,
    pub description: String,
    pub steps: Vec<Step>,
    /// `fnv1a64:<hex>` of the case's parsed definition.
    pub digest: String,
}

impl Case {
    /// Whether the case compacts storage (such cases run alone).
    pub fn compacts(&self) -> bool {
        self.steps.iter().any(|s| s.action == Action::Compact)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    area: String,
    #[serde(default)]
    #[allow(dead_code)]
    fixtures: Value,
    cases: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    id: String,
    #[serde(default)]
    description: String,
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: Option<String>,
    /// Documentation only.
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    method: Option<String>,
    path: Option<String>,
    #[serde(default)]
    query: serde_json::Map<String, Value>,
    #[serde(default)]
    headers: serde_json::Map<String, Value>,
    body: Option<Value>,
    raw_body: Option<String>,
    token: Option<String>,
    #[serde(default)]
    capture: serde_json::Map<String, Value>,
    #[serde(default)]
    compare: Compare,
    #[serde(default)]
    keep: Vec<Keep>,
    #[serde(default)]
    unordered: Vec<String>,
    watch: Option<String>,
    collect: Option<String>,
    count: Option<usize>,
    /// Seconds.
    timeout: Option<f64>,
    #[serde(default)]
    compact: bool,
    until: Option<Until>,
}

/// A scalar as query/header text.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn step_from_raw(index: usize, raw: RawStep) -> Result<Step, String> {
    let name = raw.name.clone().unwrap_or_else(|| (index + 1).to_string());
    let request = |raw: &RawStep| -> Result<Request, String> {
        let path = raw.path.clone().ok_or("a request step needs a path")?;
        if !path.starts_with('/') {
            return Err(format!("path {path:?} must start with /"));
        }
        let mut query = Vec::new();
        for (k, v) in &raw.query {
            query.push((k.clone(), scalar_text(v).ok_or(format!("query {k}: not a scalar"))?));
        }
        let mut headers = Vec::new();
        for (k, v) in &raw.headers {
            let value = if v.is_null() { None } else { Some(scalar_text(v).ok_or(format!("header {k}: not a scalar"))?) };
            headers.push((k.to_ascii_lowercase(), value));
        }
        let body = match (&raw.body, &raw.raw_body) {
            (Some(_), Some(_)) => return Err("body and raw_body are exclusive".into()),
            (Some(b), None) => Some(Body::Json(b.clone())),
            (None, Some(r)) => Some(Body::Raw(r.clone())),
            (None, None) => None,
        };
        if headers.iter().any(|(k, _)| k == "authorization") {
            return Err("credentials go in token, not in an Authorization header".into());
        }
        let method = raw.method.clone().unwrap_or_else(|| "GET".into()).to_ascii_uppercase();
        Ok(Request { method, path, query, headers, body, token: raw.token.clone() })
    };
    let action = match (&raw.watch, &raw.collect, raw.compact) {
        (Some(id), None, false) => Action::Watch { id: id.clone(), request: request(&raw)? },
        (None, Some(id), false) => {
            if raw.path.is_some() || raw.body.is_some() || raw.method.is_some() || raw.token.is_some() {
                return Err("a collect step sends no request".into());
            }
            let secs = raw.timeout.unwrap_or(10.0);
            if !(0.0..=120.0).contains(&secs) {
                return Err(format!("timeout {secs} out of range"));
            }
            Action::Collect { id: id.clone(), count: raw.count, timeout: Duration::from_secs_f64(secs) }
        }
        (None, None, true) => {
            if raw.path.is_some() {
                return Err("a compact step sends no request".into());
            }
            Action::Compact
        }
        (None, None, false) => {
            let secs = raw.timeout.unwrap_or(30.0);
            if !(0.0..=120.0).contains(&secs) {
                return Err(format!("timeout {secs} out of range"));
            }
            if let Some(p) = raw.until.as_ref().and_then(|u| u.path.as_deref()) {
                crate::path::parse(p)?;
            }
            if raw.until.as_ref().is_some_and(|u| u.status.is_none() && u.path.is_none()) {
                return Err("until needs a status or a path".into());
            }
            if raw.until.is_none() && raw.timeout.is_some() {
                return Err("timeout only applies to collect and until".into());
            }
            Action::Request { request: request(&raw)?, until: raw.until.clone(), timeout: Duration::from_secs_f64(secs) }
        }
        _ => return Err("watch, collect and compact are exclusive".into()),
    };
    if raw.count.is_some() && !matches!(action, Action::Collect { .. }) {
        return Err("count only applies to collect".into());
    }
    if raw.until.is_some() && !matches!(action, Action::Request { .. }) {
        return Err("until only applies to request steps".into());
    }
    let mut capture = Vec::new();
    for (var, p) in &raw.capture {
        let p = p.as_str().ok_or(format!("capture {var}: path must be a string"))?;
        crate::path::parse(p)?;
        if !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("capture variable {var:?}: letters, digits and _ only"));
        }
        capture.push((var.clone(), p.to_string()));
    }
    for k in &raw.keep {
        crate::path::parse(&k.path)?;
    }
    for p in &raw.unordered {
        crate::path::parse(p)?;
    }
    Ok(Step { name, action, capture, compare: raw.compare, keep: raw.keep, unordered: raw.unordered })
}

/// A stable digest of a case definition: FNV-1a over its canonical JSON (serde_json maps are
/// sorted, so the text is canonical).
pub fn digest(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}

/// Parse one area file.
pub fn parse_file(path: &str, text: &str) -> Result<Vec<Case>, CaseError> {
    // Case files reuse fixtures through many aliases: the alias/anchor ratio guard is for
    // untrusted input, and these files are ours.
    let options = serde_saphyr::options! { budget: serde_saphyr::budget! { enforce_alias_anchor_ratio: false } };
    let raw: Value = serde_saphyr::from_str_with_options(text, options).map_err(|e| CaseError::Yaml { path: path.into(), message: e.to_string() })?;
    let file: RawFile = serde_json::from_value(raw).map_err(|e| CaseError::Yaml { path: path.into(), message: e.to_string() })?;
    let mut out = Vec::new();
    for (i, value) in file.cases.into_iter().enumerate() {
        let invalid = |case: &str, message: String| CaseError::Invalid { path: path.into(), case: case.into(), message };
        let label = value.get("id").and_then(Value::as_str).map(String::from).unwrap_or_else(|| format!("#{}", i + 1));
        let rc: RawCase = serde_json::from_value(value.clone()).map_err(|e| invalid(&label, e.to_string()))?;
        if rc.id.is_empty() || !rc.id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            return Err(invalid(&rc.id, "ids are lowercase letters, digits and -".into()));
        }
        let mut steps = Vec::new();
        let mut names = BTreeSet::new();
        let mut watches = BTreeSet::new();
        for (j, rs) in rc.steps.into_iter().enumerate() {
            let step = step_from_raw(j, rs).map_err(|m| invalid(&rc.id, format!("step {}: {m}", j + 1)))?;
            if !names.insert(step.name.clone()) {
                return Err(invalid(&rc.id, format!("duplicate step name {:?}", step.name)));
            }
            match &step.action {
                Action::Watch { id, .. } => {
                    watches.insert(id.clone());
                }
                Action::Collect { id, .. } if !watches.contains(id) => {
                    return Err(invalid(&rc.id, format!("collect {id:?} before its watch")));
                }
                _ => {}
            }
            steps.push(step);
        }
        if steps.is_empty() {
            return Err(invalid(&rc.id, "no steps".into()));
        }
        out.push(Case { id: rc.id, area: file.area.clone(), description: rc.description, steps, digest: digest(&value) });
    }
    Ok(out)
}

/// Every case under `dir` (`*.yaml`, in file-name order), with ids checked for uniqueness.
pub fn load_dir(dir: &Path) -> Result<Vec<Case>, CaseError> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|source| CaseError::Read { path: p.display().to_string(), source });
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|source| CaseError::Read { path: dir.display().to_string(), source })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut all: Vec<Case> = Vec::new();
    let mut ids = BTreeSet::new();
    for f in files {
        let shown = f.display().to_string();
        for c in parse_file(&shown, &read(&f)?)? {
            if !ids.insert(c.id.clone()) {
                return Err(CaseError::Invalid { path: shown, case: c.id, message: "duplicate case id".into() });
            }
            all.push(c);
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
area: crud
fixtures:
  cm: &cm {apiVersion: v1, kind: ConfigMap, metadata: {name: cm1}}
cases:
  - id: a-case
    steps:
      - method: post
        path: /api/v1/namespaces/{{ns}}/configmaps
        body: *cm
        capture: {rv: metadata.resourceVersion}
      - name: w
        watch: w1
        path: /api/v1/namespaces/{{ns}}/configmaps
        query: {watch: 1, timeoutSeconds: 2}
      - collect: w1
        count: 1
        timeout: 3
      - compact: true
"#;

    #[test]
    fn parses_steps_and_defaults() {
        let cases = parse_file("t.yaml", FILE).unwrap();
        let c = &cases[0];
        assert_eq!(c.area, "crud");
        assert_eq!(c.steps[0].name, "1");
        let Action::Request { request: r, until: None, .. } = &c.steps[0].action else { panic!() };
        assert_eq!(r.method, "POST");
        assert_eq!(r.body, Some(Body::Json(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}}))));
        let Action::Watch { request, .. } = &c.steps[1].action else { panic!() };
        assert_eq!(request.query, vec![("timeoutSeconds".into(), "2".into()), ("watch".into(), "1".into())]);
        assert!(matches!(c.steps[2].action, Action::Collect { count: Some(1), .. }));
        assert!(c.compacts());
        assert!(c.digest.starts_with("fnv1a64:"));
    }

    #[test]
    fn rejects_unknown_fields_and_bad_order() {
        let bad = FILE.replace("capture:", "captur:");
        assert!(parse_file("t.yaml", &bad).is_err());
        let bad = FILE.replace("collect: w1", "collect: w2");
        assert!(parse_file("t.yaml", &bad).is_err());
        let bad = FILE.replace("body: *cm", "body: *cm\n        until: {}");
        assert!(parse_file("t.yaml", &bad).is_err(), "until needs a condition");
        let good = FILE.replace("body: *cm", "body: *cm\n        until: {status: 201}\n        timeout: 5");
        let c = &parse_file("t.yaml", &good).unwrap()[0];
        assert!(matches!(&c.steps[0].action, Action::Request { until: Some(Until { status: Some(201), .. }), timeout, .. } if timeout.as_secs() == 5));
    }
}
