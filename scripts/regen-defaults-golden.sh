#!/usr/bin/env bash
# Records the golden data for crates/flotilla-api's defaulting from a real kube-apiserver.
#
#   scripts/regen-defaults-golden.sh
#
# For every manifest in crates/flotilla-api/tests/data/defaults-golden/inputs/*.json it starts
# one testenv member (kube-apiserver v1.37.2, Karmada's admission set), POSTs the manifest
# byte for byte with `?dryRun=All&fieldValidation=Strict` and writes the server's answer,
# sorted by key, to expected/<name>.json. Inputs named `invalid-*` must be refused (the
# Status is recorded); any other input must be accepted, otherwise the script fails.
#
# It also records how the server writes quantities: every line of inputs/quantities.txt is
# sent both as a container request (a ResourceList, rounded up to milli-units) and as an
# emptyDir sizeLimit (a plain Quantity) and the answers go to expected/quantities.json.
#
# Needs: curl, jq, and testenv (built by testenv/build.sh, which this script runs when the
# binary is missing). The environment is always torn down, also on failure or Ctrl-C.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
data="$root/crates/flotilla-api/tests/data/defaults-golden"
bin_dir=${TESTENV_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin}
testenv="$bin_dir/testenv"

for tool in curl jq; do
  command -v "$tool" >/dev/null || { echo "regen-defaults-golden: $tool is required" >&2; exit 1; }
done
if [[ ! -x "$testenv" ]]; then
  "$root/testenv/build.sh"
fi

env_dir=$(mktemp -d)
cleanup() {
  "$testenv" down --out "$env_dir" >/dev/null 2>&1 || true
  rm -rf "$env_dir"
}
trap cleanup EXIT INT TERM

"$testenv" up --members 1 --out "$env_dir" >/dev/null
kubeconfig="$env_dir/member1.kubeconfig"
server=$(jq -r '.members[0].server' "$env_dir/ready.json")
kc_field() { awk -v k="$1:" '$1 == k { print $2 }' "$kubeconfig" | base64 -d; }
kc_field certificate-authority-data >"$env_dir/ca.crt"
kc_field client-certificate-data >"$env_dir/client.crt"
kc_field client-key-data >"$env_dir/client.key"

# post PATH FILE: POSTs FILE as a dry-run create, prints the response body.
post() {
  curl -sS --cacert "$env_dir/ca.crt" --cert "$env_dir/client.crt" --key "$env_dir/client.key" \
    -H 'Content-Type: application/json' -H 'Accept: application/json' \
    -X POST --data-binary "@$2" "$server$1?dryRun=All&fieldValidation=Strict"
}

# collection PATH for an apiVersion and kind (namespaced kinds go to namespace "default").
collection() {
  local api_version=$1 kind=$2 plural namespaced=true prefix
  case "$kind" in
    Pod) plural=pods ;;
    PodTemplate) plural=podtemplates ;;
    ReplicationController) plural=replicationcontrollers ;;
    Service) plural=services ;;
    ConfigMap) plural=configmaps ;;
    Secret) plural=secrets ;;
    ServiceAccount) plural=serviceaccounts ;;
    PersistentVolumeClaim) plural=persistentvolumeclaims ;;
    Namespace) plural=namespaces namespaced=false ;;
    LimitRange) plural=limitranges ;;
    ResourceQuota) plural=resourcequotas ;;
    Endpoints) plural=endpoints ;;
    Deployment) plural=deployments ;;
    StatefulSet) plural=statefulsets ;;
    DaemonSet) plural=daemonsets ;;
    ReplicaSet) plural=replicasets ;;
    Job) plural=jobs ;;
    CronJob) plural=cronjobs ;;
    Ingress) plural=ingresses ;;
    IngressClass) plural=ingressclasses namespaced=false ;;
    NetworkPolicy) plural=networkpolicies ;;
    HorizontalPodAutoscaler) plural=horizontalpodautoscalers ;;
    PodDisruptionBudget) plural=poddisruptionbudgets ;;
    Role) plural=roles ;;
    ClusterRole) plural=clusterroles namespaced=false ;;
    RoleBinding) plural=rolebindings ;;
    ClusterRoleBinding) plural=clusterrolebindings namespaced=false ;;
    Lease) plural=leases ;;
    Event) plural=events ;;
    EndpointSlice) plural=endpointslices ;;
    PriorityClass) plural=priorityclasses namespaced=false ;;
    *) echo "regen-defaults-golden: no collection known for kind $kind" >&2; return 1 ;;
  esac
  if [[ "$api_version" == */* ]]; then prefix="/apis/$api_version"; else prefix="/api/$api_version"; fi
  if [[ "$namespaced" == true ]]; then
    echo "$prefix/namespaces/default/$plural"
  else
    echo "$prefix/$plural"
  fi
}

# Everything is recorded into a scratch directory and replaces expected/ only when complete.
out="$env_dir/expected"
mkdir -p "$out"
count=0
for input in "$data"/inputs/*.json; do
  name=$(basename "$input" .json)
  path=$(collection "$(jq -r .apiVersion "$input")" "$(jq -r .kind "$input")")
  answer=$(post "$path" "$input")
  kind=$(jq -r .kind <<<"$answer")
  if [[ "$name" == invalid-* ]]; then
    [[ "$kind" == Status ]] || { echo "$name: expected a refusal, got a $kind" >&2; exit 1; }
  elif [[ "$kind" == Status ]]; then
    echo "$name: refused by the server: $(jq -r .message <<<"$answer")" >&2
    exit 1
  fi
  jq -S . <<<"$answer" >"$out/$name.json"
  count=$((count + 1))
done

# Quantities: one pod per line of quantities.txt.
quantities="[]"
while IFS= read -r q; do
  [[ -z "$q" || "$q" == \#* ]] && continue
  body="$env_dir/q.json"
  jq -n --argjson q "$q" '{apiVersion: "v1", kind: "Pod", metadata: {name: "q"},
      spec: {containers: [{name: "c", image: "nginx", resources: {requests: {memory: $q}},
                           volumeMounts: [{name: "v", mountPath: "/v"}]}],
             volumes: [{name: "v", emptyDir: {sizeLimit: $q}}]}}' >"$body"
  answer=$(post /api/v1/namespaces/default/pods "$body")
  quantities=$(jq --argjson q "$q" --argjson a "$answer" \
    '. + [{input: $q,
           resourceList: $a.spec.containers[0].resources.requests.memory,
           quantity: $a.spec.volumes[0].emptyDir.sizeLimit,
           status: (if $a.kind == "Status" then $a.message else null end)}]' <<<"$quantities")
done <"$data/inputs/quantities.txt"
jq . <<<"$quantities" >"$out/quantities.json"

rm -rf "$data/expected"
cp -r "$out" "$data/expected"

echo "regen-defaults-golden: recorded $count objects and $(jq length <<<"$quantities") quantities from $(jq -r .kubernetesVersion "$env_dir/ready.json")"
