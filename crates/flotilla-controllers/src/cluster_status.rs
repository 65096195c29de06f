//! The cluster status controller, for the clusters its member clients reach ([`Clients::reaches`]:
//! Push clusters with a `secretRef` on the control plane, its own cluster in a pull agent —
//! the same code in both): every `interval` it probes
//! the member's `/readyz` (falling back to `/healthz` when that is 404) with `probe_timeout`, and
//! while the member is Ready collects its version, API enablements, node summary and resource
//! summary into `Cluster.status`.
//!
//! `Ready` is published as Karmada publishes it: `ClusterReady`, `ClusterNotReady` (reachable,
//! health endpoint not ok) or `ClusterNotReachable`; Flotilla adds the cause when the member
//! rejects the credential (401: e.g. its service account was deleted). Flap damping: a change
//! from True is published only after it persisted for `failure_threshold`, a change to True only
//! after `success_threshold`; the first observation is published at once.
//!
//! The settings follow KubeFed's `KubeFedConfig` (`kube-federation-system/kubefed`,
//! `spec.clusterHealthCheck`) while it exists, with this precedence per setting: a flag given
//! explicitly wins, then the KubeFedConfig, then the default ([`Config::with_kubefed`]). KubeFed
//! counts probes where this controller counts time: a threshold of n probes is n − 1 periods (the
//! first probe seeing the new state is the first of the n). The settings in force are announced
//! as a Normal Event `ClusterHealthCheckSettings` on the KubeFedConfig whenever they change.
//!
//! A Pull cluster's status is its agent's to post; on the control plane this controller watches
//! the agent's Lease `karmada-cluster/<cluster>` instead, as Karmada's cluster controller does:
//! when the Lease has not been renewed for `monitor_grace_period` (`startup_grace_period` before
//! the agent ever posted a status), `Ready` becomes `Unknown` — `ClusterStatusUnknown`, "Cluster
//! status controller stopped posting cluster status." (or `ClusterStatusNeverUpdated`) — which
//! the cluster controller turns into the `unreachable` taint. Renewal is measured on the control
//! plane's own clock (when it saw the renew time change), so clock skew does not count.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_api::federation::karmada::cluster::{ApiEnablement, ApiResource, Cluster, ClusterStatus, ClusterSyncMode, NodeSummary};
use flotilla_member::access::Clients;
use flotilla_member::discovery;
use flotilla_runtime::Next;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;

use flotilla_api::federation::kubefed::core::{ClusterHealthCheckConfig, DEFAULT_SYSTEM_NAMESPACE, KubeFedConfig};
use flotilla_api::federation::kubefed::install::KUBEFED_CONFIG_NAME;
use flotilla_runtime::{Events, condition, condition_status, set_condition};

pub const NAME: &str = "cluster-status";

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// How often each member is probed (Karmada: `--cluster-status-update-frequency=10s`).
    pub interval: Duration,
    /// Timeout of one probe and of each collection request.
    pub probe_timeout: Duration,
    /// How long a not-ready observation must last before Ready=True is withdrawn.
    pub failure_threshold: Duration,
    /// How long a ready observation must last before Ready=True is published again.
    pub success_threshold: Duration,
    /// How long a Pull cluster's Lease may go unrenewed before Ready becomes Unknown (Karmada:
    /// `--cluster-monitor-grace-period=40s`).
    pub monitor_grace_period: Duration,
    /// The same before the agent first posted a status (`--cluster-startup-grace-period=60s`).
    pub startup_grace_period: Duration,
    /// How often a Pull cluster's Lease is looked at (`--cluster-monitor-period=5s`).
    pub monitor_period: Duration,
    /// The settings given explicitly (flags): the KubeFedConfig does not change them.
    pub explicit: Explicit,
}

/// Which of [`Config`]'s settings were given explicitly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Explicit {
    pub interval: bool,
    pub probe_timeout: bool,
    pub failure_threshold: bool,
    pub success_threshold: bool,
}

/// The Normal Event on the KubeFedConfig naming the settings in force.
pub const REASON_SETTINGS: &str = "ClusterHealthCheckSettings";

