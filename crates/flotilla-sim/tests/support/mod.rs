//! Test support: members with short timings, and waiting for a condition with a generous
//! deadline (tests never assert timings).

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use flotilla_sim::{Member, MemberConfig};

/// Generous: a loaded 2-core machine may be slow, never wrong.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A member with short timings.
pub fn fast(name: &str) -> MemberConfig {
    let mut c = MemberConfig::new(name);
    c.timings.pod_ready_delay = Duration::from_millis(50);
    c.timings.job_pod_duration = Duration::from_millis(300);
    c.timings.node_monitor_grace = Duration::from_millis(300);
    c.timings.cronjob_interval = Duration::from_millis(500);
    c.timings.retry = Duration::from_millis(200);
    c
}

pub async fn start(config: MemberConfig) -> Member {
    Member::start(config, None, Default::default()).await.expect("member starts")
}

/// Poll `check` until it returns `Some`, or fail with `what` after the deadline.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
