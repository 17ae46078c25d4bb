#!/usr/bin/env bash
# Installs (or reuses) the MCP reference server, `@modelcontextprotocol/server-everything`
# from npm, at the version and dependency tree pinned in tests/mcp/everything/
# (package.json and package-lock.json, installed with `npm ci`). Only this setup reaches
# the network; the tests run the server locally, over stdio and Streamable HTTP
# (tests/mcp/everything_http.mjs reports the port it got). Prints the server's entry
# point (dist/index.js).
#
#   tests/mcp/everything.sh [DIR]    default: $CARGO_TARGET_DIR/mcp-everything (or target/)
#
# Exit status 3 (and nothing printed) when node or npm is missing: outside CI the tests
# skip then; in CI (CI=true) they fail.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dir="${1:-${CARGO_TARGET_DIR:-$PWD/target}/mcp-everything}"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "tests/mcp/everything.sh: node and npm are needed for the server-everything tests" >&2
    exit 3
fi
entry="$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
# The pins are the lock file: a changed lock installs again.
pins="$(sha256sum tests/mcp/everything/package-lock.json | cut -d" " -f1)"
if [[ ! -f "$entry" || "$(cat "$dir/.pins" 2>/dev/null)" != "$pins" ]]; then
    # Concurrent test binaries may all ask at once: one installs, the others wait.
    mkdir -p "$(dirname "$dir")"
    exec 9>"$dir.lock"
    flock 9
    if [[ ! -f "$entry" || "$(cat "$dir/.pins" 2>/dev/null)" != "$pins" ]]; then
        rm -rf "$dir"
        mkdir -p "$dir"
        cp tests/mcp/everything/package.json tests/mcp/everything/package-lock.json "$dir/"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
        printf '%s' "$pins" >"$dir/.pins"
    fi
fi
printf '%s\n' "$entry"