impl Config {
    /// The settings in force under a KubeFedConfig's `spec.clusterHealthCheck` (`None`: no
    /// KubeFedConfig): per setting, the explicit flag, else the KubeFedConfig's value, else
    /// `self`'s (the default). Thresholds in probes become n − 1 periods of the period in force.
    pub fn with_kubefed(&self, check: Option<&ClusterHealthCheckConfig>) -> Config {
        let check = check.cloned().unwrap_or_default();
        let duration = |text: &Option<String>| {
            let secs = flotilla_api::admission::kubefed::go_duration_seconds(text.as_deref()?)?;
            (secs > 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs))
        };
        let e = self.explicit;
        let interval = if e.interval { self.interval } else { duration(&check.period).unwrap_or(self.interval) };
        let probes = |n: Option<i64>| n.filter(|n| *n > 0).map(|n| interval * u32::try_from(n - 1).unwrap_or(u32::MAX));
        Config {
            interval,
            probe_timeout: if e.probe_timeout { self.probe_timeout } else { duration(&check.timeout).unwrap_or(self.probe_timeout) },
            failure_threshold: if e.failure_threshold { self.failure_threshold } else { probes(check.failure_threshold).unwrap_or(self.failure_threshold) },
            success_threshold: if e.success_threshold { self.success_threshold } else { probes(check.success_threshold).unwrap_or(self.success_threshold) },
            monitor_grace_period: self.monitor_grace_period,
            startup_grace_period: self.startup_grace_period,
            monitor_period: self.monitor_period,
            explicit: e,
        }
    }

    /// One line for the Event and the log: each setting and where it came from.
    pub fn describe(&self, check: Option<&ClusterHealthCheckConfig>) -> String {
        let check = check.cloned().unwrap_or_default();
        let source = |explicit: bool, given: bool| {
            if explicit {
                "flag"
            } else if given {
                "KubeFedConfig"
            } else {
                "default"
            }
        };
        let e = self.explicit;
        let (period, timeout) = (check.period.is_some(), check.timeout.is_some());
        let (failure, success) = (check.failure_threshold.is_some(), check.success_threshold.is_some());
        format!(
            "cluster health check: probe every {:?} ({}), timeout {:?} ({}), Ready withdrawn after {:?} failing ({}), restored after {:?} ready ({})",
            self.interval,
            source(e.interval, period),
            self.probe_timeout,
            source(e.probe_timeout, timeout),
            self.failure_threshold,
            source(e.failure_threshold, failure),
            self.success_threshold,
            source(e.success_threshold, success),
        )
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interval: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(5),
            failure_threshold: Duration::from_secs(30),
            success_threshold: Duration::from_secs(30),
            monitor_grace_period: Duration::from_secs(40),
            startup_grace_period: Duration::from_secs(60),
            monitor_period: Duration::from_secs(5),
            explicit: Explicit::default(),
        }
    }
}

/// What one probe saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    Ready,
    /// Reachable; the health endpoint answered without ok.
    NotReady(String),
    /// Not reachable (transport error or timeout).
    NotReachable(String),
    /// The member rejected the stored credential.
    CredentialRejected(String),
    /// The control plane holds no usable access data.
    NoAccess(String),
}

impl Health {
    fn ready(&self) -> bool {
        matches!(self, Health::Ready)
    }

    /// The `Ready` condition for this observation.
    pub fn condition(&self) -> Condition {
        match self {
            Health::Ready => condition("Ready", true, "ClusterReady", "cluster is healthy and ready to accept workloads", None),
            Health::NotReady(m) => {
                condition("Ready", false, "ClusterNotReady", format!("cluster is reachable but health endpoint responded without ok: {m}"), None)
            }
            Health::NotReachable(m) => condition("Ready", false, "ClusterNotReachable", format!("cluster is not reachable: {m}"), None),
            Health::CredentialRejected(m) => condition(
                "Ready",
                false,
                "ClusterNotReachable",
                format!(
                    "the member rejected Flotilla's credential (401 Unauthorized): {m}; the service account token stored in the cluster's secretRef is invalid or its service account was deleted — run `flotilla join` again"
                ),
                None,
            ),
            Health::NoAccess(m) => condition("Ready", false, "ClusterNotReachable", format!("cannot build a client for the cluster: {m}"), None),
        }
    }
}

