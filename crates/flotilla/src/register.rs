//! `flotilla register HOST:PORT --token T --discovery-token-ca-cert-hash sha256:…
//! --cluster-name NAME`: a pull agent's credential from a bootstrap token, as `karmadactl
//! register` and `kubeadm join` obtain theirs.
//!
//! 1. Token discovery: `kube-public/cluster-info` read without a credential (and without
//!    trusting the server yet); its kubeconfig must carry the token's signature, and its CA must
//!    match a pin (ADR 0027). It is read again over TLS verified with that CA.
//! 2. TLS bootstrap: a new key and a CertificateSigningRequest for
//!    `system:karmada:agent:<cluster>` in `system:karmada:agents` (signer
//!    `kubernetes.io/kube-apiserver-client`), created with the token; the control plane's agent
//!    CSR approver approves it (and creates the agent's RBAC), its signer issues it (ADR 0028).
//! 3. The agent's kubeconfig (server and CA from cluster-info, the certificate and key), written
//!    with mode 0600. The key never leaves this machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine;
use flotilla_api::bootstrap_token::{self as bt, Token};
use flotilla_api::certificates as csr;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

#[derive(clap::Args, Debug)]
pub struct RegisterArgs {
    /// The control plane's address, HOST:PORT (what `flotilla token create
    /// --print-register-command` prints).
    pub address: String,
    /// The bootstrap token (`flotilla token create --cluster-name NAME`).
    #[arg(long, env = "FLOTILLA_BOOTSTRAP_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The control plane CA's public key pin, `sha256:<hex>` (repeatable).
    #[arg(long = "discovery-token-ca-cert-hash", value_name = "sha256:HEX")]
    pub ca_cert_hashes: Vec<String>,
    /// Trust whatever CA cluster-info names (only the token's signature is checked).
    #[arg(long = "discovery-token-unsafe-skip-ca-verification")]
    pub skip_ca_verification: bool,
    /// The member cluster's name (the one the token was made for).
    #[arg(long, value_name = "NAME")]
    pub cluster_name: String,
    /// How long the agent's certificate is asked to last (the signer caps it at one year).
    #[arg(long, default_value_t = 31_536_000)]
    pub cert_expiration_seconds: u32,
    /// Where to write the agent's kubeconfig (default: ./<cluster>-agent.kubeconfig).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// How long to wait for the certificate.
    #[arg(long, default_value = "5m", value_parser = parse_ttl)]
    pub wait: Duration,
    /// How long to wait for cluster-info to carry the token's signature.
    #[arg(long, default_value = "30s", value_parser = parse_ttl)]
    pub discovery_timeout: Duration,
    /// Print only the result, no progress.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The label naming the cluster a bootstrap token was made for.
pub const CLUSTER_NAME_LABEL: &str = "flotilla.io/cluster-name";
/// The extra group prefix binding a token to one cluster name.
pub use flotilla_api::bootstrap_token::CLUSTER_GROUP_PREFIX;

/// `30s`, `30m`, `24h`, `7d`, or `0` (never expires).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| format!("{s:?}: give a unit (s, m, h or d)"))?);
    let n: u64 = n.parse().map_err(|_| format!("{s:?}: expected a number and a unit, e.g. 24h"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (s, m, h or d)")),
    };
    Ok(Duration::from_secs(secs))
}

/// What `create` writes for `token`.
pub fn token_secret(
    token: &Token,
    cluster: Option<&str>,
    ttl: Duration,
    description: Option<String>,
    now: jiff::Timestamp,
) -> anyhow::Result<serde_json::Value> {
    let mut extra_groups = vec![bt::KARMADA_GROUP.to_string()];
    let mut labels = BTreeMap::new();
    if let Some(c) = cluster {
        let errors = flotilla_api::admission::karmada::cluster_name_errors(c);
        if !errors.is_empty() {
            bail!("--cluster-name {c:?}: a cluster name is a DNS label of at most 48 characters ([a-z0-9-]): {}", errors.join("; "));
        }
        extra_groups.push(format!("{CLUSTER_GROUP_PREFIX}{c}"));
        labels.insert(CLUSTER_NAME_LABEL.to_string(), c.to_string());
    }
    let expiration =
        if ttl.is_zero() { None } else { Some(now.checked_add(jiff::SignedDuration::try_from(ttl).context("--ttl")?).context("--ttl is too long")?) };
    let options = bt::Options { description, expiration, authentication: true, signing: true, extra_groups, labels };
    Ok(bt::secret(token, &options))
}

fn kubeconfig_yaml(server: &str, ca_pem: Option<&str>, user: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cluster = match ca_pem {
        Some(ca) => format!("    server: {server}\n    certificate-authority-data: {}\n", b64(ca)),
        None => format!("    server: {server}\n    insecure-skip-tls-verify: true\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n{cluster}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\nusers:\n- name: u\n  user: {user}\n"
    )
}

async fn client(yaml: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(yaml).context("a kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.context("a client configuration")?;
    kube::Client::try_from(config).context("a client")
}

async fn cluster_info(server: &str, ca_pem: Option<&str>) -> anyhow::Result<BTreeMap<String, String>> {
    let c = client(&kubeconfig_yaml(server, ca_pem, "{}")).await?;
    let cm = Api::<ConfigMap>::namespaced(c, bt::CLUSTER_INFO_NAMESPACE)
        .get(bt::CLUSTER_INFO)
        .await
        .with_context(|| format!("read {}/{} from {server}", bt::CLUSTER_INFO_NAMESPACE, bt::CLUSTER_INFO))?;
    Ok(cm.data.unwrap_or_default())
}

/// A new key and an issued certificate for `cluster`'s agent: the request created through `api`
/// (as the caller: a bootstrap token registering, or the agent renewing) under `name_prefix`,
/// then awaited until it is issued, denied or failed, or `wait` has passed.
pub async fn request_agent_certificate(
    api: &Api<CertificateSigningRequest>,
    cluster: &str,
    name_prefix: &str,
    expiration_seconds: u32,
    wait: Duration,
    quiet: bool,
) -> anyhow::Result<(rcgen::KeyPair, String)> {
    let (key, pem) = agent_request(cluster)?;
    let request: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": name_prefix},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(&pem),
            "signerName": csr::KUBE_APISERVER_CLIENT,
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": expiration_seconds,
        },
    }))
    .context("the CertificateSigningRequest")?;
    let created = api.create(&PostParams::default(), &request).await.context("create the agent's CertificateSigningRequest")?;
    let name = created.metadata.name.clone().unwrap_or_default();
    if !quiet {
        eprintln!("CertificateSigningRequest {name} created; waiting for approval and signing (up to {wait:?})");
    }
    let deadline = Instant::now() + wait;
    let mut last_note = Instant::now();
    loop {
        let now = api.get(&name).await.with_context(|| format!("read CertificateSigningRequest {name}"))?;
        let value = serde_json::to_value(&now).unwrap_or_default();
        if let Some(cert) = csr::certificate(&value) {
            return Ok((key, String::from_utf8(cert).context("the issued certificate is not PEM")?));
        }
        for (kind, what) in [(csr::DENIED, "denied"), (csr::FAILED, "not signed")] {
            if let Some(c) = value.pointer("/status/conditions").and_then(|c| c.as_array()).and_then(|a| a.iter().find(|c| c["type"] == kind)) {
                bail!("CertificateSigningRequest {name} was {what}: {} ({})", c["message"].as_str().unwrap_or(""), c["reason"].as_str().unwrap_or(""));
            }
        }
        if Instant::now() > deadline {
            bail!("CertificateSigningRequest {name} was not issued within {wait:?}: is the agent CSR approver running (--controllers)?");
        }
        if last_note.elapsed() > Duration::from_secs(15) {
            eprintln!("still waiting for CertificateSigningRequest {name}");
            last_note = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A new key and its PEM request for the cluster's agent.
fn agent_request(cluster: &str) -> anyhow::Result<(rcgen::KeyPair, String)> {
    let key = rcgen::KeyPair::generate().context("generate the agent's key")?;
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name.push(rcgen::DnType::CommonName, csr::agent_user(cluster));
    p.distinguished_name.push(rcgen::DnType::OrganizationName, csr::AGENT_GROUP);
    let pem = p.serialize_request(&key).and_then(|r| r.pem()).context("the certificate request")?;
    Ok((key, pem))
}

/// Register as `flotilla register` does and return where the agent's kubeconfig was written;
/// progress goes to stderr unless `args.quiet`.
pub async fn register(args: &RegisterArgs) -> anyhow::Result<PathBuf> {
    let note = |line: String| {
        if !args.quiet {
            eprintln!("{line}");
        }
    };
    let token = Token::parse(args.token.trim()).context("--token: expected <6 characters>.<16 characters> of [a-z0-9]")?;
    let errors = flotilla_api::admission::karmada::cluster_name_errors(&args.cluster_name);
    if !errors.is_empty() {
        bail!("--cluster-name {:?}: {}", args.cluster_name, errors.join("; "));
    }
    let address = args.address.trim_start_matches("https://").trim_end_matches('/');
    let discovery = format!("https://{address}");

    // 1. Token discovery.
    note(format!("register: reading cluster-info from {discovery} (not yet trusted)"));
    // A token just made is signed into cluster-info within moments: wait for its signature, as
    // kubeadm's discovery does.
    let deadline = Instant::now() + args.discovery_timeout;
    let mut noted = false;
    let data = loop {
        let data = cluster_info(&discovery, None).await?;
        if data.contains_key(&format!("{}{}", bt::JWS_PREFIX, token.id)) || Instant::now() > deadline {
            break data;
        }
        if !noted {
            note(format!("register: cluster-info is not signed with token {} yet; waiting (up to {:?})", token.id, args.discovery_timeout));
            noted = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let endpoint = bt::verify_cluster_info(&data, &token, &args.ca_cert_hashes, args.skip_ca_verification).map_err(anyhow::Error::msg)?;
    let again = cluster_info(&discovery, Some(&endpoint.ca_pem)).await.context("read cluster-info again over TLS verified with the pinned CA")?;
    if again.get(bt::KUBECONFIG_KEY) != data.get(bt::KUBECONFIG_KEY) {
        bail!("cluster-info changed between the untrusted and the trusted read; try again");
    }
    note(format!("register: cluster-info signed by token {} and its CA pinned; control plane {}", token.id, endpoint.server));

    // 2. TLS bootstrap.
    let bootstrap = client(&kubeconfig_yaml(&endpoint.server, Some(&endpoint.ca_pem), &format!("{{token: {}}}", token.expose()))).await?;
    let api: Api<CertificateSigningRequest> = Api::all(bootstrap);
    let (key, cert) = request_agent_certificate(&api, &args.cluster_name, &bt::csr_name_prefix(&token.id), args.cert_expiration_seconds, args.wait, args.quiet)
        .await
        .map_err(|e| e.context(format!("registering cluster {:?} (the token must have been made for it)", args.cluster_name)))?;

    // 3. The agent's kubeconfig.
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("{}-agent.kubeconfig", args.cluster_name)));
    let issued = flotilla_apiserver::pki::Issued { cert_pem: cert, key_pem: key.serialize_pem() };
    let text = flotilla_apiserver::pki::kubeconfig("flotilla", &endpoint.server, &endpoint.ca_pem, &issued);
    flotilla_apiserver::pki::write_kubeconfig(&out, &text).with_context(|| format!("write {}", out.display()))?;
    Ok(out)
}

/// `flotilla register`: register, then say what to run next.
pub async fn run(args: RegisterArgs) -> anyhow::Result<()> {
    let out = register(&args).await?;
    println!("registered cluster {}: agent identity {} ({})", args.cluster_name, csr::agent_user(&args.cluster_name), csr::AGENT_GROUP);
    println!("agent kubeconfig: {}", out.display());
    println!("run the agent beside the member (its kubeconfig stays here):");
    println!("  flotilla agent --cluster-name {} --control-plane-kubeconfig {} --kubeconfig <member kubeconfig>", args.cluster_name, out.display());
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct UnregisterArgs {
    /// The pull cluster to remove.
    pub cluster_name: String,
    /// A control-plane kubeconfig: the agent's own (it may delete its Cluster) or an admin's.
    #[arg(long, value_name = "FILE")]
    pub control_plane_kubeconfig: PathBuf,
    /// How long to wait for the Cluster to be gone (its agent removes what its Works made in the
    /// member first, while it runs).
    #[arg(long, default_value = "2m", value_parser = parse_ttl)]
    pub wait: Duration,
}

/// `flotilla unregister NAME`: delete a pull cluster's Cluster and wait until it is gone. The
/// cluster controller then deletes the agent's control-plane RBAC, so its certificate
/// authorizes nothing; stop the agent afterwards.
pub async fn unregister(args: UnregisterArgs) -> anyhow::Result<()> {
    use flotilla_api::federation::karmada::cluster::{Cluster, ClusterSyncMode};
    let config = crate::agent::load(&args.control_plane_kubeconfig).await?;
    let api: Api<Cluster> = Api::all(kube::Client::try_from(config).context("a client")?);
    let name = &args.cluster_name;
    let Some(cluster) = api.get_opt(name).await.with_context(|| format!("read Cluster {name}"))? else {
        println!("cluster {name} is not registered");
        return Ok(());
    };
    if cluster.spec.sync_mode != ClusterSyncMode::Pull {
        bail!("cluster {name} is joined in Push mode: use flotilla unjoin {name}");
    }
    api.delete(name, &kube::api::DeleteParams::background()).await.with_context(|| format!("delete Cluster {name}"))?;
    eprintln!("unregister: Cluster {name} deleted; waiting for its Works to be removed (up to {:?})", args.wait);
    let deadline = Instant::now() + args.wait;
    let mut last_note = Instant::now();
    loop {
        match api.get_opt(name).await {
            Ok(None) => break,
            // The agent's own credential stops working as soon as its RBAC goes with the Cluster.
            Err(kube::Error::Api(s)) if s.code == 403 => break,
            Ok(Some(_)) | Err(_) if Instant::now() > deadline => {
                bail!(
                    "Cluster {name} is still being deleted after {:?}: is its agent running? (an unready pull cluster's Works are released without it)",
                    args.wait
                )
            }
            _ => {}
        }
        if last_note.elapsed() > Duration::from_secs(15) {
            eprintln!("unregister: still waiting for Cluster {name}");
            last_note = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("cluster {name} unregistered: its agent's credential authorizes nothing now; stop the agent");
    Ok(())
}
