#!/usr/bin/env bash
# Regenerate the staging-module `replace` block of testenv/go.mod from the real
# k8s.io/kubernetes go.mod, then pin k8s.io/kubernetes and etcd and tidy.
#
# Why: k8s.io/kubernetes requires every staging module (k8s.io/api, k8s.io/client-go, ...)
# at v0.0.0 and maps them with `replace => ./staging/...`. Replace directives of a
# dependency are ignored, and v0.0.0 does not exist on the proxy, so a consumer must map
# each one to the matching published v0.<minor>.<patch> tag itself. The list changes
# between releases (streaming and cri-streaming arrived in 1.36), so it is derived from
# the go.mod of the pinned release, never typed by hand.
#
# Usage: testenv/hack/gen-replaces.sh [K8S_VERSION] [ETCD_VERSION]
set -euo pipefail

K8S_VERSION="${1:-v1.37.2}"
ETCD_VERSION="${2:-v3.7.3}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"   # v1.37.2 -> v0.37.2

cd "$(dirname "$0")/.."

echo ">> reading go.mod of k8s.io/kubernetes@${K8S_VERSION}" >&2
gomod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
if [[ -z "$gomod" || ! -f "$gomod" ]]; then
  echo "error: could not locate the go.mod of k8s.io/kubernetes@${K8S_VERSION}" >&2
  exit 1
fi

# Every requirement pinned at v0.0.0 is a staging module (inside `require (` blocks the
# lines are "<path> v0.0.0 [// indirect]").
mapfile -t staging < <(awk '
  /^require[[:space:]]*\(/ { inreq = 1; next }
  inreq && /^\)/          { inreq = 0; next }
  inreq && $2 == "v0.0.0" { print $1 }
  /^require[[:space:]]+[^(]/ && $3 == "v0.0.0" { print $2 }
' "$gomod" | sort -u)

if [[ ${#staging[@]} -eq 0 ]]; then
  echo "error: found no v0.0.0 requirements in $gomod" >&2
  exit 1
fi
echo ">> ${#staging[@]} staging modules -> ${STAGING_VERSION}" >&2

# Drop the old replace block first so a module removed upstream does not linger.
for old in $(go mod edit -json | awk -F'"' '/"Old": \{/ { getline; print $4 }'); do
  go mod edit -dropreplace="$old"
done
for m in "${staging[@]}"; do
  go mod edit -replace="${m}=${m}@${STAGING_VERSION}"
done

# The binaries testenv builds are recorded as `tool` directives, so `go mod tidy` keeps
# their whole dependency graph and `go build <pkg>` works from this module.
tools=(
  "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
  "k8s.io/kubernetes/cmd/kube-apiserver@${K8S_VERSION}"
  "k8s.io/kubernetes/cmd/kube-controller-manager@${K8S_VERSION}"
  "k8s.io/kubernetes/cmd/kube-scheduler@${K8S_VERSION}"
)
echo ">> go get -tool ${tools[*]}" >&2
go get -tool "${tools[@]}"
echo ">> go mod tidy" >&2
go mod tidy
echo ">> done: $(grep -c '=> k8s.io/' go.mod) replace lines in testenv/go.mod" >&2
