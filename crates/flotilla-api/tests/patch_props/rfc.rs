//! Where kube-apiserver's JSON and merge patch deliberately differ from the RFCs, so that
//! comparisons with an RFC implementation (the property tests here and the fuzz targets in
//! `fuzz/`) know which disagreements are by design.

use serde_json::Value;

/// How one JSON patch operation on `doc` compares with RFC 6902.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rfc6902 {
    /// Both succeed with the same result or both fail.
    Same,
    /// The server may succeed where the RFC fails.
    ServerLenient,
    /// The server may fail where the RFC succeeds.
    ServerStricter,
}

pub fn rfc6902_expectation(doc: &Value, op: &Value) -> Rfc6902 {
    let path = op.get("path").and_then(Value::as_str);
    let from = op.get("from").and_then(Value::as_str);
    let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
    let uses_from = matches!(kind, "move" | "copy");
    let pointers: Vec<&str> = path.into_iter().chain(from.filter(|_| uses_from)).collect();
    // The root: only replace (with a container) and test (with a non-null) work on the server.
    if pointers.iter().any(|p| p.is_empty()) {
        return Rfc6902::ServerStricter;
    }
    // Pointers without the leading slash, list indices with signs or leading zeros.
    let odd_index = |seg: &str| {
        let digits = seg.strip_prefix(['+', '-']).unwrap_or(seg);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && (seg != digits || (digits.len() > 1 && digits.starts_with('0')))
    };
    // `~` not followed by `0` or `1` is kept as it is.
    let odd_escape = |p: &&str| p.split('~').skip(1).any(|rest| !rest.starts_with(['0', '1']));
    if pointers.iter().any(|p| !p.starts_with('/') || p.split('/').any(odd_index) || odd_escape(p)) {
        return Rfc6902::ServerLenient;
    }
    if matches!(kind, "add" | "replace" | "test") && op.get("value").is_none() {
        return Rfc6902::ServerLenient;
    }
    let missing_member = |pointer: &str| {
        let Some((parent, key)) = pointer.rsplit_once('/') else { return false };
        let parent = if parent.is_empty() { Some(doc) } else { doc.pointer(parent) };
        let key = key.replace("~1", "/").replace("~0", "~");
        matches!(parent, Some(Value::Object(m)) if !m.contains_key(&key))
    };
    // A move into its own child: the RFC refuses it; the server removes first and then adds
    // wherever the path leads (in a list, indices have shifted).
    if kind == "move" && path.zip(from).is_some_and(|(p, f)| p.starts_with(&format!("{f}/"))) {
        return Rfc6902::ServerLenient;
    }
    let lenient = match kind {
        "test" => op["value"].is_null() && path.is_some_and(|p| doc.pointer(p).is_none_or(Value::is_null)),
        "replace" => path.is_some_and(missing_member),
        "copy" => from.is_some_and(missing_member),
        _ => false,
    };
    if lenient { Rfc6902::ServerLenient } else { Rfc6902::Same }
}

/// True when a merge patch has lists holding objects with `null` members, where the server
/// prunes those members and RFC 7386 keeps them.
pub fn merge_patch_prunes_lists(patch: &Value) -> bool {
    fn walk(v: &Value, in_list: bool) -> bool {
        match v {
            Value::Object(m) => m.values().any(|x| (in_list && x.is_null()) || walk(x, in_list)),
            Value::Array(items) => items.iter().any(|x| walk(x, true)),
            _ => false,
        }
    }
    walk(patch, false)
}
