#!/usr/bin/env bash
# Regenerates crates/flotilla-api/data/openapi-v3-schemas.json: the OpenAPI v3 schemas of every
# built-in kind, as a real kube-apiserver publishes them under /openapi/v3/<group-version>
# (components.schemas of all group-versions, merged; each schema appears once). Flotilla serves
# them back per group-version, so `kubectl explain` prints what a real cluster prints. Nothing in
# the file is typed by hand.
#
#   scripts/regen-openapi-v3.sh                                  # start a member, fetch, write
#   KUBECONFIG_OF_MEMBER=/tmp/te/member1.kubeconfig scripts/regen-openapi-v3.sh   # reuse one
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/crates/flotilla-api/data/openapi-v3-schemas.json"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
testenv="${TESTENV_BIN_DIR:-$cache/testenv/bin}/testenv"

kc="${KUBECONFIG_OF_MEMBER:-}"
if [[ -z "$kc" ]]; then
  [[ -x "$testenv" ]] || { echo "no testenv at $testenv: run testenv/build.sh first" >&2; exit 1; }
  dir="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-openapi-v3.XXXXXX")"
  cleanup() { "$testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
  trap cleanup EXIT
  "$testenv" up --members 1 --out "$dir" --parent-pid $$ >/dev/null
  kc="$dir/member1.kubeconfig"
fi
python3 - "$kc" "$out" <<'PY'
import json, subprocess, sys
kc, out = sys.argv[1], sys.argv[2]
def raw(path):
    return json.loads(subprocess.check_output(["kubectl", "--kubeconfig", kc, "get", "--raw", path]))
index = raw("/openapi/v3")
schemas = {}
for path, entry in sorted(index["paths"].items()):
    # Group-versions only: api/v1 and apis/<group>/<version>.
    if not (path == "api/v1" or (path.startswith("apis/") and path.count("/") == 2)):
        continue
    doc = raw("/" + entry["serverRelativeURL"].lstrip("/"))
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        schemas[name] = schema
version = raw("/version")
with open(out, "w") as f:
    json.dump({"source": {"kubernetesVersion": version.get("gitVersion", "")}, "schemas": schemas}, f, sort_keys=True, separators=(",", ":"))
    f.write("\n")
print(f"{out}: {len(schemas)} schemas from {version.get('gitVersion')}")
PY
