//! KubeFed's API objects on a control plane, through `kube::Client` only: seeding a fresh
//! control plane ([`seed_defaults`]: `kube-federation-system`, the KubeFedConfig `kubefed`, the
//! default FederatedTypeConfigs with their `Federated<Kind>` CRDs), and `kubefedctl`'s
//! `enable`/`disable` ([`plan_enable`], [`apply_enable`], [`disable`]) for any served kind,
//! CRDs unknown to Flotilla included.
//!
//! Seeding happens once: while the KubeFedConfig `kubefed` exists nothing is created or
//! rewritten, so a type disabled by the user stays disabled across restarts; deleting that
//! KubeFedConfig re-seeds at the next start. The KubeFedConfig is created last, so a start
//! interrupted half-way seeds again.

use anyhow::{Context as _, bail};
use flotilla_api::federation::kubefed::core::{DEFAULT_SYSTEM_NAMESPACE, FederatedTypeConfig};
use flotilla_api::federation::kubefed::enable::{DiscoveredResource, resolve};
use flotilla_api::federation::kubefed::install::{self, KUBEFED_CONFIG_NAME};
use flotilla_api::federation::kubefed::types::federated_type_definition;
use flotilla_api::federation::kubefed::{FederatedTypeOptions, default_target_types, default_type_options, federated_type_crd_with};
use flotilla_member::join;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Field manager of `flotilla enable`'s server-side applies.
pub const ENABLE_FIELD_MANAGER: &str = "flotilla-enable";

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Create `obj` unless it exists. Returns whether it was created.
async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> kube::Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 409) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What [`seed_defaults`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seeded {
    /// Objects created (namespace, CRDs, FederatedTypeConfigs, KubeFedConfig).
    pub created: usize,
    /// Whether the control plane had been seeded before (nothing was looked at beyond the
    /// namespace and the KubeFedConfig).
    pub already: bool,
}

/// Seed a fresh control plane with KubeFed's objects (see the module header).
pub async fn seed_defaults(client: &Client) -> anyhow::Result<Seeded> {
    let mut seeded = Seeded::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(install::system_namespace())?;
    if create_if_absent(&namespaces, &ns).await.context("create the namespace kube-federation-system")? {
        seeded.created += 1;
    }
    let configs = Api::<DynamicObject>::namespaced_with(client.clone(), DEFAULT_SYSTEM_NAMESPACE, &kubefed_config_resource());
    if configs.get_opt(KUBEFED_CONFIG_NAME).await.context("read the KubeFedConfig")?.is_some() {
        seeded.already = true;
        return Ok(seeded);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(client.clone(), DEFAULT_SYSTEM_NAMESPACE);
    for target in default_target_types() {
        let options = default_type_options(&target);
        let crd: CustomResourceDefinition = serde_json::from_value(federated_type_crd_with(&target, &options))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        if create_if_absent(&crds, &crd).await.with_context(|| format!("create the CRD {name}"))? {
            seeded.created += 1;
        }
        let ftc = install::federated_type_config(&target, &options, DEFAULT_SYSTEM_NAMESPACE);
        if create_if_absent(&ftcs, &ftc).await.with_context(|| format!("create the FederatedTypeConfig {}", install::federated_type_config_name(&target)))? {
            seeded.created += 1;
        }
    }
    let config: DynamicObject = serde_json::from_value(install::kubefed_config())?;
    if create_if_absent(&configs, &config).await.context("create the KubeFedConfig kubefed")? {
        seeded.created += 1;
    }
    Ok(seeded)
}

fn kubefed_config_resource() -> ApiResource {
    ApiResource {
        group: "core.kubefed.io".into(),
        version: "v1beta1".into(),
        api_version: "core.kubefed.io/v1beta1".into(),
        kind: "KubeFedConfig".into(),
        plural: "kubefedconfigs".into(),
    }
}

/// Every resource the control plane serves: each group's preferred version, or only `version`
/// where a group serves it.
pub async fn discover(client: &Client, version: Option<&str>) -> anyhow::Result<Vec<DiscoveredResource>> {
    let mut lists = Vec::new();
    let core = client.list_core_api_versions().await.context("discovery: /api")?;
    for v in core.versions.iter().filter(|v| version.is_none_or(|want| want == v.as_str())) {
        lists.push((String::new(), v.clone(), client.list_core_api_resources(v).await.with_context(|| format!("discovery: /api/{v}"))?));
    }
    let groups = client.list_api_groups().await.context("discovery: /apis")?;
    for group in groups.groups {
        let chosen = match version {
            Some(want) => group.versions.iter().find(|v| v.version == want).map(|v| v.group_version.clone()),
            None => group.preferred_version.as_ref().or(group.versions.first()).map(|v| v.group_version.clone()),
        };
        let Some(gv) = chosen else { continue };
        let list = client.list_api_group_resources(&gv).await.with_context(|| format!("discovery: /apis/{gv}"))?;
        let v = gv.rsplit('/').next().unwrap_or_default().to_string();
        lists.push((group.name.clone(), v, list));
    }
    Ok(lists
        .into_iter()
        .flat_map(|(group, version, list)| {
            list.resources.into_iter().map(move |r| DiscoveredResource {
                group: group.clone(),
                version: version.clone(),
                kind: r.kind,
                plural: r.name,
                singular: r.singular_name,
                short_names: r.short_names.unwrap_or_default(),
                namespaced: r.namespaced,
            })
        })
        .collect())
}

/// `kubefedctl enable`'s options.
#[derive(Clone, Debug)]
pub struct EnableOptions {
    /// Group of the federated type.
    pub federated_group: String,
    /// Version of the federated type.
    pub federated_version: String,
    /// Pin the target's version (default: the group's preferred version).
    pub target_version: Option<String>,
    /// The KubeFed system namespace.
    pub namespace: String,
}

/// What `enable` creates: the FederatedTypeConfig and the `Federated<Kind>` CRD.
#[derive(Clone, Debug)]
pub struct EnablePlan {
    /// The FederatedTypeConfig.
    pub ftc: FederatedTypeConfig,
    /// The CRD.
    pub crd: Value,
}

impl EnablePlan {
    /// The CRD's name (`federated<plural>.<group>`).
    pub fn crd_name(&self) -> &str {
        self.crd.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
    }

    /// Both objects as multi-document YAML (`-o yaml`).
    pub fn to_yaml(&self) -> anyhow::Result<String> {
        let docs = vec![serde_json::to_value(&self.ftc)?, self.crd.clone()];
        Ok(serde_saphyr::to_string_multiple(&docs)?)
    }
}

/// Whether a CRD target's `spec.replicas` is an integer (then `spec.retainReplicas` is added).
async fn crd_target_scalable(client: &Client, target: &DiscoveredResource) -> anyhow::Result<bool> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = crds.get_opt(&target.qualified_name()).await.context("read the target's CRD")? else {
        return Ok(false);
    };
    let crd = serde_json::to_value(crd)?;
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(versions
        .iter()
        .filter(|v| v["name"] == target.version.as_str())
        .any(|v| v.pointer("/schema/openAPIV3Schema/properties/spec/properties/replicas/type") == Some(&json!("integer"))))
}

/// Resolve NAME through discovery and build the FederatedTypeConfig and CRD; refuses to change
/// the federated type of an enabled type or to take a CRD another FederatedTypeConfig uses.
pub async fn plan_enable(client: &Client, name: &str, options: &EnableOptions) -> anyhow::Result<EnablePlan> {
    let resources = discover(client, options.target_version.as_deref()).await?;
    let found = resolve(name, &resources, options.target_version.as_deref())?;
    if found.group == options.federated_group {
        bail!("{} is itself a federated type (group {}); enable its target kind instead", found.qualified_name(), found.group);
    }
    let target = found.target_type();
    let mut type_options = FederatedTypeOptions::for_target(&target);
    type_options.federated_group = options.federated_group.clone();
    type_options.federated_version = options.federated_version.clone();
    type_options.target_short_names = found.short_names.clone();
    if !type_options.scalable && !found.group.is_empty() {
        type_options.scalable = crd_target_scalable(client, found).await?;
    }
    let ftc = install::federated_type_config(&target, &type_options, &options.namespace);
    let crd = federated_type_crd_with(&target, &type_options);
    let plan = EnablePlan { ftc, crd };
    // Conflicts with what is enabled already.
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(client.clone(), &options.namespace);
    let ftc_name = install::federated_type_config_name(&target);
    let definition = federated_type_definition(&target, &type_options);
    for existing in ftcs.list(&ListParams::default()).await.context("list FederatedTypeConfigs")?.items {
        let existing_name = existing.metadata.name.clone().unwrap_or_default();
        let fed = &existing.spec.federated_type;
        let same_crd = fed.plural_name == definition.plural && fed.group.as_deref() == Some(definition.group.as_str());
        if existing_name == ftc_name && *fed != plan.ftc.spec.federated_type {
            bail!(
                "{ftc_name} is already enabled with federated type {}.{}/{}; changing the federated type is not supported (disable it first)",
                fed.plural_name,
                fed.group.as_deref().unwrap_or_default(),
                fed.version
            );
        }
        if existing_name != ftc_name && same_crd {
            bail!("the CRD {} is already used by FederatedTypeConfig {existing_name}; choose another --federated-group", plan.crd_name());
        }
    }
    Ok(plan)
}

/// What [`apply_enable`] did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It did not exist.
    Created,
    /// It existed and changed.
    Updated,
    /// It existed as it should be.
    Unchanged,
}

