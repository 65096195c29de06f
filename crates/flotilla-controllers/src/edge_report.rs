//! The edge report (ADR 0032): one `EdgeReport` per Pull cluster, named as it, saying whether its
//! agent is in touch and what became of the changes its edge made while it was away — what
//! `flotilla edge status` prints.
//!
//! For each Cluster in Pull mode the report is created (owned by the Cluster, so the garbage
//! collector removes it with the Cluster) and its status kept as [`report_status`] computes it
//! from the Cluster's Ready condition and the `EdgeChange`s the agent copied into the cluster's
//! execution space (`karmada-es-<cluster>`), with the decisions the `edgeSync` controller wrote
//! on them: `online`/`offlineSince`, the counts, and one entry per record, newest first, at most
//! [`Config::max_entries`] (the rest counted in `omittedEntries`). The status is written only
//! when it differs from the cached report's. A Cluster no longer in Pull mode loses its report.
//!
//! Triggers: a Cluster new, or its sync mode or Ready condition changed; an EdgeChange created,
//! changed or deleted (the cluster of its execution space); a report deleted or changed by
//! someone else (put back).

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::federation::flotilla::edge::{EdgeChange, EdgeReport, EdgeReportEntry, EdgeReportSpec, EdgeReportStatus, FieldDecision, change_kind, phase};
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
use flotilla_api::federation::karmada::names::{cluster_of_execution_space, execution_space};
use flotilla_runtime::{Next, ReconcileError, condition_status};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

pub const NAME: &str = "edgeReport";

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct Config {
    /// How many entries a report lists at most (the newest).
    pub max_entries: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config { max_entries: 200 }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cluster {cluster}: {step}: {source}")]
    Api { cluster: String, step: &'static str, source: kube::Error },
}

impl ReconcileError for Error {}

/// The status of `cluster`'s report: its connectivity from its Ready condition, and `changes`
/// (the records of its execution space) as counts and at most `max_entries` entries, newest
/// first.
pub fn report_status<'a>(cluster: &Cluster, changes: impl IntoIterator<Item = &'a EdgeChange>, max_entries: usize) -> EdgeReportStatus {
    let conditions = cluster.status.as_ref().and_then(|s| s.conditions.as_deref());
    let ready = condition_status(conditions, "Ready");
    let online = ready.is_some_and(|c| c.status == "True");
    let offline_since = ready.filter(|_| !online).map(|c| c.last_transition_time.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let mut status = EdgeReportStatus { online, offline_since, ..Default::default() };
    let mut entries: Vec<EdgeReportEntry> = Vec::new();
    for change in changes {
        let entry = entry_of(change);
        match entry.phase.as_str() {
            phase::PENDING | phase::ADOPTING => status.pending += 1,
            phase::CONFLICT => status.conflicts += 1,
            _ => {}
        }
        if change.spec.change == change_kind::CREATED {
            status.born_at_edge += 1;
        }
        entries.push(entry);
    }
    // Newest first; a time that does not parse sorts after every one that does.
    entries.sort_by_cached_key(|e| (Reverse(e.last_seen.parse::<jiff::Timestamp>().ok()), Reverse(e.last_seen.clone()), e.record.clone()));
    if entries.len() > max_entries {
        status.omitted_entries = i64::try_from(entries.len() - max_entries).unwrap_or(i64::MAX);
        entries.truncate(max_entries);
    }
    status.entries = entries;
    status
}

/// One record as a report entry: its decision when there is one; a record not looked at yet is
/// `Pending`, its recorded paths listed with outcome `Pending`.
pub fn entry_of(change: &EdgeChange) -> EdgeReportEntry {
    let decision = change.status.clone().unwrap_or_default();
    let phase = if decision.phase.is_empty() { phase::PENDING.to_string() } else { decision.phase };
    let fields = if decision.fields.is_empty() && phase == phase::PENDING {
        change.spec.fields.iter().map(|f| FieldDecision { path: f.path.clone(), outcome: phase::PENDING.into(), ..Default::default() }).collect()
    } else {
        decision.fields
    };
    EdgeReportEntry {
        record: change.name_any(),
        object: change.spec.object.clone(),
        change: change.spec.change.clone(),
        phase,
        fields,
        manager: change.spec.manager.clone(),
        last_seen: change.spec.last_seen.clone(),
        decided_at: decision.decided_at,
        message: decision.message,
    }
}

/// A merge patch setting the whole status to `status`: the optional fields it leaves out are
/// written as null, so that what an earlier status said (offline since, entries omitted) goes.
fn status_patch(status: &EdgeReportStatus) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(status)?;
    for key in ["offlineSince", "omittedEntries"] {
        if let Some(fields) = value.as_object_mut() {
            fields.entry(key).or_insert(Value::Null);
        }
    }
    Ok(json!({ "status": value }))
}

struct Context {
    client: Client,
    config: Config,
    changes: Store<EdgeChange>,
    reports: Store<EdgeReport>,
}

