//! Service account tokens as kube-apiserver issues them for a TokenRequest
//! (`POST serviceaccounts/{name}/token`): JWTs with its claims (`iss`, `sub`
//! `system:serviceaccount:<ns>:<name>`, `aud`, `exp`, `iat`, `nbf`, `jti`, and `kubernetes.io`
//! naming the namespace, the account and any bound Pod, Secret or Node), signed ES256.
//!
//! The signing key lives in the store (made by the first API server that needs it, read by
//! every other one on the same store, kept across restarts; ADR 0015). Checking a token is
//! stateless — signature, issuer, audience, not expired — apart from what only the store
//! knows, which [`crate::server`] asks it: that the account, and any bound object, still exists
//! with the uid the token names. The public key is served at `/openid/v1/jwks`, the issuer's
//! discovery document at `/.well-known/openid-configuration`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use flotilla_store::{Store, StoreError};
use ring::rand::SystemRandom;
use ring::signature::{self, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The issuer, and the audience tokens get when a TokenRequest names none (kube-apiserver's
/// `--api-audiences` default to its `--service-account-issuer`; this is its usual value).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

const KEY_KEY: &str = "/registry/flotilla.io/serviceaccountsigningkey";

/// Clock skew allowed on `exp` and `nbf` (go-jose's default leeway, which kube-apiserver uses).
const LEEWAY_SECONDS: i64 = 60;

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("the service account signing key in the store is unreadable: {0}")]
    StoredKey(String),
    #[error("cannot generate a service account signing key")]
    Generate,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The ES256 key service account tokens are signed with.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish()
    }
}

