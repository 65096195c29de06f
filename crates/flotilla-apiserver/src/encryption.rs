//! kube-apiserver's `EncryptionConfiguration` (`apiserver.config.k8s.io/v1`, the file
//! `--encryption-provider-config` names) read into the store's encryption rules
//! ([`flotilla_store::encrypted`]): each entry's resources become key prefixes of this server's
//! storage layout, its providers the store's providers. `kms` is refused (no plugin protocol is
//! spoken here). Wherever Secrets are encrypted, so are the other secrets Flotilla keeps in the
//! store: its legacy service account tokens and its token-signing key.
//!
//! A data directory without a configuration gets one ([`default_config`]): a fresh `secretbox`
//! key for Secrets, with `identity` after it so a store written before encryption still reads
//! (and is then rewritten under the key).

use base64::Engine;
use bytes::Bytes;
use flotilla_store::encrypted::{EncryptionConfig, Key, Provider, Rule};
use serde_json::Value;

/// The store prefixes of Flotilla's own secrets, encrypted with whatever encrypts Secrets.
const SECRET_COMPANIONS: &[&str] = &["/registry/flotilla.io/serviceaccounttokens/", "/registry/flotilla.io/serviceaccountsigningkey"];

/// Why a configuration was refused; the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("encryption provider configuration: {0}")]
pub struct ConfigError(pub String);

fn err(message: impl Into<String>) -> ConfigError {
    ConfigError(message.into())
}

/// The store prefix a resource name of the configuration covers: `secrets` (the core group),
/// `deployments.apps`, `*.apps` (a whole group), `*.` (the core group), `*.*` (everything).
fn prefix_of(resource: &str) -> Result<String, ConfigError> {
    let (name, group) = resource.split_once('.').unwrap_or((resource, ""));
    let group = if group.is_empty() { "core" } else { group };
    match (name, group) {
        ("", _) => Err(err(format!("resources: {resource:?} names no resource"))),
        ("*", "*") => Ok("/registry/".into()),
        ("*", g) => Ok(format!("/registry/{g}/")),
        (_, "*") => Err(err(format!("resources: {resource:?}: a wildcard group needs a wildcard resource (*.*)"))),
        (n, g) => Ok(format!("/registry/{g}/{n}/")),
    }
}

fn keys(provider: &str, v: &Value) -> Result<Vec<Key>, ConfigError> {
    let list = v.get("keys").and_then(Value::as_array).ok_or_else(|| err(format!("providers[].{provider}.keys: required")))?;
    list.iter()
        .enumerate()
        .map(|(i, k)| {
            let name = k.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            let secret = k.get("secret").and_then(Value::as_str).unwrap_or_default();
            let secret = base64::engine::general_purpose::STANDARD
                .decode(secret)
                .map_err(|e| err(format!("providers[].{provider}.keys[{i}].secret: not base64 ({e})")))?;
            Ok(Key { name, secret })
        })
        .collect()
}

