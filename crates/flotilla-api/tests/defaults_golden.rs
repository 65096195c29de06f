//! Replays objects recorded from a real kube-apiserver v1.37.2 through Flotilla's defaulting.
//!
//! `tests/data/defaults-golden/inputs/<name>.json` is what a client sent;
//! `expected/<name>.json` is what kube-apiserver answered to a `?dryRun=All` create
//! (`scripts/regen-defaults-golden.sh` records them; nothing in `expected/` is hand-written).
//!
//! Each case runs [`apply_create_defaults`] the way Flotilla's API server will: after the
//! server-owned metadata is set. So before defaulting, the input gets the recorded `uid` and
//! `creationTimestamp` (the server fills both before its create strategy runs; a Job's selector
//! and labels are built from the uid) and the namespace of the request URL. Both sides are then
//! normalised:
//!
//! - `metadata.uid`, `creationTimestamp`, `resourceVersion`, `managedFields`, `generation` are
//!   dropped (the API server, not defaulting, owns them);
//! - Service fields that only an IP/port allocator produces — `clusterIP`, `clusterIPs`,
//!   `ipFamilies`, `ipFamilyPolicy`, `healthCheckNodePort`, `ports[].nodePort` — are dropped
//!   from the recording unless the input set them (ADR 0004: templates get no allocation);
//! - the deliberate or known divergences in [`DIVERGENCES`] are dropped from both sides, and the
//!   test fails if one of them stops diverging, so that list stays true.
//!
//! Refused inputs (`invalid-*`) must fail with the error kind and message the server used.
//! A second test defaults every recorded answer again and expects no change, since the server
//! itself re-applies its defaults whenever it reads an object back.

use std::fs;
use std::path::{Path, PathBuf};

use flotilla_api::defaults::quantity::{MILLI, Quantity};
use flotilla_api::defaults::{FieldErrorKind, apply_create_defaults, apply_defaults};
use serde_json::{Value, json};

/// `(case, JSON pointer, why)`: a value Flotilla deliberately or knowingly writes differently.
/// The pointer is removed from both sides before comparing.
const DIVERGENCES: &[(&str, &str, &str)] = &[(
    "pod-level-resources",
    "/spec/resources/requests",
    "creating a bare Pod with pod-level resources (PodLevelResources, beta) fills pod-level \
     requests from the containers' aggregated requests; that needs quantity arithmetic over \
     init and sidecar containers and is not implemented. Templates are never affected.",
)];

fn data_dir() -> PathBuf {
    manifest_dir().join("tests/data/defaults-golden")
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Case {
    name: String,
    input: Value,
    expected: Value,
}

fn cases() -> Vec<Case> {
    let mut names: Vec<String> = fs::read_dir(data_dir().join("inputs"))
        .expect("inputs directory")
        .map(|entry| entry.expect("directory entry").file_name().to_string_lossy().into_owned())
        .filter_map(|file| file.strip_suffix(".json").map(str::to_owned))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| Case {
            input: read_json(&data_dir().join(format!("inputs/{name}.json"))),
            expected: read_json(&data_dir().join(format!("expected/{name}.json"))),
            name,
        })
        .collect()
}

fn group_version_kind(obj: &Value) -> (String, String, String) {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().expect("kind");
    (group.to_owned(), version.to_owned(), kind.to_owned())
}

/// The input as Flotilla's API server hands it to defaulting: with the server-owned metadata
/// the recording shows.
fn with_server_metadata(input: &Value, expected: &Value) -> Value {
    let mut obj = input.clone();
    let meta = obj["metadata"].as_object_mut().expect("input metadata");
    for key in ["uid", "creationTimestamp", "namespace"] {
        if let Some(value) = expected["metadata"].get(key) {
            meta.entry(key).or_insert(value.clone());
        }
    }
    obj
}

fn normalise(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["uid", "creationTimestamp", "resourceVersion", "managedFields", "generation"] {
            meta.remove(key);
        }
    }
}

/// ADR 0004: what an allocator would add to a Service is not expected unless the input had it.
fn drop_allocated_service_fields(input: &Value, expected: &mut Value) {
    if expected["kind"] != "Service" {
        return;
    }
    let Some(spec) = expected.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    // Sent means sent with something other than Go's zero value.
    let sent = |v: &Value| !v.is_null() && v != "" && v != 0 && *v != json!([]);
    let spec_sent = &input["spec"];
    for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort"] {
        let mirrored = key == "clusterIPs" && sent(&spec_sent["clusterIP"]);
        if !sent(&spec_sent[key]) && !mirrored {
            spec.remove(key);
        }
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for (i, port) in ports.iter_mut().enumerate() {
            if !sent(&spec_sent["ports"][i]["nodePort"]) {
                port.as_object_mut().expect("port").remove("nodePort");
            }
        }
    }
}

