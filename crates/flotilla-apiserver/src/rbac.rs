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
//! gets an opaque `token` bound to the account's uid and to the Secret itself, which
//! authenticates as `system:serviceaccount:<ns>:<name>` while the account exists with the same
//! uid and the Secret exists (the same object, not being deleted) holding that token: deleting
//! either revokes it. (TokenRequest tokens are signed JWTs:
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
        let resource_ok = self.resources.iter().any(|r| r == "*" || *r == combined || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource)));
        if !resource_ok {
            return false;
        }
        self.resource_names.is_empty() || (!a.name.is_empty() && self.resource_names.contains(&a.name))
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
            "Group" => who.groups.contains(&self.name),
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

/// A token kept in a `kubernetes.io/service-account-token` Secret.
#[derive(Debug)]
struct SecretToken {
    namespace: String,
    account: String,
    account_uid: String,
    secret: String,
    secret_uid: String,
}

/// Service account tokens, the accounts they belong to and the Secrets that hold them.
#[derive(Debug, Default)]
struct Tokens {
    tokens: HashMap<String, SecretToken>,
    /// (namespace, account) → uid of the live account
    accounts: HashMap<(String, String), String>,
    /// (namespace, secret) → (uid, base64 `data.token`) of the live token Secrets
    secrets: HashMap<(String, String), (String, String)>,
}

/// RBAC plus service account token authentication, fed from the store.
#[derive(Debug, Default)]
pub struct Rbac {
    index: RwLock<Arc<Index>>,
    tokens: RwLock<Arc<Tokens>>,
    /// The bootstrap policy is in the store ([`crate::rbac_bootstrap`]): what every
    /// authenticated user may do comes from its bindings. Without it (a simulated member) the
    /// same permissions are built in.
    policy_stored: std::sync::atomic::AtomicBool,
}

impl Rbac {
    pub(crate) fn set_policy_stored(&self, stored: bool) {
        self.policy_stored.store(stored, std::sync::atomic::Ordering::Release);
    }

    /// The built-in bootstrap rules, when the policy is not stored.
    fn built_in(&self) -> Vec<(&'static str, Vec<Rule>)> {
        if self.policy_stored.load(std::sync::atomic::Ordering::Acquire) { Vec::new() } else { bootstrap_rules() }
    }
}

/// Requests every authenticated user may make (kube-apiserver's system:discovery,
/// system:basic-user and system:public-info-viewer roles).
fn always_allowed(a: &Attributes) -> bool {
    if let Some(path) = &a.path {
        let p = path.trim_end_matches('/');
        return a.verb == "get"
            && (p == "/api"
                || p.starts_with("/api/")
                || p == "/apis"
                || p.starts_with("/apis/")
                || p.starts_with("/openapi")
                || matches!(p, "/version" | "/healthz" | "/livez" | "/readyz"));
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
            let record =
                SecretToken { namespace: s("namespace"), account: s("serviceAccount"), account_uid: s("uid"), secret: s("secret"), secret_uid: s("secretUid") };
            t.tokens.insert(s("token"), record);
        }
        let secrets = store.range(RangeRequest::prefix(Bytes::from_static(SECRET_PREFIX.as_bytes()))).await?;
        for kv in &secrets.kvs {
            let Ok(v) = storage::decode(kv) else { continue };
            if v.get("type").and_then(Value::as_str) != Some("kubernetes.io/service-account-token")
                || crate::meta::meta(&v).is_some_and(|m| m.contains_key("deletionTimestamp"))
            {
                continue;
            }
            let ns = crate::meta::namespace(&v).unwrap_or("").to_string();
            let uid = crate::meta::meta_str(&v, "uid").unwrap_or("").to_string();
            let data = v.pointer("/data/token").and_then(Value::as_str).unwrap_or("").to_string();
            t.secrets.insert((ns, crate::meta::name(&v).to_string()), (uid, data));
        }
        *self.tokens.write() = Arc::new(t);
        Ok(())
    }

    /// The identity a token Secret's token stands for, while its account lives and its Secret
    /// lives (not being deleted, the same object) holding that token — as kube-apiserver's
    /// legacy token validator checks ("Token has been invalidated", "Token does not match
    /// server's copy"; the client gets 401 either way).
    pub fn authenticate(&self, token: &str) -> Option<Identity> {
        use base64::Engine;
        let t = self.tokens.read().clone();
        let r = t.tokens.get(token)?;
        if t.accounts.get(&(r.namespace.clone(), r.account.clone())) != Some(&r.account_uid) {
            return None;
        }
        let (secret_uid, data) = t.secrets.get(&(r.namespace.clone(), r.secret.clone()))?;
        if *secret_uid != r.secret_uid || *data != base64::engine::general_purpose::STANDARD.encode(token) {
            return None;
        }
        let ns = &r.namespace;
        let mut id = Identity::user(&format!("system:serviceaccount:{ns}:{}", r.account), &["system:serviceaccounts", &format!("system:serviceaccounts:{ns}")]);
        id.uid = r.account_uid.clone();
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

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| serde_json::to_string(s).unwrap_or_default()).collect();
    format!("[{}]", items.join(" "))
}

