//! Encryption at rest: a [`Store`] that encrypts the values under some key prefixes before they
//! reach the backend and decrypts them on the way out, as kube-apiserver's storage transformers
//! do — the same providers (`aesgcm`, `aescbc`, `secretbox`, `identity`) and the same stored
//! form, `k8s:enc:<provider>:v1:<key name>:<ciphertext>`, so the data means the same thing to
//! both. Keys and revisions pass through unchanged; only values are transformed.
//!
//! Each [`Rule`] names a key prefix and its providers: the first writes, all of them read (a
//! value names the provider and key it was written with; one without the `k8s:enc:` prefix is
//! plain and reads only where `identity` is listed). [`EncryptedStore::rewrite`] writes every
//! value again with the first provider (after a key rotation, or to encrypt a store that was
//! plain); compacting afterwards removes the old revisions that held the previous form.
//!
//! Ciphers: AES-GCM from ring (random 12-byte nonce, the storage key as additional data, as
//! kube-apiserver's), XSalsa20-Poly1305 from RustCrypto's `crypto_secretbox` (random 24-byte
//! nonce), AES-CBC with PKCS#7 from RustCrypto's `aes` and `cbc` (random IV; unauthenticated, as
//! kube-apiserver's, and not recommended there either).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::hub::{WatchEvent, WatchStream};
use crate::{Compare, KeyValue, Op, OpResult, RangeRequest, RangeResponse, Result, Revision, Store, StoreError, TxnResponse, lossy};

/// The prefix of every encrypted value.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

/// One named key of a provider.
#[derive(Clone)]
pub struct Key {
    pub name: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Key {
    // Never the key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("name", &self.name).field("len", &self.secret.len()).finish()
    }
}

/// A transformer of kube-apiserver's EncryptionConfiguration.
#[derive(Clone, Debug)]
pub enum Provider {
    Identity,
    AesGcm(Vec<Key>),
    AesCbc(Vec<Key>),
    Secretbox(Vec<Key>),
}

impl Provider {
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Identity => "identity",
            Provider::AesGcm(_) => "aesgcm",
            Provider::AesCbc(_) => "aescbc",
            Provider::Secretbox(_) => "secretbox",
        }
    }

    fn keys(&self) -> &[Key] {
        match self {
            Provider::Identity => &[],
            Provider::AesGcm(k) | Provider::AesCbc(k) | Provider::Secretbox(k) => k,
        }
    }

    /// Checks what kube-apiserver checks of a provider's keys: at least one, unique names,
    /// the cipher's key lengths.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let allowed: &[usize] = match self {
            Provider::Identity => return Ok(()),
            Provider::AesGcm(_) => &[16, 32],
            Provider::AesCbc(_) => &[16, 24, 32],
            Provider::Secretbox(_) => &[32],
        };
        let keys = self.keys();
        if keys.is_empty() {
            return Err(format!("{}: at least one key is required", self.name()));
        }
        for (i, k) in keys.iter().enumerate() {
            if k.name.is_empty() || k.name.contains(':') {
                return Err(format!("{}: keys[{i}].name {:?} must be non-empty and contain no ':'", self.name(), k.name));
            }
            if keys[..i].iter().any(|o| o.name == k.name) {
                return Err(format!("{}: key name {:?} is used twice", self.name(), k.name));
            }
            if !allowed.contains(&k.secret.len()) {
                return Err(format!("{}: key {:?} is {} bytes; it must be one of {allowed:?}", self.name(), k.name, k.secret.len()));
            }
        }
        Ok(())
    }
}

/// Which values are encrypted how: those whose key starts with `prefix`, with `providers`.
#[derive(Clone, Debug)]
pub struct Rule {
    pub prefix: Bytes,
    pub providers: Vec<Provider>,
}

/// Every rule; the first whose prefix a key starts with applies to it.
#[derive(Clone, Debug, Default)]
pub struct EncryptionConfig {
    pub rules: Vec<Rule>,
}

impl EncryptionConfig {
    pub fn validate(&self) -> std::result::Result<(), String> {
        for r in &self.rules {
            if r.providers.is_empty() {
                return Err(format!("{}: at least one provider is required", lossy(&r.prefix)));
            }
            for p in &r.providers {
                p.validate()?;
            }
        }
        Ok(())
    }

