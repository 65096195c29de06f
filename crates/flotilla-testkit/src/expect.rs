//! How an expected state is matched against an object, and how long the kit waits for it.
//!
//! A `matches` value is a subset of the object: every key it names must be there with a
//! matching value (maps may hold more keys); a list matches a list of the same length element by
//! element; `null` matches a field that is absent, null or empty; `{$contains: text}` matches a
//! string containing `text`; `{$anyOrder: [...]}` matches a list of the same length whose
//! elements match the given ones in some order (for lists whose order the system under test does
//! not fix, such as a dependency's `requiredBy`); numbers compare by value. Everything else
//! compares equal.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

/// How long an expectation may take to come true. Generous: a scenario asserts outcomes, and a
/// loaded machine only makes them slower.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// How often an expectation is looked at again.
pub const POLL: Duration = Duration::from_millis(100);

/// `Ok` when `expected` is a subset of `actual`; otherwise where and why not.
pub fn subset(expected: &Value, actual: &Value) -> Result<(), String> {
    subset_at("", expected, actual)
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn subset_at(path: &str, expected: &Value, actual: &Value) -> Result<(), String> {
    let at = if path.is_empty() { "/" } else { path };
    match expected {
        Value::Null if is_empty(actual) => Ok(()),
        Value::Null => Err(format!("{at}: want nothing, have {actual}")),
        Value::Object(want) if want.len() == 1 && want.contains_key("$contains") => {
            let needle = want["$contains"].as_str().unwrap_or_default();
            match actual.as_str() {
                Some(s) if s.contains(needle) => Ok(()),
                _ => Err(format!("{at}: want a string containing {needle:?}, have {actual}")),
            }
        }
        Value::Object(want) if want.len() == 1 && want.contains_key("$anyOrder") => {
            let Some(want) = want["$anyOrder"].as_array() else { return Err(format!("{at}: $anyOrder takes a list")) };
            let Some(have) = actual.as_array() else { return Err(format!("{at}: want a list, have {actual}")) };
            if want.len() != have.len() {
                return Err(format!("{at}: want {} items in any order, have {}: {actual}", want.len(), have.len()));
            }
            let mut taken = vec![false; have.len()];
            if assign(path, want, have, &mut taken) { Ok(()) } else { Err(format!("{at}: want {} in any order, have {actual}", Value::Array(want.clone()))) }
        }
        Value::Object(want) => {
            let empty = serde_json::Map::new();
            // An absent map holds nothing: `{labels: {x: null}}` matches an object without labels.
            let Some(have) = actual.as_object().or(actual.is_null().then_some(&empty)) else { return Err(format!("{at}: want an object, have {actual}")) };
            for (k, v) in want {
                subset_at(&format!("{path}/{k}"), v, have.get(k).unwrap_or(&Value::Null))?;
            }
            Ok(())
        }
        Value::Array(want) => {
            let Some(have) = actual.as_array() else { return Err(format!("{at}: want a list, have {actual}")) };
            if want.len() != have.len() {
                return Err(format!("{at}: want {} items, have {}: {actual}", want.len(), have.len()));
            }
            want.iter().zip(have).enumerate().try_for_each(|(i, (w, h))| subset_at(&format!("{path}/{i}"), w, h))
        }
        Value::Number(w) => match actual.as_number() {
            Some(h) if w.as_f64() == h.as_f64() => Ok(()),
            _ => Err(format!("{at}: want {w}, have {actual}")),
        },
        w if w == actual => Ok(()),
        w => Err(format!("{at}: want {w}, have {actual}")),
    }
}

/// Whether each of `want` matches a distinct element of `have` not yet `taken` (backtracking:
/// the lists a scenario names are short).
fn assign(path: &str, want: &[Value], have: &[Value], taken: &mut [bool]) -> bool {
    let Some((first, rest)) = want.split_first() else { return true };
    for i in 0..have.len() {
        if taken[i] || subset_at(path, first, &have[i]).is_err() {
            continue;
        }
        taken[i] = true;
        if assign(path, rest, have, taken) {
            return true;
        }
        taken[i] = false;
    }
    false
}

/// `Ok` when the object's `status.conditions` has each `type` with its `status`.
pub fn conditions<'a>(want: impl IntoIterator<Item = (&'a String, &'a String)>, object: &Value) -> Result<(), String> {
    let have = object["status"]["conditions"].as_array().cloned().unwrap_or_default();
    for (t, s) in want {
        match have.iter().find(|c| c["type"] == t.as_str()) {
            Some(c) if c["status"] == s.as_str() => {}
            Some(c) => return Err(format!("condition {t}: want {s}, have {c}")),
            None => return Err(format!("no condition {t} in {}", object["status"])),
        }
    }
    Ok(())
}

/// Poll `probe` every [`POLL`] until it is `Ok`, for at most `deadline`; the error is the last
/// observation.
pub async fn eventually<T, F, Fut>(deadline: Duration, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(last) if tokio::time::Instant::now() >= end => return Err(last),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Poll `probe` every [`POLL`] for `window`: `Ok` if it held every time.
pub async fn holds<F, Fut>(window: Duration, mut probe: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        probe().await?;
        tokio::time::sleep(POLL).await;
    }
    probe().await
}

