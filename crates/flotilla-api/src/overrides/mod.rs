//! OverridePolicy / ClusterOverridePolicy application (Karmada v1.16
//! `pkg/util/overridemanager`): which override rules apply to a template in a cluster, in what
//! order, what they do to the manifest, and the record Karmada keeps of them on the Work.
//!
//! Start at [`applicable`] then [`apply`]. The binding controller calls them per target
//! cluster after ReviseReplica, so overrides have the last word.
//!
//! Order: every matching ClusterOverridePolicy, then every matching OverridePolicy of the
//! template's namespace (namespaced templates only); within each set policies sorted by how
//! specifically their resource selectors pick the template (match-all, then label selector,
//! then name — the most specific applied last, so it wins), then by name; within a policy its
//! rules in order, each rule whose `targetCluster` picks the cluster (or has none). Within a
//! rule the overriders apply in Karmada's fixed order: image, command, args, labels,
//! annotations, field, plaintext; the entries of each in order.
//!
//! Invariant: pure; the manifest is changed only when every chosen rule applied.

mod command_args;
mod field;
mod image;
mod matching;
mod metadata;
mod patch;
mod yaml;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::federation::karmada::cluster::Cluster;
use crate::federation::karmada::policy::{
    ClusterOverridePolicy, CommandArgsOverrider, FieldOverrider, ImageOverrider, LabelAnnotationOverrider, OverridePolicy, OverrideSpec, Overriders,
    PatchOperation, PlaintextOverrider, RuleWithCluster,
};
use crate::interpreter::unstructured;
pub use image::ImageRef;
pub use matching::{ImplicitPriority, cluster_matches, selector_priority, selectors_priority};

/// Work annotation recording the OverridePolicies applied to its manifest.
pub const APPLIED_OVERRIDES_ANNOTATION: &str = "policy.karmada.io/applied-overrides";
/// Work annotation recording the ClusterOverridePolicies applied to its manifest.
pub const APPLIED_CLUSTER_OVERRIDES_ANNOTATION: &str = "policy.karmada.io/applied-cluster-overrides";
/// Event reasons Karmada gives applying an override policy.
pub const EVENT_REASON_APPLY_OVERRIDE_POLICY_SUCCEED: &str = "ApplyOverridePolicySucceed";
pub const EVENT_REASON_APPLY_OVERRIDE_POLICY_FAILED: &str = "ApplyOverridePolicyFailed";

/// An override policy: cluster-scoped (no namespace) or namespaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    pub namespace: Option<String>,
    pub name: String,
}

impl PolicyRef {
    fn is_cluster_scoped(&self) -> bool {
        self.namespace.is_none()
    }

    /// The Event message Karmada records on the template for this policy in `cluster`.
    pub fn event_message(&self, cluster: &str, succeeded: bool) -> String {
        let outcome = if succeeded { "succeed" } else { "failed" };
        match &self.namespace {
            None => format!("Apply cluster override policy({}) for cluster({cluster}) {outcome}.", self.name),
            Some(ns) => format!("Apply override policy({ns}/{}) for cluster({cluster}) {outcome}.", self.name),
        }
    }
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            None => write!(f, "ClusterOverridePolicy {}", self.name),
            Some(ns) => write!(f, "OverridePolicy {ns}/{}", self.name),
        }
    }
}

/// One override rule chosen for a template in a cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ChosenOverride {
    pub policy: PolicyRef,
    pub overriders: Overriders,
}

