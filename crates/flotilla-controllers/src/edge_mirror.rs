//! The pull agent's record of what it applied, kept in its own member (ADR 0032): for every Work
//! of its execution space whose current generation the control plane acknowledged as applied
//! (`Applied` True), an `edge.flotilla.io/v1alpha1` `AppliedWork` in the member's
//! `flotilla-edge` namespace, named as the Work — the manifests as received and, per manifest,
//! the member object's uid and resourceVersion as of then (a Secret's values kept as digests
//! only: the record must not copy them out of the Secret). It is the base against which changes
//! made at the edge while the control plane is away are found, and it is in the member, not on
//! the agent's disk, so an agent restarted while offline — here or elsewhere — still has it.
//!
//! At start the agent installs the two CRDs of `edge.flotilla.io` in its member and creates the
//! namespace. A Work being deleted loses its AppliedWork at once; an AppliedWork whose Work the
//! control plane no longer has (deleted while the agent was away) goes at the next resync.
//! Agent only (`flotilla agent`); not part of the control plane's set.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::flotilla::edge::{AppliedManifest, AppliedWork, AppliedWorkSpec, AppliedWorkStatus, CLUSTER_LABEL, EDGE_NAMESPACE, member_crds};
use flotilla_api::federation::karmada::cluster::Cluster;
use flotilla_api::federation::karmada::names::execution_space;
use flotilla_api::federation::karmada::work::{WORK_PERMANENT_ID_LABEL, Work};
use flotilla_member::Connection;
use flotilla_member::access::Clients;
use flotilla_member::apply::{self, ObjectRef};
use flotilla_runtime::{Next, ReconcileError, condition_status};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef as Key, Store};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::execution::APPLIED;

pub const NAME: &str = "edgeMirror";
/// The field manager of the agent's writes in its member.
pub const FIELD_MANAGER: &str = "flotilla-agent";

