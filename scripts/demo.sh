#!/usr/bin/env bash
# demo.sh — panto end to end, offline: builds the CLI and the scripted provider server,
# replays tests/server/scenarios/demo-weather.json (a `weather` tool call, then the
# answer) and runs `panto run` against it with a shell-command tool. No network, no key.
#
#   scripts/demo.sh            # human output, streamed on the terminal
#   scripts/demo.sh --json     # extra arguments go to `panto run`
set -euo pipefail

# Work from the repository root whatever the caller's directory.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Where cargo puts binaries: respect a caller's CARGO_TARGET_DIR.
target_dir="${CARGO_TARGET_DIR:-target}"

echo "building… (cargo build --release -p panto-cli -p panto-testserver)" >&2
cargo build --quiet --release -p panto-cli -p panto-testserver

# The server's stdin is our pipe to it: closing it (or our dying) stops the server
# (--exit-on-stdin-eof), so it can never outlive the demo.
coproc SERVER { exec "$target_dir/release/panto-testserver" \
    --scenario tests/server/scenarios/demo-weather.json --exit-on-stdin-eof; }
server_pid=$SERVER_PID
server_in=${SERVER[1]}

stop_server() {
    exec {server_in}>&- 2>/dev/null || true
    # EOF normally stops it within moments; a stuck server is killed by its own pid.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT

# First line: "listening on http://127.0.0.1:PORT".
if ! read -r -t 10 first_line <&"${SERVER[0]}"; then
    echo "demo: the test server did not start" >&2
    exit 1
fi
url=${first_line#listening on }
echo "scripted provider at $url" >&2
echo >&2

question="What's the weather in Paris?"
command=(panto run
    --base-url "$url/v1"
    --api-key demo
    --tool weather='cat >/dev/null; echo "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}"'
    "$@"
    "$question")
# Show what runs, so it can be copied and changed.
echo "question: $question" >&2
printf '$' >&2
printf ' %q' "${command[@]}" >&2
printf '\n\n' >&2
"$target_dir/release/panto" "${command[@]:1}"
