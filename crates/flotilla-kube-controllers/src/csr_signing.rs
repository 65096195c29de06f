//! kube-controller-manager's `csrsigning` for the `kubernetes.io/kube-apiserver-client` signer
//! (on in Karmada's controller manager, which signs pull agents' certificates): an approved
//! request that has not failed and has no certificate gets one from the control plane's CA,
//! valid for `spec.expirationSeconds` capped by the signing duration (kube-controller-manager's
//! `--cluster-signing-duration`, one year by default), backdated five minutes for clock skew.
//! The certificate carries the request's subject and public key and the usages of
//! `spec.usages`; a request asking for another usage, or whose signature does not verify, is
//! marked `Failed` (`SignerValidationFailure`), as the real signer marks it.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::certificates as csr;
use flotilla_runtime::{Next, Runtime};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rcgen::{CertificateSigningRequestParams, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};

pub const NAME: &str = "csrsigning";

/// The CA that signs, and the longest certificate it issues.
#[derive(Clone)]
pub struct SigningCa {
    pub cert_pem: String,
    pub key_pem: String,
    pub max_duration: Duration,
}

impl std::fmt::Debug for SigningCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningCa").field("max_duration", &self.max_duration).finish_non_exhaustive()
    }
}

/// kube-controller-manager's default `--cluster-signing-duration` (8760h).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// What the signer does with a request.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Not this signer's, not approved yet, failed or issued already.
    Skip,
    Fail(String),
    Sign,
}

fn verdict(obj: &Value) -> Verdict {
    if csr::signer_name(obj) != csr::KUBE_APISERVER_CLIENT
        || !csr::has_condition(obj, csr::APPROVED)
        || csr::has_condition(obj, csr::DENIED)
        || csr::has_condition(obj, csr::FAILED)
        || csr::certificate(obj).is_some()
    {
        return Verdict::Skip;
    }
    match csr::client_usage_error(&csr::usages(obj)) {
        Some(e) => Verdict::Fail(e),
        None => Verdict::Sign,
    }
}

/// Issue the certificate for an approved request (PEM).
pub fn issue(ca: &SigningCa, request_pem: &str, usages: &[String], expiration_seconds: Option<i64>) -> Result<String, String> {
    let key = KeyPair::from_pem(&ca.key_pem).map_err(|e| format!("the signing key: {e}"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, key).map_err(|e| format!("the signing certificate: {e}"))?;
    let mut req = CertificateSigningRequestParams::from_pem(request_pem).map_err(|e| format!("the request: {e}"))?;
    let wanted = expiration_seconds.and_then(|s| u64::try_from(s).ok()).map(Duration::from_secs).unwrap_or(ca.max_duration);
    let lifetime = wanted.min(ca.max_duration);
    let now = time::OffsetDateTime::now_utc();
    let p = &mut req.params;
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + time::Duration::try_from(lifetime).map_err(|e| e.to_string())?;
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p.key_usages.clear();
    p.extended_key_usages.clear();
    for u in usages {
        match u.as_str() {
            "digital signature" => p.key_usages.push(KeyUsagePurpose::DigitalSignature),
            "key encipherment" => p.key_usages.push(KeyUsagePurpose::KeyEncipherment),
            "client auth" => p.extended_key_usages.push(ExtendedKeyUsagePurpose::ClientAuth),
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    let cert = req.signed_by(&issuer).map_err(|e| format!("signing: {e}"))?;
    Ok(cert.pem())
}

async fn reconcile(client: &Client, ca: &SigningCa, obj: Arc<CertificateSigningRequest>) -> Result<Next, kube::Error> {
    let value = serde_json::to_value(&*obj).unwrap_or_default();
    let name = obj.name_any();
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let failure = match verdict(&value) {
        Verdict::Skip => return Ok(Next::Done),
        Verdict::Fail(e) => e,
        Verdict::Sign => {
            let request = csr::request_bytes(&value).and_then(|b| String::from_utf8(b).ok()).unwrap_or_default();
            let expiration = obj.spec.expiration_seconds.map(i64::from);
            match issue(ca, &request, &csr::usages(&value), expiration) {
                Ok(pem) => {
                    use base64::Engine;
                    let patch = json!({"metadata": {"resourceVersion": obj.resource_version()}, "status": {"certificate": base64::engine::general_purpose::STANDARD.encode(pem)}});
                    return match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                        Ok(_) => {
                            tracing::info!(controller = NAME, csr = %name, user = %obj.spec.username.as_deref().unwrap_or(""), "certificate issued");
                            Ok(Next::Done)
                        }
                        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Next::Done),
                        Err(e) => Err(e),
                    };
                }
                Err(e) => e,
            }
        }
    };
    tracing::warn!(controller = NAME, csr = %name, reason = %failure, "not signed");
    let mut conditions = value.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    conditions.push(json!({"type": csr::FAILED, "status": "True", "reason": "SignerValidationFailure", "message": failure}));
    let patch = json!({"metadata": {"resourceVersion": obj.resource_version()}, "status": {"conditions": conditions}});
    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(Next::Done),
        Err(e) => Err(e),
    }
}

