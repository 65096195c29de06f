//! Kind behaviour is reachable only through the strategy registry (ADR 0023): no source file of
//! the API server outside `src/strategy/` tests a resource's name to choose what to do.
//!
//! A *kind-name test* is a string literal naming a served resource — a built-in plural, kind or
//! API group, or a virtual resource (the reviews) — in a comparison (`== "services"`,
//! `"apps" !=`), a match pattern (`("", "pods") =>`, `"roles" | "clusterroles" =>`) or a
//! `matches!` pattern. Comments and `#[cfg(test)]` modules are ignored; a literal used as a
//! value (`create_internal(…, "namespaces", …)`, a store key, a JSON field) is not a test.
//!
//! The files in [`EXEMPT`] are not on the request path's choice of behaviour; each says why. An
//! exemption that no longer has any hit fails the test too, so the list cannot go stale.

use std::collections::BTreeSet;
use std::path::Path;

mod source_tree;

/// Files (relative to `src/`) allowed to name resources in tests, and why.
const EXEMPT: &[(&str, &str)] = &[
    (
        "discovery.rs",
        "discovery documents: the handler-served groups' resource lists, and storageVersionHash naming the stored kind (events.k8s.io Events are stored as core Events)",
    ),
    ("storage.rs", "the stored form below the registry: events.k8s.io Events share the core Events' storage (kube-apiserver's cohabitating resources)"),
    ("rbac.rs", "the RBAC authorizer reads RBAC objects (a binding's roleRef kind); which writes are checked is strategy/rbac.rs's"),
    ("rbac_bootstrap.rs", "kube-apiserver's bootstrap RBAC policy, data written at start-up, not the request path"),
    ("request.rs", "URL grammar: `namespaces/{ns}` is a path segment of every namespaced resource's URL"),
    ("connect_request.rs", "URL grammar of connect subresources (`namespaces/{ns}/…`), as in request.rs"),
];

#[test]
fn no_kind_name_test_outside_the_strategies() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let names = resource_names();
    let files = source_tree::rust_files(&src);
    let mut found = Vec::new();
    let mut exempt_hits: BTreeSet<&str> = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
        if rel.starts_with("strategy/") {
            continue;
        }
        let hits = kind_name_tests(&std::fs::read_to_string(f).unwrap(), &names);
        if let Some((file, _)) = EXEMPT.iter().find(|(e, _)| *e == rel) {
            if !hits.is_empty() {
                exempt_hits.insert(file);
            }
            continue;
        }
        found.extend(hits.into_iter().map(|(line, text)| format!("src/{rel}:{line}: {}", text.trim())));
    }
    assert!(found.is_empty(), "kind behaviour outside src/strategy/ (add a Strategy method and override it in the kind's file):\n{}", found.join("\n"));
    let stale: Vec<&str> = EXEMPT.iter().map(|(f, _)| *f).filter(|f| !exempt_hits.contains(f)).collect();
    assert!(stale.is_empty(), "exemptions with no kind-name test left (remove them): {stale:?}");
}

