//! The simulated containers' `pods/log` and `pods/exec`, served by the member's API server
//! through its connect seam as a real cluster serves them (kube-apiserver's checks, then the
//! kubelet's answer), so that `kubectl logs` and `kubectl exec` work against a simulated member,
//! directly or through the control plane's cluster proxy.
//!
//! They behave as testenv's fake kubelet does (`testenv/internal/kubelet/`), so a test runs
//! against either: the same fake log lines ([`logs`]) and the same built-in shell ([`shell`]).
//! Exec speaks the Kubernetes WebSocket streaming protocol (`v5.channel.k8s.io`,
//! `v4.channel.k8s.io`; [`exec`], over the framing in [`websocket`]); SPDY/3.1, the only
//! transport of kubectl 1.29 and older, is refused with a Status that says so.
//!
//! Nothing runs and nothing is dialled: the pod is read from the member's API, the answer is
//! made in-process.

pub mod exec;
pub mod logs;
pub mod shell;
pub mod websocket;

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use flotilla_apiserver::ApiServer;
use flotilla_apiserver::connect::{ConnectError, ConnectRequest, ConnectResponse, ConnectSubresource, Connecter};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::api::Writer;
use crate::kinds::PODS;

/// A request's query: its name–value pairs, decoded, in order (`command` repeats).
#[derive(Clone, Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        Query(form_urlencoded::parse(raw.unwrap_or("").as_bytes()).into_owned().collect())
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Query {
        Query(pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect()
    }
}

/// Serve `pods/log` and `pods/exec` on a member's API server; `pods` re-reads a pod while its
/// log is followed or a command runs.
pub fn install(api: &ApiServer, pods: Writer) {
    let pods = Arc::new(pods);
    api.install_connect(ConnectSubresource {
        group: String::new(),
        target: flotilla_apiserver::connect::ConnectTarget::Stored,
        resource: "pods".into(),
        subresource: "log".into(),
        kind: "Pod".into(),
        methods: vec![Method::GET],
        handler: Arc::new(PodLogs(pods.clone())),
    });
    api.install_connect(ConnectSubresource {
        group: String::new(),
        target: flotilla_apiserver::connect::ConnectTarget::Stored,
        resource: "pods".into(),
        subresource: "exec".into(),
        kind: "PodExecOptions".into(),
        methods: vec![Method::GET, Method::POST],
        handler: Arc::new(exec::PodExec(pods)),
    });
}

fn pod_of(object: serde_json::Value) -> Result<Pod, ConnectError> {
    serde_json::from_value(object).map_err(|e| ConnectError::Unsupported(format!("not a pod: {e}")))
}

fn name_of(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

/// The container a request is for, as kube-apiserver chooses it: the one named, which must be
/// in the pod; else the only one; else a 400 that lists the choices (`exec` lists the init
/// containers apart, as kube-apiserver does).
pub fn choose_container(pod: &Pod, asked: &str, for_exec: bool) -> Result<String, String> {
    let name = name_of(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let names = |cs: &[k8s_openapi::api::core::v1::Container]| cs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    let containers = names(&spec.containers);
    let init = names(spec.init_containers.as_deref().unwrap_or_default());
    let ephemeral: Vec<String> = spec.ephemeral_containers.iter().flatten().map(|c| c.name.clone()).collect();
    if !asked.is_empty() {
        if containers.iter().chain(&init).chain(&ephemeral).any(|c| c == asked) {
            return Ok(asked.to_string());
        }
        return Err(format!("container {asked} is not valid for pod {name}"));
    }
    match containers.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(format!("a container name must be specified for pod {name}")),
        _ if for_exec => {
            let mut e = format!("a container name must be specified for pod {name}, choose one of: [{}]", containers.join(" "));
            if !init.is_empty() {
                e.push_str(&format!(" or one of the init containers: [{}]", init.join(" ")));
            }
            Err(e)
        }
        _ => {
            let all: Vec<String> = init.into_iter().chain(containers).chain(ephemeral).collect();
            Err(format!("a container name must be specified for pod {name}, choose one of: [{}]", all.join(" ")))
        }
    }
}

/// What the (simulated) kubelet knows of a container.
#[derive(Debug, PartialEq, Eq)]
pub enum ContainerRun {
    Running,
    /// Ran and stopped (an init container, a finished Job's pod).
    Terminated,
    /// Not started yet, and why (`ContainerCreating` while the simulator starts the pod).
    Waiting(String),
}

fn status_of<'a>(pod: &'a Pod, container: &str) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    [&st.container_statuses, &st.init_container_statuses, &st.ephemeral_container_statuses].into_iter().flatten().flatten().find(|s| s.name == container)
}

/// The container's state from the pod's status; a container the status does not list yet is
/// being created.
pub fn container_run(pod: &Pod, container: &str) -> ContainerRun {
    let Some(state) = status_of(pod, container).and_then(|s| s.state.as_ref()) else {
        return ContainerRun::Waiting("ContainerCreating".into());
    };
    if state.running.is_some() {
        ContainerRun::Running
    } else if state.terminated.is_some() {
        ContainerRun::Terminated
    } else {
        let reason = state.waiting.as_ref().and_then(|w| w.reason.clone()).unwrap_or_else(|| "ContainerCreating".into());
        ContainerRun::Waiting(reason)
    }
}

