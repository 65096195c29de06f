#!/usr/bin/env bash
# Fuzz targets of flotilla-api and of the API server's request handling (fuzz/, libFuzzer through
# libfuzzer-sys on the stable toolchain, no sanitizer).
#
#   scripts/fuzz.sh replay              run every target once over its committed corpus
#                                       (fuzz/corpus/<target>/): deterministic, a regression test
#   scripts/fuzz.sh explore SECONDS     fuzz each target for SECONDS (hang = an input running
#                                       over 10 s); new inputs go to a scratch directory, not the
#                                       committed corpus; a crash leaves its input in
#                                       fuzz/artifacts/<target>/ and fails the script
#   scripts/fuzz.sh build               only build the targets
#   scripts/fuzz.sh ... TARGET...       only these targets
#
# Builds with cargo and libfuzzer-sys directly, with the coverage instrumentation cargo-fuzz
# would pass (no sanitizer, `--cfg fuzzing`, debug assertions and overflow checks on), in the
# `fuzz` profile of fuzz/Cargo.toml (optimised lightly: a cold build takes minutes, not a
# quarter of an hour). No tool to install. Builds go to $FLOTILLA_FUZZ_TARGET_DIR (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/target-fuzz): other compiler flags than the test
# build's, so sharing its directory would rebuild everything each time.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
export CARGO_TARGET_DIR="${FLOTILLA_FUZZ_TARGET_DIR:-$cache/target-fuzz}"
all_targets=(label_selector field_selector json_patch merge_patch strategic_merge_patch api_request)

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

mode="${1:-}"; shift || true
seconds=0
case "$mode" in
  build | replay) ;;
  explore) [[ "${1:-}" =~ ^[0-9]+$ ]] || usage; seconds="$1"; shift ;;
  *) usage ;;
esac
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

# An explicit --target keeps build scripts and proc macros (built for the host) uninstrumented.
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth"
RUSTFLAGS="$(echo $RUSTFLAGS)"
bins="$CARGO_TARGET_DIR/$triple/fuzz"

cd "$root/fuzz"
start=$(date +%s)
nice -n 5 cargo build --locked --profile fuzz --target "$triple" --bins >&2
echo "fuzz build: $(( $(date +%s) - start ))s" >&2
[[ "$mode" == build ]] && exit 0

scratch="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in "${targets[@]}"; do
  corpus="$root/fuzz/corpus/$t"
  [[ -d "$corpus" ]] || { echo "no corpus for $t at $corpus" >&2; exit 2; }
  t0=$(date +%s)
  if [[ "$mode" == replay ]]; then
    # -runs=0: execute every corpus input once, no mutations; the corpus is not written.
    args=(-runs=0 -timeout=10 "$corpus")
  else
    mkdir -p "$scratch/$t"
    # New inputs land in the scratch directory (first corpus dir); the committed one is read.
    args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          "$scratch/$t" "$corpus")
  fi
  mkdir -p "$root/fuzz/artifacts/$t"
  if nice -n 5 "$bins/$t" -artifact_prefix="$root/fuzz/artifacts/$t/" "${args[@]}" >"$scratch/$t.log" 2>&1; then
    summary=$(grep -E '^(Done|#[0-9]+ +DONE)|stat::number_of_executed_units' "$scratch/$t.log" | tail -1 || true)
    echo "$t: ok in $(( $(date +%s) - t0 ))s ${summary}"
  else
    echo "$t: FAILED after $(( $(date +%s) - t0 ))s:"
    grep -m1 -A4 'panicked at' "$scratch/$t.log" | cut -c1-2000 || true
    grep -E 'Test unit written|^Error' "$scratch/$t.log" | head -5 || true
    failed+=("$t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz $mode failed: ${failed[*]} (inputs in $root/fuzz/artifacts/)"
  exit 1
fi
echo "fuzz $mode: ${#targets[@]} target(s) ok in $(( $(date +%s) - start ))s"
