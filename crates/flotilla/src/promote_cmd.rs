//! `flotilla promote KIND/NAME --cluster C [-n NS]`: an object running in a member — created
//! there directly, or born at a pull member's edge while it was offline (ADR 0032) — becomes a
//! resource template on the control plane, as `karmadactl promote` makes it. The member's object
//! is adopted where it is, never re-created: same UID, its pods left alone.
//!
//! Read through the cluster proxy (`clusters/{name}/proxy`), so push and pull members (through
//! the agent's tunnel) are promoted alike. The template is the member's object without what its
//! API server set (Karmada's `prune.RemoveIrrelevantFields`, the prune every Work manifest gets:
//! uid, resourceVersion, generation, creationTimestamp, managedFields, ownerReferences,
//! finalizers, status and per kind the fields a member allocates), annotated
//! `work.karmada.io/conflict-resolution: overwrite`. Its (Cluster)PropagationPolicy, named as
//! Karmada names it (`GeneratePolicyName`: `<name>-<hash>`) unless `--policy-name`, selects
//! exactly that object, places it on that cluster with `conflictResolution: Overwrite`, so the
//! execution controller takes over the unmanaged member object instead of refusing it, and
//! `preserveResourcesOnDeletion: true`, so deleting the template later leaves the member's object
//! running, as before the promotion. `--dependencies` promotes what a workload references
//! (ConfigMaps, Secrets, its ServiceAccount, PersistentVolumeClaims) as templates too — those
//! named; a ServiceImport's EndpointSlices, selected by label, are not — and propagates them
//! with it (`propagateDeps`).
//!
//! Deviations from karmadactl, each for a reason:
//! - an object that is already a template on the control plane is an error (non-zero exit), not
//!   a warning with exit 0: a script must not take "nothing done" for "promoted";
//! - everything is checked before anything is created (the cluster, the member's object and its
//!   dependencies, the kind served on the control plane, the namespace there, the policy's name
//!   free), and the policy is created before the template, so the template is claimed by it
//!   rather than by a broader policy that happens to match; what was created is deleted again
//!   when a later step fails;
//! - the labels and annotations Karmada writes on member objects (a copy some control plane
//!   propagated) are not copied into the template, `work.karmada.io/conflict-resolution` among
//!   them: the template always says `overwrite` (karmadactl keeps a value the member's object
//!   carries, and then a left-over `abort` defeats the adoption);
//! - the member is always read through the cluster proxy: there is no `--cluster-kubeconfig`;
//! - `--dry-run` still reads (the cluster, the member, the control plane) and says what it would
//!   create; `-o json|yaml` prints the template and the policy (and the dependencies) and creates
//!   nothing, as karmadactl does.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::policy_name;
use flotilla_api::federation::karmada::policy::{
    ClusterAffinity, ClusterPropagationPolicy, ClusterPropagationSpec, ConflictResolution, Placement, PropagationPolicy, PropagationSpec, ResourceSelector,
};
use flotilla_api::federation::karmada::work::CONFLICT_RESOLUTION_ANNOTATION;
use flotilla_api::interpreter::{get_dependencies, prune_for_work};
use flotilla_member::apply::{KARMADA_ANNOTATIONS, KARMADA_LABELS};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use serde_json::{Value, json};

use crate::get_cmd::{fetch_object, member_discovery, proxy_base, resolve};
use crate::join_cmd::ControlPlane;

/// The value of [`CONFLICT_RESOLUTION_ANNOTATION`] that lets Karmada take over an existing object.
const OVERWRITE: &str = "overwrite";

#[derive(clap::Args, Debug)]
pub struct PromoteArgs {
    /// The object: KIND/NAME, or KIND then NAME as karmadactl takes them, with the kind as
    /// kubectl takes it (`deployment/web`, `deploy web`, `deployments.v1.apps/web`,
    /// `namespace/shop`).
    target: String,
    /// The name, when the first argument is only the kind.
    name: Option<String>,
    /// The member cluster the object runs in.
    #[arg(long, short = 'C')]
    cluster: String,
    /// Namespace of a namespaced object (default: the kubeconfig context's, else `default`).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Name of the PropagationPolicy (ClusterPropagationPolicy for a cluster-scoped object)
    /// created with the template (default: Karmada's, the object's name and a hash of its
    /// namespace and kind).
    #[arg(long)]
    policy_name: Option<String>,
    /// Create the policy; `--auto-create-policy=false` creates the template only, for a policy
    /// of your own.
    #[arg(long, num_args = 0..=1, require_equals = true, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    auto_create_policy: bool,
    /// Promote also what the object depends on (a workload's ConfigMaps, Secrets, ServiceAccount
    /// and PersistentVolumeClaims) and propagate them with it (`propagateDeps`).
    #[arg(long, short = 'd', num_args = 0..=1, require_equals = true, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set)]
    dependencies: bool,
    /// Check everything and say what would be created, creating nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the template and the policy (and the dependencies) instead of creating them.
    #[arg(long, short = 'o', value_parser = ["json", "yaml"])]
    output: Option<String>,
    /// Seconds to wait for each answer from the member.
    #[arg(long, default_value_t = 30)]
    request_timeout: u64,
    #[command(flatten)]
    control_plane: ControlPlane,
}

