//! OpenAPI v3 (issue 9): `kubectl explain` prints on Flotilla what it prints on a real
//! kube-apiserver (built-in kinds and a CRD), and `kubectl diff` shows only real differences.

mod support;

use std::process::Command;

use support::{Flotilla, apply_yaml, kubectls};

fn kubectl(version: &str) -> std::path::PathBuf {
    kubectls().into_iter().find(|(v, _)| v == version).map(|(_, p)| p).unwrap_or_else(|| panic!("kubectl {version}"))
}

/// kubectl with a discovery cache of its own: a cache left by an earlier run (the same server
/// address, a CRD since deleted) must not decide what a name means.
fn run(bin: &std::path::Path, kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String) {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(bin).arg("--kubeconfig").arg(kubeconfig).arg("--cache-dir").arg(cache.path()).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn crd(group: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gizmos.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        description: A gizmo.\n        properties:\n          spec:\n            type: object\n            description: What the gizmo should be.\n            properties:\n              size: {{type: integer, description: How big.}}\n              tags: {{type: array, items: {{type: string}}}}\n              inner: {{type: object, properties: {{a: {{type: string}}}}}}\n          status: {{type: object, properties: {{ok: {{type: boolean}}}}}}\n"
    )
}

#[test]
fn explain_prints_what_a_real_server_prints() {
    let Some(env) = flotilla_testenv::TestEnv::connect() else { return };
    let member = env.member("member2").kubeconfig.clone();
    let cp = Flotilla::start();
    let group = format!("g{}.explain.example.com", std::process::id());
    for kc in [&member, &cp.kubeconfig] {
        apply_yaml(kc, &crd(&group));
    }
    let bin = kubectl("1.33");
    let gizmo = format!("gizmos.{group}");
    let queries: Vec<Vec<String>> = vec![
        vec!["explain".into(), "deployment.spec.strategy.rollingUpdate.maxSurge".into()],
        vec!["explain".into(), "pods".into(), "--recursive".into()],
        vec!["explain".into(), "svc.spec.ports".into()],
        vec!["explain".into(), "configmaps".into()],
        vec!["explain".into(), format!("{gizmo}.spec"), "--recursive".into()],
        vec!["explain".into(), gizmo.clone()],
    ];
    for q in &queries {
        let args: Vec<&str> = q.iter().map(String::as_str).collect();
        // A new CRD's schema is published a moment after it is established.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (real, ours) = loop {
            let real = run(&bin, &member, &args);
            let ours = run(&bin, &cp.kubeconfig, &args);
            if (real.0 == 0 && ours.0 == 0) || std::time::Instant::now() > deadline {
                break (real, ours);
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        };
        assert_eq!(real.0, 0, "kubectl {args:?} against the real server: {}", real.1);
        assert!(real.1.lines().count() > 3, "{}", real.1);
        assert_eq!(ours, real, "kubectl {args:?}: Flotilla (left) and kube-apiserver (right) differ");
    }
    run(&bin, &member, &["delete", "crd", &gizmo, "--wait=false"]);
}

#[test]
fn diff_shows_only_real_differences() {
    let cp = Flotilla::start();
    let bin = kubectl("1.33");
    let dir = tempfile::tempdir().unwrap();
    let manifest = |image: &str| {
        format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: diffme, namespace: default}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: diffme}}}}\n  template:\n    metadata: {{labels: {{app: diffme}}}}\n    spec: {{containers: [{{name: app, image: \"{image}\"}}]}}\n")
    };
    let same = dir.path().join("same.yaml");
    let changed = dir.path().join("changed.yaml");
    std::fs::write(&same, manifest("nginx:1.27")).unwrap();
    std::fs::write(&changed, manifest("nginx:1.28")).unwrap();
    let (code, out) = run(&bin, &cp.kubeconfig, &["apply", "-f", same.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    for server_side in [false, true] {
        let mode: &[&str] = if server_side { &["--server-side"] } else { &[] };
        let (code, out) = run(&bin, &cp.kubeconfig, &[&["diff", "-f", same.to_str().unwrap()], mode].concat());
        assert_eq!((code, out.as_str()), (0, ""), "no change, server-side {server_side}");
        let (code, out) = run(&bin, &cp.kubeconfig, &[&["diff", "-f", changed.to_str().unwrap()], mode].concat());
        assert_eq!(code, 1, "{out}");
        let changes: Vec<&str> = out.lines().filter(|l| (l.starts_with('-') || l.starts_with('+')) && !l.starts_with("---") && !l.starts_with("+++")).collect();
        assert_eq!(changes, ["-  generation: 1", "+  generation: 2", "-      - image: nginx:1.27", "+      - image: nginx:1.28"], "server-side {server_side}:\n{out}");
    }
}
