#!/usr/bin/env bash
# Builds the C tests (capi/tests/c: every test_*.c, one subject each, and harness.c,
# into one program, test_capi) with the system compiler against the shared libpanto.so
# (linked by capi/tools/link-shared.sh, symbol versions included) and runs:
#
#   1. a compile check: the header, PANTO_EVENT_INIT included, as C++98 (the oldest
#      C++ it supports) with -Wall -Wextra -Werror -pedantic;
#   2. every test under valgrind memcheck against the debug library: any memory error
#      or leak fails (the suppressions, in valgrind.supp, are explained there). The
#      tests in $forks fork a child, which inherits memory whose owners (the parent's
#      threads) do not exist in it; they run with memory errors checked, leaks not;
#   3. every test under valgrind against the release library — what install-capi.sh
#      installs (valgrind.supp also covers optimized code of the dependencies); the
#      tests in $slow (megabytes of request body per turn: minutes under valgrind) run
#      natively against the release library instead;
#   4. every test under ThreadSanitizer (gcc or clang -fsanitize=thread) with
#      capi/tsan.supp, after checking that a race in the host's own code is still
#      reported with that file in place ($forks excepted: TSan does not support starting
#      threads after a multithreaded fork).
#
#   capi/tests/c/run.sh [TEST_NAME]         # all tests, or one
#   PANTO_NO_VALGRIND=1 capi/tests/c/run.sh # step 1, then the tests natively against
#                                           # the debug library (a quick local loop)
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
cc="${CC:-cc}"
cxx="${CXX:-c++}"
say() { printf -- '--- %s\n' "$*"; }

scripts/debug-build.sh --locked -q -p panto-capi -p panto-testserver
# The MCP fixture server and its pinned `mcp` package (test mcp_server_tools).
PANTO_MCP_VENV="$(tests/mcp/venv.sh)"
export PANTO_MCP_VENV
# The MCP reference server (test mcp_everything_progress): its entry point, or empty
# without node and npm outside CI (the test then says it skipped; in CI it fails).
if PANTO_EVERYTHING="$(tests/mcp/everything.sh)"; then :; else
  rc=$?
  if [ "$rc" -ne 3 ] || [ "${CI:-}" = true ]; then exit "$rc"; fi
  PANTO_EVERYTHING=
fi
export PANTO_EVERYTHING
if [ -z "${PANTO_NO_VALGRIND:-}" ]; then
  cargo build --locked -q --release -p panto-capi
fi

say "1. the header as C++98"
printf '#include "panto.h"\nint main() { PantoEvent ev = PANTO_EVENT_INIT; PantoEvent v[2] = {PANTO_EVENT_INIT, PANTO_EVENT_INIT}; return (int)(ev.kind + v[1].kind); }\n' |
  "$cxx" -std=c++98 -Wall -Wextra -Werror -pedantic -I capi/include -fsyntax-only -x c++ -
echo "C++98: OK"

# The library's soname is libpanto.so.<ABI major>: link and run through that name, as
# an installed program would. $1: cargo profile; the test program goes to $out/$2.
major=$(sed -n 's/^version = "\([0-9][0-9]*\)\..*"/\1/p' capi/Cargo.toml | head -n 1)
build_tests() {
  local profile=$1 name=$2 lib
  shift 2
  lib=$(capi/tools/link-shared.sh "$target/$profile")
  out="$target/capi-c/$profile"
  mkdir -p "$out/lib"
  ln -sf "$lib" "$out/lib/libpanto.so.$major"
  ln -sf "libpanto.so.$major" "$out/lib/libpanto.so"
  "$cc" -std=c11 -Wall -Wextra -Werror -g -O1 -pthread "$@" -I capi/include \
    capi/tests/c/test_*.c capi/tests/c/harness.c \
    -L "$out/lib" -lpanto -Wl,-rpath,"$out/lib" -o "$out/$name"
}
args=("$target/debug/panto-testserver" capi/tests/scenarios
      tests/server/scenarios/demo-weather.json "$@")
# test_capi refuses a name no test has, in PANTO_C_SKIP or as TEST_NAME: a test renamed
# without these lists fails the run instead of running where it must not, or nowhere.
slow=server_reset_while_writing_is_no_sigpipe
forks=fork,ready_set_fork
# Tests that start process-lifetime state (the OTLP export's detached thread) run in a
# process of their own: glibc gives a new thread the cached stack of one joined earlier,
# so in a shared process memcheck would name that earlier test as the allocator of the
# export thread's TLS (alive at exit, "possibly lost"), where valgrind.supp cannot tell
# it from a thread a test forgot to join. Their leaks are checked against the debug
# library, whose frames valgrind.supp names (panto_otel's); against the release library,
# where inlining moves those frames into the runtime's, memory errors only.
alone=telemetry_export_of_a_tool_turn

