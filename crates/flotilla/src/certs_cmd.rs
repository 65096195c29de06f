//! `flotilla certs …`: certificate maintenance.
//!
//! Lifetimes: the CA lasts 10 years; the serving and admin client certificates 1 year.
//! `rotate` issues new serving and admin certificates from the same CA (clients keep trusting
//! it); the next `flotilla up` serves them and rewrites `admin.kubeconfig`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum CertsCommand {
    /// Issue new serving and admin certificates from the existing CA (stop the server first;
    /// the next `flotilla up` uses them and rewrites admin.kubeconfig).
    Rotate {
        #[arg(long, env = "FLOTILLA_DATA_DIR", default_value = "./flotilla-data")]
        data_dir: PathBuf,
        /// Also valid for this address (as `up --advertise-address`).
        #[arg(long)]
        advertise_address: Option<std::net::IpAddr>,
    },
}

pub fn run(cmd: CertsCommand) -> anyhow::Result<()> {
    match cmd {
        CertsCommand::Rotate { data_dir, advertise_address } => {
            anyhow::ensure!(data_dir.join("pki/ca.crt").exists(), "no certificates in {} (run flotilla up first)", data_dir.display());
            let args = crate::up::UpArgs::for_names(data_dir.clone(), advertise_address);
            let names = crate::up::serving_names(&args)?;
            flotilla_apiserver::pki::Bundle::rotate(&data_dir, &names).context("rotate certificates")?;
            println!("issued new serving and admin certificates in {} for {}", data_dir.join("pki").display(), names.join(", "));
            println!("restart flotilla up to serve them; it rewrites {}", data_dir.join("admin.kubeconfig").display());
        }
    }
    Ok(())
}
