//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`): the `Impersonate-User`,
//! `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-<key>` headers, authorized and
//! applied as kube-apiserver v1.37's filter does, before the request itself is authorized as
//! the impersonated user.
//!
//! A caller may impersonate when one of kube-apiserver's modes allows it, tried in its order:
//! - the constrained ones (KEP-5284, on by default since v1.36): `impersonate-on:<mode>:<verb>`
//!   on what the request touches, plus `impersonate:<mode>` on the user (`users`, `nodes` or
//!   `serviceaccounts`), `groups`, `uids` and `userextras/<key>` in `authentication.k8s.io`. The
//!   modes are `associated-node` (a service account impersonating its pod's node),
//!   `arbitrary-node`, `serviceaccount` (by name alone) and `user-info` (anyone else);
//!   `system:masters`, an empty group and extras whose keys are not domain-prefixed paths are
//!   refused, with the reason;
//! - the classic one: verb `impersonate` on `users` (or `serviceaccounts` in the account's
//!   namespace), `groups` (core group), `uids` and `userextras/<key>`.
//!
//! A refusal is kube-apiserver's: the 403 of the first check that failed, in the first mode
//! that failed. The mode that last worked for a caller is tried first ([`LastModes`]), so once a
//! caller has impersonated through the classic grant, its refusals name the classic check
//! (`cannot impersonate resource "users"`), and before that the constrained check of the
//! request (`cannot impersonate-on:user-info:list resource "pods"`). The impersonated user gets
//! `system:authenticated` (a service account with no groups named also its
//! `system:serviceaccounts` groups, a node `system:nodes`), and only the uid and extra asked
//! for. The headers are removed from the request, so nothing behind the API server (the
//! cluster proxy) sees them.

use std::collections::{BTreeMap, HashMap};

use http::HeaderMap;

use crate::auth::{Attributes, Authorizer, Decision, Identity};
use crate::error::{ApiError, Subject};
use flotilla_api::validation::names;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// What the headers ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Request {
    user: Option<String>,
    groups: Vec<String>,
    uid: Option<String>,
    extra: BTreeMap<String, Vec<String>>,
}

impl Request {
    fn from_headers(headers: &HeaderMap) -> Request {
        let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
        let mut r = Request {
            user: headers.get(USER).map(text),
            groups: headers.get_all(GROUP).iter().map(text).collect(),
            uid: headers.get(UID).map(text),
            ..Request::default()
        };
        for (name, value) in headers {
            if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
                // Keys are case-insensitive and percent-encoded (`Scopes%2Fa` is `scopes/a`); a
                // malformed escape leaves the key as it came.
                let lower = key.to_lowercase();
                let key = percent_encoding::percent_decode_str(&lower).decode_utf8().map(|k| k.into_owned()).unwrap_or(lower);
                r.extra.entry(key).or_default().push(text(value));
            }
        }
        r
    }

    fn is_empty(&self) -> bool {
        self.user.is_none() && self.groups.is_empty() && self.uid.is_none() && self.extra.is_empty()
    }

    /// Go's `%#v` of the `user.DefaultInfo` asked for, as the 400 for a request without a user
    /// prints it.
    fn go_syntax(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let strings = |v: &[String]| format!("[]string{{{}}}", v.iter().map(|s| q(s)).collect::<Vec<_>>().join(", "));
        let groups = if self.groups.is_empty() { "[]string(nil)".to_string() } else { strings(&self.groups) };
        let extra = if self.extra.is_empty() {
            "map[string][]string(nil)".to_string()
        } else {
            let entries: Vec<String> = self.extra.iter().map(|(k, v)| format!("{}:{}", q(k), strings(v))).collect();
            format!("map[string][]string{{{}}}", entries.join(", "))
        };
        format!(
            "&user.DefaultInfo{{Name:{}, UID:{}, Groups:{groups}, Extra:{extra}}}",
            q(self.user.as_deref().unwrap_or("")),
            q(self.uid.as_deref().unwrap_or(""))
        )
    }
}

