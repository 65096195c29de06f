#!/usr/bin/env bash
# Build the binaries testenv runs: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler (all from the Go modules pinned in testenv/go.mod), the testenv
# orchestrator itself, and Karmada's control plane (karmada-aggregated-apiserver,
# karmada-controller-manager, karmada-scheduler, karmada-webhook, from the Karmada release
# pinned in testenv/karmada/go.mod, plus its CRD files as karmada-crds/) for `testenv karmada`.
#
#   testenv/build.sh              # everything
#   testenv/build.sh etcd         # only etcd (any subset of the targets below works)
#
# Output goes to $TESTENV_BIN_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin).
# Works from a cold module/build cache (modules come from the Go module proxy); an existing
# GOMODCACHE/GOCACHE is honoured, and a rebuild with a warm cache only re-checks and relinks
# what changed. Each step prints how long it took. A failing step prints the command and its
# full output and the script exits non-zero.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin_dir="${TESTENV_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin}"
k8s_version="v1.37.2"

karmada_version="v1.18.2" # keep in sync with testenv/karmada/go.mod
karmada_module="github.com/karmada-io/karmada"

all_targets=(etcd kube-apiserver kube-controller-manager kube-scheduler testenv kubefed-versions
  karmada-aggregated-apiserver karmada-controller-manager karmada-scheduler karmada-webhook karmada-crds)
declare -A pkg=(
  [etcd]="go.etcd.io/etcd/server/v3"
  [kube-apiserver]="k8s.io/kubernetes/cmd/kube-apiserver"
  [kube-controller-manager]="k8s.io/kubernetes/cmd/kube-controller-manager"
  [kube-scheduler]="k8s.io/kubernetes/cmd/kube-scheduler"
  [testenv]="./cmd/testenv"
  [kubefed-versions]="."
  [karmada-aggregated-apiserver]="$karmada_module/cmd/aggregated-apiserver"
  [karmada-controller-manager]="$karmada_module/cmd/controller-manager"
  [karmada-scheduler]="$karmada_module/cmd/scheduler"
  [karmada-webhook]="$karmada_module/cmd/webhook"
  [karmada-crds]="(copied from the module cache)"
)
# Targets built from their own Go module (a subdirectory of testenv/): KubeFed v0.10.0 pins
# Kubernetes libraries far older than testenv's, so its version tool cannot share testenv's go.mod.
# Karmada v1.18 pins k8s.io v0.35 (testenv: v0.37), so its binaries come from testenv/karmada
# (whose go.mod lists them as tools).
declare -A module_dir=(
  [kubefed-versions]="kubefed-versions"
  [karmada-aggregated-apiserver]="karmada"
  [karmada-controller-manager]="karmada"
  [karmada-scheduler]="karmada"
  [karmada-webhook]="karmada"
  [karmada-crds]="karmada"
)

# /version of the Kubernetes binaries reports what a release build would.
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
k8s_ldflags="-X k8s.io/component-base/version.gitVersion=${k8s_version}"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor}"
k8s_ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
karmada_ldflags="-X $karmada_module/pkg/version.gitVersion=${karmada_version}"
karmada_ldflags+=" -X $karmada_module/pkg/version.gitTreeState=clean"

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=("${all_targets[@]}"); fi
for t in "${targets[@]}"; do
  if [[ -z "${pkg[$t]:-}" ]]; then
    echo "build.sh: unknown target '$t' (known: ${all_targets[*]})" >&2
    exit 2
  fi
done

if ! command -v go >/dev/null; then
  echo "build.sh: 'go' is not on PATH; testenv needs Go >= 1.26" >&2
  exit 1
fi

mkdir -p "$bin_dir"
log="$(mktemp "${TMPDIR:-/tmp}/testenv-build.XXXXXX")"
trap 'rm -f "$log"' EXIT

# Not -trimpath: kube-apiserver's test helpers resolve fixture paths with runtime.Caller.
# CGO off: static binaries, no C toolchain needed. nice: leave a core to the developer.
export CGO_ENABLED=0
total_start=$(date +%s.%N)
for t in "${targets[@]}"; do
  flags=()
  if [[ "$t" == kube-* ]]; then flags=(-ldflags "$k8s_ldflags"); fi
  if [[ "$t" == karmada-* ]]; then flags=(-ldflags "$karmada_ldflags"); fi
  cmd=(nice -n 5 go build "${flags[@]}" -o "$bin_dir/$t" "${pkg[$t]}")
  if [[ "$t" == karmada-crds ]]; then
    # Karmada's CRDs (charts/karmada/_crds: bases + the conversion-webhook patches) and the
    # deploy manifests `testenv karmada up` reads (webhook configuration, APIService), copied
    # from the module cache so the launcher does not depend on where GOMODCACHE is.
    cmd=(bash -c 'go mod download "$1" && src="$(go list -m -f "{{.Dir}}" "$1")" && [[ -d "$src" ]] &&
      rm -rf "$3.tmp" && mkdir -p "$3.tmp/deploy" && cp -r "$src/charts/karmada/_crds" "$3.tmp/crds" &&
      cp "$src"/artifacts/deploy/{webhook-configuration,karmada-aggregated-apiserver-apiservice,kube-controller-manager,karmada-controller-manager,karmada-scheduler,karmada-webhook,karmada-aggregated-apiserver,karmada-apiserver}.yaml "$3.tmp/deploy/" &&
      echo "$2" > "$3.tmp/VERSION" && chmod -R u+w "$3.tmp" && rm -rf "$3" && mv "$3.tmp" "$3"' \
      copy-crds "$karmada_module" "$karmada_version" "$bin_dir/$t")
  fi
  start=$(date +%s.%N)
  dir="$here/${module_dir[$t]:-}"
  if ! (cd "$dir" && "${cmd[@]}") >"$log" 2>&1; then
    echo "build.sh: FAILED building $t after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')s" >&2
    echo "build.sh: command (in $dir): ${cmd[*]}" >&2
    echo "----- output -----" >&2
    cat "$log" >&2
    echo "------------------" >&2
    exit 1
  fi
  printf 'build.sh: %-24s %6.1fs  %s\n' "$t" "$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{print e-s}')" "$bin_dir/$t"
done
printf 'build.sh: %-24s %6.1fs\n' "total" "$(awk -v s="$total_start" -v e="$(date +%s.%N)" 'BEGIN{print e-s}')"
