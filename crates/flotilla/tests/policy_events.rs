//! A propagation policy that selects nothing gets a Warning Event saying so (Karmada's policy has
//! no status to show it); a policy that selects a template does not.

mod support;

use std::time::Duration;

use support::{Flotilla, apply_yaml, get_json, wait_for};

#[test]
fn a_policy_selecting_nothing_is_reported() {
    let cp = Flotilla::start_with(&["--unmatched-policy-grace", "1s"]);
    let kc = &cp.kubeconfig;
    apply_yaml(
        kc,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: app, image: nginx}]}\n---\napiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: selects-web, namespace: default}\nspec:\n  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n  placement: {clusterAffinity: {clusterNames: [member1]}}\n",
    );
    // The policy that claims its Deployment is bound first (so its grace cannot run out before
    // the detector gets to it), then the one that selects nothing arrives.
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
    drop(cp);
}
