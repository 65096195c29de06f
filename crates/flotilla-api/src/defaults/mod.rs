//! Defaulting of built-in kinds exactly as kube-apiserver v1.37 does it, so a template stored on
//! Flotilla reads back byte-for-byte like the same template stored on a (Karmada) kube-apiserver.
//!
//! Two entry points, matching the two moments the real server defaults:
//!
//! - [`apply_defaults`] — what happens every time the server decodes a body (create, update,
//!   patch result) or reads an object back from storage: the versioned types' defaults, canonical
//!   quantities, and the zero values Go's JSON encoder drops (`"tolerations": []`,
//!   `"hostNetwork": false`, `null`s) or always writes (`"resources": {}`, `"status": {}`).
//!   Idempotent.
//! - [`apply_create_defaults`] — a create: `apply_defaults`, then what the server's create
//!   strategies and its default admission plugins add (fresh status, a Job's generated selector,
//!   a Namespace's finalizer, a Pod's QoS class, tolerations and priority), then `apply_defaults`
//!   again, because the real server decodes the object once more when storing it.
//!
//! ```
//! use flotilla_api::defaults::{apply_create_defaults, apply_defaults};
//! use serde_json::json;
//!
//! let mut deployment = json!({
//!     "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
//!     "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
//!         "metadata": {"labels": {"app": "web"}},
//!         "spec": {"containers": [{"name": "web", "image": "nginx",
//!                                  "resources": {"requests": {"cpu": 0.5}}}]}}}});
//! apply_defaults("apps", "v1", "Deployment", &mut deployment).unwrap();
//! assert_eq!(deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
//! let container = &deployment["spec"]["template"]["spec"]["containers"][0];
//! assert_eq!(container["imagePullPolicy"], "Always");
//! assert_eq!(container["resources"]["requests"]["cpu"], "500m");
//!
//! let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
//!     "metadata": {"name": "p", "uid": "0b5c", "creationTimestamp": "2026-11-30T06:00:00Z"},
//!     "spec": {"containers": [{"name": "c", "image": "nginx",
//!                              "resources": {"requests": {"cpu": "abc"}}}]}});
//! let error = apply_create_defaults("", "v1", "Pod", &mut pod).unwrap_err();
//! assert_eq!(error.path, "spec.containers[0].resources.requests[cpu]");
//! ```
//!
//! Kinds covered: `v1` Pod, PodTemplate, ReplicationController, Service, ConfigMap, Secret,
//! ServiceAccount, PersistentVolumeClaim, Namespace, LimitRange, ResourceQuota, Endpoints;
//! `apps/v1` Deployment, StatefulSet, DaemonSet, ReplicaSet; `batch/v1` Job, CronJob;
//! `networking.k8s.io/v1` Ingress, IngressClass, NetworkPolicy; `autoscaling/v2`
//! HorizontalPodAutoscaler; `policy/v1` PodDisruptionBudget; `rbac.authorization.k8s.io/v1`
//! Role, ClusterRole, RoleBinding, ClusterRoleBinding; `coordination.k8s.io/v1` Lease;
//! `events.k8s.io/v1` Event; `discovery.k8s.io/v1` EndpointSlice; `scheduling.k8s.io/v1`
//! PriorityClass. Any other group/version/kind is left untouched.
//!
//! Service addresses: Flotilla allocates no `clusterIP`, node port or IP family for a template
//! (ADR 0004); values the user sets are kept.
//!
//! Everything here was checked against a recorded kube-apiserver:
//! `tests/defaults_golden.rs` replays `tests/data/defaults-golden/` (regenerate with
//! `scripts/regen-defaults-golden.sh`).
//!
//! Known divergences (the recorded ones are also listed, with their cases, in the test):
//! - Creating a bare Pod with pod-level `resources` (PodLevelResources) does not fill pod-level
//!   requests and limits from the containers' aggregate. Templates are not affected.
//! - Admission that depends on other objects is not applied: `LimitRanger` (a namespace's
//!   LimitRanges), `DefaultStorageClass`, `DefaultIngressClass`, `RuntimeClass` overhead, and
//!   `Priority` for classes other than `system-cluster-critical`/`system-node-critical` or a
//!   `globalDefault` class (a Pod without a class gets priority 0).
//! - Quantities sent as JSON numbers in exponent form or with trailing zeros (`1e3`, `1.500`)
//!   reach us as `f64` through `serde_json`, so they come back canonical (`1k`, `1500m`) where
//!   kube-apiserver echoes the original text. Quantities sent as strings are exact.
//! - Go's encoder drops zero-valued `omitempty` fields and writes non-pointer structs always;
//!   this module reproduces that for the fields of the kinds above that manifests commonly
//!   carry (metadata, pod specs, containers, probes, volumes, Services, workload specs and
//!   statuses), not for every field of every type. Unknown fields are left for the API
//!   server's decoder (which drops or refuses them per `fieldValidation`).
//! - `null` is removed wherever it appears as an object member (Go decodes it to a nil
//!   pointer/slice/map, which it omits); inside a string map Go would store `""` instead.

