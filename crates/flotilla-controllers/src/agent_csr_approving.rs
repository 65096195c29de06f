//! Karmada's `agentcsrapproving`: approves a pull agent's CertificateSigningRequest (signer
//! `kubernetes.io/kube-apiserver-client`, O `system:karmada:agents`, CN
//! `system:karmada:agent:<cluster>`, no alternative names, the agent usages) once a
//! SubjectAccessReview says its requester may: `create certificatesigningrequests/selfclusteragent`
//! for an agent renewing its own certificate (requester = CN), else `…/clusteragent` (a bootstrap
//! token registering). Approval is `Approved`, reason `AutoApproved`, as Karmada writes it.
//!
//! Flotilla's differences (ADR 0028): before approving a registration it creates the agent's
//! control-plane RBAC with Karmada's names — ClusterRole and binding `system:karmada:<cluster>:agent`,
//! Role and binding `…:agent-secret` in `karmada-cluster`, `…:agent-work` in
//! `karmada-es-<cluster>` (and that namespace) — so the registering side never holds RBAC
//! rights; the agent's own list and watch of Clusters and its Lease are narrowed to its cluster.
//! A bootstrap token bound to a cluster is approved only for that cluster's agent. Karmada's
//! `system:karmada:agent:rbac-generator` request (`*` on `*`, karmada#7147) is denied with the
//! reason.

use std::sync::Arc;

use flotilla_api::bootstrap_token as bt;
use flotilla_api::certificates as csr;
use flotilla_api::federation::karmada::names::execution_space;
use flotilla_runtime::{Next, Runtime};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub const NAME: &str = "agent-csr-approving-controller";
/// The field manager of the RBAC it writes.
const MANAGER: &str = "flotilla-agent-csr-approver";
/// Where the agents' credentials Secrets live.
pub const CLUSTER_SECRET_NAMESPACE: &str = "karmada-cluster";
/// Holds the agent's rights in its execution space until its last Work is gone.
pub const AGENT_ACCESS_FINALIZER: &str = "flotilla.io/agent-access";
/// Karmada's name for the identity `karmadactl register` uses to write agent RBAC itself.
pub const RBAC_GENERATOR: &str = "system:karmada:agent:rbac-generator";

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Skip,
    Deny(String),
    /// Ask the SubjectAccessReview for this subresource; `cluster` is the agent's cluster.
    Review {
        subresource: &'static str,
        cluster: String,
    },
}

fn decide(obj: &Value) -> Decision {
    if csr::certificate(obj).is_some() || csr::has_condition(obj, csr::APPROVED) || csr::has_condition(obj, csr::DENIED) {
        return Decision::Skip;
    }
    if csr::signer_name(obj) != csr::KUBE_APISERVER_CLIENT {
        return Decision::Skip;
    }
    let Some(subject) = csr::subject(obj) else { return Decision::Skip };
    if subject.common_name == RBAC_GENERATOR {
        return Decision::Deny(format!(
            "Flotilla creates a pull agent's RBAC itself when it approves the agent's certificate; the {RBAC_GENERATOR} identity ('*' on '*', karmada#7147) is never issued"
        ));
    }
    if csr::agent_request_error(&subject, &csr::usages(obj)).is_some() {
        return Decision::Skip;
    }
    let cluster = subject.common_name.trim_start_matches(csr::AGENT_USER_PREFIX).to_string();
    let requester = obj.pointer("/spec/username").and_then(Value::as_str).unwrap_or("");
    if requester == subject.common_name {
        return Decision::Review { subresource: "selfclusteragent", cluster };
    }
    let groups: Vec<String> =
        obj.pointer("/spec/groups").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect()).unwrap_or_default();
    if let Some(bound) = bt::bound_cluster(&groups)
        && bound != cluster
    {
        return Decision::Deny(format!("the bootstrap token is bound to cluster {bound:?}, not {cluster:?}"));
    }
    Decision::Review { subresource: "clusteragent", cluster }
}

/// Karmada's names of a cluster agent's RBAC objects: the ClusterRole and binding, the Role and
/// binding for its Secrets in `karmada-cluster`, and those for its Works in its execution space.
pub struct AgentRbacNames {
    pub agent: String,
    pub secret: String,
    pub work: String,
}

impl AgentRbacNames {
    pub fn of(cluster: &str) -> AgentRbacNames {
        AgentRbacNames {
            agent: format!("system:karmada:{cluster}:agent"),
            secret: format!("system:karmada:{cluster}:agent-secret"),
            work: format!("system:karmada:{cluster}:agent-work"),
        }
    }
}

