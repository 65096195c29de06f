//! Which type `kubefedctl enable NAME` (here `flotilla enable`) means: NAME is matched against
//! the discovered resources' plural, singular, kind (any case), short names and
//! `plural.group`. A name that matches resources of several groups is ambiguous unless exactly
//! one of them is in the core group, which then wins; no match is an error naming the input.
//! Pure: the caller does the discovery.

use super::core::{ResourceScope, TargetType};

/// One resource as discovery lists it (`APIResourceList` entry with its group/version).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiscoveredResource {
    /// API group; empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Singular resource name (may be empty in discovery).
    pub singular: String,
    /// Short names.
    pub short_names: Vec<String>,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
}

impl DiscoveredResource {
    /// `plural[.group]`, the name of its FederatedTypeConfig.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    fn matches(&self, name: &str) -> bool {
        let name = name.to_lowercase();
        name == self.plural
            || (!self.singular.is_empty() && name == self.singular)
            || name == self.kind.to_lowercase()
            || name == self.qualified_name()
            || self.short_names.iter().any(|s| s.to_lowercase() == name)
    }

    /// The FederatedTypeConfig target type.
    pub fn target_type(&self) -> TargetType {
        TargetType {
            group: (!self.group.is_empty()).then(|| self.group.clone()),
            version: self.version.clone(),
            kind: self.kind.clone(),
            plural_name: self.plural.clone(),
            scope: if self.namespaced { ResourceScope::Namespaced } else { ResourceScope::Cluster },
        }
    }
}

/// Why a name could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Nothing served matches.
    #[error("no API resource named {name:?} is served{version}; see `kubectl api-resources`", version = .version.as_deref().map(|v| format!(" at version {v}")).unwrap_or_default())]
    NotFound {
        /// The name given.
        name: String,
        /// The pinned version, if any.
        version: Option<String>,
    },
    /// Several groups serve a match.
    #[error("{name:?} matches several resources: {}; give a group-qualified plural name (plural.group)", .candidates.join(", "))]
    Ambiguous {
        /// The name given.
        name: String,
        /// `plural.group` of each match.
        candidates: Vec<String>,
    },
}

/// The resource NAME means among `resources` (one entry per served group/version; the caller
/// passes each group's preferred version, or only `version` when it is pinned).
pub fn resolve<'a>(name: &str, resources: &'a [DiscoveredResource], version: Option<&str>) -> Result<&'a DiscoveredResource, ResolveError> {
    let mut matches: Vec<&DiscoveredResource> =
        resources.iter().filter(|r| !r.plural.contains('/')).filter(|r| version.is_none_or(|v| r.version == v)).filter(|r| r.matches(name)).collect();
    // The same resource at several versions is one match.
    matches.dedup_by(|a, b| a.group == b.group && a.plural == b.plural);
    match matches.as_slice() {
        [] => Err(ResolveError::NotFound { name: name.to_string(), version: version.map(str::to_string) }),
        [one] => Ok(one),
        several => {
            let core: Vec<&&DiscoveredResource> = several.iter().filter(|r| r.group.is_empty()).collect();
            if let [one] = core.as_slice() {
                return Ok(one);
            }
            let mut candidates: Vec<String> = several.iter().map(|r| r.qualified_name()).collect();
            candidates.sort();
            candidates.dedup();
            Err(ResolveError::Ambiguous { name: name.to_string(), candidates })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, version: &str, kind: &str, plural: &str, short: &[&str]) -> DiscoveredResource {
        DiscoveredResource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            namespaced: true,
        }
    }

    fn served() -> Vec<DiscoveredResource> {
        vec![
            res("", "v1", "Event", "events", &["ev"]),
            res("", "v1", "Pod", "pods", &["po"]),
            res("", "v1", "Pod", "pods/status", &[]),
            res("apps", "v1", "Deployment", "deployments", &["deploy"]),
            res("events.k8s.io", "v1", "Event", "events", &["ev"]),
            res("networking.istio.io", "v1", "VirtualService", "virtualservices", &["vs"]),
            res("example.com", "v1", "Widget", "widgets", &[]),
            res("other.example.com", "v1", "Widget", "widgets", &[]),
        ]
    }

    #[test]
    fn every_spelling_of_a_name_resolves() {
        let served = served();
        for name in ["deployments", "deployment", "Deployment", "deploy", "deployments.apps", "DEPLOY"] {
            assert_eq!(resolve(name, &served, None).unwrap().qualified_name(), "deployments.apps", "{name}");
        }
        for name in ["VirtualService", "virtualservices", "vs", "virtualservices.networking.istio.io"] {
            assert_eq!(resolve(name, &served, None).unwrap().kind, "VirtualService", "{name}");
        }
    }

    #[test]
    fn core_wins_and_other_ambiguities_are_errors() {
        let served = served();
        assert_eq!(resolve("events", &served, None).unwrap().group, "");
        assert_eq!(resolve("events.events.k8s.io", &served, None).unwrap().group, "events.k8s.io");
        let err = resolve("widget", &served, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"widget\" matches several resources: widgets.example.com, widgets.other.example.com; give a group-qualified plural name (plural.group)"
        );
        assert_eq!(resolve("widgets.example.com", &served, None).unwrap().group, "example.com");
    }

    #[test]
    fn unknown_names_and_subresources_are_not_found() {
        let served = served();
        let err = resolve("gizmo", &served, None).unwrap_err();
        assert_eq!(err.to_string(), "no API resource named \"gizmo\" is served; see `kubectl api-resources`");
        assert!(resolve("pods/status", &served, None).is_err());
        let err = resolve("deploy", &served, Some("v1beta1")).unwrap_err();
        assert!(err.to_string().contains("at version v1beta1"), "{err}");
    }

    #[test]
    fn target_type_carries_group_and_scope() {
        let mut r = res("", "v1", "Namespace", "namespaces", &["ns"]);
        r.namespaced = false;
        let t = r.target_type();
        assert_eq!(t.group, None);
        assert_eq!(t.scope, ResourceScope::Cluster);
        assert_eq!(res("apps", "v1", "Deployment", "deployments", &[]).target_type().group.as_deref(), Some("apps"));
    }
}