/// The detector finds what it is meant to, and only that.
#[test]
fn the_detector_sees_comparisons_and_patterns_not_values() {
    let names = resource_names();
    let hits = |code: &str| kind_name_tests(code, &names).len();
    assert_eq!(hits(r#"if plural == "services" { x() }"#), 1);
    assert_eq!(hits(r#"if "apps" != info.group { x() }"#), 1);
    assert_eq!(hits(r#"match (g, p) { ("", "pods") => 1, _ => 0 }"#), 1);
    assert_eq!(hits("match p {\n    \"roles\" | \"clusterroles\" => 1,\n    _ => 0,\n}"), 2);
    assert_eq!(hits(r#"let x = matches!(info.plural.as_str(), "serviceaccounts" | "secrets");"#), 2);
    assert_eq!(hits(r#"create(inner, "", "v1", "namespaces", None, body)"#), 0);
    assert_eq!(hits(r#"let key = format!("/registry/core/pods/{ns}"); // plural == "pods""#), 0);
    assert_eq!(hits(r#"if s == "status" { x() }"#), 0);
    assert_eq!(hits("#[cfg(test)]\nmod tests {\n    fn t() { assert!(p == \"pods\"); }\n}"), 0);
}

/// Every name a resource is known by: built-in plurals, kinds and groups, and the resources
/// answered by handlers.
fn resource_names() -> BTreeSet<String> {
    let mut names: BTreeSet<String> =
        ["selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews", "authorization.k8s.io", "authentication.k8s.io"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    for r in flotilla_apiserver::resources::builtin_resources() {
        names.insert(r.plural.clone());
        names.insert(r.kind.clone());
        if !r.group.is_empty() {
            names.insert(r.group.clone());
        }
    }
    names
}

/// (line, line text) of every literal of `names` used as a test in `source`.
fn kind_name_tests(source: &str, names: &BTreeSet<String>) -> Vec<(usize, String)> {
    let lexed = lex(source);
    let code = without_test_modules(&lexed.code, &lexed.skeleton);
    let mut out = Vec::new();
    for lit in &lexed.literals {
        if lit.end < lit.start + 2 || !names.contains(&source[lit.start + 1..lit.end - 1]) || code[lit.start..lit.end].trim().is_empty() {
            continue;
        }
        let line_start = code[..lit.start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = code[lit.end..].find('\n').map_or(code.len(), |i| lit.end + i);
        let (before, after) = (&code[line_start..lit.start], &code[lit.end..line_end]);
        let (b, a) = (before.trim_end(), after.trim_start());
        let compared = b.ends_with("==") || b.ends_with("!=") || a.starts_with("==") || a.starts_with("!=");
        // In a match arm's pattern: `=>` follows on the line and none comes before it.
        let pattern = a.contains("=>") && !before.contains("=>") && (!before.contains('=') || before.contains("match "));
        // `matches!(scrutinee, "a" | "b")`: after the macro's first comma.
        let in_matches = before.find("matches!(").is_some_and(|at| before[at..].contains(','));
        if compared || pattern || in_matches {
            out.push((source[..lit.start].matches('\n').count() + 1, source[line_start..line_end].to_string()));
        }
    }
    out
}

struct Lexed {
    /// The source with comments blanked (strings kept).
    code: String,
    /// The source with comments and the insides of string and char literals blanked.
    skeleton: String,
    /// Byte spans of string literals, quotes included (plain strings only).
    literals: Vec<Span>,
}

struct Span {
    start: usize,
    end: usize,
}

/// A small Rust lexer: enough to tell comments, strings, raw strings and chars apart.
fn lex(src: &str) -> Lexed {
    let b = src.as_bytes();
    let mut code = b.to_vec();
    let mut skeleton = b.to_vec();
    let mut literals = Vec::new();
    let blank = |v: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut v[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut code, i, end);
                blank(&mut skeleton, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 1;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 1;
                    }
                    j += 1;
                }
                blank(&mut code, i, j);
                blank(&mut skeleton, i, j);
                i = j;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) && (i == 0 || !is_ident(b[i - 1])) => {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                let end = src[body..].find(&close).map_or(b.len(), |n| body + n + close.len());
                blank(&mut skeleton, body, end.saturating_sub(close.len()));
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut skeleton, i + 1, end - 1);
                literals.push(Span { start: i, end });
                i = end;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\''), else a lifetime.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    src[i + 2..].find('\'').map(|n| i + 2 + n + 1)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 3)
                } else {
                    src[i + 1..].char_indices().nth(1).filter(|(_, c)| *c == '\'').map(|(n, _)| i + 1 + n + 1)
                };
                match end {
                    Some(end) => {
                        blank(&mut skeleton, i + 1, end - 1);
                        i = end;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    Lexed { code: String::from_utf8(code).unwrap(), skeleton: String::from_utf8(skeleton).unwrap(), literals }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `code` with every `#[cfg(test)]` module blanked (braces matched on `skeleton`).
fn without_test_modules(code: &str, skeleton: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let sk = skeleton.as_bytes();
    let mut from = 0;
    while let Some(at) = skeleton[from..].find("#[cfg(test)]").map(|n| from + n) {
        let Some(open) = skeleton[at..].find('{').map(|n| at + n) else { break };
        // `#[cfg(test)] mod tests;`: its file is another file.
        if skeleton[at..open].contains(';') {
            from = at + 1;
            continue;
        }
        let (mut depth, mut j) = (0usize, open);
        while j < sk.len() {
            match sk[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        for c in &mut out[at..j.min(sk.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = j.min(sk.len());
    }
    String::from_utf8(out).unwrap()
}
