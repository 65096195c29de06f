//! `flotilla up` SIGKILLed in the middle of propagating 500 templates to two real members
//! converges after a restart on the same data directory: every template in every member
//! exactly once, one Work and one binding per template, nothing extra.

mod support;

use std::path::Path;
use std::time::Duration;

use support::{Flotilla, apply_yaml, flotilla_cmd, get_json, unique, wait_for};

const TEMPLATES: usize = 500;

fn managed_configmaps(kubeconfig: &Path, ns: &str) -> Result<Vec<serde_json::Value>, String> {
    let list = get_json(kubeconfig, &["-n", ns, "get", "configmaps", "-l", "app=crash"])?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

#[test]
fn sigkill_mid_propagation_converges_without_duplicates() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let m1 = env.member("member1").kubeconfig.clone();
    let m2 = env.member("member2").kubeconfig.clone();
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    for (name, member) in [("crash1", &m1), ("crash2", &m2)] {
        let (ok, out) = flotilla_cmd(&["join", name, "--kubeconfig", member.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap()]);
        assert!(ok, "join {name} failed:\n{out}");
    }
    let ns = unique("crash");
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  name: all\n  namespace: {ns}\nspec:\n  resourceSelectors:\n  - apiVersion: v1\n    kind: ConfigMap\n    labelSelector:\n      matchLabels: {{app: crash}}\n  placement:\n    clusterAffinity:\n      clusterNames: [crash1, crash2]\n"
        ),
    );
    let mut docs = String::new();
    for i in 0..TEMPLATES {
        docs.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\n  namespace: {ns}\n  labels: {{app: crash}}\ndata:\n  index: \"{i}\"\n"
        ));
    }
    apply_yaml(&kc, &docs);

    // Kill it once propagation is under way but not done.
    wait_for("propagation under way", Duration::from_secs(180), || {
        let n = managed_configmaps(&m1, &ns)?.len();
        if n >= 20 { Ok(()) } else { Err(format!("{n} in member1")) }
    });
    let seen_before_kill = managed_configmaps(&m1, &ns).unwrap().len();
    let dir = cp.kill();
    eprintln!("killed with {seen_before_kill}/{TEMPLATES} ConfigMaps in member1");

    let cp = Flotilla::start_in(dir, &[]);
    let kc = cp.kubeconfig.clone();
    for member in [&m1, &m2] {
        wait_for(&format!("all {TEMPLATES} in {}", member.display()), Duration::from_secs(600), || {
            let n = managed_configmaps(member, &ns)?.len();
            if n == TEMPLATES { Ok(()) } else { Err(format!("{n} of {TEMPLATES}")) }
        });
        let items = managed_configmaps(member, &ns).unwrap();
        let mut names: Vec<&str> = items.iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TEMPLATES);
        for c in &items {
            let name = c["metadata"]["name"].as_str().unwrap();
            let index: usize = name.trim_start_matches("cm-").parse().unwrap();
            assert_eq!(c["data"]["index"], index.to_string(), "{name}");
            assert_eq!(c["metadata"]["labels"]["karmada.io/managed"], "true", "{name}");
        }
    }
    // One binding per template, one Work per template and cluster (plus the namespace's).
    let rbs = get_json(&kc, &["-n", &ns, "get", "resourcebindings"]).unwrap();
    assert_eq!(rbs["items"].as_array().unwrap().len(), TEMPLATES);
    for cluster in ["crash1", "crash2"] {
        let works = get_json(&kc, &["-n", &format!("karmada-es-{cluster}"), "get", "works"]).unwrap();
        let for_cms = works["items"].as_array().unwrap().iter().filter(|w| w["spec"]["workload"]["manifests"][0]["kind"] == "ConfigMap").count();
        assert_eq!(for_cms, TEMPLATES, "works in karmada-es-{cluster}");
    }
    for member in [&m1, &m2] {
        let _ = std::process::Command::new(support::kubectl_bin()).arg("--kubeconfig").arg(member).args(["delete", "namespace", &ns, "--wait=false"]).output();
    }
    drop(cp);
}
