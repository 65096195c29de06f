//! Karmada's admission duties (target v1.16): karmada-webhook's mutating and validating hooks
//! for policies, bindings and Works, and karmada-aggregated-apiserver's Cluster strategy.
//!
//! Sources: `pkg/webhook/{propagationpolicy,clusterpropagationpolicy,overridepolicy,
//! clusteroverridepolicy,resourcebinding,clusterresourcebinding,work}`, `pkg/util/helper`
//! (spread, division and grace-period defaults), `pkg/util/validation`, and
//! `pkg/apis/cluster/{mutation,validation}`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::{
    Defaulting, FieldError, FieldPath, GroupVersionKind, Operation, Reason, Settings, decode, dns1123_label_errors, encode, go_url, json_pointer_error, path,
};
use crate::defaults::quantity::Quantity as ParsedQuantity;
use crate::federation::karmada::cluster::{Cluster, ClusterSpec, ResourceModel, ResourceModelRange};
use crate::federation::karmada::networking::{CROSS_CLUSTER, LOAD_BALANCER, MCS_PERMANENT_ID_LABEL, MultiClusterService};
use crate::federation::karmada::policy::{
    CLUSTER_PROPAGATION_POLICY_FINALIZER, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, ClusterAffinity, ClusterOverridePolicy, ClusterPropagationPolicy,
    FailoverBehavior, OverridePolicy, OverrideSpec, OverriderOperator, PROPAGATION_POLICY_FINALIZER, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PatchOperation,
    Placement, PreemptionBehavior, PropagationPolicy, PropagationSpec, PurgeMode, ReplicaDivisionPreference, ReplicaSchedulingType, ResourceSelector,
    SpreadByField, SpreadConstraint, StatePreservation, WorkloadAffinity,
};
use crate::federation::karmada::taint::{ClusterTaintPolicy, ClusterTaintPolicySpec};
use crate::federation::karmada::work::{
    CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL, ClusterResourceBinding, MANAGED_ANNOTATIONS_ANNOTATION, MANAGED_LABELS_ANNOTATION,
    RESOURCE_BINDING_PERMANENT_ID_LABEL, ResourceBinding, WORK_PERMANENT_ID_LABEL, Work,
};
use crate::selector::{label_key_errors, label_value_errors};

/// Longest Cluster name: `karmada-es-<name>` must fit a 63-character namespace name.
pub const CLUSTER_NAME_MAX_LENGTH: usize = 48;
/// gracePeriodSeconds set on graceful application failover when absent.
pub const DEFAULT_APPLICATION_FAILOVER_GRACE_PERIOD_SECONDS: i32 = 600;

/// The kinds this module admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Cluster,
    PropagationPolicy,
    ClusterPropagationPolicy,
    OverridePolicy,
    ClusterOverridePolicy,
    ClusterTaintPolicy,
    ResourceBinding,
    ClusterResourceBinding,
    Work,
    MultiClusterService,
}

fn kind(gvk: &GroupVersionKind) -> Option<Kind> {
    Some(match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
        ("cluster.karmada.io", "v1alpha1", "Cluster") => Kind::Cluster,
        ("policy.karmada.io", "v1alpha1", "PropagationPolicy") => Kind::PropagationPolicy,
        ("policy.karmada.io", "v1alpha1", "ClusterPropagationPolicy") => Kind::ClusterPropagationPolicy,
        ("policy.karmada.io", "v1alpha1", "OverridePolicy") => Kind::OverridePolicy,
        ("policy.karmada.io", "v1alpha1", "ClusterOverridePolicy") => Kind::ClusterOverridePolicy,
        ("policy.karmada.io", "v1alpha1", "ClusterTaintPolicy") => Kind::ClusterTaintPolicy,
        ("work.karmada.io", "v1alpha2", "ResourceBinding") => Kind::ResourceBinding,
        ("work.karmada.io", "v1alpha2", "ClusterResourceBinding") => Kind::ClusterResourceBinding,
        ("work.karmada.io", "v1alpha1", "Work") => Kind::Work,
        ("networking.karmada.io", "v1alpha1", "MultiClusterService") => Kind::MultiClusterService,
        _ => return None,
    })
}

/// Whether `gvk` is a Karmada kind with admission duties.
pub fn handles(gvk: &GroupVersionKind) -> bool {
    kind(gvk).is_some()
}

