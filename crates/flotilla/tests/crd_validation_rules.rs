//! CRD validation rules (`x-kubernetes-validations`, CEL): the same CRD and objects on a real
//! kube-apiserver and on Flotilla give the same answers — a rule with its message, one without
//! (`failed rule: …`), a transition rule on `oldSelf` — and a rule calling a function Flotilla's
//! CEL lacks makes the CRD invalid, naming the rule.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{Flotilla, kubectl_bin};

fn crd(group: &str, rule: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: scalers.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: scalers, singular: scaler, kind: Scaler}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            x-kubernetes-validations:\n            - rule: \"{rule}\"\n              message: \"minReplicas must not exceed maxReplicas\"\n            - rule: \"self.name.startsWith('s')\"\n            properties:\n              minReplicas: {{type: integer}}\n              maxReplicas: {{type: integer}}\n              name: {{type: string, x-kubernetes-validations: [{{rule: \"self == oldSelf\", message: \"name is immutable\"}}]}}\n"
    )
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = Command::new(kubectl_bin()).arg("--kubeconfig").arg(kubeconfig).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The answers to the scenario's writes, in order.
fn scenario(kubeconfig: &std::path::Path, group: &str, ns: &str) -> Vec<(bool, String)> {
    let (ok, out) = kubectl(kubeconfig, &["apply", "-f", "-"], &crd(group, "self.minReplicas <= self.maxReplicas"));
    assert!(ok, "{out}");
    let object = |name: &str, spec: &str| format!("apiVersion: {group}/v1\nkind: Scaler\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n");
    // The new kind is served a moment after the CRD is established.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let first = loop {
        let answer = kubectl(kubeconfig, &["create", "-f", "-"], &object("bad", "{minReplicas: 5, maxReplicas: 2, name: x}"));
        if !answer.1.contains("the server could not find the requested resource") && !answer.1.contains("no matches for kind") || std::time::Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    vec![
        first,
        kubectl(kubeconfig, &["create", "-f", "-"], &object("good", "{minReplicas: 1, maxReplicas: 2, name: sa}")),
        kubectl(kubeconfig, &["-n", ns, "patch", &format!("scalers.{group}"), "good", "--type=merge", "-p", r#"{"spec":{"name":"sb"}}"#], ""),
        kubectl(kubeconfig, &["-n", ns, "patch", &format!("scalers.{group}"), "good", "--type=merge", "-p", r#"{"spec":{"maxReplicas":3}}"#], ""),
    ]
}

#[test]
fn validation_rules_answer_as_a_real_server_does() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member3").kubeconfig.clone();
    let group = format!("g{}.cel.example.com", std::process::id());
    let ns = format!("cel-{}", std::process::id());
    let cp = Flotilla::start();
    let mut answers = Vec::new();
    for kc in [&member, &cp.kubeconfig] {
        let (ok, out) = kubectl(kc, &["create", "namespace", &ns], "");
        assert!(ok, "{out}");
        answers.push(scenario(kc, &group, &ns));
    }
    kubectl(&member, &["delete", "crd", &format!("scalers.{group}"), "--wait=false"], "");
    kubectl(&member, &["delete", "namespace", &ns, "--wait=false"], "");
    let (real, ours) = (&answers[0], &answers[1]);
    // The scenario means something on the real server.
    assert!(!real[0].0 && real[0].1.contains("minReplicas must not exceed maxReplicas") && real[0].1.contains("failed rule: self.name.startsWith('s')"), "{:?}", real[0]);
    assert!(real[1].0 && !real[2].0 && real[2].1.contains("name is immutable") && real[3].0, "{real:?}");
    for (i, (r, o)) in real.iter().zip(ours).enumerate() {
        assert_eq!(o, r, "answer {i}: Flotilla (left), kube-apiserver (right)");
    }

    // A rule calling a function Flotilla's CEL does not have: the CRD is refused, naming it.
    let (ok, out) = kubectl(&cp.kubeconfig, &["apply", "-f", "-"], &crd("other.cel.example.com", "self.tags.isSorted()"));
    assert!(!ok, "{out}");
    assert!(out.contains("x-kubernetes-validations[0].rule") && out.contains("self.tags.isSorted()") && out.contains("isSorted"), "{out}");
    drop(cp);
}
