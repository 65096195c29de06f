//! Registering a member in Push mode (`flotilla join`) and removing it (`flotilla unjoin`).
//!
//! In the member: namespace `karmada-cluster` (label `karmada.io/system=true`), service account
//! `karmada-<cluster>`, and a ClusterRole + ClusterRoleBinding
//! `karmada-controller-manager:karmada-<cluster>` — the names Karmada uses. The role's rules
//! depend on the [`Access`] level:
//! - [`Access::Default`] (least privilege, complete): every resource the member serves at join —
//!   custom resources included — with its `status` subresource, except the RBAC kinds (the
//!   member's escalation check would make them fail anyway: a creator must hold what it grants)
//!   and the admission kinds (which hold the policy that guards this identity, below); nodes are
//!   read only. No wildcards. `--allow-kinds` adds kinds; `flotilla join --update` derives the
//!   rules again from what the member serves then (CRDs installed after join).
//! - [`Access::Full`]: Karmada's rights, `*` on `*` (needed to propagate RBAC objects).
//!
//! The level and the extra kinds are recorded on the role itself ([`ACCESS_ANNOTATION`],
//! [`ALLOW_KINDS_ANNOTATION`]), so an update keeps them unless told otherwise.
//!
//! Flotilla's identity may create Secrets (propagating them needs it) but not service account
//! token Secrets, which would mint credentials for other accounts: a ValidatingAdmissionPolicy
//! `flotilla-member-identity-<cluster>` refuses those from it (ADR 0017).
//!
//! The cluster proxy gets an identity of its own (Karmada's impersonator): service account
//! `karmada-impersonator-<cluster>` whose ClusterRole grants only `impersonate` on users, groups
//! and service accounts, so that a proxied request is made as the caller and the member's RBAC
//! decides what the caller sees.
//!
//! On the control plane: Secret `karmada-cluster/<cluster>` with `token` and `caBundle` (the
//! layout Karmada's tools read), Secret `karmada-cluster/<cluster>-impersonator` with the
//! impersonator's `token`, and the `Cluster` object referencing both (`secretRef`,
//! `impersonatorSecretRef`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine;
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSpec, ClusterSyncMode, LocalSecretReference};
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};

use crate::MemberError;
use crate::discovery::{ServedResource, served_resources};

/// Namespace holding member credentials on the control plane and Flotilla's identity in members.
pub const CLUSTER_NAMESPACE: &str = "karmada-cluster";
/// Label marking Karmada's system namespaces.
pub const SYSTEM_LABEL: &str = "karmada.io/system";
/// Field manager of every write `join` makes.
const MANAGER: &str = "flotilla-join";

/// How much Flotilla may do in a member (`flotilla join --access`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Every kind the member serves at join, with its status, except the [`WITHHELD_GROUPS`];
    /// nodes read only.
    #[default]
    Default,
    /// Karmada's rights: everything.
    Full,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Default => "default",
            Access::Full => "full",
        }
    }
}

impl std::str::FromStr for Access {
    type Err = String;
    fn from_str(s: &str) -> Result<Access, String> {
        match s {
            "default" => Ok(Access::Default),
            "full" => Ok(Access::Full),
            other => Err(format!("unknown access level {other:?}: expected default or full")),
        }
    }
}

/// Annotation on the member role recording its [`Access`] level.
pub const ACCESS_ANNOTATION: &str = "flotilla.io/access";
/// Annotation on the member role recording `--allow-kinds` (`plural.group`, comma-separated).
pub const ALLOW_KINDS_ANNOTATION: &str = "flotilla.io/allow-kinds";
/// Annotation on the Cluster (control plane) carrying the member role's resourceVersion: join and
/// `join --update` set it, and the execution controller retries the cluster's Works at once
/// when it changes (a Work refused for a missing right need not wait for its backoff).
pub const MEMBER_ROLE_ANNOTATION: &str = "flotilla.io/member-role";
/// API groups the default role never grants: RBAC (an identity that may write roles and
/// bindings may grant itself anything) and admission (the policy guarding Flotilla's identity
/// lives there). `--access full` or `--allow-kinds` grant them.
pub const WITHHELD_GROUPS: &[&str] = &["rbac.authorization.k8s.io", "admissionregistration.k8s.io"];
/// The API groups built into every Kubernetes member: the default role of any member covers
/// their kinds (outside the [`WITHHELD_GROUPS`]), whenever it joined.
pub const KUBERNETES_GROUPS: &[&str] = &[
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "discovery.k8s.io",
    "storage.k8s.io",
    "scheduling.k8s.io",
    "node.k8s.io",
    "coordination.k8s.io",
    "certificates.k8s.io",
    "apiextensions.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io",
];
/// Resources the default role only reads: the member's machines (for the status summaries).
pub const READ_ONLY_KINDS: &[(&str, &[&str])] = &[("", &["nodes"])];
const FULL_VERBS: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete"];
const STATUS_VERBS: &[&str] = &["get", "update", "patch"];
const READ_VERBS: &[&str] = &["get", "list", "watch"];

