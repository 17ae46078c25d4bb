#!/usr/bin/env bash
# What panto's crates depend on, against deny.toml: licenses, bans and sources, with
# cargo-deny (pinned below; installed if missing, as .ci/run does), for the main
# workspace and pypanto's (what the wheel links). Not the advisories: they need the
# RustSec database, a clone from github.com that CI has no network for (deny.toml).
# Then the check's own test: deny.toml with MIT no longer allowed, with crates.io no
# longer an allowed registry, and with serde banned must each fail.
#
#   scripts/check-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

version=0.20.2
if ! cargo deny --version 2>/dev/null | grep -qx "cargo-deny $version"; then
  echo "deps: installing cargo-deny $version"
  cargo install --locked --quiet cargo-deny --version "=$version"
fi

deny() { cargo deny --color never --log-level error "$@"; }
for manifest in Cargo.toml pypanto/Cargo.toml; do
  echo "deps: $manifest"
  deny --manifest-path "$manifest" check --hide-inclusion-graph licenses bans sources
done

echo "deps: self-test (each broken policy must fail)"
work="$CARGO_TARGET_DIR/deny-selftest"
mkdir -p "$work"
selftest() { # selftest <what> <check> <python expression turning the policy text `s` into the broken one>
  python3 -c "import sys; s = open('deny.toml').read(); b = $3; assert b != s, 'no change'; open(sys.argv[1], 'w').write(b)" \
    "$work/deny.toml"
  if deny --config "$work/deny.toml" check --hide-inclusion-graph "$2" >"$work/out.txt" 2>&1; then
    echo "deps: SELF-TEST FAILED: $1 passed" >&2
    exit 1
  fi
  echo "  ok: $1 -> $(grep -m1 -E '^error' "$work/out.txt" || echo failed)"
}
selftest "MIT not allowed" licenses "s.replace('  \"MIT\",\n', '')"
selftest "crates.io not an allowed registry" sources \
  "s.replace('allow-registry = [\"https://github.com/rust-lang/crates.io-index\"]', 'allow-registry = []')"
selftest "serde banned" bans "s.replace('allow-wildcard-paths = true', 'allow-wildcard-paths = true\ndeny = [{ name = \"serde\" }]')"
echo "deps: OK"
