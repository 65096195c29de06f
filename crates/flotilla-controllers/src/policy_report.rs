//! Tells a user whose propagation policy selects nothing. Karmada's PropagationPolicy has no
//! status, so a policy whose resourceSelectors match no template is silent there; here it gets
//! a Warning Event (`kubectl describe propagationpolicy …` shows it) once its grace period is
//! over and while no binding is claimed by it — once per generation of the policy.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::karmada::policy::{
    CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, ClusterPropagationPolicy, PROPAGATION_POLICY_PERMANENT_ID_LABEL, PropagationPolicy,
};
use flotilla_api::federation::karmada::work::{ClusterResourceBinding, ResourceBinding};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;

use crate::util::{Events, watch_into_store};

pub const NAME: &str = "policy-report";
pub const REASON_NO_MATCH: &str = "NoResourceSelected";

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a new or changed policy may select nothing before it is reported (templates
    /// are often applied just after their policy).
    pub grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { grace: Duration::from_secs(10) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {}

struct Context {
    config: Config,
    events: Events,
    bindings: Store<ResourceBinding>,
    cluster_bindings: Store<ClusterResourceBinding>,
    /// Policy uid → the generation already reported.
    reported: Mutex<HashMap<String, i64>>,
}

/// Bindings claimed by the policy whose permanent id is `id` under `label`.
fn claimed(ctx: &Context, label: &str, id: &str) -> usize {
    let has = |labels: &std::collections::BTreeMap<String, String>| labels.get(label).is_some_and(|v| v == id);
    ctx.bindings.state().iter().filter(|b| has(b.labels())).count() + ctx.cluster_bindings.state().iter().filter(|b| has(b.labels())).count()
}

/// What to do about one policy: report now, look again later, or nothing.
#[derive(Debug, PartialEq)]
enum Verdict {
    Report,
    Wait(Duration),
    Quiet,
}

fn verdict(age: Duration, grace: Duration, has_id: bool, claimed: usize, already_reported: bool) -> Verdict {
    if claimed > 0 || already_reported {
        return Verdict::Quiet;
    }
    // Without its permanent id the detector has not seen the policy yet.
    if !has_id || age < grace {
        return Verdict::Wait(grace.saturating_sub(age).max(Duration::from_secs(1)));
    }
    Verdict::Report
}

async fn reconcile<K>(policy: Arc<K>, ctx: Arc<Context>, label: &'static str, selectors: usize) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()> + ResourceExt,
{
    let Some(uid) = policy.meta().uid.clone() else { return Ok(Action::await_change()) };
    if policy.meta().deletion_timestamp.is_some() {
        ctx.reported.lock().remove(&uid);
        return Ok(Action::await_change());
    }
    let generation = policy.meta().generation.unwrap_or(0);
    // The age of this generation is not recorded anywhere; the object's age bounds it.
    let created = policy.meta().creation_timestamp.as_ref().map(|t| t.0);
    let age = created.map_or(Duration::ZERO, |t| Duration::try_from(jiff::Timestamp::now().duration_since(t)).unwrap_or(Duration::ZERO));
    let id = policy.labels().get(label).cloned();
    let count = id.as_deref().map_or(0, |id| claimed(&ctx, label, id));
    if count > 0 {
        ctx.reported.lock().remove(&uid);
    }
    let already = ctx.reported.lock().get(&uid) == Some(&generation);
    match verdict(age, ctx.config.grace, id.is_some(), count, already) {
        Verdict::Quiet => Ok(Action::requeue(ctx.config.grace.max(Duration::from_secs(30)))),
        Verdict::Wait(d) => Ok(Action::requeue(d)),
        Verdict::Report => {
            ctx.reported.lock().insert(uid, generation);
            let note = format!(
                "no resource matches this policy's {selectors} resourceSelector(s): nothing is propagated by it (check apiVersion, kind, namespace, name and labelSelector of each selector)"
            );
            ctx.events.publish(policy.as_ref(), true, REASON_NO_MATCH, "Select", note).await;
            Ok(Action::requeue(ctx.config.grace.max(Duration::from_secs(30))))
        }
    }
}

fn on_error<K>(_: Arc<K>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(30))
}

/// Run the controller until the process ends.
pub async fn run(client: Client, config: Config) {
    let (bindings, watch_rb) = watch_into_store(Api::<ResourceBinding>::all(client.clone()), watcher::Config::default(), |_, _| {});
    let (cluster_bindings, watch_crb) = watch_into_store(Api::<ClusterResourceBinding>::all(client.clone()), watcher::Config::default(), |_, _| {});
    tokio::spawn(watch_rb);
    tokio::spawn(watch_crb);
    // Counting a policy's bindings needs them all listed first.
    if bindings.wait_until_ready().await.is_err() || cluster_bindings.wait_until_ready().await.is_err() {
        return;
    }
    let ctx = Arc::new(Context { config, events: Events::new(client.clone(), NAME), bindings, cluster_bindings, reported: Mutex::new(HashMap::new()) });
    let pp = Controller::new(Api::<PropagationPolicy>::all(client.clone()), watcher::Config::default())
        .run(
            |p, ctx| async move {
                let n = p.spec.resource_selectors.len();
                reconcile(p, ctx, PROPAGATION_POLICY_PERMANENT_ID_LABEL, n).await
            },
            on_error::<PropagationPolicy>,
            ctx.clone(),
        )
        .for_each(|_| async {});
    let cpp = Controller::new(Api::<ClusterPropagationPolicy>::all(client.clone()), watcher::Config::default())
        .run(
            |p, ctx| async move {
                let n = p.spec.0.resource_selectors.len();
                reconcile(p, ctx, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, n).await
            },
            on_error::<ClusterPropagationPolicy>,
            ctx.clone(),
        )
        .for_each(|_| async {});
    tokio::join!(pp, cpp);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_reported_once_its_grace_is_over_and_only_while_it_selects_nothing() {
        let g = Duration::from_secs(10);
        assert_eq!(verdict(Duration::from_secs(3), g, true, 0, false), Verdict::Wait(Duration::from_secs(7)));
        assert_eq!(verdict(Duration::from_secs(30), g, false, 0, false), Verdict::Wait(Duration::from_secs(1)));
        assert_eq!(verdict(Duration::from_secs(30), g, true, 0, false), Verdict::Report);
        assert_eq!(verdict(Duration::from_secs(30), g, true, 0, true), Verdict::Quiet);
        assert_eq!(verdict(Duration::from_secs(30), g, true, 2, false), Verdict::Quiet);
    }
}