fn remove_pointer(obj: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, key) = pointer.rsplit_once('/')?;
    match obj.pointer_mut(parent)? {
        Value::Object(map) => map.remove(key),
        Value::Array(items) => {
            let index: usize = key.parse().ok()?;
            (index < items.len()).then(|| items.remove(index))
        }
        _ => None,
    }
}

/// One line per JSON pointer where `theirs` (kube-apiserver) and `ours` differ.
fn differences(theirs: &Value, ours: &Value, pointer: &str, out: &mut Vec<String>) {
    match (theirs, ours) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (x, y) = (a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null));
                if a.contains_key(key) != b.contains_key(key) {
                    out.push(format!("  {pointer}/{key}: kube-apiserver {} | flotilla {}", show(a.get(key)), show(b.get(key))));
                } else {
                    differences(x, y, &format!("{pointer}/{key}"), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{pointer}/{i}"), out);
            }
        }
        _ if theirs != ours => out.push(format!("  {pointer}: kube-apiserver {theirs} | flotilla {ours}")),
        _ => {}
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "(absent)".to_owned(), Value::to_string)
}

fn diff(theirs: &Value, ours: &Value) -> String {
    let mut out = Vec::new();
    differences(theirs, ours, "", &mut out);
    out.join("\n")
}

#[test]
fn defaults_match_recorded_kube_apiserver() {
    let cases = cases();
    assert!(cases.len() >= 40, "expected at least 40 golden cases, found {}", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let (group, version, kind) = group_version_kind(&case.input);
        let mut actual = with_server_metadata(&case.input, &case.expected);
        let result = apply_create_defaults(&group, &version, &kind, &mut actual);

        if case.expected["kind"] == "Status" {
            match result {
                Err(e) if e.kind == FieldErrorKind::Undecodable && Some(e.status_message(&kind, &version).as_str()) == case.expected["message"].as_str() => {
                    assert_eq!(case.expected["code"], json!(400), "{}", case.name);
                }
                other => failures.push(format!("{}: expected the refusal {:?}, got {other:?}", case.name, case.expected["message"])),
            }
            continue;
        }
        if let Err(e) = result {
            failures.push(format!("{}: refused: {e}", case.name));
            continue;
        }

        let mut expected = case.expected.clone();
        normalise(&mut expected);
        normalise(&mut actual);
        drop_allocated_service_fields(&case.input, &mut expected);
        for (name, pointer, why) in DIVERGENCES.iter().filter(|(name, ..)| *name == case.name) {
            let ours = remove_pointer(&mut actual, pointer);
            let theirs = remove_pointer(&mut expected, pointer);
            if ours == theirs {
                failures.push(format!("{name}: listed divergence {pointer} ({why}) no longer diverges"));
            }
        }
        if actual != expected {
            failures.push(format!("{}: defaults differ\n{}", case.name, diff(&expected, &actual)));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n\n"));
}

#[test]
fn recorded_objects_are_already_defaulted() {
    let mut failures = Vec::new();
    for case in cases().into_iter().filter(|c| c.expected["kind"] != "Status") {
        let (group, version, kind) = group_version_kind(&case.expected);
        let mut again = case.expected.clone();
        apply_defaults(&group, &version, &kind, &mut again).expect("recorded object defaults");
        normalise(&mut again);
        let mut expected = case.expected.clone();
        normalise(&mut expected);
        if again != expected {
            failures.push(format!("{}: changed by defaulting again\n{}", case.name, diff(&expected, &again)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn quantities_match_recorded_kube_apiserver() {
    let recorded = read_json(&data_dir().join("expected/quantities.json"));
    let rows = recorded.as_array().expect("quantities.json is a list");
    assert!(rows.len() >= 50);
    for row in rows {
        let sent = match &row["input"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let parsed = Quantity::parse_json_text(&sent);
        if !row["status"].is_null() {
            assert!(parsed.is_err(), "{sent:?} should be refused: {}", row["status"]);
            continue;
        }
        let quantity = parsed.unwrap_or_else(|e| panic!("{sent:?}: {e}"));
        assert_eq!(json!(quantity.to_text()), row["quantity"], "plain quantity {sent:?}");
        let mut listed = quantity.clone();
        listed.round_up(MILLI);
        assert_eq!(json!(listed.to_text()), row["resourceList"], "resource list {sent:?}");
    }
}

#[test]
fn defaulting_twice_changes_nothing() {
    for case in cases().into_iter().filter(|c| c.expected["kind"] != "Status") {
        let (group, version, kind) = group_version_kind(&case.input);
        let mut once = with_server_metadata(&case.input, &case.expected);
        apply_create_defaults(&group, &version, &kind, &mut once).expect("defaults");
        let mut twice = once.clone();
        apply_defaults(&group, &version, &kind, &mut twice).expect("defaults again");
        assert_eq!(once, twice, "{}: {}", case.name, diff(&once, &twice));
    }
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
