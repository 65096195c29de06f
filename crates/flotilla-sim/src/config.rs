//! What a simulated member is made of: its nodes, addresses and every timing of the workload
//! simulator. Defaults follow testenv's fake members (`docs/testing.md`) where it has one.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::faults::FaultSettings;
use crate::quantity;

/// The shape of a member's nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeShape {
    /// Nodes `<member>-node-1 … <member>-node-<count>`.
    pub count: usize,
    /// Capacity and allocatable, as quantities (`8`, `32Gi`, `110`).
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    /// `topology.kubernetes.io/region`.
    pub region: String,
    /// `topology.kubernetes.io/zone`, round-robin over the nodes.
    pub zones: Vec<String>,
    /// More labels on every node; they replace the default os, arch and instance-type labels.
    pub labels: BTreeMap<String, String>,
    /// Taints on every node: `key[=value]:Effect`.
    pub taints: Vec<String>,
}

/// Every timing of the simulator. Nothing here is asserted by tests; tests shorten them.
#[derive(Clone, Debug, PartialEq)]
pub struct Timings {
    /// From a pod being bound to its node until it is Running and Ready.
    pub pod_ready_delay: Duration,
    /// How long a pod of a Job (restartPolicy Never/OnFailure) runs before it succeeds.
    pub job_pod_duration: Duration,
    /// How often each node's Lease in `kube-node-lease` is renewed (the Ready heartbeat is
    /// refreshed every fourth renewal); zero turns heartbeats off.
    pub node_lease_interval: Duration,
    /// After a node fails (its kubelet stops), how long until it is marked NotReady (Unknown)
    /// and tainted unreachable: kube-controller-manager's `--node-monitor-grace-period`.
    pub node_monitor_grace: Duration,
    /// Seconds a pod tolerates a NoExecute not-ready/unreachable taint when it has no
    /// toleration of it at all. The member's API admits every pod with DefaultTolerationSeconds'
    /// 300 s tolerations (not configurable yet, unlike kube-apiserver's
    /// `--default-unreachable-toleration-seconds`), so this applies only to pods that bypass it;
    /// to evict sooner, give the pod its own toleration with `tolerationSeconds`.
    pub default_toleration_seconds: i64,
    /// How often CronJob schedules are checked.
    pub cronjob_interval: Duration,
    /// How often the member compacts its store's history (kube-apiserver compacts etcd every
    /// five minutes); zero never does.
    pub compaction_interval: Duration,
    /// How soon a failed reconcile is retried.
    pub retry: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            pod_ready_delay: Duration::from_millis(500),
            job_pod_duration: Duration::from_secs(2),
            node_lease_interval: Duration::from_secs(10),
            node_monitor_grace: Duration::from_secs(40),
            default_toleration_seconds: 300,
            cronjob_interval: Duration::from_secs(10),
            compaction_interval: Duration::from_secs(300),
            retry: Duration::from_secs(1),
        }
    }
}

/// One simulated member cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberConfig {
    /// A DNS label: the member's name, its nodes' name prefix, its URL path segment.
    pub name: String,
    pub nodes: NodeShape,
    /// Pod IPs are handed out from this IPv4 network (the network and broadcast addresses
    /// are never used).
    pub pod_cidr: (Ipv4Addr, u8),
    /// Services' cluster IPs are handed out from this IPv4 network (kube-apiserver's
    /// `--service-cluster-ip-range`; testenv's default, 10.96.0.0/16).
    pub service_cidr: (Ipv4Addr, u8),
    /// `status.nodeInfo.kubeletVersion` of the nodes.
    pub kubelet_version: String,
    pub timings: Timings,
    /// Faults in force from the start.
    pub faults: FaultSettings,
    /// Kinds hidden from discovery (and answering 404) from the start: `(group, plural)`.
    pub hidden: Vec<(String, String)>,
    /// Run the workload controllers (Deployments → ReplicaSets → pods → Running, Jobs,
    /// Services' EndpointSlices, …). Off, the member only stores what it is sent: nodes,
    /// namespaces and garbage collection still run. Benchmarks state which they ran with.
    pub simulate_workloads: bool,
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("member {member}: {field}: {message}")]
pub struct ConfigError {
    pub member: String,
    pub field: &'static str,
    pub message: String,
}