/// Whether the default role grants full control of `resource` in `group` (what a member
/// serving it would get at join).
pub fn default_role_covers(group: &str, resource: &str) -> bool {
    !WITHHELD_GROUPS.contains(&group) && !READ_ONLY_KINDS.iter().any(|(g, rs)| *g == group && rs.contains(&resource))
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What to run to give the member identity of `cluster` the right to `verb` `resource`
/// (`plural.group`, or `plural` for the core group), as a Work's failure names it.
pub fn grant_hint(cluster: &str, resource: &str) -> String {
    let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
    let base = format!("flotilla join {cluster} --kubeconfig <the member's admin kubeconfig> --update");
    if plural.contains('/') && !plural.ends_with("/status") {
        format!("{base} --access full")
    } else if group == RBAC_GROUP {
        // The member's escalation check: an identity may grant only the rights it holds.
        format!(
            "{base} --access full (an RBAC object may grant only what its creator holds, so --allow-kinds {resource} is enough only for rules within the member identity's own rights)"
        )
    } else if default_role_covers(group, plural.trim_end_matches("/status")) {
        format!("{base} (the role is derived from what the member served at join; --update derives it again)")
    } else {
        format!("{base} --access full (or --allow-kinds {resource})")
    }
}

/// The member-side names for `cluster`.
pub fn service_account_name(cluster: &str) -> String {
    format!("karmada-{cluster}")
}
pub fn role_name(cluster: &str) -> String {
    format!("karmada-controller-manager:karmada-{cluster}")
}
fn token_secret_name(cluster: &str) -> String {
    format!("karmada-{cluster}-token")
}
/// The cluster proxy's identity in the member (service account, ClusterRole and binding).
pub fn impersonator_name(cluster: &str) -> String {
    format!("karmada-impersonator-{cluster}")
}
fn impersonator_token_secret_name(cluster: &str) -> String {
    format!("karmada-impersonator-{cluster}-token")
}
/// The control plane's Secret holding the impersonator's token.
pub fn impersonator_secret_name(cluster: &str) -> String {
    format!("{cluster}-impersonator")
}

/// The only rule of the impersonator's role: acting as a user, a group or a service account.
pub fn impersonator_rules() -> Vec<PolicyRule> {
    vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["users".into(), "groups".into(), "serviceaccounts".into()]),
        verbs: vec!["impersonate".into()],
        ..Default::default()
    }]
}

/// What `prepare_member` made in the member and `register` stores on the control plane.
#[derive(Clone)]
pub struct MemberCredentials {
    /// Flotilla's (least-privilege) identity.
    pub token: String,
    /// The cluster proxy's identity, which may only impersonate.
    pub impersonator_token: String,
    /// The member's id (the `kube-system` namespace UID).
    pub id: Option<String>,
    /// The member role's resourceVersion ([`MEMBER_ROLE_ANNOTATION`]).
    pub role_version: Option<String>,
}

impl std::fmt::Debug for MemberCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberCredentials").field("id", &self.id).finish_non_exhaustive()
    }
}

/// `resource.group` (or `resource` for the core group) → `(group, resource)`.
pub fn parse_kind(spec: &str) -> Result<(String, String), String> {
    let spec = spec.trim();
    if spec.is_empty() || spec == "*" || spec.starts_with("*.*") {
        return Err(format!("{spec:?}: name a resource and its group (e.g. widgets.example.com); a wildcard over all groups is not allowed"));
    }
    let (resource, group) = spec.split_once('.').unwrap_or((spec, ""));
    if resource.is_empty() || !resource.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*') {
        return Err(format!("{spec:?}: expected <plural resource>.<group>, e.g. widgets.example.com"));
    }
    Ok((group.to_string(), resource.to_string()))
}