impl Rule {
    fn one(verb: &str, group: &str, resource: &str, name: Option<&str>) -> Rule {
        Rule {
            verbs: vec![verb.into()],
            api_groups: vec![group.into()],
            resources: vec![resource.into()],
            resource_names: name.map(|n| vec![n.to_string()]).unwrap_or_default(),
            non_resource_urls: Vec::new(),
        }
    }

    /// The rule split into one rule per group × resource × verb (× resource name), and one per
    /// non-resource URL × verb, as RBAC's escalation check compares them (`*` stays literal).
    fn breakdown(&self) -> Vec<Rule> {
        let mut out = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    if self.resource_names.is_empty() {
                        out.push(Rule::one(verb, group, resource, None));
                    } else {
                        out.extend(self.resource_names.iter().map(|n| Rule::one(verb, group, resource, Some(n))));
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                out.push(Rule { verbs: vec![verb.clone()], non_resource_urls: vec![url.clone()], ..Rule::default() });
            }
        }
        out
    }

    /// Whether this (owner) rule grants everything `sub` grants.
    fn covers(&self, sub: &Rule) -> bool {
        let has_all = |owner: &[String], wanted: &[String]| wanted.iter().all(|w| owner.contains(w));
        let verbs = self.verbs.iter().any(|v| v == "*") || has_all(&self.verbs, &sub.verbs);
        let groups = self.api_groups.iter().any(|g| g == "*") || has_all(&self.api_groups, &sub.api_groups);
        let resources = self.resources.iter().any(|r| r == "*")
            || sub
                .resources
                .iter()
                .all(|r| self.resources.contains(r) || r.split_once('/').is_some_and(|(_, sub)| self.resources.contains(&format!("*/{sub}"))));
        let urls =
            sub.non_resource_urls.iter().all(|u| self.non_resource_urls.iter().any(|o| o == u || (o.ends_with('*') && u.starts_with(o.trim_end_matches('*')))));
        let names = if sub.resource_names.is_empty() {
            self.resource_names.is_empty()
        } else {
            self.resource_names.is_empty() || has_all(&self.resource_names, &sub.resource_names)
        };
        verbs && groups && resources && urls && names
    }

    /// kube-apiserver's `CompactString`: the rule as an escalation error prints it.
    fn compact_string(&self) -> String {
        let mut parts = Vec::new();
        for (label, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() {
                parts.push(format!("{label}:{}", go_quoted(values)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }

    /// A rule of a single group and resource with at most one resource name (and only
    /// verbs besides): the ones `CompactRules` merges by joining their verbs.
    fn simple_key(&self) -> Option<(String, String, Option<String>)> {
        (self.api_groups.len() == 1 && self.resources.len() == 1 && self.resource_names.len() <= 1 && self.non_resource_urls.is_empty())
            .then(|| (self.api_groups[0].clone(), self.resources[0].clone(), self.resource_names.first().cloned()))
    }
}

/// Whether the rules `have` (JSON) grant everything `rule` grants.
pub(crate) fn covered(have: &[Value], rule: &Value) -> bool {
    let owner: Vec<Rule> = have.iter().map(Rule::from).collect();
    uncovered(&owner, &[Rule::from(rule)]).is_empty()
}

/// The sub-rules of `servant` that no rule of `owner` covers (RBAC's `Covers`).
fn uncovered(owner: &[Rule], servant: &[Rule]) -> Vec<Rule> {
    servant.iter().flat_map(Rule::breakdown).filter(|sub| !owner.iter().any(|o| o.covers(sub))).collect()
}

/// kube-apiserver's description of rules not held: compacted (verbs of one group/resource
/// joined), each as its `CompactString`, sorted and unique, one per line.
fn describe_missing(missing: Vec<Rule>) -> String {
    let mut simple: Vec<((String, String, Option<String>), Rule)> = Vec::new();
    let mut lines = std::collections::BTreeSet::new();
    for rule in missing {
        match rule.simple_key() {
            Some(key) => match simple.iter_mut().find(|(k, _)| *k == key) {
                Some((_, existing)) => existing.verbs.extend(rule.verbs),
                None => simple.push((key, rule)),
            },
            None => {
                lines.insert(rule.compact_string());
            }
        }
    }
    lines.extend(simple.into_iter().map(|(_, r)| r.compact_string()));
    lines.into_iter().collect::<Vec<_>>().join("\n")
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
        // With the policy stored, its cluster-admin binding names system:masters.
        if who.groups.iter().any(|g| g == "system:masters") && !self.policy_stored.load(std::sync::atomic::Ordering::Acquire) {
            let all = Rule { verbs: vec!["*".into()], api_groups: vec!["*".into()], resources: vec!["*".into()], ..Rule::default() };
            let urls = Rule { verbs: vec!["*".into()], non_resource_urls: vec!["*".into()], ..Rule::default() };
            cluster.push(("cluster-admin".into(), vec![all, urls]));
        }
        cluster.extend(self.built_in().into_iter().map(|(name, rules)| (name.to_string(), rules)));
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
            // Anonymous callers reach the authorizer only for token discovery (the
            // authorization filter's one object): only bindings naming them grant it.
            return match self.by_bindings(who, what) {
                Decision::Deny(_) => Decision::Deny("anonymous requests are not allowed".into()),
                allowed => allowed,
            };
        }
        if who.groups.iter().any(|g| g == "system:masters") {
            // kube-apiserver's privileged-group authorizer gives no reason.
            return Decision::Allow(String::new());
        }
        let built_in = !self.policy_stored.load(std::sync::atomic::Ordering::Acquire);
        if built_in && always_allowed(what) {
            return Decision::Allow("allowed to every authenticated user".into());
        }
        // kube-apiserver's system:service-account-issuer-discovery, bound to every service account.
        if built_in
            && who.groups.iter().any(|g| g == "system:serviceaccounts")
            && what.verb == "get"
            && matches!(what.path.as_deref(), Some("/.well-known/openid-configuration" | "/openid/v1/jwks"))
        {
            return Decision::Allow("RBAC: allowed by ClusterRoleBinding to ClusterRole system:service-account-issuer-discovery".into());
        }
        if bootstrap_reads_own_request(who, what) {
            return Decision::Allow("a bootstrap token reads the certificate requests it made".into());
        }
        self.by_bindings(who, what)
    }
}

/// Flotilla's rule for bootstrap tokens (ADR 0028), as kube-apiserver's Node authorizer is for
/// kubelets: a token reads (get, and list or watch of one name) the certificate requests named
/// with its own prefix — which only it may create — and RBAC grants it nothing else to read.
fn bootstrap_reads_own_request(who: &Identity, what: &Attributes) -> bool {
    use flotilla_api::bootstrap_token as bt;
    let Some(id) = who.user.strip_prefix(bt::USER_PREFIX) else { return false };
    what.group == "certificates.k8s.io"
        && what.resource == "certificatesigningrequests"
        && what.subresource.is_empty()
        && matches!(what.verb.as_str(), "get" | "list" | "watch")
        && what.name.starts_with(&bt::csr_name_prefix(id))
}

impl Rbac {
    /// What the stored (Cluster)RoleBindings naming `who` allow.
    fn by_bindings(&self, who: &Identity, what: &Attributes) -> Decision {
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

    /// Every rule `who` holds in `namespace` (empty: the cluster scope) as RBAC's rule resolver
    /// gathers them: the bootstrap rules every authenticated user has, the ClusterRoleBindings
    /// naming `who` and, in a namespace, its RoleBindings naming `who`.
    fn held(&self, who: &Identity, namespace: &str) -> Vec<Rule> {
        let idx = self.index.read().clone();
        let mut out: Vec<Rule> = self.built_in().into_iter().flat_map(|(_, r)| r).collect();
        if who.groups.iter().any(|g| g == "system:serviceaccounts") && !self.policy_stored.load(std::sync::atomic::Ordering::Acquire) {
            out.push(Rule {
                verbs: vec!["get".into()],
                non_resource_urls: vec!["/.well-known/openid-configuration".into(), "/openid/v1/jwks".into()],
                ..Rule::default()
            });
        }
        for b in &idx.cluster_bindings {
            if b.subjects.iter().any(|s| s.matches(who, &b.namespace)) {
                out.extend(self.rules_for(&idx, b));
            }
        }
        if !namespace.is_empty() {
            for b in idx.bindings.iter().filter(|b| b.namespace == namespace) {
                if b.subjects.iter().any(|s| s.matches(who, &b.namespace)) {
                    out.extend(self.rules_for(&idx, b));
                }
            }
        }
        out
    }

    /// The rules of the role a binding refers to, or None when it does not exist.
    fn referenced(&self, kind: &str, namespace: &str, name: &str) -> Option<Vec<Rule>> {
        let idx = self.index.read().clone();
        match kind {
            "ClusterRole" => idx.cluster_roles.get(name).cloned(),
            "Role" => idx.roles.get(&(namespace.to_string(), name.to_string())).cloned(),
            _ => None,
        }
    }
}

/// Whether an update changes only what the garbage collector writes (owner references and
/// finalizers): RBAC's escalation checks do not apply to those.
fn only_gc_fields(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["ownerReferences", "finalizers", "managedFields", "resourceVersion", "generation", "creationTimestamp", "uid", "selfLink"] {
                m.remove(k);
            }
        }
        if let Some(m) = v.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        v
    };
    strip(new) == strip(old)
}

