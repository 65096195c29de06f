//! The federation controllers' settings on `flotilla up`'s command line. Names follow
//! karmada-controller-manager's flags where one exists; durations are Go-style (`500ms`,
//! `10s`, `1m`).

use std::time::Duration;

/// A Go-style duration: a number followed by `ms`, `s`, `m` or `h` (`1m30s` is not accepted;
/// write `90s`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {text:?}: expected e.g. 500ms, 10s, 1m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration {text:?}: the unit must be ms, s, m or h")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("invalid duration {text:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[derive(clap::Args, Clone, Debug)]
pub struct FederationArgs {
    /// The controllers to run: `*` for every one on by default, `name` to add one, `-name` to
    /// leave one out (`*,-execution`). Karmada's names for its controllers (cluster,
    /// clusterStatus, binding, execution, workStatus, namespace, ...), kube-controller-manager's
    /// for its own (namespace-controller, garbage-collector-controller, ...); an unknown name is
    /// refused with the list.
    #[arg(long, default_value = "*", value_name = "LIST")]
    pub controllers: String,
    /// How often each member cluster's health is probed (default 10s). This and the next three
    /// settings, when not given, follow the KubeFedConfig's `spec.clusterHealthCheck` while it
    /// exists (flag, then KubeFedConfig, then default).
    #[arg(long, value_parser = parse_duration)]
    pub cluster_status_update_frequency: Option<Duration>,
    /// Timeout of one health probe and of each status collection request (default 5s).
    #[arg(long, value_parser = parse_duration)]
    pub cluster_probe_timeout: Option<Duration>,
    /// How long a member must look unhealthy before it is marked Ready=False (default 30s).
    #[arg(long, value_parser = parse_duration)]
    pub cluster_failure_threshold: Option<Duration>,
    /// How long a member must look healthy again before it is marked Ready=True (default 30s).
    #[arg(long, value_parser = parse_duration)]
    pub cluster_success_threshold: Option<Duration>,
    /// How long a Pull cluster's agent Lease may go unrenewed before the cluster is marked
    /// Ready=Unknown (and tainted unreachable).
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub cluster_monitor_grace_period: Duration,
    /// The same, for an agent that has not posted a status yet.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub cluster_startup_grace_period: Duration,
    /// How often Pull clusters' Leases are looked at.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub cluster_monitor_period: Duration,
    /// Timeout of each request applying a Work to a member.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub member_request_timeout: Duration,
    /// How often KubeFed's DNS records read their members' load balancers again.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub kubefed_dns_resync: Duration,
    /// How long an unschedulable binding waits before the scheduler tries it again (sooner
    /// when clusters change).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub unschedulable_retry: Duration,
    /// A pull agent's sweep of its member against tombstones (`flotilla agent
    /// --tombstone-sweep-interval`; not a flag of the control plane).
    #[arg(skip = Duration::from_secs(300))]
    pub tombstone_sweep_interval: Duration,
    /// How often the garbage collector reads discovery again to collect new kinds (CRDs).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub gc_rediscover_interval: Duration,
    /// How long a new propagation policy may select nothing before a Warning Event says so.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub unmatched_policy_grace: Duration,
    /// How many changes an edge report (`flotilla edge status`) lists at most, the newest; the
    /// rest are counted.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(1..))]
    pub edge_report_max_entries: u16,
    /// Resource templates the detector reconciles at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_resource_template_syncs: u16,
    /// Bindings the scheduler schedules at once (one binding is never scheduled twice at once).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_schedules: u16,
    /// ResourceBindings and ClusterResourceBindings the binding controller syncs at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_resourcebinding_syncs: u16,
    /// Works applied to members at once (Karmada's default is 5; each apply waits on a member).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_work_syncs: u16,
    /// Dependent resources (ConfigMaps, Secrets, ...) the dependencies distributor syncs at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_dependent_resource_syncs: u16,
    /// Karmada's feature gates, `Name=true|false,...`, defaulting as Karmada v1.18 does:
    /// PropagateDeps=true, GracefulEviction=true, Failover=false, StatefulFailoverInjection=false,
    /// PriorityBasedScheduling=false, WorkloadAffinity=false.
    #[arg(long, default_value = "", value_parser = parse_feature_gates)]
    pub feature_gates: FeatureGates,
    /// Run the NoExecute taint manager (also needs the Failover gate and
    /// --enable-no-execute-taint-eviction).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_taint_manager: bool,
    /// Evict bindings from clusters with NoExecute taints they do not tolerate (Karmada v1.14+:
    /// off by default; also needs the Failover gate).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_no_execute_taint_eviction: bool,
    /// Purge mode of taint evictions when the binding has no failover.cluster: Gracefully or Directly.
    #[arg(long, default_value = "Gracefully", value_parser = parse_purge_mode)]
    pub no_execute_taint_eviction_purge_mode: flotilla_api::federation::karmada::policy::PurgeMode,
    /// Taint evictions per second at most (Karmada's --resource-eviction-rate); 0 for no limit.
    #[arg(long, default_value_t = 0.5)]
    pub resource_eviction_rate: f64,
    /// How long a graceful eviction task without gracePeriodSeconds keeps the old copy at most.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub graceful_eviction_timeout: Duration,
    /// The most memory the global view's cache of member objects (ResourceRegistries) may take,
    /// in bytes (`Ki`, `Mi`, `Gi` suffixes); objects beyond it are not cached and the
    /// registries say so (`Cached=False`, reason `CacheFull`).
    #[arg(long, default_value = "1Gi", value_parser = parse_bytes)]
    pub search_cache_limit: usize,
}

