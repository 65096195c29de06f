#!/usr/bin/env bash
# Regenerates crates/flotilla-api/data/patch-meta.json, the patch metadata the strategic merge
# patch engine (and later server-side apply) reads: it starts one real kube-apiserver with
# testenv, fetches its /openapi/v2, and keeps per definition only what patching needs
# (scripts/regen-patch-meta.py says what). Nothing in that file is typed by hand.
#
#   scripts/regen-patch-meta.sh            # start a member, fetch, write the file
#   OPENAPI=saved-openapi-v2.json [PATCHABLE=saved-patchable.json] scripts/regen-patch-meta.sh
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/crates/flotilla-api/data/patch-meta.json"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
testenv="${TESTENV_BIN_DIR:-$cache/testenv/bin}/testenv"

if [[ -n "${OPENAPI:-}" ]]; then
  python3 "$root/scripts/regen-patch-meta.py" "$OPENAPI" "$out" "" "${PATCHABLE:-}"
  exit 0
fi

[[ -x "$testenv" ]] || { echo "no testenv at $testenv: run testenv/build.sh first" >&2; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-patch-meta.XXXXXX")"
cleanup() { "$testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"$testenv" up --members 1 --out "$dir" --parent-pid $$ >/dev/null
kubectl --kubeconfig "$dir/member1.kubeconfig" version -o json >"$dir/version.json" 2>/dev/null || true
kubectl --kubeconfig "$dir/member1.kubeconfig" get --raw /openapi/v2 >"$dir/openapi-v2.json"
python3 "$root/scripts/regen-patch-meta.py" --patchable "$dir/member1.kubeconfig" "$dir/patchable.json"
python3 "$root/scripts/regen-patch-meta.py" "$dir/openapi-v2.json" "$out" "$dir/version.json" "$dir/patchable.json"