/// What a promotion creates on the control plane.
#[derive(Debug)]
pub struct Plan {
    /// The dependencies' templates, in the order the interpreter lists them.
    pub dependencies: Vec<Value>,
    /// The PropagationPolicy or ClusterPropagationPolicy (none with `--auto-create-policy=false`).
    pub policy: Option<Value>,
    pub template: Value,
}

/// The resource template made of `member_object`, as karmadactl's `preprocessResource` makes
/// it: pruned as a Work manifest is, without the labels and annotations Karmada writes on member
/// objects, and annotated to overwrite.
pub fn template_of(member_object: &Value) -> anyhow::Result<Value> {
    let mut template = prune_for_work(member_object).map_err(|e| anyhow!("{e}"))?;
    let meta = template.get_mut("metadata").and_then(Value::as_object_mut).context("the object has no metadata")?;
    for (field, keys) in [("labels", KARMADA_LABELS), ("annotations", KARMADA_ANNOTATIONS)] {
        if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
            map.retain(|k, _| !keys.contains(&k.as_str()));
            if map.is_empty() {
                meta.remove(field);
            }
        }
    }
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    let annotations = annotations.as_object_mut().context("metadata.annotations is not a map")?;
    annotations.insert(CONFLICT_RESOLUTION_ANNOTATION.into(), json!(OVERWRITE));
    Ok(template)
}

/// The policy karmadactl's `buildPropagationPolicy` / `buildClusterPropagationPolicy` make for
/// `template`: exactly that object, on `cluster`, taking over the member's copy, keeping it when
/// the template is deleted. A PropagationPolicy in the template's namespace when it has one.
pub fn policy_for(template: &Value, cluster: &str, name: &str, propagate_deps: bool) -> anyhow::Result<Value> {
    let field = |pointer: &str| template.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty());
    let api_version = field("/apiVersion").context("the template has no apiVersion")?;
    let kind = field("/kind").context("the template has no kind")?;
    let object = field("/metadata/name").context("the template has no name")?;
    let spec = PropagationSpec {
        resource_selectors: vec![ResourceSelector { api_version: api_version.into(), kind: kind.into(), name: Some(object.into()), ..Default::default() }],
        propagate_deps: propagate_deps.then_some(true),
        placement: Some(Placement {
            cluster_affinity: Some(ClusterAffinity { cluster_names: Some(vec![cluster.into()]), ..Default::default() }),
            ..Default::default()
        }),
        conflict_resolution: Some(ConflictResolution::Overwrite),
        preserve_resources_on_deletion: Some(true),
        ..Default::default()
    };
    Ok(match field("/metadata/namespace") {
        Some(ns) => {
            let mut pp = PropagationPolicy::new(name, spec);
            pp.metadata.namespace = Some(ns.into());
            serde_json::to_value(pp)?
        }
        None => serde_json::to_value(ClusterPropagationPolicy::new(name, ClusterPropagationSpec(spec)))?,
    })
}

/// The name of the policy made for `template` when none is asked for: Karmada's.
pub fn default_policy_name(template: &Value) -> String {
    let field = |pointer: &str| template.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    policy_name(field("/metadata/namespace"), field("/metadata/name"), field("/apiVersion"), field("/kind"))
}

/// `KIND/NAME`, or `KIND` and `NAME`.
fn kind_and_name<'a>(target: &'a str, name: Option<&'a str>) -> anyhow::Result<(&'a str, &'a str)> {
    let (kind, name) = match (target.split_once('/'), name) {
        (Some((kind, name)), None) => (kind, name),
        (None, Some(name)) => (target, name),
        (Some(_), Some(_)) => bail!("give KIND/NAME or KIND NAME, not both ({target:?} and {:?})", name.unwrap_or("")),
        (None, None) => bail!("expected KIND/NAME or KIND NAME (e.g. deployment/web), got {target:?}"),
    };
    if kind.is_empty() || name.is_empty() {
        bail!("expected KIND/NAME or KIND NAME (e.g. deployment/web), got {target:?}");
    }
    Ok((kind, name))
}

