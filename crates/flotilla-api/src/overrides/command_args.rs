//! `commandOverrider` / `argsOverrider`: items appended to or removed from a named
//! container's `command` or `args`.

use serde_json::Value;

use super::patch::PatchOp;
use crate::federation::karmada::policy::{CommandArgsOperator, CommandArgsOverrider, OverriderOperator};
use crate::interpreter::unstructured;

/// Which list a [`CommandArgsOverrider`] edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Command,
    Args,
}

impl Target {
    fn field(self) -> &'static str {
        match self {
            Target::Command => "command",
            Target::Args => "args",
        }
    }
}

/// The operations an overrider makes: for every container named `containerName` in a Pod
/// (`/spec/containers`) or the pod template of a ReplicaSet, Deployment, DaemonSet, Job or
/// StatefulSet (by `kind` alone), the new list, `add`ed when the container has none and
/// `replace`d otherwise. `add` appends the values; `remove` drops every item equal to one.
pub(crate) fn patches(obj: &Value, target: Target, overrider: &CommandArgsOverrider) -> Result<Vec<PatchOp>, String> {
    let containers_path: &[&str] = match unstructured::string(obj, &["kind"]).unwrap_or("") {
        "Pod" => &["spec", "containers"],
        "ReplicaSet" | "Deployment" | "DaemonSet" | "Job" | "StatefulSet" => &["spec", "template", "spec", "containers"],
        _ => return Ok(Vec::new()),
    };
    let containers = unstructured::nested_array(obj, containers_path)
        .map_err(|e| format!("failed to retrieves path({}) from rawObj, error: {e}", containers_path.join("/")))?;
    let values = overrider.value.as_deref().unwrap_or_default();
    let mut ops = Vec::new();
    for (i, container) in containers.into_iter().flatten().enumerate() {
        if container.get("name").and_then(Value::as_str) != Some(overrider.container_name.as_str()) {
            continue;
        }
        let path = format!("/{}/{i}/{}", containers_path.join("/"), target.field());
        let (op, current) = match container.get(target.field()) {
            None | Some(Value::Null) => (OverriderOperator::Add, Vec::new()),
            Some(Value::Array(items)) => (OverriderOperator::Replace, items.iter().map(item_text).collect()),
            Some(other) => return Err(format!("{path}: expected a list, got {other}")),
        };
        let new: Vec<String> = match overrider.operator {
            CommandArgsOperator::Add => current.into_iter().chain(values.iter().cloned()).collect(),
            CommandArgsOperator::Remove => current.into_iter().filter(|item| !values.contains(item)).collect(),
        };
        ops.push(PatchOp::new(op, path, Value::from(new)));
    }
    Ok(ops)
}

/// An item as Go's `fmt.Sprintf("%s", item)` prints it (items are strings in any valid pod).
fn item_text(item: &Value) -> String {
    match item {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
