#!/usr/bin/env bash
# Fuzz targets of flotilla-api and of the API server's request handling (fuzz/, cargo-fuzz on
# the stable toolchain, no sanitizer).
#
#   scripts/fuzz.sh replay              run every target once over its committed corpus
#                                       (fuzz/corpus/<target>/): deterministic, a regression test
#   scripts/fuzz.sh explore SECONDS     fuzz each target for SECONDS (hang = an input running
#                                       over 10 s); new inputs go to a scratch directory, not the
#                                       committed corpus; a crash leaves its input in
#                                       fuzz/artifacts/<target>/ and fails the script
#   scripts/fuzz.sh ... TARGET...       only these targets
#
# Installs cargo-fuzz 0.13.2 into .tools/ when missing. Builds go to $FLOTILLA_FUZZ_TARGET_DIR
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/target-fuzz): fuzz builds use other
# compiler flags, so sharing the test build's directory would rebuild everything each time.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
export CARGO_TARGET_DIR="${FLOTILLA_FUZZ_TARGET_DIR:-$cache/target-fuzz}"
cargo_fuzz="$root/.tools/bin/cargo-fuzz"
all_targets=(label_selector field_selector json_patch merge_patch strategic_merge_patch api_request)

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

mode="${1:-}"; shift || true
seconds=0
case "$mode" in
  replay) ;;
  explore) [[ "${1:-}" =~ ^[0-9]+$ ]] || usage; seconds="$1"; shift ;;
  *) usage ;;
esac
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

if [[ ! -x "$cargo_fuzz" ]]; then
  echo "installing cargo-fuzz 0.13.2 into $root/.tools" >&2
  CARGO_TARGET_DIR="$CARGO_TARGET_DIR/cargo-install" \
    cargo install cargo-fuzz --version 0.13.2 --locked --root "$root/.tools" >&2
fi

cd "$root/fuzz"
start=$(date +%s)
nice -n 5 "$cargo_fuzz" build -s none >&2
echo "fuzz build: $(( $(date +%s) - start ))s" >&2

scratch="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
  corpus="$root/fuzz/corpus/$t"
  [[ -d "$corpus" ]] || { echo "no corpus for $t at $corpus" >&2; exit 2; }
  t0=$(date +%s)
  if [[ "$mode" == replay ]]; then
    # -runs=0: execute every corpus input once, no mutations; the corpus is not written.
    args=("$corpus" -- -runs=0 -timeout=10)
  else
    mkdir -p "$scratch/$t"
    # New inputs land in the scratch directory (first corpus dir); the committed one is read.
    args=("$scratch/$t" "$corpus" -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
          -print_final_stats=1)
  fi
  if nice -n 5 "$cargo_fuzz" run -s none "$t" "${args[@]}" >"$scratch/$t.log" 2>&1; then
    summary=$(grep -E '^(Done|#[0-9]+ +DONE)|stat::number_of_executed_units' "$scratch/$t.log" | tail -1 || true)
    echo "$t: ok in $(( $(date +%s) - t0 ))s ${summary}"
  else
    echo "$t: FAILED after $(( $(date +%s) - t0 ))s:"
    grep -m1 -A4 'panicked at' "$scratch/$t.log" | cut -c1-2000 || true
    grep -E 'Reproduce with|cargo fuzz run|^Error' "$scratch/$t.log" | head -5 || true
    failed+=("$t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz $mode failed: ${failed[*]} (inputs in $root/fuzz/artifacts/)"
  exit 1
fi
echo "fuzz $mode: ${#targets[@]} target(s) ok in $(( $(date +%s) - start ))s"