/// Karmada's mutating step.
pub fn default(gvk: &GroupVersionKind, obj: &mut Value, ctx: &mut Defaulting<'_>) -> Result<(), Vec<FieldError>> {
    match kind(gvk) {
        Some(Kind::Cluster) => {
            let mut cluster: Cluster = decode(obj)?;
            default_cluster(&mut cluster.spec, ctx)?;
            encode(&cluster, obj);
        }
        Some(Kind::PropagationPolicy) => {
            let mut policy: PropagationPolicy = decode(obj)?;
            default_selector_namespaces(policy.spec.resource_selectors.iter_mut(), ctx, &policy.metadata);
            default_propagation_spec(&mut policy.spec);
            if ctx.operation == Operation::Create {
                set_label(&mut policy.metadata, PROPAGATION_POLICY_PERMANENT_ID_LABEL, (ctx.new_uuid)());
                add_finalizer(&mut policy.metadata, PROPAGATION_POLICY_FINALIZER);
            }
            encode(&policy, obj);
        }
        Some(Kind::ClusterPropagationPolicy) => {
            let mut policy: ClusterPropagationPolicy = decode(obj)?;
            default_propagation_spec(&mut policy.spec.0);
            if ctx.operation == Operation::Create {
                set_label(&mut policy.metadata, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, (ctx.new_uuid)());
                add_finalizer(&mut policy.metadata, CLUSTER_PROPAGATION_POLICY_FINALIZER);
            }
            encode(&policy, obj);
        }
        Some(Kind::OverridePolicy) => {
            let mut policy: OverridePolicy = decode(obj)?;
            default_selector_namespaces(policy.spec.resource_selectors.iter_mut().flatten(), ctx, &policy.metadata);
            encode(&policy, obj);
        }
        Some(Kind::ClusterOverridePolicy | Kind::ClusterTaintPolicy) => {}
        Some(Kind::ResourceBinding) => {
            let mut binding: ResourceBinding = decode(obj)?;
            ensure_permanent_id(&mut binding.metadata, RESOURCE_BINDING_PERMANENT_ID_LABEL, ctx);
            encode(&binding, obj);
        }
        Some(Kind::ClusterResourceBinding) => {
            let mut binding: ClusterResourceBinding = decode(obj)?;
            ensure_permanent_id(&mut binding.metadata, CLUSTER_RESOURCE_BINDING_PERMANENT_ID_LABEL, ctx);
            encode(&binding, obj);
        }
        Some(Kind::Work) => {
            let mut work: Work = decode(obj)?;
            ensure_permanent_id(&mut work.metadata, WORK_PERMANENT_ID_LABEL, ctx);
            let work_id = work.metadata.labels.as_ref().and_then(|l| l.get(WORK_PERMANENT_ID_LABEL)).cloned();
            let manifests = work.spec.workload.as_mut().and_then(|w| w.manifests.as_mut());
            for (i, manifest) in manifests.into_iter().flatten().enumerate() {
                if !manifest.is_object() {
                    return Err(vec![FieldError::invalid(path("spec").child("workload").child("manifests").index(i), "manifest must be an object")]);
                }
                prune_irrelevant_fields(manifest);
                label_workload(manifest, work_id.as_deref());
            }
            encode(&work, obj);
        }
        Some(Kind::MultiClusterService) => {
            let mut mcs: MultiClusterService = decode(obj)?;
            ensure_permanent_id(&mut mcs.metadata, MCS_PERMANENT_ID_LABEL, ctx);
            encode(&mcs, obj);
        }
        None => {}
    }
    Ok(())
}

/// Karmada's validating step.
pub fn validate(gvk: &GroupVersionKind, obj: &Value, old: Option<&Value>, settings: &Settings) -> Vec<FieldError> {
    let result = match kind(gvk) {
        // Edge sync-back's annotations (ADR 0032) on the Cluster and the propagation policies.
        Some(Kind::Cluster) => decode::<Cluster>(obj).map(|c| {
            let mut errors = validate_cluster(&c);
            errors.extend(crate::edge::validate_annotations(c.metadata.annotations.as_ref()));
            errors
        }),
        Some(Kind::PropagationPolicy) => decode::<PropagationPolicy>(obj).and_then(|p| {
            let old = old.map(decode::<PropagationPolicy>).transpose()?;
            let old = old.as_ref().map(|o| (&o.metadata, &o.spec));
            let mut errors = validate_policy(&p.metadata, &p.spec, old, PROPAGATION_POLICY_PERMANENT_ID_LABEL);
            errors.extend(crate::edge::validate_annotations(p.metadata.annotations.as_ref()));
            Ok(errors)
        }),
        Some(Kind::ClusterPropagationPolicy) => decode::<ClusterPropagationPolicy>(obj).and_then(|p| {
            let old = old.map(decode::<ClusterPropagationPolicy>).transpose()?;
            let old = old.as_ref().map(|o| (&o.metadata, &o.spec.0));
            let mut errors = validate_policy(&p.metadata, &p.spec.0, old, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL);
            errors.extend(crate::edge::validate_annotations(p.metadata.annotations.as_ref()));
            Ok(errors)
        }),
        Some(Kind::OverridePolicy) => decode::<OverridePolicy>(obj).map(|p| validate_override_spec(&p.spec)),
        Some(Kind::ClusterOverridePolicy) => decode::<ClusterOverridePolicy>(obj).map(|p| validate_override_spec(&p.spec.0)),
        Some(Kind::ClusterTaintPolicy) => decode::<ClusterTaintPolicy>(obj).map(|p| validate_taint_policy(&p.spec, settings)),
        Some(Kind::MultiClusterService) => decode::<MultiClusterService>(obj).and_then(|m| {
            let old = old.map(decode::<MultiClusterService>).transpose()?;
            Ok(validate_multi_cluster_service(&m, old.as_ref()))
        }),
        Some(Kind::ResourceBinding | Kind::ClusterResourceBinding | Kind::Work) | None => Ok(Vec::new()),
    };
    result.unwrap_or_else(|errors| errors)
}

// ---------------------------------------------------------------------------------------------
// Defaulting

/// Namespaced policies: a selector without a namespace selects in the request's namespace.
fn default_selector_namespaces<'a>(selectors: impl Iterator<Item = &'a mut ResourceSelector>, ctx: &Defaulting<'_>, meta: &ObjectMeta) {
    let Some(namespace) = ctx.namespace.map(str::to_string).or_else(|| meta.namespace.clone()) else {
        return;
    };
    for selector in selectors {
        if selector.namespace.as_deref().unwrap_or("").is_empty() {
            selector.namespace = Some(namespace.clone());
        }
    }
}