    fn rule_for(&self, key: &[u8]) -> Option<&Rule> {
        self.rules.iter().find(|r| key.starts_with(&r.prefix))
    }

    /// Whether these stored values read with the configuration (a wrong key fails here).
    pub fn check(&self, values: impl IntoIterator<Item = KeyValue>) -> Result<()> {
        for kv in values {
            if let Some(rule) = self.rule_for(&kv.key) {
                open(&rule.providers, &kv.key, kv.value.clone())?;
            }
        }
        Ok(())
    }
}

/// How many values of each prefix are decrypted to check a configuration's keys.
pub const SAMPLE: usize = 16;

fn random(len: usize) -> Result<Vec<u8>> {
    use ring::rand::SecureRandom;
    let mut buf = vec![0u8; len];
    ring::rand::SystemRandom::new().fill(&mut buf).map_err(|_| StoreError::Io("the system's random source failed".into()))?;
    Ok(buf)
}

fn failure(key: &[u8], why: impl std::fmt::Display) -> StoreError {
    StoreError::Io(format!("cannot decrypt the value of {:?}: {why}", lossy(key)))
}

/// `value` encrypted for `key` with the first key of `provider`.
fn seal(provider: &Provider, key: &[u8], value: &[u8]) -> Result<Bytes> {
    let Some(k) = provider.keys().first() else { return Ok(Bytes::copy_from_slice(value)) };
    let mut out = format!("k8s:enc:{}:v1:{}:", provider.name(), k.name).into_bytes();
    match provider {
        Provider::Identity => return Ok(Bytes::copy_from_slice(value)),
        Provider::AesGcm(_) => {
            use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
            let algorithm = if k.secret.len() == 16 { &AES_128_GCM } else { &AES_256_GCM };
            let sealer = LessSafeKey::new(UnboundKey::new(algorithm, &k.secret).map_err(|_| StoreError::Io("bad AES-GCM key".into()))?);
            let nonce = random(12)?;
            let mut data = value.to_vec();
            let n = Nonce::try_assume_unique_for_key(&nonce).map_err(|_| StoreError::Io("bad nonce".into()))?;
            sealer.seal_in_place_append_tag(n, Aad::from(key), &mut data).map_err(|_| StoreError::Io("AES-GCM sealing failed".into()))?;
            out.extend_from_slice(&nonce);
            out.extend_from_slice(&data);
        }
        Provider::Secretbox(_) => {
            use crypto_secretbox::aead::{Aead, KeyInit};
            let cipher = crypto_secretbox::XSalsa20Poly1305::new_from_slice(&k.secret).map_err(|_| StoreError::Io("bad secretbox key".into()))?;
            let nonce = random(24)?;
            let sealed = cipher.encrypt(crypto_secretbox::Nonce::from_slice(&nonce), value).map_err(|_| StoreError::Io("secretbox sealing failed".into()))?;
            out.extend_from_slice(&nonce);
            out.extend_from_slice(&sealed);
        }
        Provider::AesCbc(_) => {
            use cbc::cipher::{BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
            let iv = random(16)?;
            let sealed = match k.secret.len() {
                16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(&k.secret, &iv).map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(value)),
                24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(&k.secret, &iv).map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(value)),
                _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(&k.secret, &iv).map(|c| c.encrypt_padded_vec_mut::<Pkcs7>(value)),
            }
            .map_err(|_| StoreError::Io("bad AES-CBC key".into()))?;
            out.extend_from_slice(&iv);
            out.extend_from_slice(&sealed);
        }
    }
    Ok(Bytes::from(out))
}

/// The provider and key a stored value names: `k8s:enc:<provider>:v1:<name>:`, and where its
/// ciphertext starts.
fn envelope(value: &[u8]) -> Option<(&str, &str, usize)> {
    let rest = value.strip_prefix(ENCRYPTED_PREFIX)?;
    let mut fields = rest.splitn(4, |b| *b == b':');
    let provider = std::str::from_utf8(fields.next()?).ok()?;
    let version = fields.next()?;
    let name = std::str::from_utf8(fields.next()?).ok()?;
    let body = fields.next()?;
    (version == b"v1").then_some((provider, name, value.len() - body.len()))
}