/// A size in bytes: a number with an optional `Ki`, `Mi` or `Gi` suffix.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits.parse().map_err(|_| format!("{text:?}: expected a number of bytes, e.g. 512Mi"))?;
    let scale: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => return Err(format!("{text:?}: unknown unit {other:?} (expected Ki, Mi or Gi)")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("{text:?}: too large"))
}

fn parse_purge_mode(text: &str) -> Result<flotilla_api::federation::karmada::policy::PurgeMode, String> {
    use flotilla_api::federation::karmada::policy::PurgeMode;
    match text {
        "Gracefully" => Ok(PurgeMode::Gracefully),
        "Directly" => Ok(PurgeMode::Directly),
        other => Err(format!("purge mode {other:?}: expected Gracefully or Directly")),
    }
}

/// The Karmada feature gates Flotilla implements, with v1.18's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    pub propagate_deps: bool,
    pub graceful_eviction: bool,
    pub failover: bool,
    /// Failover `statePreservation`: state read from the old cluster's status goes into the
    /// replacement's labels (alpha).
    pub stateful_failover_injection: bool,
    /// A policy's `schedulePriority` resolves its PriorityClass into the binding, which the
    /// scheduler takes highest first (alpha).
    pub priority_based_scheduling: bool,
    /// A policy's `placement.workloadAffinity` groups workloads by a template label, and the
    /// scheduler co-locates or separates each group (alpha).
    pub workload_affinity: bool,
    /// MultiClusterService's `CrossCluster` controllers (`multiclusterservice`,
    /// `endpointsliceDispatch`). Karmada: Alpha, off; Flotilla: on (issue 26).
    pub multi_cluster_service: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            propagate_deps: true,
            graceful_eviction: true,
            failover: false,
            stateful_failover_injection: false,
            priority_based_scheduling: false,
            workload_affinity: false,
            multi_cluster_service: true,
        }
    }
}

/// `Name=bool` pairs separated by commas; unknown names are refused.
pub fn parse_feature_gates(text: &str) -> Result<FeatureGates, String> {
    let mut gates = FeatureGates::default();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').ok_or_else(|| format!("feature gate {pair:?}: expected Name=true|false"))?;
        let value: bool = value.trim().parse().map_err(|_| format!("feature gate {name}: {value:?} is not true or false"))?;
        match name.trim() {
            "PropagateDeps" => gates.propagate_deps = value,
            "GracefulEviction" => gates.graceful_eviction = value,
            "Failover" => gates.failover = value,
            "StatefulFailoverInjection" => gates.stateful_failover_injection = value,
            "PriorityBasedScheduling" => gates.priority_based_scheduling = value,
            "WorkloadAffinity" => gates.workload_affinity = value,
            "MultiClusterService" => gates.multi_cluster_service = value,
            other => {
                return Err(format!(
                    "unknown feature gate {other:?} (known: PropagateDeps, GracefulEviction, Failover, StatefulFailoverInjection, PriorityBasedScheduling, WorkloadAffinity, MultiClusterService)"
                ));
            }
        }
    }
    Ok(gates)
}

impl Default for FederationArgs {
    fn default() -> Self {
        FederationArgs {
            cluster_status_update_frequency: None,
            cluster_probe_timeout: None,
            cluster_failure_threshold: None,
            cluster_success_threshold: None,
            cluster_monitor_grace_period: Duration::from_secs(40),
            cluster_startup_grace_period: Duration::from_secs(60),
            cluster_monitor_period: Duration::from_secs(5),
            member_request_timeout: Duration::from_secs(30),
            kubefed_dns_resync: Duration::from_secs(10),
            unschedulable_retry: Duration::from_secs(300),
            tombstone_sweep_interval: Duration::from_secs(300),
            gc_rediscover_interval: Duration::from_secs(30),
            unmatched_policy_grace: Duration::from_secs(10),
            edge_report_max_entries: 200,
            concurrent_resource_template_syncs: 8,
            concurrent_schedules: 8,
            concurrent_resourcebinding_syncs: 8,
            concurrent_work_syncs: 64,
            concurrent_dependent_resource_syncs: 2,
            controllers: "*".into(),
            feature_gates: FeatureGates::default(),
            enable_taint_manager: true,
            enable_no_execute_taint_eviction: false,
            no_execute_taint_eviction_purge_mode: flotilla_api::federation::karmada::policy::PurgeMode::Gracefully,
            graceful_eviction_timeout: Duration::from_secs(600),
            resource_eviction_rate: 0.5,
            search_cache_limit: 1 << 30,
        }
    }
}