/// Defaults shared by PropagationPolicy and ClusterPropagationPolicy. Idempotent: the detector
/// applies it again to the spec it copies into a binding, for hosts without this admission
/// chain (a plain kube-apiserver serving the federation CRDs).
pub fn default_propagation_spec(spec: &mut PropagationSpec) {
    if let Some(placement) = spec.placement.as_mut() {
        default_spread_constraints(placement.spread_constraints.iter_mut().flatten());
        default_replica_division_preference(placement);
    }
    let selects_service_import = spec.resource_selectors.iter().any(|s| s.api_version == "multicluster.x-k8s.io/v1alpha1" && s.kind == "ServiceImport");
    if selects_service_import {
        spec.propagate_deps = Some(true);
    }
    if let Some(application) = spec.failover.as_mut().and_then(|f| f.application.as_mut()) {
        // The CRD default of purgeMode (Gracefully) has been applied before admission runs.
        let graceful = application.purge_mode.is_none_or(PurgeMode::is_graceful);
        if graceful && application.grace_period_seconds.is_none() {
            application.grace_period_seconds = Some(DEFAULT_APPLICATION_FAILOVER_GRACE_PERIOD_SECONDS);
        }
    }
}

/// `helper.SetDefaultSpreadConstraints`: spread by cluster when neither field nor label is
/// given; at least one group.
fn default_spread_constraints<'a>(constraints: impl Iterator<Item = &'a mut SpreadConstraint>) {
    for constraint in constraints {
        if constraint.spread_by_label.as_deref().unwrap_or("").is_empty() && constraint.spread_by_field.is_none() {
            constraint.spread_by_field = Some(SpreadByField::Cluster);
        }
        if constraint.min_groups.unwrap_or(0) == 0 {
            constraint.min_groups = Some(1);
        }
    }
}

/// `helper.SetReplicaDivisionPreferenceWeighted`: Divided without a preference is Weighted (and
/// Weighted without weights means equal weights, which the scheduler reads from the absence).
fn default_replica_division_preference(placement: &mut Placement) {
    if let Some(strategy) = placement.replica_scheduling.as_mut()
        && strategy.replica_scheduling_type == Some(ReplicaSchedulingType::Divided)
        && strategy.replica_division_preference.is_none()
    {
        strategy.replica_division_preference = Some(ReplicaDivisionPreference::Weighted);
    }
}

fn set_label(meta: &mut ObjectMeta, key: &str, value: String) {
    meta.labels.get_or_insert_with(BTreeMap::new).insert(key.to_string(), value);
}

fn add_finalizer(meta: &mut ObjectMeta, finalizer: &str) {
    let finalizers = meta.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(finalizer.to_string());
    }
}

/// Binding and Work webhooks: a permanent id unless one is already there.
fn ensure_permanent_id(meta: &mut ObjectMeta, key: &str, ctx: &mut Defaulting<'_>) {
    let present = meta.labels.as_ref().and_then(|l| l.get(key)).is_some_and(|v| !v.is_empty());
    if !present {
        set_label(meta, key, (ctx.new_uuid)());
    }
}

/// karmada-aggregated-apiserver's Cluster strategy: NoExecute taints get `timeAdded`, the
/// deprecated `zone` moves into `zones`, resource models get their defaults on create and are
/// standardised (sorted by grade, first min 0, last max MaxInt64).
fn default_cluster(spec: &mut ClusterSpec, ctx: &mut Defaulting<'_>) -> Result<(), Vec<FieldError>> {
    for taint in spec.taints.iter_mut().flatten() {
        if taint.effect == "NoExecute" && taint.time_added.is_none() {
            let now = serde_json::from_value(json!(ctx.now)).map_err(|e| vec![FieldError::invalid("spec.taints", format!("admission clock: {e}"))])?;
            taint.time_added = Some(now);
        }
    }
    if let Some(zone) = spec.zone.take_if(|z| !z.is_empty()) {
        if spec.zones.as_ref().is_none_or(Vec::is_empty) {
            spec.zones = Some(vec![zone]);
        } else {
            spec.zone = Some(zone);
        }
    }
    if ctx.operation == Operation::Create && spec.resource_models.as_ref().is_none_or(Vec::is_empty) {
        spec.resource_models = Some(default_resource_models());
    }
    if let Some(models) = spec.resource_models.as_mut().filter(|m| !m.is_empty()) {
        models.sort_by_key(|m| m.grade);
        for range in &mut models[0].ranges {
            range.min = Quantity("0".into());
        }
        let last = models.len() - 1;
        for range in &mut models[last].ranges {
            range.max = Quantity(MAX_INT64.into());
        }
    }
    Ok(())
}

const MAX_INT64: &str = "9223372036854775807";

/// The nine default grades: cpu [0,1) [1,2) [2,4) ... [128,∞) cores and memory [0,4Gi)
/// [4Gi,16Gi) [16Gi,32Gi) ... [1Ti,∞).
pub fn default_resource_models() -> Vec<ResourceModel> {
    const CPU: [&str; 10] = ["0", "1", "2", "4", "8", "16", "32", "64", "128", MAX_INT64];
    const MEMORY: [&str; 10] = ["0", "4Gi", "16Gi", "32Gi", "64Gi", "128Gi", "256Gi", "512Gi", "1Ti", MAX_INT64];
    (0..9)
        .map(|grade| ResourceModel {
            grade: grade as u32,
            ranges: vec![
                ResourceModelRange { name: "cpu".into(), min: Quantity(CPU[grade].into()), max: Quantity(CPU[grade + 1].into()) },
                ResourceModelRange { name: "memory".into(), min: Quantity(MEMORY[grade].into()), max: Quantity(MEMORY[grade + 1].into()) },
            ],
        })
        .collect()
}

