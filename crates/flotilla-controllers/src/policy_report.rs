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
use flotilla_runtime::{MultiIndex, Next};
use kube::api::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use parking_lot::Mutex;

use flotilla_runtime::Events;

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
    claims: Arc<Mutex<Claims>>,
    /// Policy uid → the generation already reported.
    reported: Mutex<HashMap<String, i64>>,
    /// Policy uid → the generation and the moment this controller first saw it carrying its
    /// permanent id. The grace runs from then: the detector labels a policy before it creates
    /// the policy's bindings, and creationTimestamp has whole seconds only.
    first_seen: Mutex<HashMap<String, (i64, std::time::Instant)>>,
}

/// The bindings that carry each policy's permanent id, kept from the binding caches' changes,
/// so that a policy's reconcile finds its bindings without reading every binding (with 5,000
/// policies and 10,000 bindings, that scan, repeated every 30 s per policy, took a whole core).
/// Keyed by `label=id`; a binding by (namespace, name), cluster-scoped ones without namespace.
/// Candidates are checked against the caches, so a stale entry only costs a lookup.
#[derive(Default)]
struct Claims(MultiIndex<String, (Option<String>, String)>);

impl Claims {
    fn update(&mut self, old: Option<&ObjectMeta>, new: &ObjectMeta, deleted: bool) {
        if let Some(old) = old {
            self.entries(old, false);
        }
        self.entries(new, !deleted);
    }

    fn entries(&mut self, meta: &ObjectMeta, add: bool) {
        let me = (meta.namespace.clone(), meta.name.clone().unwrap_or_default());
        for label in [PROPAGATION_POLICY_PERMANENT_ID_LABEL, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL] {
            let Some(id) = meta.labels.as_ref().and_then(|l| l.get(label)) else { continue };
            self.0.set(format!("{label}={id}"), me.clone(), add);
        }
    }
}