/// DER prefix of a P-256 SubjectPublicKeyInfo, before the 65-byte point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl SigningKey {
    fn from_pkcs8(der: &[u8]) -> Result<SigningKey, JwtError> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &SystemRandom::new()).map_err(|e| JwtError::StoredKey(e.to_string()))?;
        // kube-apiserver's key id: the SHA-256 of the DER public key, base64url.
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(pair.public_key().as_ref());
        let kid = B64.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(SigningKey { pair, kid })
    }

    /// The key in the store, if one was made.
    pub async fn load(store: &dyn Store) -> Result<Option<SigningKey>, JwtError> {
        match store.get(&Bytes::from_static(KEY_KEY.as_bytes())).await? {
            Some(kv) => Self::from_stored(&kv.value).map(Some),
            None => Ok(None),
        }
    }

    /// The key in the store, made and stored first if there is none yet (two servers racing
    /// both end up with the one stored first).
    pub async fn load_or_create(store: &dyn Store) -> Result<SigningKey, JwtError> {
        let key = Bytes::from_static(KEY_KEY.as_bytes());
        if let Some(k) = Self::load(store).await? {
            return Ok(k);
        }
        let der = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new()).map_err(|_| JwtError::Generate)?;
        let record = json!({"alg": "ES256", "pkcs8": B64.encode(der.as_ref())});
        match store.create(key.clone(), Bytes::from(record.to_string())).await {
            Ok(_) => Self::from_pkcs8(der.as_ref()),
            Err(StoreError::AlreadyExists { .. }) => match store.get(&key).await? {
                Some(kv) => Self::from_stored(&kv.value),
                None => Err(JwtError::StoredKey("created by another server and gone again".into())),
            },
            Err(e) => Err(e.into()),
        }
    }

    fn from_stored(bytes: &[u8]) -> Result<SigningKey, JwtError> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| JwtError::StoredKey(e.to_string()))?;
        let der = v.get("pkcs8").and_then(Value::as_str).and_then(|s| B64.decode(s).ok()).ok_or_else(|| JwtError::StoredKey("no pkcs8 key".into()))?;
        Self::from_pkcs8(&der)
    }

    /// A signed JWT carrying `claims`.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let input = format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()));
        let sig = self.pair.sign(&SystemRandom::new(), input.as_bytes()).expect("ECDSA signing with a valid key does not fail");
        format!("{input}.{}", B64.encode(sig.as_ref()))
    }

    /// The claims of `token` if this key signed it; None for anything else (another kind of
    /// bearer token, another key, a forgery).
    pub fn verify(&self, token: &str) -> Option<Value> {
        let mut parts = token.split('.');
        let (h, c, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: Value = serde_json::from_slice(&B64.decode(h).ok()?).ok()?;
        if header.get("alg").and_then(Value::as_str) != Some("ES256") {
            return None;
        }
        let sig = B64.decode(s).ok()?;
        let public = signature::UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.pair.public_key().as_ref());
        public.verify(format!("{h}.{c}").as_bytes(), &sig).ok()?;
        serde_json::from_slice(&B64.decode(c).ok()?).ok()
    }

    /// The JSON Web Key Set kube-apiserver serves at `/openid/v1/jwks`.
    pub fn jwks(&self) -> Value {
        let point = self.pair.public_key().as_ref();
        json!({"keys": [{"use": "sig", "kty": "EC", "kid": self.kid, "crv": "P-256", "alg": "ES256", "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])}]})
    }
}

/// The issuer's OpenID discovery document, naming the key set at `jwks_uri`.
pub fn openid_configuration(jwks_uri: &str) -> Value {
    json!({
        "issuer": ISSUER,
        "jwks_uri": jwks_uri,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    })
}

/// An object a token is bound to: it is valid only while that object lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// `pod`, `secret` or `node`.
    pub kind: &'static str,
    pub name: String,
    pub uid: String,
}

/// What a token says about whom it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub namespace: String,
    pub account: String,
    pub account_uid: String,
    pub bound: Vec<Bound>,
}

/// The claims of a token for `subject`, for `audiences`, valid from `now` for `seconds`.
pub fn claims(subject: &Subject, audiences: &[String], now: i64, seconds: i64) -> Value {
    let mut k8s = json!({
        "namespace": subject.namespace,
        "serviceaccount": {"name": subject.account, "uid": subject.account_uid},
    });
    for b in &subject.bound {
        k8s[b.kind] = json!({"name": b.name, "uid": b.uid});
    }
    json!({
        "aud": audiences,
        "exp": now + seconds,
        "iat": now,
        "iss": ISSUER,
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": k8s,
        "nbf": now,
        "sub": format!("system:serviceaccount:{}:{}", subject.namespace, subject.account),
    })
}

/// Whom verified `claims` stand for, if they are this issuer's, meant for this server (an
/// audience of [`ISSUER`]) and current at `now`.
pub fn subject(claims: &Value, now: i64) -> Option<Subject> {
    if claims.get("iss").and_then(Value::as_str) != Some(ISSUER) {
        return None;
    }
    let aud_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == ISSUER,
        Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(ISSUER)),
        _ => false,
    };
    let exp = claims.get("exp").and_then(Value::as_i64)?;
    let nbf = claims.get("nbf").and_then(Value::as_i64).unwrap_or(i64::MIN);
    if !aud_ok || now > exp + LEEWAY_SECONDS || now + LEEWAY_SECONDS < nbf {
        return None;
    }
    let k = claims.get("kubernetes.io")?;
    let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(String::from);
    let subject = Subject {
        namespace: s(k, "/namespace")?,
        account: s(k, "/serviceaccount/name")?,
        account_uid: s(k, "/serviceaccount/uid")?,
        bound: ["pod", "secret", "node"]
            .into_iter()
            .filter_map(|kind| Some(Bound { kind, name: s(k, &format!("/{kind}/name"))?, uid: s(k, &format!("/{kind}/uid"))? }))
            .collect(),
    };
    let sub = format!("system:serviceaccount:{}:{}", subject.namespace, subject.account);
    (claims.get("sub").and_then(Value::as_str) == Some(sub.as_str())).then_some(subject)
}

/// The uid of the live object at `key`, if there is one.
async fn live_uid(store: &dyn Store, key: String) -> Option<String> {
    let kv = store.get(&Bytes::from(key)).await.ok()??;
    let v: Value = serde_json::from_slice(&kv.value).ok()?;
    crate::meta::meta_str(&v, "uid").map(String::from)
}

