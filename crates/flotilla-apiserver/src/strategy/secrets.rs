//! Secrets: a `kubernetes.io/service-account-token` Secret gets its account's token when
//! created, and every write refreshes the token index authentication reads.

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};

use super::Strategy;
use crate::error::{ApiError, ApiResult, Cause};
use crate::meta;
use crate::scope::RequestScope;
use crate::storage;

const SA_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

pub(super) struct Secrets;

#[async_trait]
impl Strategy for Secrets {
    /// The real server's token controller fills the token shortly after; here it happens on
    /// create.
    async fn complete_create(&self, ctx: &RequestScope, obj: &mut Value) -> ApiResult<()> {
        fill_service_account_token(ctx, obj).await
    }

    async fn after_write(&self, ctx: &RequestScope) {
        super::rbac::reload(ctx).await;
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }
}

/// A Secret of type `kubernetes.io/service-account-token` gets a token for its account.
async fn fill_service_account_token(ctx: &RequestScope, obj: &mut Value) -> ApiResult<()> {
    if obj.get("type").and_then(Value::as_str) != Some(SA_TOKEN_TYPE) {
        return Ok(());
    }
    let ns = ctx.namespace().unwrap_or("").to_string();
    let Some(account) = obj.pointer("/metadata/annotations").and_then(|a| a.get(SA_NAME_ANNOTATION)).and_then(Value::as_str).map(String::from) else {
        return Err(ApiError::invalid(
            "",
            "Secret",
            meta::name(obj),
            vec![Cause::new("FieldValueRequired", format!("metadata.annotations[{SA_NAME_ANNOTATION}]"), "Required value")],
        ));
    };
    let key = Bytes::from(format!("/registry/core/serviceaccounts/{ns}/{account}"));
    let Some(kv) = ctx.inner.store.get(&key).await? else {
        // As upstream: the secret stays without a token until its account exists.
        return Ok(());
    };
    let sa = storage::decode(&kv)?;
    let uid = meta::meta_str(&sa, "uid").unwrap_or("").to_string();
    let secret = (meta::name(obj).to_string(), meta::meta_str(obj, "uid").unwrap_or("").to_string());
    let token = crate::rbac::mint_token(ctx.inner.store.as_ref(), &ns, &account, &uid, (&secret.0, &secret.1)).await?;
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let data = obj.as_object_mut().expect("an object").entry("data").or_insert_with(|| json!({}));
    data["token"] = json!(b64(&token));
    data["namespace"] = json!(b64(&ns));
    meta::meta_mut(obj).entry("annotations").or_insert_with(|| json!({}))[SA_UID_ANNOTATION] = json!(uid);
    Ok(())
}
