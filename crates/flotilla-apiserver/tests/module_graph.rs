//! The crate's modules form layers: no module imports, directly or through others, a module
//! that imports it (docs/adr/0020-apiserver-module-layers.md).
//!
//! Each top-level module of `src/` (a file `foo.rs` together with `foo/`) is one node; an edge
//! `a -> b` is a `crate::b` path in `a`'s code (or a `super::b` at the top of `src/a.rs`;
//! `super::` in `src/a/x.rs` stays inside `a`). Comments, strings and `#[cfg(test)]` modules
//! are blanked out first. The test fails with every cycle it finds, printed `a -> b -> a`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use regex::Regex;

mod source_tree;

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn the_modules_of_src_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(graph.len() > 10, "found only {} modules under {}", graph.len(), src.display());
    let cycles = cycles(&graph);
    assert!(cycles.is_empty(), "the modules of src/ import each other in a circle:\n{}", cycles.join("\n"));
}

/// The module graph of the crate whose sources are under `src`.
fn module_graph(src: &Path) -> Graph {
    let files = source_tree::rust_files(src);
    let node_of = |f: &Path| f.strip_prefix(src).unwrap().components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
    let nodes: BTreeSet<String> = files.iter().map(|f| node_of(f)).filter(|n| n != "lib" && n != "main").collect();
    let path = Regex::new(r"\b(crate|super)::(\w+)").unwrap();
    let mut graph: Graph = nodes.iter().map(|n| (n.clone(), BTreeSet::new())).collect();
    for f in &files {
        let from = node_of(f);
        let Some(edges) = graph.get_mut(&from) else { continue };
        let top_level_file = f.parent() == Some(src);
        let code = without_test_modules(&blank_comments_and_strings(&std::fs::read_to_string(f).unwrap()));
        for c in path.captures_iter(&code) {
            let to = &c[2];
            // `super::` below `src/a/` names something inside `a`.
            if (&c[1] == "crate" || top_level_file) && to != from && nodes.contains(to) {
                edges.insert(to.to_string());
            }
        }
    }
    graph
}

/// `code` with comments, string and char literals replaced by spaces (line breaks kept).
fn blank_comments_and_strings(code: &str) -> String {
    let token = Regex::new(r#"(?s)//[^\n]*|/\*.*?\*/|b?r(#*)"|b?"(?:\\.|[^"\\])*"|b?'(?:\\.|[^'\\])'"#).unwrap();
    let mut out = String::with_capacity(code.len());
    let mut at = 0;
    while let Some(m) = token.captures_at(code, at) {
        let whole = m.get(0).unwrap();
        let end = match m.get(1) {
            // A raw string runs to the first `"` followed by as many `#`s as it opened with.
            Some(hashes) => code[whole.end()..].find(&format!("\"{}", hashes.as_str())).map_or(code.len(), |i| whole.end() + i + 1 + hashes.len()),
            None => whole.end(),
        };
        out.push_str(&code[at..whole.start()]);
        out.extend(code[whole.start()..end].chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        at = end;
    }
    out.push_str(&code[at..]);
    out
}

/// `code` (already blanked) without the bodies of `#[cfg(test)] mod name { … }`.
fn without_test_modules(code: &str) -> String {
    let test_mod = Regex::new(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{").unwrap();
    let mut out = code.to_string();
    while let Some(m) = test_mod.find(&out) {
        let mut depth = 0;
        let end = out[m.end() - 1..]
            .char_indices()
            .find_map(|(i, c)| {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                (depth == 0).then_some(m.end() - 1 + i + 1)
            })
            .unwrap_or(out.len());
        out.replace_range(m.start()..end, "");
    }
    out
}

/// One line per strongly connected component of more than one module: its shortest cycle
/// through its first module, then all its members.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for start in graph.keys() {
        if seen.contains(start) {
            continue;
        }
        let Some(cycle) = shortest_path(graph, start, start) else { continue };
        let members: BTreeSet<&String> =
            graph.keys().filter(|n| shortest_path(graph, start, n).is_some() && shortest_path(graph, n, start).is_some()).collect();
        seen.extend(members.iter().map(|n| n.to_string()));
        let names: Vec<&str> = members.iter().map(|n| n.as_str()).collect();
        out.push(format!("  {}    ({} modules: {})", cycle.join(" -> "), names.len(), names.join(", ")));
    }
    out
}

/// The shortest path of at least one edge from `from` to `to`, both ends included.
fn shortest_path(graph: &Graph, from: &str, to: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue: VecDeque<&str> = VecDeque::from([from]);
    while let Some(n) = queue.pop_front() {
        for next in &graph[n] {
            if next == to {
                let mut path = vec![to.to_string(), n.to_string()];
                let mut at = n;
                while at != from {
                    at = came_from[at];
                    path.push(at.to_string());
                }
                path.reverse();
                return Some(path);
            }
            if next != from && !came_from.contains_key(next.as_str()) {
                came_from.insert(next, n);
                queue.push_back(next);
            }
        }
    }
    None
}
