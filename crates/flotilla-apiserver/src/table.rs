//! Table responses for `kubectl get`: column definitions and cells per kind, as the real server
//! prints them.

use serde_json::{Value, json};

use crate::meta;

/// Which columns a resource prints.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Printer {
    /// NAME, AGE.
    #[default]
    Default,
    Namespace,
    ConfigMap,
    Secret,
    Service,
    Deployment,
    ReplicaSet,
    Pod,
    EndpointSlice,
    /// A CRD's `additionalPrinterColumns`: (name, type, format, jsonPath, priority, description).
    Custom(Vec<CustomColumn>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub json_path: String,
    pub priority: i64,
    pub description: String,
}

fn col(name: &str, type_: &str, format: &str, priority: i64, description: &str) -> Value {
    json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority})
}

fn name_col() -> Value {
    col(
        "Name",
        "string",
        "name",
        0,
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    )
}

fn age_col() -> Value {
    col(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    )
}

/// A pod template's container names and images (wide columns of Deployments and ReplicaSets).
fn containers_col() -> Value {
    col("Containers", "string", "", 1, "Names of each container in the template.")
}

fn images_col() -> Value {
    col("Images", "string", "", 1, "Images referenced by each container in the template.")
}

fn age(obj: &Value) -> Value {
    match meta::meta_str(obj, "creationTimestamp").and_then(meta::age_seconds) {
        Some(s) => json!(meta::human_duration(s)),
        None => json!("<unknown>"),
    }
}

fn count(v: Option<&Value>) -> usize {
    v.and_then(Value::as_object).map_or(0, |m| m.len())
}

/// A workload's `spec.selector.matchLabels` as `k=v,…` (what kubectl shows for a selector of
/// labels only).
fn match_labels(obj: &Value) -> String {
    obj.pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}

/// The names and the images of a pod template's containers, each comma-separated.
fn template_containers(obj: &Value) -> (String, String) {
    let containers = obj.pointer("/spec/template/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
    let join = |field: &str| containers.iter().filter_map(|c| c.get(field)?.as_str()).collect::<Vec<_>>().join(",");
    (join("name"), join("image"))
}

/// An EndpointSlice's ports (`80,443`) and its first three addresses (`10.0.0.1,10.0.0.2 + 4
/// more...`), `<unset>` when there are none, as kube-apiserver prints them.
fn slice_ports_and_endpoints(obj: &Value) -> (String, String) {
    let ports: Vec<String> = obj
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| p.get("port").and_then(Value::as_i64).map_or_else(|| "<unset>".to_string(), |n| n.to_string()))
        .collect();
    let addresses: Vec<&str> = obj
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|e| e.get("addresses").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str))
        .collect();
    let unset = |s: String| if s.is_empty() { "<unset>".to_string() } else { s };
    let mut shown = addresses.iter().take(3).copied().collect::<Vec<_>>().join(",");
    if addresses.len() > 3 {
        shown = format!("{shown} + {} more...", addresses.len() - 3);
    }
    (unset(ports.join(",")), unset(shown))
}

/// A printer-column cell: one match as it is, several joined with commas as kube-apiserver
/// prints them, none as null.
fn column_cell(obj: &Value, path: &str) -> Value {
    let all = flotilla_api::jsonpath::all(obj, path);
    match all.as_slice() {
        [] => Value::Null,
        [one] => (*one).clone(),
        many => json!(many.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect::<Vec<_>>().join(",")),
    }
}

