//! `kubectl logs` and `kubectl exec` (kubectl 1.33: exec over WebSocket) against a pod of a
//! simulated member of `flotilla up --demo`, through the control plane's cluster proxy (a
//! kubeconfig whose server is the proxy path, as Karmada documents it) and directly against the
//! member: the fake log lines and options, the built-in shell with stdin and exit codes, and the
//! API's errors (a container not named or not there, pods not running, SPDY refused).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{Flotilla, apply_yaml, get_json, kubectl_bin, kubectl_fails, kubectl_stdin, kubectl_try, wait_for};

const POD: &str = "
apiVersion: v1
kind: Pod
metadata: {name: shell, namespace: default}
spec:
  containers:
  - name: app
    image: busybox:1.36
    env: [{name: GREETING, value: hello from the sim}]
  - name: sidecar
    image: nginx:1.27
";

/// Pods that never run: one bound to a node that does not exist, one no node may take.
const STUCK: &str = "
apiVersion: v1
kind: Pod
metadata: {name: stuck, namespace: default}
spec:
  nodeName: no-such-node
  containers: [{name: app, image: busybox:1.36}]
---
apiVersion: v1
kind: Pod
metadata: {name: unscheduled, namespace: default}
spec:
  nodeSelector: {flotilla.io/nowhere: \"true\"}
  containers: [{name: app, image: busybox:1.36}]
";

/// The admin kubeconfig with its server replaced by the cluster proxy of `member`.
fn proxied(cp: &Flotilla, member: &str) -> PathBuf {
    let text = std::fs::read_to_string(&cp.kubeconfig).unwrap();
    let server = text.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
    let path = cp.dir.path().join(format!("{member}-proxied.kubeconfig"));
    let through = format!("server: {server}/apis/cluster.karmada.io/v1alpha1/clusters/{member}/proxy");
    std::fs::write(&path, text.replace(&format!("server: {server}"), &through)).unwrap();
    path
}

fn ok(kc: &Path, args: &[&str]) -> String {
    let (ok, out) = kubectl_try(kc, args);
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

#[test]
fn logs_and_exec_of_a_simulated_pod_through_the_cluster_proxy() {
    let cp = Flotilla::start_with(&["--demo", "1"]);
    let member_kc = cp.dir.path().join("data/demo/member1.kubeconfig");
    wait_for("member1 Ready", Duration::from_secs(120), || {
        let c = get_json(&cp.kubeconfig, &["get", "cluster", "member1"])?;
        if support::has_condition(&c, "Ready", "True") { Ok(()) } else { Err(c["status"].to_string()) }
    });
    apply_yaml(&member_kc, POD);
    apply_yaml(&member_kc, STUCK);
    let pod = wait_for("the pod Running", Duration::from_secs(60), || {
        let p = get_json(&member_kc, &["-n", "default", "get", "pod", "shell"])?;
        if p["status"]["phase"] == "Running" { Ok(p) } else { Err(p["status"].to_string()) }
    });
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();
    let kc = proxied(&cp, "member1");

    // Logs: the fake lines, --tail, -c, --timestamps, --limit-bytes.
    let logs = ok(&kc, &["logs", "shell", "-c", "sidecar"]);
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(lines.len(), 3, "{logs}");
    assert_eq!(lines[0], format!("fake log line 1 of pod default/shell container sidecar: started, image nginx:1.27, node {node}"));
    assert_eq!(lines[2], "fake log line 3 of pod default/shell container sidecar: ready");
    assert_eq!(ok(&kc, &["logs", "shell", "-c", "app", "--tail", "1"]), "fake log line 3 of pod default/shell container app: ready\n");
    let stamped = ok(&kc, &["logs", "shell", "-c", "app", "--tail", "1", "--timestamps"]);
    assert!(stamped.ends_with("Z fake log line 3 of pod default/shell container app: ready\n") && stamped.len() > 31, "{stamped}");
    assert_eq!(ok(&kc, &["logs", "shell", "-c", "app", "--limit-bytes", "13"]), "fake log line");
    // kubectl defaults to the first container and says so.
    let (ok_default, out) = kubectl_try(&kc, &["logs", "shell", "--tail", "1"]);
    assert!(ok_default && out.contains("container app: ready"), "{out}");

    // The API's errors, as Statuses kubectl prints.
    // (`get --raw` takes an absolute path: the control plane's kubeconfig and the proxy path.)
    let raw = "/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/api/v1/namespaces/default/pods/shell/log";
    let (_, err) = kubectl_fails(&kubectl_bin(), &cp.kubeconfig, &["get", "--raw", raw]);
    assert!(err.contains("a container name must be specified for pod shell, choose one of: [app sidecar]"), "{err}");
    let (_, err) = kubectl_fails(&kubectl_bin(), &cp.kubeconfig, &["get", "--raw", &format!("{raw}?container=missing")]);
    assert!(err.contains("Error from server (BadRequest): container missing is not valid for pod shell"), "{err}");
    let (_, err) = kubectl_fails(&kubectl_bin(), &kc, &["logs", "shell", "-c", "app", "--previous"]);
    assert!(err.contains("previous terminated container \"app\" in pod \"shell\" not found"), "{err}");
    let (_, err) = kubectl_fails(&kubectl_bin(), &cp.kubeconfig, &["get", "--raw", &format!("{raw}?container=app&tailLines=x")]);
    assert!(err.contains("Error from server (BadRequest): tailLines=\"x\": want an integer >= 0"), "{err}");

    // Exec over WebSocket through the proxy: output, stdin, the environment, exit codes.
    assert_eq!(ok(&kc, &["exec", "shell", "-c", "app", "--", "echo", "hi"]), "hi\n");
    let (piped, out) = kubectl_stdin(&kc, &["exec", "-i", "shell", "-c", "app", "--", "cat"], "piped through\nthe proxy\n");
    assert!(piped && out == "piped through\nthe proxy\n", "{out}");
    assert_eq!(ok(&kc, &["exec", "shell", "-c", "app", "--", "printenv", "GREETING", "HOSTNAME"]), "hello from the sim\nshell\n");
    let out = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["exec", "shell", "-c", "app", "--", "sh", "-c", "echo before; exit 3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("command terminated with exit code 3"), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, err) = kubectl_fails(&kubectl_bin(), &kc, &["exec", "shell", "-c", "app", "--", "no-such-tool"]);
    assert_eq!(code, 127, "{err}");
    assert!(err.contains("no-such-tool: command not found"), "stderr comes back on its channel: {err}");
    let (_, err) = kubectl_fails(&kubectl_bin(), &kc, &["exec", "shell", "-c", "missing", "--", "echo"]);
    assert!(err.contains("Error from server (BadRequest): container missing is not valid for pod shell"), "{err}");

    // Pods that are not running: the kubelet's "waiting to start" when bound, kube-apiserver's
    // empty log and "no host" when not.
    let waiting = "Error from server (BadRequest): container \"app\" in pod \"stuck\" is waiting to start: ContainerCreating";
    let (_, err) = kubectl_fails(&kubectl_bin(), &kc, &["logs", "stuck"]);
    assert!(err.contains(waiting), "{err}");
    let (_, err) = kubectl_fails(&kubectl_bin(), &kc, &["exec", "stuck", "--", "echo"]);
    assert!(err.contains(waiting), "{err}");
    assert_eq!(ok(&kc, &["logs", "unscheduled"]), "");
    let (_, err) = kubectl_fails(&kubectl_bin(), &kc, &["exec", "unscheduled", "--", "echo"]);
    assert!(err.contains("Error from server (BadRequest): pod unscheduled does not have a host assigned"), "{err}");

    // SPDY (kubectl 1.29 and older) is refused with a Status that says why.
    if let Some((version, old)) = support::kubectls().into_iter().find(|(v, _)| matches!(v.as_str(), "1.27" | "1.28" | "1.29")) {
        let (_, err) = kubectl_fails(&old, &kc, &["exec", "shell", "-c", "app", "--", "echo", "hi"]);
        assert!(err.contains("serves exec over WebSocket only"), "kubectl {version}: {err}");
    }

    // Directly against the member's own API server too.
    assert_eq!(ok(&member_kc, &["exec", "shell", "-c", "app", "--", "hostname"]), "shell\n");
    assert_eq!(ok(&member_kc, &["logs", "shell", "-c", "app", "--tail", "1"]), "fake log line 3 of pod default/shell container app: ready\n");
}
