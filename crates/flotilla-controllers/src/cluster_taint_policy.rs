//! The cluster-taint-policy controller (Karmada v1.14+, `pkg/controllers/taint`): a Cluster's
//! taints follow its status conditions as the ClusterTaintPolicies say.
//!
//! For each Cluster, every policy whose `targetClusters` selects it (all when unset) is applied
//! in creation order: when all its `addOnConditions` match, its taints are added (one per key
//! and effect, stamped with the time); when all its `removeOnConditions` match, they are
//! removed. A change is written with the Cluster's resourceVersion (a concurrent write is
//! retried, never overwritten), with a `TaintClusterSucceed` Event, or `TaintClusterFailed`
//! when the write fails.
//!
//! Unlike Karmada, a NoExecute taint is not left behind by a deleted policy: Karmada keeps a
//! deleted policy's taints, and a NoExecute one then keeps evicting with no object that will
//! ever remove it. The controller records which policy added each taint
//! ([`OWNERS_ANNOTATION`] on the Cluster); a NoExecute taint whose policy is gone, and which no
//! remaining policy manages, is removed. NoSchedule taints stay, as in Karmada (they only stop
//! new placements).
//!
//! Triggers: a Cluster's conditions changing, a policy created or its spec changed (every
//! Cluster it selects). Runs with the Failover gate, as Karmada starts it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::taint::{ClusterTaintPolicy, PolicyTaint, conditions_match};
use flotilla_api::overrides::cluster_matches;
use flotilla_runtime::{Events, Next};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};

pub const NAME: &str = "clusterTaintPolicy";
/// The component of its Events (Karmada's controller name).
pub const EVENT_COMPONENT: &str = "cluster-taint-policy-controller";
pub const EVENT_TAINT_CLUSTER_SUCCEED: &str = "TaintClusterSucceed";
pub const EVENT_TAINT_CLUSTER_FAILED: &str = "TaintClusterFailed";
/// Annotation on a Cluster: which ClusterTaintPolicy added each of its taints, as a JSON object
/// from `key:effect` to the policy's name.
pub const OWNERS_ANNOTATION: &str = "flotilla.io/taint-policy-owners";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: updating the taints: {source}")]
    Api { cluster: String, source: kube::Error },
}

impl flotilla_runtime::ReconcileError for Error {}

/// A taint's identity: its key and effect.
fn id(key: &str, effect: &str) -> String {
    format!("{key}:{effect}")
}

/// What the policies leave on a cluster: its taints and which policy added which.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub taints: Vec<Taint>,
    pub owners: BTreeMap<String, String>,
}

/// The policy owners `cluster` records ([`OWNERS_ANNOTATION`]); unreadable is none.
pub fn recorded_owners(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster.annotations().get(OWNERS_ANNOTATION).and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default()
}

/// `cluster`'s taints after every policy of `policies` (in creation order) is applied to its
/// current ones; `now` stamps the taints added. A NoExecute taint recorded as added by a policy
/// no longer in `policies`, and listed by none of them, goes.
pub fn desired_taints(cluster: &Cluster, policies: &[Arc<ClusterTaintPolicy>], now: &Time) -> Outcome {
    let conditions = cluster.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let mut taints = cluster.spec.taints.clone().unwrap_or_default();
    let mut owners = recorded_owners(cluster);
    let listed = |key: &str| policies.iter().any(|p| p.spec.taints.iter().any(|t| id(&t.key, &t.effect) == key));
    for (key, owner) in std::mem::take(&mut owners) {
        let live = policies.iter().any(|p| p.name_any() == owner);
        if live {
            owners.insert(key, owner);
        } else if key.ends_with(":NoExecute") && !listed(&key) {
            taints.retain(|t| id(&t.key, &t.effect) != key);
        }
    }
    let mut ordered: Vec<&Arc<ClusterTaintPolicy>> = policies.iter().collect();
    // Creation order, then name: deterministic, so conflicting policies do not flap.
    ordered.sort_by(|a, b| {
        (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any()).cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), b.name_any()))
    });
    for policy in ordered {
        if policy.spec.target_clusters.as_ref().is_some_and(|t| !cluster_matches(cluster, t)) {
            continue;
        }
        if conditions_match(conditions, policy.spec.add_on_conditions.as_deref().unwrap_or_default()) {
            for t in &policy.spec.taints {
                if !taints.iter().any(|have| same(have, t)) {
                    taints.push(Taint {
                        key: t.key.clone(),
                        value: t.value.clone().filter(|v| !v.is_empty()),
                        effect: t.effect.clone(),
                        time_added: Some(now.clone()),
                    });
                }
                // Present because of this policy now, whoever added it first.
                owners.entry(id(&t.key, &t.effect)).or_insert_with(|| policy.name_any());
            }
        }
        if conditions_match(conditions, policy.spec.remove_on_conditions.as_deref().unwrap_or_default()) {
            taints.retain(|have| !policy.spec.taints.iter().any(|t| same(have, t)));
        }
    }
    // A taint removed (by a policy or a person) is nobody's any more.
    owners.retain(|key, _| taints.iter().any(|t| id(&t.key, &t.effect) == *key));
    Outcome { taints, owners }
}

