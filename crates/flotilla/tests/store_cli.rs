//! The `flotilla` binary refuses bad data files with a clear message and a non-zero exit, and
//! round-trips a store through snapshot and restore.

use std::process::Command;

fn flotilla() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
}

#[test]
fn bad_store_file_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("store.redb");
    std::fs::write(&file, b"this is not a database at all, just some bytes").unwrap();
    let before = std::fs::read(&file).unwrap();
    for args in [vec!["store", "inspect"], vec!["up", "--listen", "127.0.0.1:0"]] {
        let out = flotilla().args(&args).arg("--data-dir").arg(dir.path()).output().unwrap();
        assert!(!out.status.success(), "{args:?} must fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("not a Flotilla store"), "{args:?}: {stderr}");
        assert_eq!(std::fs::read(&file).unwrap(), before, "the file must be left untouched");
    }
}

#[test]
fn snapshot_and_restore_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Create a store with some data through the library, then use the CLI on it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use flotilla_store::Store;
        let mut c = flotilla_store::embedded::EmbeddedConfig::new(data.join("store.redb"));
        c.retention.interval = None;
        let s = flotilla_store::embedded::EmbeddedStore::open(c).await.unwrap();
        for i in 0..10 {
            s.create(format!("/k/{i}").into(), "v".into()).await.unwrap();
        }
    });
    let snap = dir.path().join("snap.redb");
    let out = flotilla().args(["store", "snapshot"]).arg(&snap).arg("--data-dir").arg(&data).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("10 keys"));
    // Restore into a fresh data directory and inspect it.
    let data2 = dir.path().join("data2");
    let out = flotilla().args(["store", "restore"]).arg(&snap).arg("--data-dir").arg(&data2).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = flotilla().args(["store", "inspect", "--data-dir"]).arg(&data2).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("revision 11") && text.contains("10 keys"), "{text}");
}
