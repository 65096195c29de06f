//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`): the `Impersonate-User`,
//! `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-<key>` headers, authorized and
//! applied as kube-apiserver v1.37's filter does, before the request itself is authorized as
//! the impersonated user.
//!
//! A caller may impersonate when either set of permissions allows it:
//! - the classic one: verb `impersonate` on `users` (or `serviceaccounts` in the account's
//!   namespace), `groups` (core group), `uids` and `userextras/<key>`
//!   (`authentication.k8s.io`);
//! - the constrained one (KEP-5284, on by default since v1.36): `impersonate-on:<mode>:<verb>` on
//!   what the request touches plus `impersonate:<mode>` on `users`/`serviceaccounts`, `groups`,
//!   `uids`, `userextras/<key>` in `authentication.k8s.io`, where the mode is `serviceaccount`
//!   for a service account and `user-info` otherwise; `system:masters` may not be impersonated
//!   this way.
//!
//! A refusal is kube-apiserver's: 403 naming the constrained check of the request
//! (`cannot impersonate-on:user-info:list resource "pods"`), the first one it tries. The
//! impersonated user gets `system:authenticated` (a service account with no groups named also
//! its `system:serviceaccounts` groups), and only the uid and extra asked for. The headers are
//! removed from the request, so nothing behind the API server (the cluster proxy) sees them.

use std::collections::BTreeMap;

use http::HeaderMap;

use crate::auth::{Attributes, Authorizer, Decision, Identity};
use crate::error::{ApiError, Subject};

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

/// The service account a username names (`system:serviceaccount:<ns>:<name>`).
fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
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

/// The identity `who` acts as for this request: itself when `headers` ask for nothing, the
/// impersonated user when allowed, or kube-apiserver's 400/403. `request` is what the request
/// itself touches (the constrained checks name it).
pub(crate) fn impersonate(authz: &dyn Authorizer, who: &Identity, headers: &HeaderMap, request: &Attributes) -> Result<Identity, ApiError> {
    let asked = Request::from_headers(headers);
    if asked.is_empty() {
        return Ok(who.clone());
    }
    let Some(user) = asked.user.clone().filter(|u| !u.is_empty()) else {
        return Err(ApiError::bad_request(format!("requested {} without impersonating a user name", asked.go_syntax())));
    };
    let allowed = |a: Attributes| matches!(authz.authorize(who, &a), Decision::Allow(_));
    let sa = service_account(&user);
    let classic = {
        let target = match sa {
            Some((ns, name)) => resource("impersonate", "", "serviceaccounts", "", ns, name),
            None => resource("impersonate", "", "users", "", "", &user),
        };
        allowed(target)
            && asked.groups.iter().all(|g| allowed(resource("impersonate", "", "groups", "", "", g)))
            && asked.uid.iter().all(|u| allowed(resource("impersonate", "authentication.k8s.io", "uids", "", "", u)))
            && asked.extra.iter().all(|(k, vs)| vs.iter().all(|v| allowed(resource("impersonate", "authentication.k8s.io", "userextras", k, "", v))))
    };
    let mode = if sa.is_some() { "serviceaccount" } else { "user-info" };
    let on_request = {
        let mut a = request.clone();
        a.verb = format!("impersonate-on:{mode}:{}", request.verb);
        a
    };
    let constrained = || {
        let verb = format!("impersonate:{mode}");
        let target = match sa {
            Some((ns, name)) => resource(&verb, "authentication.k8s.io", "serviceaccounts", "", ns, name),
            None => resource(&verb, "authentication.k8s.io", "users", "", "", &user),
        };
        // A service account is impersonated by its name alone in this mode.
        let only_name = sa.is_none() || (asked.groups.is_empty() && asked.uid.is_none() && asked.extra.is_empty());
        only_name
            && !asked.groups.iter().any(|g| g == "system:masters" || g.is_empty())
            && allowed(on_request.clone())
            && allowed(target)
            && asked.groups.iter().all(|g| allowed(resource(&verb, "authentication.k8s.io", "groups", "", "", g)))
            && asked.uid.iter().all(|u| allowed(resource(&verb, "authentication.k8s.io", "uids", "", "", u)))
            && asked.extra.iter().all(|(k, vs)| vs.iter().all(|v| allowed(resource(&verb, "authentication.k8s.io", "userextras", k, "", v))))
    };
    if !classic && !constrained() {
        return Err(refusal(who, &on_request));
    }
    let mut groups = asked.groups.clone();
    if let (Some((ns, _)), true) = (sa, groups.is_empty()) {
        groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")];
    }
    if user == "system:anonymous" {
        if !groups.iter().any(|g| g == "system:unauthenticated") {
            groups.push("system:unauthenticated".into());
        }
    } else if !groups.iter().any(|g| g == "system:authenticated" || g == "system:unauthenticated") {
        groups.push("system:authenticated".into());
    }
    Ok(Identity { user, uid: asked.uid.unwrap_or_default(), groups, extra: asked.extra })
}

