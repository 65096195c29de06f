//! A member in Pull mode end to end with a real member (the shared testenv's kube-apiserver):
//! `flotilla token create --print-register-command`, `flotilla register`, then `flotilla agent`
//! beside the member. The control plane is never given the member's address or a credential to
//! it. The agent registers its Cluster (syncMode Pull) and posts its status; a Deployment
//! propagated to it reaches the member through the agent running the control plane's own
//! execution and work-status code, its status comes back, drift in the member is reverted.
//! The agent SIGKILLed: its Lease lapses, the cluster goes Ready=Unknown (ClusterStatusUnknown)
//! with the unreachable taint; restarted: Ready again, the taint gone, the member's Deployment
//! the same object throughout. The agent writes no Cluster but its own Pull one; its Cluster
//! unregistered, the agent removes the member's objects and its certificate then authorizes
//! nothing. Through the agent's reverse tunnel the control plane reaches the member's API as its
//! caller (the cluster proxy, `flotilla get --clusters`, `kubectl logs` and `kubectl exec`); only
//! the cluster's own agent may open that tunnel, and only one at a time.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{Daemon, Flotilla, apply_yaml, flotilla_cmd, get_json, has_condition, kubectl, kubectl_bin, kubectl_stdin, kubectl_try, unique, wait_for};

const LONG: Duration = Duration::from_secs(120);

/// Ask for `cluster`'s tunnel as the holder of `kubeconfig` would; the refusal's code and message.
fn dial_tunnel(kubeconfig: &Path, cluster: &str) -> Result<(), (u16, String)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        match flotilla_member::tunnel::agent::dial(&client, cluster).await {
            Ok(_) => Ok(()),
            Err(flotilla_member::tunnel::agent::DialError::Refused { code, message }) => Err((code, message)),
            Err(e) => Err((0, e.to_string())),
        }
    })
}

/// `GET` a member path through the cluster proxy of `cluster`.
fn through_proxy(kubeconfig: &Path, cluster: &str, path: &str) -> Result<Value, String> {
    let (ok, out) = kubectl_try(kubeconfig, &["get", "--raw", &format!("/apis/cluster.karmada.io/v1alpha1/clusters/{cluster}/proxy{path}")]);
    if !ok {
        return Err(out);
    }
    serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))
}

fn taint_keys(cluster: &Value) -> Vec<String> {
    cluster["spec"]["taints"].as_array().into_iter().flatten().filter_map(|t| t["key"].as_str().map(str::to_string)).collect()
}

/// Register `name` with a fresh token (the printed command, as is) into `dir`; the agent's kubeconfig.
fn register(kc: &Path, dir: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let (ok, out) = flotilla_cmd(&["token", "create", "--cluster-name", name, "--print-register-command", "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "{out}");
    let command = out.lines().find(|l| l.starts_with("flotilla register ")).unwrap_or_else(|| panic!("{out}")).to_string();
    let agent_kc = dir.join(format!("{name}-agent.kubeconfig"));
    let mut args: Vec<&str> = command.split_whitespace().skip(1).collect();
    args.extend(["--out", agent_kc.to_str().unwrap()]);
    args.extend(extra);
    let (ok, out) = flotilla_cmd(&args);
    assert!(ok, "{out}");
    agent_kc
}

fn start_agent(name: &str, agent_kc: &Path, member: &Path) -> Daemon {
    start_agent_with(name, agent_kc, member, &[])
}

fn start_agent_with(name: &str, agent_kc: &Path, member: &Path, extra: &[&str]) -> Daemon {
    let mut agent = spawn_agent(name, agent_kc, member, extra);
    agent.wait_line("controllers running", Duration::from_secs(60));
    agent
}

/// The agent process, started without waiting for it to reach the control plane.
fn spawn_agent(name: &str, agent_kc: &Path, member: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "agent",
        "--cluster-name",
        name,
        "--control-plane-kubeconfig",
        agent_kc.to_str().unwrap(),
        "--kubeconfig",
        member.to_str().unwrap(),
        "--cluster-lease-duration",
        "2s",
        "--cluster-status-update-frequency",
        "500ms",
    ];
    args.extend(extra);
    Daemon::start(&args, "info")
}

/// A control plane that marks a pull cluster Unknown within seconds of its Lease lapsing.
fn lease_watching_control_plane() -> Flotilla {
    lease_watching_control_plane_in(tempfile::tempdir().unwrap())
}

/// The same, on the data of `dir` (a restart).
fn lease_watching_control_plane_in(dir: tempfile::TempDir) -> Flotilla {
    let mut flags: Vec<&str> = support::FAST_PROBES.to_vec();
    flags.extend(["--cluster-monitor-grace-period", "3s", "--cluster-startup-grace-period", "3s", "--cluster-monitor-period", "500ms"]);
    Flotilla::start_in(dir, &flags)
}

/// Wait until `name` is Ready and carries no taint.
fn wait_ready_untainted(kc: &Path, name: &str, what: &str) {
    wait_for(what, LONG, || {
        let c = get_json(kc, &["get", "cluster", name])?;
        if has_condition(&c, "Ready", "True") && taint_keys(&c).is_empty() { Ok(()) } else { Err(c["status"].to_string()) }
    });
}

#[test]
fn a_pull_member_runs_its_works_through_its_agent_and_goes_unknown_when_it_stops() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member1").kubeconfig.clone();
    let cp = lease_watching_control_plane();
    let kc = cp.kubeconfig.clone();
    let name = unique("pull");
    let ns = unique("pulled");

    // Registration: the printed command, as is.
    let agent_kc = register(&kc, cp.dir.path(), &name, &[]);

    // The agent registers the cluster and posts its status; the control plane holds nothing.
    let agent = start_agent(&name, &agent_kc, &member);
    let cluster = wait_for("the pull cluster Ready", LONG, || {
        let c = get_json(&kc, &["get", "cluster", &name])?;
        if has_condition(&c, "Ready", "True") && taint_keys(&c).is_empty() && c["status"]["kubernetesVersion"].is_string() { Ok(c) } else { Err(c.to_string()) }
    });
    assert_eq!(cluster["spec"]["syncMode"], "Pull");
    assert!(cluster["spec"]["secretRef"].is_null() && cluster["spec"]["apiEndpoint"].is_null(), "no address, no credential: {}", cluster["spec"]);
    let kube_system = get_json(&member, &["get", "namespace", "kube-system"]).unwrap();
    assert_eq!(cluster["spec"]["id"], kube_system["metadata"]["uid"], "the member's id");
    let lease = get_json(&kc, &["-n", "karmada-cluster", "get", "lease", &name]).unwrap();
    assert_eq!(lease["metadata"]["ownerReferences"][0]["name"], name.as_str(), "the Lease is the Cluster's");

    // The member's API through the agent's tunnel: this very member, as the caller.
    let seen = wait_for("kube-system through the tunnel", LONG, || through_proxy(&kc, &name, "/api/v1/namespaces/kube-system"));
    assert_eq!(seen["metadata"]["uid"], kube_system["metadata"]["uid"], "the proxy reached the agent's member");
    let whoami = through_proxy(&kc, &name, "/apis/authentication.k8s.io/v1/selfsubjectreviews");
    assert!(whoami.is_err(), "a GET of a create-only resource is refused by the member: {whoami:?}");
    // Only the cluster's own agent opens its tunnel, and one at a time.
    let (code, message) = dial_tunnel(&kc, &name).unwrap_err();
    assert_eq!(code, 403, "{message}");
    assert!(message.contains(&format!("only the agent of cluster {name}")), "{message}");
    let (code, message) = dial_tunnel(&agent_kc, &name).unwrap_err();
    assert_eq!(code, 409, "{message}");
    assert!(message.contains("a second agent claiming the same cluster is refused"), "{message}");

    // Propagation through the agent, status back, drift reverted.
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: "nginx:1.27"}}]}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]
  placement:
    clusterAffinity: {{clusterNames: [{name}]}}