/// The override rules that apply to `template` in `cluster`, in the order to apply them.
/// `cops` are all ClusterOverridePolicies; `ops` may hold OverridePolicies of any namespace
/// (only those in the template's namespace count, and none for a cluster-scoped template).
pub fn applicable(template: &Value, cluster: &Cluster, cops: &[ClusterOverridePolicy], ops: &[OverridePolicy]) -> Vec<ChosenOverride> {
    let namespace = unstructured::string(template, &["metadata", "namespace"]).unwrap_or("");
    let cluster_scoped = cops.iter().map(|p| (PolicyRef { namespace: None, name: name_of(&p.metadata) }, &p.spec.0));
    let mut chosen = choose(template, cluster, cluster_scoped);
    if !namespace.is_empty() {
        let namespaced = ops
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .map(|p| (PolicyRef { namespace: Some(namespace.to_string()), name: name_of(&p.metadata) }, &p.spec));
        chosen.extend(choose(template, cluster, namespaced));
    }
    chosen
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// The rules of one scope's policies that pick `template` and `cluster`, ordered.
fn choose<'a>(template: &Value, cluster: &Cluster, policies: impl Iterator<Item = (PolicyRef, &'a OverrideSpec)>) -> Vec<ChosenOverride> {
    let mut matching: Vec<(ImplicitPriority, PolicyRef, &OverrideSpec)> = policies
        .map(|(policy, spec)| (selectors_priority(template, spec.resource_selectors.as_deref()), policy, spec))
        .filter(|(priority, _, _)| *priority > ImplicitPriority::MisMatch)
        .collect();
    matching.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let mut chosen = Vec::new();
    for (_, policy, spec) in matching {
        // Without overrideRules, the deprecated targetCluster/overriders pair is one rule.
        let legacy;
        let rules: &[RuleWithCluster] = match spec.override_rules.as_deref() {
            Some(rules) if !rules.is_empty() => rules,
            _ => {
                legacy = [RuleWithCluster { target_cluster: spec.target_cluster.clone(), overriders: spec.overriders.clone().unwrap_or_default() }];
                &legacy
            }
        };
        for rule in rules {
            if rule.target_cluster.as_ref().is_none_or(|affinity| cluster_matches(cluster, affinity)) {
                chosen.push(ChosenOverride { policy: policy.clone(), overriders: rule.overriders.clone() });
            }
        }
    }
    chosen
}

/// The overriders, in the order Karmada applies them within a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverriderKind {
    ImageOverrider,
    CommandOverrider,
    ArgsOverrider,
    LabelsOverrider,
    AnnotationsOverrider,
    FieldOverrider,
    Plaintext,
}

impl fmt::Display for OverriderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            OverriderKind::ImageOverrider => "imageOverrider",
            OverriderKind::CommandOverrider => "commandOverrider",
            OverriderKind::ArgsOverrider => "argsOverrider",
            OverriderKind::LabelsOverrider => "labelsOverrider",
            OverriderKind::AnnotationsOverrider => "annotationsOverrider",
            OverriderKind::FieldOverrider => "fieldOverrider",
            OverriderKind::Plaintext => "plaintext",
        };
        f.write_str(name)
    }
}

/// An override that does not apply to the manifest: which policy, which overrider (and which
/// entry of it), and why. Karmada stops at the first such override and applies none for the
/// cluster; the binding controller reports it (`ApplyOverridePolicyFailed`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{policy}: {overrider}[{index}]: {reason}")]
pub struct OverrideError {
    pub policy: PolicyRef,
    pub overrider: OverriderKind,
    /// Index of the entry within the overrider list.
    pub index: usize,
    pub reason: String,
}

impl OverrideError {
    /// The Warning Event message Karmada records on the template.
    pub fn event_message(&self, cluster: &str) -> String {
        self.policy.event_message(cluster, false)
    }
}

/// What was applied, as Karmada records it on the Work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppliedOverrides {
    /// ClusterOverridePolicy rules applied, in application order.
    pub cluster: Vec<ChosenOverride>,
    /// OverridePolicy rules applied, in application order.
    pub namespaced: Vec<ChosenOverride>,
}

impl AppliedOverrides {
    /// The Work annotations: [`APPLIED_CLUSTER_OVERRIDES_ANNOTATION`] and
    /// [`APPLIED_OVERRIDES_ANNOTATION`], each present only when something of its scope applied.
    pub fn annotations(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(json) = record_json(&self.cluster) {
            out.push((APPLIED_CLUSTER_OVERRIDES_ANNOTATION, json));
        }
        if let Some(json) = record_json(&self.namespaced) {
            out.push((APPLIED_OVERRIDES_ANNOTATION, json));
        }
        out
    }
}

/// The namespace and name an object is placed under.
fn placement_of(obj: &Value) -> (Option<&str>, Option<&str>) {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str);
    (s("/metadata/namespace"), s("/metadata/name"))
}

/// Applies `chosen` (from [`applicable`]) to `manifest`. On error `manifest` is left as it was.
///
/// Flotilla's rule beyond Karmada's: an override may not move a namespaced object to another
/// namespace or rename it (an OverridePolicy in `team` must not place anything in the
/// member's `kube-system`); such a rule is refused like one that does not apply.
pub fn apply(manifest: &mut Value, chosen: &[ChosenOverride]) -> Result<AppliedOverrides, OverrideError> {
    let mut work = manifest.clone();
    let mut applied = AppliedOverrides::default();
    for rule in chosen {
        apply_rule(&mut work, rule)?;
        let scope = if rule.policy.is_cluster_scoped() { &mut applied.cluster } else { &mut applied.namespaced };
        scope.push(rule.clone());
    }
    *manifest = work;
    Ok(applied)
}

