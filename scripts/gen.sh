#!/usr/bin/env bash
# Regenerates every file derived from the core's vocabulary (events, error kinds, config
# keys: `panto::vocab`, printed by the panto-gen binary), and checks the hand-written C
# header against it. DESIGN.md ("One vocabulary") has the rule: a new event, field, error
# kind or config key is one edit in the core, then this script.
#
#   scripts/gen.sh              # rewrite the generated files
#   scripts/gen.sh --check      # exit 1, naming them, when any generated file is stale
#                               # or the C header disagrees with the description
#   scripts/gen.sh --self-test  # the generators' own test (see scripts/gen/gen.py)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
mkdir -p "$CARGO_TARGET_DIR"
vocab="$CARGO_TARGET_DIR/vocab.json"
scripts/debug-build.sh --quiet --locked -p panto-gen
"$CARGO_TARGET_DIR/debug/panto-gen" > "$vocab.tmp"
mv "$vocab.tmp" "$vocab"
exec python3 scripts/gen/gen.py "$vocab" "$@"