/// Settings of the mirror.
#[derive(Clone, Debug)]
pub struct Config {
    pub member_timeout: Duration,
    /// How often AppliedWorks whose Work is gone are looked for.
    pub resync: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { member_timeout: Duration::from_secs(30), resync: Duration::from_secs(300) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: {source}")]
    Member { cluster: String, source: flotilla_member::MemberError },
    #[error("cluster {cluster}: {step}: {source}")]
    MemberApi { cluster: String, step: String, source: kube::Error },
    #[error("cluster {cluster}: reading {object}: {source}")]
    Read { cluster: String, object: String, source: flotilla_member::apply::ApplyError },
    #[error("cluster {cluster}: the AppliedWork of {work}: {source}")]
    Encode { cluster: String, work: String, source: serde_json::Error },
    #[error("cluster {cluster}: on the control plane: {step}: {source}")]
    ControlPlane { cluster: String, step: String, source: kube::Error },
}

impl ReconcileError for Error {}

/// When the control plane acknowledged `work`'s current generation as applied: its `Applied`
/// condition True (for this generation, when the condition says which).
pub fn acknowledged(work: &Work) -> Option<String> {
    let c = condition_status(work.status.as_ref().and_then(|s| s.conditions.as_deref()), APPLIED)?;
    let current = c.observed_generation.is_none_or(|g| Some(g) == work.metadata.generation);
    (c.status == "True" && current).then(|| c.last_transition_time.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// The manifests of `work`, a Secret's values as digests only.
fn manifests(work: &Work) -> Vec<Value> {
    work.spec.workload.as_ref().and_then(|w| w.manifests.as_ref()).into_iter().flatten().map(flotilla_api::edge::without_secret_values).collect()
}

/// The AppliedWork of `work` (spec and labels; its status is [`applied_status`]).
pub fn applied_work_of(work: &Work, cluster: &str) -> AppliedWork {
    let mut a = AppliedWork::new(
        &work.name_any(),
        AppliedWorkSpec {
            work_namespace: work.namespace().unwrap_or_default(),
            work_name: work.name_any(),
            work_uid: work.uid().unwrap_or_default(),
            work_permanent_id: work.labels().get(WORK_PERMANENT_ID_LABEL).cloned(),
            work_generation: work.metadata.generation.unwrap_or(0),
            manifests: manifests(work),
        },
    );
    a.metadata.namespace = Some(EDGE_NAMESPACE.into());
    a.metadata.labels = Some([(CLUSTER_LABEL.to_string(), cluster.to_string())].into());
    a
}

/// The status recording `observed` (per manifest, the member's object or none) as acknowledged
/// at `at`.
pub fn applied_status(manifests: &[Value], observed: &[Option<Value>], at: &str) -> AppliedWorkStatus {
    let entries = manifests
        .iter()
        .zip(observed)
        .enumerate()
        .map(|(i, (m, o))| {
            let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
            let from_member = |p: &str| o.as_ref().map(|o| text(o, p)).unwrap_or_default();
            AppliedManifest {
                ordinal: i32::try_from(i).unwrap_or(i32::MAX),
                api_version: text(m, "/apiVersion"),
                kind: text(m, "/kind"),
                namespace: m.pointer("/metadata/namespace").and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from),
                name: text(m, "/metadata/name"),
                uid: from_member("/metadata/uid"),
                resource_version: from_member("/metadata/resourceVersion"),
            }
        })
        .collect();
    AppliedWorkStatus { acknowledged_at: Some(at.to_string()), manifests: entries }
}

/// Whether `current` already records this generation of `work` as acknowledged at `at`.
fn up_to_date(current: &AppliedWork, work: &Work, at: &str) -> bool {
    current.spec.work_uid == work.uid().unwrap_or_default()
        && current.spec.work_generation == work.metadata.generation.unwrap_or(0)
        && current.status.as_ref().and_then(|s| s.acknowledged_at.as_deref()) == Some(at)
}

struct Context {
    cluster: String,
    config: Config,
    members: Arc<Clients>,
    control_plane: Client,
    clusters: Store<Cluster>,
    /// Work name → (uid, generation, acknowledged at) of the record last written or found up to
    /// date: a Work's frequent status updates then cost no request to the member.
    recorded: Mutex<HashMap<String, (String, i64, String)>>,
}

impl Context {
    async fn connection(&self) -> Result<Connection, Error> {
        let cluster = self
            .clusters
            .state()
            .into_iter()
            .find(|c| c.name_any() == self.cluster)
            .map(|c| (*c).clone())
            .unwrap_or_else(|| Cluster::new(&self.cluster, Default::default()));
        self.members
            .connect(&self.control_plane, &cluster, self.config.member_timeout)
            .await
            .map_err(|source| Error::Member { cluster: self.cluster.clone(), source })
    }

    fn api_err(&self, step: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let (cluster, step) = (self.cluster.clone(), step.into());
        move |source| Error::MemberApi { cluster, step, source }
    }
}

/// Install the CRDs and the namespace in the member (server-side apply: idempotent).
async fn prepare(ctx: &Context) -> Result<(), Error> {
    let conn = ctx.connection().await?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let crds: Api<CustomResourceDefinition> = Api::all(conn.client.clone());
    for crd in member_crds() {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
        crds.patch(&name, &params, &Patch::Apply(&crd)).await.map_err(ctx.api_err(format!("installing CRD {name}")))?;
    }
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": EDGE_NAMESPACE}});
    Api::<Namespace>::all(conn.client.clone()).patch(EDGE_NAMESPACE, &params, &Patch::Apply(&ns)).await.map_err(ctx.api_err("creating the namespace"))?;
    // The kinds are served once their CRDs are established (30s at most; then the caller retries).
    let applied: Api<AppliedWork> = Api::namespaced(conn.client, EDGE_NAMESPACE);
    let mut tries = 0;
    loop {
        match applied.list(&Default::default()).await {
            Ok(_) => return Ok(()),
            Err(e) if tries == 60 => return Err(ctx.api_err("waiting for the AppliedWork kind")(e)),
            Err(_) => tries += 1,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Delete the record of Work `name` (being deleted, or gone).
async fn forget(name: &str, ctx: &Context) -> Result<Next, Error> {
    ctx.recorded.lock().remove(name);
    let conn = ctx.connection().await?;
    match Api::<AppliedWork>::namespaced(conn.client, EDGE_NAMESPACE).delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(e) => Err(ctx.api_err(format!("deleting the AppliedWork of {name}"))(e)),
    }
}

async fn reconcile(work: Arc<Work>, ctx: Arc<Context>) -> Result<Next, Error> {
    let name = work.name_any();
    if work.metadata.deletion_timestamp.is_some() {
        return forget(&name, &ctx).await;
    }
    let conn = ctx.connection().await?;
    let api: Api<AppliedWork> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    // Until the control plane acknowledges this generation, the last acknowledged one stays
    // the base; a change of the Applied condition queues the Work again.
    let Some(at) = acknowledged(&work) else { return Ok(Next::Done) };
    let key = (work.uid().unwrap_or_default(), work.metadata.generation.unwrap_or(0), at.clone());
    if ctx.recorded.lock().get(&name) == Some(&key) {
        return Ok(Next::Done);
    }
    let current = api.get_opt(&name).await.map_err(ctx.api_err(format!("reading the AppliedWork of {name}")))?;
    if current.as_ref().is_some_and(|c| up_to_date(c, &work, &at)) {
        ctx.recorded.lock().insert(name, key);
        return Ok(Next::Done);
    }
    let desired = applied_work_of(&work, &ctx.cluster);
    let mut observed = Vec::new();
    for m in &desired.spec.manifests {
        let object = match ObjectRef::of(m) {
            Ok(r) => apply::get(conn.member(), &r).await.map_err(|source| Error::Read { cluster: ctx.cluster.clone(), object: r.display(), source })?,
            Err(_) => None,
        };
        observed.push(object);
    }
    let status = applied_status(&desired.spec.manifests, &observed, &at);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let encode = |source| Error::Encode { cluster: ctx.cluster.clone(), work: name.clone(), source };
    let body = serde_json::to_value(&desired).map_err(encode)?;
    api.patch(&name, &params, &Patch::Apply(&body)).await.map_err(ctx.api_err(format!("writing the AppliedWork of {name}")))?;
    let status = json!({"apiVersion": "edge.flotilla.io/v1alpha1", "kind": "AppliedWork", "status": serde_json::to_value(&status).map_err(encode)?});
    api.patch_status(&name, &params, &Patch::Apply(&status)).await.map_err(ctx.api_err(format!("writing the status of the AppliedWork of {name}")))?;
    ctx.recorded.lock().insert(name, key);
    Ok(Next::Done)
}

/// Delete the AppliedWorks whose Work the control plane no longer has.
async fn collect(ctx: &Context, works: &Store<Work>) -> Result<usize, Error> {
    let conn = ctx.connection().await?;
    let api: Api<AppliedWork> = Api::namespaced(conn.client.clone(), EDGE_NAMESPACE);
    let es = execution_space(&ctx.cluster);
    let known: BTreeSet<String> = works.state().iter().filter(|w| w.namespace().as_deref() == Some(es.as_str())).map(|w| w.name_any()).collect();
    let mut removed = 0;
    for a in api.list(&Default::default()).await.map_err(ctx.api_err("listing AppliedWorks"))?.items {
        let mine = a.labels().get(CLUSTER_LABEL).is_none_or(|c| *c == ctx.cluster) && a.spec.work_namespace == es;
        if mine && !known.contains(&a.spec.work_name) {
            ctx.recorded.lock().remove(&a.name_any());
            match api.delete(&a.name_any(), &DeleteParams::default()).await {
                Ok(_) => removed += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(ctx.api_err("deleting an AppliedWork")(e)),
            }
        }
    }
    Ok(removed)
}

/// The agent's part: install the kinds, then mirror its Works until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config, members: Arc<Clients>) {
    let Some(cluster) = members.own_cluster().map(str::to_string) else {
        tracing::warn!(controller = NAME, "the edge mirror runs in a pull agent only");
        return;
    };
    let ctx = Arc::new(Context {
        cluster: cluster.clone(),
        config: config.clone(),
        members,
        control_plane: client,
        clusters: rt.informers.store::<Cluster>(),
        recorded: Mutex::new(HashMap::new()),
    });
    let mut wait = Duration::from_millis(500);
    while let Err(e) = prepare(&ctx).await {
        tracing::warn!(controller = NAME, %cluster, error = %e, "cannot install the edge records' kinds in the member; retrying");
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = rt.shutdown.cancelled() => return,
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
    let works = rt.informers.store::<Work>();
    let collector = {
        let (ctx, rt, works) = (ctx.clone(), rt.clone(), works.clone());
        async move {
            tokio::select! {
                _ = rt.informers.synced::<Work>() => {}
                () = rt.shutdown.cancelled() => return,
            }
            loop {
                match collect(&ctx, &works).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(controller = NAME, cluster = %ctx.cluster, removed = n, "AppliedWorks of Works that are gone removed"),
                    Err(e) => tracing::warn!(controller = NAME, cluster = %ctx.cluster, error = %e, "looking for AppliedWorks of Works that are gone failed"),
                }
                tokio::select! {
                    () = tokio::time::sleep(ctx.config.resync) => {}
                    () = rt.shutdown.cancelled() => return,
                }
            }
        }
    };
    // Keyed by Work, so that a Work gone before its deletion was seen still loses its record.
    let mirror = rt.controller_for::<Work>(NAME).backoff(Duration::from_millis(500), Duration::from_secs(60)).run(move |key: Key<Work>| {
        let (ctx, works) = (ctx.clone(), works.clone());
        async move {
            match works.get(&key) {
                Some(w) => reconcile(w, ctx).await,
                None => forget(&key.name, &ctx).await,
            }
        }
    });
    tokio::join!(collector, mirror);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(applied: Option<(&str, Option<i64>)>, generation: i64) -> Work {
        let mut w: Work = serde_json::from_value(json!({
            "apiVersion": "work.karmada.io/v1alpha1", "kind": "Work",
            "metadata": {"name": "web-1", "namespace": "karmada-es-edge", "uid": "w-uid", "generation": generation,
                "labels": {WORK_PERMANENT_ID_LABEL: "p1"}},
            "spec": {"workload": {"manifests": [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 2}}]}}
        }))
        .unwrap();
        if let Some((status, observed)) = applied {
            w.status = Some(
                serde_json::from_value(json!({"conditions": [{"type": "Applied", "status": status, "reason": "AppliedSuccessful", "message": "",
                    "lastTransitionTime": "2026-12-05T10:00:00Z", "observedGeneration": observed}]}))
                .unwrap(),
            );
        }
        w
    }

    #[test]
    fn only_an_applied_current_generation_is_acknowledged() {
        assert_eq!(acknowledged(&work(Some(("True", Some(3))), 3)).as_deref(), Some("2026-12-05T10:00:00Z"));
        assert_eq!(acknowledged(&work(Some(("True", None)), 3)).as_deref(), Some("2026-12-05T10:00:00Z"));
        assert_eq!(acknowledged(&work(Some(("True", Some(2))), 3)), None, "an older generation's");
        assert_eq!(acknowledged(&work(Some(("False", Some(3))), 3)), None);
        assert_eq!(acknowledged(&work(None, 3)), None);
    }

    #[test]
    fn the_record_holds_the_manifests_and_the_member_objects_as_acknowledged() {
        let w = work(Some(("True", Some(3))), 3);
        let a = applied_work_of(&w, "edge");
        assert_eq!(a.metadata.namespace.as_deref(), Some(EDGE_NAMESPACE));
        assert_eq!(a.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(a.labels().get(CLUSTER_LABEL).map(String::as_str), Some("edge"));
        assert_eq!((a.spec.work_generation, a.spec.work_uid.as_str(), a.spec.work_permanent_id.as_deref()), (3, "w-uid", Some("p1")));
        assert_eq!(a.spec.manifests[0]["spec"]["replicas"], 2);
        let observed = vec![Some(json!({"metadata": {"uid": "m-uid", "resourceVersion": "17"}}))];
        let s = applied_status(&a.spec.manifests, &observed, "t");
        assert_eq!(s.manifests.len(), 1);
        let m = &s.manifests[0];
        assert_eq!(
            (m.kind.as_str(), m.namespace.as_deref(), m.name.as_str(), m.uid.as_str(), m.resource_version.as_str()),
            ("Deployment", Some("shop"), "web", "m-uid", "17")
        );
        let mut current = a.clone();
        current.status = Some(s);
        assert!(up_to_date(&current, &w, "t"));
        assert!(!up_to_date(&current, &w, "later"));
        assert!(!up_to_date(&current, &work(Some(("True", Some(4))), 4), "t"));
    }
}