impl Change {
    /// From the object's generation before and after (None before: it did not exist). The
    /// generation moves only with the desired state: a new field manager's entry in
    /// managedFields is not a change worth reporting.
    fn of(before: Option<Option<i64>>, after: Option<i64>) -> Change {
        match before {
            None => Change::Created,
            Some(generation) if generation == after => Change::Unchanged,
            Some(_) => Change::Updated,
        }
    }

    /// `created`, `updated` or `unchanged`, as kubectl prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Updated => "updated",
            Change::Unchanged => "unchanged",
        }
    }
}

/// What [`apply_enable`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enabled {
    /// The CRD.
    pub crd: Change,
    /// The FederatedTypeConfig.
    pub ftc: Change,
}

/// Create or update the plan's CRD and FederatedTypeConfig (server-side apply; unchanged objects
/// are not rewritten).
pub async fn apply_enable(client: &Client, plan: &EnablePlan) -> anyhow::Result<Enabled> {
    let params = PatchParams::apply(ENABLE_FIELD_MANAGER).force();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let before = crds.get_opt(plan.crd_name()).await.context("read the CRD")?.map(|c| c.metadata.generation);
    let after = crds.patch(plan.crd_name(), &params, &Patch::Apply(&plan.crd)).await.with_context(|| format!("apply the CRD {}", plan.crd_name()))?;
    let crd = Change::of(before, after.metadata.generation);
    let namespace = plan.ftc.metadata.namespace.as_deref().unwrap_or(DEFAULT_SYSTEM_NAMESPACE);
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(client.clone(), namespace);
    let name = plan.ftc.metadata.name.clone().unwrap_or_default();
    let before = ftcs.get_opt(&name).await.context("read the FederatedTypeConfig")?.map(|f| f.metadata.generation);
    let after = ftcs.patch(&name, &params, &Patch::Apply(&plan.ftc)).await.with_context(|| format!("apply the FederatedTypeConfig {namespace}/{name}"))?;
    Ok(Enabled { crd, ftc: Change::of(before, after.metadata.generation) })
}

