#!/usr/bin/env bash
# Measure testenv on this machine: wall time of `testenv up`, start-up time of each member,
# and the resident memory (VmRSS) of every process after an idle period. Prints Markdown
# tables for docs/testing.md.
#
#   testenv/hack/measure.sh [MEMBERS] [extra `testenv up` flags...]
#   IDLE=60 testenv/hack/measure.sh 3 --with-workloads
set -euo pipefail

bin_dir="${TESTENV_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin}"
testenv="$bin_dir/testenv"
members="${1:-3}"
shift || true
idle="${IDLE:-60}"

dir="$(mktemp -d "${TMPDIR:-/tmp}/testenv-measure.XXXXXX")"
trap '"$testenv" down --out "$dir" --purge >/dev/null 2>&1 || true' EXIT

t0=$(date +%s.%N)
"$testenv" up --members "$members" --out "$dir" "$@" >/dev/null 2>"$dir.up.log" || { cat "$dir.up.log" >&2; exit 1; }
t1=$(date +%s.%N)
rm -f "$dir.up.log"
printf '`testenv up --members %s %s`: %.1fs wall\n\n' "$members" "$*" "$(echo "$t1 - $t0" | bc)"

echo "| member | start-up (s) | steps |"
echo "|---|---|---|"
for m in $(jq -r '.members[].name' "$dir/ready.json"); do
  steps=$(jq -r '[.steps[] | "\(.name) \(.seconds)s"] | join(", ")' "$dir/$m/state.json")
  printf '| %s | %s | %s |\n' "$m" "$(jq -r --arg m "$m" '.members[] | select(.name==$m) | .startupSeconds' "$dir/ready.json")" "$steps"
done
echo

# CPU ticks (utime+stime) of every process of a member, summed.
cpu_ticks() {
  local total=0 pid
  for pid in $("$testenv" status --out "$dir" --json | jq -r --arg m "$1" '.[] | select(.name==$m) | .pids[]'); do
    if [[ -r /proc/$pid/stat ]]; then
      total=$(( total + $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}') ))
    fi
  done
  echo "$total"
}
names=$(jq -r '.members[].name' "$dir/ready.json")
declare -A before
for m in $names; do before[$m]=$(cpu_ticks "$m"); done
sleep "$idle"
hz=$(getconf CLK_TCK)
echo "CPU used while idle (% of one core, all processes of the member, over ${idle}s):"
echo
for m in $names; do
  printf -- '- %s: %.1f%%\n' "$m" "$(echo "($(cpu_ticks "$m") - ${before[$m]}) * 100 / $hz / $idle" | bc -l)"
done
echo
echo "Resident memory after ${idle}s idle (MiB, VmRSS):"
echo
echo "| member | etcd | kube-apiserver | kube-controller-manager | kube-scheduler | fake kubelet | supervisor | total |"
echo "|---|---|---|---|---|---|---|---|"
"$testenv" status --out "$dir" --json | jq -r '.[] |
  def mib(k): if .rssBytesByProcess[k] then (.rssBytesByProcess[k] / 1048576 | floor | tostring) else "-" end;
  "| \(.name) | \(mib("etcd")) | \(mib("kube-apiserver")) | \(mib("kube-controller-manager")) | \(mib("kube-scheduler")) | \(mib("kubelet")) | \(mib("supervisor")) | \(.rssBytes / 1048576 | floor) |"'
