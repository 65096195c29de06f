//! Field paths of edge changes: a concrete [`FieldPath`] (`spec.template.spec.containers[0].image`)
//! and the [`FieldPattern`]s users write in `edge.flotilla.io/edge-wins-fields`
//! (`spec.template.spec.containers[*].image`, `metadata.labels['app.kubernetes.io/version']`).
//!
//! Syntax: a first key, then `.key`, `[N]`, `[*]` (patterns only) or `['key']` / `["key"]` for a
//! key with dots, slashes or other characters. A pattern covers a path when it is a prefix of it,
//! `[*]` matching any index: `metadata.labels` covers every label.

use serde_json::Value;

/// One step of a concrete path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// Where a change is, from the object's root (the root itself: the whole object).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(pub Vec<Segment>);

/// One step of a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
    AnyIndex,
}

/// A field path with `[*]` allowed, naming what `EdgeWins` covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPattern(Vec<Step>);

fn plain(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$')
}

fn write_key(out: &mut String, key: &str, first: bool) {
    if plain(key) {
        if !first {
            out.push('.');
        }
        out.push_str(key);
    } else {
        out.push_str("['");
        out.push_str(&key.replace('\\', "\\\\").replace('\'', "\\'"));
        out.push_str("']");
    }
}

/// Parse `text` into steps; `[*]` only when `wildcards`.
fn parse(text: &str, wildcards: bool) -> Result<Vec<Step>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    let key_at = |i: &mut usize| {
        let start = *i;
        while *i < chars.len() && chars[*i] != '.' && chars[*i] != '[' {
            *i += 1;
        }
        chars[start..*i].iter().collect::<String>()
    };
    while i < chars.len() {
        match chars[i] {
            '[' => {
                let close = chars[i..].iter().position(|c| *c == ']').map(|p| p + i);
                if matches!(chars.get(i + 1), Some('\'' | '"')) {
                    let quote = chars[i + 1];
                    let mut key = String::new();
                    let mut j = i + 2;
                    loop {
                        match chars.get(j) {
                            None => return Err(format!("unterminated {quote}...{quote} at {}", i + 1)),
                            Some('\\') if j + 1 < chars.len() => {
                                key.push(chars[j + 1]);
                                j += 2;
                            }
                            Some(c) if *c == quote => break,
                            Some(c) => {
                                key.push(*c);
                                j += 1;
                            }
                        }
                    }
                    if chars.get(j + 1) != Some(&']') {
                        return Err(format!("expected ] after the quoted key at {}", j + 2));
                    }
                    if key.is_empty() {
                        return Err("an empty key".into());
                    }
                    steps.push(Step::Key(key));
                    i = j + 2;
                } else {
                    let close = close.ok_or_else(|| format!("unclosed [ at {}", i + 1))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    let step = match inner.as_str() {
                        "*" if wildcards => Step::AnyIndex,
                        "*" => return Err("[*] is not a concrete index".into()),
                        n => Step::Index(n.parse().map_err(|_| format!("[{n}]: expected an index, [*] or a quoted key"))?),
                    };
                    steps.push(step);
                    i = close + 1;
                }
            }
            '.' if !steps.is_empty() => {
                i += 1;
                let key = key_at(&mut i);
                if key.is_empty() {
                    return Err(format!("an empty key at {}", i + 1));
                }
                steps.push(Step::Key(key));
            }
            '.' => return Err("starts with a dot".into()),
            _ if steps.is_empty() => {
                let key = key_at(&mut i);
                steps.push(Step::Key(key));
            }
            c => return Err(format!("unexpected {c:?} at {}", i + 1)),
        }
    }
    if steps.is_empty() {
        return Err("empty".into());
    }
    Ok(steps)
}

impl FieldPath {
    /// The whole object.
    pub fn root() -> FieldPath {
        FieldPath(Vec::new())
    }

    pub fn parse(text: &str) -> Result<FieldPath, String> {
        if text.is_empty() {
            return Ok(FieldPath::root());
        }
        Ok(FieldPath(
            parse(text, false)?
                .into_iter()
                .map(|s| match s {
                    Step::Key(k) => Segment::Key(k),
                    Step::Index(n) => Segment::Index(n),
                    Step::AnyIndex => unreachable!("no wildcards in a concrete path"),
                })
                .collect(),
        ))
    }

