//! Scenario files: one behaviour each, as data. A scenario names the behaviour it shows, the
//! members (labels, region, taints, nodes, objects already there), `flotilla up`'s flags beyond
//! the kit's, the manifests applied to the control plane, what must then be true, and steps
//! (apply, delete, patch here or in a member, member faults and node failures, Cluster taints),
//! each with what must be true after it. The format is described in `docs/testing.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use kube::api::Patch;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Platform;
use crate::expect;
use crate::world::{MemberSpec, ObjectRef, Place, World, WorldConfig};

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// The file's name without `.yaml`, and the name of its test.
    pub name: String,
    /// The behaviour it shows, one sentence; no two scenarios show the same one.
    pub shows: String,
    /// `flotilla up`'s federation flags beyond the kit's short timings.
    #[serde(default)]
    pub flags: Vec<String>,
    pub members: Vec<MemberSpec>,
    /// Applied to the control plane, in order, once every member is Ready.
    #[serde(default)]
    pub manifests: Vec<Value>,
    #[serde(default)]
    pub expect: Vec<Expectation>,
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// What must become true: an object (by name) or some objects of a kind (by what they hold).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expectation {
    /// Where to look: `controlPlane` (the default) or a member's name.
    #[serde(rename = "in", default)]
    pub place: Place,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    /// Without a name, the expectation is about the objects of the kind (in the namespace)
    /// that match: at least one, exactly `count`, or none (`absent`).
    pub name: Option<String>,
    /// A subset of the object ([`expect::subset`]).
    pub matches: Option<Value>,
    /// `status.conditions` by type: `{Ready: "True"}`.
    #[serde(default)]
    pub conditions: BTreeMap<String, String>,
    /// The object is not there (with a name), or no object matches (without).
    #[serde(default)]
    pub absent: bool,
    pub count: Option<usize>,
    /// Once true, it must stay true this long (`2s`): for what must *not* happen meanwhile.
    pub holds_for: Option<String>,
    /// Why this is expected, printed when it fails.
    pub why: Option<String>,
}