impl MemberConfig {
    /// A member like testenv's default one: 2 nodes of 8 CPUs, 32Gi and 110 pods, region
    /// `region-<name>`, zones `<region>-a` and `<region>-b`, pods from `10.128.0.0/20`.
    pub fn new(name: &str) -> MemberConfig {
        let region = format!("region-{name}");
        MemberConfig {
            name: name.to_string(),
            nodes: NodeShape {
                count: 2,
                cpu: "8".into(),
                memory: "32Gi".into(),
                pods: 110,
                zones: vec![format!("{region}-a"), format!("{region}-b")],
                region,
                labels: BTreeMap::new(),
                taints: Vec::new(),
            },
            pod_cidr: pod_cidr_for(0),
            service_cidr: (Ipv4Addr::new(10, 96, 0, 0), 16),
            kubelet_version: "v1.37.2".into(),
            timings: Timings::default(),
            faults: FaultSettings::default(),
            hidden: Vec::new(),
            simulate_workloads: true,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, message: String| Err(ConfigError { member: self.name.clone(), field, message });
        if !is_dns_label(&self.name) {
            return err("name", format!("{:?} is not a DNS label (lower-case letters, digits and '-', at most 63)", self.name));
        }
        if quantity::milli(&self.nodes.cpu).is_none_or(|m| m <= 0) {
            return err("node cpu", format!("{:?} is not a positive quantity", self.nodes.cpu));
        }
        if quantity::milli(&self.nodes.memory).is_none_or(|m| m <= 0) {
            return err("node memory", format!("{:?} is not a positive quantity", self.nodes.memory));
        }
        for t in &self.nodes.taints {
            if crate::nodes::parse_taint(t).is_none() {
                return err("node taint", format!("{t:?} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute"));
            }
        }
        for (field, (_, prefix)) in [("pod CIDR", self.pod_cidr), ("service CIDR", self.service_cidr)] {
            if !(8..=30).contains(&prefix) {
                return err(field, format!("a /{prefix} network: want a prefix length between 8 and 30"));
            }
        }
        if let Err(e) = self.faults.validate() {
            return err("faults", e);
        }
        Ok(())
    }
}

/// The default pod network of the `index`-th member of a process: a /20 (4094 pods) out of
/// `10.128.0.0/9`, distinct for the first 2048 members (then it wraps).
pub fn pod_cidr_for(index: usize) -> (Ipv4Addr, u8) {
    let block = (index % 2048) as u32;
    let base = u32::from(Ipv4Addr::new(10, 128, 0, 0)) + (block << 12);
    (Ipv4Addr::from(base), 20)
}

/// Parse `A.B.C.D/N`.
pub fn parse_cidr(text: &str) -> Option<(Ipv4Addr, u8)> {
    let (ip, len) = text.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    (len <= 32).then_some((ip, len))
}

pub fn is_dns_label(x: &str) -> bool {
    !x.is_empty()
        && x.len() <= 63
        && x.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && x.as_bytes()[0].is_ascii_alphanumeric()
        && x.as_bytes()[x.len() - 1].is_ascii_alphanumeric()
}

/// Parse a duration: `250ms`, `2s`, `1m`, `1h`, `1m30s`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return (secs >= 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += Duration::from_secs_f64(n * scale);
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_cidrs() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("2x"), None);
        assert_eq!(pod_cidr_for(0), (Ipv4Addr::new(10, 128, 0, 0), 20));
        assert_eq!(pod_cidr_for(17), (Ipv4Addr::new(10, 129, 16, 0), 20));
        assert_eq!(parse_cidr("10.1.0.0/16"), Some((Ipv4Addr::new(10, 1, 0, 0), 16)));
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = MemberConfig::new("m1");
        assert!(c.validate().is_ok());
        c.nodes.cpu = "lots".into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "node cpu");
        assert!(e.to_string().starts_with("member m1: node cpu"));
    }
}