"#
        ),
    );
    let deployed = wait_for("web in the pull member", LONG, || get_json(&member, &["-n", &ns, "get", "deployment", "web"]));
    assert_eq!(deployed["metadata"]["labels"]["karmada.io/managed"], "true", "{}", deployed["metadata"]);
    let uid = deployed["metadata"]["uid"].as_str().unwrap().to_string();
    wait_for("the binding's status from the pull member", LONG, || {
        let rb = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "web-deployment"])?;
        let item = &rb["status"]["aggregatedStatus"][0];
        if item["clusterName"] == name.as_str() && item["applied"] == true { Ok(()) } else { Err(rb["status"].to_string()) }
    });
    // What the agent applied and the control plane acknowledged is recorded in the member itself
    // (ADR 0032): the manifests, and the member object as of then.
    let es = format!("karmada-es-{name}");
    let applied = wait_for("the AppliedWork in the member", LONG, || {
        let list = get_json(&member, &["-n", "flotilla-edge", "get", "appliedworks"])?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let found = items.into_iter().find(|a| a["spec"]["workNamespace"] == es.as_str() && a["spec"]["manifests"][0]["metadata"]["namespace"] == ns.as_str());
        match found {
            Some(a) if a["status"]["manifests"][0]["uid"] == uid.as_str() => Ok(a),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(applied["metadata"]["labels"]["edge.flotilla.io/cluster"], name.as_str());
    assert_eq!(applied["spec"]["manifests"][0]["spec"]["replicas"], 2, "{applied}");
    assert!(applied["status"]["manifests"][0]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()), "{applied}");
    assert!(applied["status"]["acknowledgedAt"].is_string(), "{applied}");
    kubectl(&kubectl_bin(), &member, &["-n", &ns, "scale", "deployment/web", "--replicas=5"]);
    wait_for("the member's scale reverted by the agent", LONG, || {
        let d = get_json(&member, &["-n", &ns, "get", "deployment", "web"])?;
        if d["spec"]["replicas"] == 2 { Ok(()) } else { Err(d["spec"]["replicas"].to_string()) }
    });

    // The agent killed: its Lease lapses, Ready=Unknown and the unreachable taint.
    agent.kill();
    let lapsed = wait_for("Ready=Unknown after the lease lapsed", LONG, || {
        let c = get_json(&kc, &["get", "cluster", &name])?;
        if has_condition(&c, "Ready", "Unknown") && taint_keys(&c).contains(&"cluster.karmada.io/unreachable".to_string()) {
            Ok(c)
        } else {
            Err(c["status"].to_string())
        }
    });
    let ready = lapsed["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(ready["reason"], "ClusterStatusUnknown", "{ready}");
    assert_eq!(ready["message"], "Cluster status controller stopped posting cluster status.");
    let (ok, out) = kubectl_try(&kc, &["get", "--raw", &format!("/apis/cluster.karmada.io/v1alpha1/clusters/{name}/proxy/api")]);
    assert!(!ok && out.contains("has no tunnel open"), "the proxy says why it cannot reach the member: {out}");

    // Back: Ready, untainted, the member's object the same one.
    let agent = start_agent(&name, &agent_kc, &member);
    wait_ready_untainted(&kc, &name, "Ready again");
    let after = get_json(&member, &["-n", &ns, "get", "deployment", "web"]).unwrap();
    assert_eq!(after["metadata"]["uid"], uid.as_str(), "the member's Deployment was never replaced");
    assert_eq!(after["spec"]["replicas"], 2);
    let proxied =
        wait_for("the Deployment through the reopened tunnel", LONG, || through_proxy(&kc, &name, &format!("/apis/apps/v1/namespaces/{ns}/deployments/web")));
    assert_eq!(proxied["metadata"]["uid"], uid.as_str());

    // The agent's credential writes its own Pull Cluster only.
    let other = format!("apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}-other}}\nspec: {{syncMode: Pull}}\n");
    let (ok, out) = kubectl_stdin(&agent_kc, &["create", "-f", "-"], &other);
    assert!(!ok && out.contains("may write only Cluster"), "{out}");
    let (ok, out) = kubectl_try(&agent_kc, &["patch", "cluster", &name, "--type", "merge", "-p", r#"{"spec":{"syncMode":"Push"}}"#]);
    assert!(!ok && out.contains("stays in Pull mode"), "{out}");

    // Unregistered with the agent's own credential (the agent still running): the member's objects
    // are removed by the agent, and its certificate then authorizes nothing.
    let (ok, out) = flotilla_cmd(&["unregister", &name, "--control-plane-kubeconfig", agent_kc.to_str().unwrap()]);
    assert!(ok && out.contains(&format!("cluster {name} unregistered")), "unregister with the agent's own credential: {out}");
    wait_for("the Cluster gone", LONG, || support::gone(&kc, &["get", "cluster", &name]));
    wait_for("the member's Deployment removed by the agent", LONG, || support::gone(&member, &["-n", &ns, "get", "deployment", "web"]));
    let applied_name = applied["metadata"]["name"].as_str().unwrap();
    wait_for("the AppliedWork gone with its Work", LONG, || support::gone(&member, &["-n", "flotilla-edge", "get", "appliedwork", applied_name]));
    let (ok, out) = kubectl_try(&agent_kc, &["get", "works.work.karmada.io", "-n", &format!("karmada-es-{name}")]);
    assert!(!ok && out.contains("Forbidden"), "the agent's RBAC went with its Cluster: {out}");
    let (ok, out) = kubectl_try(&agent_kc, &["get", "cluster", &name]);
    assert!(!ok && out.contains("Forbidden"), "{out}");
    drop(agent);
    drop(cp);
}

/// Karmada's nginx sample over one push and two pull members, with an OverridePolicy for one of
/// the pull members: the same policy, placement, override and status for both modes.
#[test]
fn one_policy_spans_push_and_pull_members() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    if env.members.len() < 3 {
        eprintln!("SKIPPED: needs three testenv members");
        return;
    }
    let cp = Flotilla::start_with(support::FAST_PROBES);
    let kc = cp.kubeconfig.clone();
    let ns = unique("mixed");
    let push = unique("push");
    let (pull_a, pull_b) = (unique("pull"), unique("pull"));
    let m1 = env.member("member1").kubeconfig.clone();
    let m2 = env.member("member2").kubeconfig.clone();
    let m3 = env.member("member3").kubeconfig.clone();
    let (ok, out) = flotilla_cmd(&["join", &push, "--kubeconfig", m1.to_str().unwrap(), "--control-plane-kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "{out}");
    let agent_kcs: Vec<std::path::PathBuf> = [&pull_a, &pull_b].iter().map(|n| register(&kc, cp.dir.path(), n, &[])).collect();
    let agents: Vec<Daemon> = [(&pull_a, &m2), (&pull_b, &m3)].iter().zip(&agent_kcs).map(|((n, m), a)| start_agent(n, a, m)).collect();
    for c in [&push, &pull_a, &pull_b] {
        wait_for("the cluster Ready", LONG, || {
            let o = get_json(&kc, &["get", "cluster", c])?;
            if has_condition(&o, "Ready", "True") { Ok(()) } else { Err(o["status"].to_string()) }
        });
    }
    let sample = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/karmada/nginx.yaml")).unwrap();
    let deployment = sample.split("\n---\n").next().unwrap().replace("replicas: 2", "replicas: 3");
    apply_yaml(&kc, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    apply_yaml(&kc, &deployment.replace("  name: nginx\n  labels:", &format!("  name: nginx\n  namespace: {ns}\n  labels:")));
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: nginx-propagation, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: nginx}}]
  placement:
    clusterAffinity: {{clusterNames: [{push}, {pull_a}, {pull_b}]}}
    replicaScheduling:
      replicaDivisionPreference: Weighted
      replicaSchedulingType: Divided
      weightPreference:
        staticWeightList:
          - {{targetCluster: {{clusterNames: [{push}]}}, weight: 1}}
          - {{targetCluster: {{clusterNames: [{pull_a}]}}, weight: 1}}
          - {{targetCluster: {{clusterNames: [{pull_b}]}}, weight: 1}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata: {{name: nginx-mirror, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: nginx}}]
  overrideRules:
    - targetCluster: {{clusterNames: [{pull_a}]}}
      overriders:
        imageOverrider: [{{component: Registry, operator: replace, value: mirror.example.com}}]
"#
        ),
    );
    for (member, image) in [(&m1, "nginx"), (&m2, "mirror.example.com/nginx"), (&m3, "nginx")] {
        let d = wait_for("nginx in each member", LONG, || {
            let d = get_json(member, &["-n", &ns, "get", "deployment", "nginx"])?;
            if d["spec"]["template"]["spec"]["containers"][0]["image"] == image { Ok(d) } else { Err(d["spec"].to_string()) }
        });
        assert_eq!(d["spec"]["replicas"], 1, "one replica each: {}", d["spec"]);
    }
    wait_for("status from all three", LONG, || {
        let rb = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "nginx-deployment"])?;
        let items = rb["status"]["aggregatedStatus"].as_array().cloned().unwrap_or_default();
        let applied: Vec<&str> = items.iter().filter(|i| i["applied"] == true).filter_map(|i| i["clusterName"].as_str()).collect();
        if applied.len() == 3 { Ok(()) } else { Err(rb["status"].to_string()) }
    });

    // One view: each member's pods through the cluster proxy, pull ones through their tunnels.
    for c in [&push, &pull_a, &pull_b] {
        wait_for("the member's nginx pod through the proxy", LONG, || {
            let pods = through_proxy(&kc, c, &format!("/api/v1/namespaces/{ns}/pods"))?;
            let names: Vec<&str> = pods["items"].as_array().into_iter().flatten().filter_map(|p| p["metadata"]["name"].as_str()).collect();
            if names.iter().any(|n| n.starts_with("nginx-")) { Ok(()) } else { Err(pods.to_string()) }
        });
    }
    let (ok, out) = flotilla_cmd(&["get", "pods", "-n", &ns, "--clusters", "all", "--kubeconfig", kc.to_str().unwrap()]);
    assert!(ok, "{out}");
    for c in [&push, &pull_a, &pull_b] {
        assert!(out.lines().any(|l| l.starts_with(c.as_str()) && l.contains("nginx-")), "{c} in `flotilla get pods --clusters all`:\n{out}");
    }
    // The global view caches pull members too, through their tunnels.
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: search.karmada.io/v1alpha1\nkind: ResourceRegistry\nmetadata: {{name: {ns}}}\nspec:\n  targetCluster: {{clusterNames: [{push}, {pull_a}, {pull_b}]}}\n  resourceSelectors: [{{apiVersion: v1, kind: Pod, namespace: {ns}}}]\n"
        ),
    );
    wait_for("every member's nginx pod in the global view", LONG, || {
        let (ok, out) = kubectl_try(&kc, &["get", "--raw", &format!("/apis/search.karmada.io/v1alpha1/search/cache/api/v1/namespaces/{ns}/pods")]);
        let list: Value = if ok { serde_json::from_str(&out).map_err(|e| e.to_string())? } else { return Err(out) };
        let mut clusters: Vec<&str> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("nginx-")))
            .filter_map(|p| p["metadata"]["annotations"]["resource.karmada.io/cached-from-cluster"].as_str())
            .collect();
        clusters.sort();
        let mut want = vec![push.as_str(), pull_a.as_str(), pull_b.as_str()];
        want.sort();
        if clusters == want { Ok(()) } else { Err(list.to_string()) }
    });
    // Logs and exec of a member pod through the cluster proxy (a kubeconfig whose server is the
    // proxy path, as Karmada documents it): push directly, pull through the tunnel; kubectl 1.33
    // execs over WebSocket, the oldest kubectl over SPDY.
    let admin_text = std::fs::read_to_string(&kc).unwrap();
    let server = admin_text.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
    let oldest = support::kubectls().first().map(|(_, p)| p.clone()).unwrap();
    for c in [&push, &pull_a, &pull_b] {
        let proxied = cp.dir.path().join(format!("{c}-proxied.kubeconfig"));
        let through = format!("server: {server}/apis/cluster.karmada.io/v1alpha1/clusters/{c}/proxy");
        std::fs::write(&proxied, admin_text.replace(&format!("server: {server}"), &through)).unwrap();
        let (pod, logs) = wait_for("a Running nginx pod's logs through the proxy", LONG, || {
            let pods = through_proxy(&kc, c, &format!("/api/v1/namespaces/{ns}/pods"))?;
            let pod = pods["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["status"]["phase"] == "Running")
                .and_then(|p| p["metadata"]["name"].as_str())
                .ok_or_else(|| pods.to_string())?
                .to_string();
            let (ok, logs) = kubectl_try(&proxied, &["-n", &ns, "logs", &pod]);
            if ok { Ok((pod, logs)) } else { Err(logs) }
        });
        assert!(logs.contains(&pod), "{c}: the member's logs of {pod}: {logs}");
        let (ok, out) = kubectl_try(&proxied, &["-n", &ns, "exec", &pod, "--", "echo", "hello", c]);
        assert!(ok && out.trim() == format!("hello {c}"), "{c}: exec over WebSocket: {out}");
        let (ok, out) = kubectl_stdin(&proxied, &["-n", &ns, "exec", "-i", &pod, "--", "cat"], "piped through\n");
        assert!(ok && out.trim() == "piped through", "{c}: stdin through the proxy: {out}");
        let (code, err) = support::kubectl_fails(&oldest, &proxied, &["-n", &ns, "exec", &pod, "--", "sh", "-c", "echo spdy; exit 3"]);
        assert_eq!(code, 3, "{c}: the exit code over SPDY: {err}");
        // Flotilla's own verbs, as karmadactl's: logs and exec with --cluster.
        let kcs = kc.to_str().unwrap();
        let (ok, out) = flotilla_cmd(&["logs", "--cluster", c, "-n", &ns, &pod, "--kubeconfig", kcs]);
        assert!(ok && out.contains(&pod), "{c}: flotilla logs: {out}");
        let (ok, out) = flotilla_cmd(&["exec", "--cluster", c, "-n", &ns, &pod, "--kubeconfig", kcs, "--", "echo", "hello", c]);
        assert!(ok && out.trim() == format!("hello {c}"), "{c}: flotilla exec: {out}");
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["exec", "--cluster", c, "-n", &ns, &pod, "--kubeconfig", kcs, "--", "sh", "-c", "exit 3"])
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(3), "{c}: flotilla exec exits with the command's code");
    }
    // Agent A's credential cannot open agent B's tunnel.
    let (code, message) = dial_tunnel(&agent_kcs[0], &pull_b).unwrap_err();
    assert_eq!(code, 403, "{message}");
    drop(agents);
    drop(cp);
}