/// One thing done to the world, then what must be true after it. Exactly one action per step.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    pub why: Option<String>,
    /// Where `apply`, `delete` and `patch` act: `controlPlane` (the default) or a member.
    #[serde(rename = "in", default)]
    pub place: Place,
    #[serde(default)]
    pub apply: Vec<Value>,
    #[serde(default)]
    pub delete: Vec<ObjectRef>,
    #[serde(default)]
    pub patch: Vec<PatchStep>,
    /// Member name → fault settings merged into its faults (`{blackhole: true}`).
    #[serde(default)]
    pub faults: BTreeMap<String, Value>,
    /// A member whose nodes all stop (their kubelets fail) or come back.
    pub fail_nodes: Option<String>,
    pub recover_nodes: Option<String>,
    /// A taint added to a member's Cluster, as an operator or a ClusterTaintPolicy would.
    pub taint_cluster: Option<TaintStep>,
    #[serde(default)]
    pub expect: Vec<Expectation>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchStep {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// A JSON merge patch …
    pub merge: Option<Value>,
    /// … or a JSON patch (a list of operations).
    pub json: Option<Value>,
    /// Patch the `status` subresource.
    #[serde(default)]
    pub status: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintStep {
    pub cluster: String,
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

impl PatchStep {
    fn target(&self) -> ObjectRef {
        ObjectRef { api_version: self.api_version.clone(), kind: self.kind.clone(), namespace: self.namespace.clone(), name: self.name.clone() }
    }

    fn patch(&self) -> anyhow::Result<Patch<Value>> {
        match (&self.merge, &self.json) {
            (Some(m), None) => Ok(Patch::Merge(m.clone())),
            (None, Some(j)) => Ok(Patch::Json(serde_json::from_value(j.clone()).context("a JSON patch")?)),
            _ => bail!("patch {}: give exactly one of merge and json", self.target()),
        }
    }
}

impl Expectation {
    fn describe(&self) -> String {
        let what = match (&self.namespace, &self.name) {
            (Some(ns), Some(n)) => format!("{} {ns}/{n}", self.kind),
            (None, Some(n)) => format!("{} {n}", self.kind),
            (Some(ns), None) => format!("{} in {ns}", self.kind),
            (None, None) => self.kind.clone(),
        };
        let how = match (self.absent, self.count) {
            (true, _) if self.name.is_some() => "absent".to_string(),
            (true, _) => "none matching".to_string(),
            (false, Some(n)) => format!("exactly {n} matching"),
            (false, None) => "present".to_string(),
        };
        let why = self.why.as_ref().map(|w| format!(" — {w}")).unwrap_or_default();
        format!("{what} in {}: {how}{why}", self.place)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.name.is_some() && self.absent && (self.matches.is_some() || !self.conditions.is_empty()) {
            bail!("{}: an absent named object has nothing to match", self.describe());
        }
        if self.absent && self.count.is_some() {
            bail!("{}: absent and count exclude each other", self.describe());
        }
        if let Some(h) = &self.holds_for {
            expect::parse_duration(h).map_err(|e| anyhow!("{}: holdsFor: {e}", self.describe()))?;
        }
        Ok(())
    }

    /// Does `object` hold what this expects of it?
    fn fits(&self, object: &Value) -> Result<(), String> {
        if let Some(m) = &self.matches {
            expect::subset(m, object)?;
        }
        expect::conditions(&self.conditions, object)
    }

    /// One look: `Ok` when it is true now, else what was seen.
    async fn look(&self, world: &World) -> Result<(), String> {
        let err = |e: anyhow::Error| format!("{e:#}");
        if let Some(name) = &self.name {
            let r = ObjectRef { api_version: self.api_version.clone(), kind: self.kind.clone(), namespace: self.namespace.clone(), name: name.clone() };
            let found = world.get(&self.place, &r).await.map_err(err)?;
            return match (found, self.absent) {
                (None, true) => Ok(()),
                (Some(o), true) => Err(format!("still there: {}", o["metadata"])),
                (None, false) => Err("not there".into()),
                (Some(o), false) => self.fits(&o),
            };
        }
        let all = world.list(&self.place, &self.api_version, &self.kind, self.namespace.as_deref()).await.map_err(err)?;
        let (fit, misfit): (Vec<_>, Vec<_>) = all.iter().map(|o| (o, self.fits(o))).partition(|(_, r)| r.is_ok());
        let name = |o: &Value| o["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let fitting: Vec<String> = fit.iter().map(|(o, _)| name(o)).collect();
        let why_not = || misfit.iter().take(3).map(|(o, r)| format!("{}: {}", name(o), r.as_ref().err().cloned().unwrap_or_default())).collect::<Vec<_>>();
        match (self.absent, self.count) {
            (true, _) if fitting.is_empty() => Ok(()),
            (true, _) => Err(format!("matching: {fitting:?}")),
            (false, Some(n)) if fitting.len() == n => Ok(()),
            (false, Some(n)) => Err(format!("{} of {n} matching {fitting:?}; others: {:?}", fitting.len(), why_not())),
            (false, None) if !fitting.is_empty() => Ok(()),
            (false, None) => Err(format!("none of {} matching: {:?}", all.len(), why_not())),
        }
    }

    /// Wait until it is true, then, with `holdsFor`, see that it stays so.
    pub async fn check(&self, world: &World) -> anyhow::Result<()> {
        expect::eventually(expect::DEADLINE, || self.look(world)).await.map_err(|last| anyhow!("{}\n    never so; last seen: {last}", self.describe()))?;
        if let Some(h) = &self.holds_for {
            let window = expect::parse_duration(h).map_err(|e| anyhow!(e))?;
            expect::holds(window, || self.look(world)).await.map_err(|last| anyhow!("{}\n    stopped holding within {h}: {last}", self.describe()))?;
        }
        Ok(())
    }
}

impl Step {
    fn actions(&self) -> usize {
        [
            !self.apply.is_empty(),
            !self.delete.is_empty(),
            !self.patch.is_empty(),
            !self.faults.is_empty(),
            self.fail_nodes.is_some(),
            self.recover_nodes.is_some(),
            self.taint_cluster.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count()
    }

    async fn perform(&self, world: &World) -> anyhow::Result<()> {
        for object in &self.apply {
            world.apply(&self.place, object).await?;
        }
        for r in &self.delete {
            world.delete(&self.place, r).await?;
        }
        for p in &self.patch {
            if p.status {
                world.patch_status(&self.place, &p.target(), &p.patch()?).await?;
            } else {
                world.patch(&self.place, &p.target(), &p.patch()?).await?;
            }
        }
        for (member, settings) in &self.faults {
            world.set_faults(member, settings)?;
        }
        if let Some(m) = &self.fail_nodes {
            world.set_nodes_failed(m, true).await?;
        }
        if let Some(m) = &self.recover_nodes {
            world.set_nodes_failed(m, false).await?;
        }
        if let Some(t) = &self.taint_cluster {
            let mut taint = json!({"key": t.key, "effect": t.effect});
            if let Some(v) = &t.value {
                taint["value"] = json!(v);
            }
            world.taint_cluster(&t.cluster, &taint).await?;
        }
        Ok(())
    }
}

impl Scenario {
    pub fn parse(text: &str) -> anyhow::Result<Scenario> {
        let s: Scenario = serde_saphyr::from_str(text).map_err(|e| anyhow!("not a scenario: {e}"))?;
        s.validate()?;
        Ok(s)
    }

    pub fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let s = Scenario::parse(&text).with_context(|| path.display().to_string())?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if s.name != stem {
            bail!("{}: the scenario is named {:?}; name it after its file, {stem:?}", path.display(), s.name);
        }
        Ok(s)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.shows.trim().ends_with('.') || self.shows.split_whitespace().count() < 4 {
            bail!("scenario {}: `shows` is the behaviour it shows, as one sentence", self.name);
        }
        if self.members.is_empty() {
            bail!("scenario {}: no members", self.name);
        }
        let names: BTreeSet<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        if names.len() != self.members.len() {
            bail!("scenario {}: two members of one name", self.name);
        }
        for (i, step) in self.steps.iter().enumerate() {
            if step.actions() != 1 {
                bail!("scenario {}: step {} has {} actions; give each step exactly one", self.name, i + 1, step.actions());
            }
            for m in step.faults.keys().chain(&step.fail_nodes).chain(&step.recover_nodes).chain(step.taint_cluster.as_ref().map(|t| &t.cluster)) {
                if !names.contains(m.as_str()) {
                    bail!("scenario {}: step {} names no member of it, {m:?}", self.name, i + 1);
                }
            }
        }
        for e in self.expect.iter().chain(self.steps.iter().flat_map(|s| &s.expect)) {
            e.validate()?;
            if let Place::Member(m) = &e.place
                && !names.contains(m.as_str())
            {
                bail!("scenario {}: {} looks in a member it does not have", self.name, e.describe());
            }
        }
        Ok(())
    }
}

async fn check_all(world: &World, expectations: &[Expectation], at: &str) -> anyhow::Result<()> {
    for (i, e) in expectations.iter().enumerate() {
        e.check(world).await.with_context(|| format!("{at}, expectation {}", i + 1))?;
    }
    Ok(())
}

/// Run `scenario` on a fresh world of `platform`'s.
pub async fn run<P: Platform>(platform: &P, scenario: &Scenario) -> anyhow::Result<()> {
    scenario.validate()?;
    let world = World::start(platform, WorldConfig { members: scenario.members.clone(), flags: scenario.flags.clone() }).await?;
    let outcome = async {
        for m in &scenario.manifests {
            world.apply(&Place::ControlPlane, m).await.context("the manifests")?;
        }
        check_all(&world, &scenario.expect, "after the manifests").await?;
        for (i, step) in scenario.steps.iter().enumerate() {
            let at = format!("step {}{}", i + 1, step.why.as_ref().map(|w| format!(" ({w})")).unwrap_or_default());
            step.perform(&world).await.with_context(|| at.clone())?;
            check_all(&world, &step.expect, &format!("after {at}")).await?;
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let stopped = world.stop().await;
    outcome?;
    stopped
}

/// Load and run one scenario file on a runtime of its own; panics with what failed.
pub fn run_file<P: Platform>(platform: &P, path: &Path) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Ok(filter) = std::env::var("FLOTILLA_TESTKIT_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).with_test_writer().try_init();
    }
    let scenario = Scenario::load(path).unwrap_or_else(|e| panic!("{e:#}"));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let started = Instant::now();
    let outcome = runtime.block_on(run(platform, &scenario));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(()) => eprintln!("scenario {}: shown ({:.1}s) — {}", scenario.name, started.elapsed().as_secs_f64(), scenario.shows),
        Err(e) => panic!("scenario {} ({}) failed:\n  {e:#}", scenario.name, scenario.shows),
    }
}

/// Every `*.yaml` in `dir` has a test in `tests` and the other way round; every file parses,
/// is named after its file, and shows a behaviour no other file shows.
pub fn check_directory(dir: &Path, tests: &[&str]) {
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|x| x == "yaml") {
            files.insert(path.file_stem().and_then(|s| s.to_str()).expect("a UTF-8 name").to_string());
        }
    }
    let tests: BTreeSet<String> = tests.iter().map(|t| t.to_string()).collect();
    let untested: Vec<&String> = files.difference(&tests).collect();
    let missing: Vec<&String> = tests.difference(&files).collect();
    assert!(untested.is_empty(), "scenario files without a test (add them to scenario_tests!): {untested:?}");
    assert!(missing.is_empty(), "tests without a scenario file in {}: {missing:?}", dir.display());
    let mut shown: BTreeMap<String, String> = BTreeMap::new();
    for name in &files {
        let s = Scenario::load(&dir.join(format!("{name}.yaml"))).unwrap_or_else(|e| panic!("{e:#}"));
        let key = s.shows.to_lowercase().split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(other) = shown.insert(key, name.clone()) {
            panic!("{name} and {other} show the same behaviour: {:?}", s.shows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
name: example
shows: A Deployment selected by a policy reaches the member it names.
members:
  - name: member1
    labels: {env: prod}
manifests:
  - apiVersion: v1
    kind: Namespace
    metadata: {name: shop}
expect:
  - in: member1
    apiVersion: v1
    kind: Namespace
    name: shop
steps:
  - why: member1 stops answering
    faults:
      member1: {blackhole: true}
    expect:
      - apiVersion: cluster.karmada.io/v1alpha1
        kind: Cluster
        name: member1
        conditions: {Ready: "False"}
"#;

    #[test]
    fn a_scenario_parses_and_says_where_it_looks() {
        let s = Scenario::parse(EXAMPLE).unwrap();
        assert_eq!(s.members[0].labels["env"], "prod");
        assert_eq!(s.expect[0].place, Place::Member("member1".into()));
        assert_eq!(s.steps[0].expect[0].place, Place::ControlPlane);
        assert_eq!(s.steps[0].expect[0].conditions["Ready"], "False");
        assert!(s.steps[0].expect[0].describe().starts_with("Cluster member1 in the control plane: present"));
    }

    #[test]
    fn mistakes_are_refused() {
        let two_actions = EXAMPLE.replace("    faults:", "    failNodes: member1\n    faults:");
        assert!(Scenario::parse(&two_actions).unwrap_err().to_string().contains("exactly one"));
        let stranger = EXAMPLE.replace("member1: {blackhole: true}", "member9: {blackhole: true}");
        assert!(Scenario::parse(&stranger).unwrap_err().to_string().contains("member9"));
        let vague = EXAMPLE.replace("A Deployment selected by a policy reaches the member it names.", "works");
        assert!(Scenario::parse(&vague).unwrap_err().to_string().contains("one sentence"));
        let typo = EXAMPLE.replace("conditions:", "condition:");
        assert!(Scenario::parse(&typo).is_err(), "unknown fields are refused");
    }
}
