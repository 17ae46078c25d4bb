#!/usr/bin/env bash
# Creates (or reuses) the venv with the MCP servers panto's tests talk to, at pinned
# versions from PyPI: mcp-server-time (a real server, over stdio) and the `mcp` package
# that tests/mcp/fixture_server.py is written with (stdio and Streamable HTTP). Only
# this setup reaches the network; the tests run the servers locally. Prints the venv's
# path.
#
#   tests/mcp/venv.sh [DIR]      default: $CARGO_TARGET_DIR/mcp-venv (or target/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dir="${1:-${CARGO_TARGET_DIR:-$PWD/target}/mcp-venv}"
# Bump the stamp's contents when the pins change: an existing venv is then rebuilt.
pins="mcp==2.3.0 mcp-server-time==2026.10.19 uvicorn==0.54.0"
if [[ ! -x "$dir/bin/python" || "$(cat "$dir/.pins" 2>/dev/null)" != "$pins" ]]; then
    # Concurrent test binaries may all ask at once: one builds, the others wait.
    mkdir -p "$(dirname "$dir")"
    exec 9>"$dir.lock"
    flock 9
    if [[ ! -x "$dir/bin/python" || "$(cat "$dir/.pins" 2>/dev/null)" != "$pins" ]]; then
        rm -rf "$dir"
        python3 -m venv "$dir" >&2
        # shellcheck disable=SC2086
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check $pins >&2
        printf '%s' "$pins" >"$dir/.pins"
    fi
fi
printf '%s\n' "$dir"