impl Printer {
    pub fn columns(&self) -> Vec<Value> {
        match self {
            Printer::Default => vec![name_col(), age_col()],
            Printer::Namespace => vec![name_col(), col("Status", "string", "", 0, "The status of the namespace"), age_col()],
            Printer::ConfigMap => vec![name_col(), col("Data", "string", "", 0, "Data contains the configuration data."), age_col()],
            Printer::Secret => vec![
                name_col(),
                col("Type", "string", "", 0, "Used to facilitate programmatic handling of secret data."),
                col("Data", "string", "", 0, "Data contains the secret data."),
                age_col(),
            ],
            Printer::Service => vec![
                name_col(),
                col("Type", "string", "", 0, "The type of the service."),
                col("Cluster-IP", "string", "", 0, "The IP address of the service."),
                col("External-IP", "string", "", 0, "The external IP address of the service."),
                col("Port(s)", "string", "", 0, "The ports of the service."),
                age_col(),
                col("Selector", "string", "", 1, "Route service traffic to pods with label keys and values matching this selector."),
            ],
            Printer::Deployment => vec![
                name_col(),
                col("Ready", "string", "", 0, "Number of the pod with ready state"),
                col("Up-to-date", "string", "", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
                col("Available", "string", "", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
                age_col(),
                containers_col(),
                images_col(),
                col(
                    "Selector",
                    "string",
                    "",
                    1,
                    "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
                ),
            ],
            Printer::Pod => vec![
                name_col(),
                col("Ready", "string", "", 0, "The aggregate readiness state of this pod for accepting traffic."),
                col("Status", "string", "", 0, "The aggregate status of the containers in this pod."),
                col(
                    "Restarts",
                    "string",
                    "",
                    0,
                    "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                ),
                age_col(),
                col("IP", "string", "", 1, "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
                col("Node", "string", "", 1, "NodeName is a request to schedule this pod onto a specific node."),
                col("Nominated Node", "string", "", 1, "The node the scheduler nominated for this pod when it preempted others for it."),
                col("Readiness Gates", "string", "", 1, "How many of the pod's readiness gates are true."),
            ],
            Printer::ReplicaSet => vec![
                name_col(),
                col("Desired", "integer", "", 0, "Number of desired pods."),
                col("Current", "integer", "", 0, "Number of actively running pods."),
                col("Ready", "integer", "", 0, "Number of pods ready."),
                age_col(),
                containers_col(),
                images_col(),
                col("Selector", "string", "", 1, "Label selector for pods."),
            ],
            Printer::EndpointSlice => vec![
                name_col(),
                col("AddressType", "string", "", 0, "The type of address carried by this EndpointSlice."),
                col("Ports", "string", "", 0, "Port numbers offered by this EndpointSlice."),
                col("Endpoints", "string", "", 0, "Addresses of the endpoints in this EndpointSlice (the first three)."),
                age_col(),
            ],
            Printer::Custom(cols) => {
                let mut out = vec![name_col()];
                for c in cols {
                    let description = if c.description.is_empty() {
                        format!("Custom resource definition column (in JSONPath format): {}", c.json_path)
                    } else {
                        c.description.clone()
                    };
                    out.push(col(&c.name, &c.type_, &c.format, c.priority, &description));
                }
                if cols.is_empty() {
                    // A CRD without columns: Age is a date column (kube-apiserver's default).
                    let mut age = age_col();
                    age["type"] = json!("date");
                    out.push(age);
                }
                out
            }
        }
    }

    pub fn cells(&self, obj: &Value) -> Vec<Value> {
        let name = json!(meta::name(obj));
        match self {
            Printer::Default => vec![name, age(obj)],
            Printer::Namespace => vec![name, obj.pointer("/status/phase").cloned().unwrap_or(json!("")), age(obj)],
            Printer::ConfigMap => {
                let n = count(obj.get("data")) + count(obj.get("binaryData"));
                vec![name, json!(n as i64), age(obj)]
            }
            Printer::Secret => {
                let n = count(obj.get("data")) + count(obj.get("stringData"));
                vec![name, obj.get("type").cloned().unwrap_or(json!("Opaque")), json!(n as i64), age(obj)]
            }
            Printer::Service => {
                let spec = obj.get("spec").cloned().unwrap_or(json!({}));
                let ty = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
                let cluster_ip = spec.get("clusterIP").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("<none>").to_string();
                let external = match spec.get("externalIPs").and_then(Value::as_array) {
                    Some(a) if !a.is_empty() => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
                    _ if ty == "LoadBalancer" => "<pending>".into(),
                    _ if ty == "ExternalName" => spec.get("externalName").and_then(Value::as_str).unwrap_or("").into(),
                    _ => "<none>".into(),
                };
                let ports = spec
                    .get("ports")
                    .and_then(Value::as_array)
                    .map(|ps| {
                        ps.iter()
                            .map(|p| {
                                let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                                let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                                match p.get("nodePort").and_then(Value::as_i64) {
                                    Some(np) => format!("{port}:{np}/{proto}"),
                                    None => format!("{port}/{proto}"),
                                }
                            })
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "<none>".into());
                let selector = spec
                    .get("selector")
                    .and_then(Value::as_object)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(","))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "<none>".into());
                vec![name, json!(ty), json!(cluster_ip), json!(external), json!(ports), age(obj), json!(selector)]
            }
            Printer::Deployment => {
                let want = obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
                let st = |f: &str| obj.pointer(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
                let (names, images) = template_containers(obj);
                let selector = match_labels(obj);
                vec![
                    name,
                    json!(format!("{}/{}", st("readyReplicas"), want)),
                    json!(st("updatedReplicas")),
                    json!(st("availableReplicas")),
                    age(obj),
                    json!(names),
                    json!(images),
                    json!(selector),
                ]
            }
            Printer::Pod => {
                let statuses = obj.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
                let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, |c| c.len());
                let ready = statuses.iter().filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true)).count();
                let restarts: i64 = statuses.iter().filter_map(|s| s.get("restartCount").and_then(Value::as_i64)).sum();
                let phase = obj.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
                let phase = if meta::is_terminating(obj) { "Terminating" } else { phase };
                vec![
                    name,
                    json!(format!("{ready}/{total}")),
                    json!(phase),
                    json!(restarts.to_string()),
                    age(obj),
                    json!(obj.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("<none>")),
                    json!(obj.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("<none>")),
                    json!(obj.pointer("/status/nominatedNodeName").and_then(Value::as_str).unwrap_or("<none>")),
                    json!(readiness_gates(obj)),
                ]
            }
            Printer::ReplicaSet => {
                let (names, images) = template_containers(obj);
                let num = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
                let desired = obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
                vec![
                    name,
                    json!(desired),
                    json!(num("/status/replicas")),
                    json!(num("/status/readyReplicas")),
                    age(obj),
                    json!(names),
                    json!(images),
                    json!(match_labels(obj)),
                ]
            }
            Printer::EndpointSlice => {
                let (ports, endpoints) = slice_ports_and_endpoints(obj);
                vec![name, obj.get("addressType").cloned().unwrap_or(json!("")), json!(ports), json!(endpoints), age(obj)]
            }
            Printer::Custom(cols) => {
                let mut out = vec![name];
                for c in cols {
                    let v = column_cell(obj, &c.json_path);
                    let v = if c.type_ == "date" {
                        v.as_str().and_then(meta::age_seconds).map(|s| json!(meta::human_duration(s))).unwrap_or(Value::Null)
                    } else {
                        v
                    };
                    out.push(v);
                }
                if cols.is_empty() {
                    out.push(age(obj));
                }
                out
            }
        }
    }
}

/// `<none>` without readiness gates, else how many of them the pod's conditions say are true
/// (`1/2`).
fn readiness_gates(pod: &Value) -> String {
    let gates: Vec<&str> =
        pod.pointer("/spec/readinessGates").and_then(Value::as_array).into_iter().flatten().filter_map(|g| g.get("conditionType")?.as_str()).collect();
    if gates.is_empty() {
        return "<none>".into();
    }
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let true_ = gates
        .iter()
        .filter(|g| conditions.iter().any(|c| c.get("type").and_then(Value::as_str) == Some(**g) && c.get("status").and_then(Value::as_str) == Some("True")))
        .count();
    format!("{true_}/{}", gates.len())
}

/// `PartialObjectMetadata` of an object (the default `rows[].object`).
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// Build a Table of `objects`.
pub fn table(printer: &Printer, version: &str, objects: &[Value], include: &str, list_meta: Value, with_columns: bool) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": printer.cells(o)});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => row["object"] = partial_metadata(o),
            }
            row
        })
        .collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{version}"),
        "metadata": list_meta,
        "rows": rows,
    });
    if with_columns {
        t["columnDefinitions"] = Value::Array(printer.columns());
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_for_common_kinds() {
        let cm = json!({"metadata": {"name": "c", "creationTimestamp": meta::now()}, "data": {"a": "1", "b": "2"}});
        let cells = Printer::ConfigMap.cells(&cm);
        assert_eq!(cells[0], "c");
        assert_eq!(cells[1], 2);
        let svc = json!({"metadata": {"name": "s"}, "spec": {"type": "ClusterIP", "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "x"}}});
        let cells = Printer::Service.cells(&svc);
        assert_eq!(cells[4], "80/TCP");
        assert_eq!(cells[6], "app=x");
        let w = json!({"spec": {"m": [{"kind": "A"}, {"kind": "B"}]}, "status": {"conditions": [{"type": "Scheduled", "status": "True"}, {"type": "FullyApplied", "status": "False"}]}});
        assert_eq!(column_cell(&w, ".spec.m[*].kind"), json!("A,B"));
        assert_eq!(column_cell(&w, r#".status.conditions[?(@.type=="FullyApplied")].status"#), json!("False"));
        assert_eq!(column_cell(&w, r#".status.conditions[?(@.type=="Nope")].status"#), Value::Null);
        assert_eq!(column_cell(&w, ".spec.m[1].kind"), json!("B"));
    }

    #[test]
    fn replica_sets_slices_and_wide_pods() {
        let rs = json!({"metadata": {"name": "web-1"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "1"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}, "status": {"replicas": 2}});
        let cells = Printer::ReplicaSet.cells(&rs);
        assert_eq!((&cells[1], &cells[2], &cells[3]), (&json!(3), &json!(2), &json!(0)));
        assert_eq!(cells[7], "app=web,pod-template-hash=1");
        assert_eq!(cells.len(), Printer::ReplicaSet.columns().len());
        let eps = |n: usize| (0..n).map(|i| json!({"addresses": [format!("10.0.0.{i}")]})).collect::<Vec<_>>();
        let slice = json!({"metadata": {"name": "s"}, "addressType": "IPv4", "ports": [{"port": 80}, {"port": 443}], "endpoints": eps(5)});
        let cells = Printer::EndpointSlice.cells(&slice);
        assert_eq!((&cells[2], &cells[3]), (&json!("80,443"), &json!("10.0.0.0,10.0.0.1,10.0.0.2 + 2 more...")));
        let empty = json!({"metadata": {"name": "s"}, "addressType": "IPv4"});
        assert_eq!(Printer::EndpointSlice.cells(&empty)[2..4], [json!("<unset>"), json!("<unset>")]);
        let pod = json!({"metadata": {"name": "p"}, "spec": {"readinessGates": [{"conditionType": "A"}, {"conditionType": "B"}]}, "status": {"conditions": [{"type": "A", "status": "True"}]}});
        let cells = Printer::Pod.cells(&pod);
        assert_eq!((&cells[7], &cells[8]), (&json!("<none>"), &json!("1/2")));
        assert_eq!(cells.len(), Printer::Pod.columns().len());
    }
}
