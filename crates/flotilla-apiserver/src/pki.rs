//! Certificates for a control plane or a simulated member: a CA, a serving certificate and
//! client certificates (CN = user, O = groups), kept in a directory with owner-only
//! permissions, reused across restarts, and a kubeconfig that uses them.
//!
//! Lifetimes: CA 10 years; serving and client certificates 1 year. `rotate` issues new serving
//! and admin certificates from the same CA (clients keep trusting the CA).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use time::{Duration, OffsetDateTime};

pub const CA_DAYS: i64 = 3650;
pub const LEAF_DAYS: i64 = 365;

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("cannot {what} {path}: {source}")]
    Io { what: &'static str, path: String, source: std::io::Error },
    #[error("cannot issue the {what} certificate: {source}")]
    Issue { what: String, source: rcgen::Error },
    #[error("cannot issue a client certificate for {user} with groups {groups:?}: at most one group (the certificate library keeps one Organization)")]
    TooManyGroups { user: String, groups: Vec<String> },
}

/// A CA with its key, able to issue certificates.
pub struct Authority {
    pub cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authority")
    }
}

/// An issued certificate and its private key, PEM-encoded.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Issued(<certificate and key>)")
    }
}

fn issue_err(what: &str) -> impl FnOnce(rcgen::Error) -> PkiError + '_ {
    move |source| PkiError::Issue { what: what.to_string(), source }
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::minutes(5);
    params.not_after = now + Duration::days(days);
}

impl Authority {
    pub fn generate(common_name: &str) -> Result<Authority, PkiError> {
        let key = KeyPair::generate().map_err(issue_err("CA key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params, CA_DAYS);
        let cert = params.self_signed(&key).map_err(issue_err("CA"))?;
        let key_pem = key.serialize_pem();
        Ok(Authority { cert_pem: cert.pem(), key_pem, issuer: Issuer::new(params, key) })
    }

    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Authority, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(issue_err("CA (reading its key)"))?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(issue_err("CA (reading it)"))?;
        Ok(Authority { cert_pem: cert_pem.to_string(), key_pem: key_pem.to_string(), issuer })
    }

    pub fn key_pem(&self) -> String {
        self.key_pem.clone()
    }

    /// A serving certificate for these DNS names and IP addresses.
    pub fn issue_server(&self, names: &[String]) -> Result<Issued, PkiError> {
        let key = KeyPair::generate().map_err(issue_err("serving key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "flotilla-apiserver");
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.clone().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()
            .map_err(issue_err("serving"))?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params, LEAF_DAYS);
        let cert = params.signed_by(&key, &self.issuer).map_err(issue_err("serving"))?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A client certificate: CN is the user name, each O a group.
    /// A client certificate for `user` in at most one group (the Organization); more than one
    /// is refused rather than silently keeping the last.
    pub fn issue_client(&self, user: &str, groups: &[&str]) -> Result<Issued, PkiError> {
        if groups.len() > 1 {
            return Err(PkiError::TooManyGroups { user: user.into(), groups: groups.iter().map(|g| g.to_string()).collect() });
        }
        let key = KeyPair::generate().map_err(issue_err("client key"))?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut params, LEAF_DAYS);
        let cert = params.signed_by(&key, &self.issuer).map_err(issue_err("client"))?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// The certificate files of a control plane, under `<dir>/pki`.
#[derive(Debug)]
pub struct Bundle {
    pub ca: Authority,
    pub serving: Issued,
    pub admin: Issued,
    pub dir: PathBuf,
}

fn write_private(path: &Path, text: &str, mode: u32) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(mode).open(&tmp).map_err(|source| PkiError::Io {
        what: "write",
        path: tmp.display().to_string(),
        source,
    })?;
    f.write_all(text.as_bytes()).and_then(|_| f.sync_all()).map_err(|source| PkiError::Io { what: "write", path: tmp.display().to_string(), source })?;
    std::fs::rename(&tmp, path).map_err(|source| PkiError::Io { what: "write", path: path.display().to_string(), source })
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io { what: "read", path: path.display().to_string(), source }),
    }
}

/// Whether a PEM certificate's SANs include every name.
fn covers(cert_pem: &str, names: &[String]) -> bool {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()) else { return false };
    let Ok(cert) = pem.parse_x509() else { return false };
    let Ok(Some(san)) = cert.subject_alternative_name() else { return false };
    let have: Vec<String> = san
        .value
        .general_names
        .iter()
        .filter_map(|g| match g {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(*b).ok()?).to_string()),
                16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(*b).ok()?).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    names.iter().all(|n| have.contains(n))
}

impl Bundle {
    /// Load the certificates in `<dir>/pki`, creating what is missing. A serving certificate
    /// that does not cover `names` is re-issued.
    pub fn ensure(dir: &Path, names: &[String]) -> Result<Bundle, PkiError> {
        let pki = dir.join("pki");
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&pki).map_err(|source| PkiError::Io {
                what: "create",
                path: pki.display().to_string(),
                source,
            })?;
        }
        let ca = match (read(&pki.join("ca.crt"))?, read(&pki.join("ca.key"))?) {
            (Some(c), Some(k)) => Authority::load(&c, &k)?,
            _ => {
                let ca = Authority::generate("flotilla-ca")?;
                write_private(&pki.join("ca.key"), &ca.key_pem(), 0o600)?;
                write_private(&pki.join("ca.crt"), &ca.cert_pem, 0o644)?;
                ca
            }
        };
        let serving = match (read(&pki.join("apiserver.crt"))?, read(&pki.join("apiserver.key"))?) {
            (Some(c), Some(k)) if covers(&c, names) => Issued { cert_pem: c, key_pem: k },
            _ => {
                let s = ca.issue_server(names)?;
                write_private(&pki.join("apiserver.key"), &s.key_pem, 0o600)?;
                write_private(&pki.join("apiserver.crt"), &s.cert_pem, 0o644)?;
                s
            }
        };
        let admin = match (read(&pki.join("admin.crt"))?, read(&pki.join("admin.key"))?) {
            (Some(c), Some(k)) => Issued { cert_pem: c, key_pem: k },
            _ => {
                let a = ca.issue_client("flotilla-admin", &["system:masters"])?;
                write_private(&pki.join("admin.key"), &a.key_pem, 0o600)?;
                write_private(&pki.join("admin.crt"), &a.cert_pem, 0o644)?;
                a
            }
        };
        Ok(Bundle { ca, serving, admin, dir: pki })
    }

    /// Issue new serving and admin certificates from the same CA.
    pub fn rotate(dir: &Path, names: &[String]) -> Result<Bundle, PkiError> {
        let pki = dir.join("pki");
        for f in ["apiserver.crt", "apiserver.key", "admin.crt", "admin.key"] {
            let _ = std::fs::remove_file(pki.join(f));
        }
        Self::ensure(dir, names)
    }
}

/// A kubeconfig with one cluster, user and context.
pub fn kubeconfig(name: &str, server: &str, ca_pem: &str, client: &Issued) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}-admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\ncurrent-context: {name}\npreferences: {{}}\n",
        ca = b64(ca_pem),
        cert = b64(&client.cert_pem),
        key = b64(&client.key_pem),
    )
}

/// Write a kubeconfig with mode 0600.
pub fn write_kubeconfig(path: &Path, text: &str) -> Result<(), PkiError> {
    write_private(path, text, 0o600)
}
