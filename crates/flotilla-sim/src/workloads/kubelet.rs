//! The kubelets' part in a pod's life, as testenv's fake kubelet plays it: a pod bound to a
//! (working) node becomes Running and Ready after the start delay, with a pod IP from the
//! member's pod network, conditions and container statuses; a pod of a Job then succeeds after
//! the job pod duration; a pod being deleted is deleted for good (kube-apiserver and
//! Flotilla's API server only mark a pod a node runs). Nothing runs.

use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use crate::cache::{ObjKey, Phase};
use crate::kinds::PODS;
use crate::simulator::{Ctx, Reconciled, SimError};
use crate::workloads::pods;

pub const NODE_IP: &str = "127.0.0.1";

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(info) = ctx.cache.pods.get(key) else {
        ctx.state.starting.remove(key);
        return Ok(None);
    };
    let Some(node) = info.node.as_deref() else { return Ok(None) };
    let node_failed = ctx.state.nodes.get(node).is_some_and(|n| n.failed_since.is_some());
    let node_works = ctx.cache.nodes.contains_key(node) && !node_failed;
    if info.terminating && node_works {
        // Being deleted: nothing runs, so the containers have stopped; finish the deletion as
        // a kubelet does (grace 0, for this very pod). A failed node's pods stay Terminating.
        ctx.state.starting.remove(key);
        let options = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": info.uid.to_string()}});
        return match ctx.api.delete(&PODS, &key.0, &key.1, &options).await {
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(None),
            Err(e) => Err(e.into()),
        };
    }
    if !node_works || info.terminating || info.phase.terminal() {
        ctx.state.starting.remove(key);
        return Ok(None);
    }
    let job_pod = is_job_pod(info);
    if info.phase == Phase::Running && info.ready {
        if !job_pod {
            return Ok(None);
        }
        let Some(pod) = ctx.read::<Pod>(&PODS, &key.0, &key.1).await? else { return Ok(None) };
        let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0.as_millisecond()).unwrap_or(0);
        let ran = Duration::from_millis((pods::now_ms() - started).max(0) as u64);
        let needed = ctx.config.timings.job_pod_duration;
        if ran < needed {
            return Ok(Some(needed - ran + Duration::from_millis(10)));
        }
        write_status(ctx, key, &pod, succeeded_status(&pod)).await?;
        return Ok(None);
    }
    let delay = ctx.config.timings.pod_ready_delay;
    let first_seen = *ctx.state.starting.entry(key.clone()).or_insert(ctx.now);
    let waited = ctx.now.saturating_duration_since(first_seen);
    if waited < delay {
        return Ok(Some(delay - waited));
    }
    ctx.state.starting.remove(key);
    let Some(pod) = ctx.read::<Pod>(&PODS, &key.0, &key.1).await? else { return Ok(None) };
    let status = running_status(ctx, &pod);
    write_status(ctx, key, &pod, status).await?;
    Ok(job_pod.then_some(ctx.config.timings.job_pod_duration + Duration::from_millis(10)))
}

/// A pod of a Job (its containers exit): restartPolicy Never or OnFailure.
fn is_job_pod(info: &crate::cache::PodInfo) -> bool {
    info.owner.as_ref().is_some_and(|o| &*o.kind == "Job")
}

