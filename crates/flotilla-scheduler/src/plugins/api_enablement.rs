//! `APIEnablement`: the cluster must serve the binding's apiVersion and kind
//! (`status.apiEnablements`). A cluster already in `spec.clusters` always passes, so a member
//! whose API list is briefly incomplete never loses what it runs.

use std::sync::Arc;

use flotilla_api::federation::karmada::cluster::{Cluster, serves_kind};
use flotilla_api::federation::kubefed::types::DEFAULT_FEDERATED_GROUP;

use super::{FilterContext, FilterPlugin, Verdict};
use crate::snapshot::cluster_name;

pub const NAME: &str = "APIEnablement";

#[derive(Debug)]
pub struct ApiEnablement;

pub fn new() -> Arc<ApiEnablement> {
    Arc::new(ApiEnablement)
}

impl FilterPlugin for ApiEnablement {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &FilterContext<'_>, cluster: &Cluster) -> Verdict {
        if ctx.binding.targets(cluster_name(cluster)) {
            return Verdict::Pass;
        }
        let resource = &ctx.binding.spec.resource;
        // A KubeFed `Federated<Kind>` is served by the control plane only; its member object is
        // of the target kind, and KubeFed reports a member lacking it as `CreationFailed`
        // rather than filtering the member out.
        if resource.api_version.split_once('/').is_some_and(|(group, _)| group == DEFAULT_FEDERATED_GROUP) {
            return Verdict::Pass;
        }
        if serves_kind(cluster, &resource.api_version, &resource.kind) {
            Verdict::Pass
        } else {
            Verdict::Fail("cluster(s) did not have the API resource".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::{BindingKind, BindingView};
    use flotilla_api::federation::karmada::work::ResourceBindingSpec;

    #[test]
    fn a_kubefed_federated_object_passes_where_a_plain_kind_is_not_served() {
        let cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.karmada.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "m1"}, "spec": {"syncMode": "Push"},
            "status": {"apiEnablements": [{"groupVersion": "apps/v1", "resources": [{"name": "deployments", "kind": "Deployment"}]}]}
        }))
        .unwrap();
        let verdict = |api_version: &str, kind: &str| {
            let spec: ResourceBindingSpec =
                serde_json::from_value(serde_json::json!({"resource": {"apiVersion": api_version, "kind": kind, "name": "web"}})).unwrap();
            let view = BindingView { kind: BindingKind::ResourceBinding, namespace: Some("d"), name: "b", uid: "", spec: &spec, status: None };
            ApiEnablement.filter(&FilterContext { binding: &view, affinity: None, workloads: &[] }, &cluster)
        };
        assert_eq!(verdict("apps/v1", "Deployment"), Verdict::Pass);
        assert!(!verdict("apps/v1", "StatefulSet").is_pass());
        assert!(!verdict("example.com/v1", "FederatedDeployment").is_pass());
        assert_eq!(verdict("types.kubefed.io/v1beta1", "FederatedDeployment"), Verdict::Pass);
    }
}
