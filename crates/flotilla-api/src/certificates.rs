//! `certificates.k8s.io/v1` CertificateSigningRequests as kube-apiserver keeps them: the
//! request's parsing and validation (spec on create, what `/status` and `/approval` may change),
//! the condition timestamps the server fills in, the rules of the `kubernetes.io/kube-apiserver-client`
//! signer, and Karmada's recognition of a pull agent's request (`agentcsrapproving`).
//!
//! Messages are worded as kube-apiserver 1.37 words them (recorded against the testenv
//! kube-apiserver: `spec.signerName: Required value`, `status.conditions: Forbidden: updates may
//! not remove a condition of type "Approved"`).

use base64::Engine;
use serde_json::{Value, json};
use x509_parser::prelude::FromDer;

use crate::validation::FieldError;
use crate::validation::names::dns1123_subdomain;

pub const GROUP: &str = "certificates.k8s.io";
/// Client certificates kube-apiserver (here: Flotilla's API server) trusts.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// The signer v1 refuses (v1beta1's default).
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";
pub const APPROVED: &str = "Approved";
pub const DENIED: &str = "Denied";
pub const FAILED: &str = "Failed";
/// The shortest certificate a request may ask for (`spec.expirationSeconds`).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// Every key usage a request may name (kube-apiserver's list, in its order).
pub const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// The usages the `kubernetes.io/kube-apiserver-client` signer issues.
pub const CLIENT_USAGES: &[&str] = &["client auth", "digital signature", "key encipherment"];

/// What a certificate request asks to be: its subject and alternative names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub emails: Vec<String>,
    pub ips: Vec<String>,
    pub uris: Vec<String>,
}

/// `spec.request` decoded from the object's base64 (None when absent or not base64).
pub fn request_bytes(csr: &Value) -> Option<Vec<u8>> {
    csr.pointer("/spec/request").and_then(Value::as_str).and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
}

/// Parse a PEM `CERTIFICATE REQUEST` (the first PEM block) into its subject.
pub fn parse_request(pem: &[u8]) -> Result<Subject, String> {
    let der = match x509_parser::pem::parse_x509_pem(pem) {
        Ok((_, p)) if p.label == "CERTIFICATE REQUEST" => p.contents,
        _ => return Err("PEM block type must be CERTIFICATE REQUEST".into()),
    };
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&der).map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    let info = &req.certification_request_info;
    let mut s = Subject {
        common_name: info.subject.iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or_default().to_string(),
        organizations: info.subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect(),
        ..Subject::default()
    };
    for ext in req.requested_extensions().into_iter().flatten() {
        if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = ext {
            use x509_parser::extensions::GeneralName as G;
            for n in &san.general_names {
                match n {
                    G::DNSName(d) => s.dns_names.push(d.to_string()),
                    G::RFC822Name(e) => s.emails.push(e.to_string()),
                    G::URI(u) => s.uris.push(u.to_string()),
                    G::IPAddress(ip) => s.ips.push(format!("{ip:?}")),
                    _ => {}
                }
            }
        }
    }
    Ok(s)
}

/// The request's subject, when it parses.
pub fn subject(csr: &Value) -> Option<Subject> {
    parse_request(&request_bytes(csr)?).ok()
}

/// The request's `spec.usages`.
pub fn usages(csr: &Value) -> Vec<String> {
    csr.pointer("/spec/usages").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default()
}

pub fn signer_name(csr: &Value) -> &str {
    csr.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or_default()
}

