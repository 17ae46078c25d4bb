#!/usr/bin/env bash
# demo.sh — panto end to end, offline: builds the CLI and the scripted provider server,
# replays tests/server/scenarios/demo-weather.json (a `weather` tool call, then the
# answer) and runs `panto run` against it with a shell-command tool. No network, no key.
#
#   scripts/demo.sh            # human output, streamed on the terminal
#   scripts/demo.sh --json     # extra arguments go to `panto run`
#   scripts/demo.sh --all      # the same turn from Rust (pull and push), C, Go and
#                              # Python (sync and async), each answering the tool in
#                              # its own language (needs cc, Go and python3 as well)
#
# The CLI, the server and the Rust examples are release builds; PANTO_DEMO_PROFILE=debug
# runs the debug ones instead (scripts/test.sh: the workspace build it already made). The
# C and Go demos link the release libpanto.a either way.
set -euo pipefail

# Work from the repository root whatever the caller's directory.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Where cargo puts binaries: respect a caller's CARGO_TARGET_DIR.
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="$target_dir"
scenario=tests/server/scenarios/demo-weather.json
profile="${PANTO_DEMO_PROFILE:-release}"
case "$profile" in
    release | debug) ;;
    *) echo "demo: PANTO_DEMO_PROFILE is release or debug, not '$profile'" >&2; exit 2 ;;
esac
bin="$target_dir/$profile"

all=
if [ "${1:-}" = "--all" ]; then
    all=1
    shift
fi

echo "building… (cargo build$([ "$profile" = release ] && echo " --release") -p panto-cli -p panto-testserver)" >&2
build() { # the debug ones through scripts/debug-build.sh (built already under scripts/test.sh)
    if [ "$profile" = debug ]; then scripts/debug-build.sh --quiet "$@"; else cargo build --quiet --release "$@"; fi
}
build -p panto-cli -p panto-testserver

server_pid=
# Starts a fresh server on the demo scenario and sets $url. The server's stdin is our
# pipe to it: closing it (or our dying) stops the server (--exit-on-stdin-eof), so it
# can never outlive the demo.
start_server() {
    coproc SERVER { exec "$bin/panto-testserver" \
        --scenario "$scenario" --exit-on-stdin-eof; }
    server_pid=$SERVER_PID
    server_in=${SERVER[1]}
    # First line: "listening on http://127.0.0.1:PORT".
    if ! read -r -t 10 first_line <&"${SERVER[0]}"; then
        echo "demo: the test server did not start" >&2
        exit 1
    fi
    url=${first_line#listening on }
}

stop_server() {
    [ -n "$server_pid" ] || return 0
    exec {server_in}>&- 2>/dev/null || true
    # EOF normally stops it within moments; a stuck server is killed by its own pid.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}
trap stop_server EXIT

if [ -z "$all" ]; then
    start_server
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
    "$bin/panto" "${command[@]:1}"
    exit
fi

# --all: build each language's demo program once, then run the turn with each.
echo "building… (the Rust examples, libpanto, the C and Go demos, the Python package)" >&2
build -p panto-pull --example demo -p panto --example demo_push
cargo build --quiet --release --locked -p panto-capi
out="$target_dir/demo"
mkdir -p "$out"
static_libs=$(cat "$target_dir/release/libpanto.native-static-libs" 2>/dev/null || echo "-lpthread -lm -ldl")
# shellcheck disable=SC2086  # the library list is meant to be split
"${CC:-cc}" -std=c11 -Wall -Wextra -Werror -I capi/include capi/examples/demo.c \
    "$target_dir/release/libpanto.a" $static_libs -o "$out/demo-c"
ldflags=$(scripts/cgo-ldflags.sh "$target_dir/release")
(cd golang && CGO_ENABLED=1 CGO_LDFLAGS="$ldflags" go build -o "$out/demo-go" ./internal/demo)
python="${PANTO_PYTHON:-$target_dir/pypanto-venv/bin/python}"
if ! "$python" -c 'import panto' 2>/dev/null; then
    py_tools="$(pypanto/tools-venv.sh)"
    rm -rf "$target_dir/pypanto-wheels" "$target_dir/pypanto-venv"
    "$py_tools/bin/maturin" build --quiet --profile dev --locked -m pypanto/Cargo.toml \
        -o "$target_dir/pypanto-wheels"
    python3 -m venv "$target_dir/pypanto-venv"
    "$target_dir/pypanto-venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$target_dir"/pypanto-wheels/panto-*.whl
    python="$target_dir/pypanto-venv/bin/python"
fi

export OPENAI_API_KEY=demo
run_demo() { # $1: header; rest: the command, @URL@ replaced by the provider's URL
    local header=$1 args=() a
    shift
    start_server
    for a in "$@"; do args+=("${a//@URL@/$url}"); done
    printf '\n━━ %s ━━\n' "$header"
    "${args[@]}"
    stop_server
}
run_demo "CLI (panto run)" "$bin/panto" run --base-url "@URL@/v1" \
    --tool weather='cat >/dev/null; echo "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}"' \
    "What's the weather in Paris?"
run_demo "Rust, pull (pull-adapter/examples/demo.rs)" "$bin/examples/demo" "@URL@/v1"
run_demo "Rust, push (core/examples/demo_push.rs)" "$bin/examples/demo_push" "@URL@/v1"
run_demo "C (capi/examples/demo.c)" "$out/demo-c" "@URL@/v1"
run_demo "Go (golang/internal/demo)" "$out/demo-go" "@URL@/v1"
run_demo "Python (pypanto/examples/demo.py)" "$python" pypanto/examples/demo.py "@URL@/v1"
run_demo "Python, asyncio (pypanto/examples/demo.py --async)" \
    "$python" pypanto/examples/demo.py "@URL@/v1" --async
