#!/usr/bin/env bash
# Regenerates the protobuf layout table the API server decodes protobuf request bodies with
# (crates/flotilla-apiserver/data/protobuf-schema.json) and the fixtures its decoder is
# checked against (crates/flotilla-apiserver/tests/data/protobuf-fixtures.jsonl), from the Go
# types of testenv's pinned k8s.io/api by reflection (testenv/hack/proto-schema). Deterministic:
# the same pin writes the same files.
#
#   scripts/regen-protobuf-schema.sh
#
# Needs: Go (the testenv module's toolchain). No cluster is started.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/testenv"
go run ./hack/proto-schema \
    -schema "$root/crates/flotilla-apiserver/data/protobuf-schema.json" \
    -fixtures "$root/crates/flotilla-apiserver/tests/data/protobuf-fixtures.jsonl"
