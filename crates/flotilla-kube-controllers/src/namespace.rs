//! The namespace controller: empties a namespace that is being deleted (every namespaced
//! resource, honouring finalizers), reports what remains in the namespace's conditions, then
//! removes the `kubernetes` finalizer so the namespace goes away.

use std::sync::Arc;
use std::time::Duration;

use flotilla_runtime::{Next, ReconcileError, Runtime};
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, ResourceExt};

/// kube-controller-manager's name for it (`--controllers`, metrics, spans).
pub const NAME: &str = "namespace-controller";
const FINALIZER: &str = "kubernetes";

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// How soon to look again while content is still being deleted, and the longest wait
    /// before a failed pass is retried.
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
    #[error("discovering the namespaced resources failed: {0}")]
    Discovery(#[source] kube::Error),
    #[error("deleting {resource} in namespace {namespace} failed: {source}")]
    DeleteContent { namespace: String, resource: String, source: kube::Error },
    #[error("finalizing namespace {namespace} failed: {source}")]
    Finalize { namespace: String, source: kube::Error },
    #[error("updating the status of namespace {namespace} failed: {source}")]
    Status { namespace: String, source: kube::Error },
}

/// Every failure is the API server's or a finalizer's: retried.
impl ReconcileError for Error {}

fn condition(type_: &str, status: &str, reason: &str, message: String) -> NamespaceCondition {
    NamespaceCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())),
    }
}

pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Next, Error> {
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(Next::Done);
    }
    let name = ns.name_any();
    let has_finalizer = ns.spec.as_ref().and_then(|s| s.finalizers.as_ref()).is_some_and(|f| f.iter().any(|x| x == FINALIZER));
    if !has_finalizer {
        return Ok(Next::Done);
    }
    let discovery = Discovery::new(ctx.client.clone()).run().await.map_err(Error::Discovery)?;
    let mut remaining = Vec::new();
    for group in discovery.groups() {
        // Every resource at its most stable version, not only the preferred version's: a kind
        // served only by another version of its group (Karmada's Work is v1alpha1 while
        // work.karmada.io prefers v1alpha2) would otherwise outlive its namespace.
        for (ar, caps) in group.resources_by_stability() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::DELETE_COLLECTION) || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &name, &ar);
            let _ = api.delete_collection(&DeleteParams::background(), &ListParams::default()).await.map_err(|source| Error::DeleteContent {
                namespace: name.clone(),
                resource: ar.plural.clone(),
                source,
            })?;
            let left = api.list(&ListParams::default()).await.map_err(|source| Error::DeleteContent {
                namespace: name.clone(),
                resource: ar.plural.clone(),
                source,
            })?;
            if !left.items.is_empty() {
                remaining.push(format!("{}.{} has {} resource instances", ar.plural, ar.group, left.items.len()));
            }
        }
    }
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    if !remaining.is_empty() {
        let mut updated = (*ns).clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status.conditions = Some(vec![condition(
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", remaining.join(", ")),
        )]);
        let _ = namespaces.replace_status(&name, &PostParams::default(), &updated).await.map_err(|source| Error::Status { namespace: name.clone(), source })?;
        return Ok(Next::After(ctx.config.requeue));
    }
    let mut finalized = (*ns).clone();
    if let Some(spec) = finalized.spec.as_mut() {
        spec.finalizers = Some(spec.finalizers.take().unwrap_or_default().into_iter().filter(|f| f != FINALIZER).collect());
    }
    match namespaces.replace_subresource("finalize", &name, &PostParams::default(), &finalized).await {
        Ok(_) => Ok(Next::Done),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(source) => Err(Error::Finalize { namespace: name, source }),
    }
}

/// Run the controller on `rt`'s shared Namespace informer until it shuts down.
pub async fn run(client: Client, rt: Runtime, config: Config) {
    let backoff = (flotilla_runtime::controller::DEFAULT_BACKOFF.0, config.requeue.max(flotilla_runtime::controller::DEFAULT_BACKOFF.0));
    let ctx = Arc::new(Context { client, config });
    rt.controller_for::<Namespace>(NAME).backoff(backoff.0, backoff.1).run_objects(move |ns| reconcile(ns, ctx.clone())).await;
}