/// kube-apiserver's 403 for the constrained check of the request itself.
fn refusal(who: &Identity, on_request: &Attributes) -> ApiError {
    match &on_request.path {
        Some(path) => ApiError::new(403, "Forbidden", format!("forbidden: User \"{}\" cannot {} path \"{path}\"", who.user, on_request.verb)),
        None => ApiError::forbidden(
            &Subject { group: &on_request.group, resource: &on_request.resource, name: &on_request.name },
            crate::rbac::denial(who, on_request),
        ),
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
        let err = impersonate(&grants, &admin, &h, &list_pods()).unwrap_err();
        assert!(err.message.contains("cannot impersonate-on:user-info:list resource \"pods\""), "an extra without its grant: {}", err.message);
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "dev")]);
        let bob = impersonate(&grants, &admin, &h, &list_pods()).unwrap();
        assert_eq!((bob.user.as_str(), bob.groups.clone()), ("bob", vec!["dev".to_string(), "system:authenticated".to_string()]));
    }

    #[test]
    fn refusals_and_bad_requests_read_as_kube_apiservers() {
        let nobody = Grants(vec![]);
        let bob = Identity::user("bob", &[]);
        let h = headers(&[("Impersonate-User", "system:admin"), ("Impersonate-Group", "system:masters")]);
        let err = impersonate(&nobody, &bob, &h, &list_pods()).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(err.message, "pods is forbidden: User \"bob\" cannot impersonate-on:user-info:list resource \"pods\" in API group \"\" in the namespace \"default\"");
        let h = headers(&[("Impersonate-User", "system:serviceaccount:ns1:sa1")]);
        assert!(impersonate(&nobody, &bob, &h, &list_pods()).unwrap_err().message.contains("impersonate-on:serviceaccount:list"));
        let h = headers(&[("Impersonate-Group", "g1")]);
        let err = impersonate(&nobody, &bob, &h, &list_pods()).unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (400, "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string{\"g1\"}, Extra:map[string][]string(nil)} without impersonating a user name"));
    }

    #[test]
    fn a_service_account_gets_its_groups_and_headers_are_taken() {
        let grants = Grants(vec![("impersonate", "serviceaccounts", "sa1")]);
        let admin = Identity::user("admin", &[]);
        let mut h = headers(&[("Impersonate-User", "system:serviceaccount:ns1:sa1"), ("Accept", "application/json")]);
        let taken = take_headers(&mut h).unwrap();
        assert_eq!(h.len(), 1, "only the impersonation headers are taken");
        let sa = impersonate(&grants, &admin, &taken, &list_pods()).unwrap();
        assert_eq!(sa.groups, vec!["system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"]);
        assert!(take_headers(&mut h).is_none());
    }

    #[test]
    fn constrained_grants_impersonate_too_but_never_system_masters() {
        let grants = Grants(vec![("impersonate-on:user-info:list", "pods", ""), ("impersonate:user-info", "users", "bob"), ("impersonate:user-info", "groups", "")]);
        let admin = Identity::user("admin", &[]);
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "dev")]);
        assert_eq!(impersonate(&grants, &admin, &h, &list_pods()).unwrap().user, "bob");
        let h = headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "system:masters")]);
        assert!(impersonate(&grants, &admin, &h, &list_pods()).is_err());
    }
}
