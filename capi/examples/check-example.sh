#!/usr/bin/env bash
# The C example end to end, as a user would get it: install libpanto into a scratch
# prefix (scripts/install-capi.sh), build examples/stream.c with pkg-config twice —
# `--libs` against the shared and `--static --libs` against the static library (ldd
# must show libpanto.so.1 for the first and no libpanto for the second) — run both
# against panto-testserver (the demo scenario: a `weather` host tool call, then the
# answer), and require each to print byte for byte what `panto run --json` prints for
# the same turn. Each example runs under valgrind memcheck with the installed
# PREFIX/share/panto/valgrind.supp, as a C user would run their program: a correct
# program using the installed (release) library must stay clean with
# `--leak-check=full --error-exitcode` (definite and possible leaks count as errors).
# (The C tests, capi/tests/c/run.sh, check the whole API under valgrind.)
#
# Then examples/poll_many.c, built the same way against the shared library: three turns
# on one thread, driven by one poll() loop over the streams' readiness descriptors,
# against capi/tests/scenarios/text.json; every turn must complete with the scripted
# answer. (The C tests' poll_many_streams runs the same loop under valgrind.)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
target="$CARGO_TARGET_DIR"
cc="${CC:-cc}"
scenario=tests/server/scenarios/demo-weather.json
prompt="What's the weather in Paris?"
tool_output='{"city":"Paris","temp_c":18,"sky":"sunny"}'

command -v valgrind >/dev/null || {
  echo "valgrind is required (apt-get install valgrind)" >&2
  exit 1
}
scripts/debug-build.sh --locked -q -p panto-cli -p panto-testserver
prefix="$target/capi-install"
rm -rf "$prefix"
scripts/install-capi.sh "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir panto)
# What a user types to check their program with the shipped suppressions.
vg=(valgrind --tool=memcheck --quiet --error-exitcode=99 --leak-check=full
  --show-leak-kinds=definite,possible --errors-for-leak-kinds=definite,possible
  --num-callers=40 --suppressions="$prefix/share/panto/valgrind.supp")
[ -f "$prefix/share/panto/valgrind.supp" ] || {
  echo "install-capi.sh installed no share/panto/valgrind.supp" >&2
  exit 1
}

tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# Exactly the two commands docs/c.md (Building) and install-capi.sh tell a user to type.
# shellcheck disable=SC2046  # pkg-config output is meant to be split
"$cc" -std=c11 -Wall -Wextra -Werror capi/examples/stream.c $(pkg-config --cflags --libs panto) \
  -Wl,-rpath,"$libdir" -o "$tmp/stream-shared"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror capi/examples/stream.c \
  $(pkg-config --cflags --static --libs panto) -o "$tmp/stream-static"
# (ldd's output is read whole: `grep -q` in a pipe under pipefail fails by SIGPIPE.)
shared_deps=$(ldd "$tmp/stream-shared")
if [[ $shared_deps != *"libpanto.so.1 => $libdir/libpanto.so.1"* ]]; then
  echo "stream-shared does not load $libdir/libpanto.so.1:" >&2
  printf '%s\n' "$shared_deps" >&2
  exit 1
fi
static_deps=$(ldd "$tmp/stream-static")
if [[ $static_deps == *libpanto* ]]; then
  echo "stream-static, linked with pkg-config --static, loads libpanto.so: not static:" >&2
  printf '%s\n' "$static_deps" >&2
  exit 1
fi

# Runs "$@" (with @URL@ replaced by the server's URL) against a fresh server; output in $1.
run_with_server() {
  local out=$1 line url a
  shift
  mkfifo "$tmp/ready"
  "$target/debug/panto-testserver" --scenario "$scenario" >"$tmp/ready" &
  server_pid=$!
  read -r line <"$tmp/ready"
  rm "$tmp/ready"
  url=${line#listening on }
  local args=()
  for a in "$@"; do args+=("${a//@URL@/$url}"); done
  OPENAI_API_KEY=test PANTO_MODEL=gpt-4o-mini "${args[@]}" >"$out"
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

run_with_server "$tmp/cli.jsonl" "$target/debug/panto" run --json --base-url "@URL@/v1" \
  --api-key test --model gpt-4o-mini \
  --tool "weather=cat >/dev/null; printf %s '$tool_output'" "$prompt"
run_with_server "$tmp/shared.jsonl" "${vg[@]}" "$tmp/stream-shared" "@URL@/v1" "$prompt"
run_with_server "$tmp/static.jsonl" "${vg[@]}" "$tmp/stream-static" "@URL@/v1" "$prompt"

grep -q '"type":"tool_result".*"is_error":false' "$tmp/cli.jsonl" || {
  echo "the reference turn has no successful tool result:" >&2
  cat "$tmp/cli.jsonl" >&2
  exit 1
}
for build in shared static; do
  if ! cmp -s "$tmp/cli.jsonl" "$tmp/$build.jsonl"; then
    echo "examples/stream.c ($build) printed something else than panto run --json:" >&2
    diff "$tmp/cli.jsonl" "$tmp/$build.jsonl" >&2 || true
    exit 1
  fi
done
cat "$tmp/static.jsonl"
echo "examples/stream.c, shared and static: $(wc -l <"$tmp/cli.jsonl") events, byte for byte what panto run --json prints; clean under valgrind with the installed suppressions"

# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror capi/examples/poll_many.c \
  $(pkg-config --cflags --libs panto) -Wl,-rpath,"$libdir" -o "$tmp/poll_many"
scenario=capi/tests/scenarios/text.json
check_poll_many() {
  local out=$1 i
  for i in 0 1 2; do
    if ! grep -qxF "[$i] answer: Hello from panto." "$out" ||
      ! grep -qxF "[$i] delta: Hello" "$out"; then
      echo "examples/poll_many.c: turn $i did not complete with the scripted answer:" >&2
      cat "$out" >&2
      exit 1
    fi
  done
}
run_with_server "$tmp/poll.txt" "${vg[@]}" "$tmp/poll_many" "@URL@/v1" one two three
check_poll_many "$tmp/poll.txt"
cat "$tmp/poll.txt"
echo "examples/poll_many.c: three turns on one thread, one poll loop; clean under valgrind"
