//! KubeFed's sync rules as pure functions: a `Federated<Kind>`'s placement as a Karmada cluster
//! affinity, its per-cluster member object (template, forced identity, JSON-patch overrides,
//! the managed label), the binding spec that carries it through the one engine, and the
//! per-cluster status KubeFed reports.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaLabelSelector, LabelSelectorRequirement, ObjectMeta};
use serde_json::{Value, json};

use crate::federation::karmada::cluster::Cluster;
use crate::federation::karmada::policy::{
    ClusterAffinity, ConflictResolution, DEFAULT_SCHEDULER_NAME, Placement, ReplicaSchedulingStrategy, ReplicaSchedulingType,
};
use crate::federation::karmada::work::{ObjectReference, ResourceBindingSpec};
use crate::federation::kubefed::types::{ClusterOverrides, FederatedPlacement, FederatedSpec, MANAGED_LABEL, ORPHAN_ANNOTATION};
use crate::selector::LabelSelector;

/// Karmada's label for bindings made by something other than a propagation policy; the
/// scheduler takes bindings carrying it.
pub const MANAGED_BY_LABEL: &str = "binding.karmada.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`] on the bindings of `Federated<Kind>` objects.
pub const MANAGED_BY: &str = "kubefed-sync-controller";
/// The target kind's apiVersion, on the binding (a federated object does not name it).
pub const TARGET_API_VERSION_ANNOTATION: &str = "kubefed.flotilla.io/target-api-version";
/// The target kind, on the binding.
pub const TARGET_KIND_ANNOTATION: &str = "kubefed.flotilla.io/target-kind";
/// `Namespaced` or `Cluster`: the target kind's scope, on the binding.
pub const TARGET_SCOPE_ANNOTATION: &str = "kubefed.flotilla.io/target-scope";
/// A label no cluster can carry both with and without: the selector of an empty placement.
const NO_CLUSTER_KEY: &str = "kubefed.flotilla.io/no-placement";

/// Paths KubeFed never lets an override touch.
pub const FORBIDDEN_PATHS: [&str; 4] = ["/metadata/namespace", "/metadata/name", "/metadata/generateName", "/kind"];

/// The kind a federated type propagates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub api_version: String,
    pub kind: String,
    pub namespaced: bool,
}

impl Target {
    /// The target named on a binding this controller wrote; `None` for any other binding.
    pub fn of_binding(meta: &ObjectMeta) -> Option<Target> {
        if meta.labels.as_ref()?.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY) {
            return None;
        }
        let a = meta.annotations.as_ref()?;
        Some(Target {
            api_version: a.get(TARGET_API_VERSION_ANNOTATION)?.clone(),
            kind: a.get(TARGET_KIND_ANNOTATION)?.clone(),
            namespaced: a.get(TARGET_SCOPE_ANNOTATION).map(String::as_str) != Some("Cluster"),
        })
    }

    pub fn annotations(&self) -> [(&'static str, String); 3] {
        [
            (TARGET_API_VERSION_ANNOTATION, self.api_version.clone()),
            (TARGET_KIND_ANNOTATION, self.kind.clone()),
            (TARGET_SCOPE_ANNOTATION, if self.namespaced { "Namespaced" } else { "Cluster" }.into()),
        ]
    }
}

/// Why a cluster's member object could not be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    #[error("cluster {cluster} appears more than once in spec.overrides")]
    DuplicateCluster { cluster: String },
    #[error("path {path} is overridden more than once for cluster {cluster}")]
    DuplicatePath { cluster: String, path: String },
    #[error("path {path} may not be overridden")]
    ForbiddenPath { path: String },
    #[error("op {op:?} of path {path} is not add, remove or replace")]
    BadOp { path: String, op: String },
    #[error("applying the overrides of cluster {cluster}: {message}")]
    Apply { cluster: String, message: String },
    #[error("spec.template is not an object")]
    Template,
}

/// Which clusters a KubeFed placement selects, as KubeFed's table says:
/// `clusters` present and non-empty → exactly those names (the selector is ignored);
/// `clusters: []` → none; `clusters` absent and `clusterSelector: {}` → every cluster;
/// `clusters` absent and a non-empty selector → the clusters whose labels match;
/// both absent (or no placement at all) → none.
#[derive(Clone, Debug, PartialEq)]
pub enum Selection {
    None,
    Named(Vec<String>),
    Selector(MetaLabelSelector),
    /// The named clusters that also match the selector (an [`intersection`]).
    Both(Vec<String>, MetaLabelSelector),
}

