//! Content negotiation: which representation a client asked for in `Accept`, and what a request
//! body is by its `Content-Type`.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

/// The representation of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    /// `meta.k8s.io` Table (`v1` or `v1beta1`), for `kubectl get`.
    Table(&'static str),
    /// `PartialObjectMetadata(List)` in `meta.k8s.io/v1`.
    PartialMetadata,
}

/// Aggregated discovery versions a client may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscoveryFormat {
    Legacy,
    AggregatedV2,
    AggregatedV2Beta1,
}

struct MediaType<'a> {
    essence: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

fn parse_accept(accept: &str) -> Vec<MediaType<'_>> {
    accept
        .split(',')
        .map(|part| {
            let mut it = part.split(';').map(str::trim);
            let essence = it.next().unwrap_or("");
            let params = it.filter_map(|p| p.split_once('=').map(|(k, v)| (k.trim(), v.trim()))).collect();
            MediaType { essence, params }
        })
        .filter(|m| !m.essence.is_empty())
        .collect()
}

impl MediaType<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
    fn is_json(&self) -> bool {
        matches!(self.essence, "application/json" | "*/*" | "application/*")
    }
}

/// What representation of an object or list the `Accept` header asks for.
pub fn output(accept: Option<&str>) -> ApiResult<Output> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Ok(Output::Json) };
    let types = parse_accept(accept);
    let mut json_ok = false;
    for m in &types {
        if m.essence == "application/json" && m.param("g") == Some("meta.k8s.io") {
            match (m.param("as"), m.param("v")) {
                (Some("Table"), Some("v1")) => return Ok(Output::Table("v1")),
                (Some("Table"), Some("v1beta1")) => return Ok(Output::Table("v1beta1")),
                (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("v1")) => return Ok(Output::PartialMetadata),
                _ => continue,
            }
        }
        if m.is_json() && m.param("as").is_none() {
            json_ok = true;
        }
        if m.essence == "application/yaml" {
            json_ok = true;
        }
    }
    if json_ok { Ok(Output::Json) } else { Err(ApiError::not_acceptable("application/json, application/yaml, application/vnd.kubernetes.protobuf")) }
}

/// Which discovery document `/api` and `/apis` should return.
pub fn discovery_format(accept: Option<&str>) -> DiscoveryFormat {
    let Some(accept) = accept else { return DiscoveryFormat::Legacy };
    for m in parse_accept(accept) {
        if m.essence == "application/json" && m.param("g") == Some("apidiscovery.k8s.io") && m.param("as") == Some("APIGroupDiscoveryList") {
            match m.param("v") {
                Some("v2") => return DiscoveryFormat::AggregatedV2,
                Some("v2beta1") => return DiscoveryFormat::AggregatedV2Beta1,
                _ => {}
            }
        }
        if m.is_json() && m.param("g").is_none() {
            return DiscoveryFormat::Legacy;
        }
    }
    DiscoveryFormat::Legacy
}

/// The kind of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyType {
    Json,
    Yaml,
    Protobuf,
    JsonPatch,
    MergePatch,
    StrategicMergePatch,
    ApplyYaml,
    ApplyCbor,
    Unknown,
}

/// Classify `Content-Type` (a missing one means JSON, as the real server assumes).
pub fn body_type(content_type: Option<&str>) -> BodyType {
    let essence = content_type.map(|c| c.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    match essence.as_deref() {
        None | Some("") | Some("application/json") => BodyType::Json,
        Some("application/yaml" | "application/x-yaml" | "text/yaml") => BodyType::Yaml,
        Some("application/vnd.kubernetes.protobuf") => BodyType::Protobuf,
        Some("application/json-patch+json") => BodyType::JsonPatch,
        Some("application/merge-patch+json") => BodyType::MergePatch,
        Some("application/strategic-merge-patch+json") => BodyType::StrategicMergePatch,
        Some("application/apply-patch+yaml") => BodyType::ApplyYaml,
        Some("application/apply-patch+cbor") => BodyType::ApplyCbor,
        Some(_) => BodyType::Unknown,
    }
}

/// A YAML (or JSON) body as JSON.
pub(crate) fn parse_yaml(bytes: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(bytes).map_err(|_| ApiError::bad_request("the request body is not UTF-8"))?;
    serde_saphyr::from_str::<Value>(text).map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML or JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_of_real_clients() {
        let kubectl_get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(output(Some(kubectl_get)).unwrap(), Output::Table("v1"));
        assert_eq!(output(None).unwrap(), Output::Json);
        assert_eq!(output(Some("application/json, */*")).unwrap(), Output::Json);
        assert_eq!(output(Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")).unwrap(), Output::PartialMetadata);
        assert_eq!(output(Some("application/vnd.kubernetes.protobuf,application/json")).unwrap(), Output::Json);
        assert_eq!(output(Some("application/vnd.kubernetes.protobuf")).unwrap_err().code, 406);
        let agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(discovery_format(Some(agg)), DiscoveryFormat::AggregatedV2);
        assert_eq!(
            discovery_format(Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")),
            DiscoveryFormat::AggregatedV2Beta1
        );
        assert_eq!(discovery_format(Some("application/json, */*")), DiscoveryFormat::Legacy);
        assert_eq!(body_type(Some("application/strategic-merge-patch+json; charset=utf-8")), BodyType::StrategicMergePatch);
        assert_eq!(body_type(None), BodyType::Json);
    }
}
