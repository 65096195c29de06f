//! Bootstrap tokens as Kubernetes defines them (kubeadm and `karmadactl token create` write
//! them; kube-apiserver's bootstrap token authenticator, kube-controller-manager's
//! `bootstrapsigner` and `tokencleaner` read them): a token `<id>.<secret>` (6 and 16 characters
//! of `[a-z0-9]`) stored as the Secret `kube-system/bootstrap-token-<id>` of type
//! `bootstrap.kubernetes.io/token`, and the `kube-public/cluster-info` ConfigMap whose
//! `kubeconfig` each signing token signs (`jws-kubeconfig-<id>`, a detached HS256 JWS keyed
//! with the token's secret) so that a newcomer holding a token can trust what it downloaded.
//! Pure: parsing, checks, the Secret and the signature; the callers do the I/O.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};

/// Where bootstrap token Secrets live.
pub const NAMESPACE: &str = "kube-system";
/// `bootstrap-token-<id>`.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// The Secret type.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The user a token authenticates: `system:bootstrap:<id>`.
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The group every bootstrap token authenticates in.
pub const DEFAULT_GROUP: &str = "system:bootstrappers";
/// Karmada's extra group on the tokens `karmadactl token create` makes.
pub const KARMADA_GROUP: &str = "system:bootstrappers:karmada:default-cluster-token";
/// Flotilla's extra group binding a token to one cluster name (`flotilla token create --cluster-name`).
pub const CLUSTER_GROUP_PREFIX: &str = "system:bootstrappers:flotilla:cluster:";

/// The name prefix of the certificate requests a bootstrap token makes (`bootstrap-<id>-`):
/// only that token may create them, and they are the only ones it may read (ADR 0028).
pub fn csr_name_prefix(token_id: &str) -> String {
    format!("bootstrap-{token_id}-")
}

/// The cluster a bootstrap caller's groups bind it to (Flotilla's extra group), if any.
pub fn bound_cluster(groups: &[String]) -> Option<&str> {
    groups.iter().find_map(|g| g.strip_prefix(CLUSTER_GROUP_PREFIX))
}
/// The ConfigMap of token discovery.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO: &str = "cluster-info";
/// Its key holding the kubeconfig (the server and its CA, no credential).
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Its keys holding each token's signature: `jws-kubeconfig-<id>`.
pub const JWS_PREFIX: &str = "jws-kubeconfig-";

/// Secret data keys.
pub mod keys {
    pub const TOKEN_ID: &str = "token-id";
    pub const TOKEN_SECRET: &str = "token-secret";
    pub const EXPIRATION: &str = "expiration";
    pub const DESCRIPTION: &str = "description";
    pub const USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
    pub const USAGE_SIGNING: &str = "usage-bootstrap-signing";
    pub const EXTRA_GROUPS: &str = "auth-extra-groups";
}

/// A bootstrap token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret half is a credential: never printed.
        write!(f, "Token({}.<redacted>)", self.id)
    }
}

/// Equal bytes, in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn token_chars(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl Token {
    /// `<id>.<secret>` with the lengths and alphabet Kubernetes requires.
    pub fn parse(s: &str) -> Option<Token> {
        let (id, secret) = s.split_once('.')?;
        (token_chars(id, 6) && token_chars(secret, 16)).then(|| Token { id: id.into(), secret: secret.into() })
    }

    /// A fresh token from `random` bytes (22 are used), mapped onto `[a-z0-9]`.
    pub fn from_random(random: &[u8; 22]) -> Token {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        // 256 is not a multiple of 36: the small bias (at most one part in 7) leaves each
        // character close to 5.2 bits, 114 bits for the secret half.
        let chars: String = random.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
        Token { id: chars[..6].into(), secret: chars[6..].into() }
    }

    /// The whole token, as a credential is written (`<id>.<secret>`).
    pub fn expose(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    pub fn secret_name(&self) -> String {
        format!("{SECRET_PREFIX}{}", self.id)
    }
}