/// The clusters both selections select: KubeFed's rule that a namespaced federated object
/// reaches only the clusters its FederatedNamespace places the namespace in.
pub fn intersection(a: Selection, b: Selection) -> Selection {
    let parts = |s: Selection| match s {
        Selection::None => None,
        Selection::Named(n) => Some((Some(n), None)),
        Selection::Selector(sel) => Some((None, Some(sel))),
        Selection::Both(n, sel) => Some((Some(n), Some(sel))),
    };
    let (Some((names_a, sel_a)), Some((names_b, sel_b))) = (parts(a), parts(b)) else { return Selection::None };
    let names = match (names_a, names_b) {
        (Some(a), Some(b)) => Some(a.into_iter().filter(|n| b.contains(n)).collect::<Vec<_>>()),
        (a, b) => a.or(b),
    };
    let selector = match (sel_a, sel_b) {
        (Some(a), Some(b)) => Some(both_selectors(a, b)),
        (a, b) => a.or(b),
    };
    match (names, selector) {
        (Some(n), _) if n.is_empty() => Selection::None,
        (Some(n), Some(sel)) => Selection::Both(n, sel),
        (Some(n), None) => Selection::Named(n),
        (None, Some(sel)) => Selection::Selector(sel),
        (None, None) => Selection::None,
    }
}

/// One selector requiring what both require: `a`'s labels, and every expression of both with
/// `b`'s labels as `In` expressions (so two values for one key match nothing, as they should).
fn both_selectors(a: MetaLabelSelector, b: MetaLabelSelector) -> MetaLabelSelector {
    let mut expressions = a.match_expressions.unwrap_or_default();
    expressions.extend(b.match_expressions.unwrap_or_default());
    for (key, value) in b.match_labels.unwrap_or_default() {
        expressions.push(LabelSelectorRequirement { key, operator: "In".into(), values: Some(vec![value]) });
    }
    MetaLabelSelector { match_labels: a.match_labels, match_expressions: (!expressions.is_empty()).then_some(expressions) }
}

pub fn selection(placement: Option<&FederatedPlacement>) -> Selection {
    let Some(p) = placement else { return Selection::None };
    match (&p.clusters, &p.cluster_selector) {
        (Some(names), _) if names.is_empty() => Selection::None,
        (Some(names), _) => {
            let mut seen = BTreeSet::new();
            Selection::Named(names.iter().filter(|c| seen.insert(c.name.clone())).map(|c| c.name.clone()).collect())
        }
        (None, Some(selector)) => Selection::Selector(selector.clone()),
        (None, None) => Selection::None,
    }
}

/// The Karmada cluster affinity of a KubeFed placement. Names of clusters that do not exist
/// select nothing (KubeFed intersects with the joined clusters; the scheduler never finds them).
/// The empty placement is a selector no cluster satisfies, because an affinity without
/// restrictions means "every cluster" to Karmada.
pub fn cluster_affinity(placement: Option<&FederatedPlacement>) -> ClusterAffinity {
    affinity(selection(placement))
}

/// The Karmada cluster affinity of a selection (every field of an affinity has to hold).
pub fn affinity(selection: Selection) -> ClusterAffinity {
    match selection {
        Selection::Named(names) => ClusterAffinity { cluster_names: Some(names), ..Default::default() },
        Selection::Selector(selector) => ClusterAffinity { label_selector: Some(selector), ..Default::default() },
        Selection::Both(names, selector) => ClusterAffinity { cluster_names: Some(names), label_selector: Some(selector), ..Default::default() },
        Selection::None => {
            let req = |operator: &str| LabelSelectorRequirement { key: NO_CLUSTER_KEY.into(), operator: operator.into(), values: None };
            ClusterAffinity {
                label_selector: Some(MetaLabelSelector { match_labels: None, match_expressions: Some(vec![req("Exists"), req("DoesNotExist")]) }),
                ..Default::default()
            }
        }
    }
}

/// The names a placement lists that are not among `known` (in the placement's order).
pub fn unknown_clusters(selection: &Selection, known: &[String]) -> Vec<String> {
    match selection {
        Selection::Named(names) | Selection::Both(names, _) => names.iter().filter(|n| !known.contains(n)).cloned().collect(),
        Selection::None | Selection::Selector(_) => Vec::new(),
    }
}

/// Whether the placement selects `cluster` (by name or labels; readiness aside).
pub fn selects(selection: &Selection, cluster: &Cluster) -> bool {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    match selection {
        Selection::None => false,
        Selection::Named(names) => names.iter().any(|n| n == name),
        Selection::Selector(selector) => selector_matches(selector, cluster),
        Selection::Both(names, selector) => names.iter().any(|n| n == name) && selector_matches(selector, cluster),
    }
}

