#!/usr/bin/env bash
# The etcd v3 gRPC client in crates/flotilla-store/src/etcd/proto/ is generated code, committed so
# that building Flotilla needs nothing but the Rust toolchain (no protoc, ADR 0016).
#
#   scripts/regen-etcd-proto.sh           re-read etcd's .proto files from its Go module (the
#                                         version testenv's etcd is built from), strip the
#                                         options only Go generators read, and regenerate
#   scripts/regen-etcd-proto.sh --check   regenerate from the committed .proto files into a
#                                         scratch directory and fail if anything differs
#
# The generator (tools/etcd-proto-gen) parses the protos with protox, so neither form needs
# protoc. It builds in a target directory of its own.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
protos=crates/flotilla-store/proto
generated=crates/flotilla-store/src/etcd/proto
etcd_api_version="${ETCD_API_VERSION:-$(awk '$1 == "go.etcd.io/etcd/api/v3" { print $2 }' testenv/go.mod)}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
target="${ETCD_PROTO_GEN_TARGET_DIR:-$cache/etcd-proto-gen-target}"

generate() {
  CARGO_TARGET_DIR="$target" cargo run -q --locked --release --manifest-path tools/etcd-proto-gen/Cargo.toml -- "$protos" "$1"
  rustfmt --edition 2024 "$1"/*.rs
}

if [[ "${1:-}" == "--check" ]]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  generate "$scratch"
  if ! diff -ru "$generated" "$scratch" --exclude mod.rs; then
    echo "crates/flotilla-store/src/etcd/proto is not what $protos generates: run scripts/regen-etcd-proto.sh" >&2
    exit 1
  fi
  echo "etcd client code is current with $protos"
  exit 0
fi

dir="$(cd testenv && go mod download -json "go.etcd.io/etcd/api/v3@$etcd_api_version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
rm -rf "$protos/etcd"
python3 scripts/strip-etcd-proto.py "$dir" "$protos"
echo "etcd's API protos at $etcd_api_version" > "$protos/VERSION"
generate "$generated"
echo "regenerated $generated from etcd $etcd_api_version"
