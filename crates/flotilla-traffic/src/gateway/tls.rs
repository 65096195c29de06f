//! The gateway's certificates: each host an ingress lists under `spec.tls` is served the
//! `kubernetes.io/tls` Secret it names (`tls.crt`, `tls.key`, PEM), chosen by the client's
//! server name (SNI); any other name gets the gateway's own self-signed certificate.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::routes::normalize_host;

/// Certificates by host (`*.example.com` for a wildcard).
#[derive(Debug, Default)]
pub struct Certs {
    by_host: HashMap<String, Arc<CertifiedKey>>,
}

impl Certs {
    /// The certificate for a server name: its host's, else the wildcard's one label up.
    pub fn get(&self, server_name: &str) -> Option<Arc<CertifiedKey>> {
        let host = normalize_host(server_name);
        self.by_host.get(&host).or_else(|| host.split_once('.').and_then(|(_, parent)| self.by_host.get(&format!("*.{parent}")))).cloned()
    }

    pub fn len(&self) -> usize {
        self.by_host.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_host.is_empty()
    }
}

/// A certificate chain and key in PEM, as a Secret of type `kubernetes.io/tls` holds them.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<_, _>>().map_err(|e| format!("tls.crt: {e}"))?;
    if chain.is_empty() {
        return Err("tls.crt holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("tls.key: {e}"))?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| format!("tls.key: {e}"))?;
    Ok(CertifiedKey::new(chain, signer))
}

/// The certificates of `hosts` (host → Secret namespace and name); `secret` finds a Secret.
/// A Secret missing or unusable is reported, and its hosts get the gateway's own certificate.
pub fn load(hosts: &BTreeMap<String, (String, String)>, secret: &dyn Fn(&str, &str) -> Option<Arc<Secret>>) -> (Certs, Vec<String>) {
    let mut certs = Certs::default();
    let mut problems = Vec::new();
    let mut parsed: HashMap<(String, String), Option<Arc<CertifiedKey>>> = HashMap::new();
    for (host, (ns, name)) in hosts {
        let key = parsed
            .entry((ns.clone(), name.clone()))
            .or_insert_with(|| {
                let Some(s) = secret(ns, name) else {
                    problems.push(format!("Secret {ns}/{name} (TLS of {host}) not found"));
                    return None;
                };
                let data = s.data.clone().unwrap_or_default();
                let (Some(crt), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) else {
                    problems.push(format!("Secret {ns}/{name} (TLS of {host}) has no tls.crt and tls.key"));
                    return None;
                };
                match certified_key(&crt.0, &key.0) {
                    Ok(k) => Some(Arc::new(k)),
                    Err(e) => {
                        problems.push(format!("Secret {ns}/{name} (TLS of {host}): {e}"));
                        None
                    }
                }
            })
            .clone();
        if let Some(k) = key {
            certs.by_host.insert(host.clone(), k);
        }
    }
    (certs, problems)
}

/// A self-signed certificate for the names no Secret covers.
pub fn self_signed() -> Result<CertifiedKey, String> {
    let c = rcgen::generate_simple_self_signed(vec!["flotilla-gateway".to_string()]).map_err(|e| e.to_string())?;
    certified_key(c.cert.pem().as_bytes(), c.signing_key.serialize_pem().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn tls_secret(cert: &rcgen::CertifiedKey<rcgen::KeyPair>) -> Arc<Secret> {
        Arc::new(Secret {
            data: Some(
                [
                    ("tls.crt".to_string(), ByteString(cert.cert.pem().into_bytes())),
                    ("tls.key".to_string(), ByteString(cert.signing_key.serialize_pem().into_bytes())),
                ]
                .into(),
            ),
            ..Secret::default()
        })
    }

    #[test]
    fn hosts_get_their_secrets_certificates_and_bad_secrets_are_reported() {
        let web = rcgen::generate_simple_self_signed(vec!["web.example.com".to_string()]).unwrap();
        let hosts: BTreeMap<String, (String, String)> = [
            ("web.example.com".to_string(), ("shop".to_string(), "web-tls".to_string())),
            ("*.shop.example.com".to_string(), ("shop".to_string(), "web-tls".to_string())),
            ("api.example.com".to_string(), ("shop".to_string(), "missing".to_string())),
            ("bad.example.com".to_string(), ("shop".to_string(), "bad".to_string())),
        ]
        .into();
        let bad = Arc::new(Secret {
            data: Some([("tls.crt".to_string(), ByteString(b"junk".to_vec())), ("tls.key".to_string(), ByteString(b"junk".to_vec()))].into()),
            ..Secret::default()
        });
        let (certs, problems) = load(&hosts, &|_, name| match name {
            "web-tls" => Some(tls_secret(&web)),
            "bad" => Some(bad.clone()),
            _ => None,
        });
        assert_eq!(certs.len(), 2);
        assert_eq!(certs.get("WEB.example.com").unwrap().cert[0].as_ref(), web.cert.der().as_ref());
        assert!(certs.get("a.shop.example.com").is_some());
        assert!(certs.get("api.example.com").is_none());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("shop/missing") && p.contains("not found")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("shop/bad") && p.contains("tls.crt")), "{problems:?}");
        assert!(self_signed().is_ok());
    }
}
