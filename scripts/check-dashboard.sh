#!/usr/bin/env bash
# The dashboard's files (crates/flotilla/dashboard/) are served as committed: no build step,
# no npm (ADR 0039). This checks that every script parses as an ES module (node --check), and
# the Rust unit test `dashboard::tests::every_dashboard_file_is_compiled_in` that every file is
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
