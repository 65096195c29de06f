#!/usr/bin/env bash
# Record the real kube-apiserver's discovery documents for the group/versions Flotilla serves,
# and which built-in kinds the real server gives a metadata.generation, into
# crates/flotilla-apiserver/tests/data/. The API server's tests compare its own table with them.
#   scripts/regen-discovery.sh      (needs testenv/build.sh to have run)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TESTENV_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin}"
out="$root/crates/flotilla-apiserver/tests/data"
dir="$(mktemp -d)"
trap '"$bin/testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$bin/testenv" up --members 1 --out "$dir" >/dev/null
kc="$dir/member1.kubeconfig"
k() { /usr/lib/google-cloud-sdk/bin/kubectl.1.33 --kubeconfig "$kc" "$@"; }
gvs=(api/v1 apis/apps/v1 apis/batch/v1 apis/networking.k8s.io/v1 apis/autoscaling/v2 apis/autoscaling/v1
     apis/policy/v1 apis/rbac.authorization.k8s.io/v1 apis/coordination.k8s.io/v1 apis/events.k8s.io/v1
     apis/discovery.k8s.io/v1 apis/scheduling.k8s.io/v1 apis/authorization.k8s.io/v1
     apis/authentication.k8s.io/v1 apis/apiextensions.k8s.io/v1 apis/certificates.k8s.io/v1)
{
  echo '{'
  first=1
  for gv in "${gvs[@]}"; do
    [[ $first -eq 1 ]] || echo ','
    first=0
    printf '"%s": ' "$gv"
    k get --raw "/$gv"
  done
  echo '}'
} | python3 -c 'import json,sys; d=json.load(sys.stdin); json.dump(d, sys.stdout, indent=1, sort_keys=True)' > "$out/discovery-v1.37.json"
k version -o json > "$dir/version.json"
echo "recorded discovery of ${#gvs[@]} group/versions into $out/discovery-v1.37.json"
