//! `conformance record` — run every case against a real kube-apiserver and write what it
//! answered to `conformance/recorded/`; `conformance run` — replay every case against
//! Flotilla in-process and compare (what `cargo test -p flotilla-conformance` does).
//! `scripts/regen-conformance.sh` wraps `record` with a throwaway testenv member.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use flotilla_conformance::suite::{self, Paths, Selection};
use flotilla_conformance::target::Remote;

#[derive(Parser)]
#[command(about = "Differential API conformance between kube-apiserver and Flotilla")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Record the real server's answers.
    Record {
        /// kubeconfig of the real server (its current context is used).
        #[arg(long)]
        kubeconfig: PathBuf,
        /// testenv's ready.json: the etcd endpoint for compaction steps is read from it.
        #[arg(long)]
        ready: Option<PathBuf>,
        /// etcd client URL for compaction steps (overrides --ready).
        #[arg(long)]
        etcd: Option<String>,
        /// Only cases whose id matches this glob.
        #[arg(long)]
        only: Option<String>,
        /// Compare fresh answers with the committed recordings instead of writing them.
        #[arg(long)]
        check: bool,
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
    /// Replay against Flotilla in-process and compare with the recordings.
    Run {
        #[arg(long)]
        only: Option<String>,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
}

fn etcd_from_ready(path: &PathBuf) -> anyhow::Result<Option<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(v["members"][0]["etcd"].as_str().map(String::from))
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let paths = Paths::default();
    match cli.command {
        Command::Record { kubeconfig, ready, etcd, only, check, concurrency } => {
            let etcd = match (etcd, ready) {
                (Some(e), _) => Some(e),
                (None, Some(r)) => etcd_from_ready(&r)?,
                (None, None) => None,
            };
            let target = Remote::connect(&kubeconfig, etcd).await?;
            let summary = suite::record(&paths, &target, &Selection { only, concurrency }, check).await?;
            if check {
                for (case, diffs) in &summary.changed {
                    println!("{case}: differs from its recording");
                    for d in diffs {
                        println!("  {} / {}: {:?} → {:?}", d.step, d.path, d.recorded, d.flotilla);
                    }
                }
                println!("{} cases differ from their recordings", summary.changed.len());
                return Ok(if summary.changed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE });
            }
            println!("recorded {} cases into {}", summary.written, paths.recorded.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { only, concurrency } => {
            let outcome = suite::replay(&paths, &Selection { only, concurrency }).await?;
            print!("{}", outcome.render());
            Ok(if outcome.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}