/// Removes every impersonation header; returns whether there was one.
pub(crate) fn take_headers(headers: &mut HeaderMap) -> Option<HeaderMap> {
    let names: Vec<http::HeaderName> = headers.keys().filter(|n| n.as_str().starts_with("impersonate-")).cloned().collect();
    if names.is_empty() {
        return None;
    }
    let mut taken = HeaderMap::new();
    for name in names {
        for value in headers.get_all(&name).iter() {
            taken.append(name.clone(), value.clone());
        }
        headers.remove(&name);
    }
    Some(taken)
}

/// The service account a username names (`system:serviceaccount:<ns>:<name>`, both valid names).
fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    let valid = names::dns1123_label(ns).is_empty() && names::dns1123_subdomain(name).is_empty();
    valid.then_some((ns, name))
}

/// The node a username names (`system:node:<name>`, a valid node name).
fn node(user: &str) -> Option<&str> {
    user.strip_prefix("system:node:").filter(|n| names::dns1123_subdomain(n).is_empty())
}

fn resource(verb: &str, group: &str, resource: &str, subresource: &str, namespace: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        namespace: namespace.into(),
        name: name.into(),
        path: None,
    }
}

/// The ways a caller may be allowed to impersonate, in the order kube-apiserver tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A service account impersonating the node its pod runs on (`impersonate:associated-node`).
    AssociatedNode,
    /// Any node (`impersonate:arbitrary-node`).
    ArbitraryNode,
    /// A service account, by its name alone (`impersonate:serviceaccount`).
    ServiceAccount,
    /// Any other user, with groups, uid and extras (`impersonate:user-info`).
    UserInfo,
    /// The classic verb `impersonate`, in the core group for users, groups and service accounts.
    Legacy,
}

const MODES: [Mode; 5] = [Mode::AssociatedNode, Mode::ArbitraryNode, Mode::ServiceAccount, Mode::UserInfo, Mode::Legacy];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::AssociatedNode => "associated-node",
            Mode::ArbitraryNode => "arbitrary-node",
            Mode::ServiceAccount => "serviceaccount",
            Mode::UserInfo => "user-info",
            Mode::Legacy => "legacy",
        }
    }

    /// Whether this mode applies to what is asked for at all.
    fn applies(self, who: &Identity, asked: &Request, user: &str) -> bool {
        let only_name = asked.groups.is_empty() && asked.uid.is_none() && asked.extra.is_empty();
        match self {
            Mode::AssociatedNode => {
                let own_node = who.extra.get("authentication.kubernetes.io/node-name").filter(|v| v.len() == 1).map(|v| v[0].as_str());
                only_name && service_account(&who.user).is_some() && node(user).is_some_and(|n| own_node == Some(n))
            }
            Mode::ArbitraryNode => only_name && node(user).is_some(),
            Mode::ServiceAccount => only_name && service_account(user).is_some(),
            Mode::UserInfo => node(user).is_none() && service_account(user).is_none(),
            Mode::Legacy => true,
        }
    }
}

/// Which mode last let each caller impersonate, by the caller's name (kube-apiserver keeps the
/// last 10,000): tried first, so it is that mode's refusal a caller sees when nothing allows a
/// request, as on kube-apiserver.
#[derive(Debug, Default)]
pub(crate) struct LastModes {
    modes: parking_lot::Mutex<(u64, HashMap<String, (usize, u64)>)>,
}

/// How many callers [`LastModes`] remembers.
const LAST_MODES: usize = 10_000;

impl LastModes {
    fn get(&self, caller: &str) -> Option<usize> {
        let mut guard = self.modes.lock();
        let (clock, map) = &mut *guard;
        *clock += 1;
        let entry = map.get_mut(caller)?;
        entry.1 = *clock;
        Some(entry.0)
    }