/// What a new token may do and until when.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub description: Option<String>,
    /// RFC 3339; none: the token never expires.
    pub expiration: Option<jiff::Timestamp>,
    pub authentication: bool,
    pub signing: bool,
    pub extra_groups: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

/// The Secret holding `token`, as kubeadm writes it (`data`, base64).
pub fn secret(token: &Token, options: &Options) -> Value {
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: &str| data.insert(k.to_string(), STANDARD.encode(v));
    put(keys::TOKEN_ID, &token.id);
    put(keys::TOKEN_SECRET, &token.secret);
    if let Some(d) = &options.description {
        put(keys::DESCRIPTION, d);
    }
    if let Some(e) = options.expiration {
        put(keys::EXPIRATION, &e.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    }
    if options.authentication {
        put(keys::USAGE_AUTHENTICATION, "true");
    }
    if options.signing {
        put(keys::USAGE_SIGNING, "true");
    }
    if !options.extra_groups.is_empty() {
        put(keys::EXTRA_GROUPS, &options.extra_groups.join(","));
    }
    let mut metadata = json!({"name": token.secret_name(), "namespace": NAMESPACE});
    if !options.labels.is_empty() {
        metadata["labels"] = json!(options.labels);
    }
    json!({"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE, "metadata": metadata, "data": data})
}

/// A bootstrap token Secret as read.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenSecret {
    pub id: String,
    secret: String,
    pub expiration: Option<jiff::Timestamp>,
    pub authentication: bool,
    pub signing: bool,
    pub extra_groups: Vec<String>,
    pub description: Option<String>,
    pub deleting: bool,
}

/// Why a Secret is not a usable bootstrap token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("not a bootstrap token Secret (name or type)")]
    NotBootstrap,
    #[error("data.{0} is missing or not base64 text")]
    Field(&'static str),
    #[error("data.token-id does not match the Secret's name")]
    IdMismatch,
    #[error("data.expiration is not an RFC 3339 time: {0}")]
    Expiration(String),
    #[error("data.auth-extra-groups: {0:?} is not system:bootstrappers:<[a-z0-9:-]>")]
    Group(String),
}

fn field(data: &serde_json::Map<String, Value>, key: &'static str) -> Result<Option<String>, Invalid> {
    let Some(v) = data.get(key) else { return Ok(None) };
    let text = v.as_str().ok_or(Invalid::Field(key))?;
    let bytes = STANDARD.decode(text).map_err(|_| Invalid::Field(key))?;
    String::from_utf8(bytes).map(Some).map_err(|_| Invalid::Field(key))
}

/// An extra group Kubernetes accepts: `system:bootstrappers:` then `[a-z0-9:-]`, ending in
/// `[a-z0-9]`, at most 256 characters after the prefix.
pub fn valid_group(g: &str) -> bool {
    let Some(rest) = g.strip_prefix("system:bootstrappers:") else { return false };
    !rest.is_empty()
        && rest.len() <= 256
        && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
        && rest.bytes().last().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Read a stored Secret (JSON, `data` base64) as a bootstrap token.
pub fn parse_secret(secret: &Value) -> Result<TokenSecret, Invalid> {
    let name = secret.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let namespace = secret.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let Some(name_id) = name.strip_prefix(SECRET_PREFIX).filter(|_| namespace == NAMESPACE) else { return Err(Invalid::NotBootstrap) };
    if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE) {
        return Err(Invalid::NotBootstrap);
    }
    let empty = serde_json::Map::new();
    let data = secret.get("data").and_then(Value::as_object).unwrap_or(&empty);
    let id = field(data, keys::TOKEN_ID)?.ok_or(Invalid::Field(keys::TOKEN_ID))?;
    if id != name_id {
        return Err(Invalid::IdMismatch);
    }
    let token_secret = field(data, keys::TOKEN_SECRET)?.ok_or(Invalid::Field(keys::TOKEN_SECRET))?;
    let expiration = match field(data, keys::EXPIRATION)? {
        Some(e) => Some(e.parse::<jiff::Timestamp>().map_err(|err| Invalid::Expiration(format!("{e:?}: {err}")))?),
        None => None,
    };
    let extra_groups: Vec<String> =
        field(data, keys::EXTRA_GROUPS)?.map(|g| g.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()).unwrap_or_default();
    if let Some(bad) = extra_groups.iter().find(|g| !valid_group(g)) {
        return Err(Invalid::Group(bad.clone()));
    }
    Ok(TokenSecret {
        id,
        secret: token_secret,
        expiration,
        authentication: field(data, keys::USAGE_AUTHENTICATION)?.as_deref() == Some("true"),
        signing: field(data, keys::USAGE_SIGNING)?.as_deref() == Some("true"),
        extra_groups,
        description: field(data, keys::DESCRIPTION)?,
        deleting: secret.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()),
    })
}

impl TokenSecret {
    pub fn is_expired(&self, now: jiff::Timestamp) -> bool {
        self.expiration.is_some_and(|e| e <= now)
    }

    /// The token itself (for signing).
    pub fn token(&self) -> Token {
        Token { id: self.id.clone(), secret: self.secret.clone() }
    }

    /// Whether `presented` is this token (constant time in the secret half).
    pub fn matches(&self, presented: &Token) -> bool {
        presented.id == self.id && same(presented.secret.as_bytes(), self.secret.as_bytes())
    }

    /// The user and groups `presented` authenticates as, as kube-apiserver's bootstrap token
    /// authenticator decides: the token matches, authentication is among its usages, it is not
    /// expired and not being deleted.
    pub fn authenticate(&self, presented: &Token, now: jiff::Timestamp) -> Option<(String, Vec<String>)> {
        if !self.matches(presented) || !self.authentication || self.is_expired(now) || self.deleting {
            return None;
        }
        let mut groups = vec![DEFAULT_GROUP.to_string()];
        groups.extend(self.extra_groups.iter().filter(|g| *g != DEFAULT_GROUP).cloned());
        Some((format!("{USER_PREFIX}{}", self.id), groups))
    }
}

/// The detached JWS of `content` under `token`: `base64url(header)..base64url(HMAC-SHA256)`,
/// header `{"alg":"HS256","kid":"<id>"}`, keyed with the token's secret half — what
/// kube-controller-manager's bootstrap signer writes and kubeadm's discovery checks.
pub fn detached_signature(content: &str, token: &Token) -> String {
    let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"HS256","kid":"{}"}}"#, token.id));
    let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(content));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.secret.as_bytes());
    let signature = ring::hmac::sign(&key, input.as_bytes());
    format!("{header}..{}", URL_SAFE_NO_PAD.encode(signature.as_ref()))
}