/// What a member joined with `flotilla join` lacks to propagate `plan`'s target, and the command
/// that grants it; `None` when every member's default role covers it (a kind built into
/// Kubernetes outside the withheld groups). A custom kind is covered only in members that served
/// it at join: the others need their role derived again.
pub fn member_role_gap(plan: &EnablePlan) -> Option<String> {
    let target = &plan.ftc.spec.target_type;
    let group = target.group.as_deref().unwrap_or_default();
    let kind = install::federated_type_config_name(target);
    if !join::default_role_covers(group, &target.plural_name) {
        return Some(format!(
            "the default member role withholds {kind}; for each member run `flotilla join NAME --kubeconfig MEMBER.kubeconfig --update --access full` (or `--allow-kinds {kind}`) before objects of this type can reach it"
        ));
    }
    (!join::KUBERNETES_GROUPS.contains(&group)).then(|| {
        format!(
            "members joined before they served {kind} need their role derived again: for each, run `flotilla join NAME --kubeconfig MEMBER.kubeconfig --update` (or join with `--allow-kinds {kind}` ahead of its CRD) before objects of this type can reach it"
        )
    })
}

/// What [`disable`] removed.
#[derive(Debug)]
pub struct Disabled {
    /// The FederatedTypeConfig's name.
    pub ftc: String,
    /// The CRD deleted, with `--delete-crd`.
    pub crd: Option<String>,
}