/// A duration as scenario files write it: `250ms`, `2s`, `1m` (the simulator's spelling).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    flotilla_sim::config::parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration such as 500ms, 2s or 1m"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    #[test]
    fn maps_are_subsets_lists_are_exact_null_is_nothing() {
        let d = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}}, "status": {"x": []}});
        assert!(subset(&json!({"spec": {"replicas": 2}}), &d).is_ok());
        assert!(subset(&json!({"spec": {"replicas": 2.0}}), &d).is_ok(), "numbers by value");
        assert!(subset(&json!({"spec": {"template": {"spec": {"containers": [{"image": "nginx:1.25"}]}}}}), &d).is_ok());
        assert!(subset(&json!({"spec": {"template": {"spec": {"containers": []}}}}), &d).unwrap_err().contains("want 0 items"));
        let e = subset(&json!({"spec": {"replicas": 3}}), &d).unwrap_err();
        assert_eq!(e, "/spec/replicas: want 3, have 2");
        assert!(subset(&json!({"status": {"x": null, "y": null}}), &d).is_ok(), "empty and absent are nothing");
        assert!(subset(&json!({"spec": null}), &d).is_err());
        assert!(subset(&json!({"metadata": {"labels": {"x": null}}}), &d).is_ok(), "an absent map holds nothing");
        assert!(subset(&json!({"metadata": {"labels": {"x": "y"}}}), &d).unwrap_err().starts_with("/metadata/labels/x"));
        assert!(subset(&json!({"m": {"$contains": "will not"}}), &json!({"m": "Karmada will not manage"})).is_ok());
        assert!(subset(&json!({"m": {"$contains": "x"}}), &json!({"m": 1})).is_err());
        let any = json!({"l": {"$anyOrder": [{"n": "b"}, {"n": "a"}]}});
        assert!(subset(&any, &json!({"l": [{"n": "a", "x": 1}, {"n": "b"}]})).is_ok());
        assert!(subset(&any, &json!({"l": [{"n": "b"}, {"n": "a"}]})).is_ok());
        assert!(subset(&any, &json!({"l": [{"n": "a"}, {"n": "a"}]})).is_err());
        assert!(subset(&any, &json!({"l": [{"n": "a"}, {"n": "b"}, {"n": "c"}]})).is_err());
        // A first element matching either actual one must not steal the one the second needs.
        let greedy = json!({"l": {"$anyOrder": [{}, {"n": "a"}]}});
        assert!(subset(&greedy, &json!({"l": [{"n": "a"}, {"n": "b"}]})).is_ok());
    }

    #[test]
    fn conditions_by_type() {
        let o = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Applied", "status": "False"}]}});
        let want = |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        let ok = want(&[("Ready", "True")]);
        assert!(conditions(ok.iter().map(|(a, b)| (a, b)), &o).is_ok());
        let bad = want(&[("Applied", "True")]);
        assert!(conditions(bad.iter().map(|(a, b)| (a, b)), &o).unwrap_err().contains("condition Applied"));
        let none = want(&[("Scheduled", "True")]);
        assert!(conditions(none.iter().map(|(a, b)| (a, b)), &o).unwrap_err().contains("no condition Scheduled"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("soon").is_err());
    }

    // Real time, briefly: tokio's paused clock would need its `test-util` feature, which would
    // change tokio's features for every crate of a workspace build.
    #[tokio::test]
    async fn eventually_gives_the_last_observation_at_the_deadline() {
        let tries = Arc::new(AtomicUsize::new(0));
        let t = tries.clone();
        let deadline = Duration::from_millis(350);
        let started = tokio::time::Instant::now();
        let r: Result<(), String> = eventually(deadline, || {
            let n = t.fetch_add(1, Ordering::SeqCst);
            async move { Err(format!("try {n}")) }
        })
        .await;
        let n = tries.load(Ordering::SeqCst);
        assert_eq!(r, Err(format!("try {}", n - 1)));
        assert!(started.elapsed() >= deadline && n >= 4, "{n} tries");
        let t = tries.clone();
        let r = eventually(deadline * 10, || {
            let n = t.fetch_add(1, Ordering::SeqCst);
            async move { if n % 3 == 2 { Ok(n) } else { Err(String::new()) } }
        })
        .await;
        assert!(r.is_ok());
    }

    #[tokio::test]
    async fn holds_fails_on_the_first_lapse() {
        let tries = Arc::new(AtomicUsize::new(0));
        let t = tries.clone();
        let r = holds(Duration::from_secs(2), || {
            let n = t.fetch_add(1, Ordering::SeqCst);
            async move { if n < 3 { Ok(()) } else { Err(format!("lapsed at {n}")) } }
        })
        .await;
        assert_eq!(r, Err("lapsed at 3".into()));
        assert!(holds(Duration::from_millis(250), || async { Ok(()) }).await.is_ok());
    }
}