/// `value` as it was written, read with `providers`.
fn open(providers: &[Provider], key: &[u8], value: Bytes) -> Result<Bytes> {
    let Some((kind, name, start)) = envelope(&value) else {
        if providers.iter().any(|p| matches!(p, Provider::Identity)) {
            return Ok(value);
        }
        return Err(failure(key, "the value is not encrypted and no identity provider reads it"));
    };
    let found = providers.iter().find_map(|p| (p.name() == kind).then(|| p.keys().iter().find(|k| k.name == name).map(|k| (p, k))).flatten());
    let Some((provider, k)) = found else {
        return Err(failure(key, format!("it was written with {kind} key {name:?}, which the configuration does not have")));
    };
    let body = &value[start..];
    let plain = match provider {
        Provider::Identity => return Ok(value),
        Provider::AesGcm(_) => {
            use ring::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
            if body.len() < 12 + 16 {
                return Err(failure(key, "the ciphertext is too short"));
            }
            let algorithm = if k.secret.len() == 16 { &AES_128_GCM } else { &AES_256_GCM };
            let opener = LessSafeKey::new(UnboundKey::new(algorithm, &k.secret).map_err(|_| failure(key, "bad AES-GCM key"))?);
            let (nonce, sealed) = body.split_at(12);
            let mut data = sealed.to_vec();
            let n = Nonce::try_assume_unique_for_key(nonce).map_err(|_| failure(key, "bad nonce"))?;
            let plain =
                opener.open_in_place(n, Aad::from(key), &mut data).map_err(|_| failure(key, format!("aesgcm key {name:?} does not open it (wrong key?)")))?;
            plain.to_vec()
        }
        Provider::Secretbox(_) => {
            use crypto_secretbox::aead::{Aead, KeyInit};
            if body.len() < 24 {
                return Err(failure(key, "the ciphertext is too short"));
            }
            let cipher = crypto_secretbox::XSalsa20Poly1305::new_from_slice(&k.secret).map_err(|_| failure(key, "bad secretbox key"))?;
            let (nonce, sealed) = body.split_at(24);
            cipher
                .decrypt(crypto_secretbox::Nonce::from_slice(nonce), sealed)
                .map_err(|_| failure(key, format!("secretbox key {name:?} does not open it (wrong key?)")))?
        }
        Provider::AesCbc(_) => {
            use cbc::cipher::{BlockDecryptMut, KeyIvInit, block_padding::Pkcs7};
            if body.len() < 32 || !body.len().is_multiple_of(16) {
                return Err(failure(key, "the ciphertext is not whole blocks"));
            }
            let (iv, sealed) = body.split_at(16);
            match k.secret.len() {
                16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(&k.secret, iv).map(|c| c.decrypt_padded_vec_mut::<Pkcs7>(sealed)),
                24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(&k.secret, iv).map(|c| c.decrypt_padded_vec_mut::<Pkcs7>(sealed)),
                _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(&k.secret, iv).map(|c| c.decrypt_padded_vec_mut::<Pkcs7>(sealed)),
            }
            .map_err(|_| failure(key, "bad AES-CBC key"))?
            .map_err(|_| failure(key, format!("aescbc key {name:?} does not open it (wrong key?)")))?
        }
    };
    Ok(Bytes::from(plain))
}

/// A store that encrypts the values [`EncryptionConfig`] names (see the module header).
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    config: Arc<EncryptionConfig>,
}

impl std::fmt::Debug for EncryptedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptedStore").field("backend", &self.inner.backend_name()).field("rules", &self.config.rules.len()).finish()
    }
}

/// What [`EncryptedStore::rewrite`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rewritten {
    /// Values written again with the first provider and key.
    pub rewritten: usize,
    /// Values already in that form.
    pub current: usize,
}

impl EncryptedStore {
    /// Wraps `inner`. Fails when the configuration is invalid, or when a value already stored
    /// under an encrypted prefix cannot be read with it (a wrong key): nothing is written then.
    pub async fn new(inner: Arc<dyn Store>, config: EncryptionConfig) -> Result<EncryptedStore> {
        config.validate().map_err(|e| StoreError::InvalidKey { reason: format!("encryption configuration: {e}") })?;
        let store = EncryptedStore { inner, config: Arc::new(config) };
        for rule in &store.config.rules {
            let sample = store.inner.range(RangeRequest::prefix(rule.prefix.clone()).limit(SAMPLE)).await?;
            store.config.check(sample.kvs)?;
        }
        Ok(store)
    }

