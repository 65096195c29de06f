//! Generates flotilla-store's etcd v3 gRPC client (`crates/flotilla-store/src/etcd/proto/`) from
//! the committed `.proto` files, with protox instead of protoc, so that neither the product's
//! build nor this generator needs a system package. Run through `scripts/regen-etcd-proto.sh`.
//!
//! Usage: `etcd-proto-gen <proto-root> <out-dir>`.

use std::path::PathBuf;
use std::process::ExitCode;

/// The files whose messages and services the store's client uses; their imports come along.
const PROTOS: &[&str] = &["etcd/api/etcdserverpb/rpc.proto"];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [root, out] = args.as_slice() else {
        eprintln!("usage: etcd-proto-gen <proto-root> <out-dir>");
        return ExitCode::from(2);
    };
    let (root, out) = (PathBuf::from(root), PathBuf::from(out));
    let fds = match protox::compile(PROTOS, [&root]) {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("etcd-proto-gen: cannot parse the protos under {}: {e}", root.display());
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("etcd-proto-gen: cannot create {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let generated = tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        // Keys and values stay `Bytes`: the store hands them on without a copy.
        .bytes(".")
        .emit_rerun_if_changed(false)
        .out_dir(&out)
        .compile_fds(fds);
    match generated {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("etcd-proto-gen: cannot generate into {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}