/// The rules of the member role at `access`, for a member serving `served`, with the extra
/// kinds (`(group, plural)`).
pub fn role_rules(access: Access, served: &[ServedResource], extra: &[(String, String)]) -> Vec<PolicyRule> {
    let strings = |items: &[&str]| items.iter().map(|v| (*v).to_string()).collect::<Vec<_>>();
    if access == Access::Full {
        return vec![
            PolicyRule { api_groups: Some(strings(&["*"])), resources: Some(strings(&["*"])), verbs: strings(&["*"]), ..Default::default() },
            PolicyRule { non_resource_urls: Some(strings(&["*"])), verbs: strings(&["get"]), ..Default::default() },
        ];
    }
    let mut full: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in served {
        if !r.name.contains('/') && r.verbs.iter().any(|v| v == "get") && default_role_covers(&r.group, &r.name) {
            full.entry(r.group.clone()).or_default().insert(r.name.clone());
        }
    }
    for (group, resource) in extra {
        full.entry(group.clone()).or_default().insert(resource.clone());
    }
    let mut status: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in served {
        if let Some(parent) = r.name.strip_suffix("/status")
            && full.get(&r.group).is_some_and(|g| g.contains(parent))
        {
            status.entry(r.group.clone()).or_default().insert(r.name.clone());
        }
    }
    let rule = |group: &str, resources: BTreeSet<String>, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.into_iter().collect()),
        verbs: strings(verbs),
        ..Default::default()
    };
    let mut rules = Vec::new();
    for (group, resources) in full {
        let status = status.remove(&group);
        rules.push(rule(&group, resources, FULL_VERBS));
        if let Some(status) = status {
            rules.push(rule(&group, status, STATUS_VERBS));
        }
    }
    for (group, resources) in READ_ONLY_KINDS {
        rules.push(rule(group, resources.iter().map(|r| (*r).to_string()).collect(), READ_VERBS));
    }
    rules
}

/// The member role for `opts`, from what the member serves now.
async fn member_role(member: &kube::Client, opts: &JoinOptions) -> Result<ClusterRole, MemberError> {
    let c = opts.cluster.as_str();
    let served = match opts.access {
        Access::Full => Vec::new(),
        Access::Default => served_resources(member).await.map_err(api_err(c, "discovering what the member serves"))?,
    };
    let allow = opts.extra_kinds.iter().map(|(g, r)| if g.is_empty() { r.clone() } else { format!("{r}.{g}") }).collect::<Vec<_>>().join(",");
    let mut annotations = BTreeMap::from([(ACCESS_ANNOTATION.to_string(), opts.access.as_str().to_string())]);
    if !allow.is_empty() {
        annotations.insert(ALLOW_KINDS_ANNOTATION.to_string(), allow);
    }
    Ok(ClusterRole {
        metadata: ObjectMeta { name: Some(role_name(c)), annotations: Some(annotations), ..Default::default() },
        rules: Some(role_rules(opts.access, &served, &opts.extra_kinds)),
        ..Default::default()
    })
}

/// The access level and extra kinds the member role of `cluster` records, or `None` when the
/// member has no such role (it was never joined under that name).
pub async fn recorded_access(member: &kube::Client, cluster: &str) -> Result<Option<(Access, Vec<(String, String)>)>, MemberError> {
    let roles: Api<ClusterRole> = Api::all(member.clone());
    let Some(role) = roles.get_opt(&role_name(cluster)).await.map_err(api_err(cluster, "reading the member role"))? else { return Ok(None) };
    let annotations = role.metadata.annotations.unwrap_or_default();
    let access = annotations.get(ACCESS_ANNOTATION).and_then(|a| a.parse().ok()).unwrap_or_default();
    let kinds = annotations.get(ALLOW_KINDS_ANNOTATION).map(|k| k.split(',').filter_map(|k| parse_kind(k).ok()).collect()).unwrap_or_default();
    Ok(Some((access, kinds)))
}

/// `flotilla join --update`: derive the member role again from what the member serves now (and
/// `opts`' access and kinds), leaving the identity, its tokens and the Cluster as they are.
/// Returns the number of rules.
/// Returns the number of rules and the role's resourceVersion.
pub async fn update_member_role(member: &kube::Client, opts: &JoinOptions) -> Result<(usize, Option<String>), MemberError> {
    let role = member_role(member, opts).await?;
    let roles: Api<ClusterRole> = Api::all(member.clone());
    let applied =
        roles.patch(&role_name(&opts.cluster), &apply_params(), &Patch::Apply(&role)).await.map_err(api_err(&opts.cluster, "updating the cluster role"))?;
    Ok((role.rules.as_ref().map_or(0, Vec::len), applied.metadata.resource_version))
}

