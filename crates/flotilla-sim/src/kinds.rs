//! The kinds the simulator reads and writes: where each lives in the API (for writes) and in
//! the member's store (for reads).
//!
//! Store keys follow the API server's layout (`flotilla_apiserver::storage`):
//! `/registry/<group or "core">/<plural>/[<namespace>/]<name>`.

/// One resource: its API group, version and plural, and whether it is namespaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Res {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

const fn res(group: &'static str, version: &'static str, plural: &'static str, kind: &'static str, namespaced: bool) -> Res {
    Res { group, version, plural, kind, namespaced }
}

pub const PODS: Res = res("", "v1", "pods", "Pod", true);
pub const NODES: Res = res("", "v1", "nodes", "Node", false);
pub const NAMESPACES: Res = res("", "v1", "namespaces", "Namespace", false);
pub const SERVICES: Res = res("", "v1", "services", "Service", true);
pub const SERVICE_ACCOUNTS: Res = res("", "v1", "serviceaccounts", "ServiceAccount", true);
pub const EVENTS: Res = res("", "v1", "events", "Event", true);
pub const PVCS: Res = res("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true);
pub const LEASES: Res = res("coordination.k8s.io", "v1", "leases", "Lease", true);
pub const DEPLOYMENTS: Res = res("apps", "v1", "deployments", "Deployment", true);
pub const REPLICASETS: Res = res("apps", "v1", "replicasets", "ReplicaSet", true);
pub const STATEFULSETS: Res = res("apps", "v1", "statefulsets", "StatefulSet", true);
pub const DAEMONSETS: Res = res("apps", "v1", "daemonsets", "DaemonSet", true);
pub const CONTROLLER_REVISIONS: Res = res("apps", "v1", "controllerrevisions", "ControllerRevision", true);
pub const JOBS: Res = res("batch", "v1", "jobs", "Job", true);
pub const CRONJOBS: Res = res("batch", "v1", "cronjobs", "CronJob", true);
pub const ENDPOINT_SLICES: Res = res("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true);

/// Every kind the simulator follows in detail (other kinds it only garbage-collects).
pub const WATCHED: &[Res] =
    &[PODS, NODES, NAMESPACES, SERVICES, SERVICE_ACCOUNTS, DEPLOYMENTS, REPLICASETS, STATEFULSETS, DAEMONSETS, JOBS, CRONJOBS, ENDPOINT_SLICES];

impl Res {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The API path of a collection, an object or its subresource.
    pub fn path(&self, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>) -> String {
        let mut p = if self.group.is_empty() { format!("/api/{}", self.version) } else { format!("/apis/{}/{}", self.group, self.version) };
        if let (true, Some(ns)) = (self.namespaced, namespace) {
            p.push_str("/namespaces/");
            p.push_str(ns);
        }
        p.push('/');
        p.push_str(self.plural);
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
            if let Some(s) = sub {
                p.push('/');
                p.push_str(s);
            }
        }
        p
    }

    /// The store key of an object.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        let group = if self.group.is_empty() { "core" } else { self.group };
        if self.namespaced { format!("/registry/{group}/{}/{namespace}/{name}", self.plural) } else { format!("/registry/{group}/{}/{name}", self.plural) }
    }

    /// The kind an ownerReference names (by kind and API group).
    pub fn of_owner(api_version: &str, kind: &str) -> Option<Res> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        WATCHED.iter().chain([&LEASES, &CONTROLLER_REVISIONS, &PVCS]).find(|r| r.kind == kind && r.group == group).copied()
    }
}

/// Where a store key points: group (empty for core), plural, namespace (empty for cluster
/// scope) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyParts<'a> {
    pub group: &'a str,
    pub plural: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// Split a store key. Cluster-scoped kinds have three segments after `/registry/`,
/// namespaced ones four.
pub fn parse_key(key: &[u8]) -> Option<KeyParts<'_>> {
    let s = std::str::from_utf8(key).ok()?.strip_prefix("/registry/")?;
    let mut it = s.splitn(4, '/');
    let group = it.next()?;
    let plural = it.next()?;
    let a = it.next()?;
    let group = if group == "core" { "" } else { group };
    Some(match it.next() {
        Some(name) => KeyParts { group, plural, namespace: a, name },
        None => KeyParts { group, plural, namespace: "", name: a },
    })
}

/// The watched kind a key belongs to.
pub fn res_of(parts: &KeyParts<'_>) -> Option<Res> {
    WATCHED.iter().find(|r| r.group == parts.group && r.plural == parts.plural).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_keys() {
        assert_eq!(DEPLOYMENTS.path(Some("ns"), Some("web"), Some("status")), "/apis/apps/v1/namespaces/ns/deployments/web/status");
        assert_eq!(NODES.path(None, Some("n1"), None), "/api/v1/nodes/n1");
        assert_eq!(PODS.key("ns", "p"), "/registry/core/pods/ns/p");
        let k = parse_key(b"/registry/core/pods/ns/p").unwrap();
        assert_eq!((k.group, k.plural, k.namespace, k.name), ("", "pods", "ns", "p"));
        let k = parse_key(b"/registry/core/nodes/n1").unwrap();
        assert_eq!((k.namespace, k.name), ("", "n1"));
        assert_eq!(res_of(&k), Some(NODES));
        assert_eq!(Res::of_owner("apps/v1", "ReplicaSet"), Some(REPLICASETS));
    }
}
