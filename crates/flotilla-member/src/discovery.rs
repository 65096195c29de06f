//! Per-member discovery: which resource serves a kind, and what the member enables.
//!
//! Resolutions are cached per group-version-kind. A miss asks the member for that one
//! group-version (`/apis/<group>/<version>`), so a CRD installed in the member after start-up is
//! found on first use; a kind the member does not serve is remembered for `negative_ttl` so a
//! Work for it does not hammer the member.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use parking_lot::Mutex;

/// How a kind is served by a member.
#[derive(Clone, Debug)]
pub struct Served {
    pub resource: ApiResource,
    pub namespaced: bool,
}

#[derive(Clone)]
enum Entry {
    Found(Served),
    Missing(Instant),
}

/// A member's discovery cache.
pub struct MemberDiscovery {
    cache: Mutex<HashMap<GroupVersionKind, Entry>>,
    negative_ttl: Duration,
}

impl std::fmt::Debug for MemberDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberDiscovery").field("cached", &self.cache.lock().len()).finish()
    }
}

impl Default for MemberDiscovery {
    fn default() -> Self {
        MemberDiscovery::new(Duration::from_secs(10))
    }
}

impl MemberDiscovery {
    pub fn new(negative_ttl: Duration) -> MemberDiscovery {
        MemberDiscovery { cache: Mutex::new(HashMap::new()), negative_ttl }
    }

    /// The resource serving `gvk` in the member, or `None` when the member does not serve it.
    pub async fn resolve(&self, client: &kube::Client, gvk: &GroupVersionKind) -> Result<Option<Served>, kube::Error> {
        self.lookup(client, gvk, true).await
    }

    /// As [`Self::resolve`], but "not served" is always asked of the member, never taken from the
    /// cache: for decisions that would be wrong on a stale answer (a deletion concluding that
    /// the object cannot exist).
    pub async fn resolve_confirmed(&self, client: &kube::Client, gvk: &GroupVersionKind) -> Result<Option<Served>, kube::Error> {
        self.lookup(client, gvk, false).await
    }

    async fn lookup(&self, client: &kube::Client, gvk: &GroupVersionKind, trust_missing: bool) -> Result<Option<Served>, kube::Error> {
        if let Some(entry) = self.cache.lock().get(gvk).cloned() {
            match entry {
                Entry::Found(s) => return Ok(Some(s)),
                Entry::Missing(at) if trust_missing && at.elapsed() < self.negative_ttl => return Ok(None),
                Entry::Missing(_) => {}
            }
        }
        let found = match kube::discovery::oneshot::pinned_kind(client, gvk).await {
            Ok((resource, caps)) => Some(Served { resource, namespaced: matches!(caps.scope, Scope::Namespaced) }),
            Err(kube::Error::Api(e)) if e.code == 404 => None,
            Err(kube::Error::Discovery(_)) => None,
            Err(e) => return Err(e),
        };
        let entry = match &found {
            Some(s) => Entry::Found(s.clone()),
            None => Entry::Missing(Instant::now()),
        };
        self.cache.lock().insert(gvk.clone(), entry);
        Ok(found)
    }

    /// Forget everything (a member's API changed, e.g. a CRD was removed).
    pub fn invalidate(&self) {
        self.cache.lock().clear();
    }
}

/// One group-version the member serves and its kinds, as `Cluster.status.apiEnablements` lists
/// them (`{groupVersion, resources: [{name, kind}]}`), sorted by group-version then resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiEnablement {
    pub group_version: String,
    pub resources: Vec<(String, String)>,
}

/// Everything the member serves (top-level resources only, no subresources).
pub async fn api_enablements(client: &kube::Client) -> Result<Vec<ApiEnablement>, kube::Error> {
    // Aggregated discovery is one request per root; members older than 1.26 need the walk.
    let discovery = match kube::Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(_) => kube::Discovery::new(client.clone()).run().await?,
    };
    let mut by_gv: std::collections::BTreeMap<String, Vec<(String, String)>> = Default::default();
    for group in discovery.groups() {
        for version in group.versions() {
            for (ar, _caps) in group.versioned_resources(version) {
                if ar.plural.contains('/') {
                    continue;
                }
                let gv = if ar.group.is_empty() { ar.version.clone() } else { format!("{}/{}", ar.group, ar.version) };
                by_gv.entry(gv).or_default().push((ar.plural.clone(), ar.kind.clone()));
            }
        }
    }
    Ok(by_gv
        .into_iter()
        .map(|(group_version, mut resources)| {
            resources.sort();
            resources.dedup();
            ApiEnablement { group_version, resources }
        })
        .collect())
}

/// A resource (or `resource/subresource`) a member serves, with the verbs discovery lists for
/// it, over every version of its group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedResource {
    pub group: String,
    pub name: String,
    pub verbs: Vec<String>,
}

/// Every resource and subresource the member serves (the raw discovery lists, every version of
/// every group). A group-version that cannot be listed (an aggregated API that is down) is left
/// out rather than failing the whole answer.
pub async fn served_resources(client: &kube::Client) -> Result<Vec<ServedResource>, kube::Error> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut found: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut add = |group: &str, list: k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList| {
        for r in list.resources {
            found.entry((group.to_string(), r.name)).or_default().extend(r.verbs);
        }
    };
    for version in client.list_core_api_versions().await?.versions {
        add("", client.list_core_api_resources(&version).await?);
    }
    for group in client.list_api_groups().await?.groups {
        for version in &group.versions {
            match client.list_api_group_resources(&version.group_version).await {
                Ok(list) => add(&group.name, list),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 503 => {
                    tracing::warn!(group_version = %version.group_version, "the member cannot list this group-version: left out");
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(found.into_iter().map(|((group, name), verbs)| ServedResource { group, name, verbs: verbs.into_iter().collect() }).collect())
}
