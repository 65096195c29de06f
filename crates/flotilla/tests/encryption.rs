//! Secrets at rest (security review: Secret data, the plaintext in kubectl's last-applied
//! annotation, member tokens and the token-signing key were all readable in store.redb): a new
//! control plane encrypts them with a key written beside the store, an existing plain data
//! directory is encrypted in place on its first start, a restart with the same key reads every
//! Secret, one with a wrong key fails with a clear error and changes nothing, and a snapshot
//! holds no plaintext and no key.

mod support;

use std::path::Path;
use std::process::Command;

use support::{Flotilla, kubectl, kubectl_bin};

/// Whether `needle` appears anywhere in the file.
fn file_contains(path: &Path, needle: &[u8]) -> bool {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(needle.len()).any(|w| w == needle)
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The values that must never be found in the store, each with what it is.
fn leaks(store: &Path, needles: &[(&str, String)]) -> Vec<String> {
    needles.iter().filter(|(_, n)| file_contains(store, n.as_bytes())).map(|(what, _)| what.to_string()).collect()
}

#[test]
fn secrets_are_encrypted_at_rest_and_upgraded_in_place() {
    let k = |f: &Flotilla, args: &[&str]| kubectl(&kubectl_bin(), &f.kubeconfig, args);
    let value = format!("hunter2-{}", std::process::id());
    let applied =
        format!(r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"applied","namespace":"default"}},"stringData":{{"password":"{value}-applied"}}}}"#);

    // A data directory written before encryption: Secrets stored as they are.
    let plain_config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        plain_config.path(),
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{identity: {}}]\n",
    )
    .unwrap();
    let f = Flotilla::start_with(&["--encryption-provider-config", plain_config.path().to_str().unwrap()]);
    k(&f, &["-n", "default", "create", "secret", "generic", "plain", &format!("--from-literal=password={value}")]);
    let file = f.dir.path().join("applied.json");
    std::fs::write(&file, &applied).unwrap();
    k(&f, &["apply", "-f", file.to_str().unwrap()]);
    k(&f, &["-n", "default", "create", "serviceaccount", "bot"]);
    k(&f, &["-n", "default", "create", "token", "bot"]);
    let dir = f.stop();
    let data = dir.path().join("data");
    let store = data.join("store.redb");
    let needles = [
        ("a Secret's data", b64(&value)),
        ("kubectl's last-applied annotation", format!("{value}-applied")),
        ("the token-signing key", "\"pkcs8\":\"".to_string()),
    ];
    assert_eq!(leaks(&store, &needles).len(), 3, "the scenario stores plaintext before encryption");

    // First start with encryption (the default: a key written into the data directory).
    let f = Flotilla::start_in(dir, &[]);
    let config = data.join("encryption-config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("secretbox:") && text.contains("kind: EncryptionConfiguration"), "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(k(&f, &["-n", "default", "get", "secret", "plain", "-o", "jsonpath={.data.password}"]), b64(&value));
    let dir = f.stop();
    assert_eq!(leaks(&store, &needles), Vec::<String>::new(), "plaintext left in {}", store.display());

    // The same key reads every Secret; a snapshot holds ciphertext and no key.
    let f = Flotilla::start_in(dir, &[]);
    assert_eq!(k(&f, &["-n", "default", "get", "secret", "applied", "-o", "jsonpath={.data.password}"]), b64(&format!("{value}-applied")));
    let dir = f.stop();
    let snapshot = dir.path().join("backup.redb");
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla")).args(["store", "snapshot"]).arg(&snapshot).arg("--data-dir").arg(&data).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(leaks(&snapshot, &needles), Vec::<String>::new());
    let key_line = text.lines().find(|l| l.trim_start().starts_with("secret:")).unwrap().trim().trim_start_matches("secret:").trim().to_string();
    assert!(!file_contains(&snapshot, key_line.as_bytes()), "the key is not in the snapshot");

    // A wrong key: a clear error, and the store file is left exactly as it was.
    let before = std::fs::read(&store).unwrap();
    let wrong = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wrong.path(), text.replace(&key_line, &b64(&"x".repeat(32)))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .arg("--encryption-provider-config")
        .arg(wrong.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a wrong key");
    assert!(stderr.contains("cannot be read with") && stderr.contains("wrong key"), "{stderr}");
    assert!(std::fs::read(&store).unwrap() == before, "a refused key changed the store");
}
