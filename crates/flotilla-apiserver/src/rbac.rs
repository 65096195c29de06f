//! RBAC authorization (`rbac.authorization.k8s.io/v1`) and service account tokens.
//!
//! The authorizer keeps an in-memory index of Roles, ClusterRoles and their bindings, rebuilt
//! from the store whenever one of them changes (a store watch). Rules match as kube-apiserver
//! matches them: verbs, API groups, resources (`res`, `res/sub`, `*`, `*/sub`), resource names,
//! and non-resource URLs (with a trailing `*` as a prefix wildcard). `system:masters` is a
//! super-user group. Every authenticated user may reach discovery, health and version, and
//! create SelfSubject*Reviews, as kube-apiserver's bootstrap roles allow.
//!
//! Service account tokens of Secrets of type `kubernetes.io/service-account-token`: the Secret
//! gets an opaque `token` bound to the account's uid, which authenticates as
//! `system:serviceaccount:<ns>:<name>` while its account exists with the same uid: deleting the
//! account revokes its tokens. (TokenRequest tokens are signed JWTs:
//! [`crate::service_account_jwt`].)

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use flotilla_store::{RangeRequest, Store};
use parking_lot::RwLock;
use serde_json::Value;

use crate::auth::{Attributes, Authorizer, Decision, Identity};
use crate::storage;

const RBAC_PREFIX: &str = "/registry/rbac.authorization.k8s.io/";
const SA_PREFIX: &str = "/registry/core/serviceaccounts/";
const TOKEN_PREFIX: &str = "/registry/flotilla.io/serviceaccounttokens/";
const SECRET_PREFIX: &str = "/registry/core/secrets/";

#[derive(Clone, Debug, Default)]
struct Rule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key).and_then(Value::as_array).map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect()).unwrap_or_default()
}

impl Rule {
    fn from(v: &Value) -> Rule {
        Rule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    fn verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    fn allows(&self, a: &Attributes) -> bool {
        if !self.verb(&a.verb) {
            return false;
        }
        if let Some(path) = &a.path {
            return self.non_resource_urls.iter().any(|u| u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p)));
        }
        if !self.api_groups.iter().any(|g| g == "*" || *g == a.group) {
            return false;
        }
        let combined = if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
        let resource_ok = self.resources.iter().any(|r| {
            r == "*" || *r == combined || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
        });
        if !resource_ok {
            return false;
        }
        self.resource_names.is_empty() || (!a.name.is_empty() && self.resource_names.iter().any(|n| *n == a.name))
    }
}