/// One rule's overriders in Karmada's order.
fn apply_rule(obj: &mut Value, rule: &ChosenOverride) -> Result<(), OverrideError> {
    let o = &rule.overriders;
    let fail = |overrider: OverriderKind, index: usize| move |reason: String| OverrideError { policy: rule.policy.clone(), overrider, index, reason };
    for (i, ov) in o.image_overrider.iter().flatten().enumerate() {
        let ops = image::patches(obj, ov).map_err(fail(OverriderKind::ImageOverrider, i))?;
        patch::apply(obj, &ops).map_err(fail(OverriderKind::ImageOverrider, i))?;
    }
    for (kind, target, list) in [
        (OverriderKind::CommandOverrider, command_args::Target::Command, &o.command_overrider),
        (OverriderKind::ArgsOverrider, command_args::Target::Args, &o.args_overrider),
    ] {
        for (i, ov) in list.iter().flatten().enumerate() {
            let ops = command_args::patches(obj, target, ov).map_err(fail(kind, i))?;
            patch::apply(obj, &ops).map_err(fail(kind, i))?;
        }
    }
    for (kind, field, list) in
        [(OverriderKind::LabelsOverrider, "labels", &o.labels_overrider), (OverriderKind::AnnotationsOverrider, "annotations", &o.annotations_overrider)]
    {
        for (i, ov) in list.iter().flatten().enumerate() {
            let ops = metadata::patches(obj, field, ov);
            patch::apply(obj, &ops).map_err(fail(kind, i))?;
        }
    }
    let (namespace, name) = placement_of(obj);
    let placed = (namespace.map(str::to_string), name.map(str::to_string));
    for (i, ov) in o.field_overrider.iter().flatten().enumerate() {
        field::apply(obj, ov).map_err(fail(OverriderKind::FieldOverrider, i))?;
        keeps_placement(obj, &placed).map_err(fail(OverriderKind::FieldOverrider, i))?;
    }
    for (i, ov) in o.plaintext.iter().flatten().enumerate() {
        let op = patch::PatchOp::new(ov.operator, ov.path.clone(), ov.value.clone().unwrap_or(Value::Null));
        patch::apply(obj, &[op]).map_err(fail(OverriderKind::Plaintext, i))?;
        keeps_placement(obj, &placed).map_err(fail(OverriderKind::Plaintext, i))?;
    }
    Ok(())
}

/// Flotilla's rule beyond Karmada's: an override may not move a namespaced object to another
/// namespace or rename it (an OverridePolicy in `team` must not place anything in a member's
/// `kube-system`, nor overwrite another object of its namespace); such an override is refused
/// like one that does not apply.
fn keeps_placement(obj: &Value, (namespace, name): &(Option<String>, Option<String>)) -> Result<(), String> {
    let Some(ns) = namespace.as_deref().filter(|ns| !ns.is_empty()) else { return Ok(()) };
    let (now_ns, now_name) = placement_of(obj);
    if now_ns == Some(ns) && now_name == name.as_deref() {
        return Ok(());
    }
    Err(format!(
        "an override may not change a namespaced object's namespace or name (from {ns}/{} to {}/{})",
        name.as_deref().unwrap_or_default(),
        now_ns.unwrap_or_default(),
        now_name.unwrap_or_default()
    ))
}