    fn set(&self, caller: &str, mode: usize) {
        let mut guard = self.modes.lock();
        let (clock, map) = &mut *guard;
        *clock += 1;
        if map.len() >= LAST_MODES && !map.contains_key(caller) {
            // The least recently used caller goes.
            if let Some(oldest) = map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(caller.to_string(), (mode, *clock));
    }
}

/// The identity `who` acts as for this request: itself when `headers` ask for nothing, the
/// impersonated user when a mode allows it, or kube-apiserver's 400/403. `request` is what the
/// request itself touches (the constrained modes check it).
pub(crate) fn impersonate(authz: &dyn Authorizer, last: &LastModes, who: &Identity, headers: &HeaderMap, request: &Attributes) -> Result<Identity, ApiError> {
    let asked = Request::from_headers(headers);
    if asked.is_empty() {
        return Ok(who.clone());
    }
    let Some(user) = asked.user.clone().filter(|u| !u.is_empty()) else {
        return Err(ApiError::bad_request(format!("requested {} without impersonating a user name", asked.go_syntax())));
    };
    let cached = last.get(&who.user);
    let order = cached.into_iter().chain((0..MODES.len()).filter(|i| Some(*i) != cached));
    let mut first_refusal = None;
    for i in order {
        match check(MODES[i], authz, who, &asked, &user, request) {
            Ok(Some(id)) => {
                last.set(&who.user, i);
                return Ok(id);
            }
            Ok(None) => {}
            Err(e) => {
                first_refusal.get_or_insert(e);
            }
        }
    }
    // Legacy applies to everything, so some mode refused; fail closed all the same.
    Err(first_refusal.unwrap_or_else(|| ApiError::new(403, "Forbidden", "all impersonation modes failed".to_string())))
}

/// One mode's verdict: not applicable (`None`), the impersonated identity, or its first refusal.
fn check(mode: Mode, authz: &dyn Authorizer, who: &Identity, asked: &Request, user: &str, request: &Attributes) -> Result<Option<Identity>, ApiError> {
    if !mode.applies(who, asked, user) {
        return Ok(None);
    }
    let allow = Checks { authz, who };
    let constrained = mode != Mode::Legacy;
    if constrained {
        let mut on_request = request.clone();
        on_request.verb = format!("impersonate-on:{}:{}", mode.name(), request.verb);
        allow.check(on_request)?;
    }
    let (verb, group) = if constrained { (format!("impersonate:{}", mode.name()), "authentication.k8s.io") } else { ("impersonate".to_string(), "") };
    let mut groups = asked.groups.clone();
    // The user name: a node or a service account is checked as that resource.
    match (node(user).filter(|_| constrained), service_account(user)) {
        (Some(name), _) => {
            // The associated node's grant is for every node: the caller's own is checked above.
            let name = if mode == Mode::AssociatedNode { "*" } else { name };
            groups = vec!["system:nodes".into()];
            allow.check(resource(&verb, group, "nodes", "", "", name))?;
        }
        (None, Some((ns, name))) => {
            if groups.is_empty() {
                groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")];
            }
            allow.check(resource(&verb, group, "serviceaccounts", "", ns, name))?;
        }
        (None, None) => allow.check(resource(&verb, group, "users", "", "", user))?,
    }
    if let Some(uid) = &asked.uid {
        allow.check(resource(&verb, "authentication.k8s.io", "uids", "", "", uid))?;
    }
    authorize_groups(&allow, constrained, &verb, group, &asked.groups)?;
    authorize_extra(&allow, constrained, &verb, &asked.extra)?;
    if user == "system:anonymous" {
        if !groups.iter().any(|g| g == "system:unauthenticated") {
            groups.push("system:unauthenticated".into());
        }
    } else if !groups.iter().any(|g| g == "system:authenticated" || g == "system:unauthenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(Some(Identity { user: user.to_string(), uid: asked.uid.clone().unwrap_or_default(), groups, extra: asked.extra.clone() }))
}

/// From how many groups or extra values on the constrained modes try one wildcard grant first.
const MANY_CHECKS: usize = 4;

/// The authorization checks of one impersonation, as `who`.
struct Checks<'a> {
    authz: &'a dyn Authorizer,
    who: &'a Identity,
}

impl Checks<'_> {
    /// Ok when `who` is allowed `a`, else kube-apiserver's 403 for it.
    fn check(&self, a: Attributes) -> Result<(), ApiError> {
        match self.authz.authorize(self.who, &a) {
            Decision::Allow(_) => Ok(()),
            _ => Err(refusal(self.who, &a, None)),
        }
    }