/// The agent renews its certificate before it expires: a new key, a request the control plane
/// approves for the agent itself (selfclusteragent), the kubeconfig replaced, the cluster Ready.
#[test]
fn the_agent_renews_its_certificate() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member1").kubeconfig.clone();
    let cp = Flotilla::start_with(support::FAST_PROBES);
    let kc = cp.kubeconfig.clone();
    let name = unique("renew");
    let agent_kc = register(&kc, cp.dir.path(), &name, &["--cert-expiration-seconds", "600"]);
    let before = std::fs::read_to_string(&agent_kc).unwrap();
    // Past its rotation point from the start (the certificate is backdated five minutes).
    let mut agent = Daemon::start(
        &[
            "agent",
            "--cluster-name",
            &name,
            "--control-plane-kubeconfig",
            agent_kc.to_str().unwrap(),
            "--kubeconfig",
            member.to_str().unwrap(),
            "--cluster-status-update-frequency",
            "500ms",
            "--certificate-rotation-fraction",
            "0.01",
        ],
        "info",
    );
    agent.wait_line("restarting with the renewed certificate", LONG);
    let after = std::fs::read_to_string(&agent_kc).unwrap();
    assert_ne!(before, after, "the kubeconfig holds a new certificate and key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&agent_kc).unwrap().permissions().mode() & 0o777, 0o600);
    let (ok, out) = kubectl_try(&agent_kc, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert!(ok && out.trim() == format!("system:karmada:agent:{name}"), "{out}");
    let csrs = get_json(&kc, &["get", "csr"]).unwrap();
    let renewal = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["spec"]["username"] == format!("system:karmada:agent:{name}").as_str())
        .unwrap_or_else(|| panic!("a request made by the agent itself: {csrs}"))
        .clone();
    assert_eq!(renewal["status"]["conditions"][0]["message"], "Auto approving self karmada agent certificate after SubjectAccessReview.");
    assert!(renewal["status"]["certificate"].is_string());
    agent.wait_line("controllers running", LONG);
    wait_for("Ready on the renewed certificate", LONG, || {
        let c = get_json(&kc, &["get", "cluster", &name])?;
        if has_condition(&c, "Ready", "True") { Ok(()) } else { Err(c["status"].to_string()) }
    });
    drop(agent);
    drop(cp);
}