async fn write_status(ctx: &Ctx<'_>, key: &ObjKey, pod: &Pod, status: PodStatus) -> Result<(), SimError> {
    let body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": key.1, "namespace": key.0, "resourceVersion": pod.metadata.resource_version},
        "status": status,
    });
    match ctx.api.replace(&PODS, &key.0, &key.1, &body, true).await {
        Ok(_) => Ok(()),
        // Gone, or changed under us: the watch brings the newer version back.
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Hand out the next free pod IP of the member's network.
fn allocate_ip(ctx: &mut Ctx<'_>) -> Ipv4Addr {
    let (base, prefix) = ctx.config.pod_cidr;
    let size = 1u32 << (32 - u32::from(prefix));
    let base = u32::from(base) & !(size - 1);
    let in_use: std::collections::HashSet<Ipv4Addr> = ctx.cache.pods.values().filter_map(|p| p.ip).collect();
    for _ in 0..size {
        ctx.state.next_ip = (ctx.state.next_ip % (size - 2)) + 1;
        let ip = Ipv4Addr::from(base + ctx.state.next_ip);
        if !in_use.contains(&ip) {
            return ip;
        }
    }
    Ipv4Addr::from(base + 1)
}

fn set_true(conds: &mut Vec<PodCondition>, type_: &str, now: &Time) {
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != "True" {
                c.status = "True".into();
                c.reason = None;
                c.message = None;
                c.last_transition_time = Some(now.clone());
            }
        }
        None => conds.push(PodCondition { type_: type_.into(), status: "True".into(), last_transition_time: Some(now.clone()), ..Default::default() }),
    }
}

fn container_id(pod: &Pod, container: &str) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    format!("flotilla-sim://{}-{container}", &uid[..uid.len().min(8)])
}

fn running_status(ctx: &mut Ctx<'_>, pod: &Pod) -> PodStatus {
    let now = pods::now();
    let mut st = pod.status.clone().unwrap_or_default();
    st.phase = Some("Running".into());
    st.host_ip = Some(NODE_IP.into());
    st.host_ips = Some(vec![HostIP { ip: NODE_IP.into() }]);
    if st.pod_ip.as_deref().is_none_or(str::is_empty) {
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        let ip = if host_network { NODE_IP.to_string() } else { allocate_ip(ctx).to_string() };
        st.pod_ips = Some(vec![PodIP { ip: ip.clone() }]);
        st.pod_ip = Some(ip);
    }
    if st.start_time.is_none() {
        st.start_time = Some(now.clone());
    }
    let mut conds = st.conditions.take().unwrap_or_default();
    for t in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        set_true(&mut conds, t, &now);
    }
    st.conditions = Some(conds);
    let spec = pod.spec.clone().unwrap_or_default();
    let status_of = |name: &str, image: &str, running: bool| ContainerStatus {
        name: name.into(),
        image: image.into(),
        image_id: format!("flotilla-sim://{image}"),
        container_id: Some(container_id(pod, name)),
        ready: running,
        started: running.then_some(true),
        restart_count: 0,
        last_state: Some(ContainerState::default()),
        state: Some(if running {
            ContainerState { running: Some(ContainerStateRunning { started_at: Some(now.clone()) }), ..Default::default() }
        } else {
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    started_at: Some(now.clone()),
                    finished_at: Some(now.clone()),
                    container_id: Some(container_id(pod, name)),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }),
        ..Default::default()
    };
    let init: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| status_of(&c.name, c.image.as_deref().unwrap_or(""), false))
        .map(|mut s| {
            s.ready = true;
            s
        })
        .collect();
    st.init_container_statuses = (!init.is_empty()).then_some(init);
    st.container_statuses = Some(spec.containers.iter().map(|c| status_of(&c.name, c.image.as_deref().unwrap_or(""), true)).collect());
    st
}

fn succeeded_status(pod: &Pod) -> PodStatus {
    let now = pods::now();
    let mut st = pod.status.clone().unwrap_or_default();
    st.phase = Some("Succeeded".into());
    for c in st.conditions.iter_mut().flatten() {
        if matches!(c.type_.as_str(), "Ready" | "ContainersReady" | "PodReadyToStartContainers") {
            c.status = "False".into();
            c.reason = Some("PodCompleted".into());
            c.last_transition_time = Some(now.clone());
        }
    }
    for cs in st.container_statuses.iter_mut().flatten() {
        let started = cs.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.clone()).unwrap_or_else(|| now.clone());
        cs.ready = false;
        cs.started = Some(false);
        cs.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                started_at: Some(started),
                finished_at: Some(now.clone()),
                container_id: cs.container_id.clone(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    st
}
