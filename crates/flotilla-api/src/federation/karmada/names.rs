//! Karmada's naming schemes for the objects it derives from a resource template.
//!
//! - Binding: lowercase `<name>-<kind>`, `:` replaced by `.` (`nginx-deployment`).
//! - Work: lowercase `<name>-<suffix>`, the suffix being Kubernetes' `SafeEncodeString` of the
//!   decimal FNV-32a hash of lowercase `<namespace>-<name>-<kind>` (`<name>-<kind>` for
//!   cluster-scoped templates): default/nginx/Deployment → `nginx-687f7fb96f`, the same name in
//!   every execution space.
//! - Execution space: `karmada-es-<cluster>`, the namespace holding a cluster's Works.
//! - Policy made for one object (`karmadactl promote`, `karmadactl apply`): lowercase
//!   `<name>-<suffix>`, `:` replaced by `.`, the suffix being `SafeEncodeString` of the decimal
//!   FNV-32a hash of `<namespace><group>/<version>, Kind=<kind>` (Go's `GroupVersionKind.String()`
//!   after the namespace, empty for cluster-scoped objects).

use super::work::EXECUTION_SPACE_PREFIX;

/// The ResourceBinding (or ClusterResourceBinding) name of a template.
pub fn binding_name(kind: &str, name: &str) -> String {
    format!("{name}-{kind}").to_lowercase().replace(':', ".")
}

/// The Work name of a template (the same in every execution space).
pub fn work_name(kind: &str, name: &str, namespace: Option<&str>) -> String {
    let key = match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}-{name}-{kind}"),
        None => format!("{name}-{kind}"),
    };
    let hash = fnv32a(key.to_lowercase().as_bytes());
    format!("{}-{}", name.to_lowercase(), safe_encode(&hash.to_string())).replace(':', ".")
}

/// Karmada's `GenerateBindingReferenceKey`: the encoded FNV-32a hash of `<namespace>/<name>`
/// (`<name>` when cluster-scoped) — the suffix of an attached binding's `depended-by-` label.
pub fn binding_reference_key(namespace: Option<&str>, name: &str) -> String {
    let key = match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    safe_encode(&fnv32a(key.as_bytes()).to_string())
}

/// Karmada's `GeneratePolicyName`: the name of the (Cluster)PropagationPolicy made for one
/// object, `namespace` empty for a cluster-scoped one; `api_version` is `group/version` (`v1` for
/// the core group).
pub fn policy_name(namespace: &str, name: &str, api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    policy_name_of_key(name, &format!("{namespace}{group}/{version}, Kind={kind}"))
}

/// `GeneratePolicyName` on the key it hashes (Karmada's `DeepHashObject` of a string hashes its
/// bytes as they are).
fn policy_name_of_key(name: &str, key: &str) -> String {
    format!("{}-{}", name.replace(':', "."), safe_encode(&fnv32a(key.as_bytes()).to_string())).to_lowercase()
}

/// The execution space of `cluster`.
pub fn execution_space(cluster: &str) -> String {
    format!("{EXECUTION_SPACE_PREFIX}{cluster}")
}

/// The cluster an execution space belongs to.
pub fn cluster_of_execution_space(namespace: &str) -> Option<&str> {
    namespace.strip_prefix(EXECUTION_SPACE_PREFIX)
}

/// 32-bit FNV-1a.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// Kubernetes' `rand.SafeEncodeString`: each byte mapped onto an alphabet without vowels or
/// look-alike characters, so the result never spells words.
pub fn safe_encode(s: &str) -> String {
    const ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes().map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_spaces_round_trip() {
        assert_eq!(execution_space("m1"), "karmada-es-m1");
        assert_eq!(cluster_of_execution_space("karmada-es-m1"), Some("m1"));
        assert_eq!(cluster_of_execution_space("default"), None);
    }

    #[test]
    fn names_match_karmada() {
        assert_eq!(binding_name("Deployment", "nginx"), "nginx-deployment");
        assert_eq!(work_name("Deployment", "nginx", Some("default")), "nginx-687f7fb96f");
        assert_eq!(binding_name("ClusterRole", "system:aggregate"), "system.aggregate-clusterrole");
        // Case does not change the hash: Karmada lowercases the key first.
        assert_eq!(work_name("deployment", "NGINX", Some("Default")), "nginx-687f7fb96f");
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        // Karmada's dependencies-distributor test: binding test/test-binding.
        assert_eq!(binding_reference_key(Some("test"), "test-binding"), "5dbb6dc9c8");
    }

    #[test]
    fn policy_names_match_karmada() {
        // Karmada's TestGeneratePolicyName: namespace `ns-foo`, gvk string `rand`.
        assert_eq!(policy_name_of_key("foo", "ns-foorand"), "foo-b4978784");
        assert_eq!(policy_name_of_key("system:foo", "ns-foorand"), "system.foo-b4978784");
        // The key is Go's GroupVersionKind.String() after the namespace.
        assert_eq!(policy_name("default", "nginx", "apps/v1", "Deployment"), policy_name_of_key("nginx", "defaultapps/v1, Kind=Deployment"));
        assert_eq!(policy_name("", "shop", "v1", "Namespace"), policy_name_of_key("shop", "/v1, Kind=Namespace"));
        assert_eq!(
            policy_name("", "Edge:Admin", "rbac.authorization.k8s.io/v1", "ClusterRole"),
            policy_name_of_key("edge.admin", "rbac.authorization.k8s.io/v1, Kind=ClusterRole")
        );
    }
}
