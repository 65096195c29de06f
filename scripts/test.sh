#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs every test and the benchmark smoke
# runs, and prints how long each phase took. `make test` and `.ci/run` call this.
#
# Build caches live outside the clone so a fresh clone reuses them when present:
#   CARGO_TARGET_DIR  default ${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/target
#   TESTENV_BIN_DIR   default ${XDG_CACHE_HOME:-$HOME/.cache}/flotilla/testenv/bin
# Everything still builds from cold (about 8 minutes of Rust and 7 of Go on 2 cores, plus
# about 7 of Go for Karmada's control plane, which the Karmada smoke test runs).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
export TESTENV_BIN_DIR="${TESTENV_BIN_DIR:-$cache/testenv/bin}"
export FLOTILLA_ETCD_BIN="${FLOTILLA_ETCD_BIN:-$TESTENV_BIN_DIR/etcd}"
export FLOTILLA_REQUIRE_ETCD=1
export FLOTILLA_REQUIRE_CLIENTS=1
export FLOTILLA_KUBECTL_1_20="${FLOTILLA_KUBECTL_1_20:-$cache/kubectl-1.20/usr/bin/kubectl}"
venv="$cache/venv"
export CARGO_TERM_COLOR=never
export RUST_BACKTRACE=1
mode="${1:-full}"   # full | fast

declare -a phase_names=() phase_secs=()
phase() {
  local name="$1"; shift
  local start; start=$(date +%s)
  echo
  echo "=== phase: $name"
  if "$@"; then
    local took=$(( $(date +%s) - start ))
    phase_names+=("$name"); phase_secs+=("$took")
    echo "=== phase: $name: ok in ${took}s"
  else
    local rc=$?
    local took=$(( $(date +%s) - start ))
    echo "=== phase: $name: FAILED (exit $rc) after ${took}s"
    tests_failed=1
    summary
    exit "$rc"
  fi
}
summary() {
  echo
  echo "=== phase times"
  for i in "${!phase_names[@]}"; do printf '  %-28s %5ss\n' "${phase_names[$i]}" "${phase_secs[$i]}"; done
}

toolchain() {
  rustc -V
  cargo -V
  go version
  echo "CARGO_TARGET_DIR=$CARGO_TARGET_DIR"
  echo "TESTENV_BIN_DIR=$TESTENV_BIN_DIR"
}