/// `kubefedctl disable NAME [--delete-crd]`: NAME is a FederatedTypeConfig name or any name
/// `enable` accepts. Sets `propagation: Disabled`, deletes the FederatedTypeConfig and, with
/// `delete_crd`, the `Federated<Kind>` CRD — refused, before anything changes, while objects of
/// that kind exist.
pub async fn disable(client: &Client, name: &str, namespace: &str, delete_crd: bool) -> anyhow::Result<Disabled> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(client.clone(), namespace);
    let ftc = match ftcs.get_opt(name).await.context("read the FederatedTypeConfig")? {
        Some(ftc) => ftc,
        None => {
            let resources = discover(client, None).await?;
            let ftc_name = match resolve(name, &resources, None) {
                Ok(found) => found.qualified_name(),
                Err(e) => bail!("no FederatedTypeConfig {namespace}/{name}, and {e}"),
            };
            ftcs.get_opt(&ftc_name)
                .await
                .context("read the FederatedTypeConfig")?
                .with_context(|| format!("{ftc_name} is not enabled: no FederatedTypeConfig {namespace}/{ftc_name}"))?
        }
    };
    let ftc_name = ftc.metadata.name.clone().unwrap_or_default();
    let fed = &ftc.spec.federated_type;
    let group = fed.group.clone().unwrap_or_default();
    let crd_name = format!("{}.{group}", fed.plural_name);
    if delete_crd {
        let resource = ApiResource {
            api_version: format!("{group}/{}", fed.version),
            group: group.clone(),
            version: fed.version.clone(),
            kind: fed.kind.clone(),
            plural: fed.plural_name.clone(),
        };
        let objects: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match objects.list(&ListParams::default().limit(1)).await {
            Ok(list) => {
                if let Some(first) = list.items.first() {
                    let at = match first.metadata.namespace.as_deref() {
                        Some(ns) => format!("{ns}/{}", first.metadata.name.as_deref().unwrap_or_default()),
                        None => first.metadata.name.clone().unwrap_or_default(),
                    };
                    bail!("cannot delete the CRD {crd_name} while {} objects exist (e.g. {at}); delete them first or disable without --delete-crd", fed.kind);
                }
            }
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e).context(format!("list {} objects", fed.kind)),
        }
    }
    let patch = json!({"spec": {"propagation": "Disabled"}});
    ftcs.patch(&ftc_name, &PatchParams::default(), &Patch::Merge(&patch)).await.with_context(|| format!("disable propagation of {ftc_name}"))?;
    // TODO(kubefed sync path): wait for status.propagationController=NotRunning, as kubefedctl
    // does, once a controller runs per FederatedTypeConfig.
    match ftcs.delete(&ftc_name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_status(&e, 404) => {}
        Err(e) => return Err(e).context(format!("delete the FederatedTypeConfig {ftc_name}")),
    }
    let mut deleted_crd = None;
    if delete_crd {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        match crds.delete(&crd_name, &DeleteParams::default()).await {
            Ok(_) => deleted_crd = Some(crd_name),
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(e).context(format!("delete the CRD {crd_name}")),
        }
    }
    Ok(Disabled { ftc: ftc_name, crd: deleted_crd })
}

