#!/usr/bin/env bash
# Record what a real kube-apiserver (testenv, v1.37.2) answers to every differential
# conformance case, into conformance/recorded/. Expected responses are only ever made here.
#   scripts/regen-conformance.sh                 every case
#   scripts/regen-conformance.sh --only 'watch-*' cases whose id matches a glob
#   scripts/regen-conformance.sh --check         compare fresh answers with the recordings
#                                                (determinism check; writes nothing)
# Needs the testenv binaries (testenv/build.sh builds them when missing). See docs/conformance.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
bin="${TESTENV_BIN_DIR:-$cache/testenv/bin}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
if [[ ! -x "$bin/testenv" || ! -x "$bin/kube-apiserver" || ! -x "$bin/etcd" || ! -x "$bin/kube-controller-manager" ]]; then
  TESTENV_BIN_DIR="$bin" "$root/testenv/build.sh"
fi
cd "$root"
cargo build -q -p flotilla-conformance --bin conformance
dir="$(mktemp -d)"
trap '"$bin/testenv" down --out "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
# kube-controller-manager runs only its garbage collector (the gc cases observe it) and the
# token controller that fills service-account-token Secrets (rbac-token-secret-*): nothing
# else may write to the cases' objects, and --nodes 0 leaves out the scheduler, the fake
# kubelet and nodes, so pods stay as created.
"$bin/testenv" up --members 1 --with-workloads --controllers garbagecollector,serviceaccount-token --nodes 0 \
  --out "$dir" --parent-pid $$ >/dev/null
# Restart the member on its data: its watch caches then start at the current revision rather
# than at revision 1, as on any server that has been up a while, so "a resourceVersion below
# the watch cache's start" (watch-too-old-resourceversion) is the same on every recording.
"$bin/testenv" stop --member member1 --out "$dir" >/dev/null
"$bin/testenv" start --member member1 --out "$dir" >/dev/null
"$CARGO_TARGET_DIR/debug/conformance" record \
  --kubeconfig "$dir/member1.kubeconfig" --ready "$dir/ready.json" "$@"