    pub fn child(&self, s: Segment) -> FieldPath {
        let mut p = self.0.clone();
        p.push(s);
        FieldPath(p)
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at this path in `obj`.
    pub fn get<'a>(&self, obj: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(obj, |v, s| match s {
            Segment::Key(k) => v.get(k),
            Segment::Index(n) => v.get(*n),
        })
    }

    /// Set the value at this path in `obj`, making the objects on the way; a list index must
    /// exist already (or be the list's length: appended). The root replaces `obj` whole.
    pub fn set(&self, obj: &mut Value, value: Value) -> Result<(), String> {
        let Some((last, parents)) = self.0.split_last() else {
            *obj = value;
            return Ok(());
        };
        let mut at = obj;
        for (i, s) in parents.iter().enumerate() {
            let next_is_index = matches!(self.0.get(i + 1), Some(Segment::Index(_)));
            at = match s {
                Segment::Key(k) => {
                    if at.is_null() {
                        *at = Value::Object(Default::default());
                    }
                    let map = at.as_object_mut().ok_or_else(|| format!("{self}: {k} is not inside an object"))?;
                    map.entry(k.clone()).or_insert_with(|| if next_is_index { Value::Array(Vec::new()) } else { Value::Object(Default::default()) })
                }
                Segment::Index(n) => at.as_array_mut().and_then(|a| a.get_mut(*n)).ok_or_else(|| format!("{self}: no element {n}"))?,
            };
        }
        match last {
            Segment::Key(k) => {
                if at.is_null() {
                    *at = Value::Object(Default::default());
                }
                at.as_object_mut().ok_or_else(|| format!("{self}: {k} is not inside an object"))?.insert(k.clone(), value);
            }
            Segment::Index(n) => {
                let list = at.as_array_mut().ok_or_else(|| format!("{self}: not a list"))?;
                match list.len().cmp(n) {
                    std::cmp::Ordering::Greater => list[*n] = value,
                    std::cmp::Ordering::Equal => list.push(value),
                    std::cmp::Ordering::Less => return Err(format!("{self}: no element {n}")),
                }
            }
        }
        Ok(())
    }

    /// Remove the value at this path in `obj` (nothing there: nothing to do).
    pub fn remove(&self, obj: &mut Value) {
        let Some((last, parents)) = self.0.split_last() else { return };
        let mut at = obj;
        for s in parents {
            let next = match s {
                Segment::Key(k) => at.get_mut(k),
                Segment::Index(n) => at.get_mut(*n),
            };
            let Some(next) = next else { return };
            at = next;
        }
        match last {
            Segment::Key(k) => {
                if let Some(m) = at.as_object_mut() {
                    m.remove(k);
                }
            }
            Segment::Index(n) => {
                if let Some(l) = at.as_array_mut().filter(|l| *n < l.len()) {
                    l.remove(*n);
                }
            }
        }
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Key(k) => write_key(&mut out, k, i == 0),
                Segment::Index(n) => out.push_str(&format!("[{n}]")),
            }
        }
        f.write_str(&out)
    }
}

impl FieldPattern {
    pub fn parse(text: &str) -> Result<FieldPattern, String> {
        parse(text.trim(), true).map(FieldPattern)
    }

    /// Whether a change at `path` falls under this pattern (the pattern is a prefix of it).
    pub fn covers(&self, path: &FieldPath) -> bool {
        self.0.len() <= path.0.len()
            && self.0.iter().zip(&path.0).all(|(step, seg)| match (step, seg) {
                (Step::Key(a), Segment::Key(b)) => a == b,
                (Step::Index(a), Segment::Index(b)) => a == b,
                (Step::AnyIndex, Segment::Index(_)) => true,
                _ => false,
            })
    }
}