/// Run the signer until the runtime shuts down.
pub async fn run(client: Client, rt: Runtime, ca: SigningCa) {
    rt.controller_for::<CertificateSigningRequest>(NAME)
        .run_objects(move |obj| {
            let (client, ca) = (client.clone(), ca.clone());
            async move { reconcile(&client, &ca, obj).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cn: &str, org: &str) -> (String, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name.push(rcgen::DnType::OrganizationName, org);
        (p.serialize_request(&key).unwrap().pem().unwrap(), key)
    }

    fn ca() -> SigningCa {
        let key = KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, "test-ca");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = p.self_signed(&key).unwrap();
        SigningCa { cert_pem: cert.pem(), key_pem: key.serialize_pem(), max_duration: Duration::from_secs(3600 * 24) }
    }

    fn obj(conditions: Value, usages: &[&str], certificate: Option<&str>) -> Value {
        let mut status = json!({"conditions": conditions});
        if let Some(c) = certificate {
            status["certificate"] = json!(c);
        }
        json!({"spec": {"signerName": csr::KUBE_APISERVER_CLIENT, "usages": usages}, "status": status})
    }

    #[test]
    fn only_approved_unissued_client_requests_are_signed() {
        let approved = json!([{"type": "Approved", "status": "True"}]);
        assert_eq!(verdict(&obj(approved.clone(), &["client auth", "digital signature"], None)), Verdict::Sign);
        assert_eq!(verdict(&obj(json!([]), &["client auth"], None)), Verdict::Skip, "not approved");
        assert_eq!(verdict(&obj(approved.clone(), &["client auth"], Some("eA=="))), Verdict::Skip, "issued");
        let failed = json!([{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}]);
        assert_eq!(verdict(&obj(failed, &["client auth"], None)), Verdict::Skip);
        assert_eq!(verdict(&obj(approved, &["client auth", "server auth"], None)), Verdict::Fail("invalid usage for client certificate: server auth".into()));
        let mut other = obj(json!([{"type": "Approved", "status": "True"}]), &["client auth"], None);
        other["spec"]["signerName"] = json!("example.com/x");
        assert_eq!(verdict(&other), Verdict::Skip, "another signer's");
    }

    #[test]
    fn the_certificate_carries_the_subject_usages_and_capped_lifetime() {
        let ca = ca();
        let (pem, _) = request("system:karmada:agent:edge-1", "system:karmada:agents");
        let issued = issue(&ca, &pem, &["digital signature".into(), "client auth".into()], Some(10 * 365 * 24 * 3600)).unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(issued.as_bytes()).unwrap();
        let cert = block.parse_x509().unwrap();
        assert_eq!(cert.subject().iter_common_name().next().unwrap().as_str().unwrap(), "system:karmada:agent:edge-1");
        assert_eq!(cert.subject().iter_organization().next().unwrap().as_str().unwrap(), "system:karmada:agents");
        let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
        assert!(life <= 24 * 3600 + 5 * 60 + 1, "capped at the signing duration (plus the backdating): {life}s");
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let (_, ca_block) = x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes()).unwrap();
        assert_eq!(cert.issuer(), ca_block.parse_x509().unwrap().subject(), "issued by the CA");
        assert!(issue(&ca, &pem, &["server auth".into()], None).is_err());
    }
}
