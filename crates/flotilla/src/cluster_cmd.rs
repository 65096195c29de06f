//! `flotilla cordon|uncordon CLUSTER` and `flotilla taint clusters NAME key=value:Effect[-]...`,
//! as karmadactl has them: cordon adds the taint `cluster.karmada.io/unschedulable:NoSchedule`
//! (the scheduler places nothing new there; what runs stays), uncordon removes it; `taint`
//! adds, changes (`--overwrite`) and removes (`key:Effect-`, `key-`) a Cluster's taints with
//! kubectl's rules. Each change is one update of the Cluster at the version read, tried again
//! on a conflict.

use anyhow::{Context, bail};
use flotilla_api::federation::karmada::cluster::{Cluster, TAINT_UNSCHEDULABLE};
use flotilla_api::selector::{label_key_errors, label_value_errors};
use k8s_openapi::api::core::v1::Taint;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::join_cmd::ControlPlane;

const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

#[derive(clap::Args, Debug)]
pub struct CordonArgs {
    /// The Cluster.
    cluster: String,
    #[command(flatten)]
    control_plane: ControlPlane,
}

#[derive(clap::Args, Debug)]
pub struct TaintArgs {
    /// `clusters` (or `cluster`), as karmadactl takes it.
    resource: String,
    /// The Cluster.
    cluster: String,
    /// `key=value:Effect` or `key:Effect` to add, `key:Effect-` or `key-` to remove; Effect is
    /// NoSchedule, PreferNoSchedule or NoExecute.
    #[arg(required = true)]
    taints: Vec<String>,
    /// Replace the value of a taint whose key and effect are already there.
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    control_plane: ControlPlane,
}

/// One change `taint` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum TaintOp {
    Add(Taint),
    /// Remove the taints of this key (and effect, when given).
    Remove {
        key: String,
        effect: Option<String>,
    },
}

fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint { key: key.into(), value: value.map(String::from), effect: effect.into(), time_added: None }
}

/// Parses one argument of `taint`, with kubectl's messages.
pub fn parse_taint_op(spec: &str) -> Result<TaintOp, String> {
    let invalid = |why: String| format!("invalid taint spec {spec:?}: {why}");
    let check_key = |key: &str| -> Result<(), String> {
        match label_key_errors(key).first() {
            Some(e) => Err(invalid(format!("key {key:?}: {e}"))),
            None => Ok(()),
        }
    };
    let check_effect = |effect: &str| -> Result<(), String> {
        if EFFECTS.contains(&effect) { Ok(()) } else { Err(invalid(format!("effect {effect:?}: must be one of {}", EFFECTS.join(", ")))) }
    };
    if let Some(removal) = spec.strip_suffix('-') {
        let (key, effect) = match removal.split_once(':') {
            Some((k, e)) => (k, Some(e)),
            None => (removal, None),
        };
        check_key(key)?;
        if let Some(e) = effect {
            check_effect(e)?;
        }
        return Ok(TaintOp::Remove { key: key.into(), effect: effect.map(String::from) });
    }
    let Some((key_value, effect)) = spec.rsplit_once(':') else { return Err(invalid("expected key=value:Effect, key:Effect, key:Effect- or key-".into())) };
    check_effect(effect)?;
    let (key, value) = match key_value.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (key_value, None),
    };
    check_key(key)?;
    if let Some(e) = value.and_then(|v| label_value_errors(v).into_iter().next()) {
        return Err(invalid(format!("value {:?}: {e}", value.unwrap_or_default())));
    }
    Ok(TaintOp::Add(taint(key, value, effect)))
}

/// Applies `ops` to `taints` with kubectl's rules: adding a key and effect already there needs
/// `overwrite`; removing one not there is an error.
pub fn apply_taint_ops(taints: &[Taint], ops: &[TaintOp], overwrite: bool, cluster: &str) -> Result<Vec<Taint>, String> {
    let mut out = taints.to_vec();
    for op in ops {
        match op {
            TaintOp::Add(t) => match out.iter_mut().find(|o| o.key == t.key && o.effect == t.effect) {
                Some(existing) if overwrite => {
                    existing.value = t.value.clone();
                    existing.time_added = None;
                }
                Some(_) => return Err(format!("cluster {cluster} already has {} taint(s) with same effect(s) and --overwrite is false", t.key)),
                None => out.push(t.clone()),
            },
            TaintOp::Remove { key, effect } => {
                let before = out.len();
                out.retain(|o| !(o.key == *key && effect.as_ref().is_none_or(|e| *e == o.effect)));
                if out.len() == before {
                    let what = effect.as_ref().map_or(key.clone(), |e| format!("{key}:{e}"));
                    return Err(format!("taint {what:?} not found"));
                }
            }
        }
    }
    Ok(out)
}

