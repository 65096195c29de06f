//! The CronJob controller: at each scheduled time (checked every `cronjob_interval`) it makes
//! a Job `<name>-<minutes since the epoch>` from the job template, honouring `suspend`,
//! `startingDeadlineSeconds` and the concurrency policy; it keeps `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime`, and deletes finished Jobs beyond the history
//! limits.

use std::sync::Arc;

use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde_json::json;

use crate::cache::{ObjKey, controller_of};
use crate::cron::Schedule;
use crate::kinds::{CRONJOBS, JOBS};
use crate::simulator::{Ctx, Reconciled, SimError};
use crate::workloads::job::outcome;
use crate::workloads::pods;

pub const NAME: &str = "cronjob-controller";
const SCHEDULED_AT: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..Default::default()
    }
}

async fn delete_job(ctx: &Ctx<'_>, job: &Job) -> Result<(), SimError> {
    let (ns, name) = (job.metadata.namespace.as_deref().unwrap_or(""), job.metadata.name.as_deref().unwrap_or(""));
    match ctx.api.delete(&JOBS, ns, name, &json!({"propagationPolicy": "Background"})).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub async fn reconcile(key: &ObjKey, ctx: &mut Ctx<'_>) -> Reconciled {
    let Some(cj) = ctx.cache.cronjobs.get(key).cloned() else { return Ok(None) };
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let (ns, name) = (key.0.as_str(), key.1.as_str());
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let spec = &cj.spec;
    let interval = ctx.config.timings.cronjob_interval;
    let mut jobs: Vec<Arc<Job>> = ctx
        .cache
        .jobs
        .range((ns.to_string(), String::new())..)
        .take_while(|(k, _)| k.0 == ns)
        .filter(|(_, j)| controller_of(&j.metadata).is_some_and(|o| o.uid == uid))
        .map(|(_, j)| j.clone())
        .collect();
    jobs.sort_by_key(|j| j.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0).or(j.metadata.creation_timestamp.as_ref().map(|t| t.0)));
    let mut status = cj.status.clone().unwrap_or_default();
    let active: Vec<Arc<Job>> = jobs.iter().filter(|j| outcome(j).is_none()).cloned().collect();
    status.active = (!active.is_empty()).then(|| active.iter().map(|j| reference(j)).collect());
    if let Some(last_ok) =
        jobs.iter().filter(|j| outcome(j) == Some(false)).filter_map(|j| j.status.as_ref().and_then(|s| s.completion_time.clone())).max_by_key(|t| t.0)
    {
        status.last_successful_time = Some(last_ok);
    }
    // History limits.
    for (failed, limit) in [(false, spec.successful_jobs_history_limit.unwrap_or(3)), (true, spec.failed_jobs_history_limit.unwrap_or(1))] {
        let done: Vec<&Arc<Job>> = jobs.iter().filter(|j| outcome(j) == Some(failed)).collect();
        let limit = limit.max(0) as usize;
        if done.len() > limit {
            for j in &done[..done.len() - limit] {
                delete_job(ctx, j).await?;
            }
        }
    }
    if !spec.suspend.unwrap_or(false) {
        let tz = spec.time_zone.as_deref().and_then(|z| TimeZone::get(z).ok()).unwrap_or(TimeZone::UTC);
        let schedule = Schedule::parse(&spec.schedule);
        let after = status.last_schedule_time.as_ref().or(cj.metadata.creation_timestamp.as_ref()).map(|t| t.0).unwrap_or_else(jiff::Timestamp::now);
        let now = jiff::Timestamp::now();
        let due = schedule.and_then(|s| s.latest(after, now, &tz));
        let in_deadline = |t: jiff::Timestamp| spec.starting_deadline_seconds.is_none_or(|d| now.as_second() - t.as_second() <= d);
        if let Some(t) = due.filter(|t| in_deadline(*t)) {
            let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
            let blocked = policy == "Forbid" && !active.is_empty();
            if !blocked {
                if policy == "Replace" {
                    for j in &active {
                        delete_job(ctx, j).await?;
                    }
                }
                let job_name = format!("{name}-{}", t.as_second() / 60);
                let template = &spec.job_template;
                let tm = template.metadata.clone().unwrap_or_default();
                let mut annotations = tm.annotations.unwrap_or_default();
                annotations.insert(SCHEDULED_AT.into(), t.to_string());
                let job = Job {
                    metadata: ObjectMeta {
                        name: Some(job_name),
                        namespace: Some(ns.into()),
                        labels: tm.labels,
                        annotations: Some(annotations),
                        owner_references: Some(vec![pods::owner_ref(&CRONJOBS, name, &uid)]),
                        ..Default::default()
                    },
                    spec: template.spec.clone(),
                    status: None,
                };
                match ctx.api.create(&JOBS, ns, &serde_json::to_value(&job).unwrap_or_default()).await {
                    Ok(_) => {}
                    Err(e) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            status.last_schedule_time = Some(Time(t));
        }
    }
    if cj.status.as_ref() != Some(&status) && status != CronJobStatus::default() || cj.status.as_ref().is_some_and(|s| *s != status) {
        let body = json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": cj.metadata.resource_version},
            "status": status,
        });
        ctx.api.replace(&CRONJOBS, ns, name, &body, true).await?;
    }
    Ok(Some(interval))
}

/// Whether a CronJob exists (for tests of the schedule).
pub fn exists(cj: &CronJob) -> bool {
    cj.metadata.name.is_some()
}