fn conditions(csr: &Value) -> &[Value] {
    csr.pointer("/status/conditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn condition_type(c: &Value) -> &str {
    c.get("type").and_then(Value::as_str).unwrap_or_default()
}

/// Whether the request carries a condition of this type.
pub fn has_condition(csr: &Value, kind: &str) -> bool {
    conditions(csr).iter().any(|c| condition_type(c) == kind)
}

/// The issued certificate (PEM), when there is one.
pub fn certificate(csr: &Value) -> Option<Vec<u8>> {
    let s = csr.pointer("/status/certificate").and_then(Value::as_str).filter(|s| !s.is_empty())?;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// The rules of a request as created (kube-apiserver's `ValidateCertificateSigningRequestCreate`).
pub fn validate(csr: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    // Go prints an empty []byte as null.
    let shown = csr.pointer("/spec/request").filter(|r| r.as_str().is_some_and(|s| !s.is_empty())).cloned().unwrap_or(Value::Null);
    if let Err(e) = request_bytes(csr).ok_or_else(|| "PEM block type must be CERTIFICATE REQUEST".to_string()).and_then(|b| parse_request(&b)) {
        errs.push(FieldError::invalid("spec.request", &shown, &e));
    }
    let used = csr.pointer("/spec/usages").and_then(Value::as_array).cloned().unwrap_or_default();
    if used.is_empty() {
        errs.push(FieldError::required("spec.usages", ""));
    }
    for (i, u) in used.iter().enumerate() {
        let field = format!("spec.usages[{i}]");
        if !u.as_str().is_some_and(|s| USAGES.contains(&s)) {
            errs.push(FieldError::not_supported(field, u, USAGES));
        } else if used[..i].contains(u) {
            errs.push(FieldError::duplicate(field, u));
        }
    }
    errs.extend(signer_name_errors(csr));
    if let Some(exp) = csr.pointer("/spec/expirationSeconds").and_then(Value::as_i64)
        && exp < MIN_EXPIRATION_SECONDS
    {
        errs.push(FieldError::invalid("spec.expirationSeconds", &json!(exp), "may not specify a duration less than 600 seconds (10 minutes)"));
    }
    errs.extend(status_errors(csr));
    errs
}

fn signer_name_errors(csr: &Value) -> Vec<FieldError> {
    let name = signer_name(csr);
    let field = "spec.signerName";
    if name.is_empty() {
        return vec![FieldError::required(field, "")];
    }
    if name == LEGACY_UNKNOWN {
        return vec![FieldError::invalid(field, &json!(name), "the legacy signerName is not allowed via this API version")];
    }
    let form = "must be a fully qualified domain and path of the form 'example.com/signer-name'";
    let Some((domain, path)) = name.split_once('/') else { return vec![FieldError::invalid(field, &json!(name), form)] };
    if path.is_empty() || !domain.contains('.') || !dns1123_subdomain(domain).is_empty() {
        return vec![FieldError::invalid(field, &json!(name), form)];
    }
    Vec::new()
}

/// The status rules every write checks: conditions and the certificate's PEM blocks.
fn status_errors(csr: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let conds = conditions(csr);
    for (i, c) in conds.iter().enumerate() {
        let kind = condition_type(c);
        let status = c.get("status").cloned().unwrap_or(Value::Null);
        if kind.is_empty() {
            errs.push(FieldError::required(format!("status.conditions[{i}].type"), ""));
            continue;
        }
        if [APPROVED, DENIED, FAILED].contains(&kind) {
            if conds[..i].iter().any(|o| condition_type(o) == kind) {
                errs.push(FieldError::duplicate(format!("status.conditions[{i}].type"), &json!(kind)));
            }
            if status != "True" {
                errs.push(FieldError::not_supported(format!("status.conditions[{i}].status"), &status, &["True"]));
            }
        } else if !["True", "False", "Unknown"].iter().any(|s| status == *s) {
            errs.push(FieldError::not_supported(format!("status.conditions[{i}].status"), &status, &["False", "True", "Unknown"]));
        }
    }
    if has_condition(csr, APPROVED) && has_condition(csr, DENIED) {
        errs.push(FieldError::invalid(
            "status.conditions",
            &json!(r#"{conditions[{"type": "Approved"}], conditions[{"type": "Denied"}]}"#),
            r#"must specify at most one of: `conditions[{"type": "Approved"}]`, `conditions[{"type": "Denied"}]`"#,
        ));
    }
    if csr.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        let shown = json!("<certificate data>");
        match certificate(csr) {
            None => errs.push(FieldError::invalid("status.certificate", &shown, "must contain at least one CERTIFICATE PEM block")),
            Some(pem) => {
                if let Err(e) = certificate_blocks(&pem) {
                    errs.push(FieldError::invalid("status.certificate", &shown, &e));
                }
            }
        }
    }
    errs
}

/// The DER of each `CERTIFICATE` block of an issued certificate, checked as kube-apiserver
/// checks `status.certificate`.
pub fn certificate_blocks(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let Ok(block) = block else { break };
        if block.label != "CERTIFICATE" {
            return Err(format!("only CERTIFICATE PEM blocks are allowed, found \"{}\"", block.label));
        }
        if let Err(e) = x509_parser::certificate::X509Certificate::from_der(&block.contents) {
            return Err(format!("failure parsing certificate data: {e}"));
        }
        out.push(block.contents);
    }
    if out.is_empty() {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(out)
}

/// The validity (not before, not after, as Unix seconds) of the first certificate in `pem`.
pub fn validity(pem: &[u8]) -> Option<(i64, i64)> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = block.parse_x509().ok()?;
    Some((cert.validity().not_before.timestamp(), cert.validity().not_after.timestamp()))
}

/// Which subresource an update writes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Main,
    Status,
    Approval,
}

