//! Fixture builders: manifests as data, for tests written in Rust rather than as scenario files.
//!
//! ```
//! use flotilla_testkit::fixtures::{deployment, propagation_policy};
//! let web = deployment("shop", "web").replicas(4).image("nginx:1.25").build();
//! let policy = propagation_policy("shop", "web").select("apps/v1", "Deployment", "web").clusters(&["member1", "member2"]).divided().build();
//! assert_eq!(web["spec"]["replicas"], 4);
//! assert_eq!(policy["spec"]["placement"]["replicaScheduling"]["replicaSchedulingType"], "Divided");
//! ```

use serde_json::{Value, json};

/// A manifest being built.
#[derive(Clone, Debug)]
pub struct Fixture(Value);

impl Fixture {
    pub fn build(self) -> Value {
        self.0
    }

    /// Set `value` at the JSON pointer `path`, making the objects on the way.
    pub fn set(mut self, path: &str, value: Value) -> Fixture {
        let mut at = &mut self.0;
        for key in path.trim_start_matches('/').split('/') {
            if !at.is_object() {
                *at = json!({});
            }
            at = at.as_object_mut().expect("an object").entry(key.to_string()).or_insert(Value::Null);
        }
        *at = value;
        self
    }

    pub fn label(self, key: &str, value: &str) -> Fixture {
        self.set(&format!("/metadata/labels/{key}"), json!(value))
    }

    /// Deployments: `spec.replicas`.
    pub fn replicas(self, n: i64) -> Fixture {
        self.set("/spec/replicas", json!(n))
    }

    /// Deployments: the first container's image.
    pub fn image(mut self, image: &str) -> Fixture {
        self.0["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        self
    }

    /// Policies: one more resource selector.
    pub fn select(mut self, api_version: &str, kind: &str, name: &str) -> Fixture {
        let selectors = self.0["spec"]["resourceSelectors"].as_array_mut().expect("a policy");
        selectors.push(json!({"apiVersion": api_version, "kind": kind, "name": name}));
        self
    }

    /// Policies: `placement.clusterAffinity.clusterNames`.
    pub fn clusters(self, names: &[&str]) -> Fixture {
        self.set("/spec/placement/clusterAffinity/clusterNames", json!(names))
    }

    /// Policies: replicas Divided, Weighted (by equal static weights unless more is said).
    pub fn divided(self) -> Fixture {
        self.set("/spec/placement/replicaScheduling", json!({"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"}))
    }
}

fn object(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Value {
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}

pub fn namespace(name: &str) -> Fixture {
    Fixture(object("v1", "Namespace", None, name))
}

/// A Deployment of one `nginx:1.25` container labelled `app: <name>`, one replica.
pub fn deployment(namespace: &str, name: &str) -> Fixture {
    let mut d = object("apps/v1", "Deployment", Some(namespace), name);
    d["spec"] = json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": name, "image": "nginx:1.25"}]}}
    });
    Fixture(d)
}

pub fn config_map(namespace: &str, name: &str, data: &[(&str, &str)]) -> Fixture {
    let mut c = object("v1", "ConfigMap", Some(namespace), name);
    c["data"] = data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>().into();
    Fixture(c)
}

/// A PropagationPolicy selecting nothing yet, placing nowhere yet.
pub fn propagation_policy(namespace: &str, name: &str) -> Fixture {
    let mut p = object("policy.karmada.io/v1alpha1", "PropagationPolicy", Some(namespace), name);
    p["spec"] = json!({"resourceSelectors": [], "placement": {}});
    Fixture(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_make_manifests() {
        let d = deployment("shop", "web").replicas(3).image("nginx:1.27").label("tier", "front").build();
        assert_eq!(d["metadata"], json!({"name": "web", "namespace": "shop", "labels": {"tier": "front"}}));
        assert_eq!(d["spec"]["template"]["spec"]["containers"][0], json!({"name": "web", "image": "nginx:1.27"}));
        let c = config_map("shop", "cfg", &[("mode", "x")]).build();
        assert_eq!(c["data"], json!({"mode": "x"}));
        let p = propagation_policy("shop", "p").select("v1", "ConfigMap", "cfg").clusters(&["member1"]).build();
        assert_eq!(p["spec"]["resourceSelectors"][0]["kind"], "ConfigMap");
        assert_eq!(p["spec"]["placement"]["clusterAffinity"]["clusterNames"], json!(["member1"]));
        assert_eq!(namespace("shop").build()["metadata"]["name"], "shop");
    }
}