    /// The 403 for `a` that a constrained mode gives whatever the grants, with its reason.
    fn refuse(&self, a: Attributes, reason: &str) -> Result<(), ApiError> {
        Err(refusal(self.who, &a, Some(reason)))
    }
}

fn authorize_groups(allow: &Checks<'_>, constrained: bool, verb: &str, group: &str, groups: &[String]) -> Result<(), ApiError> {
    if groups.is_empty() {
        return Ok(());
    }
    let on = |name: &str| resource(verb, group, "groups", "", "", name);
    if constrained {
        if groups.iter().any(String::is_empty) {
            return allow.refuse(on(""), "impersonating the empty string group is not allowed");
        }
        if groups.iter().any(|g| g == "system:masters") {
            return allow.refuse(on("system:masters"), "impersonating the system:masters group is not allowed");
        }
        if groups.len() >= MANY_CHECKS && allow.check(on("*")).is_ok() {
            return Ok(());
        }
    }
    groups.iter().try_for_each(|g| allow.check(on(g)))
}

fn authorize_extra(allow: &Checks<'_>, constrained: bool, verb: &str, extra: &BTreeMap<String, Vec<String>>) -> Result<(), ApiError> {
    if extra.is_empty() {
        return Ok(());
    }
    let on = |key: &str, value: &str| resource(verb, "authentication.k8s.io", "userextras", key, "", value);
    if constrained {
        if let Some(reason) = invalid_extra(extra) {
            return allow.refuse(on("", ""), &reason);
        }
        let values: usize = extra.values().map(Vec::len).sum();
        if (extra.len() >= MANY_CHECKS || values >= MANY_CHECKS) && allow.check(on("*", "*")).is_ok() {
            return Ok(());
        }
    }
    extra.iter().try_for_each(|(key, values)| values.iter().try_for_each(|v| allow.check(on(key, v))))
}

/// Why the constrained modes refuse these extras, if they do: keys must be domain-prefixed
/// paths in lower case, values non-empty.
fn invalid_extra(extra: &BTreeMap<String, Vec<String>>) -> Option<String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Some("impersonating the empty string key in extra is not allowed".into());
        }
        if let Some(why) = domain_prefixed_path(key) {
            return Some(format!("impersonating an invalid key in extra is not allowed: {why}"));
        }
        if *key != key.to_lowercase() {
            return Some(format!("impersonating a non-lowercase key in extra is not allowed: {key:?}"));
        }
        if values.is_empty() {
            return Some("impersonating empty values in extra is not allowed".into());
        }
        if values.iter().any(String::is_empty) {
            return Some("impersonating the empty string value in extra is not allowed".into());
        }
    }
    None
}

/// apimachinery's `IsDomainPrefixedPath` for the field `extra.key`, as its aggregate prints.
fn domain_prefixed_path(key: &str) -> Option<String> {
    let invalid = |value: &str, why: &str| format!("extra.key: Invalid value: {}: {why}", serde_json::to_string(value).unwrap_or_default());
    let Some((host, path)) = key.split_once('/').filter(|(h, p)| !h.is_empty() && !p.is_empty()) else {
        return Some(invalid(key, "must be a domain-prefixed path (such as \"acme.io/foo\")"));
    };
    let mut errors: Vec<String> = names::dns1123_subdomain(host).iter().map(|why| invalid(host, why)).collect();
    let path_ok = path.chars().all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c));
    if !path_ok {
        errors.push(invalid(path, r"Invalid path (regex used for validation is '[A-Za-z0-9/\-._~%!$&'()*+,;=:]+')"));
    }
    match errors.len() {
        0 => None,
        1 => errors.pop(),
        _ => Some(format!("[{}]", errors.join(", "))),
    }
}