/// Resources `federate --contents` never federates: kubefedctl's fixed list, plus the
/// control plane's own bookkeeping (bindings and Works are what federation writes; federated
/// objects are already federated).
pub const CONTENTS_ALWAYS_SKIPPED: [&str; 4] = ["endpoints", "events", "events.events.k8s.io", "propagatedversions.core.kubefed.io"];
const CONTENTS_SKIPPED_GROUPS: [&str; 4] = ["work.karmada.io", "types.kubefed.io", "core.kubefed.io", "scheduling.kubefed.io"];

/// The `Federated<Kind>` of `target` as `kubefedctl federate` writes it: the object without
/// `apiVersion`, `kind`, `status` and every `metadata` field but `labels` as `spec.template`,
/// and a placement selecting every cluster (`clusterSelector.matchLabels: {}`). A namespace's
/// FederatedNamespace lives in that namespace.
pub fn federated_object(target: &Value, federated: &ApiResource) -> Value {
    let mut template = target.clone();
    if let Some(o) = template.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
        o.remove("status");
        let labels = o.get("metadata").and_then(|m| m.get("labels")).cloned();
        match labels {
            Some(l) => {
                o.insert("metadata".into(), json!({"labels": l}));
            }
            None => {
                o.remove("metadata");
            }
        }
    }
    let mut metadata = json!({"name": target.pointer("/metadata/name").cloned().unwrap_or_default()});
    if let Some(ns) = target.pointer("/metadata/namespace") {
        metadata["namespace"] = ns.clone();
    } else if target["apiVersion"] == "v1" && target["kind"] == "Namespace" {
        // A FederatedNamespace lives in the namespace it federates.
        metadata["namespace"] = metadata["name"].clone();
    }
    json!({
        "apiVersion": federated.api_version,
        "kind": federated.kind,
        "metadata": metadata,
        "spec": {"template": template, "placement": {"clusterSelector": {"matchLabels": {}}}},
    })
}

/// The federated type of an enabled FederatedTypeConfig.
pub fn federated_resource(ftc: &FederatedTypeConfig) -> ApiResource {
    let f = &ftc.spec.federated_type;
    let group = f.group.clone().unwrap_or_default();
    let api_version = if group.is_empty() { f.version.clone() } else { format!("{group}/{}", f.version) };
    ApiResource { group, version: f.version.clone(), api_version, kind: f.kind.clone(), plural: f.plural_name.clone() }
}

fn target_resource(r: &DiscoveredResource) -> ApiResource {
    let api_version = if r.group.is_empty() { r.version.clone() } else { format!("{}/{}", r.group, r.version) };
    ApiResource { group: r.group.clone(), version: r.version.clone(), api_version, kind: r.kind.clone(), plural: r.plural.clone() }
}

/// Whether `--skip-api-resources` (or the fixed lists) names `r`: by short name, kind, plural,
/// `plural.group` or a whole group.
pub fn skipped(r: &DiscoveredResource, skip: &[String]) -> bool {
    let qualified = r.qualified_name();
    if CONTENTS_ALWAYS_SKIPPED.contains(&qualified.as_str()) || CONTENTS_SKIPPED_GROUPS.contains(&r.group.as_str()) {
        return true;
    }
    skip.iter().any(|s| {
        let s = s.to_lowercase();
        s == qualified || s == r.plural || s == r.kind.to_lowercase() || r.short_names.contains(&s) || (!r.group.is_empty() && s == r.group)
    })
}