/// The rules of an update: what may not be removed, added or changed from `old`, then the
/// object's own rules.
pub fn validate_update(new: &Value, old: &Value, write: Write) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for kind in [APPROVED, DENIED, FAILED] {
        if has_condition(old, kind) && !has_condition(new, kind) {
            errs.push(FieldError::forbidden("status.conditions", &format!("updates may not remove a condition of type \"{kind}\"")));
        }
    }
    if write == Write::Status {
        for kind in [APPROVED, DENIED] {
            if !has_condition(old, kind) && has_condition(new, kind) {
                errs.push(FieldError::forbidden("status.conditions", &format!("updates may not add a condition of type \"{kind}\"")));
            }
        }
    }
    let (was, now) =
        (old.pointer("/status/certificate").and_then(Value::as_str).unwrap_or(""), new.pointer("/status/certificate").and_then(Value::as_str).unwrap_or(""));
    if !was.is_empty() && was != now {
        errs.push(FieldError::forbidden("status.certificate", "updates may not modify existing certificate content"));
    }
    errs.extend(status_errors(new));
    errs
}

/// What an update through `write` stores: the main resource changes only metadata, `/status`
/// the status, `/approval` the conditions; conditions without times get `now` (a transition
/// time is kept while the condition's status stays).
pub fn prepare_update(new: &Value, old: &Value, write: Write, now: &str) -> Value {
    let mut out = new.clone();
    out["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
    match write {
        Write::Main => out["status"] = old.get("status").cloned().unwrap_or(json!({})),
        Write::Status => {}
        Write::Approval => match old.pointer("/status/certificate") {
            Some(c) => out["status"]["certificate"] = c.clone(),
            None => {
                if let Some(s) = out.get_mut("status").and_then(Value::as_object_mut) {
                    s.remove("certificate");
                }
            }
        },
    }
    if write != Write::Main
        && let Some(conds) = out.pointer_mut("/status/conditions").and_then(Value::as_array_mut)
    {
        for c in conds.iter_mut() {
            if c.get("lastUpdateTime").is_none_or(Value::is_null) {
                c["lastUpdateTime"] = json!(now);
            }
            if c.get("lastTransitionTime").is_none_or(Value::is_null) {
                let kept = conditions(old)
                    .iter()
                    .find(|o| condition_type(o) == condition_type(c) && o.get("status") == c.get("status"))
                    .and_then(|o| o.get("lastTransitionTime"))
                    .filter(|t| !t.is_null())
                    .cloned();
                c["lastTransitionTime"] = kept.unwrap_or_else(|| json!(now));
            }
        }
    }
    out
}

/// Why the `kubernetes.io/kube-apiserver-client` signer will not issue for these usages
/// (None: it will).
pub fn client_usage_error(usages: &[String]) -> Option<String> {
    let bad: Vec<&str> = usages.iter().map(String::as_str).filter(|u| !CLIENT_USAGES.contains(u)).collect();
    (!bad.is_empty()).then(|| format!("invalid usage for client certificate: {}", bad.join(", ")))
}

/// Karmada's pull agents: the Organization every agent certificate carries.
pub const AGENT_GROUP: &str = "system:karmada:agents";
/// Karmada's pull agents: the user name prefix (`system:karmada:agent:<cluster>`).
pub const AGENT_USER_PREFIX: &str = "system:karmada:agent:";

/// The agent user name of a cluster.
pub fn agent_user(cluster: &str) -> String {
    format!("{AGENT_USER_PREFIX}{cluster}")
}

/// Why a request is not a pull agent's (Karmada's `ValidateAgentCSR`): Organization exactly
/// `system:karmada:agents`, no alternative names, the agent user prefix, and the usages
/// {digital signature, client auth} with or without key encipherment.
pub fn agent_request_error(subject: &Subject, usages: &[String]) -> Option<String> {
    if subject.organizations != [AGENT_GROUP] {
        return Some("subject organization is not system:karmada:agents".into());
    }
    let sans = [(&subject.dns_names, "DNS"), (&subject.emails, "email"), (&subject.ips, "IP"), (&subject.uris, "URI")];
    if let Some((_, kind)) = sans.iter().find(|(v, _)| !v.is_empty()) {
        return Some(format!("{kind} subjectAltNames are not allowed"));
    }
    if !subject.common_name.starts_with(AGENT_USER_PREFIX) {
        return Some("subject common name does not begin with system:karmada:agent: prefix".into());
    }
    let mut set: Vec<&str> = usages.iter().map(String::as_str).collect();
    set.sort_unstable();
    set.dedup();
    if set != ["client auth", "digital signature"] && set != ["client auth", "digital signature", "key encipherment"] {
        return Some("usages did not match [client auth digital signature key encipherment]".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes
    //   -subj "/CN=system:karmada:agent:m1/O=system:karmada:agents"`
    const AGENT_REQUEST: &str = "-----BEGIN CERTIFICATE REQUEST-----
MIH+MIGkAgEAMEIxIDAeBgNVBAMMF3N5c3RlbTprYXJtYWRhOmFnZW50Om0xMR4w
HAYDVQQKDBVzeXN0ZW06a2FybWFkYTphZ2VudHMwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQLbX3Ref0EVvasMj0Lumf5XLrRwA5Hlqao971zB45lNb+VwhaBH8OO
npdLjWC3ysucu4AFGOz9jjB1fxyPlFiYoAAwCgYIKoZIzj0EAwIDSQAwRgIhAPZm
sDCACRIEo8QTUUjJghj7Cl8xoOcrlFy5zE01cKWzAiEAhmb3qzVTleMyRS7AS+xz
1ePvbfW9u6SNINlZyoLScqA=
-----END CERTIFICATE REQUEST-----
";

    fn csr(spec: Value) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": "a"}, "spec": spec, "status": {}})
    }

    fn request() -> String {
        base64::engine::general_purpose::STANDARD.encode(AGENT_REQUEST)
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn an_agent_request_parses_into_its_subject() {
        let s = parse_request(AGENT_REQUEST.as_bytes()).unwrap();
        assert_eq!(s.common_name, "system:karmada:agent:m1");
        assert_eq!(s.organizations, ["system:karmada:agents"]);
        assert_eq!(agent_request_error(&s, &["digital signature".into(), "client auth".into()]), None);
        assert!(agent_request_error(&s, &["client auth".into()]).unwrap().contains("usages"));
        let wrong = Subject { organizations: vec!["system:masters".into()], ..s.clone() };
        assert_eq!(
            agent_request_error(&wrong, &["client auth".into(), "digital signature".into()]).unwrap(),
            "subject organization is not system:karmada:agents"
        );
        let named = Subject { dns_names: vec!["x".into()], ..s };
        assert_eq!(agent_request_error(&named, &["client auth".into(), "digital signature".into()]).unwrap(), "DNS subjectAltNames are not allowed");
    }

    /// Each message as the testenv kube-apiserver answered the same request.
    #[test]
    fn bad_requests_are_refused_as_kube_apiserver_refuses_them() {
        let ok = |extra: Value| {
            let mut spec = json!({"request": request(), "signerName": KUBE_APISERVER_CLIENT, "usages": ["client auth"]});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            messages(&validate(&csr(spec)))
        };
        assert!(ok(json!({})).is_empty());
        assert_eq!(ok(json!({"request": "aGVsbG8="})), [r#"spec.request: Invalid value: "aGVsbG8=": PEM block type must be CERTIFICATE REQUEST"#]);
        assert_eq!(ok(json!({"request": null})), ["spec.request: Invalid value: null: PEM block type must be CERTIFICATE REQUEST"]);
        assert_eq!(ok(json!({"signerName": null})), ["spec.signerName: Required value"]);
        assert_eq!(
            ok(json!({"signerName": "nodomain"})),
            [r#"spec.signerName: Invalid value: "nodomain": must be a fully qualified domain and path of the form 'example.com/signer-name'"#]
        );
        assert_eq!(
            ok(json!({"signerName": LEGACY_UNKNOWN})),
            [r#"spec.signerName: Invalid value: "kubernetes.io/legacy-unknown": the legacy signerName is not allowed via this API version"#]
        );
        assert!(
            ok(json!({"usages": ["client auth", "bogus"]}))[0]
                .starts_with(r#"spec.usages[1]: Unsupported value: "bogus": supported values: "any", "cert sign""#)
        );
        assert_eq!(ok(json!({"usages": null})), ["spec.usages: Required value"]);
        assert_eq!(ok(json!({"usages": ["client auth", "client auth"]})), [r#"spec.usages[1]: Duplicate value: "client auth""#]);
        assert_eq!(
            ok(json!({"expirationSeconds": 100})),
            ["spec.expirationSeconds: Invalid value: 100: may not specify a duration less than 600 seconds (10 minutes)"]
        );
    }

    #[test]
    fn approval_and_status_may_change_only_what_they_own() {
        let approved = json!({"type": "Approved", "status": "True", "reason": "KubectlApprove"});
        let mut old = csr(json!({"request": request(), "signerName": KUBE_APISERVER_CLIENT, "usages": ["client auth"]}));
        old["status"] = json!({"conditions": [approved.clone()]});
        let with = |status: Value| {
            let mut n = old.clone();
            n["status"] = status;
            n
        };
        let denied = json!({"type": "Denied", "status": "True", "reason": "X"});
        assert_eq!(
            messages(&validate_update(&with(json!({"conditions": [approved.clone(), denied.clone()]})), &old, Write::Status)),
            [
                r#"status.conditions: Forbidden: updates may not add a condition of type "Denied""#,
                r#"status.conditions: Invalid value: "{conditions[{\"type\": \"Approved\"}], conditions[{\"type\": \"Denied\"}]}": must specify at most one of: `conditions[{"type": "Approved"}]`, `conditions[{"type": "Denied"}]`"#,
            ]
        );
        assert_eq!(
            messages(&validate_update(&with(json!({"conditions": []})), &old, Write::Approval)),
            [r#"status.conditions: Forbidden: updates may not remove a condition of type "Approved""#]
        );
        let garbage = json!({"conditions": [approved.clone()], "certificate": base64::engine::general_purpose::STANDARD.encode("garbage")});
        assert_eq!(
            messages(&validate_update(&with(garbage), &old, Write::Status)),
            [r#"status.certificate: Invalid value: "<certificate data>": must contain at least one CERTIFICATE PEM block"#]
        );
        let a_request = json!({"conditions": [approved.clone()], "certificate": request()});
        assert_eq!(
            messages(&validate_update(&with(a_request), &old, Write::Status)),
            [r#"status.certificate: Invalid value: "<certificate data>": only CERTIFICATE PEM blocks are allowed, found "CERTIFICATE REQUEST""#]
        );
        let not_true = json!({"conditions": [{"type": "Approved", "status": "False"}]});
        assert_eq!(
            messages(&validate_update(&with(not_true), &old, Write::Approval)),
            [r#"status.conditions[0].status: Unsupported value: "False": supported values: "True""#]
        );

        // The main resource keeps spec and status; approval keeps the certificate; times are filled.
        let mut edited = with(json!({"conditions": [], "certificate": "x"}));
        edited["spec"]["usages"] = json!(["server auth"]);
        let main = prepare_update(&edited, &old, Write::Main, "2029-01-01T00:00:00Z");
        assert_eq!(main["spec"], old["spec"]);
        assert_eq!(main["status"], old["status"]);
        let approval = prepare_update(&with(json!({"conditions": [approved], "certificate": "x"})), &old, Write::Approval, "2029-01-01T00:00:00Z");
        assert!(approval["status"].get("certificate").is_none());
        assert_eq!(approval["status"]["conditions"][0]["lastUpdateTime"], "2029-01-01T00:00:00Z");
        assert_eq!(approval["status"]["conditions"][0]["lastTransitionTime"], "2029-01-01T00:00:00Z");
    }

    #[test]
    fn the_client_signer_issues_only_client_usages() {
        assert_eq!(client_usage_error(&["client auth".into(), "digital signature".into()]), None);
        assert_eq!(client_usage_error(&["client auth".into(), "server auth".into()]).unwrap(), "invalid usage for client certificate: server auth");
    }
}