fn selector_matches(selector: &MetaLabelSelector, cluster: &Cluster) -> bool {
    let parsed = serde_json::to_value(selector).ok().and_then(|v| LabelSelector::from_json(&v).ok());
    parsed.is_some_and(|s| s.matches(cluster.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
}

/// KubeFed's whole-set checks: a cluster named twice, or a path twice for one cluster,
/// invalidates every override.
pub fn validate_overrides(overrides: &[ClusterOverrides]) -> Result<(), OverrideError> {
    let mut clusters = BTreeSet::new();
    for o in overrides {
        let cluster = o.cluster_name.clone().unwrap_or_default();
        if !clusters.insert(cluster.clone()) {
            return Err(OverrideError::DuplicateCluster { cluster });
        }
        let mut paths = BTreeSet::new();
        for op in o.cluster_overrides.iter().flatten() {
            if !paths.insert(op.path.as_str()) {
                return Err(OverrideError::DuplicatePath { cluster, path: op.path.clone() });
            }
        }
    }
    Ok(())
}

/// Apply `cluster`'s overrides to `obj` as one JSON patch (`op` empty means replace).
pub fn apply_overrides(obj: &Value, overrides: &[ClusterOverrides], cluster: &str) -> Result<Value, OverrideError> {
    validate_overrides(overrides)?;
    let Some(mine) = overrides.iter().find(|o| o.cluster_name.as_deref() == Some(cluster)) else {
        return Ok(obj.clone());
    };
    let mut ops = Vec::new();
    for o in mine.cluster_overrides.iter().flatten() {
        if FORBIDDEN_PATHS.contains(&o.path.as_str()) {
            return Err(OverrideError::ForbiddenPath { path: o.path.clone() });
        }
        let op = match o.op.as_deref().unwrap_or("") {
            "" | "replace" => "replace",
            "add" => "add",
            "remove" => "remove",
            other => return Err(OverrideError::BadOp { path: o.path.clone(), op: other.into() }),
        };
        let mut patch = json!({"op": op, "path": o.path});
        if op != "remove" {
            patch["value"] = o.value.clone().unwrap_or(Value::Null);
        }
        ops.push(patch);
    }
    let patched = crate::patch::json_patch(obj, &Value::Array(ops)).map_err(|e| OverrideError::Apply { cluster: cluster.into(), message: e.to_string() })?;
    // Whatever path reached them (`/metadata`, the root), the object stays where it was.
    let placement = |v: &Value| (v.pointer("/metadata/namespace").cloned(), v.pointer("/metadata/name").cloned());
    if placement(&patched) != placement(obj) {
        return Err(OverrideError::Apply { cluster: cluster.into(), message: "an override may not change the object's namespace or name".into() });
    }
    Ok(patched)
}

/// The spec of a federated object (`spec` may be absent on a hand-made object).
pub fn federated_spec(federated: &Value) -> Result<FederatedSpec, String> {
    match federated.get("spec") {
        None | Some(Value::Null) => Ok(FederatedSpec::default()),
        Some(spec) => serde_json::from_value(spec.clone()).map_err(|e| format!("spec: {e}")),
    }
}

/// The template as KubeFed sends it before overrides: `kind` forced from the type,
/// `apiVersion` defaulted, name (and namespace, for a namespaced target) forced from the
/// federated object, template annotations and finalizers dropped (members own them).
pub fn base_object(federated: &Value, spec: &FederatedSpec, target: &Target) -> Result<Value, OverrideError> {
    let mut obj = spec.template.clone().unwrap_or_else(|| json!({}));
    let Some(map) = obj.as_object_mut() else { return Err(OverrideError::Template) };
    map.insert("kind".into(), json!(target.kind));
    if map.get("apiVersion").is_none_or(|v| v.as_str().is_none_or(str::is_empty)) {
        map.insert("apiVersion".into(), json!(target.api_version));
    }
    map.remove("status");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let meta = meta.as_object_mut().expect("an object");
    meta.remove("annotations");
    meta.remove("finalizers");
    meta.insert("name".into(), federated.pointer("/metadata/name").cloned().unwrap_or(Value::Null));
    match federated.pointer("/metadata/namespace").filter(|_| target.namespaced) {
        Some(ns) => meta.insert("namespace".into(), ns.clone()),
        None => meta.remove("namespace"),
    };
    Ok(obj)
}

/// What a template drops that the user may not expect (KubeFed's Warning event reasons).
pub fn dropped_template_fields(spec: &FederatedSpec) -> Vec<&'static str> {
    let meta = spec.template.as_ref().and_then(|t| t.get("metadata"));
    let has = |k: &str| {
        meta.and_then(|m| m.get(k)).is_some_and(|v| v.as_object().map_or(!v.is_null(), |o| !o.is_empty()) && v.as_array().is_none_or(|a| !a.is_empty()))
    };
    let mut out = Vec::new();
    if has("annotations") {
        out.push("AnnotationsNotSupported");
    }
    if has("finalizers") {
        out.push("FinalizersNotSupported");
    }
    out
}

/// The member object for `cluster`: template → overrides → `kubefed.io/managed: "true"`. The
/// federated object's generation rides along so the Work records which generation it carries.
pub fn member_object(federated: &Value, spec: &FederatedSpec, target: &Target, cluster: &str) -> Result<Value, OverrideError> {
    let base = base_object(federated, spec, target)?;
    let mut obj = apply_overrides(&base, spec.overrides.as_deref().unwrap_or_default(), cluster)?;
    let meta = obj.as_object_mut().and_then(|m| m.get_mut("metadata")).and_then(Value::as_object_mut);
    let Some(meta) = meta else {
        return Err(OverrideError::Apply { cluster: cluster.into(), message: "the overrides removed metadata".into() });
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    labels.as_object_mut().expect("an object").insert(MANAGED_LABEL.into(), json!("true"));
    if let Some(g) = federated.pointer("/metadata/generation") {
        meta.insert("generation".into(), g.clone());
    }
    Ok(obj)
}

/// The binding controller's hook: for a binding of a federated object, the object `cluster`
/// gets, rendered from the federated object; `None` for every other binding.
pub fn member_object_for_binding(binding: &ObjectMeta, federated: &Value, cluster: &str) -> Option<Result<Value, String>> {
    let target = Target::of_binding(binding)?;
    let spec = match federated_spec(federated) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    Some(member_object(federated, &spec, &target, cluster).map_err(|e| format!("ApplyOverridesFailed: {e}")))
}

/// The binding spec of a federated object: the object itself as the resource, its placement
/// as the cluster affinity, every selected cluster getting the whole template (Duplicated),
/// KubeFed's adoption of existing member objects as Overwrite (Abort with `adopt` off: the
/// KubeFedConfig's `syncController.adoptResources: Disabled`), and the orphaning annotation as
/// Karmada's preserve-on-deletion. `namespace`: the selection of the object's FederatedNamespace
/// when KubeFed's namespace rule applies (the placement is then intersected with it).
pub fn binding_spec(
    federated: &Value,
    spec: &FederatedSpec,
    target: &Target,
    namespace: Option<&Selection>,
    adopt: bool,
) -> Result<ResourceBindingSpec, String> {
    let s = |p: &str| federated.pointer(p).and_then(Value::as_str).map(str::to_string);
    let base = base_object(federated, spec, target).map_err(|e| e.to_string())?;
    let replicas = crate::interpreter::get_replicas(&base).map_err(|e| e.to_string())?;
    let orphan = federated.pointer("/metadata/annotations").and_then(|a| a.get(ORPHAN_ANNOTATION)).and_then(Value::as_str) == Some("true");
    Ok(ResourceBindingSpec {
        resource: ObjectReference {
            api_version: s("/apiVersion").unwrap_or_default(),
            kind: s("/kind").unwrap_or_default(),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name").unwrap_or_default(),
            uid: s("/metadata/uid"),
            // Every change of the federated object changes the binding, which is what makes the
            // binding controller render the Works again (as the detector does for templates).
            resource_version: s("/metadata/resourceVersion"),
        },
        replicas: replicas.as_ref().map(|r| r.replicas).filter(|r| *r > 0),
        replica_requirements: replicas.and_then(|r| r.requirements),
        placement: Some(Placement {
            cluster_affinity: Some(match namespace {
                Some(ns) => affinity(intersection(selection(spec.placement.as_ref()), ns.clone())),
                None => cluster_affinity(spec.placement.as_ref()),
            }),
            replica_scheduling: Some(ReplicaSchedulingStrategy { replica_scheduling_type: Some(ReplicaSchedulingType::Duplicated), ..Default::default() }),
            ..Default::default()
        }),
        scheduler_name: Some(DEFAULT_SCHEDULER_NAME.into()),
        conflict_resolution: Some(if adopt { ConflictResolution::Overwrite } else { ConflictResolution::Abort }),
        preserve_resources_on_deletion: orphan.then_some(true),
        ..Default::default()
    })
}

/// KubeFed's per-cluster status values this controller reports.
pub mod cluster_status {
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    pub const APPLY_OVERRIDES_FAILED: &str = "ApplyOverridesFailed";
    pub const CREATION_FAILED: &str = "CreationFailed";
    pub const UPDATE_FAILED: &str = "UpdateFailed";
    pub const WAITING_FOR_REMOVAL: &str = "WaitingForRemoval";
    pub const MANAGED_LABEL_FALSE: &str = "ManagedLabelFalse";
    pub const ALREADY_EXISTS: &str = "AlreadyExists";
}

/// Aggregate reasons of the `Propagation` condition.
pub const REASON_CHECK_CLUSTERS: &str = "CheckClusters";
pub const REASON_COMPUTE_PLACEMENT_FAILED: &str = "ComputePlacementFailed";
/// The object's namespace has no FederatedNamespace, so the object is placed nowhere.
pub const REASON_NAMESPACE_NOT_FEDERATED: &str = "NamespaceNotFederated";

/// What one selected cluster's Work says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkState {
    /// No Work, or one that does not yet carry the current generation or has no `Applied`.
    Pending,
    Applied,
    Failed,
    /// The member object is labelled `kubefed.io/managed=false`: left alone.
    Unmanaged,
    /// A member object of that name existed and adoption is off (KubeFedConfig
    /// `syncController.adoptResources: Disabled`): left alone.
    AlreadyExists,
}

/// One selected cluster, as the status needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFacts {
    pub name: String,
    pub ready: bool,
    pub override_error: bool,
    pub work: WorkState,
    /// Whether the last written status listed this cluster as OK (create vs update).
    pub was_ok: bool,
}