async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Next, Error> {
    let name = cluster.name_any();
    let err = |step: &'static str| {
        let cluster = name.clone();
        move |source| Error::Api { cluster, step, source }
    };
    let api: Api<EdgeReport> = Api::all(ctx.client.clone());
    let cached = ctx.reports.get(&ObjectRef::new(&name));
    if cluster.spec.sync_mode != ClusterSyncMode::Pull {
        let Some(report) = cached else { return Ok(Next::Done) };
        let params = DeleteParams { preconditions: Some(Preconditions { uid: report.uid(), resource_version: None }), ..Default::default() };
        return match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(controller = NAME, cluster = %name, "the cluster is not in Pull mode: its edge report is deleted");
                Ok(Next::Done)
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Next::Done),
            Err(e) => Err(err("deleting the report")(e)),
        };
    }
    let space = execution_space(&name);
    let changes = ctx.changes.state();
    let status =
        report_status(&cluster, changes.iter().filter(|c| c.metadata.namespace.as_deref() == Some(space.as_str())).map(|c| &**c), ctx.config.max_entries);
    let current = match cached {
        Some(report) => report.status.clone(),
        // Not for a cluster on its way out: the report would outlive it.
        None if cluster.metadata.deletion_timestamp.is_some() => return Ok(Next::Done),
        None => {
            let mut report = EdgeReport::new(&name, EdgeReportSpec { cluster: name.clone() });
            report.metadata.owner_references = cluster.controller_owner_ref(&()).map(|o| vec![o]);
            match api.create(&PostParams::default(), &report).await {
                Ok(_) => tracing::info!(controller = NAME, cluster = %name, "edge report created"),
                // Made since the cache was filled: write its status all the same.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(err("creating the report")(e)),
            }
            None
        }
    };
    if current.as_ref() == Some(&status) {
        return Ok(Next::Done);
    }
    let patch = status_patch(&status).map_err(|e| Error::Api { cluster: name.clone(), step: "encoding the status", source: kube::Error::SerdeError(e) })?;
    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {
            tracing::debug!(controller = NAME, cluster = %name, online = status.online, pending = status.pending, conflicts = status.conflicts, "edge report updated");
            Ok(Next::Done)
        }
        // Deleted meanwhile (its Cluster going, or by hand): the report's watch brings it back.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Next::Done),
        Err(e) => Err(err("writing the report's status")(e)),
    }
}

/// What of a Cluster the report reads: its uid, sync mode and Ready condition.
fn watched(c: &Cluster) -> (Option<String>, ClusterSyncMode, Option<(String, String)>) {
    let ready =
        condition_status(c.status.as_ref().and_then(|s| s.conditions.as_deref()), "Ready").map(|r| (r.status.clone(), r.last_transition_time.0.to_string()));
    (c.uid(), c.spec.sync_mode, ready)
}

