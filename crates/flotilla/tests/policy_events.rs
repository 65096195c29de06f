//! A propagation policy that selects nothing gets a Warning Event saying so (Karmada's policy has
//! no status to show it); a policy that selects a template does not. The controller writes a core
//! `v1` Event; `kubectl events` lists it, and it reads as an `events.k8s.io/v1` Event too (one
//! stored object, as on kube-apiserver).

mod support;

use std::time::Duration;

use support::{Flotilla, apply_yaml, get_json, kubectl, kubectls, wait_for};

#[test]
fn a_policy_selecting_nothing_is_reported() {
    // The grace runs from each policy's creation, the claimed one's too: it must outlast the
    // detector's binding of web even on a loaded machine (3 s did not, once in CI).
    let cp = Flotilla::start_with(&["--unmatched-policy-grace", "15s"]);
    let kc = &cp.kubeconfig;
    apply_yaml(
        kc,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: app, image: nginx}]}\n---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: selects-web, namespace: default}\nspec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n  placement: {clusterAffinity: {clusterNames: [member1]}}\n",
    );
    // The policy that claims its Deployment is bound first, then the one that selects nothing
    // arrives.
    wait_for("the binding of web", Duration::from_secs(60), || get_json(kc, &["-n", "default", "get", "resourcebinding", "web-deployment"]));
    apply_yaml(
        kc,
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: selects-nothing, namespace: default}\nspec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: no-such-app}]\n  placement: {clusterAffinity: {clusterNames: [member1]}}\n",
    );
    let events = |policy: &str| -> Vec<serde_json::Value> {
        let list = get_json(kc, &["-n", "default", "get", "events", "--field-selector", &format!("involvedObject.name={policy}")]).unwrap_or_default();
        list["items"].as_array().cloned().unwrap_or_default().into_iter().filter(|e| e["reason"] == "NoResourceSelected").collect()
    };
    let found = wait_for("the NoResourceSelected event", Duration::from_secs(60), || {
        let e = events("selects-nothing");
        if e.is_empty() { Err("none yet".to_string()) } else { Ok(e) }
    });
    assert_eq!(found[0]["type"], "Warning");
    assert_eq!(found[0]["involvedObject"]["kind"], "PropagationPolicy");
    assert!(found[0]["message"].as_str().unwrap().contains("no resource matches"), "{}", found[0]);
    // The policy that claimed its Deployment is not reported.
    assert!(events("selects-web").is_empty(), "{:?}", events("selects-web"));

    match kubectls().into_iter().find(|(v, _)| v == "1.33") {
        Some((_, bin)) => {
            let out = kubectl(&bin, kc, &["events", "-n", "default", "--for", "propagationpolicy/selects-nothing"]);
            assert!(out.contains("NoResourceSelected") && out.contains("no resource matches"), "{out}");
            let out =
                kubectl(&bin, kc, &["get", "events.v1.events.k8s.io", "-n", "default", "--field-selector", "regarding.name=selects-nothing", "-o", "json"]);
            let list: serde_json::Value = serde_json::from_str(&out).unwrap();
            let ev = list["items"].as_array().unwrap().iter().find(|e| e["reason"] == "NoResourceSelected").unwrap_or_else(|| panic!("{out}")).clone();
            assert_eq!(ev["apiVersion"], "events.k8s.io/v1");
            assert_eq!(ev["regarding"]["kind"], "PropagationPolicy");
            assert_eq!(ev["metadata"]["resourceVersion"], found[0]["metadata"]["resourceVersion"], "{ev}");
            assert!(ev["note"].as_str().unwrap().contains("no resource matches"), "{ev}");
        }
        None => eprintln!("SKIPPED kubectl events (kubectl 1.33 not installed)"),
    }
    drop(cp);
}