/// kube-apiserver's 403 for a check that failed, with the reason a mode gives, if any.
fn refusal(who: &Identity, a: &Attributes, reason: Option<&str>) -> ApiError {
    let suffix = reason.map(|r| format!(": {r}")).unwrap_or_default();
    match &a.path {
        Some(path) => ApiError::new(403, "Forbidden", format!("forbidden: User \"{}\" cannot {} path \"{path}\"{suffix}", who.user, a.verb)),
        None => ApiError::forbidden(&Subject { group: &a.group, resource: &a.resource, name: &a.name }, format!("{}{suffix}", crate::rbac::denial(who, a))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Grants(Vec<(&'static str, &'static str, &'static str)>);

    impl Authorizer for Grants {
        fn authorize(&self, _who: &Identity, a: &Attributes) -> Decision {
            let hit = self.0.iter().any(|(verb, resource, name)| a.verb == *verb && a.resource == *resource && (name.is_empty() || a.name == *name));
            if hit { Decision::Allow(String::new()) } else { Decision::Deny(String::new()) }
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn list_pods() -> Attributes {
        resource("list", "", "pods", "", "default", "")
    }

    #[test]
    fn a_classic_grant_impersonates_with_the_groups_asked_for() {
        let grants = Grants(vec![("impersonate", "users", "bob"), ("impersonate", "groups", "dev")]);
        let admin = Identity::user("admin", &[]);
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "dev"), ("Impersonate-Extra-Scopes%2Fa", "v1")]);
        let err = impersonate(&grants, &LastModes::default(), &admin, &h, &list_pods()).unwrap_err();
        assert!(err.message.contains("cannot impersonate-on:user-info:list resource \"pods\""), "an extra without its grant: {}", err.message);
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "dev")]);
        let bob = impersonate(&grants, &LastModes::default(), &admin, &h, &list_pods()).unwrap();
        assert_eq!((bob.user.as_str(), bob.groups.clone()), ("bob", vec!["dev".to_string(), "system:authenticated".to_string()]));
    }

    #[test]
    fn refusals_and_bad_requests_read_as_kube_apiservers() {
        let nobody = Grants(vec![]);
        let bob = Identity::user("bob", &[]);
        let h = headers(&[("Impersonate-User", "system:admin"), ("Impersonate-Group", "system:masters")]);
        let err = impersonate(&nobody, &LastModes::default(), &bob, &h, &list_pods()).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods is forbidden: User \"bob\" cannot impersonate-on:user-info:list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let h = headers(&[("Impersonate-User", "system:serviceaccount:ns1:sa1")]);
        assert!(impersonate(&nobody, &LastModes::default(), &bob, &h, &list_pods()).unwrap_err().message.contains("impersonate-on:serviceaccount:list"));
        let h = headers(&[("Impersonate-Group", "g1")]);
        let err = impersonate(&nobody, &LastModes::default(), &bob, &h, &list_pods()).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                400,
                "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string{\"g1\"}, Extra:map[string][]string(nil)} without impersonating a user name"
            )
        );
    }

    #[test]
    fn a_service_account_gets_its_groups_and_headers_are_taken() {
        let grants = Grants(vec![("impersonate", "serviceaccounts", "sa1")]);
        let admin = Identity::user("admin", &[]);
        let mut h = headers(&[("Impersonate-User", "system:serviceaccount:ns1:sa1"), ("Accept", "application/json")]);
        let taken = take_headers(&mut h).unwrap();
        assert_eq!(h.len(), 1, "only the impersonation headers are taken");
        let sa = impersonate(&grants, &LastModes::default(), &admin, &taken, &list_pods()).unwrap();
        assert_eq!(sa.groups, vec!["system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"]);
        assert!(take_headers(&mut h).is_none());
    }

    #[test]
    fn constrained_grants_impersonate_too_but_never_system_masters() {
        let grants =
            Grants(vec![("impersonate-on:user-info:list", "pods", ""), ("impersonate:user-info", "users", "bob"), ("impersonate:user-info", "groups", "")]);
        let admin = Identity::user("admin", &[]);
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "dev")]);
        assert_eq!(impersonate(&grants, &LastModes::default(), &admin, &h, &list_pods()).unwrap().user, "bob");
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")]);
        assert!(impersonate(&grants, &LastModes::default(), &admin, &h, &list_pods()).is_err());
    }

    #[test]
    fn the_mode_that_last_worked_for_a_caller_gives_its_refusal() {
        let grants = Grants(vec![("impersonate", "users", "bob")]);
        let last = LastModes::default();
        let sa = Identity::user("system:serviceaccount:ns1:imp", &[]);
        let carol = headers(&[("Impersonate-User", "carol")]);
        let before = impersonate(&grants, &last, &sa, &carol, &list_pods()).unwrap_err();
        assert!(before.message.contains("cannot impersonate-on:user-info:list resource \"pods\""), "{}", before.message);
        impersonate(&grants, &last, &sa, &headers(&[("Impersonate-User", "bob")]), &list_pods()).unwrap();
        let after = impersonate(&grants, &last, &sa, &carol, &list_pods()).unwrap_err();
        assert_eq!(
            after.message,
            "users \"carol\" is forbidden: User \"system:serviceaccount:ns1:imp\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        // Another caller has no history: the first constrained refusal again.
        let other = Identity::user("dave", &[]);
        assert!(impersonate(&grants, &last, &other, &carol, &list_pods()).unwrap_err().message.contains("impersonate-on:user-info:list"));
    }

    #[test]
    fn constrained_refusals_say_why_groups_and_extras_are_not_allowed() {
        let grants = Grants(vec![("impersonate-on:user-info:list", "pods", ""), ("impersonate:user-info", "users", "bob")]);
        let admin = Identity::user("admin", &[]);
        let err = impersonate(
            &grants,
            &LastModes::default(),
            &admin,
            &headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")]),
            &list_pods(),
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "groups.authentication.k8s.io \"system:masters\" is forbidden: User \"admin\" cannot impersonate:user-info resource \"groups\" in API group \"authentication.k8s.io\" at the cluster scope: impersonating the system:masters group is not allowed"
        );
        let err =
            impersonate(&grants, &LastModes::default(), &admin, &headers(&[("Impersonate-User", "bob"), ("Impersonate-Extra-Scopes", "a")]), &list_pods())
                .unwrap_err();
        assert!(
            err.message.ends_with(": impersonating an invalid key in extra is not allowed: extra.key: Invalid value: \"scopes\": must be a domain-prefixed path (such as \"acme.io/foo\")"),
            "{}",
            err.message
        );
    }

    #[test]
    fn nodes_are_impersonated_with_the_nodes_group() {
        let grants = Grants(vec![("impersonate-on:arbitrary-node:list", "pods", ""), ("impersonate:arbitrary-node", "nodes", "n1")]);
        let admin = Identity::user("admin", &[]);
        let node = impersonate(&grants, &LastModes::default(), &admin, &headers(&[("Impersonate-User", "system:node:n1")]), &list_pods()).unwrap();
        assert_eq!(node.groups, vec!["system:nodes", "system:authenticated"]);
        assert!(impersonate(&grants, &LastModes::default(), &admin, &headers(&[("Impersonate-User", "system:node:n2")]), &list_pods()).is_err());
    }
}
