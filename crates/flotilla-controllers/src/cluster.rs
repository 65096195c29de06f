//! The cluster controller: for every `Cluster`, the finalizer `karmada.io/cluster-controller`,
//! the execution space `karmada-es-<cluster>` where its Works live, and the automatic
//! NoSchedule taints Karmada derives from the `Ready` condition (False → `not-ready`,
//! Unknown → `unreachable`, True → neither, no condition yet → `not-ready`). Taints only stop new
//! placement; bindings already on the cluster stay, so recovery causes no replica churn.
//!
//! Deletion (unjoin): the execution space is deleted, which deletes the Works; the execution
//! controller decides per Work what happens in the member (see [`UNJOIN_ANNOTATION`]). The
//! finalizer goes when the execution space is gone. A Pull cluster's Works are its agent's to
//! remove: when the cluster is not Ready (the agent is gone) their execution finalizers are
//! stripped, as Karmada does, or the execution space could never go. Before the finalizer goes,
//! the pull agent's control-plane RBAC is deleted (ADR 0028), so its certificate authorizes
//! nothing once its Cluster is gone.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::{
    Cluster, ClusterSyncMode, FINALIZER_CLUSTER_CONTROLLER, TAINT_NOT_READY, TAINT_UNREACHABLE, is_cluster_ready,
};
use flotilla_api::federation::karmada::names::execution_space;
use flotilla_runtime::Next;
use k8s_openapi::api::core::v1::{Namespace, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use flotilla_runtime::{condition_status, finalizer_patch, with_finalizer, without_finalizer};

pub const NAME: &str = "cluster";

/// Annotation `flotilla unjoin` sets on a Cluster before deleting it: what to do with the
/// member's workloads. `delete` (Karmada's behaviour, also when absent), `keep` (strip
/// Karmada's labels, leave them running), `abandon` (do not contact the member at all).
pub const UNJOIN_ANNOTATION: &str = "flotilla.io/unjoin-workloads";

#[derive(Clone, Debug)]
pub struct Config {
    pub requeue: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { requeue: Duration::from_secs(2) }
    }
}

pub struct Context {
    pub client: Client,
    pub config: Config,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: {step}: {source}")]
    Api { cluster: String, step: &'static str, source: kube::Error },
}

/// The taints Karmada keeps on a cluster for its Ready status.
pub fn desired_taints(current: &[Taint], ready: Option<&str>, now: Time) -> Vec<Taint> {
    let want = match ready {
        Some("True") => None,
        Some("Unknown") => Some(TAINT_UNREACHABLE),
        _ => Some(TAINT_NOT_READY),
    };
    let automatic = |t: &Taint| (t.key == TAINT_NOT_READY || t.key == TAINT_UNREACHABLE) && t.effect == "NoSchedule";
    let mut out: Vec<Taint> = current.iter().filter(|t| !automatic(t) || Some(t.key.as_str()) == want).cloned().collect();
    if let Some(key) = want
        && !out.iter().any(|t| t.key == key && t.effect == "NoSchedule")
    {
        out.push(Taint { key: key.into(), effect: "NoSchedule".into(), time_added: Some(now), value: None });
    }
    out
}

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Next, Error> {
    let name = cluster.name_any();
    let clusters: Api<Cluster> = Api::all(ctx.client.clone());
    let err = |step: &'static str| {
        let cluster = name.clone();
        move |source| Error::Api { cluster, step, source }
    };
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let es = execution_space(&name);
    if cluster.metadata.deletion_timestamp.is_some() {
        if namespaces.get_opt(&es).await.map_err(err("reading the execution space"))?.is_some() {
            match namespaces.delete(&es, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(err("deleting the execution space")(e)),
            }
            if cluster.spec.sync_mode == ClusterSyncMode::Pull {
                if !is_cluster_ready(&cluster) {
                    release_works(&ctx.client, &es).await.map_err(err("removing the execution finalizer of an unready pull cluster's Works"))?;
                }
                release_agent_access(&ctx.client, &es, &name).await.map_err(err("releasing the pull agent's access to its execution space"))?;
            }
            return Ok(Next::After(ctx.config.requeue));
        }
        remove_agent_rbac(&ctx.client, &name).await.map_err(err("deleting the pull agent's RBAC"))?;
        if let Some(list) = without_finalizer(cluster.metadata.finalizers.as_ref(), FINALIZER_CLUSTER_CONTROLLER) {
            let patch = finalizer_patch(list, cluster.metadata.resource_version.as_deref());
            match clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(err("removing the finalizer")(e)),
            }
        }
        return Ok(Next::Done);
    }
    if let Some(list) = with_finalizer(cluster.metadata.finalizers.as_ref(), FINALIZER_CLUSTER_CONTROLLER) {
        let patch = finalizer_patch(list, cluster.metadata.resource_version.as_deref());
        clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(err("adding the finalizer"))?;
        return Ok(Next::Done);
    }
    if namespaces.get_opt(&es).await.map_err(err("reading the execution space"))?.is_none() {
        let ns = Namespace { metadata: ObjectMeta { name: Some(es.clone()), ..Default::default() }, ..Default::default() };
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(err("creating the execution space")(e)),
        }
    }
    let ready = condition_status(cluster.status.as_ref().and_then(|s| s.conditions.as_deref()), "Ready").map(|c| c.status.as_str());
    let current = cluster.spec.taints.clone().unwrap_or_default();
    let desired = desired_taints(&current, ready, Time(jiff::Timestamp::now()));
    if desired != current {
        let patch = serde_json::json!({"metadata": {"resourceVersion": cluster.metadata.resource_version}, "spec": {"taints": desired}});
        match clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            // Someone wrote in between; the watch brings the new version.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Next::After(Duration::from_millis(100))),
            Err(e) => return Err(err("updating the taints")(e)),
        }
    }
    Ok(Next::Done)
}