/// `prune.RemoveIrrelevantFields` (with `RemoveJobTTLSeconds`): what the member would reject or
/// own is dropped from a Work manifest.
fn prune_irrelevant_fields(manifest: &mut Value) {
    let api_version = manifest.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
    let kind = manifest.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let name = manifest.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let object = manifest.as_object_mut().expect("manifest is an object");
    object.remove("status");
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "resourceVersion",
            "selfLink",
            "uid",
            "ownerReferences",
            "finalizers",
        ] {
            meta.remove(field);
        }
    }
    match (group, kind.as_str()) {
        ("apps", "Deployment") => remove_annotation(manifest, "deployment.kubernetes.io/revision"),
        ("batch", "Job") => {
            let manual = manifest.pointer("/spec/manualSelector") == Some(&Value::Bool(true));
            if !manual {
                for labels in ["/spec/selector/matchLabels", "/spec/template/metadata/labels"] {
                    if let Some(labels) = manifest.pointer_mut(labels).and_then(Value::as_object_mut) {
                        for key in ["controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name"] {
                            labels.remove(key);
                        }
                    }
                }
            }
            if let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("ttlSecondsAfterFinished");
            }
        }
        ("", "Service") if manifest.pointer("/spec/clusterIP").and_then(Value::as_str) != Some("None") => {
            if let Some(spec) = manifest.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
        }
        ("", "ServiceAccount") => {
            let prefix = format!("{name}-token-");
            if let Some(secrets) = manifest.get_mut("secrets").and_then(Value::as_array_mut) {
                secrets.retain(|s| !s.get("name").and_then(Value::as_str).is_some_and(|n| n.starts_with(&prefix)));
            }
        }
        ("", "Secret") if manifest.get("type").and_then(Value::as_str) == Some("kubernetes.io/service-account-token") => {
            remove_annotation(manifest, "kubernetes.io/service-account.uid");
            if let Some(object) = manifest.as_object_mut() {
                object.remove("data");
            }
        }
        ("", "PersistentVolumeClaim") => remove_annotation(manifest, "volume.kubernetes.io/selected-node"),
        _ => {}
    }
}

fn remove_annotation(manifest: &mut Value, key: &str) {
    if let Some(annotations) = manifest.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        annotations.remove(key);
    }
}

/// `SetLabelsAndAnnotationsForWorkload`: record the annotation keys, add the Work's permanent
/// id label, then record the label keys.
/// What Karmada's Work webhook does to each manifest: prunes what a manifest never carries,
/// copies the Work's permanent id into its labels and records the managed label and annotation
/// keys. Controllers writing Works to a host without Flotilla's admission call it themselves;
/// it is idempotent. `manifest` must be a JSON object.
pub fn prepare_work_manifest(manifest: &mut Value, work_id: Option<&str>) {
    prune_irrelevant_fields(manifest);
    label_workload(manifest, work_id);
}

fn label_workload(manifest: &mut Value, work_id: Option<&str>) {
    let object = manifest.as_object_mut().expect("manifest is an object");
    let meta = object.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        let mut keys: BTreeSet<String> =
            annotations.keys().filter(|k| *k != MANAGED_ANNOTATIONS_ANNOTATION && *k != MANAGED_LABELS_ANNOTATION).cloned().collect();
        keys.insert(MANAGED_ANNOTATIONS_ANNOTATION.into());
        keys.insert(MANAGED_LABELS_ANNOTATION.into());
        let joined = keys.into_iter().collect::<Vec<_>>().join(",");
        annotations.insert(MANAGED_ANNOTATIONS_ANNOTATION.into(), json!(joined));
    }
    if let Some(id) = work_id.filter(|id| !id.is_empty()) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(WORK_PERMANENT_ID_LABEL.into(), json!(id));
        }
    }
    let label_keys: Vec<String> = meta.get("labels").and_then(Value::as_object).map(|l| l.keys().cloned().collect()).unwrap_or_default();
    if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.insert(MANAGED_LABELS_ANNOTATION.into(), json!(label_keys.join(",")));
    }
}

// ---------------------------------------------------------------------------------------------
// Validation

fn validate_policy(meta: &ObjectMeta, spec: &PropagationSpec, old: Option<(&ObjectMeta, &PropagationSpec)>, id_label: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let label = |m: &ObjectMeta| m.labels.as_ref().and_then(|l| l.get(id_label)).cloned();
    if let Some((old_meta, old_spec)) = old {
        if spec.scheduler_name.as_deref().unwrap_or("") != old_spec.scheduler_name.as_deref().unwrap_or("") {
            errs.push(FieldError::forbidden("spec.schedulerName", "the schedulerName should not be updated"));
        }
        if label(meta) != label(old_meta) {
            errs.push(FieldError::forbidden(
                path("metadata").child("labels").key(id_label),
                format!("label {id_label} is immutable, it can only be set by the system during creation"),
            ));
        }
    }
    if label(meta).is_none() {
        errs.push(FieldError::required(
            path("metadata").child("labels").key(id_label),
            format!("label {id_label} is required, it should be set by the mutating admission webhook during creation"),
        ));
    }
    errs.extend(validate_propagation_spec(spec));
    errs
}

/// `validation.ValidatePropagationSpec`.
pub fn validate_propagation_spec(spec: &PropagationSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec_path = path("spec");
    if let Some(placement) = &spec.placement {
        errs.extend(validate_placement(placement, &spec_path.child("placement")));
    }
    let application = spec.failover.as_ref().and_then(|f| f.application.as_ref());
    if application.is_some() && spec.propagate_deps != Some(true) {
        errs.push(FieldError::invalid(spec_path.child("propagateDeps"), "application failover is set, propagateDeps must be true"));
    }
    if let Some(failover) = &spec.failover {
        errs.extend(validate_failover(failover, &spec_path.child("failover")));
    }
    if spec.preemption == Some(PreemptionBehavior::Always) {
        for (i, selector) in spec.resource_selectors.iter().enumerate() {
            if selector.name.as_deref().unwrap_or("").is_empty() {
                errs.push(FieldError::invalid(
                    spec_path.child("resourceSelectors").index(i).child("name"),
                    "name cannot be empty if preemption is Always, the empty name may cause unexpected resources preemption",
                ));
            }
        }
    }
    if let Some(suspension) = &spec.suspension {
        let all = suspension.dispatching == Some(true);
        let some = suspension.dispatching_on_clusters.as_ref().and_then(|c| c.cluster_names.as_ref()).is_some_and(|n| !n.is_empty());
        if all && some {
            errs.push(FieldError::invalid(
                spec_path.child("suspension").child("suspension"),
                "suspension dispatching cannot co-exist with dispatchingOnClusters.clusterNames",
            ));
        }
    }
    errs
}