build_tests debug test_capi
# Every test is run. A file's test functions are static: one its TESTS table leaves out
# fails the build (-Werror=unused-function). A file's suite left out of test_capi.c's
# SUITES would not, so the program must list as many tests as the files define.
defined=$(cat capi/tests/c/test_*.c | grep -c '^static void test_[a-z0-9_]*(void) {$')
registered=$("$target/capi-c/debug/test_capi" --list | wc -l)
if [ "$defined" -ne "$registered" ]; then
  echo "capi/tests/c: $defined test functions, $registered tests registered" \
    "(is a suite missing from SUITES in test_capi.c?)" >&2
  exit 1
fi
echo "$registered tests registered, as many as defined: OK"
if [ -n "${PANTO_NO_VALGRIND:-}" ]; then
  exec "$target/capi-c/debug/test_capi" "${args[@]}"
fi
if ! command -v valgrind >/dev/null; then
  echo "valgrind is required for the C tests (apt-get install valgrind)" >&2
  exit 1
fi
memcheck() {
  valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
    --show-leak-kinds=definite,possible --errors-for-leak-kinds=definite,possible \
    --num-callers=40 --suppressions=capi/tests/c/valgrind.supp --quiet "$@"
}
# $1: the test program; runs every test but the slow ones, those that fork apart.
memcheck_all() {
  if [ $# -gt 1 ]; then # one test named on the command line
    case ",$forks," in
      *",${*: -1},"*) memcheck --leak-check=no "$@" ;;
      *)
        case ",$alone,:$1" in
          *",${*: -1},"*:*/release/*) memcheck --leak-check=no "$@" ;;
          *) memcheck "$@" ;;
        esac
        ;;
    esac
    return
  fi
  PANTO_C_SKIP="$slow,$forks,$alone" memcheck "$1" "${args[@]}"
  for t in ${forks//,/ }; do memcheck --leak-check=no "$1" "${args[@]}" "$t"; done
  local alone_leaks=full
  case "$1" in */release/*) alone_leaks=no ;; esac
  for t in ${alone//,/ }; do memcheck --leak-check="$alone_leaks" "$1" "${args[@]}" "$t"; done
}
say "2. valgrind memcheck, debug library"
if [ $# -eq 0 ]; then memcheck_all "$target/capi-c/debug/test_capi"
else memcheck_all "$target/capi-c/debug/test_capi" "${args[@]}"; fi

say "3. valgrind memcheck, release library; natively: $slow"
build_tests release test_capi
if [ $# -eq 0 ]; then
  memcheck_all "$target/capi-c/release/test_capi"
  for t in ${slow//,/ }; do "$target/capi-c/release/test_capi" "${args[@]}" "$t"; done
else
  memcheck_all "$target/capi-c/release/test_capi" "${args[@]}"
fi

say "4. ThreadSanitizer (suppressions: capi/tsan.supp)"
build_tests debug test_capi_tsan -fsanitize=thread
tsan_dir="$target/capi-c/debug"
"$cc" -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -fsanitize=thread -I capi/include \
  capi/tests/c/tsan_selftest.c -L "$tsan_dir/lib" -lpanto -Wl,-rpath,"$tsan_dir/lib" \
  -o "$tsan_dir/tsan_selftest"
tsan_opts="halt_on_error=0 exitcode=66 suppressions=$PWD/capi/tsan.supp"
# The file must not hide the host's own races: a deliberate one is reported.
if TSAN_OPTIONS="$tsan_opts" "$tsan_dir/tsan_selftest" >"$tsan_dir/tsan_selftest.log" 2>&1; then
  echo "ThreadSanitizer missed the deliberate race of tsan_selftest.c:" >&2
  cat "$tsan_dir/tsan_selftest.log" >&2
  exit 1
fi
if ! grep -q "data race" "$tsan_dir/tsan_selftest.log" ||
  ! grep -q "racy_increment" "$tsan_dir/tsan_selftest.log"; then
  echo "tsan_selftest failed, but not with the deliberate race:" >&2
  cat "$tsan_dir/tsan_selftest.log" >&2
  exit 1
fi
echo "self-check: the deliberate race in the host is reported: OK"
case ",$forks," in
  *",${1:-},"*) echo "($1 forks: not under TSan)" ;;
  *)
    PANTO_C_SKIP="$slow,$forks,$alone" TSAN_OPTIONS="$tsan_opts" "$tsan_dir/test_capi_tsan" "${args[@]}"
    if [ $# -eq 0 ]; then
      for t in ${alone//,/ }; do TSAN_OPTIONS="$tsan_opts" "$tsan_dir/test_capi_tsan" "${args[@]}" "$t"; done
    fi
    ;;
esac
