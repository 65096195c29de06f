//! The remedy controller (Karmada's `remedy-controller`, `pkg/controllers/remediation`): each
//! Cluster's `status.remedyActions` is the sorted set of actions of the Remedies that select it
//! and whose decision matches its status conditions.
//!
//! Triggers: a Cluster new, or its conditions or remedy actions changed; a Remedy created,
//! changed or deleted (the clusters it names, or every cluster when it names none). The
//! actions are written as a merge patch of the status, so the cluster status controller's
//! fields are left alone. On by default, as in Karmada.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::remedy::{Remedy, actions_for};
use flotilla_runtime::Next;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

pub const NAME: &str = "remedy";
/// The controller's name in Karmada (its metrics and client identity here).
pub const COMPONENT: &str = "remedy-controller";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: writing status.remedyActions: {source}")]
    Api { cluster: String, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

pub struct Context {
    pub client: Client,
    pub remedies: Store<Remedy>,
}

/// The actions `cluster` needs under the Remedies in the store.
pub fn desired_actions(cluster: &Cluster, remedies: &[Arc<Remedy>]) -> Vec<String> {
    let conditions = cluster.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    actions_for(remedies.iter().map(|r| &r.spec), &cluster.name_any(), conditions)
}

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Next, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    let name = cluster.name_any();
    let desired = desired_actions(&cluster, &ctx.remedies.state());
    let current = cluster.status.as_ref().and_then(|s| s.remedy_actions.clone()).unwrap_or_default();
    if desired == current {
        return Ok(Next::Done);
    }
    let actions = (!desired.is_empty()).then_some(&desired);
    let patch = serde_json::json!({"status": {"remedyActions": actions}});
    let clusters: Api<Cluster> = Api::all(ctx.client.clone());
    match clusters.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::info!(controller = NAME, cluster = %name, actions = ?desired, "remedy actions updated");
            Ok(Next::Done)
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(source) => Err(Error::Api { cluster: name, source }),
    }
}

/// Run the controller until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime) {
    let remedies = rt.informers.store::<Remedy>();
    let clusters = rt.informers.store::<Cluster>();
    let ctx = Arc::new(Context { client, remedies });
    let watched = |c: &Cluster| c.status.as_ref().map(|s| (s.conditions.clone(), s.remedy_actions.clone()));
    rt.controller::<ObjectRef<Cluster>>(COMPONENT)
        .watches_changes(move |old: Option<&Cluster>, c: &Cluster, deleted| {
            (!deleted && old.is_none_or(|old| watched(old) != watched(c))).then(|| ObjectRef::from_obj(c))
        })
        .watches_changes(move |old: Option<&Remedy>, r: &Remedy, deleted| {
            let changed = deleted || old.is_none_or(|old| old.spec != r.spec);
            // A Remedy whose names changed also releases the clusters it no longer names.
            let named = |r: &Remedy| r.spec.cluster_affinity.as_ref().map(|a| a.cluster_names.clone().unwrap_or_default());
            let keys: Vec<ObjectRef<Cluster>> = match (changed, named(r), old.map(named)) {
                (false, _, _) => Vec::new(),
                (true, Some(mut names), Some(Some(before))) => {
                    names.extend(before);
                    names.iter().map(|n| ObjectRef::new(n)).collect()
                }
                (true, Some(names), None) => names.iter().map(|n| ObjectRef::new(n)).collect(),
                _ => clusters.state().iter().map(|c| ObjectRef::from_obj(&**c)).collect(),
            };
            keys
        })
        .backoff(Duration::from_millis(100), Duration::from_secs(60))
        .run_objects(move |c| reconcile(c, ctx.clone()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::cluster::{ClusterSpec, ClusterStatus};
    use flotilla_api::federation::karmada::remedy::{ClusterConditionRequirement, DecisionMatch, RemedySpec, TRAFFIC_CONTROL};

    #[test]
    fn a_cluster_gets_the_actions_its_conditions_call_for() {
        let mut c = Cluster::new("m1", ClusterSpec::default());
        let dns = |ok: bool| flotilla_runtime::condition("ServiceDomainNameResolutionReady", ok, "R", "", None);
        c.status = Some(ClusterStatus { conditions: Some(vec![dns(false)]), ..Default::default() });
        let spec = RemedySpec {
            decision_matches: Some(vec![DecisionMatch {
                cluster_condition_match: Some(ClusterConditionRequirement {
                    condition_type: "ServiceDomainNameResolutionReady".into(),
                    operator: "Equal".into(),
                    condition_status: "False".into(),
                }),
            }]),
            actions: Some(vec![TRAFFIC_CONTROL.into()]),
            ..Default::default()
        };
        let remedies = [Arc::new(Remedy::new("dns", spec))];
        assert_eq!(desired_actions(&c, &remedies), [TRAFFIC_CONTROL]);
        c.status.as_mut().unwrap().conditions = Some(vec![dns(true)]);
        assert!(desired_actions(&c, &remedies).is_empty());
    }
}