/// After downtime the agent never replays a deletion blindly (karmada#5406): while the pull
/// cluster is away, a Work whose template is deleted leaves a tombstone and goes; back, the agent
/// removes that Work's member object, and keeps — and reports — one whose Work vanished without
/// a tombstone.
#[test]
fn deletions_made_while_a_pull_cluster_is_away_follow_tombstones() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member1").kubeconfig.clone();
    let cp = lease_watching_control_plane();
    let kc = cp.kubeconfig.clone();
    let name = unique("away");
    let ns = unique("tomb");
    let es = format!("karmada-es-{name}");
    let agent_kc = register(&kc, cp.dir.path(), &name, &[]);
    let agent = start_agent_with(&name, &agent_kc, &member, &["--tombstone-sweep-interval", "1s"]);
    wait_cluster(&kc, &name, "True");
    let deployment = |d: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {d}, namespace: {ns}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {d}}}}}\n  template:\n    metadata: {{labels: {{app: {d}}}}}\n    spec: {{containers: [{{name: c, image: nginx}}]}}\n"
        )
    };
    apply_yaml(&kc, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    for d in ["gone", "kept"] {
        apply_yaml(&kc, &deployment(d));
    }
    apply_yaml(
        &kc,
        &format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: both, namespace: {ns}}}\nspec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment}}]\n  placement:\n    clusterAffinity: {{clusterNames: [{name}]}}\n"
        ),
    );
    let uid = |d: &str| {
        let o = wait_for("the Deployment in the pull member", LONG, || get_json(&member, &["-n", &ns, "get", "deployment", d]));
        o["metadata"]["uid"].as_str().unwrap().to_string()
    };
    let kept_uid = uid("kept");
    uid("gone");
    let work_of = |d: &str| {
        wait_for("the binding's Work", LONG, || {
            let works = get_json(&kc, &["-n", &es, "get", "works", "-o", "json"])?;
            works["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|w| w["metadata"]["annotations"]["resourcebinding.karmada.io/name"] == format!("{d}-deployment").as_str())
                .and_then(|w| w["metadata"]["name"].as_str().map(String::from))
                .ok_or_else(|| works.to_string())
        })
    };
    let (gone_work, kept_work) = (work_of("gone"), work_of("kept"));

    // Away: both templates deleted. Each Work leaves a tombstone and goes without its agent.
    agent.kill();
    wait_cluster(&kc, &name, "Unknown");
    for d in ["gone", "kept"] {
        kubectl(&kubectl_bin(), &kc, &["-n", &ns, "delete", "deployment", d]);
    }
    for w in [&gone_work, &kept_work] {
        let t = wait_for("a tombstone of the Work", LONG, || get_json(&kc, &["-n", &es, "get", "worktombstones.work.flotilla.io", w]));
        assert_eq!(t["spec"]["reason"], "BindingDeleted", "{t}");
        assert!(t["spec"]["workPermanentId"].is_string() && t["spec"]["deletedAt"].is_string(), "{t}");
        assert_eq!(t["spec"]["manifests"][0]["kind"], "Deployment", "{t}");
        wait_for("the Work gone without its agent", LONG, || support::gone(&kc, &["-n", &es, "get", "work", w]));
    }
    // One tombstone is lost: that Work vanished with nothing to say it went on purpose.
    kubectl(&kubectl_bin(), &kc, &["-n", &es, "delete", "worktombstones.work.flotilla.io", &kept_work]);

    // Back: the tombstoned object is removed, the other kept and reported.
    let agent = start_agent_with(&name, &agent_kc, &member, &["--tombstone-sweep-interval", "1s"]);
    wait_cluster(&kc, &name, "True");
    wait_for("the tombstoned Deployment removed", LONG, || support::gone(&member, &["-n", &ns, "get", "deployment", "gone"]));
    wait_for("the tombstone cleared", LONG, || support::gone(&kc, &["-n", &es, "get", "worktombstones.work.flotilla.io", &gone_work]));
    let cluster = wait_for("the OrphanedObjects condition", LONG, || {
        let c = get_json(&kc, &["get", "cluster", &name])?;
        if has_condition(&c, "OrphanedObjects", "True") { Ok(c) } else { Err(c["status"].to_string()) }
    });
    let condition = cluster["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "OrphanedObjects").unwrap().clone();
    assert!(condition["message"].as_str().unwrap().contains(&format!("Deployment {ns}/kept")), "{condition}");
    let kept = get_json(&member, &["-n", &ns, "get", "deployment", "kept"]).unwrap();
    assert_eq!(kept["metadata"]["uid"], kept_uid.as_str(), "kept, the same object");
    let events = get_json(&kc, &["get", "events", "-A", "--field-selector", &format!("involvedObject.name={name}")]).unwrap();
    let reasons: Vec<&str> = events["items"].as_array().unwrap().iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.contains(&"OrphanKept") && reasons.contains(&"RemovedByTombstone") && reasons.contains(&"WorkTombstoned"), "{reasons:?}");
    // The kept object is the member's to delete: the agent leaves it alone.
    kubectl(&kubectl_bin(), &member, &["-n", &ns, "delete", "deployment", "kept"]);
    drop(agent);
    drop(cp);
}

fn wait_cluster(kc: &Path, name: &str, ready: &str) {
    wait_for("the cluster's Ready condition", LONG, || {
        let c = get_json(kc, &["get", "cluster", name])?;
        if has_condition(&c, "Ready", ready) { Ok(()) } else { Err(c["status"].to_string()) }
    });
}

/// A TCP relay the test controls between an agent and the control plane: cut (every connection
/// dropped, new ones refused at once) and restored, pointed at a restarted control plane.
struct Relay {
    addr: std::net::SocketAddr,
    target: std::sync::Arc<parking_lot::Mutex<std::net::SocketAddr>>,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<parking_lot::Mutex<Vec<std::net::TcpStream>>>,
}