/// Run the controller until shutdown.
pub async fn run(client: Client, rt: flotilla_runtime::Runtime, config: Config) {
    let changes = rt.informers.store::<EdgeChange>();
    let reports = rt.informers.store::<EdgeReport>();
    // Counting a cluster's records, and knowing its report exists, needs them all listed first.
    tokio::select! {
        _ = async {
            rt.informers.synced::<Cluster>().await;
            rt.informers.synced::<EdgeChange>().await;
            rt.informers.synced::<EdgeReport>().await;
        } => {}
        _ = rt.shutdown.cancelled() => return,
    }
    let ctx = Arc::new(Context { client, config, changes, reports });
    rt.controller::<ObjectRef<Cluster>>(NAME)
        .watches_changes(|old: Option<&Cluster>, c: &Cluster, deleted| {
            (!deleted && old.is_none_or(|old| watched(old) != watched(c))).then(|| ObjectRef::from_obj(c))
        })
        .watches_changes(|old: Option<&EdgeChange>, e: &EdgeChange, deleted| {
            let changed = deleted || old.is_none_or(|old| old.spec != e.spec || old.status != e.status);
            let cluster = e.metadata.namespace.as_deref().and_then(cluster_of_execution_space);
            cluster.filter(|_| changed).map(ObjectRef::<Cluster>::new)
        })
        .watches_changes(|old: Option<&EdgeReport>, r: &EdgeReport, deleted| {
            (deleted || old.is_some_and(|old| old.status != r.status || old.spec != r.spec)).then(|| ObjectRef::new(&r.name_any()))
        })
        .backoff(Duration::from_millis(200), Duration::from_secs(60))
        .run_objects(move |c| reconcile(c, ctx.clone()))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::flotilla::edge::{EdgeChangeSpec, EdgeChangeStatus, FieldChangeRecord, ObjectReference, outcome};
    use flotilla_api::federation::karmada::cluster::{ClusterSpec, ClusterStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn cluster(ready: Option<(&str, &str)>) -> Cluster {
        let mut c = Cluster::new("edge-1", ClusterSpec { sync_mode: ClusterSyncMode::Pull, ..Default::default() });
        c.status = Some(ClusterStatus {
            conditions: ready.map(|(status, at)| {
                vec![Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    last_transition_time: Time(at.parse().unwrap()),
                    reason: "R".into(),
                    message: String::new(),
                    observed_generation: None,
                }]
            }),
            ..Default::default()
        });
        c
    }

    /// A record of `kind/name` last seen at `seen`, with its decision's phase (none: not looked at).
    fn change(record: &str, change: &str, seen: &str, phase: Option<&str>) -> EdgeChange {
        let mut c = EdgeChange::new(
            record,
            EdgeChangeSpec {
                cluster: "edge-1".into(),
                object: ObjectReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: Some("shop".into()),
                    name: record.into(),
                    uid: String::new(),
                },
                change: change.into(),
                fields: vec![FieldChangeRecord { path: "spec.replicas".into(), old: Some(json!(2)), new: Some(json!(5)) }],
                manager: Some("kubectl-scale".into()),
                first_seen: seen.into(),
                last_seen: seen.into(),
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("karmada-es-edge-1".into());
        c.status = phase.map(|p| EdgeChangeStatus {
            phase: p.into(),
            fields: vec![FieldDecision { path: "spec.replicas".into(), outcome: outcome::CONFLICT.into(), ..Default::default() }],
            message: "held until resolved".into(),
            decided_at: Some("2026-12-05T10:00:00Z".into()),
            ..Default::default()
        });
        c
    }

    #[test]
    fn connectivity_follows_the_ready_condition() {
        let online = report_status(&cluster(Some(("True", "2026-12-05T09:00:00Z"))), [], 200);
        assert!(online.online);
        assert_eq!(online.offline_since, None);
        let offline = report_status(&cluster(Some(("Unknown", "2026-12-05T09:30:00Z"))), [], 200);
        assert!(!offline.online);
        assert_eq!(offline.offline_since.as_deref(), Some("2026-12-05T09:30:00Z"));
        let never = report_status(&cluster(None), [], 200);
        assert!(!never.online && never.offline_since.is_none());
    }

    #[test]
    fn records_are_counted_and_listed_newest_first() {
        let changes = [
            change("old", change_kind::MODIFIED, "2026-12-05T08:00:00Z", Some(phase::DECIDED)),
            change("open", change_kind::MODIFIED, "2026-12-05T09:00:00Z", Some(phase::CONFLICT)),
            change("fresh", change_kind::MODIFIED, "2026-12-05T09:30:00Z", None),
            change("adopting", change_kind::MODIFIED, "2026-12-05T08:30:00Z", Some(phase::ADOPTING)),
            change("born", change_kind::CREATED, "2026-12-05T07:00:00Z", Some(phase::LISTED)),
        ];
        let s = report_status(&cluster(Some(("True", "2026-12-05T09:00:00Z"))), &changes, 200);
        assert_eq!((s.pending, s.conflicts, s.born_at_edge, s.omitted_entries), (2, 1, 1, 0));
        let order: Vec<&str> = s.entries.iter().map(|e| e.record.as_str()).collect();
        assert_eq!(order, ["fresh", "open", "adopting", "old", "born"]);
        // A record not looked at yet: Pending, its recorded paths listed as pending.
        let fresh = &s.entries[0];
        assert_eq!(fresh.phase, phase::PENDING);
        assert_eq!((fresh.fields[0].path.as_str(), fresh.fields[0].outcome.as_str()), ("spec.replicas", "Pending"));
        assert_eq!((fresh.decided_at.as_deref(), fresh.message.as_str()), (None, ""));
        // A decided one carries the decision.
        let open = &s.entries[1];
        assert_eq!((open.phase.as_str(), open.fields[0].outcome.as_str()), (phase::CONFLICT, outcome::CONFLICT));
        assert_eq!((open.decided_at.as_deref(), open.message.as_str()), (Some("2026-12-05T10:00:00Z"), "held until resolved"));
        assert_eq!((open.object.kind.as_str(), open.manager.as_deref(), open.change.as_str()), ("Deployment", Some("kubectl-scale"), "Modified"));
    }

    #[test]
    fn the_entries_are_capped_and_the_rest_counted() {
        let changes: Vec<EdgeChange> = (0..5).map(|i| change(&format!("c{i}"), change_kind::MODIFIED, &format!("2026-12-05T09:0{i}:00Z"), None)).collect();
        let s = report_status(&cluster(None), &changes, 2);
        assert_eq!(s.entries.iter().map(|e| e.record.as_str()).collect::<Vec<_>>(), ["c4", "c3"]);
        assert_eq!((s.omitted_entries, s.pending), (3, 5), "the counts include what is left out");
    }

    #[test]
    fn the_status_patch_clears_what_no_longer_holds() {
        let patch = status_patch(&EdgeReportStatus { online: true, ..Default::default() }).unwrap();
        assert_eq!(patch["status"]["offlineSince"], Value::Null);
        assert!(patch["status"].as_object().unwrap().contains_key("offlineSince"));
        assert_eq!(patch["status"]["omittedEntries"], Value::Null);
        assert_eq!(patch["status"]["online"], true);
        assert_eq!(patch["status"]["entries"], json!([]));
    }
}