impl FederationArgs {
    /// The cluster status controller's settings: the flags given, defaults for the others
    /// (which the KubeFedConfig may then change).
    pub fn cluster_status(&self) -> flotilla_controllers::cluster_status::Config {
        use flotilla_controllers::cluster_status::{Config, Explicit};
        let d = Config::default();
        Config {
            interval: self.cluster_status_update_frequency.unwrap_or(d.interval),
            probe_timeout: self.cluster_probe_timeout.unwrap_or(d.probe_timeout),
            failure_threshold: self.cluster_failure_threshold.unwrap_or(d.failure_threshold),
            success_threshold: self.cluster_success_threshold.unwrap_or(d.success_threshold),
            monitor_grace_period: self.cluster_monitor_grace_period,
            startup_grace_period: self.cluster_startup_grace_period,
            monitor_period: self.cluster_monitor_period,
            explicit: Explicit {
                interval: self.cluster_status_update_frequency.is_some(),
                probe_timeout: self.cluster_probe_timeout.is_some(),
                failure_threshold: self.cluster_failure_threshold.is_some(),
                success_threshold: self.cluster_success_threshold.is_some(),
            },
        }
    }

    pub fn detector(&self) -> flotilla_controllers::detector::Config {
        flotilla_controllers::detector::Config {
            workers: self.concurrent_resource_template_syncs.into(),
            priority_based_scheduling: self.feature_gates.priority_based_scheduling,
            workload_affinity: self.feature_gates.workload_affinity,
            ..Default::default()
        }
    }

    pub fn binding(&self) -> flotilla_controllers::binding::Config {
        flotilla_controllers::binding::Config {
            workers: self.concurrent_resourcebinding_syncs.into(),
            inject_preserved_state: self.feature_gates.stateful_failover_injection,
            ..Default::default()
        }
    }

    pub fn application_failover(&self) -> flotilla_controllers::application_failover::Config {
        flotilla_controllers::application_failover::Config { preserve_state: self.feature_gates.stateful_failover_injection, ..Default::default() }
    }

    pub fn execution(&self) -> flotilla_controllers::execution::Config {
        flotilla_controllers::execution::Config {
            member_timeout: self.member_request_timeout,
            workers: self.concurrent_work_syncs.into(),
            ..Default::default()
        }
    }

    pub fn kubefed_dns(&self) -> flotilla_controllers::kubefed_dns::Config {
        flotilla_controllers::kubefed_dns::Config {
            resync: self.kubefed_dns_resync,
            member_timeout: self.member_request_timeout.min(Duration::from_secs(10)),
            ..Default::default()
        }
    }

    pub fn search(&self) -> flotilla_controllers::search::Config {
        flotilla_controllers::search::Config { member_timeout: self.member_request_timeout.min(Duration::from_secs(10)), ..Default::default() }
    }

    pub fn work_status(&self) -> flotilla_controllers::work_status::Config {
        flotilla_controllers::work_status::Config { member_timeout: self.member_request_timeout, ..Default::default() }
    }

    pub fn scheduler(&self) -> flotilla_scheduler::runner::Config {
        flotilla_scheduler::runner::Config {
            unschedulable_retry: self.unschedulable_retry,
            workers: self.concurrent_schedules.into(),
            workload_affinity: self.feature_gates.workload_affinity,
            ..Default::default()
        }
    }

    pub fn tombstone_sweep(&self) -> flotilla_controllers::work_tombstones::SweepConfig {
        flotilla_controllers::work_tombstones::SweepConfig { interval: self.tombstone_sweep_interval, member_timeout: self.member_request_timeout }
    }

    /// The agent's record of what it applied: its resync looks for records of gone Works as
    /// often as the tombstone sweep does.
    pub fn edge_mirror(&self) -> flotilla_controllers::edge_mirror::Config {
        flotilla_controllers::edge_mirror::Config { member_timeout: self.member_request_timeout, resync: self.tombstone_sweep_interval }
    }

    pub fn policy_report(&self) -> flotilla_controllers::policy_report::Config {
        flotilla_controllers::policy_report::Config { grace: self.unmatched_policy_grace }
    }