/// `kubefedctl federate`'s options.
#[derive(Clone, Debug, Default)]
pub struct FederateOptions {
    /// The target's namespace (namespaced kinds).
    pub namespace: Option<String>,
    /// Enable the type first when no FederatedTypeConfig exists.
    pub enable_type: bool,
    /// For a namespace: also federate every namespaced object in it.
    pub contents: bool,
    /// Resources `--contents` skips, besides the fixed ones.
    pub skip: Vec<String>,
    /// The KubeFed system namespace.
    pub kubefed_namespace: String,
}

/// One object `federate` would create (and created, unless only printing).
#[derive(Debug)]
pub struct Federated {
    /// `federated<kind>.<group>/<name>`, as kubectl names it.
    pub display: String,
    /// The federated object.
    pub object: Value,
    /// Its type.
    pub resource: ApiResource,
}

/// The FederatedTypeConfig enabling `target`, enabled first under `enable_type` (never while
/// only printing).
async fn enabled_type(client: &Client, target: &DiscoveredResource, options: &FederateOptions, print_only: bool) -> anyhow::Result<FederatedTypeConfig> {
    let ftcs: Api<FederatedTypeConfig> = Api::namespaced(client.clone(), &options.kubefed_namespace);
    let name = target.qualified_name();
    if let Some(ftc) = ftcs.get_opt(&name).await.context("read the FederatedTypeConfig")? {
        return Ok(ftc);
    }
    if !options.enable_type || print_only {
        bail!(
            "{name} is not enabled for federation (no FederatedTypeConfig {}/{name}); run `flotilla enable {name}` or pass --enable-type",
            options.kubefed_namespace
        );
    }
    let enable = EnableOptions {
        federated_group: flotilla_api::federation::kubefed::types::DEFAULT_FEDERATED_GROUP.into(),
        federated_version: flotilla_api::federation::kubefed::types::DEFAULT_FEDERATED_VERSION.into(),
        target_version: Some(target.version.clone()),
        namespace: options.kubefed_namespace.clone(),
    };
    let plan = plan_enable(client, &name, &enable).await?;
    apply_enable(client, &plan).await?;
    Ok(plan.ftc)
}

/// Plan `kubefedctl federate TYPE NAME`: the federated objects for the named object (and with
/// `contents`, a namespace's objects), in creation order.
pub async fn plan_federate(client: &Client, type_name: &str, name: &str, options: &FederateOptions, print_only: bool) -> anyhow::Result<Vec<Federated>> {
    let resources = discover(client, None).await?;
    let target = resolve(type_name, &resources, None)?;
    if target.namespaced && options.namespace.is_none() {
        bail!("{} is namespaced: give the object's namespace with -n", target.qualified_name());
    }
    if options.contents && !(target.group.is_empty() && target.kind == "Namespace") {
        bail!("--contents federates a namespace's objects; {} is not a namespace", target.qualified_name());
    }
    let mut out = Vec::new();
    let read = |r: &DiscoveredResource, ns: Option<&str>| -> Api<DynamicObject> {
        match ns.filter(|_| r.namespaced) {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &target_resource(r)),
            None => Api::all_with(client.clone(), &target_resource(r)),
        }
    };
    let object =
        read(target, options.namespace.as_deref()).get_opt(name).await.with_context(|| format!("read {} {name}", target.qualified_name()))?.with_context(
            || match &options.namespace {
                Some(ns) if target.namespaced => format!("{} {ns}/{name} not found", target.qualified_name()),
                _ => format!("{} {name} not found", target.qualified_name()),
            },
        )?;
    let ftc = enabled_type(client, target, options, print_only).await?;
    let fed = federated_resource(&ftc);
    let mut push = |fed: &ApiResource, obj: &DynamicObject| {
        let object = federated_object(&serde_json::to_value(obj).unwrap_or_default(), fed);
        let display = format!("{}.{}/{}", fed.kind.to_lowercase(), fed.group, obj.metadata.name.as_deref().unwrap_or_default());
        out.push(Federated { display, object, resource: fed.clone() });
    };
    push(&fed, &object);
    if options.contents {
        let mut types: Vec<&DiscoveredResource> = resources.iter().filter(|r| r.namespaced && !r.plural.contains('/') && !skipped(r, &options.skip)).collect();
        types.sort_by_key(|r| r.qualified_name());
        types.dedup_by(|a, b| a.group == b.group && a.plural == b.plural);
        for r in types {
            let list = match read(r, Some(name)).list(&ListParams::default()).await {
                Ok(l) => l,
                // Not listable (create-only reviews and the like).
                Err(e) if is_status(&e, 404) || is_status(&e, 405) => continue,
                Err(e) => return Err(e).with_context(|| format!("list {} in namespace {name}", r.qualified_name())),
            };
            // Objects a controller owns come back from their owner; federate the owner.
            let items: Vec<DynamicObject> = list.items.into_iter().filter(|o| o.metadata.owner_references.as_ref().is_none_or(Vec::is_empty)).collect();
            if items.is_empty() {
                continue;
            }
            let ftc = enabled_type(client, r, options, print_only).await?;
            let fed = federated_resource(&ftc);
            for o in &items {
                push(&fed, o);
            }
        }
    }
    Ok(out)
}

