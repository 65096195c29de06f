//! `flotilla member`: simulated members standalone, driven with kubectl — each member's
//! kubeconfig reaches its own nodes and objects, the fleet admin's reaches the admin endpoint,
//! and SIGTERM stops the process cleanly.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::{Daemon, get_json, kubectl, kubectl_bin, wait_for};

/// `member NAME server URL kubeconfig PATH` → (NAME, PATH).
fn member_line(line: &str) -> (String, PathBuf) {
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((words[0], words[2], words[4]), ("member", "server", "kubeconfig"), "{line}");
    (words[1].to_string(), PathBuf::from(words[5]))
}

#[test]
fn members_run_standalone_and_answer_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let mut d = Daemon::start(&["member", "--members", "2", "--name", "m", "--nodes", "3", "--data-dir", data_dir], "info");
    d.wait_line("ready", Duration::from_secs(120));
    let members: Vec<(String, PathBuf)> = d.output.iter().filter(|l| l.starts_with("member ")).map(|l| member_line(l)).collect();
    assert_eq!(members.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["m1", "m2"]);
    let admin_line = d.output.iter().find(|l| l.starts_with("admin ")).expect("the admin endpoint is printed").clone();
    let admin_kc = PathBuf::from(admin_line.split_whitespace().last().unwrap());
    assert!(admin_line.contains("/sim/v1/members"), "{admin_line}");

    let bin = kubectl_bin();
    let (_, m1) = &members[0];
    let (_, m2) = &members[1];
    let nodes = wait_for("m1's three nodes", Duration::from_secs(60), || {
        let out = kubectl(&bin, m1, &["get", "nodes", "-o", "name"]);
        if out.lines().count() == 3 { Ok(out) } else { Err(out) }
    });
    assert_eq!(nodes.lines().collect::<Vec<_>>(), ["node/m1-node-1", "node/m1-node-2", "node/m1-node-3"]);

    // Objects are per member.
    kubectl(&bin, m1, &["create", "configmap", "only-in-m1", "--from-literal=k=v"]);
    assert_eq!(get_json(m1, &["get", "configmap", "only-in-m1"]).unwrap()["data"]["k"], "v");
    let err = get_json(m2, &["get", "configmap", "only-in-m1"]).expect_err("m2 has its own objects");
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");

    // The admin endpoint, with the fleet admin's kubeconfig.
    let list: serde_json::Value = serde_json::from_str(&kubectl(&bin, &admin_kc, &["get", "--raw", "/sim/v1/members"])).unwrap();
    let names: Vec<&str> = list["members"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["m1", "m2"]);

    let status = d.stop().expect("stops on SIGTERM");
    assert!(status.success(), "{status:?}");
}
