//! `--controllers` selects from the named set and says what it started; every controller on
//! the runtime exports controller-runtime's metrics on `/metrics`.

use std::time::Duration;

mod support;

use support::{Flotilla, kubectl, kubectl_bin, wait_for};

#[test]
fn controllers_flag_leaves_one_out_and_the_rest_export_controller_runtime_metrics() {
    let mut cp = Flotilla::start_with(&["--controllers=*,-execution"]);
    let line = cp.wait_line("controllers running: ", Duration::from_secs(60));
    let list = line.split("controllers running: ").nth(1).unwrap();
    let (running, off) = list.split_once(" (off: ").unwrap_or((list, ""));
    let running: Vec<&str> = running.split(", ").collect();
    let off: Vec<&str> = off.trim_end_matches(')').split(", ").collect();
    assert!(!running.contains(&"execution") && off.contains(&"execution"), "{line}");
    for name in ["namespace-controller", "garbage-collector-controller", "cluster", "clusterStatus", "binding", "workStatus", "namespace", "scheduler"] {
        assert!(running.contains(&name), "{name} not started: {line}");
    }
    assert!(off.contains(&"taintManager"), "the Failover gate is off by default: {line}");

    // Each controller on the runtime has its series from the start, under its
    // controller-runtime name; the one left out has none.
    let bin = kubectl_bin();
    let text = wait_for("controller metrics on /metrics", Duration::from_secs(60), || {
        let text = kubectl(&bin, &cp.kubeconfig, &["get", "--raw", "/metrics"]);
        let has = |c: &str| text.contains(&format!("controller_runtime_reconcile_total{{controller=\"{c}\",result=\"success\"}}"));
        let want = [
            "cluster",
            "cluster-status",
            "binding-controller",
            "work-status",
            "namespace-sync",
            "resource-detector",
            "resource-detector-policy",
            "garbage-collector",
            "namespace-controller",
            "clusterrole-aggregation-controller",
            "scheduler",
            "kubefed-rsp-controller",
        ];
        match want.iter().find(|c| !has(c)) {
            Some(missing) => Err(format!("no reconcile metrics for {missing} yet")),
            None => Ok(text),
        }
    });
    assert!(!text.contains("controller=\"execution\""), "the execution controller was left out, yet has metrics");
    for family in ["controller_runtime_reconcile_errors_total", "controller_runtime_reconcile_time_seconds_bucket", "workqueue_depth", "workqueue_adds_total"] {
        assert!(text.contains(&format!("{family}{{")), "no {family} on /metrics");
    }
    assert!(text.contains("flotilla_apiserver_requests_total"), "the API server's own metrics are still there");
    assert_eq!(text.matches("# EOF").count(), 1, "one exposition, ended once");
    cp.stop();
}

#[test]
fn an_unknown_controller_name_is_refused_with_the_known_ones() {
    let (ok, out) = support::flotilla_cmd(&["up", "--listen", "127.0.0.1:0", "--data-dir", "/nonexistent-never-created", "--controllers", "*,-exection"]);
    assert!(!ok, "{out}");
    assert!(out.contains("unknown controller(s) exection; known: "), "{out}");
}