fn same(have: &Taint, t: &PolicyTaint) -> bool {
    have.key == t.key && have.effect == t.effect
}

/// Karmada's `GenerateTaintsMessage`.
pub fn taints_message(taints: &[Taint]) -> String {
    if taints.is_empty() {
        return "cluster now does not have taints".into();
    }
    let items: Vec<String> = taints
        .iter()
        .map(|t| match t.value.as_deref().filter(|v| !v.is_empty()) {
            Some(v) => format!("{{Key:{},Value:{v},Effect:{}}}", t.key, t.effect),
            None => format!("{{Key:{},Effect:{}}}", t.key, t.effect),
        })
        .collect();
    format!("cluster now has taints([{}])", items.join(","))
}

pub struct Context {
    pub client: Client,
    pub policies: Store<ClusterTaintPolicy>,
    pub events: Events,
}

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Next, Error> {
    let name = cluster.name_any();
    let current = cluster.spec.taints.clone().unwrap_or_default();
    let recorded = recorded_owners(&cluster);
    let desired = desired_taints(&cluster, &ctx.policies.state(), &Time(jiff::Timestamp::now()));
    if desired.taints == current && desired.owners == recorded {
        return Ok(Next::Done);
    }
    let clusters: Api<Cluster> = Api::all(ctx.client.clone());
    let owners = (!desired.owners.is_empty()).then(|| serde_json::to_string(&desired.owners).unwrap_or_default());
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": cluster.metadata.resource_version, "annotations": {OWNERS_ANNOTATION: owners}},
        "spec": {"taints": desired.taints},
    });
    match clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) if desired.taints == current => Ok(Next::Done),
        Ok(_) => {
            let note = format!("Update Cluster({name}) with taints({}) succeed", taints_message(&desired.taints));
            ctx.events.publish(&*cluster, false, EVENT_TAINT_CLUSTER_SUCCEED, "Taint", note).await;
            Ok(Next::Done)
        }
        // Someone wrote in between; the watch brings the new version.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Next::After(Duration::from_millis(100))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(source) => {
            ctx.events.publish(&*cluster, true, EVENT_TAINT_CLUSTER_FAILED, "Taint", source.to_string()).await;
            Err(Error::Api { cluster: name, source })
        }
    }
}

