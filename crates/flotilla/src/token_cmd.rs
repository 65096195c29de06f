//! `flotilla token create|list|delete`: bootstrap tokens for pull registration, stored as
//! kubeadm and `karmadactl token` store them (`kube-system/bootstrap-token-<id>`, see
//! [`flotilla_api::bootstrap_token`]). A token made for one cluster (`--cluster-name`) carries
//! that name as its extra group `system:bootstrappers:flotilla:cluster:<name>` (and a label, for
//! listing), so what it may register is decided from the caller's identity alone.

use std::time::Duration;

use anyhow::{Context as _, bail};
use flotilla_api::bootstrap_token::{self as bt, Token};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use crate::join_cmd::ControlPlane;

pub use flotilla::register::{CLUSTER_NAME_LABEL, parse_ttl, token_secret};

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Create a bootstrap token (printed once; store it as a secret).
    Create(CreateArgs),
    /// List the bootstrap tokens.
    List {
        #[command(flatten)]
        control_plane: ControlPlane,
    },
    /// Delete a bootstrap token by its id or the whole token.
    Delete {
        /// The token id (6 characters) or the token.
        token: String,
        #[command(flatten)]
        control_plane: ControlPlane,
    },
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The only cluster this token may register (a DNS label).
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// How long the token is valid (`30m`, `24h`, `7d`; `0` never expires).
    #[arg(long, default_value = "24h", value_parser = parse_ttl)]
    ttl: Duration,
    /// A note stored with the token.
    #[arg(long)]
    description: Option<String>,
    /// Print the whole `flotilla register` command (address, token, the CA's pin) instead of
    /// the token alone.
    #[arg(long)]
    print_register_command: bool,
    #[command(flatten)]
    control_plane: ControlPlane,
}

pub async fn run(cmd: TokenCommand) -> anyhow::Result<()> {
    match cmd {
        TokenCommand::Create(args) => create(args).await,
        TokenCommand::List { control_plane } => list(control_plane).await,
        TokenCommand::Delete { token, control_plane } => delete(&token, control_plane).await,
    }
}

async fn create(args: CreateArgs) -> anyhow::Result<()> {
    let client = args.control_plane.client().await?;
    let token = Token::from_random(&rand::random());
    let secret = token_secret(&token, args.cluster_name.as_deref(), args.ttl, args.description, jiff::Timestamp::now())?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), bt::NAMESPACE);
    let secret: Secret = serde_json::from_value(secret).context("the token Secret")?;
    secrets.create(&PostParams::default(), &secret).await.context("create the bootstrap token Secret")?;
    if !args.print_register_command {
        println!("{}", token.expose());
        return Ok(());
    }
    // What register will read: cluster-info's server and CA.
    let infos: Api<ConfigMap> = Api::namespaced(client, bt::CLUSTER_INFO_NAMESPACE);
    let info = infos.get(bt::CLUSTER_INFO).await.context("read kube-public/cluster-info (flotilla up writes it)")?;
    let kubeconfig = info.data.as_ref().and_then(|d| d.get(bt::KUBECONFIG_KEY)).context("kube-public/cluster-info holds no kubeconfig")?;
    let endpoint = bt::cluster_info_endpoint(kubeconfig).map_err(anyhow::Error::msg)?;
    let hash = bt::ca_cert_hash(&endpoint.ca_pem).map_err(anyhow::Error::msg)?;
    let address = endpoint.server.trim_start_matches("https://").trim_end_matches('/');
    let cluster = args.cluster_name.as_deref().unwrap_or("<cluster-name>");
    println!("flotilla register {address} --token {} --discovery-token-ca-cert-hash {hash} --cluster-name {cluster}", token.expose());
    Ok(())
}

async fn list(control_plane: ControlPlane) -> anyhow::Result<()> {
    let client = control_plane.client().await?;
    let secrets: Api<Secret> = Api::namespaced(client, bt::NAMESPACE);
    let list = secrets.list(&ListParams::default().fields(&format!("type={}", bt::SECRET_TYPE))).await.context("list the bootstrap tokens")?;
    let now = jiff::Timestamp::now();
    println!("{:<24} {:<8} {:<21} {:<28} {:<16} DESCRIPTION", "TOKEN ID", "TTL", "EXPIRES", "USAGES", "CLUSTER");
    for s in &list.items {
        let value = serde_json::to_value(s).unwrap_or_default();
        let Ok(t) = bt::parse_secret(&value) else { continue };
        let (ttl, expires) = match t.expiration {
            Some(e) if e <= now => ("expired".to_string(), e.to_string()),
            Some(e) => (format!("{}h", e.duration_since(now).as_secs() / 3600), e.to_string()),
            None => ("<forever>".to_string(), "<never>".to_string()),
        };
        let usages: Vec<&str> = [("authentication", t.authentication), ("signing", t.signing)].iter().filter(|(_, on)| *on).map(|(u, _)| *u).collect();
        let cluster = s.metadata.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)).map(String::as_str).unwrap_or("<any>");
        println!("{:<24} {:<8} {:<21} {:<28} {:<16} {}", t.id, ttl, expires, usages.join(","), cluster, t.description.as_deref().unwrap_or(""));
    }
    Ok(())
}

async fn delete(token: &str, control_plane: ControlPlane) -> anyhow::Result<()> {
    let id = match Token::parse(token) {
        Some(t) => t.id,
        None if token.len() == 6 && token.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) => token.to_string(),
        None => bail!("{token:?} is neither a token id (6 characters of [a-z0-9]) nor a token"),
    };
    let client = control_plane.client().await?;
    let secrets: Api<Secret> = Api::namespaced(client, bt::NAMESPACE);
    let name = format!("{}{id}", bt::SECRET_PREFIX);
    match secrets.delete(&name, &DeleteParams::default()).await {
        Ok(_) => println!("bootstrap token {id} deleted"),
        Err(kube::Error::Api(s)) if s.code == 404 => bail!("no bootstrap token {id}"),
        Err(e) => return Err(e).context("delete the bootstrap token"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_read_as_kubeadm_writes_them() {
        assert_eq!(parse_ttl("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_ttl("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_ttl("0"), Ok(Duration::ZERO));
        assert!(parse_ttl("24").unwrap_err().contains("give a unit"));
        assert!(parse_ttl("5y").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn a_token_for_one_cluster_names_it_in_a_group_and_a_label() {
        let t = Token::parse("abcdef.0123456789abcdef").unwrap();
        let now: jiff::Timestamp = "2029-01-01T00:00:00Z".parse().unwrap();
        let s = token_secret(&t, Some("edge-1"), Duration::from_secs(3600), None, now).unwrap();
        let parsed = bt::parse_secret(&s).unwrap();
        assert_eq!(parsed.expiration, Some("2029-01-01T01:00:00Z".parse().unwrap()));
        let (user, groups) = parsed.authenticate(&t, now).unwrap();
        assert_eq!(user, "system:bootstrap:abcdef");
        assert_eq!(groups, [bt::DEFAULT_GROUP, bt::KARMADA_GROUP, "system:bootstrappers:flotilla:cluster:edge-1"]);
        assert_eq!(s["metadata"]["labels"][CLUSTER_NAME_LABEL], "edge-1");
        assert_eq!(bt::parse_secret(&token_secret(&t, None, Duration::ZERO, None, now).unwrap()).unwrap().expiration, None, "ttl 0 never expires");
        assert!(token_secret(&t, Some("Edge_1"), Duration::ZERO, None, now).unwrap_err().to_string().contains("DNS label"));
    }
}