/// RBAC's escalation prevention on a write of a Role, ClusterRole, RoleBinding or
/// ClusterRoleBinding by `who`, as kube-apiserver's policy-based storage checks it before
/// validation:
/// - a role's rules must all be held by `who` in the role's namespace (cluster scope for a
///   ClusterRole), unless `who` may `escalate` it; setting an `aggregationRule` needs every
///   permission;
/// - a binding needs `bind` on the role it refers to, or every rule of that role held;
/// - `system:masters` is never checked, nor an update that changes only owner references and
///   finalizers.
pub(crate) struct RbacWrite<'a> {
    pub rbac: &'a Rbac,
    pub authz: &'a dyn crate::auth::Authorizer,
    pub who: &'a Identity,
    /// The resource written (`roles`, `clusterrolebindings`, …).
    pub resource: &'a str,
    pub namespace: &'a str,
    pub obj: &'a Value,
    pub old: Option<&'a Value>,
}

const GROUP: &str = "rbac.authorization.k8s.io";

impl RbacWrite<'_> {
    /// `system:masters`, and updates that change only owner references and finalizers, are
    /// never checked.
    fn exempt(&self) -> bool {
        self.who.groups.iter().any(|g| g == "system:masters") || self.old.is_some_and(|o| only_gc_fields(self.obj, o))
    }

    fn allowed(&self, verb: &str, resource: &str, ns: &str, object: &str, group: &str) -> bool {
        let a = Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: ns.into(),
            name: object.into(),
            path: None,
        };
        matches!(self.authz.authorize(self.who, &a), Decision::Allow(_))
    }

    fn not_held(&self, missing: Vec<Rule>) -> String {
        format!(
            "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
            serde_json::to_string(&self.who.user).unwrap_or_default(),
            go_quoted(&self.who.groups),
            describe_missing(missing)
        )
    }

    /// A Role or ClusterRole (`may_aggregate`: a ClusterRole, whose `aggregationRule` needs
    /// every permission).
    pub(crate) fn admit_role(&self, may_aggregate: bool) -> Result<(), crate::error::ApiError> {
        use crate::error::{ApiError, Subject};
        if self.exempt() {
            return Ok(());
        }
        let name = crate::meta::name(self.obj);
        let subject = Subject { group: GROUP, resource: self.resource, name };
        // On create the request names no object, so a grant limited by name does not match.
        let target = if self.old.is_some() { name } else { "" };
        if self.allowed("escalate", self.resource, self.namespace, target, GROUP) {
            return Ok(());
        }
        let held = self.rbac.held(self.who, self.namespace);
        let missing = uncovered(&held, &rules(self.obj));
        if !missing.is_empty() {
            return Err(ApiError::forbidden(&subject, self.not_held(missing)));
        }
        let aggregates = |v: &Value| v.get("aggregationRule").is_some_and(|a| !a.is_null());
        if may_aggregate && (aggregates(self.obj) || self.old.is_some_and(aggregates)) {
            let everything = [
                Rule { verbs: vec!["*".into()], api_groups: vec!["*".into()], resources: vec!["*".into()], ..Rule::default() },
                Rule { verbs: vec!["*".into()], non_resource_urls: vec!["*".into()], ..Rule::default() },
            ];
            if !uncovered(&held, &everything).is_empty() {
                return Err(ApiError::forbidden(&subject, "must have cluster-admin privileges to use the aggregationRule"));
            }
        }
        Ok(())
    }

    /// A RoleBinding or ClusterRoleBinding (`cluster_wide`: a ClusterRoleBinding, whose role
    /// must be held at the cluster scope).
    pub(crate) fn admit_binding(&self, cluster_wide: bool) -> Result<(), crate::error::ApiError> {
        use crate::error::{ApiError, Subject};
        if self.exempt() {
            return Ok(());
        }
        let name = crate::meta::name(self.obj);
        let subject = Subject { group: GROUP, resource: self.resource, name };
        let s = |p: &str| self.obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let (ref_group, ref_kind, ref_name) = (s("/roleRef/apiGroup"), s("/roleRef/kind"), s("/roleRef/name"));
        let role_resource = if ref_kind == "Role" { "roles" } else { "clusterroles" };
        let scope = if cluster_wide { "" } else { self.namespace };
        if self.allowed("bind", role_resource, scope, ref_name, ref_group) {
            return Ok(());
        }
        // kube-apiserver answers a missing role as a missing binding of the role's name.
        let Some(role_rules) = self.rbac.referenced(ref_kind, self.namespace, ref_name) else {
            return Err(ApiError::not_found(&Subject { group: GROUP, resource: self.resource, name: ref_name }));
        };
        let missing = uncovered(&self.rbac.held(self.who, scope), &role_rules);
        if missing.is_empty() { Ok(()) } else { Err(ApiError::forbidden(&subject, self.not_held(missing))) }
    }
}