/// How kubectl names an object in its output: `deployment.apps/web`, `configmap/settings`.
fn display(object: &Value) -> String {
    let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    let kind = field("/kind").to_lowercase();
    match field("/apiVersion").rsplit_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{}", field("/metadata/name")),
        None => format!("{kind}/{}", field("/metadata/name")),
    }
}

/// `namespace/name`, or the name of a cluster-scoped object.
fn namespaced_name(object: &Value) -> String {
    let field = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or("");
    match field("/metadata/namespace") {
        "" => field("/metadata/name").to_string(),
        ns => format!("{ns}/{}", field("/metadata/name")),
    }
}

/// Reads objects of one member through the cluster proxy.
struct MemberReader<'a> {
    client: &'a kube::Client,
    cluster: &'a str,
    discovery: Vec<Value>,
    timeout: Duration,
}

impl MemberReader<'_> {
    /// The object `kind` (as kubectl takes it) `name`, in `namespace` when the kind is
    /// namespaced; `None` when the member has no such object.
    async fn read(&self, kind: &str, name: &str, namespace: &str) -> anyhow::Result<Option<Value>> {
        let cluster = self.cluster;
        let r = resolve(kind, &self.discovery).with_context(|| format!("cluster {cluster} doesn't have a resource type {kind:?}"))?;
        let path = format!("{}{}", proxy_base(cluster), r.path(Some(namespace), Some(name)));
        fetch_object(self.client, &path, self.timeout).await.map_err(|e| anyhow!("reading {kind} {name} in cluster {cluster}: {e}"))
    }
}

/// The control plane's resource for `object`'s apiVersion and kind.
async fn served(client: &kube::Client, object: &Value) -> anyhow::Result<(ApiResource, bool)> {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| anyhow!("the control plane does not serve {kind} of {api_version} ({e}): install its CRD there first"))?;
    Ok((ar, caps.scope == Scope::Namespaced))
}

fn api_for(client: &kube::Client, ar: &ApiResource, namespaced: bool, object: &Value) -> Api<DynamicObject> {
    match object.pointer("/metadata/namespace").and_then(Value::as_str).filter(|_| namespaced) {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// What an object created by a promotion is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Policy,
    Dependency,
    Template,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Policy => "policy",
            Part::Dependency => "dependency",
            Part::Template => "template",
        })
    }
}

/// One object to create on the control plane, with where it goes.
struct ToCreate {
    part: Part,
    object: Value,
    api: Api<DynamicObject>,
}

impl ToCreate {
    fn name(&self) -> &str {
        self.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
    }
}

