//! Who is asking (authentication) and may they (authorization).
//!
//! Identities come from a verified client certificate (CN = user, O = groups, as kube-apiserver
//! maps them) or a bearer token from the token file; in-process clients carry theirs in the
//! request. Authorization is a seam: today every authenticated user is allowed everything
//! (`AllowAuthenticated`); RBAC will implement the same trait.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

/// An authenticated (or anonymous) user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// `userInfo.extra`: which credential authenticated the caller
    /// (`authentication.kubernetes.io/credential-id`) and, for a bound service account token,
    /// the pod and node it is bound to.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The `userInfo.extra` key naming the credential a caller authenticated with.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

impl Identity {
    pub fn anonymous() -> Identity {
        Identity { user: "system:anonymous".into(), uid: String::new(), groups: vec!["system:unauthenticated".into()], extra: BTreeMap::new() }
    }

    pub fn user(name: &str, groups: &[&str]) -> Identity {
        let mut g: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
        if !g.iter().any(|x| x == "system:authenticated") {
            g.push("system:authenticated".into());
        }
        Identity { user: name.into(), uid: String::new(), groups: g, extra: BTreeMap::new() }
    }

    pub fn is_anonymous(&self) -> bool {
        self.user == "system:anonymous"
    }
}

/// Static bearer tokens, read from a CSV token file as kube-apiserver's `--token-auth-file`:
/// `token,user,uid,"group1,group2"`.
#[derive(Clone, Debug, Default)]
pub struct TokenFile {
    tokens: HashMap<String, Identity>,
}

impl TokenFile {
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let mut tokens = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            if fields.len() < 3 {
                return Err(format!("token file line {}: expected token,user,uid[,groups]", i + 1));
            }
            let groups: Vec<&str> = fields.get(3).map(|g| g.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
            let mut id = Identity::user(&fields[1], &groups);
            id.uid = fields[2].clone();
            tokens.insert(fields[0].clone(), id);
        }
        Ok(TokenFile { tokens })
    }

    pub fn insert(&mut self, token: String, id: Identity) {
        self.tokens.insert(token, id);
    }

    pub fn lookup(&self, token: &str) -> Option<&Identity> {
        self.tokens.get(token)
    }
}

fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

/// The identity in a verified client certificate: CN is the user, each O a group.
pub fn identity_from_cert(der: &[u8]) -> Option<Identity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let cn = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let groups: Vec<String> = subject.iter_organization().filter_map(|o| o.as_str().ok().map(String::from)).collect();
    let refs: Vec<&str> = groups.iter().map(|s| s.as_str()).collect();
    let mut id = Identity::user(&cn, &refs);
    // kube-apiserver names the certificate by its SHA-256 fingerprint.
    let fingerprint: String = ring::digest::digest(&ring::digest::SHA256, der).as_ref().iter().map(|b| format!("{b:02x}")).collect();
    id.extra.insert(CREDENTIAL_ID.into(), vec![format!("X509SHA256={fingerprint}")]);
    Some(id)
}

/// What a request wants to do, for authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Set for non-resource requests.
    pub path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    Deny(String),
}

/// What a SelfSubjectRulesReview lists: `resourceRules` and `nonResourceRules`, in the order the
/// authorizer consults them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RulesReview {
    pub resource_rules: Vec<Value>,
    pub non_resource_rules: Vec<Value>,
}

/// Decides whether an identity may do something.
pub trait Authorizer: Send + Sync + 'static {
    fn authorize(&self, who: &Identity, what: &Attributes) -> Decision;

    /// The rules that apply to `who` in `namespace` (`kubectl auth can-i --list`). By default
    /// everything (an authorizer that allows every authenticated request).
    fn rules(&self, _who: &Identity, _namespace: &str) -> RulesReview {
        RulesReview {
            resource_rules: vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
            non_resource_rules: vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
        }
    }
}

/// Every authenticated user may do everything; anonymous users may do nothing.
#[derive(Debug, Default)]
pub struct AllowAuthenticated;

impl Authorizer for AllowAuthenticated {
    fn authorize(&self, who: &Identity, _what: &Attributes) -> Decision {
        if who.is_anonymous() {
            Decision::Deny("anonymous requests are not allowed".into())
        } else {
            Decision::Allow("every authenticated user is an administrator (no RBAC yet)".into())
        }
    }
}

pub type SharedAuthorizer = Arc<dyn Authorizer>;

/// A SelfSubjectAccessReview names exactly one of resourceAttributes and nonResourceAttributes
/// (422 otherwise, quoting nonResourceAttributes as kube-apiserver's internal struct).
pub fn validate_access_review(body: &Value) -> Result<(), crate::error::ApiError> {
    let spec = body.get("spec");
    let present = |k: &str| spec.and_then(|s| s.get(k)).is_some_and(|v| !v.is_null());
    if present("resourceAttributes") != present("nonResourceAttributes") {
        return Ok(());
    }
    let value = match spec.and_then(|s| s.get("nonResourceAttributes")).filter(|v| !v.is_null()) {
        Some(n) => {
            let s = |k: &str| json!(n.get(k).and_then(Value::as_str).unwrap_or(""));
            format!("{{\"Path\":{},\"Verb\":{}}}", s("path"), s("verb"))
        }
        None => "null".to_string(),
    };
    Err(crate::error::ApiError::invalid(
        "authorization.k8s.io",
        "",
        "",
        vec![crate::error::Cause::new(
            "FieldValueInvalid",
            "spec",
            format!("Invalid value: {value}: exactly one of nonResourceAttributes or resourceAttributes must be specified"),
        )],
    ))
}

