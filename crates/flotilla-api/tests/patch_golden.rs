//! Replays patches recorded from a real kube-apiserver (1.37, `scripts/regen-api-golden.sh`)
//! through our engines and compares with what the server answered: the patched object, or
//! the status code and message.
//!
//! Each file in `tests/data/patch-golden/` holds the object as the server stored it, the
//! patch, its content type, and the server's answer to the patch sent with `dryRun=All`.
//! Before comparing, server-set metadata (`generation`) and empty maps and lists (which the
//! server's typed round trip omits) are dropped from both sides, and our result of a JSON or
//! merge patch on a built-in kind gets the `null` handling of the server's decode into the Go
//! struct ([`decode_nulls`]).

use std::path::Path;

use flotilla_api::patch::{PatchError, PatchSchema, PatchType, apply_patch, decode_nulls, decode_patch};
use serde_json::Value;

/// Differences the server makes after patching (defaulting, dropping unknown fields), as
/// JSON pointers ignored on both sides, with the reason.
const AFTER_PATCH: &[(&str, &[&str], &str)] = &[
    ("smp-scalar-directive-map", &["/spec/replicas"], "the patch removes replicas; defaulting sets 1"),
    ("json-no-leading-slash", &["/c"], "the patch adds an unknown root field, which decoding drops"),
];

/// Cases where we deliberately differ from the server, with the reason. We must succeed.
const DIVERGES: &[(&str, &str)] = &[(
    "json-test-html-chars-stored",
    "the server compares its own JSON text, where <, > and & are escaped, so such strings never \
     test equal; we compare values",
)];

const GENERIC_422: &str = "the server rejected our request due to an error in our request";

struct Outcome {
    name: String,
    problem: Option<String>,
}

fn run_case(path: &Path) -> Outcome {
    let text = std::fs::read_to_string(path).unwrap();
    let case: Value = serde_json::from_str(&text).unwrap();
    let name = case["name"].as_str().unwrap().to_string();
    let problem = check_case(&name, &case).err();
    Outcome { name, problem }
}

fn check_case(name: &str, case: &Value) -> Result<(), String> {
    let patch_type = PatchType::from_content_type(case["contentType"].as_str().unwrap()).unwrap();
    let body: Vec<u8> = if let Some(text) = case["patchText"].as_str() {
        text.as_bytes().to_vec()
    } else if let Some(n) = case["patchRepeat"].as_u64() {
        let op = case["patch"][0].clone();
        serde_json::to_vec(&Value::Array(vec![op; n as usize])).unwrap()
    } else {
        serde_json::to_vec(&case["patch"]).unwrap()
    };
    let schema = PatchSchema::builtin().kind_for(case["apiVersion"].as_str().unwrap(), case["kind"].as_str().unwrap());
    let ours: Result<Value, PatchError> = decode_patch(patch_type, &body).and_then(|p| apply_patch(patch_type, &case["object"], &p, schema));
    let response = &case["response"];
    let code = response["code"].as_u64().unwrap() as u16;
    let message = response["message"].as_str().unwrap_or("");

    if let Some((_, why)) = DIVERGES.iter().find(|(n, _)| *n == name) {
        return ours.map(drop).map_err(|e| format!("expected success ({why}), got {e}"));
    }
    if code == 200 {
        let ours = ours.map_err(|e| format!("server patched it, we failed: {} {e}", e.code()))?;
        let ours = match schema {
            Some(s) if patch_type != PatchType::StrategicMerge => decode_nulls(ours, s),
            _ => ours,
        };
        let ignored = AFTER_PATCH.iter().find(|(n, _, _)| *n == name).map(|(_, p, _)| *p).unwrap_or(&[]);
        let want = normalize(response["object"].clone(), ignored);
        let got = normalize(ours, ignored);
        if want != got {
            return Err(format!("results differ\n server: {}\n ours:   {}", serde_json::to_string(&want).unwrap(), serde_json::to_string(&got).unwrap()));
        }
        return Ok(());
    }
    // A 422 with another message than the generic one comes from validating or decoding the
    // patched object, after the patch engine: ours must have patched.
    if code == 422 && message != GENERIC_422 {
        return ours.map(drop).map_err(|e| format!("server rejected the patched object ({message}); we failed to patch: {e}"));
    }
    match ours {
        Ok(v) => Err(format!("server answered {code} {message:?}, we patched: {v}")),
        Err(e) if e.code() != code || e.status_message() != message => {
            Err(format!("server answered {code} {message:?}, we answered {} {:?}", e.code(), e.status_message()))
        }
        Err(e) if e.reason() != response["reason"].as_str().unwrap_or("") => Err(format!("reason: server {:?}, ours {:?}", response["reason"], e.reason())),
        Err(_) => Ok(()),
    }
}

fn normalize(mut v: Value, ignored: &[&str]) -> Value {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("generation");
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    for pointer in ignored {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() { Some(&mut v) } else { v.pointer_mut(parent) };
        if let Some(Value::Object(m)) = target {
            m.remove(key);
        }
    }
    drop_empty(v)
}

/// Drops object members that are empty objects or lists, at any depth.
fn drop_empty(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, drop_empty(v)))
                .filter(|(_, v)| !matches!(v, Value::Object(o) if o.is_empty()) && !matches!(v, Value::Array(a) if a.is_empty()))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(drop_empty).collect()),
        other => other,
    }
}

#[test]
fn patches_match_the_real_server() {
    let dir = manifest_dir().join("tests/data/patch-golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 100, "expected the recorded cases in {}", dir.display());
    let failures: Vec<Outcome> = files.iter().map(|f| run_case(f)).filter(|o| o.problem.is_some()).collect();
    for f in &failures {
        eprintln!("--- {}: {}", f.name, f.problem.as_deref().unwrap_or(""));
    }
    assert!(failures.is_empty(), "{} of {} recorded cases differ", failures.len(), files.len());
}

#[test]
fn every_exception_names_a_recorded_case() {
    let dir = manifest_dir().join("tests/data/patch-golden");
    for name in AFTER_PATCH.iter().map(|(n, _, _)| *n).chain(DIVERGES.iter().map(|(n, _)| *n)) {
        assert!(dir.join(format!("{name}.json")).exists(), "{name}");
    }
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