pub async fn promote(args: PromoteArgs) -> anyhow::Result<()> {
    let (kind, name) = kind_and_name(&args.target, args.name.as_deref())?;
    let cluster = args.cluster.as_str();
    let mut config = args.control_plane.config().await?;
    // A member the proxy cannot reach answers 503: report it now rather than retry it.
    config.default_retry = false;
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("building the control-plane client")?;
    let timeout = Duration::from_secs(args.request_timeout.max(1));

    Api::<Cluster>::all(client.clone())
        .get_opt(cluster)
        .await
        .context("reading the member cluster")?
        .with_context(|| format!("cluster {cluster} is not a member of this control plane (`kubectl get clusters` lists them)"))?;
    let discovery = member_discovery(&client, cluster, timeout).await.map_err(|e| anyhow!("cluster {cluster}: {e}"))?;
    let member = MemberReader { client: &client, cluster, discovery, timeout };
    let object = member.read(kind, name, &namespace).await?.with_context(|| match resolve(kind, &member.discovery) {
        Some(r) if r.namespaced => format!("{kind} {name} not found in namespace {namespace} of cluster {cluster}"),
        _ => format!("{kind} {name} not found in cluster {cluster}"),
    })?;
    if object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        bail!("{} in cluster {cluster} is being deleted: nothing to promote", display(&object));
    }
    let template = template_of(&object)?;

    let mut dependencies = Vec::new();
    if args.dependencies {
        let refs = get_dependencies(&object).map_err(|e| anyhow!("{e}"))?.unwrap_or_default();
        for dep in refs.iter().filter(|d| !d.name.is_empty()) {
            let spec = match dep.api_version.rsplit_once('/') {
                Some((group, version)) => format!("{}.{version}.{group}", dep.kind),
                None => format!("{}.{}", dep.kind, dep.api_version),
            };
            let found = member.read(&spec, &dep.name, &dep.namespace).await?.with_context(|| {
                format!(
                    "{} depends on {} {}/{}, which is not in cluster {cluster} (promote without --dependencies?)",
                    display(&object),
                    dep.kind,
                    dep.namespace,
                    dep.name
                )
            })?;
            dependencies.push(template_of(&found)?);
        }
    }
    let policy = if args.auto_create_policy {
        let name = args.policy_name.clone().unwrap_or_else(|| default_policy_name(&template));
        Some(policy_for(&template, cluster, &name, args.dependencies)?)
    } else {
        None
    };
    let plan = Plan { dependencies, policy, template };

    match args.output.as_deref() {
        Some("yaml") => {
            let docs: Vec<&Value> = [&plan.template].into_iter().chain(&plan.policy).chain(&plan.dependencies).collect();
            print!("{}", serde_saphyr::to_string_multiple(&docs)?);
            return Ok(());
        }
        Some(_) => {
            for doc in [&plan.template].into_iter().chain(&plan.policy).chain(&plan.dependencies) {
                println!("{}", serde_json::to_string_pretty(doc)?);
            }
            return Ok(());
        }
        None => {}
    }
    create(&client, plan, cluster, args.dry_run).await
}

/// Check the control plane, then create the policy, the dependencies and the template, in that
/// order; on a failure delete again what this call created.
async fn create(client: &kube::Client, plan: Plan, cluster: &str, dry_run: bool) -> anyhow::Result<()> {
    let (ar, namespaced) = served(client, &plan.template).await?;
    let template_api = api_for(client, &ar, namespaced, &plan.template);
    let shown = display(&plan.template);
    let template_name = plan.template.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    if template_api.get_opt(&template_name).await.with_context(|| format!("reading {shown} on the control plane"))?.is_some() {
        bail!(
            "{shown} ({}) is already a resource template on the control plane: nothing to promote; to place it on cluster {cluster}, edit the PropagationPolicy that selects it",
            namespaced_name(&plan.template)
        );
    }
    if namespaced {
        let ns = plan.template.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        if namespaces.get_opt(ns).await.context("reading the namespace on the control plane")?.is_none() {
            bail!(
                "namespace {ns} does not exist on the control plane: create it there first (`kubectl create namespace {ns}`, or `flotilla promote namespace/{ns} --cluster {cluster}`)"
            );
        }
    }

    let mut steps = Vec::new();
    if let Some(policy) = plan.policy {
        let (policy_ar, policy_namespaced) = served(client, &policy).await?;
        let api = api_for(client, &policy_ar, policy_namespaced, &policy);
        let step = ToCreate { part: Part::Policy, object: policy, api };
        if step.api.get_opt(step.name()).await.context("reading the policy")?.is_some() {
            bail!(
                "{} ({}) already exists: pass another --policy-name, or edit it to propagate the resource",
                display(&step.object),
                namespaced_name(&step.object)
            );
        }
        steps.push(step);
    }
    for dep in plan.dependencies {
        let (dep_ar, dep_namespaced) = served(client, &dep).await?;
        let api = api_for(client, &dep_ar, dep_namespaced, &dep);
        let step = ToCreate { part: Part::Dependency, object: dep, api };
        if step.api.get_opt(step.name()).await.context("reading a dependency on the control plane")?.is_some() {
            println!("{} is already on the control plane: left as it is", display(&step.object));
            continue;
        }
        steps.push(step);
    }
    steps.push(ToCreate { part: Part::Template, object: plan.template, api: template_api });

    let suffix = if dry_run { " (dry run)" } else { "" };
    let mut created: Vec<&ToCreate> = Vec::new();
    for step in &steps {
        if !dry_run {
            let object: DynamicObject = serde_json::from_value(step.object.clone()).context("the object to create")?;
            if let Err(e) = step.api.create(&PostParams::default(), &object).await {
                let undone = undo(&created).await;
                return Err(anyhow!(e)).with_context(|| format!("creating the {} {} on the control plane{undone}", step.part, display(&step.object)));
            }
            created.push(step);
        }
        println!("{} created{suffix}", display(&step.object));
    }
    match steps.iter().find(|s| s.part == Part::Policy) {
        Some(policy) => {
            println!("{shown} promoted from cluster {cluster}{suffix}: placed there by {}, its object in the member adopted as it is", display(&policy.object))
        }
        None => println!(
            "{shown} promoted from cluster {cluster}{suffix} as a resource template only: a policy placing it there with conflictResolution Overwrite adopts the member's object"
        ),
    }
    Ok(())
}