mod apps;
mod autoscaling;
mod batch;
mod core;
mod events;
mod networking;
mod pod;
pub mod quantity;
mod rbac;
mod scheduling;
mod zero_values;

use serde_json::Value;

use zero_values::{Object, drop_nulls, object_or_insert, omit_empty_label_selectors, omit_empty_metadata};

/// A field the server could not accept, with its path in Kubernetes' notation
/// (`spec.containers[0].resources.requests[cpu]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {detail}")]
pub struct FieldError {
    /// Where the value is.
    pub path: String,
    /// How the real server reports it.
    pub kind: FieldErrorKind,
    /// The server's own wording for the problem.
    pub detail: String,
}

/// How kube-apiserver answers a [`FieldError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// The value cannot be decoded into the field's Go type (an unparseable quantity). The real
    /// server answers **400 BadRequest** (not 422) with the message
    /// `<Kind> in version "<version>" cannot be handled as a <Kind>: <detail>` and names no
    /// field; `path` is extra information for logs and for a `causes` entry.
    Undecodable,
}

impl FieldError {
    fn undecodable(path: &str, detail: &str) -> FieldError {
        FieldError { path: path.to_owned(), kind: FieldErrorKind::Undecodable, detail: detail.to_owned() }
    }

    /// The `message` of the Status the real server returns for this error on `kind`/`version`.
    pub fn status_message(&self, kind: &str, version: &str) -> String {
        match self.kind {
            FieldErrorKind::Undecodable => {
                format!("{kind} in version \"{version}\" cannot be handled as a {kind}: {}", self.detail)
            }
        }
    }
}

/// Applies the defaults kube-apiserver applies whenever it decodes `obj` (see the module docs).
/// `obj` is a whole object of the given group (`""` for core), version and kind. Objects that
/// are not JSON objects and kinds not listed above are left alone.
pub fn apply_defaults(group: &str, version: &str, kind: &str, obj: &mut Value) -> Result<(), FieldError> {
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    let Some(kind) = BuiltinKind::of(group, version, kind) else {
        return Ok(());
    };
    drop_nulls_in_place(o);
    if let Some(meta) = object_or_insert(o, "metadata") {
        omit_empty_metadata(meta);
    }
    match kind {
        // A Service's and a ReplicationController's `selector` are plain label maps.
        BuiltinKind::Service => {}
        BuiltinKind::ReplicationController => {
            if let Some(template) = o.get_mut("spec").and_then(|s| s.get_mut("template")) {
                omit_empty_label_selectors(template);
            }
        }
        _ => {
            if let Some(spec) = o.get_mut("spec") {
                omit_empty_label_selectors(spec);
            }
        }
    }
    kind.default(o)
}

/// Applies what creating `obj` does on kube-apiserver: [`apply_defaults`], the create strategy
/// and admission defaults, then [`apply_defaults`] again.
///
/// Call it after the server-owned metadata is in place — `name` (generated from
/// `generateName`), `namespace`, `uid` and `creationTimestamp` — as kube-apiserver fills those
/// before its create strategy runs: a Job's generated selector uses the uid, and a
/// scheduling-gated Pod's condition is stamped with the creation time.
pub fn apply_create_defaults(group: &str, version: &str, kind: &str, obj: &mut Value) -> Result<(), FieldError> {
    let job_labels_were_empty = obj.get("metadata").and_then(|m| m.get("labels")).and_then(Value::as_object).is_none_or(Object::is_empty);
    apply_defaults(group, version, kind, obj)?;
    let (Some(o), Some(builtin)) = (obj.as_object_mut(), BuiltinKind::of(group, version, kind)) else {
        return Ok(());
    };
    builtin.prepare_for_create(o, job_labels_were_empty);
    apply_defaults(group, version, kind, obj)
}

fn drop_nulls_in_place(o: &mut Object) {
    let mut value = Value::Object(std::mem::take(o));
    drop_nulls(&mut value);
    if let Value::Object(map) = value {
        *o = map;
    }
}

/// The kinds this module defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BuiltinKind {
    Pod,
    PodTemplate,
    ReplicationController,
    Service,
    ConfigMap,
    Secret,
    ServiceAccount,
    PersistentVolumeClaim,
    Namespace,
    LimitRange,
    ResourceQuota,
    Endpoints,
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    Job,
    CronJob,
    Ingress,
    IngressClass,
    NetworkPolicy,
    HorizontalPodAutoscaler,
    PodDisruptionBudget,
    Role,
    RoleBinding,
    Lease,
    Event,
    CoreEvent,
    EndpointSlice,
    PriorityClass,
}