fn validate_placement(placement: &Placement, at: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if placement.cluster_affinity.is_some() && placement.cluster_affinities.is_some() {
        errs.push(FieldError::invalid(at, "clusterAffinities cannot co-exist with clusterAffinity"));
    }
    if let Some(affinity) = &placement.cluster_affinity {
        errs.extend(validate_cluster_affinity(affinity, &at.child("clusterAffinity")));
    }
    if let Some(w) = &placement.workload_affinity {
        errs.extend(validate_workload_affinity(w, &at.child("workloadAffinity")));
    }
    let mut names = BTreeSet::new();
    for (i, term) in placement.cluster_affinities.iter().flatten().enumerate() {
        let term_path = at.child("clusterAffinities").index(i);
        for message in label_key_errors(&term.affinity_name) {
            errs.push(FieldError::invalid(&term_path, message));
        }
        if !names.insert(term.affinity_name.as_str()) {
            errs.push(FieldError::invalid(at.child("clusterAffinities"), "each affinity term in a policy must have a unique name"));
        }
        errs.extend(validate_cluster_affinity(&term.affinity, &term_path));
    }
    errs.extend(validate_spread_constraints(placement.spread_constraints.as_deref().unwrap_or_default(), &at.child("spreadConstraints")));
    errs
}

/// `ValidateClusterAffinity`: field selector keys provider/region/zone, operators In/NotIn.
fn validate_cluster_affinity(affinity: &ClusterAffinity, at: &FieldPath) -> Vec<FieldError> {
    let expressions = affinity.field_selector.as_ref().and_then(|f| f.match_expressions.as_ref());
    for expression in expressions.into_iter().flatten() {
        let message = if !["provider", "region", "zone"].contains(&expression.key.as_str()) {
            format!("unsupported key {:?}, must be provider, region, or zone", expression.key)
        } else if !["In", "NotIn"].contains(&expression.operator.as_str()) {
            format!("unsupported operator {:?}, must be In or NotIn", expression.operator)
        } else {
            continue;
        };
        return vec![FieldError::invalid(at.child("fieldSelector"), message)];
    }
    Vec::new()
}

/// `ValidateSpreadConstraint`.
fn validate_spread_constraints(constraints: &[SpreadConstraint], at: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen: BTreeMap<SpreadByField, bool> = BTreeMap::new();
    for (i, c) in constraints.iter().enumerate() {
        let here = at.index(i);
        let by_label = !c.spread_by_label.as_deref().unwrap_or("").is_empty();
        if c.spread_by_field.is_some() && by_label {
            errs.push(FieldError::invalid(&here, "spreadByLabel should not co-exist with spreadByField"));
        }
        let (min, max) = (c.min_groups.unwrap_or(0), c.max_groups.unwrap_or(0));
        if min < 0 {
            errs.push(FieldError::invalid(&here, "minGroups lower than 0 is not allowed"));
        }
        if max < 0 {
            errs.push(FieldError::invalid(&here, "maxGroups lower than 0 is not allowed"));
        }
        if max > 0 && max < min {
            errs.push(FieldError::invalid(&here, "maxGroups lower than minGroups is not allowed"));
        }
        if let Some(field) = c.spread_by_field {
            match seen.get_mut(&field) {
                Some(reported) => {
                    if !*reported {
                        let name = serde_json::to_value(field).expect("enum serialises");
                        let name = name.as_str().unwrap_or_default();
                        errs.push(FieldError::invalid(at, format!("multiple {name} spread constraints are not allowed")));
                        *reported = true;
                    }
                }
                None => {
                    seen.insert(field, false);
                }
            }
        }
    }
    if !seen.is_empty() && !seen.contains_key(&SpreadByField::Cluster) {
        errs.push(FieldError::invalid(at, "the cluster spread constraint must be enabled in one of the constraints in case of SpreadByField is enabled"));
    }
    errs
}

/// `ValidateFailover` with v1.15's purge modes (Graciously counts as Gracefully).
fn validate_failover(failover: &FailoverBehavior, at: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(preservation) = failover.cluster.as_ref().and_then(|c| c.state_preservation.as_ref()) {
        errs.extend(validate_state_preservation(preservation, &at.child("cluster").child("statePreservation")));
    }
    let Some(application) = &failover.application else {
        return errs;
    };
    let at = at.child("application");
    if let Some(preservation) = &application.state_preservation {
        errs.extend(validate_state_preservation(preservation, &at.child("statePreservation")));
    }
    if application.decision_conditions.toleration_seconds.is_some_and(|s| s < 0) {
        errs.push(FieldError::invalid(at.child("decisionConditions").child("tolerationSeconds"), "must be greater than or equal to 0"));
    }
    let graceful = application.purge_mode.is_none_or(PurgeMode::is_graceful);
    match (graceful, application.grace_period_seconds) {
        (false, Some(_)) => errs.push(FieldError::invalid(at.child("gracePeriodSeconds"), "only takes effect when purgeMode is gracefully")),
        (true, None) => errs.push(FieldError::invalid(at.child("gracePeriodSeconds"), "should not be empty when purgeMode is gracefully")),
        _ => {}
    }
    if application.grace_period_seconds.is_some_and(|s| s <= 0) {
        errs.push(FieldError::invalid(at.child("gracePeriodSeconds"), "must be greater than 0"));
    }
    errs
}

