#!/usr/bin/env bash
# Records golden files from a real kube-apiserver (testenv) for flotilla-api's tests:
#   crates/flotilla-api/tests/data/patch-golden/*.json   strategic merge / merge / JSON patches
#                                                        sent with dryRun=All, and the answers
#   crates/flotilla-api/tests/data/selector-golden.json  label and field selectors: the objects
#                                                        each selects, or the 400 message
# The inputs (objects, patches, selectors) are in scripts/regen-api-golden.py; every expected
# output is what the server answered. Needs testenv built (testenv/build.sh) and kubectl.
#
#   scripts/regen-api-golden.sh
#   FLOTILLA_TESTENV_KUBECONFIG=/tmp/te/member1.kubeconfig scripts/regen-api-golden.sh   # reuse a member
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
data="$root/crates/flotilla-api/tests/data"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
testenv="${TESTENV_BIN_DIR:-$cache/testenv/bin}/testenv"

kubeconfig="${FLOTILLA_TESTENV_KUBECONFIG:-}"
if [[ -z "$kubeconfig" ]]; then
  [[ -x "$testenv" ]] || { echo "no testenv at $testenv: run testenv/build.sh first" >&2; exit 1; }
  dir="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-api-golden.XXXXXX")"
  cleanup() { "$testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
  trap cleanup EXIT
  "$testenv" up --members 1 --out "$dir" --parent-pid $$ >/dev/null
  kubeconfig="$dir/member1.kubeconfig"
fi
python3 "$root/scripts/regen-api-golden.py" "$kubeconfig" "$data"