/// Record the member role's `version` on the Cluster ([`MEMBER_ROLE_ANNOTATION`]).
pub async fn record_member_role(control_plane: &kube::Client, cluster: &str, version: &str) -> Result<(), MemberError> {
    let clusters: Api<Cluster> = Api::all(control_plane.clone());
    let patch = serde_json::json!({"metadata": {"annotations": {MEMBER_ROLE_ANNOTATION: version}}});
    clusters.patch(cluster, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(api_err(cluster, "recording the member role on the Cluster"))?;
    Ok(())
}

/// Everything `join` needs to know.
#[derive(Clone, Debug, Default)]
pub struct JoinOptions {
    pub cluster: String,
    pub provider: Option<String>,
    pub region: Option<String>,
    pub zones: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub extra_kinds: Vec<(String, String)>,
    /// How much Flotilla may do in the member.
    pub access: Access,
    /// How long to wait for the member's token controller to fill the token Secret before
    /// falling back to a TokenRequest.
    pub token_wait: Duration,
    /// Lifetime of a TokenRequest token (fallback only).
    pub token_lifetime: Duration,
}

/// The member's API endpoint and trust as its kubeconfig gives them.
#[derive(Clone)]
pub struct MemberEndpoint {
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    pub insecure: bool,
    pub proxy_url: Option<String>,
}

impl std::fmt::Debug for MemberEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberEndpoint").field("server", &self.server).finish_non_exhaustive()
    }
}

impl MemberEndpoint {
    /// From a resolved kubeconfig (`kube::Config`).
    pub fn from_config(config: &kube::Config) -> MemberEndpoint {
        let ca_pem = config.root_cert.as_ref().map(|certs| certs.iter().map(|der| der_to_pem(der)).collect::<String>().into_bytes());
        MemberEndpoint {
            server: config.cluster_url.to_string().trim_end_matches('/').to_string(),
            ca_pem,
            insecure: config.accept_invalid_certs,
            proxy_url: config.proxy_url.as_ref().map(|u| u.to_string()),
        }
    }
}

fn der_to_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn api_err(cluster: &str, step: impl Into<String>) -> impl FnOnce(kube::Error) -> MemberError {
    let cluster = cluster.to_string();
    let step = step.into();
    move |source| MemberError::Api { cluster, step, source }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// Create (or bring up to date) Flotilla's identity and the cluster proxy's in the member;
/// returns their tokens and the member's id (the `kube-system` namespace UID).
pub async fn prepare_member(member: &kube::Client, opts: &JoinOptions, progress: &mut dyn FnMut(&str)) -> Result<MemberCredentials, MemberError> {
    let c = opts.cluster.as_str();
    let namespaces: Api<Namespace> = Api::all(member.clone());
    let id = namespaces.get_opt("kube-system").await.map_err(api_err(c, "reading namespace kube-system"))?.and_then(|n| n.metadata.uid);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(CLUSTER_NAMESPACE.into()),
            labels: Some([(SYSTEM_LABEL.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces.patch(CLUSTER_NAMESPACE, &apply_params(), &Patch::Apply(&ns)).await.map_err(api_err(c, "creating namespace karmada-cluster"))?;
    let sa_name = service_account_name(c);
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    let sa = ServiceAccount { metadata: ObjectMeta { name: Some(sa_name.clone()), ..Default::default() }, ..Default::default() };
    sas.patch(&sa_name, &apply_params(), &Patch::Apply(&sa)).await.map_err(api_err(c, "creating the service account"))?;
    progress(&format!("member: service account {CLUSTER_NAMESPACE}/{sa_name}"));

    let role = member_role(member, opts).await?;
    let roles: Api<ClusterRole> = Api::all(member.clone());
    let role_version =
        roles.patch(&role_name(c), &apply_params(), &Patch::Apply(&role)).await.map_err(api_err(c, "creating the cluster role"))?.metadata.resource_version;
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta { name: Some(role_name(c)), ..Default::default() },
        role_ref: RoleRef { api_group: Some("rbac.authorization.k8s.io".into()), kind: "ClusterRole".into(), name: role_name(c) },
        subjects: Some(vec![Subject { kind: "ServiceAccount".into(), name: sa_name.clone(), namespace: Some(CLUSTER_NAMESPACE.into()), ..Default::default() }]),
    };
    let bindings: Api<ClusterRoleBinding> = Api::all(member.clone());
    bindings.patch(&role_name(c), &apply_params(), &Patch::Apply(&binding)).await.map_err(api_err(c, "binding the cluster role"))?;
    let rules = role.rules.as_ref().map_or(0, Vec::len);
    match opts.access {
        Access::Default => progress(&format!("member: cluster role {} ({rules} rules over the kinds the member serves, no wildcards)", role_name(c))),
        Access::Full => progress(&format!("member: cluster role {} (full access: * on *)", role_name(c))),
    }
    let token = service_account_token(member, opts, &sa_name, &token_secret_name(c), progress).await?;

    let imp = impersonator_name(c);
    let sa = ServiceAccount { metadata: ObjectMeta { name: Some(imp.clone()), ..Default::default() }, ..Default::default() };
    sas.patch(&imp, &apply_params(), &Patch::Apply(&sa)).await.map_err(api_err(c, "creating the impersonator service account"))?;
    let role = ClusterRole { metadata: ObjectMeta { name: Some(imp.clone()), ..Default::default() }, rules: Some(impersonator_rules()), ..Default::default() };
    roles.patch(&imp, &apply_params(), &Patch::Apply(&role)).await.map_err(api_err(c, "creating the impersonator's cluster role"))?;
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta { name: Some(imp.clone()), ..Default::default() },
        role_ref: RoleRef { api_group: Some("rbac.authorization.k8s.io".into()), kind: "ClusterRole".into(), name: imp.clone() },
        subjects: Some(vec![Subject { kind: "ServiceAccount".into(), name: imp.clone(), namespace: Some(CLUSTER_NAMESPACE.into()), ..Default::default() }]),
    };
    bindings.patch(&imp, &apply_params(), &Patch::Apply(&binding)).await.map_err(api_err(c, "binding the impersonator's cluster role"))?;
    progress(&format!("member: cluster proxy identity {CLUSTER_NAMESPACE}/{imp} (impersonate only)"));
    let impersonator_token = service_account_token(member, opts, &imp, &impersonator_token_secret_name(c), progress).await?;
    guard_identity(member, c, progress).await?;
    Ok(MemberCredentials { token, impersonator_token, id, role_version })
}

/// The name of the admission policy (and its binding) that keeps Flotilla's member identity
/// from minting credentials.
pub fn guard_name(cluster: &str) -> String {
    format!("flotilla-member-identity-{cluster}")
}

fn admission_resource(kind: &str) -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind))
}