/// The agent's RBAC in the control plane: Karmada's objects and names, narrowed where a rule
/// can name its object.
pub fn agent_rbac(cluster: &str) -> Vec<Value> {
    let AgentRbacNames { agent: name, secret, work } = AgentRbacNames::of(cluster);
    let es = execution_space(cluster);
    let user = json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": csr::agent_user(cluster)}]);
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]| {
        let mut r = json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
        if !names.is_empty() {
            r["resourceNames"] = json!(names);
        }
        r
    };
    let labels = json!({"karmada.io/system": "true", "cluster.karmada.io/name": cluster});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CLUSTER_SECRET_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": es, "labels": {"karmada.io/system": "true"}}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name, "labels": labels}, "rules": [
            rule(&["cluster.karmada.io"], &["clusters"], &["get", "update", "patch", "delete", "list", "watch"], &[cluster]),
            rule(&["cluster.karmada.io"], &["clusters"], &["create"], &[]),
            rule(&["cluster.karmada.io"], &["clusters/status"], &["update", "patch"], &[cluster]),
            // Flotilla's reverse tunnel (ADR 0030).
            rule(&["cluster.karmada.io"], &["clusters/tunnel"], &["get"], &[cluster]),
            rule(&["config.karmada.io"], &["resourceinterpreterwebhookconfigurations", "resourceinterpretercustomizations"], &["get", "list", "watch"], &[]),
            rule(&[""], &["namespaces"], &["get"], &[]),
            rule(&["core.kubefed.io"], &["kubefedconfigs"], &["get", "list", "watch"], &[]),
            rule(&["coordination.k8s.io"], &["leases"], &["get", "update"], &[cluster]),
            rule(&["coordination.k8s.io"], &["leases"], &["create"], &[]),
            rule(&["certificates.k8s.io"], &["certificatesigningrequests"], &["get", "create"], &[]),
            rule(&[""], &["services"], &["list", "watch"], &[]),
            rule(&[""], &["events"], &["patch", "create", "update"], &[]),
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name, "labels": labels}, "subjects": user,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": secret, "namespace": CLUSTER_SECRET_NAMESPACE, "labels": labels}, "rules": [
            rule(&[""], &["secrets"], &["get", "patch"], &[cluster, &format!("{cluster}-impersonator")]),
            rule(&[""], &["secrets"], &["create"], &[]),
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": secret, "namespace": CLUSTER_SECRET_NAMESPACE, "labels": labels}, "subjects": user,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": secret}}),
        // Held by a finalizer: deleting the execution space must not take the agent's right to
        // finish its Works' deletion (the cluster controller lets go once no Work is left).
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": work, "namespace": es, "labels": labels, "finalizers": [AGENT_ACCESS_FINALIZER]}, "rules": [
            rule(&["work.karmada.io"], &["works"], &["get", "create", "list", "watch", "update", "patch", "delete"], &[]),
            rule(&["work.karmada.io"], &["works/status"], &["patch", "update"], &[]),
            // Tombstones of its Works, read and cleared by its sweep (ADR 0031).
            rule(&["work.flotilla.io"], &["worktombstones"], &["get", "list", "delete"], &[]),
            // Its copies of what its member changed while offline; the decisions on them are the
            // control plane's (status) (ADR 0032).
            rule(&["edge.flotilla.io"], &["edgechanges"], &["get", "list", "watch", "create", "update", "delete"], &[]),
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": work, "namespace": es, "labels": labels, "finalizers": [AGENT_ACCESS_FINALIZER]}, "subjects": user,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": work}}),
    ]
}

/// Server-side apply each object (the approver owns what it writes).
async fn ensure(client: &Client, objects: &[Value]) -> Result<(), kube::Error> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let pp = PatchParams::apply(MANAGER).force();
    for o in objects {
        let (api_version, kind) = (o["apiVersion"].as_str().unwrap_or(""), o["kind"].as_str().unwrap_or(""));
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let plural = match kind {
            "Namespace" => "namespaces",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            "Role" => "roles",
            _ => "rolebindings",
        };
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let api: Api<DynamicObject> = match o.pointer("/metadata/namespace").and_then(Value::as_str) {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.patch(name, &pp, &Patch::Apply(o)).await?;
    }
    Ok(())
}

async fn review(client: &Client, obj: &CertificateSigningRequest, subresource: &str) -> Result<bool, kube::Error> {
    let spec = &obj.spec;
    let sar: SubjectAccessReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": spec.username, "uid": spec.uid, "groups": spec.groups, "extra": spec.extra,
            "resourceAttributes": {"group": csr::GROUP, "resource": "certificatesigningrequests", "verb": "create", "subresource": subresource, "version": "*"},
        },
    }))
    .unwrap_or_default();
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &sar).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

