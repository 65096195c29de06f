//! The controllers of kube-controller-manager, kube-scheduler and the kubelet that a member's
//! workloads need, one module each, each a `reconcile(key, ctx)` over the simulator's cache
//! (`simulator::Ctx`) that writes through the member's API and may ask to run again later.
//!
//! Status is written the way the real controllers write it (observedGeneration, replica
//! counts, conditions with their reasons and messages), checked against real members by
//! `tests/equivalence.rs`.

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpointslice;
pub mod events;
pub mod gc;
pub mod job;
pub mod kubelet;
pub mod namespace;
pub mod pods;
pub mod replicaset;
pub mod scheduler;
pub mod service_ip;
pub mod statefulset;

use crate::cache::Work;
use crate::simulator::{Ctx, Reconciled};

/// Run the controller a piece of work belongs to.
pub async fn reconcile(work: &Work, ctx: &mut Ctx<'_>) -> Reconciled {
    match work {
        Work::Deployment(k) => deployment::reconcile(k, ctx).await,
        Work::ReplicaSet(k) => replicaset::reconcile(k, ctx).await,
        Work::StatefulSet(k) => statefulset::reconcile(k, ctx).await,
        Work::DaemonSet(k) => daemonset::reconcile(k, ctx).await,
        Work::Job(k) => job::reconcile(k, ctx).await,
        Work::CronJob(k) => cronjob::reconcile(k, ctx).await,
        Work::Service(k) => match service_ip::reconcile(k, ctx).await {
            Ok(_) => endpointslice::reconcile(k, ctx).await,
            Err(e) => Err(e),
        },
        Work::Schedule => scheduler::reconcile(ctx).await,
        Work::Pod(k) => kubelet::reconcile(k, ctx).await,
        Work::Node(name) => crate::nodes::reconcile(name, ctx).await,
        Work::Namespace(name) => namespace::reconcile(name, ctx).await,
        Work::Collect { uid, key } => gc::reconcile(uid, key, ctx).await,
    }
}