/// `ValidateWorkloadAffinity`: label keys, and not the same key for both.
fn validate_workload_affinity(w: &WorkloadAffinity, at: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (term, name) in [(&w.affinity, "affinity"), (&w.anti_affinity, "antiAffinity")] {
        for message in term.iter().flat_map(|t| label_key_errors(&t.group_by_label_key)) {
            errs.push(FieldError::invalid(at.child(name).child("groupByLabelKey"), message));
        }
    }
    if let (Some(a), Some(b)) = (&w.affinity, &w.anti_affinity)
        && a.group_by_label_key == b.group_by_label_key
    {
        errs.push(FieldError::invalid(at, "affinity and antiAffinity must not use the same groupByLabelKey"));
    }
    errs
}

/// `validateStatePreservation`: every `aliasLabelName` is a label key.
fn validate_state_preservation(preservation: &StatePreservation, at: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rule) in preservation.rules.iter().enumerate() {
        for message in label_key_errors(&rule.alias_label_name) {
            errs.push(FieldError::invalid(at.child("rules").index(i).child("aliasLabelName"), message));
        }
    }
    errs
}

/// `ValidateOverrideSpec`.
pub fn validate_override_spec(spec: &OverrideSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec_path = path("spec");
    if let Some(target) = &spec.target_cluster {
        errs.extend(validate_cluster_affinity(target, &spec_path.child("targetCluster")));
        if spec.override_rules.is_some() {
            errs.push(FieldError::invalid(spec_path.child("targetCluster"), "overrideRules and targetCluster can't co-exist"));
        }
    }
    if spec.overriders.as_ref().is_some_and(|o| !o.is_empty()) && spec.override_rules.is_some() {
        errs.push(FieldError::invalid(spec_path.child("overriders"), "overrideRules and overriders can't co-exist"));
    }
    for (i, rule) in spec.override_rules.iter().flatten().enumerate() {
        let rule_path = spec_path.child("overrideRules").index(i);
        let overriders = rule_path.child("overriders");
        for (j, a) in rule.overriders.annotations_overrider.iter().flatten().enumerate() {
            let at = overriders.child("annotationsOverrider").index(j).child("value");
            let total: usize = a.value.iter().flatten().map(|(k, v)| k.len() + v.len()).sum();
            for key in a.value.iter().flatten().map(|(k, _)| k) {
                for message in label_key_errors(&key.to_lowercase()) {
                    errs.push(FieldError::invalid(at.clone(), message));
                }
            }
            if total > 256 * 1024 {
                errs.push(FieldError::new(at, Reason::TooLong, "may not be more than 262144 bytes"));
            }
        }
        for (j, l) in rule.overriders.labels_overrider.iter().flatten().enumerate() {
            let at = overriders.child("labelsOverrider").index(j).child("value");
            for (key, value) in l.value.iter().flatten() {
                for message in label_key_errors(key) {
                    errs.push(FieldError::invalid(&at, message));
                }
                for message in label_value_errors(value) {
                    errs.push(FieldError::invalid(at.key(key), message));
                }
            }
        }
        for (j, image) in rule.overriders.image_overrider.iter().flatten().enumerate() {
            if let Some(message) = image.predicate.as_ref().and_then(|p| json_pointer_error(&p.path)) {
                errs.push(FieldError::invalid(overriders.child("imageOverrider").index(j).child("predicate").child("path"), message));
            }
        }
        for (j, field) in rule.overriders.field_overrider.iter().flatten().enumerate() {
            let at = overriders.child("fieldOverrider").index(j);
            let (json, yaml) = (field.json.as_deref().unwrap_or_default(), field.yaml.as_deref().unwrap_or_default());
            if !json.is_empty() && !yaml.is_empty() {
                errs.push(FieldError::invalid(&at, "FieldOverrider has both YAML and JSON set. Only one is allowed"));
            }
            if let Some(message) = json_pointer_error(&field.field_path) {
                errs.push(FieldError::invalid(at.child("fieldPath"), message));
            }
            errs.extend(validate_patch_operations(json, &at.child("json")));
            errs.extend(validate_patch_operations(yaml, &at.child("yaml")));
            if moves_the_object(&field.field_path) {
                errs.push(FieldError::new(at.child("fieldPath"), Reason::Forbidden, PLACEMENT_FORBIDDEN));
            }
        }
        for (j, plaintext) in rule.overriders.plaintext.iter().flatten().enumerate() {
            if moves_the_object(&plaintext.path) {
                errs.push(FieldError::new(overriders.child("plaintext").index(j).child("path"), Reason::Forbidden, PLACEMENT_FORBIDDEN));
            }
        }
        if let Some(target) = &rule.target_cluster {
            errs.extend(validate_cluster_affinity(target, &rule_path.child("targetCluster")));
        }
    }
    errs
}

/// Flotilla's rule beyond Karmada's: overrides may not move an object to another namespace or
/// rename it (the binding controller refuses such an override at render too, whatever path
/// reaches those fields).
const PLACEMENT_FORBIDDEN: &str = "an override may not change the object's namespace or name";

/// A JSON pointer that replaces the object's namespace or name: the root, `/metadata`, or
/// either field.
fn moves_the_object(pointer: &str) -> bool {
    matches!(pointer.trim_end_matches('/'), "" | "/metadata" | "/metadata/namespace" | "/metadata/name")
}