/// Delete what this promotion created, newest first; says what it could not delete.
async fn undo(created: &[&ToCreate]) -> String {
    let mut left = Vec::new();
    for step in created.iter().rev() {
        if step.api.delete(step.name(), &DeleteParams::default()).await.is_err() {
            left.push(display(&step.object));
        }
    }
    match (created.is_empty(), left.is_empty()) {
        (true, _) => String::new(),
        (false, true) => " (what was created before is deleted again)".into(),
        (false, false) => format!(" (could not delete again: {})", left.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member_deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-12-01T00:00:00Z", "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"kind": "X", "name": "o", "uid": "u-0"}], "finalizers": ["f"],
                "labels": {"app": "web", "karmada.io/managed": "true"},
                "annotations": {"deployment.kubernetes.io/revision": "1", "team": "edge", "work.karmada.io/name": "w"}
            },
            "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
            "status": {"readyReplicas": 2}
        })
    }

    #[test]
    fn the_template_is_the_member_object_without_what_its_server_set() {
        let t = template_of(&member_deployment()).unwrap();
        assert_eq!(
            t["metadata"],
            json!({"name": "web", "namespace": "shop", "labels": {"app": "web"}, "annotations": {"team": "edge", CONFLICT_RESOLUTION_ANNOTATION: "overwrite"}})
        );
        assert_eq!(t["spec"], member_deployment()["spec"], "the spec untouched: the member's pods stay");
        assert!(t.get("status").is_none());
        // A conflict resolution on the member's object (where it means nothing: Karmada writes it
        // there from a manifest) does not stop the adoption, as it would with karmadactl.
        let mut abort = member_deployment();
        abort["metadata"]["annotations"][CONFLICT_RESOLUTION_ANNOTATION] = json!("abort");
        assert_eq!(template_of(&abort).unwrap()["metadata"]["annotations"][CONFLICT_RESOLUTION_ANNOTATION], "overwrite");
    }

    #[test]
    fn the_policy_selects_the_object_on_its_cluster_and_overwrites() {
        let t = template_of(&member_deployment()).unwrap();
        let name = default_policy_name(&t);
        assert_eq!(name, policy_name("shop", "web", "apps/v1", "Deployment"));
        assert!(name.starts_with("web-"), "{name}");
        let pp = policy_for(&t, "edge-1", &name, false).unwrap();
        assert_eq!(
            pp,
            json!({
                "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {
                    "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                    "placement": {"clusterAffinity": {"clusterNames": ["edge-1"]}},
                    "conflictResolution": "Overwrite",
                    "preserveResourcesOnDeletion": true
                }
            })
        );
        assert_eq!(policy_for(&t, "edge-1", "p", true).unwrap()["spec"]["propagateDeps"], true);
        let ns = template_of(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "uid": "u"}})).unwrap();
        let cpp = policy_for(&ns, "edge-1", &default_policy_name(&ns), false).unwrap();
        assert_eq!(cpp["kind"], "ClusterPropagationPolicy");
        assert!(cpp["metadata"].get("namespace").is_none());
        assert_eq!(cpp["metadata"]["name"], policy_name("", "shop", "v1", "Namespace"));
    }

    #[test]
    fn targets_are_kind_slash_name_or_kind_then_name() {
        assert_eq!(kind_and_name("deployment/web", None).unwrap(), ("deployment", "web"));
        assert_eq!(kind_and_name("deploy", Some("web")).unwrap(), ("deploy", "web"));
        assert_eq!(kind_and_name("deployments.v1.apps/web", None).unwrap(), ("deployments.v1.apps", "web"));
        assert!(kind_and_name("deployment", None).is_err());
        assert!(kind_and_name("deployment/web", Some("x")).is_err());
        assert!(kind_and_name("deployment/", None).is_err());
    }

    #[test]
    fn objects_are_named_as_kubectl_names_them() {
        assert_eq!(display(&member_deployment()), "deployment.apps/web");
        assert_eq!(display(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})), "configmap/c");
        assert_eq!(namespaced_name(&member_deployment()), "shop/web");
    }
}
