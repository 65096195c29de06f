//! `docs/karmada-compatibility.md` stays true: its machine-readable list (section 7) names the
//! same Event reasons and feature gates as its tables, every Event reason it calls `same` or
//! `different` is one Flotilla's code records and every one it calls `missing` is not, and the
//! gates it calls implemented are the ones `--feature-gates` accepts, with Karmada's defaults.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Deserialize)]
struct Lists {
    karmada: String,
    events: Vec<Entry>,
    feature_gates: Vec<Gate>,
}

#[derive(Deserialize)]
struct Entry {
    name: String,
    status: String,
}

#[derive(Deserialize)]
struct Gate {
    name: String,
    default: bool,
    status: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn document() -> String {
    std::fs::read_to_string(repo().join("docs/karmada-compatibility.md")).expect("docs/karmada-compatibility.md")
}

/// The YAML block of section 7.
fn lists(doc: &str) -> Lists {
    let section = &doc[doc.find("## 7.").expect("a section 7")..];
    let start = section.find("```yaml\n").expect("a yaml block in section 7") + "```yaml\n".len();
    let end = start + section[start..].find("```").expect("the block's end");
    serde_saphyr::from_str(&section[start..end]).expect("section 7 parses")
}

/// The first column of the table under `heading` (up to the next heading).
fn table_names(doc: &str, heading: &str) -> BTreeSet<String> {
    let section = &doc[doc.find(heading).unwrap_or_else(|| panic!("a section {heading}"))..];
    let section = &section[heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| Reason") && !l.starts_with("| Name") && !l.starts_with("|---"))
        .map(|l| l.trim_start_matches("| ").split(" |").next().unwrap().trim().to_string())
        .collect()
}

/// Every Rust source file of the crates' `src/` folders, read whole.
fn sources() -> String {
    let mut out = String::new();
    let crates = repo().join("crates");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates).unwrap().map(|e| e.unwrap().path().join("src")).filter(|p| p.is_dir()).collect();
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

fn status_word(status: &str) -> &str {
    match status {
        "same" | "different" | "missing" => status,
        other => panic!("status {other:?} is not same, different or missing"),
    }
}

#[test]
fn the_lists_match_the_tables() {
    let doc = document();
    let lists = lists(&doc);
    assert!(lists.karmada.starts_with("v1.18"), "{}", lists.karmada);
    let events: BTreeSet<String> = lists.events.iter().map(|e| e.name.clone()).collect();
    assert_eq!(events.len(), lists.events.len(), "an Event reason listed twice");
    assert_eq!(events, table_names(&doc, "## 3. Events"));
    let gates: BTreeSet<String> = lists.feature_gates.iter().map(|g| g.name.clone()).collect();
    assert_eq!(gates, table_names(&doc, "## 4. Feature gates"));
    // Each table row's status starts with the list's word.
    for e in &lists.events {
        let row = doc.lines().find(|l| l.starts_with(&format!("| {} |", e.name))).unwrap();
        let last = row.trim_end_matches(" |").rsplit(" | ").next().unwrap();
        assert!(last.starts_with(status_word(&e.status)), "{}: the table says {last:?}, the list {}", e.name, e.status);
    }
}

#[test]
fn event_reasons_are_recorded_as_the_document_says() {
    let lists = lists(&document());
    let code = sources();
    for e in &lists.events {
        let recorded = code.contains(&format!("\"{}\"", e.name));
        match status_word(&e.status) {
            "missing" => assert!(!recorded, "{} is called missing but the code has it: update the document", e.name),
            _ => assert!(recorded, "{} is called {} but no code records it", e.name, e.status),
        }
    }
}

#[test]
fn feature_gates_are_accepted_as_the_document_says() {
    let lists = lists(&document());
    let defaults = flotilla::federation_args::FeatureGates::default();
    for g in &lists.feature_gates {
        let accepted = flotilla::federation_args::parse_feature_gates(&format!("{}=true", g.name)).is_ok();
        // A gate Flotilla implements has Karmada's default.
        let flotilla_default = match g.name.as_str() {
            "PropagateDeps" => Some(defaults.propagate_deps),
            "GracefulEviction" => Some(defaults.graceful_eviction),
            "Failover" => Some(defaults.failover),
            "StatefulFailoverInjection" => Some(defaults.stateful_failover_injection),
            "PriorityBasedScheduling" => Some(defaults.priority_based_scheduling),
            "WorkloadAffinity" => Some(defaults.workload_affinity),
            "MultiClusterService" => Some(defaults.multi_cluster_service),
            _ => None,
        };
        assert_eq!(accepted, flotilla_default.is_some(), "{}: accepted {accepted} but the test knows no default for it", g.name);
        if let Some(d) = flotilla_default {
            // A default Flotilla chose differently is called different.
            assert!(d == g.default || status_word(&g.status) == "different", "{}: Flotilla's default differs from the document's", g.name);
            assert_ne!(g.status, "missing", "{} is accepted but called missing", g.name);
        }
        if g.status == "same" {
            assert!(accepted, "{} is called same but --feature-gates refuses it", g.name);
        }
    }
}