/// What one selected cluster reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Propagated: `status.clusters[]` without a status.
    Ok,
    /// One of KubeFed's per-cluster status values.
    Status(&'static str),
    /// No result for the current generation yet.
    Pending,
}

/// `status.clusters[].status` of one cluster.
pub fn cluster_outcome(f: &ClusterFacts) -> Outcome {
    if !f.ready {
        return Outcome::Status(cluster_status::CLUSTER_NOT_READY);
    }
    if f.override_error {
        return Outcome::Status(cluster_status::APPLY_OVERRIDES_FAILED);
    }
    match f.work {
        WorkState::Applied => Outcome::Ok,
        WorkState::Failed if f.was_ok => Outcome::Status(cluster_status::UPDATE_FAILED),
        WorkState::Failed => Outcome::Status(cluster_status::CREATION_FAILED),
        WorkState::Unmanaged => Outcome::Status(cluster_status::MANAGED_LABEL_FALSE),
        WorkState::AlreadyExists => Outcome::Status(cluster_status::ALREADY_EXISTS),
        WorkState::Pending => Outcome::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federation::kubefed::types::{ClusterOverride, GenericClusterReference};

    fn cluster(name: &str, labels: &[(&str, &str)]) -> Cluster {
        let mut c: Cluster = serde_json::from_value(
            json!({"apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": name}, "spec": {"syncMode": "Push"}}),
        )
        .unwrap();
        c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        c
    }

    fn placement(v: Value) -> FederatedPlacement {
        serde_json::from_value(v).unwrap()
    }

    fn deployment_target() -> Target {
        Target { api_version: "apps/v1".into(), kind: "Deployment".into(), namespaced: true }
    }

    /// KubeFed's documented FederatedDeployment, with its clusters renamed.
    fn federated() -> Value {
        json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "metadata": {"name": "test-deployment", "namespace": "test-namespace", "uid": "fd-uid", "generation": 4},
            "spec": {
                "template": {
                    "metadata": {"labels": {"app": "nginx"}, "annotations": {"dropped": "yes"}, "name": "ignored", "namespace": "ignored"},
                    "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}},
                             "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"image": "nginx", "name": "nginx"}]}}}
                },
                "placement": {"clusters": [{"name": "member2"}, {"name": "member1"}]},
                "overrides": [
                    {"clusterName": "member1", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]},
                    {"clusterName": "member2", "clusterOverrides": [
                        {"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.17.0-alpine"},
                        {"path": "/metadata/annotations", "op": "add", "value": {"foo": "bar", "team": "edge"}},
                        {"path": "/metadata/annotations/foo", "op": "remove"}
                    ]}
                ]
            }
        })
    }

    #[test]
    fn placement_follows_kubefeds_table() {
        let (a, b, c) = (cluster("a", &[("env", "prod")]), cluster("b", &[("env", "dev")]), cluster("c", &[]));
        let picked = |p: Option<FederatedPlacement>| -> Vec<String> {
            let s = selection(p.as_ref());
            [&a, &b, &c].iter().filter(|x| selects(&s, x)).map(|x| x.metadata.name.clone().unwrap()).collect()
        };
        // No placement, or neither field: nothing.
        assert_eq!(picked(None), Vec::<String>::new());
        assert_eq!(picked(Some(placement(json!({})))), Vec::<String>::new());
        // Names win over a selector; an empty list is no cluster even with a selector.
        assert_eq!(picked(Some(placement(json!({"clusters": [{"name": "b"}], "clusterSelector": {"matchLabels": {"env": "prod"}}})))), ["b"]);
        assert_eq!(picked(Some(placement(json!({"clusters": [], "clusterSelector": {}})))), Vec::<String>::new());
        // `{}` selects every cluster; a selector its matches.
        assert_eq!(picked(Some(placement(json!({"clusterSelector": {}})))), ["a", "b", "c"]);
        assert_eq!(
            picked(Some(placement(json!({"clusterSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]}})))),
            ["a", "b"]
        );
        // Duplicate names collapse; unknown names select nothing.
        let p = placement(json!({"clusters": [{"name": "a"}, {"name": "nowhere"}, {"name": "a"}]}));
        assert_eq!(selection(Some(&p)), Selection::Named(vec!["a".into(), "nowhere".into()]));
        assert_eq!(unknown_clusters(&selection(Some(&p)), &["a".into(), "b".into()]), ["nowhere"]);
        assert_eq!(picked(Some(p)), ["a"]);
        assert!(unknown_clusters(&selection(Some(&placement(json!({"clusterSelector": {}})))), &[]).is_empty());
    }

    #[test]
    fn affinity_of_each_placement() {
        let named = cluster_affinity(Some(&FederatedPlacement {
            clusters: Some(vec![GenericClusterReference { name: "m1".into() }]),
            cluster_selector: Some(Default::default()),
        }));
        assert_eq!(named, ClusterAffinity { cluster_names: Some(vec!["m1".into()]), ..Default::default() });
        let all = cluster_affinity(Some(&placement(json!({"clusterSelector": {}}))));
        assert_eq!(all.label_selector, Some(MetaLabelSelector::default()));
        assert_eq!(all.cluster_names, None);
        // The empty placement is a selector that matches no labels at all, present or absent.
        let none = cluster_affinity(None);
        let sel = LabelSelector::from_json(&serde_json::to_value(none.label_selector.unwrap()).unwrap()).unwrap();
        assert!(!sel.matches(&BTreeMap::new()));
        assert!(!sel.matches(&BTreeMap::from([(NO_CLUSTER_KEY.to_string(), "x".to_string())])));
    }

    #[test]
    fn member_objects_get_their_cluster_overrides() {
        let fd = federated();
        let spec = federated_spec(&fd).unwrap();
        let m1 = member_object(&fd, &spec, &deployment_target(), "member1").unwrap();
        assert_eq!(m1["apiVersion"], "apps/v1");
        assert_eq!(m1["kind"], "Deployment");
        assert_eq!(m1["metadata"]["name"], "test-deployment");
        assert_eq!(m1["metadata"]["namespace"], "test-namespace");
        assert_eq!(m1["metadata"]["labels"], json!({"app": "nginx", "kubefed.io/managed": "true"}));
        assert_eq!(m1["metadata"]["generation"], 4);
        assert!(m1["metadata"].get("annotations").is_none(), "template annotations are dropped: {m1}");
        assert_eq!(m1["spec"]["replicas"], 5);
        assert_eq!(m1["spec"]["template"]["spec"]["containers"][0]["image"], "nginx");
        let m2 = member_object(&fd, &spec, &deployment_target(), "member2").unwrap();
        assert_eq!(m2["spec"]["replicas"], 3);
        assert_eq!(m2["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.17.0-alpine");
        assert_eq!(m2["metadata"]["annotations"], json!({"team": "edge"}));
        // A cluster without overrides gets the template.
        let m3 = member_object(&fd, &spec, &deployment_target(), "member3").unwrap();
        assert_eq!(m3["spec"]["replicas"], 3);
        assert_eq!(dropped_template_fields(&spec), ["AnnotationsNotSupported"]);
    }

    #[test]
    fn cluster_scoped_targets_lose_the_namespace_and_apiversion_defaults_but_can_be_set() {
        let fd =
            json!({"metadata": {"name": "admin", "namespace": "ns"}, "spec": {"template": {"apiVersion": "rbac.authorization.k8s.io/v1beta1", "rules": []}}});
        let t = Target { api_version: "rbac.authorization.k8s.io/v1".into(), kind: "ClusterRole".into(), namespaced: false };
        let o = member_object(&fd, &federated_spec(&fd).unwrap(), &t, "c").unwrap();
        assert_eq!(o["apiVersion"], "rbac.authorization.k8s.io/v1beta1");
        assert!(o["metadata"].get("namespace").is_none());
        let fd = json!({"metadata": {"name": "cm"}, "spec": {}});
        let t = Target { api_version: "v1".into(), kind: "ConfigMap".into(), namespaced: false };
        assert_eq!(member_object(&fd, &federated_spec(&fd).unwrap(), &t, "c").unwrap()["apiVersion"], "v1");
    }

    #[test]
    fn bad_overrides_fail_their_cluster_only() {
        let with = |ops: Value| {
            let mut fd = federated();
            fd["spec"]["overrides"] = json!([{"clusterName": "member1", "clusterOverrides": ops}]);
            fd
        };
        let run = |fd: &Value, cluster: &str| member_object(fd, &federated_spec(fd).unwrap(), &deployment_target(), cluster);
        for path in FORBIDDEN_PATHS {
            let fd = with(json!([{"path": path, "value": "x"}]));
            assert_eq!(run(&fd, "member1").unwrap_err(), OverrideError::ForbiddenPath { path: path.into() });
            assert!(run(&fd, "member2").is_ok(), "{path}");
        }
        // A path that does not exist: under a missing parent every op fails, and remove of a
        // missing key fails; replace and add of a missing key under an existing object set it
        // (KubeFed's JSON-patch library, like kube-apiserver's, is lenient there).
        let fd = with(json!([{"path": "/spec/nothing/here", "value": true}]));
        assert!(matches!(run(&fd, "member1"), Err(OverrideError::Apply { .. })));
        assert!(run(&fd, "member2").is_ok());
        let fd = with(json!([{"path": "/spec/paused", "value": true}]));
        assert_eq!(run(&fd, "member1").unwrap()["spec"]["paused"], true);
        let fd = with(json!([{"path": "/spec/paused", "op": "remove"}]));
        assert!(matches!(run(&fd, "member1"), Err(OverrideError::Apply { .. })));
        let fd = with(json!([{"path": "/spec/nothing/here", "op": "remove"}]));
        assert!(matches!(run(&fd, "member1"), Err(OverrideError::Apply { .. })));
        let fd = with(json!([{"path": "/spec/paused", "op": "add", "value": true}]));
        assert_eq!(run(&fd, "member1").unwrap()["spec"]["paused"], true);
        let fd = with(json!([{"path": "/spec/a/b", "op": "add", "value": 1}]));
        assert!(matches!(run(&fd, "member1"), Err(OverrideError::Apply { .. })));
        let fd = with(json!([{"path": "/spec/replicas", "op": "move", "value": 1}]));
        assert!(matches!(run(&fd, "member1"), Err(OverrideError::BadOp { .. })));
        // Beyond KubeFed's forbidden paths: whatever path reaches them, the namespace and name
        // stay (replacing all of metadata cannot move the object).
        let moved = run(&federated(), "member1").unwrap();
        let fd = with(json!([{"path": "/metadata", "value": {"name": moved["metadata"]["name"], "namespace": "kube-system"}}]));
        assert!(matches!(run(&fd, "member1"), Err(OverrideError::Apply { message, .. }) if message.contains("namespace or name")));
    }

    #[test]
    fn duplicates_invalidate_the_whole_override_set() {
        let mut fd = federated();
        fd["spec"]["overrides"] = json!([{"clusterName": "member1"}, {"clusterName": "member1"}]);
        let spec = federated_spec(&fd).unwrap();
        for c in ["member1", "member2"] {
            assert_eq!(member_object(&fd, &spec, &deployment_target(), c).unwrap_err(), OverrideError::DuplicateCluster { cluster: "member1".into() });
        }
        let op = |p: &str| ClusterOverride { op: None, path: p.into(), value: Some(json!(1)) };
        let twice = [ClusterOverrides { cluster_name: Some("x".into()), cluster_overrides: Some(vec![op("/spec/replicas"), op("/spec/replicas")]) }];
        assert_eq!(validate_overrides(&twice).unwrap_err(), OverrideError::DuplicatePath { cluster: "x".into(), path: "/spec/replicas".into() });
    }

    #[test]
    fn the_binding_spec_points_at_the_federated_object() {
        let mut fd = federated();
        let spec = federated_spec(&fd).unwrap();
        let b = binding_spec(&fd, &spec, &deployment_target(), None, true).unwrap();
        assert_eq!(
            (b.resource.api_version.as_str(), b.resource.kind.as_str(), b.resource.name.as_str()),
            ("types.kubefed.io/v1beta1", "FederatedDeployment", "test-deployment")
        );
        assert_eq!(b.resource.namespace.as_deref(), Some("test-namespace"));
        assert_eq!(b.replicas, Some(3));
        let p = b.placement.unwrap();
        assert_eq!(p.cluster_affinity.unwrap().cluster_names, Some(vec!["member2".into(), "member1".into()]));
        assert_eq!(p.replica_scheduling.unwrap().replica_scheduling_type, Some(ReplicaSchedulingType::Duplicated));
        assert_eq!(b.conflict_resolution, Some(ConflictResolution::Overwrite));
        let no_adoption = binding_spec(&fd, &spec, &deployment_target(), None, false).unwrap();
        assert_eq!(no_adoption.conflict_resolution, Some(ConflictResolution::Abort), "adoptResources: Disabled");
        assert_eq!(b.preserve_resources_on_deletion, None);
        fd["metadata"]["annotations"] = json!({ORPHAN_ANNOTATION: "true"});
        assert_eq!(binding_spec(&fd, &spec, &deployment_target(), None, true).unwrap().preserve_resources_on_deletion, Some(true));
    }

    #[test]
    fn a_namespaced_object_reaches_only_where_its_namespace_is_placed() {
        let a = cluster("a", &[("tier", "edge")]);
        let b = cluster("b", &[("tier", "core")]);
        let c = cluster("c", &[("tier", "edge")]);
        let named = |n: &[&str]| Selection::Named(n.iter().map(|s| s.to_string()).collect());
        let sel = |k: &str, v: &str| {
            Selection::Selector(MetaLabelSelector { match_labels: Some(BTreeMap::from([(k.to_string(), v.to_string())])), match_expressions: None })
        };
        let picks = |s: &Selection| -> Vec<&str> { [&a, &b, &c].into_iter().filter(|x| selects(s, x)).map(|x| x.metadata.name.as_deref().unwrap()).collect() };
        let everything = Selection::Selector(MetaLabelSelector::default());
        assert_eq!(picks(&intersection(named(&["a", "b"]), named(&["b", "c"]))), ["b"]);
        assert_eq!(intersection(named(&["a"]), named(&["c"])), Selection::None, "disjoint names select nothing");
        assert_eq!(picks(&intersection(named(&["a", "b"]), sel("tier", "edge"))), ["a"]);
        assert_eq!(picks(&intersection(sel("tier", "edge"), named(&["b", "c"]))), ["c"]);
        assert_eq!(picks(&intersection(everything.clone(), sel("tier", "core"))), ["b"]);
        assert!(picks(&intersection(sel("tier", "edge"), sel("tier", "core"))).is_empty(), "two values for one key match nothing");
        assert_eq!(intersection(named(&["a"]), Selection::None), Selection::None, "a namespace not federated places nothing");
        // The binding's affinity says the same to the scheduler.
        let fd = federated();
        let spec = federated_spec(&fd).unwrap();
        let within = sel("tier", "edge");
        let affinity = binding_spec(&fd, &spec, &deployment_target(), Some(&within), true).unwrap().placement.unwrap().cluster_affinity.unwrap();
        assert_eq!(affinity.cluster_names, Some(vec!["member2".into(), "member1".into()]));
        assert!(affinity.label_selector.is_some());
    }

    #[test]
    fn the_hook_only_touches_kubefed_bindings() {
        let fd = federated();
        let mut meta = ObjectMeta::default();
        assert!(member_object_for_binding(&meta, &fd, "member1").is_none());
        meta.labels = Some(BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())]));
        meta.annotations = Some(deployment_target().annotations().into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        assert_eq!(Target::of_binding(&meta), Some(deployment_target()));
        assert_eq!(member_object_for_binding(&meta, &fd, "member1").unwrap().unwrap()["spec"]["replicas"], 5);
    }

    #[test]
    fn cluster_status_values() {
        let f = |ready, override_error, work, was_ok| ClusterFacts { name: "c".into(), ready, override_error, work, was_ok };
        assert_eq!(cluster_outcome(&f(false, true, WorkState::Applied, true)), Outcome::Status(cluster_status::CLUSTER_NOT_READY));
        assert_eq!(cluster_outcome(&f(true, true, WorkState::Applied, true)), Outcome::Status(cluster_status::APPLY_OVERRIDES_FAILED));
        assert_eq!(cluster_outcome(&f(true, false, WorkState::Applied, false)), Outcome::Ok);
        assert_eq!(cluster_outcome(&f(true, false, WorkState::Failed, false)), Outcome::Status(cluster_status::CREATION_FAILED));
        assert_eq!(cluster_outcome(&f(true, false, WorkState::Failed, true)), Outcome::Status(cluster_status::UPDATE_FAILED));
        assert_eq!(cluster_outcome(&f(true, false, WorkState::Pending, true)), Outcome::Pending);
        assert_eq!(cluster_outcome(&f(true, false, WorkState::Unmanaged, true)), Outcome::Status(cluster_status::MANAGED_LABEL_FALSE));
        assert_eq!(cluster_outcome(&f(true, false, WorkState::AlreadyExists, false)), Outcome::Status(cluster_status::ALREADY_EXISTS));
    }
}