fn provider(v: &Value) -> Result<Provider, ConfigError> {
    let Some(m) = v.as_object() else { return Err(err("providers[]: expected an object")) };
    if m.len() != 1 {
        return Err(err(format!(
            "providers[]: exactly one of aesgcm, aescbc, secretbox, identity, kms per entry (got {})",
            m.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let (kind, body) = m.iter().next().expect("one entry");
    let p = match kind.as_str() {
        "identity" => Provider::Identity,
        "aesgcm" => Provider::AesGcm(keys(kind, body)?),
        "aescbc" => Provider::AesCbc(keys(kind, body)?),
        "secretbox" => Provider::Secretbox(keys(kind, body)?),
        "kms" => return Err(err("providers[].kms: KMS plugins are not supported by Flotilla; use aesgcm, aescbc or secretbox with a key file you keep safe")),
        other => return Err(err(format!("providers[]: unknown provider {other:?} (aesgcm, aescbc, secretbox, identity)"))),
    };
    p.validate().map_err(|e| err(format!("providers[].{e}")))?;
    Ok(p)
}

/// Reads an `EncryptionConfiguration` (YAML or JSON).
pub fn parse(text: &str) -> Result<EncryptionConfig, ConfigError> {
    let v: Value = serde_saphyr::from_str(text).map_err(|e| err(format!("not valid YAML: {e}")))?;
    if v.get("kind").and_then(Value::as_str) != Some("EncryptionConfiguration") {
        return Err(err("kind: must be EncryptionConfiguration"));
    }
    let entries = v.get("resources").and_then(Value::as_array).ok_or_else(|| err("resources: required"))?;
    let mut rules = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let resources = entry.get("resources").and_then(Value::as_array).ok_or_else(|| err(format!("resources[{i}].resources: required")))?;
        let providers = entry
            .get("providers")
            .and_then(Value::as_array)
            .ok_or_else(|| err(format!("resources[{i}].providers: required")))?
            .iter()
            .map(provider)
            .collect::<Result<Vec<_>, _>>()?;
        if providers.is_empty() {
            return Err(err(format!("resources[{i}].providers: at least one provider is required")));
        }
        for r in resources {
            let name = r.as_str().ok_or_else(|| err(format!("resources[{i}].resources: expected strings")))?;
            let prefix = prefix_of(name)?;
            let mut prefixes = vec![prefix.clone()];
            if prefix == "/registry/core/secrets/" || prefix == "/registry/core/" || prefix == "/registry/" {
                prefixes.extend(SECRET_COMPANIONS.iter().map(|s| s.to_string()));
            }
            // In the configuration's order: as on kube-apiserver, the first entry that covers
            // a resource decides (a store key takes the first rule it starts with).
            rules.extend(prefixes.into_iter().map(|p| Rule { prefix: Bytes::from(p), providers: providers.clone() }));
        }
    }
    Ok(EncryptionConfig { rules })
}

/// The configuration a new data directory gets: Secrets (and Flotilla's own secrets) with a
/// fresh secretbox key, `identity` after it to read what was stored before.
pub fn default_config(secret: &[u8]) -> String {
    let key = base64::engine::general_purpose::STANDARD.encode(secret);
    format!(
        "# Written by flotilla up: Secrets are encrypted at rest with this key. Keep a copy of\n\
         # this file apart from the data directory: without it the Secrets cannot be read.\n\
         # kube-apiserver's format (--encryption-provider-config); rotate keys as it documents,\n\
         # then run `flotilla store reencrypt`.\n\
         apiVersion: apiserver.config.k8s.io/v1\n\
         kind: EncryptionConfiguration\n\
         resources:\n\
         - resources: [secrets]\n  providers:\n  - secretbox:\n      keys:\n      - name: key1\n        secret: {key}\n  - identity: {{}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_become_store_prefixes_and_secrets_bring_flotillas_own() {
        let cfg = parse(&default_config(&[7u8; 32])).unwrap();
        let prefixes: Vec<String> = cfg.rules.iter().map(|r| String::from_utf8_lossy(&r.prefix).into_owned()).collect();
        assert_eq!(prefixes, ["/registry/core/secrets/", SECRET_COMPANIONS[0], SECRET_COMPANIONS[1]]);
        assert!(matches!(cfg.rules[0].providers.as_slice(), [Provider::Secretbox(k), Provider::Identity] if k[0].name == "key1"));
        let text = "kind: EncryptionConfiguration\nresources:\n- resources: [configmaps, deployments.apps, '*.batch']\n  providers: [{aesgcm: {keys: [{name: a, secret: AAAAAAAAAAAAAAAAAAAAAA==}]}}]\n";
        let prefixes: Vec<String> = parse(text).unwrap().rules.iter().map(|r| String::from_utf8_lossy(&r.prefix).into_owned()).collect();
        assert_eq!(prefixes, ["/registry/core/configmaps/", "/registry/apps/deployments/", "/registry/batch/"]);
    }

    #[test]
    fn bad_configurations_say_what_is_wrong() {
        let kms = "kind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{kms: {name: x}}]\n";
        assert!(parse(kms).unwrap_err().to_string().contains("KMS plugins are not supported"));
        let short = "kind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{secretbox: {keys: [{name: k, secret: AAAA}]}}]\n";
        assert!(parse(short).unwrap_err().to_string().contains("must be one of [32]"), "{}", parse(short).unwrap_err());
        assert!(parse("kind: Other").unwrap_err().to_string().contains("EncryptionConfiguration"));
    }
}