/// RBAC cannot restrict a Secret's type: with `create secrets` (which propagating Secrets needs)
/// Flotilla's identity could create a `kubernetes.io/service-account-token` Secret for any
/// account — a privileged one in kube-system — and read the token the member puts in it. A
/// ValidatingAdmissionPolicy, bound with Deny, refuses that request from Flotilla's identity
/// only (ADR 0017). A member that does not serve ValidatingAdmissionPolicy (Kubernetes before
/// 1.30) goes without, and join says so.
async fn guard_identity(member: &kube::Client, c: &str, progress: &mut dyn FnMut(&str)) -> Result<(), MemberError> {
    use kube::api::DynamicObject;
    let name = guard_name(c);
    let user = format!("system:serviceaccount:{CLUSTER_NAMESPACE}:{}", service_account_name(c));
    let policy: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]}]},
            "matchConditions": [{"name": "flotilla-member-identity", "expression": format!("request.userInfo.username == '{user}'")}],
            "validations": [{
                "expression": "object.type != 'kubernetes.io/service-account-token'",
                "message": "Flotilla's member identity may not create or update service account token Secrets: they would mint credentials for accounts it does not own",
                "reason": "Forbidden",
            }],
        },
    }))
    .map_err(|e| MemberError::Other { cluster: c.into(), message: e.to_string() })?;
    let binding: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }))
    .map_err(|e| MemberError::Other { cluster: c.into(), message: e.to_string() })?;
    let policies: Api<DynamicObject> = Api::all_with(member.clone(), &admission_resource("ValidatingAdmissionPolicy"));
    match policies.patch(&name, &apply_params(), &Patch::Apply(&policy)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            progress("member: no ValidatingAdmissionPolicy (Kubernetes before 1.30): Flotilla's identity could create service account token Secrets there");
            return Ok(());
        }
        Err(e) => return Err(api_err(c, "installing the admission policy that guards Flotilla's identity")(e)),
    }
    let bindings: Api<DynamicObject> = Api::all_with(member.clone(), &admission_resource("ValidatingAdmissionPolicyBinding"));
    bindings
        .patch(&name, &apply_params(), &Patch::Apply(&binding))
        .await
        .map_err(api_err(c, "binding the admission policy that guards Flotilla's identity"))?;
    // The member's admission plugin picks policies up from a cache: join returns once a dry run
    // of the refused request, made as Flotilla's identity, is refused.
    let probe = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": format!("{name}-probe"), "namespace": CLUSTER_NAMESPACE, "annotations": {"kubernetes.io/service-account.name": service_account_name(c)}}});
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req = http::Request::post(format!("/api/v1/namespaces/{CLUSTER_NAMESPACE}/secrets?dryRun=All"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("Impersonate-User", user.as_str())
            .body(probe.to_string().into_bytes())
            .map_err(|e| MemberError::Other { cluster: c.into(), message: e.to_string() })?;
        match member.request::<serde_json::Value>(req).await {
            Err(kube::Error::Api(s)) if s.message.contains("may not create or update service account token Secrets") => break,
            // The joining user may not impersonate: nothing to wait with.
            Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("impersonate") => break,
            _ if Instant::now() >= deadline => {
                return Err(MemberError::Other { cluster: c.into(), message: format!("the admission policy {name} did not take effect within 30s") });
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    progress(&format!("member: admission policy {name} (no service account token Secrets from Flotilla's identity)"));
    Ok(())
}

/// A long-lived token: the member's token controller fills a `kubernetes.io/service-account-token`
/// Secret; without one (no controller manager) a TokenRequest of `token_lifetime`.
async fn service_account_token(
    member: &kube::Client,
    opts: &JoinOptions,
    sa_name: &str,
    secret_name: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<String, MemberError> {
    let c = opts.cluster.as_str();
    let sa_name = sa_name.to_string();
    let secrets: Api<Secret> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    let name = secret_name.to_string();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some([("kubernetes.io/service-account.name".to_string(), sa_name.clone())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/service-account-token".into()),
        ..Default::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(api_err(c, "creating the token secret")(e)),
    }
    let deadline = Instant::now() + opts.token_wait;
    loop {
        let s = secrets.get_opt(&name).await.map_err(api_err(c, "reading the token secret"))?;
        if let Some(token) = s.and_then(|s| s.data).and_then(|d| d.get("token").cloned()).filter(|t| !t.0.is_empty()) {
            progress(&format!("member: token from secret {CLUSTER_NAMESPACE}/{name}"));
            return Ok(String::from_utf8_lossy(&token.0).into_owned());
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(opts.token_lifetime.as_secs() as i64), ..Default::default() }),
        ..Default::default()
    };
    let answer = sas
        .create_token_request(&sa_name, &PostParams::default(), &request)
        .await
        .map_err(api_err(c, "requesting a service account token (the member's token controller did not fill the token secret)"))?;
    let token = answer.status.and_then(|s| s.token).unwrap_or_default();
    if token.is_empty() {
        return Err(MemberError::Other { cluster: c.into(), message: "the member returned an empty service account token".into() });
    }
    progress(&format!("member: token from a TokenRequest (expires in {}s; re-run join to renew)", opts.token_lifetime.as_secs()));
    Ok(token)
}

/// Store the credentials and create (or update) the Cluster on the control plane.
pub async fn register(control_plane: &kube::Client, opts: &JoinOptions, endpoint: &MemberEndpoint, creds: &MemberCredentials) -> Result<Cluster, MemberError> {
    let (token, id) = (creds.token.as_str(), creds.id.clone());
    let c = opts.cluster.as_str();
    let namespaces: Api<Namespace> = Api::all(control_plane.clone());
    let ns = Namespace { metadata: ObjectMeta { name: Some(CLUSTER_NAMESPACE.into()), ..Default::default() }, ..Default::default() };
    namespaces
        .patch(CLUSTER_NAMESPACE, &apply_params(), &Patch::Apply(&ns))
        .await
        .map_err(api_err(c, "creating namespace karmada-cluster on the control plane"))?;
    let mut data = BTreeMap::new();
    data.insert("token".to_string(), ByteString(token.as_bytes().to_vec()));
    if let Some(ca) = &endpoint.ca_pem {
        data.insert("caBundle".to_string(), ByteString(ca.clone()));
    }
    let secret = Secret {
        metadata: ObjectMeta { name: Some(c.to_string()), namespace: Some(CLUSTER_NAMESPACE.into()), ..Default::default() },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::namespaced(control_plane.clone(), CLUSTER_NAMESPACE);
    secrets.patch(c, &apply_params(), &Patch::Apply(&secret)).await.map_err(api_err(c, "storing the member credential"))?;
    let imp = impersonator_secret_name(c);
    let secret = Secret {
        metadata: ObjectMeta { name: Some(imp.clone()), namespace: Some(CLUSTER_NAMESPACE.into()), ..Default::default() },
        type_: Some("Opaque".into()),
        data: Some([("token".to_string(), ByteString(creds.impersonator_token.as_bytes().to_vec()))].into()),
        ..Default::default()
    };
    secrets.patch(&imp, &apply_params(), &Patch::Apply(&secret)).await.map_err(api_err(c, "storing the cluster proxy's credential"))?;
    let mut cluster = cluster_object(opts, endpoint, id);
    if let Some(v) = &creds.role_version {
        cluster.metadata.annotations = Some([(MEMBER_ROLE_ANNOTATION.to_string(), v.clone())].into());
    }
    let clusters: Api<Cluster> = Api::all(control_plane.clone());
    let mut value = serde_json::to_value(&cluster).map_err(|e| MemberError::Other { cluster: c.into(), message: e.to_string() })?;
    value["apiVersion"] = "cluster.karmada.io/v1alpha1".into();
    value["kind"] = "Cluster".into();
    clusters.patch(c, &apply_params(), &Patch::Apply(&value)).await.map_err(api_err(c, "creating the Cluster object"))
}

/// The Cluster `register` applies. It carries the default resource models itself: Karmada's
/// aggregated apiserver (and Flotilla's admission) default them on create, a plain
/// kube-apiserver host serving the CRDs does not.
fn cluster_object(opts: &JoinOptions, endpoint: &MemberEndpoint, id: Option<String>) -> Cluster {
    let c = opts.cluster.as_str();
    let mut zones = opts.zones.clone();
    zones.retain(|z| !z.is_empty());
    let spec = ClusterSpec {
        id,
        sync_mode: ClusterSyncMode::Push,
        api_endpoint: Some(endpoint.server.clone()),
        secret_ref: Some(LocalSecretReference { namespace: CLUSTER_NAMESPACE.into(), name: c.to_string() }),
        impersonator_secret_ref: Some(LocalSecretReference { namespace: CLUSTER_NAMESPACE.into(), name: impersonator_secret_name(c) }),
        insecure_skip_tls_verification: endpoint.insecure.then_some(true),
        proxy_url: endpoint.proxy_url.clone(),
        provider: opts.provider.clone(),
        region: opts.region.clone(),
        zones: (!zones.is_empty()).then_some(zones),
        resource_models: Some(flotilla_api::admission::karmada::default_resource_models()),
        ..Default::default()
    };
    let mut cluster = Cluster::new(c, spec);
    cluster.metadata.labels = (!opts.labels.is_empty()).then(|| opts.labels.clone());
    cluster
}

/// Remove Flotilla's identity and the cluster proxy's from the member (service accounts, roles,
/// bindings, token secrets).
/// The `karmada-cluster` namespace stays when anything else lives in it.
pub async fn clean_member(member: &kube::Client, cluster: &str) -> Result<(), MemberError> {
    let ignore_404 = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    };
    let dp = DeleteParams::default();
    let bindings: Api<ClusterRoleBinding> = Api::all(member.clone());
    ignore_404(bindings.delete(&role_name(cluster), &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the cluster role binding"))?;
    let roles: Api<ClusterRole> = Api::all(member.clone());
    ignore_404(roles.delete(&role_name(cluster), &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the cluster role"))?;
    let secrets: Api<Secret> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    ignore_404(secrets.delete(&token_secret_name(cluster), &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the token secret"))?;
    let sas: Api<ServiceAccount> = Api::namespaced(member.clone(), CLUSTER_NAMESPACE);
    ignore_404(sas.delete(&service_account_name(cluster), &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the service account"))?;
    let imp = impersonator_name(cluster);
    ignore_404(bindings.delete(&imp, &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the impersonator's binding"))?;
    ignore_404(roles.delete(&imp, &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the impersonator's role"))?;
    ignore_404(secrets.delete(&impersonator_token_secret_name(cluster), &dp).await.map(|_| ()))
        .map_err(api_err(cluster, "deleting the impersonator's token secret"))?;
    ignore_404(sas.delete(&imp, &dp).await.map(|_| ())).map_err(api_err(cluster, "deleting the impersonator service account"))?;
    let guard = guard_name(cluster);
    for kind in ["ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"] {
        let api: Api<kube::api::DynamicObject> = Api::all_with(member.clone(), &admission_resource(kind));
        ignore_404(api.delete(&guard, &dp).await.map(|_| ())).map_err(api_err(cluster, format!("deleting the {kind}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_carries_karmadas_default_resource_models() {
        let opts = JoinOptions {
            cluster: "m1".into(),
            provider: None,
            region: Some("r".into()),
            zones: vec!["".into(), "z1".into()],
            labels: BTreeMap::new(),
            extra_kinds: vec![],
            access: Access::Default,
            token_wait: Duration::ZERO,
            token_lifetime: Duration::ZERO,
        };
        let endpoint = MemberEndpoint { server: "https://m1:6443".into(), ca_pem: None, insecure: false, proxy_url: None };
        let cluster = cluster_object(&opts, &endpoint, Some("uid".into()));
        let models = cluster.spec.resource_models.as_ref().unwrap();
        assert_eq!(models.len(), 9);
        assert_eq!(models[0].ranges[0].min.0, "0");
        assert_eq!(models[8].ranges[1].max.0, "9223372036854775807");
        assert_eq!(cluster.spec.zones, Some(vec!["z1".to_string()]));
        assert_eq!(cluster.spec.secret_ref.as_ref().map(|r| (r.namespace.as_str(), r.name.as_str())), Some((CLUSTER_NAMESPACE, "m1")));
    }

    fn served(items: &[(&str, &str, &[&str])]) -> Vec<ServedResource> {
        items.iter().map(|(g, n, v)| ServedResource { group: (*g).into(), name: (*n).into(), verbs: v.iter().map(|v| (*v).to_string()).collect() }).collect()
    }

    const ALL: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

    #[test]
    fn the_default_role_covers_what_the_member_serves_without_wildcards_rbac_or_admission() {
        let member = served(&[
            ("", "pods", ALL),
            ("", "pods/status", &["get", "patch", "update"]),
            ("", "pods/exec", &["create", "get"]),
            ("", "serviceaccounts/token", &["create"]),
            ("", "nodes", ALL),
            ("", "bindings", &["create"]),
            ("apps", "deployments", ALL),
            ("apps", "deployments/status", &["get", "patch", "update"]),
            ("apps", "deployments/scale", &["get", "patch", "update"]),
            ("example.com", "widgets", ALL),
            ("example.com", "widgets/status", &["get", "patch", "update"]),
            ("rbac.authorization.k8s.io", "roles", ALL),
            ("admissionregistration.k8s.io", "validatingadmissionpolicies", ALL),
            ("authentication.k8s.io", "tokenreviews", &["create"]),
        ]);
        let rules = role_rules(Access::Default, &member, &[("istio.io".into(), "gateways".into())]);
        for r in &rules {
            assert!(!r.verbs.iter().any(|v| v.contains('*')), "{r:?}");
            assert!(!r.resources.iter().flatten().any(|x| x.contains('*')), "{r:?}");
            assert!(!r.api_groups.iter().flatten().any(|x| x.contains('*')), "{r:?}");
        }
        let find = |group: &str, verbs: &[&str]| {
            rules.iter().find(|r| r.api_groups == Some(vec![group.to_string()]) && r.verbs == verbs).and_then(|r| r.resources.clone()).unwrap_or_default()
        };
        assert_eq!(find("", FULL_VERBS), vec!["pods"], "no create-only resources, nodes read only");
        assert_eq!(find("", STATUS_VERBS), vec!["pods/status"], "status only: no exec, no tokens");
        assert_eq!(find("", READ_VERBS), vec!["nodes"]);
        assert_eq!(find("apps", FULL_VERBS), vec!["deployments"]);
        assert_eq!(find("apps", STATUS_VERBS), vec!["deployments/status"]);
        assert_eq!(find("example.com", FULL_VERBS), vec!["widgets"]);
        assert_eq!(find("example.com", STATUS_VERBS), vec!["widgets/status"]);
        assert_eq!(find("istio.io", FULL_VERBS), vec!["gateways"], "--allow-kinds adds a kind the member did not serve yet");
        for withheld in WITHHELD_GROUPS {
            assert!(!rules.iter().any(|r| r.api_groups == Some(vec![withheld.to_string()])), "{withheld} granted: {rules:?}");
        }
        assert!(!rules.iter().any(|r| r.api_groups == Some(vec!["authentication.k8s.io".into()])), "{rules:?}");
    }

    #[test]
    fn full_access_is_karmadas_role() {
        let rules = role_rules(Access::Full, &[], &[]);
        assert_eq!(rules[0].api_groups, Some(vec!["*".to_string()]));
        assert_eq!((rules[0].resources.clone(), rules[0].verbs.clone()), (Some(vec!["*".to_string()]), vec!["*".to_string()]));
        assert_eq!((rules[1].non_resource_urls.clone(), rules[1].verbs.clone()), (Some(vec!["*".to_string()]), vec!["get".to_string()]));
        assert_eq!("full".parse::<Access>(), Ok(Access::Full));
        assert!("admin".parse::<Access>().unwrap_err().contains("default or full"));
    }

    #[test]
    fn a_refused_right_names_the_command_that_grants_it() {
        assert!(grant_hint("m1", "roles.rbac.authorization.k8s.io").contains("--update --access full (an RBAC object may grant only what its creator holds"));
        assert!(
            grant_hint("m1", "validatingwebhookconfigurations.admissionregistration.k8s.io")
                .ends_with("--access full (or --allow-kinds validatingwebhookconfigurations.admissionregistration.k8s.io)")
        );
        assert!(grant_hint("m1", "widgets.example.com").contains("flotilla join m1 --kubeconfig <the member's admin kubeconfig> --update (the role"));
        assert!(grant_hint("m1", "pods/exec").ends_with("--access full"));
        assert!(grant_hint("m1", "nodes").ends_with("--allow-kinds nodes)"));
    }

    #[test]
    fn kinds_parse_as_resource_dot_group() {
        assert_eq!(parse_kind("widgets.example.com").unwrap(), ("example.com".into(), "widgets".into()));
        assert_eq!(parse_kind("events").unwrap(), ("".into(), "events".into()));
        assert!(parse_kind("*").is_err());
        assert!(parse_kind("Widgets.example.com").is_err());
    }

    #[test]
    fn pem_round_trips() {
        let pem = der_to_pem(&[1, 2, 3, 4]);
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\nAQIDBA==\n"));
    }
}