/// Reads the Cluster, lets `change` compute its new taints (None: nothing to do), writes them at
/// the version read; a conflict reads again.
async fn update_taints(control_plane: &ControlPlane, name: &str, change: impl Fn(&[Taint]) -> Result<Option<Vec<Taint>>, String>) -> anyhow::Result<bool> {
    let client = control_plane.client().await?;
    let api: Api<Cluster> = Api::all(client);
    for _ in 0..5 {
        let cluster = api.get_opt(name).await.with_context(|| format!("reading cluster {name}"))?.with_context(|| format!("cluster {name:?} not found"))?;
        let current = cluster.spec.taints.clone().unwrap_or_default();
        let Some(taints) = change(&current).map_err(anyhow::Error::msg)? else { return Ok(false) };
        let patch = json!({"metadata": {"resourceVersion": cluster.metadata.resource_version}, "spec": {"taints": taints}});
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).with_context(|| format!("updating cluster {name}")),
        }
    }
    bail!("cluster {name} kept changing under the update; try again")
}

fn unschedulable() -> Taint {
    taint(TAINT_UNSCHEDULABLE, None, "NoSchedule")
}

fn is_unschedulable(t: &Taint) -> bool {
    t.key == TAINT_UNSCHEDULABLE && t.effect == "NoSchedule"
}

pub async fn cordon(args: CordonArgs) -> anyhow::Result<()> {
    let changed = update_taints(&args.control_plane, &args.cluster, |taints| {
        Ok((!taints.iter().any(is_unschedulable)).then(|| taints.iter().cloned().chain([unschedulable()]).collect()))
    })
    .await?;
    println!("cluster/{} {}", args.cluster, if changed { "cordoned" } else { "already cordoned" });
    Ok(())
}

pub async fn uncordon(args: CordonArgs) -> anyhow::Result<()> {
    let changed = update_taints(&args.control_plane, &args.cluster, |taints| {
        Ok(taints.iter().any(is_unschedulable).then(|| taints.iter().filter(|t| !is_unschedulable(t)).cloned().collect()))
    })
    .await?;
    println!("cluster/{} {}", args.cluster, if changed { "uncordoned" } else { "already uncordoned" });
    Ok(())
}

pub async fn taint_clusters(args: TaintArgs) -> anyhow::Result<()> {
    if !matches!(args.resource.as_str(), "clusters" | "cluster") {
        bail!("taint works on clusters: `flotilla taint clusters NAME key=value:Effect`, got {:?}", args.resource);
    }
    let ops: Vec<TaintOp> = args.taints.iter().map(|s| parse_taint_op(s)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let removes_only = ops.iter().all(|o| matches!(o, TaintOp::Remove { .. }));
    update_taints(&args.control_plane, &args.cluster, |taints| apply_taint_ops(taints, &ops, args.overwrite, &args.cluster).map(Some)).await?;
    println!("cluster/{} {}", args.cluster, if removes_only { "untainted" } else { "tainted" });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_specs_parse_as_kubectl_takes_them() {
        assert_eq!(parse_taint_op("dedicated=gpu:NoSchedule"), Ok(TaintOp::Add(taint("dedicated", Some("gpu"), "NoSchedule"))));
        assert_eq!(parse_taint_op("example.com/maint:NoExecute"), Ok(TaintOp::Add(taint("example.com/maint", None, "NoExecute"))));
        assert_eq!(parse_taint_op("dedicated:NoSchedule-"), Ok(TaintOp::Remove { key: "dedicated".into(), effect: Some("NoSchedule".into()) }));
        assert_eq!(parse_taint_op("dedicated-"), Ok(TaintOp::Remove { key: "dedicated".into(), effect: None }));
        assert!(parse_taint_op("dedicated=gpu:Sometimes").unwrap_err().contains("must be one of NoSchedule, PreferNoSchedule, NoExecute"));
        assert!(parse_taint_op("dedicated=gpu").unwrap_err().contains("expected key=value:Effect"));
        assert!(parse_taint_op("bad key=x:NoSchedule").unwrap_err().contains("key \"bad key\""));
        assert!(parse_taint_op("k=bad value:NoSchedule").unwrap_err().contains("value \"bad value\""));
    }

    #[test]
    fn taints_follow_kubectls_rules() {
        let have = vec![taint("dedicated", Some("gpu"), "NoSchedule"), taint("dedicated", None, "NoExecute"), taint("zone", Some("a"), "PreferNoSchedule")];
        let add = |s: &str| parse_taint_op(s).unwrap();
        let err = apply_taint_ops(&have, &[add("dedicated=cpu:NoSchedule")], false, "m1").unwrap_err();
        assert_eq!(err, "cluster m1 already has dedicated taint(s) with same effect(s) and --overwrite is false");
        let changed = apply_taint_ops(&have, &[add("dedicated=cpu:NoSchedule")], true, "m1").unwrap();
        assert_eq!(changed[0].value.as_deref(), Some("cpu"));
        assert_eq!(changed.len(), 3);
        let one_effect = apply_taint_ops(&have, &[add("dedicated:NoExecute-")], false, "m1").unwrap();
        assert_eq!(one_effect.len(), 2);
        let every_effect = apply_taint_ops(&have, &[add("dedicated-")], false, "m1").unwrap();
        assert_eq!(every_effect, vec![taint("zone", Some("a"), "PreferNoSchedule")]);
        assert_eq!(apply_taint_ops(&have, &[add("nothing-")], false, "m1").unwrap_err(), "taint \"nothing\" not found");
        let both = apply_taint_ops(&[], &[add("a=1:NoSchedule"), add("b:PreferNoSchedule")], false, "m1").unwrap();
        assert_eq!(both.len(), 2);
    }
}