/// Run the controller until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime) {
    let policies = rt.informers.store::<ClusterTaintPolicy>();
    let clusters = rt.informers.store::<Cluster>();
    let ctx = Arc::new(Context { client: client.clone(), policies, events: Events::new(client, EVENT_COMPONENT) });
    let conditions = |c: &Cluster| c.status.as_ref().and_then(|s| s.conditions.clone());
    rt.controller::<ObjectRef<Cluster>>(NAME)
        .watches_changes(move |old: Option<&Cluster>, c: &Cluster, deleted| {
            (!deleted && old.is_none_or(|old| conditions(old) != conditions(c))).then(|| ObjectRef::from_obj(c))
        })
        .watches_changes(move |old: Option<&ClusterTaintPolicy>, p: &ClusterTaintPolicy, deleted| {
            // A deleted policy: its NoExecute taints may have to go.
            let changed = deleted || old.is_none_or(|old| old.spec != p.spec);
            let target = p.spec.target_clusters.clone();
            let selected: Vec<ObjectRef<Cluster>> = if changed {
                clusters.state().iter().filter(|c| target.as_ref().is_none_or(|t| cluster_matches(c, t))).map(|c| ObjectRef::from_obj(&**c)).collect()
            } else {
                Vec::new()
            };
            selected
        })
        .backoff(Duration::from_millis(100), Duration::from_secs(60))
        .run_objects(move |c| reconcile(c, ctx.clone()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::karmada::cluster::{ClusterSpec, ClusterStatus};
    use flotilla_api::federation::karmada::taint::{ClusterTaintPolicySpec, MatchCondition};

    fn cluster(ready: &str, taints: Vec<Taint>) -> Cluster {
        let mut c = Cluster::new("m1", ClusterSpec { taints: Some(taints), ..Default::default() });
        c.status = Some(ClusterStatus { conditions: Some(vec![flotilla_runtime::condition("Ready", ready == "True", "R", "", None)]), ..Default::default() });
        if ready == "Unknown" {
            c.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "Unknown".into();
        }
        c
    }

    fn policy(name: &str, created: i64, key: &str, effect: &str) -> Arc<ClusterTaintPolicy> {
        let when = |values: &[&str]| {
            Some(vec![MatchCondition { condition_type: "Ready".into(), operator: "In".into(), status_values: values.iter().map(|v| v.to_string()).collect() }])
        };
        let mut p = ClusterTaintPolicy::new(
            name,
            ClusterTaintPolicySpec {
                target_clusters: None,
                add_on_conditions: when(&["False", "Unknown"]),
                remove_on_conditions: when(&["True"]),
                taints: vec![PolicyTaint { key: key.into(), effect: effect.into(), value: None }],
            },
        );
        p.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(created).unwrap()));
        Arc::new(p)
    }

    fn keys(taints: &[Taint]) -> Vec<String> {
        taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect()
    }

    #[test]
    fn taints_come_with_the_conditions_and_go_with_them() {
        let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let user = Taint { key: "dedicated".into(), effect: "NoSchedule".into(), value: None, time_added: None };
        let policies = [policy("down", 1, "example.com/down", "NoExecute")];
        let added = desired_taints(&cluster("False", vec![user.clone()]), &policies, &now).taints;
        assert_eq!(keys(&added), ["dedicated:NoSchedule", "example.com/down:NoExecute"]);
        assert_eq!(added[1].time_added, Some(now.clone()));
        // Already there: unchanged, with its first time.
        let later = Time(jiff::Timestamp::from_second(1_800_000_100).unwrap());
        assert_eq!(desired_taints(&cluster("Unknown", added.clone()), &policies, &later).taints, added);
        // Recovered: only the policy's taint goes.
        assert_eq!(keys(&desired_taints(&cluster("True", added), &policies, &later).taints), ["dedicated:NoSchedule"]);
        // A policy selecting other clusters does nothing here.
        let mut elsewhere = (*policies[0]).clone();
        elsewhere.spec.target_clusters =
            Some(flotilla_api::federation::karmada::policy::ClusterAffinity { cluster_names: Some(vec!["m2".into()]), ..Default::default() });
        assert_eq!(keys(&desired_taints(&cluster("False", vec![]), &[Arc::new(elsewhere)], &now).taints), Vec::<String>::new());
    }

    #[test]
    fn policies_apply_in_creation_order() {
        let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
        // The older policy adds on False; the newer removes the same taint on False: removed.
        let adds = policy("adds", 1, "k", "NoSchedule");
        let mut removes = (*policy("removes", 2, "k", "NoSchedule")).clone();
        std::mem::swap(&mut removes.spec.add_on_conditions, &mut removes.spec.remove_on_conditions);
        let removes = Arc::new(removes);
        assert!(desired_taints(&cluster("False", vec![]), &[removes.clone(), adds.clone()], &now).taints.is_empty());
        // Created the other way round: added last, so present.
        let mut late_adds = (*adds).clone();
        late_adds.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(3).unwrap()));
        assert_eq!(keys(&desired_taints(&cluster("False", vec![]), &[removes, Arc::new(late_adds)], &now).taints), ["k:NoSchedule"]);
    }

    #[test]
    fn a_deleted_policys_no_execute_taint_goes_and_its_no_schedule_taint_stays() {
        let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let policies = [policy("down", 1, "example.com/down", "NoExecute"), policy("cordon", 2, "example.com/cordon", "NoSchedule")];
        let first = desired_taints(&cluster("False", vec![]), &policies, &now);
        assert_eq!(keys(&first.taints), ["example.com/down:NoExecute", "example.com/cordon:NoSchedule"]);
        assert_eq!(first.owners.get("example.com/down:NoExecute").map(String::as_str), Some("down"));
        let mut tainted = cluster("False", first.taints.clone());
        tainted.metadata.annotations = Some([(OWNERS_ANNOTATION.to_string(), serde_json::to_string(&first.owners).unwrap())].into());
        // Both policies deleted: the NoExecute taint goes, the NoSchedule one stays, unowned.
        let after = desired_taints(&tainted, &[], &now);
        assert_eq!(keys(&after.taints), ["example.com/cordon:NoSchedule"]);
        assert!(after.owners.is_empty(), "{:?}", after.owners);
        // A person's NoExecute taint (no owner recorded) is never touched.
        let person = Taint { key: "ops/drain".into(), effect: "NoExecute".into(), value: None, time_added: None };
        assert_eq!(keys(&desired_taints(&cluster("False", vec![person]), &[], &now).taints), ["ops/drain:NoExecute"]);
        // Another live policy managing the same taint keeps it.
        let same_taint = [policy("also-down", 3, "example.com/down", "NoExecute")];
        assert_eq!(keys(&desired_taints(&tainted, &same_taint, &now).taints), ["example.com/down:NoExecute", "example.com/cordon:NoSchedule"]);
    }

    #[test]
    fn the_event_message_is_karmadas() {
        let t = |key: &str, value: Option<&str>| Taint { key: key.into(), value: value.map(String::from), effect: "NoExecute".into(), time_added: None };
        assert_eq!(taints_message(&[]), "cluster now does not have taints");
        assert_eq!(taints_message(&[t("a", None), t("b", Some("v"))]), "cluster now has taints([{Key:a,Effect:NoExecute},{Key:b,Value:v,Effect:NoExecute}])");
    }
}
