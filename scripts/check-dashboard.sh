#!/usr/bin/env bash
# The dashboard's files (crates/flotilla/dashboard/) are served as committed: no build step,
# no npm (ADR 0039). This checks that every script parses as an ES module (node --check) and
# runs the unit tests of its pure rules (tests/dashboard, node's own test runner); the Rust unit
# test `dashboard::tests::every_dashboard_file_is_compiled_in` checks that every file is
# compiled into the binary. Run by the test command's lint phase.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
command -v node >/dev/null || { echo "check-dashboard: node is needed to check the dashboard's scripts" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for f in "$root"/crates/flotilla/dashboard/*.js; do
  cp "$f" "$tmp/$(basename "$f" .js).mjs"
  node --check "$tmp/$(basename "$f" .js).mjs"
done
echo "dashboard: $(ls "$root"/crates/flotilla/dashboard/*.js | wc -l) scripts parse as ES modules"
node --test "$root"/tests/dashboard/ > "$tmp/unit.log" 2>&1 || { cat "$tmp/unit.log"; exit 1; }
grep -E "^# (tests|pass|fail)" "$tmp/unit.log" | tr '\n' ' '; echo