fn validate_patch_operations(operations: &[PatchOperation], at: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, op) in operations.iter().enumerate() {
        let here = at.index(i);
        if let Some(message) = json_pointer_error(&op.sub_path) {
            errs.push(FieldError::invalid(here.child("subPath"), message));
        }
        let has_value = op.value.is_some();
        match op.operator {
            OverriderOperator::Add | OverriderOperator::Replace if !has_value => {
                errs.push(FieldError::invalid(here.child("value"), "value is required for add or replace operation"))
            }
            OverriderOperator::Remove if has_value => errs.push(FieldError::invalid(here.child("value"), "value is not allowed for remove operation")),
            _ => {}
        }
    }
    errs
}

/// karmada-webhook's MultiClusterService validation: the name a DNS-1035 label; each port's name
/// a unique DNS-1123 label and its number valid; one exposure type, `CrossCluster` or
/// `LoadBalancer`, never changed; each provider and consumer a valid Cluster name.
fn validate_multi_cluster_service(mcs: &MultiClusterService, old: Option<&MultiClusterService>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for message in crate::validation::names::dns1035_label(mcs.metadata.name.as_deref().unwrap_or("")) {
        errs.push(FieldError::invalid("metadata.name", message));
    }
    let spec = &mcs.spec;
    let mut names = BTreeSet::new();
    for (i, port) in spec.ports.iter().flatten().enumerate() {
        let here = path("spec").child("ports").index(i);
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            for message in dns1123_label_errors(name) {
                errs.push(FieldError::invalid(here.child("name"), message));
            }
            if !names.insert(name) {
                errs.push(FieldError::new(here.child("name"), Reason::Duplicate, format!("{name:?}")));
            }
        }
        if !(1..=65535).contains(&port.port) {
            errs.push(FieldError::invalid(here.child("port"), "must be between 1 and 65535, inclusive"));
        }
    }
    for (i, t) in spec.types.iter().enumerate() {
        if t != CROSS_CLUSTER && t != LOAD_BALANCER {
            errs.push(FieldError::new(
                path("spec").child("types").index(i),
                Reason::NotSupported,
                format!("ExposureType Error: supported values: {CROSS_CLUSTER:?}, {LOAD_BALANCER:?}"),
            ));
        }
    }
    if spec.types.iter().collect::<BTreeSet<_>>().len() > 1 {
        errs.push(FieldError::invalid("spec.types", "MultiClusterService types should not contain more than one type"));
    }
    for (field, clusters) in [("providerClusters", &spec.provider_clusters), ("consumerClusters", &spec.consumer_clusters)] {
        for (i, c) in clusters.iter().flatten().enumerate() {
            for message in cluster_name_errors(&c.name) {
                errs.push(FieldError::invalid(path("spec").child(field).index(i).child("name"), message));
            }
        }
    }
    if let Some(old) = old
        && old.spec.types != spec.types
    {
        errs.push(FieldError::forbidden("spec.types", "MultiClusterService types are immutable"));
    }
    errs
}

/// `ValidateCluster`: name, then spec.
fn validate_cluster(cluster: &Cluster) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = cluster.metadata.name.as_deref().unwrap_or("");
    for message in cluster_name_errors(name) {
        errs.push(FieldError::invalid("metadata.name", message));
    }
    errs.extend(validate_cluster_spec(&cluster.spec));
    errs
}

/// `ValidateClusterName`: non-empty, at most 48 characters, a DNS-1123 label.
pub fn cluster_name_errors(name: &str) -> Vec<String> {
    if name.is_empty() {
        return vec!["must be not empty".into()];
    }
    if name.len() > CLUSTER_NAME_MAX_LENGTH {
        return vec![format!("must be no more than {CLUSTER_NAME_MAX_LENGTH} characters")];
    }
    dns1123_label_errors(name)
}