impl std::fmt::Display for FieldPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Step::Key(k) => write_key(&mut out, k, i == 0),
                Step::Index(n) => out.push_str(&format!("[{n}]")),
                Step::AnyIndex => out.push_str("[*]"),
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_print_and_parse_back() {
        for text in ["spec.replicas", "spec.template.spec.containers[0].image", "metadata.labels['app.kubernetes.io/version']", "data['a.b']", "x[3][1]"] {
            let p = FieldPath::parse(text).unwrap();
            assert_eq!(p.to_string(), text);
        }
        assert_eq!(FieldPath::parse("metadata.labels[\"a/b\"]").unwrap().to_string(), "metadata.labels['a/b']");
        assert!(FieldPath::parse("spec.containers[*]").is_err());
        let obj = json!({"spec": {"containers": [{"image": "a"}, {"image": "b"}]}});
        assert_eq!(FieldPath::parse("spec.containers[1].image").unwrap().get(&obj), Some(&json!("b")));
        assert_eq!(FieldPath::root().get(&obj), Some(&obj));
    }

    #[test]
    fn values_are_set_and_removed_by_path() {
        let mut obj = json!({"spec": {"containers": [{"image": "a"}]}});
        FieldPath::parse("spec.containers[0].image").unwrap().set(&mut obj, json!("b")).unwrap();
        FieldPath::parse("metadata.labels['app.kubernetes.io/version']").unwrap().set(&mut obj, json!("2")).unwrap();
        FieldPath::parse("spec.containers[1]").unwrap().set(&mut obj, json!({"image": "c"})).unwrap();
        assert_eq!(obj, json!({"spec": {"containers": [{"image": "b"}, {"image": "c"}]}, "metadata": {"labels": {"app.kubernetes.io/version": "2"}}}));
        assert!(FieldPath::parse("spec.containers[5].image").unwrap().set(&mut obj, json!("x")).unwrap_err().contains("no element 5"));
        assert!(FieldPath::parse("spec.containers.image").unwrap().set(&mut obj, json!("x")).is_err());
        FieldPath::parse("spec.containers[0]").unwrap().remove(&mut obj);
        FieldPath::parse("metadata.labels['app.kubernetes.io/version']").unwrap().remove(&mut obj);
        FieldPath::parse("spec.nothing.here").unwrap().remove(&mut obj);
        assert_eq!(obj, json!({"spec": {"containers": [{"image": "c"}]}, "metadata": {"labels": {}}}));
    }

    #[test]
    fn patterns_cover_what_lies_below_them() {
        let image = FieldPath::parse("spec.template.spec.containers[1].image").unwrap();
        assert!(FieldPattern::parse("spec.template.spec.containers[*].image").unwrap().covers(&image));
        assert!(FieldPattern::parse("spec.template.spec.containers[1]").unwrap().covers(&image));
        assert!(FieldPattern::parse("spec.template").unwrap().covers(&image));
        assert!(!FieldPattern::parse("spec.template.spec.containers[0].image").unwrap().covers(&image));
        // A change above the pattern (the whole list replaced) is not covered.
        assert!(!FieldPattern::parse("spec.template.spec.containers[*].image").unwrap().covers(&FieldPath::parse("spec.template.spec.containers").unwrap()));
        let label = FieldPath::parse("metadata.labels['app.kubernetes.io/version']").unwrap();
        assert!(FieldPattern::parse("metadata.labels").unwrap().covers(&label));
        assert!(FieldPattern::parse("metadata.labels['app.kubernetes.io/version']").unwrap().covers(&label));
        assert!(!FieldPattern::parse("metadata.labels.app").unwrap().covers(&label));
        assert!(!FieldPattern::parse("spec").unwrap().covers(&FieldPath::root()));
    }

    #[test]
    fn bad_patterns_say_where() {
        for (text, says) in [
            ("", "empty"),
            (".spec", "starts with a dot"),
            ("spec..replicas", "empty key"),
            ("spec[", "unclosed"),
            ("spec[x]", "expected an index"),
            ("spec['a", "unterminated"),
            ("spec['a']x", "unexpected"),
        ] {
            let e = FieldPattern::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        assert_eq!(FieldPattern::parse("spec.template.spec.containers[*].image").unwrap().to_string(), "spec.template.spec.containers[*].image");
    }
}