impl Relay {
    fn start(target: std::net::SocketAddr) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            target: std::sync::Arc::new(parking_lot::Mutex::new(target)),
            cut: Default::default(),
            open: Default::default(),
        };
        let (target, cut, open) = (relay.target.clone(), relay.cut.clone(), relay.open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: the agent sees the connection reset
                }
                let Ok(upstream) = std::net::TcpStream::connect(*target.lock()) else { continue };
                let ends = [client.try_clone().unwrap(), upstream.try_clone().unwrap()];
                open.lock().extend([client.try_clone().unwrap(), upstream.try_clone().unwrap()]);
                for (mut from, mut to) in [(client.try_clone().unwrap(), upstream.try_clone().unwrap()), (upstream, client)] {
                    let ends = [ends[0].try_clone().unwrap(), ends[1].try_clone().unwrap()];
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        for e in ends {
                            let _ = e.shutdown(std::net::Shutdown::Both);
                        }
                    });
                }
            }
        });
        relay
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.open.lock().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn restore(&self, target: Option<std::net::SocketAddr>) {
        if let Some(t) = target {
            *self.target.lock() = t;
        }
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

fn server_addr(cp: &Flotilla) -> std::net::SocketAddr {
    cp.server.trim_start_matches("https://").parse().unwrap_or_else(|e| panic!("{}: {e}", cp.server))
}

/// Faults with real processes: the connection between agent and control plane cut by a relay the
/// test controls, then the control plane restarted. The agent dials again with backoff; the
/// cluster goes Ready=Unknown with the unreachable taint while cut and recovers; the member's
/// Deployment is the same object at the same generation throughout (no replica churn, nothing
/// applied twice), the tunnel serves again, and a template created after the restart arrives.
#[test]
fn the_agent_rides_out_a_cut_connection_and_a_control_plane_restart() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member2").kubeconfig.clone();
    let cp = lease_watching_control_plane();
    let kc = cp.kubeconfig.clone();
    let name = unique("cut");
    let ns = unique("faults");
    let agent_kc = register(&kc, cp.dir.path(), &name, &[]);
    let relay = Relay::start(server_addr(&cp));
    let text = std::fs::read_to_string(&agent_kc).unwrap();
    std::fs::write(&agent_kc, text.replace(&cp.server, &format!("https://{}", relay.addr))).unwrap();
    let _agent =
        start_agent_with(&name, &agent_kc, &member, &["--tunnel-max-backoff", "1s", "--tunnel-keepalive-interval", "1s", "--tunnel-keepalive-timeout", "2s"]);
    wait_cluster(&kc, &name, "True");
    let web = |d: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {d}, namespace: {ns}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: {d}}}}}\n  template:\n    metadata: {{labels: {{app: {d}}}}}\n    spec: {{containers: [{{name: c, image: nginx}}]}}\n"
        )
    };
    let policy = format!(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: all, namespace: {ns}}}\nspec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment}}]\n  placement:\n    clusterAffinity: {{clusterNames: [{name}]}}\n"
    );
    apply_yaml(&kc, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"));
    apply_yaml(&kc, &web("web"));
    apply_yaml(&kc, &policy);
    let before = wait_for("web in the member", LONG, || get_json(&member, &["-n", &ns, "get", "deployment", "web"]));
    let same = |what: &str| {
        let now = get_json(&member, &["-n", &ns, "get", "deployment", "web"]).unwrap();
        assert_eq!(now["metadata"]["uid"], before["metadata"]["uid"], "{what}: the same object");
        assert_eq!(now["metadata"]["generation"], before["metadata"]["generation"], "{what}: never re-applied with another spec");
        assert_eq!(now["spec"]["replicas"], 2, "{what}");
    };
    let tunnel_serves = |what: &str| {
        wait_for(what, LONG, || through_proxy(&kc, &name, &format!("/apis/apps/v1/namespaces/{ns}/deployments/web")));
    };
    tunnel_serves("the tunnel before the cut");

    // Cut: the Lease lapses, Unknown and tainted; the proxy says why.
    relay.cut();
    let c = wait_for("Ready=Unknown with the unreachable taint", LONG, || {
        let c = get_json(&kc, &["get", "cluster", &name])?;
        if has_condition(&c, "Ready", "Unknown") && taint_keys(&c).contains(&"cluster.karmada.io/unreachable".to_string()) {
            Ok(c)
        } else {
            Err(c["status"].to_string())
        }
    });
    assert_eq!(c["spec"]["syncMode"], "Pull");
    wait_for("the proxy reports the tunnel gone", LONG, || match through_proxy(&kc, &name, "/api") {
        Err(e) if e.contains("no tunnel open") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    same("while cut");

    // Restored: the agent dials again, Ready and untainted, the tunnel serves.
    relay.restore(None);
    wait_ready_untainted(&kc, &name, "Ready and untainted after the cut");
    tunnel_serves("the tunnel after the cut");
    same("after the cut");

    // The control plane restarted on its data (another port, the relay follows it).
    let cp = lease_watching_control_plane_in(cp.stop());
    let kc = cp.kubeconfig.clone();
    relay.restore(Some(server_addr(&cp)));
    wait_ready_untainted(&kc, &name, "Ready after the restart");
    wait_for("the tunnel after the restart", LONG, || through_proxy(&kc, &name, &format!("/apis/apps/v1/namespaces/{ns}/deployments/web")));
    apply_yaml(&kc, &web("after"));
    wait_for("a template created after the restart in the member", LONG, || get_json(&member, &["-n", &ns, "get", "deployment", "after"]));
    same("after the restart");
    drop(cp);
}

/// The EdgeChange records of objects in `ns` (ADR 0032): the member's (in `flotilla-edge`), or
/// the control plane's copies (in the cluster's execution space).
fn edge_changes(kubeconfig: &Path, ns: &str) -> Vec<Value> {
    let list = get_json(kubeconfig, &["get", "edgechanges", "-A"]).unwrap_or_default();
    list["items"].as_array().cloned().unwrap_or_default().into_iter().filter(|c| c["spec"]["object"]["namespace"] == ns).collect()
}

fn change_of<'a>(changes: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    changes.iter().find(|c| c["spec"]["object"]["kind"] == kind && c["spec"]["object"]["name"] == name)
}

#[test]
fn changes_made_at_the_edge_while_offline_are_recorded_there_even_by_an_agent_restarted_offline() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member3").kubeconfig.clone();
    let cp = lease_watching_control_plane();
    let kc = cp.kubeconfig.clone();
    let name = unique("edge");
    let ns = unique("edgy");
    let agent_kc = register(&kc, cp.dir.path(), &name, &[]);
    let relay = Relay::start(server_addr(&cp));
    let text = std::fs::read_to_string(&agent_kc).unwrap();
    std::fs::write(&agent_kc, text.replace(&cp.server, &format!("https://{}", relay.addr))).unwrap();
    let flags = ["--tunnel-max-backoff", "1s", "--edge-offline-after", "2s", "--edge-record-interval", "1s"];
    let agent = start_agent_with(&name, &agent_kc, &member, &flags);
    wait_cluster(&kc, &name, "True");
    apply_yaml(
        &kc,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: c, image: "nginx:1.27"}}]}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{mode: cloud}}
---
apiVersion: v1
kind: Secret
metadata: {{name: creds, namespace: {ns}}}
data: {{password: c2VjcmV0LXZhbHVl}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: edge, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}, {{apiVersion: v1, kind: ConfigMap, name: settings}}, {{apiVersion: v1, kind: Secret, name: creds}}]
  placement:
    clusterAffinity: {{clusterNames: [{name}]}}