fn validate_cluster_spec(spec: &ClusterSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let at = path("spec");
    if let Some(endpoint) = spec.api_endpoint.as_deref().filter(|e| !e.is_empty()) {
        errs.extend(validate_api_endpoint(endpoint, &at.child("apiEndpoint")));
    }
    for (field, reference) in [("secretRef", &spec.secret_ref), ("impersonatorSecretRef", &spec.impersonator_secret_ref)] {
        if let Some(reference) = reference {
            if reference.namespace.is_empty() {
                errs.push(FieldError::required(at.child(field).child("namespace"), ""));
            }
            if reference.name.is_empty() {
                errs.push(FieldError::required(at.child(field).child("name"), ""));
            }
        }
    }
    if let Some(proxy) = spec.proxy_url.as_deref().filter(|p| !p.is_empty()) {
        match go_url::parse(proxy) {
            Err(e) => errs.push(FieldError::invalid(at.child("proxyURL"), format!("apiEndpoint must be a valid URL: {e}"))),
            Ok(u) if !["http", "https", "socks5"].contains(&u.scheme.as_str()) => {
                errs.push(FieldError::invalid(at.child("proxyURL"), format!("unsupported scheme {:?}, must be http, https, or socks5", u.scheme)))
            }
            Ok(_) => {}
        }
    }
    let mut taints = BTreeSet::new();
    for (i, taint) in spec.taints.iter().flatten().enumerate() {
        let here = at.child("taints").index(i);
        for message in label_key_errors(&taint.key) {
            errs.push(FieldError::invalid(here.child("key"), message));
        }
        for message in label_value_errors(taint.value.as_deref().unwrap_or("")) {
            errs.push(FieldError::invalid(here.child("value"), message));
        }
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&taint.effect.as_str()) {
            errs.push(FieldError::new(here.child("effect"), Reason::NotSupported, "supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""));
        }
        if !taints.insert((taint.key.as_str(), taint.effect.as_str())) {
            errs.push(FieldError::new(here, Reason::Duplicate, "taints must be unique by key and effect pair"));
        }
    }
    if let Some(models) = spec.resource_models.as_deref().filter(|m| !m.is_empty())
        && let Some(e) = validate_resource_models(models, &at.child("resourceModels"))
    {
        errs.push(e);
    }
    errs
}

/// karmada-webhook's ClusterTaintPolicy check: no NoExecute taint unless the administrator
/// allows it, no two taints with the same key and effect; and, where Karmada would only fail
/// later (patching the Cluster) or silently never match, a valid taint key, value and effect
/// and a known operator.
pub fn validate_taint_policy(spec: &ClusterTaintPolicySpec, settings: &Settings) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let at = path("spec");
    for (i, taint) in spec.taints.iter().enumerate() {
        let here = at.child("taints").index(i);
        if taint.effect == "NoExecute" && !settings.allow_no_execute_taint_policy {
            errs.push(FieldError::forbidden(
                here.clone(),
                "Configuring taint with NoExecute effect is not allowed, this capability must be explicitly enabled by administrators through command-line flags",
            ));
        }
        if spec.taints[..i].iter().any(|t| t.key == taint.key && t.effect == taint.effect) {
            errs.push(FieldError::new(
                here.clone(),
                Reason::Duplicate,
                format!("Duplicate taint with the same key({}) and effect({}) is not allowed", taint.key, taint.effect),
            ));
        }
        for message in label_key_errors(&taint.key) {
            errs.push(FieldError::invalid(here.child("key"), message));
        }
        for message in label_value_errors(taint.value.as_deref().unwrap_or("")) {
            errs.push(FieldError::invalid(here.child("value"), message));
        }
        if !["NoSchedule", "NoExecute"].contains(&taint.effect.as_str()) {
            errs.push(FieldError::new(here.child("effect"), Reason::NotSupported, "supported values: \"NoSchedule\", \"NoExecute\""));
        }
    }
    for (field, conditions) in [("addOnConditions", &spec.add_on_conditions), ("removeOnConditions", &spec.remove_on_conditions)] {
        for (i, c) in conditions.iter().flatten().enumerate() {
            if !["In", "NotIn"].contains(&c.operator.as_str()) {
                errs.push(FieldError::new(at.child(field).index(i).child("operator"), Reason::NotSupported, "supported values: \"In\", \"NotIn\""));
            }
        }
    }
    errs
}

/// `ValidateClusterAPIEndpoint` (without forced https): Go `url.Parse`, a host, no user info,
/// fragment or query.
fn validate_api_endpoint(endpoint: &str, at: &FieldPath) -> Vec<FieldError> {
    const FORM: &str = "; desired format: hostname, hostname:port, IP or IP:port";
    let url = match go_url::parse(endpoint) {
        Ok(url) => url,
        Err(e) => {
            return vec![FieldError::invalid(at, format!("apiEndpoint must be a valid URL: {e}{FORM}"))];
        }
    };
    let mut errs = Vec::new();
    if url.host.is_empty() {
        errs.push(FieldError::invalid(at, format!("host must be provided{FORM}")));
    }
    if url.has_user {
        errs.push(FieldError::invalid(at, "user information is not permitted in the URL"));
    }
    if !url.fragment.is_empty() {
        errs.push(FieldError::invalid(at, "fragments are not permitted in the URL"));
    }
    if !url.raw_query.is_empty() {
        errs.push(FieldError::invalid(at, "query parameters are not permitted in the URL"));
    }
    errs
}

/// `ValidateClusterResourceModels`: the first problem only, as upstream.
fn validate_resource_models(models: &[ResourceModel], at: &FieldPath) -> Option<FieldError> {
    const NAMES: [&str; 4] = ["cpu", "ephemeral-storage", "memory", "storage"];
    let invalid = |message: &str| Some(FieldError::invalid(at, message));
    let parse = |q: &Quantity| ParsedQuantity::parse(&q.0).ok();
    let max_int64 = ParsedQuantity::parse(MAX_INT64).expect("MaxInt64 parses");
    for (i, model) in models.iter().enumerate() {
        if i != 0 && model.grade == models[i - 1].grade {
            return invalid("The grade of each models should not be the same");
        }
        if i != 0 && models[i - 1].ranges.len() != model.ranges.len() {
            return invalid("The number of resource types should be the same");
        }
        for (j, range) in model.ranges.iter().enumerate() {
            if !NAMES.contains(&range.name.as_str()) {
                return Some(FieldError::new(
                    at.child("ranges").child("name"),
                    Reason::NotSupported,
                    "supported values: \"cpu\", \"ephemeral-storage\", \"memory\", \"storage\"",
                ));
            }
            let (Some(min), Some(max)) = (parse(&range.min), parse(&range.max)) else {
                return invalid("quantities must match the regular expression");
            };
            if max.cmp_value(&min).is_le() {
                return invalid("The max value of each resource must be greater than the min value");
            }
            if i == 0 {
                if !min.is_zero() {
                    return invalid("The min value of each resource in the first model should be 0");
                }
            } else if models[i - 1].ranges[j].name != range.name {
                return invalid("The resource types of each models should be the same");
            } else if parse(&models[i - 1].ranges[j].max).is_none_or(|prev| prev.cmp_value(&min).is_ne()) {
                return invalid("Model intervals for resources must be contiguous and non-overlapping");
            }
            if i == models.len() - 1 && max.cmp_value(&max_int64).is_lt() {
                return invalid("The max value of each resource in the last model should be MaxInt64");
            }
        }
    }
    None
}
