//! `flotilla edge status` and `flotilla edge resolve` (ADR 0032): what became of the changes made
//! at the edge while a pull cluster was away, and the decision on one held in conflict.
//!
//! `status` prints the `EdgeReport`s the control plane's `edgeReport` controller keeps, one per
//! Pull cluster, and nothing else: no report is an error that says why (no such cluster, a Push
//! cluster, a report not made yet). `resolve` finds the agent's records (`EdgeChange`s in the
//! cluster's execution space) of one object and, when they are in phase `Conflict`, sets
//! `edge.flotilla.io/resolve` on them; the control plane's `edgeSync` controller carries the
//! decision out.

use std::collections::BTreeSet;

use anyhow::{Context as _, bail};
use flotilla_api::federation::flotilla::edge::{
    EdgeChange, EdgeReport, EdgeReportEntry, KEEP_CONTROL_PLANE, KEEP_EDGE, ObjectReference, RESOLVE_ANNOTATION, phase,
};
use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
use flotilla_api::federation::karmada::names::execution_space;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::get_cmd::render;
use crate::join_cmd::ControlPlane;

#[derive(clap::Subcommand, Debug)]
pub enum EdgeCommand {
    /// Print each pull cluster's edge report: whether its agent is in touch (online, or offline
    /// since when), how many changes made at the edge are pending, in conflict or born there, and
    /// per change the object, the fields and what became of each, who made it, when it was last
    /// seen and the decision.
    Status(StatusArgs),
    /// Decide a change held in conflict (sync policy `Manual`): keep the edge's values or put the
    /// control plane's back. Sets `edge.flotilla.io/resolve` on the cluster's record of the
    /// object; the control plane's edgeSync controller carries it out.
    Resolve(ResolveArgs),
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Only this pull cluster.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// Output: json or yaml (default: text and a table).
    #[arg(long, short = 'o', value_parser = ["json", "yaml"])]
    output: Option<String>,
    #[command(flatten)]
    control_plane: ControlPlane,
}

#[derive(clap::Args, Debug)]
pub struct ResolveArgs {
    /// The object: KIND/NAME as kubectl takes it (`deployment/web`, `deploy/web`,
    /// `configmaps/settings`).
    target: String,
    /// The pull cluster whose change it is.
    #[arg(long, value_name = "NAME")]
    cluster: String,
    /// Whose values stay: `edge` (adopted into the control plane's desired state) or
    /// `control-plane` (put back in the member).
    #[arg(long, value_parser = [KEEP_EDGE, KEEP_CONTROL_PLANE])]
    keep: String,
    /// The object's namespace (needed only when objects of that kind and name changed in
    /// several namespaces).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    #[command(flatten)]
    control_plane: ControlPlane,
}