/// Create the planned objects, retrying each for up to `retry` (a CRD just enabled takes a
/// moment to be served). An object that exists already is an error, as kubefedctl's.
pub async fn create_federated(client: &Client, planned: &[Federated], retry: std::time::Duration) -> anyhow::Result<()> {
    for f in planned {
        let obj: DynamicObject = serde_json::from_value(f.object.clone())?;
        let ar = &f.resource;
        let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        };
        let deadline = std::time::Instant::now() + retry;
        loop {
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => break,
                Err(e) if is_status(&e, 409) => bail!("{} already exists", f.display),
                Err(e) if std::time::Instant::now() < deadline && (is_status(&e, 404) || is_status(&e, 503)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("create {}", f.display)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(kind: &str) -> ApiResource {
        ApiResource {
            group: "types.kubefed.io".into(),
            version: "v1beta1".into(),
            api_version: "types.kubefed.io/v1beta1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }
    }

    #[test]
    fn the_template_keeps_only_labels_of_the_metadata() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "status": {},
            "metadata": {"name": "c", "namespace": "n", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}, "annotations": {"x": "y"}, "managedFields": []},
            "data": {"k": "v"}});
        let f = federated_object(&cm, &fed("FederatedConfigMap"));
        assert_eq!(f["metadata"], json!({"name": "c", "namespace": "n"}));
        assert_eq!(f["spec"]["template"], json!({"metadata": {"labels": {"a": "b"}}, "data": {"k": "v"}}));
        assert_eq!(f["spec"]["placement"], json!({"clusterSelector": {"matchLabels": {}}}));
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}, "spec": {"finalizers": ["kubernetes"]}});
        let f = federated_object(&ns, &fed("FederatedNamespace"));
        assert_eq!(f["metadata"], json!({"name": "shop", "namespace": "shop"}));
        assert!(f["spec"]["template"].get("metadata").is_none());
    }

    #[test]
    fn contents_skip_the_fixed_list_the_control_plane_and_what_is_named() {
        let r = |group: &str, plural: &str, kind: &str, short: &[&str]| DiscoveredResource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: String::new(),
            short_names: short.iter().map(|s| s.to_string()).collect(),
            namespaced: true,
        };
        assert!(skipped(&r("", "events", "Event", &["ev"]), &[]));
        assert!(skipped(&r("work.karmada.io", "resourcebindings", "ResourceBinding", &[]), &[]));
        assert!(!skipped(&r("", "configmaps", "ConfigMap", &["cm"]), &[]));
        for by in ["cm", "ConfigMap", "configmaps"] {
            assert!(skipped(&r("", "configmaps", "ConfigMap", &["cm"]), &[by.to_string()]), "{by}");
        }
        assert!(skipped(&r("apps", "deployments", "Deployment", &["deploy"]), &["apps".to_string()]));
        assert!(skipped(&r("apps", "deployments", "Deployment", &["deploy"]), &["deployments.apps".to_string()]));
    }
}
