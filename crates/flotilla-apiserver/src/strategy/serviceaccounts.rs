//! ServiceAccounts: every write refreshes the accounts authentication knows, and
//! `serviceaccounts/{name}/token` answers a TokenRequest (a connecter, not storage).

use async_trait::async_trait;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use super::Strategy;
use crate::error::{ApiError, ApiResult, Cause, Subject};
use crate::meta;
use crate::response::json_response;
use crate::scope::RequestScope;
use crate::state::ApiState;
use crate::storage;

pub(super) struct ServiceAccounts;

#[async_trait]
impl Strategy for ServiceAccounts {
    async fn after_write(&self, ctx: &RequestScope) {
        super::rbac::reload(ctx).await;
    }
}

/// `POST serviceaccounts/{name}/token`: a signed token for the account, optionally bound to a
/// Pod, Secret or Node (valid only while it lives), as kube-apiserver's TokenRequest.
pub(crate) async fn token_request(inner: &ApiState, ns: &str, account: &str, body: &Value) -> ApiResult<Response> {
    use crate::service_account_jwt::{Bound, ISSUER, Subject as TokenSubject, claims};
    let seconds = body.pointer("/spec/expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
    let too = if seconds < 600 {
        Some("may not specify a duration less than 10 minutes")
    } else if seconds > 1 << 32 {
        Some("may not specify a duration larger than 2^32 seconds")
    } else {
        None
    };
    if let Some(why) = too {
        let cause = Cause::new("FieldValueInvalid", "spec.expirationSeconds", format!("Invalid value: {seconds}: {why}"));
        return Err(ApiError::invalid("authentication.k8s.io", "TokenRequest", "", vec![cause]));
    }
    let live = |key: String| async move { inner.store.get(&Bytes::from(key)).await?.map(|kv| storage::decode(&kv)).transpose() };
    let Some(sa) = live(format!("/registry/core/serviceaccounts/{ns}/{account}")).await? else {
        return Err(ApiError::not_found(&Subject { group: "", resource: "serviceaccounts", name: account }));
    };
    let uid_of = |o: &Value| meta::meta_str(o, "uid").unwrap_or("").to_string();
    let mut subject = TokenSubject { namespace: ns.to_string(), account: account.to_string(), account_uid: uid_of(&sa), bound: Vec::new() };
    let bound_ref = body.pointer("/spec/boundObjectRef").filter(|r| !r.is_null());
    if let Some(r) = bound_ref {
        let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
        let (kind, name) = (field("kind"), field("name"));
        let (plural, claim) = match kind {
            "Pod" => ("pods", "pod"),
            "Secret" => ("secrets", "secret"),
            "Node" => ("nodes", "node"),
            other => return Err(ApiError::bad_request(format!("cannot bind token for object of type {other}"))),
        };
        let key = if claim == "node" { format!("/registry/core/nodes/{name}") } else { format!("/registry/core/{plural}/{ns}/{name}") };
        let Some(obj) = live(key).await? else {
            return Err(ApiError::not_found(&Subject { group: "", resource: plural, name }));
        };
        let uid = uid_of(&obj);
        let want = field("uid");
        if !want.is_empty() && want != uid {
            return Err(ApiError::conflict_with(
                &Subject { group: "", resource: kind, name },
                format!(
                    "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        subject.bound.push(Bound { kind: claim, name: name.to_string(), uid });
        // A pod's token also names the node it runs on.
        if let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
            && let Some(n) = live(format!("/registry/core/nodes/{node}")).await?
        {
            subject.bound.push(Bound { kind: "node", name: node.to_string(), uid: uid_of(&n) });
        }
    }
    let audiences: Vec<String> = body
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_string()]);
    let now = jiff::Timestamp::now();
    let token = inner.service_account_key().await?.sign(&claims(&subject, &audiences, now.as_second(), seconds));
    let expires = now.checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap_or(now);
    let time = |t: jiff::Timestamp| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let out = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": account, "namespace": ns, "uid": subject.account_uid, "creationTimestamp": time(now)},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": bound_ref.cloned()},
        "status": {"token": token, "expirationTimestamp": time(expires)},
    });
    Ok(json_response(StatusCode::CREATED, &out, "application/json", &[]))
}