pub async fn run(cmd: EdgeCommand) -> anyhow::Result<()> {
    match cmd {
        EdgeCommand::Status(args) => status(args).await,
        EdgeCommand::Resolve(args) => resolve(args).await,
    }
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let client = args.control_plane.client().await?;
    let api: Api<EdgeReport> = Api::all(client.clone());
    let reports = match &args.cluster {
        Some(name) => match api.get_opt(name).await.with_context(|| format!("reading the edge report of cluster {name}"))? {
            Some(report) => vec![report],
            None => bail!("{}", without_report(&client, name).await),
        },
        None => {
            let mut all = api.list(&ListParams::default()).await.context("listing the edge reports")?.items;
            all.sort_by_key(ResourceExt::name_any);
            all
        }
    };
    let single = args.cluster.is_some();
    let document =
        || if single { json!(reports[0]) } else { json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": reports}) };
    match args.output.as_deref() {
        Some("json") => println!("{}", serde_json::to_string_pretty(&document())?),
        Some("yaml") => print!("{}", serde_saphyr::to_string(&document()).map_err(|e| anyhow::anyhow!("{e}"))?),
        _ if reports.is_empty() => println!("No edge reports: no cluster is in Pull mode."),
        _ => print!("{}", reports.iter().map(report_text).collect::<Vec<_>>().join("\n")),
    }
    Ok(())
}

/// Why cluster `name` has no report, as the Cluster says.
async fn without_report(client: &kube::Client, name: &str) -> String {
    match Api::<Cluster>::all(client.clone()).get_opt(name).await {
        Ok(None) => format!("no edge report for cluster {name}: there is no cluster {name} (`kubectl get clusters` lists them)"),
        Ok(Some(c)) if c.spec.sync_mode != ClusterSyncMode::Pull => {
            format!("no edge report for cluster {name}: it is a Push cluster, and edge reports are kept for Pull clusters only")
        }
        Ok(Some(_)) => format!("no edge report for cluster {name} yet: the control plane's edgeReport controller makes one for each Pull cluster"),
        Err(e) => format!("no edge report for cluster {name} (reading the cluster failed too: {e})"),
    }
}

/// `deployment/web`: the object as `flotilla edge resolve` takes it.
fn object_text(o: &ObjectReference) -> String {
    format!("{}/{}", o.kind.to_lowercase(), o.name)
}

/// `spec.replicas: Conflict, data: Reverted`; a whole-object decision (a deletion) has no path.
fn fields_text(e: &EdgeReportEntry) -> String {
    if e.fields.is_empty() {
        return "<none>".into();
    }
    e.fields.iter().map(|f| format!("{}: {}", if f.path.is_empty() { "(object)" } else { &f.path }, f.outcome)).collect::<Vec<_>>().join(", ")
}

fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One report as `flotilla edge status` prints it.
pub fn report_text(report: &EdgeReport) -> String {
    let cluster = report.name_any();
    let s = report.status.clone().unwrap_or_default();
    let mut out = match (s.online, &s.offline_since) {
        (true, _) => format!("Cluster {cluster}: online\n"),
        (false, Some(since)) => format!("Cluster {cluster}: offline since {since}\n"),
        (false, None) => format!("Cluster {cluster}: offline (its agent has not reported yet)\n"),
    };
    out.push_str(&format!(
        "Changes made at the edge: {} pending, {}, {} born at the edge\n",
        s.pending,
        plural(s.conflicts, "conflict", "conflicts"),
        s.born_at_edge
    ));
    if s.entries.is_empty() {
        return out;
    }
    let mut rows = vec![["NAMESPACE", "OBJECT", "CHANGE", "FIELDS", "BY", "LAST-SEEN", "DECISION"].map(String::from).to_vec()];
    for e in &s.entries {
        rows.push(vec![
            e.object.namespace.clone().unwrap_or_default(),
            object_text(&e.object),
            e.change.clone(),
            fields_text(e),
            e.manager.clone().unwrap_or_else(|| "<none>".into()),
            e.last_seen.clone(),
            e.phase.clone(),
        ]);
    }
    out.push('\n');
    out.push_str(&render(&rows));
    if s.omitted_entries > 0 {
        out.push_str(&format!("({} not listed: the report keeps the newest)\n", plural(s.omitted_entries, "older change", "older changes")));
    }
    let open: Vec<&EdgeReportEntry> = s.entries.iter().filter(|e| e.phase == phase::CONFLICT).collect();
    if !open.is_empty() {
        out.push_str("\nHeld until someone decides:\n");
        for e in open {
            let ns = e.object.namespace.as_deref().map(|n| format!(" -n {n}")).unwrap_or_default();
            out.push_str(&format!("  flotilla edge resolve {}{ns} --cluster {cluster} --keep edge|control-plane\n", object_text(&e.object)));
            if !e.message.is_empty() {
                out.push_str(&format!("    {}\n", e.message));
            }
        }
    }
    out
}

/// Whether `word` — a kind as kubectl takes it: `Deployment`, `deployment`, `deployments`,
/// optionally qualified by its group (`deployments.apps`, `deployments.v1.apps`) — names the
/// kind of `o`. Short names (`deploy`) need discovery ([`resolve`] asks it when this finds
/// nothing).
pub fn names_kind(word: &str, o: &ObjectReference) -> bool {
    let word = word.to_lowercase();
    let (w, qualifier) = match word.split_once('.') {
        Some((w, q)) => (w, Some(q)),
        None => (word.as_str(), None),
    };
    let group = o.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if let Some(q) = qualifier
        && q != group
        && q.split_once('.').map(|(_, g)| g) != Some(group)
    {
        return false;
    }
    let k = o.kind.to_lowercase();
    let ies = k.strip_suffix('y').map(|stem| format!("{stem}ies"));
    w == k || w == format!("{k}s") || w == format!("{k}es") || ies.as_deref() == Some(w)
}

/// The records among `records` of the object `name` whose kind `kind` accepts (and in
/// `namespace` when given) that are in phase Conflict; otherwise why there is nothing to
/// resolve. `what` names the object for the messages.
pub fn to_resolve<'a>(
    records: &'a [EdgeChange],
    kind: impl Fn(&ObjectReference) -> bool,
    name: &str,
    namespace: Option<&str>,
    cluster: &str,
    what: &str,
) -> Result<Vec<&'a EdgeChange>, String> {
    let matched: Vec<&EdgeChange> = records
        .iter()
        .filter(|r| r.spec.object.name == name && kind(&r.spec.object) && namespace.is_none_or(|ns| r.spec.object.namespace.as_deref() == Some(ns)))
        .collect();
    if matched.is_empty() {
        let mut recorded: Vec<String> = records.iter().map(|r| described(&r.spec.object)).collect();
        recorded.sort();
        recorded.dedup();
        return Err(if recorded.is_empty() {
            format!("cluster {cluster} has no recorded edge changes (no EdgeChange in {})", execution_space(cluster))
        } else {
            format!("no recorded edge change of {what} in cluster {cluster}; recorded: {}", recorded.join(", "))
        });
    }
    let namespaces: BTreeSet<&str> = matched.iter().filter_map(|r| r.spec.object.namespace.as_deref()).collect();
    if namespace.is_none() && namespaces.len() > 1 {
        return Err(format!("{what} changed in several namespaces ({}): say which with -n", namespaces.into_iter().collect::<Vec<_>>().join(", ")));
    }
    let open: Vec<&EdgeChange> = matched.iter().copied().filter(|r| phase_of(r) == phase::CONFLICT).collect();
    if open.is_empty() {
        let phases: Vec<String> = matched.iter().map(|r| format!("{} is {}", r.name_any(), phase_of(r))).collect();
        return Err(format!("{what} in cluster {cluster} is not in conflict, nothing to resolve: its record {}", phases.join(", ")));
    }
    Ok(open)
}

