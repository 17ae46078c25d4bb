#!/usr/bin/env bash
# The push example (core/examples/push.rs, a Rust tool) and the CLI (`panto run --json`,
# the pull loop, the same tool as a --tool shell command) run the demo scenario against
# panto-testserver; their canonical JSON event lines must be identical, except for the
# `host` flag of tool_call_start (a Rust tool vs a host tool).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}/debug"
scripts/debug-build.sh -q -p panto --example push
scripts/debug-build.sh -q -p panto-cli -p panto-testserver
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill "${server_pid:-0}" 2>/dev/null || true' EXIT

run_with_server() { # $1: output file; rest: command (URL substituted for @URL@)
  local out=$1; shift
  mkfifo "$tmp/ready"
  "$target/panto-testserver" --scenario tests/server/scenarios/demo-weather.json >"$tmp/ready" &
  server_pid=$!
  local line url
  read -r line <"$tmp/ready"
  url=${line#listening on }
  rm "$tmp/ready"
  local args=()
  for a in "$@"; do args+=("${a//@URL@/$url}"); done
  "${args[@]}" >"$out"
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
}

prompt="What's the weather in Paris?"
run_with_server "$tmp/push.jsonl" "$target/examples/push" "@URL@/v1" "$prompt"
run_with_server "$tmp/pull.jsonl" "$target/panto" run --json --base-url "@URL@/v1" --api-key test \
  --model gpt-4o-mini \
  --tool 'weather=cat >/dev/null; printf %s "{\"city\":\"Paris\",\"temp_c\":18,\"sky\":\"sunny\"}"' "$prompt"

python3 - "$tmp/push.jsonl" "$tmp/pull.jsonl" <<'PY'
import json, sys
def load(path):
    events = []
    for line in open(path, encoding="utf-8"):
        ev = json.loads(line)
        ev.pop("host", None)
        events.append(ev)
    return events
push, pull = load(sys.argv[1]), load(sys.argv[2])
assert push[-1]["type"] == "message_complete", push[-1]
assert any(e["type"] == "tool_result" for e in push), "no tool call in the demo turn"
if push != pull:
    for i, (a, b) in enumerate(zip(push, pull)):
        if a != b:
            sys.exit(f"event {i} differs:\n push: {a}\n pull: {b}")
    sys.exit(f"lengths differ: push {len(push)}, pull {len(pull)}")
print(f"identical: {len(push)} events, two steps, tool result {next(e['output'] for e in push if e['type']=='tool_result')}")
PY
