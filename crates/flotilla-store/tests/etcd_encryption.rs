//! Encryption at rest on the etcd backend, against a real etcd with its own data directory
//! (the embedded store's counterpart is `crates/flotilla/tests/encryption.rs`): Secrets, a
//! member token, a legacy service-account token and the token-signing key are first stored
//! plain (a store written before encryption), then encrypted in place, then rotated to a new
//! key; after the re-encryption's compaction and a defragment, etcd's database holds none of
//! them in any form. A restart with the same key reads every value; a wrong key is refused
//! before anything is written.
//!
//! etcd's write-ahead log is the exception: it keeps every entry of its current segment (64 MB,
//! fixed in etcd), so the plain writes stay there, whatever the snapshot settings, until a later
//! segment has begun, a snapshot is past it and etcd's purge removes it (all but `--max-wals`
//! segments). The test pins both halves, so a change in etcd shows up here (ADR 0018).

mod etcd_server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use etcd_server::EtcdServer;
use flotilla_store::encrypted::{EncryptedStore, EncryptionConfig, Key, Provider, Rewritten, Rule};
use flotilla_store::etcd::{EtcdConfig, EtcdStore};
use flotilla_store::{Op, RangeRequest, Store};

/// Standard base64 with padding, as a Secret's `data` holds its values.
fn b64(s: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]) } else { '=' });
        }
    }
    out
}

/// The store prefixes `flotilla_apiserver::encryption` encrypts for `resources: [secrets]`.
const ENCRYPTED: &[&str] = &["/registry/core/secrets/", "/registry/flotilla.io/serviceaccounttokens/", "/registry/flotilla.io/serviceaccountsigningkey"];

fn config(providers: Vec<Provider>) -> EncryptionConfig {
    EncryptionConfig { rules: ENCRYPTED.iter().map(|p| Rule { prefix: Bytes::from_static(p.as_bytes()), providers: providers.clone() }).collect() }
}

fn key(name: &str, fill: u8) -> Key {
    Key { name: name.into(), secret: vec![fill; 32] }
}

async fn connect(server: &EtcdServer) -> Arc<dyn Store> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match EtcdStore::connect(EtcdConfig::new(vec![server.endpoint.clone()])).await {
            Ok(s) => return Arc::new(s),
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for etcd: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot connect to etcd: {e}; {}", server.diagnosis()),
        }
    }
}

async fn etcd(server: &EtcdServer) -> EtcdStore {
    EtcdStore::connect(EtcdConfig::new(vec![server.endpoint.clone()])).await.unwrap()
}

/// Every file under `dir` (etcd's database, raft snapshots and WAL segments).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Where in `dir` each of `needles` (what, text) is, as "what in file" lines.
fn found(dir: &Path, needles: &[(&str, String)]) -> Vec<String> {
    let mut hits = Vec::new();
    for file in files(dir) {
        // etcd renames and removes WAL files as it goes.
        let Ok(bytes) = std::fs::read(&file) else { continue };
        // WAL segments are preallocated with zeros: search only what was written. The needles
        // are ASCII, which a lossy conversion keeps intact, and `str` searches fast unoptimised.
        let used = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&bytes[..used]);
        for (what, needle) in needles {
            if text.contains(needle.as_str()) {
                hits.push(format!("{what} in {}", file.strip_prefix(dir).unwrap().display()));
            }
        }
    }
    hits
}

/// Every value under `prefix` as etcd holds it, and etcd's revision.
async fn raw_state(raw: &dyn Store, prefix: &'static [u8]) -> (Vec<(Bytes, Bytes)>, i64) {
    let resp = raw.range(RangeRequest::prefix(Bytes::from_static(prefix))).await.unwrap();
    (resp.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect(), raw.current_revision().await.unwrap())
}

