//! The global view (issue 25), first part: a ResourceRegistry selects pods and deployments of
//! every cluster — two simulated members of `flotilla up --demo 2` and a real kube-apiserver
//! from testenv joined beside them — and `search.karmada.io/v1alpha1` `search/cache/...`
//! answers lists of them from the control plane's cache, as karmada-search does: every object
//! annotated with its cluster, label and field selectors, pages; an object created in a member
//! appears; a member that stops answering keeps its objects, marked stale, until it is back.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::{FAST_PROBES, Flotilla, apply_yaml, get_json, has_condition, join_members, kubectl_try, sim_faults, unique, wait_cluster_ready, wait_for};

const SEARCH: &str = "/apis/search.karmada.io/v1alpha1/search/cache";
const CLUSTER: &str = "resource.karmada.io/cached-from-cluster";
const STALE: &str = "search.flotilla.io/stale-since";
const LONG: Duration = Duration::from_secs(120);

fn raw(kc: &std::path::Path, path: &str) -> Result<Value, String> {
    let (ok, out) = kubectl_try(kc, &["get", "--raw", path]);
    if !ok {
        return Err(out);
    }
    serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn clusters_of(list: &Value) -> BTreeSet<String> {
    items(list).iter().filter_map(|o| o["metadata"]["annotations"][CLUSTER].as_str().map(String::from)).collect()
}

/// "cluster/name" of each item, in the order served.
fn keys(list: &Value) -> Vec<String> {
    items(list)
        .iter()
        .map(|o| format!("{}/{}", o["metadata"]["annotations"][CLUSTER].as_str().unwrap_or("?"), o["metadata"]["name"].as_str().unwrap_or("?")))
        .collect()
}

#[test]
fn the_search_cache_serves_member_objects_of_every_cluster() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let mut args = vec!["--demo", "2"];
    args.extend_from_slice(FAST_PROBES);
    let cp = Flotilla::start_with(&args);
    let kc = cp.kubeconfig.clone();
    for m in ["member1", "member2"] {
        wait_cluster_ready(&kc, m, "True");
    }
    let joined = join_members(&env, &kc, &["member3"]);
    let member3 = joined[0].1.clone();
    let all: BTreeSet<String> = ["member1", "member2", "member3"].iter().map(|s| s.to_string()).collect();

    // A Deployment on every cluster (one pod each), and a registry of pods and deployments.
    let ns = unique("gv");
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, labels: {{app: {ns}}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {ns}}}}}
  template:
    metadata: {{labels: {{app: {ns}, tier: front}}}}
    spec: {{containers: [{{name: web, image: nginx}}]}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]
  placement:
    clusterAffinity: {{clusterNames: [member1, member2, member3]}}
    replicaScheduling: {{replicaSchedulingType: Duplicated}}
---
apiVersion: search.karmada.io/v1alpha1
kind: ResourceRegistry
metadata: {{name: {ns}}}
spec:
  targetCluster: {{clusterNames: [member1, member2, member3]}}
  resourceSelectors:
  - {{apiVersion: v1, kind: Pod}}
  - {{apiVersion: apps/v1, kind: Deployment, namespace: {ns}}}