/// Per-cluster memory of the damping: the observation that differs from what is published and
/// since when it has held.
#[derive(Default)]
struct Pending {
    since: HashMap<String, (bool, Instant)>,
}

pub struct Context {
    pub client: Client,
    /// The settings as given (flags and defaults).
    pub base: Config,
    /// The settings in force: `base` under the KubeFedConfig.
    current: Mutex<Config>,
    pub clients: Arc<Clients>,
    pending: Mutex<Pending>,
    /// Per Pull cluster: the Lease renew time last seen and when it was first seen.
    leases: Mutex<HashMap<String, (Option<String>, Instant)>>,
}

impl Context {
    pub fn new(client: Client, config: Config, clients: Arc<Clients>) -> Context {
        Context { client, current: Mutex::new(config.clone()), base: config, clients, pending: Mutex::new(Pending::default()), leases: Mutex::default() }
    }

    /// The settings in force.
    pub fn config(&self) -> Config {
        self.current.lock().clone()
    }

    /// Put `base` under a KubeFedConfig's health check (`None`: none).
    fn follow(&self, check: Option<&ClusterHealthCheckConfig>) {
        *self.current.lock() = self.base.with_kubefed(check);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: writing status: {source}")]
    WriteStatus { cluster: String, source: kube::Error },
}

/// Probe `/readyz`, falling back to `/healthz`.
pub async fn probe(client: &Client) -> Health {
    for path in ["/readyz", "/healthz"] {
        let request = match http::Request::get(path).body(Vec::new()) {
            Ok(r) => r,
            Err(e) => return Health::NotReachable(e.to_string()),
        };
        match client.request_text(request).await {
            Ok(body) if body.trim() == "ok" || body.trim().ends_with("check passed") => return Health::Ready,
            Ok(body) => return Health::NotReady(body.chars().take(200).collect()),
            Err(kube::Error::Api(s)) if s.code == 404 && path == "/readyz" => continue,
            Err(kube::Error::Api(s)) if s.code == 401 => return Health::CredentialRejected(s.message),
            Err(kube::Error::Api(s)) => return Health::NotReady(format!("{} {}", s.code, s.message.chars().take(200).collect::<String>())),
            Err(e) => return Health::NotReachable(e.to_string()),
        }
    }
    Health::NotReady("no health endpoint".into())
}

/// Decide what `Ready` to publish: `observed` when it agrees with `published` or when it has held
/// long enough, otherwise keep `published` and say when to look again.
fn damp(ctx: &Context, cluster: &str, published: Option<bool>, observed: bool) -> (bool, Option<Duration>) {
    let mut pending = ctx.pending.lock();
    let Some(published) = published else {
        pending.since.remove(cluster);
        return (true, None);
    };
    if published == observed {
        pending.since.remove(cluster);
        return (true, None);
    }
    let threshold = if observed { ctx.config().success_threshold } else { ctx.config().failure_threshold };
    let since = match pending.since.get(cluster) {
        Some((o, at)) if *o == observed => *at,
        _ => {
            let now = Instant::now();
            pending.since.insert(cluster.into(), (observed, now));
            now
        }
    };
    let held = since.elapsed();
    if held >= threshold {
        pending.since.remove(cluster);
        (true, None)
    } else {
        (false, Some(threshold - held))
    }
}

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Next, Error> {
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Done);
    }
    if !ctx.clients.serves(&cluster) {
        if cluster.spec.sync_mode == ClusterSyncMode::Pull {
            return monitor_lease(&cluster, &ctx).await;
        }
        return Ok(Next::Done);
    }
    if !ctx.clients.reaches(&cluster) {
        return Ok(Next::Done);
    }
    let name = cluster.name_any();
    let member = match ctx.clients.access(&ctx.client, &cluster).await {
        Ok(access) => ctx.clients.get(&access, ctx.config().probe_timeout).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let health = match &member {
        Ok(client) => probe(client).await,
        Err(e) => Health::NoAccess(e.clone()),
    };
    let old = cluster.status.clone().unwrap_or_default();
    let published = condition_status(old.conditions.as_deref(), "Ready").map(|c| c.status == "True");
    let (publish, recheck) = damp(&ctx, &name, published, health.ready());
    let mut status = old.clone();
    let mut conditions = status.conditions.take().unwrap_or_default();
    if publish {
        set_condition(&mut conditions, health.condition());
    }
    if let (true, Ok(client)) = (health.ready(), &member) {
        collect(client, &name, &mut status, &mut conditions).await;
    }
    status.conditions = Some(conditions);
    if !same_status(&status, &old) {
        let clusters: Api<Cluster> = Api::all(ctx.client.clone());
        let patch = serde_json::json!({"status": status});
        match clusters.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Next::Done),
            Err(source) => return Err(Error::WriteStatus { cluster: name, source }),
        }
        if publish && published != Some(health.ready()) {
            tracing::info!(cluster = %name, ready = health.ready(), reason = ?health, "cluster readiness changed");
        }
    }
    let next = recheck.map_or(ctx.config().interval, |r| r.min(ctx.config().interval));
    Ok(Next::After(next))
}

