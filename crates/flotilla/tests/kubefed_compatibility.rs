//! `docs/kubefed-compatibility.md` stays true: the kinds its list calls served are among the
//! CRDs `flotilla up` installs, and each per-cluster status and condition reason it calls `same`
//! is a string Flotilla's KubeFed code writes, while each it calls `missing` or `not-reported`
//! appears nowhere in that code.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Deserialize)]
struct Lists {
    kubefed: String,
    kinds: Vec<Entry>,
    statuses: Vec<Entry>,
    reasons: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    name: String,
    status: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn lists() -> Lists {
    let doc = std::fs::read_to_string(repo().join("docs/kubefed-compatibility.md")).expect("docs/kubefed-compatibility.md");
    let section = &doc[doc.find("## Machine-readable lists").expect("the lists section")..];
    let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let end = start + section[start..].find("```").expect("the block's end");
    serde_saphyr::from_str(&section[start..end]).expect("the lists parse")
}

/// The sources of KubeFed's rules and its sync controller.
fn kubefed_code() -> String {
    let mut out = String::new();
    for dir in ["crates/flotilla-api/src/federation/kubefed", "crates/flotilla-controllers/src/kubefed_sync"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn served_kinds_are_the_documented_ones() {
    let lists = lists();
    assert_eq!(lists.kubefed, "v0.10.0");
    let mut crds = flotilla_api::federation::kubefed::crds();
    crds.extend(flotilla_api::federation::kubefed::default_federated_type_crds());
    let served: Vec<String> = crds.iter().map(|c| c["spec"]["names"]["kind"].as_str().unwrap().to_string()).collect();
    for k in &lists.kinds {
        assert!(matches!(k.status.as_str(), "same" | "different" | "missing"), "{}: status {}", k.name, k.status);
        assert_eq!(served.contains(&k.name), k.status != "missing", "{} is called {}", k.name, k.status);
    }
    for s in &served {
        assert!(lists.kinds.iter().any(|k| &k.name == s), "{s} is served but the document does not list it");
    }
}

#[test]
fn statuses_and_reasons_are_written_as_the_document_says() {
    let lists = lists();
    let code = kubefed_code();
    for e in lists.statuses.iter().chain(&lists.reasons) {
        let written = code.contains(&format!("\"{}\"", e.name));
        match e.status.as_str() {
            "same" | "different" => assert!(written, "{} is called {} but the KubeFed code never writes it", e.name, e.status),
            "missing" | "not-reported" => assert!(!written, "{} is called {} but the code has it: update the document", e.name, e.status),
            other => panic!("{}: status {other:?}", e.name),
        }
    }
}
