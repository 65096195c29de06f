//! The Job controller: runs `parallelism` pods until `completions` have succeeded (NonIndexed
//! or Indexed), honours `suspend` and `backoffLimit`, and reports active, ready, succeeded,
//! failed, terminating, start and completion times and the SuccessCriteriaMet/Complete (or
//! FailureTarget/Failed) conditions as the real controller writes them. Pods carry no
//! tracking finalizer.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use serde_json::json;

use crate::cache::{ObjKey, Phase};
use crate::kinds::JOBS;
use crate::simulator::{Ctx, Reconciled};
use crate::workloads::pods::{self, nonzero};

pub const NAME: &str = "job-controller";
const INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";

fn condition(type_: &str, reason: &str, message: &str) -> JobCondition {
    let now = pods::now();
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

fn finished(job: &Job) -> bool {
    job.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// `0-2,4` from a set of indexes.
fn ranges(done: &BTreeSet<i32>) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    let mut it = done.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end = it.next().unwrap_or(end);
        }
        out.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    (!out.is_empty()).then(|| out.join(","))
}

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(job) = ctx.cache.jobs.get(key).cloned() else { return Ok(None) };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let Some(spec) = job.spec.as_ref() else { return Ok(None) };
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let completions = spec.completions;
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let suspended = spec.suspend.unwrap_or(false);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let owned: Vec<_> = ctx.cache.pods_of(ns, &uid).collect();
    let succeeded = owned.iter().filter(|(_, p)| p.phase == Phase::Succeeded).count() as i32;
    let failed = owned.iter().filter(|(_, p)| p.phase == Phase::Failed).count() as i32;
    let active: Vec<_> = owned.iter().filter(|(_, p)| p.active()).collect();
    let terminating = owned.iter().filter(|(_, p)| p.terminating && !p.phase.terminal()).count() as i32;
    let index_of = |k: &ObjKey| -> Option<i32> {
        let rest = k.1.strip_prefix(name)?.strip_prefix('-')?;
        rest.split('-').next()?.parse().ok()
    };
    let done_indexes: BTreeSet<i32> =
        if indexed { owned.iter().filter(|(_, p)| p.phase == Phase::Succeeded).filter_map(|(k, _)| index_of(k)).collect() } else { BTreeSet::new() };

    let mut status = job.status.clone().unwrap_or_default();
    let was_finished = finished(&job);
    let complete = match completions {
        Some(c) if indexed => done_indexes.len() as i32 >= c,
        Some(c) => succeeded >= c,
        None => succeeded >= 1 && active.is_empty(),
    };
    let over_backoff = failed > backoff_limit;
    if !was_finished && !suspended {
        if status.start_time.is_none() {
            status.start_time = Some(pods::now());
        }
        if complete || over_backoff {
            for (k, _) in &active {
                pods::delete(ctx, k).await?;
            }
        } else {
            let want = match completions {
                Some(c) if indexed => parallelism.min(c - done_indexes.len() as i32),
                Some(c) => parallelism.min(c - succeeded),
                None if succeeded > 0 => 0,
                None => parallelism,
            }
            .max(0);
            let have = active.len() as i32;
            let template = spec.template.clone();
            let owner = pods::owner_ref(&JOBS, name, &uid);
            if have < want {
                if indexed {
                    let running: BTreeSet<i32> = active.iter().filter_map(|(k, _)| index_of(k)).collect();
                    let missing = (0..completions.unwrap_or(parallelism)).filter(|i| !done_indexes.contains(i) && !running.contains(i));
                    for i in missing.take((want - have) as usize) {
                        let mut t = template.clone();
                        let meta = t.metadata.get_or_insert_with(Default::default);
                        meta.annotations.get_or_insert_with(Default::default).insert(INDEX_ANNOTATION.into(), i.to_string());
                        if let Some(ps) = t.spec.as_mut() {
                            ps.hostname = Some(format!("{name}-{i}"));
                        }
                        let idx = i.to_string();
                        let pod = pods::pod_from_template(&t, None, Some(&format!("{name}-{i}-")), &[(INDEX_ANNOTATION, idx.as_str())], owner.clone());
                        pods::create(ctx, ns, &pod).await?;
                    }
                } else {
                    for _ in have..want {
                        let pod = pods::pod_from_template(&template, None, Some(&format!("{name}-")), &[], owner.clone());
                        pods::create(ctx, ns, &pod).await?;
                    }
                }
            } else if have > want {
                let mut extra: Vec<_> = active.iter().map(|(k, p)| ((*k).clone(), pods::scale_down_rank(p))).collect();
                extra.sort_by_key(|a| a.1);
                for (k, _) in extra.into_iter().take((have - want) as usize) {
                    pods::delete(ctx, &k).await?;
                }
            }
        }
    }
    status.active = nonzero(if was_finished || complete || over_backoff { 0 } else { active.len() as i32 });
    status.ready = Some(active.iter().filter(|(_, p)| p.ready).count() as i32);
    status.succeeded = nonzero(succeeded);
    status.failed = nonzero(failed);
    status.terminating = Some(terminating);
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
    if indexed {
        status.completed_indexes = ranges(&done_indexes);
    }
    if !was_finished {
        let mut conds = status.conditions.take().unwrap_or_default();
        if complete {
            conds.push(condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods"));
            conds.push(condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods"));
            status.completion_time = Some(pods::now());
        } else if over_backoff {
            conds.push(condition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit"));
            conds.push(condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"));
        } else if suspended && !conds.iter().any(|c| c.type_ == "Suspended" && c.status == "True") {
            conds.retain(|c| c.type_ != "Suspended");
            conds.push(condition("Suspended", "JobSuspended", "Job suspended"));
        }
        status.conditions = (!conds.is_empty()).then_some(conds);
    }
    if job.status.as_ref() != Some(&status) {
        let body = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": job.metadata.resource_version},
            "status": status,
        });
        ctx.api.replace(&JOBS, ns, name, &body, true).await?;
    }
    Ok(None)
}

/// Whether a Job has finished, and whether it failed (for the CronJob controller).
pub fn outcome(job: &Job) -> Option<bool> {
    let conds = job.status.as_ref().and_then(|s: &JobStatus| s.conditions.as_ref())?;
    conds.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True").map(|c| c.type_ == "Failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_as_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 4].into()), Some("0-2,4".into()));
        assert_eq!(ranges(&BTreeSet::new()), None);
    }
}