/// The namespace of the pull agents' Leases (Karmada's `karmada-cluster`).
pub const LEASE_NAMESPACE: &str = "karmada-cluster";

/// What a lapsed Lease does to a Pull cluster's conditions: Ready Unknown, as Karmada's cluster
/// controller words it (None: nothing to change).
pub fn lapsed_ready(conditions: &[Condition]) -> Option<Condition> {
    match condition_status(Some(conditions), "Ready") {
        None => Some(condition("Ready", false, "ClusterStatusNeverUpdated", "Cluster status controller never posted cluster status.", None)),
        Some(c) if c.status == "Unknown" => None,
        Some(_) => Some(condition("Ready", false, "ClusterStatusUnknown", "Cluster status controller stopped posting cluster status.", None)),
    }
    .map(|mut c| {
        c.status = "Unknown".into();
        c
    })
}

/// A Pull cluster on the control plane: Ready becomes Unknown once its agent's Lease lapses.
async fn monitor_lease(cluster: &Cluster, ctx: &Context) -> Result<Next, Error> {
    use k8s_openapi::api::coordination::v1::Lease;
    let name = cluster.name_any();
    let config = ctx.config();
    let lease = match Api::<Lease>::namespaced(ctx.client.clone(), LEASE_NAMESPACE).get_opt(&name).await {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(cluster = %name, error = %e, "reading the agent's lease failed");
            return Ok(Next::After(config.monitor_period));
        }
    };
    let renewed = lease.and_then(|l| l.spec).and_then(|s| s.renew_time).map(|t| t.0.to_string());
    let since = {
        let mut seen = ctx.leases.lock();
        let entry = seen.entry(name.clone()).or_insert_with(|| (renewed.clone(), Instant::now()));
        if entry.0 != renewed {
            *entry = (renewed, Instant::now());
        }
        entry.1.elapsed()
    };
    let conditions = cluster.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let grace = if condition_status(Some(&conditions), "Ready").is_none() { config.startup_grace_period } else { config.monitor_grace_period };
    if since < grace {
        return Ok(Next::After((grace - since).min(config.monitor_period)));
    }
    let Some(lapsed) = lapsed_ready(&conditions) else { return Ok(Next::After(config.monitor_period)) };
    let mut conditions = conditions;
    set_condition(&mut conditions, lapsed);
    let patch = serde_json::json!({"status": {"conditions": conditions}});
    match Api::<Cluster>::all(ctx.client.clone()).patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => tracing::warn!(cluster = %name, unrenewed_for = ?since, "the pull agent's lease lapsed; cluster Ready=Unknown"),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Next::Done),
        Err(source) => return Err(Error::WriteStatus { cluster: name, source }),
    }
    Ok(Next::After(config.monitor_period))
}