async fn write_condition(client: &Client, obj: &CertificateSigningRequest, condition: Value) -> Result<(), kube::Error> {
    let mut conditions =
        serde_json::to_value(obj).ok().and_then(|v| v.pointer("/status/conditions").cloned()).and_then(|c| c.as_array().cloned()).unwrap_or_default();
    conditions.push(condition);
    let patch = json!({"metadata": {"resourceVersion": obj.resource_version()}, "status": {"conditions": conditions}});
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    match api.patch_subresource("approval", &obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn reconcile(client: &Client, obj: Arc<CertificateSigningRequest>) -> Result<Next, kube::Error> {
    let value = serde_json::to_value(&*obj).unwrap_or_default();
    let name = obj.name_any();
    match decide(&value) {
        Decision::Skip => {}
        Decision::Deny(reason) => {
            tracing::warn!(controller = NAME, csr = %name, %reason, "agent certificate denied");
            write_condition(client, &obj, json!({"type": csr::DENIED, "status": "True", "reason": "AgentCSRRefused", "message": reason})).await?;
        }
        Decision::Review { subresource, cluster } => {
            if !review(client, &obj, subresource).await? {
                tracing::warn!(controller = NAME, csr = %name, subresource, requester = %obj.spec.username.as_deref().unwrap_or(""), "recognised an agent request, but the SubjectAccessReview was not approved");
                return Ok(Next::Done);
            }
            let message = if subresource == "selfclusteragent" {
                "Auto approving self karmada agent certificate after SubjectAccessReview."
            } else {
                ensure(client, &agent_rbac(&cluster)).await?;
                "Auto approving karmada agent certificate after SubjectAccessReview."
            };
            write_condition(client, &obj, json!({"type": csr::APPROVED, "status": "True", "reason": "AutoApproved", "message": message})).await?;
            tracing::info!(controller = NAME, csr = %name, %cluster, subresource, "agent certificate approved");
        }
    }
    Ok(Next::Done)
}

/// Run the approver until the runtime shuts down.
pub async fn run(client: Client, rt: Runtime) {
    rt.controller_for::<CertificateSigningRequest>(NAME)
        .run_objects(move |obj| {
            let client = client.clone();
            async move { reconcile(&client, obj).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn request(cn: &str, org: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name.push(rcgen::DnType::OrganizationName, org);
        base64::engine::general_purpose::STANDARD.encode(p.serialize_request(&key).unwrap().pem().unwrap())
    }

    fn obj(cn: &str, user: &str, groups: &[&str]) -> Value {
        json!({"spec": {"request": request(cn, csr::AGENT_GROUP), "signerName": csr::KUBE_APISERVER_CLIENT, "usages": ["digital signature", "client auth"],
                        "username": user, "groups": groups}, "status": {}})
    }

    #[test]
    fn agent_requests_are_reviewed_by_who_asks() {
        let boot = ["system:bootstrappers", "system:bootstrappers:flotilla:cluster:edge-1"];
        assert_eq!(
            decide(&obj("system:karmada:agent:edge-1", "system:bootstrap:abcdef", &boot)),
            Decision::Review { subresource: "clusteragent", cluster: "edge-1".into() }
        );
        assert_eq!(
            decide(&obj("system:karmada:agent:edge-1", "system:karmada:agent:edge-1", &["system:karmada:agents"])),
            Decision::Review { subresource: "selfclusteragent", cluster: "edge-1".into() }
        );
        assert!(
            matches!(decide(&obj("system:karmada:agent:edge-2", "system:bootstrap:abcdef", &boot)), Decision::Deny(m) if m.contains("bound to cluster \"edge-1\""))
        );
        assert!(matches!(decide(&obj(RBAC_GENERATOR, "system:bootstrap:abcdef", &["system:bootstrappers"])), Decision::Deny(m) if m.contains("karmada#7147")));
        let mut approved = obj("system:karmada:agent:edge-1", "u", &[]);
        approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        assert_eq!(decide(&approved), Decision::Skip);
        assert_eq!(decide(&obj("someone", "u", &[])), Decision::Skip, "not an agent's request");
    }

    #[test]
    fn the_agent_rbac_names_only_its_cluster() {
        let objs = agent_rbac("edge-1");
        let names: Vec<String> = objs.iter().map(|o| format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap())).collect();
        assert_eq!(
            names,
            [
                "Namespace/karmada-cluster",
                "Namespace/karmada-es-edge-1",
                "ClusterRole/system:karmada:edge-1:agent",
                "ClusterRoleBinding/system:karmada:edge-1:agent",
                "Role/system:karmada:edge-1:agent-secret",
                "RoleBinding/system:karmada:edge-1:agent-secret",
                "Role/system:karmada:edge-1:agent-work",
                "RoleBinding/system:karmada:edge-1:agent-work",
            ]
        );
        let clusters = &objs[2]["rules"][0];
        assert_eq!(clusters["resourceNames"], json!(["edge-1"]));
        assert_eq!(objs[3]["subjects"][0]["name"], "system:karmada:agent:edge-1");
        assert_eq!(objs[6]["metadata"]["namespace"], "karmada-es-edge-1");
    }
}
