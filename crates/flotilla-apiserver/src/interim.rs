//! TEMPORARY: minimal selectors and patch engines so the server runs while the full ones are
//! written in `flotilla-api` (selector, patch). Replaced, not extended.

pub mod selector {
    use std::collections::BTreeMap;

    #[derive(Debug, Clone, Default)]
    pub struct LabelSelector(Vec<(String, String, Vec<String>)>);

    impl std::fmt::Display for LabelSelector {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let parts: Vec<String> = self.0.iter().map(|(k, op, v)| match op.as_str() {
                "=" => format!("{k}={}", v[0]),
                "!=" => format!("{k}!={}", v[0]),
                "in" => format!("{k} in ({})", v.join(",")),
                "notin" => format!("{k} notin ({})", v.join(",")),
                "exists" => k.clone(),
                _ => format!("!{k}"),
            }).collect();
            f.write_str(&parts.join(","))
        }
    }

    impl LabelSelector {
        pub fn parse(s: &str) -> Result<Self, String> {
            let mut out = Vec::new();
            let mut depth = 0;
            let mut cur = String::new();
            let mut parts = Vec::new();
            for c in s.chars() {
                match c {
                    '(' => { depth += 1; cur.push(c) }
                    ')' => { depth -= 1; cur.push(c) }
                    ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
                    _ => cur.push(c),
                }
            }
            parts.push(cur);
            for p in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
                if let Some((k, v)) = p.split_once("!=") {
                    out.push((k.trim().into(), "!=".into(), vec![v.trim().into()]));
                } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                    out.push((k.trim().into(), "=".into(), vec![v.trim().into()]));
                } else if let Some((k, v)) = p.split_once(" notin ") {
                    out.push((k.trim().into(), "notin".into(), v.trim().trim_matches(|c| c == '(' || c == ')').split(',').map(|x| x.trim().to_string()).collect()));
                } else if let Some((k, v)) = p.split_once(" in ") {
                    out.push((k.trim().into(), "in".into(), v.trim().trim_matches(|c| c == '(' || c == ')').split(',').map(|x| x.trim().to_string()).collect()));
                } else if let Some(k) = p.strip_prefix('!') {
                    out.push((k.trim().into(), "!".into(), vec![]));
                } else if p.contains(' ') {
                    return Err(format!("found '{p}', expected: in, notin, =, ==, !=, gt, lt"));
                } else {
                    out.push((p.into(), "exists".into(), vec![]));
                }
            }
            Ok(LabelSelector(out))
        }
        pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
            let mut out = Vec::new();
            if let Some(m) = v.get("matchLabels").and_then(|m| m.as_object()) {
                for (k, v) in m {
                    out.push((k.clone(), "=".into(), vec![v.as_str().unwrap_or("").to_string()]));
                }
            }
            Ok(LabelSelector(out))
        }
        pub fn is_empty(&self) -> bool { self.0.is_empty() }
        pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
            self.0.iter().all(|(k, op, v)| {
                let l = labels.get(k);
                match op.as_str() {
                    "=" => l == Some(&v[0]),
                    "!=" => l != Some(&v[0]),
                    "in" => l.is_some_and(|x| v.contains(x)),
                    "notin" => l.is_none_or(|x| !v.contains(x)),
                    "exists" => l.is_some(),
                    _ => l.is_none(),
                }
            })
        }
    }

    #[derive(Debug, Clone, Default)]
    pub struct FieldSelector(Vec<(String, bool, String)>);

    impl FieldSelector {
        pub fn parse(s: &str) -> Result<Self, String> {
            let mut out = Vec::new();
            for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                if let Some((k, v)) = p.split_once("!=") {
                    out.push((k.trim().into(), false, v.trim().into()));
                } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                    out.push((k.trim().into(), true, v.trim().into()));
                } else {
                    return Err(format!("invalid selector: '{p}'; can't understand '{p}'"));
                }
            }
            Ok(FieldSelector(out))
        }
        pub fn fields(&self) -> Vec<&str> { self.0.iter().map(|(k, _, _)| k.as_str()).collect() }
        pub fn is_empty(&self) -> bool { self.0.is_empty() }
        pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
            self.0.iter().all(|(k, eq, v)| (get(k).unwrap_or_default() == *v) == *eq)
        }
    }
}