#[derive(Clone, Debug)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    fn matches(&self, who: &Identity, binding_ns: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == who.user,
            "Group" => who.groups.iter().any(|g| *g == self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() { binding_ns } else { &self.namespace };
                who.user == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
struct Binding {
    name: String,
    namespace: String,
    role_kind: String,
    role_name: String,
    subjects: Vec<Subject>,
}

/// The index the authorizer consults.
#[derive(Debug, Default)]
struct Index {
    cluster_roles: HashMap<String, Vec<Rule>>,
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_bindings: Vec<Binding>,
    bindings: Vec<Binding>,
}

fn parse_binding(v: &Value, namespace: &str) -> Binding {
    Binding {
        name: v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string(),
        namespace: namespace.to_string(),
        role_kind: v.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or("").to_string(),
        role_name: v.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or("").to_string(),
        subjects: v
            .get("subjects")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|s| Subject {
                        kind: s.get("kind").and_then(Value::as_str).unwrap_or("").to_string(),
                        name: s.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                        namespace: s.get("namespace").and_then(Value::as_str).unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn rules(v: &Value) -> Vec<Rule> {
    v.get("rules").and_then(Value::as_array).map(|a| a.iter().map(Rule::from).collect()).unwrap_or_default()
}

/// Service account tokens and the accounts they belong to.
#[derive(Debug, Default)]
struct Tokens {
    /// token → (namespace, account, account uid)
    tokens: HashMap<String, (String, String, String)>,
    /// (namespace, account) → uid of the live account
    accounts: HashMap<(String, String), String>,
}

/// RBAC plus service account token authentication, fed from the store.
#[derive(Debug, Default)]
pub struct Rbac {
    index: RwLock<Arc<Index>>,
    tokens: RwLock<Arc<Tokens>>,
}

/// Requests every authenticated user may make (kube-apiserver's system:discovery,
/// system:basic-user and system:public-info-viewer roles).
fn always_allowed(a: &Attributes) -> bool {
    if let Some(path) = &a.path {
        let p = path.trim_end_matches('/');
        return a.verb == "get"
            && (p == "/api" || p.starts_with("/api/") || p == "/apis" || p.starts_with("/apis/") || p.starts_with("/openapi") || matches!(p, "/version" | "/healthz" | "/livez" | "/readyz"));
    }
    a.verb == "create"
        && matches!(
            (a.group.as_str(), a.resource.as_str()),
            ("authorization.k8s.io", "selfsubjectaccessreviews" | "selfsubjectrulesreviews") | ("authentication.k8s.io", "selfsubjectreviews")
        )
}

impl Rbac {
    fn rules_for(&self, idx: &Index, b: &Binding) -> Vec<Rule> {
        match b.role_kind.as_str() {
            "ClusterRole" => idx.cluster_roles.get(&b.role_name).cloned().unwrap_or_default(),
            "Role" => idx.roles.get(&(b.namespace.clone(), b.role_name.clone())).cloned().unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Rebuild the index and the token table from the store.
    pub async fn reload(&self, store: &dyn Store) -> Result<(), flotilla_store::StoreError> {
        let mut idx = Index::default();
        let resp = store.range(RangeRequest::prefix(Bytes::from_static(RBAC_PREFIX.as_bytes()))).await?;
        for kv in &resp.kvs {
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            let Ok(v) = storage::decode(kv) else { continue };
            let rest = key.trim_start_matches(RBAC_PREFIX);
            let parts: Vec<&str> = rest.split('/').collect();
            match parts.as_slice() {
                ["clusterroles", name] => {
                    idx.cluster_roles.insert(name.to_string(), rules(&v));
                }
                ["roles", ns, name] => {
                    idx.roles.insert((ns.to_string(), name.to_string()), rules(&v));
                }
                ["clusterrolebindings", _] => idx.cluster_bindings.push(parse_binding(&v, "")),
                ["rolebindings", ns, _] => idx.bindings.push(parse_binding(&v, ns)),
                _ => {}
            }
        }
        *self.index.write() = Arc::new(idx);
        let mut t = Tokens::default();
        let accounts = store.range(RangeRequest::prefix(Bytes::from_static(SA_PREFIX.as_bytes()))).await?;
        for kv in &accounts.kvs {
            let Ok(v) = storage::decode(kv) else { continue };
            let ns = crate::meta::namespace(&v).unwrap_or("").to_string();
            let name = crate::meta::name(&v).to_string();
            let uid = crate::meta::meta_str(&v, "uid").unwrap_or("").to_string();
            t.accounts.insert((ns, name), uid);
        }
        let tokens = store.range(RangeRequest::prefix(Bytes::from_static(TOKEN_PREFIX.as_bytes()))).await?;
        for kv in &tokens.kvs {
            let Ok(v) = serde_json::from_slice::<Value>(&kv.value) else { continue };
            let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            t.tokens.insert(s("token"), (s("namespace"), s("serviceAccount"), s("uid")));
        }
        *self.tokens.write() = Arc::new(t);
        Ok(())
    }

    /// The identity a service account token stands for, while its account lives.
    pub fn authenticate(&self, token: &str) -> Option<Identity> {
        let t = self.tokens.read().clone();
        let (ns, sa, uid) = t.tokens.get(token)?;
        if t.accounts.get(&(ns.clone(), sa.clone())) != Some(uid) {
            return None;
        }
        let mut id = Identity::user(&format!("system:serviceaccount:{ns}:{sa}"), &["system:serviceaccounts", &format!("system:serviceaccounts:{ns}")]);
        id.uid = uid.clone();
        Some(id)
    }
}

/// The rules of the bootstrap bindings every authenticated user has, as kube-apiserver's
/// `system:basic-user`, `system:discovery` and `system:public-info-viewer` ClusterRoles state
/// them (what [`always_allowed`] allows), each with its binding's name.
fn bootstrap_rules() -> Vec<(&'static str, Vec<Rule>)> {
    let rule = |verbs: &[&str], groups: &[&str], resources: &[&str], urls: &[&str]| Rule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        api_groups: groups.iter().map(|s| s.to_string()).collect(),
        resources: resources.iter().map(|s| s.to_string()).collect(),
        resource_names: Vec::new(),
        non_resource_urls: urls.iter().map(|s| s.to_string()).collect(),
    };
    let health = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let mut discovery = vec!["/api", "/api/*", "/apis", "/apis/*"];
    discovery.extend(health);
    discovery.extend(["/openapi", "/openapi/*"]);
    discovery.sort_unstable();
    vec![
        (
            "system:basic-user",
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["selfsubjectreviews"], &[]),
                rule(&["create"], &["authorization.k8s.io"], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"], &[]),
            ],
        ),
        ("system:discovery", vec![rule(&["get"], &[], &[], &discovery)]),
        ("system:public-info-viewer", vec![rule(&["get"], &[], &[], &health)]),
    ]
}

impl Rule {
    /// The rule as a SelfSubjectRulesReview lists it: a resource rule, a non-resource rule, or
    /// (when it names both) one of each.
    fn review(&self, out: &mut crate::auth::RulesReview) {
        let list = |v: &[String]| serde_json::json!(v);
        if !self.resources.is_empty() {
            let mut r = serde_json::json!({"verbs": list(&self.verbs)});
            for (key, values) in [("apiGroups", &self.api_groups), ("resources", &self.resources), ("resourceNames", &self.resource_names)] {
                if !values.is_empty() {
                    r[key] = list(values);
                }
            }
            out.resource_rules.push(r);
        }
        if !self.non_resource_urls.is_empty() {
            out.non_resource_rules.push(serde_json::json!({"verbs": list(&self.verbs), "nonResourceURLs": list(&self.non_resource_urls)}));
        }
    }
}

impl Authorizer for Rbac {
    /// kube-apiserver's order: the ClusterRoleBindings that name `who`, by name (the
    /// `system:masters` group's `cluster-admin` and the bootstrap bindings among them), then the
    /// RoleBindings of `namespace`, by name.
    fn rules(&self, who: &Identity, namespace: &str) -> crate::auth::RulesReview {
        let mut out = crate::auth::RulesReview::default();
        if who.is_anonymous() {
            return out;
        }
        let idx = self.index.read().clone();
        let mut cluster: Vec<(String, Vec<Rule>)> = Vec::new();
        if who.groups.iter().any(|g| g == "system:masters") {
            let all = Rule { verbs: vec!["*".into()], api_groups: vec!["*".into()], resources: vec!["*".into()], ..Rule::default() };
            let urls = Rule { verbs: vec!["*".into()], non_resource_urls: vec!["*".into()], ..Rule::default() };
            cluster.push(("cluster-admin".into(), vec![all, urls]));
        }
        cluster.extend(bootstrap_rules().into_iter().map(|(name, rules)| (name.to_string(), rules)));
        for b in &idx.cluster_bindings {
            if b.subjects.iter().any(|s| s.matches(who, &b.namespace)) {
                cluster.push((b.name.clone(), self.rules_for(&idx, b)));
            }
        }
        cluster.sort_by(|a, b| a.0.cmp(&b.0));
        let mut namespaced: Vec<(String, Vec<Rule>)> = idx
            .bindings
            .iter()
            .filter(|b| b.namespace == namespace && b.subjects.iter().any(|s| s.matches(who, &b.namespace)))
            .map(|b| (b.name.clone(), self.rules_for(&idx, b)))
            .collect();
        namespaced.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, rules) in cluster.iter().chain(&namespaced) {
            for r in rules {
                r.review(&mut out);
            }
        }
        out
    }

    fn authorize(&self, who: &Identity, what: &Attributes) -> Decision {
        if who.is_anonymous() {
            return Decision::Deny("anonymous requests are not allowed".into());
        }
        if who.groups.iter().any(|g| g == "system:masters") {
            return Decision::Allow("the system:masters group".into());
        }
        if always_allowed(what) {
            return Decision::Allow("allowed to every authenticated user".into());
        }
        // kube-apiserver's system:service-account-issuer-discovery, bound to every service account.
        if who.groups.iter().any(|g| g == "system:serviceaccounts")
            && what.verb == "get"
            && matches!(what.path.as_deref(), Some("/.well-known/openid-configuration" | "/openid/v1/jwks"))
        {
            return Decision::Allow("RBAC: allowed by ClusterRoleBinding to ClusterRole system:service-account-issuer-discovery".into());
        }
        let idx = self.index.read().clone();
        for b in &idx.cluster_bindings {
            if b.subjects.iter().any(|s| s.matches(who, &b.namespace)) && self.rules_for(&idx, b).iter().any(|r| r.allows(what)) {
                return Decision::Allow(format!("RBAC: allowed by ClusterRoleBinding to {} {}", b.role_kind, b.role_name));
            }
        }
        if !what.namespace.is_empty() {
            for b in idx.bindings.iter().filter(|b| b.namespace == what.namespace) {
                if b.subjects.iter().any(|s| s.matches(who, &b.namespace)) && self.rules_for(&idx, b).iter().any(|r| r.allows(what)) {
                    return Decision::Allow(format!("RBAC: allowed by RoleBinding to {} {} in {}", b.role_kind, b.role_name, b.namespace));
                }
            }
        }
        Decision::Deny(String::new())
    }
}

/// The message kube-apiserver gives for a denied resource request.
pub fn denial(who: &Identity, a: &Attributes) -> String {
    let resource = if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let scope = if a.namespace.is_empty() { "at the cluster scope".to_string() } else { format!("in the namespace \"{}\"", a.namespace) };
    format!("User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}", who.user, a.verb, a.group)
}

/// Keep the index current: reload after every change under the RBAC, service account, token
/// and secret prefixes. Ends when the server is dropped.
pub(crate) async fn run(weak: std::sync::Weak<crate::server::Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let store = inner.store.clone();
        let rbac = inner.rbac.clone();
        drop(inner);
        let start = match store.current_revision().await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = rbac.reload(store.as_ref()).await {
            tracing::warn!(error = %e, "reloading RBAC failed");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        }
        // One watch over everything below /registry/ would be too broad; the four prefixes
        // share no common one, so watch each and wake on the first event.
        let mut watches = Vec::new();
        for p in [RBAC_PREFIX, SA_PREFIX, TOKEN_PREFIX, SECRET_PREFIX] {
            if let Ok(w) = store.watch(p.as_bytes(), start).await {
                watches.push(w);
            }
        }
        drop(store);
        let woke = futures::future::select_all(watches.iter_mut().map(|w| {
            Box::pin(async move {
                loop {
                    match w.next_event().await {
                        Some(Ok(flotilla_store::WatchEvent::Progress(_))) => continue,
                        _ => return,
                    }
                }
            })
        }));
        let _ = tokio::time::timeout(std::time::Duration::from_secs(60), woke).await;
    }
}

/// Mint a token for a service account and record it (TokenRequest and token Secrets).
pub async fn mint_token(store: &dyn Store, namespace: &str, account: &str, uid: &str) -> Result<String, flotilla_store::StoreError> {
    let token: String = {
        use rand::RngExt;
        let mut rng = rand::rng();
        (0..48).map(|_| char::from(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rng.random_range(0..62)])).collect()
    };
    let token = format!("flotilla-sa.{token}");
    let record = serde_json::json!({"token": token, "namespace": namespace, "serviceAccount": account, "uid": uid});
    let key = format!("{TOKEN_PREFIX}{namespace}/{account}/{}", &token[token.len() - 12..]);
    store.create(Bytes::from(key), Bytes::from(record.to_string())).await?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes { verb: verb.into(), group: group.into(), resource: resource.into(), subresource: sub.into(), namespace: ns.into(), name: name.into(), path: None }
    }

    #[test]
    fn rules_match_as_kube_apiserver_matches_them() {
        let r = Rule::from(&json!({"verbs": ["get", "list"], "apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"], "resourceNames": []}));
        assert!(r.allows(&attrs("get", "apps", "deployments", "", "d", "x")));
        assert!(r.allows(&attrs("list", "apps", "deployments", "scale", "d", "x")));
        assert!(!r.allows(&attrs("delete", "apps", "deployments", "", "d", "x")));
        assert!(!r.allows(&attrs("get", "", "deployments", "", "d", "x")));
        assert!(!r.allows(&attrs("get", "apps", "deployments", "status", "d", "x")));
        let named = Rule::from(&json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"], "resourceNames": ["only"]}));
        assert!(named.allows(&attrs("update", "x", "things", "status", "", "only")));
        assert!(!named.allows(&attrs("update", "x", "things", "status", "", "other")));
        assert!(!named.allows(&attrs("list", "x", "things", "status", "", "")));
        let urls = Rule::from(&json!({"verbs": ["get"], "nonResourceURLs": ["/metrics", "/logs/*"]}));
        let mut a = attrs("get", "", "", "", "", "");
        a.path = Some("/logs/x".into());
        assert!(urls.allows(&a));
        a.path = Some("/other".into());
        assert!(!urls.allows(&a));
    }

    #[test]
    fn subjects_match_users_groups_and_service_accounts() {
        let who = Identity::user("system:serviceaccount:ns1:bot", &["system:serviceaccounts"]);
        assert!(Subject { kind: "ServiceAccount".into(), name: "bot".into(), namespace: "ns1".into() }.matches(&who, ""));
        assert!(Subject { kind: "ServiceAccount".into(), name: "bot".into(), namespace: String::new() }.matches(&who, "ns1"));
        assert!(!Subject { kind: "ServiceAccount".into(), name: "bot".into(), namespace: "ns2".into() }.matches(&who, ""));
        assert!(Subject { kind: "Group".into(), name: "system:serviceaccounts".into(), namespace: String::new() }.matches(&who, ""));
        assert!(!Subject { kind: "User".into(), name: "bot".into(), namespace: String::new() }.matches(&who, ""));
    }
}