"#
        ),
    );

    // Pods of all three clusters, each annotated with its cluster.
    let pods = wait_for("the pods of all three clusters in the cache", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods"))?;
        if clusters_of(&list) == all { Ok(list) } else { Err(list.to_string()) }
    });
    assert_eq!((pods["kind"].as_str(), pods["apiVersion"].as_str()), (Some("PodList"), Some("v1")));
    for p in items(&pods) {
        assert_eq!((p["kind"].as_str(), p["apiVersion"].as_str(), p["metadata"]["namespace"].as_str()), (Some("Pod"), Some("v1"), Some(ns.as_str())));
        assert_eq!(p["metadata"]["labels"]["app"], ns.as_str(), "{p}");
        assert!(p["metadata"].get("managedFields").is_none());
    }
    let rv = pods["metadata"]["resourceVersion"].as_str().expect("a multi-cluster resourceVersion");
    assert!(!rv.is_empty());

    // Deployments, and one by name (karmada-search answers a name with a list too).
    let deployments = raw(&kc, &format!("{SEARCH}/apis/apps/v1/namespaces/{ns}/deployments")).unwrap();
    assert_eq!((deployments["kind"].as_str(), clusters_of(&deployments)), (Some("DeploymentList"), all.clone()));
    let named = raw(&kc, &format!("{SEARCH}/apis/apps/v1/namespaces/{ns}/deployments/web")).unwrap();
    assert_eq!(items(&named).len(), 3);
    assert_eq!(raw(&kc, &format!("{SEARCH}/apis/apps/v1/namespaces/{ns}/deployments/nothing")).unwrap()["items"], serde_json::json!([]));

    // Label and field selectors over all namespaces, as kube-apiserver reads them.
    let by_label = raw(&kc, &format!("{SEARCH}/api/v1/pods?labelSelector=app%3D{ns}%2Ctier%3Dfront")).unwrap();
    assert_eq!(keys(&by_label), keys(&pods), "the label picks our pods and nothing else");
    let by_field = raw(&kc, &format!("{SEARCH}/api/v1/pods?fieldSelector=metadata.namespace%3D{ns}")).unwrap();
    assert_eq!(keys(&by_field), keys(&pods));
    let none = raw(&kc, &format!("{SEARCH}/api/v1/pods?fieldSelector=metadata.namespace%3D{ns}&labelSelector=tier%21%3Dfront")).unwrap();
    assert_eq!(items(&none).len(), 0, "{none}");

    // Pages of one, followed with `continue`, give the whole list in its order.
    let mut paged = Vec::new();
    let mut token = String::new();
    loop {
        let sep = if token.is_empty() { String::new() } else { format!("&continue={token}") };
        let page = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?limit=1{sep}")).unwrap();
        assert!(items(&page).len() <= 1);
        paged.extend(keys(&page));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    assert_eq!(paged, keys(&pods));

    // The registry says what it holds.
    wait_for("the registry Cached", LONG, || {
        let r = get_json(&kc, &["get", "resourceregistry", &ns])?;
        if has_condition(&r, "Cached", "True") && has_condition(&r, "Stale", "False") { Ok(()) } else { Err(r["status"].to_string()) }
    });

    // A pod made in the real member itself appears.
    let (ok, out) = kubectl_try(&member3, &["-n", &ns, "run", "solo", "--image=nginx", "--labels", &format!("app={ns},tier=back")]);
    assert!(ok, "{out}");
    wait_for("member3's own pod in the cache", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?labelSelector=tier%3Dback"))?;
        if keys(&list) == ["member3/solo"] { Ok(()) } else { Err(list.to_string()) }
    });

    // member2 stops answering: its pods stay, marked stale, and the registry names it.
    sim_faults(&cp, "member2", r#"{"blackhole": true}"#);
    wait_cluster_ready(&kc, "member2", "False");
    let stale = wait_for("member2's pods marked stale", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?labelSelector=tier%3Dfront"))?;
        let marked: Vec<String> = items(&list)
            .iter()
            .filter(|p| p["metadata"]["annotations"].get(STALE).is_some())
            .map(|p| p["metadata"]["annotations"][CLUSTER].as_str().unwrap_or("?").to_string())
            .collect();
        if marked == ["member2"] && clusters_of(&list) == all { Ok(list) } else { Err(list.to_string()) }
    });
    assert_eq!(items(&stale).len(), 3, "member2's pod is still listed");
    wait_for("the registry Stale naming member2", LONG, || {
        let r = get_json(&kc, &["get", "resourceregistry", &ns])?;
        let stale = r["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Stale").cloned().unwrap_or_default();
        if stale["status"] == "True" && stale["message"].as_str().is_some_and(|m| m.contains("member2")) { Ok(()) } else { Err(r["status"].to_string()) }
    });

    // Back: fresh again.
    sim_faults(&cp, "member2", r#"{"blackhole": false}"#);
    wait_cluster_ready(&kc, "member2", "True");
    wait_for("member2's pods fresh again", LONG, || {
        let list = raw(&kc, &format!("{SEARCH}/api/v1/namespaces/{ns}/pods?labelSelector=tier%3Dfront"))?;
        let fresh = items(&list).iter().all(|p| p["metadata"]["annotations"].get(STALE).is_none());
        if fresh && clusters_of(&list) == all { Ok(()) } else { Err(list.to_string()) }
    });
    wait_for("the registry no longer Stale", LONG, || {
        let r = get_json(&kc, &["get", "resourceregistry", &ns])?;
        if has_condition(&r, "Stale", "False") { Ok(()) } else { Err(r["status"].to_string()) }
    });

    // Bad requests get a Status that says what is wrong.
    for (path, says) in [
        (format!("{SEARCH}/api/v1/pods?limit=x"), "limit"),
        (format!("{SEARCH}/api/v1/pods?labelSelector=a%20in"), "unable to parse requirement"),
        (format!("{SEARCH}/api/v1/pods?continue=garbage"), "continue"),
        (format!("{SEARCH}/api/v1/namespaces/{ns}/pods/solo/log"), "subresource"),
        ("/apis/search.karmada.io/v1alpha1/search/opensearch/api/v1/pods".to_string(), "OpenSearch"),
    ] {
        let (ok, out) = kubectl_try(&kc, &["get", "--raw", &path]);
        assert!(!ok && out.contains("BadRequest") && out.contains(says), "{path}: {out}");
    }

    // The real member is shared with other tests: leave nothing behind in it.
    let (ok, out) = kubectl_try(&member3, &["delete", "namespace", &ns, "--wait=false"]);
    assert!(ok, "{out}");
}
