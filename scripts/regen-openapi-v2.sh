#!/usr/bin/env bash
# Regenerates crates/flotilla-api/data/openapi-v2-extra.json: what a real kube-apiserver's
# /openapi/v2 holds for built-in kinds beyond what Flotilla derives from the recorded OpenAPI v3
# schemas (openapi-v3-schemas.json, scripts/regen-openapi-v3.sh): the definitions no
# group-version's v3 document carries (discovery and version types) and the
# `x-kubernetes-group-version-kind` lists that differ (DeleteOptions and WatchEvent list every
# group-version the server knows; the merged v3 data keeps one document's). Run it after
# regen-openapi-v3.sh against the same Kubernetes version, on a server without CRDs. Nothing
# in the file is typed by hand; docs/adr/0014-openapi-v2-derived-from-v3.md says why.
#
#   scripts/regen-openapi-v2.sh                                  # start a member, fetch, write
#   KUBECONFIG_OF_MEMBER=/tmp/te/member1.kubeconfig scripts/regen-openapi-v2.sh   # reuse one
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/crates/flotilla-api/data/openapi-v2-extra.json"
v3="$root/crates/flotilla-api/data/openapi-v3-schemas.json"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
testenv="${TESTENV_BIN_DIR:-$cache/testenv/bin}/testenv"

kc="${KUBECONFIG_OF_MEMBER:-}"
if [[ -z "$kc" ]]; then
  [[ -x "$testenv" ]] || { echo "no testenv at $testenv: run testenv/build.sh first" >&2; exit 1; }
  dir="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-openapi-v2.XXXXXX")"
  cleanup() { "$testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"; }
  trap cleanup EXIT
  "$testenv" up --members 1 --out "$dir" --parent-pid $$ >/dev/null
  kc="$dir/member1.kubeconfig"
fi
python3 - "$kc" "$v3" "$out" <<'PY'
import json, subprocess, sys
kc, v3_path, out = sys.argv[1], sys.argv[2], sys.argv[3]
def raw(path):
    return json.loads(subprocess.check_output(["kubectl", "--kubeconfig", kc, "get", "--raw", path]))
doc = raw("/openapi/v2")
v3 = json.load(open(v3_path))
recorded = v3["schemas"]
definitions, gvks = {}, {}
GVK = "x-kubernetes-group-version-kind"
for name, schema in sorted(doc["definitions"].items()):
    if not name.startswith("io.k8s."):
        continue  # a CRD's: Flotilla builds those from the CRD
    if name not in recorded:
        definitions[name] = schema
    elif GVK in schema and schema[GVK] != recorded[name].get(GVK):
        gvks[name] = schema[GVK]
version = raw("/version").get("gitVersion", "")
if version != v3["source"]["kubernetesVersion"]:
    sys.exit(f"the server is {version}, the v3 data {v3['source']['kubernetesVersion']}: regenerate both from one version")
with open(out, "w") as f:
    json.dump({"source": {"kubernetesVersion": version}, "definitions": definitions, "groupVersionKinds": gvks}, f, sort_keys=True, separators=(",", ":"))
    f.write("\n")
print(f"{out}: {len(definitions)} definitions, {len(gvks)} kind lists from {version}")
PY