/// Status equality ignoring condition timestamps.
fn same_status(a: &ClusterStatus, b: &ClusterStatus) -> bool {
    let strip = |s: &ClusterStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

/// Version, API enablements, node and resource summaries. A failed part keeps its old value.
async fn collect(client: &Client, cluster: &str, status: &mut ClusterStatus, conditions: &mut Vec<Condition>) {
    match client.apiserver_version().await {
        Ok(v) => status.kubernetes_version = Some(v.git_version),
        Err(e) => tracing::debug!(cluster, error = %e, "reading the member version failed"),
    }
    match discovery::api_enablements(client).await {
        Ok(list) => {
            let enablements: Vec<ApiEnablement> = list
                .into_iter()
                .map(|e| ApiEnablement {
                    group_version: e.group_version,
                    resources: Some(e.resources.into_iter().map(|(name, kind)| ApiResource { name, kind }).collect()),
                })
                .collect();
            let (ok, reason) = if enablements.is_empty() { (false, "Empty") } else { (true, "Complete") };
            set_condition(conditions, condition("CompleteAPIEnablements", ok, reason, "", None));
            status.api_enablements = Some(enablements);
        }
        Err(e) => {
            set_condition(conditions, condition("CompleteAPIEnablements", false, "Partial", e.to_string(), None));
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    match (nodes.list(&ListParams::default()).await, pods.list(&ListParams::default()).await) {
        (Ok(nodes), Ok(pods)) => {
            let ready = nodes
                .items
                .iter()
                .filter(|n| n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")))
                .count();
            status.node_summary = Some(NodeSummary { total_num: Some(nodes.items.len() as i32), ready_num: Some(ready as i32) });
            let nodes: Vec<serde_json::Value> = nodes.items.iter().filter_map(|n| serde_json::to_value(n).ok()).collect();
            let pods: Vec<serde_json::Value> = pods.items.iter().filter_map(|p| serde_json::to_value(p).ok()).collect();
            match flotilla_api::interpreter::resource_summary(&nodes, &pods) {
                Ok(summary) => status.resource_summary = Some(summary),
                Err(e) => tracing::debug!(cluster, error = %e, "summarising member resources failed"),
            }
        }
        (Err(e), _) | (_, Err(e)) => tracing::debug!(cluster, error = %e, "listing member nodes and pods failed"),
    }
}

impl flotilla_runtime::ReconcileError for Error {}

/// Run the controller until shutdown: every Cluster's status, from the shared cache. A failed
/// reconcile is retried no later than the status interval.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config, clients: Arc<Clients>) {
    let interval = config.interval;
    let ctx = Arc::new(Context::new(client.clone(), config, clients));
    let follower = tokio::spawn(follow_kubefed_config(client, rt.informers.clone(), ctx.clone()));
    rt.controller_for::<Cluster>(NAME).backoff(Duration::from_millis(100), interval).run_objects(move |c| reconcile(c, ctx.clone())).await;
    follower.abort();
}

/// Keep the settings in force following the KubeFedConfig `kubefed` (absent, or its CRD not
/// installed: `base`), announcing each change as an Event on it.
async fn follow_kubefed_config(client: Client, informers: flotilla_runtime::Informers, ctx: Arc<Context>) {
    let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let on_change = changed.clone();
    informers.subscribe::<KubeFedConfig>(move |c, _| {
        if c.name_any() == KUBEFED_CONFIG_NAME && c.metadata.namespace.as_deref() == Some(DEFAULT_SYSTEM_NAMESPACE) {
            let _ = on_change.send(());
        }
    });
    let store = informers.store::<KubeFedConfig>();
    // Once listed, even with no KubeFedConfig, the settings in force are announced.
    let listed = informers.clone();
    tokio::spawn(async move {
        listed.synced::<KubeFedConfig>().await;
        let _ = changed.send(());
    });
    let events = Events::new(client, NAME);
    let mut announced: Option<String> = None;
    let wanted = ObjectRef::new(KUBEFED_CONFIG_NAME).within(DEFAULT_SYSTEM_NAMESPACE);
    while changes.recv().await.is_some() {
        let config = store.get(&wanted).map(|c| (*c).clone());
        let check = config.as_ref().and_then(|c| c.spec.cluster_health_check.as_ref());
        ctx.follow(check);
        // Announced when the settings or where they come from change (a seeded KubeFedConfig
        // stating the defaults changes no setting, but is now their source).
        let line = ctx.current.lock().describe(check);
        if announced.as_deref() == Some(line.as_str()) {
            continue;
        }
        announced = Some(line.clone());
        tracing::info!(controller = NAME, "{line}");
        if let Some(c) = &config {
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("core.kubefed.io/v1beta1".into()),
                kind: Some("KubeFedConfig".into()),
                name: Some(c.name_any()),
                namespace: c.metadata.namespace.clone(),
                uid: c.metadata.uid.clone(),
                ..Default::default()
            };
            events.publish_ref(&reference, false, REASON_SETTINGS, "ClusterHealthCheck", line).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lapsed_lease_makes_ready_unknown_as_karmada_words_it() {
        let never = lapsed_ready(&[]).unwrap();
        assert_eq!((never.status.as_str(), never.reason.as_str()), ("Unknown", "ClusterStatusNeverUpdated"));
        assert_eq!(never.message, "Cluster status controller never posted cluster status.");
        let ready = condition("Ready", true, "ClusterReady", "cluster is healthy and ready to accept workloads", None);
        let lapsed = lapsed_ready(std::slice::from_ref(&ready)).unwrap();
        assert_eq!((lapsed.status.as_str(), lapsed.reason.as_str()), ("Unknown", "ClusterStatusUnknown"));
        assert_eq!(lapsed.message, "Cluster status controller stopped posting cluster status.");
        assert!(lapsed_ready(&[lapsed]).is_none(), "already Unknown: nothing to write");
    }

    #[test]
    fn the_seeded_kubefed_config_changes_nothing() {
        let seeded = flotilla_api::federation::kubefed::install::kubefed_config();
        let check: ClusterHealthCheckConfig = serde_json::from_value(seeded["spec"]["clusterHealthCheck"].clone()).unwrap();
        let d = Config::default();
        let c = d.with_kubefed(Some(&check));
        assert_eq!(
            (c.interval, c.probe_timeout, c.failure_threshold, c.success_threshold),
            (d.interval, d.probe_timeout, d.failure_threshold, d.success_threshold)
        );
    }

    fn check(period: &str, timeout: &str, failure: i64, success: i64) -> ClusterHealthCheckConfig {
        ClusterHealthCheckConfig {
            period: Some(period.into()),
            timeout: Some(timeout.into()),
            failure_threshold: Some(failure),
            success_threshold: Some(success),
        }
    }

    #[test]
    fn flags_win_then_the_kubefed_config_then_defaults() {
        let defaults = Config::default();
        // No KubeFedConfig: the defaults.
        assert_eq!(defaults.with_kubefed(None), defaults);
        // KubeFed's own defaults (10s, 3s, 3, 1): thresholds in probes become n − 1 periods.
        let kubefed = defaults.with_kubefed(Some(&check("10s", "3s", 3, 1)));
        assert_eq!(
            (kubefed.interval, kubefed.probe_timeout, kubefed.failure_threshold, kubefed.success_threshold),
            (Duration::from_secs(10), Duration::from_secs(3), Duration::from_secs(20), Duration::ZERO)
        );
        // A flag given explicitly keeps its value; the thresholds count in the period in force.
        let flags = Config {
            probe_timeout: Duration::from_secs(7),
            interval: Duration::from_secs(2),
            explicit: Explicit { probe_timeout: true, interval: true, ..Default::default() },
            ..Default::default()
        };
        let mixed = flags.with_kubefed(Some(&check("1m0s", "1s", 4, 2)));
        assert_eq!(
            (mixed.interval, mixed.probe_timeout, mixed.failure_threshold, mixed.success_threshold),
            (Duration::from_secs(2), Duration::from_secs(7), Duration::from_secs(6), Duration::from_secs(2))
        );
        // Fields the KubeFedConfig leaves out (or gets wrong) keep the default.
        let partial = ClusterHealthCheckConfig { period: Some("500ms".into()), timeout: Some("soon".into()), ..Default::default() };
        let p = defaults.with_kubefed(Some(&partial));
        assert_eq!((p.interval, p.probe_timeout, p.failure_threshold), (Duration::from_millis(500), defaults.probe_timeout, defaults.failure_threshold));
        let line = p.describe(Some(&partial));
        assert!(line.contains("probe every 500ms (KubeFedConfig)") && line.contains("withdrawn after 30s failing (default)"), "{line}");
        let line = mixed.describe(Some(&check("1m0s", "1s", 4, 2)));
        assert!(line.contains("timeout 7s (flag)") && line.contains("restored after 2s ready (KubeFedConfig)"), "{line}");
    }
}