pub mod patch {
    use serde_json::Value;

    #[derive(Debug)]
    pub enum PatchError { Decode(String), Apply(String) }

    pub struct Schema;

    pub fn schema_for(_g: &str, _v: &str, _k: &str) -> Option<Schema> { Some(Schema) }

    pub fn merge_patch(doc: &Value, patch: &Value) -> Value {
        match (doc, patch) {
            (Value::Object(d), Value::Object(p)) => {
                let mut out = d.clone();
                for (k, v) in p {
                    if v.is_null() { out.remove(k); } else { let cur = out.get(k).cloned().unwrap_or(Value::Null); out.insert(k.clone(), merge_patch(&cur, v)); }
                }
                Value::Object(out)
            }
            (_, Value::Object(p)) => merge_patch(&Value::Object(Default::default()), &Value::Object(p.clone())),
            (_, p) => p.clone(),
        }
    }

    pub fn strategic_merge_patch(doc: &Value, patch: &Value, _s: &Schema) -> Result<Value, PatchError> {
        Ok(merge_patch(doc, patch))
    }

    fn unescape(s: &str) -> String { s.replace("~1", "/").replace("~0", "~") }

    pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
        let ops = patch.as_array().ok_or_else(|| PatchError::Decode("json patch must be an array".into()))?;
        let mut doc = doc.clone();
        for op in ops {
            let kind = op["op"].as_str().unwrap_or("");
            let path = op["path"].as_str().unwrap_or("");
            let parts: Vec<String> = path.split('/').skip(1).map(unescape).collect();
            match kind {
                "test" => {
                    let cur = doc.pointer(path);
                    let want = &op["value"];
                    if !(cur == Some(want) || (cur.is_none() && want.is_null())) {
                        return Err(PatchError::Apply(format!("testing value {path} failed")));
                    }
                }
                "add" | "replace" => {
                    let (last, parent) = parts.split_last().ok_or_else(|| PatchError::Apply("empty path".into()))?;
                    let pp = parent.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect::<String>();
                    let target = doc.pointer_mut(&pp).ok_or_else(|| PatchError::Apply(format!("path {path} not found")))?;
                    match target {
                        Value::Object(m) => { m.insert(last.clone(), op["value"].clone()); }
                        Value::Array(a) => {
                            if last == "-" { a.push(op["value"].clone()) } else {
                                let i: usize = last.parse().map_err(|_| PatchError::Apply("bad index".into()))?;
                                if kind == "add" { if i > a.len() { return Err(PatchError::Apply("index out of range".into())) } a.insert(i, op["value"].clone()) } else if i < a.len() { a[i] = op["value"].clone() } else { return Err(PatchError::Apply("index out of range".into())) }
                            }
                        }
                        _ => return Err(PatchError::Apply(format!("path {path} not found"))),
                    }
                }
                "remove" => {
                    let (last, parent) = parts.split_last().ok_or_else(|| PatchError::Apply("empty path".into()))?;
                    let pp = parent.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect::<String>();
                    let target = doc.pointer_mut(&pp).ok_or_else(|| PatchError::Apply(format!("path {path} not found")))?;
                    match target {
                        Value::Object(m) => { m.remove(last).ok_or_else(|| PatchError::Apply(format!("path {path} not found")))?; }
                        Value::Array(a) => { let i: usize = last.parse().map_err(|_| PatchError::Apply("bad index".into()))?; if i >= a.len() { return Err(PatchError::Apply("index out of range".into())) } a.remove(i); }
                        _ => return Err(PatchError::Apply(format!("path {path} not found"))),
                    }
                }
                other => return Err(PatchError::Decode(format!("unknown op {other}"))),
            }
        }
        Ok(doc)
    }
}