impl BuiltinKind {
    fn of(group: &str, version: &str, kind: &str) -> Option<BuiltinKind> {
        use BuiltinKind::*;
        Some(match (group, version, kind) {
            ("", "v1", "Pod") => Pod,
            ("", "v1", "PodTemplate") => PodTemplate,
            ("", "v1", "ReplicationController") => ReplicationController,
            ("", "v1", "Service") => Service,
            ("", "v1", "ConfigMap") => ConfigMap,
            ("", "v1", "Secret") => Secret,
            ("", "v1", "ServiceAccount") => ServiceAccount,
            ("", "v1", "PersistentVolumeClaim") => PersistentVolumeClaim,
            ("", "v1", "Namespace") => Namespace,
            ("", "v1", "LimitRange") => LimitRange,
            ("", "v1", "ResourceQuota") => ResourceQuota,
            ("", "v1", "Endpoints") => Endpoints,
            ("apps", "v1", "Deployment") => Deployment,
            ("apps", "v1", "StatefulSet") => StatefulSet,
            ("apps", "v1", "DaemonSet") => DaemonSet,
            ("apps", "v1", "ReplicaSet") => ReplicaSet,
            ("batch", "v1", "Job") => Job,
            ("batch", "v1", "CronJob") => CronJob,
            ("networking.k8s.io", "v1", "Ingress") => Ingress,
            ("networking.k8s.io", "v1", "IngressClass") => IngressClass,
            ("networking.k8s.io", "v1", "NetworkPolicy") => NetworkPolicy,
            ("autoscaling", "v2", "HorizontalPodAutoscaler") => HorizontalPodAutoscaler,
            ("policy", "v1", "PodDisruptionBudget") => PodDisruptionBudget,
            ("rbac.authorization.k8s.io", "v1", "Role" | "ClusterRole") => Role,
            ("rbac.authorization.k8s.io", "v1", "RoleBinding" | "ClusterRoleBinding") => RoleBinding,
            ("coordination.k8s.io", "v1", "Lease") => Lease,
            ("events.k8s.io", "v1", "Event") => Event,
            ("", "v1", "Event") => CoreEvent,
            ("discovery.k8s.io", "v1", "EndpointSlice") => EndpointSlice,
            ("scheduling.k8s.io", "v1", "PriorityClass") => PriorityClass,
            _ => return None,
        })
    }

    fn default(self, o: &mut Object) -> Result<(), FieldError> {
        use BuiltinKind::*;
        match self {
            Pod => pod::default_pod(o)?,
            PodTemplate => core::default_pod_template_object(o)?,
            ReplicationController => core::default_replication_controller(o)?,
            Service => core::default_service(o),
            ConfigMap => core::default_config_map(o),
            Secret => core::default_secret(o),
            ServiceAccount => core::default_service_account(o),
            PersistentVolumeClaim => core::default_claim(o)?,
            Namespace => core::default_namespace(o),
            LimitRange => core::default_limit_range(o)?,
            ResourceQuota => core::default_resource_quota(o)?,
            Endpoints => core::default_endpoints(o),
            Deployment => apps::default_deployment(o)?,
            StatefulSet => apps::default_stateful_set(o)?,
            DaemonSet => apps::default_daemon_set(o)?,
            ReplicaSet => apps::default_replica_set(o)?,
            Job => batch::default_job(o)?,
            CronJob => batch::default_cron_job(o)?,
            Ingress => networking::default_ingress(o),
            IngressClass => networking::default_ingress_class(o),
            NetworkPolicy => networking::default_network_policy(o),
            HorizontalPodAutoscaler => autoscaling::default_horizontal_pod_autoscaler(o)?,
            PodDisruptionBudget => autoscaling::default_pod_disruption_budget(o),
            Role => rbac::default_role(o),
            RoleBinding => rbac::default_binding(o),
            Lease => {}
            Event => events::default_event(o),
            CoreEvent => events::default_core_event(o),
            EndpointSlice => networking::default_endpoint_slice(o),
            PriorityClass => scheduling::default_priority_class(o),
        }
        Ok(())
    }

    /// The create strategy's and admission plugins' additions; status of a kind that has one
    /// starts from its zero value (the next decode fills it in).
    fn prepare_for_create(self, o: &mut Object, job_labels_were_empty: bool) {
        use BuiltinKind::*;
        match self {
            Pod => pod::prepare_pod_for_create(o),
            Namespace => core::prepare_namespace_for_create(o),
            Job => batch::prepare_job_for_create(o, job_labels_were_empty),
            DaemonSet => apps::prepare_daemon_set_for_create(o),
            Service
            | ReplicationController
            | PersistentVolumeClaim
            | ResourceQuota
            | Deployment
            | StatefulSet
            | ReplicaSet
            | CronJob
            | Ingress
            | HorizontalPodAutoscaler
            | PodDisruptionBudget => {
                o.insert("status".into(), Value::Object(Object::new()));
            }
            PodTemplate | ConfigMap | Secret | ServiceAccount | LimitRange | Endpoints | IngressClass | NetworkPolicy | Role | RoleBinding | Lease | Event
            | CoreEvent | EndpointSlice | PriorityClass => {}
        }
    }
}
