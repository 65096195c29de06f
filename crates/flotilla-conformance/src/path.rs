//! The small path language cases and reports use to point into JSON: `metadata.name`,
//! `items[0].metadata.uid`, `metadata.labels["app.kubernetes.io/name"]`, `[2].object`.
//! Reports prefix body paths with `$`.

use serde_json::Value;

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
    /// `[*]`: every element (only in `keep` filters).
    Every,
}

/// Parse `a.b[0]["c.d"]` into segments.
pub fn parse(path: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    let mut chars = path.trim_start_matches('$').chars().peekable();
    let mut key = String::new();
    let flush = |key: &mut String, out: &mut Vec<Segment>| {
        if !key.is_empty() {
            out.push(Segment::Key(std::mem::take(key)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '.' => flush(&mut key, &mut out),
            '[' => {
                flush(&mut key, &mut out);
                let mut inner = String::new();
                let mut quoted = false;
                loop {
                    match chars.next() {
                        None => return Err(format!("unterminated [ in path {path:?}")),
                        Some('"') => quoted = !quoted,
                        Some(']') if !quoted => break,
                        Some(ch) => inner.push(ch),
                    }
                }
                if inner == "*" {
                    out.push(Segment::Every);
                } else if let Ok(i) = inner.parse::<usize>() {
                    out.push(Segment::Index(i));
                } else {
                    out.push(Segment::Key(inner));
                }
            }
            ch => key.push(ch),
        }
    }
    flush(&mut key, &mut out);
    Ok(out)
}

/// The value at `segments`, if any (`[*]` is not allowed here).
pub fn get<'a>(v: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    let mut cur = v;
    for s in segments {
        cur = match s {
            Segment::Key(k) => cur.get(k.as_str())?,
            Segment::Index(i) => cur.get(*i)?,
            Segment::Every => return None,
        };
    }
    Some(cur)
}

/// Apply `f` to every value `segments` reaches (`[*]` fans out).
pub fn for_each_mut(v: &mut Value, segments: &[Segment], f: &mut dyn FnMut(&mut Value)) {
    let Some((first, rest)) = segments.split_first() else {
        f(v);
        return;
    };
    match first {
        Segment::Key(k) => {
            if let Some(next) = v.get_mut(k.as_str()) {
                for_each_mut(next, rest, f);
            }
        }
        Segment::Index(i) => {
            if let Some(next) = v.get_mut(*i) {
                for_each_mut(next, rest, f);
            }
        }
        Segment::Every => {
            if let Some(items) = v.as_array_mut() {
                for item in items {
                    for_each_mut(item, rest, f);
                }
            }
        }
    }
}

/// Render a key for a report path: plain when it is an identifier, quoted otherwise.
pub fn push_key(path: &str, key: &str) -> String {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if plain { format!("{path}.{key}") } else { format!("{path}[{key:?}]") }
}

pub fn push_index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_keys_indexes_and_quoted_keys() {
        assert_eq!(
            parse(r#"$.items[0].metadata.labels["app.kubernetes.io/name"]"#).unwrap(),
            vec![
                Segment::Key("items".into()),
                Segment::Index(0),
                Segment::Key("metadata".into()),
                Segment::Key("labels".into()),
                Segment::Key("app.kubernetes.io/name".into()),
            ]
        );
        assert_eq!(parse("[2].object").unwrap(), vec![Segment::Index(2), Segment::Key("object".into())]);
        assert_eq!(parse("a[*].b").unwrap(), vec![Segment::Key("a".into()), Segment::Every, Segment::Key("b".into())]);
    }

    #[test]
    fn get_and_render_round_trip() {
        let v = json!({"metadata": {"labels": {"a.b/c": "x"}}});
        let p = push_key(&push_key(&push_key("$", "metadata"), "labels"), "a.b/c");
        assert_eq!(p, r#"$.metadata.labels["a.b/c"]"#);
        assert_eq!(get(&v, &parse(&p).unwrap()), Some(&json!("x")));
    }
}