    pub fn edge_report(&self) -> flotilla_controllers::edge_report::Config {
        flotilla_controllers::edge_report::Config { max_entries: self.edge_report_max_entries.into() }
    }

    pub fn dependencies(&self) -> flotilla_controllers::dependencies::Config {
        flotilla_controllers::dependencies::Config { workers: self.concurrent_dependent_resource_syncs.into(), ..Default::default() }
    }

    /// The taint manager's settings, when the gates and flags let it run.
    pub fn taint_manager(&self) -> Option<flotilla_controllers::taint_manager::Config> {
        (self.feature_gates.failover && self.enable_taint_manager && self.enable_no_execute_taint_eviction).then(|| self.taint_manager_settings())
    }

    /// The taint manager's settings, gates aside (`--controllers` may name it explicitly).
    pub fn taint_manager_settings(&self) -> flotilla_controllers::taint_manager::Config {
        flotilla_controllers::taint_manager::Config {
            purge_mode: self.no_execute_taint_eviction_purge_mode,
            eviction_rate: self.resource_eviction_rate,
            preserve_state: self.feature_gates.stateful_failover_injection,
            ..Default::default()
        }
    }

    pub fn graceful_eviction(&self) -> Option<flotilla_controllers::graceful_eviction::Config> {
        self.feature_gates.graceful_eviction.then(|| self.graceful_eviction_settings())
    }

    /// The graceful eviction controller's settings, gates aside.
    pub fn graceful_eviction_settings(&self) -> flotilla_controllers::graceful_eviction::Config {
        flotilla_controllers::graceful_eviction::Config { timeout: self.graceful_eviction_timeout, ..Default::default() }
    }

    pub fn garbage_collector(&self) -> flotilla_kube_controllers::garbage_collector::Config {
        flotilla_kube_controllers::garbage_collector::Config { rediscover: self.gc_rediscover_interval, ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_bytes_with_binary_suffixes() {
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_bytes("64Ki"), Ok(64 << 10));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("1GB").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("Gi").unwrap_err().contains("expected a number"));
        assert!(parse_bytes("99999999999999999999Gi").is_err());
    }

    #[test]
    fn feature_gates_default_as_karmada_v1_18() {
        assert_eq!(parse_feature_gates(""), Ok(FeatureGates::default()));
        let g = parse_feature_gates("Failover=true, PropagateDeps=false").unwrap();
        assert_eq!(
            g,
            FeatureGates {
                propagate_deps: false,
                graceful_eviction: true,
                failover: true,
                stateful_failover_injection: false,
                priority_based_scheduling: false,
                workload_affinity: false,
                multi_cluster_service: true,
            }
        );
        assert!(parse_feature_gates("StatefulFailoverInjection=true").unwrap().stateful_failover_injection);
        assert!(!parse_feature_gates("MultiClusterService=false").unwrap().multi_cluster_service, "on by default, may be turned off");
        assert!(parse_feature_gates("Nope=true").unwrap_err().contains("unknown feature gate"));
        assert!(parse_feature_gates("Failover").is_err());
    }

    #[test]
    fn taint_eviction_needs_the_failover_gate_and_its_flag() {
        let mut args = FederationArgs::default();
        assert!(args.taint_manager().is_none(), "off by default, as Karmada v1.16");
        assert!(args.graceful_eviction().is_some(), "GracefulEviction is on by default");
        args.feature_gates.failover = true;
        assert!(args.taint_manager().is_none(), "--enable-no-execute-taint-eviction is still off");
        args.enable_no_execute_taint_eviction = true;
        assert!(args.taint_manager().is_some());
        args.enable_taint_manager = false;
        assert!(args.taint_manager().is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn defaults_match_the_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            f: FederationArgs,
        }
        let parsed = T::parse_from(["t"]).f;
        let d = FederationArgs::default();
        assert_eq!(parsed.cluster_status(), d.cluster_status());
        assert_eq!(d.cluster_status(), flotilla_controllers::cluster_status::Config::default(), "nothing explicit, the controller's defaults");
        let given = T::parse_from(["t", "--cluster-probe-timeout", "2s"]).f.cluster_status();
        assert_eq!((given.probe_timeout, given.explicit.probe_timeout, given.explicit.interval), (Duration::from_secs(2), true, false));
        assert_eq!(parsed.unschedulable_retry, d.unschedulable_retry);
        assert_eq!(parsed.concurrent_resource_template_syncs, d.concurrent_resource_template_syncs);
        assert_eq!(parsed.concurrent_schedules, d.concurrent_schedules);
        assert_eq!(parsed.concurrent_resourcebinding_syncs, d.concurrent_resourcebinding_syncs);
        assert_eq!(parsed.concurrent_work_syncs, d.concurrent_work_syncs);
        assert!(T::try_parse_from(["t", "--concurrent-work-syncs", "0"]).is_err(), "at least one worker");
    }
}