/// Bindings claimed by the policy whose permanent id is `id` under `label`.
fn claimed(ctx: &Context, label: &str, id: &str) -> usize {
    let candidates: Vec<(Option<String>, String)> = ctx.claims.lock().0.get(&format!("{label}={id}")).cloned().collect();
    let has = |labels: &std::collections::BTreeMap<String, String>| labels.get(label).is_some_and(|v| v == id);
    candidates
        .into_iter()
        .filter(|(ns, name)| match ns {
            Some(ns) => ctx.bindings.get(&ObjectRef::new(name).within(ns)).is_some_and(|b| has(b.labels())),
            None => ctx.cluster_bindings.get(&ObjectRef::new(name)).is_some_and(|b| has(b.labels())),
        })
        .count()
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

async fn reconcile<K>(policy: Arc<K>, ctx: Arc<Context>, label: &'static str, selectors: usize) -> Result<Next, Error>
where
    K: Resource<DynamicType = ()> + ResourceExt,
{
    let Some(uid) = policy.meta().uid.clone() else { return Ok(Next::Done) };
    if policy.meta().deletion_timestamp.is_some() {
        ctx.reported.lock().remove(&uid);
        ctx.first_seen.lock().remove(&uid);
        return Ok(Next::Done);
    }
    let generation = policy.meta().generation.unwrap_or(0);
    let id = policy.labels().get(label).cloned();
    // How long this generation has been known to this controller with its permanent id.
    let age = if id.is_some() {
        let mut seen = ctx.first_seen.lock();
        let entry = seen.entry(uid.clone()).or_insert((generation, std::time::Instant::now()));
        if entry.0 != generation {
            *entry = (generation, std::time::Instant::now());
        }
        entry.1.elapsed()
    } else {
        Duration::ZERO
    };
    let count = id.as_deref().map_or(0, |id| claimed(&ctx, label, id));
    if count > 0 {
        ctx.reported.lock().remove(&uid);
    }
    let already = ctx.reported.lock().get(&uid) == Some(&generation);
    match verdict(age, ctx.config.grace, id.is_some(), count, already) {
        Verdict::Quiet => Ok(Next::After(ctx.config.grace.max(Duration::from_secs(30)))),
        Verdict::Wait(d) => Ok(Next::After(d)),
        Verdict::Report => {
            ctx.reported.lock().insert(uid, generation);
            let note = format!(
                "no resource matches this policy's {selectors} resourceSelector(s): nothing is propagated by it (check apiVersion, kind, namespace, name and labelSelector of each selector)"
            );
            ctx.events.publish(policy.as_ref(), true, REASON_NO_MATCH, "Select", note).await;
            Ok(Next::After(ctx.config.grace.max(Duration::from_secs(30))))
        }
    }
}

impl flotilla_runtime::ReconcileError for Error {}

/// Run the controller until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let bindings = rt.informers.store::<ResourceBinding>();
    let cluster_bindings = rt.informers.store::<ClusterResourceBinding>();
    let claims: Arc<Mutex<Claims>> = Arc::default();
    let c = claims.clone();
    rt.informers.subscribe_changes::<ResourceBinding>(move |old, b, deleted| c.lock().update(old.map(|o| &o.metadata), &b.metadata, deleted));
    let c = claims.clone();
    rt.informers.subscribe_changes::<ClusterResourceBinding>(move |old, b, deleted| c.lock().update(old.map(|o| &o.metadata), &b.metadata, deleted));
    // Counting a policy's bindings needs them all listed first.
    tokio::select! {
        _ = rt.informers.synced::<ResourceBinding>() => {}
        _ = rt.shutdown.cancelled() => return,
    }
    tokio::select! {
        _ = rt.informers.synced::<ClusterResourceBinding>() => {}
        _ = rt.shutdown.cancelled() => return,
    }
    let ctx = Arc::new(Context {
        config,
        events: Events::new(client.clone(), NAME),
        bindings,
        cluster_bindings,
        claims,
        reported: Mutex::new(HashMap::new()),
        first_seen: Mutex::new(HashMap::new()),
    });
    let c = ctx.clone();
    let pp = rt.controller_for::<PropagationPolicy>("policyReport-propagationpolicy").backoff(Duration::from_secs(1), Duration::from_secs(30)).run_objects(
        move |p: Arc<PropagationPolicy>| {
            let ctx = c.clone();
            async move {
                let n = p.spec.resource_selectors.len();
                reconcile(p, ctx, PROPAGATION_POLICY_PERMANENT_ID_LABEL, n).await
            }
        },
    );
    let cpp = rt
        .controller_for::<ClusterPropagationPolicy>("policyReport-clusterpropagationpolicy")
        .backoff(Duration::from_secs(1), Duration::from_secs(30))
        .run_objects(move |p: Arc<ClusterPropagationPolicy>| {
            let ctx = ctx.clone();
            async move {
                let n = p.spec.0.resource_selectors.len();
                reconcile(p, ctx, CLUSTER_PROPAGATION_POLICY_PERMANENT_ID_LABEL, n).await
            }
        });
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

    #[test]
    fn claims_follow_the_bindings_permanent_id_labels() {
        let meta = |ns: Option<&str>, name: &str, id: Option<&str>| ObjectMeta {
            namespace: ns.map(String::from),
            name: Some(name.into()),
            labels: id.map(|id| std::collections::BTreeMap::from([(PROPAGATION_POLICY_PERMANENT_ID_LABEL.to_string(), id.to_string())])),
            ..Default::default()
        };
        let key = format!("{PROPAGATION_POLICY_PERMANENT_ID_LABEL}=p1");
        let mut claims = Claims::default();
        claims.update(None, &meta(Some("default"), "a", Some("p1")), false);
        claims.update(None, &meta(Some("default"), "b", Some("p1")), false);
        // Seen twice (a replay to a late subscriber): still one entry.
        claims.update(None, &meta(Some("default"), "b", Some("p1")), false);
        assert_eq!(claims.0.get(&key).count(), 2);
        claims.update(Some(&meta(Some("default"), "a", Some("p1"))), &meta(Some("default"), "a", Some("p2")), false);
        assert_eq!(claims.0.get(&key).count(), 1, "a binding moved to another policy");
        claims.update(Some(&meta(Some("default"), "b", Some("p1"))), &meta(Some("default"), "b", Some("p1")), true);
        assert_eq!(claims.0.get(&key).count(), 0, "the last claiming binding is gone");
    }
}