    fn decrypt(&self, mut kv: KeyValue) -> Result<KeyValue> {
        if let Some(rule) = self.config.rule_for(&kv.key) {
            kv.value = open(&rule.providers, &kv.key, std::mem::take(&mut kv.value))?;
        }
        Ok(kv)
    }

    fn encrypt(&self, key: &Bytes, value: Bytes) -> Result<Bytes> {
        match self.config.rule_for(key).and_then(|r| r.providers.first()) {
            Some(p) => seal(p, key, &value),
            None => Ok(value),
        }
    }

    /// Writes every value under the encrypted prefixes that is not in the first provider's
    /// form with its first key (each guarded by its revision; one that changes meanwhile was
    /// written in the current form anyway). Compact the store afterwards to drop the old form.
    pub async fn rewrite(&self, mut progress: impl FnMut(usize)) -> Result<Rewritten> {
        let mut done = Rewritten::default();
        for rule in &self.config.rules {
            let want = rule.providers.first().map(|p| match p.keys().first() {
                Some(k) => format!("k8s:enc:{}:v1:{}:", p.name(), k.name).into_bytes(),
                None => Vec::new(),
            });
            let mut after: Option<Bytes> = None;
            loop {
                let mut req = RangeRequest::prefix(rule.prefix.clone()).limit(256);
                req.continue_after = after.clone();
                let page = self.inner.range(req).await?;
                for kv in &page.kvs {
                    let current = match &want {
                        Some(w) if w.is_empty() => envelope(&kv.value).is_none(),
                        Some(w) => kv.value.starts_with(w),
                        None => true,
                    };
                    if current {
                        done.current += 1;
                        continue;
                    }
                    let plain = open(&rule.providers, &kv.key, kv.value.clone())?;
                    let sealed = self.encrypt(&kv.key, plain)?;
                    match self.inner.update_if(kv.key.clone(), sealed, kv.mod_revision).await {
                        Ok(_) => done.rewritten += 1,
                        Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    progress(done.rewritten);
                }
                match (page.more, page.kvs.last()) {
                    (true, Some(last)) => after = Some(last.key.clone()),
                    _ => break,
                }
            }
        }
        Ok(done)
    }

    /// [`rewrite`](Self::rewrite), then, when anything was written, the key and value `marker`
    /// makes of what was done, and a compaction to its revision, so that no revision keeps a
    /// value's previous form: compaction keeps the state at its revision readable, so the
    /// version the last rewrite replaced goes only once a later revision exists. The same on
    /// every backend; what remains is each backend's own file clean-up (the embedded store
    /// written afresh, etcd defragmented).
    pub async fn reencrypt(&self, marker: impl FnOnce(&Rewritten) -> (Bytes, Bytes), progress: impl FnMut(usize)) -> Result<Rewritten> {
        let done = self.rewrite(progress).await?;
        if done.rewritten > 0 {
            let (key, value) = marker(&done);
            // Through this store: a marker under an encrypted prefix is written encrypted.
            Store::txn(self, vec![], vec![Op::Put(key, value)]).await?;
            let revision = self.inner.current_revision().await?;
            self.inner.compact(revision).await?;
        }
        Ok(done)
    }
}

#[async_trait]
impl Store for EncryptedStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        self.inner.get(key).await?.map(|kv| self.decrypt(kv)).transpose()
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let mut resp = self.inner.range(req).await?;
        resp.kvs = resp.kvs.into_iter().map(|kv| self.decrypt(kv)).collect::<Result<_>>()?;
        Ok(resp)
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnResponse> {
        let ops = ops
            .into_iter()
            .map(|op| match op {
                Op::Put(k, v) => {
                    let v = self.encrypt(&k, v)?;
                    Ok(Op::Put(k, v))
                }
                other => Ok(other),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut resp = self.inner.txn(compares, ops).await?;
        for r in &mut resp.results {
            let (OpResult::Put { prev } | OpResult::Delete { prev }) = r;
            if let Some(kv) = prev.take() {
                *prev = Some(self.decrypt(kv)?);
            }
        }
        Ok(resp)
    }

    async fn watch(&self, prefix: &[u8], after_revision: Revision) -> Result<WatchStream> {
        let mut inner = self.inner.watch(prefix, after_revision).await?;
        // Only a watch that can see encrypted values needs a relay.
        let overlaps = self.config.rules.iter().any(|r| r.prefix.starts_with(prefix) || prefix.starts_with(&r.prefix));
        if !overlaps {
            return Ok(inner);
        }
        let (tx, rx) = mpsc::channel(1024);
        let (progress_tx, mut progress_rx) = mpsc::channel::<()>(4);
        let config = self.config.clone();
        let decrypt = move |kv: KeyValue| -> Result<KeyValue> {
            match config.rule_for(&kv.key) {
                Some(rule) => Ok(KeyValue { value: open(&rule.providers, &kv.key, kv.value.clone())?, ..kv }),
                None => Ok(kv),
            }
        };
        let task = tokio::spawn(async move {
            let mut progress_open = true;
            loop {
                tokio::select! {
                    asked = progress_rx.recv(), if progress_open => match asked {
                        Some(()) => inner.request_progress(),
                        None => progress_open = false,
                    },
                    event = inner.next_event() => {
                        let Some(event) = event else { return };
                        let out = event.and_then(|e| match e {
                            WatchEvent::Put { kv, prev } => Ok(WatchEvent::Put { kv: decrypt(kv)?, prev: prev.map(&decrypt).transpose()? }),
                            WatchEvent::Delete { key, revision, prev } => Ok(WatchEvent::Delete { key, revision, prev: decrypt(prev)? }),
                            other => Ok(other),
                        });
                        if tx.send(out).await.is_err() { return; }
                    }
                }
            }
        });
        Ok(WatchStream::from_parts(rx, Some(progress_tx), task))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, len: usize, fill: u8) -> Key {
        Key { name: name.into(), secret: vec![fill; len] }
    }

    #[test]
    fn every_provider_round_trips_in_kube_apiservers_form() {
        let k = b"/registry/core/secrets/default/s1";
        for p in [
            Provider::AesGcm(vec![key("g", 32, 1)]),
            Provider::AesGcm(vec![key("g16", 16, 1)]),
            Provider::AesCbc(vec![key("c", 32, 2)]),
            Provider::AesCbc(vec![key("c24", 24, 2)]),
            Provider::Secretbox(vec![key("s", 32, 3)]),
        ] {
            let sealed = seal(&p, k, b"{\"data\":{\"password\":\"hunter2\"}}").unwrap();
            let head = format!("k8s:enc:{}:v1:{}:", p.name(), p.keys()[0].name);
            assert!(sealed.starts_with(head.as_bytes()), "{}", String::from_utf8_lossy(&sealed));
            assert!(!sealed.windows(7).any(|w| w == b"hunter2"), "{} leaks the plaintext", p.name());
            let opened = open(std::slice::from_ref(&p), k, sealed.clone()).unwrap();
            assert_eq!(&opened[..], b"{\"data\":{\"password\":\"hunter2\"}}");
            // Two writes of one value differ (random nonces and IVs).
            assert_ne!(seal(&p, k, b"same").unwrap(), seal(&p, k, b"same").unwrap());
        }
    }

    #[test]
    fn wrong_keys_other_keys_and_moved_values_are_refused() {
        let k = b"/registry/core/secrets/default/s1";
        let sealed = seal(&Provider::Secretbox(vec![key("a", 32, 1)]), k, b"v").unwrap();
        let wrong = open(&[Provider::Secretbox(vec![key("a", 32, 9)])], k, sealed.clone()).unwrap_err();
        assert!(wrong.to_string().contains("does not open it (wrong key?)"), "{wrong}");
        let missing = open(&[Provider::Secretbox(vec![key("b", 32, 1)])], k, sealed.clone()).unwrap_err();
        assert!(missing.to_string().contains("secretbox key \"a\", which the configuration does not have"), "{missing}");
        // AES-GCM binds the value to its key: copied under another name, it does not open.
        let g = Provider::AesGcm(vec![key("g", 32, 1)]);
        let sealed = seal(&g, k, b"v").unwrap();
        assert!(open(std::slice::from_ref(&g), b"/registry/core/secrets/default/other", sealed).is_err());
        // A plain value reads only through identity.
        assert!(open(std::slice::from_ref(&g), k, Bytes::from_static(b"{}")).is_err());
        assert_eq!(&open(&[g, Provider::Identity], k, Bytes::from_static(b"{}")).unwrap()[..], b"{}");
    }

    #[test]
    fn keys_are_checked_as_kube_apiserver_checks_them() {
        assert!(Provider::Secretbox(vec![key("k", 16, 0)]).validate().unwrap_err().contains("must be one of [32]"));
        assert!(Provider::AesGcm(vec![]).validate().unwrap_err().contains("at least one key"));
        assert!(Provider::AesCbc(vec![key("k", 16, 0), key("k", 16, 1)]).validate().unwrap_err().contains("used twice"));
        assert!(format!("{:?}", key("k", 32, 7)).contains("len: 32"));
    }

    #[tokio::test]
    async fn the_store_encrypts_what_its_rules_name_and_rewrites_after_a_rotation() {
        let plain: Arc<dyn Store> = Arc::new(crate::memory::memory_store(Default::default()).unwrap());
        let rules = |first: Provider, second: Provider| EncryptionConfig {
            rules: vec![Rule { prefix: Bytes::from_static(b"/registry/core/secrets/"), providers: vec![first, second] }],
        };
        let old = Provider::Secretbox(vec![key("old", 32, 1)]);
        let new = Provider::AesGcm(vec![key("new", 32, 2)]);
        let store = EncryptedStore::new(plain.clone(), rules(old.clone(), Provider::Identity)).await.unwrap();
        let (secret, cm) = (Bytes::from_static(b"/registry/core/secrets/ns/a"), Bytes::from_static(b"/registry/core/configmaps/ns/a"));
        let mut w = store.watch(b"/registry/core/", 0).await.unwrap();
        store.create(secret.clone(), Bytes::from_static(b"hunter2")).await.unwrap();
        store.create(cm.clone(), Bytes::from_static(b"plain")).await.unwrap();
        assert!(plain.get(&secret).await.unwrap().unwrap().value.starts_with(b"k8s:enc:secretbox:v1:old:"));
        assert_eq!(&plain.get(&cm).await.unwrap().unwrap().value[..], b"plain", "only what the rules name");
        assert_eq!(&store.get(&secret).await.unwrap().unwrap().value[..], b"hunter2");
        match w.next_event().await.unwrap().unwrap() {
            WatchEvent::Put { kv, .. } => assert_eq!(&kv.value[..], b"hunter2", "watch events are decrypted"),
            other => panic!("{other:?}"),
        }
        // Rotation: the new key first, the old one still read; a rewrite moves everything over.
        let store = EncryptedStore::new(plain.clone(), rules(new.clone(), old.clone())).await.unwrap();
        let marker = |done: &Rewritten| (Bytes::from_static(b"/marker"), Bytes::from(done.rewritten.to_string()));
        assert_eq!(store.reencrypt(marker, |_| {}).await.unwrap(), Rewritten { rewritten: 1, current: 0 });
        // Compacted past the marker, so no revision keeps the old form.
        let rev = plain.current_revision().await.unwrap();
        assert_eq!((plain.compacted_revision().await.unwrap(), &plain.get(b"/marker").await.unwrap().unwrap().value[..]), (rev, &b"1"[..]));
        assert!(plain.get(&secret).await.unwrap().unwrap().value.starts_with(b"k8s:enc:aesgcm:v1:new:"));
        assert_eq!(store.rewrite(|_| {}).await.unwrap(), Rewritten { rewritten: 0, current: 1 });
        // Without the key the data was written with, opening fails before anything is written.
        let rev = plain.current_revision().await.unwrap();
        let err = EncryptedStore::new(plain.clone(), rules(old, Provider::Identity)).await.unwrap_err();
        assert!(err.to_string().contains("aesgcm key \"new\", which the configuration does not have"), "{err}");
        assert_eq!(plain.current_revision().await.unwrap(), rev);
    }
}