/// Answer a SubjectAccessReview: the decision for the user, groups, uid and extra its spec
/// names (at least a user or a group).
pub fn subject_access_review(authz: &dyn Authorizer, body: &Value) -> Result<Value, crate::error::ApiError> {
    validate_access_review(body)?;
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let user = spec.get("user").and_then(Value::as_str).unwrap_or("").to_string();
    let groups: Vec<String> =
        spec.get("groups").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect()).unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return Err(crate::error::ApiError::invalid(
            "authorization.k8s.io",
            "",
            "",
            vec![crate::error::Cause::new("FieldValueInvalid", "spec.user", "Invalid value: \"\": at least one of user or group must be specified")],
        ));
    }
    let extra: BTreeMap<String, Vec<String>> = spec.get("extra").cloned().and_then(|e| serde_json::from_value(e).ok()).unwrap_or_default();
    let who = Identity { user, uid: spec.get("uid").and_then(Value::as_str).unwrap_or("").to_string(), groups, extra };
    let mut out = self_subject_access_review(authz, &who, body);
    out["kind"] = json!("SubjectAccessReview");
    // kube-apiserver answers a plain denial (no rule said no) without `denied`.
    if let Some(st) = out.get_mut("status").and_then(Value::as_object_mut) {
        st.remove("denied");
        if st.get("reason").and_then(Value::as_str).is_some_and(str::is_empty) {
            st.remove("reason");
        }
    }
    Ok(out)
}

/// Answer a SelfSubjectAccessReview body with the decision for its spec.
pub fn self_subject_access_review(authz: &dyn Authorizer, who: &Identity, body: &Value) -> Value {
    let spec = body.get("spec").cloned().unwrap_or(json!({}));
    let attrs = if let Some(r) = spec.get("resourceAttributes") {
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Attributes {
            verb: s("verb"),
            group: s("group"),
            resource: s("resource"),
            subresource: s("subresource"),
            namespace: s("namespace"),
            name: s("name"),
            path: None,
        }
    } else {
        let n = spec.get("nonResourceAttributes").cloned().unwrap_or(json!({}));
        let s = |k: &str| n.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Attributes {
            verb: s("verb"),
            group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: Some(s("path")),
        }
    };
    let status = match authz.authorize(who, &attrs) {
        // An empty reason is left out, as Go's omitempty leaves it out.
        Decision::Allow(reason) if reason.is_empty() => json!({"allowed": true}),
        Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        Decision::Deny(reason) => json!({"allowed": false, "denied": true, "reason": reason}),
    };
    json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": spec,
        "status": status,
    })
}

/// Answer a SelfSubjectReview (`kubectl auth whoami`), stamped with the time of the request.
pub fn self_subject_review(who: &Identity, version: &str) -> Value {
    json!({
        "kind": "SelfSubjectReview",
        "apiVersion": format!("authentication.k8s.io/{version}"),
        "metadata": {"creationTimestamp": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
        "status": {"userInfo": user_info(who)},
    })
}

/// A caller as `userInfo`: an empty uid and extra are left out, as kube-apiserver leaves them.
fn user_info(who: &Identity) -> Value {
    let mut info = json!({"username": who.user, "groups": who.groups});
    if !who.uid.is_empty() {
        info["uid"] = json!(who.uid);
    }
    if !who.extra.is_empty() {
        info["extra"] = json!(who.extra);
    }
    info
}

/// Answer a SelfSubjectRulesReview (`kubectl auth can-i --list`). Like kube-apiserver, it needs
/// `spec.namespace` and answers with an empty spec.
pub fn self_subject_rules_review(authz: &dyn Authorizer, who: &Identity, body: &Value) -> Result<Value, crate::error::ApiError> {
    let namespace = body.pointer("/spec/namespace").and_then(Value::as_str).unwrap_or("");
    if namespace.is_empty() {
        return Err(crate::error::ApiError::bad_request("no namespace on request"));
    }
    let rules = authz.rules(who, namespace);
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {},
        "spec": {},
        "status": {
            "resourceRules": rules.resource_rules,
            "nonResourceRules": rules.non_resource_rules,
            "incomplete": false,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_parses_like_kube_apiserver() {
        let f = TokenFile::parse("# comment\nabc,alice,u1,\"dev,ops\"\nxyz,bob,u2\n").unwrap();
        let a = f.lookup("abc").unwrap();
        assert_eq!(a.user, "alice");
        assert_eq!(a.groups, vec!["dev", "ops", "system:authenticated"]);
        assert_eq!(f.lookup("xyz").unwrap().groups, vec!["system:authenticated"]);
        assert!(f.lookup("nope").is_none());
        assert!(TokenFile::parse("only,two").is_err());
    }

    #[test]
    fn a_certificate_names_its_user_groups_and_fingerprint_and_whoami_leaves_out_what_is_empty() {
        let ca = crate::pki::Authority::generate("test-ca").unwrap();
        let issued = ca.issue_client("alice", &["dev"]).unwrap();
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
        let id = identity_from_cert(&der).unwrap();
        assert_eq!((id.user.as_str(), id.groups.clone()), ("alice", vec!["dev".to_string(), "system:authenticated".to_string()]));
        let fingerprint: String = ring::digest::digest(&ring::digest::SHA256, &der).as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(id.extra[CREDENTIAL_ID], vec![format!("X509SHA256={fingerprint}")]);
        let review = self_subject_review(&id, "v1");
        assert!(review["status"]["userInfo"].get("uid").is_none(), "{review}");
        assert_eq!(review["status"]["userInfo"]["extra"][CREDENTIAL_ID][0], format!("X509SHA256={fingerprint}"));
        assert!(review["metadata"]["creationTimestamp"].is_string());
        assert!(self_subject_review(&Identity::user("bob", &[]), "v1")["status"]["userInfo"].get("extra").is_none());
    }
}