"#
        ),
    );
    let es = format!("karmada-es-{name}");
    // The three objects applied and acknowledged: their AppliedWorks in the member are the base.
    let applied = wait_for("the AppliedWorks acknowledged", LONG, || {
        let list = get_json(&member, &["-n", "flotilla-edge", "get", "appliedworks"])?;
        let acked: Vec<Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["spec"]["workNamespace"] == es.as_str() && a["spec"]["manifests"][0]["metadata"]["namespace"] == ns.as_str())
            .filter(|a| a["status"]["manifests"][0]["uid"].as_str().is_some_and(|u| !u.is_empty()))
            .cloned()
            .collect();
        if acked.len() == 3 { Ok(acked) } else { Err(format!("{} of 3", acked.len())) }
    });
    // A Secret's value is not copied into the records, only its digest.
    let secret = applied.iter().find(|a| a["spec"]["manifests"][0]["kind"] == "Secret").unwrap();
    assert!(!secret.to_string().contains("c2VjcmV0LXZhbHVl"), "{secret}");
    assert!(secret["spec"]["manifests"][0]["data"]["password"].as_str().is_some_and(|d| d.starts_with("sha256:")), "{secret}");
    let web_uid = get_json(&member, &["-n", &ns, "get", "deployment", "web"]).unwrap()["metadata"]["uid"].clone();

    // Offline: the edge scales, re-images and reconfigures; nothing is reverted, all is recorded.
    relay.cut();
    let bin = kubectl_bin();
    kubectl(&bin, &member, &["-n", &ns, "scale", "deployment/web", "--replicas=5"]);
    kubectl(&bin, &member, &["-n", &ns, "set", "image", "deployment/web", "c=nginx:1.28"]);
    kubectl(&bin, &member, &["-n", &ns, "patch", "configmap", "settings", "--type", "merge", "-p", r#"{"data":{"mode":"edge"}}"#]);
    let changes = wait_for("the edge's changes recorded", LONG, || {
        let all = edge_changes(&member, &ns);
        let web = change_of(&all, "Deployment", "web").map(|c| c["spec"]["fields"].as_array().map_or(0, Vec::len)).unwrap_or(0);
        let cm = change_of(&all, "ConfigMap", "settings").is_some();
        if web == 2 && cm { Ok(all) } else { Err(format!("{all:?}")) }
    });
    let web = change_of(&changes, "Deployment", "web").unwrap();
    assert_eq!(web["spec"]["change"], "Modified");
    assert_eq!(web["spec"]["cluster"], name.as_str());
    assert_eq!(web["spec"]["object"]["uid"], web_uid);
    let fields = web["spec"]["fields"].as_array().unwrap();
    assert_eq!(
        (fields[0]["path"].as_str(), &fields[0]["old"], &fields[0]["new"]),
        (Some("spec.replicas"), &serde_json::json!(2), &serde_json::json!(5)),
        "{web}"
    );
    assert_eq!(fields[1]["path"], "spec.template.spec.containers[0].image");
    assert_eq!((&fields[1]["old"], &fields[1]["new"]), (&serde_json::json!("nginx:1.27"), &serde_json::json!("nginx:1.28")));
    assert!(web["spec"]["manager"].as_str().is_some_and(|m| m.starts_with("kubectl")), "who changed it: {web}");
    let cm = change_of(&changes, "ConfigMap", "settings").unwrap();
    assert_eq!(cm["spec"]["fields"][0]["path"], "data.mode", "{cm}");
    assert_eq!(cm["spec"]["fields"][0]["new"], "edge");
    let now = get_json(&member, &["-n", &ns, "get", "deployment", "web"]).unwrap();
    assert_eq!(now["spec"]["replicas"], 5, "nothing is reverted while offline");

    // The agent restarted while still offline: it cannot register, but it records from the
    // AppliedWorks it finds in the member — here, a deletion at the edge.
    agent.kill();
    let mut agent = spawn_agent(&name, &agent_kc, &member, &flags);
    kubectl(&bin, &member, &["-n", &ns, "delete", "configmap", "settings"]);
    wait_for("the deletion recorded by the restarted agent", LONG, || {
        let all = edge_changes(&member, &ns);
        match change_of(&all, "ConfigMap", "settings") {
            Some(c) if c["spec"]["change"] == "Deleted" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let web_again = change_of(&edge_changes(&member, &ns), "Deployment", "web").cloned().unwrap();
    assert_eq!(web_again["spec"]["firstSeen"], web["spec"]["firstSeen"], "the earlier record kept");

    // Back online, under the default policy (ControlPlaneWins): the records are handed to the
    // control plane, decided there — reverted, and said so — and released in the member.
    relay.restore(None);
    agent.wait_line("controllers running", LONG);
    wait_ready_untainted(&kc, &name, "Ready after the outage");
    wait_for("the scale reverted once back", LONG, || {
        let d = get_json(&member, &["-n", &ns, "get", "deployment", "web"])?;
        if d["spec"]["replicas"] == 2 { Ok(()) } else { Err(d["spec"]["replicas"].to_string()) }
    });
    wait_for("the ConfigMap re-created once back", LONG, || get_json(&member, &["-n", &ns, "get", "configmap", "settings"]));
    let decided = wait_for("the records decided on the control plane", LONG, || {
        let all = edge_changes(&kc, &ns);
        let on_cp = |k: &str, n: &str| change_of(&all, k, n).is_some_and(|c| c["status"]["phase"] == "Decided");
        if on_cp("Deployment", "web") && on_cp("ConfigMap", "settings") { Ok(all) } else { Err(format!("{all:?}")) }
    });
    let web = change_of(&decided, "Deployment", "web").unwrap();
    assert_eq!(web["metadata"]["namespace"], es.as_str());
    assert_eq!(web["status"]["policy"], "ControlPlaneWins");
    let outcomes: Vec<&str> = web["status"]["fields"].as_array().unwrap().iter().map(|f| f["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["Reverted", "Reverted"], "{web}");
    assert_eq!(change_of(&decided, "ConfigMap", "settings").unwrap()["spec"]["change"], "Deleted");
    wait_for("the member's records released", LONG, || {
        let left = edge_changes(&member, &ns);
        if left.is_empty() { Ok(()) } else { Err(format!("{left:?}")) }
    });
    let events = events_with_reason(&kc, &ns, "EdgeChangeReverted");
    assert!(events.iter().any(|e| e.contains("web") && e.contains("spec.replicas")), "{events:?}");
    drop(agent);
    drop(cp);
}

/// The notes of the Events with `reason` in `ns`.
fn events_with_reason(kc: &Path, ns: &str, reason: &str) -> Vec<String> {
    let list = get_json(kc, &["-n", ns, "get", "events"]).unwrap_or_default();
    list["items"].as_array().into_iter().flatten().filter(|e| e["reason"] == reason).map(|e| e["message"].as_str().unwrap_or_default().to_string()).collect()
}

/// A Deployment template for the sync-policy test: `annotations` set the policy per resource.
fn edge_deployment(ns: &str, name: &str, annotations: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
  labels: {{tier: cloud}}
  annotations: {{{annotations}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: c, image: "nginx:1.27"}}]}}
---
"#
    )
}

fn member_deployment(member: &Path, ns: &str, name: &str) -> Result<Value, String> {
    get_json(member, &["-n", ns, "get", "deployment", name])
}

/// Issue 23's "Must show" 1 and 2 with a real member behind an agent whose connection is cut:
/// the member keeps running (a pod deleted there is replaced), an agent restarted offline keeps
/// its records, and every kind of edge edit — scale, image, a label, a ConfigMap edited, an
/// object deleted, a Deployment created — comes home under each sync policy, with control-plane
/// edits made meanwhile (three-way: another field → both kept; the same field → the policy
/// decides). After reconnect: the exact state in the member and on the control plane, an Event
/// and a record per decision; `Manual` held until resolved.
#[test]
fn edge_changes_come_home_by_sync_policy() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member1").kubeconfig.clone();
    let cp = lease_watching_control_plane();
    let kc = cp.kubeconfig.clone();
    let name = unique("home");
    let ns = unique("sync");
    let es = format!("karmada-es-{name}");
    let agent_kc = register(&kc, cp.dir.path(), &name, &[]);
    let relay = Relay::start(server_addr(&cp));
    let text = std::fs::read_to_string(&agent_kc).unwrap();
    std::fs::write(&agent_kc, text.replace(&cp.server, &format!("https://{}", relay.addr))).unwrap();
    let flags = ["--tunnel-max-backoff", "1s", "--edge-offline-after", "2s", "--edge-record-interval", "1s"];
    let agent = start_agent_with(&name, &agent_kc, &member, &flags);
    wait_cluster(&kc, &name, "True");
    let edge_wins = |fields: &str| format!("edge.flotilla.io/sync-policy: EdgeWins, edge.flotilla.io/edge-wins-fields: '{fields}'");
    let mut yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n");
    yaml += &edge_deployment(&ns, "cpw", "");
    yaml += &edge_deployment(&ns, "ew", &edge_wins("spec.replicas, spec.template.spec.containers[*].image, metadata.labels"));
    yaml += &edge_deployment(&ns, "ewsame", &edge_wins("spec.replicas"));
    yaml += &edge_deployment(&ns, "manual", "edge.flotilla.io/sync-policy: Manual");
    yaml += &edge_deployment(&ns, "gone-cpw", "");
    yaml += &edge_deployment(&ns, "gone-ew", "edge.flotilla.io/sync-policy: EdgeWins");
    yaml += &format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{mode: cloud}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: local, namespace: {ns}, annotations: {{edge.flotilla.io/sync-policy: EdgeWins}}}}