/// The store key of a bound object.
fn bound_key(namespace: &str, b: &Bound) -> String {
    match b.kind {
        "node" => format!("/registry/core/nodes/{}", b.name),
        kind => format!("/registry/core/{kind}s/{namespace}/{}", b.name),
    }
}

/// Whom a TokenRequest token stands for: its signature, issuer, audience and lifetime hold, and
/// its account — and every object it is bound to — still exists with the uid it names (a
/// deleted and re-created account does not inherit the old one's tokens).
pub async fn authenticate(store: &dyn Store, key: &SigningKey, token: &str, now: i64) -> Option<crate::auth::Identity> {
    let claims = key.verify(token)?;
    let s = subject(&claims, now)?;
    if live_uid(store, format!("/registry/core/serviceaccounts/{}/{}", s.namespace, s.account)).await? != s.account_uid {
        return None;
    }
    for b in &s.bound {
        if live_uid(store, bound_key(&s.namespace, b)).await? != b.uid {
            return None;
        }
    }
    let mut id = crate::auth::Identity::user(
        &format!("system:serviceaccount:{}:{}", s.namespace, s.account),
        &["system:serviceaccounts", &format!("system:serviceaccounts:{}", s.namespace)],
    );
    id.uid = s.account_uid;
    let mut extra = |k: &str, v: &str| id.extra.insert(format!("authentication.kubernetes.io/{k}"), vec![v.to_string()]);
    for b in s.bound.iter().filter(|b| b.kind != "secret") {
        extra(&format!("{}-name", b.kind), &b.name);
        extra(&format!("{}-uid", b.kind), &b.uid);
    }
    if let Some(jti) = claims.get("jti").and_then(Value::as_str) {
        extra("credential-id", &format!("JTI={jti}"));
    }
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        let der = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new()).unwrap();
        SigningKey::from_pkcs8(der.as_ref()).unwrap()
    }

    fn bot() -> Subject {
        Subject {
            namespace: "ns".into(),
            account: "bot".into(),
            account_uid: "u1".into(),
            bound: vec![Bound { kind: "pod", name: "p".into(), uid: "u2".into() }],
        }
    }

    #[test]
    fn a_signed_token_verifies_and_names_its_subject_until_it_expires() {
        let k = key();
        let token = k.sign(&claims(&bot(), &[ISSUER.to_string()], 1000, 600));
        let c = k.verify(&token).expect("verifies");
        assert_eq!(c["sub"], "system:serviceaccount:ns:bot");
        assert_eq!(c["kubernetes.io"]["pod"], json!({"name": "p", "uid": "u2"}));
        assert_eq!(subject(&c, 1000), Some(bot()));
        assert_eq!(subject(&c, 1600 + LEEWAY_SECONDS), Some(bot()));
        assert_eq!(subject(&c, 1601 + LEEWAY_SECONDS), None, "expired");
        assert_eq!(subject(&c, 1000 - 2 * LEEWAY_SECONDS), None, "not yet valid");
    }

    #[test]
    fn tokens_for_other_audiences_other_keys_or_tampered_are_refused() {
        let k = key();
        let other = k.sign(&claims(&bot(), &["vault".to_string()], 1000, 600));
        assert_eq!(subject(&k.verify(&other).unwrap(), 1000), None);
        let token = k.sign(&claims(&bot(), &[ISSUER.to_string()], 1000, 600));
        assert!(key().verify(&token).is_none());
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        let mut c: Value = serde_json::from_slice(&B64.decode(&parts[1]).unwrap()).unwrap();
        c["sub"] = json!("system:serviceaccount:ns:admin");
        parts[1] = B64.encode(c.to_string());
        assert!(k.verify(&parts.join(".")).is_none());
        assert!(k.verify("flotilla-sa.opaque").is_none());
    }

    #[test]
    fn the_key_set_names_the_key_tokens_carry() {
        let k = key();
        let jwks = k.jwks();
        let token = k.sign(&json!({}));
        let header: Value = serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
        assert_eq!(jwks["keys"][0]["kid"], header["kid"]);
        assert_eq!(B64.decode(jwks["keys"][0]["x"].as_str().unwrap()).unwrap().len(), 32);
    }
}
