//! `flotilla cordon|uncordon` and `flotilla taint clusters` (issue 27's command-line actions,
//! as karmadactl names them) against a running control plane: the Cluster's `spec.taints`
//! change as karmadactl and kubectl change them, and bad input is refused with the reason.

mod support;

use serde_json::Value;
use support::{Flotilla, apply_yaml, flotilla_cmd, get_json};

/// The Cluster's taints as `key=value:Effect`, without those the cluster controller keeps from
/// its health (a Cluster no agent serves is not Ready).
fn taints(kc: &std::path::Path, cluster: &str) -> Vec<String> {
    let c = get_json(kc, &["get", "cluster", cluster]).unwrap();
    c["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| !matches!(t["key"].as_str(), Some("cluster.karmada.io/not-ready" | "cluster.karmada.io/unreachable")))
        .map(|t: &Value| {
            format!("{}={}:{}", t["key"].as_str().unwrap_or_default(), t["value"].as_str().unwrap_or_default(), t["effect"].as_str().unwrap_or_default())
        })
        .collect()
}

#[test]
fn cordon_uncordon_and_taint_change_the_clusters_taints() {
    let cp = Flotilla::start();
    let kc = cp.kubeconfig.clone();
    apply_yaml(&kc, "apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {name: edge-1}\nspec: {syncMode: Pull}\n");
    let flotilla = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--control-plane-kubeconfig", kc.to_str().unwrap()]);
        flotilla_cmd(&all)
    };

    let (ok, out) = flotilla(&["cordon", "edge-1"]);
    assert!(ok && out.contains("cluster/edge-1 cordoned"), "{out}");
    assert_eq!(taints(&kc, "edge-1"), ["cluster.karmada.io/unschedulable=:NoSchedule"]);
    let (ok, out) = flotilla(&["cordon", "edge-1"]);
    assert!(ok && out.contains("already cordoned"), "{out}");
    assert_eq!(taints(&kc, "edge-1").len(), 1, "cordoned once");

    let (ok, out) = flotilla(&["taint", "clusters", "edge-1", "dedicated=gpu:NoSchedule", "maintenance:NoExecute"]);
    assert!(ok && out.contains("cluster/edge-1 tainted"), "{out}");
    let c = get_json(&kc, &["get", "cluster", "edge-1"]).unwrap();
    let no_execute = c["spec"]["taints"].as_array().unwrap().iter().find(|t| t["key"] == "maintenance").unwrap().clone();
    assert!(no_execute["timeAdded"].is_string(), "admission stamps a NoExecute taint: {no_execute}");
    let (ok, out) = flotilla(&["taint", "clusters", "edge-1", "dedicated=cpu:NoSchedule"]);
    assert!(!ok && out.contains("already has dedicated taint(s) with same effect(s) and --overwrite is false"), "{out}");
    let (ok, out) = flotilla(&["taint", "clusters", "edge-1", "dedicated=cpu:NoSchedule", "--overwrite"]);
    assert!(ok, "{out}");
    assert!(taints(&kc, "edge-1").contains(&"dedicated=cpu:NoSchedule".to_string()));

    let (ok, out) = flotilla(&["uncordon", "edge-1"]);
    assert!(ok && out.contains("cluster/edge-1 uncordoned"), "{out}");
    let (ok, out) = flotilla(&["taint", "clusters", "edge-1", "dedicated-", "maintenance:NoExecute-"]);
    assert!(ok && out.contains("cluster/edge-1 untainted"), "{out}");
    assert!(taints(&kc, "edge-1").is_empty(), "{:?}", taints(&kc, "edge-1"));

    // Refused with the reason, nothing written.
    for (args, why) in [
        (vec!["taint", "clusters", "edge-1", "dedicated-"], "taint \"dedicated\" not found"),
        (vec!["taint", "clusters", "edge-1", "a=b:Sometimes"], "must be one of NoSchedule, PreferNoSchedule, NoExecute"),
        (vec!["taint", "nodes", "edge-1", "a=b:NoSchedule"], "taint works on clusters"),
        (vec!["cordon", "nowhere"], "cluster \"nowhere\" not found"),
    ] {
        let (ok, out) = flotilla(&args);
        assert!(!ok && out.contains(why), "{args:?}: {out}");
    }
}
