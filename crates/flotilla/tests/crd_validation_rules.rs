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
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The answer to creating `object`, the first of a kind whose CRD was just written: the new
/// kind is served a moment after the CRD is established.
fn first_create(kubeconfig: &std::path::Path, object: &str) -> (bool, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let answer = kubectl(kubeconfig, &["create", "-f", "-"], object);
        if !answer.1.contains("the server could not find the requested resource") && !answer.1.contains("no matches for kind")
            || std::time::Instant::now() > deadline
        {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The answers to the scenario's writes, in order.
fn scenario(kubeconfig: &std::path::Path, group: &str, ns: &str) -> Vec<(bool, String)> {
    let (ok, out) = kubectl(kubeconfig, &["apply", "-f", "-"], &crd(group, "self.minReplicas <= self.maxReplicas"));
    assert!(ok, "{out}");
    let object = |name: &str, spec: &str| format!("apiVersion: {group}/v1\nkind: Scaler\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n");
    vec![
        first_create(kubeconfig, &object("bad", "{minReplicas: 5, maxReplicas: 2, name: x}")),
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
    assert!(
        !real[0].0 && real[0].1.contains("minReplicas must not exceed maxReplicas") && real[0].1.contains("failed rule: self.name.startsWith('s')"),
        "{:?}",
        real[0]
    );
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

/// A CRD whose rules carry `messageExpression`s (used, or falling back to `message` or the
/// default when they are blank, several lines or fail), `reason`s and `fieldPath`s (one naming
/// a map key, reported as kube-apiserver normalises it).
fn message_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: gauges.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: gauges, singular: gauge, kind: Gauge}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.min <= self.max"
              message: "static message"
              messageExpression: "self.min > 4 ? 'min above four exceeds max' : 'min exceeds max'"
            - rule: "self.min != 7"
              message: "  seven is not allowed  "
              messageExpression: "'   '"
            - rule: "self.max != 7"
              message: "max seven"
              messageExpression: "'line one\\nline two'"
            - rule: "self.min != 8"
              messageExpression: "string(1 / (self.min - self.min))"
            - rule: "self.max < 100"
              messageExpression: "self.max > 150 ? 'max is far above 100' : 'max is above 100'"
              reason: FieldValueForbidden
              fieldPath: ".max"
            - rule: "self.min != 9"
              message: "a key of labels"
              fieldPath: ".labels['x.y']"
            properties:
              min: {{type: integer}}
              max: {{type: integer}}
              labels: {{type: object, additionalProperties: {{type: string}}}}
              name:
                type: string
                maxLength: 16
                x-kubernetes-validations:
                - {{rule: "self != 'dup'", reason: FieldValueDuplicate, message: "unused"}}
                - {{rule: "self != 'req'", reason: FieldValueRequired, messageExpression: "'name ' + self + ' needed'"}}
"#
    )
}

fn message_scenario(kubeconfig: &std::path::Path, group: &str, ns: &str) -> Vec<(bool, String)> {
    let (ok, out) = kubectl(kubeconfig, &["apply", "-f", "-"], &message_crd(group));
    assert!(ok, "{out}");
    let object = |name: &str, spec: &str| format!("apiVersion: {group}/v1\nkind: Gauge\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n");
    vec![
        first_create(kubeconfig, &object("a", "{min: 5, max: 2, name: x}")),
        kubectl(kubeconfig, &["create", "-f", "-"], &object("b", "{min: 7, max: 7, name: dup}")),
        kubectl(kubeconfig, &["create", "-f", "-"], &object("c", "{min: 8, max: 200, name: req}")),
        kubectl(kubeconfig, &["create", "-f", "-"], &object("d", "{min: 1, max: 2, name: ok}")),
        kubectl(kubeconfig, &["create", "-f", "-"], &object("e", "{min: 9, max: 10, name: ok}")),
    ]
}

#[test]
fn message_expressions_reasons_and_field_paths_answer_as_a_real_server_does() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member3").kubeconfig.clone();
    let group = format!("m{}.cel.example.com", std::process::id());
    let ns = format!("celmsg-{}", std::process::id());
    let cp = Flotilla::start();
    let mut answers = Vec::new();
    // A messageExpression that does not compile: the CRD is refused, naming the field.
    // A fieldPath naming no field of the schema: refused alike, with the expressions not even
    // compiled (the messageExpression that does not compile goes unreported).
    let bad = message_crd(&format!("bad{group}")).replace("'max is far above 100' :", "'max is far above 100' +");
    let bad_path = bad.replace(".labels['x.y']", ".labels.x.nope").replace(&format!("bad{group}"), &format!("badpath{group}"));
    let mut refused = Vec::new();
    let mut refused_paths = Vec::new();
    for kc in [&member, &cp.kubeconfig] {
        let (ok, out) = kubectl(kc, &["create", "namespace", &ns], "");
        assert!(ok, "{out}");
        answers.push(message_scenario(kc, &group, &ns));
        refused.push(kubectl(kc, &["create", "-f", "-"], &bad));
        refused_paths.push(kubectl(kc, &["create", "-f", "-"], &bad_path));
    }
    kubectl(&member, &["delete", "crd", &format!("gauges.{group}"), "--wait=false"], "");
    kubectl(&member, &["delete", "namespace", &ns, "--wait=false"], "");
    let (real, ours) = (&answers[0], &answers[1]);
    assert!(!real[0].0 && real[0].1.contains("min above four exceeds max"), "{:?}", real[0]);
    assert!(
        !real[1].0 && real[1].1.contains("seven is not allowed") && real[1].1.contains("max seven") && real[1].1.contains("Duplicate value"),
        "{:?}",
        real[1]
    );
    assert!(
        !real[2].0
            && real[2].1.contains("failed rule: self.min != 8")
            && real[2].1.contains("spec.max: Forbidden: max is far above 100")
            && real[2].1.contains("name req needed"),
        "{:?}",
        real[2]
    );
    assert!(real[3].0, "{:?}", real[3]);
    assert!(!real[4].0 && real[4].1.contains("spec.labels[x.y]: Invalid value: a key of labels"), "{:?}", real[4]);
    for (i, (r, o)) in real.iter().zip(ours).enumerate() {
        assert_eq!(o, r, "answer {i}: Flotilla (left), kube-apiserver (right)");
    }
    for (ok, out) in &refused {
        assert!(!ok && out.contains("x-kubernetes-validations[4].messageExpression") && out.contains("messageExpression compilation failed"), "{out}");
    }
    assert!(
        !refused_paths[0].0 && refused_paths[0].1.contains("x-kubernetes-validations[5].fieldPath: Invalid value: \".labels.x.nope\": must be a valid path"),
        "{:?}",
        refused_paths[0]
    );
    assert_eq!(refused_paths[1], refused_paths[0], "Flotilla (left), kube-apiserver (right)");
    drop(cp);
}

