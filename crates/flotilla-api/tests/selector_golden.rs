//! Label and field selectors replayed against answers recorded from a real kube-apiserver
//! (1.37, `scripts/regen-api-golden.sh`): for each selector the server either listed some of
//! six labelled ConfigMaps or answered 400 with a message. We must select the same objects,
//! or fail with the same message, and print a form that parses back to the same selector.

use std::collections::BTreeMap;

use flotilla_api::selector::{FieldSelector, LabelSelector};
use serde_json::Value;

fn golden() -> Value {
    let path = manifest_dir().join("tests/data/selector-golden.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn objects(g: &Value) -> Vec<(String, BTreeMap<String, String>)> {
    g["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let labels = o["labels"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect();
            (o["name"].as_str().unwrap().to_string(), labels)
        })
        .collect()
}

fn expected_names(case: &Value) -> Vec<String> {
    case["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
}

#[test]
fn label_selectors_match_the_real_server() {
    let g = golden();
    let objects = objects(&g);
    let mut failures = Vec::new();
    let cases = g["labelSelectors"].as_array().unwrap();
    assert!(cases.len() > 100);
    for case in cases {
        let input = case["selector"].as_str().unwrap();
        let parsed = LabelSelector::parse(input);
        match (case["code"].as_u64().unwrap(), parsed) {
            (200, Ok(sel)) => {
                let got: Vec<String> = objects.iter().filter(|(_, l)| sel.matches(l)).map(|(n, _)| n.clone()).collect();
                if got != expected_names(case) {
                    failures.push(format!("{input:?}: selects {got:?}, server {:?}", expected_names(case)));
                }
                let printed = sel.to_string();
                match LabelSelector::parse(&printed) {
                    Ok(again) if again == sel => {}
                    other => failures.push(format!("{input:?}: printed {printed:?} reparses as {other:?}")),
                }
            }
            (200, Err(e)) => failures.push(format!("{input:?}: server accepted, we said {e}")),
            (code, Ok(sel)) => failures.push(format!("{input:?}: server answered {code}, we parsed {sel}")),
            (code, Err(e)) => {
                let want = case["message"].as_str().unwrap();
                if code != 400 || e.to_string() != want {
                    failures.push(format!("{input:?}:\n  server {code} {want}\n  ours       {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn field_selectors_match_the_real_server() {
    let g = golden();
    let objects = objects(&g);
    let namespace = g["namespace"].as_str().unwrap();
    let mut failures = Vec::new();
    for case in g["fieldSelectors"].as_array().unwrap() {
        let input = case["selector"].as_str().unwrap();
        let code = case["code"].as_u64().unwrap();
        let message = case["message"].as_str().unwrap_or("");
        let parsed = FieldSelector::parse(input);
        // ConfigMaps support metadata.name and metadata.namespace; the server's message for
        // other fields is the API server's business, so here we only check the parse.
        let unsupported = message.contains("is not a known field selector");
        match (code, parsed) {
            (200, Ok(sel)) => {
                let got: Vec<String> = objects
                    .iter()
                    .filter(|(name, _)| {
                        sel.matches(|f| match f {
                            "metadata.name" => Some(name.clone()),
                            "metadata.namespace" => Some(namespace.to_string()),
                            _ => None,
                        })
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                if got != expected_names(case) {
                    failures.push(format!("{input:?}: selects {got:?}, server {:?}", expected_names(case)));
                }
                let printed = sel.to_string();
                if FieldSelector::parse(&printed).as_ref() != Ok(&sel) {
                    failures.push(format!("{input:?}: printed {printed:?} does not reparse equal"));
                }
            }
            (400, Ok(sel)) if unsupported => {
                let known = ["metadata.name", "metadata.namespace"];
                if sel.requirements().iter().all(|r| known.contains(&r.field.as_str())) {
                    failures.push(format!("{input:?}: server refused a field, we found none unknown"));
                }
            }
            (_, Ok(sel)) => failures.push(format!("{input:?}: server answered {code} {message}, we parsed {sel}")),
            (_, Err(e)) => {
                if code != 400 || e.to_string() != message {
                    failures.push(format!("{input:?}:\n  server {code} {message}\n  ours       {e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