/// Snapshots at every committed entry and at most one WAL segment kept: the settings under
/// which etcd lets go of old log entries soonest.
const ETCD_FLAGS: &[&str] = &["--snapshot-count=1", "--max-wals=1"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_an_etcd_data_directory_are_encrypted_upgraded_and_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = EtcdServer::start_in(dir.path(), ETCD_FLAGS) else { return };
    let data = server.data_dir.clone();
    let raw = connect(&server).await;

    // What must never be found, plain and as a Secret's base64.
    let tag = format!("{}-{}", std::process::id(), rand::random::<u32>());
    let (password, token, legacy, signing) =
        (format!("hunter2-{tag}"), format!("member-token-{tag}"), format!("legacy-token-{tag}"), b64(&format!("signing-key-{tag}")));
    let needles = [
        ("a Secret's value", password.clone()),
        ("a Secret's value in base64", b64(&password)),
        ("a member token", token.clone()),
        ("a member token in base64", b64(&token)),
        ("a legacy service-account token", legacy.clone()),
        ("the token-signing key", signing.clone()),
    ];
    let mut stored: Vec<(String, String)> = vec![
        (
            "/registry/core/secrets/default/plain".into(),
            format!(
                r#"{{"kind":"Secret","metadata":{{"name":"plain","annotations":{{"kubectl.kubernetes.io/last-applied-configuration":"{{\"stringData\":{{\"password\":\"{password}\",\"token\":\"{token}\"}}}}"}}}},"data":{{"password":"{}"}}}}"#,
                b64(&password)
            ),
        ),
        (
            "/registry/core/secrets/karmada-cluster/member1".into(),
            format!(r#"{{"kind":"Secret","metadata":{{"name":"member1"}},"data":{{"token":"{}"}}}}"#, b64(&token)),
        ),
        ("/registry/flotilla.io/serviceaccounttokens/default/bot-token".into(), format!(r#"{{"token":"{legacy}"}}"#)),
        ("/registry/flotilla.io/serviceaccountsigningkey".into(), format!(r#"{{"pkcs8":"{signing}"}}"#)),
    ];
    // Large Secrets (a CA bundle beside a password) span many database pages: compaction frees
    // them but leaves their bytes in the file, which only a defragment rewrites.
    for i in 0..5 {
        let bundle =
            format!(r#"{{"kind":"Secret","metadata":{{"name":"bundle-{i}"}},"data":{{"ca.crt":"{}","password":"{}"}}}}"#, "Q".repeat(200_000), b64(&password));
        stored.push((format!("/registry/core/secrets/default/bundle-{i}"), bundle));
    }
    // The control: a value no rule covers stays plain, so the search does find what is there.
    let control = [("the control", format!("not-a-secret-{tag}"))];
    raw.create(Bytes::from_static(b"/registry/core/configmaps/default/cm"), Bytes::from(control[0].1.clone())).await.unwrap();

    // A data directory written before encryption, by an etcd that has since restarted.
    for (k, v) in &stored {
        raw.create(Bytes::from(k.clone()), Bytes::from(v.clone())).await.unwrap();
    }
    drop(raw);
    server.stop();
    let server = EtcdServer::start_in(dir.path(), ETCD_FLAGS).unwrap();
    let raw = connect(&server).await;
    let db = |hits: Vec<String>| hits.into_iter().filter(|h| !h.ends_with(".wal")).collect::<Vec<_>>();
    assert_eq!(db(found(&data, &needles)).len(), needles.len(), "the scenario's database holds plaintext before encryption");

    let marker = |_: &Rewritten| (Bytes::from_static(b"/registry/flotilla.io/encryption-rewritten"), Bytes::from_static(b"{}"));
    let (old, new) = (Provider::Secretbox(vec![key("old", 1)]), Provider::AesGcm(vec![key("new", 2)]));

    // The upgrade: the key first, identity after it for what was written before.
    let store = EncryptedStore::new(raw.clone(), config(vec![old.clone(), Provider::Identity])).await.unwrap();
    assert_eq!(store.reencrypt(marker, |_| {}).await.unwrap(), Rewritten { rewritten: stored.len(), current: 0 });
    let after = format!(r#"{{"kind":"Secret","metadata":{{"name":"after"}},"data":{{"password":"{}"}}}}"#, b64(&password));
    store.create(Bytes::from_static(b"/registry/core/secrets/default/after"), Bytes::from(after.clone())).await.unwrap();
    stored.push(("/registry/core/secrets/default/after".into(), after));

    // The rotation, kube-apiserver's sequence: the new key first and the old one still read,
    // then every value written again with the new one.
    let store = EncryptedStore::new(raw.clone(), config(vec![new.clone(), old.clone(), Provider::Identity])).await.unwrap();
    assert_eq!(store.reencrypt(marker, |_| {}).await.unwrap(), Rewritten { rewritten: stored.len(), current: 0 });
    for prefix in ENCRYPTED {
        for (k, v) in raw_state(&*raw, prefix.as_bytes()).await.0 {
            assert!(
                v.starts_with(b"k8s:enc:aesgcm:v1:new:"),
                "{} is stored as {:?}",
                String::from_utf8_lossy(&k),
                String::from_utf8_lossy(&v[..v.len().min(30)])
            );
        }
    }
    // Compaction drops the old revisions but leaves their bytes in the database's free pages
    // (here, each time it ran: the Secret's base64 in member/snap/db).
    eprintln!("compacted, before the defragment: {:#?}", db(found(&data, &needles)));
    etcd(&server).await.defragment().await.unwrap();
    let hits = found(&data, &needles);
    assert_eq!(db(hits.clone()), Vec::<String>::new(), "plaintext left in etcd's database or snapshots");
    assert_eq!(db(found(&data, &control)), ["the control in member/snap/db"]);
    // etcd's WAL keeps every entry of its current segment, the plain writes included, whatever
    // the snapshot settings (see the end of this test for when it lets go of them).
    assert_eq!(hits.len(), needles.len(), "etcd's WAL no longer keeps the plain writes ({hits:#?}): update ADR 0018 and this test");

    // A restart with the current key alone reads every value as it was written.
    drop((store, raw));
    server.stop();
    let server = EtcdServer::start_in(dir.path(), ETCD_FLAGS).unwrap();
    let raw = connect(&server).await;
    let store = EncryptedStore::new(raw.clone(), config(vec![new.clone()])).await.unwrap();
    for (k, v) in &stored {
        assert_eq!(&String::from_utf8_lossy(&store.get(k.as_bytes()).await.unwrap().unwrap().value), v, "{k}");
    }
    drop(store);

    // A wrong key is refused with a clear error, before anything is written.
    let before = raw_state(&*raw, b"/registry/").await;
    let err = EncryptedStore::new(raw.clone(), config(vec![Provider::AesGcm(vec![key("new", 9)])])).await.unwrap_err();
    assert!(err.to_string().contains("aesgcm key \"new\" does not open it (wrong key?)"), "{err}");
    assert_eq!(raw_state(&*raw, b"/registry/").await, before, "a refused key changed the store");

    // etcd releases a WAL segment once a later one has begun (segments are 64 MB) and a
    // snapshot is past it; its purge (every 30 s) then removes all but --max-wals segments.
    let filler = Bytes::from(vec![b'x'; 1 << 20]);
    for _ in 0..66 {
        raw.txn(vec![], vec![Op::Put(Bytes::from_static(b"/filler"), filler.clone())]).await.unwrap();
    }
    raw.delete_if(Bytes::from_static(b"/filler"), None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut hits = found(&data, &needles);
    while !hits.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(2)).await;
        hits = found(&data, &needles);
    }
    assert_eq!(hits, Vec::<String>::new(), "etcd kept the WAL segment with the plain writes: {:#?}", files(&data));
    drop(raw);
    server.stop();
}