fn waiting_message(container: &str, pod: &str, reason: &str) -> String {
    format!("container {container:?} in pod {pod:?} is waiting to start: {reason}")
}

/// Re-reads a pod to tell whether the one a stream started on still runs: the same UID, not
/// being deleted, not finished.
#[derive(Clone)]
struct Liveness {
    pods: Arc<Writer>,
    namespace: String,
    name: String,
    uid: Option<String>,
}

impl Liveness {
    fn of(pods: Arc<Writer>, pod: &Pod) -> Liveness {
        Liveness { pods, namespace: pod.metadata.namespace.clone().unwrap_or_default(), name: name_of(pod).to_string(), uid: pod.metadata.uid.clone() }
    }

    async fn alive(&self) -> bool {
        let Ok(now) = self.pods.get(&PODS, &self.namespace, &self.name).await else { return false };
        let phase = now["status"]["phase"].as_str().unwrap_or("");
        now["metadata"]["uid"].as_str() == self.uid.as_deref() && now["metadata"]["deletionTimestamp"].is_null() && phase != "Succeeded" && phase != "Failed"
    }
}

/// `pods/log`.
struct PodLogs(Arc<Writer>);

impl Connecter for PodLogs {
    fn connect(&self, r: ConnectRequest) -> BoxFuture<'static, Result<ConnectResponse, ConnectError>> {
        let pods = self.0.clone();
        Box::pin(async move {
            let pod = pod_of(r.object)?;
            let opts = logs::LogOptions::parse(&Query::parse(r.query.as_deref()), jiff::Timestamp::now()).map_err(ConnectError::BadRequest)?;
            let container = choose_container(&pod, &opts.container, false).map_err(ConnectError::BadRequest)?;
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty) {
                // Not scheduled: no kubelet to ask, and kube-apiserver answers with an empty log.
                return Ok(ConnectResponse { status: StatusCode::OK, headers, body: Box::pin(futures::stream::empty()) });
            }
            let name = name_of(&pod);
            // The kubelet's checks: a previous instance (the simulated containers never
            // restart), then one that has not started.
            if opts.previous {
                return Err(ConnectError::BadRequest(format!("previous terminated container {container:?} in pod {name:?} not found")));
            }
            if let ContainerRun::Waiting(reason) = container_run(&pod, &container) {
                return Err(ConnectError::BadRequest(waiting_message(&container, name, &reason)));
            }
            let source =
                logs::LogSource::of(&pod, &container).ok_or_else(|| ConnectError::BadRequest(format!("container {container} is not valid for pod {name}")))?;
            let liveness = Liveness::of(pods, &pod);
            let alive: logs::Alive = Box::new(move || {
                let l = liveness.clone();
                Box::pin(async move { l.alive().await })
            });
            Ok(ConnectResponse { status: StatusCode::OK, headers, body: logs::body(source, opts, logs::FOLLOW_EVERY, alive) })
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "d"}, "spec": spec, "status": status})).unwrap()
    }

    #[test]
    fn a_container_is_chosen_as_kube_apiserver_chooses_it() {
        let one = pod(json!({"containers": [{"name": "a"}]}), json!({}));
        assert_eq!(choose_container(&one, "", false).unwrap(), "a");
        assert_eq!(choose_container(&one, "b", true).unwrap_err(), "container b is not valid for pod p");
        let many = pod(json!({"initContainers": [{"name": "i"}], "containers": [{"name": "a"}, {"name": "b"}]}), json!({}));
        assert_eq!(choose_container(&many, "i", false).unwrap(), "i", "an init container may be named");
        assert_eq!(choose_container(&many, "", false).unwrap_err(), "a container name must be specified for pod p, choose one of: [i a b]");
        assert_eq!(
            choose_container(&many, "", true).unwrap_err(),
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        let none = pod(json!({"containers": []}), json!({}));
        assert_eq!(choose_container(&none, "", false).unwrap_err(), "a container name must be specified for pod p");
    }

    #[test]
    fn a_container_the_status_does_not_list_is_being_created() {
        let p = pod(
            json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "initContainers": [{"name": "i"}]}),
            json!({
                "containerStatuses": [
                    {"name": "a", "image": "x", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}},
                    {"name": "b", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                ],
                "initContainerStatuses": [
                    {"name": "i", "image": "x", "imageID": "", "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
                ],
            }),
        );
        assert_eq!(container_run(&p, "a"), ContainerRun::Running);
        assert_eq!(container_run(&p, "b"), ContainerRun::Waiting("ImagePullBackOff".into()));
        assert_eq!(container_run(&p, "c"), ContainerRun::Waiting("ContainerCreating".into()));
        assert_eq!(container_run(&p, "i"), ContainerRun::Terminated);
        assert_eq!(waiting_message("c", "p", "ContainerCreating"), "container \"c\" in pod \"p\" is waiting to start: ContainerCreating");
    }
}