/// The message kube-apiserver gives for a denied resource request.
pub fn denial(who: &Identity, a: &Attributes) -> String {
    let resource = if a.subresource.is_empty() { a.resource.clone() } else { format!("{}/{}", a.resource, a.subresource) };
    let scope = if a.namespace.is_empty() { "at the cluster scope".to_string() } else { format!("in the namespace \"{}\"", a.namespace) };
    format!("User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}", who.user, a.verb, a.group)
}

/// Keep the index current: reload after every change under the RBAC, service account, token
/// and secret prefixes. `server` gives the store and this index while the server lives (it holds
/// the server only weakly); the loop ends when the server is dropped.
pub(crate) async fn run(server: impl Fn() -> Option<(Arc<dyn Store>, Arc<Rbac>)>) {
    loop {
        let Some((store, rbac)) = server() else { return };
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
/// A token for `account` (of uid `uid`) kept in the Secret `secret` (name and uid): it
/// authenticates while the account and that Secret live and the Secret still holds it.
pub async fn mint_token(store: &dyn Store, namespace: &str, account: &str, uid: &str, secret: (&str, &str)) -> Result<String, flotilla_store::StoreError> {
    let token: String = {
        use rand::RngExt;
        let mut rng = rand::rng();
        (0..48).map(|_| char::from(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rng.random_range(0..62)])).collect()
    };
    let token = format!("flotilla-sa.{token}");
    let record = serde_json::json!({"token": token, "namespace": namespace, "serviceAccount": account, "uid": uid, "secret": secret.0, "secretUid": secret.1});
    let key = format!("{TOKEN_PREFIX}{namespace}/{account}/{}", &token[token.len() - 12..]);
    store.create(Bytes::from(key), Bytes::from(record.to_string())).await?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: None,
        }
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

    fn rule(v: Value) -> Rule {
        Rule::from(&v)
    }

    #[test]
    fn coverage_breaks_rules_down_as_kube_apiserver_does() {
        let owner = vec![
            rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/status"]})),
            rule(json!({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/logs/*"]})),
        ];
        let covered = |servant: Value| uncovered(&owner, &[rule(servant)]).is_empty();
        assert!(covered(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "nodes/status"]})));
        assert!(!covered(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log"]})), "pods does not cover pods/log");
        assert!(!covered(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]})), "a requested * needs an owner *");
        assert!(covered(json!({"verbs": ["delete"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]})));
        assert!(!covered(json!({"verbs": ["delete"], "apiGroups": ["apps"], "resources": ["deployments"]})), "a named grant covers no unnamed one");
        assert!(covered(json!({"verbs": ["get"], "nonResourceURLs": ["/logs/a/b"]})));
        assert!(!covered(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]})));
    }

    #[test]
    fn missing_rules_are_described_as_kube_apiserver_describes_them() {
        let missing = uncovered(&[], &[rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}))]);
        assert_eq!(describe_missing(missing), "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}");
        let missing = uncovered(
            &[],
            &[
                rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]})),
                rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]})),
            ],
        );
        assert_eq!(
            describe_missing(missing),
            "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\"]}\n{NonResourceURLs:[\"/healthz\"], Verbs:[\"get\"]}"
        );
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
