//! kube-controller-manager's `bootstrapsigner` and `tokencleaner` (both on in Karmada's
//! controller manager, as pull registration needs them): the signer keeps one signature per
//! signing bootstrap token in `kube-public/cluster-info` (`jws-kubeconfig-<id>` over its
//! `kubeconfig`; a token that expires, stops signing or goes loses its signature), and the
//! cleaner deletes bootstrap token Secrets once they expire. The token rules are
//! [`flotilla_api::bootstrap_token`]'s. Each passes over all tokens at once (one queue key) on
//! any change, and again when the next token expires.

use std::time::Duration;

use flotilla_api::bootstrap_token::{self as bt, TokenSecret};
use flotilla_runtime::{Next, Runtime};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub const SIGNER: &str = "bootstrapsigner";
pub const CLEANER: &str = "tokencleaner";

fn is_token_secret(s: &Secret) -> bool {
    s.metadata.namespace.as_deref() == Some(bt::NAMESPACE) && s.type_.as_deref() == Some(bt::SECRET_TYPE)
}

/// The bootstrap tokens in the cache that parse (a malformed one is skipped, as Kubernetes does).
fn tokens(secrets: &Store<Secret>) -> Vec<(Secret, TokenSecret)> {
    secrets
        .state()
        .into_iter()
        .filter(|s| is_token_secret(s))
        .filter_map(|s| {
            let parsed = serde_json::to_value(&*s).ok().map(|v| bt::parse_secret(&v));
            match parsed {
                Some(Ok(t)) => Some(((*s).clone(), t)),
                Some(Err(e)) => {
                    tracing::debug!(secret = %s.name_any(), error = %e, "not a usable bootstrap token");
                    None
                }
                None => None,
            }
        })
        .collect()
}

/// When to look again: just after the next of `tokens` to expire.
fn next_expiry<'a>(tokens: impl Iterator<Item = &'a TokenSecret>, now: jiff::Timestamp) -> Next {
    let next = tokens.filter_map(|t| t.expiration).filter(|e| *e > now).min();
    match next.and_then(|e| Duration::try_from(e.duration_since(now)).ok()) {
        Some(d) => Next::After(d + Duration::from_secs(1)),
        None => Next::Done,
    }
}

async fn sign(client: &Client, secrets: &Store<Secret>, configmaps: &Store<ConfigMap>) -> Result<Next, kube::Error> {
    let Some(info) = configmaps.get(&ObjectRef::new(bt::CLUSTER_INFO).within(bt::CLUSTER_INFO_NAMESPACE)) else { return Ok(Next::Done) };
    let now = jiff::Timestamp::now();
    let tokens: Vec<TokenSecret> = tokens(secrets).into_iter().map(|(_, t)| t).collect();
    let current = info.data.clone().unwrap_or_default();
    if let Some(want) = bt::signed_cluster_info(&current, &tokens, now) {
        // A merge patch: every signature key not wanted any more is removed.
        let mut data: serde_json::Map<String, Value> = want.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        for stale in current.keys().filter(|k| !want.contains_key(*k)) {
            data.insert(stale.clone(), Value::Null);
        }
        let patch = json!({"metadata": {"resourceVersion": info.resource_version()}, "data": data});
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), bt::CLUSTER_INFO_NAMESPACE);
        match api.patch(bt::CLUSTER_INFO, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(controller = SIGNER, signatures = want.keys().filter(|k| k.starts_with(bt::JWS_PREFIX)).count(), "cluster-info signed"),
            // A newer ConfigMap is on its way through the watch.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(next_expiry(tokens.iter().filter(|t| t.signing), now))
}

async fn clean(client: &Client, secrets: &Store<Secret>) -> Result<Next, kube::Error> {
    let now = jiff::Timestamp::now();
    let all = tokens(secrets);
    let api: Api<Secret> = Api::namespaced(client.clone(), bt::NAMESPACE);
    for (secret, token) in all.iter().filter(|(_, t)| t.is_expired(now) && !t.deleting) {
        let dp = DeleteParams { preconditions: Some(Preconditions { uid: secret.metadata.uid.clone(), resource_version: None }), ..Default::default() };
        match api.delete(&secret.name_any(), &dp).await {
            Ok(_) => tracing::info!(controller = CLEANER, token_id = %token.id, "expired bootstrap token deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(next_expiry(all.iter().map(|(_, t)| t), now))
}

/// Run the bootstrap signer until the runtime shuts down.
pub async fn run_signer(client: Client, rt: Runtime) {
    let secrets = rt.informers.store::<Secret>();
    let configmaps = rt.informers.store::<ConfigMap>();
    rt.controller::<()>(SIGNER)
        .watches(|s: &Secret, _| is_token_secret(s).then_some(()))
        .watches(|c: &ConfigMap, _| (c.metadata.namespace.as_deref() == Some(bt::CLUSTER_INFO_NAMESPACE) && c.name_any() == bt::CLUSTER_INFO).then_some(()))
        .run(move |()| {
            let (client, secrets, configmaps) = (client.clone(), secrets.clone(), configmaps.clone());
            async move { sign(&client, &secrets, &configmaps).await }
        })
        .await;
}

/// Run the token cleaner until the runtime shuts down.
pub async fn run_cleaner(client: Client, rt: Runtime) {
    let secrets = rt.informers.store::<Secret>();
    rt.controller::<()>(CLEANER)
        .watches(|s: &Secret, _| is_token_secret(s).then_some(()))
        .run(move |()| {
            let (client, secrets) = (client.clone(), secrets.clone());
            async move { clean(&client, &secrets).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_look_follows_the_next_expiry() {
        let now: jiff::Timestamp = "2029-01-01T00:00:00Z".parse().unwrap();
        let t = |exp: Option<&str>| {
            let token = bt::Token::parse("abcdef.0123456789abcdef").unwrap();
            let options = bt::Options { expiration: exp.map(|e| e.parse().unwrap()), signing: true, ..Default::default() };
            bt::parse_secret(&bt::secret(&token, &options)).unwrap()
        };
        let tokens = [t(None), t(Some("2029-01-01T00:10:00Z")), t(Some("2028-01-01T00:00:00Z")), t(Some("2029-01-01T00:01:00Z"))];
        assert_eq!(next_expiry(tokens.iter(), now), Next::After(Duration::from_secs(61)));
        assert_eq!(next_expiry(tokens[..1].iter(), now), Next::Done, "nothing expires");
    }
}
