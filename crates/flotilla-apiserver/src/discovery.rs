//! Discovery documents: `/api`, `/apis`, `/apis/{group}`, `/api/v1`, `/apis/{g}/{v}` in their
//! legacy form, and the aggregated form (`apidiscovery.k8s.io` v2 and v2beta1) for `/api` and
//! `/apis`.

use serde_json::{Value, json};

use std::sync::Arc;

use crate::connect::ConnectSubresource;
use crate::resources::{Catalog, ResourceInfo};

fn gv_string(group: &str, version: &str) -> String {
    if group.is_empty() { version.to_string() } else { format!("{group}/{version}") }
}

/// `/api`
pub fn core_versions(advertise: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": advertise}],
    })
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": gv_string(name, v), "version": v})).collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`
pub fn groups(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = catalog.groups().iter().filter(|g| !g.name.is_empty()).map(|g| group_doc(&g.name, &g.versions)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`
pub fn group(catalog: &Catalog, name: &str) -> Option<Value> {
    let g = catalog.groups().iter().find(|g| g.name == name && !name.is_empty())?;
    let mut doc = group_doc(&g.name, &g.versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// Resources served by handlers rather than storage (create-only reviews).
fn virtual_resources(group: &str, version: &str) -> Vec<Value> {
    match (group, version) {
        ("authorization.k8s.io", "v1") => vec![
            json!({"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview", "namespaced": false, "kind": "SelfSubjectAccessReview", "verbs": ["create"]}),
            json!({"name": "selfsubjectrulesreviews", "singularName": "selfsubjectrulesreview", "namespaced": false, "kind": "SelfSubjectRulesReview", "verbs": ["create"]}),
            json!({"name": "subjectaccessreviews", "singularName": "subjectaccessreview", "namespaced": false, "kind": "SubjectAccessReview", "verbs": ["create"]}),
        ],
        ("authentication.k8s.io", "v1") => vec![
            json!({"name": "selfsubjectreviews", "singularName": "selfsubjectreview", "namespaced": false, "kind": "SelfSubjectReview", "verbs": ["create"]}),
        ],
        _ => Vec::new(),
    }
}

/// kube-apiserver's `storageVersionHash`: the first 8 bytes of the SHA-256 of the stored
/// `group/version/kind`, base64. A custom resource is stored in its CRD's storage version, and
/// events.k8s.io Events as core v1 Events.
fn storage_version_hash(r: &ResourceInfo) -> String {
    use base64::Engine;
    let (group, version) = match &r.codec {
        crate::resources::Codec::Custom(s) if !s.storage_version.is_empty() => (r.group.as_str(), s.storage_version.as_str()),
        _ if r.group == "events.k8s.io" && r.kind == "Event" => ("", "v1"),
        _ => (r.group.as_str(), r.version.as_str()),
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{group}/{version}/{}", r.kind).as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest.as_ref()[..8])
}

fn resource_entries(r: &ResourceInfo, connects: &[Arc<ConnectSubresource>]) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs,
        "storageVersionHash": storage_version_hash(r),
    });
    if !r.short_names.is_empty() {
        main["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        main["categories"] = json!(r.categories);
    }
    let mut out = vec![main];
    if r.finalize {
        out.push(json!({"name": format!("{}/finalize", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["update"]}));
    }
    if r.approval {
        out.push(json!({"name": format!("{}/approval", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
    }
    if r.status {
        out.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
    }
    if r.scale.is_some() {
        out.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
    }
    for c in connects {
        out.push(
            json!({"name": format!("{}/{}", r.plural, c.subresource), "singularName": "", "namespaced": r.namespaced, "kind": c.kind, "verbs": c.verbs()}),
        );
    }
    out
}

/// `/api/v1` or `/apis/{g}/{v}`
pub fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    if !catalog.has_group_version(group, version) {
        return None;
    }
    let mut resources: Vec<Value> = catalog.resources(group, version).iter().flat_map(|r| resource_entries(r, &catalog.connects_of(r))).collect();
    resources.extend(virtual_resources(group, version));
    // Built-in resources come sorted by name; a CRD's as apiextensions lists them: the
    // resource, then status, then scale.
    if catalog.resources(group, version).iter().any(|r| r.is_custom()) {
        resources.sort_by_key(|v| {
            let name = v["name"].as_str().unwrap_or("");
            let (base, sub) = name.split_once('/').unwrap_or((name, ""));
            (
                base.to_string(),
                match sub {
                    "" => 0,
                    "status" => 1,
                    _ => 2,
                },
            )
        });
    } else {
        resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
    let mut doc = json!({"kind": "APIResourceList", "groupVersion": gv_string(group, version), "resources": resources});
    if !group.is_empty() {
        doc["apiVersion"] = json!("v1");
    }
    Some(doc)
}

/// A `responseKind`. kube-apiserver leaves group and version empty where they are a built-in
/// resource's own (its CRD discovery fills them in for custom resources).
fn response_kind(r: &ResourceInfo, group: &str, version: &str, kind: &str) -> Value {
    if !r.is_custom() && group == r.group && version == r.version {
        json!({"group": "", "version": "", "kind": kind})
    } else {
        json!({"group": group, "version": version, "kind": kind})
    }
}

fn aggregated_resource(r: &ResourceInfo, connects: &[Arc<ConnectSubresource>]) -> Value {
    let mut d = json!({
        "resource": r.plural,
        "responseKind": response_kind(r, &r.group, &r.version, &r.kind),
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        d["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        d["categories"] = json!(r.categories);
    }
    let mut subs = Vec::new();
    if r.finalize {
        subs.push(json!({"subresource": "finalize", "responseKind": response_kind(r, &r.group, &r.version, &r.kind), "verbs": ["update"]}));
    }
    if r.approval {
        subs.push(json!({"subresource": "approval", "responseKind": response_kind(r, &r.group, &r.version, &r.kind), "verbs": ["get", "patch", "update"]}));
    }
    if r.status {
        subs.push(json!({"subresource": "status", "responseKind": response_kind(r, &r.group, &r.version, &r.kind), "verbs": ["get", "patch", "update"]}));
    }
    if r.scale.is_some() {
        subs.push(
            json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]}),
        );
    }
    for c in connects {
        subs.push(json!({"subresource": c.subresource, "responseKind": response_kind(r, &r.group, &r.version, &c.kind), "verbs": c.verbs()}));
    }
    if !subs.is_empty() {
        d["subresources"] = Value::Array(subs);
    }
    d
}

fn aggregated_virtual(group: &str, version: &str) -> Vec<Value> {
    virtual_resources(group, version)
        .into_iter()
        .map(|v| {
            json!({
                "resource": v["name"],
                "responseKind": {"group": "", "version": "", "kind": v["kind"]},
                "scope": "Cluster",
                "singularResource": v["singularName"],
                "verbs": v["verbs"],
            })
        })
        .collect()
}

/// Aggregated discovery for the core group (`core = true`, `/api`) or all named groups (`/apis`).
pub fn aggregated(catalog: &Catalog, core: bool, api_version: &str) -> Value {
    let items: Vec<Value> = catalog
        .groups()
        .iter()
        .filter(|g| g.name.is_empty() == core)
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|v| {
                    let mut resources: Vec<Value> = catalog.resources(&g.name, v).iter().map(|r| aggregated_resource(r, &catalog.connects_of(r))).collect();
                    resources.extend(aggregated_virtual(&g.name, v));
                    resources.sort_by(|a, b| a["resource"].as_str().cmp(&b["resource"].as_str()));
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            // The core group has no name, and kube-apiserver leaves it out.
            let metadata = if g.name.is_empty() { json!({}) } else { json!({"name": g.name}) };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}
