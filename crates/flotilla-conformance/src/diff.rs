//! Comparing a replay with its recording, step by step: the status code (path `status`),
//! compared headers (`header:<name>`), client-side errors (`error`) and the normalised body
//! (`$`, `$.metadata.name`, `$[0].object.kind`…), down to the first differing value.

use serde_json::Value;

use crate::path::{push_index, push_key};
use crate::recording::{StepRecord, Transcript};

/// One place where Flotilla answered differently from the recording.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    pub case: String,
    pub area: String,
    pub step: String,
    pub path: String,
    /// What the real server answered there (`None`: absent).
    pub recorded: Option<Value>,
    /// What Flotilla answered there (`None`: absent).
    pub flotilla: Option<Value>,
}

/// Every divergence between a recording and a replay of the same case.
pub fn transcripts(recorded: &Transcript, replay: &Transcript) -> Vec<Divergence> {
    let mut out = Vec::new();
    let n = recorded.steps.len().max(replay.steps.len());
    for i in 0..n {
        let (r, f) = (recorded.steps.get(i), replay.steps.get(i));
        let step = r.or(f).map(|s| s.step.clone()).unwrap_or_default();
        let mut push = |path: String, recorded: Option<Value>, flotilla: Option<Value>| {
            out.push(Divergence { case: replay.case.clone(), area: replay.area.clone(), step: step.clone(), path, recorded, flotilla });
        };
        match (r, f) {
            (Some(r), Some(f)) => step_records(r, f, &mut push),
            (Some(_), None) => push("step".into(), Some(Value::String("present".into())), None),
            (None, Some(_)) => push("step".into(), None, Some(Value::String("present".into()))),
            (None, None) => {}
        }
    }
    out
}

fn step_records(r: &StepRecord, f: &StepRecord, push: &mut dyn FnMut(String, Option<Value>, Option<Value>)) {
    if r.status != f.status {
        push("status".into(), r.status.map(Value::from), f.status.map(Value::from));
    }
    if r.error != f.error {
        push("error".into(), r.error.clone().map(Value::String), f.error.clone().map(Value::String));
    }
    let names: std::collections::BTreeSet<&String> = r.headers.keys().chain(f.headers.keys()).collect();
    for name in names {
        let (a, b) = (r.headers.get(name), f.headers.get(name));
        if a != b {
            push(format!("header:{name}"), a.cloned().map(Value::String), b.cloned().map(Value::String));
        }
    }
    values("$".into(), r.body.as_ref(), f.body.as_ref(), push);
}

/// Deep comparison: objects key by key, arrays index by index (a length difference shows as
/// the extra or missing elements).
pub fn values(path: String, a: Option<&Value>, b: Option<&Value>, push: &mut dyn FnMut(String, Option<Value>, Option<Value>)) {
    match (a, b) {
        (None, None) => {}
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                values(push_key(&path, k), x.get(k), y.get(k), push);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            for i in 0..x.len().max(y.len()) {
                values(push_index(&path, i), x.get(i), y.get(i), push);
            }
        }
        (a, b) if a == b => {}
        (a, b) => push(path, a.cloned(), b.cloned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(steps: Vec<StepRecord>) -> Transcript {
        Transcript { case: "c".into(), area: "a".into(), steps, ..Default::default() }
    }

    #[test]
    fn reports_the_deepest_difference() {
        let r = t(vec![StepRecord { step: "s".into(), status: Some(201), body: Some(json!({"a": {"b": 1, "c": [1, 2]}})), ..Default::default() }]);
        let f = t(vec![StepRecord { step: "s".into(), status: Some(200), body: Some(json!({"a": {"b": 2, "c": [1]}})), ..Default::default() }]);
        let d = transcripts(&r, &f);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, vec!["status", "$.a.b", "$.a.c[1]"]);
        assert_eq!(d[2].flotilla, None);
    }
}
