#!/usr/bin/env bash
# Record kube-apiserver's bootstrap RBAC policy (every ClusterRole, ClusterRoleBinding, Role and
# RoleBinding labelled kubernetes.io/bootstrapping=rbac-defaults) from a real kube-apiserver
# (testenv, v1.37.2) into crates/flotilla-api/data/bootstrap-rbac.json, which Flotilla's API
# server creates and reconciles at start-up as kube-apiserver's rbac/bootstrap-roles hook does.
#   scripts/regen-bootstrap-rbac.sh      (needs testenv/build.sh to have run)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TESTENV_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin}"
out="$root/crates/flotilla-api/data/bootstrap-rbac.json"
dir="$(mktemp -d)"
trap '"$bin/testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
# No kube-controller-manager: the aggregated roles (admin, edit, view) are recorded as the
# API server creates them, with the aggregation rule and no rules yet.
"$bin/testenv" up --members 1 --out "$dir" >/dev/null
kc="$dir/member1.kubeconfig"
k() { /usr/lib/google-cloud-sdk/bin/kubectl.1.33 --kubeconfig "$kc" "$@"; }
k get clusterroles,clusterrolebindings,roles,rolebindings -A -l kubernetes.io/bootstrapping=rbac-defaults -o json |
python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
kept = []
for o in items:
    m = o["metadata"]
    meta = {k: m[k] for k in ("name", "namespace", "labels", "annotations") if k in m}
    obj = {"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": meta}
    for k in ("rules", "aggregationRule", "roleRef", "subjects"):
        if o.get(k) is not None:
            obj[k] = o[k]
    kept.append(obj)
order = {"ClusterRole": 0, "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 3}
kept.sort(key=lambda o: (order[o["kind"]], o["metadata"].get("namespace", ""), o["metadata"]["name"]))
json.dump({"kubernetesVersion": "v1.37.2", "items": kept}, sys.stdout, indent=1, sort_keys=True)
print()
' > "$out"
echo "recorded $(python3 -c "import json; print(len(json.load(open('$out'))['items']))" ) objects into $out"