/// A record's phase; one not looked at yet is Pending.
fn phase_of(r: &EdgeChange) -> &str {
    r.status.as_ref().map(|s| s.phase.as_str()).filter(|p| !p.is_empty()).unwrap_or(phase::PENDING)
}

/// `deployment/web in shop`.
fn described(o: &ObjectReference) -> String {
    match &o.namespace {
        Some(ns) => format!("{} in {ns}", object_text(o)),
        None => object_text(o),
    }
}

async fn resolve(args: ResolveArgs) -> anyhow::Result<()> {
    let Some((kind, name)) = args.target.split_once('/') else { bail!("expected KIND/NAME (e.g. deployment/web), got {:?}", args.target) };
    let client = args.control_plane.client().await?;
    if Api::<Cluster>::all(client.clone()).get_opt(&args.cluster).await.context("reading the cluster")?.is_none() {
        bail!("there is no cluster {} (`kubectl get clusters` lists them)", args.cluster);
    }
    let space = execution_space(&args.cluster);
    let api: Api<EdgeChange> = Api::namespaced(client.clone(), &space);
    let records = api.list(&ListParams::default()).await.with_context(|| format!("listing the EdgeChanges in {space}"))?.items;
    let what = match &args.namespace {
        Some(ns) => format!("{kind}/{name} in {ns}"),
        None => format!("{kind}/{name}"),
    };
    let ns = args.namespace.as_deref();
    let by_name = |o: &ObjectReference| names_kind(kind, o);
    let mut found = to_resolve(&records, by_name, name, ns, &args.cluster, &what);
    if found.is_err() {
        // A short name or a kind written otherwise: as the control plane's discovery resolves it.
        let resources = flotilla::kubefed::discover(&client, None).await.unwrap_or_default();
        if let Ok(r) = flotilla_api::federation::kubefed::enable::resolve(kind, &resources, None) {
            let served = |o: &ObjectReference| o.kind == r.kind && o.api_version.rsplit_once('/').map_or("", |(g, _)| g) == r.group;
            found = to_resolve(&records, served, name, ns, &args.cluster, &what);
        }
    }
    let open = found.map_err(anyhow::Error::msg)?;
    for record in open {
        let before = record.annotations().get(RESOLVE_ANNOTATION).cloned();
        let patch = json!({"metadata": {"annotations": {RESOLVE_ANNOTATION: args.keep}, "resourceVersion": record.resource_version()}});
        match api.patch(&record.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {
                bail!("edgechange {space}/{} changed while it was being resolved; run the command again", record.name_any())
            }
            Err(e) => return Err(e).with_context(|| format!("annotating edgechange {space}/{}", record.name_any())),
        }
        let fields: Vec<&str> = record.spec.fields.iter().map(|f| f.path.as_str()).collect();
        let fields = if fields.is_empty() { String::new() } else { format!(" ({})", fields.join(", ")) };
        let object = described(&record.spec.object);
        let outcome = if args.keep == KEEP_EDGE {
            format!("the edgeSync controller keeps the edge's values of {object}{fields}")
        } else {
            format!("the edgeSync controller puts the control plane's values of {object}{fields} back")
        };
        let note = match before {
            Some(b) if b == args.keep => " (it was already asked for)".to_string(),
            Some(b) => format!(" (replacing {b})"),
            None => String::new(),
        };
        println!("edgechange {space}/{} annotated {RESOLVE_ANNOTATION}={}{note}: {outcome}", record.name_any(), args.keep);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federation::flotilla::edge::{EdgeChangeSpec, EdgeChangeStatus, EdgeReportSpec, EdgeReportStatus, FieldDecision};

    fn object(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectReference {
        ObjectReference { api_version: api_version.into(), kind: kind.into(), namespace: namespace.map(Into::into), name: name.into(), uid: String::new() }
    }

    fn record(name: &str, o: ObjectReference, phase: Option<&str>) -> EdgeChange {
        let mut r = EdgeChange::new(name, EdgeChangeSpec { cluster: "edge-1".into(), object: o, change: "Modified".into(), ..Default::default() });
        r.status = phase.map(|p| EdgeChangeStatus { phase: p.into(), ..Default::default() });
        r
    }

    #[test]
    fn kinds_are_taken_as_kubectl_takes_them() {
        let deploy = object("apps/v1", "Deployment", Some("shop"), "web");
        for w in ["Deployment", "deployment", "deployments", "deployments.apps", "deployments.v1.apps"] {
            assert!(names_kind(w, &deploy), "{w}");
        }
        for w in ["deploy", "deployments.batch", "pod", "deploymentz"] {
            assert!(!names_kind(w, &deploy), "{w}");
        }
        assert!(names_kind("networkpolicies", &object("networking.k8s.io/v1", "NetworkPolicy", Some("shop"), "x")));
        assert!(names_kind("ingresses", &object("networking.k8s.io/v1", "Ingress", Some("shop"), "x")));
        assert!(names_kind("configmap", &object("v1", "ConfigMap", Some("shop"), "x")));
    }

    #[test]
    fn only_a_conflict_is_resolved_and_refusals_say_why() {
        let web = |ns: &str| object("apps/v1", "Deployment", Some(ns), "web");
        let records = vec![
            record("a", web("shop"), Some(phase::CONFLICT)),
            record("b", object("v1", "ConfigMap", Some("shop"), "settings"), Some(phase::DECIDED)),
            record("c", object("v1", "ConfigMap", Some("shop"), "fresh"), None),
            record("d", web("blog"), Some(phase::DECIDED)),
        ];
        let kind = |w: &'static str| move |o: &ObjectReference| names_kind(w, o);
        let got = to_resolve(&records, kind("deployment"), "web", Some("shop"), "edge-1", "deployment/web").unwrap();
        assert_eq!(got.iter().map(|r| r.name_any()).collect::<Vec<_>>(), ["a"]);
        let e = to_resolve(&records, kind("deployment"), "web", None, "edge-1", "deployment/web").unwrap_err();
        assert!(e.contains("several namespaces (blog, shop)") && e.contains("-n"), "{e}");
        let e = to_resolve(&records, kind("configmap"), "settings", None, "edge-1", "configmap/settings").unwrap_err();
        assert!(e.contains("not in conflict") && e.contains("b is Decided"), "{e}");
        let e = to_resolve(&records, kind("configmap"), "fresh", None, "edge-1", "configmap/fresh").unwrap_err();
        assert!(e.contains("c is Pending"), "{e}");
        let e = to_resolve(&records, kind("secret"), "web", None, "edge-1", "secret/web").unwrap_err();
        assert!(e.contains("no recorded edge change of secret/web") && e.contains("deployment/web in shop"), "{e}");
        let e = to_resolve(&[], kind("secret"), "web", None, "edge-1", "secret/web").unwrap_err();
        assert!(e.contains("no recorded edge changes (no EdgeChange in karmada-es-edge-1)"), "{e}");
    }

    #[test]
    fn a_report_prints_connectivity_counts_entries_and_the_open_conflicts() {
        let mut r = EdgeReport::new("edge-1", EdgeReportSpec { cluster: "edge-1".into() });
        let entry = |record: &str, phase: &str, fields: Vec<FieldDecision>| EdgeReportEntry {
            record: record.into(),
            object: object("apps/v1", "Deployment", Some("shop"), record),
            change: "Modified".into(),
            phase: phase.into(),
            fields,
            manager: Some("kubectl-edit".into()),
            last_seen: "2026-12-05T09:00:00Z".into(),
            message: "held as the edge left it".into(),
            ..Default::default()
        };
        let decided = |path: &str, outcome: &str| FieldDecision { path: path.into(), outcome: outcome.into(), ..Default::default() };
        r.status = Some(EdgeReportStatus {
            online: false,
            offline_since: Some("2026-12-05T08:00:00Z".into()),
            pending: 0,
            conflicts: 1,
            born_at_edge: 0,
            entries: vec![
                entry("web", phase::CONFLICT, vec![decided("spec.replicas", "Conflict")]),
                entry("api", phase::DECIDED, vec![decided("", "Reverted")]),
            ],
            omitted_entries: 4,
        });
        let text = report_text(&r);
        assert!(
            text.starts_with("Cluster edge-1: offline since 2026-12-05T08:00:00Z\nChanges made at the edge: 0 pending, 1 conflict, 0 born at the edge\n"),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[3].starts_with("NAMESPACE   OBJECT           CHANGE     FIELDS"), "{text}");
        assert!(lines[4].contains("deployment/web") && lines[4].contains("spec.replicas: Conflict") && lines[4].ends_with("Conflict"), "{text}");
        assert!(lines[5].contains("(object): Reverted") && lines[5].contains("kubectl-edit"), "{text}");
        assert!(text.contains("(4 older changes not listed"), "{text}");
        assert!(
            text.contains("  flotilla edge resolve deployment/web -n shop --cluster edge-1 --keep edge|control-plane\n    held as the edge left it\n"),
            "{text}"
        );
        assert!(!text.contains("resolve deployment/api"), "{text}");
    }
}
