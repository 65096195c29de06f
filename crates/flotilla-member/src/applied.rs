//! What Works applied to a member, read back from the member itself: every object of any kind
//! the member lists that carries Karmada's `work.karmada.io/permanent-id` label and names a Work
//! of a given execution space (`work.karmada.io/namespace`). A pull agent back from an outage
//! compares these with the Works and tombstones the control plane holds (ADR 0031).

use flotilla_api::federation::karmada::work::{WORK_NAME_ANNOTATION, WORK_NAMESPACE_ANNOTATION, WORK_PERMANENT_ID_LABEL};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{Discovery, verbs};

use crate::MemberError;

/// One member object a Work applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub api_version: String,
    pub kind: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    /// The Work it came from (its name in the execution space) and that Work's permanent id.
    pub work: String,
    pub work_permanent_id: String,
}

impl Applied {
    /// `apps/v1 Deployment ns/name`, for messages.
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {} {ns}/{}", self.api_version, self.kind, self.name),
            None => format!("{} {} {}", self.api_version, self.kind, self.name),
        }
    }
}

/// Every object in the member that a Work of `execution_space` applied (one list per kind the
/// member serves, filtered by the member on Karmada's label). A kind the member refuses to list
/// is skipped: Flotilla could not have applied it.
pub async fn applied_objects(cluster: &str, client: &kube::Client, execution_space: &str) -> Result<Vec<Applied>, MemberError> {
    let discovery =
        Discovery::new(client.clone()).run().await.map_err(|source| MemberError::Api { cluster: cluster.to_string(), step: "discovery".into(), source })?;
    let mut out = Vec::new();
    let params = ListParams::default().labels(WORK_PERMANENT_ID_LABEL);
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) || ar.plural.contains('/') {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let list = match api.list(&params).await {
                Ok(l) => l,
                Err(kube::Error::Api(s)) if (403..=405).contains(&s.code) => continue,
                Err(source) => return Err(MemberError::Api { cluster: cluster.to_string(), step: format!("listing {}", ar.plural), source }),
            };
            for o in list.items {
                let annotations = o.metadata.annotations.clone().unwrap_or_default();
                if annotations.get(WORK_NAMESPACE_ANNOTATION).map(String::as_str) != Some(execution_space) {
                    continue;
                }
                let (Some(work), Some(id)) = (annotations.get(WORK_NAME_ANNOTATION), o.metadata.labels.as_ref().and_then(|l| l.get(WORK_PERMANENT_ID_LABEL)))
                else {
                    continue;
                };
                out.push(Applied {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                    plural: ar.plural.clone(),
                    namespace: o.metadata.namespace.clone(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                    uid: o.metadata.uid.clone().unwrap_or_default(),
                    work: work.clone(),
                    work_permanent_id: id.clone(),
                });
            }
        }
    }
    Ok(out)
}
