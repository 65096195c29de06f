//! OverridePolicy / ClusterOverridePolicy application, as data under `tests/data/overrides/`
//! (provenance per case; the README there):
//!
//! - `image-references.yaml`: image references parsed and edited component by component;
//! - `target-clusters.yaml`: which clusters a `ClusterAffinity` picks;
//! - `scenarios/*.yaml`: a template, a cluster and policies in; the rules chosen (in order), the
//!   manifest and the Work annotations (or the error) out.

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::policy::{ClusterAffinity, ClusterOverridePolicy, ImageComponent, OverridePolicy, OverriderOperator};
use flotilla_api::overrides::{ImageRef, applicable, apply, cluster_matches};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

fn data(path: &str) -> Value {
    let path = manifest_dir().join(format!("tests/data/overrides/{path}"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn decode<T: DeserializeOwned>(v: &Value, what: &str) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what} does not decode: {e}"))
}

fn report(file: &str, total: usize, failures: Vec<String>) {
    assert!(total > 0, "{file}: no cases");
    assert!(failures.is_empty(), "{file}: {} of {total} cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn image_references() {
    let cases = data("image-references.yaml");
    let cases = cases.as_array().expect("a list");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("(unnamed)");
        let image = case["image"].as_str().expect("image");
        let parsed = ImageRef::parse(image);
        let got = match (&parsed, case.get("edit")) {
            (Err(e), _) => json!({ "error": e }),
            (Ok(r), None) => json!({
                "registry": r.registry, "repository": r.repository, "tag": r.tag, "digest": r.digest, "string": r.to_string()
            }),
            (Ok(r), Some(edit)) => {
                let mut r = r.clone();
                let component: ImageComponent = decode(&edit["component"], "component");
                let operator: OverriderOperator = decode(&edit["operator"], "operator");
                r.edit(component, operator, edit["value"].as_str().unwrap_or(""));
                json!({ "string": r.to_string() })
            }
        };
        if got != case["want"] {
            failures.push(format!("{name}: want {}, got {got}", case["want"]));
        }
    }
    report("image-references.yaml", cases.len(), failures);
}

#[test]
fn target_clusters() {
    let file = data("target-clusters.yaml");
    let fleet = &file["fleet"];
    let cases = file["cases"].as_array().expect("a list of cases");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("(unnamed)");
        let affinity: ClusterAffinity = decode(&case["affinity"], name);
        for (cluster, want) in case["clusters"].as_object().expect("clusters: name -> want") {
            let cluster: Cluster = decode(&cluster_object(&fleet[cluster], cluster), cluster);
            let got = cluster_matches(&cluster, &affinity);
            if Some(got) != want.as_bool() {
                failures.push(format!("{name}: cluster {}: want {want}, got {got}", cluster.metadata.name.unwrap_or_default()));
            }
        }
    }
    report("target-clusters.yaml", cases.len(), failures);
}

/// A Cluster object from a short description `{labels, provider, region, zones}`.
fn cluster_object(desc: &Value, name: &str) -> Value {
    let mut spec = Map::from_iter([("syncMode".to_string(), json!("Push"))]);
    for field in ["provider", "region", "zones"] {
        if let Some(v) = desc.get(field) {
            spec.insert(field.into(), v.clone());
        }
    }
    json!({
        "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster",
        "metadata": { "name": name, "labels": desc.get("labels").cloned().unwrap_or_else(|| json!({})) },
        "spec": spec,
    })
}

/// Runs every scenario of `scenarios/<file>`: the chosen rules, the manifest, the annotations
/// or the error are compared with the keys the scenario's `want` has.
fn scenarios(file: &str) {
    let cases = data(&format!("scenarios/{file}"));
    let cases = cases.as_array().expect("a list");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("(unnamed)");
        let got = run_scenario(case);
        let want = case["want"].as_object().unwrap_or_else(|| panic!("{name}: want"));
        for (key, want) in want {
            if got.get(key) != Some(want) {
                failures.push(format!(
                    "{name}: {key}:\n  want {}\n  got  {}",
                    serde_json::to_string(want).unwrap(),
                    serde_json::to_string(got.get(key).unwrap_or(&Value::Null)).unwrap()
                ));
            }
        }
    }
    report(file, cases.len(), failures);
}

fn run_scenario(case: &Value) -> Value {
    let cluster_name = case["cluster"].as_str().unwrap_or("member1");
    let cluster: Cluster = decode(&cluster_object(&case["fleet"][cluster_name], cluster_name), cluster_name);
    let list = |key: &str| case.get(key).cloned().unwrap_or_else(|| json!([]));
    let cops: Vec<ClusterOverridePolicy> = decode(&list("clusterOverridePolicies"), "clusterOverridePolicies");
    let ops: Vec<OverridePolicy> = decode(&list("overridePolicies"), "overridePolicies");
    let template = &case["template"];
    let chosen = applicable(template, &cluster, &cops, &ops);
    let chosen_names: Vec<String> = chosen.iter().map(|c| c.policy.to_string()).collect();
    let mut manifest = template.clone();
    let mut out = json!({ "chosen": chosen_names });
    match apply(&mut manifest, &chosen) {
        Ok(applied) => {
            let annotations: Map<String, Value> = applied.annotations().into_iter().map(|(k, v)| (k.to_string(), Value::String(v))).collect();
            out["annotations"] = Value::Object(annotations);
        }
        Err(e) => {
            out["error"] = json!({ "policy": e.policy.to_string(), "overrider": e.overrider.to_string(), "index": e.index, "reason": e.reason });
            out["event"] = Value::from(e.event_message(cluster_name));
        }
    }
    out["manifest"] = manifest;
    out
}

#[test]
fn karmada_samples() {
    scenarios("samples.yaml");
}

#[test]
fn image_overrider() {
    scenarios("image.yaml");
}

#[test]
fn command_and_args_overriders() {
    scenarios("command-args.yaml");
}

#[test]
fn labels_and_annotations_overriders() {
    scenarios("labels-annotations.yaml");
}

#[test]
fn field_overrider() {
    scenarios("field.yaml");
}

#[test]
fn plaintext_overrider() {
    scenarios("plaintext.yaml");
}

#[test]
fn ordering_across_policies_and_rules() {
    scenarios("ordering.yaml");
}

#[test]
fn errors_name_the_policy_and_overrider() {
    scenarios("errors.yaml");
}

/// This crate's directory, as `cargo test` reports it when running the test (the path compiled
/// in is where the binary was built, which a shared target directory may have done elsewhere).
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), std::path::PathBuf::from)
}