/// Whether `signature` is `token`'s over `content` (constant time).
pub fn signature_is_valid(signature: &str, content: &str, token: &Token) -> bool {
    same(signature.as_bytes(), detached_signature(content, token).as_bytes())
}

/// What `cluster-info`'s data should hold: its kubeconfig and one signature per token that may
/// sign (not expired, not being deleted). Returns the data when it differs from `current`.
pub fn signed_cluster_info(current: &BTreeMap<String, String>, tokens: &[TokenSecret], now: jiff::Timestamp) -> Option<BTreeMap<String, String>> {
    let kubeconfig = current.get(KUBECONFIG_KEY)?;
    let mut want: BTreeMap<String, String> = current.iter().filter(|(k, _)| !k.starts_with(JWS_PREFIX)).map(|(k, v)| (k.clone(), v.clone())).collect();
    for t in tokens.iter().filter(|t| t.signing && !t.is_expired(now) && !t.deleting) {
        want.insert(format!("{JWS_PREFIX}{}", t.id), detached_signature(kubeconfig, &t.token()));
    }
    (want != *current).then_some(want)
}

/// A CA's public key pin as kubeadm and `karmadactl register` take it
/// (`--discovery-token-ca-cert-hash`): `sha256:` and the hex SHA-256 of the certificate's
/// DER SubjectPublicKeyInfo.
pub fn ca_cert_hash(ca_pem: &str) -> Result<String, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).map_err(|e| format!("not a PEM certificate: {e}"))?;
    let cert = block.parse_x509().map_err(|e| format!("not a certificate: {e}"))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
    Ok(format!("sha256:{}", digest.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// What token discovery reads from `cluster-info`'s kubeconfig: the first cluster's server and
/// CA (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub server: String,
    pub ca_pem: String,
}

/// The server and CA of `cluster-info`'s kubeconfig.
pub fn cluster_info_endpoint(kubeconfig: &str) -> Result<Endpoint, String> {
    let doc: serde_json::Value = serde_saphyr::from_str(kubeconfig).map_err(|e| format!("cluster-info's kubeconfig does not parse: {e}"))?;
    let cluster = doc.pointer("/clusters/0/cluster").ok_or("cluster-info's kubeconfig names no cluster")?;
    let server = cluster.get("server").and_then(serde_json::Value::as_str).ok_or("cluster-info's kubeconfig has no server")?.to_string();
    let ca =
        cluster.get("certificate-authority-data").and_then(serde_json::Value::as_str).ok_or("cluster-info's kubeconfig has no certificate-authority-data")?;
    let ca =
        base64::engine::general_purpose::STANDARD.decode(ca.trim()).map_err(|e| format!("cluster-info's certificate-authority-data is not base64: {e}"))?;
    let ca_pem = String::from_utf8(ca).map_err(|_| "cluster-info's certificate-authority-data is not PEM".to_string())?;
    Ok(Endpoint { server, ca_pem })
}

/// Token discovery's checks on `cluster-info`'s data, as kubeadm makes them: the token signed
/// its kubeconfig, and the CA in it is one of `pins` (none: only when the caller skips CA
/// verification on purpose). The endpoint it names, trusted.
pub fn verify_cluster_info(data: &BTreeMap<String, String>, token: &Token, pins: &[String], skip_ca_verification: bool) -> Result<Endpoint, String> {
    let kubeconfig = data.get(KUBECONFIG_KEY).ok_or("the cluster-info ConfigMap holds no kubeconfig")?;
    let Some(signature) = data.get(&format!("{JWS_PREFIX}{}", token.id)) else {
        return Err(format!(
            "token id {:?} is invalid for this cluster or it has expired (cluster-info carries no signature for it); create a new one with flotilla token create",
            token.id
        ));
    };
    if !signature_is_valid(signature, kubeconfig, token) {
        return Err(format!("failed to verify the signature of cluster-info with token id {:?}: the token's secret is wrong", token.id));
    }
    let endpoint = cluster_info_endpoint(kubeconfig)?;
    if !skip_ca_verification {
        if pins.is_empty() {
            return Err("give the CA's pin with --discovery-token-ca-cert-hash (flotilla token create --print-register-command prints it), or --discovery-token-unsafe-skip-ca-verification".into());
        }
        let hash = ca_cert_hash(&endpoint.ca_pem)?;
        if !pins.iter().any(|p| p.eq_ignore_ascii_case(&hash)) {
            return Err(format!("the cluster CA found in cluster-info is not trusted: its public key pin {hash} is not among {}", pins.join(", ")));
        }
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A self-signed certificate and its pin as kubeadm's documentation computes it:
    // `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`.
    const PINNED_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBgTCCASegAwIBAgIUe11hBUWazmqhm4kAo/3f1kanV44wCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLY29uZm9ybWFuY2UwHhcNMjYxMjA0MjE1MTEwWhcNMzYxMjAx
MjE1MTEwWjAWMRQwEgYDVQQDDAtjb25mb3JtYW5jZTBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABKN4pQfUjpXZ9Lh+Tk4ClqeMvwQFDk35Z6QwgL4wlIrS3Tum+mIX
EefFhgSOAt0ev49VVtJ8w41LU3/cKnr+z+qjUzBRMB0GA1UdDgQWBBTqSb82PpZb
impsm3E0pnSaKvccJjAfBgNVHSMEGDAWgBTqSb82PpZbimpsm3E0pnSaKvccJjAP
BgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIBTuVvHCiKTL9wwULjqe
/2JH6o0J4cvXv/+QwRwbd5RoAiEA1Ttu92aq2HZ8gle2pYlPSIluGCRR1QU7x39E
c636znI=
-----END CERTIFICATE-----
";
    const PINNED_HASH: &str = "sha256:32976e5ae2f2273e32e755bd7824570d36bb5dffc182b738cc41fda8d8745ad3";

    #[test]
    fn a_ca_pin_is_the_sha256_of_its_public_key_info() {
        assert_eq!(ca_cert_hash(PINNED_CA).unwrap(), PINNED_HASH);
        assert!(ca_cert_hash("hello").is_err());
    }

    #[test]
    fn discovery_trusts_a_signed_cluster_info_with_a_pinned_ca() {
        let token = Token::parse("abcdef.0123456789abcdef").unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode(PINNED_CA);
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {ca}\n    server: https://10.0.0.1:6443\n"
        );
        let mut data = BTreeMap::from([(KUBECONFIG_KEY.to_string(), kubeconfig.clone())]);
        let pins = [PINNED_HASH.to_string()];
        assert!(verify_cluster_info(&data, &token, &pins, false).unwrap_err().contains("token id \"abcdef\" is invalid"));
        data.insert(format!("{JWS_PREFIX}abcdef"), detached_signature(&kubeconfig, &Token::parse("abcdef.ffffffffffffffff").unwrap()));
        assert!(verify_cluster_info(&data, &token, &pins, false).unwrap_err().contains("secret is wrong"));
        data.insert(format!("{JWS_PREFIX}abcdef"), detached_signature(&kubeconfig, &token));
        let endpoint = verify_cluster_info(&data, &token, &pins, false).unwrap();
        assert_eq!(endpoint.server, "https://10.0.0.1:6443");
        assert_eq!(endpoint.ca_pem, PINNED_CA);
        let other = ["sha256:00".to_string()];
        assert!(verify_cluster_info(&data, &token, &other, false).unwrap_err().contains("is not trusted"));
        assert!(verify_cluster_info(&data, &token, &[], false).unwrap_err().contains("--discovery-token-ca-cert-hash"));
        assert!(verify_cluster_info(&data, &token, &[], true).is_ok(), "skipping CA verification on purpose");
    }

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn tokens_have_kubernetes_shape() {
        let t = Token::parse("abcdef.0123456789abcdef").unwrap();
        assert_eq!((t.id.as_str(), t.secret.as_str()), ("abcdef", "0123456789abcdef"));
        assert_eq!(t.secret_name(), "bootstrap-token-abcdef");
        for bad in ["abcdef0123456789abcdef", "abcde.0123456789abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcde_", "abcdef.0123456789abcdef0"] {
            assert!(Token::parse(bad).is_none(), "{bad}");
        }
        let fresh = Token::from_random(&[7; 22]);
        assert!(Token::parse(&fresh.expose()).is_some());
        assert!(!format!("{fresh:?}").contains(&fresh.secret), "Debug never shows the secret");
    }

    #[test]
    fn a_written_secret_reads_back_and_authenticates_as_kubernetes_says() {
        let t = Token::parse("abcdef.0123456789abcdef").unwrap();
        let options = Options {
            description: Some("for m1".into()),
            expiration: Some(ts("2030-01-01T00:00:00Z")),
            authentication: true,
            signing: true,
            extra_groups: vec![KARMADA_GROUP.into()],
            ..Default::default()
        };
        let s = secret(&t, &options);
        assert_eq!(s["type"], SECRET_TYPE);
        assert_eq!(s["data"]["expiration"], STANDARD.encode("2030-01-01T00:00:00Z"));
        let parsed = parse_secret(&s).unwrap();
        let now = ts("2029-01-01T00:00:00Z");
        assert_eq!(parsed.authenticate(&t, now), Some(("system:bootstrap:abcdef".to_string(), vec![DEFAULT_GROUP.to_string(), KARMADA_GROUP.to_string()])));
        assert_eq!(parsed.authenticate(&Token::parse("abcdef.0123456789abcdee").unwrap(), now), None, "wrong secret");
        assert_eq!(parsed.authenticate(&t, ts("2030-01-01T00:00:00Z")), None, "expired");
        let mut no_auth = options.clone();
        no_auth.authentication = false;
        assert_eq!(parse_secret(&secret(&t, &no_auth)).unwrap().authenticate(&t, now), None, "not for authentication");
        let mut deleting = s.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2029-01-01T00:00:00Z");
        assert_eq!(parse_secret(&deleting).unwrap().authenticate(&t, now), None, "being deleted");
    }

    #[test]
    fn malformed_secrets_are_refused_with_the_field() {
        let t = Token::parse("abcdef.0123456789abcdef").unwrap();
        let good = secret(&t, &Options { authentication: true, ..Default::default() });
        let mut other_type = good.clone();
        other_type["type"] = json!("Opaque");
        assert_eq!(parse_secret(&other_type), Err(Invalid::NotBootstrap));
        let mut elsewhere = good.clone();
        elsewhere["metadata"]["namespace"] = json!("default");
        assert_eq!(parse_secret(&elsewhere), Err(Invalid::NotBootstrap));
        let mut renamed = good.clone();
        renamed["metadata"]["name"] = json!("bootstrap-token-zzzzzz");
        assert_eq!(parse_secret(&renamed), Err(Invalid::IdMismatch));
        let mut expiry = good.clone();
        expiry["data"]["expiration"] = json!(STANDARD.encode("tomorrow"));
        assert!(matches!(parse_secret(&expiry), Err(Invalid::Expiration(_))));
        let mut group = good.clone();
        group["data"]["auth-extra-groups"] = json!(STANDARD.encode("system:masters"));
        assert_eq!(parse_secret(&group), Err(Invalid::Group("system:masters".into())));
        assert!(valid_group("system:bootstrappers:karmada:default-cluster-token"));
        assert!(!valid_group("system:bootstrappers:") && !valid_group("system:bootstrappers:x-") && !valid_group("system:bootstrappers:X"));
    }

    #[test]
    fn cluster_info_is_signed_by_each_signing_token_and_only_those() {
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n";
        let t1 = Token::parse("aaaaaa.0123456789abcdef").unwrap();
        let t2 = Token::parse("bbbbbb.0123456789abcdef").unwrap();
        let now = ts("2029-01-01T00:00:00Z");
        let read = |t: &Token, o: Options| parse_secret(&secret(t, &o)).unwrap();
        let signing = read(&t1, Options { signing: true, ..Default::default() });
        let expired = read(&t2, Options { signing: true, expiration: Some(ts("2028-01-01T00:00:00Z")), ..Default::default() });
        let current = BTreeMap::from([(KUBECONFIG_KEY.to_string(), kubeconfig.to_string()), ("jws-kubeconfig-bbbbbb".to_string(), "stale".to_string())]);
        let want = signed_cluster_info(&current, &[signing.clone(), expired], now).unwrap();
        assert_eq!(want.keys().collect::<Vec<_>>(), [&"jws-kubeconfig-aaaaaa".to_string(), &KUBECONFIG_KEY.to_string()]);
        let sig = &want["jws-kubeconfig-aaaaaa"];
        // As k8s.io/cluster-bootstrap v0.33.0's jws.ComputeDetachedSignature computes it.
        assert_eq!(sig, "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFhYWFhYSJ9..1O3D49foXI2WieiWQgpnPmzDH4UicPOvRr-aMM-6LLk");
        assert!(signature_is_valid(sig, kubeconfig, &t1));
        assert!(!signature_is_valid(sig, "tampered", &t1) && !signature_is_valid(sig, kubeconfig, &t2));
        let (header, rest) = sig.split_once("..").expect("detached: no payload");
        assert_eq!(URL_SAFE_NO_PAD.decode(header).unwrap(), br#"{"alg":"HS256","kid":"aaaaaa"}"#);
        assert_eq!(URL_SAFE_NO_PAD.decode(rest).unwrap().len(), 32);
        assert_eq!(signed_cluster_info(&want, &[signing], now), None, "already signed: nothing to write");
    }
}