# Client binaries the compatibility tests use: kubectl 1.20 from Debian's kubernetes-client
# (extracted, not installed: installing conflicts with the image's kubectl) and the Python
# client pinned in tests/python/requirements.txt, in a venv outside the clone; dig (installed
# with apt when missing) for the DNS server.
clients() {
  if [[ ! -x "$FLOTILLA_KUBECTL_1_20" ]]; then
    local tmp; tmp="$(mktemp -d)"
    (cd "$tmp" && apt-get download -q kubernetes-client >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get download -q kubernetes-client; })
    mkdir -p "$cache/kubectl-1.20"
    dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$cache/kubectl-1.20"
    rm -rf "$tmp"
  fi
  "$FLOTILLA_KUBECTL_1_20" version --client --short 2>/dev/null || "$FLOTILLA_KUBECTL_1_20" version --client | head -1
  # dig (Debian's bind9-dnsutils) queries the built-in DNS server in the traffic tests.
  if ! command -v dig >/dev/null; then
    apt-get install -y -q bind9-dnsutils >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q bind9-dnsutils >/dev/null; }
  fi
  dig -v 2>&1 | head -1
  # Headless Chromium and its WebDriver (Debian's chromium, chromium-driver) for the dashboard's
  # browser tests; Selenium comes with the venv below.
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }
  fi
  chromedriver --version
  local want; want="$(sha256sum tests/python/requirements.txt | cut -c1-16)"
  if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.requirements" 2>/dev/null)" != "$want" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r tests/python/requirements.txt
    echo "$want" > "$venv/.requirements"
  fi
  "$venv/bin/python" -c 'import kubernetes, selenium; print("python kubernetes client", kubernetes.__version__, "selenium", selenium.__version__)'
}
python_tests() { FLOTILLA_BIN="$CARGO_TARGET_DIR/debug/flotilla" "$venv/bin/python" -m pytest -q tests/python; }
# The dashboard in headless Chromium against `flotilla up --demo 3` (tests/browser), then the
# overview at smoke size (3 members, 20 workloads; the full 100 x 1,000 is in
# docs/benchmarks/dashboard.md): figures printed, never gated on.
browser_tests() {
  FLOTILLA_BIN="$CARGO_TARGET_DIR/debug/flotilla" "$venv/bin/python" -m pytest -q tests/browser &&
    FLOTILLA_BIN="$CARGO_TARGET_DIR/debug/flotilla" "$venv/bin/python" tests/browser/overview_bench.py --members 3 --workloads 20 --runs 2 --settle 1
}
testenv_build() { testenv/build.sh; }
# One shared testenv (three real members with workloads) for the whole run; tests attach with
# flotilla_testenv::TestEnv::connect(). Torn down on exit, and with this shell if it is killed.
testenv_up() {
  export FLOTILLA_TESTENV_DIR="${FLOTILLA_TESTENV_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/flotilla-testenv.XXXXXX")}"
  export FLOTILLA_REQUIRE_TESTENV=1
  "$TESTENV_BIN_DIR/testenv" up --members 3 --with-workloads --out "$FLOTILLA_TESTENV_DIR" --parent-pid $$ \
    --region member1=region-a --region member2=region-b --region member3=region-c >/dev/null
  echo "shared testenv: $FLOTILLA_TESTENV_DIR (member logs in <member>/logs/)"
}
testenv_down() {
  if [[ -n "${FLOTILLA_TESTENV_DIR:-}" && -f "$FLOTILLA_TESTENV_DIR/ready.json" ]]; then
    if [[ "${tests_failed:-0}" == 1 ]]; then
      echo "keeping member logs of the failed run in $FLOTILLA_TESTENV_DIR/*/logs"
    fi
    "$TESTENV_BIN_DIR/testenv" down --out "$FLOTILLA_TESTENV_DIR" >/dev/null 2>&1 || true
  fi
}
trap 'testenv_down; if declare -F stop_fuzz_build >/dev/null; then stop_fuzz_build; fi' EXIT
rust_build() { cargo build --workspace --all-targets --locked; }
# Formatting (rustfmt.toml) of the workspace and the fuzz crate, clippy with warnings as errors
# (clippy.toml) over every target of the workspace, and the build's independence of protoc.
#
# README's first command (`cargo run -p flotilla -- up`) needs nothing but the Rust toolchain on
# a bare machine (ADR 0016). Clippy checks every crate of the workspace, dependencies included,
# so it runs with no usable protoc (PROTOC points nowhere and a protoc first on PATH exits 1) in
# a target directory of its own that persists between runs: every build script then runs there
# without protoc, and a new dependency whose build script wants it fails here even though these
# machines have one. (One pass: a separate `cargo check` for this cost a full check of the
# dependencies, minutes from cold.) Then the committed etcd client is checked against what its
# .proto files generate, also without protoc.
lint() {
  local fake="$cache/no-protoc/bin"
  cargo fmt --all --check &&
    (cd fuzz && cargo fmt --check) &&
    mkdir -p "$fake" &&
    printf '#!/bin/sh\necho "protoc called: the build must need no protoc (ADR 0016)" >&2\nexit 1\n' > "$fake/protoc" &&
    chmod +x "$fake/protoc" &&
    PROTOC=/nonexistent PATH="$fake:$PATH" CARGO_TARGET_DIR="$cache/no-protoc/target" \
      cargo clippy --workspace --all-targets --locked -- -D warnings &&
    PROTOC=/nonexistent PATH="$fake:$PATH" scripts/regen-etcd-proto.sh --check &&
    scripts/check-dashboard.sh
}
# Phase functions run inside `if`, where bash ignores `set -e`: every step is chained with &&
# so that a failing step fails its phase.
rust_tests() {
  # etcd's suite runs its property test in eight I/O-bound shards; give it the threads.
  cargo test --workspace --locked --exclude flotilla-store &&
    cargo test --locked -p flotilla-store --lib --test memory --test btree --test embedded --test durability &&
    cargo test --locked -p flotilla-store --test etcd -- --test-threads=8 &&
    # Alone: its 66 MB of writes to its own etcd would load the disk the shards' watches time.
    cargo test --locked -p flotilla-store --test etcd_encryption
}
rust_fast_tests() {
  FLOTILLA_STORE_PROPTEST_CASES="${FLOTILLA_STORE_PROPTEST_CASES:-500}" \
    cargo test --workspace --locked --exclude flotilla-store &&
    FLOTILLA_STORE_PROPTEST_CASES="${FLOTILLA_STORE_PROPTEST_CASES:-500}" \
      cargo test --locked -p flotilla-store --lib --test memory --test btree --test embedded --test durability
}
# The e2e tests TestKarmada* have a phase of their own (karmada-smoke) so their time shows.
testenv_tests() {
  (cd testenv && go test -count=1 -timeout 20m -skip '^TestKarmada' ./...) &&
    (cd testenv/kubefed-versions && go test -count=1 ./...)
}
# A real Karmada control plane (v1.18.2, built by testenv/build.sh) with three `flotilla member`
# simulated members joined in Push mode: a Deployment Divided by static weights and one
# Duplicated reach the members' own stores, a deletion follows; and `karmada up
# --without-controllers` with the controllers started from karmada.json. Fails only on errors.
karmada_smoke() {
  (cd testenv && FLOTILLA_BIN="$CARGO_TARGET_DIR/debug/flotilla" FLOTILLA_REQUIRE_KARMADA=1 TESTENV_SKIP_BUILD=1 \
    go test -count=1 -timeout 10m -run '^TestKarmada' -v ./e2e)
}
# Fuzzing: the committed corpus replayed deterministically, then a short exploration.
#
# The fuzz build (other compiler flags, its own target directory: minutes from cold) starts in
# the background when the Rust tests do, at the lowest CPU and I/O priority, so it takes only
# what the tests leave idle; the replay waits for it.
fuzz_build_log="$(mktemp "${TMPDIR:-/tmp}/flotilla-fuzz-build.XXXXXX")"
fuzz_build_pid=""
start_fuzz_build() {
  # A session of its own, so that stopping it stops cargo and rustc too.
  setsid nice -n 19 ionice -c 3 scripts/fuzz.sh build >"$fuzz_build_log" 2>&1 &
  fuzz_build_pid=$!
}
stop_fuzz_build() {
  if [[ -n "$fuzz_build_pid" ]]; then
    kill -- "-$fuzz_build_pid" 2>/dev/null || true
    wait "$fuzz_build_pid" 2>/dev/null || true
  fi
  rm -f "$fuzz_build_log"
}
fuzz_replay() {
  if [[ -n "$fuzz_build_pid" ]]; then
    local rc=0
    wait "$fuzz_build_pid" || rc=$?
    fuzz_build_pid=""
    tail -3 "$fuzz_build_log"
    [[ $rc -eq 0 ]] || { echo "the background fuzz build failed (exit $rc):"; tail -40 "$fuzz_build_log"; return "$rc"; }
  fi
  scripts/fuzz.sh replay
}
fuzz_explore() { scripts/fuzz.sh explore "${FLOTILLA_FUZZ_SECONDS:-20}"; }
bench_smoke() {
  cargo run --locked -q -p flotilla-store --example store-bench -- --smoke &&
    "$CARGO_TARGET_DIR/debug/examples/apiserver-bench" --smoke &&
    # Control plane + 4 simulated members in one process; fails only on errors (a template
    # missing or wrong in a member), never on speed.
    "$CARGO_TARGET_DIR/debug/examples/propagation-bench" --smoke &&
    # Side by side (issue 24): 3 simulated members (`flotilla member`) in a process of their own,
    # then Flotilla (`flotilla up`) and Karmada (`testenv karmada up`, built by testenv-build) in
    # turn, each pinned to one core, driven through the Kubernetes API only; fails only on errors
    # (a template missing or wrong in a member, on either side), never on speed.
    "$CARGO_TARGET_DIR/debug/examples/propagation-compare" --smoke --control-planes flotilla,karmada &&
    # Control plane served on loopback, 4 push members and 4 members registered with tokens and
    # run behind agents (tasks of one process, each with its own certificate and tunnel); fails
    # only on errors, never on speed or memory.
    "$CARGO_TARGET_DIR/debug/examples/pull-bench" --smoke &&
    # 3 members behind agents whose connections are cut, 5 edge changes each, then all
    # reconnecting at once; fails only on errors or wrong end states, never on speed or CPU.
    "$CARGO_TARGET_DIR/debug/examples/edge-bench" --smoke &&
    # The global view (issue 25): 3 simulated members x 5 pods in a process of their own, the
    # control plane caching them; memory per pod, list latency, fan-out vs cache, watch delay;
    # fails only on errors (a pod missing from the cache, a patch never seen), never on figures.
    "$CARGO_TARGET_DIR/debug/examples/global-view-bench" --smoke &&
    # Cross-cluster traffic (issue 26): the DNS server beside hickory's bare server, queried
    # over loopback; the gateway beside a direct connection to its backend; then 3 simulated
    # members exporting and importing a Service, endpoint changes timed to the consumer and to
    # the DNS answer; fail only on wrong or missing answers, never on figures.
    "$CARGO_TARGET_DIR/debug/examples/dns-bench" --smoke &&
    "$CARGO_TARGET_DIR/debug/examples/gateway-bench" --smoke &&
    "$CARGO_TARGET_DIR/debug/examples/traffic-bench" --smoke &&
    # 20 simulated members in one process: /readyz over HTTPS, a watch each, Deployments and
    # pods to Ready; fails only on errors, never on memory or speed.
    "$CARGO_TARGET_DIR/debug/examples/sim-bench" --smoke
}

phase toolchain toolchain
phase clients clients
if [[ "$mode" == "fast" ]]; then
  phase rust-build rust_build
  phase lint lint
  phase rust-tests-fast rust_fast_tests
  summary
  exit 0
fi
phase testenv-build testenv_build
phase rust-build rust_build
phase lint lint
phase testenv-up testenv_up
start_fuzz_build
phase rust-tests rust_tests
phase python-client-tests python_tests
phase browser-tests browser_tests
phase testenv-tests testenv_tests
phase karmada-smoke karmada_smoke
phase fuzz-replay fuzz_replay
phase fuzz-explore fuzz_explore
phase bench-smoke bench_smoke
summary
echo "all tests passed"