impl flotilla_runtime::ReconcileError for Error {}

/// Run the controller until shutdown: every Cluster, from the shared cache.
/// Strip the execution finalizer from the Works of `namespace` (their agent will not).
async fn release_works(client: &Client, namespace: &str) -> Result<(), kube::Error> {
    use flotilla_api::federation::karmada::work::{EXECUTION_FINALIZER, Work};
    let works: Api<Work> = Api::namespaced(client.clone(), namespace);
    for w in works.list(&Default::default()).await?.items {
        if let Some(list) = without_finalizer(w.metadata.finalizers.as_ref(), EXECUTION_FINALIZER) {
            let patch = finalizer_patch(list, w.metadata.resource_version.as_deref());
            match works.patch(&w.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => tracing::info!(controller = NAME, work = %w.name_any(), namespace, "execution finalizer removed: the pull cluster is not ready"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Once no Work is left in `namespace`, let go of the agent's Role and RoleBinding there (held so
/// the agent can finish removing its Works while the namespace is deleted).
async fn release_agent_access(client: &Client, namespace: &str, cluster: &str) -> Result<(), kube::Error> {
    use crate::agent_csr_approving::AGENT_ACCESS_FINALIZER;
    use flotilla_api::federation::karmada::work::Work;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    if !Api::<Work>::namespaced(client.clone(), namespace).list(&Default::default()).await?.items.is_empty() {
        return Ok(());
    }
    let name = crate::agent_csr_approving::AgentRbacNames::of(cluster).work;
    async fn let_go<K: Clone + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource>(api: Api<K>, name: &str) -> Result<(), kube::Error> {
        let Some(o) = api.get_opt(name).await? else { return Ok(()) };
        let Some(list) = without_finalizer(o.meta().finalizers.as_ref(), AGENT_ACCESS_FINALIZER) else { return Ok(()) };
        let patch = finalizer_patch(list, o.meta().resource_version.as_deref());
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
    let_go(Api::<RoleBinding>::namespaced(client.clone(), namespace), &name).await?;
    let_go(Api::<Role>::namespaced(client.clone(), namespace), &name).await
}

/// Delete `name` through `api`; gone already is fine.
async fn delete_if_there<K: Clone + serde::de::DeserializeOwned + std::fmt::Debug>(api: Api<K>, name: &str) -> Result<(), kube::Error> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Delete the control-plane RBAC the agent CSR approver made for `cluster`'s agent (its
/// execution space's RoleBinding goes with the namespace).
async fn remove_agent_rbac(client: &Client, cluster: &str) -> Result<(), kube::Error> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let crate::agent_csr_approving::AgentRbacNames { agent: name, secret, .. } = crate::agent_csr_approving::AgentRbacNames::of(cluster);
    let ns = crate::agent_csr_approving::CLUSTER_SECRET_NAMESPACE;
    delete_if_there(Api::<ClusterRoleBinding>::all(client.clone()), &name).await?;
    delete_if_there(Api::<ClusterRole>::all(client.clone()), &name).await?;
    delete_if_there(Api::<RoleBinding>::namespaced(client.clone(), ns), &secret).await?;
    delete_if_there(Api::<Role>::namespaced(client.clone(), ns), &secret).await
}

pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let requeue = config.requeue;
    let ctx = Arc::new(Context { client, config });
    rt.controller_for::<Cluster>(NAME).backoff(Duration::from_millis(100), requeue).run_objects(move |c| reconcile(c, ctx.clone())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), time_added: None, value: None }
    }

    fn keys(ts: &[Taint]) -> Vec<String> {
        ts.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect()
    }

    #[test]
    fn taints_follow_ready_as_karmada_sets_them() {
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        let user = t("dedicated", "NoSchedule");
        assert_eq!(keys(&desired_taints(std::slice::from_ref(&user), None, now.clone())), ["dedicated:NoSchedule", "cluster.karmada.io/not-ready:NoSchedule"]);
        assert_eq!(keys(&desired_taints(&[t(TAINT_NOT_READY, "NoSchedule")], Some("Unknown"), now.clone())), ["cluster.karmada.io/unreachable:NoSchedule"]);
        assert!(desired_taints(&[t(TAINT_NOT_READY, "NoSchedule"), t(TAINT_UNREACHABLE, "NoSchedule")], Some("True"), now.clone()).is_empty());
        // A user's NoExecute taint with the same key is theirs, not ours.
        assert_eq!(keys(&desired_taints(&[t(TAINT_NOT_READY, "NoExecute")], Some("True"), now.clone())), ["cluster.karmada.io/not-ready:NoExecute"]);
        // Already right: unchanged (same timeAdded), so no write.
        let have = desired_taints(&[], Some("False"), now.clone());
        assert_eq!(desired_taints(&have, Some("False"), Time(jiff::Timestamp::now())), have);
    }
}