data: {{mode: cloud}}
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {{name: edge, namespace: {ns}}}
spec:
  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment}}, {{apiVersion: v1, kind: ConfigMap, name: settings}}, {{apiVersion: v1, kind: ConfigMap, name: local}}]
  placement:
    clusterAffinity: {{clusterNames: [{name}]}}
"#
    );
    apply_yaml(&kc, &yaml);
    wait_for("the eight objects applied and acknowledged", LONG, || {
        let list = get_json(&member, &["-n", "flotilla-edge", "get", "appliedworks"])?;
        let acked = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["spec"]["workNamespace"] == es.as_str() && a["spec"]["manifests"][0]["metadata"]["namespace"] == ns.as_str())
            .filter(|a| a["status"]["manifests"][0]["uid"].as_str().is_some_and(|u| !u.is_empty()))
            .count();
        if acked == 8 { Ok(()) } else { Err(format!("{acked} of 8")) }
    });
    let pods_of = |app: &str| -> Vec<String> {
        let list = get_json(&member, &["-n", &ns, "get", "pods", "-l", &format!("app={app}")]).unwrap_or_default();
        list["items"].as_array().into_iter().flatten().map(|p| p["metadata"]["name"].as_str().unwrap_or_default().to_string()).collect()
    };
    wait_for("cpw's pods running in the member", LONG, || if pods_of("cpw").len() == 2 { Ok(()) } else { Err(format!("{:?}", pods_of("cpw"))) });

    // Offline. The member keeps running: a pod deleted at the edge is replaced by the member.
    relay.cut();
    let bin = kubectl_bin();
    let before = pods_of("cpw");
    kubectl(&bin, &member, &["-n", &ns, "delete", "pod", &before[0], "--wait=false"]);
    wait_for("the deleted pod replaced by the member", LONG, || {
        let now = pods_of("cpw");
        if now.len() == 2 && !now.contains(&before[0]) { Ok(()) } else { Err(format!("{now:?}")) }
    });
    // The edge's edits.
    kubectl(&bin, &member, &["-n", &ns, "scale", "deployment/cpw", "--replicas=5"]);
    kubectl(&bin, &member, &["-n", &ns, "set", "image", "deployment/ew", "c=nginx:1.28"]);
    kubectl(&bin, &member, &["-n", &ns, "label", "--overwrite", "deployment/ew", "tier=edge"]);
    kubectl(&bin, &member, &["-n", &ns, "scale", "deployment/ewsame", "--replicas=6"]);
    kubectl(&bin, &member, &["-n", &ns, "set", "image", "deployment/manual", "c=nginx:1.28"]);
    kubectl(&bin, &member, &["-n", &ns, "delete", "deployment", "gone-cpw", "gone-ew"]);
    kubectl(&bin, &member, &["-n", &ns, "patch", "configmap", "settings", "--type", "merge", "-p", r#"{"data":{"mode":"edge"}}"#]);
    kubectl(&bin, &member, &["-n", &ns, "patch", "configmap", "local", "--type", "merge", "-p", r#"{"data":{"mode":"edge"}}"#]);
    kubectl(&bin, &member, &["-n", &ns, "create", "deployment", "born", "--image=nginx:1.27"]);
    // The control plane's edits meanwhile: the same field as the edge (cpw, ewsame), another (ew).
    kubectl(&bin, &kc, &["-n", &ns, "scale", "deployment/cpw", "--replicas=3"]);
    kubectl(&bin, &kc, &["-n", &ns, "scale", "deployment/ewsame", "--replicas=3"]);
    kubectl(&bin, &kc, &["-n", &ns, "set", "env", "deployment/ew", "MODE=cloud"]);
    let expected = [
        ("Deployment", "cpw", "Modified"),
        ("Deployment", "ew", "Modified"),
        ("Deployment", "ewsame", "Modified"),
        ("Deployment", "manual", "Modified"),
        ("Deployment", "gone-cpw", "Deleted"),
        ("Deployment", "gone-ew", "Deleted"),
        ("ConfigMap", "settings", "Modified"),
        ("ConfigMap", "local", "Modified"),
        ("Deployment", "born", "Created"),
    ];
    let recorded = |kubeconfig: &Path| {
        let all = edge_changes(kubeconfig, &ns);
        let missing: Vec<_> = expected.iter().filter(|(k, n, c)| !change_of(&all, k, n).is_some_and(|r| r["spec"]["change"] == *c)).collect();
        if missing.is_empty() { Ok(all) } else { Err(format!("missing {missing:?} in {all:?}")) }
    };
    let offline = wait_for("every edge change recorded in the member", LONG, || recorded(&member));
    let ew = change_of(&offline, "Deployment", "ew").unwrap();
    let paths: Vec<&str> = ew["spec"]["fields"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["metadata.labels.tier", "spec.template.spec.containers[0].image"], "{ew}");

    // The agent restarted while still offline keeps its Works (AppliedWorks) and its records.
    agent.kill();
    let mut agent = spawn_agent(&name, &agent_kc, &member, &flags);
    std::thread::sleep(Duration::from_secs(3));
    recorded(&member).expect("the records kept across the restart");
    let applied = get_json(&member, &["-n", "flotilla-edge", "get", "appliedworks"]).unwrap();
    let ours = applied["items"].as_array().unwrap().iter().filter(|a| a["spec"]["workNamespace"] == es.as_str()).count();
    assert!(ours >= 8, "the AppliedWorks kept: {ours}");
    assert_eq!(member_deployment(&member, &ns, "cpw").unwrap()["spec"]["replicas"], 5, "nothing reverted offline");

    // Back online.
    relay.restore(None);
    agent.wait_line("controllers running", LONG);
    wait_ready_untainted(&kc, &name, "Ready after the outage");
    let decided = wait_for("every record decided on the control plane", LONG, || {
        let all = recorded(&kc)?;
        let open: Vec<String> = all
            .iter()
            .filter(|c| !matches!(c["status"]["phase"].as_str(), Some("Decided" | "Listed" | "Conflict")))
            .map(|c| format!("{} {}", c["spec"]["object"]["name"], c["status"]))
            .collect();
        if open.is_empty() { Ok(all) } else { Err(open.join("; ")) }
    });
    let outcome = |n: &str| -> Vec<(String, String)> {
        change_of(&decided, if n == "settings" || n == "local" { "ConfigMap" } else { "Deployment" }, n).unwrap()["status"]["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| (f["path"].as_str().unwrap_or_default().to_string(), f["outcome"].as_str().unwrap_or_default().to_string()))
            .collect()
    };
    let pair = |p: &str, o: &str| (p.to_string(), o.to_string());
    // ControlPlaneWins, the same field changed on both sides: the control plane's 3.
    assert_eq!(outcome("cpw"), [pair("spec.replicas", "Reverted")]);
    // EdgeWins for the listed fields; the control plane's env (another field) kept too.
    assert_eq!(outcome("ew"), [pair("metadata.labels.tier", "Adopted"), pair("spec.template.spec.containers[0].image", "Adopted")]);
    // EdgeWins, the same field changed on both sides: the edge's 6, over the control plane's 3.
    assert_eq!(outcome("ewsame"), [pair("spec.replicas", "Adopted")]);
    let ewsame = change_of(&decided, "Deployment", "ewsame").unwrap();
    assert_eq!(ewsame["status"]["fields"][0]["overControlPlane"], true, "{ewsame}");
    assert_eq!(ewsame["status"]["fields"][0]["controlPlane"], 3);
    assert_eq!(outcome("gone-cpw"), [pair("", "Reverted")]);
    assert_eq!(outcome("gone-ew"), [pair("", "Adopted")]);
    assert_eq!(outcome("settings"), [pair("data.mode", "Reverted")]);
    assert_eq!(outcome("local"), [pair("data.mode", "Adopted")]);
    assert_eq!(outcome("manual"), [pair("spec.template.spec.containers[0].image", "Conflict")]);
    assert_eq!(change_of(&decided, "Deployment", "born").unwrap()["status"]["phase"], "Listed");

    // The member as decided.
    let replicas = |d: &str, want: i64| {
        wait_for(&format!("{d} at {want} replicas"), LONG, || {
            let got = member_deployment(&member, &ns, d)?["spec"]["replicas"].clone();
            if got == want { Ok(()) } else { Err(got.to_string()) }
        })
    };
    replicas("cpw", 3);
    replicas("ewsame", 6);
    let ew = wait_for("ew with the edge's image and label and the control plane's env", LONG, || {
        let d = member_deployment(&member, &ns, "ew")?;
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        if c["image"] == "nginx:1.28" && c["env"][0]["value"] == "cloud" && d["metadata"]["labels"]["tier"] == "edge" {
            Ok(d)
        } else {
            Err(d["spec"].to_string())
        }
    });
    assert_eq!(ew["spec"]["replicas"], 2);
    wait_for("gone-cpw re-created", LONG, || member_deployment(&member, &ns, "gone-cpw"));
    let mode = |cm: &str| get_json(&member, &["-n", &ns, "get", "configmap", cm]).map(|c| c["data"]["mode"].as_str().unwrap_or_default().to_string());
    wait_for("settings reverted", LONG, || if mode("settings")? == "cloud" { Ok(()) } else { Err("edge".into()) });
    assert_eq!(mode("local").unwrap(), "edge");
    assert!(member_deployment(&member, &ns, "gone-ew").is_err(), "deleted at the edge, and the edge won");
    assert!(member_deployment(&member, &ns, "born").is_ok(), "born at the edge: left alone");
    let held = member_deployment(&member, &ns, "manual").unwrap();
    assert_eq!(held["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28", "held as the edge left it");

    // The control plane: its templates untouched, the edge's values in EdgeOverrides, the Works
    // carrying them; gone-ew's Work gone.
    let template = get_json(&kc, &["-n", &ns, "get", "deployment", "ew"]).unwrap();
    assert_eq!(template["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27", "the user's template is never edited");
    let overrides = get_json(&kc, &["-n", &ns, "get", "edgeoverrides"]).unwrap();
    let by_binding = |b: &str| overrides["items"].as_array().unwrap().iter().find(|o| o["spec"]["binding"]["name"] == b).cloned();
    let ew_override = by_binding("ew-deployment").unwrap_or_else(|| panic!("{overrides}"));
    let ops = &ew_override["spec"]["clusters"][0]["operations"];
    assert_eq!(ops.as_array().map(Vec::len), Some(2), "{ew_override}");
    assert_eq!(ew_override["metadata"]["ownerReferences"][0]["kind"], "ResourceBinding");
    assert_eq!(by_binding("gone-ew-deployment").unwrap()["spec"]["clusters"][0]["deleted"], true);
    assert_eq!(by_binding("local-configmap").unwrap()["spec"]["clusters"][0]["operations"][0]["value"], "edge");
    let works = get_json(&kc, &["-n", &es, "get", "works"]).unwrap();
    let work_of =
        |n: &str| works["items"].as_array().unwrap().iter().find(|w| w["metadata"]["name"].as_str().is_some_and(|w| w.starts_with(&format!("{n}-")))).cloned();
    assert!(work_of("gone-ew").is_none(), "gone-ew's Work dropped");
    assert_eq!(work_of("ewsame").unwrap()["spec"]["workload"]["manifests"][0]["spec"]["replicas"], 6);

    // An Event per decision, on the templates.
    let reverted = events_with_reason(&kc, &ns, "EdgeChangeReverted");
    assert!(reverted.iter().any(|e| e.contains("cpw") && e.contains("spec.replicas")), "{reverted:?}");
    assert!(reverted.iter().any(|e| e.contains("gone-cpw") && e.contains("deleted")), "{reverted:?}");
    let adopted = events_with_reason(&kc, &ns, "EdgeChangeAdopted");
    assert!(adopted.iter().any(|e| e.contains("ewsame")), "{adopted:?}");
    let conflicts = events_with_reason(&kc, &ns, "EdgeConflict");
    assert!(conflicts.iter().any(|e| e.contains("manual")), "{conflicts:?}");

    // Manual: the conflict on the binding until resolved; resolved for the control plane, the
    // member goes back to its image.
    let binding = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "manual-deployment"]).unwrap();
    assert!(has_condition(&binding, "EdgeConflict", "True"), "{binding}");
    let kc_arg = kc.to_str().unwrap();
    let report = wait_for("the edge report with the decisions", LONG, || {
        let (ok, out) = flotilla_cmd(&["edge", "status", "--cluster", &name, "--control-plane-kubeconfig", kc_arg]);
        if ok && out.contains("manual") && out.contains("Conflict") && out.contains("born") && out.contains("Listed") { Ok(out) } else { Err(out) }
    });
    assert!(report.contains("Reverted") && report.contains("Adopted"), "{report}");
    let (ok, out) =
        flotilla_cmd(&["edge", "resolve", "deployment/manual", "-n", &ns, "--cluster", &name, "--keep", "control-plane", "--control-plane-kubeconfig", kc_arg]);
    assert!(ok, "{out}");
    wait_for("manual back to the control plane's image", LONG, || {
        let d = member_deployment(&member, &ns, "manual")?;
        let image = d["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        if image == "nginx:1.27" { Ok(()) } else { Err(image.to_string()) }
    });
    wait_for("the conflict cleared on the binding", LONG, || {
        let b = get_json(&kc, &["-n", &ns, "get", "resourcebinding", "manual-deployment"])?;
        if has_condition(&b, "EdgeConflict", "False") { Ok(()) } else { Err(b["status"].to_string()) }
    });
    // Only the born object's record stays in the member; promoted, it is a Work's object (the
    // same one) and its record goes.
    wait_for("the member's records released", LONG, || {
        let left: Vec<String> = edge_changes(&member, &ns).iter().map(|c| c["spec"]["object"]["name"].to_string()).collect();
        if left == ["\"born\""] { Ok(()) } else { Err(format!("{left:?}")) }
    });
    let born_uid = member_deployment(&member, &ns, "born").unwrap()["metadata"]["uid"].clone();
    let (ok, out) = flotilla_cmd(&["promote", "deployment/born", "-n", &ns, "--cluster", &name, "--control-plane-kubeconfig", kc_arg]);
    assert!(ok, "{out}");
    wait_for("the born object's record gone once promoted", LONG, || {
        let left = edge_changes(&member, &ns);
        let on_cp = edge_changes(&kc, &ns);
        if left.is_empty() && on_cp.iter().all(|c| c["spec"]["change"] != "Created") { Ok(()) } else { Err(format!("{left:?}")) }
    });
    assert_eq!(member_deployment(&member, &ns, "born").unwrap()["metadata"]["uid"], born_uid, "adopted where it runs");
    drop(agent);
    drop(cp);
}