/// JSON as Go's `encoding/json` writes it: serde's compact text with `<`, `>`, `&`, U+2028 and
/// U+2029 escaped.
pub(crate) fn go_json<T: Serialize + ?Sized>(value: &T) -> String {
    let text = serde_json::to_string(value).expect("JSON values serialise");
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The annotation value Karmada writes: `[{"policyName":…,"overriders":{…}}]` sorted by policy
/// name (stable), fields in the Go types' order, or `None` when nothing applied.
fn record_json(applied: &[ChosenOverride]) -> Option<String> {
    if applied.is_empty() {
        return None;
    }
    let mut items: Vec<&ChosenOverride> = applied.iter().collect();
    items.sort_by(|a, b| a.policy.name.cmp(&b.policy.name));
    let shadows: Vec<record::Shadow<'_>> = items.into_iter().map(record::Shadow::from).collect();
    Some(go_json(&shadows))
}

/// Mirrors of Karmada's Go types for the applied-overrides record: field order and
/// `omitempty` as in Go, and an absent `value` of a plaintext or field operation written as
/// `null` (Go's `apiextensionsv1.JSON` is never omitted).
mod record {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use serde_json::Value;

    use super::*;
    use crate::federation::karmada::policy::{ImageComponent, ImagePredicate};

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Shadow<'a> {
        policy_name: &'a str,
        overriders: Record<'a>,
    }

    impl<'a> From<&'a ChosenOverride> for Shadow<'a> {
        fn from(c: &'a ChosenOverride) -> Self {
            let o = &c.overriders;
            Shadow {
                policy_name: &c.policy.name,
                overriders: Record {
                    plaintext: mirror(&o.plaintext),
                    image_overrider: mirror(&o.image_overrider),
                    command_overrider: mirror(&o.command_overrider),
                    args_overrider: mirror(&o.args_overrider),
                    labels_overrider: mirror(&o.labels_overrider),
                    annotations_overrider: mirror(&o.annotations_overrider),
                    field_overrider: mirror(&o.field_overrider),
                },
            }
        }
    }

    /// A non-empty list in its mirror type; Go's `omitempty` drops empty lists.
    fn mirror<'a, T, M: From<&'a T>>(list: &'a Option<Vec<T>>) -> Option<Vec<M>> {
        list.as_deref().filter(|v| !v.is_empty()).map(|v| v.iter().map(M::from).collect())
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Record<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        plaintext: Option<Vec<Plaintext<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        image_overrider: Option<Vec<Image<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        command_overrider: Option<Vec<CommandArgs<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        args_overrider: Option<Vec<CommandArgs<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        labels_overrider: Option<Vec<LabelAnnotation<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations_overrider: Option<Vec<LabelAnnotation<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        field_overrider: Option<Vec<Field<'a>>>,
    }

    static NULL: Value = Value::Null;

    #[derive(Serialize)]
    struct Plaintext<'a> {
        path: &'a str,
        operator: crate::federation::karmada::policy::OverriderOperator,
        value: &'a Value,
    }

    impl<'a> From<&'a PlaintextOverrider> for Plaintext<'a> {
        fn from(p: &'a PlaintextOverrider) -> Self {
            Plaintext { path: &p.path, operator: p.operator, value: p.value.as_ref().unwrap_or(&NULL) }
        }
    }

    #[derive(Serialize)]
    struct Image<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        predicate: Option<&'a ImagePredicate>,
        component: ImageComponent,
        operator: crate::federation::karmada::policy::OverriderOperator,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<&'a str>,
    }

    impl<'a> From<&'a ImageOverrider> for Image<'a> {
        fn from(i: &'a ImageOverrider) -> Self {
            Image { predicate: i.predicate.as_ref(), component: i.component, operator: i.operator, value: i.value.as_deref().filter(|v| !v.is_empty()) }
        }
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct CommandArgs<'a> {
        container_name: &'a str,
        operator: crate::federation::karmada::policy::CommandArgsOperator,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<&'a [String]>,
    }

    impl<'a> From<&'a CommandArgsOverrider> for CommandArgs<'a> {
        fn from(c: &'a CommandArgsOverrider) -> Self {
            CommandArgs { container_name: &c.container_name, operator: c.operator, value: c.value.as_deref().filter(|v| !v.is_empty()) }
        }
    }

    #[derive(Serialize)]
    struct LabelAnnotation<'a> {
        operator: crate::federation::karmada::policy::OverriderOperator,
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<&'a BTreeMap<String, String>>,
    }

    impl<'a> From<&'a LabelAnnotationOverrider> for LabelAnnotation<'a> {
        fn from(l: &'a LabelAnnotationOverrider) -> Self {
            LabelAnnotation { operator: l.operator, value: l.value.as_ref().filter(|v| !v.is_empty()) }
        }
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Field<'a> {
        field_path: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        json: Option<Vec<Operation<'a>>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        yaml: Option<Vec<Operation<'a>>>,
    }

    impl<'a> From<&'a FieldOverrider> for Field<'a> {
        fn from(f: &'a FieldOverrider) -> Self {
            Field { field_path: &f.field_path, json: mirror(&f.json), yaml: mirror(&f.yaml) }
        }
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Operation<'a> {
        sub_path: &'a str,
        operator: crate::federation::karmada::policy::OverriderOperator,
        value: &'a Value,
    }

    impl<'a> From<&'a PatchOperation> for Operation<'a> {
        fn from(p: &'a PatchOperation) -> Self {
            Operation { sub_path: &p.sub_path, operator: p.operator, value: p.value.as_ref().unwrap_or(&NULL) }
        }
    }
}