/// String formats kube-apiserver checks (`uri` as Go's `url.ParseRequestURI`, `mac`): the same
/// objects get the same answers.
#[test]
fn string_formats_answer_as_a_real_server_does() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member3").kubeconfig.clone();
    let group = format!("f{}.cel.example.com", std::process::id());
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: links.{group}}}\nspec:\n  group: {group}\n  scope: Cluster\n  names: {{plural: links, singular: link, kind: Link}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              u: {{type: string, format: uri}}\n              m: {{type: string, format: mac}}\n"
    );
    let cp = Flotilla::start();
    let specs = [
        "{u: 'https://example.com/a?b'}",
        "{u: /p}",
        "{u: 'mailto:a'}",
        "{u: 'not a uri'}",
        "{u: example.com}",
        "{u: 'http://[::1'}",
        "{m: '01:23:45:67:89:ab'}",
        "{m: '0123.4567.89ab'}",
        "{m: '01:23:45'}",
    ];
    let mut answers = Vec::new();
    for kc in [&member, &cp.kubeconfig] {
        let (ok, out) = kubectl(kc, &["apply", "-f", "-"], &crd);
        assert!(ok, "{out}");
        let object = |spec: &str| format!("apiVersion: {group}/v1\nkind: Link\nmetadata: {{name: l1}}\nspec: {spec}\n");
        let mut a = vec![first_create(kc, &object(specs[0]))];
        kubectl(kc, &["delete", &format!("links.{group}"), "l1"], "");
        a.extend(specs[1..].iter().map(|s| kubectl(kc, &["create", "--dry-run=server", "-f", "-"], &object(s))));
        answers.push(a);
    }
    kubectl(&member, &["delete", "crd", &format!("links.{group}"), "--wait=false"], "");
    let (real, ours) = (&answers[0], &answers[1]);
    let accepted: Vec<bool> = real.iter().map(|(ok, _)| *ok).collect();
    assert_eq!(accepted, [true, true, true, false, false, false, true, true, false], "{real:?}");
    for (i, (r, o)) in real.iter().zip(ours).enumerate() {
        assert_eq!(o, r, "answer {i}: Flotilla (left), kube-apiserver (right)");
    }
    drop(cp);
}
